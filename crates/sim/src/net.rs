//! A seeded network between endpoints with a virtual clock.
//!
//! Packets leave a node when the net drains its `poll_transmit` ([`Net::flush`]),
//! travel for `latency` (plus a random extra delay when reordered) and are
//! handed to the destination's `handle_datagram` by [`Net::advance`]. Faults
//! come from a seeded generator, so a run is a pure function of the seed;
//! [`DropRule`]s remove chosen packets for trace tests.

use crate::memory::SimMemory;
use crate::trace::{Fate, TraceEntry};
use softrdma_transport::{Config, Datagram, Endpoint, Event, Instant, Rng, Transmit};
use softrdma_wire::{Headers, Opcode, Packet, ip};
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

impl Faults {
    /// Loss `loss` plus the usual mix of the other faults scaled to it:
    /// duplication and reordering at half the loss rate, bit flips at a fifth.
    pub fn mixed(loss: f64) -> Faults {
        Faults {
            loss,
            duplicate: loss / 2.0,
            reorder: loss / 2.0,
            reorder_delay: Duration::from_micros(200),
            bitflip: loss / 5.0,
            latency: Duration::from_micros(5),
        }
    }
}

/// Drops packets that match, `count` times (then the rule is spent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropRule {
    /// Sending node, or any.
    pub from: Option<usize>,
    /// Opcode, or any.
    pub opcode: Option<Opcode>,
    /// PSN, or any.
    pub psn: Option<u32>,
    /// How many matching packets to drop (`u32::MAX`: all of them).
    pub count: u32,
}

impl DropRule {
    /// Drops the next packet from `from` with this PSN.
    pub fn psn(from: usize, psn: u32) -> DropRule {
        DropRule {
            from: Some(from),
            opcode: None,
            psn: Some(psn),
            count: 1,
        }
    }
    /// Drops the next packet from `from` with this opcode.
    pub fn opcode(from: usize, opcode: Opcode) -> DropRule {
        DropRule {
            from: Some(from),
            opcode: Some(opcode),
            psn: None,
            count: 1,
        }
    }
    /// Drops everything `from` sends (a dead link).
    pub fn all_from(from: usize) -> DropRule {
        DropRule {
            from: Some(from),
            opcode: None,
            psn: None,
            count: u32::MAX,
        }
    }
    /// The same rule applied `count` times.
    pub fn times(self, count: u32) -> DropRule {
        DropRule { count, ..self }
    }

    fn matches(&self, from: usize, pkt: Option<&Packet<'_>>) -> bool {
        if self.count == 0 || self.from.is_some_and(|f| f != from) {
            return false;
        }
        if self.opcode.is_none() && self.psn.is_none() {
            return true;
        }
        let Some(p) = pkt else { return false };
        self.opcode.is_none_or(|o| o == p.hdr.bth.opcode)
            && self.psn.is_none_or(|n| n == p.hdr.bth.psn.get())
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
    /// Packets dropped by a [`DropRule`].
    pub dropped: u64,
    /// Extra copies made by `duplicate`.
    pub duplicated: u64,
    /// Packets delayed by `reorder`.
    pub reordered: u64,
    /// Packets corrupted by `bitflip`.
    pub corrupted: u64,
    /// Packets delivered.
    pub delivered: u64,
    /// A digest (FNV-1a) of every packet put on the wire, in order, with
    /// its time and ends: two runs that sent the same bytes at the same
    /// times have the same digest.
    pub digest: u64,
    /// [`NetStats::digest`] without the times: two runs that sent the same
    /// bytes in the same order, whenever, have the same content digest.
    pub content: u64,
}

/// Folds `bytes` into an FNV-1a digest.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01B3);
    }
    h
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
    /// Packets to remove deterministically (trace tests).
    pub drops: Vec<DropRule>,
    /// Random loss only for packets this node sends (a one-way lossy
    /// link); `None`: every node's.
    pub loss_only_from: Option<usize>,
    /// What happened.
    pub stats: NetStats,
    /// Every packet put on the wire, if recording (see [`crate::trace`]).
    pub trace: Option<Vec<TraceEntry>>,
    /// Names printed instead of raw R_Keys in traces.
    pub key_names: Vec<(u32, String)>,
    rng: Rng,
    heap: BinaryHeap<InFlight>,
    seq: u64,
    buf: Vec<u8>,
}

impl Net {
    /// `n` hosts at 10.0.0.1.. with seeds derived from `seed`; time starts at 0.
    pub fn new(n: usize, seed: u64) -> Net {
        Net::new_with(n, seed, |_| {})
    }

    /// [`Net::new`], each endpoint's configuration changed by `tweak`.
    pub fn new_with(n: usize, seed: u64, tweak: impl Fn(&mut Config)) -> Net {
        let nodes = (0..n)
            .map(|i| {
                let addr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1));
                let mut cfg = Config::new(addr, seed.wrapping_mul(31).wrapping_add(i as u64));
                // The simulator flips bits on purpose and sends IPv4 ID 0: keep
                // the full 32-bit ICRC check (no search for rxe's IPv4 ID).
                cfg.icrc_any_ipv4_id = false;
                tweak(&mut cfg);
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
            now: Instant::ZERO,
            faults: Faults::default(),
            drops: Vec::new(),
            loss_only_from: None,
            stats: NetStats::default(),
            trace: None,
            key_names: Vec::new(),
            rng: Rng::new(seed ^ 0x5151_5151),
            heap: BinaryHeap::new(),
            seq: 0,
            buf: Vec::new(),
        }
    }

    /// Starts recording a trace (dropping what was recorded so far).
    pub fn record(&mut self) {
        self.trace = Some(Vec::new());
    }

    /// Takes the recorded trace, leaving an empty one recording.
    pub fn take_trace(&mut self) -> Vec<TraceEntry> {
        self.trace.replace(Vec::new()).unwrap_or_default()
    }

    /// The recorded trace since the last take, one line per packet
    /// (see [`crate::trace::line`]), leaving an empty one recording.
    pub fn lines(&mut self) -> Vec<String> {
        let t = self.take_trace();
        t.iter()
            .map(|e| crate::trace::line(e, &self.key_names))
            .collect()
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() as f64 / u64::MAX as f64) < p
    }

    fn node_of(&self, ip: IpAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.addr == ip)
    }

    /// Puts at most one packet from node `i` on the wire; false if it had none.
    pub fn transmit_one(&mut self, i: usize) -> bool {
        let now = self.now;
        let node = &mut self.nodes[i];
        let Some(t) = node.ep.poll_transmit(now, &mut node.mem, &mut self.buf) else {
            return false;
        };
        let data = self.buf[..t.len].to_vec();
        let src = SocketAddr::new(t.src_ip, node.ep.config().local_port);
        self.send(i, t.dst.ip(), src, data);
        true
    }

    /// Puts a direct record node `i` started at a post
    /// (`Endpoint::post_send_direct`) on the network, as a same-host lane
    /// would carry it: lost, duplicated, reordered or delayed like a packet
    /// (the faults stand for a full lane, a link not attached, or a record
    /// pushed while an older packet waited in the sender's batch), never
    /// corrupted (a lane does not flip bits, and a record has no ICRC).
    pub fn send_direct(&mut self, i: usize, t: &Transmit, record: &[u8]) {
        let src = SocketAddr::new(t.src_ip, self.nodes[i].ep.config().local_port);
        self.send(i, t.dst.ip(), src, record.to_vec());
    }

    /// Puts a hand-made packet from node `from` to node `to` on the wire, with
    /// a correct ICRC (for requests no conforming requester would send).
    pub fn inject(&mut self, from: usize, to: usize, hdr: &Headers, payload: &[u8]) {
        let (src, dst) = (self.nodes[from].addr, self.nodes[to].addr);
        let mut data = Vec::new();
        softrdma_wire::emit(hdr, payload, &mut data).expect("a known opcode");
        let (IpAddr::V4(s4), IpAddr::V4(d4)) = (src, dst) else {
            unreachable!("the simulated nodes have IPv4 addresses")
        };
        let f = ip::Ipv4Fields {
            src: s4,
            dst: d4,
            id: 0,
            tos: 0,
            ttl: 0,
            df: true,
        };
        let iph = ip::ipv4_header(&f, ip::UDP_HDR_LEN + data.len());
        let port = self.nodes[from].ep.config().local_port;
        let udp = ip::udp_header(port, self.nodes[to].ep.config().dest_port, data.len());
        softrdma_wire::icrc::fill(&iph, &udp, &mut data).expect("long enough");
        self.send(from, dst, SocketAddr::new(src, port), data);
    }

    /// Collects node `i`'s events into [`Node::events`].
    pub fn collect_events(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        while let Some(e) = node.ep.poll_event() {
            node.events.push(e);
        }
    }

    /// Collects everything the nodes want to send and puts it on the wire.
    pub fn flush(&mut self) {
        for i in 0..self.nodes.len() {
            while self.transmit_one(i) {}
            self.collect_events(i);
        }
    }

    fn send(&mut self, from: usize, dst: IpAddr, src: SocketAddr, mut data: Vec<u8>) {
        self.stats.sent += 1;
        let to = self.node_of(dst);
        // FNV's offset basis starts the digests of a new network.
        let start = |h: u64| if h == 0 { 0xCBF2_9CE4_8422_2325 } else { h };
        let ends = [from as u8, to.map_or(0xFF, |t| t as u8)];
        let h = fnv(start(self.stats.digest), &self.now.as_nanos().to_le_bytes());
        self.stats.digest = fnv(fnv(h, &ends), &data);
        self.stats.content = fnv(fnv(start(self.stats.content), &ends), &data);
        let mut fate = Fate::Sent;
        let parsed = Packet::parse(&data).ok();
        if let Some(r) = self
            .drops
            .iter_mut()
            .find(|r| r.matches(from, parsed.as_ref()))
        {
            r.count = r.count.saturating_sub(1);
            fate = Fate::Dropped;
        }
        self.drops.retain(|r| r.count > 0);
        if fate == Fate::Sent
            && self.loss_only_from.is_none_or(|n| n == from)
            && self.chance(self.faults.loss)
        {
            fate = Fate::Lost;
        }
        let original = self.trace.is_some().then(|| data.clone());
        let mut delays = Vec::new();
        match fate {
            Fate::Dropped => self.stats.dropped += 1,
            Fate::Lost => self.stats.lost += 1,
            _ => {
                if !softrdma_wire::direct::is_direct(&data) && self.chance(self.faults.bitflip) {
                    self.stats.corrupted += 1;
                    fate = Fate::Corrupted;
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
                    let mut extra = Duration::ZERO;
                    if self.chance(self.faults.reorder) {
                        self.stats.reordered += 1;
                        let max = self.faults.reorder_delay.as_nanos() as u64;
                        extra = Duration::from_nanos(self.rng.below(max.max(1)));
                    }
                    delays.push(extra);
                }
            }
        }
        if let Some(tr) = &mut self.trace {
            tr.push(TraceEntry {
                at: self.now,
                from,
                to: to.unwrap_or(usize::MAX),
                data: original.expect("recording"),
                fate,
                delays: delays.clone(),
            });
        }
        let Some(to) = to else { return };
        for extra in delays {
            self.seq += 1;
            self.heap.push(InFlight {
                at: Reverse(self.now + self.faults.latency + extra),
                seq: Reverse(self.seq),
                to,
                src,
                data: data.clone(),
            });
        }
    }

    /// Packets on the wire not yet delivered.
    pub fn in_flight(&self) -> usize {
        self.heap.len()
    }

    /// The next moment something happens: a delivery or a timer.
    pub fn next_time(&mut self) -> Option<Instant> {
        let pkt = self.heap.peek().map(|p| p.at.0);
        let timer = self
            .nodes
            .iter_mut()
            .filter_map(|n| n.ep.poll_timeout())
            .min();
        match (pkt, timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Moves the clock to the next event, delivers every packet due and fires
    /// every timer due, without transmitting anything. False when nothing is pending.
    pub fn advance(&mut self) -> bool {
        let Some(t) = self.next_time() else {
            return false;
        };
        if t > self.now {
            self.now = t;
        }
        while self.heap.peek().is_some_and(|p| p.at.0 <= self.now) {
            let p = self.heap.pop().expect("peeked");
            self.stats.delivered += 1;
            let node = &mut self.nodes[p.to];
            let d = Datagram {
                src: p.src,
                dst_ip: node.addr,
                payload: &p.data,
            };
            if softrdma_wire::direct::is_direct(&p.data) {
                node.ep.handle_direct(self.now, &d, &mut node.mem);
            } else if node.ep.config().lane_acks {
                // As off a same-host lane, the only place packets carry
                // ACKs (`LaneAck`): no ICRC checked.
                node.ep
                    .handle_datagram_unchecked_icrc(self.now, &d, &mut node.mem);
            } else {
                node.ep.handle_datagram(self.now, &d, &mut node.mem);
            }
        }
        for n in &mut self.nodes {
            if n.ep.poll_timeout().is_some_and(|t| t <= self.now) {
                n.ep.handle_timeout(self.now);
            }
        }
        true
    }

    /// Transmits, advances to the next moment and processes it, transmits
    /// again. False when nothing is pending.
    pub fn step(&mut self) -> bool {
        self.flush();
        let more = self.advance();
        self.flush();
        more
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

    /// Steps while the next event is no later than `t`, then sets the clock to `t`.
    pub fn run_to(&mut self, t: Instant) {
        self.flush();
        while self.next_time().is_some_and(|n| n <= t) {
            self.advance();
            self.flush();
        }
        if t > self.now {
            self.now = t;
        }
    }
}
