//! CM ids (`struct rdma_cm_id`): addresses, connections, QPs on ids,
//! synchronous ids and endpoints.

use super::addr::{AddrInfo, probe_route};
use super::channel::{ChImp, CmEvent, EventChannel};
use super::error::{Error, Result};
use super::{ConnParam, EventKind, IdHandle, PortSpace, RDMA_UDP_QKEY, qp_type_for};
use crate::backend::rdma_core::{cm_error, sys};
use crate::verbs::device::WeakDev;
use crate::verbs::pd::PdImp;
use crate::verbs::qp::QpInner;
use crate::verbs::{CompChannel, Context, Cq, Pd, Qp, QpInit, Srq};
use softrdma_engine::Engine;
use softrdma_engine::cm_proto::CmError;
use softrdma_transport::{Access, QpAttr, QpAttrMask, QpCap, QpState, QpType};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

/// How long [`CmId::create_ep`] waits for address and route resolution.
const EP_RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);

/// An option of `rdma_set_option`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmOption {
    /// `RDMA_OPTION_ID_TOS`: IP type of service (traffic class) of the path.
    Tos(u8),
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: QP local ACK timeout exponent (0..=31).
    AckTimeout(u8),
    /// `RDMA_OPTION_ID_REUSEADDR`: allow binding a port in use.
    ReuseAddr(bool),
    /// `RDMA_OPTION_ID_AFONLY`: an IPv6 wildcard does not take IPv4.
    AfOnly(bool),
}

/// The options set on an id with [`CmId::set_option`].
///
/// softrdma stores them; `tos` and `ack_timeout` show in what
/// [`CmId::init_qp_attr`] reports (traffic class of the path, QP timeout).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CmOptions {
    /// Type of service.
    pub tos: Option<u8>,
    /// Local ACK timeout exponent.
    pub ack_timeout: Option<u8>,
    /// Address reuse.
    pub reuse_addr: bool,
    /// IPv6 only.
    pub af_only: bool,
}

/// How [`CmId::create_qp`] creates the QP of an id (`struct ibv_qp_init_attr`).
///
/// CQs left out are created with the QP (one completion channel, a send CQ
/// of `max_send_wr` and a receive CQ of `max_recv_wr` entries), as
/// librdmacm does for `rdma_create_qp` with NULL CQs.
#[derive(Debug, Clone)]
pub struct QpOptions {
    /// Transport; `None`: the id's.
    pub qp_type: Option<QpType>,
    /// Send completions; `None`: a new CQ.
    pub send_cq: Option<Cq>,
    /// Receive completions; `None`: a new CQ.
    pub recv_cq: Option<Cq>,
    /// Shared receive queue.
    pub srq: Option<Srq>,
    /// Capacities.
    pub cap: QpCap,
    /// Signal every send WR.
    pub sq_sig_all: bool,
    /// A UD QP does not receive its own multicast sends
    /// (`IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`).
    pub block_self_mcast_lb: bool,
}

impl Default for QpOptions {
    /// 128 WRs each way, 4 SGEs, 64 inline bytes, new CQs, selective signalling.
    fn default() -> Self {
        QpOptions {
            qp_type: None,
            send_cq: None,
            recv_cq: None,
            srq: None,
            cap: QpCap {
                max_send_wr: 128,
                max_recv_wr: 128,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
            block_self_mcast_lb: false,
        }
    }
}

/// The QP of an id and what it was created with.
struct QpResources {
    qp: Qp,
    pd: Pd,
    send_cq: Cq,
    recv_cq: Cq,
    channel: Option<CompChannel>,
    block_self_mcast_lb: bool,
}

/// What a passive endpoint gives the QPs of its requests (`rdma_create_ep`).
#[derive(Clone)]
struct EpTemplate {
    pd: Option<Pd>,
    init: QpOptions,
}

pub(crate) struct IdState {
    channel: EventChannel,
    sync: bool,
    sync_timeout: Option<Duration>,
    options: CmOptions,
    last: Option<CmEvent>,
    /// ESTABLISHED (or CONNECT_RESPONSE) was read for this id.
    established: bool,
    /// DISCONNECTED was read for this id.
    disconnected: bool,
    groups: Vec<IpAddr>,
    ep: Option<EpTemplate>,
    /// rdma-core: the id's QP, moved to ERR on DISCONNECTED as the native
    /// CM does (librdmacm leaves that to the application).
    rc_qp: Option<Weak<QpInner>>,
}

/// The part of an id its event channel can reach.
pub(crate) struct IdShared {
    /// The transport of the id's QP (connection requests inherit it).
    pub(crate) qp_type: QpType,
    state: Mutex<IdState>,
}

impl IdShared {
    fn lock(&self) -> MutexGuard<'_, IdState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An event for this id was read.
    pub(crate) fn note(&self, kind: EventKind) {
        let mut s = self.lock();
        match kind {
            EventKind::Established | EventKind::ConnectResponse => s.established = true,
            EventKind::Disconnected => {
                s.disconnected = true;
                if let Some(q) = s.rc_qp.as_ref().and_then(Weak::upgrade) {
                    let _ = Qp(q).to_error();
                }
            }
            _ => {}
        }
    }
}

/// The id of one backend.
pub(crate) enum IdImp {
    /// The engine's CM (the handle is [`CmId::handle`]).
    Native,
    /// librdmacm's id.
    RdmaCore(sys::CmId),
}

/// A CM identifier (`struct rdma_cm_id`): an endpoint of connection
/// management — a listener, one side of a connection, or a UD/multicast
/// endpoint — with, optionally, its QP.
///
/// Dropping it destroys it (`rdma_destroy_id`): a connection still up is
/// disconnected, a request not yet accepted is rejected, the port is released,
/// then the QP, CQs and (last user of it) the default PD go.
///
/// Ids made with [`CmId::new`] report to an [`EventChannel`]; their calls
/// return at once. Ids made with [`CmId::new_sync`] (or [`CmId::create_ep`],
/// [`CmId::get_request`]) are *synchronous*: each call waits for its own
/// outcome (`resolve_addr` for ADDR_RESOLVED, `connect` for ESTABLISHED,
/// ...) and fails with the error a failure event reports. Use one
/// synchronous call at a time per id.
///
/// Ids are `Send` and `Sync`: one thread may wait for events while another
/// disconnects.
pub struct CmId {
    ctx: Context,
    h: IdHandle,
    ps: PortSpace,
    qp_type: QpType,
    shared: Arc<IdShared>,
    res: OnceLock<QpResources>,
    imp: IdImp,
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (l, r) = self.addrs();
        f.debug_struct("CmId")
            .field("handle", &self.h.0)
            .field("port_space", &self.ps)
            .field("qp_type", &self.qp_type)
            .field("local", &l)
            .field("peer", &r)
            .field("qp", &self.qp())
            .finish()
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        self.detach_all();
        if matches!(self.imp, IdImp::RdmaCore(_)) {
            // rdma_destroy_id now (the field would go after the QP).
            self.imp = IdImp::Native;
        } else if let Some(e) = self.ctx.native() {
            e.cm_destroy_id(self.h);
        }
        self.shared.lock().channel.unregister(self.h);
        // The QP, its CQs and the PD go after the id (field order).
    }
}

/// Per-device default PDs (`id->pd` of librdmacm), kept while ids use them.
type PdSlot = (WeakDev, Box<dyn Fn() -> Option<Pd> + Send>);
static DEFAULT_PDS: Mutex<Vec<PdSlot>> = Mutex::new(Vec::new());

fn default_pd(ctx: &Context) -> Result<Pd> {
    let mut slots = DEFAULT_PDS.lock().unwrap_or_else(|p| p.into_inner());
    slots.retain(|(d, _)| d.alive());
    if let Some(pd) = slots
        .iter()
        .filter(|(d, _)| d.is(ctx))
        .find_map(|(_, get)| get())
    {
        return Ok(pd);
    }
    let pd = ctx.alloc_pd()?;
    let weak = Arc::downgrade(&pd.0);
    slots.retain(|(d, _)| !d.is(ctx));
    slots.push((ctx.downgrade(), Box::new(move || weak.upgrade().map(Pd))));
    Ok(pd)
}

/// A connection-management failure of librdmacm.
fn rc_err(addr: Option<SocketAddr>) -> impl FnOnce(sys::Failure) -> Error {
    move |f| cm_error(f, addr)
}

/// A timeout in librdmacm's milliseconds.
fn ms(t: Duration) -> i32 {
    i32::try_from(t.as_millis()).unwrap_or(i32::MAX)
}

impl CmId {
    fn make(
        ctx: &Context,
        h: IdHandle,
        ch: &EventChannel,
        sync: bool,
        qp_type: Option<QpType>,
        imp: IdImp,
    ) -> CmId {
        let ps = match (&imp, ctx.native()) {
            (IdImp::Native, Some(e)) => e.cm_port_space(h),
            (IdImp::RdmaCore(id), _) => PortSpace::from_value(id.port_space()),
            (IdImp::Native, None) => None,
        }
        .unwrap_or(PortSpace::Tcp);
        let qp_type = qp_type.unwrap_or(qp_type_for(ps));
        let shared = Arc::new(IdShared {
            qp_type,
            state: Mutex::new(IdState {
                channel: ch.clone(),
                sync,
                sync_timeout: None,
                options: CmOptions::default(),
                last: None,
                established: false,
                disconnected: false,
                groups: Vec::new(),
                ep: None,
                rc_qp: None,
            }),
        });
        ch.register(h, &shared);
        CmId {
            ctx: ctx.clone(),
            h,
            ps,
            qp_type,
            shared,
            res: OnceLock::new(),
            imp,
        }
    }

    fn create(
        ctx: &Context,
        ch: &EventChannel,
        sync: bool,
        ps: PortSpace,
        t: QpType,
    ) -> Result<CmId> {
        let (h, imp) = match (&ch.inner.ch, ctx.native()) {
            (ChImp::Native(c), Some(e)) => {
                (e.cm_create_id(Some(Arc::clone(c)), ps, t), IdImp::Native)
            }
            (ChImp::RdmaCore(c), _) => {
                let (id, h) = sys::CmId::new(c, ps.value(), t).map_err(rc_err(None))?;
                (IdHandle(h), IdImp::RdmaCore(id))
            }
            (ChImp::Native(_), None) => {
                return Err(Error::InvalidArgument(
                    "the channel belongs to another device".into(),
                ));
            }
        };
        Ok(CmId::make(ctx, h, ch, sync, Some(t), imp))
    }

    /// Creates an id reporting to `channel` (`rdma_create_id`). `qp_type` is
    /// the transport of its QP (RC or UC for [`PortSpace::Tcp`], UD for
    /// [`PortSpace::Udp`]; see [`super::qp_type_for`]).
    pub fn new(channel: &EventChannel, ps: PortSpace, qp_type: QpType) -> Result<CmId> {
        check_ps(ps, qp_type)?;
        CmId::create(&channel.inner.ctx, channel, false, ps, qp_type)
    }

    /// Creates a synchronous id (`rdma_create_id` with a NULL channel): every
    /// call waits for its outcome. Its events go to a channel of its own
    /// ([`CmId::channel`]).
    pub fn new_sync(ctx: &Context, ps: PortSpace, qp_type: QpType) -> Result<CmId> {
        check_ps(ps, qp_type)?;
        let ch = EventChannel::new(ctx)?;
        CmId::create(ctx, &ch, true, ps, qp_type)
    }

    /// The id of a connection request the engine created, reporting to `ch`,
    /// with the transport of its listener (if known).
    pub(crate) fn adopt(
        ctx: &Context,
        h: IdHandle,
        ch: &EventChannel,
        qp_type: Option<QpType>,
        imp: IdImp,
    ) -> CmId {
        CmId::make(ctx, h, ch, false, qp_type, imp)
    }

    /// Destroys the id (`rdma_destroy_id`, `rdma_destroy_ep`): the same as
    /// dropping it.
    pub fn destroy(self) {}

    /// The handle events name this id by.
    pub fn handle(&self) -> IdHandle {
        self.h
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The port space.
    pub fn port_space(&self) -> PortSpace {
        self.ps
    }

    /// The transport of the id's QP.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Whether calls wait for their outcome (see [`CmId::new_sync`]).
    pub fn is_sync(&self) -> bool {
        self.shared.lock().sync
    }

    /// The channel this id's events arrive on (its own one if synchronous).
    pub fn channel(&self) -> EventChannel {
        self.shared.lock().channel.clone()
    }

    /// Bounds every wait of a synchronous call (`None`, the default: wait as
    /// long as the connection manager takes; it reports a silent peer as
    /// unreachable within seconds). A wait that runs out fails with
    /// [`Error::TimedOut`].
    pub fn set_sync_timeout(&self, timeout: Option<Duration>) {
        self.shared.lock().sync_timeout = timeout;
    }

    /// For a synchronous id, the event its last call ended with (`id->event`
    /// of librdmacm): e.g. the peer's private data after `connect`, or the
    /// request of an id from [`CmId::get_request`].
    pub fn last_event(&self) -> Option<CmEvent> {
        self.shared.lock().last.as_ref().map(CmEvent::detached)
    }

    fn addrs(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        match (&self.imp, self.ctx.native()) {
            (IdImp::Native, Some(e)) => e.cm_addrs(self.h),
            (IdImp::RdmaCore(id), _) => id.addrs(),
            (IdImp::Native, None) => (None, None),
        }
    }

    /// The local address (`rdma_get_local_addr`), once bound or resolved.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.addrs().0
    }

    /// The peer's address (`rdma_get_peer_addr`), once resolved or requested.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.addrs().1
    }

    /// Runs a typed CM operation of the native device's engine on this id.
    fn native_op<R>(
        &self,
        f: impl FnOnce(&Engine, IdHandle) -> std::result::Result<R, CmError>,
    ) -> Result<R> {
        match self.ctx.native() {
            Some(e) => Ok(f(e, self.h)?),
            None => Err(Error::InvalidArgument(
                "not an id of the native device".into(),
            )),
        }
    }

    // ---- waiting for outcomes ----

    fn wait_parts(&self) -> (bool, EventChannel, Option<Duration>) {
        let s = self.shared.lock();
        (s.sync, s.channel.clone(), s.sync_timeout)
    }

    /// Reads the next event of a synchronous id and checks it is one of `ok`.
    fn wait_own(&self, ok: &[EventKind]) -> Result<CmEvent> {
        let (_, ch, timeout) = self.wait_parts();
        let ev = match timeout {
            None => ch.get_event()?,
            Some(t) => ch.get_event_timeout(t)?.ok_or_else(|| {
                Error::TimedOut(format!("no CM event within {t:?} (waiting for {ok:?})"))
            })?,
        };
        self.outcome(ev, ok)
    }

    #[cfg(feature = "tokio")]
    async fn wait_own_async(&self, ok: &[EventKind]) -> Result<CmEvent> {
        let (_, ch, timeout) = self.wait_parts();
        let ev = match timeout {
            None => ch.get_event_async().await?,
            Some(t) => tokio::time::timeout(t, ch.get_event_async())
                .await
                .map_err(|_| {
                    Error::TimedOut(format!("no CM event within {t:?} (waiting for {ok:?})"))
                })??,
        };
        self.outcome(ev, ok)
    }

    fn outcome(&self, ev: CmEvent, ok: &[EventKind]) -> Result<CmEvent> {
        self.shared.lock().last = Some(ev.detached());
        if let Some(e) = ev.error() {
            return Err(e);
        }
        if !ok.contains(&ev.kind()) {
            return Err(Error::UnexpectedEvent {
                kind: ev.kind(),
                status: ev.status(),
            });
        }
        Ok(ev)
    }

    /// For synchronous ids: waits for one of `ok`.
    fn finish(&self, ok: &[EventKind]) -> Result<()> {
        if self.is_sync() {
            self.wait_own(ok)?;
        }
        Ok(())
    }

    #[cfg(feature = "tokio")]
    async fn finish_async(&self, ok: &[EventKind]) -> Result<()> {
        if self.is_sync() {
            self.wait_own_async(ok).await?;
        }
        Ok(())
    }

    // ---- addresses ----

    /// Binds the id to a local address and port (`rdma_bind_addr`); port 0
    /// picks a free one, the unspecified address means any of the device's.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        match &self.imp {
            IdImp::Native => self.native_op(|e, h| e.cm_bind(h, addr).map(|_| ())),
            IdImp::RdmaCore(id) => id.bind(addr).map_err(rc_err(Some(addr))),
        }
    }

    /// Resolves `dst` (`rdma_resolve_addr`): binds `src` first if given, then
    /// checks in the background that the device can route to `dst` and that
    /// a device answers there on the RoCE port (like ARP), and reports
    /// ADDR_RESOLVED — or ADDR_ERROR if not, or if `timeout` passes first.
    /// Synchronous ids wait for the outcome.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        self.start_resolve_addr(src, dst, timeout)?;
        self.finish(&[EventKind::AddrResolved])
    }

    fn start_resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        if let IdImp::RdmaCore(id) = &self.imp {
            return id
                .resolve_addr(src, dst, ms(timeout))
                .map_err(rc_err(Some(dst)));
        }
        let bound = self.local_addr();
        if let (Some(s), None) = (src, bound) {
            self.bind_addr(s)?;
        }
        let Some(engine) = self.ctx.native().map(Arc::clone) else {
            return Err(Error::InvalidArgument(
                "not an id of the native device".into(),
            ));
        };
        let dev = engine.local_addr();
        let local = engine.cm_resolve_source(self.h, src.map(|a| a.ip()), dst.ip());
        let h = self.h;
        std::thread::Builder::new()
            .name("softrdma-resolve".into())
            .spawn(move || {
                let r = probe_route(local, dst.ip(), dev.port(), timeout);
                // The id may be gone by now: then there is nobody to tell.
                let _ = match r {
                    Ok(()) => engine.cm_addr_resolved(h, local, dst),
                    Err(errno) => engine.cm_addr_error(h, errno),
                };
            })?;
        Ok(())
    }

    /// Resolves the route to the resolved address (`rdma_resolve_route`).
    /// RoCE needs nothing beyond address resolution, so ROUTE_RESOLVED is
    /// reported at once (`timeout` cannot pass); calling this before
    /// `resolve_addr` is an error.
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        self.start_resolve_route(timeout)?;
        self.finish(&[EventKind::RouteResolved])
    }

    fn start_resolve_route(&self, timeout: Duration) -> Result<()> {
        match &self.imp {
            IdImp::Native => self.native_op(Engine::cm_resolve_route),
            IdImp::RdmaCore(id) => id.resolve_route(ms(timeout)).map_err(rc_err(None)),
        }
    }

    // ---- passive side ----

    /// Listens for connection requests (`rdma_listen`); an unbound id gets
    /// the wildcard address and a free port. Requests arrive as
    /// [`EventKind::ConnectRequest`] events carrying a new id
    /// ([`CmEvent::take_new_id`]), or from [`CmId::get_request`] on a
    /// synchronous id. The backlog is not limited.
    pub fn listen(&self, backlog: u32) -> Result<()> {
        match &self.imp {
            IdImp::Native => self.native_op(|e, h| e.cm_listen(h).map(|_| ())),
            IdImp::RdmaCore(id) => id
                .listen(i32::try_from(backlog).unwrap_or(i32::MAX))
                .map_err(rc_err(self.local_addr())),
        }
    }

    /// Waits for a connection request on a synchronous listener
    /// (`rdma_get_request`). The new id is synchronous too, with a channel of
    /// its own; if this id came from [`CmId::create_ep`] with QP options, the
    /// new id has its QP already. The request's parameters are its
    /// [`CmId::last_event`].
    pub fn get_request(&self) -> Result<CmId> {
        self.check_sync_listener()?;
        let ev = self.wait_own(&[EventKind::ConnectRequest])?;
        self.adopt_request(ev)
    }

    /// [`CmId::get_request`] without blocking the thread.
    #[cfg(feature = "tokio")]
    pub(crate) async fn get_request_async(&self) -> Result<CmId> {
        self.check_sync_listener()?;
        let ev = self.wait_own_async(&[EventKind::ConnectRequest]).await?;
        self.adopt_request(ev)
    }

    fn check_sync_listener(&self) -> Result<()> {
        if !self.is_sync() {
            return Err(Error::InvalidArgument(
                "get_request needs a synchronous id (read CONNECT_REQUEST events from the channel)"
                    .into(),
            ));
        }
        Ok(())
    }

    fn adopt_request(&self, mut ev: CmEvent) -> Result<CmId> {
        let child = ev
            .take_new_id()
            .ok_or_else(|| Error::InvalidArgument("request without an id".into()))?;
        let (timeout, ep) = {
            let s = self.shared.lock();
            (s.sync_timeout, s.ep.clone())
        };
        // librdmacm migrates the id of a synchronous request to a channel of its own.
        let ch = EventChannel::new(&self.ctx)?;
        child.migrate(&ch)?;
        {
            let mut s = child.shared.lock();
            s.sync = true;
            s.sync_timeout = timeout;
            s.last = Some(ev.detached());
        }
        if let Some(t) = ep {
            child.create_qp(t.pd.as_ref(), &t.init)?;
        }
        Ok(child)
    }

    /// Accepts the connection request this id was created for
    /// (`rdma_accept`). With a QP on the id (see [`CmId::create_qp`]), the
    /// CM moves it to RTR and RTS; without one, `param.qp_num` names the QP
    /// the application connected itself (see [`CmId::init_qp_attr`]).
    /// Synchronous ids wait for ESTABLISHED (RC/UC); UD requests are answered
    /// at once.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        self.start_accept(param)?;
        if self.ps.is_ud() {
            return Ok(());
        }
        self.finish(&[EventKind::Established])
    }

    fn start_accept(&self, param: &ConnParam) -> Result<()> {
        let p = self.clamp(param);
        match &self.imp {
            IdImp::Native => self.native_op(|e, h| e.cm_accept(h, &p)),
            IdImp::RdmaCore(id) => id.accept(&p).map_err(rc_err(None)),
        }
    }

    #[cfg(feature = "tokio")]
    pub(crate) async fn accept_async(&self, param: &ConnParam) -> Result<()> {
        self.start_accept(param)?;
        if self.ps.is_ud() {
            return Ok(());
        }
        self.finish_async(&[EventKind::Established]).await
    }

    /// Rejects the connection request this id was created for
    /// (`rdma_reject`); the peer gets REJECTED (reason 28) with `private_data`
    /// (at most 148 bytes; 136 for UD).
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        match &self.imp {
            IdImp::Native => self.native_op(|e, h| e.cm_reject(h, private_data)),
            IdImp::RdmaCore(id) => id.reject(private_data).map_err(rc_err(None)),
        }
    }

    // ---- active side ----

    /// Connects to the resolved peer (`rdma_connect`): a REQ for RC/UC, a
    /// SIDR request for UD. `param.private_data` holds at most 56 bytes (180
    /// for UD). READ/atomic depths above the device's are clamped.
    /// Synchronous ids wait for ESTABLISHED (or CONNECT_RESPONSE when the id
    /// has no QP: then connect the QP with [`CmId::init_qp_attr`] and call
    /// [`CmId::establish`]).
    pub fn connect(&self, param: &ConnParam) -> Result<()> {
        self.start_connect(param)?;
        self.finish(&[EventKind::Established, EventKind::ConnectResponse])
    }

    fn start_connect(&self, param: &ConnParam) -> Result<()> {
        let p = self.clamp(param);
        match &self.imp {
            IdImp::Native => self.native_op(|e, h| e.cm_connect(h, &p)),
            IdImp::RdmaCore(id) => id.connect(&p).map_err(rc_err(self.peer_addr())),
        }
    }

    #[cfg(feature = "tokio")]
    pub(crate) async fn connect_async(&self, param: &ConnParam) -> Result<()> {
        self.start_connect(param)?;
        self.finish_async(&[EventKind::Established, EventKind::ConnectResponse])
            .await
    }

    /// Completes an active connection whose reply came as CONNECT_RESPONSE
    /// (an id without a QP): sends the RTU (`rdma_establish`).
    pub fn establish(&self) -> Result<()> {
        match &self.imp {
            IdImp::Native => self.native_op(Engine::cm_establish)?,
            IdImp::RdmaCore(id) => id.establish().map_err(rc_err(None))?,
        }
        self.shared.lock().established = true;
        Ok(())
    }

    /// READ/atomic depths within the device's limits (`u8::MAX`: the limit).
    fn clamp(&self, p: &ConnParam) -> ConnParam {
        let max = self
            .ctx
            .query_device()
            .max_qp_rd_atom
            .min(u32::from(u8::MAX)) as u8;
        let mut p = p.clone();
        p.responder_resources = p.responder_resources.min(max);
        p.initiator_depth = p.initiator_depth.min(max);
        p
    }

    // ---- both sides ----

    /// Disconnects (`rdma_disconnect`): the QP goes to the error state (its
    /// posted work requests complete with `WR_FLUSH_ERR`) and the peer is
    /// told; both sides get DISCONNECTED. Synchronous ids wait for it unless
    /// it was already reported.
    pub fn disconnect(&self) -> Result<()> {
        if self.start_disconnect()? {
            self.finish(&[EventKind::Disconnected])?;
        }
        Ok(())
    }

    /// Starts a disconnect; true if a synchronous id must wait for DISCONNECTED.
    fn start_disconnect(&self) -> Result<bool> {
        match &self.imp {
            IdImp::Native => self.native_op(Engine::cm_disconnect)?,
            // UD ids have no connection to end (librdmacm would say EINVAL).
            IdImp::RdmaCore(_) if self.ps.is_ud() => {}
            IdImp::RdmaCore(id) => id.disconnect().map_err(rc_err(None))?,
        }
        let s = self.shared.lock();
        Ok(s.sync && !self.ps.is_ud() && s.established && !s.disconnected)
    }

    #[cfg(feature = "tokio")]
    pub(crate) async fn disconnect_async(&self) -> Result<()> {
        if self.start_disconnect()? {
            self.finish_async(&[EventKind::Disconnected]).await?;
        }
        Ok(())
    }

    /// For a synchronous id: waits up to `timeout` (`None`: no limit) for the
    /// peer to disconnect; true once DISCONNECTED was reported.
    pub fn wait_disconnected(&self, timeout: Option<Duration>) -> Result<bool> {
        let (sync, ch, _) = self.wait_parts();
        if !sync {
            return Err(Error::InvalidArgument(
                "wait_disconnected needs a synchronous id".into(),
            ));
        }
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        loop {
            if self.shared.lock().disconnected {
                return Ok(true);
            }
            let ev = match deadline {
                None => Some(ch.get_event()?),
                Some(d) => {
                    ch.get_event_timeout(d.saturating_duration_since(std::time::Instant::now()))?
                }
            };
            match ev {
                Some(ev) => self.shared.lock().last = Some(ev.detached()),
                None => return Ok(self.shared.lock().disconnected),
            }
        }
    }

    /// The QP attributes and mask librdmacm's `rdma_init_qp_attr` gives for
    /// moving a QP of this connection to `state` (INIT, RTR or RTS), for
    /// applications that connect their own QP (then pass its number as
    /// [`ConnParam::qp_num`]). RTR and RTS need the peer's request or reply.
    pub fn init_qp_attr(&self, state: QpState) -> Result<(QpAttr, QpAttrMask)> {
        use QpAttrMask as M;
        if let IdImp::RdmaCore(id) = &self.imp {
            return id.init_qp_attr(state).map_err(rc_err(None));
        }
        let params = self.native_op(|e, h| Ok(e.cm_qp_params(h)))?;
        let opts = self.options();
        let mut a = QpAttr {
            qp_state: state,
            port_num: 1,
            pkey_index: 0,
            ..QpAttr::default()
        };
        let ud = self.qp_type == QpType::Ud;
        let rc = self.qp_type == QpType::Rc;
        let need = || {
            params.ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "no connection yet: {state:?} attributes need the peer's request or reply"
                ))
            })
        };
        let mask = match state {
            QpState::Init if ud => {
                a.qkey = RDMA_UDP_QKEY;
                M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY
            }
            QpState::Init => {
                // As the kernel CM: WRITE always, READ/atomic when this side
                // accepts such requests (before a connection: READ, as create_qp).
                a.qp_access_flags = match params {
                    Some(p) if p.max_dest_rd_atomic > 0 => {
                        Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
                    }
                    Some(_) => Access::REMOTE_WRITE,
                    None => Access::REMOTE_WRITE | Access::REMOTE_READ,
                };
                M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
            }
            QpState::Rtr if ud => M::STATE,
            QpState::Rts if ud => {
                a.sq_psn = 0;
                M::STATE | M::SQ_PSN
            }
            QpState::Rtr => {
                let p = need()?;
                a.ah_attr = p.av;
                if let Some(tos) = opts.tos {
                    a.ah_attr.traffic_class = tos;
                }
                a.path_mtu = p.mtu;
                a.dest_qp_num = p.remote_qpn;
                a.rq_psn = p.rq_psn;
                let mut m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
                if rc {
                    a.max_dest_rd_atomic = p.max_dest_rd_atomic;
                    a.min_rnr_timer = p.min_rnr_timer;
                    m = m | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
                }
                m
            }
            QpState::Rts => {
                let p = need()?;
                a.sq_psn = p.sq_psn;
                let mut m = M::STATE | M::SQ_PSN;
                if rc {
                    a.timeout = opts.ack_timeout.unwrap_or(p.timeout);
                    a.retry_cnt = p.retry_cnt;
                    a.rnr_retry = p.rnr_retry;
                    a.max_rd_atomic = p.max_rd_atomic;
                    m = m | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
                }
                m
            }
            s => {
                return Err(Error::InvalidArgument(format!(
                    "init_qp_attr covers INIT, RTR and RTS, not {s:?}"
                )));
            }
        };
        Ok((a, mask))
    }

    /// Sets an option (`rdma_set_option`).
    pub fn set_option(&self, opt: CmOption) -> Result<()> {
        if let IdImp::RdmaCore(id) = &self.imp {
            use softrdma_ffi as f;
            let int = |on: bool| libc::c_int::from(on).to_ne_bytes();
            let r = match opt {
                CmOption::Tos(t) => id.set_option(f::RDMA_OPTION_ID_TOS, &mut [t]),
                CmOption::AckTimeout(t) => id.set_option(f::RDMA_OPTION_ID_ACK_TIMEOUT, &mut [t]),
                CmOption::ReuseAddr(on) => id.set_option(f::RDMA_OPTION_ID_REUSEADDR, &mut int(on)),
                CmOption::AfOnly(on) => id.set_option(f::RDMA_OPTION_ID_AFONLY, &mut int(on)),
            };
            r.map_err(rc_err(None))?;
        }
        let mut s = self.shared.lock();
        match opt {
            CmOption::Tos(t) => s.options.tos = Some(t),
            CmOption::AckTimeout(t) if t <= 31 => s.options.ack_timeout = Some(t),
            CmOption::AckTimeout(t) => {
                return Err(Error::InvalidArgument(format!("ACK timeout {t} (0..=31)")));
            }
            CmOption::ReuseAddr(on) => s.options.reuse_addr = on,
            CmOption::AfOnly(on) => s.options.af_only = on,
        }
        Ok(())
    }

    /// The options set so far.
    pub fn options(&self) -> CmOptions {
        self.shared.lock().options
    }

    /// Moves the id's future events to `channel` (`rdma_migrate_id`); events
    /// of the id not yet read from the old channel are dropped. The id is
    /// asynchronous afterwards. Both channels must be on the id's device.
    pub fn migrate(&self, channel: &EventChannel) -> Result<()> {
        let other = || Error::InvalidArgument("the channel belongs to another device".into());
        if !channel.inner.ctx.same_device(&self.ctx) {
            return Err(other());
        }
        let old = {
            let mut s = self.shared.lock();
            s.sync = false;
            std::mem::replace(&mut s.channel, channel.clone())
        };
        if old.same(channel) {
            return Ok(());
        }
        match (&self.imp, &channel.inner.ch, self.ctx.native()) {
            (IdImp::Native, ChImp::Native(c), Some(e)) => e.cm_set_channel(self.h, Arc::clone(c)),
            (IdImp::RdmaCore(id), ChImp::RdmaCore(c), _) => {
                if let Err(f) = id.migrate(c) {
                    self.shared.lock().channel = old;
                    return Err(cm_error(f, None));
                }
            }
            _ => {
                self.shared.lock().channel = old;
                return Err(other());
            }
        }
        channel.register(self.h, &self.shared);
        old.unregister(self.h);
        Ok(())
    }

    // ---- QPs ----

    /// Creates the id's QP (`rdma_create_qp`) in `pd` (`None`: the device's
    /// default PD), with the CQs of `opts` or new ones. RC/UC QPs are moved
    /// to INIT with remote WRITE and READ rights; the CM moves them to RTR
    /// and RTS when the connection comes up and to ERR on disconnect. UD QPs
    /// are made ready at once (INIT with Q_Key [`RDMA_UDP_QKEY`], RTR, RTS).
    pub fn create_qp(&self, pd: Option<&Pd>, opts: &QpOptions) -> Result<&Qp> {
        // Serialize creators; the state lock is never taken under the engine lock.
        let mut guard = self.shared.lock();
        if self.res.get().is_some() {
            return Err(Error::InvalidArgument("the id has a QP already".into()));
        }
        let pd = match pd {
            Some(p) => p.clone(),
            None => default_pd(&self.ctx)?,
        };
        if !pd.context().same_device(&self.ctx) {
            return Err(Error::InvalidArgument(
                "the PD belongs to another device".into(),
            ));
        }
        let qp_type = opts.qp_type.unwrap_or(self.qp_type);
        let mut channel = None;
        let mut new_cq = |n: u32| -> Result<Cq> {
            if channel.is_none() {
                channel = Some(self.ctx.create_comp_channel()?);
            }
            Ok(self.ctx.create_cq(n.max(1), channel.as_ref())?)
        };
        let send_cq = match &opts.send_cq {
            Some(c) => c.clone(),
            None => new_cq(opts.cap.max_send_wr)?,
        };
        let recv_cq = match &opts.recv_cq {
            Some(c) => c.clone(),
            None => new_cq(opts.cap.max_recv_wr)?,
        };
        let init = QpInit {
            qp_type,
            send_cq: &send_cq,
            recv_cq: &recv_cq,
            srq: opts.srq.as_ref(),
            cap: opts.cap,
            sq_sig_all: opts.sq_sig_all,
        };
        let qp = match (&self.imp, &pd.0.imp) {
            (IdImp::Native, _) => {
                let qp = pd.create_qp(&init)?;
                match qp_type {
                    QpType::Ud => {
                        qp.to_init(Access::EMPTY, RDMA_UDP_QKEY)?;
                        qp.activate_ud(0)?;
                    }
                    QpType::Uc => qp.to_init(Access::REMOTE_WRITE, 0)?,
                    _ => qp.to_init(Access::REMOTE_WRITE | Access::REMOTE_READ, 0)?,
                }
                let qpn = qp.qpn();
                self.native_op(|e, h| e.cm_set_qp(h, Some(qpn)))?;
                qp
            }
            // rdma_create_qp: librdmacm brings the QP to INIT (UD: RTS) and
            // drives it through the connection.
            (IdImp::RdmaCore(id), PdImp::RdmaCore(p)) => {
                Qp::with_rdma_core(&pd, p, &init, |parts| {
                    id.create_qp(parts.pd, &parts.spec)
                        .map_err(|f| match f.errno {
                            libc::EINVAL => crate::Error::Verbs(
                                softrdma_transport::VerbsError::InvalidArgument(format!(
                                    "{}: the id is not bound to the PD's device, or bad attributes",
                                    f.call
                                )),
                            ),
                            _ => f.into(),
                        })
                })?
            }
            _ => {
                return Err(Error::InvalidArgument(
                    "the PD belongs to another device".into(),
                ));
            }
        };
        let rc_qp = matches!(self.imp, IdImp::RdmaCore(_)).then(|| Arc::downgrade(&qp.0));
        let _ = self.res.set(QpResources {
            qp,
            pd,
            send_cq,
            recv_cq,
            channel,
            block_self_mcast_lb: opts.block_self_mcast_lb,
        });
        guard.rc_qp = rc_qp;
        // Groups joined before the QP existed take it in now.
        for g in guard.groups.clone() {
            self.attach(g, true)?;
        }
        self.qp()
            .ok_or_else(|| Error::InvalidArgument("the id's QP went away".into()))
    }

    /// Destroys the id's QP and what was created with it (`rdma_destroy_qp`).
    pub fn destroy_qp(&mut self) {
        self.detach_all();
        self.shared.lock().rc_qp = None;
        // rdma-core: dropping the QP clears `id->qp` before destroying it.
        if self.res.take().is_some() && matches!(self.imp, IdImp::Native) {
            let _ = self.native_op(|e, h| e.cm_set_qp(h, None));
        }
    }

    /// The id's QP (`id->qp`).
    pub fn qp(&self) -> Option<&Qp> {
        self.res.get().map(|r| &r.qp)
    }

    /// The PD of the id's QP (`id->pd`).
    pub fn pd(&self) -> Option<&Pd> {
        self.res.get().map(|r| &r.pd)
    }

    /// The send CQ of the id's QP (`id->send_cq`).
    pub fn send_cq(&self) -> Option<&Cq> {
        self.res.get().map(|r| &r.send_cq)
    }

    /// The receive CQ of the id's QP (`id->recv_cq`).
    pub fn recv_cq(&self) -> Option<&Cq> {
        self.res.get().map(|r| &r.recv_cq)
    }

    /// The completion channel of CQs created with the QP (`id->send_cq_channel`).
    pub fn comp_channel(&self) -> Option<&CompChannel> {
        self.res.get().and_then(|r| r.channel.as_ref())
    }

    // ---- multicast ----

    /// Joins a multicast group (`rdma_join_multicast`): the id's UD QP (now
    /// or once created) receives what is sent to the group, and
    /// MULTICAST_JOIN reports the group's UD parameters (address handle
    /// attributes to the group, QPN 0xFFFFFF, Q_Key) to send to it.
    /// Synchronous ids wait for the event.
    pub fn join_multicast(&self, group: IpAddr) -> Result<()> {
        if !group.is_multicast() {
            return Err(Error::InvalidArgument(format!(
                "{group} is not a multicast address"
            )));
        }
        if self.shared.lock().groups.contains(&group) {
            return Err(Error::InvalidArgument(format!(
                "already a member of {group}"
            )));
        }
        match &self.imp {
            IdImp::Native => {
                self.attach(group, true)?;
                if let Err(e) = self.native_op(|e, h| e.cm_join_multicast(h, group)) {
                    let _ = self.attach(group, false);
                    return Err(e);
                }
            }
            // librdmacm attaches the id's QP when the join completes.
            IdImp::RdmaCore(id) => id.join_multicast(group).map_err(rc_err(None))?,
        }
        self.shared.lock().groups.push(group);
        self.finish(&[EventKind::MulticastJoin])
    }

    /// Leaves a group joined before (`rdma_leave_multicast`); the QP stops
    /// receiving its traffic.
    pub fn leave_multicast(&self, group: IpAddr) -> Result<()> {
        let mut s = self.shared.lock();
        match s.groups.iter().position(|g| *g == group) {
            Some(i) => {
                s.groups.remove(i);
                drop(s);
                match &self.imp {
                    IdImp::Native => self.attach(group, false),
                    IdImp::RdmaCore(id) => id.leave_multicast(group).map_err(rc_err(None)),
                }
            }
            None => Err(Error::InvalidArgument(format!("not a member of {group}"))),
        }
    }

    /// Attaches the id's UD QP to `group` (or detaches it); nothing without one.
    fn attach(&self, group: IpAddr, on: bool) -> Result<()> {
        let Some(r) = self.res.get().filter(|r| r.qp.qp_type() == QpType::Ud) else {
            return Ok(());
        };
        let qpn = r.qp.qpn();
        // rdma-core: librdmacm attaches and detaches the id's QP itself.
        let (IdImp::Native, Some(engine)) = (&self.imp, self.ctx.native()) else {
            return Ok(());
        };
        if on {
            engine.attach_mcast(qpn, group, r.block_self_mcast_lb)?;
        } else {
            engine.detach_mcast(qpn, group)?;
        }
        Ok(())
    }

    fn detach_all(&self) {
        let groups = self.shared.lock().groups.clone();
        for g in groups {
            let _ = self.attach(g, false);
        }
    }

    // ---- endpoints ----

    /// Creates a synchronous endpoint from [`super::getaddrinfo`]'s result
    /// (`rdma_create_ep`). Passive: the id is bound to `ai.src`; call
    /// [`CmId::listen`] and [`CmId::get_request`], whose ids get QPs made
    /// with `pd` and `init`. Active: the address and route are resolved
    /// (2 s each) and, with `init`, the QP is created; call
    /// [`CmId::connect`]. Dropping the endpoint destroys everything
    /// (`rdma_destroy_ep`).
    pub fn create_ep(
        ctx: &Context,
        ai: &AddrInfo,
        pd: Option<&Pd>,
        init: Option<&QpOptions>,
    ) -> Result<CmId> {
        let id = CmId::new_sync(ctx, ai.port_space, ai.qp_type)?;
        if ai.passive {
            let src = ai.src.ok_or_else(|| {
                Error::InvalidArgument("a passive AddrInfo needs a source address".into())
            })?;
            id.bind_addr(src)?;
            if let Some(i) = init {
                id.shared.lock().ep = Some(EpTemplate {
                    pd: pd.cloned(),
                    init: i.clone(),
                });
            }
        } else {
            let dst = ai.dst.ok_or_else(|| {
                Error::InvalidArgument("an active AddrInfo needs a destination address".into())
            })?;
            id.resolve_addr(ai.src, dst, EP_RESOLVE_TIMEOUT)?;
            id.resolve_route(EP_RESOLVE_TIMEOUT)?;
            if let Some(i) = init {
                id.create_qp(pd, i)?;
            }
        }
        Ok(id)
    }

    // ---- async sequences for the Connector ----

    #[cfg(feature = "tokio")]
    pub(crate) async fn resolve_async(&self, dst: SocketAddr, timeout: Duration) -> Result<()> {
        self.start_resolve_addr(None, dst, timeout)?;
        self.finish_async(&[EventKind::AddrResolved]).await?;
        self.start_resolve_route(timeout)?;
        self.finish_async(&[EventKind::RouteResolved]).await
    }
}

fn check_ps(ps: PortSpace, t: QpType) -> Result<()> {
    if ps.is_ud() != (t == QpType::Ud) {
        return Err(Error::InvalidArgument(format!(
            "QP type {t:?} does not fit port space {ps:?}"
        )));
    }
    Ok(())
}
