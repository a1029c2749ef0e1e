//! Responder: executes incoming requests and produces ACKs, NAKs, READ
//! responses and atomic ACKs (IBTA 9.7.5, rxe_resp.c).
//!
//! RC checks, in rxe's order: PSN (one sequence NAK per gap, duplicates
//! answered from the resource ring), opcode sequence, QP access rights,
//! resources (RNR NAK when no receive is posted), lengths, R_Key, then executes.

mod atomic_write;
mod express;
mod peer;
mod tm;

pub(crate) use express::ExpressReq;
pub(crate) use tm::TmMsg;

use super::sgl::ScatterError;
use super::{Ctx, InProgress, Path, Qp, Resource, RespOut, bth};
use crate::endpoint::Transmit;
use crate::mr::{AccessError, AtomicOp, Host};
use crate::types::{Access, QpState, QpType, WcFlags, WcOpcode, WcStatus};
use crate::wr::Wc;
use softrdma_wire::{
    Aeth, Headers, NakCode, Opcode, Operation, Packet, Position, Psn, Syndrome, ip,
};
use std::net::IpAddr;

/// What to do after a request failed a check (IBTA 9.9.3 error classes).
#[derive(Debug, Clone, Copy)]
enum Fail {
    /// NAK with this code; the QP goes to ERR; an in-use receive WQE completes with the status.
    Nak(NakCode, WcStatus),
    /// Receiver not ready: RNR NAK, no state change.
    Rnr,
    /// Silently drop (UC/UD, or nothing to answer).
    Drop,
}

pub(super) const ACK: Syndrome = Syndrome::Ack { credits: 0x1F };

impl Qp {
    /// Entry point for request packets.
    pub(crate) fn handle_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
        src: IpAddr,
        dst: IpAddr,
        udp_len: usize,
    ) {
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            ctx.stats.drop_bad_state += 1;
            return;
        }
        self.note_rx(ctx);
        match self.qp_type {
            QpType::Rc => self.rc_request(ctx, mem, pkt),
            QpType::Uc => self.uc_request(ctx, mem, pkt),
            QpType::Ud => self.ud_request(ctx, mem, pkt, src, dst, udp_len),
            QpType::XrcRecv => {
                if self.xrc_bind(ctx, pkt) {
                    self.rc_request(ctx, mem, pkt);
                }
            }
            // An XRC initiator has no responder (IBTA A14.4).
            QpType::XrcSend => ctx.stats.drop_bad_state += 1,
        }
    }

    /// XRC target: points the responder at the XRC SRQ the request's XRCETH
    /// names — its receive WQEs, its PD for R_Key checks, its CQ — after
    /// checking that the SRQ exists and belongs to this QP's XRC domain.
    /// A request naming any other SRQ is NAKed as an invalid request and the
    /// QP enters ERR (IBTA A14.4.1.3); false then.
    fn xrc_bind(&mut self, ctx: &mut Ctx<'_>, pkt: &Packet<'_>) -> bool {
        // XRC SRQ numbers are SRQ handles + 1 (`Endpoint::srq_num`).
        let srqn = pkt.hdr.xrceth.map_or(0, softrdma_wire::xrc_srqn);
        let h = srqn.wrapping_sub(1);
        let found = ctx
            .srqs
            .get(h)
            .and_then(|s| s.xrc.map(|x| (x, s.pd)))
            .filter(|(x, _)| Some(x.xrcd) == self.xrcd);
        match found {
            Some((x, pd)) => {
                self.srq = Some(crate::cq::SrqHandle(h));
                self.recv_cq = x.cq;
                self.pd = pd;
                true
            }
            None if pkt.hdr.bth.psn == self.resp.psn => {
                ctx.stats.tx_nak_other += 1;
                self.queue_ack(pkt.hdr.bth.psn, Syndrome::Nak(NakCode::InvalidRequest));
                self.enter_error(ctx);
                false
            }
            None => {
                ctx.stats.drop_malformed += 1;
                false
            }
        }
    }

    /// The opcode for a response of this QP: RC's, or XRC's for a target.
    fn resp_opcode(&self, rc: Opcode) -> Opcode {
        match self.qp_type {
            QpType::XrcRecv => super::requester::xrc_opcode(rc).unwrap_or(rc),
            _ => rc,
        }
    }

    fn rc_request(&mut self, ctx: &mut Ctx<'_>, mem: &mut dyn crate::Memory, pkt: &Packet<'_>) {
        let psn = pkt.hdr.bth.psn;
        let d = psn.diff(self.resp.psn);
        if d > 0 {
            if !self.resp.sent_psn_nak {
                self.resp.sent_psn_nak = true;
                ctx.stats.tx_nak_seq += 1;
                let expected = self.resp.psn;
                self.queue_ack(expected, Syndrome::Nak(NakCode::PsnSequence));
            }
            ctx.stats.drop_out_of_seq += 1;
            return;
        }
        if d < 0 {
            ctx.stats.rx_duplicates += 1;
            self.duplicate(ctx, pkt);
            return;
        }
        self.resp.sent_psn_nak = false;
        match self.execute(ctx, mem, pkt) {
            // Executing it moved the QP to ERR (its receive completion did
            // not fit in the CQ): do not acknowledge a message the receiver
            // never saw complete; the requester will time out (rxe:
            // RESPST_ERR_CQ_OVERFLOW -> RESPST_ERROR, no ACK).
            Ok(()) if self.state == QpState::Err => {}
            Ok(()) => {
                if pkt.hdr.bth.ack_req
                    && matches!(
                        pkt.info.operation,
                        Operation::Send | Operation::Write | Operation::AtomicWrite
                    )
                {
                    self.queue_ack(psn, ACK);
                }
            }
            Err(Fail::Rnr) => {
                // The RNR NAK (held or sent) tells the requester to resume at
                // this PSN: drop what it pipelined behind it silently, as
                // after a sequence NAK, instead of NAKing that too.
                self.resp.sent_psn_nak = true;
                if ctx.config.rnr_hold_ns > 0 && self.srq.is_none() {
                    // Wait a little for the application to post a receive
                    // (`Config::rnr_hold_ns`); a resend of the same PSN
                    // meanwhile keeps the hold it started.
                    if self.resp.rnr_held.is_none() {
                        self.resp.rnr_held = Some(psn);
                        self.timers.rnr_hold =
                            Some(ctx.now + std::time::Duration::from_nanos(ctx.config.rnr_hold_ns));
                        // A receive posted to the cell since the queue was
                        // found empty ends the hold as a post would.
                        self.gate_recvs();
                        if !self.rq.is_empty() {
                            self.recv_posted();
                        }
                    }
                } else {
                    ctx.stats.tx_rnr_nak += 1;
                    let t = self.attr.min_rnr_timer;
                    self.queue_ack(psn, Syndrome::RnrNak { timer: t });
                }
            }
            Err(Fail::Nak(code, status)) => {
                ctx.stats.tx_nak_other += 1;
                self.queue_ack(psn, Syndrome::Nak(code));
                self.fail_recv(ctx, status);
                self.enter_error(ctx);
            }
            Err(Fail::Drop) => ctx.stats.drop_malformed += 1,
        }
    }

    fn uc_request(&mut self, ctx: &mut Ctx<'_>, mem: &mut dyn crate::Memory, pkt: &Packet<'_>) {
        let psn = pkt.hdr.bth.psn;
        if psn != self.resp.psn {
            // A packet was lost: the message in progress is abandoned and its
            // receive WQE reused (IBTA 9.8.3.3).
            self.abandon_message();
            if !pkt.info.position.starts() {
                ctx.stats.drop_out_of_seq += 1;
                self.resp.psn = psn.add(1);
                return;
            }
            self.resp.psn = psn;
        }
        match self.execute(ctx, mem, pkt) {
            Ok(()) => {}
            Err(Fail::Rnr) => {
                ctx.stats.drop_no_wqe += 1;
                self.resp.psn = psn.add(1);
            }
            Err(Fail::Nak(..)) | Err(Fail::Drop) => {
                ctx.stats.drop_malformed += 1;
                self.abandon_message();
                self.resp.psn = psn.add(1);
            }
        }
    }

    fn abandon_message(&mut self) {
        if let Some(InProgress::Send { wqe, .. }) = self.resp.cur.take() {
            self.resp.spare = Some(wqe);
        }
    }

    fn ud_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
        src: IpAddr,
        dst: IpAddr,
        udp_len: usize,
    ) {
        let Some(deth) = pkt.hdr.deth else { return };
        if deth.qkey != self.attr.qkey {
            ctx.stats.drop_bad_qkey += 1;
            return;
        }
        let Some(wqe) = self.take_recv_wqe(ctx) else {
            ctx.stats.drop_no_wqe += 1;
            return;
        };
        let grh = ip::grh_area(src, dst, udp_len);
        let total = grh.len() + pkt.payload.len();
        let mut wc = Wc::new(wqe.wr_id, WcStatus::Success, WcOpcode::Recv, self.qpn);
        wc.src_qp = deth.src_qp;
        wc.wc_flags = WcFlags::GRH;
        wc.sl = roce_packet_type(src, dst);
        if let Some(imm) = pkt.hdr.imm {
            wc.imm_data = imm;
            wc.wc_flags = wc.wc_flags.with(WcFlags::WITH_IMM);
        }
        wc.byte_len = total as u32;
        if super::sgl::capacity(&wqe.sgl) < total as u64 {
            wc.status = WcStatus::LocLenErr;
        } else {
            let r = super::scatter(ctx.mrs, mem, self.pd, &wqe.sgl, 0, &grh)
                .and_then(|_| super::scatter(ctx.mrs, mem, self.pd, &wqe.sgl, 40, pkt.payload));
            if r.is_err() {
                wc.status = WcStatus::LocProtErr;
            }
        }
        self.complete_recv(ctx, wc, pkt.hdr.bth.se);
    }

    /// Executes an in-sequence RC/UC request.
    fn execute(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) -> Result<(), Fail> {
        let op = pkt.info.operation;
        let pos = pkt.info.position;
        // Opcode sequence (IBTA 9.7.5.1.2): a message continues what is in progress.
        let seq_ok = match (&self.resp.cur, op) {
            (None, _) => pos.starts(),
            (Some(InProgress::Send { .. }), Operation::Send) => !pos.starts(),
            (Some(InProgress::Write { .. }), Operation::Write) => !pos.starts(),
            _ => false,
        };
        if !seq_ok {
            return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
        }
        let need = match op {
            Operation::Write | Operation::AtomicWrite => Access::REMOTE_WRITE,
            Operation::ReadRequest => Access::REMOTE_READ,
            Operation::CompareSwap | Operation::FetchAdd => Access::REMOTE_ATOMIC,
            Operation::Send => Access::EMPTY,
            _ => return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr)),
        };
        if !self.attr.qp_access_flags.contains(need) {
            // rxe answers a right the QP does not grant with "invalid request".
            return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
        }
        match op {
            Operation::Send => self.exec_send(ctx, mem, pkt),
            Operation::Write => self.exec_write(ctx, mem, pkt),
            Operation::ReadRequest => self.exec_read(ctx, mem, pkt),
            Operation::AtomicWrite => self.exec_atomic_write(ctx, mem, pkt),
            _ => self.exec_atomic(ctx, mem, pkt),
        }
    }

    /// Payload length rules of rxe `check_length` for SENDs.
    fn check_len(pos: Position, len: usize, mtu: usize) -> bool {
        match pos {
            Position::First | Position::Middle => len == mtu,
            Position::Last => (1..=mtu).contains(&len),
            Position::Only => len <= mtu,
        }
    }

    fn exec_send(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) -> Result<(), Fail> {
        if pkt.info.peer {
            return self.send_peer(ctx, mem, pkt);
        }
        let pos = pkt.info.position;
        let mtu = self.mtu(ctx.config) as usize;
        if !Self::check_len(pos, pkt.payload.len(), mtu) {
            return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
        }
        if pos.starts() {
            let (wqe, tm) = self.start_recv(ctx, pkt.payload)?;
            self.resp.cur = Some(InProgress::Send { wqe, offset: 0, tm });
        }
        let Some(InProgress::Send { wqe, offset, tm }) = &mut self.resp.cur else {
            unreachable!("sequence checked")
        };
        // A tag-matching receive may drop the message's head (its TMH).
        let mut data = pkt.payload;
        if let Some(t) = tm {
            let k = (t.skip as usize).min(data.len());
            data = &data[k..];
            t.skip -= k as u32;
        }
        match super::scatter(ctx.mrs, mem, self.pd, &wqe.sgl, u64::from(*offset), data) {
            Ok(()) => {}
            Err(ScatterError::TooLong) => {
                return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::LocLenErr));
            }
            Err(ScatterError::Prot(_)) => {
                return Err(Fail::Nak(NakCode::RemoteOperational, WcStatus::LocProtErr));
            }
        }
        *offset += data.len() as u32;
        self.resp.psn = self.resp.psn.add(1);
        if pos.ends() {
            if let Some(rkey) = pkt.hdr.ieth
                && crate::mw::remote_invalidate(ctx.mws, self.pd, rkey).is_err()
            {
                return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
            }
            self.finish_send(ctx, pkt);
        }
        Ok(())
    }

    /// The SEND in progress ended: its receive completion (a tag-matching
    /// one's opcode, flags and tag), then a matched rendezvous' READ.
    fn finish_send(&mut self, ctx: &mut Ctx<'_>, pkt: &Packet<'_>) {
        let Some(InProgress::Send { wqe, offset, tm }) = self.resp.cur.take() else {
            unreachable!("a SEND is in progress")
        };
        self.resp.msn = self.resp.msn.wrapping_add(1) & 0xFF_FFFF;
        let opcode = tm.map_or(WcOpcode::Recv, |t| t.opcode);
        let mut wc = Wc::new(wqe.wr_id, WcStatus::Success, opcode, self.qpn);
        wc.byte_len = offset;
        if let Some(t) = tm {
            wc.wc_flags = t.flags;
            if t.flags.contains(WcFlags::TM_MATCH) {
                (wc.tm_tag, wc.tm_priv) = (t.tag, t.app_ctx);
            }
        }
        if let Some(imm) = pkt.hdr.imm {
            wc.imm_data = imm;
            wc.wc_flags = WcFlags::WITH_IMM;
        }
        if let Some(rkey) = pkt.hdr.ieth {
            wc.imm_data = rkey;
            wc.wc_flags = WcFlags::WITH_INV;
        }
        self.complete_recv(ctx, wc, pkt.hdr.bth.se);
        if let Some(t) = tm
            && let Some(rvh) = t.rndv
        {
            self.start_rndv_read(ctx, wqe, t, rvh);
        }
    }

    fn exec_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) -> Result<(), Fail> {
        // WRITE with immediate consumes a receive WQE on its last packet; with
        // none posted the packet is RNR-NAKed before anything changes.
        let wqe = match pkt.hdr.imm {
            Some(_) => Some(self.take_recv_wqe(ctx).ok_or(Fail::Rnr)?),
            None => None,
        };
        match self.write_payload(ctx, mem, pkt) {
            Ok(Some(total)) => {
                if let Some(w) = wqe {
                    let mut wc = Wc::new(
                        w.wr_id,
                        WcStatus::Success,
                        WcOpcode::RecvRdmaWithImm,
                        self.qpn,
                    );
                    wc.byte_len = total;
                    wc.imm_data = pkt.hdr.imm.unwrap_or(0);
                    wc.wc_flags = WcFlags::WITH_IMM;
                    self.complete_recv(ctx, wc, pkt.hdr.bth.se);
                }
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                if let Some(w) = wqe {
                    // The WQE is lost with the message: report why.
                    let status = match e {
                        Fail::Nak(_, s) => s,
                        _ => WcStatus::RemInvReqErr,
                    };
                    let wc = Wc::new(w.wr_id, status, WcOpcode::RecvRdmaWithImm, self.qpn);
                    self.complete_recv(ctx, wc, false);
                }
                Err(e)
            }
        }
    }

    /// Checks and places one WRITE packet; returns the message length when it ends it.
    fn write_payload(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) -> Result<Option<u32>, Fail> {
        if pkt.info.peer {
            return self.write_peer(ctx, mem, pkt);
        }
        let pos = pkt.info.position;
        let mtu = self.mtu(ctx.config);
        let (va, resid, rkey, total) = match (pos.starts(), &self.resp.cur) {
            (true, _) => {
                let reth = pkt.hdr.reth.ok_or(Fail::Drop)?;
                if reth.dma_len > ctx.config.limits.max_msg_sz {
                    return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
                }
                self.check_rkey(ctx, reth.rkey, reth.va, reth.dma_len, Access::REMOTE_WRITE)?;
                (reth.va, reth.dma_len, reth.rkey, reth.dma_len)
            }
            (
                false,
                Some(InProgress::Write {
                    va,
                    resid,
                    rkey,
                    total,
                }),
            ) => (*va, *resid, *rkey, *total),
            _ => unreachable!("sequence checked"),
        };
        let len = pkt.payload.len() as u32;
        // rxe check_length for writes: full MTU until the last packet, which
        // carries exactly the rest.
        let len_ok = if resid > mtu {
            len == mtu && !pos.ends()
        } else {
            len == resid && pos.ends()
        };
        if !len_ok {
            return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
        }
        // The MR is checked for every packet: it may have been deregistered.
        let host = self.check_rkey(ctx, rkey, va, len, Access::REMOTE_WRITE)?;
        if len > 0 {
            host.write(mem, pkt.payload)
                .map_err(|e| self.access_fail(ctx, e))?;
        }
        self.resp.psn = self.resp.psn.add(1);
        if pos.ends() {
            self.resp.cur = None;
            self.resp.msn = self.resp.msn.wrapping_add(1) & 0xFF_FFFF;
            return Ok(Some(total));
        }
        self.resp.cur = Some(InProgress::Write {
            va: va.wrapping_add(u64::from(len)),
            resid: resid - len,
            rkey,
            total,
        });
        Ok(None)
    }

    fn exec_read(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) -> Result<(), Fail> {
        if self.attr.max_dest_rd_atomic == 0 {
            return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
        }
        let reth = pkt.hdr.reth.ok_or(Fail::Drop)?;
        if reth.dma_len > ctx.config.limits.max_msg_sz {
            return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
        }
        let host = self.check_rkey(ctx, reth.rkey, reth.va, reth.dma_len, Access::REMOTE_READ)?;
        let mtu = self.mtu(ctx.config);
        // A peer-copy READ is answered by one packet (`qp/peer.rs`).
        let peer = pkt.info.peer;
        let placed = peer && Self::place_read(ctx, mem, pkt.payload, host, reth.dma_len);
        let npkts = if peer {
            1
        } else {
            reth.dma_len.div_ceil(mtu).max(1)
        };
        let psn = pkt.hdr.bth.psn;
        self.push_resource(Resource::Read {
            first_psn: psn,
            last_psn: psn.add(npkts - 1),
            va: reth.va,
            rkey: reth.rkey,
            len: reth.dma_len,
        });
        self.resp.msn = self.resp.msn.wrapping_add(1) & 0xFF_FFFF;
        self.resp.out.push_back(RespOut::Read {
            psn,
            va: reth.va,
            rkey: reth.rkey,
            len: reth.dma_len,
            npkts,
            next: 0,
            msn: self.resp.msn,
            peer,
            placed,
        });
        self.resp.psn = psn.add(npkts);
        Ok(())
    }

    fn exec_atomic(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) -> Result<(), Fail> {
        if self.attr.max_dest_rd_atomic == 0 {
            return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
        }
        let a = pkt.hdr.atomic_eth.ok_or(Fail::Drop)?;
        if a.va % 8 != 0 {
            return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
        }
        let host = self.check_rkey(ctx, a.rkey, a.va, 8, Access::REMOTE_ATOMIC)?;
        let op = if pkt.info.operation == Operation::CompareSwap {
            AtomicOp::CompareSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
        };
        let orig = host.atomic(mem, op).map_err(|e| self.access_fail(ctx, e))?;
        let psn = pkt.hdr.bth.psn;
        self.push_resource(Resource::Atomic { psn, orig });
        self.resp.msn = self.resp.msn.wrapping_add(1) & 0xFF_FFFF;
        self.resp.out.push_back(RespOut::AtomicAck {
            psn,
            msn: self.resp.msn,
            orig,
        });
        self.resp.psn = psn.add(1);
        Ok(())
    }

    fn check_rkey(
        &self,
        ctx: &mut Ctx<'_>,
        rkey: u32,
        va: u64,
        len: u32,
        need: Access,
    ) -> Result<Host, Fail> {
        let (mrs, mws) = (ctx.mrs, &*ctx.mws);
        crate::mw::check_remote(mrs, mws, self.qpn, self.pd, rkey, va, u64::from(len), need)
            .map_err(|e| self.access_fail(ctx, e))
    }

    /// A READ response that cannot be read from its region (gone, or
    /// on-demand memory unmapped): a REMOTE_ACCESS NAK takes its place in
    /// the queue, and the QP enters the error state.
    fn nak_read(&mut self, ctx: &mut Ctx<'_>, psn: Psn, msn: u32) {
        ctx.stats.access_violations += 1;
        ctx.stats.tx_nak_other += 1;
        self.resp.out.pop_front();
        self.resp.out.push_front(RespOut::Ack {
            psn,
            syndrome: Syndrome::Nak(NakCode::RemoteAccess),
            msn,
        });
        self.enter_error(ctx);
    }

    /// A remote access refused (by the checks, or on-demand memory found
    /// unmapped): the NAK that gives the requester REM_ACCESS_ERR.
    fn access_fail(&self, ctx: &mut Ctx<'_>, _: AccessError) -> Fail {
        ctx.stats.access_violations += 1;
        Fail::Nak(NakCode::RemoteAccess, WcStatus::RemAccessErr)
    }

    fn push_resource(&mut self, r: Resource) {
        let max = usize::from(self.attr.max_dest_rd_atomic.max(1));
        while self.resp.res.len() >= max {
            self.resp.res.pop_front();
        }
        self.resp.res.push_back(r);
    }

    /// A request with a PSN already executed (IBTA 9.7.5.1.1): re-ACK SENDs and
    /// WRITEs, re-execute READs, replay atomics, never execute anything twice.
    fn duplicate(&mut self, ctx: &mut Ctx<'_>, pkt: &Packet<'_>) {
        let psn = pkt.hdr.bth.psn;
        match pkt.info.operation {
            Operation::Send | Operation::Write | Operation::AtomicWrite => {
                let last = self.resp.psn.sub(1);
                self.queue_ack(last, ACK);
            }
            Operation::ReadRequest => {
                let Some(reth) = pkt.hdr.reth else { return };
                let found = self.resp.res.iter().any(|r| match *r {
                    Resource::Read {
                        first_psn,
                        last_psn,
                        va,
                        rkey,
                        len,
                    } => {
                        !psn.before(first_psn)
                            && !psn.after(last_psn)
                            && rkey == reth.rkey
                            && reth.va >= va
                            && reth
                                .va
                                .checked_add(u64::from(reth.dma_len))
                                .is_some_and(|e| e <= va + u64::from(len))
                    }
                    Resource::Atomic { .. } => false,
                });
                if !found {
                    ctx.stats.drop_out_of_seq += 1;
                    return;
                }
                let mtu = self.mtu(ctx.config);
                let peer = pkt.info.peer;
                // The requester re-asks from `psn` on, so it holds everything
                // before it: responses queued for `psn` or later (older copies
                // of this stream included) would only be dropped as stale.
                // rxe likewise rewinds its one resource instead of queueing.
                self.resp.out.retain(|o| o.last_psn().before(psn));
                self.resp.out.push_back(RespOut::Read {
                    psn,
                    va: reth.va,
                    rkey: reth.rkey,
                    len: reth.dma_len,
                    npkts: if peer {
                        1
                    } else {
                        reth.dma_len.div_ceil(mtu).max(1)
                    },
                    next: 0,
                    msn: self.resp.msn,
                    peer,
                    // A duplicate is never placed: its ticket ended with
                    // the first answer, or the requester has moved on.
                    placed: false,
                });
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let orig = self.resp.res.iter().find_map(|r| match *r {
                    Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                match orig {
                    Some(orig) => self.resp.out.push_back(RespOut::AtomicAck {
                        psn,
                        msn: self.resp.msn,
                        orig,
                    }),
                    None => ctx.stats.drop_out_of_seq += 1,
                }
            }
            _ => {}
        }
    }

    /// Queues an ACK/NAK; consecutive plain ACKs coalesce into the newest.
    /// The hold of an RNR NAK ended with no receive posted: send it now.
    pub(crate) fn release_rnr_nak(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(psn) = self.resp.rnr_held.take() {
            self.timers.rnr_hold = None;
            self.gate_recvs();
            if self.resp.psn == psn && self.state != QpState::Err {
                ctx.stats.tx_rnr_nak += 1;
                let t = self.attr.min_rnr_timer;
                self.queue_ack(psn, Syndrome::RnrNak { timer: t });
            }
        }
    }

    /// A receive was posted while an RNR NAK was held: a PSN sequence NAK at
    /// the held PSN has the requester resend from it at once. Returns whether
    /// it queued one (the QP then has something to send).
    pub(crate) fn recv_posted(&mut self) -> bool {
        let Some(psn) = self.resp.rnr_held.take() else {
            return false;
        };
        self.timers.rnr_hold = None;
        self.gate_recvs();
        if self.resp.psn != psn || self.state == QpState::Err {
            return false;
        }
        self.queue_ack(psn, Syndrome::Nak(NakCode::PsnSequence));
        true
    }

    fn queue_ack(&mut self, psn: Psn, syndrome: Syndrome) {
        let msn = self.resp.msn;
        // A lent requester's cell carries the plain ACK (`express.rs`);
        // anything else goes behind the ACK it owes.
        if let Syndrome::Ack { .. } = syndrome {
            let aeth = Aeth { syndrome, msn };
            if self.owe(softrdma_wire::LaneAck { psn, aeth }) {
                return;
            }
        } else {
            self.unowe();
        }
        if let (
            Syndrome::Ack { .. },
            Some(RespOut::Ack {
                psn: p,
                syndrome: Syndrome::Ack { .. },
                msn: m,
            }),
        ) = (syndrome, self.resp.out.back_mut())
            && !psn.before(*p)
        {
            *p = psn;
            *m = msn;
            return;
        }
        self.resp.out.push_back(RespOut::Ack { psn, syndrome, msn });
    }

    /// Completes the receive WQE a failed request had taken, with `status`.
    fn fail_recv(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        if let Some(InProgress::Send { wqe, tm, .. }) = self.resp.cur.take() {
            // A tag-matching receive fails with its own opcode.
            let opcode = tm.map_or(WcOpcode::Recv, |t| t.opcode);
            let wc = Wc::new(wqe.wr_id, status, opcode, self.qpn);
            self.complete_recv(ctx, wc, false);
        }
        self.resp.cur = None;
    }

    /// Builds the next responder packet (ACK, NAK, READ response, atomic ACK).
    pub(super) fn poll_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let out = *self.resp.out.front()?;
        let path = Path::for_av(ctx, &self.attr.ah_attr)?;
        let dest = self.attr.dest_qp_num;
        let t = match out {
            RespOut::Ack { psn, syndrome, msn } => {
                self.resp.out.pop_front();
                let oc = self.resp_opcode(Opcode::RC_ACKNOWLEDGE);
                let mut h = Headers::new(bth(oc, dest, psn));
                h.aeth = Some(Aeth { syndrome, msn });
                Qp::build::<()>(ctx.config, &path, &h, 0, buf, |_| Ok(())).ok()?
            }
            RespOut::AtomicAck { psn, msn, orig } => {
                self.resp.out.pop_front();
                let oc = self.resp_opcode(Opcode::RC_ATOMIC_ACKNOWLEDGE);
                let mut h = Headers::new(bth(oc, dest, psn));
                h.aeth = Some(Aeth { syndrome: ACK, msn });
                h.atomic_ack = Some(orig);
                Qp::build::<()>(ctx.config, &path, &h, 0, buf, |_| Ok(())).ok()?
            }
            RespOut::Read {
                psn,
                va,
                rkey,
                len,
                msn,
                peer: true,
                placed,
                ..
            } => {
                match self.peer_read_response(ctx, &path, psn, (va, rkey, len), msn, placed, buf) {
                    Some(t) => t?,
                    None => return self.poll_response(ctx, mem, buf),
                }
            }
            RespOut::Read { .. } => match self.read_response_packet(ctx, mem, &path, out, buf) {
                Some(t) => t?,
                None => return self.poll_response(ctx, mem, buf),
            },
        };
        ctx.stats.tx_packets += 1;
        ctx.stats.tx_bytes += t.len as u64;
        Some(t)
    }

    /// The next packet of a READ response stream (`out`, the front of
    /// `resp.out`). `None`: the region failed its check and a NAK took the
    /// READ's place in the queue.
    fn read_response_packet(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        path: &Path,
        out: RespOut,
        buf: &mut Vec<u8>,
    ) -> Option<Option<Transmit>> {
        let dest = self.attr.dest_qp_num;
        match out {
            RespOut::Read {
                psn,
                va,
                rkey,
                len,
                npkts,
                next,
                msn,
                peer: _,
                placed: _,
            } => {
                let mtu = self.mtu(ctx.config);
                let off = u64::from(next) * u64::from(mtu);
                let plen = (u64::from(len) - off).min(u64::from(mtu)) as u32;
                let pos = match (next == 0, next + 1 == npkts) {
                    (true, true) => Position::Only,
                    (true, false) => Position::First,
                    (false, true) => Position::Last,
                    (false, false) => Position::Middle,
                };
                let oc = softrdma_wire::opcode_for(
                    softrdma_wire::Transport::Rc,
                    Operation::ReadResponse,
                    pos,
                    false,
                    false,
                )
                .expect("read response opcodes exist");
                let oc = self.resp_opcode(oc);
                let rpsn = psn.add(next);
                let mut h = Headers::new(bth(oc, dest, rpsn));
                if pos != Position::Middle {
                    h.aeth = Some(Aeth { syndrome: ACK, msn });
                }
                let va_off = va.wrapping_add(off);
                // The MR is looked up again for every packet: it may be gone.
                let (mrs, mws) = (ctx.mrs, &*ctx.mws);
                let (qpn, pd) = (self.qpn, self.pd);
                let host = match crate::mw::check_remote(
                    mrs,
                    mws,
                    qpn,
                    pd,
                    rkey,
                    va_off,
                    u64::from(plen),
                    Access::REMOTE_READ,
                ) {
                    Ok(h) => h,
                    Err(_) => {
                        self.nak_read(ctx, rpsn, msn);
                        return None;
                    }
                };
                let mut unmapped = false;
                let fill = |dst: &mut [u8]| {
                    if !dst.is_empty() && host.read(mem, dst).is_err() {
                        unmapped = true;
                        return Err(());
                    }
                    Ok(())
                };
                let record = self.answers_in_record(ctx, &h, plen);
                let t = if record {
                    Qp::build_record(path, &h, plen as usize, buf, fill).ok()
                } else {
                    Qp::build(ctx.config, path, &h, plen as usize, buf, fill).ok()
                };
                if record && t.is_some() {
                    ctx.stats.tx_direct += 1;
                }
                if unmapped {
                    // On-demand memory gone since the check: as a failed check.
                    self.nak_read(ctx, rpsn, msn);
                    return None;
                }
                if t.is_some()
                    && let Some(RespOut::Read { next, .. }) = self.resp.out.front_mut()
                {
                    *next += 1;
                    if *next >= npkts {
                        self.resp.out.pop_front();
                    }
                }
                Some(t)
            }
            _ => Some(None),
        }
    }
}

/// What a UD receive completion reports in `sl`. RoCE packets carry no SL;
/// mlx5 hardware reports the packet's type there instead (bit 3: UDP, i.e.
/// RoCEv2; bits 2..0: 2 = IPv4, 1 = IPv6), and UCX's UD transport reads it
/// to find the destination address in the GRH area: with 0 (what rxe
/// leaves) it takes the last 16 bytes as an IPv6 destination, which for an
/// IPv4 packet are the IPv4 header's, and drops every packet.
pub(crate) fn roce_packet_type(src: IpAddr, dst: IpAddr) -> u8 {
    const UDP: u8 = 0x8;
    match (src, dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => UDP | 0x2,
        _ => UDP | 0x1,
    }
}
