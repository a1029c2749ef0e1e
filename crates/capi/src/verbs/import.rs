//! Sharing objects between contexts (`ibv_import_device`, `ibv_import_pd`,
//! `ibv_import_mr` and their `unimport` counterparts, IBVERBS_1.10).
//!
//! In rdma-core a context's `cmd_fd` is the uverbs file, and a dup of it
//! (even in another process) opens a second context on the same kernel
//! objects. Here every context's `cmd_fd` is a memfd of its own, so a dup of
//! it (same open file, same inode) names the context; the imported context
//! shares the process's engine and so every PD and MR, which are imported by
//! handle (`ibv_pd.handle`, `ibv_mr.handle`). A `cmd_fd` from another process
//! names no context here (its objects live in that process's engine):
//! EOPNOTSUPP.

use super::device::open_context_with;
use super::objects::{self as o, Ctx, Kind, Mr, Pd, PdRole};
use crate::ffi::*;
use crate::guard::{ffi_guard, ret, set_errno};
use core::ffi::c_int;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A new context's `cmd_fd`: an empty memfd (None if the system refuses).
pub(crate) fn new_cmd_fd() -> Option<OwnedFd> {
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let fd = unsafe { libc::memfd_create(c"softrdma-context".as_ptr(), libc::MFD_CLOEXEC) };
    // SAFETY: a fresh descriptor this process owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Device and inode of an open file.
fn file_id(fd: c_int) -> Option<(u64, u64)> {
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is writable; fstat on a bad fd fails cleanly.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded and filled it.
    let st = unsafe { st.assume_init() };
    Some((st.st_dev, st.st_ino))
}

/// `struct ibv_context *ibv_import_device(int cmd_fd)`: a new context on the
/// device and objects of the context whose `cmd_fd` this is a dup of. The
/// new context owns `cmd_fd` (`ibv_close_device` closes it).
///
/// # Safety
///
/// `cmd_fd` must be a descriptor the caller hands over.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    ffi_guard(
        || ret::null(libc::EIO),
        || {
            let Some(id) = file_id(cmd_fd) else {
                return ret::null(libc::EBADF);
            };
            let found = o::live_of(Kind::Context).into_iter().find_map(|base| {
                // SAFETY: the registry holds live contexts; read-only use.
                let c = unsafe { &*(base as *const Ctx) };
                let fd = c.cmd_fd.as_ref()?.as_raw_fd();
                (file_id(fd) == Some(id)).then(|| (c.engine.clone(), c.vctx.context.device))
            });
            let Some((engine, device)) = found else {
                return ret::null(libc::EOPNOTSUPP);
            };
            // SAFETY: the caller hands `cmd_fd` over; it is open (fstat worked).
            let fd = unsafe { OwnedFd::from_raw_fd(cmd_fd) };
            open_context_with(engine, device, Some(fd))
        },
    )
}

/// `struct ibv_pd *ibv_import_pd(struct ibv_context *, uint32_t pd_handle)`.
///
/// # Safety
///
/// `context` is checked against the registry.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd {
    o::with_ctx(context, ret::null, |c| {
        let h = softrdma_engine::transport::PdHandle(pd_handle);
        // The PD must exist.
        if let Err(e) = c.engine.import_pd(h) {
            return ret::null(e.errno());
        }
        Pd::publish(context, h, &c.engine, PdRole::Imported)
    })
}

/// `void ibv_unimport_pd(struct ibv_pd *)`: forgets this handle; the PD stays.
///
/// # Safety
///
/// `pd` is checked against the registry and must not be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_unimport_pd(pd: *mut ibv_pd) {
    o::with_obj(pd.cast(), Kind::Pd, set_errno, |p: &Pd| {
        if p.role == PdRole::Parent {
            return set_errno(libc::EINVAL);
        }
        // SAFETY: a live Pd from `publish`; only the handle goes.
        unsafe { o::retire(pd.cast::<Pd>()) }
    })
}

/// `struct ibv_mr *ibv_import_mr(struct ibv_pd *, uint32_t mr_handle)`: the
/// region of `pd` with this handle (its L_Key); `addr` is NULL, as rdma-core
/// reports for an imported region.
///
/// # Safety
///
/// `pd` is checked against the registry.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr {
    o::with_obj(pd.cast(), Kind::Pd, ret::null, |p: &Pd| {
        let found = p.engine.query_mr(mr_handle);
        let Some(m) = found.filter(|m| m.pd == p.h) else {
            return ret::null(libc::EINVAL);
        };
        let addr = core::ptr::null_mut();
        p.publish_mr(pd, addr, m.length as usize, mr_handle, &m, true)
    })
}

/// `void ibv_unimport_mr(struct ibv_mr *)`: forgets this handle; the region stays.
///
/// # Safety
///
/// `mr` is checked against the registry and must not be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_unimport_mr(mr: *mut ibv_mr) {
    o::with_obj(mr.cast(), Kind::Mr, set_errno, |_: &Mr| {
        // SAFETY: a live Mr from `publish`; only the handle goes.
        unsafe { o::retire(mr.cast::<Mr>()) }
    })
}
