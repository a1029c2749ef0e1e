//! Peer copy (issue 17, step 2): on an RC QP whose peer is a process of this
//! host reached through a shared-memory lane, a large SEND, RDMA WRITE or
//! READ is one packet listing memory ranges (`softrdma_wire::peer`), and whoever
//! owns the destination copies the data straight from the other process
//! ([`crate::Memory::read_peer`]; the engine `memcpy`s through a mapping
//! of the region's memfd where the sender shared it at registration
//! ([`crate::PeerFile`]), else uses `process_vm_readv`):
//!
//! - WRITE: the requester lists its SGEs' host ranges (lkeys checked); the
//!   responder checks rkey, PD, rights and bounds as for any WRITE, then
//!   copies from them into its MR and ACKs.
//! - SEND: likewise into the receive WQE's SGEs (lkeys checked for
//!   LOCAL_WRITE, length against the WQE's capacity).
//! - READ: the responder checks the rkey and answers with the range of its
//!   MR; the requester, its WQE still outstanding, copies from it into its
//!   SGEs (lkeys checked for LOCAL_WRITE).
//!
//! - READ placed by the responder: when the READ's SGEs are one range inside
//!   a region shared at registration, the requester arms a placement ticket
//!   ([`crate::Memory::arm_ticket`]) and offers it with the range in the
//!   request (`softrdma_wire::PlaceOffer`). The responder, after the rkey
//!   check, takes the ticket and copies into the requester's region itself
//!   ([`crate::Memory::place_peer`]), then answers with a response naming
//!   no range; the requester settles the ticket (which must say "placed")
//!   and completes. The copy then runs on the responder's CPU, idle in a
//!   READ benchmark, instead of after the requester's own engine work (a
//!   64 KiB READ: ~0.47 µs each, BENCHMARKS.md). A responder that cannot
//!   place answers as above.
//!
//! A process writes into another's memory only under a ticket that process
//! armed and has not revoked: a response, a flush, a reset or a destroyed
//! QP ends the ticket (dropping [`Offer`] waits for a placer that is
//! copying), and a late or duplicate request cannot take it again. Every
//! other copy reads from the peer, so one that comes late (a peer killed,
//! a QP flushed, memory deregistered) cannot land in memory its owner gave
//! back. A message is one packet and one PSN whatever its length;
//! retransmission, duplicates and ordering are the wire path's (a duplicate
//! WRITE is re-ACKed, a duplicate READ re-answered (never placed) and
//! copied again).

use super::{Ctx, Qp, SendWqe, bth, sgl};
use crate::mr::{PeerCopyError, PlacementTicket};
use crate::types::{Access, QpType, SendFlags, WcStatus, WrOpcode};
use softrdma_wire::{Headers, MAX_PEER_SEGS, Opcode, Packet, PeerSeg, PlaceOffer, Psn, Reth};

/// A READ's offer of placement: where, and the ticket (revoked on drop).
#[derive(Debug)]
pub(crate) struct Offer {
    dst: PeerSeg,
    ticket: Box<dyn PlacementTicket>,
}

/// Smallest message sent by peer copy. `peer_copy` example of
/// `softrdma-shm` (BENCHMARKS.md, "Issue 17, step 2"): one
/// `process_vm_readv` costs 1.9 µs at 4 KiB and 7.9 µs at 64 KiB here, while
/// the lanes' packet path moves about 5 GB/s (0.8 µs per 4 KiB packet), so
/// peer copy pays from about 12 KiB on.
pub const PEER_COPY_MIN: u32 = 16 * 1024;

/// Longest READ offered for placement by its responder. Same-host
/// `ib_read_bw` (2026-11-27, fast mode), placement against the requester's
/// own copy: 64 KiB 84 against 63 GB/s, 256 KiB and 512 KiB even, 1 MiB
/// 54–56 against 59–61 GB/s (copies past the caches; the requester's own
/// copy also leaves the data in its cache).
pub const PLACE_MAX: u32 = 512 * 1024;

impl Qp {
    /// Whether the WQE about to start goes as one peer-copy packet. Not
    /// when an SGE names an on-demand-paging region: its memory may be
    /// unmapped, and the peer's copier would report that as its own
    /// failure; the packet path reports it here (`LOC_PROT_ERR`).
    pub(super) fn starts_as_peer(
        peer_copy: bool,
        qp_type: QpType,
        w: &SendWqe,
        mrs: &crate::mr::MrTable,
    ) -> bool {
        peer_copy
            && qp_type == QpType::Rc
            && matches!(
                w.wr.opcode,
                WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
                    | WrOpcode::RdmaRead
                    | WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::SendWithInv
            )
            && w.wr.inline.is_none()
            && w.len >= PEER_COPY_MIN
            && w.wr.sgl.len() <= MAX_PEER_SEGS
            && !sgl::any_on_demand(mrs, &w.wr.sgl)
    }

    /// Arms a placement ticket for peer-copy READ `w` when its request is
    /// first built, if its SGEs are one range inside a region shared at
    /// registration (a retransmitted request offers the same ticket).
    pub(super) fn offer_placement(
        ctx: &Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pd: crate::PdHandle,
        w: &mut SendWqe,
    ) {
        if w.wr.opcode != WrOpcode::RdmaRead
            || w.offer.is_some()
            || w.wr.sgl.len() != 1
            || w.len > PLACE_MAX
        {
            return;
        }
        let dst = sgl::host_ranges(ctx.mrs, pd, &w.wr.sgl, w.len, Access::LOCAL_WRITE);
        let Ok((segs, false)) = dst else {
            return;
        };
        let [seg] = segs.as_slice() else {
            return;
        };
        if seg.in_file()
            && let Some(ticket) = mem.arm_ticket()
        {
            w.offer = Some(Offer { dst: *seg, ticket });
        }
    }

    /// The peer-copy request of WQE `w`: its headers and payload (for a
    /// WRITE, the host ranges of its SGEs; for a READ, its offer of
    /// placement, if any).
    pub(super) fn peer_request(
        ctx: &Ctx<'_>,
        pd: crate::PdHandle,
        w: &SendWqe,
        dest_qp: u32,
        psn: Psn,
    ) -> Result<(Headers, Vec<u8>), WcStatus> {
        let reth = Reth {
            va: w.wr.remote_addr,
            rkey: w.wr.rkey,
            dma_len: w.len,
        };
        let op = w.wr.opcode;
        let oc = match op {
            WrOpcode::RdmaRead => Opcode::SOFTRDMA_RC_RDMA_READ_REQUEST_PEER,
            WrOpcode::RdmaWriteWithImm => Opcode::SOFTRDMA_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE_PEER,
            WrOpcode::Send => Opcode::SOFTRDMA_RC_SEND_ONLY_PEER,
            WrOpcode::SendWithImm => Opcode::SOFTRDMA_RC_SEND_ONLY_WITH_IMMEDIATE_PEER,
            WrOpcode::SendWithInv => Opcode::SOFTRDMA_RC_SEND_ONLY_WITH_INVALIDATE_PEER,
            _ => Opcode::SOFTRDMA_RC_RDMA_WRITE_ONLY_PEER,
        };
        let mut h = Headers::new(bth(oc, dest_qp, psn));
        h.bth.ack_req = true;
        let send = matches!(
            op,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv
        );
        if !send {
            h.reth = Some(reth);
        }
        if op == WrOpcode::RdmaRead {
            let Some(o) = &w.offer else {
                return Ok((h, Vec::new()));
            };
            let offer = PlaceOffer {
                dst: o.dst,
                ticket: o.ticket.offer(),
            };
            let mut p = vec![0; softrdma_wire::OFFER_LEN];
            softrdma_wire::write_offer(ctx.config.peer_incarnation, &offer, &mut p);
            return Ok((h, p));
        }
        match op {
            WrOpcode::RdmaWriteWithImm | WrOpcode::SendWithImm => h.imm = Some(w.wr.imm_data),
            WrOpcode::SendWithInv => h.ieth = Some(w.wr.imm_data),
            _ => {}
        }
        // The solicited bit goes with SENDs and immediates (IBTA 9.2.3).
        h.bth.se = (send || h.imm.is_some()) && w.wr.flags.contains(SendFlags::SOLICITED);
        let (segs, _) = sgl::host_ranges(ctx.mrs, pd, &w.wr.sgl, w.len, Access::EMPTY)
            .map_err(|_| WcStatus::LocProtErr)?;
        let mut p = vec![0; softrdma_wire::peer_payload_len(segs.len())];
        softrdma_wire::write_peer_segs(ctx.config.peer_incarnation, &segs, &mut p);
        Ok((h, p))
    }

    /// The requester's side of a peer-copy READ: the responder checked the
    /// rkey and names the range of its MR; copy it into the SGEs of the READ
    /// at the head of the queue.
    pub(super) fn on_peer_read_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) {
        let psn = pkt.hdr.bth.psn;
        if !self.response_target(ctx, psn, false) {
            return;
        }
        let w = &mut self.sq[0];
        match softrdma_wire::read_peer_segs(pkt.payload) {
            // Placed: the ticket must say so (then the bytes are here).
            Ok((segs, _, _)) if segs.is_empty() && w.peer => {
                let placed = w.offer.take().is_some_and(|o| o.ticket.settle());
                if !placed {
                    // Not ours to believe: the retry timer asks again
                    // (with a new ticket).
                    ctx.stats.drop_malformed += 1;
                    return;
                }
            }
            Ok((segs, total, from)) if w.peer && total == u64::from(w.len) => {
                // Answered without placement: no responder may place it
                // any more (a duplicate request could still take the
                // ticket).
                if let Some(o) = w.offer.take() {
                    o.ticket.settle();
                }
                if !self.copy_read_data(ctx, mem, &segs, from) {
                    return;
                }
            }
            _ => {
                ctx.stats.drop_malformed += 1;
                return;
            }
        }
        self.complete_front(ctx, WcStatus::Success);
        self.progress(ctx, psn.add(1));
    }

    /// Copies the responder's ranges `src` (of incarnation `from`) into the
    /// SGEs of the READ at the head of the queue; false if the READ did not
    /// complete by it (failed, or left to the retry timer).
    fn copy_read_data(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        src: &[PeerSeg],
        from: u64,
    ) -> bool {
        let w = &self.sq[0];
        let dst = sgl::host_ranges(ctx.mrs, self.pd, &w.wr.sgl, w.len, Access::LOCAL_WRITE);
        let (dst, on_demand) = match dst {
            Ok(d) => d,
            Err(_) => {
                self.fail_front(ctx, WcStatus::LocProtErr);
                return false;
            }
        };
        match mem.read_peer(from, src, &dst, on_demand) {
            Ok(()) => true,
            // The responder died: nothing came; the retry timer ends it
            // (as a lost response on the wire would).
            Err(PeerCopyError::Gone) => {
                ctx.stats.drop_bad_state += 1;
                false
            }
            // Its memory went between its check and our copy.
            Err(PeerCopyError::Fault) => {
                self.fail_front(ctx, WcStatus::RemAccessErr);
                false
            }
            Err(PeerCopyError::Denied | PeerCopyError::Unsupported) => {
                self.fail_front(ctx, WcStatus::RemOpErr);
                false
            }
        }
    }
}
