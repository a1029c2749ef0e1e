//! Stream sockets over RDMA with rdma-core's rsockets protocol
//! ([`RStream`], [`RListener`]): a peer may be rdma-core's `librdmacm`
//! (`rstream`, `librspreload.so`) or this crate's C ABI.
//!
//! The protocol is `softrdma_rsocket`'s (the same code librdmacm's rsockets
//! here run on): the connection data rides in the CM REQ/REP, data is an
//! RDMA WRITE WITH IMMEDIATE into the peer's receive buffer, and buffer
//! grants and credits flow back the same way. This module owns the queue
//! pair and three registered buffers (send ring, target SGL, receive
//! buffer), posts what [`Stream`] asks for and feeds it the completions.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use softrdma::rsocket::{RListener, RStream};
//! # fn main() -> std::io::Result<()> {
//! let l = RListener::bind("127.0.0.1:7471".parse().unwrap())?;
//! let server = std::thread::spawn(move || -> std::io::Result<[u8; 4]> {
//!     let mut s = l.accept()?;
//!     let mut b = [0u8; 4];
//!     s.read_exact(&mut b)?;
//!     Ok(b)
//! });
//! // The peer may as well be Debian's `rstream -b`, or librspreload.
//! let mut c = RStream::connect("127.0.0.1:7471".parse().unwrap())?;
//! c.write_all(b"ping")?;
//! assert_eq!(&server.join().unwrap()?, b"ping");
//! # Ok(()) }
//! ```
//!
//! Waiting: a blocked read or write polls the CQ (the device's busy poll)
//! for a short spin, then sleeps on the connection's completion channel.
//! With the `tokio` feature, `AsyncRStream` waits in the runtime instead
//! (`AsyncRead`/`AsyncWrite`).

#[cfg(feature = "tokio")]
mod tokio_io;
#[cfg(feature = "tokio")]
pub use tokio_io::AsyncRStream;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

use softrdma_rsocket::proto::*;
use softrdma_rsocket::stream::{
    CONNECTED, Completion, CreditUpdate, DISCONNECTED, ERROR, Half, Layout, Staging, Stream,
    TargetSgl, WRITABLE,
};

use crate::cm::{Acceptor, ConnOptions, Connection, Connector};
use crate::verbs::{
    Access, Context, Mr, Pd, QpCap, SendFlags, SendWr, Sge as VSge, Wc, WcStatus, WrOpcode,
};

/// How long a waiter polls the CQ before it sleeps on the channel: the
/// value librdmacm's rsockets here start with (`SPIN_LONG` in
/// `crates/capi-rdmacm/src/rsocket/sock.rs`, chosen by the `rstream -T b`
/// pairs of BENCHMARKS.md, "Issue 19", second round).
const SPIN: Duration = Duration::from_micros(1000);
/// How long a close waits for its last sends (librdmacm's `CLOSE_LIMIT`).
const CLOSE_LIMIT: Duration = Duration::from_secs(10);

fn io_err(e: impl Into<crate::Error>) -> io::Error {
    let e: crate::Error = e.into();
    io::Error::from_raw_os_error(e.errno())
}

/// The queue sizes and buffers of rdma-core's defaults.
fn options(pd: &Pd) -> ConnOptions {
    ConnOptions {
        cq_size: DEF_SQSIZE + DEF_RQSIZE,
        cap: QpCap {
            max_send_wr: DEF_SQSIZE,
            max_recv_wr: DEF_RQSIZE,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: DEF_INLINE,
        },
        sq_sig_all: true,
        comp_channel: true,
        pd: Some(pd.clone()),
        ..ConnOptions::default()
    }
}

/// The target SGL (and iomap table), registered memory the peer writes.
struct Target(Mr);

impl TargetSgl for Target {
    fn get(&self, i: usize) -> Sge {
        let mut b = [0u8; SGE_SIZE];
        // In bounds: the region holds SGL_SIZE entries.
        let _ = self.0.read(i * SGE_SIZE, &mut b);
        Sge {
            addr: u64::from_ne_bytes(b[..8].try_into().expect("8 bytes")),
            key: u32::from_ne_bytes(b[8..12].try_into().expect("4 bytes")),
            length: u32::from_ne_bytes(b[12..].try_into().expect("4 bytes")),
        }
    }
    fn set(&mut self, i: usize, s: Sge) {
        let mut b = [0u8; SGE_SIZE];
        b[..8].copy_from_slice(&s.addr.to_ne_bytes());
        b[8..12].copy_from_slice(&s.key.to_ne_bytes());
        b[12..].copy_from_slice(&s.length.to_ne_bytes());
        let _ = self.0.write(i * SGE_SIZE, &b);
    }
}

/// The buffers of one stream before it connects.
struct Buffers {
    sbuf: Mr,
    target: Target,
    rbuf: Mr,
    stream: Stream,
}

impl Buffers {
    fn new(pd: &Pd) -> crate::Result<Buffers> {
        let layout = Layout {
            sbuf: DEF_WMEM,
            rbuf: DEF_MEM,
            sq: DEF_SQSIZE,
            rq: DEF_RQSIZE,
            inline: DEF_INLINE,
        };
        let sbuf = pd.alloc_mr(
            (DEF_WMEM + SGE_SIZE as u32 * QP_CTRL_SIZE) as usize,
            Access::LOCAL_WRITE,
        )?;
        let remote = Access::LOCAL_WRITE.with(Access::REMOTE_WRITE);
        let target = Target(pd.alloc_mr(SGE_SIZE * SGL_SIZE, remote)?);
        let rbuf = pd.alloc_mr(DEF_MEM as usize, remote)?;
        let granted = Sge {
            addr: rbuf.addr(),
            key: rbuf.rkey(),
            length: DEF_MEM,
        };
        Ok(Buffers {
            sbuf,
            target,
            rbuf,
            stream: Stream::new(layout, granted),
        })
    }

    /// `struct rs_conn_data` for the REQ or REP.
    fn conn_data(&self) -> [u8; CONN_DATA_LEN] {
        let sgl = Sge {
            addr: self.target.0.addr(),
            key: self.target.0.rkey(),
            length: SGL_SIZE as u32,
        };
        self.stream.conn_data(sgl, 0).encode()
    }

    fn connected(mut self, conn: Connection) -> io::Result<RStream> {
        let peer = ConnData::decode(conn.peer_private_data()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the peer's connection data is not rsockets' (version 1, 40 bytes)",
            )
        })?;
        self.stream.save_peer(&peer, &mut self.target);
        let s = RStream {
            conn,
            b: self,
            wcs: Vec::with_capacity(16),
            armed: false,
        };
        for _ in 0..DEF_RQSIZE {
            s.post_recv()?;
        }
        Ok(s)
    }
}

/// A connected stream rsocket: [`Read`] and [`Write`] as a `TcpStream`.
/// Dropping it closes the connection (after its sends completed, up to
/// ten seconds).
pub struct RStream {
    conn: Connection,
    b: Buffers,
    wcs: Vec<Wc>,
    armed: bool,
}

impl std::fmt::Debug for RStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RStream")
            .field("peer", &self.conn.peer_addr())
            .field("state", &self.b.stream.state)
            .finish()
    }
}

impl RStream {
    /// Connects to the rsocket listening at `addr` (on the process's device).
    pub fn connect(addr: SocketAddr) -> io::Result<RStream> {
        let ctx = Context::open().map_err(io_err)?;
        RStream::connect_on(&ctx, addr)
    }

    /// Connects from device `ctx`.
    pub fn connect_on(ctx: &Context, addr: SocketAddr) -> io::Result<RStream> {
        let pd = ctx.alloc_pd().map_err(io_err)?;
        let b = Buffers::new(&pd).map_err(io_err)?;
        let conn = Connector::on(ctx)
            .options(options(&pd))
            .connect(addr, &b.conn_data())
            .map_err(io_err)?;
        b.connected(conn)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.conn.peer_addr()
    }

    /// This side's address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.conn.local_addr()
    }

    fn post_recv(&self) -> io::Result<()> {
        let wr = crate::verbs::RecvWr {
            wr_id: WR_RECV,
            sgl: Default::default(),
        };
        self.conn.qp().post_recv(wr).map_err(io_err)
    }

    fn post_write(&self, wr_id: u32, imm: Option<u32>, dst: Sge, data: Data<'_>) -> io::Result<()> {
        let opcode = if imm.is_some() {
            WrOpcode::RdmaWriteWithImm
        } else {
            WrOpcode::RdmaWrite
        };
        let mut wr = SendWr::new(wr_id as u64, opcode);
        wr.flags = SendFlags::SIGNALED;
        wr.imm_data = imm.unwrap_or(0);
        wr.remote_addr = dst.addr;
        wr.rkey = dst.key;
        match data {
            Data::None => {}
            Data::Inline(bytes) => {
                wr.flags = wr.flags.with(SendFlags::INLINE);
                wr.inline = Some(bytes.to_vec());
            }
            Data::Sbuf(pieces) => {
                for &(off, len) in pieces {
                    wr.sgl.push(VSge {
                        addr: self.b.sbuf.addr() + off as u64,
                        length: len,
                        lkey: self.b.sbuf.lkey(),
                    });
                }
            }
        }
        self.conn.qp().post_send(wr).map_err(io_err)
    }

    fn send_credits(&mut self, cu: CreditUpdate) -> io::Result<()> {
        match cu.grant {
            None => self.post_write(cu.imm, Some(cu.imm), Sge::default(), Data::None),
            Some((bytes, dst)) => self.post_write(cu.imm, Some(cu.imm), dst, Data::Inline(&bytes)),
        }
    }

    /// Grants credits if it is time, then polls (the grant leaves now).
    fn update_credits(&mut self) {
        if let Some(cu) = self.b.stream.credit_update() {
            if let Err(e) = self.send_credits(cu) {
                self.b.stream.fail(e.raw_os_error().unwrap_or(libc::EIO));
            }
            self.poll_cq();
        }
    }

    /// Processes every completion there is, reposting the receives used.
    fn poll_cq(&mut self) {
        let mut rcnt = 0;
        loop {
            self.wcs.clear();
            match self.conn.cq().poll(&mut self.wcs, 16) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    self.b.stream.fail(e.errno());
                    break;
                }
            }
            let batch: Vec<Completion> = self
                .wcs
                .iter()
                .map(|wc| Completion {
                    wr_id: wc.wr_id,
                    imm: wc.imm_data,
                    error: match wc.status {
                        WcStatus::Success => None,
                        // A peer that stopped answering, as librdmacm here.
                        WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr => Some(libc::ETIMEDOUT),
                        _ => Some(libc::EIO),
                    },
                })
                .collect();
            let (received, stop) = self.b.stream.completions(&batch);
            rcnt += received;
            if stop {
                break;
            }
        }
        if self.b.stream.state & CONNECTED != 0 {
            for _ in 0..rcnt {
                if let Err(e) = self.post_recv() {
                    self.b.stream.fail(e.raw_os_error().unwrap_or(libc::EIO));
                    break;
                }
            }
        }
    }

    /// Processes completions until `test` holds (`Err(TimedOut)` past `limit`).
    fn wait(&mut self, test: fn(&RStream) -> bool, limit: Option<Duration>) -> io::Result<()> {
        let start = Instant::now();
        loop {
            self.update_credits();
            self.poll_cq();
            if test(self) {
                self.update_credits();
                return Ok(());
            }
            if limit.is_some_and(|l| start.elapsed() > l) {
                return Err(io::ErrorKind::TimedOut.into());
            }
            if start.elapsed() < SPIN {
                std::thread::yield_now();
                continue;
            }
            if !self.armed {
                self.conn.cq().req_notify(false).map_err(io_err)?;
                self.armed = true;
                continue;
            }
            if let Some(ch) = self.conn.comp_channel()
                && ch
                    .wait_timeout(Duration::from_millis(100))
                    .map_err(io_err)?
                    .is_some()
            {
                self.armed = false;
            }
        }
    }

    fn can_send(&self) -> bool {
        self.b.stream.conn_can_send(&self.b.target)
    }
    fn have_rdata(&self) -> bool {
        self.b.stream.conn_have_rdata()
    }
    fn can_send_ctrl(&self) -> bool {
        self.b.stream.conn_can_send_ctrl()
    }
    fn sends_done(&self) -> bool {
        self.b.stream.all_sends_done()
    }

    /// The error that broke the connection, once (then end of stream).
    fn take_error(&mut self) -> Option<io::Error> {
        let s = &mut self.b.stream;
        (s.state == ERROR && s.err != 0)
            .then(|| io::Error::from_raw_os_error(std::mem::take(&mut s.err)))
    }

    /// Shuts down reading, writing or both, as `TcpStream::shutdown`: the
    /// peer reads the end of the stream once it read what was sent.
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        let half = match how {
            Shutdown::Read => Half::Read,
            Shutdown::Write => Half::Write,
            Shutdown::Both => Half::Both,
        };
        let Some(ctrl) = self.b.stream.shutdown(half) else {
            return Ok(());
        };
        self.wait(RStream::can_send_ctrl, Some(CLOSE_LIMIT))?;
        self.send_ctrl(ctrl)?;
        self.wait(RStream::sends_done, Some(CLOSE_LIMIT))
    }

    /// Posts control message `ctrl` if a slot is free (`rshutdown`).
    fn send_ctrl(&mut self, ctrl: u32) -> io::Result<()> {
        if let Some(imm) = self.b.stream.ctrl(ctrl) {
            self.post_write(imm, Some(imm), Sge::default(), Data::None)?;
        }
        if ctrl == CTRL_DISCONNECT {
            self.b.stream.state = DISCONNECTED;
        }
        Ok(())
    }
}

/// What a WRITE carries.
enum Data<'a> {
    None,
    Inline(&'a [u8]),
    Sbuf(&'a [(u32, u32)]),
}

impl RStream {
    /// Reads what arrived, once [`RStream::have_rdata`] holds: the error
    /// that broke the stream (once), else 0 at its end.
    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.b.stream.have_rdata()
            && let Some(e) = self.take_error()
        {
            return Err(e);
        }
        let rbuf = &self.b.rbuf;
        let n = self.b.stream.read(buf, false, |off, dst| {
            // In bounds: the stream reads inside the receive buffer.
            let _ = rbuf.read(off as usize, dst);
        });
        self.update_credits();
        Ok(n)
    }

    /// Sends the first transfer of `data` (`Stream::can_send` holds).
    fn send_once(&mut self, data: &[u8]) -> io::Result<usize> {
        let w = self
            .b
            .stream
            .write(data.len(), MAX_TRANSFER, &mut self.b.target);
        let data = &data[..w.len as usize];
        let r = match w.staging {
            Staging::Inline => self.post_write(w.imm, Some(w.imm), w.dst, Data::Inline(data)),
            Staging::Sbuf(pieces, n) => {
                let mut at = 0usize;
                for &(off, len) in &pieces[..n] {
                    self.b
                        .sbuf
                        .write(off as usize, &data[at..at + len as usize])
                        .map_err(io_err)?;
                    at += len as usize;
                }
                self.post_write(w.imm, Some(w.imm), w.dst, Data::Sbuf(&pieces[..n]))
            }
        };
        if let Err(e) = r {
            self.b.stream.fail(e.raw_os_error().unwrap_or(libc::EIO));
            return Err(e);
        }
        Ok(w.len as usize)
    }

    /// Sends as much of `buf` as may go now, once [`RStream::can_send`]
    /// holds: `BrokenPipe` if the stream no longer sends.
    fn write_ready(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(e) = self.take_error() {
            return Err(e);
        }
        if self.b.stream.state & WRITABLE == 0 {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let mut done = 0;
        while done < buf.len() && self.b.stream.can_send(&self.b.target) {
            match self.send_once(&buf[done..]) {
                Ok(n) => done += n,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }
}

impl Read for RStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if !self.b.stream.have_rdata() {
            self.wait(RStream::have_rdata, None)?;
        }
        self.read_ready(buf)
    }
}

impl Write for RStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            let r = self
                .wait(RStream::can_send, None)
                .and_then(|()| self.write_ready(&buf[done..]));
            match r {
                Ok(n) => done += n,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }

    /// Data is on its way once written; nothing is held back.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for RStream {
    fn drop(&mut self) {
        if self.b.stream.state & CONNECTED != 0 {
            let _ = self.shutdown(Shutdown::Both);
        }
    }
}

/// Listens for rsocket connections (`rlisten` + `raccept`).
#[derive(Debug)]
pub struct RListener {
    acceptor: Acceptor,
    pd: Pd,
}

impl RListener {
    /// Listens at `addr` of the process's device (port 0: any free port).
    pub fn bind(addr: SocketAddr) -> io::Result<RListener> {
        let ctx = Context::open().map_err(io_err)?;
        RListener::bind_on(&ctx, addr)
    }

    /// Listens at `addr` of device `ctx`.
    pub fn bind_on(ctx: &Context, addr: SocketAddr) -> io::Result<RListener> {
        let pd = ctx.alloc_pd().map_err(io_err)?;
        let acceptor = Acceptor::bind_with(ctx, addr, options(&pd)).map_err(io_err)?;
        Ok(RListener { acceptor, pd })
    }

    /// The address it listens at.
    pub fn local_addr(&self) -> SocketAddr {
        self.acceptor.local_addr()
    }

    /// Waits for a connection request and accepts it; a request that is
    /// not an rsocket's (its connection data is not version 1) is rejected
    /// and the wait goes on.
    pub fn accept(&self) -> io::Result<RStream> {
        loop {
            let req = self.acceptor.incoming().map_err(io_err)?;
            if ConnData::decode(req.private_data()).is_none() {
                let _ = req.reject(&[]);
                continue;
            }
            let b = Buffers::new(&self.pd).map_err(io_err)?;
            let conn = req.accept(&b.conn_data()).map_err(io_err)?;
            return b.connected(conn);
        }
    }
}
