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

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// A new memfd named `name` of `len` bytes, closed on exec.
pub(crate) fn memfd(name: &std::ffi::CStr, len: u64) -> io::Result<File> {
    // SAFETY: a NUL-terminated name; the flags are valid.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len)?;
    Ok(file)
}

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

/// A mapping that unmaps on drop.
#[derive(Debug)]
pub(crate) struct Map {
    pub(crate) ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; concurrent access goes through
// atomics or the ring protocol (see `crate::Ring`).
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    pub(crate) fn new(file: &File, offset: usize, len: usize) -> io::Result<Map> {
        // A fresh shared mapping of `len` bytes of `file` at a page-aligned
        // offset; the kernel picks the address.
        let ptr = map(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            offset as i64,
        )
        .ok_or_else(io::Error::last_os_error)?;
        Ok(Map { ptr, len })
    }

    pub(crate) fn u32_at(&self, at: usize) -> &AtomicU32 {
        assert!(at + 4 <= self.len && at.is_multiple_of(4));
        // SAFETY: in bounds and aligned (checked); shared words are only
        // ever accessed atomically.
        unsafe { &*self.ptr.add(at).cast::<AtomicU32>() }
    }

    pub(crate) fn u64_at(&self, at: usize) -> &AtomicU64 {
        assert!(at + 8 <= self.len && at.is_multiple_of(8));
        // SAFETY: as `u32_at`.
        unsafe { &*self.ptr.add(at).cast::<AtomicU64>() }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `Map::new` mapped; no view outlives
        // its `Map` (views, such as rings, are owned alongside it).
        unsafe { unmap(self.ptr, self.len) };
    }
}
