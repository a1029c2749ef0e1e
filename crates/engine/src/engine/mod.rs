//! The engine: one endpoint, one UDP socket, one progress thread.
//!
//! This file holds the [`Engine`] and its public API, and the state it shares
//! with the progress thread (`Shared`, `Core`). The paths that state runs
//! live beside it: `busy_poll` (who owns the socket while an application
//! busy-polls, and deferred sends), `tx` (the transmit path), `rx` (the
//! receive path), `events` (endpoint and CM events, timers), `progress`
//! (the progress thread) and `policy` (the sans-IO decisions of `progress`
//! and `busy_poll`). `ops` and `cm_ops` are the command boundary: the
//! typed verbs and CM operations higher layers call.

use crate::channel::{AsyncChannel, CompChannel};
use crate::cm::{CmChannel, EpQps};
use crate::config::EngineConfig;
use padded::Padded;
use softrdma_cm::{Cm, CmConfig, CmError, IdHandle, PortSpace};
use softrdma_transport::{
    Config, CqHandle, CqRing, Endpoint, Express, ExpressWr, Instant, RecvWr, SendWr, Stats,
    VerbsError, Wc,
};
use softrdma_udp::{Poller, RecvBatch, RoceSocket, SocketConfig, SocketStats, Waker};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;

mod addrs;
mod busy_poll;
mod cm_ops;
mod dreq_hold;
mod events;
mod forward;
mod mad_ops;
mod membership;
mod ops;
mod padded;
mod policy;
#[cfg(test)]
mod poll_tests;
mod progress;
mod receiving;
mod rx;
mod shm;
mod tx;

use rx::Rx;
use tx::{Tx, wr_bytes};

/// Datagrams built or received per batch.
const BATCH: usize = 64;
/// Inbox datagrams processed between two sends of their answers (as
/// `rx::ACK_CHUNK` for a socket's).
const ACK_CHUNK_SHM: usize = 32;
const KEY_SOCKET: u8 = 1;
const KEY_MCAST: u8 = 2;
/// The netlink watch on the host's addresses (`addrs.rs`).
const KEY_ADDRS: u8 = 3;
/// Datagrams other members hand on (`forward.rs`).
const KEY_FORWARD: u8 = 4;

/// State behind the engine lock.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) ep: Endpoint,
    channels: HashMap<CqHandle, Arc<CompChannel>>,
    cm: Cm,
    cm_channels: HashMap<IdHandle, Arc<CmChannel>>,
    /// CM MADs framed for QP1, waiting for the transmit path.
    /// (source address, destination, packet).
    gsi_out: std::collections::VecDeque<(IpAddr, SocketAddr, Vec<u8>)>,
    gsi_psn: u32,
    /// When to probe the peers of live CM connections next (see `KEEPALIVE`).
    keepalive_at: Option<Instant>,
    /// libibumad's agents and the device's PMA (QP1 MADs not for the CM).
    mad: crate::mad::MadAgents,
    /// Peers' DREQs waiting for the application to poll (`dreq_hold.rs`).
    held_dreqs: dreq_hold::Held<dreq_hold::HeldMad>,
    /// Where a READ's response record is built to go at once
    /// (`Shared::answer_read_at_once`), kept between uses.
    answer_buf: Vec<u8>,
}

#[derive(Debug)]
struct Shared {
    core: Padded<Mutex<Core>>,
    tx: Padded<Mutex<Tx>>,
    rx: Padded<Mutex<RecvBatch>>,
    socket: RoceSocket,
    waker: Waker,
    /// The transport's clock: where its epoch (time zero) lies on the device
    /// clock (completion timestamps), and `now`.
    clock: crate::clock::DeviceClock,
    /// Device memory (`ibv_alloc_dm`), under its own lock.
    dm: crate::dm::DmTable,
    /// The deadline (transport time, ns) the progress thread sleeps until; u64::MAX: none.
    sleeping_until: Padded<AtomicU64>,
    shutdown: AtomicBool,
    busy_poll: bool,
    linger: crate::Linger,
    /// When an application thread last found its CQ empty (transport time, ns;
    /// 0: it announced it blocks): it spins on the CQ, so its next poll comes
    /// soon and sends what a post left unsent.
    last_poll: AtomicU64,
    /// When an application thread last polled or posted: while it is that
    /// busy with the device, the progress thread leaves the socket (and the
    /// locks) to it rather than take ACKs off it in parallel.
    last_call: AtomicU64,
    /// The latest clock reading of any thread ([`Shared::now`]): a lower
    /// bound of the time, for work that must not wait for the clock (the
    /// express post's record, [`Engine::post_send_via`]).
    recent: AtomicU64,
    /// Datagrams handed to the CM or the transport, by any thread (bumped
    /// under the engine lock, [`Shared::deliver`]). A busy poller that found
    /// its CQ empty looks again if another thread delivered meanwhile
    /// ([`Engine::poll_cq`]).
    delivered: AtomicU64,
    /// Whether DREQs are held ([`dreq_hold`]; set under the engine lock): a
    /// poll that finds its CQ ring empty takes the engine lock to release
    /// them only then.
    dreqs_held: AtomicBool,
    /// A busy poller processed packets and left their answers (ACKs) unsent,
    /// to hand its completions to the application first: the next engine
    /// call, or the progress thread at its next tick, sends them.
    tx_pending: AtomicBool,
    /// Whether the socket is in the progress thread's epoll set (changed only
    /// under this lock, by `update_watch`).
    watching: Padded<Mutex<bool>>,
    /// Request packets (not ACKs or responses) received so far, by the
    /// forwarder ([`Shared::requests_received`] counts them all).
    rx_requests: AtomicU64,
    /// The same, received under the receive lock (the sockets): added
    /// with a load and a store (`shm::add_locked`).
    rx_requests_locked: AtomicU64,
    /// The same, read from the inbox under the engine lock (`rx_shm`, as
    /// a busy poller does for each request it receives): likewise.
    rx_requests_inbox: AtomicU64,
    /// Until when (transport time, ns) a poller leaving with completions hands
    /// the socket back to the progress thread at once (see `leave`).
    serve_until: AtomicU64,
    /// When a poller last handed the socket back (0: not since its last poll).
    left_at: AtomicU64,
    /// A thread found the transmit lock taken and left its packets to the
    /// holder (see `send_soon`).
    tx_again: AtomicBool,
    /// When `tx_pending` was last set from clear (transport time, ns).
    pending_since: AtomicU64,
    /// Completion channel notifications so far (a thread is about to wake).
    notifies: AtomicU64,
    /// Bytes posted and not sent yet while `tx_pending` (see `doorbell`).
    deferred_bytes: std::sync::atomic::AtomicUsize,
    /// A post came since the last `poll_cq` (`policy::defers_post`).
    posted_since_poll: AtomicBool,
    /// Part of `tx_pending` is posts gathered for the next poll (the rest,
    /// answers a poller held, may wait for the application's next post).
    posts_deferred: AtomicBool,
    async_events: AsyncChannel,
    capture: Option<crate::capture::Capture>,
    /// `SOFTRDMA_FAULTS` (tests): faults applied to every sent batch.
    faults: Option<crate::faults::FaultInjector>,
    poller: Arc<Poller>,
    /// Multicast groups joined on this host: a socket bound to each group (every
    /// member process has one), and how many local QPs use it.
    mcast: Mutex<HashMap<IpAddr, (Arc<RoceSocket>, usize)>>,
    /// This process's membership of the host device at the device address
    /// (None: a device of its own).
    host: Option<Arc<crate::host::HostMember>>,
    /// The host device's other addresses (GID 1, 2, ...): a socket bound to
    /// each and this process's membership of its group (`addrs.rs`).
    more: Mutex<addrs::More>,
    /// Bumped at every change of `more` (`Shared::sockets_cached`).
    more_gen: AtomicU64,
    /// Address changes of the host (None: no host device, or no netlink).
    addr_watch: Option<softrdma_udp::AddrWatch>,
    /// The same-host path (None: off, or no host device).
    shm: Option<shm::ShmPath>,
    /// Where other members hand on what a stale steering table delivered
    /// to them, and how this one hands on (None: no host device).
    forward: Option<softrdma_udp::Forwarder>,
    /// The epoll set of a thread that receives while it waits for a
    /// completion event (`receiving.rs`; None if it could not be made), the
    /// lock that lets one thread at a time do so (it holds whether the
    /// device socket is in that set), how many do (0 or 1), and when the
    /// last wait ended with the socket left in the set (transport time, ns;
    /// `u64::MAX` during a wait, 0 while the socket is not in the set).
    waiter_poller: Option<receiving::WaiterPoller>,
    waiter_lock: Mutex<bool>,
    waiters: std::sync::atomic::AtomicUsize,
    waited_at: AtomicU64,
    rx_by_waiter: AtomicU64,
    /// Times the progress thread woke (each a CPU taken from whoever ran:
    /// in event mode, a polling waiter's).
    progress_wakeups: Padded<AtomicU64>,
    /// How long the last wait for a completion event lasted (ns; `u64::MAX`:
    /// none yet), and waits that ended while the thread still polled
    /// (`policy::WaiterSpin`).
    last_wait: AtomicU64,
    waits_spun: AtomicU64,
    /// When a busy poller last read the device socket, how many of its
    /// reads in a row found nothing, and when the inbox last delivered
    /// (transport time, ns; `policy::poller_reads_socket`).
    socket_read_at: AtomicU64,
    socket_misses: AtomicU32,
    shm_rx_at: AtomicU64,
    /// Itself, for the threads it starts (a reconciliation).
    me: std::sync::Weak<Shared>,
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
    /// `SOFTRDMA_STATS`: where the counters go at exit.
    pub(crate) stats_path: Option<std::path::PathBuf>,
}

/// The process-wide engine and the process it was started in. A child
/// forked after that inherits it without its progress thread (pyverbs's
/// rdmacm tests fork their two sides from a process that opened the
/// device), so a child starts an engine of its own on first use.
type Global = Option<(u32, Result<Arc<Engine>, String>)>;
static GLOBAL: Mutex<Global> = Mutex::new(None);

impl Engine {
    /// The process-wide engine, created from the environment on first use.
    pub fn global() -> io::Result<Arc<Engine>> {
        Self::global_at(None)
    }

    /// The process-wide engine; if it does not exist yet and `SOFTRDMA_ADDR`
    /// is not set, it takes the address `hint` (what an rdma_cm application
    /// binds to or resolves from names the device: `rping -s -a 127.0.0.2`).
    pub fn global_at(hint: Option<IpAddr>) -> io::Result<Arc<Engine>> {
        let pid = std::process::id();
        let mut g = GLOBAL.lock().unwrap_or_else(|p| p.into_inner());
        if g.as_ref().is_some_and(|(p, _)| *p != pid) {
            // Forked: the parent's engine is left alone (dropping it would
            // join a progress thread this process does not have).
            std::mem::forget(g.take());
        }
        let (_, r) = g.get_or_insert_with(|| {
            let r = EngineConfig::from_env()
                .and_then(|mut c| {
                    if let Some(ip) = hint.filter(|ip| !ip.is_unspecified())
                        && c.addr.addr.is_none()
                    {
                        c.addr = softrdma_udp::AddrConfig::exact(SocketAddr::new(ip, c.addr.port));
                    }
                    Engine::start(c)
                })
                .map(|e| {
                    crate::stats_dump::register_exit_hook();
                    Arc::new(e)
                })
                .map_err(|e| e.to_string());
            (pid, r)
        });
        r.clone()
            .map_err(|e| io::Error::other(format!("softrdma: cannot start the device: {e}")))
    }

    /// The process-wide engine if it was started (in this process).
    pub fn global_if_started() -> Option<Arc<Engine>> {
        let g = GLOBAL.lock().unwrap_or_else(|p| p.into_inner());
        match g.as_ref() {
            Some((p, Ok(e))) if *p == std::process::id() => Some(Arc::clone(e)),
            _ => None,
        }
    }

    /// Starts an engine: binds the socket and spawns the progress thread.
    pub fn start(mut cfg: EngineConfig) -> io::Result<Engine> {
        // Port 0 (tests: a kernel-chosen port) is a device of its own; so is
        // a process that cannot use the registry (a runtime directory it
        // cannot write, or one another user squats on).
        let registry = if cfg.host && cfg.addr.port != 0 {
            softrdma_host::Registry::open_for_port(cfg.addr.port)
                .inspect_err(|e| {
                    if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                        eprintln!(
                            "softrdma: no host device ({e}); this process has a device of its own"
                        );
                    }
                })
                .ok()
        } else {
            None
        };
        let (host, socket, stale) = if let Some(registry) = registry {
            // The host device's default address: loopback, shared.
            let ip = *cfg
                .addr
                .addr
                .get_or_insert(std::net::Ipv4Addr::LOCALHOST.into());
            let addr = match ip {
                IpAddr::V6(a) => {
                    std::net::SocketAddrV6::new(a, cfg.addr.port, 0, cfg.addr.scope_id).into()
                }
                IpAddr::V4(_) => SocketAddr::new(ip, cfg.addr.port),
            };
            let sc = member_config(ip, true);
            let (h, s, stale) =
                crate::host::HostMember::join(registry, addr, || open_socket(&cfg.addr, &sc))?;
            (Some(Arc::new(h)), s, stale)
        } else {
            (
                None,
                open_socket(&cfg.addr, &SocketConfig::default())?,
                false,
            )
        };
        let local = socket.local_addr();
        // Watch before reading the addresses: a change in between is seen.
        let addr_watch = host
            .as_ref()
            .and_then(|_| softrdma_udp::AddrWatch::open().ok());
        let (more, more_stale) = match &host {
            Some(h) => join_more(h, local, socket.capabilities().gro),
            None => (Vec::new(), Vec::new()),
        };
        let seed = cfg.seed.unwrap_or_else(os_seed);
        let info = crate::DeviceInfo::new(local.ip());
        let mut tcfg = Config::new(local.ip(), seed);
        tcfg.gids.extend(more.iter().map(|(_, h)| h.ip()));
        tcfg.local_port = local.port();
        tcfg.dest_port = local.port();
        tcfg.verify_icrc = cfg.verify_icrc;
        tcfg.limits = info.limits;
        tcfg.loopback_unacked_psns = loopback_window(socket.capabilities().recv_buffer);
        let slot = host.as_ref().map_or(0, |h| h.slot());
        tcfg.member_slot = slot;
        tcfg.rnr_hold_ns = u64::try_from(cfg.rnr_hold.as_nanos()).unwrap_or(u64::MAX);
        let mut cm = Cm::new(CmConfig {
            addrs: tcfg.gids.clone(),
            node_guid: info.node_guid,
            mtu: info.limits.port_mtu,
            seed: seed.rotate_left(17),
            member_slot: slot,
        });
        let mut mad = crate::mad::MadAgents::new(slot);
        if let Some(h) = &host {
            cm.set_port_authority(Box::new(h.port_authority()));
            mad.set_servers(Box::new(h.mad_classes()));
        }
        let poller = Arc::new(Poller::new()?);
        poller.add_socket(&socket, KEY_SOCKET)?;
        for (s, _) in &more {
            poller.add_socket(s, KEY_SOCKET)?;
        }
        if let Some(w) = &addr_watch {
            poller.add_fd(w.as_fd(), KEY_ADDRS, softrdma_udp::Interest::Readable)?;
        }
        // Multicast sends leave through the device's interface and loop back to
        // local members (other processes' group sockets).
        let _ = socket.set_multicast_source(local.ip());
        let waker = poller.waker();
        let rx = RecvBatch::for_socket(&socket, BATCH);
        let capture = match &cfg.pcap {
            Some(p) => Some(crate::capture::Capture::create(p)?),
            None => None,
        };
        let faults = crate::faults::FaultInjector::from_env(&socket)?;
        // Fault injection acts on UDP sends: with it, everything stays on UDP.
        let shm = match &host {
            Some(h) if cfg.shm && faults.is_none() => shm::ShmPath::new(
                h,
                local.port(),
                capture.is_some(),
                cfg.peer_copy,
            )
            .inspect_err(|e| {
                if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                    eprintln!(
                        "softrdma: no shared-memory path ({e}); same-host traffic goes over UDP"
                    );
                }
            })
            .ok(),
            _ => None,
        };
        let forward = Shared::open_forwarder(host.as_deref(), &poller);
        let waiter_poller = receiving::WaiterPoller::new().ok();
        if shm.is_some()
            && let Some(h) = &host
        {
            // Peer-copy packets name it (`shm/peer_copy.rs`).
            tcfg.peer_incarnation = h.generation();
        }
        // Lane packets go without their ICRC (no receiver checks it, a
        // capture records packets whole): `Tx::icrc_here`.
        tcfg.fill_icrc = shm.is_none() || capture.is_some();
        // A request may carry its QP's ACK on a lane, unless this process
        // captures (the capture's packets are sent as built).
        tcfg.lane_acks = shm.is_some() && capture.is_none();
        // And a post to an idle QP may leave as a direct record, unless
        // `SOFTRDMA_DIRECT=0`.
        tcfg.direct = tcfg.lane_acks && cfg.direct;
        // Its responder takes the common request by the express path,
        // unless `SOFTRDMA_EXPRESS=0`.
        tcfg.express = tcfg.direct && cfg.express;
        let icrc_here = !tcfg.fill_icrc;
        let async_events = AsyncChannel::new()?;
        let shared = Arc::new_cyclic(|me| Shared {
            me: me.clone(),
            core: Padded::new(Mutex::new(Core {
                ep: Endpoint::new(tcfg),
                channels: HashMap::new(),
                cm,
                cm_channels: HashMap::new(),
                gsi_out: std::collections::VecDeque::new(),
                gsi_psn: (seed as u32) & 0xFF_FFFF,
                keepalive_at: None,
                held_dreqs: dreq_hold::Held::default(),
                answer_buf: Vec::new(),
                mad,
            })),
            tx: Padded::new(Mutex::new(Tx {
                bufs: (0..BATCH).map(|_| Vec::with_capacity(4200)).collect(),
                dst: Vec::with_capacity(BATCH),
                src: Vec::with_capacity(BATCH),
                via: Vec::with_capacity(BATCH),
                links: shm::Links::new(),
                icrc_here,
                pushed: Vec::new(),
                sockets: None,
                record: None,
            })),
            rx: Padded::new(Mutex::new(rx)),
            socket,
            waker,
            clock: crate::clock::DeviceClock::new(std::time::Duration::ZERO),
            dm: crate::dm::DmTable::default(),
            sleeping_until: Padded::new(AtomicU64::new(u64::MAX)),
            shutdown: AtomicBool::new(false),
            busy_poll: cfg.busy_poll,
            linger: if cfg.busy_poll {
                cfg.linger
            } else {
                crate::Linger::Off
            },
            last_poll: AtomicU64::new(0),
            last_call: AtomicU64::new(0),
            recent: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            dreqs_held: AtomicBool::new(false),
            tx_pending: AtomicBool::new(false),
            tx_again: AtomicBool::new(false),
            pending_since: AtomicU64::new(0),
            notifies: AtomicU64::new(0),
            watching: Padded::new(Mutex::new(true)),
            rx_requests: AtomicU64::new(0),
            rx_requests_locked: AtomicU64::new(0),
            rx_requests_inbox: AtomicU64::new(0),
            serve_until: AtomicU64::new(0),
            left_at: AtomicU64::new(0),
            deferred_bytes: std::sync::atomic::AtomicUsize::new(0),
            posted_since_poll: AtomicBool::new(false),
            posts_deferred: AtomicBool::new(false),
            async_events,
            capture,
            faults,
            poller: Arc::clone(&poller),
            mcast: Mutex::new(HashMap::new()),
            host,
            more: Mutex::new(Arc::new(more)),
            more_gen: AtomicU64::new(0),
            addr_watch,
            shm,
            forward,
            waiter_poller,
            waiter_lock: Mutex::new(false),
            waiters: std::sync::atomic::AtomicUsize::new(0),
            waited_at: AtomicU64::new(0),
            rx_by_waiter: AtomicU64::new(0),
            progress_wakeups: Padded::new(AtomicU64::new(0)),
            last_wait: AtomicU64::new(u64::MAX),
            waits_spun: AtomicU64::new(0),
            socket_read_at: AtomicU64::new(0),
            socket_misses: AtomicU32::new(0),
            shm_rx_at: AtomicU64::new(0),
        });
        let s2 = Arc::clone(&shared);
        let loadavg = progress::open_loadavg();
        let thread = std::thread::Builder::new()
            .name("softrdma-progress".into())
            .spawn(move || progress::progress_loop(&s2, &poller, loadavg))?;
        for (i, stale) in std::iter::once(stale).chain(more_stale).enumerate() {
            if stale {
                shared.reconcile_now(i);
            }
        }
        Ok(Engine {
            shared,
            thread: Some(thread),
            // The variable is a request about the process, whatever config
            // the engine was built from.
            stats_path: cfg.stats.clone().or_else(|| {
                std::env::var_os(crate::ENV_STATS)
                    .filter(|p| !p.is_empty())
                    .map(Into::into)
            }),
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

    /// The local address to reach `dst` from when an rdma_cm id names none:
    /// the device address (GID 0) if it can reach `dst` (same family, and
    /// both loopback or neither: processes given their own address keep
    /// being seen from it), else the address routing picks (the one a UDP
    /// socket connected to `dst` gets) if it is in the GID table, else GID 0.
    pub fn source_for(&self, dst: IpAddr) -> IpAddr {
        let dev = self.local_addr();
        let (d, t) = (dev.ip().to_canonical(), dst.to_canonical());
        // Multicast groups are joined on the device address's interface.
        if dst.is_multicast() || (d.is_ipv4() == t.is_ipv4() && d.is_loopback() == t.is_loopback())
        {
            return dev.ip();
        }
        let any: IpAddr = if dst.is_ipv4() {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        };
        let routed = (|| {
            let s = softrdma_udp::kernel_udp_socket((any, 0).into()).ok()?;
            s.connect((dst, dev.port())).ok()?;
            Some(s.local_addr().ok()?.ip())
        })();
        match routed {
            Some(ip) if self.gids().contains(&ip) => ip,
            _ => dev.ip(),
        }
    }

    /// The GID table as addresses.
    pub fn gids(&self) -> Vec<IpAddr> {
        self.lock().ep.config().gids.clone()
    }

    /// Now, on the transport's clock.
    pub fn now(&self) -> Instant {
        self.shared.now()
    }

    /// The device clock (ns of `CLOCK_MONOTONIC`, see [`crate::clock`]) at
    /// transport time `t`, e.g. a completion's [`Wc::timestamp`].
    ///
    /// [`Wc::timestamp`]: softrdma_transport::Wc::timestamp
    pub fn device_clock(&self, t: Instant) -> u64 {
        self.shared.clock.at(t)
    }

    /// The device clock now (`ibv_query_rt_values_ex`'s `raw_clock`).
    pub fn device_clock_now(&self) -> u64 {
        self.device_clock(self.now())
    }

    /// Wall-clock time (ns since the Unix epoch) of transport time `t`.
    pub fn wallclock(&self, t: Instant) -> u64 {
        let now = self.now();
        crate::clock::wallclock_at(t, now, crate::clock::realtime_ns())
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        self.shared.lock()
    }

    /// Runs `f` on the endpoint under the engine lock, then sends whatever it
    /// queued. Private to the engine: higher layers call the typed
    /// operations (`ops.rs`).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Endpoint, Instant) -> R) -> R {
        self.with_core(|core, now| f(&mut core.ep, now))
    }

    /// Runs `f` on the state behind the engine lock, then delivers events
    /// and sends whatever it queued.
    fn with_core<R>(&self, f: impl FnOnce(&mut Core, Instant) -> R) -> R {
        // Answers a busy poller left unsent go first: `f` may destroy their QP.
        self.shared.flush_pending_sync();
        let r = {
            let mut core = self.lock();
            let now = self.now();
            let r = f(&mut core, now);
            self.shared.after(&mut core);
            r
        };
        self.shared.flush_tx();
        r
    }

    /// Posts a send WR and transmits what it allows (see [`Engine::post_send_many`]).
    /// A lone post to an idle QP may leave as a direct record. Not through
    /// `post_send_many`: its iterator moved the 184-byte request twice
    /// more (BENCHMARKS.md, "A lone post").
    pub fn post_send(&self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        self.post_send_via(None, qpn, wr)
    }

    /// The express cell of RC QP `qpn` (`softrdma_transport::Express`), if
    /// its posts may go through one: the same-host path with direct
    /// records and `SOFTRDMA_EXPRESS` on. The handle keeps it; its posts
    /// pass it to [`Engine::post_send_via`].
    pub fn express(&self, qpn: u32) -> Option<Arc<Express>> {
        let mut core = self.lock();
        if !core.ep.config().express {
            return None;
        }
        let x = core.ep.express(qpn)?;
        if let Some(shm) = &self.shared.shm {
            shm.add_cell(qpn, &x);
        }
        Some(x)
    }

    /// [`Engine::post_send`] through the QP's express cell `x` first: a
    /// lone small SEND or WRITE to a lent, idle QP is written and pushed
    /// into the peer's lane without the engine lock
    /// (`softrdma_transport::Express::post`); anything else goes the
    /// engine's way.
    pub fn post_send_via(
        &self,
        x: Option<&Express>,
        qpn: u32,
        wr: SendWr,
    ) -> Result<(), VerbsError> {
        // Asked first: a READ's post prepares no record.
        if let Some(x) = x
            && x.wants(wr.opcode)
            && let Some(e) = ExpressWr::of(&wr)
            && self.post_send_express(x, qpn, &e)
        {
            return Ok(());
        }
        let core = self.lock();
        let now = self.now();
        let idle = core.ep.send_queue_empty(qpn);
        if idle && core.ep.config().direct {
            return self.post_direct(core, now, qpn, wr).map_err(|(_, e)| e);
        }
        self.post_queued(core, now, qpn, std::iter::once(wr), idle)
            .map_err(|(_, e)| e)
    }

    /// Posts send WRs in order under one lock, then transmits; on the first
    /// refusal returns how many were posted and why the next one was refused.
    ///
    /// While an application thread busy-polls a CQ (it found one empty lately
    /// and called the device within the last 100 µs), posts are not sent at
    /// once but gathered until the next `poll_cq` (or 256 KiB, or the
    /// progress thread's next tick, at most about a millisecond away): a
    /// burst of posts then leaves in a few GSO sends instead of one system
    /// call each. A post followed by a poll, as in a ping-pong, leaves at the
    /// poll, a few hundred ns later.
    pub fn post_send_many(
        &self,
        qpn: u32,
        wrs: impl IntoIterator<Item = SendWr>,
    ) -> Result<(), (usize, VerbsError)> {
        let core = self.lock();
        let now = self.now();
        let idle = core.ep.send_queue_empty(qpn);
        let mut wrs = wrs.into_iter().peekable();
        let mut first = wrs.next();
        // A lone post to an idle QP may leave as a direct record.
        if idle
            && core.ep.config().direct
            && wrs.peek().is_none()
            && let Some(wr) = first.take()
        {
            return self.post_direct(core, now, qpn, wr);
        }
        self.post_queued(core, now, qpn, first.into_iter().chain(wrs), idle)
    }

    /// Queues send WRs on the QP under the engine lock, then rings the
    /// doorbell (`idle`: the send queue was empty before them).
    fn post_queued(
        &self,
        mut core: MutexGuard<'_, Core>,
        now: Instant,
        qpn: u32,
        wrs: impl IntoIterator<Item = SendWr>,
        idle: bool,
    ) -> Result<(), (usize, VerbsError)> {
        let mut bytes = 0;
        let r = (|| {
            for (i, wr) in wrs.into_iter().enumerate() {
                bytes += wr_bytes(&wr);
                core.ep.post_send(now, qpn, wr).map_err(|e| (i, e))?;
            }
            Ok(())
        })();
        self.shared.doorbell(core, bytes, now, idle);
        r
    }

    /// A lone post to an idle QP, which the endpoint may start as a direct
    /// record (`Endpoint::post_send_direct`): then it is pushed into its
    /// lane at once. When the transmit lock is free it is taken before the
    /// engine lock is let go of, so nothing of the QP built meanwhile by
    /// another thread can pass the record. When another thread holds it, a
    /// request another thread posts to the same QP meanwhile may pass it;
    /// the responder then asks for the record's PSN again (a sequence NAK),
    /// as after a wire that reorders. Otherwise the post goes on as any
    /// other.
    fn post_direct(
        &self,
        mut core: MutexGuard<'_, Core>,
        now: Instant,
        qpn: u32,
        wr: SendWr,
    ) -> Result<(), (usize, VerbsError)> {
        let bytes = wr_bytes(&wr);
        let mut rec = [0u8; softrdma_wire::direct::DIRECT_MAX_LEN];
        let started = core
            .ep
            .post_send_direct(now, qpn, wr, &mut crate::memory::HostMemory, &mut rec)
            .map_err(|e| (0, e))?;
        let Some(t) = started else {
            self.shared.doorbell(core, bytes, now, true);
            return Ok(());
        };
        set_flag(&self.shared.posted_since_poll, true, Ordering::Relaxed);
        self.shared.note_busy(now.as_nanos());
        // The record carried the ACK a poller held (`Config::lane_acks`):
        // if nothing else waits, the next empty poll has nothing to send.
        // Its flush found nothing, under both locks and a clock read: 5 %
        // of a same-host `ib_write_lat` client's time (BENCHMARKS.md, "A
        // lone post"). Cleared under the engine lock, as `drain_tx_from`'s
        // flags are before it looks: who queues later sets it again.
        self.shared.nothing_pending_if_idle(&core);
        // Its retransmission timer may be the earliest now. (The post
        // raised no event: its QP is ready to send, nothing was flushed.)
        self.shared.wake_for_timers(&mut core);
        // The lock order is transmit, then engine: only a try while the
        // engine lock is held. The engine lock is not held while the push
        // waits for room in a full lane. The QP's responder's answers may
        // pass the record, as on a wire.
        let ns = now.as_nanos();
        let held = self.shared.tx.try_lock().ok();
        drop(core);
        let mut tx =
            held.unwrap_or_else(|| self.shared.tx.lock().unwrap_or_else(|p| p.into_inner()));
        self.shared.push_direct(&mut tx, &rec[..t.len], &t, ns);
        drop(tx);
        // As every holder of the transmit lock: a thread that found it
        // taken meanwhile (`send_soon`) left its packets to this one. An
        // ACK queued by the progress thread while the record was pushed
        // was lost this way, until a teardown dropped it: libfabric's
        // fi_pingpong (msg) then read a flushed send, 3 runs in 10.
        self.shared.after_drain();
        Ok(())
    }

    /// The express post of a lone send WR to QP `qpn` through its cell `x`
    /// ([`Express::post`]): the record the cell writes goes into the peer's
    /// lane at once, under the transmit lock (taken before the cell's, as
    /// in a drain), without the engine lock. True: posted. False: nothing
    /// happened, the WR is for [`Engine::post_send_via`] (with no cell, or
    /// the cell asked again) or [`Engine::post_send_many`]. A driver that
    /// builds the [`ExpressWr`] from its own request (the C ABI) calls this
    /// first and builds a `SendWr` only when it declines.
    pub fn post_send_express(&self, x: &Express, qpn: u32, wr: &ExpressWr<'_>) -> bool {
        // Asked before the transmit lock: a QP not lent (a peer off the
        // lanes) declines with a few loads. Asked for every post, not only
        // when lent: the cell lends the requester only while the driver's
        // posts are of a kind it takes (`Express::wants`).
        if !x.wants(wr.opcode) {
            return false;
        }
        // The record leaves before the clock is read: the read was ~20 ns
        // of each message's path (BENCHMARKS.md, "The VM's modes, taken
        // apart, and the express post's clock read after its record"; ~5 ns
        // unmarked in the fast mode). Until then the latest reading stands in
        // (the link check's time), and the message's posting time is raised
        // to the clock's right after (its retransmission timer, if it is
        // taken back).
        let before = self.shared.recent();
        // The record is written into the transmit lock's buffer (`Tx::record`):
        // one on the stack was zeroed on every post (a 291-byte `memset`,
        // ~40 instructions; callgrind of `ib_send_lat`). The lock comes
        // before the cell's, as in a drain.
        let mut tx = self.shared.tx.lock().unwrap_or_else(|p| p.into_inner());
        let mut rec = tx
            .record
            .take()
            .unwrap_or_else(|| Box::new([0; softrdma_wire::direct::DIRECT_MAX_LEN]));
        let Some(t) = x.post(before, wr, &mut crate::memory::HostMemory, &mut rec) else {
            tx.record = Some(rec);
            return false;
        };
        set_flag(&self.shared.posted_since_poll, true, Ordering::Relaxed);
        self.shared
            .push_direct(&mut tx, &rec[..t.len], &t, before.as_nanos());
        tx.record = Some(rec);
        drop(tx);
        let now = self.now();
        x.posted_at(now);
        self.shared.note_busy(now.as_nanos());
        self.shared.after_drain();
        // The record carried the ACK the QP owed: if that was all it had to
        // send, the next empty poll need not drain (as after
        // `post_direct`). Only tried: another holder's flush does it.
        if let Ok(mut core) = self.shared.core.try_lock() {
            core.ep.express_posted(qpn);
            self.shared.nothing_pending_if_idle(&core);
        }
        true
    }

    /// [`Engine::post_recv_many`] through the QP's express cell `x` first:
    /// while the QP's receive gate is open, receives are queued in the
    /// cell without the engine lock (`softrdma_transport::ExpressRecv`);
    /// from the first one it declines on, the rest go the engine's way,
    /// behind them.
    pub fn post_recv_via(
        &self,
        x: Option<&Express>,
        qpn: u32,
        wrs: impl IntoIterator<Item = RecvWr>,
    ) -> Result<(), (usize, VerbsError)> {
        let mut wrs = wrs.into_iter();
        let Some(x) = x else {
            return self.post_recv_many(qpn, wrs);
        };
        for (posted, wr) in wrs.by_ref().enumerate() {
            if let Err(wr) = x.post_recv(wr) {
                return self
                    .post_recv_many(qpn, std::iter::once(wr).chain(wrs))
                    .map_err(|(i, e)| (posted + i, e));
            }
        }
        Ok(())
    }

    /// Posts receive WRs in order under one lock; like [`Engine::post_send_many`]
    /// (and like [`Engine::post_recv`], sends only what the posts queued).
    pub fn post_recv_many(
        &self,
        qpn: u32,
        wrs: impl IntoIterator<Item = RecvWr>,
    ) -> Result<(), (usize, VerbsError)> {
        let (r, send) = {
            let mut core = self.lock();
            let now = self.now();
            let before = core.ep.wants_transmit();
            let r = (|| {
                for (i, wr) in wrs.into_iter().enumerate() {
                    core.ep.post_recv(now, qpn, wr).map_err(|e| (i, e))?;
                }
                Ok(())
            })();
            (r, !before && core.ep.wants_transmit())
        };
        if send {
            self.shared.send_soon();
        }
        r
    }

    /// Posts a receive WR. Usually nothing to transmit; but a receive that
    /// ends a held RNR NAK (`SOFTRDMA_RNR_HOLD`) has the responder ask for
    /// the request again, at once.
    ///
    /// Only what the post itself queued is sent here. Answers queued before
    /// it (a busy poller's held ACKs) are already some thread's to send,
    /// and the application's next send carries them: a ping-pong re-posts
    /// its receive between taking a message and replying, and sending the
    /// ACK here cost each message a packet of its own where the reply could
    /// carry it (`Config::lane_acks`).
    pub fn post_recv(&self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        self.post_recv_many(qpn, std::iter::once(wr))
            .map_err(|(_, e)| e)
    }

    /// Polls up to `max` completions. With busy polling on, an empty CQ first
    /// pulls packets off the socket in this thread (no hand-off to the progress
    /// thread: the cross-core wake-up costs tens of µs on small VMs). When that
    /// produced completions, they are returned before the ACKs those packets
    /// call for are sent: the application's next post sends them (after its
    /// own request, or in it on a lane: `Config::lane_acks`), or its next
    /// poll that finds the CQ empty; so a ping-pong's critical path carries
    /// no ACK packet.
    pub fn poll_cq(
        &self,
        cq: CqHandle,
        max: usize,
        f: impl FnMut(Wc),
    ) -> Result<usize, VerbsError> {
        self.poll_cq_in(None, cq, max, f)
    }

    /// The completions of `cq` ([`CqRing`]), for [`Engine::poll_cq_ring`]:
    /// a caller that polls the CQ often keeps it with its handle.
    pub fn cq_ring(&self, cq: CqHandle) -> Result<Arc<CqRing>, VerbsError> {
        self.lock().ep.cq_ring(cq)
    }

    /// [`Engine::poll_cq`] that first takes the completions already queued
    /// in `ring` (`cq`'s, from [`Engine::cq_ring`]) without the engine lock:
    /// a poll that finds completions then waits for no other thread's work
    /// on the engine (docs/PLAN-direct-queues.md, step 1).
    pub fn poll_cq_ring(
        &self,
        ring: &CqRing,
        cq: CqHandle,
        max: usize,
        f: impl FnMut(Wc),
    ) -> Result<usize, VerbsError> {
        self.poll_cq_in(Some(ring), cq, max, f)
    }

    /// The completions already queued: from `ring` without the engine lock,
    /// or under it; an empty CQ goes on under the lock if DREQs are held
    /// (which its emptiness releases), or without a ring.
    ///
    /// A ring found empty with no DREQ held takes no lock: a busy poller's
    /// empty polls are its reaction time to a peer's record (~40 ns of an
    /// empty poll's ~130 on the 2-vCPU VM, `scripts/verbs-call-costs.sh`).
    /// A DREQ held just after the flag was read is released by the next
    /// empty poll, or at its deadline by the timers.
    fn poll_queued(
        &self,
        ring: Option<&CqRing>,
        cq: CqHandle,
        max: usize,
        mut f: impl FnMut(Wc),
    ) -> Result<usize, VerbsError> {
        match ring.map(|r| r.poll(max, &mut f)) {
            Some(0) if !self.shared.dreqs_held.load(Ordering::Relaxed) => Ok(0),
            None | Some(0) => self.shared.poll_cq_locked(cq, max, f, || self.now()),
            Some(n) => Ok(n),
        }
    }

    fn poll_cq_in(
        &self,
        ring: Option<&CqRing>,
        cq: CqHandle,
        max: usize,
        mut f: impl FnMut(Wc),
    ) -> Result<usize, VerbsError> {
        set_flag(&self.shared.posted_since_poll, false, Ordering::Relaxed);
        if !self.shared.busy_poll || max == 0 {
            self.shared.flush_pending();
            return self.poll_queued(ring, cq, max, &mut f);
        }
        // Gathered posts leave now; answers a poller held (ACKs) wait while
        // the application takes completions: its next post carries them
        // (`Config::lane_acks`), or its next empty poll sends them.
        if self.shared.posts_deferred.load(Ordering::Relaxed) {
            self.shared.flush_pending();
        }
        let delivered = self.shared.deliveries();
        let mut newest = 0;
        let n = self.poll_queued(ring, cq, max, |w| {
            newest = newest.max(w.timestamp.as_nanos());
            f(w)
        })?;
        if n > 0 {
            // Completions were waiting: taken without a clock read unless
            // the socket is being handed between this thread and the
            // progress thread (`back`, `leave`). In a ping-pong of SENDs
            // the send's completion is there when polled, and the read
            // was ~0.02 µs of each message (BENCHMARKS.md, "A lone
            // post"). The newest completion's time stands for now in
            // `last_call`: made a moment ago, by this thread or by the
            // one that woke it (an event-mode waiter keeps the socket,
            // one wake-up a message).
            if self.shared.handing_over() {
                let now = self.shared.poller_back(self.now().as_nanos());
                self.shared.leave(now);
            } else {
                self.shared.note_called(newest);
            }
            return Ok(n);
        }
        let now = self.shared.poller_back(self.now().as_nanos());
        // An empty CQ: this thread spins on it, and whatever it held goes.
        self.shared.flush_pending();
        self.shared.last_poll.store(now, Ordering::Relaxed);
        self.shared.waiter_lets_go(now);
        // Records for lent responders first, without the engine lock: what
        // they complete is in the rings, this CQ's polled here. An inbox
        // found empty is not read again below (~50 instructions of each
        // empty poll).
        let lent = ring.and_then(|r| Some((r, self.shared.rx_lent(now)?)));
        if let Some((ring, executed)) = lent
            && executed > 0
        {
            let n = ring.poll(max, &mut f);
            if n > 0 {
                if self.shared.tx_pending.load(Ordering::Relaxed) {
                    self.shared.ensure_tick(now);
                }
                self.shared.leave(now);
                return Ok(n);
            }
        }
        let inbox = ring.is_none() || lent.is_some();
        // Block on the lock another reader holds (the engine lock for the
        // inbox, the receive lock for the socket) rather than spin past it:
        // on a small VM a spinning poller can starve the progress thread
        // that holds it. What this burst received, or what another thread
        // (the progress thread, holding the lock this one waited for) delivered
        // since the CQ was read: a completion found only at the next call
        // could come after an event it preceded. libfabric's rxm read a
        // peer's DISCONNECTED first, destroyed the QP with its last message
        // still in the CQ, and fi_pingpong hung (3 to 6 runs in 100 with
        // two CPU burners).
        // What the inbox delivered is polled for under the engine lock it
        // was delivered under: a lock's take and release fewer on each
        // message's path (BENCHMARKS.md, "A lone post").
        let mut taken = None;
        let got = self.shared.rx_burst_then(
            Rx::Poller,
            now,
            inbox,
            Some(&mut |core: &mut Core| taken = Some(core.ep.poll_cq(cq, max, &mut f))),
        );
        let n = match taken.transpose()?.filter(|&n| n > 0) {
            Some(n) => n,
            // As the first poll: finding the CQ empty releases held DREQs.
            None if got > 0 || self.shared.deliveries() != delivered => self
                .shared
                .poll_cq_locked(cq, max, &mut f, || Instant::from_nanos(now))?,
            None => return Ok(0),
        };
        if n == 0 {
            self.shared.flush_pending();
        } else {
            if self.shared.tx_pending.load(Ordering::Relaxed) {
                self.shared.ensure_tick(now);
            }
            self.shared.leave(now);
        }
        Ok(n)
    }

    /// Tells the engine an application thread is about to block (e.g. in a
    /// completion channel): the progress thread must watch the socket again.
    pub fn before_block(&self) {
        crate::channel::Receiver::before_block(&*self.shared, false);
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
            // Received into the device socket's batch: the same GRO setting.
            &SocketConfig::default().with_gro(self.shared.socket.capabilities().gro),
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
                && let Some((s, _)) = m.remove(&group)
            {
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
    /// delivers its events and sends its MADs. Private to the engine: higher
    /// layers call the typed CM operations (`cm_ops.rs`).
    pub(crate) fn with_cm<R>(
        &self,
        f: impl FnOnce(&mut Cm, &mut dyn softrdma_cm::QpOps, Instant) -> R,
    ) -> R {
        self.shared.flush_pending_sync();
        let r = {
            let mut core = self.lock();
            let now = self.now();
            let r = {
                let Core { ep, cm, .. } = &mut *core;
                f(
                    cm,
                    &mut EpQps {
                        ep,
                        now,
                        peer_copy: self.shared.peer_copy_policy(),
                    },
                    now,
                )
            };
            self.shared.after(&mut core);
            r
        };
        self.shared.flush_tx();
        self.shared.refresh_steering();
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
        if let Some(s) = src {
            self.with_cm(|cm, _, _| cm.bind(id, s))?;
        }
        let local = self.cm_resolve_source(id, src.map(|s| s.ip()), dst.ip());
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
        let receiver: std::sync::Weak<dyn crate::channel::Receiver> = self.shared.me.clone();
        Ok(Arc::new(CompChannel::with_receiver(Some(receiver))?))
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

    /// Whether this thread holds none of the locks the exit work takes
    /// (see `Shared::exit_locks_free`).
    pub(crate) fn exit_locks_free(&self) -> bool {
        self.shared.exit_locks_free()
    }

    /// Sends every packet still queued (deferred ACKs included) now.
    pub(crate) fn flush_for_exit(&self) {
        self.shared.flush_pending_sync();
    }

    /// Leaves the host device's group: its table stops steering to this
    /// process before the socket closes.
    pub(crate) fn leave_host(&self) {
        self.shared.leave_host();
    }

    /// The same-host path's counters (`shm_tx`, `shm_rx`, ...): none if it
    /// is off (`SOFTRDMA_SHM=0`, no host device, or it could not start).
    pub fn shm_counters(&self) -> Vec<(&'static str, u64)> {
        self.shared
            .shm
            .as_ref()
            .map_or_else(Vec::new, |s| s.counters().to_vec())
    }

    /// The host device's forwarding counters (`host_forwarded`, ...): none
    /// without a host device.
    pub fn host_counters(&self) -> Vec<(&'static str, u64)> {
        self.shared.forward_counters()
    }

    /// What threads blocked for completion events received themselves
    /// (`rx_by_waiter`).
    pub fn waiter_counters(&self) -> Vec<(&'static str, u64)> {
        self.shared.waiter_counters().to_vec()
    }

    /// Transport and socket counters.
    pub fn stats(&self) -> (Stats, SocketStats) {
        let s = self.lock().ep.stats();
        (s, self.shared.socket.stats())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.at_exit();
        self.shared.shutdown.store(true, Ordering::SeqCst);
        let _ = self.shared.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn now(&self) -> Instant {
        let now = self.clock.now();
        // Any thread's store: an older reading may win, still a lower bound.
        self.recent.store(now.as_nanos(), Ordering::Relaxed);
        now
    }

    /// A time no later than now without reading the clock: the latest
    /// reading ([`Shared::recent`]).
    fn recent(&self) -> Instant {
        Instant::from_nanos(self.recent.load(Ordering::Relaxed))
    }

    /// Request packets received so far (`rx_requests`, `rx_requests_locked`,
    /// `rx_requests_inbox`).
    fn requests_received(&self) -> u64 {
        self.rx_requests.load(Ordering::Relaxed)
            + self.rx_requests_locked.load(Ordering::Relaxed)
            + self.rx_requests_inbox.load(Ordering::Relaxed)
    }

    /// After a record left at once (a post's): with nothing queued to send
    /// (`core`, the engine lock held), no answer is pending either, and
    /// the next empty poll skips its flush.
    fn nothing_pending_if_idle(&self, core: &Core) {
        if !core.ep.wants_transmit() && core.gsi_out.is_empty() {
            set_flag(&self.tx_pending, false, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves the endpoint as it was at the
        // panic; keep serving rather than poisoning every later call.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `m`, with the time to go on with: `now` (read by the caller
    /// before) if the lock was free, else the time after the wait. What a
    /// thread queues is stamped with its time (completion timestamps), and
    /// a time from before a wait would be older than what the holder
    /// stamped meanwhile; reading the clock only on contention keeps the
    /// uncontended path at one clock read per poll.
    fn lock_fresh<'a, T>(&self, m: &'a Mutex<T>, now: u64) -> (MutexGuard<'a, T>, u64) {
        match m.try_lock() {
            Ok(g) => (g, now),
            Err(TryLockError::Poisoned(p)) => (p.into_inner(), now),
            Err(TryLockError::WouldBlock) => {
                let g = m.lock().unwrap_or_else(|p| p.into_inner());
                (g, self.now().as_nanos())
            }
        }
    }

    /// Whether this thread holds none of the locks the exit work takes.
    /// `exit(3)` may run in a signal handler (qperf's `SIGURG` handler
    /// exits) that interrupted this very thread inside the engine; waiting
    /// there for a lock it holds would never end. A lock seen free once is
    /// not this thread's, and this thread cannot take it meanwhile; others'
    /// holds are short, so a lock still taken after [`EXIT_LOCK_WAIT`] is
    /// taken as this thread's.
    fn exit_locks_free(&self) -> bool {
        let start = std::time::Instant::now();
        let mut free = [false; 3];
        loop {
            free[0] = free[0] || !matches!(self.core.try_lock(), Err(TryLockError::WouldBlock));
            free[1] = free[1] || !matches!(self.tx.try_lock(), Err(TryLockError::WouldBlock));
            free[2] = free[2] || !matches!(self.more.try_lock(), Err(TryLockError::WouldBlock));
            if free.iter().all(|f| *f) {
                return true;
            }
            if start.elapsed() >= EXIT_LOCK_WAIT {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
}

/// How long the exit hooks wait for another thread's hold of an engine lock
/// before taking it as their own thread's (see `Shared::exit_locks_free`).
/// Not a speed setting: holds last microseconds (one send batch); this
/// covers a holder descheduled on a loaded 2-vCPU machine.
const EXIT_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Joins the host device's group at each of the host's other addresses
/// (GID 1, 2, ...) with the member slot of `h`, the device socket being at
/// `primary` (see `addrs::join_at`). Returns the sockets and groups, and for
/// each whether its table must be reconciled (as `HostMember::join`).
#[allow(clippy::type_complexity)]
fn join_more(
    h: &crate::host::HostMember,
    primary: SocketAddr,
    primary_gro: bool,
) -> (
    Vec<(Arc<RoceSocket>, Arc<crate::host::HostMember>)>,
    Vec<bool>,
) {
    let (mut more, mut stale) = (Vec::new(), Vec::new());
    for ip in softrdma_udp::host_addrs() {
        if ip.to_canonical() == primary.ip().to_canonical() {
            continue;
        }
        let addr = SocketAddr::new(ip, primary.port());
        if let Some((s, m, st)) = addrs::join_at(h, addr, primary_gro) {
            more.push((Arc::new(s), Arc::new(m)));
            stale.push(st);
        }
    }
    (more, stale)
}

/// Binds a device socket.
fn open_socket(addr: &softrdma_udp::AddrConfig, sc: &SocketConfig) -> io::Result<RoceSocket> {
    RoceSocket::open(addr, sc).map_err(|e| io::Error::new(e_kind(&e), e.to_string()))
}

/// The socket options of a host-device member at `ip`: in the address's
/// reuseport group, with GRO only on loopback (and only if `gro` allows):
/// GRO on a NIC or veth merges datagrams of one flow for different members
/// into one, steered by its first segment (measured: softrdma_udp::steer);
/// loopback never merges.
fn member_config(ip: IpAddr, gro: bool) -> SocketConfig {
    SocketConfig::default()
        .with_reuseport(true)
        .with_gro(gro && ip.to_canonical().is_loopback())
}

/// The RC send window toward loopback peers: an eighth of the socket's
/// receive buffer (a peer on this host has the same) in 4 KiB packets, so a
/// whole window fits with room for the kernel's per-packet overhead; at least
/// rxe's 128, at most 1024 PSNs (4 MiB).
fn loopback_window(recv_buffer: usize) -> u32 {
    (recv_buffer / 8 / 4096).clamp(128, 1024) as u32
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

/// Sets `flag` to `value` (loads and stores with `order`), writing only if
/// it changes; returns what it was. The engine's flags are read on every
/// call by the other threads: a store that changes nothing would still take
/// their cache line from the cores that read it (a flag cleared on every
/// `poll_cq` cost `ib_send_bw -s 64` 5-8 %, issue 17).
fn set_flag(flag: &AtomicBool, value: bool, order: Ordering) -> bool {
    let was = flag.load(order);
    if was != value {
        flag.store(value, order);
    }
    was
}

#[cfg(test)]
mod exit_tests {
    use super::*;

    /// The exit hooks never wait for a lock their own thread holds (a
    /// signal handler calling `exit(3)` inside the engine), and find the
    /// locks free otherwise.
    #[test]
    fn exit_work_is_skipped_under_this_threads_engine_lock() {
        let e = Engine::start(EngineConfig::bound_to(SocketAddr::new(
            IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            0,
        )))
        .unwrap();
        assert!(e.exit_locks_free());
        let held = e.shared.lock();
        let t = std::time::Instant::now();
        assert!(!e.exit_locks_free());
        assert!(t.elapsed() >= EXIT_LOCK_WAIT);
        // What `exit(3)` runs returns instead of waiting for itself.
        e.at_exit();
        drop(held);
        assert!(e.exit_locks_free());
    }
}
