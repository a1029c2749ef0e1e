//! One connected stream rsocket: its verbs objects and buffers around the
//! protocol state of `softrdma_rsocket::stream` (credits, sequence numbers,
//! buffer offsets), which says what to post and accounts for completions;
//! this file posts, polls and copies. Nothing here blocks: the socket layer
//! waits.

use core::ffi::c_int;

#[path = "iomap.rs"]
mod iomap;

use softrdma_rsocket::proto::*;
pub(super) use softrdma_rsocket::stream::{CONNECTED, DISCONNECTED, ERROR, READABLE, WRITABLE};
use softrdma_rsocket::stream::{Completion, CreditUpdate, Layout, Staging, Stream, TargetSgl};

use super::sys::{Region, Res, Verbs, unsafe_zeroed};
use crate::ffi::*;

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

/// The target SGL and iomap table: registered memory the peer writes.
struct Target(Region);

impl TargetSgl for Target {
    fn get(&self, i: usize) -> Sge {
        Sge {
            addr: self.0.read_u64(i * SGE_SIZE),
            key: self.0.read_u32(i * SGE_SIZE + 8),
            length: self.0.read_u32(i * SGE_SIZE + 12),
        }
    }
    fn set(&mut self, i: usize, s: Sge) {
        self.0.write_u64(i * SGE_SIZE, s.addr);
        self.0.write_u32(i * SGE_SIZE + 8, s.key);
        self.0.write_u32(i * SGE_SIZE + 12, s.length);
    }
}

pub(super) struct Conn {
    v: Verbs,
    /// smr, tmr (target SGL + iomap), rmr.
    mrs: [*mut ibv_mr; 3],
    sbuf: Region,
    target: Target,
    rbuf: Region,
    pub(super) target_iomap_size: u32,
    /// The protocol state.
    pub(super) s: Stream,
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
        let (mut v, inline) = Verbs::create(id, sq, rq, sz.inline)?;
        let sbuf_size = sz.sbuf.max(SNDLOWAT * 2);
        let rbuf_size = sz.rbuf.max(SNDLOWAT * 2) & !1;
        let slen = (sbuf_size + SGE_SIZE as u32 * QP_CTRL_SIZE) as usize;
        let tlen = SGE_SIZE * SGL_SIZE + IOMAP_SIZE * sz.iomap as usize;
        let mut mrs = [core::ptr::null_mut(); 3];
        let regions = (|| {
            let (sbuf, target, rbuf) = (
                Region::new(slen)?,
                Region::new(tlen)?,
                Region::new(rbuf_size as usize)?,
            );
            mrs[0] = v.reg(sbuf.ptr(), slen)?;
            mrs[1] = v.reg(target.ptr(), tlen)?;
            mrs[2] = v.reg(rbuf.ptr(), rbuf_size as usize)?;
            Ok((sbuf, target, rbuf))
        })();
        let (sbuf, target, rbuf) = match regions {
            Ok(r) => r,
            Err(e) => {
                v.destroy(&mut mrs);
                return Err(e);
            }
        };
        let layout = Layout {
            sbuf: sbuf_size,
            rbuf: rbuf_size,
            sq,
            rq,
            inline,
        };
        let granted = Sge {
            addr: rbuf.addr(0),
            // SAFETY: registered just above, live until drop.
            key: unsafe { (*mrs[2]).rkey },
            length: rbuf_size,
        };
        let c = Conn {
            v,
            mrs,
            sbuf,
            target: Target(target),
            rbuf,
            target_iomap_size: sz.iomap,
            s: Stream::new(layout, granted),
            cq_armed: false,
            iomaps: Vec::new(),
        };
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
        let sgl = Sge {
            addr: self.target.0.addr(0),
            key: self.rkey(1),
            length: SGL_SIZE as u32,
        };
        self.s.conn_data(sgl, self.target_iomap_size)
    }

    /// Takes in the peer's REQ or REP; the connection is then usable.
    pub(super) fn save_peer(&mut self, peer: &ConnData) {
        self.s.save_peer(peer, &mut self.target);
    }

    pub(super) fn can_send(&self) -> bool {
        self.s.can_send(&self.target)
    }
    pub(super) fn conn_can_send(&self) -> bool {
        self.s.conn_can_send(&self.target)
    }
    pub(super) fn have_rdata(&self) -> bool {
        self.s.have_rdata()
    }
    pub(super) fn conn_have_rdata(&self) -> bool {
        self.s.conn_have_rdata()
    }
    pub(super) fn conn_can_send_ctrl(&self) -> bool {
        self.s.conn_can_send_ctrl()
    }
    pub(super) fn all_sends_done(&self) -> bool {
        self.s.all_sends_done()
    }

    /// `ibv_sge`s of a staged transfer of `data`.
    fn sges(&mut self, data: &[u8], staging: Staging, out: &mut [ibv_sge; 2]) -> (usize, u32) {
        match staging {
            Staging::Inline => {
                out[0] = ibv_sge {
                    addr: data.as_ptr() as u64,
                    length: data.len() as u32,
                    lkey: 0,
                };
                (1, IBV_SEND_INLINE)
            }
            Staging::Sbuf(pieces, n) => {
                let mut done = 0usize;
                for (i, &(off, len)) in pieces[..n].iter().enumerate() {
                    self.sbuf
                        .write(off as usize, &data[done..done + len as usize]);
                    out[i] = ibv_sge {
                        addr: self.sbuf.addr(off as usize),
                        length: len,
                        lkey: self.lkey(0),
                    };
                    done += len as usize;
                }
                (n, 0)
            }
        }
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

    /// Posts a credit update (`rs_send_credits`).
    fn send_credits(&mut self, cu: CreditUpdate) {
        let r = match cu.grant {
            None => self.post_msg(cu.imm),
            Some((bytes, dst)) => {
                let (mut ib, flags);
                if self.s.layout().inline < SGE_SIZE as u32 {
                    let off = self.s.layout().sbuf as usize + SGE_SIZE * cu.slot as usize;
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
                self.post_write(
                    core::slice::from_mut(&mut ib),
                    cu.imm,
                    flags,
                    IBV_WR_RDMA_WRITE_WITH_IMM,
                    cu.imm,
                    dst,
                )
            }
        };
        if let Err(e) = r {
            self.fail(e);
        }
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
        if let Some(cu) = self.s.credit_update() {
            self.send_credits(cu);
            self.poll_cq();
        }
    }

    /// Marks the connection broken with `e` (the first error wins).
    pub(super) fn fail(&mut self, e: c_int) {
        self.s.fail(e);
    }

    /// `rs_poll_cq`: processes every completion there is, reposting the
    /// receives consumed.
    pub(super) fn poll_cq(&mut self) {
        let mut wcs: [ibv_wc; 16] = unsafe_zeroed();
        let mut rcnt = 0u32;
        loop {
            let n = match self.v.poll(&mut wcs) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    self.fail(e);
                    break;
                }
            };
            let batch: Vec<Completion> = wcs[..n]
                .iter()
                .map(|wc| Completion {
                    wr_id: wc.wr_id,
                    // SAFETY: plain u32 union member.
                    imm: u32::from_be(unsafe { wc.imm.imm_data }),
                    error: (wc.status != IBV_WC_SUCCESS).then(|| status_errno(wc.status)),
                })
                .collect();
            let (received, stop) = self.s.completions(&batch);
            rcnt += received;
            if stop {
                break;
            }
        }
        if self.s.state & CONNECTED != 0 {
            for _ in 0..rcnt {
                if let Err(e) = self.v.post_recv(WR_RECV) {
                    self.fail(e);
                    break;
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
        let rbuf = &self.rbuf;
        self.s
            .read(buf, peek, |off, dst| rbuf.read(off as usize, dst))
    }

    /// Sends as much of `buf` as one transfer may take; `olen` is the
    /// current transfer size (doubled by the caller). `can_send` must hold.
    pub(super) fn write_once(&mut self, buf: &[u8], olen: u32) -> Res<usize> {
        let w = self.s.write(buf.len(), olen, &mut self.target);
        let data = &buf[..w.len as usize];
        let mut sges = [ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; 2];
        let (n, flags) = self.sges(data, w.staging, &mut sges);
        self.post_write(
            &mut sges[..n],
            w.imm,
            flags,
            IBV_WR_RDMA_WRITE_WITH_IMM,
            w.imm,
            w.dst,
        )?;
        Ok(w.len as usize)
    }

    /// Sends a control message (`how`: CTRL_*), if a control slot is free.
    pub(super) fn send_ctrl(&mut self, ctrl: u32) -> Res<()> {
        match self.s.ctrl(ctrl) {
            Some(m) => self.post_msg(m),
            None => Ok(()),
        }
    }
}

/// The errno a failed send completion leaves on the socket: a peer that
/// stopped answering (the transport's retries ran out, as a keepalive to a
/// hung peer does) is `ETIMEDOUT`, as TCP's keepalive gives; anything else
/// `EIO`, as rdma-core. (`softrdma::rsocket` maps the same.)
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
