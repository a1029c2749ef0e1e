//! One connected stream rsocket's protocol state (`struct rsocket`'s
//! counters in rdma-core): sequence numbers, receive credits, control-message
//! slots, the send buffer ring, the receive buffer and its grants. Methods
//! say what to post and account for what completed; the caller owns the
//! buffers, the target SGL memory and the queue pair.
//!
//! Data moves by RDMA WRITE WITH IMMEDIATE into the peer's receive buffer,
//! at addresses the peer granted through its target SGL; the receiver
//! grants each half of its receive buffer back as it is drained (an RDMA
//! WRITE of an [`Sge`] into the sender's target SGL with an `OP_SGL`
//! immediate, which also carries receive credits).

use std::collections::VecDeque;

use crate::proto::*;

/// rdma-core's state bits (`enum rs_state`) for a connection.
pub const CONNECTED: u32 = 0x0100;
/// Data may be sent.
pub const WRITABLE: u32 = 0x0200;
/// Data may arrive.
pub const READABLE: u32 = 0x0400;
/// Connected both ways.
pub const CONNECT_RDWR: u32 = CONNECTED | READABLE | WRITABLE;
/// Closed by either side.
pub const DISCONNECTED: u32 = 0x1000;
/// Broken (see [`Stream::err`]).
pub const ERROR: u32 = 0x2000;

/// The local target SGL: `SGL_SIZE` entries in registered memory that the
/// peer writes its buffer grants into; this side consumes them.
pub trait TargetSgl {
    /// Entry `i`, in this host's byte order.
    fn get(&self, i: usize) -> Sge;
    /// Overwrites entry `i`.
    fn set(&mut self, i: usize, s: Sge);
}

/// Sizes of one stream's queues and buffers (after clamping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Send buffer bytes (data staging; the control slots follow it).
    pub sbuf: u32,
    /// Receive buffer bytes (even).
    pub rbuf: u32,
    /// Send queue entries.
    pub sq: u32,
    /// Receive queue entries (= credits granted to the peer).
    pub rq: u32,
    /// Largest inline send.
    pub inline: u32,
}

/// Where one transfer's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staging {
    /// Straight from the caller's bytes (`IBV_SEND_INLINE`).
    Inline,
    /// Copied into the send buffer: `(offset, length)` pieces, the second
    /// one (at offset 0) only where the ring wraps.
    Sbuf([(u32, u32); 2], usize),
}

/// A data transfer to post: an RDMA WRITE WITH IMMEDIATE `imm` of `len`
/// bytes to `dst` (`wr_id` = `imm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataWrite {
    /// Bytes.
    pub len: u32,
    /// Where they are staged.
    pub staging: Staging,
    /// Peer memory written.
    pub dst: Sge,
    /// Immediate (and work request id).
    pub imm: u32,
}

/// A credit update to post: an RDMA WRITE WITH IMMEDIATE `imm`, carrying
/// `grant` (16 bytes, written to `dst`) if a receive-buffer half is granted,
/// else zero-length (`wr_id` = `imm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreditUpdate {
    /// Immediate (and work request id).
    pub imm: u32,
    /// The `rs_sge` to write and where.
    pub grant: Option<([u8; SGE_SIZE], Sge)>,
    /// The control slot (`0..QP_CTRL_SIZE`) whose staging area in the send
    /// buffer (after `sbuf` bytes) holds the grant when it is not inline.
    pub slot: u32,
}

/// What a receive completion meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// Accounted for; go on.
    Continue,
    /// The peer disconnected: later completions of the same batch are
    /// dropped ([`Stream::requeue`] for the sends among them).
    Stop,
}

/// Which half of a stream [`Stream::shutdown`] closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    /// Receiving.
    Read,
    /// Sending.
    Write,
    /// Both.
    Both,
}

/// One work completion, as a stream needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Its work request id ([`WR_RECV`] set for receives).
    pub wr_id: u64,
    /// Immediate data (receives).
    pub imm: u32,
    /// `None` if it succeeded, else the `errno` a failed send leaves.
    pub error: Option<i32>,
}

/// One stream's protocol state.
#[derive(Debug)]
pub struct Stream {
    layout: Layout,
    /// The receive buffer, as this side grants it (address and rkey).
    rbuf: Sge,
    /// `CONNECTED`, `READABLE`, ...
    pub state: u32,
    /// The error that broke the connection (`errno`), until reported.
    pub err: i32,
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    sseq_no: u16,
    sseq_comp: u16,
    rseq_no: u16,
    rseq_comp: u16,
    remote_sgl: Sge,
    remote_sge: u32,
    /// The peer's iomap table (`riomap`), if it has one.
    pub remote_iomap: Sge,
    target_sge: usize,
    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,
    rbuf_offset: u32,
    sbuf_bytes_avail: u32,
    ssgl_off: u32,
    sqe_avail: u32,
    /// Lengths of received data messages not yet read (at most `rq`).
    rmsg: VecDeque<u32>,
    swap: bool,
}

impl Stream {
    /// A stream with `layout`, whose receive buffer `rbuf` (address, rkey,
    /// length = `layout.rbuf`) the peer will write into.
    pub fn new(layout: Layout, rbuf: Sge) -> Stream {
        Stream {
            layout,
            rbuf,
            state: 0,
            err: 0,
            ctrl_seqno: 0,
            ctrl_max_seqno: QP_CTRL_SIZE,
            sseq_no: 0,
            sseq_comp: 0,
            rseq_no: 0,
            rseq_comp: (layout.rq >> 1) as u16,
            remote_sgl: Sge::default(),
            remote_sge: 0,
            remote_iomap: Sge::default(),
            target_sge: 0,
            rbuf_bytes_avail: layout.rbuf >> 1,
            rbuf_free_offset: layout.rbuf >> 1,
            rbuf_offset: 0,
            sbuf_bytes_avail: layout.sbuf,
            ssgl_off: 0,
            sqe_avail: layout.sq - QP_CTRL_SIZE,
            rmsg: VecDeque::with_capacity(layout.rq as usize + 1),
            swap: false,
        }
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Whether the peer's grants arrive byte-swapped.
    pub fn swap(&self) -> bool {
        self.swap
    }

    /// What this side sends in its REQ or REP: `target_sgl` is where the
    /// peer writes grants (address, rkey, `SGL_SIZE`), `iomap_entries` the
    /// iomap table behind it.
    pub fn conn_data(&self, target_sgl: Sge, iomap_entries: u32) -> ConnData {
        ConnData {
            version: 1,
            flags: CONN_FLAG_IOMAP
                | if cfg!(target_endian = "big") {
                    CONN_FLAG_NET
                } else {
                    0
                },
            credits: self.layout.rq as u16,
            target_iomap_size: value_to_scale(iomap_entries, 8) as u8,
            target_sgl,
            data_buf: Sge {
                length: self.layout.rbuf >> 1,
                ..self.rbuf
            },
        }
    }

    /// Takes in the peer's REQ or REP; the stream is then connected both ways.
    pub fn save_peer(&mut self, peer: &ConnData, target: &mut impl TargetSgl) {
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
        target.set(0, peer.data_buf);
        self.sseq_comp = peer.credits;
        self.state = CONNECT_RDWR;
    }

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    /// `rs_can_send`: a send WR, send buffer space, a peer receive credit and
    /// granted peer buffer are all available.
    pub fn can_send(&self, target: &impl TargetSgl) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && target.get(self.target_sge).length != 0
    }
    /// [`Stream::can_send`], or sending is over.
    pub fn conn_can_send(&self, target: &impl TargetSgl) -> bool {
        self.can_send(target) || self.state & WRITABLE == 0
    }
    /// Received data waits to be read.
    pub fn have_rdata(&self) -> bool {
        !self.rmsg.is_empty()
    }
    /// [`Stream::have_rdata`], or receiving is over.
    pub fn conn_have_rdata(&self) -> bool {
        self.have_rdata() || self.state & READABLE == 0
    }
    /// A control message may be sent, or the connection is gone.
    pub fn conn_can_send_ctrl(&self) -> bool {
        self.ctrl_avail() || self.state & CONNECTED == 0
    }
    /// Every send posted has completed, or the connection is gone.
    pub fn all_sends_done(&self) -> bool {
        (self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno)).wrapping_add(self.sqe_avail)
            == self.layout.sq
            || self.state & CONNECTED == 0
    }

    fn give_credits(&self) -> bool {
        (self.rbuf_bytes_avail >= self.layout.rbuf >> 1
            || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0)
            && self.ctrl_avail()
            && self.state & CONNECTED != 0
    }

    /// `rs_update_credits`: the credit update to post now, if it is time
    /// (the free half of the receive buffer, or only receive credits).
    pub fn credit_update(&mut self) -> Option<CreditUpdate> {
        if !self.give_credits() {
            return None;
        }
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.rseq_comp = self.rseq_no.wrapping_add((self.layout.rq >> 1) as u16);
        let imm = msg(
            OP_SGL,
            self.rseq_no.wrapping_add(self.layout.rq as u16) as u32,
        );
        let slot = self.ctrl_seqno & (QP_CTRL_SIZE - 1);
        let half = self.layout.rbuf >> 1;
        if self.rbuf_bytes_avail < half {
            return Some(CreditUpdate {
                imm,
                grant: None,
                slot,
            });
        }
        let mut sge = Sge {
            addr: self.rbuf.addr + self.rbuf_free_offset as u64,
            key: self.rbuf.key,
            length: half,
        };
        if self.swap {
            sge = Sge {
                addr: sge.addr.swap_bytes(),
                key: sge.key.swap_bytes(),
                length: sge.length.swap_bytes(),
            };
        }
        let dst = Sge {
            addr: self.remote_sgl.addr + self.remote_sge as u64 * SGE_SIZE as u64,
            key: self.remote_sgl.key,
            length: 0,
        };
        self.rbuf_bytes_avail -= half;
        self.rbuf_free_offset += half;
        if self.rbuf_free_offset >= self.layout.rbuf {
            self.rbuf_free_offset = 0;
        }
        self.remote_sge += 1;
        if self.remote_sge == self.remote_sgl.length {
            self.remote_sge = 0;
        }
        Some(CreditUpdate {
            imm,
            grant: Some((sge.to_ne(), dst)),
            slot,
        })
    }

    /// A control message (`CTRL_*`) to post as a zero-length WRITE WITH
    /// IMMEDIATE: its immediate, if a control slot is free and the stream is
    /// connected.
    pub fn ctrl(&mut self, ctrl: u32) -> Option<u32> {
        if self.state & CONNECTED != 0 && self.ctrl_avail() {
            self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
            return Some(msg(OP_CTRL, ctrl));
        }
        None
    }

    /// Marks the stream broken with `e` (the first error wins).
    pub fn fail(&mut self, e: i32) {
        if self.state & CONNECTED != 0 {
            self.state = ERROR;
            self.err = e;
        }
    }

    /// `rs_poll_cq`'s body for one batch of completions, in order: returns
    /// the receives consumed (to post again while connected) and whether the
    /// peer disconnected, after which the batch's other completions are
    /// dropped (their sends' resources come back) and polling stops.
    pub fn completions(&mut self, batch: &[Completion]) -> (u32, bool) {
        let mut received = 0;
        for (i, c) in batch.iter().enumerate() {
            if c.wr_id & WR_RECV == 0 {
                self.sent(c.wr_id as u32, c.error);
                continue;
            }
            if c.error.is_some() {
                continue;
            }
            received += 1;
            if self.received(c.imm) == Received::Stop {
                for w in batch[i + 1..].iter().filter(|w| w.wr_id & WR_RECV == 0) {
                    self.requeue(w.wr_id as u32);
                }
                return (received, true);
            }
        }
        (received, false)
    }

    /// `rshutdown`'s state change: the control message to send the peer
    /// (`CTRL_SHUTDOWN`, `CTRL_DISCONNECT`), if any. After posting
    /// `CTRL_DISCONNECT` the stream is [`DISCONNECTED`].
    pub fn shutdown(&mut self, how: Half) -> Option<u32> {
        if self.state & CONNECTED == 0 {
            return None;
        }
        match how {
            Half::Both => {
                self.state &= !(READABLE | WRITABLE);
                Some(CTRL_DISCONNECT)
            }
            Half::Write => {
                self.state &= !WRITABLE;
                Some(if self.state & READABLE != 0 {
                    CTRL_SHUTDOWN
                } else {
                    CTRL_DISCONNECT
                })
            }
            Half::Read => {
                self.state &= !READABLE;
                (self.state & WRITABLE == 0).then_some(CTRL_DISCONNECT)
            }
        }
    }

    /// A successful receive completion with immediate `imm`.
    pub fn received(&mut self, imm: u32) -> Received {
        match msg_op(imm) {
            OP_SGL => self.sseq_comp = msg_data(imm) as u16,
            OP_IOMAP_SGL | OP_WRITE => {}
            OP_CTRL => match msg_data(imm) {
                CTRL_DISCONNECT => {
                    self.state = DISCONNECTED;
                    return Received::Stop;
                }
                CTRL_SHUTDOWN if self.state & WRITABLE != 0 => self.state &= !READABLE,
                CTRL_SHUTDOWN => {
                    self.state = DISCONNECTED;
                    return Received::Stop;
                }
                _ => {}
            },
            _ => self.rmsg.push_back(msg_data(imm)),
        }
        Received::Continue
    }

    /// A send completion of work request `wr_id` (its resources come back);
    /// `None` if it succeeded, else the stream is broken with `errno`.
    pub fn sent(&mut self, wr_id: u32, errno: Option<i32>) {
        self.requeue(wr_id);
        if msg_op(wr_id) == OP_CTRL && msg_data(wr_id) == CTRL_DISCONNECT {
            self.state = DISCONNECTED;
        }
        if let Some(e) = errno {
            self.fail(e);
        }
    }

    /// Gives back what send `wr_id` held, without acting on it (a completion
    /// after a disconnect).
    pub fn requeue(&mut self, wr_id: u32) {
        match msg_op(wr_id) {
            OP_SGL | OP_CTRL => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
            OP_IOMAP_SGL => {
                self.sqe_avail += 1;
                self.sbuf_bytes_avail += IOMAP_SIZE as u32;
            }
            _ => {
                self.sqe_avail += 1;
                self.sbuf_bytes_avail += msg_data(wr_id);
            }
        }
    }

    /// Copies received data into `buf` through `copy_out(offset in the
    /// receive buffer, destination)`; `peek`: without consuming it.
    pub fn read(
        &mut self,
        buf: &mut [u8],
        peek: bool,
        mut copy_out: impl FnMut(u32, &mut [u8]),
    ) -> usize {
        let size = self.layout.rbuf;
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
                let chunk = left.min(size - off);
                copy_out(off, &mut buf[done..done + chunk as usize]);
                done += chunk as usize;
                left -= chunk;
                off += chunk;
                if off == size {
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

    /// Stages `len` bytes: inline if small, else at the send ring's next
    /// offset (two pieces at its wrap).
    fn stage(&mut self, len: u32) -> Staging {
        if len <= self.layout.inline {
            return Staging::Inline;
        }
        let size = self.layout.sbuf;
        let left = size - self.ssgl_off;
        let first = len.min(left);
        let at = self.ssgl_off;
        if first < len {
            self.ssgl_off = len - first;
            Staging::Sbuf([(at, first), (0, len - first)], 2)
        } else {
            self.ssgl_off = if first < left { at + first } else { 0 };
            Staging::Sbuf([(at, first), (0, 0)], 1)
        }
    }

    /// The next data transfer of at most `len` bytes (and `olen`, the
    /// current transfer size): consumes target space, a credit, a send WR
    /// and send buffer. [`Stream::can_send`] must hold.
    pub fn write(&mut self, len: usize, olen: u32, target: &mut impl TargetSgl) -> DataWrite {
        let t = target.get(self.target_sge);
        let xfer = (len as u64).min(olen as u64) as u32;
        let xfer = xfer.min(self.sbuf_bytes_avail).min(t.length);
        let staging = self.stage(xfer);
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= xfer;
        let left = Sge {
            addr: t.addr + xfer as u64,
            key: t.key,
            length: t.length - xfer,
        };
        target.set(self.target_sge, left);
        if left.length == 0 {
            self.target_sge = (self.target_sge + 1) % SGL_SIZE;
        }
        let imm = msg(OP_DATA, xfer);
        DataWrite {
            len: xfer,
            staging,
            dst: Sge { length: 0, ..t },
            imm,
        }
    }

    /// Send resources for an iomap entry (`riomap`): a WR, a credit and
    /// `IOMAP_SIZE` bytes of send buffer; returns the offset to stage the
    /// entry at when it is not inline. [`Stream::can_send`] must hold.
    pub fn take_iomap_send(&mut self) -> u32 {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= IOMAP_SIZE as u32;
        self.ssgl_off.min(self.layout.sbuf - IOMAP_SIZE as u32)
    }

    /// Send resources for a `riowrite` of `len` bytes (a plain RDMA WRITE,
    /// `wr_id` `msg(OP_WRITE, len)`): the staging of its bytes.
    pub fn take_io_write(&mut self, len: u32) -> Staging {
        let staging = self.stage(len);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        staging
    }

    /// Received messages not yet read (never more than the receive queue:
    /// the credits the peer had).
    pub fn unread_messages(&self) -> usize {
        self.rmsg.len()
    }

    /// Send buffer bytes free now.
    pub fn sbuf_free(&self) -> u32 {
        self.sbuf_bytes_avail
    }
}
