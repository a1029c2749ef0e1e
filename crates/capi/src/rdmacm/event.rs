//! Event channels and events: `rdma_create_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`, and turning engine events into
//! `struct rdma_cm_event`.

use super::objects::{self as co, Chan, Ev, Id, IdState};
use super::sock;
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};
use crate::verbs::objects::{self as o, Kind};
use core::ffi::c_int;
use softrdma::rdma_core_conv::{conn_param_to_c, ud_param_to_c};
use softrdma_engine::cm_proto::{Event, EventKind, EventParam, IdHandle};
use softrdma_engine::{CmChannel, Engine};
use std::sync::{Arc, Mutex};

/// `struct rdma_event_channel *rdma_create_event_channel(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn __softrdma_rdma_create_event_channel() -> *mut rdma_event_channel {
    use std::os::fd::AsRawFd;
    ffi_guard(
        || ret::null(libc::EIO),
        || match CmChannel::new() {
            Ok(c) => {
                let inner = Arc::new(c);
                let p = o::publish(
                    Chan {
                        ch: rdma_event_channel {
                            fd: inner.as_raw_fd(),
                        },
                        inner,
                    },
                    Kind::CmChannel,
                );
                destroyed().remove(&(p as usize));
                p.cast()
            }
            Err(e) => ret::null(e.raw_os_error().unwrap_or(libc::ENOMEM)),
        },
    )
}

/// `void rdma_destroy_event_channel(struct rdma_event_channel *)`.
///
/// # Safety
///
/// `channel` must not be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    ffi_guard(
        || (),
        || {
            if o::is_live(channel as usize, Kind::CmChannel) {
                destroyed().insert(channel as usize);
                // SAFETY: a live channel from `publish`. A thread still blocked in
                // rdma_get_cm_event keeps the eventfd alive through its Arc.
                unsafe { o::retire(channel.cast::<Chan>()) };
            }
        },
    )
}

/// Addresses of event channels the application destroyed (until reused).
fn destroyed() -> std::sync::MutexGuard<'static, std::collections::HashSet<usize>> {
    static SET: std::sync::LazyLock<Mutex<std::collections::HashSet<usize>>> =
        std::sync::LazyLock::new(Default::default);
    SET.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes an address pair into a C id's route.
pub(crate) fn set_route(
    id: *mut rdma_cm_id,
    local: Option<std::net::SocketAddr>,
    remote: Option<std::net::SocketAddr>,
) {
    // SAFETY: `id` is a live id object of this library (callers checked).
    let r = unsafe { &mut (*id).route.addr };
    if let Some(l) = local {
        r.src.src_storage = sock::to_storage(l);
        r.addr.ibaddr.sgid = ibv_gid {
            raw: softrdma_wire::ip::to_v6(l.ip()).octets(),
        };
    }
    if let Some(p) = remote {
        r.dst.dst_storage = sock::to_storage(p);
        r.addr.ibaddr.dgid = ibv_gid {
            raw: softrdma_wire::ip::to_v6(p.ip()).octets(),
        };
    }
    r.addr.ibaddr.pkey = 0xFFFF;
}

/// Sends the events of the live id `id` (`obj`) to `channel` (`ch`);
/// `sync` says it is the id's private channel (a synchronous id).
pub(crate) fn move_to_channel(
    id: *mut rdma_cm_id,
    obj: &Id,
    channel: *mut rdma_event_channel,
    ch: &Chan,
    sync: bool,
) {
    let mut st = obj.state();
    st.chan = ch.inner.clone();
    st.sync = sync;
    if let (Some(e), Some(h)) = (&st.engine, st.h) {
        e.cm_set_channel(h, ch.inner.clone());
    }
    drop(st);
    // SAFETY: `id` is live (callers checked); applications read `channel`.
    unsafe { (*id).channel = channel };
}

/// Gives a C id the device (`verbs`, default `pd`, port 1).
pub(crate) fn attach_device(id: *mut rdma_cm_id, engine: &Arc<Engine>) {
    let (ctx, pd) = super::dev::device(engine);
    // SAFETY: `id` is live (callers checked).
    unsafe {
        (*id).verbs = ctx;
        if (*id).pd.is_null() {
            (*id).pd = pd;
        }
        (*id).port_num = 1;
    }
}

/// Turns an engine event into a C event (creating the C object of a new
/// connection request's id). `None` if the id is gone.
pub(crate) fn convert(e: Event) -> Option<*mut rdma_cm_event> {
    // The owner's count goes up before anything touches it (a concurrent
    // rdma_destroy_id then waits for this event's ack); a conversion that
    // gives up acks it back.
    let (claim, id, listen) = if e.kind == EventKind::ConnectRequest {
        let claim = Claim(e.listen_id.and_then(co::claim_id)?);
        let listen = claim.0;
        (claim, new_child(listen, e.id)?, listen)
    } else {
        let claim = Claim(co::claim_id(e.id)?);
        let id = claim.0;
        (claim, id, core::ptr::null_mut())
    };
    // SAFETY: mapped ids are live objects of this library.
    let obj = unsafe { &*id };
    let engine = obj.state().engine.clone()?;
    let (local, remote) = engine.cm_addrs(e.id);
    set_route(id.cast(), local, remote);
    if e.kind == EventKind::AddrResolved || (e.kind == EventKind::ConnectRequest) {
        attach_device(id.cast(), &engine);
    }
    let owner: *const Id = if listen.is_null() { id } else { listen };
    let mut ev = Box::new(Ev {
        ev: rdma_cm_event::zeroed(),
        private_data: Vec::new(),
        owner,
    });
    ev.ev.id = id.cast();
    ev.ev.listen_id = listen.cast();
    ev.ev.event = e.kind as u32;
    ev.ev.status = e.status;
    match e.param {
        EventParam::None => {}
        EventParam::Conn(p) => {
            ev.ev.param.conn = conn_param_to_c(&p);
            ev.private_data = p.private_data;
        }
        EventParam::Ud(u) => {
            ev.ev.param.ud = ud_param_to_c(&u);
            ev.private_data = u.private_data;
        }
    }
    let pd_ptr = if ev.private_data.is_empty() {
        core::ptr::null()
    } else {
        ev.private_data.as_ptr().cast()
    };
    // The event's own copy (both union members start with the pointer).
    ev.ev.param.conn.private_data = pd_ptr;
    if e.kind == EventKind::MulticastJoin {
        super::mcast::joined(obj, &engine);
    }
    let p = Box::into_raw(ev);
    // The event now holds the claim until it is acked.
    std::mem::forget(claim);
    o::register(p as usize, Kind::CmEvent);
    Some(p.cast())
}

/// An event counted against its owner id ([`co::claim_id`]); acked back if
/// the conversion gives up before handing the event out.
struct Claim(*mut Id);

impl Drop for Claim {
    fn drop(&mut self) {
        // SAFETY: claimed ids stay alive until this ack (rdma_destroy_id waits).
        unsafe { (*self.0).ack() };
    }
}

/// Creates the C object for a connection request's new id.
fn new_child(listener: *mut Id, h: IdHandle) -> Option<*mut Id> {
    // SAFETY: mapped ids are live.
    let l = unsafe { &*listener };
    let (engine, chan, sync) = {
        let st = l.state();
        (st.engine.clone()?, st.chan.clone(), st.sync)
    };
    let mut c = rdma_cm_id::zeroed();
    c.channel = l.id.channel;
    c.context = l.id.context;
    c.ps = l.id.ps;
    c.qp_type = l.id.qp_type;
    c.port_num = 1;
    let obj = Id::new(c, IdState::new(Some((engine, h)), chan, sync));
    let p = o::publish(obj, Kind::CmId);
    co::map_id(h, Some(p as usize));
    Some(p)
}

/// Frees a C event.
///
/// # Safety
///
/// `ev` must be a live event of this library, not used afterwards.
pub(crate) unsafe fn free_event(ev: *mut rdma_cm_event) {
    if o::is_live(ev as usize, Kind::CmEvent) {
        // SAFETY: a live event from `convert`; its owner id waits in
        // `rdma_destroy_id` for this ack, so it is still alive.
        unsafe {
            let owner = (*ev.cast::<Ev>()).owner;
            o::retire(ev.cast::<Ev>());
            (*owner).ack();
        }
    }
}

/// Blocks on `chan` until an event for a live id arrives.
pub(crate) fn next_event(chan: &CmChannel) -> Result<*mut rdma_cm_event, c_int> {
    loop {
        let e = chan
            .get_event()
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        if let Some(ev) = convert(e) {
            return Ok(ev);
        }
    }
}

/// `int rdma_get_cm_event(struct rdma_event_channel *, struct rdma_cm_event **)`:
/// blocks in `read(2)` on the channel's fd.
///
/// # Safety
///
/// `event` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    ffi_guard(
        || ret::neg(libc::EIO),
        || {
            // SAFETY: registry-checked.
            let Some(ch) = (unsafe { o::obj::<Chan>(channel.cast(), Kind::CmChannel) }) else {
                if destroyed().contains(&(channel as usize)) {
                    // Another thread destroyed the channel while this one was
                    // between events (rping's cm thread at exit). Block, as a
                    // reader already inside the call does, instead of failing.
                    loop {
                        std::thread::park();
                    }
                }
                return ret::neg(libc::EINVAL);
            };
            if event.is_null() {
                return ret::neg(libc::EINVAL);
            }
            let inner = ch.inner.clone();
            match next_event(&inner) {
                Ok(ev) => {
                    // SAFETY: non-NULL, writable per the contract.
                    unsafe { event.write(ev) };
                    0
                }
                Err(e) => ret::neg(e),
            }
        },
    )
}

/// `int rdma_ack_cm_event(struct rdma_cm_event *)`: frees the event.
///
/// # Safety
///
/// `event` must not be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    ffi_guard(
        || ret::neg(libc::EIO),
        || {
            if !o::is_live(event as usize, Kind::CmEvent) {
                return ret::neg(libc::EINVAL);
            }
            // SAFETY: checked live above.
            unsafe { free_event(event) };
            0
        },
    )
}

/// Waits for the next event of a synchronous id and keeps it in `id->event`
/// (librdmacm's `ucma_complete`): 0, or -1 with errno from its status.
pub(crate) fn complete(id: *mut rdma_cm_id, obj: &Id) -> c_int {
    let (sync, chan) = {
        let st = obj.state();
        (st.sync, st.chan.clone())
    };
    if !sync {
        return 0;
    }
    // SAFETY: `id` is live (callers checked).
    let prev = unsafe { (*id).event };
    if !prev.is_null() {
        // SAFETY: an event this library made; the id owned it.
        unsafe { free_event(prev) };
        // SAFETY: as above.
        unsafe { (*id).event = core::ptr::null_mut() };
    }
    let ev = match next_event(&chan) {
        Ok(ev) => ev,
        Err(e) => return ret::neg(e),
    };
    // SAFETY: as above.
    unsafe { (*id).event = ev };
    // SAFETY: `ev` was just made.
    let (kind, status) = unsafe { ((*ev).event, (*ev).status) };
    if status != 0 {
        if kind == RDMA_CM_EVENT_REJECTED {
            return ret::neg(libc::ECONNREFUSED);
        }
        return ret::neg(status.abs());
    }
    0
}

/// The id object behind a C id.
///
/// # Safety
///
/// As `o::obj`.
pub(crate) unsafe fn id_obj<'a>(id: *mut rdma_cm_id) -> Option<&'a Id> {
    // SAFETY: forwarded.
    unsafe { o::obj::<Id>(id.cast(), Kind::CmId) }
}

/// The frame of a librdmacm call on one id ([`o::with_obj`]): `f` runs on the
/// live id `id`; anything else is EINVAL, reported by `fail`.
pub(crate) fn with_id<R>(id: *mut rdma_cm_id, fail: fn(c_int) -> R, f: impl FnOnce(&Id) -> R) -> R {
    o::with_obj(id.cast(), Kind::CmId, fail, f)
}
