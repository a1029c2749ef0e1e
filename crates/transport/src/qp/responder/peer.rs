//! The responder's side of peer copy (`qp/peer.rs`): a WRITE copied from the
//! requester's ranges into the MR after the usual checks, a SEND into the
//! receive WQE's SGEs, and the one-packet answer to a READ naming the
//! checked range of the MR.

use super::{ACK, Fail, ScatterError};
use crate::endpoint::Transmit;
use crate::mr::{Host, PeerCopyError};
use crate::qp::{Ctx, InProgress, Path, Qp, bth, sgl};
use crate::tm::RNDV_HDR_LEN;
use crate::types::{Access, WcStatus};
use softrdma_wire::{Aeth, Headers, NakCode, Opcode, Packet, PeerSeg, Psn};

/// What a failed copy from the requester becomes.
fn copy_fail(e: PeerCopyError) -> Fail {
    match e {
        // The requester is gone: nobody to answer (its peers learn of it
        // from the registry, as on the wire).
        PeerCopyError::Gone => Fail::Drop,
        // Its ranges are not its memory (any more): its own error, as a
        // NIC's failed DMA read would be.
        PeerCopyError::Fault => Fail::Nak(NakCode::RemoteOperational, WcStatus::RemOpErr),
        PeerCopyError::Denied => Fail::Nak(NakCode::RemoteOperational, WcStatus::RemOpErr),
        // Ranges from a link that cannot carry them.
        PeerCopyError::Unsupported => Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr),
    }
}

impl Qp {
    /// A whole WRITE by peer copy; returns its length (it always ends the
    /// message).
    pub(super) fn write_peer(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) -> Result<Option<u32>, Fail> {
        let invalid = Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr);
        let reth = pkt.hdr.reth.ok_or(Fail::Drop)?;
        if reth.dma_len > ctx.config.limits.max_msg_sz {
            return Err(invalid);
        }
        let (src, total, from) = softrdma_wire::read_peer_segs(pkt.payload).map_err(|_| invalid)?;
        if total != u64::from(reth.dma_len) {
            return Err(invalid);
        }
        let host = self.check_rkey(ctx, reth.rkey, reth.va, reth.dma_len, Access::REMOTE_WRITE)?;
        if total > 0 {
            let dst = [PeerSeg::private(host.addr, reth.dma_len)];
            match mem.read_peer(from, &src, &dst, host.on_demand) {
                Ok(()) => {}
                // On-demand memory of ours not mapped (the ranges were
                // checked on the way out, so the fault is on this side).
                Err(PeerCopyError::Fault) if host.on_demand => {
                    ctx.stats.access_violations += 1;
                    return Err(Fail::Nak(NakCode::RemoteAccess, WcStatus::RemAccessErr));
                }
                Err(e) => return Err(copy_fail(e)),
            }
        }
        self.resp.psn = self.resp.psn.add(1);
        self.resp.cur = None;
        self.resp.msn = self.resp.msn.wrapping_add(1) & 0xFF_FFFF;
        Ok(Some(reth.dma_len))
    }

    /// A whole SEND by peer copy into the next receive WQE.
    pub(super) fn send_peer(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) -> Result<(), Fail> {
        let invalid = Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr);
        let (src, total, from) = softrdma_wire::read_peer_segs(pkt.payload).map_err(|_| invalid)?;
        let len = u32::try_from(total)
            .ok()
            .filter(|&l| l <= ctx.config.limits.max_msg_sz)
            .ok_or(invalid)?;
        // A tag-matching SRQ routes by the message's head (TMH and RVH).
        let mut head = [0u8; RNDV_HDR_LEN];
        let head = if self.tm_srq(ctx) {
            let n = len.min(RNDV_HDR_LEN as u32);
            let h = &mut head[..n as usize];
            mem.read_peer_head(from, &peer_prefix(&src, n), h)
                .map_err(copy_fail)?;
            &head[..n as usize]
        } else {
            &head[..0]
        };
        let (wqe, tm) = self.start_recv(ctx, head)?;
        let skip = tm.map_or(0, |t| t.skip.min(len));
        let src = peer_skip(&src, skip);
        let len = len - skip;
        let dst = sgl::host_ranges(ctx.mrs, self.pd, &wqe.sgl, len, Access::LOCAL_WRITE);
        // From here a failure completes the WQE with its status (`fail_recv`).
        self.resp.cur = Some(InProgress::Send {
            wqe,
            offset: len,
            tm,
        });
        let prot = Fail::Nak(NakCode::RemoteOperational, WcStatus::LocProtErr);
        let (dst, on_demand) = dst.map_err(|e| match e {
            ScatterError::TooLong => Fail::Nak(NakCode::InvalidRequest, WcStatus::LocLenErr),
            ScatterError::Prot(_) => prot,
        })?;
        if len > 0 {
            match mem.read_peer(from, &src, &dst, on_demand) {
                Ok(()) => {}
                // The requester is gone: nothing answered, an ordinary
                // WQE kept for the next SEND (a matched tag completes
                // with the error, as its message is lost).
                Err(PeerCopyError::Gone) => {
                    if let Some(InProgress::Send { wqe, tm: None, .. }) = self.resp.cur.take() {
                        self.resp.spare = Some(wqe);
                        return Err(Fail::Drop);
                    }
                    return Err(copy_fail(PeerCopyError::Fault));
                }
                // Our on-demand receive buffer is not mapped, as a scatter
                // fault on the packet path.
                Err(PeerCopyError::Fault) if on_demand => return Err(prot),
                Err(e) => return Err(copy_fail(e)),
            }
        }
        self.resp.psn = self.resp.psn.add(1);
        if let Some(rkey) = pkt.hdr.ieth
            && crate::mw::remote_invalidate(ctx.mws, self.pd, rkey).is_err()
        {
            return Err(invalid);
        }
        self.finish_send(ctx, pkt);
        Ok(())
    }

    /// Places a peer-copy READ's data into the requester's memory if its
    /// request offers it (`qp/peer.rs`): `host`, the checked start of the
    /// `len` bytes asked for. False: answer with the range instead.
    pub(super) fn place_read(
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        payload: &[u8],
        host: Host,
        len: u32,
    ) -> bool {
        match softrdma_wire::read_offer(payload) {
            Ok(Some((offer, from))) if offer.dst.len == len && !host.on_demand && len > 0 => {
                mem.place_peer(from, &offer, host.addr)
            }
            Ok(_) => false,
            Err(_) => {
                // The READ itself is sound; only its offer is not.
                ctx.stats.drop_malformed += 1;
                false
            }
        }
    }

    /// The answer to a peer-copy READ: if placed, a response naming no range;
    /// else the host range of `[va, va + len)` under `rkey`, checked again
    /// now (the region may be gone). `None`: the check failed and a NAK took
    /// the READ's place in the queue.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn peer_read_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        path: &Path,
        psn: Psn,
        (va, rkey, len): (u64, u32, u32),
        msn: u32,
        placed: bool,
        buf: &mut Vec<u8>,
    ) -> Option<Option<Transmit>> {
        let dest = self.attr.dest_qp_num;
        let mut h = Headers::new(bth(
            Opcode::SOFTRDMA_RC_RDMA_READ_RESPONSE_ONLY_PEER,
            dest,
            psn,
        ));
        h.aeth = Some(Aeth { syndrome: ACK, msn });
        let (mrs, mws) = (ctx.mrs, &*ctx.mws);
        let seg = if placed {
            None
        } else {
            let checked = crate::mw::check_remote(
                mrs,
                mws,
                self.qpn,
                self.pd,
                rkey,
                va,
                u64::from(len),
                Access::REMOTE_READ,
            );
            let Ok(host) = checked else {
                self.nak_read(ctx, psn, msn);
                return None;
            };
            // The region's memfd, if shared (a memory window's rkey names
            // none: its bytes are copied from private memory).
            Some(PeerSeg {
                addr: host.addr,
                len,
                file: mrs.share_of(rkey),
            })
        };
        let segs = seg.as_slice();
        let plen = softrdma_wire::peer_payload_len(segs.len());
        let t = Qp::build::<()>(ctx.config, path, &h, plen, buf, |dst| {
            softrdma_wire::write_peer_segs(ctx.config.peer_incarnation, segs, dst);
            Ok(())
        })
        .ok();
        if t.is_some() {
            self.resp.out.pop_front();
        }
        Some(t)
    }
}

/// The first `n` bytes of the ranges `src`.
fn peer_prefix(src: &[PeerSeg], n: u32) -> Vec<PeerSeg> {
    let mut left = n;
    let mut out = Vec::new();
    for s in src {
        if left == 0 {
            break;
        }
        let len = s.len.min(left);
        out.push(PeerSeg { len, ..*s });
        left -= len;
    }
    out
}

/// The ranges `src` without their first `n` bytes.
fn peer_skip(src: &[PeerSeg], n: u32) -> Vec<PeerSeg> {
    let mut skip = n;
    let mut out = Vec::new();
    for s in src {
        if skip >= s.len {
            skip -= s.len;
            continue;
        }
        out.push(PeerSeg {
            addr: s.addr + u64::from(skip),
            len: s.len - skip,
            ..*s
        });
        skip = 0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cut_at_a_byte_count() {
        let src = [PeerSeg::private(100, 10), PeerSeg::private(500, 30)];
        assert_eq!(
            peer_prefix(&src, 16),
            vec![PeerSeg::private(100, 10), PeerSeg::private(500, 6)]
        );
        assert_eq!(peer_skip(&src, 16), vec![PeerSeg::private(506, 24)]);
        assert_eq!(peer_skip(&src, 0), src.to_vec());
        assert_eq!(peer_skip(&src, 40), vec![]);
        assert_eq!(peer_prefix(&src, 0), vec![]);
    }
}
