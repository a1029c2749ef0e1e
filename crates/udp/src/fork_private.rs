//! Descriptors a forked child must not share with its parent.
//!
//! A child forked while the device is open gets copies of its descriptors,
//! and copies keep what they refer to alive: the parent's socket stays in
//! the host device's reuseport group after the parent left it (the group's
//! table then names the wrong socket for an index, and what the kernel
//! steers there is never read), and the parent's member slot and rdma_cm
//! ports stay locked, so its death goes unseen and its ports stay taken,
//! for as long as the child lives. The child never uses the parent's device
//! (it opens one of its own), so a `pthread_atfork` handler points each
//! registered descriptor of the child at `/dev/null`, as the kernel's
//! close-on-fork would if Linux had one.

use std::os::fd::RawFd;
use std::sync::Once;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// Room for the descriptors of one device (a socket per host address, the
/// multicast groups', the slot, the ports); beyond that, copies stay.
const SLOTS: usize = 256;
static FDS: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
/// Forks between the process that installed the handler and this one.
static FORKS: AtomicU64 = AtomicU64::new(0);

fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| crate::sys::at_fork_in_child(in_child));
}

/// A number that differs in every child forked after the first call from
/// what it is in the parent (and stays the same in one process): which
/// process is this, without a `getpid` system call each time (two per
/// `ibv_get_cq_event`, `strace -c` of `ib_send_lat -e`).
pub fn fork_generation() -> u64 {
    install();
    FORKS.load(Ordering::Relaxed)
}

/// Makes the child of every later `fork` drop its copy of `fd`.
pub fn register(fd: RawFd) {
    install();
    for s in &FDS {
        if s.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// Forgets `fd` (before it is closed: its number may be reused).
pub fn unregister(fd: RawFd) {
    for s in &FDS {
        if s.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// A registered descriptor, forgotten when this is dropped: drop it before
/// the descriptor closes (declare it first in a struct, or put it first in
/// a tuple).
#[derive(Debug)]
pub struct ForkPrivate(RawFd);

impl ForkPrivate {
    /// Registers `fd` ([`register`]).
    pub fn new(fd: RawFd) -> ForkPrivate {
        register(fd);
        ForkPrivate(fd)
    }
}

impl Drop for ForkPrivate {
    fn drop(&mut self) {
        unregister(self.0);
    }
}

/// In the child, right after `fork` (only async-signal-safe calls: the
/// parent's other threads may have held any lock).
extern "C" fn in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
    let _ = crate::sys::point_at_dev_null(FDS.iter().map(|s| s.swap(-1, Ordering::AcqRel)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_forked_child_has_another_fork_generation() {
        let parent = fork_generation();
        assert_eq!(fork_generation(), parent, "the same in one process");
        // SAFETY: the child only reads an atomic and calls _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = i32::from(fork_generation() == parent);
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(fork_generation(), parent, "the parent's is unchanged");
    }

    #[test]
    fn a_forked_child_drops_its_copies() {
        let kept = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let dropped = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let gone = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        register(dropped.as_raw_fd());
        register(gone.as_raw_fd());
        unregister(gone.as_raw_fd());
        let status = crate::sys::fork_and_check(&[
            (kept.as_raw_fd(), false),
            (dropped.as_raw_fd(), true),
            (gone.as_raw_fd(), false),
        ]);
        assert_eq!(status, 0, "child saw /dev/null exactly where registered");
        // The parent's descriptors are untouched.
        assert!(dropped.local_addr().is_ok());
        unregister(dropped.as_raw_fd());
    }
}
