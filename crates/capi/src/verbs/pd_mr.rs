//! Protection domains and memory regions.

use super::conv::access_from_c;
use super::objects::{self as o, Kind, Mr, Pd, PdRole};
use crate::ffi::*;
use crate::guard::ret;
use core::ffi::{c_int, c_uint, c_void};

/// `struct ibv_pd *ibv_alloc_pd(struct ibv_context *)`.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    o::with_ctx(context, ret::null, |c| match c.engine.alloc_pd() {
        Ok(h) => Pd::publish(context, h, &c.engine, PdRole::Owned),
        Err(e) => ret::null(e.errno()),
    })
}

/// `int ibv_dealloc_pd(struct ibv_pd *)`: EBUSY while objects use the PD
/// (a parent domain frees only itself, `parent.rs`).
///
/// # Safety
///
/// `pd` must not be used after a successful call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    o::destroy(pd.cast(), Kind::Pd, |p: &Pd| {
        let h = p.h;
        match p.role {
            // A parent domain gives back the reference it held on its PD.
            PdRole::Parent => p.engine.pd_release(h),
            PdRole::Owned | PdRole::Imported => p.engine.dealloc_pd(h)?,
        }
        Ok(())
    })
}

/// `ibv_reg_mr@IBVERBS_1.1`: registers `[addr, addr+length)` addressed as itself.
///
/// The memory must stay valid until `ibv_dereg_mr`, as with any RDMA device.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the same contract.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as c_uint) }
}

/// `ibv_reg_mr_iova`: registers `[addr, addr+length)` addressed as `iova`.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the same contract.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as c_uint) }
}

/// `ibv_reg_mr_iova2` (what the `ibv_reg_mr` macro calls with non-constant flags).
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    o::with_obj(pd.cast(), Kind::Pd, ret::null, |p: &Pd| {
        let access = access_from_c(access);
        let on_demand = access.contains(softrdma_engine::transport::Access::ON_DEMAND);
        // Implicit on-demand paging (`ibv_reg_mr(pd, NULL, SIZE_MAX, ..ON_DEMAND)`):
        // the whole address space, addressed as itself.
        let implicit = addr.is_null() && length == usize::MAX;
        if implicit && (!on_demand || iova != 0) {
            return ret::null(libc::EINVAL);
        }
        // As the kernel pins the pages for rdma-core: EFAULT for memory that is
        // not there (or read-only, for writable rights), so no peer can fault us.
        // On-demand memory is reached only when used, and may come and go
        // (`softrdma_engine::memory`): nothing to check now.
        if !on_demand
            && let Err(e) =
                softrdma_engine::check_mapped(addr as u64, length as u64, writes_memory(access))
        {
            return ret::null(e);
        }
        let h = p.h;
        match p.engine.reg_mr(h, addr as u64, length as u64, iova, access) {
            Ok(m) => p.publish_mr(pd, addr, length, m.lkey, &m, false),
            Err(e) => ret::null(e.errno()),
        }
    })
}

/// `int ibv_dereg_mr(struct ibv_mr *)`.
///
/// # Safety
///
/// `mr` must not be used after a successful call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    o::destroy(mr.cast(), Kind::Mr, |m: &Mr| {
        let key = m.mr.lkey;
        m.engine.dereg_mr(key)
    })
}

/// Extended-context slots for memory regions.
pub(crate) fn install_vctx_ops(v: &mut verbs_context) {
    v.advise_mr = Some(advise_mr);
}

/// `verbs_context::advise_mr` (`ibv_advise_mr`): prefetch hints. softrdma's
/// regions are ordinary process memory, always present, so there is nothing
/// to prefetch; the call checks its arguments as a device would (known
/// advice and flags, at least one SGE, every SGE inside a region of `pd`,
/// writable for `PREFETCH_WRITE`) and returns 0.
unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: ibv_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sges: u32,
) -> c_int {
    use softrdma_engine::transport::Access;
    o::with_obj(pd.cast(), Kind::Pd, ret::pos, |p: &Pd| {
        let need = match advice {
            IBV_ADVISE_MR_ADVICE_PREFETCH | IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => Access::EMPTY,
            IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE => Access::LOCAL_WRITE,
            _ => return ret::pos(libc::EOPNOTSUPP),
        };
        if flags & !IBV_ADVISE_MR_FLAG_FLUSH != 0
            || num_sges == 0
            || num_sges > 1024
            || sg_list.is_null()
        {
            return ret::pos(libc::EINVAL);
        }
        // SAFETY: the verbs contract: `num_sges` readable entries.
        let sges = unsafe { core::slice::from_raw_parts(sg_list, num_sges as usize) };
        let h = p.h;
        let ok = p
            .engine
            .advise_mr(h, need, sges.iter().map(|s| (s.lkey, s.addr, s.length)));
        if ok { 0 } else { ret::pos(libc::EINVAL) }
    })
}

/// Whether a region with `access` may have its memory written (by the
/// device or through a window), so it must be mapped writable.
pub(super) fn writes_memory(access: softrdma_engine::transport::Access) -> bool {
    use softrdma_engine::transport::Access as A;
    access.intersects(A::LOCAL_WRITE | A::REMOTE_WRITE | A::REMOTE_ATOMIC | A::MW_BIND)
}
