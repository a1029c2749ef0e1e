//! Listening rsockets. As in rdma-core (its `listen_svc` thread), connection
//! requests are accepted in the background: a thread per listener takes each
//! request, creates the new socket's QP and buffers, answers with this side's
//! connection data and queues the socket for `raccept`, whose readiness is an
//! eventfd (semaphore mode: readable while the queue is not empty).

use core::ffi::c_int;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::conn::Conn;
use super::proto::{CONN_DATA_LEN, ConnData};
use super::sock::{self, Phase, RSock, wait_fd};
use super::sys::Res;
use crate::ffi::*;

pub(super) struct Listener {
    queue: Mutex<VecDeque<Arc<RSock>>>,
    pub(super) efd: c_int,
    stop: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

struct IdPtr(*mut rdma_cm_id);
// SAFETY: handed to the one accept thread.
unsafe impl Send for IdPtr {}

impl Listener {
    /// Starts accepting on `id` (already `rdma_listen`ed); new sockets take
    /// their options from `owner` at the time of each request.
    pub(super) fn start(id: *mut rdma_cm_id, owner: Weak<RSock>) -> Res<Arc<Listener>> {
        // SAFETY: plain syscall.
        let efd = unsafe {
            libc::eventfd(
                0,
                libc::EFD_SEMAPHORE | libc::EFD_NONBLOCK | libc::EFD_CLOEXEC,
            )
        };
        if efd < 0 {
            return Err(crate::guard::errno());
        }
        let l = Arc::new(Listener {
            queue: Mutex::new(VecDeque::new()),
            efd,
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let weak = Arc::downgrade(&l);
        let idp = IdPtr(id);
        let t = std::thread::Builder::new()
            .name("rsocket-accept".into())
            .spawn(move || {
                let idp = idp;
                accept_loop(idp.0, weak, owner)
            })
            .map_err(|_| libc::EAGAIN)?;
        *l.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        Ok(l)
    }

    /// The next accepted socket, if any.
    pub(super) fn pop(&self) -> Option<Arc<RSock>> {
        let s = self
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()?;
        let mut v = 0u64;
        // SAFETY: our eventfd; 8 writable bytes.
        unsafe { libc::read(self.efd, (&raw mut v).cast(), 8) };
        Some(s)
    }

    pub(super) fn ready(&self) -> bool {
        !self
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Stops the accept thread and closes what was accepted and never taken.
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
        while let Some(s) = self.pop() {
            let _ = super::ops::close(s.fd);
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // SAFETY: our eventfd, closed once.
        unsafe { libc::close(self.efd) };
    }
}

fn accept_loop(id: *mut rdma_cm_id, l: Weak<Listener>, owner: Weak<RSock>) {
    // SAFETY: the listening id is live until this thread is joined.
    let cfd = unsafe { (*(*id).channel).fd };
    loop {
        let Some(lis) = l.upgrade() else { return };
        if lis.stop.load(Ordering::SeqCst) {
            return;
        }
        drop(lis);
        if !wait_fd(cfd, 100) {
            continue;
        }
        let mut child = core::ptr::null_mut();
        // SAFETY: live listening id, local output.
        if unsafe { crate::cm::rdma_get_request(id, &mut child) } != 0 || child.is_null() {
            continue;
        }
        let Some(own) = owner.upgrade() else {
            reject(child);
            return;
        };
        let (sizes, nonblock) = {
            let g = own.lock();
            (g.sizes, g.nonblock)
        };
        match accept_one(child, &sizes) {
            Ok(conn) => {
                let s = RSock::new(child, Phase::Connected(conn), sizes, nonblock);
                sock::insert(s.clone());
                if let Some(lis) = l.upgrade() {
                    lis.queue
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push_back(s);
                    let one = 1u64;
                    // SAFETY: our eventfd; 8 readable bytes.
                    unsafe { libc::write(lis.efd, (&raw const one).cast(), 8) };
                }
            }
            Err(_) => reject(child),
        }
    }
}

fn reject(child: *mut rdma_cm_id) {
    // SAFETY: the request's id, ours to answer and destroy.
    unsafe {
        crate::cm::rdma_reject(child, core::ptr::null(), 0);
        crate::cm::rdma_destroy_id(child);
    }
}

/// rdma-core's `rs_accept`: the peer's connection data from the request,
/// our resources, and the accept carrying our connection data.
fn accept_one(child: *mut rdma_cm_id, sizes: &super::conn::Sizes) -> Res<Box<Conn>> {
    // SAFETY: rdma_get_request left the CONNECT_REQUEST event on the id.
    let ev = unsafe { (*child).event };
    if ev.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: live event; conn is the member of a CONNECT_REQUEST.
    let mut param = unsafe { (*ev).param.conn };
    if param.private_data.is_null() || (param.private_data_len as usize) < CONN_DATA_LEN {
        return Err(libc::EINVAL);
    }
    // SAFETY: the event's private data, `private_data_len` bytes.
    let pd = unsafe { core::slice::from_raw_parts(param.private_data.cast::<u8>(), CONN_DATA_LEN) };
    let peer = ConnData::decode(pd).ok_or(libc::EINVAL)?;
    let mut conn = Box::new(Conn::new(child, sizes)?);
    conn.save_peer(&peer);
    let mine = conn.conn_data().encode();
    param.private_data = mine.as_ptr().cast();
    param.private_data_len = CONN_DATA_LEN as u8;
    // SAFETY: live id with its QP; local param.
    if unsafe { crate::cm::rdma_accept(child, &mut param) } != 0 {
        return Err(crate::guard::errno());
    }
    Ok(conn)
}
