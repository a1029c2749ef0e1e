//! The responder lent (docs/PLAN-direct-queues.md, "the responder lent
//! too"): while its requester is lent, an idle RC responder with its own
//! receive cell is lent with it, and a one-packet SEND or WRITE (± immediate
//! data) at the expected PSN, from its peer, is executed through the cell
//! without the driver's engine lock: the receive (for a SEND or immediate
//! data) taken from the receive cell, the payload copied into a region the
//! cell knows (the receive's first SGE, or the WRITE's target), the
//! receive completion (and the send completion of the message whose ACK
//! the request carries) queued into the CQ rings, and the plain ACK owed
//! for the next record to carry.
//!
//! It does what the express path under the engine lock does for such a
//! request (`responder/express.rs`), and declines whatever that path would
//! answer otherwise or that needs more than the cell: a PSN not expected, a
//! carried ACK other than the plain ACK of the outstanding message, no
//! receive, a payload not in a region the cell knows with the right (a
//! window's key is never taken), an armed CQ (unless the caller raises the
//! notification) or a full one. A decline changes nothing that counts: at
//! most the payload has landed already where the transport's path puts it
//! again. The driver then hands the record to the transport, which takes
//! the responder back first (`Qp::reclaim_responder`), as before any other
//! read of its state.

use super::{Express, Lent, LentCounts, RespLane};
use crate::cq::{CqHandle, CqRing};
use crate::endpoint::Datagram;
use crate::mr::Memory;
use crate::qp::responder::ACK;
use crate::qp::{Ctx, Qp};
use crate::time::Instant;
use crate::types::Access;
use crate::types::{WcFlags, WcOpcode, WcStatus};
use crate::wr::Wc;
use softrdma_wire::direct::DirectRequest;
use softrdma_wire::{Aeth, LaneAck, Syndrome};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A request a lent responder executed ([`Express::exec`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Executed {
    /// The CQs whose armed notification its completions fired (only when
    /// the caller let them fire).
    pub fired: [Option<CqHandle>; 2],
}

impl Express {
    /// Executes record request `r` of datagram `d` through the lent
    /// responder, if it takes it (else `None`, with nothing changed): the
    /// ACK it owes is then the cell's, and the driver must see that it
    /// leaves, as after any request. `now` stamps the completions. A
    /// caller that raises the notifications of armed CQs (`fire`: the
    /// transport under its driver's lock) learns which fired; any other
    /// has a request for an armed CQ declined.
    pub fn exec(
        &self,
        now: Instant,
        d: &Datagram<'_>,
        r: &DirectRequest<'_>,
        mem: &mut dyn Memory,
        fire: bool,
    ) -> Option<Executed> {
        if !self.lent.load(Ordering::Acquire) {
            return None;
        }
        let mut g = self.lock();
        let generation = self.generation.load(Ordering::Acquire);
        let cell = &mut *g;
        let Lent::Lent(lane, out) = &mut cell.lent else {
            return None;
        };
        let resp = lane.resp.as_mut()?;
        let len = r.payload.len();
        let from_peer = d.src.ip() == resp.peer && d.dst_ip == resp.local;
        if !from_peer || r.psn != resp.psn || len > resp.mtu as usize {
            return None;
        }
        // The ACK it carries: none, or the plain ACK of the outstanding
        // message (anything else is the completer's).
        let settles = match (r.ack, &*out) {
            (None, _) => None,
            (Some(a), Some(o))
                if matches!(a.aeth.syndrome, Syndrome::Ack { .. }) && a.psn == lane.psn.sub(1) =>
            {
                Some((o.completion(resp.qpn, resp.sig_all), o.record))
            }
            (Some(_), _) => return None,
        };
        // A SEND, or a WRITE with immediate data, takes a receive.
        let takes_recv = !r.write || r.imm.is_some();
        let mut rg = match (takes_recv, &self.recv) {
            (false, _) => None,
            (true, Some(rx)) => Some((rx, rx.lock())),
            (true, None) => return None,
        };
        let wqe = match &rg {
            Some((rx, g)) => Some(g.next(rx)?),
            None => None,
        };
        // Where the payload lands: the receive's first SGE, or the WRITE's
        // region (the QP's right, and a region's key: a window's is the
        // transport's to check).
        let host = match (r.write, wqe) {
            (_, _) if len == 0 && !r.write => None,
            (false, Some(w)) => {
                let s = w
                    .sgl
                    .first()
                    .filter(|s| len as u64 <= u64::from(s.length))?;
                let need = Access::LOCAL_WRITE;
                Some(
                    cell.mrs
                        .host_in(s.lkey, s.addr, len as u64, generation, need)?,
                )
            }
            (false, None) => return None,
            (true, _) => {
                let reth = r.reth.filter(|t| t.dma_len as usize == len)?;
                if !resp.remote_write || reth.rkey & WINDOW_KEY != 0 {
                    return None;
                }
                let need = Access::REMOTE_WRITE;
                match len {
                    0 => None,
                    _ => Some(
                        cell.mrs
                            .host_in(reth.rkey, reth.va, len as u64, generation, need)?,
                    ),
                }
            }
        };
        let recv_wc = wqe.map(|w| {
            let opcode = if r.write {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            };
            let mut wc = Wc::new(w.wr_id, WcStatus::Success, opcode, resp.qpn);
            wc.byte_len = len as u32;
            if let Some(imm) = r.imm {
                wc.imm_data = imm;
                wc.wc_flags = WcFlags::WITH_IMM;
            }
            wc
        });
        if let Some(h) = host {
            mem.write(h, r.payload);
        }
        let items = [
            recv_wc.map(|wc| (&*resp.recv_cq.1, wc, r.se)),
            settles
                .and_then(|(wc, _)| wc)
                .map(|wc| (&*resp.send_cq.1, wc, false)),
        ];
        let fired = CqRing::push_lent(now, items, fire)?;
        // Executed: the receive taken, the state the transport's path
        // leaves, the message settled, the ACK owed.
        if let Some((_, g)) = &mut rg {
            g.take_next();
        }
        drop(rg);
        resp.psn = r.psn.add(1);
        resp.msn = resp.msn.wrapping_add(1) & 0xFF_FFFF;
        resp.counts.execs += 1;
        resp.counts.bytes += d.payload.len() as u64;
        if let Some((_, record)) = settles {
            resp.counts.settled += 1;
            resp.counts.settled_bytes += u64::from(record);
            *out = None;
        }
        let owed = LaneAck {
            psn: r.psn,
            aeth: Aeth {
                syndrome: ACK,
                msn: resp.msn,
            },
        };
        let handles = [resp.recv_cq.0, resp.send_cq.0];
        lane.owe(owed);
        Some(Executed {
            fired: [0, 1].map(|i| fired[i].then_some(handles[i])),
        })
    }
}

/// Bit 31 of an R_Key: a memory window's (`mw.rs`), whose changes do not
/// move the MR table's generation; the cell never takes one.
const WINDOW_KEY: u32 = 1 << 31;

impl Qp {
    /// The responder, lent with the requester (`Qp::lend`) if it is idle:
    /// no message in progress, nothing held or queued to send, no RNR NAK
    /// held, its own receive cell open; records carry ACKs and run the
    /// express path. Its receives go into the cell.
    pub(super) fn lend_responder(&mut self, ctx: &Ctx<'_>) -> Option<RespLane> {
        let idle = self.responder_idle(ctx);
        let local = ctx
            .config
            .gids
            .get(usize::from(self.attr.ah_attr.sgid_index))
            .copied();
        let ring = |h: CqHandle| ctx.cqs.get(h.0).map(|c| (h, Arc::clone(&c.entries)));
        let (local, recv_cq, send_cq) = (local?, ring(self.recv_cq)?, ring(self.send_cq)?);
        if !(idle && self.rq.lend()) {
            return None;
        }
        Some(RespLane {
            psn: self.resp.psn,
            msn: self.resp.msn,
            qpn: self.qpn,
            mtu: self.mtu(ctx.config),
            remote_write: self.attr.qp_access_flags.contains(Access::REMOTE_WRITE),
            peer: self.attr.ah_attr.dest_ip(),
            local,
            recv_cq,
            send_cq,
            sig_all: self.sq_sig_all,
            counts: LentCounts::default(),
        })
    }

    /// The responder of a QP whose requester is lent already, lent too if
    /// it was taken back alone ([`Qp::reclaim_responder`]) and is idle
    /// again.
    pub(in crate::qp) fn lend_responder_again(&mut self, ctx: &Ctx<'_>) {
        let Some(x) = &self.express else { return };
        // What `lend_responder` asks of the QP itself, first, without the
        // cell's lock: most QPs that never lend theirs stop here.
        if x.recv.is_none() || !self.responder_idle(ctx) {
            return;
        }
        let x = Arc::clone(x);
        let mut g = x.lock();
        if let Lent::Lent(lane, _) = &mut g.lent
            && lane.resp.is_none()
        {
            lane.resp = self.lend_responder(ctx);
        }
    }

    /// Whether the responder could be lent (see [`Qp::lend_responder`]):
    /// its own receive queue, no message in progress, no RNR NAK held or
    /// pending, nothing queued to send; records carry ACKs and run the
    /// express path.
    fn responder_idle(&self, ctx: &Ctx<'_>) -> bool {
        let r = &self.resp;
        ctx.config.express
            && ctx.config.lane_acks
            && self.srq.is_none()
            && r.cur.is_none()
            && r.rnr_held.is_none()
            && r.spare.is_none()
            && !r.sent_psn_nak
            && r.out.is_empty()
            && self.timers.rnr_hold.is_none()
    }

    /// The region a request's data landed in (a receive's first SGE, a
    /// WRITE's region, not a window), for the cell's lent responder to
    /// check the next ones against.
    pub(crate) fn remember_target_region(&self, ctx: &Ctx<'_>, lkey: u32) {
        if lkey & WINDOW_KEY != 0 {
            return;
        }
        if let Some(x) = &self.express
            && x.recv.is_some()
            && x.wanted.load(Ordering::Relaxed)
        {
            x.remember(ctx.mrs, self.pd, lkey);
        }
    }
}
