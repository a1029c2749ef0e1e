//! Seeded network faults on the send path, for tests on machines without
//! netem: `SOFTRDMA_FAULTS="loss=0.1,dup=0.01,reorder=0.05,delay=20ms,seed=7"`.
//!
//! Every datagram the device sends (RoCE packets and CM MADs alike) is, with
//! the given probabilities, dropped, sent twice, or held back so that later
//! ones overtake it; with `delay`, every datagram leaves that much later. A
//! process applies faults to what it sends, so setting the variable in both
//! peers makes both directions faulty. Decisions come from a generator seeded
//! with `seed`: the same seed, the same sequence of decisions.
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `loss` | probability a datagram is dropped (`0.1` or `10%`) | 0 |
//! | `ackloss` | the same for RC ACKs/NAKs (opcode 0x11) only | `loss` |
//! | `dup` | probability it is sent twice | 0 |
//! | `reorder` | probability it is held back by up to `reorder_max` | 0 |
//! | `reorder_max` | largest extra hold of a reordered datagram | 2ms |
//! | `delay` | every datagram leaves this much later (`20ms`, `500us`, `1s`) | 0 |
//! | `seed` | generator seed | 1 |
//! | `report` | `1`: print what was done on stderr at exit | 0 |
//!
//! Held datagrams are sent by a thread of their own, through a duplicate of
//! the device's socket (same address and port, so the ICRC still matches).
//! When the process exits normally, whatever is still held is sent at once
//! (as a network delivers what is in flight after its sender is gone: a
//! ping-pong's last ACK must not die with the process). The packet capture
//! (`SOFTRDMA_PCAP`) records datagrams before the faults. Unset, the
//! variable costs one branch per batch.

use softrdma_transport::Rng;
use softrdma_udp::{RoceSocket, Transmit};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The environment variable.
pub(crate) const ENV: &str = "SOFTRDMA_FAULTS";

/// What to do to sent datagrams.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FaultConfig {
    pub(crate) loss: f64,
    /// Loss of RC ACK/NAK packets, if not `loss`.
    pub(crate) ack_loss: Option<f64>,
    pub(crate) dup: f64,
    pub(crate) reorder: f64,
    pub(crate) reorder_max: Duration,
    pub(crate) delay: Duration,
    pub(crate) seed: u64,
    pub(crate) report: bool,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            loss: 0.0,
            ack_loss: None,
            dup: 0.0,
            reorder: 0.0,
            reorder_max: Duration::from_millis(2),
            delay: Duration::ZERO,
            seed: 1,
            report: false,
        }
    }
}

impl FaultConfig {
    /// Parses `key=value,...` (see the module documentation).
    pub(crate) fn parse(s: &str) -> Result<FaultConfig, String> {
        let mut c = FaultConfig::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("{ENV}: {item:?} is not key=value"))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |what: &str| format!("{ENV}: {k}={v:?}: {what}");
            match k {
                "loss" | "ackloss" | "dup" | "reorder" => {
                    let p = match v.strip_suffix('%') {
                        Some(pct) => pct.parse::<f64>().map(|x| x / 100.0),
                        None => v.parse::<f64>(),
                    }
                    .map_err(|_| bad("expected a probability (0.1 or 10%)"))?;
                    if !(0.0..=1.0).contains(&p) {
                        return Err(bad("a probability is between 0 and 1"));
                    }
                    match k {
                        "loss" => c.loss = p,
                        "ackloss" => c.ack_loss = Some(p),
                        "dup" => c.dup = p,
                        _ => c.reorder = p,
                    }
                }
                "delay" | "reorder_max" => {
                    let d = parse_duration(v).ok_or_else(|| bad("expected 20ms, 500us or 1s"))?;
                    if d > Duration::from_secs(60) {
                        return Err(bad("at most 60s"));
                    }
                    if k == "delay" {
                        c.delay = d;
                    } else {
                        c.reorder_max = d;
                    }
                }
                "seed" => c.seed = v.parse().map_err(|_| bad("expected an integer"))?,
                "report" => c.report = matches!(v, "1" | "yes" | "on" | "true"),
                _ => {
                    return Err(format!(
                        "{ENV}: unknown key {k:?} (loss, ackloss, dup, reorder, reorder_max, delay, seed, report)"
                    ));
                }
            }
        }
        Ok(c)
    }

    fn is_noop(&self) -> bool {
        self.loss == 0.0
            && self.ack_loss.unwrap_or(0.0) == 0.0
            && self.dup == 0.0
            && self.reorder == 0.0
            && self.delay.is_zero()
    }
}

fn parse_duration(v: &str) -> Option<Duration> {
    let (num, unit) = match v.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => v.split_at(i),
        None => (v, "ms"),
    };
    let x: f64 = num.trim().parse().ok()?;
    if !(x >= 0.0 && x.is_finite()) {
        return None;
    }
    let ns = match unit {
        "ns" => x,
        "us" => x * 1e3,
        "ms" => x * 1e6,
        "s" => x * 1e9,
        _ => return None,
    };
    Some(Duration::from_nanos(ns as u64))
}

/// A datagram held back.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    due: Instant,
    seq: u64,
    dst: SocketAddr,
    data: Vec<u8>,
}

#[derive(Debug)]
struct State {
    rng: Rng,
    seq: u64,
    heap: BinaryHeap<Reverse<Held>>,
    shutdown: bool,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    wake: Condvar,
    /// A second descriptor of the device's socket: same address and port.
    sock: UdpSocket,
}

/// Every injector of the process, for the flush at exit.
static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

/// Counters of every injector in the process (for `report=1`).
static SEEN: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static DUPLICATED: AtomicU64 = AtomicU64::new(0);
static REORDERED: AtomicU64 = AtomicU64::new(0);
static HELD: AtomicU64 = AtomicU64::new(0);

/// The fault injector of one device.
#[derive(Debug)]
pub(crate) struct FaultInjector {
    cfg: FaultConfig,
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

impl FaultInjector {
    /// An injector for `socket` if `SOFTRDMA_FAULTS` asks for one.
    pub(crate) fn from_env(socket: &RoceSocket) -> io::Result<Option<FaultInjector>> {
        let Some(v) = std::env::var(ENV).ok().filter(|v| !v.trim().is_empty()) else {
            return Ok(None);
        };
        let cfg =
            FaultConfig::parse(&v).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        if cfg.is_noop() {
            return Ok(None);
        }
        FaultInjector::start(cfg, socket).map(Some)
    }

    fn start(cfg: FaultConfig, socket: &RoceSocket) -> io::Result<FaultInjector> {
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                rng: Rng::new(cfg.seed),
                seq: 0,
                heap: BinaryHeap::new(),
                shutdown: false,
            }),
            wake: Condvar::new(),
            sock: UdpSocket::from(socket.as_fd().try_clone_to_owned()?),
        });
        let i2 = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("softrdma-faults".into())
            .spawn(move || sender(&i2))?;
        {
            let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&inner));
        }
        if cfg.report {
            REPORT.store(true, Ordering::Relaxed);
        }
        static AT_EXIT: Once = Once::new();
        // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds (it
        // only sends datagrams and writes to stderr); registering it has no
        // other effect.
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(at_exit);
        });
        Ok(FaultInjector {
            cfg,
            inner,
            thread: Some(thread),
        })
    }

    /// Applies the faults to a batch about to be sent: returns what to send
    /// now; what is held back is copied and sent later by the thread.
    pub(crate) fn apply<'a>(&self, batch: Vec<Transmit<'a>>) -> Vec<Transmit<'a>> {
        let c = &self.cfg;
        let mut now_out = Vec::with_capacity(batch.len() + 1);
        let mut st = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let start = Instant::now();
        let mut held = false;
        SEEN.fetch_add(batch.len() as u64, Ordering::Relaxed);
        for t in batch {
            // BTH opcode 0x11: RC ACKNOWLEDGE.
            let loss = match c.ack_loss {
                Some(p) if t.payload.first() == Some(&0x11) => p,
                _ => c.loss,
            };
            if chance(&mut st.rng, loss) {
                DROPPED.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let copies = if chance(&mut st.rng, c.dup) {
                DUPLICATED.fetch_add(1, Ordering::Relaxed);
                2
            } else {
                1
            };
            for _ in 0..copies {
                let mut hold = c.delay;
                if chance(&mut st.rng, c.reorder) {
                    REORDERED.fetch_add(1, Ordering::Relaxed);
                    let max = c.reorder_max.as_nanos().max(1) as u64;
                    hold += Duration::from_nanos(1 + st.rng.below(max));
                }
                if hold.is_zero() {
                    now_out.push(t);
                } else {
                    HELD.fetch_add(1, Ordering::Relaxed);
                    st.seq += 1;
                    let seq = st.seq;
                    st.heap.push(Reverse(Held {
                        due: start + hold,
                        seq,
                        dst: t.dst,
                        data: t.payload.to_vec(),
                    }));
                    held = true;
                }
            }
        }
        drop(st);
        if held {
            self.inner.wake.notify_one();
        }
        now_out
    }
}

impl Drop for FaultInjector {
    fn drop(&mut self) {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .shutdown = true;
        self.inner.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn chance(rng: &mut Rng, p: f64) -> bool {
    p > 0.0 && (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p
}

/// Sends held datagrams when they are due (in due order, ties in the order
/// they were held).
fn sender(inner: &Inner) {
    let sock = &inner.sock;
    let mut due = Vec::new();
    let mut st = inner.state.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if st.shutdown {
            return;
        }
        let now = Instant::now();
        while st.heap.peek().is_some_and(|h| h.0.due <= now) {
            due.push(st.heap.pop().expect("peeked").0);
        }
        if !due.is_empty() {
            drop(st);
            for h in due.drain(..) {
                // A full socket buffer drops the datagram, as a network would.
                let _ = sock.send_to(&h.data, h.dst);
            }
            st = inner.state.lock().unwrap_or_else(|p| p.into_inner());
            continue;
        }
        let wait = st
            .heap
            .peek()
            .map_or(Duration::from_secs(3600), |h| h.0.due - now);
        st = inner
            .wake
            .wait_timeout(st, wait)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// Whether some injector was asked for `report=1`.
static REPORT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// At exit: sends what is still held, at once and in order, then reports.
extern "C" fn at_exit() {
    let live: Vec<Arc<Inner>> = match LIVE.try_lock() {
        Ok(l) => l.iter().filter_map(Weak::upgrade).collect(),
        Err(_) => Vec::new(),
    };
    for inner in live {
        // Another thread may hold the lock forever (exit does not stop it):
        // then that injector's datagrams are lost, as after a crash.
        if let Ok(mut st) = inner.state.try_lock() {
            while let Some(Reverse(h)) = st.heap.pop() {
                let _ = inner.sock.send_to(&h.data, h.dst);
            }
        }
    }
    if !REPORT.load(Ordering::Relaxed) {
        return;
    }
    use std::io::Write;
    let _ = writeln!(
        io::stderr(),
        "softrdma faults: {} datagrams, {} dropped, {} duplicated, {} reordered, {} held",
        SEEN.load(Ordering::Relaxed),
        DROPPED.load(Ordering::Relaxed),
        DUPLICATED.load(Ordering::Relaxed),
        REORDERED.load(Ordering::Relaxed),
        HELD.load(Ordering::Relaxed)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        let c =
            FaultConfig::parse("loss=0.1,dup=1%, reorder=0.05,delay=20ms,seed=7,report=1").unwrap();
        assert_eq!(c.loss, 0.1);
        assert_eq!(c.dup, 0.01);
        assert_eq!(c.reorder, 0.05);
        assert_eq!(c.delay, Duration::from_millis(20));
        assert_eq!(c.seed, 7);
        assert!(c.report);
        let c = FaultConfig::parse("loss=10%,ackloss=0").unwrap();
        assert_eq!((c.loss, c.ack_loss), (0.1, Some(0.0)));
        let c = FaultConfig::parse("delay=500us,reorder_max=1.5ms").unwrap();
        assert_eq!(c.delay, Duration::from_micros(500));
        assert_eq!(c.reorder_max, Duration::from_micros(1500));
        assert_eq!(
            FaultConfig::parse("delay=2").unwrap().delay,
            Duration::from_millis(2)
        );
        assert!(FaultConfig::parse("").unwrap().is_noop());
        for bad in [
            "loss=2",
            "loss=x",
            "dup",
            "delay=3h",
            "delay=-1ms",
            "jitter=1ms",
            "seed=a",
        ] {
            assert!(FaultConfig::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_seed_decides() {
        let draw = |seed| {
            let mut r = Rng::new(seed);
            (0..1000).map(|_| chance(&mut r, 0.3)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let hits = draw(7).iter().filter(|b| **b).count();
        assert!((240..360).contains(&hits), "{hits} of 1000 at p = 0.3");
    }
}
