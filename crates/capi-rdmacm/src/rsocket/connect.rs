//! Active side: address and route resolution, the QP and buffers, then the
//! CM REQ carrying our connection data and the peer's answer from the REP
//! (rdma-core's `rs_do_connect`). Blocking; a non-blocking `rconnect` runs it
//! on a thread of its own and reports through an eventfd.

use core::ffi::c_int;
use std::sync::{Arc, Mutex};

use super::conn::{Conn, Sizes};
use super::proto::{CONN_DATA_LEN, ConnData};
use super::sock::Pending;
use super::sys::{Res, unsafe_zeroed};
use crate::ffi::*;

fn check(r: c_int) -> Res<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(crate::guard::errno())
    }
}

pub(super) fn connect(
    id: *mut rdma_cm_id,
    dst: &libc::sockaddr_storage,
    sizes: &Sizes,
) -> Res<Box<Conn>> {
    let dst = (dst as *const libc::sockaddr_storage)
        .cast_mut()
        .cast::<libc::sockaddr>();
    // SAFETY: live id; `dst` a valid socket address for the call.
    check(unsafe { crate::cm::rdma_resolve_addr(id, core::ptr::null_mut(), dst, 2000) })?;
    // SAFETY: live, resolved id.
    check(unsafe { crate::cm::rdma_resolve_route(id, 2000) })?;
    let mut conn = Box::new(Conn::new(id, sizes)?);
    let mine = conn.conn_data().encode();
    let mut p: rdma_conn_param = unsafe_zeroed();
    p.private_data = mine.as_ptr().cast();
    p.private_data_len = CONN_DATA_LEN as u8;
    p.flow_control = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    // SAFETY: live id with its QP; local param.
    check(unsafe { crate::cm::rdma_connect(id, &mut p) }).map_err(|e| match e {
        libc::ECONNREFUSED | libc::ETIMEDOUT | libc::ENETUNREACH | libc::EHOSTUNREACH => e,
        libc::EINVAL | libc::ENODEV | libc::EADDRNOTAVAIL => libc::ECONNREFUSED,
        e => e,
    })?;
    // SAFETY: a synchronous connect leaves the ESTABLISHED event on the id.
    let ev = unsafe { (*id).event };
    if ev.is_null() {
        return Err(libc::EPROTO);
    }
    // SAFETY: live event.
    let param = unsafe { (*ev).param.conn };
    if param.private_data.is_null() || (param.private_data_len as usize) < CONN_DATA_LEN {
        return Err(libc::EPROTO);
    }
    // SAFETY: the REP's private data.
    let pd = unsafe { core::slice::from_raw_parts(param.private_data.cast::<u8>(), CONN_DATA_LEN) };
    let peer = ConnData::decode(pd).ok_or(libc::ENOTSUP)?;
    conn.save_peer(&peer);
    Ok(conn)
}

struct IdPtr(*mut rdma_cm_id);
// SAFETY: the id is handed to the connecting thread, which the socket joins
// before it destroys the id.
unsafe impl Send for IdPtr {}

/// Starts a connect in the background.
pub(super) fn start(
    id: *mut rdma_cm_id,
    dst: libc::sockaddr_storage,
    sizes: Sizes,
) -> Res<Arc<Pending>> {
    // SAFETY: plain syscall.
    let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if efd < 0 {
        return Err(crate::guard::errno());
    }
    let p = Arc::new(Pending {
        result: Mutex::new(None),
        efd,
        thread: Mutex::new(None),
    });
    let p2 = p.clone();
    let idp = IdPtr(id);
    let t = std::thread::Builder::new()
        .name("rsocket-connect".into())
        .spawn(move || {
            let idp = idp;
            let r = connect(idp.0, &dst, &sizes);
            if let Err(e) = &r
                && std::env::var_os("SOFTRDMA_DEBUG").is_some()
            {
                eprintln!("rsocket: connect failed: errno {e}");
            }
            *p2.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            let one = 1u64;
            // SAFETY: the pending connect's eventfd, open while `p2` lives.
            unsafe { libc::write(p2.efd, (&raw const one).cast(), 8) };
        })
        .map_err(|_| libc::EAGAIN)?;
    *p.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
    Ok(p)
}
