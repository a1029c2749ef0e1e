//! One side of a `perf` run: device objects, the tests (client) and the
//! server's part in them.
//!
//! Each side registers one buffer of `2 * len` bytes. The first half is the
//! *in* area: the peer's WRITEs, READs and atomics target it and receives land
//! in it; the second half is the *out* area, the source of our own WRITEs and
//! SENDs and the destination of our READs and atomic results. A pool of
//! receives covering the whole in area stays posted (reposted as completions
//! arrive), so SEND and WRITE-with-immediate tests of any size find one.
//!
//! Tests the server takes part in (SEND bandwidth and latency, WRITE latency)
//! end with a stop message over RDMA: a SEND or WRITE with immediate
//! [`STOP_IMM`], or, for busy-polled WRITE latency, the sentinel byte
//! [`STOP_BYTE`]. Busy-polled WRITE latency is perftest's: each side watches
//! the last byte of its in area for the next sequence number.

use std::time::{Duration, Instant};

use softrdma::verbs::{
    Access, CompChannel, ConnectParams, Context, Cq, Mr, Mtu, Pd, Qp, QpInit, QpType, RecvWr,
    SendFlags, SendWr, Wc, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

use super::proto::{Ctl, Hello};
use super::{Amount, Op, Test};
use crate::cmd::{CliError, OrErr};

/// Immediate data that ends a test.
const STOP_IMM: u32 = 0xFFFF_FFFF;
/// Sentinel byte that ends a busy-polled WRITE latency test.
const STOP_BYTE: u8 = 0xFF;
/// Receives a side keeps posted.
const RECV_POOL: u32 = 1024;
/// Marks receive work request ids.
const RECV_ID: u64 = 1 << 63;
/// Work request id of stop messages.
const STOP_ID: u64 = (1 << 62) | 1;
/// Work request id of the marker that retires unsignalled requests.
const DRAIN_ID: u64 = (1 << 62) | 2;
/// Unsignalled sends between signalled ones in latency loops.
const LAT_SIGNAL: u64 = 32;
/// How long a side waits for progress before it gives up on the peer.
const STALL: Duration = Duration::from_secs(15);
const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

/// Bytes of each half of the buffer for messages up to `max_size`.
pub(crate) fn buf_len(max_size: u64) -> u64 {
    max_size.max(4096).div_ceil(4096) * 4096
}

/// The sequence number of ping `i` as a sentinel byte: 1..=254.
fn seq_byte(i: u64) -> u8 {
    (i % 254) as u8 + 1
}

/// What one test measured.
#[derive(Debug, Clone)]
pub(crate) enum Measure {
    /// `ops` operations of the size in `secs` seconds.
    Bw { ops: u64, secs: f64 },
    /// Latency samples in microseconds (already halved for one-way ops).
    Lat { samples_us: Vec<f64> },
}

/// The peer's buffer.
#[derive(Debug, Clone, Copy)]
struct Remote {
    addr: u64,
    rkey: u32,
}

/// One side's device objects.
pub(crate) struct Side {
    ctx: Context,
    _pd: Pd,
    mr: Mr,
    len: u64,
    cq: Cq,
    ch: Option<CompChannel>,
    qp: Qp,
    psn: u32,
    depth: u64,
    remote: Option<Remote>,
}

impl std::fmt::Debug for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Side({:?}, {:?})", self.ctx, self.qp)
    }
}

/// An initial PSN that differs from run to run.
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() as u32) & 0xFF_FFFF
}

impl Side {
    /// A PD, a buffer of `2 * len` bytes, a CQ (with a channel for `events`)
    /// and an RC QP in INIT with room for `depth` requests in flight.
    pub(crate) fn new(ctx: &Context, len: u64, depth: u32, events: bool) -> Result<Side, CliError> {
        let pd = ctx.alloc_pd().or_err("alloc_pd")?;
        let bytes = usize::try_from(2 * len).or_err("buffer size")?;
        let mr = pd
            .alloc_mr(bytes, ALL)
            .or_err(format_args!("registering {bytes} bytes"))?;
        let ch = if events {
            Some(ctx.create_comp_channel().or_err("create_comp_channel")?)
        } else {
            None
        };
        let send_wr = depth + 2 * LAT_SIGNAL as u32;
        let cq = ctx
            .create_cq(send_wr + RECV_POOL + 64, ch.as_ref())
            .or_err("create_cq")?;
        let mut init = QpInit::new(QpType::Rc, &cq, &cq);
        init.cap.max_send_wr = send_wr;
        init.cap.max_recv_wr = RECV_POOL + 16;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        let qp = pd.create_qp(&init).or_err("create_qp")?;
        qp.to_init(ALL.without(Access::LOCAL_WRITE), 0)
            .or_err("QP to INIT")?;
        Ok(Side {
            ctx: ctx.clone(),
            _pd: pd,
            mr,
            len,
            cq,
            ch,
            qp,
            psn: random_psn(),
            depth: u64::from(depth),
            remote: None,
        })
    }

    /// The largest path MTU this device's port allows, at most `want`.
    fn mtu_for(&self, want: u32) -> u32 {
        let port = self
            .ctx
            .query_port(1)
            .ok()
            .and_then(|p| Mtu::from_u32(p.active_mtu))
            .map_or(4096, Mtu::bytes);
        want.min(port)
    }

    /// Our HELLO: QP, PSN, GID, buffer (in area first), path MTU, polling mode.
    pub(crate) fn hello(&self, mtu: u32, events: bool) -> Hello {
        Hello {
            qpn: self.qp.qpn(),
            psn: self.psn,
            gid: softrdma::verbs::Gid::from_ip(self.ctx.local_addr().ip()),
            addr: self.mr.addr(),
            rkey: self.mr.rkey(),
            len: self.len,
            mtu: self.mtu_for(mtu),
            events,
        }
    }

    /// Moves the QP to RTS towards `peer` and posts the receive pool.
    pub(crate) fn connect(&mut self, peer: &Hello, mtu: u32) -> Result<(), CliError> {
        let mtu = match self.mtu_for(mtu.min(peer.mtu)) {
            256 => Mtu::M256,
            512 => Mtu::M512,
            1024 => Mtu::M1024,
            2048 => Mtu::M2048,
            _ => Mtu::M4096,
        };
        let mut cp = ConnectParams::new(peer.qpn, peer.gid, peer.psn, self.psn);
        cp.mtu = mtu;
        cp.access = ALL.without(Access::LOCAL_WRITE);
        self.qp.connect(&cp).or_err("connecting the QP")?;
        self.remote = Some(Remote {
            addr: peer.addr,
            rkey: peer.rkey,
        });
        for i in 0..u64::from(RECV_POOL) {
            self.post_recv(i)?;
        }
        Ok(())
    }

    fn remote(&self) -> Result<Remote, CliError> {
        self.remote.ok_or_else(|| CliError::new("QP not connected"))
    }

    fn post_recv(&self, slot: u64) -> Result<(), CliError> {
        let sge = self.mr.sge(0, self.len as usize).or_err("receive buffer")?;
        self.qp
            .post_recv(RecvWr {
                wr_id: RECV_ID | slot,
                sgl: [sge].into(),
            })
            .or_err("post_recv")
    }

    /// Posts a request of `op` with `size` bytes from the out area to the
    /// peer's in area.
    fn post(
        &self,
        op: WrOpcode,
        id: u64,
        size: u64,
        signaled: bool,
        imm: u32,
    ) -> Result<(), CliError> {
        let r = self.remote()?;
        let mut w = SendWr::new(id, op);
        if size > 0 {
            w.sgl = [self
                .mr
                .sge(self.len as usize, size as usize)
                .or_err("send buffer")?]
            .into();
        }
        w.remote_addr = r.addr;
        w.rkey = r.rkey;
        w.imm_data = imm;
        if op == WrOpcode::AtomicFetchAndAdd {
            w.compare_add = 1;
        }
        if signaled {
            w.flags = SendFlags::SIGNALED;
        }
        self.qp.post_send(w).or_err("post_send")
    }

    /// Moves completions into `out` without blocking (busy mode: this also
    /// receives packets), reposting receives; fails on an error completion.
    fn poll_into(&self, out: &mut Vec<Wc>) -> Result<usize, CliError> {
        out.clear();
        self.cq.poll(out, 64).or_err("poll_cq")?;
        for w in out.iter() {
            if w.status != WcStatus::Success {
                return Err(CliError::new(format!(
                    "{:?} completed with {:?} (vendor error {:#x})",
                    w.opcode, w.status, w.vendor_err
                )));
            }
            if w.wr_id & RECV_ID != 0 {
                self.post_recv(w.wr_id & !RECV_ID)?;
            }
        }
        Ok(out.len())
    }

    /// Waits for at least one completion: spins in busy mode (giving up
    /// after [`STALL`]), sleeps on the completion channel in events mode.
    fn wait_into(&self, out: &mut Vec<Wc>) -> Result<(), CliError> {
        if self.poll_into(out)? > 0 {
            return Ok(());
        }
        match &self.ch {
            Some(ch) => loop {
                self.cq.req_notify(false).or_err("req_notify_cq")?;
                if self.poll_into(out)? > 0 {
                    return Ok(());
                }
                ch.wait().or_err("waiting for a completion event")?;
                if self.poll_into(out)? > 0 {
                    return Ok(());
                }
            },
            None => {
                let t0 = Instant::now();
                let mut spins = 0u32;
                loop {
                    if self.poll_into(out)? > 0 {
                        return Ok(());
                    }
                    spins += 1;
                    if spins % 1024 == 0 && t0.elapsed() > STALL {
                        return Err(CliError::new(format!(
                            "no completion for {} s: is the peer still there?",
                            STALL.as_secs()
                        )));
                    }
                    relax(spins);
                }
            }
        }
    }

    /// Waits until the send-side completion with id `id` arrived.
    fn wait_send(&self, id: u64, wcs: &mut Vec<Wc>) -> Result<(), CliError> {
        loop {
            self.wait_into(wcs)?;
            if wcs.iter().any(|w| w.wr_id == id) {
                return Ok(());
            }
        }
    }

    /// The sentinel byte at the end of the first `size` bytes of the in area.
    fn in_byte(&self, size: u64) -> Result<u8, CliError> {
        let mut b = [0u8];
        self.mr
            .read(size as usize - 1, &mut b)
            .or_err("reading the buffer")?;
        Ok(b[0])
    }

    fn set_in_byte(&self, size: u64, v: u8) -> Result<(), CliError> {
        self.mr.write(size as usize - 1, &[v]).or_err("buffer")
    }

    fn set_out_byte(&self, size: u64, v: u8) -> Result<(), CliError> {
        self.mr
            .write((self.len + size) as usize - 1, &[v])
            .or_err("buffer")
    }

    // ------------------------------------------------------------------
    // Client

    /// Runs one test against the server.
    pub(crate) fn run_test(
        &mut self,
        ctl: &mut Ctl,
        op: Op,
        test: Test,
        size: u64,
        amount: Amount,
    ) -> Result<Measure, CliError> {
        let size = if op == Op::Atomic { 8 } else { size };
        let busy_write_lat = op == Op::Write && test == Test::Lat && self.ch.is_none();
        if busy_write_lat {
            self.set_in_byte(size, 0)?;
        }
        ctl.send(&format!("RUN {} {} {size}", op.name(), test.name()))?;
        ctl.expect("READY", Duration::from_secs(10))?;
        let mut wcs = Vec::with_capacity(64);
        let m = match test {
            Test::Bw => self.bw(op, size, amount, &mut wcs)?,
            Test::Lat => self.lat(op, size, amount, &mut wcs)?,
        };
        // Tests the server takes part in end with a stop message.
        let stop = match (op, test) {
            (Op::Send, _) => Some((WrOpcode::SendWithImm, 0)),
            (Op::Write, Test::Lat) if busy_write_lat => {
                self.set_out_byte(size, STOP_BYTE)?;
                Some((WrOpcode::RdmaWrite, size))
            }
            (Op::Write, Test::Lat) => Some((WrOpcode::RdmaWriteWithImm, 0)),
            _ => None,
        };
        if let Some((opcode, len)) = stop {
            self.post(opcode, STOP_ID, len, true, STOP_IMM)?;
            self.wait_send(STOP_ID, &mut wcs)?;
            ctl.expect("END", Duration::from_secs(10))?;
        }
        Ok(m)
    }

    fn opcode(op: Op) -> WrOpcode {
        match op {
            Op::Write => WrOpcode::RdmaWrite,
            Op::Read => WrOpcode::RdmaRead,
            Op::Send => WrOpcode::Send,
            Op::Atomic => WrOpcode::AtomicFetchAndAdd,
        }
    }

    /// Bandwidth: a warm-up run, then the measured run.
    fn bw(
        &self,
        op: Op,
        size: u64,
        amount: Amount,
        wcs: &mut Vec<Wc>,
    ) -> Result<Measure, CliError> {
        let opcode = Self::opcode(op);
        let (ops, secs) = match amount {
            Amount::Iters(n) => {
                let warm = (n / 10).min(1000);
                if warm > 0 {
                    self.pump(opcode, size, Some(warm), None, wcs)?;
                }
                let t0 = Instant::now();
                let ops = self.pump(opcode, size, Some(n), None, wcs)?;
                (ops, t0.elapsed())
            }
            Amount::Time(d) => {
                self.pump(opcode, size, None, Some(Instant::now() + warmup(d)), wcs)?;
                let t0 = Instant::now();
                let ops = self.pump(opcode, size, None, Some(t0 + d), wcs)?;
                (ops, t0.elapsed())
            }
        };
        Ok(Measure::Bw {
            ops,
            secs: secs.as_secs_f64(),
        })
    }

    /// Keeps `depth` requests in flight until `limit` were posted or
    /// `until` passed, then waits for all of them; returns how many ran.
    /// Requests go in batches whose last one is signalled: its completion
    /// retires the batch (RC completes in order).
    fn pump(
        &self,
        opcode: WrOpcode,
        size: u64,
        limit: Option<u64>,
        until: Option<Instant>,
        wcs: &mut Vec<Wc>,
    ) -> Result<u64, CliError> {
        let depth = self.depth;
        let sig = (depth / 8).clamp(1, 16);
        let mut posted = 0u64;
        let mut done = 0u64;
        let mut last_progress = Instant::now();
        loop {
            let now = Instant::now();
            let stop = limit.is_some_and(|l| posted >= l) || until.is_some_and(|t| now >= t);
            if stop && done == posted {
                return Ok(done);
            }
            if !stop {
                while posted - done + sig <= depth {
                    let end = limit.map_or(posted + sig, |l| (posted + sig).min(l));
                    if end == posted {
                        break;
                    }
                    for id in posted..end {
                        self.post(opcode, id, size, id + 1 == end, 0)?;
                    }
                    posted = end;
                }
            }
            // Sleep (or spin) only when nothing more can be posted now.
            let full = stop || posted - done + sig > depth || limit == Some(posted);
            if full {
                self.wait_into(wcs)?;
            } else {
                self.poll_into(wcs)?;
            }
            let before = done;
            for w in wcs.iter() {
                if w.wr_id & RECV_ID == 0 && w.wr_id < posted {
                    done = done.max(w.wr_id + 1);
                }
            }
            if done != before {
                last_progress = now;
            } else if now - last_progress > STALL {
                return Err(CliError::new("no progress: is the peer still there?"));
            }
        }
    }

    /// Latency: one request at a time.
    fn lat(
        &self,
        op: Op,
        size: u64,
        amount: Amount,
        wcs: &mut Vec<Wc>,
    ) -> Result<Measure, CliError> {
        let mut run = LatRun::new(amount);
        let mut i = 0u64;
        while run.more() {
            let t = Instant::now();
            let signaled = lat_signaled(i);
            match op {
                Op::Read | Op::Atomic => {
                    self.post(Self::opcode(op), i, size, true, 0)?;
                    self.wait_send(i, wcs)?;
                }
                Op::Send => {
                    self.post(WrOpcode::Send, i, size, signaled, 0)?;
                    self.wait_recv(WcOpcode::Recv, wcs)?;
                }
                Op::Write if self.ch.is_some() => {
                    self.post(
                        WrOpcode::RdmaWriteWithImm,
                        i,
                        size,
                        signaled,
                        (i as u32) & 0x7FFF_FFFF,
                    )?;
                    self.wait_recv(WcOpcode::RecvRdmaWithImm, wcs)?;
                }
                Op::Write => {
                    let v = seq_byte(i);
                    self.set_out_byte(size, v)?;
                    self.post(WrOpcode::RdmaWrite, i, size, signaled, 0)?;
                    self.spin_for_byte(size, v, wcs)?;
                }
            }
            let rtt = t.elapsed().as_secs_f64() * 1e6;
            run.record(if op.one_way() { rtt / 2.0 } else { rtt });
            i += 1;
        }
        // Let the last unsignalled requests retire before the next test.
        if i % LAT_SIGNAL != 0 && matches!(op, Op::Send | Op::Write) {
            self.drain_sends(wcs)?;
        }
        Ok(Measure::Lat {
            samples_us: run.samples,
        })
    }

    /// Waits until every posted request completed: a signalled zero-length
    /// WRITE completes after everything posted before it (RC is in order).
    fn drain_sends(&self, wcs: &mut Vec<Wc>) -> Result<(), CliError> {
        self.post(WrOpcode::RdmaWrite, DRAIN_ID, 0, true, 0)?;
        self.wait_send(DRAIN_ID, wcs)
    }

    fn wait_recv(&self, kind: WcOpcode, wcs: &mut Vec<Wc>) -> Result<(), CliError> {
        loop {
            self.wait_into(wcs)?;
            if wcs.iter().any(|w| w.opcode == kind) {
                return Ok(());
            }
        }
    }

    /// Busy-polls (driving the device) until the in-area sentinel is `v`.
    fn spin_for_byte(&self, size: u64, v: u8, wcs: &mut Vec<Wc>) -> Result<(), CliError> {
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            self.poll_into(wcs)?;
            if self.in_byte(size)? == v {
                return Ok(());
            }
            spins += 1;
            if spins % 1024 == 0 && t0.elapsed() > STALL {
                return Err(CliError::new("no answer: is the peer still there?"));
            }
            relax(spins);
        }
    }

    // ------------------------------------------------------------------
    // Server

    /// The server's part in one test, between RUN and the next request.
    pub(crate) fn serve_test(
        &mut self,
        ctl: &mut Ctl,
        op: Op,
        test: Test,
        size: u64,
    ) -> Result<(), CliError> {
        let size = if op == Op::Atomic { 8 } else { size };
        let mut wcs = Vec::with_capacity(64);
        match (op, test) {
            (Op::Send, Test::Bw) => {
                ctl.send("READY")?;
                let n = self.count_recvs(&mut wcs, WcOpcode::Recv, is_stop, |_, _| Ok(()))?;
                ctl.send(&format!("END {n}"))
            }
            (Op::Send, Test::Lat) => {
                ctl.send("READY")?;
                let n = self.count_recvs(&mut wcs, WcOpcode::Recv, is_stop, |n, _| {
                    self.post(WrOpcode::Send, n, size, lat_signaled(n), 0)
                })?;
                self.finish_pongs(n, &mut wcs)?;
                ctl.send(&format!("END {n}"))
            }
            (Op::Write, Test::Lat) if self.ch.is_some() => {
                ctl.send("READY")?;
                let n = self.count_recvs(
                    &mut wcs,
                    WcOpcode::RecvRdmaWithImm,
                    |w| w.imm_data == STOP_IMM,
                    |n, w| {
                        let signaled = lat_signaled(n);
                        self.post(WrOpcode::RdmaWriteWithImm, n, size, signaled, w.imm_data)
                    },
                )?;
                self.finish_pongs(n, &mut wcs)?;
                ctl.send(&format!("END {n}"))
            }
            (Op::Write, Test::Lat) => {
                self.set_in_byte(size, 0)?;
                ctl.send("READY")?;
                let mut n = 0u64;
                let mut last = Instant::now();
                let mut spins = 0u32;
                loop {
                    self.poll_into(&mut wcs)?;
                    let b = self.in_byte(size)?;
                    if b == seq_byte(n) {
                        self.set_out_byte(size, b)?;
                        self.post(WrOpcode::RdmaWrite, n, size, lat_signaled(n), 0)?;
                        n += 1;
                        last = Instant::now();
                    } else if b == STOP_BYTE {
                        break;
                    } else {
                        spins += 1;
                        if spins % 1024 == 0 && last.elapsed() > STALL {
                            return Err(CliError::new("the client stopped writing"));
                        }
                        relax(spins);
                    }
                }
                self.finish_pongs(n, &mut wcs)?;
                ctl.send(&format!("END {n}"))
            }
            // WRITE/READ/atomic bandwidth and READ/atomic latency: the
            // device's progress thread serves them; nothing to do here.
            _ => ctl.send("READY"),
        }
    }

    /// Waits for receive completions of `kind` until one that `stop` picks
    /// out, calling `each(n, wc)` for the `n`-th one before it; returns how
    /// many came before the stop.
    fn count_recvs(
        &self,
        wcs: &mut Vec<Wc>,
        kind: WcOpcode,
        stop: impl Fn(&Wc) -> bool,
        mut each: impl FnMut(u64, &Wc) -> Result<(), CliError>,
    ) -> Result<u64, CliError> {
        let mut n = 0u64;
        loop {
            self.wait_into(wcs)?;
            for w in wcs.iter() {
                if w.opcode == kind {
                    if stop(w) {
                        return Ok(n);
                    }
                    each(n, w)?;
                    n += 1;
                }
            }
        }
    }

    /// After `n` pongs, waits for the unsignalled ones to retire.
    fn finish_pongs(&self, n: u64, wcs: &mut Vec<Wc>) -> Result<(), CliError> {
        if n % LAT_SIGNAL != 0 {
            self.drain_sends(wcs)?;
        }
        Ok(())
    }
}

/// Between empty polls: yield the CPU now and then, so that on a host with
/// more runnable threads than CPUs the peer process runs at once instead of
/// at the next scheduler tick (4 ms), which would be the measured latency.
fn relax(spins: u32) {
    if spins % 32 == 0 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// Whether the `n`-th latency ping or pong is signalled: one in [`LAT_SIGNAL`].
fn lat_signaled(n: u64) -> bool {
    n % LAT_SIGNAL == LAT_SIGNAL - 1
}

fn is_stop(w: &Wc) -> bool {
    w.wc_flags.contains(WcFlags::WITH_IMM) && w.imm_data == STOP_IMM
}

/// Warm-up before measuring for `d`: a fifth of it, at most 100 ms.
fn warmup(d: Duration) -> Duration {
    (d / 5).min(Duration::from_millis(100))
}

/// Counts latency iterations: warm-up, then samples until the amount is reached.
struct LatRun {
    amount: Amount,
    warm_left: u64,
    warm_until: Instant,
    started: Option<Instant>,
    samples: Vec<f64>,
}

impl LatRun {
    fn new(amount: Amount) -> LatRun {
        let now = Instant::now();
        let (warm_left, warm_until) = match amount {
            Amount::Iters(n) => ((n / 10).clamp(1, 1000), now),
            Amount::Time(d) => (0, now + warmup(d)),
        };
        LatRun {
            amount,
            warm_left,
            warm_until,
            started: None,
            samples: Vec::new(),
        }
    }

    fn more(&self) -> bool {
        match self.amount {
            Amount::Iters(n) => (self.samples.len() as u64) < n,
            Amount::Time(d) => match self.started {
                Some(t) => t.elapsed() < d || self.samples.is_empty(),
                None => true,
            },
        }
    }

    fn record(&mut self, v: f64) {
        if self.warm_left > 0 {
            self.warm_left -= 1;
            return;
        }
        if Instant::now() < self.warm_until {
            return;
        }
        if self.started.is_none() {
            self.started = Some(Instant::now());
        }
        self.samples.push(v);
    }
}
