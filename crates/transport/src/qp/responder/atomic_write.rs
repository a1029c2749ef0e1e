//! ATOMIC WRITE (IBA 1.5, opcode 0x1D) on the responder: eight bytes placed
//! at an 8-byte aligned address as one indivisible store, answered with an ACK
//! like an RDMA WRITE (rxe `atomic_write_reply`). It needs REMOTE_WRITE, on
//! the QP and on the region or window.

use super::Fail;
use crate::mr::AtomicOp;
use crate::qp::Ctx;
use crate::qp::Qp;
use crate::types::{Access, WcStatus};
use softrdma_wire::{NakCode, Packet};

impl Qp {
    pub(super) fn exec_atomic_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        mem: &mut dyn crate::Memory,
        pkt: &Packet<'_>,
    ) -> Result<(), Fail> {
        let reth = pkt.hdr.reth.ok_or(Fail::Drop)?;
        let Ok(bytes) = <[u8; 8]>::try_from(pkt.payload) else {
            return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
        };
        if reth.dma_len != 8 || !reth.va.is_multiple_of(8) {
            return Err(Fail::Nak(NakCode::InvalidRequest, WcStatus::RemInvReqErr));
        }
        let host = self.check_rkey(ctx, reth.rkey, reth.va, 8, Access::REMOTE_WRITE)?;
        // The bytes land as they were sent; a compare-and-swap loop makes the
        // store atomic through the `Memory` interface.
        let value = u64::from_ne_bytes(bytes);
        let read = host.atomic(mem, AtomicOp::FetchAdd { add: 0 });
        let mut cur = read.map_err(|e| self.access_fail(ctx, e))?;
        loop {
            let op = AtomicOp::CompareSwap {
                compare: cur,
                swap: value,
            };
            let seen = host.atomic(mem, op).map_err(|e| self.access_fail(ctx, e))?;
            if seen == cur {
                break;
            }
            cur = seen;
        }
        self.resp.msn = self.resp.msn.wrapping_add(1) & 0xFF_FFFF;
        self.resp.psn = pkt.hdr.bth.psn.add(1);
        Ok(())
    }
}
