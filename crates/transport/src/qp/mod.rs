//! One queue pair: its attributes, queues and the three roles rxe splits a QP
//! into — requester ([`requester`]), completer ([`completer`]) and responder
//! ([`responder`]) — plus what they share: completions, the error state and
//! the flush (IBTA 10.3.1, 11.6.2).

mod completer;
mod direct;
mod express;
mod lane_ack;
mod peer;
mod recv_queue;
mod requester;
mod responder;
mod sgl;

pub(crate) use responder::ExpressReq;

use crate::attr::{AddressVector, QpAttr, QpCap};
use crate::config::Config;
use crate::cq::{Cq, CqHandle, Srq, SrqHandle};
use crate::endpoint::{Event, Transmit};
use crate::mr::{MrTable, PdHandle};
use crate::stats::Stats;
use crate::table::Table;
use crate::time::Instant;
use crate::types::{AsyncEventType, QpState, QpType, Qpn, WcStatus};
use crate::wr::{RecvWr, SendWr, Wc};
use softrdma_wire::{Bth, Headers, Psn, Syndrome, ip};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

pub use express::{Executed, Express, ExpressWr};
pub use peer::{PEER_COPY_MIN, PLACE_MAX};
pub use recv_queue::ExpressRecv;
pub(crate) use sgl::{gather, scatter};

/// The parts of the endpoint a QP works against while it runs.
pub(crate) struct Ctx<'a> {
    pub(crate) now: Instant,
    pub(crate) cqs: &'a mut Table<Cq>,
    pub(crate) srqs: &'a mut Table<Srq>,
    pub(crate) mrs: &'a MrTable,
    pub(crate) mws: &'a mut crate::mw::MwTable,
    pub(crate) events: &'a mut VecDeque<Event>,
    pub(crate) stats: &'a mut Stats,
    pub(crate) config: &'a Config,
}

/// A posted send WR plus the requester's progress through it.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub(crate) wr: SendWr,
    pub(crate) len: u32,
    pub(crate) signaled: bool,
    /// PSNs assigned (the first packet was built at least once).
    pub(crate) started: bool,
    pub(crate) first_psn: Psn,
    pub(crate) last_psn: Psn,
    pub(crate) npkts: u32,
    /// Index of the next packet to build; for a READ the first response
    /// packet the next READ request asks for.
    pub(crate) next_pkt: u32,
    /// Building a packet failed with this status (e.g. a bad lkey): nothing
    /// more is sent and the WQE completes with it once it reaches the head
    /// of the queue, after the WQEs already on the wire (rxe wqe_state_error).
    pub(crate) error: Option<WcStatus>,
    /// Carried as one peer-copy packet (`peer.rs`), decided when it started.
    pub(crate) peer: bool,
    /// A peer-copy READ's offer of placement (`peer.rs`), made when its
    /// request is first built; its ticket is revoked when dropped with the
    /// WQE.
    pub(crate) offer: Option<peer::Offer>,
    /// Issued by the device for tag matching (`responder/tm.rs`), not
    /// posted: no send completion.
    pub(crate) tm: Option<TmInternal>,
}

/// A WQE the device issues for a tag-matching SRQ's rendezvous.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TmInternal {
    /// READ of the sender's data into the matched tag's buffer.
    Read { wr_id: u64, tag: u64, app_ctx: u32 },
    /// The FIN telling the sender the READ is done.
    Fin,
}

/// Requester and completer state (IBTA 9.7.4-9.7.5).
#[derive(Debug, Default)]
pub(crate) struct ReqState {
    /// PSN of the next packet to send.
    pub(crate) psn: Psn,
    /// Oldest unacknowledged PSN.
    pub(crate) una: Psn,
    /// One past the highest PSN ever sent (to count retransmissions).
    pub(crate) high: Psn,
    /// Index into the SQ of the WQE the next packet comes from.
    pub(crate) idx: usize,
    /// Packets sent since the last AckReq.
    pub(crate) noack: u32,
    /// READ/atomic WQEs started and not completed.
    pub(crate) rd_atomic: u32,
    pub(crate) retry_left: u8,
    pub(crate) rnr_left: u8,
    /// A NAK-triggered rewind is under way and no progress was made since:
    /// further NAKs (and implicit NAKs) are ignored until then (rxe `started_retry`).
    pub(crate) retry_started: bool,
}

/// A message the responder is in the middle of.
#[derive(Debug)]
pub(crate) enum InProgress {
    Send {
        wqe: RecvWr,
        offset: u32,
        /// How a receive of a tag-matching SRQ completes.
        tm: Option<responder::TmMsg>,
    },
    Write {
        va: u64,
        resid: u32,
        rkey: u32,
        total: u32,
    },
}

/// A READ or atomic remembered so a duplicate can be answered (responder resources).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resource {
    Read {
        first_psn: Psn,
        last_psn: Psn,
        va: u64,
        rkey: u32,
        len: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
}

/// Responder output, kept in PSN order so the requester's completer never sees
/// an ACK overtake the READ response before it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RespOut {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
    },
    AtomicAck {
        psn: Psn,
        msn: u32,
        orig: u64,
    },
    Read {
        psn: Psn,
        va: u64,
        rkey: u32,
        len: u32,
        npkts: u32,
        next: u32,
        msn: u32,
        /// Answered with one peer-copy response (`peer.rs`).
        peer: bool,
        /// The responder placed the data into the requester's memory
        /// (`peer.rs`): the response names no range.
        placed: bool,
    },
}

impl RespOut {
    /// The last PSN this output answers.
    pub(crate) fn last_psn(&self) -> Psn {
        match *self {
            Self::Ack { psn, .. } | Self::AtomicAck { psn, .. } => psn,
            Self::Read { psn, npkts, .. } => psn.add(npkts.saturating_sub(1)),
        }
    }
}

/// Responder state (IBTA 9.7.5).
#[derive(Debug, Default)]
pub(crate) struct RespState {
    /// Expected PSN.
    pub(crate) psn: Psn,
    pub(crate) msn: u32,
    pub(crate) sent_psn_nak: bool,
    /// The PSN of a SEND that found no receive posted, whose RNR NAK is held
    /// back (`Config::rnr_hold_ns`).
    pub(crate) rnr_held: Option<Psn>,
    pub(crate) cur: Option<InProgress>,
    /// UC: a receive WQE whose message was lost, reused for the next one.
    pub(crate) spare: Option<RecvWr>,
    pub(crate) res: VecDeque<Resource>,
    pub(crate) out: VecDeque<RespOut>,
}

#[derive(Debug, Default)]
pub(crate) struct Timers {
    pub(crate) retrans: Option<Instant>,
    pub(crate) rnr: Option<Instant>,
    /// Responder: when a held RNR NAK ([`RespState::rnr_held`]) goes out.
    pub(crate) rnr_hold: Option<Instant>,
    /// When a requester lent to its express cell is taken back (one ACK
    /// timeout after the lending: `express.rs`).
    pub(crate) lease: Option<Instant>,
}

/// A queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    pub(crate) qpn: Qpn,
    pub(crate) qp_type: QpType,
    pub(crate) state: QpState,
    pub(crate) pd: PdHandle,
    pub(crate) send_cq: CqHandle,
    pub(crate) recv_cq: CqHandle,
    pub(crate) srq: Option<SrqHandle>,
    pub(crate) sq_sig_all: bool,
    pub(crate) cap: QpCap,
    pub(crate) attr: QpAttr,
    pub(crate) sq: VecDeque<SendWqe>,
    pub(crate) rq: recv_queue::RecvQueue,
    pub(crate) req: ReqState,
    pub(crate) resp: RespState,
    pub(crate) timers: Timers,
    /// In the endpoint's ready list.
    pub(crate) scheduled: bool,
    /// The deadline the endpoint's timer heap holds for this QP (its
    /// `next_timeout` when last told), so an unchanged one costs no lookup.
    pub(crate) timer_told: Option<Instant>,
    /// The peer QP is in a process of this host reached through a
    /// shared-memory lane that can copy from ours and we from its: large
    /// SENDs, WRITEs and READs go as one peer-copy packet (`peer.rs`).
    pub(crate) peer_copy: bool,
    /// The ACK the request being built carries (`lane_ack.rs`).
    pub(crate) riding: Option<softrdma_wire::LaneAck>,
    /// WQEs of `sq` the device issued itself (`TmInternal`): they take no
    /// room the application posted for.
    pub(crate) internal_wqes: usize,
    pub(crate) comm_est_sent: bool,
    /// XRC receive QPs: the XRC domain whose SRQs it delivers to.
    pub(crate) xrcd: Option<u32>,
    /// The express cell a driver asked for (`express.rs`).
    pub(crate) express: Option<std::sync::Arc<Express>>,
}

/// Which local address and path a packet of this QP uses.
pub(crate) struct Path {
    pub(crate) src_ip: IpAddr,
    pub(crate) dst: SocketAddr,
}

impl Qp {
    // One argument per creation attribute, as the endpoint hands them over.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        qpn: Qpn,
        qp_type: QpType,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        srq: Option<SrqHandle>,
        cap: QpCap,
        sq_sig_all: bool,
    ) -> Qp {
        Qp {
            qpn,
            qp_type,
            state: QpState::Reset,
            pd,
            send_cq,
            recv_cq,
            srq,
            sq_sig_all,
            cap,
            attr: QpAttr {
                cap,
                ..QpAttr::default()
            },
            sq: VecDeque::new(),
            rq: recv_queue::RecvQueue::default(),
            req: ReqState::default(),
            resp: RespState::default(),
            timers: Timers::default(),
            scheduled: false,
            timer_told: None,
            comm_est_sent: false,
            peer_copy: false,
            riding: None,
            internal_wqes: 0,
            xrcd: None,
            express: None,
        }
    }

    /// Path MTU in bytes (UD uses the port MTU).
    pub(crate) fn mtu(&self, config: &Config) -> u32 {
        match self.qp_type {
            QpType::Ud => config.limits.port_mtu.bytes(),
            _ => self.attr.path_mtu.bytes(),
        }
    }

    /// Local source address and remote destination for an address vector.
    pub(crate) fn path(config: &Config, av: &AddressVector) -> Option<Path> {
        let src_ip = *config.gids.get(usize::from(av.sgid_index))?;
        let dst_ip = av.dest_ip();
        Some(Path {
            src_ip,
            dst: SocketAddr::new(dst_ip, config.dest_port),
        })
    }

    /// Builds a packet into `buf`: headers, `payload_len` bytes filled by `fill`,
    /// pad, ICRC. `fill` may refuse (local protection error), in which case nothing
    /// is returned.
    pub(crate) fn build<E>(
        config: &Config,
        path: &Path,
        hdr: &Headers,
        payload_len: usize,
        buf: &mut Vec<u8>,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<Transmit, E> {
        let mut h = *hdr;
        h.bth.pad = softrdma_wire::pad_for(payload_len);
        let hl = h.wire_len().expect("transport only builds known opcodes");
        let pad = usize::from(h.bth.pad);
        let total = hl + payload_len + pad + softrdma_wire::ICRC_LEN;
        // The payload is overwritten by `fill`; zero only the rest (a reused
        // buffer's old bytes would otherwise leak into reserved fields and the
        // pad), instead of the whole packet as `clear` + `resize` would.
        buf.resize(total, 0);
        buf[..hl].fill(0);
        buf[hl + payload_len..].fill(0);
        h.write(buf).expect("buffer sized for the headers");
        fill(&mut buf[hl..hl + payload_len])?;
        if config.fill_icrc {
            fill_icrc(config, path.src_ip, path.dst, buf);
        }
        Ok(Transmit {
            src_ip: path.src_ip,
            dst: path.dst,
            len: total,
        })
    }

    /// Queues a completion; false if the CQ overflowed (the caller moves the
    /// QP to ERR), unless the CQ ignores overruns: then the completion is
    /// dropped (counted) and the QP carries on.
    pub(crate) fn push_wc(ctx: &mut Ctx<'_>, cq: CqHandle, mut wc: Wc, solicited: bool) -> bool {
        let Some(c) = ctx.cqs.get(cq.0) else {
            return false;
        };
        wc.timestamp = ctx.now;
        match c.push(wc, solicited) {
            Ok(fire) => {
                if fire {
                    ctx.events.push_back(Event::CompletionNotify(cq));
                }
                true
            }
            Err(_) => {
                ctx.stats.cq_overflows += 1;
                if c.ignore_overrun {
                    // Lost without an error, as the application asked.
                    return true;
                }
                ctx.events
                    .push_back(Event::CqAsync(cq, AsyncEventType::CqErr));
                false
            }
        }
    }

    /// Completes the send WQE at the front of the SQ with `status` and removes it.
    pub(crate) fn complete_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        let Some(w) = self.sq.pop_front() else {
            return;
        };
        self.req.idx = self.req.idx.saturating_sub(1);
        if w.wr.opcode.is_read_or_atomic() && w.started {
            self.req.rd_atomic = self.req.rd_atomic.saturating_sub(1);
        }
        if let Some(tm) = w.tm {
            self.internal_wqes = self.internal_wqes.saturating_sub(1);
            self.complete_internal(ctx, &w, tm, status);
            return;
        }
        if status == WcStatus::Success && !(w.signaled || self.sq_sig_all) {
            return;
        }
        let mut wc = Wc::new(w.wr.wr_id, status, w.wr.opcode.wc_opcode(), self.qpn);
        wc.byte_len = w.len;
        // rxe make_send_cqe flags the sender's completion of an operation
        // with immediate data too (the value itself is not reported).
        if matches!(
            w.wr.opcode,
            crate::WrOpcode::SendWithImm | crate::WrOpcode::RdmaWriteWithImm
        ) {
            wc.wc_flags = crate::WcFlags::WITH_IMM;
        }
        if !Self::push_wc(ctx, self.send_cq, wc, false) && status != WcStatus::WrFlushErr {
            self.enter_error(ctx);
        }
    }

    /// Completes the front WQE with an error status and moves the QP to ERR.
    pub(crate) fn fail_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        self.complete_front(ctx, status);
        self.enter_error(ctx);
    }

    /// Moves to ERR: every outstanding WR completes with WR_FLUSH_ERR (IBTA 10.3.1.2
    /// / rxe), timers stop, and only NAKs already queued are still sent.
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        if self.state == QpState::Err {
            return;
        }
        // Its message, if lent, is flushed with the others.
        self.reclaim(ctx);
        self.state = QpState::Err;
        self.gate_recvs();
        self.flush(ctx);
        // The SRQ "last WQE reached" event comes once, on entering ERR: flush()
        // also runs for every WR posted to a QP already in ERR.
        if self.srq.is_some() {
            ctx.events
                .push_back(Event::QpAsync(self.qpn, AsyncEventType::QpLastWqeReached));
        }
        self.timers = Timers::default();
        self.resp.out.retain(|o| {
            matches!(
                o,
                RespOut::Ack {
                    syndrome: Syndrome::Nak(_),
                    ..
                }
            )
        });
    }

    /// Completes everything still queued with WR_FLUSH_ERR.
    pub(crate) fn flush(&mut self, ctx: &mut Ctx<'_>) {
        while !self.sq.is_empty() {
            self.complete_front(ctx, WcStatus::WrFlushErr);
        }
        self.req.idx = 0;
        self.req.rd_atomic = 0;
        let mut recv: Vec<RecvWr> = Vec::new();
        if let Some(InProgress::Send { wqe, .. }) = self.resp.cur.take() {
            recv.push(wqe);
        }
        if let Some(w) = self.resp.spare.take() {
            recv.push(w);
        }
        recv.extend(self.rq.take_all());
        for w in recv {
            let wc = Wc::new(
                w.wr_id,
                WcStatus::WrFlushErr,
                crate::WcOpcode::Recv,
                self.qpn,
            );
            Self::push_wc(ctx, self.recv_cq, wc, false);
        }
    }

    /// Back to RESET: queues emptied without completions, all state cleared.
    pub(crate) fn reset(&mut self) {
        self.state = QpState::Reset;
        self.gate_recvs();
        self.sq.clear();
        self.internal_wqes = 0;
        self.rq.take_all();
        self.req = ReqState::default();
        self.resp = RespState::default();
        self.timers = Timers::default();
        self.comm_est_sent = false;
    }

    /// Takes a receive WQE from the SRQ or the RQ.
    pub(crate) fn take_recv_wqe(&mut self, ctx: &mut Ctx<'_>) -> Option<RecvWr> {
        if let Some(w) = self.resp.spare.take() {
            return Some(w);
        }
        match self.srq {
            Some(h) => {
                let srq = ctx.srqs.get_mut(h.0)?;
                let w = srq.wqes.pop_front()?;
                if srq.limit > 0 && (srq.wqes.len() as u32) < srq.limit {
                    srq.limit = 0;
                    ctx.events
                        .push_back(Event::SrqAsync(h, AsyncEventType::SrqLimitReached));
                }
                Some(w)
            }
            None => self.rq.pop_front(),
        }
    }

    /// A receive completion; moves to ERR if the CQ overflowed.
    pub(crate) fn complete_recv(&mut self, ctx: &mut Ctx<'_>, wc: Wc, solicited: bool) {
        // A tag-matching SRQ's receives complete on its own CQ.
        let cq = self
            .srq
            .and_then(|h| ctx.srqs.get(h.0))
            .and_then(|s| s.tm.as_ref())
            .map_or(self.recv_cq, |t| t.cq);
        if !Self::push_wc(ctx, cq, wc, solicited) && wc.status != WcStatus::WrFlushErr {
            self.enter_error(ctx);
        }
    }

    /// Whether any timer is armed, and the earliest.
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        // Each `None` made "never" before any comparison: comparing the
        // options themselves let the compiler branch on a `None`'s undefined
        // payload (valgrind's memcheck failed the C ABI run on it).
        let ns = |t: Option<Instant>| t.map_or(u64::MAX, Instant::as_nanos);
        let t = &self.timers;
        let first = ns(t.retrans)
            .min(ns(t.rnr))
            .min(ns(t.rnr_hold))
            .min(ns(t.lease));
        (first != u64::MAX).then(|| Instant::from_nanos(first))
    }

    /// Local ACK timeout: 4.096 µs × 2^timeout; `None` for timeout 0 (infinite).
    pub(crate) fn ack_timeout_ns(&self) -> Option<u64> {
        match self.attr.timeout {
            0 => None,
            t => Some(4096u64 << t.min(31)),
        }
    }

    /// Produces the next packet this QP wants to send, if any.
    pub(crate) fn poll_transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        // A lone ACK rides the next request if there is one (`lane_ack.rs`).
        if matches!(self.state, QpState::Rts | QpState::Sqd)
            && let Some(ack) = self.lone_lane_ack(ctx.config)
            && let Some(t) = self.poll_request_carrying(ctx, mem, buf, ack)
        {
            return Some(t);
        }
        if let Some(t) = self.poll_response(ctx, mem, buf) {
            return Some(t);
        }
        match self.state {
            QpState::Rts | QpState::Sqd => self.poll_request(ctx, mem, buf),
            _ => None,
        }
    }

    /// Handles timer expiries at `now`.
    pub(crate) fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        // First: a message taken back has its retransmission timer below.
        if self.timers.lease.is_some_and(|t| t <= now) {
            self.reclaim(ctx);
        }
        if self.timers.rnr.is_some_and(|t| t <= now) {
            self.timers.rnr = None;
            self.rewind(ctx);
        }
        if self.timers.rnr_hold.is_some_and(|t| t <= now) {
            self.timers.rnr_hold = None;
            self.release_rnr_nak(ctx);
        }
        if self.timers.retrans.is_some_and(|t| t <= now) {
            self.timers.retrans = None;
            if self.req.una != self.req.psn {
                ctx.stats.timeouts += 1;
                self.retry(ctx, true);
            }
        }
    }

    /// Signals communication established once, on the first packet in RTR.
    pub(crate) fn note_rx(&mut self, ctx: &mut Ctx<'_>) {
        if self.state == QpState::Rtr && !self.comm_est_sent {
            self.comm_est_sent = true;
            ctx.events
                .push_back(Event::QpAsync(self.qpn, AsyncEventType::CommEst));
        }
    }
}

/// Writes the ICRC into the last four bytes of `pkt`, for a datagram sent from
/// `src_ip:local_port` to `dst` with IPv4 ID 0 and DF (what Linux puts on the wire
/// for an unconnected socket with PMTU discovery).
pub(crate) fn fill_icrc(config: &Config, src_ip: IpAddr, dst: SocketAddr, pkt: &mut [u8]) {
    fill_icrc_between(SocketAddr::new(src_ip, config.local_port), dst, pkt);
}

/// Writes the ICRC of a RoCEv2 packet (BTH .. ICRC) that goes from `src` to
/// `dst`, as Linux sends it from an unconnected socket (IPv4 ID 0, DF).
///
/// # Panics
///
/// If `pkt` is shorter than a BTH plus the ICRC.
pub fn fill_icrc_between(src: SocketAddr, dst: SocketAddr, pkt: &mut [u8]) {
    let (iph, ipl) = ip_header_for_icrc(src.ip(), dst.ip(), pkt.len());
    let udp = ip::udp_header(src.port(), dst.port(), pkt.len());
    softrdma_wire::icrc::fill(&iph[..ipl], &udp, pkt).expect("packet at least BTH+ICRC long");
}

/// The IP header a datagram carries, for the ICRC (masked fields left zero).
pub(crate) fn ip_header_for_icrc(
    src: IpAddr,
    dst: IpAddr,
    udp_payload: usize,
) -> ([u8; 40], usize) {
    let mut out = [0u8; 40];
    let udp_len = ip::UDP_HDR_LEN + udp_payload;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = ip::ipv4_header(
                &ip::Ipv4Fields {
                    src: s,
                    dst: d,
                    id: 0,
                    tos: 0,
                    ttl: 0,
                    df: true,
                },
                udp_len,
            );
            out[..20].copy_from_slice(&h);
            (out, 20)
        }
        (s, d) => {
            let h = ip::ipv6_header(ip::to_v6(s), ip::to_v6(d), 0, 0, 0, udp_len);
            out.copy_from_slice(&h);
            (out, 40)
        }
    }
}

/// A BTH for this QP's peer.
pub(crate) fn bth(opcode: softrdma_wire::Opcode, dest_qp: Qpn, psn: Psn) -> Bth {
    Bth::new(opcode, dest_qp, psn)
}
