//! The express post (docs/PLAN-direct-queues.md, "After step 1"): an idle
//! RC QP whose peer is on a same-host lane lends its requester to an
//! [`Express`] cell with a lock of its own, so that a lone small SEND or
//! WRITE is written as a direct record at the application's post without
//! the driver's engine lock, the transport's WQE or its timers.
//!
//! The transport keeps every rule: the cell holds one message at most
//! (*Out*), at the next PSN, and hands it back as the started WQE it stands
//! for whenever anything else touches the requester (*reclaim*): a post the
//! cell does not take, `modify_qp`, an error, a NAK or RNR NAK, any
//! response but the plain ACK of that message, and the *lease*, a timer the
//! lending arms for one ACK timeout, so a lost record or ACK is sent again
//! as a packet as after any post. The plain ACK of the message settles it
//! without the transport: its send completion, and *Idle* at the next PSN.
//!
//! The responder's lone plain ACK, which a direct record would carry
//! (`lane_ack.rs`), is *owed* to the cell while the QP is lent: the
//! express post carries it; whoever polls the QP's output first takes it
//! back into the responder's queue (`unowe`), in front of anything newer.
//!
//! An idle responder is lent with the requester, and executes a lone
//! SEND or WRITE through the cell (`express/exec.rs`); it is taken back alone
//! before the transport reads its state (`Qp::reclaim_responder`), and
//! with the requester at any reclaim.
//!
//! A gather from an SGE needs its L_Key checked: the cell keeps the regions
//! the transport checked for this QP's posts, each with the MR table's
//! generation of that moment; any change to a region bumps the generation
//! and every copy is stale.

mod exec;

pub use exec::Executed;

use super::{Ctx, ExpressRecv, Path, Qp, RespOut, SendWqe};
use crate::cq::{CqHandle, CqRing};
use crate::endpoint::Transmit;
use crate::mr::{Memory, MrTable, PdHandle};
use crate::time::Instant;
use crate::types::{Access, QpState, QpType, SendFlags, WcFlags, WcStatus, WrOpcode};
use crate::wr::{RecvWr, SendWr, Sge, Wc};
use softrdma_sync::{SpinGuard, SpinLock};
use softrdma_wire::direct::{DIRECT_MAX_LEN, DIRECT_MAX_PAYLOAD, write_header};
use softrdma_wire::{Headers, LaneAck, Opcode, Packet, Position, Psn, Reth, Syndrome};
use softrdma_wire::{Transport, opcode_for};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Regions a cell remembers (a ping-pong posts from one or two).
const CACHED_MRS: usize = 4;

/// A QP's express cell: shared between the transport and the driver,
/// which posts through [`Express::post`].
#[derive(Debug)]
pub struct Express {
    cell: SpinLock<Cell>,
    generation: Arc<AtomicU64>,
    /// The driver's last post was of a kind the cell takes: only then is
    /// the requester lent. A QP that posts READs (`ib_read_lat`) or only
    /// answers would otherwise be lent and taken back at every message
    /// for nothing (~560 instructions a READ; BENCHMARKS.md "The express
    /// post").
    wanted: AtomicBool,
    /// Lent (*Idle* or *Out*): written under the cell's lock, and only the
    /// transport lends or takes back, under its driver's lock (the express
    /// post only moves *Idle* to *Out*), so there the flag read without the
    /// cell's lock is the truth (most QPs, most of the time, cost no lock).
    lent: AtomicBool,
    /// The QP's receive cell (none with an SRQ): [`Express::post_recv`].
    recv: Option<Arc<ExpressRecv>>,
}

#[derive(Debug, Default)]
struct Cell {
    lent: Lent,
    mrs: MrCache,
}

/// The regions the transport checked for this QP's posts.
#[derive(Debug, Default)]
struct MrCache {
    mrs: [Option<CachedMr>; CACHED_MRS],
    next: usize,
}

// One per QP, in place: boxing the outstanding WR would allocate a post.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Default)]
enum Lent {
    /// The transport has the requester: posts go its way.
    #[default]
    Held,
    /// Lent: *Idle* with nothing outstanding, *Out* with one message.
    /// One variant for both, so that posting and settling change the
    /// message in place: moving the lane and the WR between two variants
    /// cost ~200 instructions a message, most of them `memcpy` (callgrind
    /// of `ib_send_lat`: `Express::post` 514 → 413, `settle` 323 → 216).
    Lent(Lane, Option<Outstanding>),
}

/// What a record of the lent QP needs.
#[derive(Debug)]
struct Lane {
    /// The next PSN.
    psn: Psn,
    dest_qp: u32,
    src_ip: IpAddr,
    dst: SocketAddr,
    /// Largest payload: the path MTU, and what a record holds.
    max_len: u32,
    max_inline: u32,
    /// The responder's plain ACK, for the next record to carry.
    owed: Option<LaneAck>,
    /// Records may carry ACKs (`Config::lane_acks`).
    carries: bool,
    /// The responder, if lent too (`exec.rs`).
    resp: Option<RespLane>,
}

/// A responder lent with its requester: what a lent exec reads and
/// changes (`exec.rs`), given back at the reclaim.
#[derive(Debug)]
struct RespLane {
    /// The expected PSN.
    psn: Psn,
    msn: u32,
    qpn: u32,
    /// Largest payload (the path MTU).
    mtu: u32,
    /// The QP grants remote writes.
    remote_write: bool,
    /// Where a request must come from, and to (as `from_peer` checks).
    peer: IpAddr,
    local: IpAddr,
    recv_cq: (CqHandle, Arc<CqRing>),
    send_cq: (CqHandle, Arc<CqRing>),
    sig_all: bool,
    /// Since the lend: requests executed and their records' bytes, and
    /// the messages they settled and their records' bytes.
    counts: LentCounts,
}

/// What a lent responder counted, for the endpoint's statistics at the
/// reclaim (or when they are read).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LentCounts {
    execs: u64,
    bytes: u64,
    settled: u64,
    settled_bytes: u64,
}

impl LentCounts {
    /// Adds these to `stats`: each request as a direct record read in
    /// place and executed by the express path, each settled message as
    /// an express record sent.
    pub(crate) fn fold(self, stats: &mut crate::Stats) {
        stats.rx_packets += self.execs;
        stats.rx_bytes += self.bytes;
        stats.rx_direct += self.execs;
        stats.rx_in_place += self.execs;
        stats.rx_express += self.execs;
        stats.rx_lent += self.execs;
        stats.tx_packets += self.settled;
        stats.tx_bytes += self.settled_bytes;
        stats.tx_direct += self.settled;
        stats.tx_express += self.settled;
    }
}

impl Lent {
    /// What the lent responder counted, if there is one.
    fn resp_counts(&self) -> LentCounts {
        match self {
            Lent::Lent(Lane { resp: Some(r), .. }, _) => r.counts,
            _ => LentCounts::default(),
        }
    }
}

impl Lane {
    /// The responder's plain ACK `a` is the next record's to carry, unless
    /// the one it owes already is a later PSN's.
    fn owe(&mut self, a: LaneAck) {
        if self.owed.is_none_or(|o| !a.psn.before(o.psn)) {
            self.owed = Some(a);
        }
    }
}

/// A region's check, good while the MR table is at `generation`.
#[derive(Debug, Clone, Copy)]
struct CachedMr {
    lkey: u32,
    iova: u64,
    length: u64,
    host: u64,
    generation: u64,
    /// Its rights (a receive's scatter needs local writes, a WRITE's
    /// data remote ones).
    access: Access,
}

/// The message a lent QP has outstanding.
#[derive(Debug)]
struct Outstanding {
    wr: OutWr,
    len: u32,
    /// The record's length (the statistics count it when settled).
    record: u32,
    posted: Instant,
}

impl Outstanding {
    /// Its send completion once settled (`None`: unsignaled) on QP `qpn`.
    fn completion(&self, qpn: u32, sig_all: bool) -> Option<Wc> {
        let wr = &self.wr;
        let signaled = wr.flags.contains(SendFlags::SIGNALED) || sig_all;
        let mut wc = Wc::new(wr.wr_id, WcStatus::Success, wr.opcode.wc_opcode(), qpn);
        wc.byte_len = self.len;
        if wr.opcode == WrOpcode::SendWithImm || wr.opcode == WrOpcode::RdmaWriteWithImm {
            wc.wc_flags = WcFlags::WITH_IMM;
        }
        signaled.then_some(wc)
    }
}

/// A send WR as the express post reads it: the fields a lone SEND or
/// WRITE (± immediate data) of one packet has, from inline bytes or at most
/// one SGE. A driver builds it from its own request (the C ABI from an
/// `ibv_send_wr`) without a [`SendWr`]: that is 184 bytes, and building one
/// and moving it into the cell and its outstanding message was ~200
/// instructions of each post (callgrind of `ib_send_lat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpressWr<'a> {
    /// Caller's cookie, returned in the completion.
    pub wr_id: u64,
    /// Operation (the cell takes SEND and RDMA WRITE, ± immediate data).
    pub opcode: WrOpcode,
    /// Flags.
    pub flags: SendFlags,
    /// The one SGE, if any (ignored when `inline` is set).
    pub sge: Option<Sge>,
    /// Inline payload (`IBV_SEND_INLINE`), read during the post.
    pub inline: Option<&'a [u8]>,
    /// Immediate data as the big-endian word on the wire.
    pub imm_data: u32,
    /// Remote address (RDMA WRITE).
    pub remote_addr: u64,
    /// Remote key (RDMA WRITE).
    pub rkey: u32,
}

impl<'a> ExpressWr<'a> {
    /// The express form of `wr`, if it has one (one SGE at most, no UD
    /// destination, binding or XRC target); `None` for any other WR.
    pub fn of(wr: &'a SendWr) -> Option<ExpressWr<'a>> {
        let sge = match wr.sgl.as_slice() {
            [] => None,
            [s] => Some(*s),
            _ if wr.inline.is_some() => None,
            _ => return None,
        };
        let plain = wr.ud.is_none() && wr.bind.is_none() && wr.xrc_remote_srqn == 0;
        plain.then_some(ExpressWr {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            flags: wr.flags,
            sge,
            inline: wr.inline.as_deref(),
            imm_data: wr.imm_data,
            remote_addr: wr.remote_addr,
            rkey: wr.rkey,
        })
    }

    /// Payload bytes.
    fn length(&self) -> u64 {
        match (self.inline, self.sge) {
            (Some(d), _) => d.len() as u64,
            (None, Some(s)) => u64::from(s.length),
            (None, None) => 0,
        }
    }
}

/// What an outstanding message keeps of its WR: its [`ExpressWr`], with
/// the inline bytes owned, enough to give the transport the WR back at a
/// reclaim.
#[derive(Debug)]
struct OutWr {
    wr_id: u64,
    opcode: WrOpcode,
    flags: SendFlags,
    sge: Option<Sge>,
    inline: Option<Vec<u8>>,
    imm_data: u32,
    remote_addr: u64,
    rkey: u32,
}

impl OutWr {
    fn of(wr: &ExpressWr<'_>) -> OutWr {
        OutWr {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            flags: wr.flags,
            sge: wr.sge,
            inline: wr.inline.map(<[u8]>::to_vec),
            imm_data: wr.imm_data,
            remote_addr: wr.remote_addr,
            rkey: wr.rkey,
        }
    }

    /// The WR again, as posted (for the transport's WQE).
    fn into_wr(self) -> SendWr {
        let mut wr = SendWr::new(self.wr_id, self.opcode);
        wr.flags = self.flags;
        if self.inline.is_none() {
            wr.sgl.extend(self.sge);
        }
        wr.inline = self.inline;
        wr.imm_data = self.imm_data;
        wr.remote_addr = self.remote_addr;
        wr.rkey = self.rkey;
        wr
    }
}

impl Express {
    pub(crate) fn new(generation: Arc<AtomicU64>, recv: Option<Arc<ExpressRecv>>) -> Express {
        Express {
            cell: SpinLock::default(),
            generation,
            wanted: AtomicBool::new(false),
            lent: AtomicBool::new(false),
            recv,
        }
    }

    /// Queues a receive WR without the driver's lock if the QP's receive
    /// cell takes it ([`ExpressRecv::post`]); otherwise hands it back for
    /// the transport's post.
    #[allow(clippy::result_large_err)]
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), RecvWr> {
        match &self.recv {
            Some(r) => r.post(wr),
            None => Err(wr),
        }
    }

    fn lock(&self) -> SpinGuard<'_, Cell> {
        self.cell.lock()
    }

    /// Writes `wr` as a direct record into `out` at `now` if the QP is lent
    /// and idle and the WR is a lone SEND or WRITE (± immediate data) of
    /// one packet that fits a record, inline or from one SGE of a region
    /// this cell knows; returns where the record goes, for the driver to
    /// push into that lane (a record it cannot push is lost: the lease
    /// sends it again). Otherwise returns `None`: the WR is the
    /// transport's post. `now` is when the message counts as posted, or a
    /// lower bound of it that [`Express::posted_at`] raises.
    pub fn post(
        &self,
        now: Instant,
        wr: &ExpressWr<'_>,
        mem: &mut dyn Memory,
        out: &mut [u8; DIRECT_MAX_LEN],
    ) -> Option<Transmit> {
        if !self.wants(wr.opcode) {
            return None;
        }
        let mut g = self.lock();
        let Cell { lent, mrs } = &mut *g;
        let Lent::Lent(lane, outstanding @ None) = lent else {
            return None;
        };
        let generation = self.generation.load(Ordering::Acquire);
        let n = lane.write(wr, mrs, mem, generation, out)?;
        let t = Transmit {
            src_ip: lane.src_ip,
            dst: lane.dst,
            len: n,
        };
        lane.owed = None;
        lane.psn = lane.psn.add(1);
        *outstanding = Some(Outstanding {
            wr: OutWr::of(wr),
            len: wr.length() as u32,
            record: n as u32,
            posted: now,
        });
        Some(t)
    }

    /// Raises the time the outstanding message counts as posted to `now`,
    /// for a driver that pushes the record before it reads the clock and
    /// gave [`Express::post`] a lower bound (an earlier reading). Its one
    /// use is the retransmission timer of a message taken back
    /// (`Qp::reclaim`): taken back before this call, the message times out
    /// early, which costs at most a retransmission. The time only grows, so
    /// a message another thread posted meanwhile (this one settled) keeps
    /// its own or gets this, later by the few ns between the two posts.
    pub fn posted_at(&self, now: Instant) {
        if let Lent::Lent(_, Some(o)) = &mut self.lock().lent {
            o.posted = o.posted.max(now);
        }
    }

    /// Whether [`Express::post`] may take `wr` (a SEND or WRITE, ± immediate
    /// data, to a lent QP); the driver may ask first, before it prepares a
    /// record. READs and atomics never go this way, and while a QP posts
    /// them its requester is not lent.
    pub fn wants(&self, opcode: WrOpcode) -> bool {
        let kinds = [
            WrOpcode::Send,
            WrOpcode::SendWithImm,
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaWriteWithImm,
        ];
        let takes = kinds.contains(&opcode);
        if self.wanted.load(Ordering::Relaxed) != takes {
            self.wanted.store(takes, Ordering::Relaxed);
        }
        takes && self.lent.load(Ordering::Acquire)
    }

    /// Remembers the region of `lkey` (checked for a post of QP `pd`, or
    /// for a request to it: a region's R_Key is its L_Key).
    fn remember(&self, mrs: &MrTable, pd: PdHandle, lkey: u32) {
        let Some(m) = mrs.get(lkey) else { return };
        if m.pd != pd || m.access.contains(Access::ON_DEMAND) {
            return;
        }
        let generation = mrs.generation().load(Ordering::Acquire);
        let c = CachedMr {
            lkey,
            iova: m.iova,
            length: m.length,
            host: m.host,
            generation,
            access: m.access,
        };
        self.lock().mrs.remember(c);
    }
}

impl Lane {
    /// The record for `wr` into `out` (its length), if the express post
    /// takes it; writes nothing that counts otherwise.
    fn write(
        &self,
        wr: &ExpressWr<'_>,
        mrs: &MrCache,
        mem: &mut dyn Memory,
        generation: u64,
        out: &mut [u8; DIRECT_MAX_LEN],
    ) -> Option<usize> {
        let (imm, send) = match wr.opcode {
            WrOpcode::Send => (false, true),
            WrOpcode::SendWithImm => (true, true),
            WrOpcode::RdmaWrite => (false, false),
            WrOpcode::RdmaWriteWithImm => (true, false),
            _ => return None,
        };
        let known = SendFlags::SIGNALED
            .with(SendFlags::SOLICITED)
            .with(SendFlags::INLINE)
            .with(SendFlags::FENCE);
        let len = wr.length();
        if !known.contains(wr.flags) || len > u64::from(self.max_len) {
            return None;
        }
        // Where the payload comes from: inline bytes, or one SGE's region.
        let host = match (wr.inline, wr.sge) {
            (Some(d), _) if d.len() as u64 > u64::from(self.max_inline) => return None,
            (Some(_), _) => None,
            // One SGE at most (`ExpressWr`), and none needed for nothing.
            (None, None) => None,
            (None, Some(_)) if len == 0 => None,
            (None, Some(s)) => Some(mrs.host_of(s.lkey, s.addr, len, generation)?),
        };
        let operation = if send {
            softrdma_wire::Operation::Send
        } else {
            softrdma_wire::Operation::Write
        };
        let opcode: Opcode = opcode_for(Transport::Rc, operation, Position::Only, imm, false)?;
        let mut hdr = Headers::new(super::bth(opcode, self.dest_qp, self.psn));
        hdr.bth.ack_req = true;
        hdr.bth.se = (send || imm) && wr.flags.contains(SendFlags::SOLICITED);
        if imm {
            hdr.imm = Some(wr.imm_data);
        }
        if !send {
            hdr.reth = Some(Reth {
                va: wr.remote_addr,
                rkey: wr.rkey,
                dma_len: len as u32,
            });
        }
        hdr.lane_ack = self.owed;
        if !softrdma_wire::direct::fits(&hdr, len as usize) {
            return None;
        }
        let (n, payload) = write_header(&hdr, len as usize, out);
        let dst = &mut out[payload];
        match (wr.inline, host) {
            (Some(d), _) => dst.copy_from_slice(d),
            (None, Some(h)) => mem.read(h, dst),
            (None, None) => {}
        }
        Some(n)
    }
}

impl MrCache {
    /// The host address of `[va, va + len)` through `lkey`, if a region
    /// this cell remembers at `generation` holds it.
    fn host_of(&self, lkey: u32, va: u64, len: u64, generation: u64) -> Option<u64> {
        self.host_in(lkey, va, len, generation, Access::EMPTY)
    }

    /// [`MrCache::host_of`], of a region `key` names that grants `need`.
    fn host_in(&self, key: u32, va: u64, len: u64, generation: u64, need: Access) -> Option<u64> {
        let m = self
            .mrs
            .iter()
            .flatten()
            .find(|m| m.lkey == key && m.generation == generation && m.access.contains(need))?;
        let end = va.checked_add(len)?;
        (va >= m.iova && end <= m.iova.checked_add(m.length)?).then(|| m.host + (va - m.iova))
    }

    fn remember(&mut self, c: CachedMr) {
        if let Some(slot) = self.mrs.iter_mut().flatten().find(|m| m.lkey == c.lkey) {
            *slot = c;
            return;
        }
        self.mrs[self.next] = Some(c);
        self.next = (self.next + 1) % CACHED_MRS;
    }
}

impl Qp {
    /// Lends the requester to the QP's cell if it has one and is idle:
    /// RTS, records on, its peer on a lane, nothing queued, outstanding or
    /// timed, an ACK timeout to lease by. Arms the lease.
    pub(crate) fn lend(&mut self, ctx: &Ctx<'_>) {
        let Some(x) = &self.express else { return };
        // Lent already (most calls: after each record of a ping-pong); the
        // flag is the truth here (see `Express::lent`). Asked first, it
        // skips the checks and the path below (~100 instructions a
        // record, callgrind of `ib_send_lat`).
        if x.lent.load(Ordering::Relaxed) {
            self.lend_responder_again(ctx);
            return;
        }
        let idle = x.wanted.load(Ordering::Relaxed)
            && self.qp_type == QpType::Rc
            && self.state == QpState::Rts
            && ctx.config.direct
            && self.peer_copy
            && self.sq.is_empty()
            && self.internal_wqes == 0
            && self.req.psn == self.req.una
            && self.req.una == self.req.high
            && self.req.rd_atomic == 0
            && self.timers.retrans.is_none()
            && self.timers.rnr.is_none()
            && self.riding.is_none()
            && self.window(ctx) > 0;
        let Some(lease) = self.ack_timeout_ns().filter(|_| idle) else {
            return;
        };
        let Some(path) = Path::for_av(ctx, &self.attr.ah_attr) else {
            return;
        };
        let x = Arc::clone(x);
        let mut g = x.lock();
        if !matches!(g.lent, Lent::Held) {
            return;
        }
        // The responder's lone plain ACK is the next record's to carry.
        let owed = self.lone_lane_ack(ctx.config);
        if owed.is_some() {
            self.resp.out.pop_front();
        }
        let resp = self.lend_responder(ctx);
        g.lent = Lent::Lent(
            Lane {
                psn: self.req.psn,
                dest_qp: self.attr.dest_qp_num,
                src_ip: path.src_ip,
                dst: path.dst,
                max_len: self.mtu(ctx.config).min(DIRECT_MAX_PAYLOAD as u32),
                max_inline: ctx.config.limits.max_inline,
                owed,
                carries: ctx.config.lane_acks,
                resp,
            },
            None,
        );
        x.lent.store(true, Ordering::Release);
        self.timers.lease = Some(ctx.now + core::time::Duration::from_nanos(lease));
    }

    /// Whether the requester is lent with a message outstanding.
    pub(crate) fn has_lent_message(&self) -> bool {
        lent(&self.express).is_some_and(|x| matches!(x.lock().lent, Lent::Lent(_, Some(_))))
    }

    /// Whether the cell holds an ACK of the responder's.
    pub(crate) fn owes_lent_ack(&self) -> bool {
        lent(&self.express).is_some_and(|x| match &x.lock().lent {
            Lent::Lent(lane, _) => lane.owed.is_some(),
            Lent::Held => false,
        })
    }

    /// Whether the requester is lent.
    pub(crate) fn is_lent(&self) -> bool {
        lent(&self.express).is_some()
    }

    /// Takes the requester back: an idle cell's next PSN, or its
    /// outstanding message as the started WQE it stands for (its one
    /// packet sent when it was posted, the retransmission timer from
    /// then), and the ACK it owed into the responder's queue.
    pub(crate) fn reclaim(&mut self, ctx: &mut Ctx<'_>) {
        let Some(x) = lent(&self.express) else {
            return;
        };
        let lent = {
            let mut g = x.lock();
            x.lent.store(false, Ordering::Release);
            std::mem::take(&mut g.lent)
        };
        let Lent::Lent(lane, out) = lent else {
            return;
        };
        if let Some(r) = lane.resp {
            self.take_responder_back(ctx, r);
        }
        self.timers.lease = None;
        if let Some(a) = lane.owed {
            self.owed_back(a);
        }
        self.req.psn = lane.psn;
        self.req.high = lane.psn;
        self.req.una = lane.psn;
        self.req.idx = 0;
        self.req.noack = 0;
        self.req.retry_started = false;
        self.req.retry_left = self.attr.retry_cnt;
        self.req.rnr_left = self.attr.rnr_retry;
        let Some(o) = out else { return };
        let psn = lane.psn.sub(1);
        self.req.una = psn;
        self.req.idx = 1;
        let signaled = o.wr.flags.contains(SendFlags::SIGNALED);
        self.sq.push_back(SendWqe {
            wr: o.wr.into_wr(),
            len: o.len,
            signaled,
            started: true,
            first_psn: psn,
            last_psn: psn,
            npkts: 1,
            next_pkt: 1,
            error: None,
            peer: false,
            offer: None,
            tm: None,
        });
        count_sent(ctx, o.record);
        self.timers.retrans = self
            .ack_timeout_ns()
            .map(|ns| o.posted + core::time::Duration::from_nanos(ns));
    }

    /// A response to this QP while lent: the plain ACK of its outstanding
    /// message settles it (true); anything else is the transport's, after
    /// a reclaim (false).
    pub(crate) fn settle(&mut self, ctx: &mut Ctx<'_>, pkt: &Packet<'_>) -> bool {
        let plain = pkt.hdr.bth.opcode == Opcode::RC_ACKNOWLEDGE
            && pkt
                .hdr
                .aeth
                .is_some_and(|a| matches!(a.syndrome, Syndrome::Ack { .. }));
        self.settle_at(ctx, plain.then_some(pkt.hdr.bth.psn))
    }

    /// [`Qp::settle`] of a response that is a plain ACK of `plain`'s PSN,
    /// or anything else (`None`).
    pub(super) fn settle_at(&mut self, ctx: &mut Ctx<'_>, plain: Option<Psn>) -> bool {
        let Some(x) = lent(&self.express) else {
            return false;
        };
        let mut g = x.lock();
        let outstanding = match &mut g.lent {
            Lent::Held => return false,
            Lent::Lent(lane, out @ Some(_)) if plain == Some(lane.psn.sub(1)) => out,
            Lent::Lent(..) => {
                drop(g);
                self.reclaim(ctx);
                return false;
            }
        };
        // Read in place, then dropped there: *Idle* at the next PSN.
        let o = outstanding.as_ref().expect("matched above");
        let (wc, record) = self.settled(o);
        *outstanding = None;
        drop(g);
        self.after_settled(ctx, wc, record);
        true
    }

    /// The send completion of the outstanding message `o` that a plain
    /// ACK settled (`None`: unsignaled) and its record's length.
    fn settled(&self, o: &Outstanding) -> (Option<Wc>, u32) {
        (o.completion(self.qpn, self.sq_sig_all), o.record)
    }

    /// After [`Qp::settled`], out of the cell's lock: the record counts as
    /// sent, and the completion goes to the send CQ.
    fn after_settled(&mut self, ctx: &mut Ctx<'_>, wc: Option<Wc>, record: u32) {
        count_sent(ctx, record);
        if let Some(wc) = wc
            && !Self::push_wc(ctx, self.send_cq, wc, false)
        {
            self.enter_error(ctx);
        }
    }

    /// The plain ACK this QP's responder owes for `psn` ([`Qp::owe`]) and
    /// the ACK `carried` by the request it answers ([`Qp::settle_at`]), in
    /// one hold of the lent QP's cell: each took the lock once, and in a
    /// ping-pong both come with every message. False, with nothing
    /// changed, unless the cell takes both (the responder queues nothing
    /// else, `carried` is the plain ACK of the outstanding message): then
    /// each goes its own way.
    pub(crate) fn owe_and_settle(&mut self, ctx: &mut Ctx<'_>, psn: Psn, carried: LaneAck) -> bool {
        let Some(x) = lent(&self.express) else {
            return false;
        };
        if !self.resp.out.is_empty() || !matches!(carried.aeth.syndrome, Syndrome::Ack { .. }) {
            return false;
        }
        let owed = LaneAck {
            psn,
            aeth: softrdma_wire::Aeth {
                syndrome: super::responder::ACK,
                msn: self.resp.msn,
            },
        };
        let mut g = x.lock();
        let Lent::Lent(lane, out @ Some(_)) = &mut g.lent else {
            return false;
        };
        if !lane.carries || carried.psn != lane.psn.sub(1) {
            return false;
        }
        // As `owe`, then as `settle_at`.
        lane.owe(owed);
        let o = out.as_ref().expect("matched above");
        let (wc, record) = self.settled(o);
        *out = None;
        drop(g);
        self.after_settled(ctx, wc, record);
        true
    }

    /// The responder's plain ACK `a` for a lent QP with nothing else to
    /// send: owed to the cell (true), for the next record to carry.
    pub(crate) fn owe(&mut self, a: LaneAck) -> bool {
        let Some(x) = lent(&self.express) else {
            return false;
        };
        if !self.resp.out.is_empty() {
            return false;
        }
        match &mut x.lock().lent {
            Lent::Lent(lane, _) if lane.carries => {
                lane.owe(a);
                true
            }
            _ => false,
        }
    }

    /// The ACK owed to the cell, back in front of the responder's queue
    /// (before anything queued since, which is newer), for the transport
    /// to send.
    pub(crate) fn unowe(&mut self) {
        let Some(x) = lent(&self.express) else {
            return;
        };
        let owed = match &mut x.lock().lent {
            Lent::Lent(lane, _) => lane.owed.take(),
            Lent::Held => None,
        };
        if let Some(a) = owed {
            self.owed_back(a);
        }
    }

    fn owed_back(&mut self, a: LaneAck) {
        self.resp.out.push_front(RespOut::Ack {
            psn: a.psn,
            syndrome: a.aeth.syndrome,
            msn: a.aeth.msn,
        });
    }

    /// The SGE regions of the WR this QP just started, for the cell.
    pub(crate) fn remember_regions(&self, ctx: &Ctx<'_>, wr: &SendWr) {
        if let (Some(x), None, [s]) = (&self.express, &wr.inline, wr.sgl.as_slice())
            && x.wanted.load(Ordering::Relaxed)
        {
            x.remember(ctx.mrs, self.pd, s.lkey);
        }
    }

    /// The QP is gone: its cell lends nothing again (its message, if
    /// any, goes with the QP, without a completion, as its WQEs do).
    /// Returns what its lent responder counted.
    pub(crate) fn revoke(&mut self) -> LentCounts {
        self.close_recvs();
        let Some(x) = self.express.take() else {
            return LentCounts::default();
        };
        let lent = std::mem::take(&mut x.lock().lent);
        x.lent.store(false, Ordering::Release);
        lent.resp_counts()
    }

    /// Takes the responder back if it is lent (the requester stays lent):
    /// before the transport reads or changes its state.
    pub(crate) fn reclaim_responder(&mut self, ctx: &mut Ctx<'_>) {
        let Some(x) = lent(&self.express) else { return };
        let r = match &mut x.lock().lent {
            Lent::Lent(lane, _) => lane.resp.take(),
            Lent::Held => None,
        };
        if let Some(r) = r {
            self.take_responder_back(ctx, r);
        }
    }

    /// The responder's state and counters from the cell, back in the
    /// transport's.
    fn take_responder_back(&mut self, ctx: &mut Ctx<'_>, r: RespLane) {
        self.resp.psn = r.psn;
        self.resp.msn = r.msn;
        r.counts.fold(ctx.stats);
    }

    /// What the lent responder counted since the lend (not yet in the
    /// endpoint's statistics).
    pub(crate) fn lent_counts(&self) -> LentCounts {
        lent(&self.express).map_or_else(LentCounts::default, |x| x.lock().lent.resp_counts())
    }
}

/// A QP's cell if its requester is lent: the flag, no lock (see
/// [`Express`]). A function of the field alone, so the QP's other fields
/// stay free to change while it is held.
fn lent(express: &Option<Arc<Express>>) -> Option<&Arc<Express>> {
    express.as_ref().filter(|x| x.lent.load(Ordering::Acquire))
}

/// The statistics of a record sent (counted when the transport learns of
/// it: settled or reclaimed).
fn count_sent(ctx: &mut Ctx<'_>, record: u32) {
    ctx.stats.tx_packets += 1;
    ctx.stats.tx_bytes += u64::from(record);
    ctx.stats.tx_direct += 1;
    ctx.stats.tx_express += 1;
}
