//! Completer: handles ACKs, NAKs, READ responses and atomic ACKs on an RC
//! requester (IBTA 9.7.5.1-9.7.5.2, rxe_comp.c).
//!
//! WQEs complete in order. A coalesced ACK completes every SEND/WRITE up to its
//! PSN; an ACK that passes a READ or atomic whose response never came is an
//! implicit NAK and triggers go-back-N.

use super::{Ctx, Qp};
use crate::types::{QpState, WcStatus, WrOpcode};
use core::time::Duration;
use softrdma_wire::{NakCode, Operation, Packet, Psn, Syndrome, rnr_timer_ns};

impl Qp {
    /// Entry point for response packets (RC only; the caller checked the type).
    pub(crate) fn handle_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) {
        debug_assert!(!self.is_lent(), "QP {:#x}: its requester is lent", self.qpn);
        if !matches!(self.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
            ctx.stats.drop_bad_state += 1;
            return;
        }
        let psn = pkt.hdr.bth.psn;
        // A response for a PSN never sent (or long acknowledged) is stale.
        if !psn.before(self.req.high) || psn.before(self.req.una) {
            ctx.stats.drop_out_of_seq += 1;
            return;
        }
        match pkt.info.operation {
            Operation::Acknowledge => {
                let Some(aeth) = pkt.hdr.aeth else { return };
                self.on_aeth(ctx, psn, aeth.syndrome);
            }
            Operation::ReadResponse if pkt.info.peer => self.on_peer_read_response(ctx, mem, pkt),
            Operation::ReadResponse => self.on_read_response(ctx, mem, pkt),
            Operation::AtomicAcknowledge => {
                let orig = pkt.hdr.atomic_ack.unwrap_or(0);
                if let Some(aeth) = pkt.hdr.aeth
                    && !matches!(aeth.syndrome, Syndrome::Ack { .. })
                {
                    self.on_aeth(ctx, psn, aeth.syndrome);
                    return;
                }
                self.on_atomic_ack(ctx, mem, psn, orig);
            }
            _ => ctx.stats.drop_bad_state += 1,
        }
    }

    fn on_aeth(&mut self, ctx: &mut Ctx<'_>, psn: Psn, syn: Syndrome) {
        match syn {
            Syndrome::Ack { .. } => {
                self.ack_through(ctx, psn);
            }
            Syndrome::RnrNak { timer } => {
                ctx.stats.rx_rnr_nak += 1;
                // Everything before the NAKed packet arrived.
                if !self.ack_through(ctx, psn.sub(1)) {
                    return;
                }
                if self.req.rnr_left == 0 {
                    self.fail_front(ctx, WcStatus::RnrRetryExcErr);
                    return;
                }
                if self.req.rnr_left != 7 {
                    self.req.rnr_left -= 1;
                }
                self.timers.retrans = None;
                self.timers.rnr = Some(ctx.now + Duration::from_nanos(rnr_timer_ns(timer)));
            }
            Syndrome::Nak(code) => {
                ctx.stats.rx_nak += 1;
                if !self.ack_through(ctx, psn.sub(1)) {
                    return;
                }
                match code {
                    // While an RNR back-off is pending, a sequence NAK at the
                    // PSN it will resume from is the responder dropping the
                    // packets pipelined behind the RNR-NAKed one (rxe sends
                    // it): the RNR retry resends them anyway. Counting it as
                    // a transport retry would exhaust retry_cnt (a count
                    // here, infinite at 7 in rxe) on every RNR cycle.
                    NakCode::PsnSequence if self.timers.rnr.is_some() && psn == self.req.una => {}
                    NakCode::PsnSequence => self.retry(ctx, false),
                    NakCode::InvalidRequest => self.fail_front(ctx, WcStatus::RemInvReqErr),
                    NakCode::RemoteAccess => self.fail_front(ctx, WcStatus::RemAccessErr),
                    _ => self.fail_front(ctx, WcStatus::RemOpErr),
                }
            }
            Syndrome::Reserved(_) => ctx.stats.drop_malformed += 1,
        }
    }

    /// Completes SEND/WRITE WQEs whose last PSN is at or before `psn`.
    ///
    /// Returns false if it found a READ/atomic the ACK passed without its
    /// response (an implicit NAK: it then retried) — callers stop there.
    fn ack_through(&mut self, ctx: &mut Ctx<'_>, psn: Psn) -> bool {
        while let Some(w) = self.sq.front() {
            if !w.started {
                break;
            }
            if w.wr.opcode.is_read_or_atomic() {
                // Only PSNs at or past `una` can be missing responses. A NAK
                // for a PSN inside a READ whose earlier responses arrived
                // (e.g. the MR vanished mid-stream) acknowledges through
                // una - 1: that is not an implicit NAK but the NAK of this
                // READ, which the caller reports (rxe check_psn: NAK PSN ==
                // comp.psn -> check_ack).
                if !psn.before(w.first_psn) && !psn.before(self.req.una) {
                    self.progress(ctx, w.first_psn);
                    self.retry(ctx, false);
                    return false;
                }
                break;
            }
            if w.last_psn.after(psn) {
                break;
            }
            self.complete_front(ctx, WcStatus::Success);
        }
        if !psn.before(self.req.una) {
            self.progress(ctx, psn.add(1));
        }
        true
    }

    /// Records that everything before `una` is acknowledged: resets the retry
    /// counters (IBTA 9.7.5.2.8) and restarts or stops the retransmit timer.
    pub(super) fn progress(&mut self, ctx: &mut Ctx<'_>, una: Psn) {
        if una.after(self.req.una) {
            self.req.una = una;
            self.req.retry_started = false;
            self.req.retry_left = self.attr.retry_cnt;
            self.req.rnr_left = self.attr.rnr_retry;
            if self.req.psn.before(self.req.una) {
                // Acknowledged beyond what the rewound requester would resend.
                self.rewind(ctx);
            }
        }
        self.timers.retrans = if self.req.una != self.req.high {
            self.ack_timeout_ns()
                .map(|ns| ctx.now + Duration::from_nanos(ns))
        } else {
            None
        };
    }

    /// Completes SEND/WRITE WQEs before the READ/atomic a response belongs to
    /// (a response implies the requests before it arrived), then returns the
    /// index-0 WQE if it is of kind `want` and `psn` is the next expected response.
    pub(super) fn response_target(&mut self, ctx: &mut Ctx<'_>, psn: Psn, atomic: bool) -> bool {
        while let Some(w) = self.sq.front() {
            if !w.started || w.wr.opcode.is_read_or_atomic() {
                break;
            }
            if !w.last_psn.before(psn) {
                break;
            }
            self.complete_front(ctx, WcStatus::Success);
        }
        if let Some(w) = self.sq.front()
            && w.started
            && psn.after(w.first_psn.sub(1))
            && !psn.after(w.last_psn)
        {
            // Everything before this WQE is acknowledged.
            self.progress(ctx, w.first_psn);
        }
        let Some(w) = self.sq.front() else {
            return false;
        };
        if w.started && w.wr.opcode.is_read_or_atomic() && psn.after(w.last_psn) {
            // A response to a later request: this READ/atomic's response
            // (or part of it) was lost. Retry now instead of waiting for the
            // timeout (rxe check_psn: psn > wqe.last_psn on a READ/atomic ->
            // COMPST_ERROR_RETRY).
            ctx.stats.drop_out_of_seq += 1;
            self.retry(ctx, false);
            return false;
        }
        let kind_ok = if atomic {
            w.wr.opcode.is_atomic()
        } else {
            w.wr.opcode == WrOpcode::RdmaRead
        };
        if !w.started || !kind_ok || psn != self.req.una {
            ctx.stats.drop_out_of_seq += 1;
            return false;
        }
        true
    }

    fn on_read_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) {
        let psn = pkt.hdr.bth.psn;
        if !self.response_target(ctx, psn, false) {
            return;
        }
        let mtu = u64::from(self.mtu(ctx.config));
        let w = &self.sq[0];
        if w.peer {
            // Asked for as a peer copy: only its one-packet answer completes it.
            ctx.stats.drop_malformed += 1;
            return;
        }
        let idx = psn.diff(w.first_psn) as u64;
        let off = idx * mtu;
        let expect = (u64::from(w.len) - off).min(mtu) as usize;
        if pkt.payload.len() != expect {
            ctx.stats.drop_malformed += 1;
            return;
        }
        let last = psn == w.last_psn;
        if super::scatter(ctx.mrs, mem, self.pd, &w.wr.sgl, off, pkt.payload).is_err() {
            self.fail_front(ctx, WcStatus::LocProtErr);
            return;
        }
        // Complete before recording progress, so a rewind starts past this WQE.
        if last {
            self.complete_front(ctx, WcStatus::Success);
        }
        self.progress(ctx, psn.add(1));
    }

    fn on_atomic_ack(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        psn: Psn,
        orig: u64,
    ) {
        if !self.response_target(ctx, psn, true) {
            return;
        }
        let w = &self.sq[0];
        // rxe stores the big-endian wire value in host order.
        let bytes = orig.to_ne_bytes();
        let r = super::scatter(
            ctx.mrs,
            mem,
            self.pd,
            &w.wr.sgl,
            0,
            &bytes[..w.len.min(8) as usize],
        );
        if r.is_err() {
            self.fail_front(ctx, WcStatus::LocProtErr);
            return;
        }
        self.complete_front(ctx, WcStatus::Success);
        self.progress(ctx, psn.add(1));
    }
}
