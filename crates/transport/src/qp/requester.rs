//! Requester: turns send WQEs into request packets (IBTA 9.7.4; rxe_req.c).
//!
//! Segmentation at the path MTU, PSN assignment, AckReq every last/only packet
//! and at least every [`MAX_PKT_PER_ACK`] packets, the send window (128 PSNs
//! unless configured), READ/atomic credits and fences, and go-back-N rewinds.

use super::{Ctx, Path, Qp, bth};
use crate::endpoint::Transmit;
use crate::types::{GSI_QKEY, GSI_QPN, QpState, QpType, SendFlags, WcStatus, WrOpcode};
use softrdma_wire::{AtomicEth, Deth, Headers, Operation, Position, Reth, Transport, opcode_for};

/// Largest RC send window ([`crate::Config::max_unacked_psns`]): well inside
/// half the 24-bit PSN space, so PSN comparisons stay unambiguous.
const MAX_WINDOW: u32 = 1 << 20;
/// Packets between AckReq bits on long messages (rxe `RXE_MAX_PKT_PER_ACK`).
pub(crate) const MAX_PKT_PER_ACK: u32 = 64;

fn position(idx: u32, npkts: u32) -> Position {
    match (idx == 0, idx + 1 == npkts) {
        (true, true) => Position::Only,
        (true, false) => Position::First,
        (false, true) => Position::Last,
        (false, false) => Position::Middle,
    }
}

fn transport(t: QpType) -> Transport {
    match t {
        // XRC packets are built as RC ones and then marked (build_request).
        QpType::Rc | QpType::XrcSend | QpType::XrcRecv => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    }
}

/// The operation a SEND or RDMA WRITE WR is, and whether its last packet
/// carries immediate data or an IETH (`None` for other opcodes).
pub(super) fn send_or_write(op: WrOpcode) -> Option<(Operation, bool, bool)> {
    Some(match op {
        WrOpcode::Send => (Operation::Send, false, false),
        WrOpcode::SendWithImm => (Operation::Send, true, false),
        WrOpcode::SendWithInv => (Operation::Send, false, true),
        WrOpcode::RdmaWrite => (Operation::Write, false, false),
        WrOpcode::RdmaWriteWithImm => (Operation::Write, true, false),
        _ => return None,
    })
}

/// The XRC opcode of an RC opcode, if IBTA defines one.
pub(crate) fn xrc_opcode(rc: softrdma_wire::Opcode) -> Option<softrdma_wire::Opcode> {
    let x = softrdma_wire::Opcode(0xA0 | (rc.0 & 0x1F));
    match (rc.info(), x.info()) {
        (Some(r), Some(i))
            if r.transport == Transport::Rc && !r.peer && i.transport == Transport::Xrc =>
        {
            Some(x)
        }
        _ => None,
    }
}

impl Qp {
    /// Builds the next request packet, if the window, credits and fences allow.
    pub(super) fn poll_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        if self.timers.rnr.is_some() {
            return None;
        }
        let mtu = self.mtu(ctx.config);
        let window = self.window(ctx);
        self.complete_local_ops(ctx);
        loop {
            let idx = self.req.idx;
            let w = self.sq.get_mut(idx)?;
            if let Some(status) = w.error {
                // Stalled on a WQE that cannot be sent; report it once
                // everything before it has completed.
                if idx == 0 {
                    self.fail_front(ctx, status);
                }
                return None;
            }
            if w.started && crate::mw::is_local_op(w.wr.opcode) {
                // Executed already (a rewind went back over it): no packet.
                self.req.idx += 1;
                continue;
            }
            if !w.started {
                if self.state == QpState::Sqd {
                    return None;
                }
                if w.wr.flags.contains(SendFlags::FENCE) && self.req.rd_atomic > 0 {
                    return None;
                }
                if crate::mw::is_local_op(w.wr.opcode) {
                    self.run_local_op(ctx);
                    continue;
                }
                if w.wr.opcode.is_read_or_atomic() {
                    let max = u32::from(self.attr.max_rd_atomic.max(1));
                    if self.req.rd_atomic >= max {
                        return None;
                    }
                    self.req.rd_atomic += 1;
                }
                let peer = Qp::starts_as_peer(self.peer_copy, self.qp_type, w, ctx.mrs);
                // A peer-copy message is one packet whatever its length.
                let npkts = if w.wr.opcode.is_atomic() || peer {
                    1
                } else {
                    w.len.div_ceil(mtu).max(1)
                };
                w.peer = peer;
                w.started = true;
                w.npkts = npkts;
                w.first_psn = self.req.psn;
                w.last_psn = self.req.psn.add(npkts - 1);
                w.next_pkt = 0;
            }
            if self.qp_type.is_reliable() && self.req.psn.diff(self.req.una) >= window {
                return None;
            }
            if self.qp_type == QpType::Ud && w.len > mtu {
                // IBTA C10-93.1.1 lets rxe drop it silently; report it instead.
                self.complete_front(ctx, WcStatus::LocLenErr);
                continue;
            }
            match self.build_request(ctx, mem, buf, mtu) {
                Ok(Some(t)) => return Some(t),
                Ok(None) => continue,
                Err(status) => {
                    // WQEs before this one are on the wire and complete
                    // normally (or fail on their own); this one reports the
                    // error when it reaches the head, then the QP flushes.
                    // (Flushing the earlier ones first would report
                    // WR_FLUSH_ERR before the error that caused it.)
                    self.sq[self.req.idx].error = Some(status);
                    if self.req.idx == 0 {
                        self.fail_front(ctx, status);
                    }
                    return None;
                }
            }
        }
    }

    /// The RC send window in PSNs ([`crate::Config::max_unacked_psns`]).
    pub(super) fn window(&self, ctx: &Ctx<'_>) -> i32 {
        let c = ctx.config;
        let w = if self.attr.ah_attr.dest_ip().is_loopback() {
            c.loopback_unacked_psns
        } else {
            c.max_unacked_psns
        };
        w.clamp(1, MAX_WINDOW) as i32
    }

    /// Builds one packet of the WQE at `req.idx`. `Ok(None)` means the WQE was
    /// consumed without a packet (nothing left to send for it).
    fn build_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        buf: &mut Vec<u8>,
        mtu: u32,
    ) -> Result<Option<Transmit>, WcStatus> {
        debug_assert!(!self.is_lent(), "QP {:#x}: its requester is lent", self.qpn);
        let qpn = self.qpn;
        let qp_type = self.qp_type;
        let pd = self.pd;
        let idx = self.req.idx;
        if self.sq[idx].peer {
            Qp::offer_placement(ctx, mem, pd, &mut self.sq[idx]);
        }
        let w = &self.sq[idx];
        let psn = self.req.psn;
        debug_assert_eq!(
            psn,
            w.first_psn.add(w.next_pkt),
            "requester PSN out of step"
        );
        let (av, dest_qp) = match (qp_type, &w.wr.ud) {
            (QpType::Ud, Some(ud)) => (ud.av, ud.remote_qpn),
            (QpType::Ud, None) => return Err(WcStatus::LocQpOpErr),
            _ => (self.attr.ah_attr, self.attr.dest_qp_num),
        };
        let Some(path) = Path::for_av(ctx, &av) else {
            return Err(WcStatus::LocQpOpErr);
        };
        let t = transport(qp_type);
        let op = w.wr.opcode;
        let mut hdr;
        let mut payload_off = 0u64;
        let mut payload_len = 0usize;
        let consumed; // PSNs this packet consumes
        let mut peer_payload = None;
        match op {
            _ if w.peer => {
                let (h, p) = Qp::peer_request(ctx, pd, w, dest_qp, psn)?;
                hdr = h;
                payload_len = p.len();
                peer_payload = Some(p);
                consumed = 1;
            }
            WrOpcode::RdmaRead => {
                let off = u64::from(w.next_pkt) * u64::from(mtu);
                hdr = Headers::new(bth(
                    softrdma_wire::Opcode::RC_RDMA_READ_REQUEST,
                    dest_qp,
                    psn,
                ));
                hdr.reth = Some(Reth {
                    va: w.wr.remote_addr.wrapping_add(off),
                    rkey: w.wr.rkey,
                    dma_len: w.len - off as u32,
                });
                hdr.bth.ack_req = true;
                consumed = w.npkts - w.next_pkt;
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let (oc, swap_add, compare) = if op == WrOpcode::AtomicCmpAndSwp {
                    (
                        softrdma_wire::Opcode::RC_COMPARE_SWAP,
                        w.wr.swap,
                        w.wr.compare_add,
                    )
                } else {
                    (softrdma_wire::Opcode::RC_FETCH_ADD, w.wr.compare_add, 0)
                };
                hdr = Headers::new(bth(oc, dest_qp, psn));
                hdr.atomic_eth = Some(AtomicEth {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    swap_add,
                    compare,
                });
                hdr.bth.ack_req = true;
                consumed = 1;
            }
            WrOpcode::AtomicWrite => {
                hdr = Headers::new(bth(softrdma_wire::Opcode::RC_ATOMIC_WRITE, dest_qp, psn));
                hdr.reth = Some(Reth {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: w.len,
                });
                hdr.bth.ack_req = true;
                payload_len = w.len as usize;
                consumed = 1;
            }
            _ => {
                let pos = position(w.next_pkt, w.npkts);
                let (operation, imm, inv) = send_or_write(op).ok_or(WcStatus::LocQpOpErr)?;
                let (imm, inv) = (imm && pos.ends(), inv && pos.ends());
                let oc = opcode_for(t, operation, pos, imm, inv).ok_or(WcStatus::LocQpOpErr)?;
                hdr = Headers::new(bth(oc, dest_qp, psn));
                let off = u64::from(w.next_pkt) * u64::from(mtu);
                payload_off = off;
                payload_len = (u64::from(w.len) - off).min(u64::from(mtu)) as usize;
                if operation == Operation::Write && pos.starts() {
                    hdr.reth = Some(Reth {
                        va: w.wr.remote_addr.wrapping_add(off),
                        rkey: w.wr.rkey,
                        dma_len: w.len - off as u32,
                    });
                }
                if imm {
                    hdr.imm = Some(w.wr.imm_data);
                }
                if inv {
                    hdr.ieth = Some(w.wr.imm_data);
                }
                let solicited_op = operation == Operation::Send || imm;
                hdr.bth.se =
                    pos.ends() && solicited_op && w.wr.flags.contains(SendFlags::SOLICITED);
                if qp_type.is_reliable() {
                    hdr.bth.ack_req = pos.ends() || self.req.noack >= MAX_PKT_PER_ACK;
                }
                if qp_type == QpType::Ud {
                    let ud = w.wr.ud.as_ref().expect("checked above");
                    let qkey = if qpn == GSI_QPN {
                        GSI_QKEY
                    } else if ud.remote_qkey & 0x8000_0000 != 0 {
                        self.attr.qkey
                    } else {
                        ud.remote_qkey
                    };
                    hdr.deth = Some(Deth {
                        qkey,
                        resv8: 0,
                        src_qp: qpn,
                    });
                }
                consumed = 1;
            }
        }
        if qp_type == QpType::XrcSend {
            // The same operation on the XRC service (opcode 0xA0 | RC's low
            // five bits), naming the target's SRQ.
            hdr.bth.opcode = xrc_opcode(hdr.bth.opcode).ok_or(WcStatus::LocQpOpErr)?;
            hdr.xrceth = Some(w.wr.xrc_remote_srqn & 0x00FF_FFFF);
        }
        // The responder's lone ACK rides along (`lane_ack.rs`), taken only
        // once the packet is built.
        hdr.lane_ack = self.riding;
        let w = &self.sq[idx];
        let mrs = ctx.mrs;
        let inline = w.wr.inline.as_deref();
        let sgl = &w.wr.sgl;
        let t = Qp::build(ctx.config, &path, &hdr, payload_len, buf, |dst| {
            match (&peer_payload, inline) {
                (Some(p), _) => {
                    dst.copy_from_slice(p);
                    Ok(())
                }
                (None, Some(d)) => {
                    let o = payload_off as usize;
                    dst.copy_from_slice(&d[o..o + dst.len()]);
                    Ok(())
                }
                (None, None) => super::gather(mrs, mem, pd, sgl, payload_off, dst),
            }
        })
        .map_err(|_| WcStatus::LocProtErr)?;
        self.riding = None;

        // Bookkeeping after a packet was built.
        if hdr.bth.ack_req {
            self.req.noack = 0;
        } else {
            self.req.noack += 1;
        }
        if psn.before(self.req.high) {
            ctx.stats.retransmits += 1;
        }
        self.req.psn = psn.add(consumed);
        if self.req.psn.after(self.req.high) {
            self.req.high = self.req.psn;
        }
        let w = &mut self.sq[idx];
        w.next_pkt += consumed;
        if w.next_pkt >= w.npkts {
            self.req.idx += 1;
            if !qp_type.is_reliable() {
                // UC and UD complete once the last packet is on its way.
                self.complete_front(ctx, WcStatus::Success);
                self.req.una = self.req.psn;
            }
        }
        if qp_type.is_reliable()
            && self.timers.retrans.is_none()
            && let Some(ns) = self.ack_timeout_ns()
        {
            self.timers.retrans = Some(ctx.now + core::time::Duration::from_nanos(ns));
        }
        ctx.stats.tx_packets += 1;
        ctx.stats.tx_bytes += t.len as u64;
        Ok(Some(t))
    }

    /// Go-back-N: resend from the oldest unacknowledged PSN (rxe `req_retry`).
    pub(crate) fn rewind(&mut self, _ctx: &mut Ctx<'_>) {
        self.req.psn = self.req.una;
        self.req.idx = 0;
        self.req.noack = 0;
        let una = self.req.una;
        for (i, w) in self.sq.iter_mut().enumerate() {
            if !w.started {
                break;
            }
            w.next_pkt = if i == 0 {
                (una.diff(w.first_psn).max(0) as u32).min(w.npkts.saturating_sub(1))
            } else {
                0
            };
        }
        if let Some(w) = self.sq.front()
            && w.started
        {
            self.req.psn = w.first_psn.add(w.next_pkt);
        }
    }

    /// A retry after a timeout or a (possibly implicit) sequence NAK: counts
    /// against `retry_cnt` (IBTA: 7 is a count, not infinity — rxe differs) and
    /// rewinds. While a NAK-started rewind has made no progress, further NAKs
    /// are ignored; a timeout always retries.
    pub(crate) fn retry(&mut self, ctx: &mut Ctx<'_>, timeout: bool) {
        let Some(front) = self.sq.front() else {
            return;
        };
        if let Some(status) = front.error {
            self.fail_front(ctx, status);
            return;
        }
        if !front.started {
            return;
        }
        if self.req.retry_started && !timeout {
            return;
        }
        self.req.retry_started = !timeout;
        if self.req.retry_left == 0 {
            self.fail_front(ctx, WcStatus::RetryExcErr);
            return;
        }
        self.req.retry_left -= 1;
        self.rewind(ctx);
    }
}

impl Path {
    pub(crate) fn for_av(ctx: &Ctx<'_>, av: &crate::AddressVector) -> Option<Path> {
        Qp::path(ctx.config, av)
    }
}
