//! Connections in one call: [`Connector`], [`Acceptor`], [`Connection`].

use super::error::{Error, Result};
use super::id::{CmId, QpOptions};
use super::{ConnParam, PortSpace, conn_param};
use crate::verbs::{CompChannel, Context, Cq, Pd, Qp, QpCap, QpType};
use std::net::SocketAddr;
use std::time::Duration;

/// How [`Connector`] and [`Acceptor`] set up connections.
#[derive(Debug, Clone)]
pub struct ConnOptions {
    /// Transport: [`QpType::Rc`] (default) or [`QpType::Uc`].
    pub qp_type: QpType,
    /// Entries of the connection's CQ (send and receive completions share it).
    pub cq_size: u32,
    /// QP capacities.
    pub cap: QpCap,
    /// Signal every send WR.
    pub sq_sig_all: bool,
    /// Report completions to a [`CompChannel`] ([`Connection::comp_channel`]).
    pub comp_channel: bool,
    /// Protection domain; `None`: the device's default PD.
    pub pd: Option<Pd>,
    /// RDMA READ/atomic requests the peer may have outstanding on us
    /// (`u8::MAX`: the device maximum).
    pub responder_resources: u8,
    /// RDMA READ/atomic requests we may have outstanding (`u8::MAX`: the maximum).
    pub initiator_depth: u8,
    /// Transport retries (0..=7).
    pub retry_count: u8,
    /// RNR retries (0..=7; 7: forever).
    pub rnr_retry_count: u8,
    /// Address resolution timeout.
    pub resolve_timeout: Duration,
    /// Longest wait for any one connection-management step, including
    /// [`Acceptor::incoming`]'s wait for a request (`None`, the default: no
    /// limit; the CM itself reports a silent peer within about ten seconds).
    /// The async variants need a tokio runtime with the time driver for it.
    pub timeout: Option<Duration>,
}

impl Default for ConnOptions {
    /// RC, a CQ of 256 entries, 128 WRs each way with 4 SGEs and 64 inline
    /// bytes, selective signalling, the default PD, the device's READ/atomic
    /// depth, 7 retries, 2 s to resolve, no step timeout.
    fn default() -> Self {
        ConnOptions {
            qp_type: QpType::Rc,
            cq_size: 256,
            cap: QpOptions::default().cap,
            sq_sig_all: false,
            comp_channel: false,
            pd: None,
            responder_resources: u8::MAX,
            initiator_depth: u8::MAX,
            retry_count: 7,
            rnr_retry_count: 7,
            resolve_timeout: Duration::from_secs(2),
            timeout: None,
        }
    }
}

impl ConnOptions {
    fn param(&self, private_data: &[u8]) -> ConnParam {
        let mut p = conn_param(private_data);
        p.responder_resources = self.responder_resources;
        p.initiator_depth = self.initiator_depth;
        p.retry_count = self.retry_count;
        p.rnr_retry_count = self.rnr_retry_count;
        p
    }

    /// Creates the CQ (and its channel) and the QP on `id`.
    fn setup_qp(&self, id: &CmId) -> Result<(Cq, Option<CompChannel>)> {
        let ctx = id.context();
        let channel = if self.comp_channel {
            Some(ctx.create_comp_channel()?)
        } else {
            None
        };
        let cq = ctx.create_cq(self.cq_size.max(1), channel.as_ref())?;
        id.create_qp(
            self.pd.as_ref(),
            &QpOptions {
                qp_type: Some(self.qp_type),
                send_cq: Some(cq.clone()),
                recv_cq: Some(cq.clone()),
                srq: None,
                cap: self.cap,
                sq_sig_all: self.sq_sig_all,
                block_self_mcast_lb: false,
            },
        )?;
        Ok((cq, channel))
    }

    fn check(&self) -> Result<()> {
        if self.qp_type == QpType::Ud {
            return Err(Error::InvalidArgument(
                "Connector/Acceptor make RC or UC connections; use CmId for UD".into(),
            ));
        }
        Ok(())
    }
}

/// A connected QP with its CQ and PD, made by a [`Connector`] or an
/// [`Acceptor`]. Dropping it disconnects (best effort) and frees everything.
#[derive(Debug)]
pub struct Connection {
    id: CmId,
    cq: Cq,
    channel: Option<CompChannel>,
    peer: ConnParam,
}

impl Connection {
    fn new(id: CmId, (cq, channel): (Cq, Option<CompChannel>), peer: ConnParam) -> Connection {
        Connection {
            id,
            cq,
            channel,
            peer,
        }
    }

    /// The QP, in RTS.
    pub fn qp(&self) -> &Qp {
        self.id.qp().expect("a connection has a QP")
    }

    /// The CQ of both send and receive completions.
    pub fn cq(&self) -> &Cq {
        &self.cq
    }

    /// The PD of the QP (register buffers here).
    pub fn pd(&self) -> &Pd {
        self.id.pd().expect("a connection has a QP")
    }

    /// The context (device).
    pub fn context(&self) -> &Context {
        self.id.context()
    }

    /// The completion channel, with [`ConnOptions::comp_channel`].
    pub fn comp_channel(&self) -> Option<&CompChannel> {
        self.channel.as_ref()
    }

    /// What the peer sent with its request or reply (the whole fixed-size
    /// private data field: 56 bytes from a connector, 196 from an acceptor,
    /// zero padded).
    pub fn peer_private_data(&self) -> &[u8] {
        &self.peer.private_data
    }

    /// The peer's connection parameters (QPN, READ/atomic depths, ...).
    pub fn peer_param(&self) -> &ConnParam {
        &self.peer
    }

    /// Our address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.peer_addr()
    }

    /// The CM id of the connection (synchronous).
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// Disconnects and waits until the disconnection is reported: the QP is
    /// in ERR and its posted work requests flushed; the peer's too.
    pub fn disconnect(&self) -> Result<()> {
        self.id.disconnect()
    }

    /// [`Connection::disconnect`] without blocking the thread.
    #[cfg(feature = "tokio")]
    pub async fn disconnect_async(&self) -> Result<()> {
        self.id.disconnect_async().await
    }

    /// Waits up to `timeout` (`None`: no limit) for the peer to disconnect;
    /// true once it did (then our QP is in ERR too).
    pub fn wait_disconnected(&self, timeout: Option<Duration>) -> Result<bool> {
        self.id.wait_disconnected(timeout)
    }
}

/// Makes outgoing connections (the client side).
///
/// ```no_run
/// # fn main() -> softrdma::cm::Result<()> {
/// let conn = softrdma::cm::Connector::new().connect("10.0.0.2:7471".parse().unwrap(), b"hi")?;
/// println!("connected to QP {:#x}", conn.peer_param().qp_num);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Connector {
    ctx: Option<Context>,
    opts: ConnOptions,
}

impl Connector {
    /// A connector on the process's device ([`Context::open`]) with default options.
    pub fn new() -> Connector {
        Connector::default()
    }

    /// A connector on `ctx`.
    pub fn on(ctx: &Context) -> Connector {
        Connector {
            ctx: Some(ctx.clone()),
            opts: ConnOptions::default(),
        }
    }

    /// Replaces the options.
    pub fn options(mut self, opts: ConnOptions) -> Connector {
        self.opts = opts;
        self
    }

    fn start(&self) -> Result<CmId> {
        self.opts.check()?;
        let ctx = match &self.ctx {
            Some(c) => c.clone(),
            None => Context::open()?,
        };
        let id = CmId::new_sync(&ctx, PortSpace::Tcp, self.opts.qp_type)?;
        id.set_sync_timeout(self.opts.timeout);
        Ok(id)
    }

    fn done(&self, id: CmId, cq: (Cq, Option<CompChannel>)) -> Connection {
        let peer = id
            .last_event()
            .and_then(|e| e.conn_param().cloned())
            .unwrap_or_default();
        Connection::new(id, cq, peer)
    }

    /// Connects to the listener at `addr`, sending `private_data` (at most 56
    /// bytes), and waits until the connection is established. A rejection
    /// is [`Error::Rejected`] with the peer's private data.
    pub fn connect(&self, addr: SocketAddr, private_data: &[u8]) -> Result<Connection> {
        let id = self.start()?;
        id.resolve_addr(None, addr, self.opts.resolve_timeout)?;
        id.resolve_route(self.opts.resolve_timeout)?;
        let cq = self.opts.setup_qp(&id)?;
        id.connect(&self.opts.param(private_data))?;
        Ok(self.done(id, cq))
    }

    /// [`Connector::connect`] without blocking the thread.
    #[cfg(feature = "tokio")]
    pub async fn connect_async(&self, addr: SocketAddr, private_data: &[u8]) -> Result<Connection> {
        let id = self.start()?;
        id.resolve_async(addr, self.opts.resolve_timeout).await?;
        let cq = self.opts.setup_qp(&id)?;
        id.connect_async(&self.opts.param(private_data)).await?;
        Ok(self.done(id, cq))
    }
}

/// Accepts incoming connections (the server side).
///
/// ```no_run
/// # fn main() -> softrdma::cm::Result<()> {
/// let acceptor = softrdma::cm::Acceptor::bind("0.0.0.0:7471".parse().unwrap())?;
/// loop {
///     let req = acceptor.incoming()?;
///     if req.private_data().starts_with(b"let me in") {
///         let conn = req.accept(b"welcome")?;
///         # let _ = conn;
///     } else {
///         req.reject(b"go away")?;
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Acceptor {
    listener: CmId,
    opts: ConnOptions,
}

impl Acceptor {
    /// Listens on `addr` of the process's device; port 0 picks a free port
    /// ([`Acceptor::local_addr`]). As with `rdma_bind_addr`, a specific
    /// address names the device: if the process's device is not running yet
    /// and `SOFTRDMA_ADDR` is unset, it starts on that address.
    pub fn bind(addr: SocketAddr) -> Result<Acceptor> {
        let ctx = Context::open_at(addr.ip())?;
        Acceptor::bind_with(&ctx, addr, ConnOptions::default())
    }

    /// Listens on `addr` of `ctx`.
    pub fn bind_on(ctx: &Context, addr: SocketAddr) -> Result<Acceptor> {
        Acceptor::bind_with(ctx, addr, ConnOptions::default())
    }

    /// Listens on `addr` of `ctx` with options.
    pub fn bind_with(ctx: &Context, addr: SocketAddr, opts: ConnOptions) -> Result<Acceptor> {
        opts.check()?;
        let listener = CmId::new_sync(ctx, PortSpace::Tcp, opts.qp_type)?;
        listener.set_sync_timeout(opts.timeout);
        listener.bind_addr(addr)?;
        listener.listen(128)?;
        Ok(Acceptor { listener, opts })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a listening id is bound")
    }

    /// The listening CM id (synchronous).
    pub fn listener(&self) -> &CmId {
        &self.listener
    }

    /// Waits for the next connection request, to accept or reject.
    pub fn incoming(&self) -> Result<Incoming> {
        let id = self.listener.get_request()?;
        Ok(Incoming::new(id, self.opts.clone()))
    }

    /// [`Acceptor::incoming`] without blocking the thread.
    #[cfg(feature = "tokio")]
    pub async fn incoming_async(&self) -> Result<Incoming> {
        let id = self.listener.get_request_async().await?;
        Ok(Incoming::new(id, self.opts.clone()))
    }

    /// Waits for the next request and accepts it (no private data).
    pub fn accept(&self) -> Result<Connection> {
        self.incoming()?.accept(&[])
    }

    /// [`Acceptor::accept`] without blocking the thread.
    #[cfg(feature = "tokio")]
    pub async fn accept_async(&self) -> Result<Connection> {
        self.incoming_async().await?.accept_async(&[]).await
    }
}

/// A connection request received by an [`Acceptor`]. Dropping it rejects it.
#[derive(Debug)]
pub struct Incoming {
    id: CmId,
    peer: ConnParam,
    opts: ConnOptions,
}

impl Incoming {
    fn new(id: CmId, opts: ConnOptions) -> Incoming {
        let peer = id
            .last_event()
            .and_then(|e| e.conn_param().cloned())
            .unwrap_or_default();
        Incoming { id, peer, opts }
    }

    /// The private data of the request (56 bytes, zero padded).
    pub fn private_data(&self) -> &[u8] {
        &self.peer.private_data
    }

    /// The requester's parameters.
    pub fn peer_param(&self) -> &ConnParam {
        &self.peer
    }

    /// The requester's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.id.peer_addr()
    }

    /// The address the request came to.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    /// Creates the QP, accepts with `private_data` (at most 196 bytes) and
    /// waits until the connection is established.
    pub fn accept(self, private_data: &[u8]) -> Result<Connection> {
        let cq = self.opts.setup_qp(&self.id)?;
        self.id.accept(&self.opts.param(private_data))?;
        Ok(Connection::new(self.id, cq, self.peer))
    }

    /// [`Incoming::accept`] without blocking the thread.
    #[cfg(feature = "tokio")]
    pub async fn accept_async(self, private_data: &[u8]) -> Result<Connection> {
        let cq = self.opts.setup_qp(&self.id)?;
        self.id.accept_async(&self.opts.param(private_data)).await?;
        Ok(Connection::new(self.id, cq, self.peer))
    }

    /// Rejects the request; the requester gets [`Error::Rejected`] with
    /// `private_data` (at most 148 bytes).
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        self.id.reject(private_data)
    }
}
