//! Direct records on a same-host lane ([`softrdma_wire::direct`]).
//!
//! A post to an idle RC QP whose peer is on a lane (`peer_copy`), of a SEND
//! or RDMA WRITE that fits one small packet, or of an RDMA READ below peer
//! copy's size (its request is one packet whatever its length), is started
//! at once and handed back to the engine as a direct record, which pushes it
//! into the peer's lane before it lets go of the post. It is the same message as the packet
//! it stands for: it takes the next PSN, arms the retransmission timer and
//! may carry the responder's lone ACK ([`Qp::lone_lane_ack`]); the receiver
//! turns it back into that packet and handles it as any other. What it
//! saves is the way there: the transmit queue, the packet build and the
//! engine's batch on the sender, the parse on the receiver (BENCHMARKS.md,
//! "Direct records"). Anything else about the message is the transport's:
//! a record that is lost (a full lane, a link not attached) is sent again
//! by the retransmission timer as a packet, duplicates and RNR NAKs are
//! handled by PSN as on the wire.
//!
//! The responder answers a READ of one packet's worth (up to
//! [`softrdma_wire::direct::DIRECT_MAX_PAYLOAD`] bytes) with a response
//! record in the same way ([`Qp::answers_in_record`]): same PSN, AETH and
//! bytes; a lost one is a lost response, which the requester's timeout
//! repairs by asking again.

use super::{Ctx, Qp};
use crate::endpoint::Transmit;
use crate::types::{QpState, QpType};
use crate::types::{SendFlags, WrOpcode};
use softrdma_wire::direct::{DIRECT_MAX_LEN, fits, write_header};
use softrdma_wire::{Headers, Opcode, Operation, Position, Reth, Transport, opcode_for};

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
        debug_assert!(!self.is_lent(), "QP {:#x}: its requester is lent", self.qpn);
        let idle = self.sq.len() == 1 && self.req.idx == 0 && self.req.psn == self.req.una;
        if !(self.takes_records(ctx)
            && self.state == QpState::Rts
            && idle
            && self.timers.rnr.is_none()
            && self.riding.is_none()
            && self.window(ctx) > 0)
        {
            return None;
        }
        let mtu = self.mtu(ctx.config);
        let w = &self.sq[0];
        let read = w.wr.opcode == WrOpcode::RdmaRead;
        if w.started || w.error.is_some() || (!read && w.len > mtu) {
            return None;
        }
        // A READ request is one packet whatever its length; its responses
        // take a PSN each. It takes a slot of `max_rd_atomic`, as
        // `poll_request` gives it, and a large one goes by peer copy.
        let rd_max = u32::from(self.attr.max_rd_atomic.max(1));
        if read
            && (self.req.rd_atomic >= rd_max
                || Qp::starts_as_peer(self.peer_copy, self.qp_type, w, ctx.mrs))
        {
            return None;
        }
        // The one packet's opcode, as the requester picks it.
        let (operation, imm, inv) = if read {
            (Operation::ReadRequest, false, false)
        } else {
            super::requester::send_or_write(w.wr.opcode)?
        };
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
        let len = if read { 0 } else { w.len as usize };
        if !fits(&hdr, len) {
            return None;
        }
        let (n, payload) = write_header(&hdr, len, out);
        let dst = &mut out[payload];
        match w.wr.inline.as_deref() {
            _ if read => {}
            Some(d) => dst.copy_from_slice(&d[..len]),
            // A local protection error is the packet path's to report.
            None => super::gather(ctx.mrs, mem, self.pd, &w.wr.sgl, 0, dst).ok()?,
        }
        // The PSNs it takes: one, or a READ's responses.
        let npkts = if read { w.len.div_ceil(mtu).max(1) } else { 1 };
        // Committed: the record is the WQE's one packet, and the ACK it
        // carries leaves the responder's queue.
        if ack.is_some() {
            self.resp.out.pop_front();
        }
        let w = &mut self.sq[0];
        w.started = true;
        w.peer = false;
        w.npkts = npkts;
        w.next_pkt = npkts;
        w.first_psn = psn;
        w.last_psn = psn.add(npkts - 1);
        if read {
            self.req.rd_atomic += 1;
        }
        self.req.psn = psn.add(npkts);
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
        self.remember_regions(ctx, &self.sq[0].wr);
        Some(n)
    }

    /// Whether this QP's messages may go as direct records: records on, an
    /// RC QP whose peer is on a lane.
    fn takes_records(&self, ctx: &Ctx<'_>) -> bool {
        ctx.config.direct && self.peer_copy && self.qp_type == QpType::Rc
    }

    /// Whether the response with headers `h` and `len` bytes of payload
    /// goes to the peer as a direct record: a one-packet READ response of
    /// an RC QP whose peer is on a lane, records on. Ahead of the record
    /// there is nothing to interleave with: responses leave in PSN order
    /// from `resp.out`, records or packets alike.
    pub(crate) fn answers_in_record(&self, ctx: &Ctx<'_>, h: &Headers, len: u32) -> bool {
        self.takes_records(ctx)
            && h.bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY
            && fits(h, len as usize)
    }

    /// The READ response at the front of `resp.out` (the QP's next
    /// response) into `buf` as a response record, taken off the queue as
    /// `poll_response` takes it, if it goes as one: a READ of one packet's
    /// worth that [`Qp::answers_in_record`] would send as a record. A
    /// region that fails its check gives the NAK that takes its place
    /// instead, as `poll_response` would.
    pub(crate) fn direct_answer(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let one = matches!(
            self.resp.out.front(),
            Some(super::RespOut::Read {
                len,
                npkts: 1,
                next: 0,
                peer: false,
                ..
            }) if *len as usize <= softrdma_wire::direct::DIRECT_MAX_PAYLOAD
        );
        if !(one && self.takes_records(ctx)) {
            return None;
        }
        self.poll_response(ctx, mem, buf)
    }

    /// Writes the direct record for a packet with headers `hdr` into `buf`
    /// (`fill` writes its payload), as [`Qp::build`] writes the packet.
    pub(crate) fn build_record<E>(
        path: &super::Path,
        hdr: &Headers,
        payload_len: usize,
        buf: &mut Vec<u8>,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<Transmit, E> {
        buf.resize(DIRECT_MAX_LEN, 0);
        let out: &mut [u8; DIRECT_MAX_LEN] = (&mut buf[..DIRECT_MAX_LEN])
            .try_into()
            .expect("sized above");
        let (n, payload) = write_header(hdr, payload_len, out);
        fill(&mut out[payload])?;
        Ok(Transmit {
            src_ip: path.src_ip,
            dst: path.dst,
            len: n,
        })
    }

    /// After [`Qp::start_direct`]: whether the QP has nothing to send,
    /// neither answers (all of them wait in `resp.out`) nor requests (every
    /// WQE started, and each of its packets sent).
    pub(crate) fn owes_nothing(&self) -> bool {
        self.resp.out.is_empty()
            && !self.owes_lent_ack()
            && self.req.idx >= self.sq.len()
            && self.sq.iter().all(|w| w.next_pkt >= w.npkts)
    }
}
