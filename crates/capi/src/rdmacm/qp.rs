//! QPs and SRQs on CM ids (`rdma_create_qp`, `rdma_create_srq`, ...): the
//! verbs objects are made by this library's own libibverbs functions.

use super::event::with_id;
use super::id::{ensure, with_engine};
use crate::ffi::*;
use crate::guard::{ret, with_struct};
use crate::verbs::cq::{
    ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq,
};
use crate::verbs::qp::{ibv_create_qp, ibv_destroy_qp, ibv_modify_qp};
use crate::verbs::srq::{ibv_create_srq, ibv_destroy_srq};
use core::ffi::c_int;

/// Makes a completion channel and a CQ of `cqe` entries whose context is `id`
/// (what `rdma_get_*_comp` expect).
fn make_cq(id: *mut rdma_cm_id, cqe: u32) -> Result<(*mut ibv_comp_channel, *mut ibv_cq), c_int> {
    // SAFETY: `id` is live (callers checked).
    let ctx = unsafe { (*id).verbs };
    // SAFETY: `ctx` is this library's context.
    let ch = unsafe { ibv_create_comp_channel(ctx) };
    if ch.is_null() {
        return Err(crate::guard::errno());
    }
    // SAFETY: as above.
    let cq = unsafe { ibv_create_cq(ctx, cqe.max(1) as c_int, id.cast(), ch, 0) };
    if cq.is_null() {
        let e = crate::guard::errno();
        // SAFETY: just created, unused.
        unsafe { ibv_destroy_comp_channel(ch) };
        return Err(e);
    }
    Ok((ch, cq))
}

/// Destroys the CQs and channels `rdma_create_qp` made for `id`.
fn destroy_cqs(id: *mut rdma_cm_id, obj: &super::objects::Id) {
    let mut st = obj.state();
    // SAFETY: `id` is live; the pointers are objects this library made for it.
    unsafe {
        if st.own_send_cq {
            ibv_destroy_cq((*id).send_cq);
            ibv_destroy_comp_channel((*id).send_cq_channel);
            (*id).send_cq = core::ptr::null_mut();
            (*id).send_cq_channel = core::ptr::null_mut();
            st.own_send_cq = false;
        }
        if st.own_recv_cq {
            ibv_destroy_cq((*id).recv_cq);
            ibv_destroy_comp_channel((*id).recv_cq_channel);
            (*id).recv_cq = core::ptr::null_mut();
            (*id).recv_cq_channel = core::ptr::null_mut();
            st.own_recv_cq = false;
        }
    }
}

fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: c_int) -> Result<(), c_int> {
    // SAFETY: `qp` is a QP this library just created; `a` is a local.
    match unsafe { ibv_modify_qp(qp, a, mask) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// Moves a new QP where librdmacm leaves it: INIT for connected QPs (the CM
/// takes them to RTS), RTS with the rdma_cm Q_Key for UD.
fn init_qp(qp: *mut ibv_qp, ud: bool) -> Result<(), c_int> {
    use softrdma_engine::transport::QpAttrMask as M;
    let mut a = ibv_qp_attr::zeroed();
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    if ud {
        a.qkey = RDMA_UDP_QKEY;
        modify(
            qp,
            &mut a,
            (M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY).0 as c_int,
        )?;
        a.qp_state = IBV_QPS_RTR;
        modify(qp, &mut a, M::STATE.0 as c_int)?;
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 0;
        modify(qp, &mut a, (M::STATE | M::SQ_PSN).0 as c_int)
    } else {
        a.qp_access_flags = 0;
        modify(
            qp,
            &mut a,
            (M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS).0 as c_int,
        )
    }
}

/// `int rdma_create_qp_ex(struct rdma_cm_id *, struct ibv_qp_init_attr_ex *)`.
///
/// # Safety
///
/// `attr` must be readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    with_id(id, ret::neg, |obj| {
        if attr.is_null() {
            return ret::neg(libc::EINVAL);
        }
        // SAFETY: live id.
        if !unsafe { (*id).qp }.is_null() || unsafe { (*id).verbs }.is_null() {
            return ret::neg(libc::EINVAL);
        }
        with_engine(id, obj, None, |engine, h| {
            // SAFETY: non-NULL, valid per the contract.
            let a = unsafe { &mut *attr };
            if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
                a.comp_mask |= IBV_QP_INIT_ATTR_PD;
                // SAFETY: live id.
                a.pd = unsafe { (*id).pd };
            }
            // SAFETY: live id.
            let (have_s, have_r) = unsafe { (!(*id).send_cq.is_null(), !(*id).recv_cq.is_null()) };
            if a.send_cq.is_null() && !have_s {
                match make_cq(id, a.cap.max_send_wr) {
                    // SAFETY: live id.
                    Ok((ch, cq)) => unsafe {
                        (*id).send_cq_channel = ch;
                        (*id).send_cq = cq;
                        obj.state().own_send_cq = true;
                    },
                    Err(e) => return ret::neg(e),
                }
            }
            if a.recv_cq.is_null() && !have_r {
                match make_cq(id, a.cap.max_recv_wr) {
                    // SAFETY: live id.
                    Ok((ch, cq)) => unsafe {
                        (*id).recv_cq_channel = ch;
                        (*id).recv_cq = cq;
                        obj.state().own_recv_cq = true;
                    },
                    Err(e) => {
                        destroy_cqs(id, obj);
                        return ret::neg(e);
                    }
                }
            }
            // SAFETY: live id.
            unsafe {
                if a.send_cq.is_null() {
                    a.send_cq = (*id).send_cq;
                }
                if a.recv_cq.is_null() {
                    a.recv_cq = (*id).recv_cq;
                }
                if a.srq.is_null() {
                    a.srq = (*id).srq;
                }
            }
            let mut basic = ibv_qp_init_attr {
                // SAFETY: live id.
                qp_type: unsafe { (*id).qp_type },
                ..a.base()
            };
            let qp = if basic.qp_type == IBV_QPT_XRC_RECV {
                // An XRC receive QP belongs to the CM's XRC domain, as in
                // librdmacm; its receives come through the id's XRC SRQ.
                let mut ex = ibv_qp_init_attr_ex::from_base(&basic);
                ex.comp_mask = IBV_QP_INIT_ATTR_XRCD;
                // SAFETY: live id.
                ex.xrcd = crate::verbs::xrc::cm_xrcd(unsafe { (*id).verbs });
                crate::verbs::xrc::create_recv_qp(&mut ex)
            } else {
                // SAFETY: `basic` is a local; the PD is the application's or ours.
                unsafe { ibv_create_qp(a.pd, &mut basic) }
            };
            if qp.is_null() {
                let e = crate::guard::errno();
                destroy_cqs(id, obj);
                return ret::neg(e);
            }
            a.cap = basic.cap;
            if let Err(e) = init_qp(qp, basic.qp_type == IBV_QPT_UD) {
                // SAFETY: just created.
                unsafe { ibv_destroy_qp(qp) };
                destroy_cqs(id, obj);
                return ret::neg(e);
            }
            // SAFETY: a QP this library created.
            let qpn = unsafe { (*qp).qp_num };
            let _ = engine.cm_set_qp(h, Some(qpn));
            // SAFETY: live id.
            unsafe {
                (*id).qp = qp;
                (*id).pd = a.pd;
            }
            0
        })
    })
}

/// `int rdma_create_qp(struct rdma_cm_id *, struct ibv_pd *, struct ibv_qp_init_attr *)`:
/// NULL PD means the device's default; NULL CQs get a channel and CQ each.
///
/// # Safety
///
/// `qp_init_attr` must be readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let create = |b: &mut ibv_qp_init_attr| {
        let mut ex = ibv_qp_init_attr_ex::from_base(b);
        ex.comp_mask = IBV_QP_INIT_ATTR_PD;
        ex.pd = pd;
        // SAFETY: `ex` is a local.
        let r = unsafe { __softrdma_rdma_create_qp_ex(id, &mut ex) };
        // What the call filled in: the CQs and SRQ it chose, the capacities.
        *b = ex.base();
        r
    };
    // SAFETY: NULL or valid for reads and writes, per the contract.
    unsafe { with_struct(qp_init_attr, ret::neg, create) }
}

/// `void rdma_destroy_qp(struct rdma_cm_id *)`.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_destroy_qp(id: *mut rdma_cm_id) {
    with_id(
        id,
        |_| (),
        |obj| {
            // SAFETY: live id.
            let qp = unsafe { (*id).qp };
            if !qp.is_null() {
                if let Ok((engine, h)) = ensure(id, obj, None) {
                    let _ = engine.cm_set_qp(h, None);
                }
                // SAFETY: the id's QP, made by this library.
                unsafe {
                    ibv_destroy_qp(qp);
                    (*id).qp = core::ptr::null_mut();
                }
            }
            destroy_cqs(id, obj);
        },
    )
}

/// `int rdma_create_srq_ex(struct rdma_cm_id *, struct ibv_srq_init_attr_ex *)`:
/// basic SRQs, and XRC SRQs (the CM's XRC domain and the id's receive CQ
/// unless given).
///
/// # Safety
///
/// `attr` must be readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    with_id(id, ret::neg, |obj| {
        if attr.is_null() {
            return ret::neg(libc::EINVAL);
        }
        // SAFETY: non-NULL, valid per the contract.
        let a = unsafe { &mut *attr };
        let xrc = a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type == IBV_SRQT_XRC;
        if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type != IBV_SRQT_BASIC && !xrc {
            return ret::neg(libc::EOPNOTSUPP);
        }
        let pd = if a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 && !a.pd.is_null() {
            a.pd
        } else {
            // SAFETY: live id.
            unsafe { (*id).pd }
        };
        let srq = if xrc {
            let mut ex = *a;
            ex.comp_mask |= IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
            ex.pd = pd;
            // SAFETY: live id.
            unsafe {
                if a.comp_mask & IBV_SRQ_INIT_ATTR_XRCD == 0 || a.xrcd.is_null() {
                    ex.xrcd = crate::verbs::xrc::cm_xrcd((*id).verbs);
                }
                if a.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0 || a.cq.is_null() {
                    ex.cq = (*id).recv_cq;
                }
            }
            let srq = crate::verbs::xrc::create_srq(&mut ex);
            a.attr = ex.attr;
            srq
        } else {
            let mut basic = a.base();
            // SAFETY: `basic` is a local.
            let srq = unsafe { ibv_create_srq(pd, &mut basic) };
            a.attr = basic.attr;
            srq
        };
        if srq.is_null() {
            return -1;
        }
        obj.state().own_srq = true;
        // SAFETY: live id.
        unsafe { (*id).srq = srq };
        0
    })
}

/// `int rdma_create_srq(struct rdma_cm_id *, struct ibv_pd *, struct ibv_srq_init_attr *)`.
///
/// # Safety
///
/// `attr` must be readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    let create = |b: &mut ibv_srq_init_attr| {
        let mut ex = ibv_srq_init_attr_ex::from_base(b);
        ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
        // An XRC receive id gets an XRC SRQ, as in librdmacm.
        // SAFETY: registry-checked; the field is read only of a live id.
        let xrc = unsafe { super::event::id_obj(id) }.is_some()
            && unsafe { (*id).qp_type } == IBV_QPT_XRC_RECV;
        ex.srq_type = if xrc { IBV_SRQT_XRC } else { IBV_SRQT_BASIC };
        ex.pd = pd;
        // SAFETY: `ex` is a local.
        let r = unsafe { __softrdma_rdma_create_srq_ex(id, &mut ex) };
        // What the call filled in: the actual sizes.
        *b = ex.base();
        r
    };
    // SAFETY: NULL or valid for reads and writes, per the contract.
    unsafe { with_struct(attr, ret::neg, create) }
}

/// `void rdma_destroy_srq(struct rdma_cm_id *)`.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_destroy_srq(id: *mut rdma_cm_id) {
    with_id(
        id,
        |_| (),
        |obj| {
            // SAFETY: live id.
            let srq = unsafe { (*id).srq };
            if !srq.is_null() {
                // SAFETY: the id's SRQ.
                unsafe {
                    ibv_destroy_srq(srq);
                    (*id).srq = core::ptr::null_mut();
                }
                obj.state().own_srq = false;
            }
        },
    )
}
