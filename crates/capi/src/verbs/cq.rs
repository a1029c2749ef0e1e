//! Completion channels and completion queues (the data path, `poll_cq` and
//! `req_notify_cq`, is in `post.rs`).

use super::objects::{self as o, Channel, Cq, Ctx, Kind};
use crate::ffi::*;
use crate::guard::ret;
use core::ffi::{c_int, c_uint, c_void};
use softrdma_engine::transport::VerbsError;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// Extended-context slots for CQs.
pub(crate) fn install_vctx_ops(v: &mut verbs_context) {
    v.create_cq_ex = Some(super::cq_ex::vctx_create_cq_ex);
}

/// Creates a CQ of at least `cqe` entries on `c` (also for `ibv_create_cq_ex`,
/// which then installs its poll functions); NULL with errno on failure.
pub(crate) fn new_cq(
    c: &Ctx,
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut Cq {
    if cqe <= 0 || comp_vector != 0 {
        return ret::null(libc::EINVAL);
    }
    let chan = if channel.is_null() {
        None
    } else {
        // SAFETY: registry-checked.
        match unsafe { o::obj::<Channel>(channel.cast(), Kind::Channel) } {
            Some(ch) => Some(ch),
            None => return ret::null(libc::EINVAL),
        }
    };
    let (h, n, ring) = match c.engine.create_cq_with_ring(cqe as u32) {
        Ok(v) => v,
        Err(e) => return ret::null(e.errno()),
    };
    if let Some(ch) = chan {
        c.engine.set_cq_channel(h, Some(ch.inner.clone()));
        ch.users.fetch_add(1, Ordering::SeqCst);
    }
    let mut cq = ibv_cq_ex::zeroed();
    cq.context = context;
    cq.channel = channel;
    cq.cq_context = cq_context;
    cq.handle = h.0;
    cq.cqe = n as c_int;
    let p = o::publish(
        Cq {
            cq,
            h,
            ring,
            engine: c.engine.clone(),
            channel: channel.cast(),
            events: AtomicU32::new(0),
            cur: Mutex::new(None),
        },
        Kind::Cq,
    );
    o::map_cq(h, Some(p as usize));
    p
}

/// `struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *)`.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    use std::os::fd::AsRawFd;
    o::with_ctx(context, ret::null, |c| {
        let inner = match c.engine.create_comp_channel() {
            Ok(ch) => ch,
            Err(e) => return ret::null(e.raw_os_error().unwrap_or(libc::ENOMEM)),
        };
        let ch = ibv_comp_channel {
            context,
            fd: inner.as_raw_fd(),
            refcnt: 0,
        };
        o::publish(
            Channel {
                ch,
                inner,
                users: AtomicU32::new(0),
            },
            Kind::Channel,
        )
        .cast()
    })
}

/// `int ibv_destroy_comp_channel(struct ibv_comp_channel *)`: EBUSY while CQs use it.
///
/// # Safety
///
/// `channel` must not be used after a successful call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    o::destroy(channel.cast(), Kind::Channel, |ch: &Channel| {
        if ch.users.load(Ordering::SeqCst) > 0 {
            return Err(VerbsError::Busy("CQs use the channel".into()));
        }
        Ok(())
    })
}

/// `struct ibv_cq *ibv_create_cq(ctx, int cqe, void *cq_context, channel, int comp_vector)`.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    o::with_ctx(context, ret::null, |c| {
        new_cq(c, context, cqe, cq_context, channel, comp_vector).cast()
    })
}

/// `int ibv_resize_cq(struct ibv_cq *, int cqe)`.
///
/// # Safety
///
/// `cq` must be a CQ of this library (checked) that no other thread destroys concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    o::with_obj(cq.cast(), Kind::Cq, ret::pos, |q: &Cq| {
        if cqe <= 0 {
            return ret::pos(libc::EINVAL);
        }
        let h = q.h;
        match q.engine.resize_cq(h, cqe as u32) {
            Ok(n) => {
                // SAFETY: live CQ; `cqe` is a plain field applications only read.
                unsafe { (*cq).cqe = n as c_int };
                0
            }
            Err(e) => ret::pos(e.errno()),
        }
    })
}

/// `int ibv_destroy_cq(struct ibv_cq *)`: EBUSY while a QP uses it.
///
/// # Safety
///
/// `cq` must not be used after a successful call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    o::destroy(cq.cast(), Kind::Cq, |q: &Cq| {
        let h = q.h;
        q.engine.destroy_cq(h)?;
        q.engine.set_cq_channel(h, None);
        // SAFETY: the channel outlives its CQs (destroy is EBUSY while users > 0).
        if let Some(ch) = unsafe { o::obj::<Channel>(q.channel.cast(), Kind::Channel) } {
            ch.users.fetch_sub(1, Ordering::SeqCst);
        }
        o::map_cq(h, None);
        Ok(())
    })
}

/// `int ibv_get_cq_event(channel, struct ibv_cq **cq, void **cq_context)`:
/// blocks in `read(2)` on the channel's eventfd; 0, or -1 with errno.
///
/// # Safety
///
/// `cq` and `cq_context` must be valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    o::with_obj(channel.cast(), Kind::Channel, ret::neg, |ch: &Channel| {
        if cq.is_null() || cq_context.is_null() {
            return ret::neg(libc::EINVAL);
        }
        // The wait tells the engine a thread blocks (`CompChannel::get_event`).
        let inner = ch.inner.clone();
        loop {
            let h = match inner.get_event() {
                Ok(h) => h,
                Err(e) => return ret::neg(e.raw_os_error().unwrap_or(libc::EIO)),
            };
            let Some(p) = o::cq_ptr(h) else { continue };
            // SAFETY: the CQ map holds live CQ objects.
            let q = unsafe { &*(p as *const Cq) };
            q.events.fetch_add(1, Ordering::SeqCst);
            // SAFETY: non-NULL outputs, writable per the contract.
            unsafe {
                cq.write(p as *mut ibv_cq);
                cq_context.write(q.cq.cq_context);
            }
            return 0;
        }
    })
}

/// `void ibv_ack_cq_events(struct ibv_cq *, unsigned int nevents)`.
///
/// # Safety
///
/// `cq` must be a CQ of this library (checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    o::with_obj(
        cq.cast(),
        Kind::Cq,
        |_| (),
        |_: &Cq| {
            // SAFETY: live CQ; the counter is a plain field applications may read.
            unsafe {
                (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents)
            };
        },
    )
}
