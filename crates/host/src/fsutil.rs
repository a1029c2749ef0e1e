//! File-system primitives: private directories, `flock` liveness, atomic writes.
//!
//! Locking convention (all locks are `flock(2)`, which belongs to an open file
//! description and is dropped by the kernel when the last descriptor of it closes, even
//! when the process is SIGKILLed):
//! * a **holder** keeps `LOCK_EX` on its file for as long as it owns it;
//! * a **prober** asks "is anyone holding this?" with `LOCK_SH | LOCK_NB`: failure means a
//!   holder exists. Probers share `LOCK_SH` with each other, so two concurrent probes never
//!   make each other believe the file is held.
//!
//! Every lock we take is released with an explicit `LOCK_UN` ([`LockedFile`]), not by
//! closing the descriptor: a child forked while we held it shares the open file
//! description, and the kernel would keep the lock until the child closed its copy too.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Largest record file we read: records are a few lines; anything bigger is garbage.
const MAX_RECORD: usize = 4096;

/// Prefix of temporary files (written, then renamed into place).
pub(crate) const TEMP_PREFIX: &str = ".tmp-";

pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Milliseconds since the Unix epoch (wall clock: comparable across processes).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `err` with `what` prepended, keeping its kind.
pub(crate) fn context(err: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}

/// Creates `path` (only its last component) with mode 0700 if missing, then checks it is
/// private to us: see [`check_private_dir`].
pub(crate) fn ensure_private_dir(path: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(context(
                e,
                format_args!(
                    "cannot create softrdma registry directory {}",
                    path.display()
                ),
            ));
        }
    }
    check_private_dir(path)
}

/// Refuses (`PermissionDenied`) a directory another user could tamper with or read: a
/// symlink (someone may have planted it in /tmp), not a directory, not owned by our
/// effective uid, or with any group/other permission bit.
pub(crate) fn check_private_dir(path: &Path) -> io::Result<()> {
    let md = fs::symlink_metadata(path)
        .map_err(|e| context(e, format_args!("cannot inspect {}", path.display())))?;
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing softrdma registry directory {}: {why}",
                path.display()
            ),
        ))
    };
    if md.file_type().is_symlink() {
        return refuse("it is a symbolic link".into());
    }
    if !md.is_dir() {
        return refuse("it is not a directory".into());
    }
    let uid = euid();
    if md.uid() != uid {
        return refuse(format!(
            "it is owned by uid {}, not by us (uid {uid})",
            md.uid()
        ));
    }
    let mode = md.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return refuse(format!(
            "its mode is {mode:04o}; it must not be accessible to group or others (use 0700)"
        ));
    }
    Ok(())
}

/// A file this process holds an `flock` on; dropping it releases the lock with
/// `LOCK_UN` before closing the descriptor.
///
/// Closing alone is not enough. A lock belongs to the open file description, which a
/// child forked while we held it shares; the kernel keeps the lock until the last
/// descriptor of it closes, and the child never closes its copy (its copy of our state is
/// never dropped) until it exits. pyverbs' rdmacm tests fork their two sides while the
/// parent's progress thread scans the registry: each child then waited in
/// [`crate::Registry::join`] for the registry lock its own inherited descriptor held.
/// `LOCK_UN` releases the lock for every descriptor of the description at once.
///
/// Only the process that took the lock releases it: a forked child that drops its copy
/// of a parent's `LockedFile` (a parent's object freed in the child) just closes its
/// descriptor, and the parent's lock stays.
#[derive(Debug)]
pub(crate) struct LockedFile {
    file: File,
    pid: u32,
}

impl LockedFile {
    /// `file`, on which this process has just taken a lock.
    pub(crate) fn new(file: File) -> LockedFile {
        LockedFile {
            file,
            pid: std::process::id(),
        }
    }
}

impl std::ops::Deref for LockedFile {
    type Target = File;

    fn deref(&self) -> &File {
        &self.file
    }
}

impl Drop for LockedFile {
    fn drop(&mut self) {
        // `std::process::id` asks the kernel (getpid), so a forked child sees its own pid.
        if std::process::id() == self.pid {
            let _ = flock(&self.file, libc::LOCK_UN);
        }
    }
}

/// `flock(file, op)`, retried on EINTR. `Ok(false)` when `op` has `LOCK_NB` and the lock
/// is held elsewhere.
pub(crate) fn flock(file: &File, op: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: `file` owns an open descriptor for the whole call, and flock(2) reads or
        // writes no memory of ours.
        let r = unsafe { libc::flock(file.as_raw_fd(), op) };
        if r == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if op & libc::LOCK_NB != 0 => return Ok(false),
            _ => return Err(err),
        }
    }
}

/// Takes `LOCK_EX` on a file nobody holds, waiting out probers' momentary `LOCK_SH` (up to
/// ~100 ms) instead of blocking forever on a holder. `Ok(false)`: still locked.
pub(crate) fn lock_ex_patiently(file: &File) -> io::Result<bool> {
    for _ in 0..100 {
        if flock(file, libc::LOCK_EX | libc::LOCK_NB)? {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(false)
}

/// Opens an existing regular file without following symlinks. `O_NONBLOCK` keeps a planted
/// FIFO from hanging the open; it changes nothing for regular files.
pub(crate) fn open_existing(path: &Path, write: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// Opens (creating with mode 0600 if missing) a file that is never removed, like the
/// registry lock file.
pub(crate) fn open_or_create(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| context(e, format_args!("cannot open {}", path.display())))
}

/// Whether `file` is (still) the file at `path`: false once it was
/// removed, or replaced by another.
pub(crate) fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Result of probing a lock file.
#[derive(Debug)]
pub(crate) enum Probe {
    /// No such file (or not a usable regular file).
    Missing,
    /// A holder has `LOCK_EX` on it. The file is open (unlocked by us) for reading.
    Alive(File),
    /// Nobody holds it; we hold `LOCK_SH` on it until the `LockedFile` drops.
    Dead(LockedFile),
}

pub(crate) fn probe(path: &Path, write: bool) -> Probe {
    let Ok(file) = open_existing(path, write) else {
        return Probe::Missing;
    };
    match flock(&file, libc::LOCK_SH | libc::LOCK_NB) {
        Ok(true) => Probe::Dead(LockedFile::new(file)),
        Ok(false) => Probe::Alive(file),
        Err(_) => Probe::Missing,
    }
}

/// Reads a whole (small) record file from offset 0, independent of the file position.
/// `None` for I/O errors, oversized or non-UTF-8 contents.
pub(crate) fn read_record(file: &File) -> Option<String> {
    let mut buf = vec![0u8; MAX_RECORD + 1];
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    if n > MAX_RECORD {
        return None;
    }
    buf.truncate(n);
    String::from_utf8(buf).ok()
}

/// Replaces the contents of a file we hold locked. Slot and lease files cannot be replaced
/// by rename: the lock lives on the inode. A reader racing this write may see a torn
/// record; records end with an `end` line so a torn one parses as garbage, never as
/// wrong values.
pub(crate) fn rewrite_in_place(file: &File, contents: &[u8]) -> io::Result<()> {
    file.write_all_at(contents, 0)?;
    file.set_len(contents.len() as u64)
}

/// Removes `path` if it still names the inode `file` has open: never removes a file that
/// replaced the one we examined.
pub(crate) fn remove_if_same(path: &Path, file: &File) {
    let (Ok(a), Ok(b)) = (file.metadata(), fs::symlink_metadata(path)) else {
        return;
    };
    if a.dev() == b.dev() && a.ino() == b.ino() {
        let _ = fs::remove_file(path);
    }
}

/// Creates a new temporary file in `dir`, mode 0600, holding `LOCK_EX` so cleaners
/// recognise it as in use.
pub(crate) fn create_temp(dir: &Path) -> io::Result<(PathBuf, LockedFile)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut last_err = None;
    for _ in 0..64 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{TEMP_PREFIX}{}-{n}", std::process::id()));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(file) => {
                // Blocking is fine: only probers (momentary LOCK_SH) can know this name.
                flock(&file, libc::LOCK_EX)?;
                return Ok((path, LockedFile::new(file)));
            }
            // A leftover of a dead process that had our pid: try the next name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => {
                return Err(context(
                    e,
                    format_args!("cannot create a file in {}", dir.display()),
                ));
            }
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("no free temporary file name")))
}

/// Writes a complete file at `path` atomically (temporary file, then rename): readers see
/// the old contents or the new, never a mix. Returns the still-locked new file.
pub(crate) fn write_atomically(dir: &Path, path: &Path, contents: &[u8]) -> io::Result<LockedFile> {
    let (tmp, file) = create_temp(dir)?;
    let r = (&*file)
        .write_all(contents)
        .and_then(|()| fs::rename(&tmp, path));
    match r {
        Ok(()) => Ok(file),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(context(e, format_args!("cannot write {}", path.display())))
        }
    }
}
