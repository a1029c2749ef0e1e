//! CM ids: create/destroy, addresses, listen, connect/accept/reject,
//! disconnect, establish, options.

use super::event::{attach_device, complete, move_to_channel, set_route, with_id};
use super::objects::{self as co, Chan, Id, IdState};
use super::sock;
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};
use crate::verbs::objects::{self as o, Kind};
use core::ffi::{c_int, c_void};
use softrdma_engine::Engine;
use softrdma_engine::cm_proto::{CmError, ConnParam, IdHandle, PortSpace};
use softrdma_engine::transport::QpType;
use std::net::IpAddr;
use std::sync::Arc;

/// READ/atomic depth the device offers (what RDMA_MAX_RESP_RES and
/// RDMA_MAX_INIT_DEPTH resolve to, as librdmacm takes them from
/// `max_qp_rd_atom` / `max_qp_init_rd_atom`): 128, as rxe.
const MAX_RD_ATOMIC: u8 = 128;

/// 0, or -1 with the errno of a CM error.
pub(crate) fn cm_ret(r: Result<(), CmError>) -> c_int {
    cm_then(r, || 0)
}

/// `then()`, or -1 with the errno of a CM error.
fn cm_then(r: Result<(), CmError>, then: impl FnOnce() -> c_int) -> c_int {
    match r {
        Ok(()) => then(),
        Err(e) => ret::neg(e.errno()),
    }
}

/// The engine and engine-side id of a C id, created on first need with `hint`
/// naming the device address if the device does not exist yet.
pub(crate) fn ensure(
    id: *mut rdma_cm_id,
    obj: &Id,
    hint: Option<IpAddr>,
) -> Result<(Arc<Engine>, IdHandle), c_int> {
    let mut st = obj.state();
    if let (Some(e), Some(h)) = (&st.engine, st.h) {
        return Ok((e.clone(), h));
    }
    let engine = Engine::global_at(hint).map_err(|e| {
        eprintln!("{e}");
        libc::ENODEV
    })?;
    let ps = PortSpace::from_value(obj.id.ps as u16).ok_or(libc::EINVAL)?;
    let qt = match obj.id.qp_type {
        IBV_QPT_UD => QpType::Ud,
        IBV_QPT_UC => QpType::Uc,
        _ => QpType::Rc,
    };
    let h = engine.cm_create_id(Some(st.chan.clone()), ps, qt);
    co::map_id(h, Some(id as usize));
    st.engine = Some(engine.clone());
    st.h = Some(h);
    Ok((engine, h))
}

/// `f` on the engine and engine-side id of a C id ([`ensure`]); -1 with
/// errno if there is no device.
pub(crate) fn with_engine(
    id: *mut rdma_cm_id,
    obj: &Id,
    hint: Option<IpAddr>,
    f: impl FnOnce(Arc<Engine>, IdHandle) -> c_int,
) -> c_int {
    match ensure(id, obj, hint) {
        Ok((engine, h)) => f(engine, h),
        Err(e) => ret::neg(e),
    }
}

/// The frame of the calls that act on a C id's engine-side id at once
/// ([`with_id`], then [`with_engine`] on the device it has or the default).
fn on_engine(id: *mut rdma_cm_id, f: impl FnOnce(&Id, Arc<Engine>, IdHandle) -> c_int) -> c_int {
    with_id(id, ret::neg, |obj| {
        with_engine(id, obj, None, |engine, h| f(obj, engine, h))
    })
}

/// The local address the kernel routes from toward `dst` (no packet is sent).
fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let any: IpAddr = if dst.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let s = softrdma_engine::kernel_udp_socket((any, 0).into()).ok()?;
    s.connect((dst, 4791)).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// `int rdma_create_id(channel, struct rdma_cm_id **id, void *context, enum rdma_port_space ps)`.
/// A NULL channel makes a synchronous id (its calls block until their event).
///
/// # Safety
///
/// `id` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    ffi_guard(
        || ret::neg(libc::EIO),
        || {
            let qp_type = match ps {
                RDMA_PS_TCP | RDMA_PS_IB => IBV_QPT_RC,
                RDMA_PS_UDP | RDMA_PS_IPOIB => IBV_QPT_UD,
                _ => return ret::neg(libc::EINVAL),
            };
            // SAFETY: forwarded contract.
            unsafe { create_id(channel, id, context, ps, qp_type) }
        },
    )
}

/// Shared by `rdma_create_id` and `rdma_create_ep`.
///
/// # Safety
///
/// `id` must be writable.
pub(crate) unsafe fn create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
    qp_type: ibv_qp_type,
) -> c_int {
    if id.is_null() {
        return ret::neg(libc::EINVAL);
    }
    let (chan_ptr, sync) = if channel.is_null() {
        let c = super::event::__softrdma_rdma_create_event_channel();
        if c.is_null() {
            return -1;
        }
        (c, true)
    } else {
        (channel, false)
    };
    // SAFETY: registry-checked.
    let Some(chan) = (unsafe { o::obj::<Chan>(chan_ptr.cast(), Kind::CmChannel) }) else {
        return ret::neg(libc::EINVAL);
    };
    let mut c = rdma_cm_id::zeroed();
    c.channel = chan_ptr;
    c.context = context;
    c.ps = ps;
    c.qp_type = qp_type;
    c.port_num = 1;
    let obj = Id::new(c, IdState::new(None, chan.inner.clone(), sync));
    let p = o::publish(obj, Kind::CmId);
    // SAFETY: non-NULL, writable per the contract.
    unsafe { id.write(p.cast()) };
    0
}

/// `int rdma_destroy_id(struct rdma_cm_id *)`.
///
/// # Safety
///
/// `id` must not be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    with_id(id, ret::neg, |obj| {
        let (engine, h, sync) = {
            let st = obj.state();
            (st.engine.clone(), st.h, st.sync)
        };
        if let (Some(e), Some(h)) = (engine, h) {
            super::mcast::leave_all(obj, &e);
            e.cm_destroy_id(h);
            co::map_id(h, None);
        }
        // SAFETY: live id.
        let ev = unsafe { (*id).event };
        if !ev.is_null() {
            // SAFETY: the id's own event.
            unsafe { super::event::free_event(ev) };
        }
        // Events already handed out keep pointing at this id (and another
        // thread may be between get and ack): wait like librdmacm.
        obj.wait_acked();
        // SAFETY: live id.
        let chan = unsafe { (*id).channel };
        // SAFETY: the registry confirmed a live Id from `publish`.
        unsafe { o::retire(id.cast::<Id>()) };
        if sync {
            // SAFETY: the private channel this id created.
            unsafe { super::event::__softrdma_rdma_destroy_event_channel(chan) };
        }
        0
    })
}

/// `int rdma_bind_addr(struct rdma_cm_id *, struct sockaddr *)`.
///
/// # Safety
///
/// `addr` must be a valid socket address.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_bind_addr(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    with_id(id, ret::neg, |obj| {
        // SAFETY: forwarded contract.
        let Some(a) = (unsafe { sock::from_c(addr) }) else {
            return ret::neg(libc::EAFNOSUPPORT);
        };
        with_engine(id, obj, Some(a.ip()), |engine, h| {
            match engine.cm_bind(h, a) {
                Ok(local) => {
                    set_route(id, local, None);
                    if !a.ip().is_unspecified() {
                        attach_device(id, &engine);
                    }
                    0
                }
                Err(e) => ret::neg(e.errno()),
            }
        })
    })
}

/// `int rdma_resolve_addr(id, src, dst, timeout_ms)`: ADDR_RESOLVED (or
/// ADDR_ERROR) follows on the id's channel.
///
/// # Safety
///
/// `src` (may be NULL) and `dst` must be valid socket addresses.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    with_id(id, ret::neg, |obj| {
        // SAFETY: forwarded contract.
        let (src, dst) = unsafe { (sock::from_c(src_addr), sock::from_c(dst_addr)) };
        let Some(dst) = dst else {
            return ret::neg(libc::EINVAL);
        };
        // No source address: like the kernel's rdma_cm, take the one the
        // routing table picks toward `dst` (a loopback `dst` keeps the
        // default 127.0.0.N device, so processes on one host stay distinct).
        let hint = src
            .map(|s| s.ip())
            .or_else(|| route_source(dst.ip()).filter(|_| !dst.ip().is_loopback()));
        with_engine(id, obj, hint, |engine, h| {
            let bound = engine.cm_addrs(h).0.is_some();
            let src = if bound { None } else { src };
            cm_then(engine.cm_resolve_addr(h, src, dst), || {
                set_route(id, None, Some(dst));
                complete(id, obj)
            })
        })
    })
}

/// `int rdma_resolve_route(id, timeout_ms)`: ROUTE_RESOLVED follows.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_resolve_route(
    id: *mut rdma_cm_id,
    _timeout_ms: c_int,
) -> c_int {
    on_engine(id, |obj, engine, h| {
        cm_then(engine.cm_resolve_route(h), || complete(id, obj))
    })
}

/// `int rdma_listen(struct rdma_cm_id *, int backlog)`.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    on_engine(id, |_, engine, h| match engine.cm_listen(h) {
        Ok(local) => {
            set_route(id, local, None);
            0
        }
        Err(e) => ret::neg(e.errno()),
    })
}

fn clamp_rd(v: u8) -> u8 {
    v.min(MAX_RD_ATOMIC)
}

/// Reads a `struct rdma_conn_param` (NULL: librdmacm's defaults).
///
/// # Safety
///
/// `p` must be NULL or readable, with readable private data.
unsafe fn read_conn_param(
    p: *const rdma_conn_param,
    qp_num: u32,
    defaults: Option<&ConnParam>,
) -> ConnParam {
    if p.is_null() {
        let (resp, init) = match defaults {
            // Passive: what the request offers, within the device's limits.
            Some(peer) => (
                clamp_rd(peer.initiator_depth),
                clamp_rd(peer.responder_resources),
            ),
            None => (MAX_RD_ATOMIC, MAX_RD_ATOMIC),
        };
        return ConnParam {
            private_data: Vec::new(),
            responder_resources: resp,
            initiator_depth: init,
            // librdmacm leaves flow_control 0 without a conn_param (the REP
            // of Linux's rdma_cm then says "no end-to-end flow control").
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            qp_num,
        };
    }
    // SAFETY: non-NULL, readable per the contract.
    let c = unsafe { &*p };
    let pd = if c.private_data.is_null() || c.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: the application passes `private_data_len` readable bytes.
        unsafe {
            core::slice::from_raw_parts(
                c.private_data.cast::<u8>(),
                usize::from(c.private_data_len),
            )
        }
        .to_vec()
    };
    let resp = if c.responder_resources == RDMA_MAX_RESP_RES {
        defaults.map_or(MAX_RD_ATOMIC, |d| clamp_rd(d.initiator_depth))
    } else {
        clamp_rd(c.responder_resources)
    };
    let init = if c.initiator_depth == RDMA_MAX_INIT_DEPTH {
        defaults.map_or(MAX_RD_ATOMIC, |d| clamp_rd(d.responder_resources))
    } else {
        clamp_rd(c.initiator_depth)
    };
    ConnParam {
        private_data: pd,
        responder_resources: resp,
        initiator_depth: init,
        flow_control: c.flow_control != 0,
        retry_count: c.retry_count.min(7),
        rnr_retry_count: c.rnr_retry_count.min(7),
        srq: c.srq != 0,
        qp_num: if qp_num != 0 { qp_num } else { c.qp_num },
    }
}

fn qp_num_of(id: *mut rdma_cm_id) -> u32 {
    // SAFETY: `id` is live (callers checked); its QP, if any, is one of ours.
    let qp = unsafe { (*id).qp };
    if qp.is_null() {
        0
    } else {
        // SAFETY: a QP this library created.
        unsafe { (*qp).qp_num }
    }
}

/// `rdma_connect` (`accept` false) and `rdma_accept`: the parameters a NULL
/// `conn_param` leaves out are librdmacm's defaults (when accepting, within
/// what the request offered).
///
/// # Safety
///
/// `conn_param` must be NULL or readable.
unsafe fn connect(id: *mut rdma_cm_id, conn_param: *const rdma_conn_param, accept: bool) -> c_int {
    on_engine(id, |obj, engine, h| {
        let peer = if accept {
            engine.cm_peer_param(h)
        } else {
            None
        };
        // SAFETY: forwarded contract.
        let p = unsafe { read_conn_param(conn_param, qp_num_of(id), peer.as_ref()) };
        let r = if accept {
            engine.cm_accept(h, &p)
        } else {
            engine.cm_connect(h, &p)
        };
        if let Err(e) = r {
            if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                let call = if accept {
                    "rdma_accept"
                } else {
                    "rdma_connect"
                };
                eprintln!("softrdma: {call}: {e}");
            }
            return ret::neg(e.errno());
        }
        // SAFETY: live id.
        if accept && unsafe { (*id).qp_type } == IBV_QPT_UD {
            // UD accepts have no ESTABLISHED event: drop the request event.
            // SAFETY: live id; its event is ours.
            let ev = unsafe { (*id).event };
            if obj.state().sync && !ev.is_null() {
                // SAFETY: as above.
                unsafe {
                    super::event::free_event(ev);
                    (*id).event = core::ptr::null_mut();
                }
            }
            return 0;
        }
        complete(id, obj)
    })
}

/// `int rdma_connect(struct rdma_cm_id *, struct rdma_conn_param *)`.
///
/// # Safety
///
/// `conn_param` must be NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { connect(id, conn_param, false) }
}

/// `int rdma_accept(struct rdma_cm_id *, struct rdma_conn_param *)`.
///
/// # Safety
///
/// `conn_param` must be NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { connect(id, conn_param, true) }
}

/// `rdma_reject` and `rdma_reject_ece`.
fn reject(id: *mut rdma_cm_id, private_data: *const c_void, len: u8) -> c_int {
    on_engine(id, |_, engine, h| {
        let pd = if private_data.is_null() || len == 0 {
            Vec::new()
        } else {
            // SAFETY: the application passes `len` readable bytes.
            unsafe { core::slice::from_raw_parts(private_data.cast::<u8>(), usize::from(len)) }
                .to_vec()
        };
        cm_ret(engine.cm_reject(h, &pd))
    })
}

/// `int rdma_reject(struct rdma_cm_id *, const void *private_data, uint8_t len)`.
///
/// # Safety
///
/// `private_data` must be NULL or `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    len: u8,
) -> c_int {
    reject(id, private_data, len)
}

/// `int rdma_reject_ece(...)`: as `rdma_reject` (no ECE).
///
/// # Safety
///
/// As `rdma_reject`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_reject_ece(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    len: u8,
) -> c_int {
    reject(id, private_data, len)
}

/// `int rdma_disconnect(struct rdma_cm_id *)`: the QP goes to ERR (its
/// receives flush), a DREQ goes out; DISCONNECTED follows.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    on_engine(id, |obj, engine, h| {
        cm_then(engine.cm_disconnect(h), || complete(id, obj))
    })
}

/// `int rdma_establish(struct rdma_cm_id *)`: after CONNECT_RESPONSE on an id
/// without a QP, sends the RTU.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_establish(id: *mut rdma_cm_id) -> c_int {
    with_id(id, ret::neg, |obj| {
        // SAFETY: live id.
        if !unsafe { (*id).qp }.is_null() {
            return ret::neg(libc::EINVAL);
        }
        with_engine(id, obj, None, |engine, h| cm_ret(engine.cm_establish(h)))
    })
}

/// `int rdma_migrate_id(struct rdma_cm_id *, struct rdma_event_channel *)`.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    with_id(id, ret::neg, |obj| {
        // SAFETY: registry-checked.
        let Some(ch) = (unsafe { o::obj::<Chan>(channel.cast(), Kind::CmChannel) }) else {
            return ret::neg(libc::EINVAL);
        };
        move_to_channel(id, obj, channel, ch, false);
        0
    })
}

/// `int rdma_set_option(id, level, optname, optval, optlen)`: ACK_TIMEOUT (a
/// `u8`) sets the local ACK timeout of the id's QP when the CM connects it,
/// as the kernel's CM does; TOS, REUSEADDR and AFONLY are accepted.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    with_id(id, ret::neg, |obj| match (level, optname) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
            if optval.is_null() || optlen != 1 {
                return ret::neg(libc::EINVAL);
            }
            // SAFETY: non-NULL, one readable byte per the contract (checked length).
            let t = unsafe { *optval.cast::<u8>() };
            with_engine(id, obj, None, |engine, h| {
                match engine.cm_set_ack_timeout(h, t) {
                    Ok(()) => 0,
                    Err(_) => ret::neg(libc::EINVAL),
                }
            })
        }
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS | RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY) => {
            0
        }
        (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => 0,
        _ => ret::neg(libc::ENOSYS),
    })
}

/// `int rdma_notify(struct rdma_cm_id *, enum ibv_event_type)`: nothing to do.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_notify(
    id: *mut rdma_cm_id,
    _event: ibv_event_type,
) -> c_int {
    with_id(id, ret::neg, |_| 0)
}

/// `int rdma_init_qp_attr(id, struct ibv_qp_attr *, int *mask)`: the attributes
/// for the state in `qp_attr->qp_state` (INIT, RTR, RTS), as librdmacm fills them.
///
/// # Safety
///
/// `qp_attr` and `qp_attr_mask` must be readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    use softrdma_engine::transport::QpAttrMask as M;
    with_id(id, ret::neg, |obj| {
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return ret::neg(libc::EINVAL);
        }
        with_engine(id, obj, None, |engine, h| {
            // SAFETY: non-NULL, readable and writable per the contract.
            let a = unsafe { &mut *qp_attr };
            // SAFETY: live id.
            let ud = unsafe { (*id).qp_type } == IBV_QPT_UD;
            let mut mask = M::STATE;
            match a.qp_state {
                IBV_QPS_INIT => {
                    a.pkey_index = 0;
                    a.port_num = 1;
                    mask = mask | M::PKEY_INDEX | M::PORT;
                    if ud {
                        a.qkey = RDMA_UDP_QKEY;
                        mask = mask | M::QKEY;
                    } else {
                        a.qp_access_flags = 0;
                        mask = mask | M::ACCESS_FLAGS;
                    }
                }
                IBV_QPS_RTR | IBV_QPS_RTS if ud => {
                    if a.qp_state == IBV_QPS_RTS {
                        a.sq_psn = 0;
                        mask = mask | M::SQ_PSN;
                    }
                }
                IBV_QPS_RTR | IBV_QPS_RTS => {
                    let Some(p) = engine.cm_qp_params(h) else {
                        return ret::neg(libc::EINVAL);
                    };
                    if a.qp_state == IBV_QPS_RTR {
                        a.ah_attr = softrdma::rdma_core_conv::av_to_c(&p.av);
                        a.path_mtu = p.mtu.as_u32();
                        a.dest_qp_num = p.remote_qpn;
                        a.rq_psn = p.rq_psn;
                        a.max_dest_rd_atomic = p.max_dest_rd_atomic;
                        a.min_rnr_timer = p.min_rnr_timer;
                        a.qp_access_flags = 0x2
                            | if p.max_dest_rd_atomic > 0 {
                                0x4 | 0x8
                            } else {
                                0
                            };
                        mask = mask
                            | M::AV
                            | M::PATH_MTU
                            | M::DEST_QPN
                            | M::RQ_PSN
                            | M::MAX_DEST_RD_ATOMIC
                            | M::MIN_RNR_TIMER
                            | M::ACCESS_FLAGS;
                    } else {
                        a.sq_psn = p.sq_psn;
                        a.timeout = p.timeout;
                        a.retry_cnt = p.retry_cnt;
                        a.rnr_retry = p.rnr_retry;
                        a.max_rd_atomic = p.max_rd_atomic;
                        mask = mask
                            | M::SQ_PSN
                            | M::TIMEOUT
                            | M::RETRY_CNT
                            | M::RNR_RETRY
                            | M::MAX_QP_RD_ATOMIC;
                    }
                }
                _ => return ret::neg(libc::EINVAL),
            }
            // SAFETY: non-NULL, writable per the contract.
            unsafe { qp_attr_mask.write(mask.0 as c_int) };
            0
        })
    })
}

/// `rdma_get_src_port` (`src`) and `rdma_get_dst_port`: 0 for anything but a live id.
fn port_of(id: *mut rdma_cm_id, src: bool) -> u16 {
    with_id(
        id,
        |_| 0,
        |_| {
            // SAFETY: live id; the route holds socket addresses this library wrote.
            let a = unsafe {
                if src {
                    sock::from_c(&raw const (*id).route.addr.src.src_addr)
                } else {
                    sock::from_c(&raw const (*id).route.addr.dst.dst_addr)
                }
            };
            a.map_or(0, |a| a.port().to_be())
        },
    )
}

/// `__be16 rdma_get_src_port(struct rdma_cm_id *)`.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    port_of(id, true)
}

/// `__be16 rdma_get_dst_port(struct rdma_cm_id *)`.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    port_of(id, false)
}

/// `rdma_set_local_ece` / `rdma_get_remote_ece`: ECE is not offered.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_set_local_ece(
    _id: *mut rdma_cm_id,
    _ece: *mut ibv_ece,
) -> c_int {
    ret::neg(libc::EOPNOTSUPP)
}

/// See [`__softrdma_rdma_set_local_ece`].
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_get_remote_ece(
    _id: *mut rdma_cm_id,
    _ece: *mut ibv_ece,
) -> c_int {
    ret::neg(libc::EOPNOTSUPP)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rdma_accept(id, NULL)` (rping's server) offers what librdmacm does:
    /// no end-to-end flow control, retry counts 7 (rxe's REP says the same).
    #[test]
    fn null_conn_param_matches_librdmacm() {
        // SAFETY: a NULL conn_param is never dereferenced.
        let p = unsafe { read_conn_param(core::ptr::null(), 5, None) };
        assert!(!p.flow_control);
        assert_eq!((p.retry_count, p.rnr_retry_count, p.qp_num), (7, 7, 5));
    }

    /// `rdma_resolve_addr` without a source takes the routed one (rping -c
    /// toward an rxe host needs no SOFTRDMA_ADDR); loopback routes to itself.
    #[test]
    fn route_source_is_the_routed_address() {
        let lo: IpAddr = std::net::Ipv4Addr::LOCALHOST.into();
        assert_eq!(route_source(lo), Some(lo));
    }
}
