//! The engine: one endpoint, one UDP socket, one progress thread.

use crate::channel::{AsyncChannel, AsyncEvent, CompChannel};
use crate::cm::{CmChannel, EpQps};
use crate::config::EngineConfig;
use crate::memory::HostMemory;
use softrdma_cm::{Cm, CmConfig, CmError, IdHandle, PortSpace};
use softrdma_transport::{
    Config, CqHandle, Datagram, Endpoint, Event, Instant, RecvWr, SendWr, Stats, VerbsError, Wc,
};
use softrdma_udp::{Poller, RecvBatch, RoceSocket, SocketConfig, SocketStats, Transmit, Waker};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;

/// Datagrams built or received per batch.
const BATCH: usize = 64;
const KEY_SOCKET: u8 = 1;
const KEY_MCAST: u8 = 2;

/// State behind the engine lock.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) ep: Endpoint,
    channels: HashMap<CqHandle, Arc<CompChannel>>,
    cm: Cm,
    cm_channels: HashMap<IdHandle, Arc<CmChannel>>,
    /// CM MADs framed for QP1, waiting for the transmit path.
    gsi_out: std::collections::VecDeque<(SocketAddr, Vec<u8>)>,
    gsi_psn: u32,
    /// When to probe the peers of live CM connections next (see `KEEPALIVE`).
    keepalive_at: Option<Instant>,
}

#[derive(Debug)]
struct Tx {
    bufs: Vec<Vec<u8>>,
    dst: Vec<SocketAddr>,
}

#[derive(Debug)]
struct Shared {
    core: Mutex<Core>,
    tx: Mutex<Tx>,
    rx: Mutex<RecvBatch>,
    socket: RoceSocket,
    waker: Waker,
    epoch: std::time::Instant,
    /// The deadline (ns since `epoch`) the progress thread sleeps until; u64::MAX: none.
    sleeping_until: AtomicU64,
    shutdown: AtomicBool,
    busy_poll: bool,
    /// When an application last busy-polled an empty CQ (ns since `epoch`).
    last_spin: AtomicU64,
    async_events: AsyncChannel,
    capture: Option<crate::capture::Capture>,
    poller: Arc<Poller>,
    /// Multicast groups joined on this host: a socket bound to each group (every
    /// member process has one), and how many local QPs use it.
    mcast: Mutex<HashMap<IpAddr, (Arc<RoceSocket>, usize)>>,
}

/// A running software RDMA device.
///
/// Every verb runs under one lock around the [`Endpoint`]; packet I/O happens
/// outside it. A progress thread receives packets and fires timers so the
/// responder side works while the application is busy elsewhere; it sleeps
/// in `epoll_wait` when idle.
#[derive(Debug)]
pub struct Engine {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

static GLOBAL: OnceLock<Result<Arc<Engine>, String>> = OnceLock::new();

impl Engine {
    /// The process-wide engine, created from the environment on first use.
    pub fn global() -> io::Result<Arc<Engine>> {
        Self::global_at(None)
    }

    /// The process-wide engine; if it does not exist yet and `SOFTRDMA_ADDR`
    /// is not set, it takes the address `hint` (what an rdma_cm application
    /// binds to or resolves from names the device: `rping -s -a 127.0.0.2`).
    pub fn global_at(hint: Option<IpAddr>) -> io::Result<Arc<Engine>> {
        GLOBAL
            .get_or_init(|| {
                EngineConfig::from_env()
                    .and_then(|mut c| {
                        if let Some(ip) = hint.filter(|ip| !ip.is_unspecified())
                            && c.addr.addr.is_none() {
                                c.addr = softrdma_udp::AddrConfig::exact(SocketAddr::new(
                                    ip,
                                    c.addr.port,
                                ));
                            }
                        Engine::start(c)
                    })
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|e| io::Error::other(format!("softrdma: cannot start the device: {e}")))
    }

    /// The process-wide engine if it was started.
    pub fn global_if_started() -> Option<Arc<Engine>> {
        GLOBAL.get().and_then(|r| r.as_ref().ok().cloned())
    }

    /// Starts an engine: binds the socket and spawns the progress thread.
    pub fn start(cfg: EngineConfig) -> io::Result<Engine> {
        let socket = RoceSocket::open(&cfg.addr, &SocketConfig::default())
            .map_err(|e| io::Error::new(e_kind(&e), e.to_string()))?;
        let local = socket.local_addr();
        let seed = cfg.seed.unwrap_or_else(os_seed);
        let info = crate::DeviceInfo::new(local.ip());
        let mut tcfg = Config::new(local.ip(), seed);
        tcfg.local_port = local.port();
        tcfg.dest_port = local.port();
        tcfg.verify_icrc = cfg.verify_icrc;
        tcfg.limits = info.limits;
        let cm = Cm::new(CmConfig {
            addrs: vec![local.ip()],
            node_guid: info.node_guid,
            mtu: info.limits.port_mtu,
            seed: seed.rotate_left(17),
        });
        let poller = Arc::new(Poller::new()?);
        poller.add_socket(&socket, KEY_SOCKET)?;
        // Multicast sends leave through the device's interface and loop back to
        // local members (other processes' group sockets).
        let _ = socket.set_multicast_source(local.ip());
        let waker = poller.waker();
        let rx = RecvBatch::for_socket(&socket, BATCH);
        let capture = match &cfg.pcap {
            Some(p) => Some(crate::capture::Capture::create(p)?),
            None => None,
        };
        let shared = Arc::new(Shared {
            core: Mutex::new(Core {
                ep: Endpoint::new(tcfg),
                channels: HashMap::new(),
                cm,
                cm_channels: HashMap::new(),
                gsi_out: std::collections::VecDeque::new(),
                gsi_psn: (seed as u32) & 0xFF_FFFF,
                keepalive_at: None,
            }),
            tx: Mutex::new(Tx {
                bufs: (0..BATCH).map(|_| Vec::with_capacity(4200)).collect(),
                dst: Vec::with_capacity(BATCH),
            }),
            rx: Mutex::new(rx),
            socket,
            waker,
            epoch: std::time::Instant::now(),
            sleeping_until: AtomicU64::new(u64::MAX),
            shutdown: AtomicBool::new(false),
            busy_poll: cfg.busy_poll,
            last_spin: AtomicU64::new(0),
            async_events: AsyncChannel::new()?,
            capture,
            poller: Arc::clone(&poller),
            mcast: Mutex::new(HashMap::new()),
        });
        let s2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("softrdma-progress".into())
            .spawn(move || progress_loop(&s2, &poller))?;
        Ok(Engine {
            shared,
            thread: Some(thread),
        })
    }

    /// The device's UDP address (its GID 0 and port).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.socket.local_addr()
    }

    /// Static facts and attributes of this device.
    pub fn info(&self) -> crate::DeviceInfo {
        crate::DeviceInfo::new(self.local_addr().ip())
    }

    /// The GID table as addresses.
    pub fn gids(&self) -> Vec<IpAddr> {
        self.lock().ep.config().gids.clone()
    }

    /// Now, on the transport's clock.
    pub fn now(&self) -> Instant {
        self.shared.now()
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        self.shared.lock()
    }

    /// Runs `f` on the endpoint under the engine lock, then sends whatever it queued.
    pub fn with<R>(&self, f: impl FnOnce(&mut Endpoint, Instant) -> R) -> R {
        let r = {
            let mut core = self.lock();
            let now = self.now();
            let r = f(&mut core.ep, now);
            self.shared.after(&mut core);
            r
        };
        self.shared.flush_tx();
        r
    }

    /// Posts a send WR and transmits what it allows at once.
    pub fn post_send(&self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        self.with(|ep, now| ep.post_send(now, qpn, wr))
    }

    /// Posts send WRs in order under one lock, then transmits; on the first
    /// refusal returns how many were posted and why the next one was refused.
    pub fn post_send_many(
        &self,
        qpn: u32,
        wrs: impl IntoIterator<Item = SendWr>,
    ) -> Result<(), (usize, VerbsError)> {
        self.with(|ep, now| {
            for (i, wr) in wrs.into_iter().enumerate() {
                ep.post_send(now, qpn, wr).map_err(|e| (i, e))?;
            }
            Ok(())
        })
    }

    /// Posts receive WRs in order under one lock; like [`Engine::post_send_many`].
    pub fn post_recv_many(
        &self,
        qpn: u32,
        wrs: impl IntoIterator<Item = RecvWr>,
    ) -> Result<(), (usize, VerbsError)> {
        let mut core = self.lock();
        let now = self.now();
        for (i, wr) in wrs.into_iter().enumerate() {
            core.ep.post_recv(now, qpn, wr).map_err(|e| (i, e))?;
        }
        Ok(())
    }

    /// Posts a receive WR (nothing to transmit).
    pub fn post_recv(&self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let mut core = self.lock();
        let now = self.now();
        core.ep.post_recv(now, qpn, wr)
    }

    /// Polls up to `max` completions. With busy polling on, an empty CQ first
    /// pulls packets off the socket in this thread (no hand-off to the progress
    /// thread: the cross-core wake-up costs tens of µs on small VMs).
    pub fn poll_cq(
        &self,
        cq: CqHandle,
        max: usize,
        mut f: impl FnMut(Wc),
    ) -> Result<usize, VerbsError> {
        let n = self.lock().ep.poll_cq(cq, max, &mut f)?;
        if n > 0 || !self.shared.busy_poll || max == 0 {
            return Ok(n);
        }
        self.shared
            .last_spin
            .store(self.now().as_nanos(), Ordering::Relaxed);
        // Block on the receive lock rather than spin past it: on a small VM a
        // spinning poller can starve the progress thread that holds it.
        if self.shared.rx_burst(true) > 0 {
            return self.lock().ep.poll_cq(cq, max, &mut f);
        }
        Ok(0)
    }

    /// Tells the engine an application thread is about to block (e.g. in a
    /// completion channel): the progress thread must watch the socket again.
    pub fn before_block(&self) {
        if self.shared.last_spin.swap(0, Ordering::Relaxed) != 0 {
            let _ = self.shared.waker.wake();
        }
    }

    /// Attaches a UD QP to a multicast group (`ibv_attach_mcast`). Delivery on
    /// one host uses real IP multicast on the device's interface: every process
    /// with a member QP binds a socket to the group, and the kernel gives each
    /// a copy of every datagram sent to it (loopback included).
    pub fn attach_mcast(
        &self,
        qpn: u32,
        group: IpAddr,
        block_self: bool,
    ) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.attach_mcast(qpn, group, block_self))?;
        let mut m = self.shared.mcast.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = m.get_mut(&group) {
            e.1 += 1;
            return Ok(());
        }
        let sock = RoceSocket::bind_multicast(
            group,
            self.local_addr().port(),
            self.local_addr().ip(),
            &SocketConfig::default(),
        )
        .map_err(|e| VerbsError::InvalidArgument(format!("cannot join {group}: {e}")))?;
        // Every group socket shares one key: any of them readable means "read them all".
        let _ = self.shared.poller.add_socket(&sock, KEY_MCAST);
        m.insert(group, (Arc::new(sock), 1));
        Ok(())
    }

    /// Detaches a QP from a multicast group (`ibv_detach_mcast`).
    pub fn detach_mcast(&self, qpn: u32, group: IpAddr) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.detach_mcast(qpn, group))?;
        let mut m = self.shared.mcast.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = m.get_mut(&group) {
            e.1 -= 1;
            if e.1 == 0
                && let Some((s, _)) = m.remove(&group) {
                    let _ = self.shared.poller.remove_fd(s.as_fd(), KEY_MCAST);
                }
        }
        Ok(())
    }

    /// Creates a CM event channel.
    pub fn cm_channel(&self) -> io::Result<Arc<CmChannel>> {
        Ok(Arc::new(CmChannel::new()?))
    }

    /// Creates a CM id whose events go to `ch`.
    pub fn cm_create_id(
        &self,
        ch: Option<Arc<CmChannel>>,
        ps: PortSpace,
        qp_type: softrdma_transport::QpType,
    ) -> IdHandle {
        let mut core = self.lock();
        let h = core.cm.create_id(ps, qp_type);
        if let Some(c) = ch {
            core.cm_channels.insert(h, c);
        }
        h
    }

    /// Moves an id's events to another channel (`rdma_migrate_id`).
    pub fn cm_set_channel(&self, id: IdHandle, ch: Arc<CmChannel>) {
        let mut core = self.lock();
        if let Some(old) = core.cm_channels.insert(id, ch) {
            old.forget(id);
        }
    }

    /// Runs `f` on the CM (with access to the QPs) under the engine lock, then
    /// delivers its events and sends its MADs.
    pub fn with_cm<R>(
        &self,
        f: impl FnOnce(&mut Cm, &mut dyn softrdma_cm::QpOps, Instant) -> R,
    ) -> R {
        let r = {
            let mut core = self.lock();
            let now = self.now();
            let r = {
                let Core { ep, cm, .. } = &mut *core;
                f(cm, &mut EpQps { ep, now }, now)
            };
            self.shared.after(&mut core);
            r
        };
        self.shared.flush_tx();
        r
    }

    /// Destroys a CM id and forgets its queued events.
    pub fn cm_destroy_id(&self, id: IdHandle) {
        self.with_cm(|cm, qps, now| cm.destroy_id(now, id, qps));
        let mut core = self.lock();
        if let Some(c) = core.cm_channels.remove(&id) {
            c.forget(id);
        }
    }

    /// Resolves `dst` for an id (`rdma_resolve_addr`): binds `src` if given,
    /// then checks the route in the background (like ARP) and queues
    /// ADDR_RESOLVED or ADDR_ERROR.
    pub fn cm_resolve_addr(
        self: &Arc<Self>,
        id: IdHandle,
        src: Option<SocketAddr>,
        dst: SocketAddr,
    ) -> Result<(), CmError> {
        let local = self.local_addr().ip();
        if let Some(s) = src {
            self.with_cm(|cm, _, _| cm.bind(id, s))?;
        }
        let me = Arc::clone(self);
        let port = self.local_addr().port();
        std::thread::Builder::new()
            .name("softrdma-resolve".into())
            .spawn(move || {
                let r = crate::cm::probe_route(local, dst.ip(), port);
                me.with_cm(|cm, _, _| match r {
                    Ok(()) => cm.resolve_addr(id, local, dst).map(|_| ()),
                    Err(e) => cm.addr_error(id, e),
                })
                .ok();
            })
            .map_err(|e| CmError::Invalid(format!("cannot start address resolution: {e}")))?;
        Ok(())
    }

    /// Creates a completion channel.
    pub fn create_comp_channel(&self) -> io::Result<Arc<CompChannel>> {
        Ok(Arc::new(CompChannel::new()?))
    }

    /// Attaches a CQ to a channel (or detaches it with `None`).
    pub fn set_cq_channel(&self, cq: CqHandle, ch: Option<Arc<CompChannel>>) {
        let mut core = self.lock();
        match ch {
            Some(c) => {
                core.channels.insert(cq, c);
            }
            None => {
                if let Some(c) = core.channels.remove(&cq) {
                    c.forget(cq);
                }
            }
        }
    }

    /// The async event channel.
    pub fn async_channel(&self) -> &AsyncChannel {
        &self.shared.async_events
    }

    /// Transport and socket counters.
    pub fn stats(&self) -> (Stats, SocketStats) {
        let s = self.lock().ep.stats();
        (s, self.shared.socket.stats())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        let _ = self.shared.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves the endpoint as it was at the
        // panic; keep serving rather than poisoning every later call.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// After any endpoint call: deliver events, and wake the progress thread if
    /// the earliest timer moved before the deadline it sleeps on.
    fn after(&self, core: &mut Core) {
        let now = self.now();
        while let Some(e) = core.ep.poll_event() {
            if let Event::QpAsync(q, t) = e {
                use softrdma_transport::AsyncEventType as A;
                let fatal = matches!(t, A::QpFatal | A::QpReqErr | A::QpAccessErr);
                if matches!(t, A::CommEst) || fatal {
                    let Core { ep, cm, .. } = core;
                    cm.qp_event(now, q, fatal, &mut EpQps { ep, now });
                }
            }
            match e {
                Event::CompletionNotify(cq) => {
                    if let Some(c) = core.channels.get(&cq) {
                        c.notify(cq);
                    }
                }
                Event::QpAsync(q, t) => self.async_events.push(AsyncEvent::Qp(q, t)),
                Event::CqAsync(c, t) => self.async_events.push(AsyncEvent::Cq(c, t)),
                Event::SrqAsync(s, t) => self.async_events.push(AsyncEvent::Srq(s, t)),
            }
        }
        self.dispatch_cm(core);
        if let Some(t) = earliest(core)
            && t.as_nanos() < self.sleeping_until.load(Ordering::SeqCst)
        {
            let _ = self.waker.wake();
        }
    }

    /// Builds and sends everything the endpoint wants to transmit.
    fn flush_tx(&self) {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let tx = &mut *tx;
        loop {
            tx.dst.clear();
            {
                let mut core = self.lock();
                let now = self.now();
                let mut mem = HostMemory;
                while tx.dst.len() < BATCH {
                    let Some((dst, pkt)) = core.gsi_out.pop_front() else {
                        break;
                    };
                    let i = tx.dst.len();
                    tx.bufs[i].clear();
                    tx.bufs[i].extend_from_slice(&pkt);
                    tx.dst.push(dst);
                }
                while tx.dst.len() < BATCH {
                    let i = tx.dst.len();
                    match core.ep.poll_transmit(now, &mut mem, &mut tx.bufs[i]) {
                        Some(t) => {
                            tx.bufs[i].truncate(t.len);
                            tx.dst.push(t.dst);
                        }
                        None => break,
                    }
                }
                self.after(&mut core);
            }
            let n = tx.dst.len();
            if n == 0 {
                return;
            }
            if let Some(c) = &self.capture {
                let src = self.socket.local_addr();
                for i in 0..n {
                    c.record(src, tx.dst[i], &tx.bufs[i]);
                }
            }
            let batch: Vec<Transmit<'_>> = (0..n)
                .map(|i| Transmit {
                    dst: tx.dst[i],
                    payload: &tx.bufs[i],
                })
                .collect();
            let mut sent = 0;
            let mut stalls = 0;
            while sent < n {
                match self.socket.send_batch(&batch[sent..]) {
                    Ok(0) => {
                        // Socket buffer full: wait briefly for room; after that,
                        // drop (RC retransmits; UD is unreliable by contract).
                        stalls += 1;
                        if stalls > 100 {
                            break;
                        }
                        wait_writable(&self.socket, 10);
                    }
                    Ok(k) => sent += k,
                    Err(_) => break,
                }
            }
            if n < BATCH {
                return;
            }
        }
    }

    /// Receives what is waiting on the socket and processes it; returns datagrams handled.
    /// `block_on_lock`: the progress thread waits for the receive lock, pollers don't.
    fn rx_burst(&self, block_on_lock: bool) -> usize {
        let mut rx = if block_on_lock {
            self.rx.lock().unwrap_or_else(|p| p.into_inner())
        } else {
            match self.rx.try_lock() {
                Ok(g) => g,
                Err(_) => return 0,
            }
        };
        let mut total = 0;
        loop {
            match self.socket.recv_batch(&mut rx) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let local_ip = self.socket.local_addr().ip();
            {
                let mut core = self.lock();
                let now = self.now();
                let mut mem = HostMemory;
                for d in rx.datagrams() {
                    if let Some(c) = &self.capture {
                        c.record(
                            d.src,
                            SocketAddr::new(
                                d.dst_ip.unwrap_or(local_ip),
                                self.socket.local_addr().port(),
                            ),
                            d.data,
                        );
                    }
                    let dg = Datagram {
                        src: d.src,
                        dst_ip: d.dst_ip.unwrap_or(local_ip),
                        payload: d.data,
                    };
                    if crate::cm::is_gsi(d.data) {
                        self.handle_gsi(&mut core, now, &dg);
                    } else {
                        core.ep.handle_datagram(now, &dg, &mut mem);
                    }
                    total += 1;
                }
                self.after(&mut core);
            }
            self.flush_tx();
            if rx.messages().len() < BATCH {
                break;
            }
        }
        self.handle_unreachable();
        total + self.rx_mcast(&mut rx)
    }

    /// Receives what arrived on multicast group sockets.
    fn rx_mcast(&self, rx: &mut RecvBatch) -> usize {
        let socks: Vec<Arc<RoceSocket>> = {
            let m = self.mcast.lock().unwrap_or_else(|p| p.into_inner());
            if m.is_empty() {
                return 0;
            }
            m.values().map(|(s, _)| Arc::clone(s)).collect()
        };
        let mut total = 0;
        for sock in socks {
            while let Ok(n) = sock.recv_batch(rx) {
                if n == 0 {
                    break;
                }
                let mut core = self.lock();
                let now = self.now();
                let mut mem = HostMemory;
                for d in rx.datagrams() {
                    let Some(group) = d.dst_ip else { continue };
                    let dg = Datagram {
                        src: d.src,
                        dst_ip: group,
                        payload: d.data,
                    };
                    core.ep.handle_datagram(now, &dg, &mut mem);
                    total += 1;
                }
                self.after(&mut core);
            }
        }
        total
    }

    /// Feeds a packet for QP1 to the CM (after the same ICRC check as any packet).
    fn handle_gsi(&self, core: &mut Core, now: Instant, d: &Datagram<'_>) {
        if !core.ep.icrc_ok(d) {
            return;
        }
        if let Some(mad) = crate::cm::gsi_mad(d.payload) {
            let Core { ep, cm, .. } = core;
            cm.handle_mad(now, d.src.ip(), d.dst_ip, mad, &mut EpQps { ep, now });
        }
    }

    /// ICMP said nothing listens at some peers any more: their processes are
    /// gone. Connections to them end now (the CM's liveness rule).
    fn handle_unreachable(&self) {
        let gone = self.socket.take_unreachable();
        if gone.is_empty() {
            return;
        }
        {
            let mut core = self.lock();
            let now = self.now();
            for a in gone {
                let Core { ep, cm, .. } = &mut *core;
                cm.peer_unreachable(now, a.ip(), &mut EpQps { ep, now });
            }
            self.after(&mut core);
        }
        self.flush_tx();
    }

    /// Routes CM events to their channels and frames outgoing MADs.
    fn dispatch_cm(&self, core: &mut Core) {
        while let Some(e) = core.cm.poll_event() {
            if e.kind == softrdma_cm::EventKind::Established && core.keepalive_at.is_none() {
                core.keepalive_at = Some(self.now() + KEEPALIVE);
            }
            let ch = core.cm_channels.get(&e.id).cloned().or_else(|| {
                // A connection request arrives on its listener's channel, and
                // the new id inherits it.
                let l = e.listen_id?;
                let c = core.cm_channels.get(&l).cloned()?;
                core.cm_channels.insert(e.id, c.clone());
                Some(c)
            });
            if let Some(c) = ch {
                c.push(e);
            }
        }
        let port = core.ep.config().dest_port;
        while let Some(o) = core.cm.poll_transmit() {
            let mut pkt = Vec::with_capacity(300);
            crate::cm::gsi_packet(core.gsi_psn, &o.mad, &mut pkt);
            core.gsi_psn = (core.gsi_psn + 1) & 0xFF_FFFF;
            let dst = SocketAddr::new(o.dst, port);
            core.ep.fill_icrc(o.src, dst, &mut pkt);
            core.gsi_out.push_back((dst, pkt));
        }
    }

    fn handle_timers(&self) {
        {
            let mut core = self.lock();
            let now = self.now();
            if core.ep.poll_timeout().is_some_and(|t| t <= now) {
                core.ep.handle_timeout(now);
            }
            if core.cm.poll_timeout().is_some_and(|t| t <= now) {
                let Core { ep, cm, .. } = &mut *core;
                cm.handle_timeout(now, &mut EpQps { ep, now });
            }
            if core.keepalive_at.is_some_and(|t| t <= now) {
                let probed = core.cm.send_keepalives();
                core.keepalive_at = (probed > 0).then(|| now + KEEPALIVE);
            }
            self.after(&mut core);
        }
        self.flush_tx();
    }
}

/// How recently an application must have busy-polled for the progress thread
/// to leave the socket to it.
const SPIN_WINDOW_NS: u64 = 100_000;
/// How often the progress thread checks whether the spinning stopped.
const STANDBY_NS: u64 = 100_000;

fn progress_loop(s: &Shared, poller: &Poller) {
    // While an application spins on its CQ it reads the socket itself; the
    // progress thread then stops watching the socket, so it does not wake for
    // every packet and compete for the two vCPUs with the spinner (on small
    // VMs that costs milliseconds of scheduling delay).
    let mut watching = true;
    while !s.shutdown.load(Ordering::SeqCst) {
        let now = s.now().as_nanos();
        let spinning = now.saturating_sub(s.last_spin.load(Ordering::Relaxed)) < SPIN_WINDOW_NS;
        if spinning && watching {
            watching = poller.remove_fd(s.socket.as_fd(), KEY_SOCKET).is_err();
        } else if !spinning && !watching {
            watching = poller.add_socket(&s.socket, KEY_SOCKET).is_ok();
        }
        // The CM's deadlines (MAD retransmission, time-wait) count too.
        let mut deadline = earliest(&s.lock()).map_or(u64::MAX, |t| t.as_nanos());
        if !watching {
            deadline = deadline.min(now + STANDBY_NS);
        }
        s.sleeping_until.store(deadline, Ordering::SeqCst);
        let when =
            (deadline != u64::MAX).then(|| s.epoch + std::time::Duration::from_nanos(deadline));
        let _ = poller.wait(when);
        s.sleeping_until.store(0, Ordering::SeqCst);
        if watching {
            s.rx_burst(true);
        } else {
            let mut rx = s.rx.lock().unwrap_or_else(|p| p.into_inner());
            s.rx_mcast(&mut rx);
        }
        s.handle_timers();
    }
}

/// How often the peers of live CM connections are probed. With no kernel to
/// send a DREQ for a killed process, a probe to its closed port draws an ICMP
/// "port unreachable", which ends the connection (DISCONNECTED, QP flushed):
/// a waiting peer learns of the death within about this long.
const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(1);

/// The earliest deadline of the transport, the CM and the keepalive.
fn earliest(core: &Core) -> Option<Instant> {
    [
        core.ep.poll_timeout(),
        core.cm.poll_timeout(),
        core.keepalive_at,
    ]
    .into_iter()
    .flatten()
    .min()
}

fn wait_writable(sock: &RoceSocket, ms: i32) {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call.
    unsafe {
        libc::poll(&mut p, 1, ms);
    }
}

fn e_kind(e: &softrdma_udp::BindError) -> io::ErrorKind {
    use softrdma_udp::BindError as B;
    match e {
        B::Io { source, .. } | B::Setup(source) => source.kind(),
        B::NotAvailable { .. } => io::ErrorKind::AddrNotAvailable,
        _ => io::ErrorKind::AddrInUse,
    }
}

fn os_seed() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: `b` is a valid writable 8-byte buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id())
    }
}
