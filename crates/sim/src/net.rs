//! A seeded network between endpoints with a virtual clock.

use crate::memory::SimMemory;
use softrdma_transport::{Config, Datagram, Endpoint, Event, Instant, Rng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// What the network does to packets. Probabilities are in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// Drop a packet.
    pub loss: f64,
    /// Deliver a packet twice.
    pub duplicate: f64,
    /// Hold a packet back by up to `reorder_delay` so later ones overtake it.
    pub reorder: f64,
    /// Largest extra delay of a reordered packet.
    pub reorder_delay: Duration,
    /// Flip one random bit (the ICRC must catch it).
    pub bitflip: f64,
    /// One-way delay of every packet.
    pub latency: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(50),
            bitflip: 0.0,
            latency: Duration::from_micros(5),
        }
    }
}

/// A simulated host: an endpoint, its memory and its address.
#[derive(Debug)]
pub struct Node {
    /// The device.
    pub ep: Endpoint,
    /// Its host memory.
    pub mem: SimMemory,
    /// Its address (GID 0).
    pub addr: IpAddr,
    /// Events the endpoint raised, in order.
    pub events: Vec<Event>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Reverse<Instant>,
    seq: Reverse<u64>,
    to: usize,
    src: SocketAddr,
    data: Vec<u8>,
}

/// Counters of what the network did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Packets put on the wire.
    pub sent: u64,
    /// Packets dropped by `loss`.
    pub lost: u64,
    /// Extra copies made by `duplicate`.
    pub duplicated: u64,
    /// Packets delayed by `reorder`.
    pub reordered: u64,
    /// Packets corrupted by `bitflip`.
    pub corrupted: u64,
    /// Packets delivered.
    pub delivered: u64,
}

/// The simulated network.
#[derive(Debug)]
pub struct Net {
    /// The hosts.
    pub nodes: Vec<Node>,
    /// Virtual time.
    pub now: Instant,
    /// Fault model (may be changed between steps).
    pub faults: Faults,
    /// What happened.
    pub stats: NetStats,
    /// Every delivered packet: (time, from, to, bytes), if recording.
    pub trace: Option<Vec<(Instant, usize, usize, Vec<u8>)>>,
    rng: Rng,
    heap: BinaryHeap<InFlight>,
    seq: u64,
    buf: Vec<u8>,
}

impl Net {
    /// `n` hosts at 10.0.0.1.. with seeds derived from `seed`.
    pub fn new(n: usize, seed: u64) -> Net {
        let nodes = (0..n)
            .map(|i| {
                let addr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1));
                let cfg = Config::new(addr, seed.wrapping_mul(31).wrapping_add(i as u64));
                Node {
                    ep: Endpoint::new(cfg),
                    mem: SimMemory::default(),
                    addr,
                    events: Vec::new(),
                }
            })
            .collect();
        Net {
            nodes,
            now: Instant::from_micros(1),
            faults: Faults::default(),
            stats: NetStats::default(),
            trace: None,
            rng: Rng::new(seed ^ 0x5151_5151),
            heap: BinaryHeap::new(),
            seq: 0,
            buf: Vec::new(),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() as f64 / u64::MAX as f64) < p
    }

    fn node_of(&self, ip: IpAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.addr == ip)
    }

    /// Collects everything the nodes want to send and puts it on the wire.
    pub fn flush(&mut self) {
        for i in 0..self.nodes.len() {
            loop {
                let now = self.now;
                let node = &mut self.nodes[i];
                let Some(t) = node.ep.poll_transmit(now, &mut node.mem, &mut self.buf) else {
                    break;
                };
                let data = self.buf[..t.len].to_vec();
                let src = SocketAddr::new(t.src_ip, node.ep.config().local_port);
                self.send(t.dst.ip(), src, data);
            }
            let node = &mut self.nodes[i];
            while let Some(e) = node.ep.poll_event() {
                node.events.push(e);
            }
        }
    }

    fn send(&mut self, dst: IpAddr, src: SocketAddr, mut data: Vec<u8>) {
        self.stats.sent += 1;
        let Some(to) = self.node_of(dst) else { return };
        if self.chance(self.faults.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.chance(self.faults.bitflip) {
            self.stats.corrupted += 1;
            let bit = self.rng.below(data.len() as u64 * 8);
            data[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
        let copies = if self.chance(self.faults.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = self.now + self.faults.latency;
            if self.chance(self.faults.reorder) {
                self.stats.reordered += 1;
                let max = self.faults.reorder_delay.as_nanos() as u64;
                at = at + Duration::from_nanos(self.rng.below(max.max(1)));
            }
            self.seq += 1;
            self.heap.push(InFlight {
                at: Reverse(at),
                seq: Reverse(self.seq),
                to,
                src,
                data: data.clone(),
            });
        }
    }

    /// The next moment something happens: a delivery or a timer.
    pub fn next_time(&self) -> Option<Instant> {
        let pkt = self.heap.peek().map(|p| p.at.0);
        let timer = self.nodes.iter().filter_map(|n| n.ep.poll_timeout()).min();
        match (pkt, timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Advances to the next moment and processes it. False when nothing is pending.
    pub fn step(&mut self) -> bool {
        self.flush();
        let Some(t) = self.next_time() else {
            return false;
        };
        if t > self.now {
            self.now = t;
        }
        while self.heap.peek().is_some_and(|p| p.at.0 <= self.now) {
            let p = self.heap.pop().expect("peeked");
            self.stats.delivered += 1;
            let from = self.node_of(p.src.ip()).unwrap_or(usize::MAX);
            if let Some(tr) = &mut self.trace {
                tr.push((self.now, from, p.to, p.data.clone()));
            }
            let node = &mut self.nodes[p.to];
            let d = Datagram {
                src: p.src,
                dst_ip: node.addr,
                payload: &p.data,
            };
            node.ep.handle_datagram(self.now, &d, &mut node.mem);
        }
        for n in &mut self.nodes {
            if n.ep.poll_timeout().is_some_and(|t| t <= self.now) {
                n.ep.handle_timeout(self.now);
            }
        }
        self.flush();
        true
    }

    /// Steps until `done` holds or virtual time passes `limit`. Returns whether `done` held.
    pub fn run_until(&mut self, limit: Instant, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.now > limit || !self.step() {
                return done(self);
            }
        }
    }

    /// Steps until nothing is in flight and no timer is armed, or `limit`.
    pub fn run_idle(&mut self, limit: Instant) {
        while self.now <= limit && self.step() {}
    }
}
