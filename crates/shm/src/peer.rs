//! One copy between two member processes: `process_vm_readv` from a peer's
//! memory into this process's (DESIGN §6, issue 17 step 2).
//!
//! Only reads are offered. Whoever owns the destination copies into it,
//! under its own locks, after its own checks: nothing here ever writes into
//! another process's memory, so a late copy can never land in memory its
//! owner has deregistered (the one write into a peer, a READ's placement,
//! goes through a mapping under the peer's ticket: [`crate::TicketBook`]). The kernel allows the read only to a process that
//! may ptrace-read the peer (same user, peer not undumpable), the rule the
//! lanes already rely on (`/proc/<pid>/fd`).

use std::io;

/// A contiguous range of some process's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// First byte.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
}

/// Why a copy from a peer failed. Nothing or part of the destination was
/// written; nothing outside it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyError {
    /// The peer process is gone (`ESRCH`).
    Gone,
    /// The kernel refused access to the peer's memory (`EPERM`).
    Denied,
    /// A range of the peer's is not (or no longer) mapped, or fewer bytes
    /// than asked were copied (`EFAULT`, a short copy).
    Fault,
    /// Ranges of unequal totals, or too many of them for one call.
    Invalid,
    /// Another error (its errno).
    Other(i32),
}

/// Most ranges on either side of one system call (the kernel's `UIO_MAXIOV`).
pub const MAX_RANGES: usize = 1024;

fn iovecs(ranges: &[Range]) -> Result<Vec<libc::iovec>, CopyError> {
    if ranges.len() > MAX_RANGES {
        return Err(CopyError::Invalid);
    }
    ranges
        .iter()
        .map(|r| {
            Ok(libc::iovec {
                iov_base: r.addr as *mut libc::c_void,
                iov_len: usize::try_from(r.len).map_err(|_| CopyError::Invalid)?,
            })
        })
        .collect()
}

fn total(ranges: &[Range]) -> Option<u64> {
    ranges.iter().try_fold(0u64, |t, r| t.checked_add(r.len))
}

/// Copies the bytes of `remote` (ranges of process `pid`, in order) into
/// `local` (ranges of this process, in order); both must total the same.
///
/// # Safety
///
/// Every range of `local` must be memory of this process that may be
/// written now (allocated, writable, and not referenced by a live Rust
/// `&` or `&mut` other than through raw pointers).
pub unsafe fn read_from(pid: u32, remote: &[Range], local: &[Range]) -> Result<(), CopyError> {
    let want = total(remote).ok_or(CopyError::Invalid)?;
    if total(local) != Some(want) {
        return Err(CopyError::Invalid);
    }
    if want == 0 {
        return Ok(());
    }
    let (r, l) = (iovecs(remote)?, iovecs(local)?);
    let pid = libc::pid_t::try_from(pid).map_err(|_| CopyError::Invalid)?;
    // SAFETY: the iovec arrays live across the call and their lengths are
    // passed with them; the kernel reads `r` from process `pid` (checking
    // access itself) and writes only the `local` ranges, which the caller
    // promised are writable memory of ours.
    let n = unsafe {
        libc::process_vm_readv(
            pid,
            l.as_ptr(),
            l.len() as libc::c_ulong,
            r.as_ptr(),
            r.len() as libc::c_ulong,
            0,
        )
    };
    if n < 0 {
        return Err(match io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => CopyError::Gone,
            Some(libc::EPERM) => CopyError::Denied,
            Some(libc::EFAULT) => CopyError::Fault,
            Some(e) => CopyError::Other(e),
            None => CopyError::Other(0),
        });
    }
    if n as u64 != want {
        return Err(CopyError::Fault);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(b: &[u8]) -> Range {
        Range {
            addr: b.as_ptr() as u64,
            len: b.len() as u64,
        }
    }

    #[test]
    fn reads_own_memory_gathered_and_scattered() {
        let a = vec![1u8; 100];
        let b = vec![2u8; 50];
        let mut dst = vec![0u8; 150];
        let d = Range {
            addr: dst.as_mut_ptr() as u64,
            len: 150,
        };
        let (d1, d2) = (
            Range { len: 120, ..d },
            Range {
                addr: d.addr + 120,
                len: 30,
            },
        );
        // SAFETY: `dst` is ours, writable, and not borrowed during the call.
        unsafe { read_from(std::process::id(), &[range(&a), range(&b)], &[d1, d2]) }.unwrap();
        assert!(dst[..100].iter().all(|&x| x == 1));
        assert!(dst[100..].iter().all(|&x| x == 2));
    }

    #[test]
    fn errors_are_clean() {
        let mut dst = vec![0u8; 16];
        let d = [Range {
            addr: dst.as_mut_ptr() as u64,
            len: 16,
        }];
        let me = std::process::id();
        let unmapped = [Range { addr: 16, len: 16 }];
        // SAFETY: `dst` is ours, writable and not borrowed during the call.
        let r = unsafe { read_from(me, &unmapped, &d) };
        assert_eq!(r, Err(CopyError::Fault));
        let short = [Range { addr: 16, len: 8 }];
        // SAFETY: as above.
        let r = unsafe { read_from(me, &short, &d) };
        assert_eq!(r, Err(CopyError::Invalid));
        // A pid that cannot exist (above the kernel's PID_MAX_LIMIT).
        let src = [0u8; 16];
        // SAFETY: as above.
        let r = unsafe { read_from(4_194_305, &[range(&src)], &d) };
        assert_eq!(r, Err(CopyError::Gone));
        assert!(dst.iter().all(|&x| x == 0));
        // SAFETY: as above (nothing to copy).
        assert_eq!(unsafe { read_from(me, &[], &[]) }, Ok(()));
    }
}
