//! Multicast: `rdma_join_multicast(_ex)`, `rdma_leave_multicast`.

use super::event::with_id;
use super::id::{cm_ret, with_engine};
use super::objects::Id;
use super::sock;
use crate::ffi::*;
use crate::guard::{ret, with_arg};
use core::ffi::{c_int, c_void};
use softrdma_engine::Engine;
use std::net::IpAddr;
use std::sync::Arc;

/// The group GID of an address (IPv4-mapped for IPv4).
fn gid_of(ip: IpAddr) -> ibv_gid {
    ibv_gid {
        raw: softrdma_wire::ip::to_v6(ip).octets(),
    }
}

/// Attaches or detaches the id's QP (librdmacm does this when the join
/// completes and when the id leaves).
fn attach(obj: &Id, group: IpAddr, on: bool) {
    let qp = obj.id.qp;
    if qp.is_null() {
        return;
    }
    let gid = gid_of(group);
    // SAFETY: the id's QP is one of ours (the registry re-checks it).
    unsafe {
        if on {
            crate::verbs::qp::ibv_attach_mcast(qp, &gid, 0);
        } else {
            crate::verbs::qp::ibv_detach_mcast(qp, &gid, 0);
        }
    }
}

/// Called when MULTICAST_JOIN is delivered: the id's QP joins the group.
pub(crate) fn joined(obj: &Id, _engine: &Arc<Engine>) {
    let groups = obj.state().mcast.clone();
    if let Some(g) = groups.last() {
        attach(obj, *g, true);
    }
}

/// Leaves every group an id joined (it is being destroyed).
pub(crate) fn leave_all(obj: &Id, _engine: &Arc<Engine>) {
    let groups: Vec<IpAddr> = obj.state().mcast.drain(..).collect();
    for g in groups {
        attach(obj, g, false);
    }
}

/// `rdma_join_multicast` and `rdma_join_multicast_ex`.
fn join(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    with_id(id, ret::neg, |obj| {
        // SAFETY: the caller passes a valid socket address.
        let Some(a) = (unsafe { sock::from_c(addr) }) else {
            return ret::neg(libc::EINVAL);
        };
        if !a.ip().is_multicast() {
            return ret::neg(libc::EINVAL);
        }
        with_engine(id, obj, None, |engine, h| {
            obj.state().mcast.push(a.ip());
            cm_ret(engine.cm_join_multicast(h, a.ip()))
        })
    })
}

/// `int rdma_join_multicast(id, struct sockaddr *addr, void *context)`.
///
/// # Safety
///
/// `addr` must be a valid socket address.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    _context: *mut c_void,
) -> c_int {
    join(id, addr)
}

/// `int rdma_join_multicast_ex(id, struct rdma_cm_join_mc_attr_ex *, void *context)`.
///
/// # Safety
///
/// `attr` must be readable, with a valid address.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: NULL or readable per the contract.
    with_arg(
        || unsafe { attr.as_ref() },
        ret::neg,
        |a| {
            if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0 {
                return ret::neg(libc::EINVAL);
            }
            join(id, a.addr)
        },
    )
}

/// `int rdma_leave_multicast(id, struct sockaddr *addr)`.
///
/// # Safety
///
/// `addr` must be a valid socket address.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    with_id(id, ret::neg, |obj| {
        // SAFETY: the caller passes a valid socket address.
        let Some(a) = (unsafe { sock::from_c(addr) }) else {
            return ret::neg(libc::EINVAL);
        };
        let left = {
            let mut st = obj.state();
            let before = st.mcast.len();
            st.mcast.retain(|g| *g != a.ip());
            st.mcast.len() != before
        };
        if !left {
            return ret::neg(libc::EADDRNOTAVAIL);
        }
        // The id's QP stops receiving the group's datagrams now, as with
        // librdmacm (it detaches the QP before leaving).
        attach(obj, a.ip(), false);
        0
    })
}
