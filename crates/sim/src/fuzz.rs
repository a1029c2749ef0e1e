//! The transport under hostile input: a harness for fuzzing.
//!
//! [`run`] reads its input as a little program and executes it against two
//! live endpoints, A (node 0) and B (node 1), each with connected RC and UC
//! QPs and a UD QP towards the other, and several memory regions with
//! different rights and protection domains. The program's steps forge packets
//! (any opcode, QPN, PSN near the expected one or anywhere, R_Keys live,
//! stale or invented, addresses and lengths at and across region edges,
//! spoofed sources, broken ICRCs, raw bytes), post work requests, deliver,
//! drop, duplicate and reorder what is on the wire, move the clock,
//! deregister and re-register regions and move QPs to ERR.
//!
//! What must hold, whatever the input (a violation panics, which is what a
//! fuzzer or the smoke test in `tests/fuzz_smoke.rs` reports):
//!
//! - nothing in the transport panics;
//! - every memory access lies inside a region registered at that moment:
//!   reads inside any region, writes inside one with LOCAL_WRITE, remote
//!   atomics inside one with REMOTE_ATOMIC ([`GuardedMemory`] checks each
//!   call);
//! - no byte outside such regions ever changes: every allocation has guard
//!   zones around the region, one allocation is never registered, and
//!   regions without LOCAL_WRITE stay as they were (compared at the end).
//!
//! The run is a pure function of the input and is bounded (steps, packets on
//! the wire, virtual time), so a fuzzer's crash input replays exactly.

use crate::memory::SimMemory;
use softrdma_transport::{
    Access, AddressVector, AtomicOp, Config, CqHandle, Datagram, Endpoint, Instant, Memory, Mtu,
    PdHandle, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState, QpType, Qpn, RecvWr, SendFlags,
    SendWr, Sge, Stats, UdDest, WrOpcode,
};
use softrdma_wire::{Aeth, AtomicEth, Bth, Deth, Headers, Opcode, Psn, Reth, Syndrome, ip};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Bytes of guard zone before and after every region.
const GUARD: usize = 64;
/// Steps a program may have (the rest of the input is ignored).
const MAX_STEPS: usize = 400;
/// Packets the wire holds; more are dropped.
const MAX_WIRE: usize = 4096;
/// Virtual time the final drain may take.
const DRAIN: Duration = Duration::from_secs(30);
/// Q_Key of the UD QPs.
const QKEY: u32 = 0x1111_1111;
const PSN_A: u32 = 0x00FF_FFF0;
const PSN_B: u32 = 0x0000_0100;

/// Memory whose every access is checked against what is registered.
///
/// Allocations sit at distinct synthetic addresses with `GUARD` (64) bytes
/// around the part a region covers.
#[derive(Debug, Default)]
pub struct GuardedMemory {
    mem: SimMemory,
    /// (host address, length, rights) of every registered region.
    regions: Vec<(u64, u64, Access)>,
    /// (allocation start, whole length) including guards.
    allocs: Vec<(u64, usize)>,
}

impl GuardedMemory {
    /// Allocates `len` usable bytes between guard zones, filled with a
    /// pattern; returns the usable part's host address.
    pub fn alloc(&mut self, len: usize, salt: u8) -> u64 {
        let total = len + 2 * GUARD;
        let base = self.mem.alloc(total);
        let fill: Vec<u8> = (0..total)
            .map(|i| (i as u8).wrapping_mul(29).wrapping_add(salt) | 1)
            .collect();
        self.mem.fill(base, &fill);
        self.allocs.push((base, total));
        base + GUARD as u64
    }

    /// Records a registration of `[host, host + len)` with `access`.
    pub fn add_region(&mut self, host: u64, len: u64, access: Access) {
        self.regions.push((host, len, access));
    }

    /// Forgets one registration of exactly this range and rights.
    pub fn remove_region(&mut self, host: u64, len: u64, access: Access) {
        if let Some(i) = self.regions.iter().position(|r| *r == (host, len, access)) {
            self.regions.swap_remove(i);
        }
    }

    fn allowed(&self, addr: u64, len: usize, need: Access) -> bool {
        let Some(end) = addr.checked_add(len as u64) else {
            return false;
        };
        self.regions
            .iter()
            .any(|&(h, l, a)| a.contains(need) && addr >= h && end <= h + l)
    }

    /// Every allocation's bytes, guards included.
    pub fn snapshot(&self) -> Vec<Vec<u8>> {
        self.allocs
            .iter()
            .map(|&(b, l)| self.mem.bytes(b, l).to_vec())
            .collect()
    }
}

impl Memory for GuardedMemory {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        assert!(
            self.allowed(addr, dst.len(), Access::EMPTY),
            "read of {} bytes at {addr:#x}: not inside a registered region",
            dst.len()
        );
        self.mem.read(addr, dst);
    }
    fn write(&mut self, addr: u64, src: &[u8]) {
        assert!(
            self.allowed(addr, src.len(), Access::LOCAL_WRITE),
            "write of {} bytes at {addr:#x}: not inside a region with LOCAL_WRITE",
            src.len()
        );
        self.mem.write(addr, src);
    }
    fn atomic(&mut self, addr: u64, op: AtomicOp) -> u64 {
        assert!(
            addr.is_multiple_of(8) && self.allowed(addr, 8, Access::REMOTE_ATOMIC),
            "atomic at {addr:#x}: not an aligned word of a region with REMOTE_ATOMIC"
        );
        self.mem.atomic(addr, op)
    }
}

/// A region a node registers (and may deregister and register again).
#[derive(Debug, Clone, Copy)]
struct Region {
    host: u64,
    len: u64,
    access: Access,
    pd: usize,
    /// Current key, if registered.
    key: Option<u32>,
}

#[derive(Debug)]
struct Node {
    ep: Endpoint,
    mem: GuardedMemory,
    addr: IpAddr,
    pds: [PdHandle; 2],
    cq: CqHandle,
    /// RC, UC, UD.
    qps: [Qpn; 3],
    regions: Vec<Region>,
    /// Every key this node ever issued (live or stale).
    keys: Vec<u32>,
    /// Allocation indices whose bytes may never change, and their contents.
    frozen: Vec<(usize, Vec<u8>)>,
}

/// What a run did (for the smoke test's coverage summary).
#[derive(Debug, Clone, Copy, Default)]
pub struct Outcome {
    /// Steps executed.
    pub steps: usize,
    /// Packets delivered.
    pub delivered: u64,
    /// Completions polled.
    pub completions: u64,
    /// Each node's counters at the end.
    pub stats: [Stats; 2],
}

/// Reads the program: bytes, with zeros once it runs out.
#[derive(Debug)]
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[usize::from(self.u8()) % from.len()]
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
}

struct World {
    nodes: [Node; 2],
    wire: VecDeque<(usize, SocketAddr, Vec<u8>)>,
    now: Instant,
    buf: Vec<u8>,
    out: Outcome,
}

/// Runs the program `input` (see the module documentation). Panics when an
/// invariant breaks.
pub fn run(input: &[u8]) -> Outcome {
    let mut w = World::new();
    let mut inp = Input {
        data: input,
        pos: 0,
    };
    while !inp.done() && w.out.steps < MAX_STEPS {
        w.out.steps += 1;
        w.step(&mut inp);
    }
    w.drain();
    w.check_frozen();
    w.out.stats = [w.nodes[0].ep.stats(), w.nodes[1].ep.stats()];
    w.out
}

impl World {
    fn new() -> World {
        let addrs = [
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        ];
        let mut nodes = [0, 1].map(|i| {
            let mut cfg = Config::new(addrs[i], 0xF0 + i as u64);
            cfg.icrc_any_ipv4_id = false;
            let mut ep = Endpoint::new(cfg);
            let pds = [ep.alloc_pd().unwrap(), ep.alloc_pd().unwrap()];
            let (cq, _) = ep.create_cq(1 << 16).unwrap();
            let mut qps = [0; 3];
            for (q, t) in qps.iter_mut().zip([QpType::Rc, QpType::Uc, QpType::Ud]) {
                *q = ep
                    .create_qp(&QpInitAttr {
                        qp_type: t,
                        pd: pds[0],
                        send_cq: cq,
                        recv_cq: cq,
                        srq: None,
                        cap: QpCap {
                            max_send_wr: 64,
                            max_recv_wr: 64,
                            max_send_sge: 4,
                            max_recv_sge: 4,
                            max_inline_data: 256,
                        },
                        sq_sig_all: true,
                    })
                    .unwrap()
                    .0;
            }
            let all = Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC;
            let mut mem = GuardedMemory::default();
            let mut regions = Vec::new();
            let mut frozen = Vec::new();
            // (length, rights, PD): everything; READ only (no LOCAL_WRITE:
            // frozen); local only; everything in the other PD.
            for (k, (len, access, pd)) in [
                (8192, all, 0),
                (4096, Access::REMOTE_READ, 0),
                (4096, Access::LOCAL_WRITE, 0),
                (4096, all, 1),
            ]
            .into_iter()
            .enumerate()
            {
                let host = mem.alloc(len as usize, 0x40 + k as u8 + 16 * i as u8);
                regions.push(Region {
                    host,
                    len,
                    access,
                    pd,
                    key: None,
                });
                if !access.contains(Access::LOCAL_WRITE) {
                    frozen.push((k, Vec::new()));
                }
            }
            // One allocation nobody registers.
            mem.alloc(1024, 0x77);
            frozen.push((regions.len(), Vec::new()));
            let mut n = Node {
                ep,
                mem,
                addr: addrs[i],
                pds,
                cq,
                qps,
                regions,
                keys: Vec::new(),
                frozen,
            };
            for r in 0..n.regions.len() {
                n.register(r);
            }
            n
        });
        // Guards of every allocation are frozen too: remember all bytes now.
        for n in &mut nodes {
            let snap = n.mem.snapshot();
            for (i, b) in n.frozen.iter_mut() {
                *b = snap[*i].clone();
            }
        }
        let mut w = World {
            nodes,
            wire: VecDeque::new(),
            now: Instant::ZERO,
            buf: Vec::new(),
            out: Outcome::default(),
        };
        for i in 0..2 {
            w.bring_up(i);
        }
        w
    }

    fn bring_up(&mut self, i: usize) {
        let peer_addr = self.nodes[1 - i].addr;
        let peer_qps = self.nodes[1 - i].qps;
        let (sq, rq) = if i == 0 {
            (PSN_A, PSN_B)
        } else {
            (PSN_B, PSN_A)
        };
        let now = self.now;
        let n = &mut self.nodes[i];
        for (k, t) in [QpType::Rc, QpType::Uc, QpType::Ud].into_iter().enumerate() {
            let qpn = n.qps[k];
            let mut a = QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                qp_access_flags: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
                qkey: QKEY,
                ..QpAttr::default()
            };
            let init = if t == QpType::Ud {
                M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY
            } else if t == QpType::Uc {
                a.qp_access_flags = Access::REMOTE_WRITE;
                M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
            } else {
                M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
            };
            n.ep.modify_qp(now, qpn, &a, init).unwrap();
            a.qp_state = QpState::Rtr;
            a.path_mtu = Mtu::M1024;
            a.dest_qp_num = peer_qps[k];
            a.rq_psn = rq;
            a.max_dest_rd_atomic = 4;
            a.min_rnr_timer = 1;
            a.ah_attr = AddressVector::to_ip(peer_addr);
            let rtr = match t {
                QpType::Rc | QpType::XrcSend | QpType::XrcRecv => {
                    M::STATE
                        | M::AV
                        | M::PATH_MTU
                        | M::DEST_QPN
                        | M::RQ_PSN
                        | M::MAX_DEST_RD_ATOMIC
                        | M::MIN_RNR_TIMER
                }
                QpType::Uc => M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
                QpType::Ud => M::STATE,
            };
            n.ep.modify_qp(now, qpn, &a, rtr).unwrap();
            a.qp_state = QpState::Rts;
            a.sq_psn = sq;
            a.timeout = 8;
            a.retry_cnt = 3;
            a.rnr_retry = 3;
            a.max_rd_atomic = 4;
            let rts = match t {
                QpType::Rc | QpType::XrcSend | QpType::XrcRecv => {
                    M::STATE
                        | M::TIMEOUT
                        | M::RETRY_CNT
                        | M::RNR_RETRY
                        | M::SQ_PSN
                        | M::MAX_QP_RD_ATOMIC
                }
                _ => M::STATE | M::SQ_PSN,
            };
            n.ep.modify_qp(now, qpn, &a, rts).unwrap();
        }
    }

    fn step(&mut self, inp: &mut Input<'_>) {
        match inp.u8() % 12 {
            0..=2 => self.forge(inp),
            3 => self.raw(inp),
            4 | 5 => self.post_send(inp),
            6 => self.post_recv(inp),
            7 | 8 => self.deliver(inp),
            9 => self.advance(inp),
            10 => self.churn_region(inp),
            _ => self.misc(inp),
        }
        self.flush();
    }

    // ---- the wire

    /// Collects what both endpoints transmit; drains their events.
    fn flush(&mut self) {
        for i in 0..2 {
            let now = self.now;
            let peer = self.nodes[1 - i].addr;
            let n = &mut self.nodes[i];
            let port = n.ep.config().local_port;
            while let Some(t) = n.ep.poll_transmit(now, &mut n.mem, &mut self.buf) {
                if self.wire.len() < MAX_WIRE && t.dst.ip() == peer {
                    let src = SocketAddr::new(t.src_ip, port);
                    self.wire
                        .push_back((1 - i, src, self.buf[..t.len].to_vec()));
                }
            }
            while n.ep.poll_event().is_some() {}
        }
    }

    fn deliver_at(&mut self, k: usize) {
        let Some((to, src, data)) = self.wire.remove(k) else {
            return;
        };
        self.out.delivered += 1;
        let now = self.now;
        let n = &mut self.nodes[to];
        let d = Datagram {
            src,
            dst_ip: n.addr,
            payload: &data,
        };
        n.ep.handle_datagram(now, &d, &mut n.mem);
    }

    /// Delivers, drops, duplicates or reorders packets on the wire.
    fn deliver(&mut self, inp: &mut Input<'_>) {
        let count = usize::from(inp.u8() % 16) + 1;
        let mode = inp.u8();
        for _ in 0..count {
            if self.wire.is_empty() {
                return;
            }
            match mode % 8 {
                // Drop the head.
                0 => {
                    self.wire.pop_front();
                }
                // Duplicate the head, then deliver it.
                1 => {
                    let p = self.wire[0].clone();
                    self.wire.push_back(p);
                    self.deliver_at(0);
                }
                // Deliver one from further back (reordering).
                2 => {
                    let k = usize::from(inp.u8()) % self.wire.len();
                    self.deliver_at(k);
                }
                _ => self.deliver_at(0),
            }
            self.flush();
        }
    }

    fn advance(&mut self, inp: &mut Input<'_>) {
        let dt = inp.pick(&[
            Duration::from_micros(1),
            Duration::from_micros(100),
            Duration::from_millis(1),
            Duration::from_millis(10),
            Duration::from_millis(100),
            Duration::from_secs(1),
        ]);
        self.now = self.now + dt;
        self.fire_timers();
    }

    fn fire_timers(&mut self) {
        for n in &mut self.nodes {
            if n.ep.poll_timeout().is_some_and(|t| t <= self.now) {
                n.ep.handle_timeout(self.now);
            }
        }
    }

    /// Delivers everything and fires timers until quiet (bounded).
    fn drain(&mut self) {
        let limit = self.now + DRAIN;
        for _ in 0..20_000 {
            self.flush();
            if !self.wire.is_empty() {
                self.deliver_at(0);
                continue;
            }
            let next = self
                .nodes
                .iter_mut()
                .filter_map(|n| n.ep.poll_timeout())
                .min();
            match next {
                Some(t) if t <= limit => {
                    if t > self.now {
                        self.now = t;
                    }
                    self.fire_timers();
                }
                _ => break,
            }
            self.poll();
        }
        self.poll();
    }

    fn poll(&mut self) {
        for n in &mut self.nodes {
            let cq = n.cq;
            let mut c = 0;
            let _ = n.ep.poll_cq(cq, usize::MAX, |_| c += 1);
            self.out.completions += c;
        }
    }

    // ---- forged packets

    /// A key the target node knows of (live or stale), bent or not, or any.
    fn pick_key(&self, inp: &mut Input<'_>, node: usize) -> u32 {
        let keys = &self.nodes[node].keys;
        match inp.u8() % 8 {
            0 => inp.u32(),
            1 => 0,
            k if !keys.is_empty() => {
                let key = keys[usize::from(inp.u8()) % keys.len()];
                if k == 2 {
                    key ^ (1 << (inp.u8() % 32))
                } else {
                    key
                }
            }
            _ => inp.u32(),
        }
    }

    /// An address at, inside or around one of a node's regions, or anywhere.
    fn pick_va(&self, inp: &mut Input<'_>, node: usize) -> u64 {
        let regions = &self.nodes[node].regions;
        let r = regions[usize::from(inp.u8()) % regions.len()];
        match inp.u8() % 8 {
            0 => inp.u64(),
            1 => u64::MAX - u64::from(inp.u8()),
            2 => r.host.wrapping_sub(u64::from(inp.u8())),
            3 => (r.host + r.len).wrapping_sub(u64::from(inp.u8())),
            _ => r.host + u64::from(inp.u16()) % (r.len + 16),
        }
    }

    fn pick_len(inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 8 {
            0 => 0,
            1 => inp.u32(),
            2 => 1024,
            3 => 8,
            4 => u32::from(inp.u16()),
            _ => u32::from(inp.u16() % 4200),
        }
    }

    /// A packet with well-formed headers (any opcode the parser knows) and
    /// fields chosen from the input, sent towards one node.
    fn forge(&mut self, inp: &mut Input<'_>) {
        let to = usize::from(inp.u8() & 1);
        let from = 1 - to;
        let opcode = loop {
            let o = Opcode(inp.u8());
            if o.info().is_some() || inp.done() {
                break o;
            }
        };
        let Some(info) = opcode.info() else { return };
        let t = &self.nodes[to];
        let qpn = match inp.u8() % 8 {
            0 => inp.u32() & 0xFF_FFFF,
            1 => 1,
            2 => softrdma_transport::MULTICAST_QPN,
            k => t.qps[usize::from(k) % 3],
        };
        // PSNs around what each side started from, or anywhere.
        let base = match inp.u8() % 4 {
            0 => inp.u32(),
            1 => PSN_A,
            2 => PSN_B,
            _ => 0,
        };
        let psn = Psn::new(base.wrapping_add(u32::from(inp.u8())).wrapping_sub(8));
        let mut bth = Bth::new(opcode, qpn, psn);
        let flags = inp.u8();
        bth.ack_req = flags & 1 != 0;
        bth.se = flags & 2 != 0;
        if flags & 4 != 0 {
            bth.pkey = inp.u16();
        }
        let mut h = Headers::new(bth);
        h.reth = Some(Reth {
            va: self.pick_va(inp, to),
            rkey: self.pick_key(inp, to),
            dma_len: Self::pick_len(inp),
        });
        let mut va = self.pick_va(inp, to);
        if inp.u8() & 3 != 0 {
            va &= !7;
        }
        h.atomic_eth = Some(AtomicEth {
            va,
            rkey: self.pick_key(inp, to),
            swap_add: inp.u64(),
            compare: inp.u64(),
        });
        h.aeth = Some(Aeth {
            syndrome: Syndrome::from_byte(inp.u8()),
            msn: inp.u32() & 0xFF_FFFF,
        });
        h.atomic_ack = Some(inp.u64());
        h.imm = Some(inp.u32());
        h.ieth = Some(self.pick_key(inp, to));
        h.deth = Some(Deth {
            qkey: if inp.u8() & 1 == 0 { QKEY } else { inp.u32() },
            resv8: 0,
            src_qp: self.nodes[from].qps[usize::from(inp.u8()) % 3],
        });
        let plen = if info.has_payload {
            match inp.u8() % 6 {
                0 => 0,
                1 => 1024,
                2 => 1024 + usize::from(inp.u8()),
                _ => usize::from(inp.u16() % 1100),
            }
        } else {
            0
        };
        let payload: Vec<u8> = (0..plen).map(|i| (i as u8) ^ 0xA5).collect();
        let mut data = Vec::new();
        if softrdma_wire::emit(&h, &payload, &mut data).is_err() {
            return;
        }
        let spoof = inp.u8();
        self.send_framed(from, to, data, spoof);
    }

    /// Raw bytes as a datagram (with a correct ICRC, or none).
    fn raw(&mut self, inp: &mut Input<'_>) {
        let to = usize::from(inp.u8() & 1);
        let n = usize::from(inp.u8() % 96);
        let mut data = inp.bytes(n);
        // Often aim it at a real QP so it gets past the QPN lookup.
        if data.len() >= 8 && inp.u8() & 1 == 0 {
            let q = self.nodes[to].qps[usize::from(data[0]) % 3];
            data[5..8].copy_from_slice(&q.to_be_bytes()[1..]);
            data[2] = 0xFF;
            data[3] = 0xFF;
        }
        data.extend_from_slice(&[0; 4]);
        let spoof = inp.u8();
        self.send_framed(1 - to, to, data, spoof);
    }

    /// Puts a packet (BTH..ICRC) on the wire from `from` to `to`: with the
    /// ICRC right unless `spoof` says otherwise, from the real peer's address
    /// unless `spoof` picks a stranger's.
    fn send_framed(&mut self, from: usize, to: usize, mut data: Vec<u8>, spoof: u8) {
        if data.len() < 4 {
            return;
        }
        let src_ip = if spoof & 0x30 == 0x30 {
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9))
        } else {
            self.nodes[from].addr
        };
        let port = self.nodes[from].ep.config().local_port;
        let dport = self.nodes[to].ep.config().dest_port;
        let (IpAddr::V4(s), IpAddr::V4(d)) = (src_ip, self.nodes[to].addr) else {
            return;
        };
        let f = ip::Ipv4Fields {
            src: s,
            dst: d,
            id: 0,
            tos: 0,
            ttl: 0,
            df: true,
        };
        let iph = ip::ipv4_header(&f, ip::UDP_HDR_LEN + data.len());
        let udp = ip::udp_header(port, dport, data.len());
        let _ = softrdma_wire::icrc::fill(&iph, &udp, &mut data);
        if spoof & 0xC0 == 0xC0 {
            let n = data.len();
            data[n - 1] ^= 1 << (spoof & 7);
        }
        if self.wire.len() < MAX_WIRE {
            self.wire
                .push_back((to, SocketAddr::new(src_ip, port), data));
        }
    }

    // ---- verbs

    fn local_sge(&self, inp: &mut Input<'_>, node: usize) -> Sge {
        let n = &self.nodes[node];
        let r = n.regions[usize::from(inp.u8()) % n.regions.len()];
        let lkey = match inp.u8() % 8 {
            0 => self.pick_key(inp, node),
            _ => r.key.unwrap_or(0),
        };
        let off = u64::from(inp.u16()) % (r.len + 8);
        let length = match inp.u8() % 4 {
            0 => u32::from(inp.u16() % 3000),
            1 => 8,
            _ => (r.len.saturating_sub(off) as u32).min(u32::from(inp.u16() % 2100)),
        };
        Sge {
            addr: r.host + off,
            length,
            lkey,
        }
    }

    fn post_send(&mut self, inp: &mut Input<'_>) {
        let node = usize::from(inp.u8() & 1);
        let k = usize::from(inp.u8()) % 3;
        let qpn = self.nodes[node].qps[k];
        let opcode = match k {
            0 => inp.pick(&[
                WrOpcode::Send,
                WrOpcode::SendWithImm,
                WrOpcode::RdmaWrite,
                WrOpcode::RdmaWriteWithImm,
                WrOpcode::RdmaRead,
                WrOpcode::AtomicCmpAndSwp,
                WrOpcode::AtomicFetchAndAdd,
                WrOpcode::AtomicWrite,
            ]),
            1 => inp.pick(&[
                WrOpcode::Send,
                WrOpcode::SendWithImm,
                WrOpcode::RdmaWrite,
                WrOpcode::RdmaWriteWithImm,
            ]),
            _ => inp.pick(&[WrOpcode::Send, WrOpcode::SendWithImm]),
        };
        let mut w = SendWr::new(u64::from(inp.u16()), opcode);
        w.flags = SendFlags::SIGNALED;
        let nsge = usize::from(inp.u8() % 3);
        if inp.u8().is_multiple_of(8) {
            w.flags = w.flags.with(SendFlags::INLINE);
            let n = usize::from(inp.u8());
            w.inline = Some((0..n).map(|i| i as u8).collect());
        } else {
            w.sgl = (0..nsge).map(|_| self.local_sge(inp, node)).collect();
        }
        if opcode.is_atomic() || opcode == WrOpcode::AtomicWrite {
            // Atomics need one 8-byte SGE (the post is refused otherwise).
            w.inline = None;
            w.sgl = [Sge {
                length: 8,
                ..self.local_sge(inp, node)
            }]
            .into();
        }
        w.remote_addr = self.pick_va(inp, 1 - node);
        if opcode.is_atomic() || opcode == WrOpcode::AtomicWrite {
            w.remote_addr &= !7;
        }
        w.rkey = self.pick_key(inp, 1 - node);
        w.imm_data = inp.u32();
        w.compare_add = inp.u64();
        w.swap = inp.u64();
        if k == 2 {
            let peer = &self.nodes[1 - node];
            w.ud = Some(UdDest {
                av: AddressVector::to_ip(peer.addr),
                remote_qpn: if inp.u8().is_multiple_of(4) {
                    inp.u32() & 0xFF_FFFF
                } else {
                    peer.qps[2]
                },
                remote_qkey: if inp.u8().is_multiple_of(4) {
                    inp.u32()
                } else {
                    QKEY
                },
            });
        }
        let now = self.now;
        let _ = self.nodes[node].ep.post_send(now, qpn, w);
    }

    fn post_recv(&mut self, inp: &mut Input<'_>) {
        let node = usize::from(inp.u8() & 1);
        let qpn = self.nodes[node].qps[usize::from(inp.u8()) % 3];
        let nsge = usize::from(inp.u8() % 3);
        let sgl = (0..nsge).map(|_| self.local_sge(inp, node)).collect();
        let wr = RecvWr {
            wr_id: u64::from(inp.u16()),
            sgl,
        };
        let now = self.now;
        let _ = self.nodes[node].ep.post_recv(now, qpn, wr);
    }

    /// Deregisters a region, or registers it again (a new key).
    fn churn_region(&mut self, inp: &mut Input<'_>) {
        let node = usize::from(inp.u8() & 1);
        let n = &mut self.nodes[node];
        let r = usize::from(inp.u8()) % n.regions.len();
        match n.regions[r].key {
            Some(key) => {
                let reg = n.regions[r];
                n.ep.dereg_mr(key).expect("a live key deregisters");
                n.mem.remove_region(reg.host, reg.len, reg.access);
                n.regions[r].key = None;
            }
            None => n.register(r),
        }
    }

    /// Polls CQs, moves a QP to ERR, or lets time pass until a timer fires.
    fn misc(&mut self, inp: &mut Input<'_>) {
        match inp.u8() % 4 {
            0 => {
                let node = usize::from(inp.u8() & 1);
                let qpn = self.nodes[node].qps[usize::from(inp.u8()) % 3];
                let a = QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                };
                let now = self.now;
                let _ = self.nodes[node].ep.modify_qp(now, qpn, &a, M::STATE);
            }
            1 => {
                if let Some(t) = self
                    .nodes
                    .iter_mut()
                    .filter_map(|n| n.ep.poll_timeout())
                    .min()
                {
                    if t > self.now {
                        self.now = t;
                    }
                    self.fire_timers();
                }
            }
            _ => self.poll(),
        }
    }

    /// Bytes that may never change did not.
    fn check_frozen(&self) {
        for (i, n) in self.nodes.iter().enumerate() {
            let snap = n.mem.snapshot();
            for (k, want) in &n.frozen {
                assert!(
                    &snap[*k] == want,
                    "node {i}: allocation {k} (never writable) changed"
                );
            }
            // Every allocation's guard zones.
            for (k, bytes) in snap.iter().enumerate() {
                let l = bytes.len();
                let head = &bytes[..GUARD];
                let tail = &bytes[l - GUARD..];
                let fill = |j: usize| (j as u8).wrapping_mul(29).wrapping_add(guard_salt(i, k)) | 1;
                assert!(
                    head.iter().enumerate().all(|(j, b)| *b == fill(j)),
                    "node {i}: guard zone before allocation {k} changed"
                );
                assert!(
                    tail.iter()
                        .enumerate()
                        .all(|(j, b)| *b == fill(l - GUARD + j)),
                    "node {i}: guard zone after allocation {k} changed"
                );
            }
        }
    }
}

/// The fill salt [`World::new`] gave allocation `k` of node `i`.
fn guard_salt(i: usize, k: usize) -> u8 {
    if k < 4 {
        0x40 + k as u8 + 16 * i as u8
    } else {
        0x77
    }
}

impl Node {
    fn register(&mut self, r: usize) {
        let reg = self.regions[r];
        let mr = self
            .ep
            .reg_mr(self.pds[reg.pd], reg.host, reg.len, reg.host, reg.access)
            .expect("registration");
        self.mem.add_region(reg.host, reg.len, reg.access);
        self.regions[r].key = Some(mr.lkey);
        self.keys.push(mr.lkey);
    }
}
