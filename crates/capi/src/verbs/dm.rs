//! Device memory: `ibv_alloc_dm`, `ibv_free_dm`, `ibv_memcpy_to/from_dm`
//! (through `struct ibv_dm`'s function pointers), `ibv_reg_dm_mr`,
//! `ibv_import_dm` / `ibv_unimport_dm`. The buffers and their rules are
//! the engine's (`softrdma_engine::dm`); this is the C shim.

use super::conv::access_from_c;
use super::objects::{self as o, Dm, Kind, Mr, Pd};
use crate::ffi::*;
use crate::guard::{ret, set_errno};
use core::ffi::{c_int, c_uint, c_void};

/// Extended-context slots for device memory.
pub(crate) fn install_vctx_ops(v: &mut verbs_context) {
    v.alloc_dm = Some(alloc_dm);
    v.free_dm = Some(free_dm);
    v.reg_dm_mr = Some(reg_dm_mr);
}

/// Hands out an `ibv_dm` for `mem` on `context`.
fn publish(
    context: *mut ibv_context,
    mem: std::sync::Arc<softrdma_engine::dm::DeviceMemory>,
    imported: bool,
) -> *mut ibv_dm {
    let dm = ibv_dm {
        context,
        memcpy_to_dm: Some(memcpy_to_dm),
        memcpy_from_dm: Some(memcpy_from_dm),
        comp_mask: 0,
        handle: mem.handle(),
    };
    o::publish(Dm { dm, mem, imported }, Kind::Dm).cast()
}

/// `verbs_context::alloc_dm` (`ibv_alloc_dm`): no `comp_mask` bits are
/// known (EINVAL); the size and alignment rules are the engine's.
unsafe extern "C" fn alloc_dm(
    context: *mut ibv_context,
    attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    o::with_ctx(context, ret::null, |c| {
        if attr.is_null() {
            return ret::null(libc::EINVAL);
        }
        // SAFETY: non-NULL; the caller passes a whole attribute struct.
        let a = unsafe { *attr };
        if a.comp_mask != 0 {
            return ret::null(libc::EINVAL);
        }
        match c.engine.alloc_dm(a.length as u64, a.log_align_req) {
            Ok(mem) => publish(context, mem, false),
            Err(e) => ret::null(e.errno()),
        }
    })
}

/// `verbs_context::free_dm` (`ibv_free_dm`): EBUSY while regions are
/// registered over the memory. 0 or a positive errno.
unsafe extern "C" fn free_dm(dm: *mut ibv_dm) -> c_int {
    o::destroy(dm.cast(), Kind::Dm, |d: &Dm| {
        softrdma_engine::dm::free(&d.mem)
    })
}

/// `ibv_dm::memcpy_to_dm`: 0 or a positive errno.
unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    dm_offset: u64,
    host_addr: *const c_void,
    length: usize,
) -> c_int {
    o::with_obj(dm.cast(), Kind::Dm, ret::pos, |d: &Dm| {
        if length == 0 {
            return 0;
        }
        if host_addr.is_null() {
            return ret::pos(libc::EINVAL);
        }
        // SAFETY: the verbs contract: `length` readable bytes at `host_addr`.
        let src = unsafe { core::slice::from_raw_parts(host_addr.cast::<u8>(), length) };
        match d.mem.write(dm_offset, src) {
            Ok(()) => 0,
            Err(e) => ret::pos(e.errno()),
        }
    })
}

/// `ibv_dm::memcpy_from_dm`: 0 or a positive errno.
unsafe extern "C" fn memcpy_from_dm(
    host_addr: *mut c_void,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
) -> c_int {
    o::with_obj(dm.cast(), Kind::Dm, ret::pos, |d: &Dm| {
        if length == 0 {
            return 0;
        }
        if host_addr.is_null() {
            return ret::pos(libc::EINVAL);
        }
        // SAFETY: the verbs contract: `length` writable bytes at `host_addr`.
        let dst = unsafe { core::slice::from_raw_parts_mut(host_addr.cast::<u8>(), length) };
        match d.mem.read(dm_offset, dst) {
            Ok(()) => 0,
            Err(e) => ret::pos(e.errno()),
        }
    })
}

/// `verbs_context::reg_dm_mr` (`ibv_reg_dm_mr`): a zero-based region over
/// `[dm_offset, dm_offset + length)` of `dm` (`mr->addr` is 0, work
/// requests and peers address it by offset); `IBV_ACCESS_ZERO_BASED` is
/// required, as the kernel requires it.
unsafe extern "C" fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    o::with_obj(pd.cast(), Kind::Pd, ret::null, |p: &Pd| {
        // SAFETY: registry-checked.
        let Some(d) = (unsafe { o::obj::<Dm>(dm.cast(), Kind::Dm) }) else {
            return ret::null(libc::EINVAL);
        };
        let access = access_from_c(access);
        match p
            .engine
            .reg_dm_mr(p.h, &d.mem, dm_offset, length as u64, access)
        {
            Ok((m, hold)) => p.publish_mr_on(pd, core::ptr::null_mut(), length, &m, Some(hold)),
            Err(e) => ret::null(e.errno()),
        }
    })
}

/// `struct ibv_dm *ibv_import_dm(struct ibv_context *, uint32_t dm_handle)`:
/// another handle on device memory of this process's device (EINVAL for a
/// handle that names none, or memory already freed).
///
/// # Safety
///
/// `context` is checked against the registry of live objects.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_import_dm(context: *mut ibv_context, dm_handle: u32) -> *mut ibv_dm {
    o::with_ctx(context, ret::null, |c| {
        match c.engine.import_dm(dm_handle) {
            Some(mem) => publish(context, mem, true),
            None => ret::null(libc::EINVAL),
        }
    })
}

/// `void ibv_unimport_dm(struct ibv_dm *)`: forgets this handle; the
/// memory stays for its other handles and regions.
///
/// # Safety
///
/// `dm` is checked against the registry and must not be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_unimport_dm(dm: *mut ibv_dm) {
    o::with_obj(dm.cast(), Kind::Dm, set_errno, |_: &Dm| {
        // SAFETY: a live Dm from `publish`; only this handle goes.
        unsafe { o::retire(dm.cast::<Dm>()) }
    })
}

/// Whether `mr` is a region over device memory (`ibv_rereg_mr` refuses it).
pub(crate) fn is_dm_mr(m: &Mr) -> bool {
    m.dm.is_some()
}
