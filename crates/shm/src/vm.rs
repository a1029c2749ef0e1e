//! `mmap`, `munmap` and `mremap` as raw system calls.
//!
//! The path's own mappings (lanes, shared regions, peers' memfds) are none
//! of the application's business, but memory-event hooks see every call
//! through libc's symbols: UCX's UCM patches `mmap`/`munmap`/`mremap` and
//! invalidates its registration cache on what looks like the application's
//! memory being unmapped. Moving a region's pages into a memfd (`share`)
//! inside `ibv_reg_mr` then looked to UCX like its buffer going away while
//! it registered it: `ucx_perftest put_bw` hung and Open MPI over UCX
//! corrupted its heap (crates/cli/tests/ucx.rs, mpi.rs with the path on).
//! The kernel does the same work either way; only the hooks are skipped.

use std::os::fd::RawFd;

/// `mmap(NULL, len, prot, flags, fd, offset)`: the new mapping, or `None`
/// (errno set).
pub(crate) fn map(len: usize, prot: i32, flags: i32, fd: RawFd, offset: i64) -> Option<*mut u8> {
    // SAFETY: a new mapping at an address of the kernel's choice (no
    // MAP_FIXED here), so nothing of ours is replaced.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            std::ptr::null_mut::<libc::c_void>(),
            len,
            prot,
            flags,
            fd,
            offset,
        )
    };
    // libc's `syscall` returns -1 and sets errno on the kernel's errors.
    (r != -1).then_some(r as *mut u8)
}

/// `munmap(ptr, len)`.
///
/// # Safety
/// `[ptr, ptr + len)` must be a mapping of the caller's that nothing refers
/// to any more.
pub(crate) unsafe fn unmap(ptr: *mut u8, len: usize) {
    // SAFETY: per the contract.
    unsafe { libc::syscall(libc::SYS_munmap, ptr, len) };
}

/// `mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to)`: moves the
/// mapping `from` over the pages at `to` in one step (the old mapping at
/// `to` goes). On failure `from` is still mapped where it was.
///
/// # Safety
/// `from` must be the caller's mapping of `len` bytes and the pages at `to`
/// the caller's to replace.
pub(crate) unsafe fn move_over(from: *mut u8, len: usize, to: u64) -> bool {
    // SAFETY: per the contract; the kernel replaces the old mapping at
    // `to` atomically.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mremap,
            from,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to as *mut libc::c_void,
        )
    };
    r != -1
}
