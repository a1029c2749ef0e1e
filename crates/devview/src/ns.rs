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
    /// The user namespace is an earlier run's, joined (see [`enter`]).
    pub joined: bool,
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

/// Moves this process into a new mount namespace (inside a user namespace
/// unless it may mount already) and replaces `/dev` and `/sys/class` with
/// replicas. Must be called with a single thread.
///
/// `shared` names a file through which the runs of one user share one user
/// namespace: a live earlier run's is joined (`setns`; its owner may), and
/// this run is recorded there. Processes in different user namespaces
/// cannot attach to each other's shared-memory inboxes (the kernel's ptrace
/// rule), so sharing keeps that path between separate `softrdma run`s.
pub fn enter(shared: Option<&Path>) -> io::Result<Entered> {
    // SAFETY: geteuid/getegid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut joined = false;
    let kind = if uid == 0 && unshare(libc::CLONE_NEWNS).is_ok() {
        Kind::Mount
    } else {
        joined = shared.is_some_and(|f| join_recorded(f, uid, gid));
        if joined {
            unshare(libc::CLONE_NEWNS).map_err(os_err("unshare(CLONE_NEWNS)"))?;
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
        }
        if let Some(f) = shared {
            record(f);
        }
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
    Ok(Entered {
        kind,
        joined,
        skipped,
    })
}

/// The inode of a namespace file (`/proc/<pid>/ns/user`).
fn ns_inode(path: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).ok().map(|m| m.ino())
}

/// The `<pid> <user namespace inode>` lines of the shared file.
fn recorded(file: &Path) -> Vec<(u32, u64)> {
    let text = fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (pid, ino) = l.split_once(' ')?;
            Some((pid.parse().ok()?, ino.trim().parse().ok()?))
        })
        .collect()
}

/// Joins the user namespace of a live recorded run, if one maps exactly
/// our uid and gid to themselves, as [`enter`] makes them.
fn join_recorded(file: &Path, uid: libc::uid_t, gid: libc::gid_t) -> bool {
    let own = ns_inode("/proc/self/ns/user");
    let one_to_one = |path: String, id: u32| {
        fs::read_to_string(path).is_ok_and(|m| {
            let f: Vec<&str> = m.split_whitespace().collect();
            f == [id.to_string(), id.to_string(), "1".to_string()]
        })
    };
    for (pid, ino) in recorded(file) {
        let ns = format!("/proc/{pid}/ns/user");
        if Some(ino) == own || ns_inode(&ns) != Some(ino) {
            continue;
        }
        if !one_to_one(format!("/proc/{pid}/uid_map"), uid)
            || !one_to_one(format!("/proc/{pid}/gid_map"), gid)
        {
            continue;
        }
        let Ok(f) = File::open(&ns) else { continue };
        // The file is open: a pid reused since would show another inode.
        if f.metadata()
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            != Some(ino)
        {
            continue;
        }
        // SAFETY: setns takes a descriptor we own and changes only this
        // (single-threaded) process's user namespace.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWUSER) } == 0 {
            return true;
        }
    }
    false
}

/// Adds this process to the shared file, dropping entries whose process
/// is gone or is in another namespace now. Best effort: without it, later
/// runs make namespaces of their own.
fn record(file: &Path) {
    let Some(own) = ns_inode("/proc/self/ns/user") else {
        return;
    };
    let mut keep: Vec<(u32, u64)> = recorded(file)
        .into_iter()
        .filter(|&(pid, ino)| ns_inode(&format!("/proc/{pid}/ns/user")) == Some(ino))
        .collect();
    keep.push((std::process::id(), own));
    let text: String = keep.iter().map(|(p, i)| format!("{p} {i}\n")).collect();
    let tmp = file.with_extension(format!("tmp-{}", std::process::id()));
    if fs::write(&tmp, text).is_ok() && fs::rename(&tmp, file).is_err() {
        let _ = fs::remove_file(&tmp);
    }
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
    install_at(Path::new("/"), view, Some(Path::new("/dev/null")))
}

/// Writes the view's directories, files and links under `root` (e.g. a
/// tmpfs mounted over the real `/sys/class/infiniband`, by root), without
/// the device nodes: their directories are made, the nodes left to the
/// caller (`mknod`, or a container runtime's `--device`).
pub fn write_tree(root: &Path, view: &DeviceView) -> io::Result<()> {
    install_at(root, view, None)
}

/// [`install`] under `root`; device nodes are bind mounts of `node`, or
/// left out without one.
fn install_at(root: &Path, view: &DeviceView, node: Option<&Path>) -> io::Result<()> {
    for entry in view.entries() {
        match entry {
            Entry::Dir(p) => {
                let p = root.join(p);
                fs::create_dir_all(&p).map_err(os_err(format!("mkdir {}", p.display())))?;
            }
            Entry::File(p, text) => {
                let p = root.join(p);
                // Replacing: a file of an earlier write may be there.
                let _ = fs::remove_file(&p);
                fs::write(&p, text).map_err(os_err(format!("write {}", p.display())))?;
            }
            Entry::Symlink(p, to) => {
                let p = root.join(p);
                let _ = fs::remove_file(&p);
                std::os::unix::fs::symlink(&to, &p)
                    .map_err(os_err(format!("symlink {}", p.display())))?;
            }
            Entry::CharDevice(p) => {
                let Some(node) = node else { continue };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::GidEntry;
    use std::net::Ipv4Addr;

    #[test]
    fn write_tree_twice() {
        let dir = std::env::temp_dir().join(format!("devview-tree-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let view = DeviceView {
            name: "softrdma0".into(),
            node_guid: 0x0200_7f00_0001_0001,
            fw_ver: "softrdma test".into(),
            port_cap_flags: 0,
            gid_tbl_len: 1,
            gids: vec![GidEntry {
                gid: Ipv4Addr::LOCALHOST.to_ipv6_mapped(),
                ifname: Some("lo".into()),
            }],
            cpus: vec![0],
        };
        for _ in 0..2 {
            write_tree(&dir, &view).unwrap();
        }
        let port = dir.join("sys/class/infiniband/softrdma0/ports/1");
        assert_eq!(
            fs::read_to_string(port.join("gid_attrs/types/0")).unwrap(),
            "RoCE v2\n"
        );
        assert_eq!(
            fs::read_link(dir.join("sys/class/infiniband/softrdma0/device/net/lo")).unwrap(),
            Path::new("/sys/class/net/lo")
        );
        assert!(dir.join("dev/infiniband").is_dir());
        assert!(!dir.join("dev/infiniband/uverbs0").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
