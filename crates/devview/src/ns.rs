//! The private mount namespace `softrdma run` shows the view in.
//!
//! [`enter`] then [`install`]: the namespace with tmpfs replicas of `/dev`
//! and `/sys/class`, then the device's files in them.

use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::view::{DeviceView, Entry};

/// How the namespace was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A mount namespace only: the caller may mount (root, or `CAP_SYS_ADMIN`).
    Mount,
    /// A user namespace mapping the caller's uid and gid to themselves, and a
    /// mount namespace owned by it: no privilege needed.
    User,
}

/// What [`enter`] did, for diagnostics.
#[derive(Debug)]
pub struct Entered {
    /// How the namespace was made.
    pub kind: Kind,
    /// Real entries that could not be carried into a replica, with why.
    pub skipped: Vec<String>,
}

/// Directories replaced by replicas, and the real entries left out of them
/// (the device's own take their place).
const REPLICAS: [(&str, &[&str]); 2] = [
    ("/dev", &["infiniband"]),
    (
        "/sys/class",
        &[
            "infiniband",
            "infiniband_verbs",
            "infiniband_cm",
            "infiniband_mad",
        ],
    ),
];

fn os_err(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn cstr(p: &OsStr) -> io::Result<CString> {
    CString::new(p.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// `mount(2)`.
fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source.map(|s| cstr(s.as_os_str())).transpose()?;
    let target = cstr(target.as_os_str())?;
    let fstype = fstype.map(|s| cstr(OsStr::new(s))).transpose()?;
    let data = data.map(|s| cstr(OsStr::new(s))).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is NULL or a NUL-terminated string alive for the call.
    let rc = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `unshare(2)`.
fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes no pointers; it only changes this process's namespaces.
    if unsafe { libc::unshare(flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Moves this process into a new mount namespace (inside a new user
/// namespace unless it may mount already) and replaces `/dev` and
/// `/sys/class` with replicas. Must be called with a single thread.
pub fn enter() -> io::Result<Entered> {
    // SAFETY: geteuid/getegid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let kind = if uid == 0 && unshare(libc::CLONE_NEWNS).is_ok() {
        Kind::Mount
    } else {
        unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS)
            .map_err(os_err("cannot create a user namespace (unshare)"))?;
        // Ourselves only: the kernel lets an unprivileged process map its
        // own ids, and `setgroups` must be denied before the gid map.
        fs::write("/proc/self/setgroups", "deny").map_err(os_err("/proc/self/setgroups"))?;
        fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
            .map_err(os_err("/proc/self/uid_map"))?;
        fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
            .map_err(os_err("/proc/self/gid_map"))?;
        Kind::User
    };
    // Our mounts must not propagate back to the real namespace (`/` is
    // usually shared under systemd).
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_SLAVE,
        None,
    )
    .map_err(os_err("making / a slave mount"))?;
    let mut skipped = Vec::new();
    for (dir, leave_out) in REPLICAS {
        replicate(Path::new(dir), leave_out, &mut skipped)?;
    }
    Ok(Entered { kind, skipped })
}

/// What one real entry is, to rebuild its mount point.
enum Real {
    Dir,
    Other,
    Link(PathBuf),
}

/// Mounts a tmpfs over `dir` holding every entry `dir` had (bind mounts of
/// the real ones, symlinks copied), except `leave_out`.
fn replicate(dir: &Path, leave_out: &[&str], skipped: &mut Vec<String>) -> io::Result<()> {
    // Still reachable through this descriptor once the tmpfs covers `dir`.
    let real = File::open(dir).map_err(os_err(format!("open {}", dir.display())))?;
    let mut entries: Vec<(OsString, Real)> = Vec::new();
    for e in fs::read_dir(dir).map_err(os_err(format!("read {}", dir.display())))? {
        let e = e?;
        let name = e.file_name();
        if leave_out.iter().any(|l| OsStr::new(l) == name) {
            continue;
        }
        let kind = match e.file_type() {
            Ok(t) if t.is_symlink() => match fs::read_link(e.path()) {
                Ok(to) => Real::Link(to),
                Err(_) => continue,
            },
            Ok(t) if t.is_dir() => Real::Dir,
            Ok(_) => Real::Other,
            Err(_) => continue,
        };
        entries.push((name, kind));
    }
    mount(
        Some(Path::new("tmpfs")),
        dir,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=755"),
    )
    .map_err(os_err(format!("mount tmpfs on {}", dir.display())))?;
    let via = PathBuf::from(format!("/proc/self/fd/{}", real.as_raw_fd()));
    for (name, kind) in entries {
        let at = dir.join(&name);
        let made = match &kind {
            Real::Link(to) => std::os::unix::fs::symlink(to, &at),
            Real::Dir => fs::create_dir(&at),
            Real::Other => File::create(&at).map(drop),
        };
        let done = made.and_then(|()| match kind {
            Real::Link(_) => Ok(()),
            // Recursive: submounts (/dev/pts, /dev/shm) come along, and a
            // user namespace may not bind a tree without its submounts.
            _ => mount(
                Some(&via.join(&name)),
                &at,
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
            ),
        });
        if let Err(e) = done {
            skipped.push(format!("{}: {e}", at.display()));
        }
    }
    Ok(())
}

/// Creates the view's files under `/` (inside the replicas [`enter`] made).
pub fn install(view: &DeviceView) -> io::Result<()> {
    install_at(Path::new("/"), view, Path::new("/dev/null"))
}

/// [`install`] under `root`; device nodes are bind mounts of `node`.
fn install_at(root: &Path, view: &DeviceView, node: &Path) -> io::Result<()> {
    for entry in view.entries() {
        match entry {
            Entry::Dir(p) => {
                let p = root.join(p);
                fs::create_dir_all(&p).map_err(os_err(format!("mkdir {}", p.display())))?;
            }
            Entry::File(p, text) => {
                let p = root.join(p);
                fs::write(&p, text).map_err(os_err(format!("write {}", p.display())))?;
            }
            Entry::Symlink(p, to) => {
                let p = root.join(p);
                std::os::unix::fs::symlink(&to, &p)
                    .map_err(os_err(format!("symlink {}", p.display())))?;
            }
            Entry::CharDevice(p) => {
                let p = root.join(p);
                File::create(&p).map_err(os_err(format!("create {}", p.display())))?;
                mount(Some(node), &p, None, libc::MS_BIND, None).map_err(os_err(format!(
                    "bind {} on {}",
                    node.display(),
                    p.display()
                )))?;
            }
        }
    }
    Ok(())
}
