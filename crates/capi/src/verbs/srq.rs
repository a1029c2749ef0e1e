//! Shared receive queues (`ibv_post_srq_recv` is in `post.rs`).

use super::objects::{self as o, Kind, Pd, Srq};
use crate::ffi::*;
use crate::guard::{ret, with_struct};
use core::ffi::{c_int, c_void};
use softrdma_engine::transport::{SrqHandle, VerbsError};

/// Extended-context slots for SRQs.
pub(crate) fn install_vctx_ops(v: &mut verbs_context) {
    v.create_srq_ex = Some(vctx_create_srq_ex);
    v.post_srq_ops = Some(super::tm::vctx_post_srq_ops);
}

fn create(pd: *mut ibv_pd, srq_context: *mut c_void, attr: &mut ibv_srq_attr) -> *mut ibv_srq {
    // SAFETY: registry-checked.
    let Some(p) = (unsafe { o::obj::<Pd>(pd.cast(), Kind::Pd) }) else {
        return ret::null(libc::EINVAL);
    };
    let made = p
        .engine
        .create_srq(p.h, attr.max_wr, attr.max_sge, attr.srq_limit);
    publish(p, pd, srq_context, made, attr)
}

/// Publishes the SRQ the engine `made` on `p` (the application's `pd`),
/// writing its actual sizes to `attr`; NULL with errno if it was refused.
pub(crate) fn publish(
    p: &Pd,
    pd: *mut ibv_pd,
    srq_context: *mut c_void,
    made: Result<(SrqHandle, u32, u32), VerbsError>,
    attr: &mut ibv_srq_attr,
) -> *mut ibv_srq {
    let (h, max_wr, max_sge) = match made {
        Ok(v) => v,
        Err(e) => return ret::null(e.errno()),
    };
    attr.max_wr = max_wr;
    attr.max_sge = max_sge;
    let mut srq = ibv_srq::zeroed();
    srq.context = p.pd.context;
    srq.srq_context = srq_context;
    srq.pd = pd;
    srq.handle = h.0;
    let obj = o::publish(
        Srq {
            srq,
            h,
            engine: p.engine.clone(),
            max_sge,
        },
        Kind::Srq,
    );
    o::map_srq(h, Some(obj as usize));
    obj.cast()
}

/// `struct ibv_srq *ibv_create_srq(struct ibv_pd *, struct ibv_srq_init_attr *)`;
/// writes the actual sizes back.
///
/// # Safety
///
/// `srq_init_attr` must be valid for reads and writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    srq_init_attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    let make = |a: &mut ibv_srq_init_attr| create(pd, a.srq_context, &mut a.attr);
    // SAFETY: NULL or valid for reads and writes, per the contract.
    unsafe { with_struct(srq_init_attr, ret::null, make) }
}

/// `verbs_context::create_srq_ex`: basic, XRC and tag-matching SRQs.
unsafe extern "C" fn vctx_create_srq_ex(
    _context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    let make = |a: &mut ibv_srq_init_attr_ex| {
        if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type == IBV_SRQT_XRC {
            return super::xrc::create_srq(a);
        }
        if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type == IBV_SRQT_TM {
            return super::tm::create_srq(a);
        }
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0
            || (a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type != IBV_SRQT_BASIC)
        {
            return ret::null(libc::EOPNOTSUPP);
        }
        create(a.pd, a.srq_context, &mut a.attr)
    };
    // SAFETY: NULL or valid for reads and writes, per the caller's contract.
    unsafe { with_struct(attr, ret::null, make) }
}

/// `int ibv_modify_srq(struct ibv_srq *, struct ibv_srq_attr *, int mask)`.
///
/// # Safety
///
/// `srq_attr` must be valid for reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    srq_attr: *mut ibv_srq_attr,
    srq_attr_mask: c_int,
) -> c_int {
    o::with_obj(srq.cast(), Kind::Srq, ret::pos, |s: &Srq| {
        if srq_attr.is_null() {
            return ret::pos(libc::EINVAL);
        }
        // SAFETY: non-NULL, readable per the contract.
        let a = unsafe { *srq_attr };
        let m = srq_attr_mask as u32;
        if m & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
            return ret::pos(libc::EINVAL);
        }
        let max_wr = (m & IBV_SRQ_MAX_WR != 0).then_some(a.max_wr);
        let limit = (m & IBV_SRQ_LIMIT != 0).then_some(a.srq_limit);
        let h = s.h;
        match s.engine.modify_srq(h, max_wr, limit) {
            Ok(()) => 0,
            Err(e) => ret::pos(e.errno()),
        }
    })
}

/// `int ibv_query_srq(struct ibv_srq *, struct ibv_srq_attr *)`.
///
/// # Safety
///
/// `srq_attr` must be valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int {
    o::with_obj(srq.cast(), Kind::Srq, ret::pos, |s: &Srq| {
        if srq_attr.is_null() {
            return ret::pos(libc::EINVAL);
        }
        let h = s.h;
        match s.engine.query_srq(h) {
            Ok((max_wr, max_sge, srq_limit)) => {
                // SAFETY: non-NULL, writable per the contract.
                unsafe {
                    srq_attr.write(ibv_srq_attr {
                        max_wr,
                        max_sge,
                        srq_limit,
                    })
                };
                0
            }
            Err(e) => ret::pos(e.errno()),
        }
    })
}

/// `int ibv_destroy_srq(struct ibv_srq *)`: EBUSY while QPs use it.
///
/// # Safety
///
/// `srq` must not be used after a successful call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    o::destroy(srq.cast(), Kind::Srq, |s: &Srq| {
        let h = s.h;
        s.engine.destroy_srq(h)?;
        o::map_srq(h, None);
        Ok(())
    })
}
