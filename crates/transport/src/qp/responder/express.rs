//! The responder's express path (docs/PLAN-direct-queues.md, step 4 under
//! the engine lock): a one-packet RC SEND or RDMA WRITE (with or without
//! immediate data) at the expected PSN, with no message in progress, no
//! tag-matching receive queue and no RNR NAK held, is executed here without the
//! generic path's dispatch (opcode sequence, tag matching, the message in
//! progress, the length rules of first, middle and last packets).
//!
//! It does what the generic path does for such a request, in the same
//! order, and nothing else: the same checks (QP rights, length, R_Key, PD,
//! rights and bounds before any byte lands), the same state (PSN, MSN), the
//! same completion and the same ACK. Whatever it does not take, including
//! every request that would fail a check, it leaves untouched for the
//! generic path, which then answers it (RNR NAK, NAK, error completion) as
//! before. `Config::express` turns it on; the simulator runs the same
//! operations both ways and compares (`crates/sim/tests/random_ops.rs`).

use super::ACK;
use crate::qp::{Ctx, Qp};
use crate::types::{Access, QpState, QpType, WcFlags, WcOpcode, WcStatus};
use crate::wr::Wc;
use softrdma_wire::direct::DirectRequest;
use softrdma_wire::{LaneAck, Operation, Packet, Position, Psn, Reth};

/// What the express path reads of a request: a parsed packet's fields,
/// or a direct record's read in place (`softrdma_wire::direct::read_request`,
/// for which the endpoint builds no `Packet`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpressReq<'a> {
    pub(crate) write: bool,
    pub(crate) psn: Psn,
    pub(crate) imm: Option<u32>,
    pub(crate) reth: Option<Reth>,
    pub(crate) se: bool,
    pub(crate) ack_req: bool,
    pub(crate) payload: &'a [u8],
    /// The ACK a direct record carries for the other direction, handled
    /// after the request (`None` for a packet: its caller handles it).
    pub(crate) carried: Option<LaneAck>,
}

impl<'a> ExpressReq<'a> {
    /// A one-packet SEND or WRITE (± immediate data, no invalidate, no
    /// peer copy) of a parsed packet; `None` for any other.
    fn of_packet(pkt: &Packet<'a>) -> Option<ExpressReq<'a>> {
        let h = &pkt.hdr;
        let write = match pkt.info.operation {
            Operation::Send => false,
            Operation::Write => true,
            _ => return None,
        };
        let one = pkt.info.position == Position::Only && !pkt.info.peer && h.ieth.is_none();
        one.then_some(ExpressReq {
            write,
            psn: h.bth.psn,
            imm: h.imm,
            reth: h.reth,
            se: h.bth.se,
            ack_req: h.bth.ack_req,
            payload: pkt.payload,
            carried: None,
        })
    }

    /// A direct record's request, read in place (always asks for an ACK,
    /// as `direct::read` gives it).
    pub(crate) fn of_record(r: &DirectRequest<'a>) -> ExpressReq<'a> {
        ExpressReq {
            write: r.write,
            psn: r.psn,
            imm: r.imm,
            reth: r.reth,
            se: r.se,
            ack_req: true,
            payload: r.payload,
            carried: r.ack,
        }
    }
}

impl Qp {
    /// Executes `pkt` by the express path if it may take it; false leaves
    /// the QP and memory as they were.
    pub(crate) fn express_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) -> bool {
        // READ requests and atomics first out: they are the generic path's.
        ExpressReq::of_packet(pkt).is_some_and(|r| self.express_exec(ctx, mem, &r))
    }

    /// [`Qp::express_request`] of a request's fields.
    pub(crate) fn express_exec(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        r: &ExpressReq<'_>,
    ) -> bool {
        let len = r.payload.len();
        let plain = self.qp_type == QpType::Rc
            && self.state == QpState::Rts
            && r.psn == self.resp.psn
            && self.resp.cur.is_none()
            && self.resp.rnr_held.is_none()
            && self.resp.spare.is_none()
            && len <= self.mtu(ctx.config) as usize;
        if !plain {
            return false;
        }
        // A receive WQE for a SEND or a WRITE with immediate data; without
        // one the generic path answers (RNR).
        // The receives posted to the QP's cell are its queue's too.
        self.rq.pull_if_empty();
        let wqe = if !r.write || r.imm.is_some() {
            match self.next_recv(ctx) {
                Some(w) => Some(w),
                None => return false,
            }
        } else {
            None
        };
        let opcode = if !r.write {
            let sgl = &wqe.expect("taken above").sgl;
            if super::super::scatter(ctx.mrs, mem, self.pd, sgl, 0, r.payload).is_err() {
                return false;
            }
            if let Some(s) = sgl.first() {
                self.remember_target_region(ctx, s.lkey);
            }
            WcOpcode::Recv
        } else {
            let Some(reth) = r.reth else { return false };
            let fits = reth.dma_len as usize == len && reth.dma_len <= ctx.config.limits.max_msg_sz;
            if !(fits && self.attr.qp_access_flags.contains(Access::REMOTE_WRITE)) {
                return false;
            }
            let (mrs, mws) = (ctx.mrs, &*ctx.mws);
            let need = Access::REMOTE_WRITE;
            let checked = crate::mw::check_remote(
                mrs, mws, self.qpn, self.pd, reth.rkey, reth.va, len as u64, need,
            );
            let Ok(host) = checked else { return false };
            self.remember_target_region(ctx, reth.rkey);
            if len > 0 && host.write(mem, r.payload).is_err() {
                return false;
            }
            WcOpcode::RecvRdmaWithImm
        };
        let takes_wqe = wqe.is_some();
        // Executed: the state and completion the generic path leaves.
        ctx.stats.rx_express += 1;
        let psn = r.psn;
        self.resp.sent_psn_nak = false;
        self.resp.psn = psn.add(1);
        self.resp.msn = self.resp.msn.wrapping_add(1) & 0xFF_FFFF;
        if takes_wqe {
            let w = self.take_recv_wqe(ctx).expect("looked at above");
            let mut wc = Wc::new(w.wr_id, WcStatus::Success, opcode, self.qpn);
            wc.byte_len = len as u32;
            if let Some(imm) = r.imm {
                wc.imm_data = imm;
                wc.wc_flags = WcFlags::WITH_IMM;
            }
            self.complete_recv(ctx, wc, r.se);
        }
        // A receive completion that did not fit took the QP to ERR: no ACK,
        // as on the generic path. Then the ACK the record carried, as the
        // lane's next packet.
        let owes = self.state != QpState::Err && r.ack_req;
        match r.carried {
            Some(a) if owes && self.owe_and_settle(ctx, psn, a) => {}
            carried => {
                if owes {
                    self.queue_ack(psn, ACK);
                }
                if let Some(a) = carried {
                    self.carried_ack(ctx, mem, a);
                }
            }
        }
        true
    }

    /// The receive WQE a message would take: the receive queue's, or its
    /// shared receive queue's (not a tag-matching one: its messages are
    /// routed by tag).
    fn next_recv<'a>(&'a self, ctx: &'a Ctx<'_>) -> Option<&'a crate::wr::RecvWr> {
        match self.srq {
            None => self.rq.peek(),
            Some(h) => {
                let srq = ctx.srqs.get(h.0).filter(|s| s.tm.is_none())?;
                srq.wqes.front()
            }
        }
    }
}
