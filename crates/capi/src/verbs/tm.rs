//! Tag matching (`softrdma_transport::tm`): `ibv_create_srq_ex` with
//! `IBV_SRQT_TM` and `verbs_context::post_srq_ops` (`ibv_post_srq_ops`).
//! The completions (`IBV_WC_TM_*`, `ibv_wc_read_tm_info`) are the extended
//! CQ's (`cq_ex.rs`); the capabilities are `tm_caps` of
//! `ibv_query_device_ex` ([`tm_caps`]).

use super::few::Few;
use super::objects::{self as o, Cq, Kind, Pd, Srq};
use super::post::{Chained, post_chain, sges};
use crate::ffi::*;
use crate::guard::ret;
use core::ffi::c_int;
use softrdma_engine::transport::DeviceLimits;
use softrdma_engine::transport::tm::{SrqOp, TagEntry, TmCap, TmOp};

/// `tm_caps` of `ibv_query_device_ex`: RC tag matching within `l`.
pub(crate) fn tm_caps(l: &DeviceLimits) -> ibv_tm_caps {
    ibv_tm_caps {
        max_rndv_hdr_size: l.max_rndv_hdr_size,
        max_num_tags: l.max_num_tags,
        flags: IBV_TM_CAP_RC,
        max_ops: l.max_tm_ops,
        max_sge: l.max_srq_sge,
    }
}

/// A tag-matching SRQ: needs a PD and a CQ (`IBV_SRQ_INIT_ATTR_PD`,
/// `_CQ`) and `tm_cap` (`_TM`) within `tm_caps`; EINVAL otherwise.
pub(crate) fn create_srq(a: &mut ibv_srq_init_attr_ex) -> *mut ibv_srq {
    let need = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    if a.comp_mask & need != need {
        return ret::null(libc::EINVAL);
    }
    // SAFETY: registry-checked.
    let (Some(p), Some(cq)) = (unsafe { o::obj::<Pd>(a.pd.cast(), Kind::Pd) }, unsafe {
        o::obj::<Cq>(a.cq.cast(), Kind::Cq)
    }) else {
        return ret::null(libc::EINVAL);
    };
    let at = &mut a.attr;
    let tm = TmCap {
        max_num_tags: a.tm_cap.max_num_tags,
        max_ops: a.tm_cap.max_ops,
    };
    let made = p
        .engine
        .create_tm_srq(p.h, cq.h, at.max_wr, at.max_sge, at.srq_limit, tm);
    super::srq::publish(p, a.pd, a.srq_context, made, at)
}

impl Chained for ibv_ops_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

/// One operation of the chain; EINVAL for an unknown opcode or flag.
///
/// # Safety
///
/// An ADD's SGE list must be readable (verbs contract).
unsafe fn op(w: &ibv_ops_wr) -> Result<SrqOp, c_int> {
    if w.flags & !(IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC) != 0 {
        return Err(libc::EINVAL);
    }
    let op = match w.opcode {
        IBV_WR_TAG_ADD => TmOp::Add(TagEntry {
            tag: w.tm.add.tag,
            mask: w.tm.add.mask,
            recv_wr_id: w.tm.add.recv_wr_id,
            // SAFETY: forwarded contract.
            sgl: unsafe { sges(w.tm.add.sg_list, w.tm.add.num_sge) }?,
        }),
        IBV_WR_TAG_DEL => TmOp::Del(w.tm.handle),
        IBV_WR_TAG_SYNC => TmOp::Sync,
        _ => return Err(libc::EINVAL),
    };
    Ok(SrqOp {
        wr_id: w.wr_id,
        op,
        unexpected: w.tm.unexpected_cnt,
        sync: w.flags & IBV_OPS_TM_SYNC != 0,
        signaled: w.flags & IBV_OPS_SIGNALED != 0,
    })
}

/// `verbs_context::post_srq_ops`: 0, or a positive errno with `*bad_op`
/// at the first operation not done (EINVAL for a non-TM SRQ, ENOMEM for a
/// full tag list). An ADD's handle is written to its `tm.handle`.
pub(crate) unsafe extern "C" fn vctx_post_srq_ops(
    srq: *mut ibv_srq,
    ops: *mut ibv_ops_wr,
    bad_op: *mut *mut ibv_ops_wr,
) -> c_int {
    // SAFETY: each operation's SGE list is readable (verbs contract).
    let conv = |_: &Srq, w: &ibv_ops_wr| unsafe { op(w) };
    let post = |s: &Srq, wrs: Few<SrqOp>, ptrs: &[*mut ibv_ops_wr]| {
        s.engine.post_srq_ops(s.h, wrs, |i, h| {
            // The application's chain, writable per the contract.
            let p: *mut ibv_ops_wr = ptrs[i];
            // SAFETY: as above.
            unsafe { (*p).tm.handle = h };
        })
    };
    // SAFETY: application-owned chain and `bad_op` (verbs contract).
    unsafe { post_chain(srq.cast(), Kind::Srq, ops, bad_op, conv, post) }
}
