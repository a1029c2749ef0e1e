//! Connection setup: [`Server`] (bind, accept) and [`Client`] (resolve,
//! connect), on `softrdma::cm` ids with an event channel, as the seed does it.

use crate::buffer::{Buffer, Resources};
use crate::config::{Config, Mode};
use crate::conn::{Connection, Link};
use crate::error::{Error, Result};
use crate::wire::{Hello, Role};
use softrdma::cm::{self, CmEvent, CmId, EventChannel, EventKind, PortSpace, QpOptions};
use softrdma::verbs::{CompChannel, Context, Cq, Pd, QpCap, QpType};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long address resolution may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Send work requests a connection may have outstanding.
const MAX_SEND_WR: u32 = 64;
/// What a server's rejection of a foreign client starts with.
const REJECT_PREFIX: &[u8] = b"rdmalib: ";

fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| Instant::now().checked_add(t))
}

/// The CM error an event reports, with rdmalib's own rejections turned
/// into protocol errors.
fn event_error(ev: &CmEvent) -> Option<Error> {
    let e = ev.error()?;
    if let Some(pd) = e.rejected_private_data()
        && let Some(text) = pd.strip_prefix(REJECT_PREFIX)
    {
        let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
        return Some(Error::Protocol(format!(
            "the server rejected the connection: {}",
            String::from_utf8_lossy(&text[..end])
        )));
    }
    Some(e.into())
}

/// A wait on `ch` for event `want` of `id` (`None`: of any id) until
/// `deadline` (`timeout` is what a timeout error reports); a failure event
/// becomes its error, events of other ids are skipped.
struct EventWait<'a> {
    ch: &'a EventChannel,
    id: Option<&'a CmId>,
    want: EventKind,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
}

impl EventWait<'_> {
    fn timed_out(&self) -> Error {
        Error::Timeout(self.timeout.unwrap_or_default())
    }

    /// Blocks the thread until the event.
    fn wait(self) -> Result<CmEvent> {
        loop {
            let ev = match self.deadline {
                None => self.ch.get_event()?,
                Some(d) => self
                    .ch
                    .get_event_timeout(d.saturating_duration_since(Instant::now()))?
                    .ok_or_else(|| self.timed_out())?,
            };
            if let Some(r) = check_event(ev, self.id, self.want) {
                return r;
            }
        }
    }

    /// [`EventWait::wait`] without blocking the thread.
    #[cfg(feature = "tokio")]
    async fn wait_async(self) -> Result<CmEvent> {
        loop {
            let ev = match self.deadline {
                None => self.ch.get_event_async().await?,
                Some(d) => tokio::time::timeout_at(
                    tokio::time::Instant::from_std(d),
                    self.ch.get_event_async(),
                )
                .await
                .map_err(|_| self.timed_out())??,
            };
            if let Some(r) = check_event(ev, self.id, self.want) {
                return r;
            }
        }
    }
}

/// `None`: not this id's event, keep waiting.
fn check_event(ev: CmEvent, id: Option<&CmId>, want: EventKind) -> Option<Result<CmEvent>> {
    if id.is_some_and(|id| !ev.is_for(id)) {
        return None;
    }
    if let Some(e) = event_error(&ev) {
        return Some(Err(e));
    }
    if ev.kind() == want {
        return Some(Ok(ev));
    }
    // On a listener's channel (no id) only requests matter.
    id?;
    Some(Err(Error::Cm(cm::Error::UnexpectedEvent {
        kind: ev.kind(),
        status: ev.status(),
    })))
}

/// The CM parameters of rdmalib connections: the device's READ depth both
/// ways, 7 transport retries, RNR retries forever (a receiver that is slow
/// to take messages makes the sender wait, not fail), our hello.
fn conn_param(hello: &Hello) -> cm::ConnParam {
    cm::conn_param(&hello.encode())
}

/// A CQ (with a completion channel in event mode) and the QP on `id`.
fn create_qp(id: &CmId, pd: &Pd, config: &Config) -> Result<(Cq, Option<CompChannel>)> {
    let ctx = id.context();
    let comp = match config.mode {
        Mode::Event => Some(ctx.create_comp_channel()?),
        Mode::Polling => None,
    };
    let depth = config.recv_depth as u32;
    let cq = ctx.create_cq(2 * depth + 2 * MAX_SEND_WR, comp.as_ref())?;
    id.create_qp(
        Some(pd),
        &QpOptions {
            qp_type: Some(QpType::Rc),
            send_cq: Some(cq.clone()),
            recv_cq: Some(cq.clone()),
            srq: None,
            cap: QpCap {
                max_send_wr: MAX_SEND_WR,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            sq_sig_all: false,
            block_self_mcast_lb: false,
        },
    )?;
    Ok((cq, comp))
}

fn hello(res: &Resources, role: Role) -> Hello {
    let b = res.buffer.remote();
    Hello {
        role,
        addr: b.addr,
        rkey: b.rkey,
        max_message: res.max_message as u32,
        size: b.len,
    }
}

/// The wait for the ESTABLISHED event of `link`.
fn established(link: &Link, deadline: Option<Instant>, timeout: Option<Duration>) -> EventWait<'_> {
    EventWait {
        ch: &link.channel,
        id: Some(&link.id),
        want: EventKind::Established,
        deadline,
        timeout,
    }
}

/// The server side: listens on an address and accepts clients.
///
/// ```no_run
/// use rdmalib::{Config, Server};
/// # fn main() -> rdmalib::Result<()> {
/// let mut server = Server::bind("0.0.0.0:7471".parse().unwrap(), Config::default())?;
/// let mut conn = server.accept()?;
/// let request = conn.recv()?;
/// conn.send(&request)?; // echo
/// conn.close()
/// # }
/// ```
#[derive(Debug)]
pub struct Server {
    /// Connection requests arrive here.
    channel: EventChannel,
    listener: CmId,
    config: Config,
    last: Option<CmEvent>,
}

impl Server {
    /// Listens on `addr` of the process's device (port 0: a free port, see
    /// [`Server::local_addr`]). A specific IP names the device's address if
    /// the device is not running yet and `SOFTRDMA_ADDR` is unset, as
    /// `rdma_bind_addr` does.
    pub fn bind(addr: SocketAddr, config: Config) -> Result<Server> {
        Server::bind_on(&Context::open_at(addr.ip())?, addr, config)
    }

    /// Listens on `addr` of device `ctx`.
    pub fn bind_on(ctx: &Context, addr: SocketAddr, config: Config) -> Result<Server> {
        config.check()?;
        let channel = EventChannel::new(ctx)?;
        let listener = CmId::new(&channel, PortSpace::Tcp, QpType::Rc)?;
        listener.bind_addr(addr)?;
        listener.listen(128)?;
        Ok(Server {
            channel,
            listener,
            config,
            last: None,
        })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a listening id is bound")
    }

    /// The configuration accepted connections get.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Changes the bound on waiting for a client and on connection setup.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.config.timeout = timeout;
    }

    /// The listener's event channel.
    pub fn channel(&self) -> &EventChannel {
        &self.channel
    }

    /// The listening CM id.
    pub fn listener(&self) -> &CmId {
        &self.listener
    }

    /// The last connection request (without its id).
    pub fn last_event(&self) -> Option<&CmEvent> {
        self.last.as_ref()
    }

    /// Waits for a client (up to the configured timeout), and accepts it:
    /// a PD, CQ and QP of its own, the buffers registered, the receives
    /// posted, our buffer advertised in the reply; returns once the
    /// connection is established. A client that is not rdmalib's is
    /// rejected ([`Error::Protocol`]; the server can accept the next one).
    pub fn accept(&mut self) -> Result<Connection> {
        let ev = self.request().wait()?;
        let (link, res, peer, d) = self.answer(ev)?;
        let est = established(&link, d, self.config.timeout).wait()?;
        Ok(Connection::new(link, res, peer, &self.config, est))
    }

    /// [`Server::accept`] without blocking the thread.
    #[cfg(feature = "tokio")]
    pub async fn accept_async(&mut self) -> Result<Connection> {
        let ev = self.request().wait_async().await?;
        let (link, res, peer, d) = self.answer(ev)?;
        let est = established(&link, d, self.config.timeout)
            .wait_async()
            .await?;
        Ok(Connection::new(link, res, peer, &self.config, est))
    }

    /// The wait for the next connection request.
    fn request(&self) -> EventWait<'_> {
        EventWait {
            ch: &self.channel,
            id: None,
            want: EventKind::ConnectRequest,
            deadline: deadline(self.config.timeout),
            timeout: self.config.timeout,
        }
    }

    /// Takes request `ev` and accepts it ([`Server::take_request`],
    /// [`Server::prepare`]); the link, its resources, the client's hello
    /// and the deadline of ESTABLISHED.
    fn answer(&mut self, ev: CmEvent) -> Result<(Link, Resources, Hello, Option<Instant>)> {
        let (child, channel, peer) = self.take_request(ev)?;
        let (link, res, est) = self.prepare(child, channel)?;
        link.id.accept(&conn_param(&hello(&res, Role::Server)))?;
        Ok((link, res, peer, est))
    }

    /// The request's id on a channel of its own, and the client's hello
    /// (a foreign client is rejected).
    fn take_request(&mut self, mut ev: CmEvent) -> Result<(CmId, EventChannel, Hello)> {
        let child = ev
            .take_new_id()
            .ok_or_else(|| Error::Protocol("a connection request without a CM id".into()))?;
        self.last = Some(ev);
        let ev = self.last.as_ref().expect("just set");
        let peer = match Hello::decode(ev.private_data(), Role::Client) {
            Ok(h) => h,
            Err(e) => {
                let mut why = REJECT_PREFIX.to_vec();
                why.extend_from_slice(b"not an rdmalib client");
                let _ = child.reject(&why);
                return Err(e);
            }
        };
        // Each connection's events (ESTABLISHED, DISCONNECTED) on its own
        // channel, so connections never read each other's.
        let channel = EventChannel::new(child.context())?;
        child.migrate(&channel)?;
        Ok((child, channel, peer))
    }

    /// PD, CQ, QP, buffers and posted receives for an accepted request.
    fn prepare(
        &self,
        id: CmId,
        channel: EventChannel,
    ) -> Result<(Link, Resources, Option<Instant>)> {
        let pd = id.context().alloc_pd()?;
        let (cq, comp) = create_qp(&id, &pd, &self.config)?;
        let res = Resources::new(&pd, &self.config)?;
        Connection::post_receives(&res, &id)?;
        let link = Link {
            id,
            channel,
            cq,
            comp,
        };
        Ok((link, res, deadline(self.config.timeout)))
    }
}

/// The client side: a resolved CM id with its QP and registered buffers,
/// ready to [`Client::connect`]. The buffer exists already, so it can be
/// filled before connecting.
///
/// ```no_run
/// use rdmalib::{Client, Config};
/// # fn main() -> rdmalib::Result<()> {
/// let mut conn = Client::new("127.0.0.1:7471".parse().unwrap(), Config::default())?.connect()?;
/// conn.send(b"ping")?;
/// assert_eq!(conn.recv()?, b"ping");
/// conn.close()
/// # }
/// ```
#[derive(Debug)]
pub struct Client {
    link: Link,
    res: Resources,
    config: Config,
    last: Option<CmEvent>,
}

impl Client {
    /// Prepares a connection to the server at `addr` on the process's
    /// device: event channel, CM id, address and route resolution, PD, CQ,
    /// QP, registered buffers, posted receives.
    pub fn new(addr: SocketAddr, config: Config) -> Result<Client> {
        Client::on(&Context::open()?, addr, config)
    }

    /// [`Client::new`] on device `ctx`.
    pub fn on(ctx: &Context, addr: SocketAddr, config: Config) -> Result<Client> {
        let r = Resolving::start(ctx, addr, &config)?;
        r.wait_for(EventKind::AddrResolved).wait()?;
        let last = r.resolve_route()?.wait()?;
        Client::build(ctx, r, config, last)
    }

    /// [`Client::on`] without blocking the thread.
    #[cfg(feature = "tokio")]
    pub async fn on_async(ctx: &Context, addr: SocketAddr, config: Config) -> Result<Client> {
        let r = Resolving::start(ctx, addr, &config)?;
        r.wait_for(EventKind::AddrResolved).wait_async().await?;
        let last = r.resolve_route()?.wait_async().await?;
        Client::build(ctx, r, config, last)
    }

    fn build(ctx: &Context, r: Resolving, config: Config, last: CmEvent) -> Result<Client> {
        let Resolving { channel, id, .. } = r;
        let pd = ctx.alloc_pd()?;
        let (cq, comp) = create_qp(&id, &pd, &config)?;
        let res = Resources::new(&pd, &config)?;
        Connection::post_receives(&res, &id)?;
        Ok(Client {
            link: Link {
                id,
                channel,
                cq,
                comp,
            },
            res,
            config,
            last: Some(last),
        })
    }

    /// Changes the bound on connection setup (and the connection's waits).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.config.timeout = timeout;
    }

    /// This side's buffer (fill it before connecting if you like).
    pub fn buffer(&self) -> &Buffer {
        &self.res.buffer
    }

    /// The CM id (which owns the QP and PD), its event channel, the CQ and
    /// the completion channel (event mode).
    pub fn link(&self) -> (&CmId, &EventChannel, &Cq, Option<&CompChannel>) {
        let l = &self.link;
        (&l.id, &l.channel, &l.cq, l.comp.as_ref())
    }

    /// The last CM event (ROUTE_RESOLVED).
    pub fn last_event(&self) -> Option<&CmEvent> {
        self.last.as_ref()
    }

    /// Connects, advertising this side's buffer in the request, and waits
    /// until the connection is established (up to the configured timeout).
    /// No listener, a rejection or an unreachable server is an error.
    pub fn connect(self) -> Result<Connection> {
        let est = self.request()?.wait()?;
        self.finish(est)
    }

    /// [`Client::connect`] without blocking the thread.
    #[cfg(feature = "tokio")]
    pub async fn connect_async(self) -> Result<Connection> {
        let est = self.request()?.wait_async().await?;
        self.finish(est)
    }

    /// Sends the connection request; the wait for its answer.
    fn request(&self) -> Result<EventWait<'_>> {
        let d = deadline(self.config.timeout);
        self.link
            .id
            .connect(&conn_param(&hello(&self.res, Role::Client)))?;
        Ok(established(&self.link, d, self.config.timeout))
    }

    fn finish(self, est: CmEvent) -> Result<Connection> {
        // A server that is not rdmalib's: hang up (dropping the id disconnects).
        let peer = Hello::decode(est.private_data(), Role::Server)?;
        Ok(Connection::new(
            self.link,
            self.res,
            peer,
            &self.config,
            est,
        ))
    }
}

/// A client's CM id on its event channel while its address and route are
/// resolved (within the configured timeout).
struct Resolving {
    channel: EventChannel,
    id: CmId,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
}

impl Resolving {
    /// Checks `config`, makes the id and starts resolving `addr`.
    fn start(ctx: &Context, addr: SocketAddr, config: &Config) -> Result<Resolving> {
        config.check()?;
        let channel = EventChannel::new(ctx)?;
        let id = CmId::new(&channel, PortSpace::Tcp, QpType::Rc)?;
        let deadline = deadline(config.timeout);
        id.resolve_addr(None, addr, RESOLVE_TIMEOUT)?;
        Ok(Resolving {
            channel,
            id,
            deadline,
            timeout: config.timeout,
        })
    }

    /// The wait for the id's event `want`.
    fn wait_for(&self, want: EventKind) -> EventWait<'_> {
        EventWait {
            ch: &self.channel,
            id: Some(&self.id),
            want,
            deadline: self.deadline,
            timeout: self.timeout,
        }
    }

    /// Starts resolving the route (once the address is); the wait for it.
    fn resolve_route(&self) -> Result<EventWait<'_>> {
        self.id.resolve_route(RESOLVE_TIMEOUT)?;
        Ok(self.wait_for(EventKind::RouteResolved))
    }
}

/// Connects to the rdmalib server at `addr` on the process's device:
/// [`Client::new`] then [`Client::connect`].
pub fn connect(addr: SocketAddr, config: Config) -> Result<Connection> {
    Client::new(addr, config)?.connect()
}
