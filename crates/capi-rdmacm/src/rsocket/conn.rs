//! One connected stream rsocket: its buffers and the credit protocol of
//! rdma-core's rsockets. Data moves by RDMA WRITE WITH IMMEDIATE into the
//! peer's receive buffer, at addresses the peer granted through its target
//! SGL; the receiver grants each half of its receive buffer back as it is
//! drained (an RDMA WRITE of an SGE into the sender's target SGL followed by
//! an `OP_SGL` immediate). Nothing here blocks: the socket layer waits.

use core::ffi::c_int;
use std::collections::VecDeque;

#[path = "iomap.rs"]
mod iomap;

use super::proto::*;
use super::sys::{Region, Res, Verbs, unsafe_zeroed};
use crate::ffi::*;

/// rdma-core's state bits (`enum rs_state`) for a connection.
pub(super) const CONNECTED: u32 = 0x0100;
pub(super) const WRITABLE: u32 = 0x0200;
pub(super) const READABLE: u32 = 0x0400;
pub(super) const CONNECT_RDWR: u32 = CONNECTED | READABLE | WRITABLE;
pub(super) const DISCONNECTED: u32 = 0x1000;
pub(super) const ERROR: u32 = 0x2000;

/// Sizes chosen before connecting (socket options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Sizes {
    pub(super) sbuf: u32,
    pub(super) rbuf: u32,
    pub(super) sq: u32,
    pub(super) rq: u32,
    pub(super) inline: u32,
    pub(super) iomap: u32,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            sbuf: DEF_WMEM,
            rbuf: DEF_MEM,
            sq: DEF_SQSIZE,
            rq: DEF_RQSIZE,
            inline: DEF_INLINE,
            iomap: 0,
        }
    }
}

pub(super) struct Conn {
    v: Verbs,
    /// smr, tmr (target SGL + iomap), rmr.
    mrs: [*mut ibv_mr; 3],
    sbuf: Region,
    target: Region,
    rbuf: Region,
    sbuf_size: u32,
    rbuf_size: u32,
    sq_size: u32,
    rq_size: u32,
    sq_inline: u32,
    pub(super) target_iomap_size: u32,
    pub(super) state: u32,
    pub(super) err: c_int,
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    sseq_no: u16,
    sseq_comp: u16,
    rseq_no: u16,
    rseq_comp: u16,
    remote_sgl: Sge,
    remote_sge: u32,
    pub(super) remote_iomap: Sge,
    target_sge: usize,
    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,
    rbuf_offset: u32,
    sbuf_bytes_avail: u32,
    /// Offset in `sbuf` of the next copy.
    ssgl_off: u32,
    sqe_avail: u32,
    /// Lengths of received data messages not yet read (at most rq_size).
    rmsg: VecDeque<u32>,
    swap: bool,
    pub(super) cq_armed: bool,
    /// Local buffers mapped for the peer's `riowrite` (`riomap`).
    iomaps: Vec<iomap::IoMap>,
}

// SAFETY: raw pointers to engine objects and owned regions; used under the
// socket's mutex only.
unsafe impl Send for Conn {}

impl Conn {
    /// Creates the CQ, QP and buffers on `id` and posts the receives.
    pub(super) fn new(id: *mut rdma_cm_id, sz: &Sizes) -> Res<Conn> {
        let sq = sz.sq.clamp(QP_MIN_SIZE, QP_MAX_SIZE);
        let rq = sz.rq.clamp(QP_MIN_SIZE, QP_MAX_SIZE);
        let (v, inline) = Verbs::create(id, sq, rq, sz.inline)?;
        let sbuf_size = sz.sbuf.max(SNDLOWAT * 2);
        let rbuf_size = sz.rbuf.max(SNDLOWAT * 2) & !1;
        let sbuf = Region::new((sbuf_size + SGE_SIZE as u32 * QP_CTRL_SIZE) as usize)?;
        let tlen = SGE_SIZE * SGL_SIZE + IOMAP_SIZE * sz.iomap as usize;
        let target = Region::new(tlen)?;
        let rbuf = Region::new(rbuf_size as usize)?;
        let mut c = Conn {
            v,
            mrs: [core::ptr::null_mut(); 3],
            sbuf,
            target,
            rbuf,
            sbuf_size,
            rbuf_size,
            sq_size: sq,
            rq_size: rq,
            sq_inline: inline,
            target_iomap_size: sz.iomap,
            state: 0,
            err: 0,
            ctrl_seqno: 0,
            ctrl_max_seqno: QP_CTRL_SIZE,
            sseq_no: 0,
            sseq_comp: 0,
            rseq_no: 0,
            rseq_comp: (rq >> 1) as u16,
            remote_sgl: Sge::default(),
            remote_sge: 0,
            remote_iomap: Sge::default(),
            target_sge: 0,
            rbuf_bytes_avail: rbuf_size >> 1,
            rbuf_free_offset: rbuf_size >> 1,
            rbuf_offset: 0,
            sbuf_bytes_avail: sbuf_size,
            ssgl_off: 0,
            sqe_avail: sq - QP_CTRL_SIZE,
            rmsg: VecDeque::with_capacity(rq as usize + 1),
            swap: false,
            cq_armed: false,
            iomaps: Vec::new(),
        };
        c.mrs[0] = c.v.reg(
            c.sbuf.ptr(),
            (sbuf_size + SGE_SIZE as u32 * QP_CTRL_SIZE) as usize,
        )?;
        c.mrs[1] = c.v.reg(c.target.ptr(), tlen)?;
        c.mrs[2] = c.v.reg(c.rbuf.ptr(), rbuf_size as usize)?;
        for _ in 0..rq {
            c.v.post_recv(WR_RECV)?;
        }
        Ok(c)
    }

    fn lkey(&self, i: usize) -> u32 {
        // SAFETY: registered in `new`, live until drop.
        unsafe { (*self.mrs[i]).lkey }
    }
    fn rkey(&self, i: usize) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mrs[i]).rkey }
    }

    /// The completion channel's fd.
    pub(super) fn fd(&self) -> c_int {
        self.v.fd()
    }

    /// What this side sends in its REQ or REP.
    pub(super) fn conn_data(&self) -> ConnData {
        ConnData {
            version: 1,
            flags: CONN_FLAG_IOMAP
                | if cfg!(target_endian = "big") {
                    CONN_FLAG_NET
                } else {
                    0
                },
            credits: self.rq_size as u16,
            target_iomap_size: value_to_scale(self.target_iomap_size, 8) as u8,
            target_sgl: Sge {
                addr: self.target.addr(0),
                key: self.rkey(1),
                length: SGL_SIZE as u32,
            },
            data_buf: Sge {
                addr: self.rbuf.addr(0),
                key: self.rkey(2),
                length: self.rbuf_size >> 1,
            },
        }
    }

    /// Takes in the peer's REQ or REP; the connection is then usable.
    pub(super) fn save_peer(&mut self, peer: &ConnData) {
        self.remote_sgl = peer.target_sgl;
        self.remote_sge = 1;
        self.swap = peer.swapped();
        if peer.flags & CONN_FLAG_IOMAP != 0 {
            self.remote_iomap = Sge {
                addr: peer.target_sgl.addr + (SGE_SIZE as u64) * peer.target_sgl.length as u64,
                key: peer.target_sgl.key,
                length: scale_to_value(peer.target_iomap_size as u32, 8),
            };
        }
        self.set_target(0, peer.data_buf);
        self.sseq_comp = peer.credits;
        self.state = CONNECT_RDWR;
    }

    fn target_addr(&self, i: usize) -> u64 {
        self.target.read_u64(i * SGE_SIZE)
    }
    fn target_key(&self, i: usize) -> u32 {
        self.target.read_u32(i * SGE_SIZE + 8)
    }
    /// The target SGL is in this host's order (a swapping peer writes it so).
    fn target_len(&self, i: usize) -> u32 {
        self.target.read_u32(i * SGE_SIZE + 12)
    }
    fn set_target(&self, i: usize, s: Sge) {
        self.target.write_u64(i * SGE_SIZE, s.addr);
        self.target.write_u32(i * SGE_SIZE + 8, s.key);
        self.target.write_u32(i * SGE_SIZE + 12, s.length);
    }
    fn target_sge_now(&self, i: usize) -> Sge {
        Sge {
            addr: self.target_addr(i),
            key: self.target_key(i),
            length: self.target_len(i),
        }
    }

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    /// `rs_can_send`: a send WR, send buffer space, a peer receive credit and
    /// granted peer buffer are all available.
    pub(super) fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target_len(self.target_sge) != 0
    }
    pub(super) fn conn_can_send(&self) -> bool {
        self.can_send() || self.state & WRITABLE == 0
    }
    pub(super) fn have_rdata(&self) -> bool {
        !self.rmsg.is_empty()
    }
    pub(super) fn conn_have_rdata(&self) -> bool {
        self.have_rdata() || self.state & READABLE == 0
    }
    pub(super) fn conn_can_send_ctrl(&self) -> bool {
        self.ctrl_avail() || self.state & CONNECTED == 0
    }
    pub(super) fn all_sends_done(&self) -> bool {
        (self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno)).wrapping_add(self.sqe_avail)
            == self.sq_size
            || self.state & CONNECTED == 0
    }

    fn post_write(
        &self,
        sges: &mut [ibv_sge],
        wr_id: u32,
        flags: u32,
        opcode: u32,
        imm: u32,
        dst: Sge,
    ) -> Res<()> {
        let mut wr: ibv_send_wr = unsafe_zeroed();
        wr.wr_id = wr_id as u64;
        wr.sg_list = if sges.is_empty() {
            core::ptr::null_mut()
        } else {
            sges.as_mut_ptr()
        };
        wr.num_sge = sges.len() as c_int;
        wr.opcode = opcode;
        wr.send_flags = flags;
        wr.imm.imm_data = imm.to_be();
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: dst.addr,
            rkey: dst.key,
        };
        self.v.post_send(&mut wr)
    }

    /// A control message: a zero-length WRITE WITH IMMEDIATE.
    fn post_msg(&self, m: u32) -> Res<()> {
        self.post_write(&mut [], m, 0, IBV_WR_RDMA_WRITE_WITH_IMM, m, Sge::default())
    }

    /// `rs_send_credits`: grants the free half of the receive buffer (or only
    /// receive credits) to the peer.
    fn send_credits(&mut self) {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.rseq_comp = self.rseq_no.wrapping_add((self.rq_size >> 1) as u16);
        let m = msg(
            OP_SGL,
            self.rseq_no.wrapping_add(self.rq_size as u16) as u32,
        );
        let half = self.rbuf_size >> 1;
        let r = if self.rbuf_bytes_avail >= half {
            let mut sge = Sge {
                addr: self.rbuf.addr(self.rbuf_free_offset as usize),
                key: self.rkey(2),
                length: half,
            };
            if self.swap {
                sge = Sge {
                    addr: sge.addr.swap_bytes(),
                    key: sge.key.swap_bytes(),
                    length: sge.length.swap_bytes(),
                };
            }
            let bytes = sge.to_ne();
            let (mut ib, flags);
            if self.sq_inline < SGE_SIZE as u32 {
                let off = self.sbuf_size as usize
                    + SGE_SIZE * (self.ctrl_seqno & (QP_CTRL_SIZE - 1)) as usize;
                self.sbuf.write(off, &bytes);
                ib = ibv_sge {
                    addr: self.sbuf.addr(off),
                    length: SGE_SIZE as u32,
                    lkey: self.lkey(0),
                };
                flags = 0;
            } else {
                ib = ibv_sge {
                    addr: bytes.as_ptr() as u64,
                    length: SGE_SIZE as u32,
                    lkey: 0,
                };
                flags = IBV_SEND_INLINE;
            }
            let dst = Sge {
                addr: self.remote_sgl.addr + self.remote_sge as u64 * SGE_SIZE as u64,
                key: self.remote_sgl.key,
                length: 0,
            };
            let r = self.post_write(
                core::slice::from_mut(&mut ib),
                m,
                flags,
                IBV_WR_RDMA_WRITE_WITH_IMM,
                m,
                dst,
            );
            self.rbuf_bytes_avail -= half;
            self.rbuf_free_offset += half;
            if self.rbuf_free_offset >= self.rbuf_size {
                self.rbuf_free_offset = 0;
            }
            self.remote_sge += 1;
            if self.remote_sge == self.remote_sgl.length {
                self.remote_sge = 0;
            }
            r
        } else {
            self.post_msg(m)
        };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    fn give_credits(&self) -> bool {
        (self.rbuf_bytes_avail >= self.rbuf_size >> 1
            || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0)
            && self.ctrl_avail()
            && self.state & CONNECTED != 0
    }

    /// Grants credits if it is time (`rs_update_credits`). A grant is on
    /// the peer's critical path (its sender may be waiting for it), so it
    /// leaves at once: the device defers the posts of a thread that busy
    /// polls until that thread's next poll (a burst then leaves in one
    /// batch), and a reader that returns to its program may not poll again
    /// for a while; polling the CQ here sends it (and the acknowledgements
    /// due) now. rdma-core's post reaches the NIC at once anyway. Measured
    /// together with the spin (BENCHMARKS.md, "Issue 19", second round, the
    /// before/after pairs); alone, in a 3-run A/B at load 3–4, it cut a
    /// 64 KiB blocking stream's context switches from 9,700–16,100 to
    /// 1,500–6,900.
    pub(super) fn update_credits(&mut self) {
        if self.give_credits() {
            self.send_credits();
            self.poll_cq();
        }
    }

    /// Marks the connection broken with `e` (the first error wins).
    pub(super) fn fail(&mut self, e: c_int) {
        if self.state & CONNECTED != 0 {
            self.state = ERROR;
            self.err = e;
        }
    }

    /// `rs_poll_cq`: processes every completion there is, reposting the
    /// receives consumed.
    pub(super) fn poll_cq(&mut self) {
        let mut wcs: [ibv_wc; 16] = unsafe_zeroed();
        let mut rcnt = 0u32;
        'outer: loop {
            let n = match self.v.poll(&mut wcs) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    self.fail(e);
                    break;
                }
            };
            for (i, wc) in wcs[..n].iter().enumerate() {
                if wc.wr_id & WR_RECV != 0 {
                    if wc.status != IBV_WC_SUCCESS {
                        continue;
                    }
                    rcnt += 1;
                    // SAFETY: plain u32 union member.
                    let m = u32::from_be(unsafe { wc.imm.imm_data });
                    match msg_op(m) {
                        OP_SGL => self.sseq_comp = msg_data(m) as u16,
                        OP_IOMAP_SGL | OP_WRITE => {}
                        OP_CTRL => {
                            let d = msg_data(m);
                            if d == CTRL_DISCONNECT {
                                self.state = DISCONNECTED;
                                self.requeue_rest(&wcs[i + 1..n]);
                                break 'outer;
                            } else if d == CTRL_SHUTDOWN {
                                if self.state & WRITABLE != 0 {
                                    self.state &= !READABLE;
                                } else {
                                    self.state = DISCONNECTED;
                                    self.requeue_rest(&wcs[i + 1..n]);
                                    break 'outer;
                                }
                            }
                        }
                        _ => self.rmsg.push_back(msg_data(m)),
                    }
                } else {
                    let d = wc.wr_id as u32;
                    match msg_op(d) {
                        OP_SGL => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
                        OP_CTRL => {
                            self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1);
                            if msg_data(d) == CTRL_DISCONNECT {
                                self.state = DISCONNECTED;
                            }
                        }
                        OP_IOMAP_SGL => {
                            self.sqe_avail += 1;
                            self.sbuf_bytes_avail += IOMAP_SIZE as u32;
                        }
                        _ => {
                            self.sqe_avail += 1;
                            self.sbuf_bytes_avail += msg_data(d);
                        }
                    }
                    if wc.status != IBV_WC_SUCCESS {
                        self.fail(status_errno(wc.status));
                    }
                }
            }
        }
        if self.state & CONNECTED != 0 {
            for _ in 0..rcnt {
                if let Err(e) = self.v.post_recv(WR_RECV) {
                    self.fail(e);
                    break;
                }
            }
        }
    }

    /// rdma-core stops at a disconnect and leaves later completions in the
    /// CQ; having taken a batch out, the ones after it are dropped here the
    /// same way (nothing a disconnected socket reads), save send credits.
    fn requeue_rest(&mut self, rest: &[ibv_wc]) {
        for wc in rest.iter().filter(|w| w.wr_id & WR_RECV == 0) {
            let d = wc.wr_id as u32;
            match msg_op(d) {
                OP_SGL | OP_CTRL => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
                _ => {
                    self.sqe_avail += 1;
                    self.sbuf_bytes_avail += msg_data(d);
                }
            }
        }
    }

    /// Polls the CQ once and re-arms it if needed: `true` if the caller may
    /// sleep on [`Conn::fd`] (armed and still nothing).
    pub(super) fn arm(&mut self) -> bool {
        if !self.cq_armed {
            if self.v.arm().is_err() {
                return false;
            }
            self.cq_armed = true;
            return false;
        }
        true
    }

    /// Just before sleeping on [`Conn::fd`]: a non-blocking
    /// `ibv_get_cq_event`, which tells the device that this thread stops
    /// polling (its progress thread watches the socket again at once instead
    /// of at its next tick, up to a millisecond later) and takes an event
    /// that is already there. `false`: there was one, look again instead.
    pub(super) fn prepare_sleep(&mut self) -> bool {
        if self.v.take_event() {
            self.cq_armed = false;
            return false;
        }
        true
    }

    /// After the channel fd was readable: takes the event.
    pub(super) fn take_event(&mut self) {
        if self.v.take_event() {
            self.cq_armed = false;
        }
    }

    /// Copies received data into `buf` (`peek`: without consuming it).
    pub(super) fn read(&mut self, buf: &mut [u8], peek: bool) -> usize {
        let mut done = 0usize;
        let mut off = self.rbuf_offset;
        let mut idx = 0usize;
        while done < buf.len() {
            let Some(&avail) = self.rmsg.get(idx) else {
                break;
            };
            let want = (buf.len() - done) as u32;
            let rsize = if want < avail {
                if !peek {
                    self.rmsg[0] -= want;
                }
                want
            } else {
                if peek {
                    idx += 1;
                } else {
                    self.rmsg.pop_front();
                    self.rseq_no = self.rseq_no.wrapping_add(1);
                }
                avail
            };
            let mut left = rsize;
            while left > 0 {
                let chunk = left.min(self.rbuf_size - off);
                self.rbuf
                    .read(off as usize, &mut buf[done..done + chunk as usize]);
                done += chunk as usize;
                left -= chunk;
                off += chunk;
                if off == self.rbuf_size {
                    off = 0;
                }
            }
            if !peek {
                self.rbuf_bytes_avail += rsize;
            }
        }
        if !peek {
            self.rbuf_offset = off;
        }
        done
    }

    /// Sends as much of `buf` as one transfer may take; `olen` is the
    /// current transfer size (doubled by the caller). `can_send` must hold.
    pub(super) fn write_once(&mut self, buf: &[u8], olen: u32) -> Res<usize> {
        let mut xfer = (buf.len() as u64).min(olen as u64) as u32;
        xfer = xfer
            .min(self.sbuf_bytes_avail)
            .min(self.target_len(self.target_sge));
        let data = &buf[..xfer as usize];
        let mut sges = [ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; 2];
        let (n, flags) = self.stage(data, &mut sges);
        self.write_data(&mut sges[..n], xfer, flags)?;
        Ok(xfer as usize)
    }

    /// Puts `data` where a WRITE takes it from: inline (from `data` itself)
    /// if small, else copied into the send buffer (two SGEs at its wrap).
    fn stage(&mut self, data: &[u8], sges: &mut [ibv_sge; 2]) -> (usize, u32) {
        let xfer = data.len() as u32;
        if xfer <= self.sq_inline {
            sges[0] = ibv_sge {
                addr: data.as_ptr() as u64,
                length: xfer,
                lkey: 0,
            };
            return (1, IBV_SEND_INLINE);
        }
        let left = self.sbuf_size - self.ssgl_off;
        let first = xfer.min(left);
        self.sbuf
            .write(self.ssgl_off as usize, &data[..first as usize]);
        sges[0] = ibv_sge {
            addr: self.sbuf.addr(self.ssgl_off as usize),
            length: first,
            lkey: self.lkey(0),
        };
        if first < xfer {
            self.sbuf.write(0, &data[first as usize..]);
            sges[1] = ibv_sge {
                addr: self.sbuf.addr(0),
                length: xfer - first,
                lkey: self.lkey(0),
            };
            self.ssgl_off = xfer - first;
            (2, 0)
        } else {
            self.ssgl_off = if first < left {
                self.ssgl_off + first
            } else {
                0
            };
            (1, 0)
        }
    }

    /// `rs_write_data`: consumes target space and a credit, then writes.
    fn write_data(&mut self, sges: &mut [ibv_sge], len: u32, flags: u32) -> Res<()> {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        let t = self.target_sge_now(self.target_sge);
        let dst = t;
        let left = Sge {
            addr: t.addr + len as u64,
            key: t.key,
            length: t.length - len,
        };
        self.set_target(self.target_sge, left);
        if left.length == 0 {
            self.target_sge = (self.target_sge + 1) % SGL_SIZE;
        }
        let m = msg(OP_DATA, len);
        self.post_write(sges, m, flags, IBV_WR_RDMA_WRITE_WITH_IMM, m, dst)
    }

    /// Sends a control message (`how`: CTRL_*), if a control slot is free.
    pub(super) fn send_ctrl(&mut self, ctrl: u32) -> Res<()> {
        if self.state & CONNECTED != 0 && self.ctrl_avail() {
            self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
            return self.post_msg(msg(OP_CTRL, ctrl));
        }
        Ok(())
    }

    /// The channel's CQ events left unacknowledged are acked by `take_event`.
    #[allow(dead_code)]
    pub(super) fn id(&self) -> *mut rdma_cm_id {
        self.v.id
    }
}

/// The errno a failed send completion leaves on the socket: a peer that
/// stopped answering (the transport's retries ran out, as a keepalive to a
/// hung peer does) is `ETIMEDOUT`, as TCP's keepalive gives; anything else
/// `EIO`, as rdma-core.
fn status_errno(status: ibv_wc_status) -> c_int {
    match status {
        IBV_WC_RETRY_EXC_ERR | IBV_WC_RNR_RETRY_EXC_ERR => libc::ETIMEDOUT,
        _ => libc::EIO,
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        for m in self.iomaps.drain(..) {
            self.v.dereg(m.mr);
        }
        self.v.destroy(&mut self.mrs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_that_stopped_answering_is_etimedout() {
        assert_eq!(status_errno(IBV_WC_RETRY_EXC_ERR), libc::ETIMEDOUT);
        assert_eq!(status_errno(IBV_WC_RNR_RETRY_EXC_ERR), libc::ETIMEDOUT);
        assert_eq!(status_errno(IBV_WC_WR_FLUSH_ERR), libc::EIO);
        assert_eq!(status_errno(IBV_WC_REM_ACCESS_ERR), libc::EIO);
    }
}
