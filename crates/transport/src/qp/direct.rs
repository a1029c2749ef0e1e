//! Direct records on a same-host lane ([`softrdma_wire::direct`]).
//!
//! A post to an idle RC QP whose peer is on a lane (`peer_copy`), of a SEND
//! or RDMA WRITE that fits one small packet, is started at once and handed
//! back to the engine as a direct record, which pushes it into the peer's
//! lane before it lets go of the post. It is the same message as the packet
//! it stands for: it takes the next PSN, arms the retransmission timer and
//! may carry the responder's lone ACK ([`Qp::lone_lane_ack`]); the receiver
//! turns it back into that packet and handles it as any other. What it
//! saves is the way there: the transmit queue, the packet build and the
//! engine's batch on the sender, the parse on the receiver (BENCHMARKS.md,
//! "Direct records"). Anything else about the message is the transport's:
//! a record that is lost (a full lane, a link not attached) is sent again
//! by the retransmission timer as a packet, duplicates and RNR NAKs are
//! handled by PSN as on the wire.

use super::{Ctx, Qp};
use crate::types::SendFlags;
use crate::types::{QpState, QpType};
use softrdma_wire::direct::{DIRECT_MAX_LEN, fits, write_header};
use softrdma_wire::{Headers, Operation, Position, Reth, Transport, opcode_for};

impl Qp {
    /// Starts the only WQE of this QP's send queue as a direct record in
    /// `out` if it may go as one, and returns the record's length;
    /// otherwise changes nothing (the WQE waits for `poll_transmit`).
    pub(crate) fn start_direct(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        out: &mut [u8; DIRECT_MAX_LEN],
    ) -> Option<usize> {
        let idle = self.sq.len() == 1 && self.req.idx == 0 && self.req.psn == self.req.una;
        if !(ctx.config.direct
            && self.peer_copy
            && self.qp_type == QpType::Rc
            && self.state == QpState::Rts
            && idle
            && self.timers.rnr.is_none()
            && self.riding.is_none()
            && self.window(ctx) > 0)
        {
            return None;
        }
        let w = &self.sq[0];
        if w.started || w.error.is_some() || w.len > self.mtu(ctx.config) {
            return None;
        }
        // The one packet's opcode, as the requester picks it.
        let (operation, imm, inv) = super::requester::send_or_write(w.wr.opcode)?;
        let opcode = opcode_for(Transport::Rc, operation, Position::Only, imm, inv)?;
        let send = operation == Operation::Send;
        let psn = self.req.psn;
        let mut hdr = Headers::new(super::bth(opcode, self.attr.dest_qp_num, psn));
        hdr.bth.ack_req = true;
        if imm {
            hdr.imm = Some(w.wr.imm_data);
        }
        if inv {
            hdr.ieth = Some(w.wr.imm_data);
        }
        if !send {
            hdr.reth = Some(Reth {
                va: w.wr.remote_addr,
                rkey: w.wr.rkey,
                dma_len: w.len,
            });
        }
        let solicited_op = send || hdr.imm.is_some();
        hdr.bth.se = solicited_op && w.wr.flags.contains(SendFlags::SOLICITED);
        let ack = self.lone_lane_ack(ctx.config);
        hdr.lane_ack = ack;
        let len = w.len as usize;
        if !fits(&hdr, len) {
            return None;
        }
        let (n, payload) = write_header(&hdr, len, out);
        let dst = &mut out[payload];
        match w.wr.inline.as_deref() {
            Some(d) => dst.copy_from_slice(&d[..len]),
            // A local protection error is the packet path's to report.
            None => super::gather(ctx.mrs, mem, self.pd, &w.wr.sgl, 0, dst).ok()?,
        }
        // Committed: the record is the WQE's one packet, and the ACK it
        // carries leaves the responder's queue.
        if ack.is_some() {
            self.resp.out.pop_front();
        }
        let w = &mut self.sq[0];
        w.started = true;
        w.npkts = 1;
        w.next_pkt = 1;
        w.first_psn = psn;
        w.last_psn = psn;
        self.req.psn = psn.add(1);
        if self.req.psn.after(self.req.high) {
            self.req.high = self.req.psn;
        }
        self.req.idx = 1;
        self.req.noack = 0;
        if self.timers.retrans.is_none()
            && let Some(ns) = self.ack_timeout_ns()
        {
            self.timers.retrans = Some(ctx.now + core::time::Duration::from_nanos(ns));
        }
        ctx.stats.tx_packets += 1;
        ctx.stats.tx_bytes += n as u64;
        ctx.stats.tx_direct += 1;
        Some(n)
    }

    /// After [`Qp::start_direct`]: whether the QP has nothing to send,
    /// neither answers (all of them wait in `resp.out`) nor requests (every
    /// WQE started, and each of its packets sent).
    pub(crate) fn owes_nothing(&self) -> bool {
        self.resp.out.is_empty()
            && self.req.idx >= self.sq.len()
            && self.sq.iter().all(|w| w.next_pkt >= w.npkts)
    }
}
