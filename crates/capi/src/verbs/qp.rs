//! Queue pairs: create (plain and extended), modify, query, destroy.

use super::conv::{cap_from_c, cap_to_c, qp_attr_from_c, qp_attr_to_c};
use super::objects::{self as o, Cq, Kind, Pd, Qp, Srq};
use crate::ffi::*;
use crate::guard::{ret, with_struct};
use core::ffi::c_int;
use softrdma_engine::transport::{QpAttrMask, QpInitAttr, QpType};

/// Extended-context slots for QPs.
pub(crate) fn install_vctx_ops(v: &mut verbs_context) {
    v.create_qp_ex = Some(vctx_create_qp_ex);
}

fn qp_type(t: ibv_qp_type) -> Result<QpType, c_int> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UC => Ok(QpType::Uc),
        IBV_QPT_UD => Ok(QpType::Ud),
        IBV_QPT_XRC_SEND => Ok(QpType::XrcSend),
        // An XRC receive QP belongs to a domain, not a PD (`xrc.rs`).
        IBV_QPT_XRC_RECV => Err(libc::EINVAL),
        // Raw packet and driver QPs need hardware or kernel help.
        IBV_QPT_RAW_PACKET | IBV_QPT_DRIVER => Err(libc::EOPNOTSUPP),
        _ => Err(libc::EINVAL),
    }
}

/// Creates a QP in `pd` from the fields common to `ibv_qp_init_attr` and
/// `_ex`, writing the actual capacities back into `a.cap`. With `send_ops`
/// the QP offers the extended send API (`ibv_qp_to_qp_ex`, `qp_ex.rs`).
fn create(
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
    block_self_mcast: bool,
    send_ops: Option<u64>,
) -> *mut ibv_qp {
    // An XRC send QP receives nothing: its receive CQ may be NULL.
    let a_recv_cq = a.recv_cq;
    let recv_cq = if a.qp_type == IBV_QPT_XRC_SEND && a.recv_cq.is_null() {
        a.send_cq
    } else {
        a.recv_cq
    };
    let (qp_context, send_cq, srq, t, sq_sig_all) =
        (a.qp_context, a.send_cq, a.srq, a.qp_type, a.sq_sig_all);
    let cap = &mut a.cap;
    // SAFETY: registry-checked.
    let Some(p) = (unsafe { o::obj::<Pd>(pd.cast(), Kind::Pd) }) else {
        return ret::null(libc::EINVAL);
    };
    let qt = match qp_type(t) {
        Ok(q) => q,
        Err(e) => return ret::null(e),
    };
    // SAFETY: registry-checked.
    let (Some(scq), Some(rcq)) = (unsafe { o::obj::<Cq>(send_cq.cast(), Kind::Cq) }, unsafe {
        o::obj::<Cq>(recv_cq.cast(), Kind::Cq)
    }) else {
        return ret::null(libc::EINVAL);
    };
    let s = if srq.is_null() {
        None
    } else {
        // SAFETY: registry-checked.
        match unsafe { o::obj::<Srq>(srq.cast(), Kind::Srq) } {
            Some(s) => Some(s.h),
            None => return ret::null(libc::EINVAL),
        }
    };
    let init = QpInitAttr {
        qp_type: qt,
        pd: p.h,
        send_cq: scq.h,
        recv_cq: rcq.h,
        srq: s,
        cap: cap_from_c(cap),
        sq_sig_all: sq_sig_all != 0,
    };
    let (qpn, actual) = match p.engine.create_qp(&init) {
        Ok(v) => v,
        Err(e) => return ret::null(e.errno()),
    };
    // rdma-core writes the actual capacities back into the caller's attributes.
    *cap = cap_to_c(&actual);
    let mut qp = ibv_qp_ex::zeroed();
    let b = &mut qp.qp_base;
    b.context = p.pd.context;
    b.qp_context = qp_context;
    b.pd = pd;
    b.send_cq = send_cq;
    b.recv_cq = a_recv_cq;
    b.srq = srq;
    b.handle = qpn;
    b.qp_num = qpn;
    b.state = IBV_QPS_RESET;
    b.qp_type = t;
    let obj = o::publish(
        Qp {
            qp,
            engine: p.engine.clone(),
            qpn,
            qp_type: qt,
            sq_sig_all: sq_sig_all != 0,
            ex: send_ops.is_some(),
            block_self_mcast,
            opened: false,
            max_sge: (actual.max_send_sge, actual.max_recv_sge),
            batch: Default::default(),
            express: p.engine.express(qpn),
        },
        Kind::Qp,
    );
    if let Some(ops) = send_ops {
        // SAFETY: just created, not yet visible to the application.
        unsafe { super::qp_ex::install(&raw mut (*obj).qp, ops) };
    }
    o::map_qp(qpn, Some(obj as usize));
    obj.cast()
}

/// `struct ibv_qp *ibv_create_qp(struct ibv_pd *, struct ibv_qp_init_attr *)`;
/// writes the actual capacities back into `init_attr->cap`.
///
/// # Safety
///
/// `qp_init_attr` must be valid for reads and writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: NULL or valid for reads and writes, per the contract.
    unsafe { with_struct(qp_init_attr, ret::null, |a| create(pd, a, false, None)) }
}

/// `verbs_context::create_qp_ex` (reached by the inline `ibv_create_qp_ex`).
unsafe extern "C" fn vctx_create_qp_ex(
    _context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: NULL or valid for reads and writes, per the caller's contract.
    unsafe { with_struct(attr, ret::null, create_ex) }
}

/// Creates a QP from `ibv_qp_init_attr_ex` (the PD and creation flags, send
/// operations only), writing the actual capacities back.
fn create_ex(a: &mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    if a.qp_type == IBV_QPT_XRC_RECV {
        return super::xrc::create_recv_qp(a);
    }
    let known =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.comp_mask & !known != 0 {
        // RSS, TSO: not offered.
        return ret::null(libc::EOPNOTSUPP);
    }
    let send_ops = (a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
    if let Some(ops) = send_ops
        && ops & !super::qp_ex::supported_ops(a.qp_type) != 0
    {
        return ret::null(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0
        && a.create_flags & !IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0
    {
        return ret::null(libc::EOPNOTSUPP);
    }
    let mut basic = a.base();
    let block = a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0
        && a.create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0;
    let qp = create(a.pd, &mut basic, block, send_ops);
    a.cap = basic.cap;
    qp
}

/// `int ibv_modify_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask)`.
///
/// # Safety
///
/// `attr` must be valid for reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    o::with_obj(qp.cast(), Kind::Qp, ret::pos, |q: &Qp| {
        if attr.is_null() {
            return ret::pos(libc::EINVAL);
        }
        // SAFETY: non-NULL, readable per the contract.
        let a = match qp_attr_from_c(unsafe { &*attr }, attr_mask as u32) {
            Ok(a) => a,
            Err(e) => return ret::pos(e),
        };
        let qpn = q.qpn;
        let r = q
            .engine
            .modify_qp_state(qpn, &a, QpAttrMask(attr_mask as u32));
        match r {
            Ok(state) => {
                // SAFETY: live QP; `state` is a plain field applications may read.
                unsafe { (*qp).state = state.as_u32() };
                0
            }
            Err(e) => {
                if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                    eprintln!("softrdma: ibv_modify_qp: {e}");
                }
                ret::pos(e.errno())
            }
        }
    })
}

/// `int ibv_query_qp(qp, attr, attr_mask, init_attr)`: fills everything.
///
/// # Safety
///
/// `attr` and `init_attr` must be valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    o::with_obj(qp.cast(), Kind::Qp, ret::pos, |q: &Qp| {
        if attr.is_null() || init_attr.is_null() {
            return ret::pos(libc::EINVAL);
        }
        let qpn = q.qpn;
        let (a, _) = match q.engine.query_qp(qpn) {
            Ok(v) => v,
            Err(e) => return ret::pos(e.errno()),
        };
        let b = &q.qp.qp_base;
        let init = ibv_qp_init_attr {
            qp_context: b.qp_context,
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: b.srq,
            cap: cap_to_c(&a.cap),
            qp_type: b.qp_type,
            sq_sig_all: c_int::from(q.sq_sig_all),
        };
        // SAFETY: non-NULL outputs, writable per the contract.
        unsafe {
            attr.write(qp_attr_to_c(&a));
            init_attr.write(init);
        }
        0
    })
}

/// `int ibv_destroy_qp(struct ibv_qp *)`.
///
/// # Safety
///
/// `qp` must not be used after a successful call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    o::destroy(qp.cast(), Kind::Qp, |q: &Qp| {
        let qpn = q.qpn;
        if q.opened {
            super::xrc::close_opened(qpn);
            return Ok(());
        }
        super::xrc::check_not_opened(qpn)?;
        q.engine.destroy_qp(qpn)?;
        o::map_qp(qpn, None);
        Ok(())
    })
}

/// `struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *)`: NULL unless the QP
/// was created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` (as in rdma-core).
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // Not a live QP: NULL, with errno untouched.
    o::with_obj(
        qp.cast(),
        Kind::Qp,
        |_| core::ptr::null_mut(),
        |q: &Qp| {
            if q.ex {
                qp.cast()
            } else {
                core::ptr::null_mut()
            }
        },
    )
}

/// `ibv_attach_mcast` (`attach`) and `ibv_detach_mcast`.
fn mcast(qp: *mut ibv_qp, gid: *const ibv_gid, attach: bool) -> c_int {
    o::with_obj(qp.cast(), Kind::Qp, ret::pos, |q: &Qp| {
        if gid.is_null() {
            return ret::pos(libc::EINVAL);
        }
        // SAFETY: non-NULL, readable per the contract.
        let group = softrdma_wire::ip::from_gid(unsafe { &*gid }.raw());
        let r = if attach {
            q.engine.attach_mcast(q.qpn, group, q.block_self_mcast)
        } else {
            q.engine.detach_mcast(q.qpn, group)
        };
        match r {
            Ok(()) => 0,
            Err(e) => ret::pos(e.errno()),
        }
    })
}

/// `int ibv_attach_mcast(struct ibv_qp *, const union ibv_gid *, uint16_t lid)`:
/// the UD QP receives what is sent to the group (an IPv4-mapped or IPv6
/// multicast GID) by any process on the host or the link.
///
/// # Safety
///
/// `gid` must be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    mcast(qp, gid, true)
}

/// `int ibv_detach_mcast(struct ibv_qp *, const union ibv_gid *, uint16_t lid)`.
///
/// # Safety
///
/// `gid` must be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    mcast(qp, gid, false)
}
