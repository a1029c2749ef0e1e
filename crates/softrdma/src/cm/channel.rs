//! Event channels (`struct rdma_event_channel`) and events (`struct rdma_cm_event`).

use super::error::{Error, Result};
use super::id::{CmId, IdImp, IdShared};
use crate::backend::rdma_core::{self, sys};
use crate::verbs::Context;
use crate::verbs::device::Dev;
use softrdma_engine::CmChannel;
use softrdma_engine::cm_proto::{ConnParam, Event, EventKind, EventParam, IdHandle, UdParam};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// An event channel of one backend.
pub(crate) enum ChImp {
    Native(Arc<CmChannel>),
    RdmaCore(Arc<sys::EventChannel>),
}

pub(crate) struct ChanInner {
    pub(crate) ctx: Context,
    pub(crate) ch: ChImp,
    /// The ids whose events arrive here, so reading an event can update them.
    ids: Mutex<HashMap<IdHandle, Weak<IdShared>>>,
}

/// `enum rdma_cm_event_type` from its number.
fn event_kind(v: u32) -> Option<EventKind> {
    use EventKind::*;
    Some(match v {
        0 => AddrResolved,
        1 => AddrError,
        2 => RouteResolved,
        3 => RouteError,
        4 => ConnectRequest,
        5 => ConnectResponse,
        6 => ConnectError,
        7 => Unreachable,
        8 => Rejected,
        9 => Established,
        10 => Disconnected,
        11 => DeviceRemoval,
        12 => MulticastJoin,
        13 => MulticastError,
        14 => AddrChange,
        15 => TimewaitExit,
        _ => return None,
    })
}

/// A CM event channel: where the events of the ids created on it (and of the
/// connection requests their listeners receive) arrive, in order.
///
/// The channel is a real file descriptor ([`AsRawFd`]; always `O_NONBLOCK`),
/// readable while events are pending, so it can join an application's own
/// `poll`/`epoll` set. Cheap to clone; clones are the same channel.
#[derive(Clone)]
pub struct EventChannel {
    pub(crate) inner: Arc<ChanInner>,
}

impl fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventChannel(fd {})", self.as_raw_fd())
    }
}

impl EventChannel {
    /// Creates an event channel on a device (`rdma_create_event_channel`).
    pub fn new(ctx: &Context) -> Result<EventChannel> {
        // Waiting is done with poll(2) here, so reads never block.
        let ch = match &ctx.dev {
            Dev::Native(e) => {
                let ch = e.cm_channel()?;
                ch.set_nonblocking(true)?;
                ChImp::Native(ch)
            }
            Dev::RdmaCore(d) => {
                let ch =
                    sys::EventChannel::new(d.cm()?).map_err(|f| rdma_core::cm_error(f, None))?;
                sys::set_nonblocking(ch.fd())?;
                ChImp::RdmaCore(Arc::new(ch))
            }
        };
        Ok(EventChannel {
            inner: Arc::new(ChanInner {
                ctx: ctx.clone(),
                ch,
                ids: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The device of this channel.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Creates an id whose events arrive on this channel (`rdma_create_id`).
    pub fn create_id(
        &self,
        ps: super::PortSpace,
        qp_type: softrdma_transport::QpType,
    ) -> Result<CmId> {
        CmId::new(self, ps, qp_type)
    }

    /// Blocks until an event arrives (`rdma_get_cm_event`).
    pub fn get_event(&self) -> Result<CmEvent> {
        loop {
            if let Some(e) = self.try_get_event()? {
                return Ok(e);
            }
            self.wait_readable(None)?;
        }
    }

    /// The next event if one is pending; never blocks.
    pub fn try_get_event(&self) -> Result<Option<CmEvent>> {
        match &self.inner.ch {
            ChImp::Native(ch) => match ch.get_event() {
                Ok(e) => Ok(Some(self.wrap(e, None))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e.into()),
            },
            ChImp::RdmaCore(ch) => loop {
                let Some(r) = ch.next()? else {
                    return Ok(None);
                };
                // Events librdmacm adds in later versions are skipped.
                if let Some(kind) = event_kind(r.kind) {
                    let e = Event {
                        id: IdHandle(r.id),
                        listen_id: r.listen_id.map(IdHandle),
                        kind,
                        status: r.status,
                        param: r.param,
                    };
                    return Ok(Some(self.wrap(e, r.new_id)));
                }
            },
        }
    }

    /// Waits up to `timeout` for an event; `None` if none came.
    pub fn get_event_timeout(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Some(e) = self.try_get_event()? {
                return Ok(Some(e));
            }
            if !self.wait_readable(deadline)? {
                return self.try_get_event();
            }
        }
    }

    /// Waits for an event without blocking the thread (tokio).
    ///
    /// One task at a time may wait on a channel asynchronously.
    #[cfg(feature = "tokio")]
    pub async fn get_event_async(&self) -> Result<CmEvent> {
        use tokio::io::Interest;
        use tokio::io::unix::AsyncFd;
        if let Some(e) = self.try_get_event()? {
            return Ok(e);
        }
        self.inner.ctx.before_block();
        // SAFETY: the clone holds the channel's eventfd open for as long as
        // the AsyncFd lives, and its `as_raw_fd` always returns that fd.
        let fd = unsafe { AsyncFd::register_with_interest(self.clone(), Interest::READABLE) }
            .map_err(io::Error::from)?;
        loop {
            let mut guard = fd.readable().await?;
            match self.try_get_event()? {
                Some(e) => return Ok(e),
                None => guard.clear_ready(),
            }
        }
    }

    /// Blocks until the fd is readable or `deadline` passes (`None`: no limit).
    fn wait_readable(&self, deadline: Option<Instant>) -> io::Result<bool> {
        self.inner.ctx.before_block();
        loop {
            let ms: libc::c_int = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    // Round up so the wait never ends before the deadline.
                    let ms = left.as_nanos().div_ceil(1_000_000);
                    ms.min(i32::MAX as u128) as libc::c_int
                }
            };
            let mut p = libc::pollfd {
                fd: self.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `p` is one valid, initialized pollfd for the duration of the call.
            let r = unsafe { libc::poll(&mut p, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if r > 0 || deadline.is_none() {
                return Ok(r > 0);
            }
        }
    }

    /// Registers an id whose events arrive here.
    pub(crate) fn register(&self, h: IdHandle, id: &Arc<IdShared>) {
        let mut ids = self.inner.ids.lock().unwrap_or_else(|p| p.into_inner());
        ids.retain(|_, w| w.strong_count() > 0);
        ids.insert(h, Arc::downgrade(id));
    }

    /// Forgets an id (destroyed or migrated away).
    pub(crate) fn unregister(&self, h: IdHandle) {
        self.inner
            .ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&h);
    }

    /// Turns an event into a [`CmEvent`]: a connection request gets its new
    /// id (rdma-core: `rc_id`, the id librdmacm made), and the id the event
    /// is for learns what happened.
    pub(crate) fn wrap(&self, e: Event, rc_id: Option<sys::CmId>) -> CmEvent {
        let (target, listener) = {
            let ids = self.inner.ids.lock().unwrap_or_else(|p| p.into_inner());
            let get = |h: &IdHandle| ids.get(h).and_then(Weak::upgrade);
            (get(&e.id), e.listen_id.as_ref().and_then(get))
        };
        if let Some(t) = target {
            t.note(e.kind);
        }
        let new_id = if e.kind != EventKind::ConnectRequest {
            None
        } else {
            let qp_type = listener.map(|l| l.qp_type);
            let imp = match (&self.inner.ch, rc_id) {
                (ChImp::Native(_), _) => Some(IdImp::Native),
                (ChImp::RdmaCore(_), Some(id)) => Some(IdImp::RdmaCore(id)),
                (ChImp::RdmaCore(_), None) => None,
            };
            imp.map(|imp| CmId::adopt(&self.inner.ctx, e.id, self, qp_type, imp))
        };
        CmEvent {
            kind: e.kind,
            status: e.status,
            id: e.id,
            listen_id: e.listen_id,
            param: e.param,
            new_id,
        }
    }

    pub(crate) fn same(&self, other: &EventChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        match &self.inner.ch {
            ChImp::Native(c) => c.as_raw_fd(),
            ChImp::RdmaCore(c) => c.fd(),
        }
    }
}

/// A CM event (`struct rdma_cm_event`). No acknowledgement is needed: the
/// event is the caller's once read.
#[derive(Debug)]
pub struct CmEvent {
    kind: EventKind,
    status: i32,
    id: IdHandle,
    listen_id: Option<IdHandle>,
    param: EventParam,
    new_id: Option<CmId>,
}

impl CmEvent {
    /// What happened.
    pub fn kind(&self) -> EventKind {
        self.kind
    }

    /// 0, a negative errno, or for [`EventKind::Rejected`] the REJ reason
    /// (28: rejected by the application, 8: nobody listens on the port).
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The id this event is for; for a connection request, the new id (see
    /// [`CmEvent::take_new_id`]).
    pub fn id(&self) -> IdHandle {
        self.id
    }

    /// Whether this event is for `id`.
    pub fn is_for(&self, id: &CmId) -> bool {
        self.id == id.handle()
    }

    /// For a connection request, the listener it arrived on.
    pub fn listen_id(&self) -> Option<IdHandle> {
        self.listen_id
    }

    /// The event's parameters.
    pub fn param(&self) -> &EventParam {
        &self.param
    }

    /// The peer's connection parameters (requests, replies, rejections,
    /// establishment on the active side).
    pub fn conn_param(&self) -> Option<&ConnParam> {
        match &self.param {
            EventParam::Conn(c) => Some(c),
            _ => None,
        }
    }

    /// UD parameters: the peer's address handle attributes, QPN and Q_Key
    /// (UD establishment, SIDR requests, multicast joins).
    pub fn ud_param(&self) -> Option<&UdParam> {
        match &self.param {
            EventParam::Ud(u) => Some(u),
            _ => None,
        }
    }

    /// The private data the peer sent with this event (the whole fixed-size
    /// field of its CM message, zero padded), or an empty slice.
    pub fn private_data(&self) -> &[u8] {
        match &self.param {
            EventParam::Conn(c) => &c.private_data,
            EventParam::Ud(u) => &u.private_data,
            EventParam::None => &[],
        }
    }

    /// The new id of a connection request (once; `None` for other events).
    /// An id nobody takes is destroyed with the event, which rejects the request.
    pub fn take_new_id(&mut self) -> Option<CmId> {
        self.new_id.take()
    }

    /// The failure this event reports (rejection, unreachable peer, address,
    /// route or connection error), or `None` for a success.
    pub fn error(&self) -> Option<Error> {
        Error::from_event(self.kind, self.status, &self.param)
    }

    /// A copy without the new id.
    pub(crate) fn detached(&self) -> CmEvent {
        CmEvent {
            kind: self.kind,
            status: self.status,
            id: self.id,
            listen_id: self.listen_id,
            param: self.param.clone(),
            new_id: None,
        }
    }
}
