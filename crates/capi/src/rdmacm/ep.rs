//! Address information and endpoints: `rdma_getaddrinfo`, `rdma_create_ep`,
//! `rdma_get_request`, `rdma_destroy_ep`.

use super::event::{complete, id_obj, move_to_channel, next_event, with_id};
use super::sock;
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};
use crate::verbs::objects::{self as o, Kind};
use core::ffi::{c_char, c_int};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// An `rdma_addrinfo` with the addresses it points to.
#[repr(C)]
struct AddrInfo {
    ai: rdma_addrinfo,
    src: libc::sockaddr_storage,
    dst: libc::sockaddr_storage,
}

/// Resolves `node`/`service` with the C library (names and numbers).
///
/// # Safety
///
/// `node` and `service` must be NULL or NUL-terminated strings.
unsafe fn lookup(
    node: *const c_char,
    service: *const c_char,
    family: c_int,
    numeric: bool,
) -> Result<SocketAddr, c_int> {
    // SAFETY: zeroed addrinfo is a valid "no hints" value.
    let mut hints: libc::addrinfo = unsafe { core::mem::zeroed() };
    hints.ai_family = family;
    hints.ai_socktype = libc::SOCK_STREAM;
    if numeric {
        hints.ai_flags |= libc::AI_NUMERICHOST;
    }
    let mut res: *mut libc::addrinfo = core::ptr::null_mut();
    // SAFETY: valid strings (or NULL) per the contract, hints and res are locals.
    let r = unsafe { libc::getaddrinfo(node, service, &hints, &mut res) };
    if r != 0 {
        return Err(r);
    }
    // SAFETY: getaddrinfo succeeded, so `res` is a non-empty list.
    let a = unsafe { sock::from_c((*res).ai_addr) };
    // SAFETY: frees the list getaddrinfo returned.
    unsafe { libc::freeaddrinfo(res) };
    a.ok_or(libc::EAI_FAMILY)
}

/// `int rdma_getaddrinfo(node, service, hints, struct rdma_addrinfo **res)`:
/// 0 or a `getaddrinfo` error code.
///
/// # Safety
///
/// Strings NUL-terminated or NULL; `hints` NULL or readable; `res` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    ffi_guard(
        || libc::EAI_SYSTEM,
        || {
            if res.is_null() {
                return libc::EAI_NONAME;
            }
            let h = if hints.is_null() {
                rdma_addrinfo::zeroed()
            } else {
                // SAFETY: non-NULL hints are readable per the contract.
                unsafe { *hints }
            };
            // SAFETY: the hints' addresses are NULL or readable per the contract.
            let (hint_src, hint_dst) =
                unsafe { (sock::from_c(h.ai_src_addr), sock::from_c(h.ai_dst_addr)) };
            let passive = h.ai_flags & RAI_PASSIVE != 0;
            let family = if h.ai_family == 0 {
                libc::AF_UNSPEC
            } else {
                h.ai_family
            };
            // (source, destination) of the answer.
            let (src, dst) = if node.is_null() && service.is_null() {
                // librdmacm: with neither a node nor a service the answer is
                // the hints' own addresses (libfabric's verbs provider connects
                // so, to the raw address its peer sent it).
                if hint_src.is_none() && hint_dst.is_none() {
                    return libc::EAI_NONAME;
                }
                (hint_src, hint_dst)
            } else {
                let addr = if node.is_null() {
                    let port = if service.is_null() {
                        0
                    } else {
                        // SAFETY: NUL-terminated per the contract.
                        match unsafe { std::ffi::CStr::from_ptr(service) }
                            .to_str()
                            .ok()
                            .and_then(|s| s.parse::<u16>().ok())
                        {
                            Some(p) => p,
                            None => return libc::EAI_SERVICE,
                        }
                    };
                    let any = if family == libc::AF_INET6 {
                        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
                    } else {
                        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
                    };
                    if passive {
                        SocketAddr::new(any, port)
                    } else {
                        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
                    }
                } else {
                    // SAFETY: forwarded contract.
                    match unsafe {
                        lookup(node, service, family, h.ai_flags & RAI_NUMERICHOST != 0)
                    } {
                        Ok(a) => a,
                        Err(e) => return e,
                    }
                };
                if passive {
                    (Some(addr), None)
                } else {
                    (hint_src, Some(addr))
                }
            };
            let ps = if h.ai_port_space != 0 {
                h.ai_port_space
            } else if h.ai_qp_type == IBV_QPT_UD as c_int {
                RDMA_PS_UDP as c_int
            } else {
                RDMA_PS_TCP as c_int
            };
            let qp_type = if h.ai_qp_type != 0 {
                h.ai_qp_type
            } else if ps == RDMA_PS_UDP as c_int || ps == RDMA_PS_IPOIB as c_int {
                IBV_QPT_UD as c_int
            } else {
                IBV_QPT_RC as c_int
            };
            let any = dst
                .or(src)
                .unwrap_or(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0));
            let mut b = Box::new(AddrInfo {
                ai: rdma_addrinfo::zeroed(),
                src: sock::to_storage(src.unwrap_or(any)),
                dst: sock::to_storage(dst.unwrap_or(any)),
            });
            b.ai.ai_flags = h.ai_flags;
            b.ai.ai_family = if any.is_ipv4() {
                libc::AF_INET
            } else {
                libc::AF_INET6
            };
            b.ai.ai_qp_type = qp_type;
            b.ai.ai_port_space = ps;
            if let Some(s) = src {
                b.ai.ai_src_len = sock::len_of(s);
                b.ai.ai_src_addr = (&raw mut b.src).cast();
            }
            if let Some(d) = dst {
                b.ai.ai_dst_len = sock::len_of(d);
                b.ai.ai_dst_addr = (&raw mut b.dst).cast();
            }
            let p = Box::into_raw(b);
            o::register(p as usize, Kind::Ah);
            // SAFETY: non-NULL, writable per the contract.
            unsafe { res.write(p.cast()) };
            0
        },
    )
}

/// `void rdma_freeaddrinfo(struct rdma_addrinfo *)`.
///
/// # Safety
///
/// `res` must come from `rdma_getaddrinfo` and be freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    ffi_guard(
        || (),
        || {
            if o::is_live(res as usize, Kind::Ah) {
                o::unregister(res as usize);
                // SAFETY: allocated by rdma_getaddrinfo as a boxed AddrInfo.
                drop(unsafe { Box::from_raw(res.cast::<AddrInfo>()) });
            }
        },
    )
}

/// `int rdma_create_ep(struct rdma_cm_id **id, res, pd, qp_init_attr)`: a
/// synchronous id, bound (passive) or resolved (active), with a QP if asked.
///
/// # Safety
///
/// `id` writable; `res` readable; `qp_init_attr` NULL or readable/writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ffi_guard(
        || ret::neg(libc::EIO),
        || {
            if id.is_null() || res.is_null() {
                return ret::neg(libc::EINVAL);
            }
            // SAFETY: non-NULL, readable per the contract.
            let r = unsafe { &*res };
            let qp_type = if r.ai_qp_type == 0 {
                IBV_QPT_RC
            } else {
                r.ai_qp_type as ibv_qp_type
            };
            let ps = if r.ai_port_space == 0 {
                RDMA_PS_TCP
            } else {
                r.ai_port_space as rdma_port_space
            };
            let mut cm_id: *mut rdma_cm_id = core::ptr::null_mut();
            // SAFETY: `cm_id` is a local.
            if unsafe {
                super::id::create_id(
                    core::ptr::null_mut(),
                    &mut cm_id,
                    core::ptr::null_mut(),
                    ps,
                    qp_type,
                )
            } != 0
            {
                return -1;
            }
            let fail = |e: c_int| {
                // SAFETY: the id just made.
                unsafe { super::id::__softrdma_rdma_destroy_id(cm_id) };
                ret::neg(e)
            };
            if r.ai_flags & RAI_PASSIVE != 0 {
                // SAFETY: the id just made; the address is the caller's.
                if unsafe { super::id::__softrdma_rdma_bind_addr(cm_id, r.ai_src_addr) } != 0 {
                    return fail(crate::guard::errno());
                }
                if !qp_init_attr.is_null() {
                    // SAFETY: registry-checked; non-NULL attr readable per the contract.
                    if let Some(obj) = unsafe { id_obj(cm_id) } {
                        let mut st = obj.state();
                        // SAFETY: checked non-NULL above; readable per the contract.
                        st.ep_attr = Some(unsafe { *qp_init_attr });
                        st.ep_pd = pd;
                    }
                }
            } else {
                // SAFETY: the id just made; addresses are the caller's.
                if unsafe {
                    super::id::__softrdma_rdma_resolve_addr(
                        cm_id,
                        r.ai_src_addr,
                        r.ai_dst_addr,
                        2000,
                    )
                } != 0
                {
                    return fail(crate::guard::errno());
                }
                // SAFETY: as above.
                if unsafe { super::id::__softrdma_rdma_resolve_route(cm_id, 2000) } != 0 {
                    return fail(crate::guard::errno());
                }
                if !qp_init_attr.is_null()
                    // SAFETY: a registered id and the caller's non-NULL attr.
                    && unsafe { super::qp::__softrdma_rdma_create_qp(cm_id, pd, qp_init_attr) } != 0
                {
                    return fail(crate::guard::errno());
                }
            }
            // SAFETY: non-NULL, writable per the contract.
            unsafe { id.write(cm_id) };
            0
        },
    )
}

/// `void rdma_destroy_ep(struct rdma_cm_id *)`: QP, SRQ, CQs and the id.
///
/// # Safety
///
/// Pointer arguments are NULL or what librdmacm's contract allows; ids are
/// checked against the live-object registry before use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_destroy_ep(id: *mut rdma_cm_id) {
    with_id(
        id,
        |_| (),
        |_| {
            // SAFETY: a live id.
            unsafe {
                super::qp::__softrdma_rdma_destroy_qp(id);
                super::qp::__softrdma_rdma_destroy_srq(id);
                super::id::__softrdma_rdma_destroy_id(id);
            }
        },
    )
}

/// `int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)`:
/// the next connection request of a synchronous listener, with a QP made
/// from the endpoint's saved attributes.
///
/// # Safety
///
/// `id` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    with_id(listen, ret::neg, |l| {
        if id.is_null() {
            return ret::neg(libc::EINVAL);
        }
        let (sync, chan, attr, pd) = {
            let st = l.state();
            (st.sync, st.chan.clone(), st.ep_attr, st.ep_pd)
        };
        if !sync {
            return ret::neg(libc::EINVAL);
        }
        // SAFETY: live id.
        let prev = unsafe { (*listen).event };
        if !prev.is_null() {
            // SAFETY: the listener's own event.
            unsafe {
                super::event::free_event(prev);
                (*listen).event = core::ptr::null_mut();
            }
        }
        let ev = match next_event(&chan) {
            Ok(e) => e,
            Err(e) => return ret::neg(e),
        };
        // SAFETY: just made.
        let (kind, status, child) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
        let bad = if kind == RDMA_CM_EVENT_REJECTED {
            Some(libc::ECONNREFUSED)
        } else if status != 0 {
            Some(status.abs())
        } else if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
            Some(libc::EINVAL)
        } else {
            None
        };
        if let Some(e) = bad {
            // SAFETY: live listener.
            unsafe { (*listen).event = ev };
            return ret::neg(e);
        }
        // The new id is synchronous too: give it a channel of its own.
        let priv_ch = super::event::__softrdma_rdma_create_event_channel();
        // SAFETY: registry-checked.
        if let (Some(cobj), Some(ch)) = (unsafe { id_obj(child) }, unsafe {
            o::obj::<super::objects::Chan>(priv_ch.cast(), Kind::CmChannel)
        }) {
            move_to_channel(child, cobj, priv_ch, ch, true);
        }
        if let Some(mut a) = attr {
            let p = if pd.is_null() {
                // SAFETY: live listener; `a` is a local copy.
                unsafe { (*listen).pd }
            } else {
                pd
            };
            // SAFETY: live child id, local attr.
            if unsafe { super::qp::__softrdma_rdma_create_qp(child, p, &mut a) } != 0 {
                let e = crate::guard::errno();
                // SAFETY: live listener.
                unsafe { (*listen).event = ev };
                return ret::neg(e);
            }
        }
        // SAFETY: live child id; non-NULL output.
        unsafe {
            (*child).event = ev;
            id.write(child);
        }
        0
    })
}

/// Keeps `complete` reachable for callers elsewhere.
#[allow(dead_code)]
fn _uses(i: *mut rdma_cm_id, o: &super::objects::Id) -> c_int {
    complete(i, o)
}
