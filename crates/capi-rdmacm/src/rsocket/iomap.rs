//! `riomap` / `riounmap` / `riowrite` (rdma-core's direct data placement):
//! a side maps a buffer for remote writes (`PROT_WRITE`), the mapping is
//! written into a slot of the peer's iomap table (an RDMA WRITE WITH
//! IMMEDIATE `OP_IOMAP_SGL`, sent before the next data), and the peer's
//! `riowrite` then writes at an offset of that mapping with plain RDMA
//! WRITEs — no receive buffer, no receive completion.

use core::ffi::c_int;

use softrdma_rsocket::proto::*;
use softrdma_rsocket::stream::Staging;

use super::Conn;
use crate::ffi::*;
use crate::rsocket::sys::Res;

/// One local mapping the peer may write into.
pub(in crate::rsocket) struct IoMap {
    pub(in crate::rsocket) offset: u64,
    pub(in crate::rsocket) mr: *mut ibv_mr,
    /// The peer's iomap slot; `None` for a mapping without `PROT_WRITE`.
    pub(in crate::rsocket) slot: Option<u32>,
    /// Not yet sent to the peer.
    pub(in crate::rsocket) pending: bool,
}

impl Conn {
    /// `riomap`: returns the offset the peer writes at.
    pub(in crate::rsocket) fn iomap(
        &mut self,
        buf: *mut u8,
        len: usize,
        prot: c_int,
        offset: i64,
    ) -> Res<i64> {
        if prot & !(libc::PROT_WRITE | libc::PROT_NONE) != 0 {
            return Err(libc::EINVAL);
        }
        let slot = if prot & libc::PROT_WRITE != 0 {
            let used: Vec<u32> = self.iomaps.iter().filter_map(|m| m.slot).collect();
            Some(
                (0..self.s.remote_iomap.length)
                    .find(|i| !used.contains(i))
                    .ok_or(libc::ENOMEM)?,
            )
        } else {
            None
        };
        let mr = self.v.reg(buf, len)?;
        let offset = if offset == -1 { buf as i64 } else { offset };
        self.iomaps.push(IoMap {
            offset: offset as u64,
            mr,
            slot,
            pending: slot.is_some(),
        });
        Ok(offset)
    }

    /// `riounmap`: the mapping of exactly `buf`/`len`.
    pub(in crate::rsocket) fn iounmap(&mut self, buf: *mut u8, len: usize) -> Res<()> {
        let i = self
            .iomaps
            .iter()
            // SAFETY: live MRs of ours.
            .position(|m| unsafe { (*m.mr).addr as *mut u8 == buf && (*m.mr).length == len })
            .ok_or(libc::EINVAL)?;
        let m = self.iomaps.remove(i);
        self.v.dereg(m.mr);
        Ok(())
    }

    pub(in crate::rsocket) fn iomap_pending(&self) -> bool {
        self.iomaps.iter().any(|m| m.pending)
    }

    /// Sends the first pending mapping (`can_send` must hold).
    pub(in crate::rsocket) fn send_one_iomap(&mut self) -> Res<()> {
        let Some(i) = self.iomaps.iter().position(|m| m.pending) else {
            return Ok(());
        };
        let (slot, mr, off) = {
            let m = &self.iomaps[i];
            (m.slot.unwrap_or(0), m.mr, m.offset)
        };
        // SAFETY: a live MR of ours.
        let (addr, key, length) = unsafe { ((*mr).addr as u64, (*mr).rkey, (*mr).length as u32) };
        let mut b = [0u8; IOMAP_SIZE];
        let (off, addr, key, length) = if self.s.swap() {
            (
                off.swap_bytes(),
                addr.swap_bytes(),
                key.swap_bytes(),
                length.swap_bytes(),
            )
        } else {
            (off, addr, key, length)
        };
        b[..8].copy_from_slice(&off.to_ne_bytes());
        b[8..16].copy_from_slice(&addr.to_ne_bytes());
        b[16..20].copy_from_slice(&key.to_ne_bytes());
        b[20..24].copy_from_slice(&length.to_ne_bytes());
        let o = self.s.take_iomap_send();
        let mut sge = ibv_sge {
            addr: b.as_ptr() as u64,
            length: IOMAP_SIZE as u32,
            lkey: 0,
        };
        let flags = if self.s.layout().inline >= IOMAP_SIZE as u32 {
            IBV_SEND_INLINE
        } else {
            self.sbuf.write(o as usize, &b);
            sge = ibv_sge {
                addr: self.sbuf.addr(o as usize),
                length: IOMAP_SIZE as u32,
                lkey: self.lkey(0),
            };
            0
        };
        let dst = Sge {
            addr: self.s.remote_iomap.addr + slot as u64 * IOMAP_SIZE as u64,
            key: self.s.remote_iomap.key,
            length: 0,
        };
        let m = msg(OP_IOMAP_SGL, slot);
        self.iomaps[i].pending = false;
        self.post_write(
            core::slice::from_mut(&mut sge),
            m,
            flags,
            IBV_WR_RDMA_WRITE_WITH_IMM,
            m,
            dst,
        )
    }

    /// The peer's mapping covering `offset` (from our iomap table).
    fn find_iomap(&self, offset: u64) -> Option<(u64, Sge)> {
        let base = SGE_SIZE * SGL_SIZE;
        (0..self.target_iomap_size as usize).find_map(|i| {
            let o = base + i * IOMAP_SIZE;
            let t = &self.target.0;
            let off = t.read_u64(o);
            let sge = Sge {
                addr: t.read_u64(o + 8),
                key: t.read_u32(o + 16),
                length: t.read_u32(o + 20),
            };
            (sge.length > 0 && offset >= off && offset < off + sge.length as u64)
                .then_some((off, sge))
        })
    }

    /// One `riowrite` transfer at `offset` (`can_send` must hold):
    /// `Err(EINVAL)`... none: `Ok(0)` if no mapping covers `offset`.
    pub(in crate::rsocket) fn iowrite_once(
        &mut self,
        buf: &[u8],
        offset: u64,
        olen: u32,
    ) -> Res<usize> {
        let Some((moff, sge)) = self.find_iomap(offset) else {
            return Ok(0);
        };
        let room = moff + sge.length as u64 - offset;
        let xfer = (buf.len() as u64)
            .min(olen as u64)
            .min(self.s.sbuf_free() as u64)
            .min(room) as u32;
        let data = &buf[..xfer as usize];
        let mut sges = [ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; 2];
        let staging: Staging = self.s.take_io_write(xfer);
        let (n, flags) = self.sges(data, staging, &mut sges);
        let dst = Sge {
            addr: sge.addr + (offset - moff),
            key: sge.key,
            length: 0,
        };
        self.post_write(
            &mut sges[..n],
            msg(OP_WRITE, xfer),
            flags,
            IBV_WR_RDMA_WRITE,
            0,
            dst,
        )?;
        Ok(xfer as usize)
    }
}
