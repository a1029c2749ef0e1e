//! What `rc_pingpong` and `ud_pingpong` share, byte-compatible with rdma-core's
//! `libibverbs/examples` so a C peer and a Rust peer talk to each other:
//!
//! * the TCP exchange: each side sends one 52-byte NUL-terminated message
//!   `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, GID as 32 hex digits of its 16 bytes
//!   in order); the client writes its message first, the server answers after it
//!   brought its QP up, and the client closes with the 5 bytes `"done\0"`;
//! * numeric options parsed like `strtoul(arg, NULL, 0)` (decimal, `0x` hex,
//!   leading-`0` octal);
//! * the closing report lines with the C program's float arithmetic;
//! * the steps both C programs take alike: `main`'s exit codes, opening the
//!   device, the buffer, CQ and QP (`pp_init_ctx`), posting receives, the
//!   address exchange and the ping-pong loop itself.
//!
//! Both examples include this file with `#[path]` (and `tests/two_process.rs`
//! for the message format); each uses only part of it.
#![allow(dead_code)]

use softrdma::verbs::{
    Access, AddressVector, Ah, CompChannel, Context, Cq, Gid, Mr, Pd, Qp, QpAttr, QpAttrMask as M,
    QpCap, QpInit, QpState, QpType, RecvWr, SendFlags, SendWr, Wc, WcStatus, WrOpcode, devices,
};
use std::io::{Read, Write};
use std::net::{Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Size of the exchange message: `sizeof "0000:000000:000000:" + 32 hex digits`, NUL included.
pub(crate) const MSG_LEN: usize = 52;

/// `wr_id` of receives.
pub(crate) const RECV_WRID: u64 = 1;
/// `wr_id` of sends.
pub(crate) const SEND_WRID: u64 = 2;

/// The Q_Key both sides of `ud_pingpong` use.
pub(crate) const QKEY: u32 = 0x1111_1111;
/// Bytes of GRH area in front of every UD receive.
pub(crate) const GRH: usize = 40;

/// One side's address, as the pingpong programs exchange it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dest {
    pub(crate) lid: u16,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) gid: Gid,
}

impl Dest {
    /// The 52-byte wire message (51 characters and a NUL).
    pub(crate) fn to_wire(self) -> [u8; MSG_LEN] {
        let mut hex = String::with_capacity(32);
        for b in self.gid.0 {
            hex.push_str(&format!("{b:02x}"));
        }
        let s = format!("{:04x}:{:06x}:{:06x}:{hex}", self.lid, self.qpn, self.psn);
        let mut out = [0u8; MSG_LEN];
        let n = s.len().min(MSG_LEN - 1);
        out[..n].copy_from_slice(&s.as_bytes()[..n]);
        out
    }

    /// Parses a message as the C programs' `sscanf("%x:%x:%x:%s")` plus
    /// `wire_gid_to_gid` do; `None` if it does not have that shape.
    pub(crate) fn from_wire(msg: &[u8]) -> Option<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).ok()?;
        let mut parts = text.splitn(4, ':');
        let lid = u32::from_str_radix(parts.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(parts.next()?, 16).ok()?;
        let psn = u32::from_str_radix(parts.next()?, 16).ok()?;
        let gid_hex = parts.next()?.split_whitespace().next().unwrap_or("");
        let mut gid = [0u8; 16];
        // wire_gid_to_gid reads four groups of eight hex digits, each a big-endian word.
        for (i, chunk) in gid.chunks_mut(4).enumerate() {
            let digits = gid_hex.get(i * 8..(i + 1) * 8)?;
            let word = u32::from_str_radix(digits, 16).ok()?;
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        Some(Dest {
            lid: lid as u16,
            qpn,
            psn,
            gid: Gid(gid),
        })
    }

    /// Whether the GID's interface id (its last 8 bytes) is set: the C programs
    /// use a GRH (and so, on RoCE, can route at all) only then.
    pub(crate) fn has_gid(&self) -> bool {
        self.gid.0[8..] != [0; 8]
    }

    /// The GID as `inet_ntop(AF_INET6)` prints it.
    pub(crate) fn gid_text(&self) -> String {
        Ipv6Addr::from(self.gid.0).to_string()
    }

    /// The address vector towards this peer from `port` (with a GRH, and so
    /// a route on RoCE, only if the peer sent a GID): what both programs set
    /// up, but for the hop limit.
    pub(crate) fn av(&self, port: u8, sl: u8, gid_idx: i32, hop_limit: u8) -> AddressVector {
        let mut av = AddressVector {
            is_global: false,
            dlid: self.lid,
            sl,
            src_path_bits: 0,
            port_num: port,
            ..AddressVector::default()
        };
        if self.has_gid() {
            av.is_global = true;
            av.hop_limit = hop_limit;
            av.dgid = self.gid.0;
            av.sgid_index = gid_idx as u8;
        }
        av
    }
}

/// Prints an address line: `label` is `"local address: "` or `"remote address:"`,
/// `before_gid` what the C program puts before "GID" (`,`, or `:` on
/// `ud_pingpong`'s local line).
pub(crate) fn print_address(label: &str, d: &Dest, before_gid: &str) {
    println!(
        "  {label} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{before_gid} GID {}",
        d.lid,
        d.qpn,
        d.psn,
        d.gid_text()
    );
}

/// The whole exchange: as client of `host` or as server on `port`, then the
/// remote address line. `connect` brings our QP up towards the peer: the
/// server does so before it answers, the client once it has the answer.
pub(crate) fn exchange(
    host: Option<&str>,
    port: u16,
    me: &Dest,
    mut connect: impl FnMut(&Dest) -> Result<(), String>,
) -> Result<Dest, String> {
    let rem = match host {
        Some(server) => client_exchange(server, port, me)?,
        None => server_exchange(port, me, &mut connect)?,
    };
    print_address("remote address:", &rem, ",");
    if host.is_some() {
        connect(&rem)?;
    }
    Ok(rem)
}

/// The client side of the exchange: connect, send ours, read theirs, say "done".
pub(crate) fn client_exchange(server: &str, port: u16, me: &Dest) -> Result<Dest, String> {
    let addrs: Vec<_> = (server, port)
        .to_socket_addrs()
        .map_err(|e| format!("{e} for {server}:{port}"))?
        .collect();
    let mut sock = addrs
        .iter()
        .find_map(|a| TcpStream::connect(a).ok())
        .ok_or_else(|| format!("Couldn't connect to {server}:{port}"))?;
    sock.write_all(&me.to_wire())
        .map_err(|_| "Couldn't send local address".to_string())?;
    let mut msg = [0u8; MSG_LEN];
    sock.read_exact(&mut msg)
        .and_then(|_| sock.write_all(b"done\0"))
        .map_err(|e| format!("client read/write: {e}\nCouldn't read/write remote address"))?;
    Dest::from_wire(&msg).ok_or_else(|| "Couldn't parse remote address".to_string())
}

/// The server side: accept one client, read its address, bring the QP up with
/// `connect` (before answering, as the C server does), send ours, await "done".
pub(crate) fn server_exchange(
    port: u16,
    me: &Dest,
    connect: impl FnOnce(&Dest) -> Result<(), String>,
) -> Result<Dest, String> {
    // getaddrinfo(NULL, port, AI_PASSIVE) on Linux yields 0.0.0.0 first.
    let listener = TcpListener::bind(("0.0.0.0", port))
        .or_else(|_| TcpListener::bind(("::", port)))
        .map_err(|_| format!("Couldn't listen to port {port}"))?;
    let (mut conn, _) = listener
        .accept()
        .map_err(|_| "accept() failed".to_string())?;
    drop(listener);
    let mut msg = [0u8; MSG_LEN];
    conn.read_exact(&mut msg)
        .map_err(|e| format!("server read: {e}\nCouldn't read remote address"))?;
    let rem = Dest::from_wire(&msg).ok_or_else(|| "Couldn't parse remote address".to_string())?;
    connect(&rem).map_err(|e| format!("{e}\nCouldn't connect to remote QP"))?;
    let mut done = [0u8; 5];
    // A peer that vanishes must not hang the server for ever.
    let _ = conn.set_read_timeout(Some(Duration::from_secs(60)));
    conn.write_all(&me.to_wire())
        .and_then(|_| conn.read_exact(&mut done))
        .map_err(|_| "Couldn't send/recv local address".to_string())?;
    Ok(rem)
}

/// `strtoul(s, NULL, 0)` for the values the options take (errors instead of 0).
pub(crate) fn parse_c_ulong(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        u64::from_str_radix(&t[1..], 8)
    } else {
        t.parse()
    };
    r.map_err(|e| format!("invalid number {s:?}: {e}"))
}

/// clap value parser: a C-style unsigned 32-bit number.
pub(crate) fn c_u32(s: &str) -> Result<u32, String> {
    parse_c_ulong(s)?
        .try_into()
        .map_err(|_| format!("{s} is out of range"))
}

/// clap value parser: a C-style signed number (for `-g`, whose "unset" is -1).
pub(crate) fn c_i32(s: &str) -> Result<i32, String> {
    match s.trim().strip_prefix('-') {
        Some(rest) => {
            let v = parse_c_ulong(rest)?;
            i32::try_from(v)
                .map(|v| -v)
                .map_err(|_| format!("{s} is out of range"))
        }
        None => c_u32(s).and_then(|v| i32::try_from(v).map_err(|_| format!("{s} is out of range"))),
    }
}

/// clap value parser for `-p`: like the C programs, reject ports above 65535.
pub(crate) fn c_port(s: &str) -> Result<u16, String> {
    parse_c_ulong(s)?
        .try_into()
        .map_err(|_| format!("port {s} is above 65535"))
}

/// The system page size (`sysconf(_SC_PAGESIZE)`).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// A random 24-bit initial PSN (the C programs: `lrand48() & 0xffffff`).
pub(crate) fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: `b` is a valid writable 4-byte buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let r = if n == 4 {
        u32::from_ne_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        t ^ std::process::id().wrapping_mul(2_654_435_761)
    };
    r & 0xFF_FFFF
}

/// The byte the C programs' `-c` writes to (and expects at) the first byte of
/// page `page`: `i / page_size % sizeof(char)`, which is always 0 because
/// `sizeof(char)` is 1. Kept as is so that `-c` agrees with the C peer; it still
/// detects a page whose first byte kept the 0x7b fill.
pub(crate) fn chk_byte(page: usize) -> u8 {
    (page % size_of::<u8>()) as u8
}

/// Prints the two closing lines exactly as the C programs do (`float` µs).
pub(crate) fn report(start: Instant, size: u32, iters: u32) {
    let usec = start.elapsed().as_micros() as f32;
    let bytes = i64::from(size) * i64::from(iters) * 2;
    let usec = f64::from(usec);
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1_000_000.0,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1_000_000.0,
        usec / f64::from(iters)
    );
}

/// `ibv_wc_status_str`.
pub(crate) fn wc_status_str(s: WcStatus) -> &'static str {
    use WcStatus::*;
    match s {
        Success => "success",
        LocLenErr => "local length error",
        LocQpOpErr => "local QP operation error",
        LocEecOpErr => "local EE context operation error",
        LocProtErr => "local protection error",
        WrFlushErr => "Work Request Flushed Error",
        MwBindErr => "memory management operation error",
        BadRespErr => "bad response error",
        LocAccessErr => "local access error",
        RemInvReqErr => "remote invalid request error",
        RemAccessErr => "remote access error",
        RemOpErr => "remote operation error",
        RetryExcErr => "transport retry counter exceeded",
        RnrRetryExcErr => "RNR retry counter exceeded",
        LocRddViolErr => "local RDD violation error",
        RemInvRdReqErr => "remote invalid RD request",
        RemAbortErr => "aborted error",
        InvEecnErr => "invalid EE context number",
        InvEecStateErr => "invalid EE context state",
        FatalErr => "fatal error",
        RespTimeoutErr => "response timeout error",
        GeneralErr => "general error",
        TmErr => "TM error",
        TmRndvIncomplete => "TM software rendezvous",
    }
}

/// The ping-pong bookkeeping both programs share (`parse_single_wc` in C):
/// counts completions, refills receives when at most one is left, and posts
/// the next send once both the previous send and a receive completed.
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) iters: u32,
    pub(crate) rx_depth: u32,
    pub(crate) scnt: u32,
    pub(crate) rcnt: u32,
    pub(crate) routs: u32,
    pub(crate) pending: u64,
}

impl Counters {
    pub(crate) fn done(&self) -> bool {
        self.rcnt >= self.iters && self.scnt >= self.iters
    }

    /// Handles one completion; `post_recv(n)` posts up to `n` receives and
    /// returns how many it posted, `post_send()` posts the next send.
    pub(crate) fn on_wc(
        &mut self,
        wc: &Wc,
        post_recv: impl FnOnce(u32) -> u32,
        post_send: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        if wc.status != WcStatus::Success {
            return Err(format!(
                "Failed status {} ({}) for wr_id {}",
                wc_status_str(wc.status),
                wc.status.as_u32(),
                wc.wr_id as i32
            ));
        }
        match wc.wr_id {
            SEND_WRID => self.scnt += 1,
            RECV_WRID => {
                self.routs = self.routs.saturating_sub(1);
                if self.routs <= 1 {
                    self.routs += post_recv(self.rx_depth - self.routs);
                    if self.routs < self.rx_depth {
                        return Err(format!("Couldn't post receive ({})", self.routs));
                    }
                }
                self.rcnt += 1;
            }
            other => return Err(format!("Completion for unknown wr_id {}", other as i32)),
        }
        self.pending &= !wc.wr_id;
        if self.scnt < self.iters && self.pending == 0 {
            post_send().map_err(|e| format!("Couldn't post send ({e})"))?;
            self.pending = RECV_WRID | SEND_WRID;
        }
        Ok(())
    }
}

/// `main` of both programs: bad options exit with 1 like the C programs
/// (clap's default is 2), `--help` with 0; an error of `run` is printed and
/// exits with 1.
pub(crate) fn main_with<A: clap::Parser>(run: impl FnOnce(&A) -> Result<(), String>) -> ExitCode {
    let args = match A::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

/// Opens device `ib_dev` (the first one without it) and prints which backend
/// serves it.
pub(crate) fn open_device(ib_dev: Option<&str>) -> Result<Context, String> {
    if let Some(d) = ib_dev.filter(|d| !devices().contains(d)) {
        return Err(format!("IB device {d} not found"));
    }
    let mut open = Context::builder();
    if let Some(d) = ib_dev {
        open = open.device(d);
    }
    let ctx = open
        .open()
        .map_err(|e| format!("Couldn't get context for softrdma0 ({e})"))?;
    println!("backend: {}", ctx.backend_info());
    Ok(ctx)
}

/// The completion channel of `-e`, if given.
pub(crate) fn comp_channel(ctx: &Context, events: bool) -> Result<Option<CompChannel>, String> {
    if !events {
        return Ok(None);
    }
    ctx.create_comp_channel()
        .map(Some)
        .map_err(|e| format!("Couldn't create completion channel ({e})"))
}

/// Where messages start in the buffer: UD receives begin with the GRH area.
fn msg_offset(qp_type: QpType) -> usize {
    if qp_type == QpType::Ud { GRH } else { 0 }
}

/// Everything the ping-pong loop touches (`struct pingpong_context`).
pub(crate) struct Pp {
    pub(crate) pd: Pd,
    pub(crate) qp: Qp,
    pub(crate) mr: Mr,
    pub(crate) cq: Cq,
    size: u32,
    rx_depth: u32,
    inline: bool,
    /// UD: the address handle to the peer (set when connecting) and its QPN.
    pub(crate) ah: Option<Ah>,
    pub(crate) remote_qpn: u32,
}

/// What the loop takes from the command line.
pub(crate) struct LoopOpts {
    pub(crate) iters: u32,
    pub(crate) client: bool,
    /// `-c`: the client marks each page, the server checks the marks.
    pub(crate) chk: bool,
}

impl Pp {
    /// `pp_init_ctx` from the PD on: a buffer of `size` bytes (after the GRH
    /// area on UD) filled with 0x7b, a CQ of `rx_depth + 1` entries reporting
    /// to `channel`, and a QP of `qp_type` with room for `rx_depth` receives.
    pub(crate) fn new(
        ctx: &Context,
        channel: Option<&CompChannel>,
        qp_type: QpType,
        size: u32,
        rx_depth: u32,
    ) -> Result<Pp, String> {
        let pd = ctx
            .alloc_pd()
            .map_err(|e| format!("Couldn't allocate PD ({e})"))?;
        let len = size as usize + msg_offset(qp_type);
        let mr = pd
            .alloc_mr(len, Access::LOCAL_WRITE)
            .map_err(|e| format!("Couldn't register MR ({e})"))?;
        mr.write(0, &vec![0x7b; len])
            .map_err(|e| format!("Couldn't allocate work buf. ({e})"))?;
        let cq = ctx
            .create_cq(rx_depth + 1, channel)
            .map_err(|e| format!("Couldn't create CQ ({e})"))?;
        let mut init = QpInit::new(qp_type, &cq, &cq);
        init.cap = QpCap {
            max_send_wr: 1,
            max_recv_wr: rx_depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd
            .create_qp(&init)
            .map_err(|e| format!("Couldn't create QP ({e})"))?;
        let inline = qp.cap().max_inline_data >= size;
        Ok(Pp {
            pd,
            qp,
            mr,
            cq,
            size,
            rx_depth,
            inline,
            ah: None,
            remote_qpn: 0,
        })
    }

    /// Where messages start in the buffer.
    fn offset(&self) -> usize {
        msg_offset(self.qp.qp_type())
    }

    /// RESET → INIT on `port`: an RC QP grants no remote access, a UD QP
    /// takes the Q_Key.
    pub(crate) fn to_init(&self, port: u8) -> Result<(), String> {
        let mut a = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: port,
            ..QpAttr::default()
        };
        let mut mask = M::STATE | M::PKEY_INDEX | M::PORT;
        if self.qp.qp_type() == QpType::Ud {
            a.qkey = QKEY;
            mask = mask | M::QKEY;
        } else {
            a.qp_access_flags = Access::EMPTY;
            mask = mask | M::ACCESS_FLAGS;
        }
        self.qp
            .modify(&a, mask)
            .map_err(|e| format!("Failed to modify QP to INIT ({e})"))
    }

    /// Our address: `lid` and `gid` of the port, this QP, a random PSN.
    pub(crate) fn dest(&self, lid: u16, gid: Gid) -> Dest {
        Dest {
            lid,
            qpn: self.qp.qpn(),
            psn: random_psn(),
            gid,
        }
    }

    /// Posts up to `n` receives of the whole buffer (GRH area included);
    /// returns how many were posted.
    fn post_recv(&self, n: u32) -> u32 {
        let Ok(sge) = self.mr.sge(0, self.size as usize + self.offset()) else {
            return 0;
        };
        for i in 0..n {
            let wr = RecvWr {
                wr_id: RECV_WRID,
                sgl: [sge].into(),
            };
            if self.qp.post_recv(wr).is_err() {
                return i;
            }
        }
        n
    }

    /// Posts one signalled SEND of the message (inline when the QP allows
    /// it); on UD to the peer's address handle.
    fn post_send(&self) -> Result<(), String> {
        let mut wr = SendWr::new(SEND_WRID, WrOpcode::Send);
        wr.flags = SendFlags::SIGNALED;
        if self.qp.qp_type() == QpType::Ud {
            let ah = self.ah.as_ref().ok_or("no address handle")?;
            wr.ud = Some(ah.dest(self.remote_qpn, QKEY));
        }
        let (off, len) = (self.offset(), self.size as usize);
        if self.inline {
            wr.flags = wr.flags | SendFlags::INLINE;
            wr.inline = Some(self.mr.to_vec(off, len).map_err(|e| e.to_string())?);
        } else {
            wr.sgl = [self.mr.sge(off, len).map_err(|e| e.to_string())?].into();
        }
        self.qp.post_send(wr).map_err(|e| e.to_string())
    }

    /// Posts the first `rx_depth` receives and, with a channel, arms the CQ;
    /// returns how many receives are outstanding.
    pub(crate) fn start(&self, channel: Option<&CompChannel>) -> Result<u32, String> {
        let routs = self.post_recv(self.rx_depth);
        if routs < self.rx_depth {
            return Err(format!("Couldn't post receive ({routs})"));
        }
        if channel.is_some() {
            self.cq
                .req_notify(false)
                .map_err(|e| format!("Couldn't request CQ notification ({e})"))?;
        }
        Ok(routs)
    }

    /// The ping-pong on a connected QP with `routs` receives posted: the
    /// client sends first, each side sends again once its send completed and
    /// a message arrived, until both counted `iters`; then the report, and the
    /// server's `-c` check. `wc_err` words a failed completion's error as the
    /// program does (it gets the error and how many completions the poll
    /// returned).
    pub(crate) fn ping_pong(
        &self,
        channel: Option<&CompChannel>,
        routs: u32,
        o: &LoopOpts,
        wc_err: impl Fn(String, usize) -> String,
    ) -> Result<(), String> {
        let page = page_size();
        let (off, size) = (self.offset(), self.size as usize);
        let mut c = Counters {
            iters: o.iters,
            rx_depth: self.rx_depth,
            scnt: 0,
            rcnt: 0,
            routs,
            pending: RECV_WRID,
        };
        if o.client {
            if o.chk {
                for i in (0..size).step_by(page) {
                    self.mr
                        .write(i + off, &[chk_byte(i / page)])
                        .map_err(|e| e.to_string())?;
                }
            }
            self.post_send()
                .map_err(|e| format!("Couldn't post send ({e})"))?;
            c.pending |= SEND_WRID;
        }

        let start = Instant::now();
        let mut wcs = Vec::with_capacity(2);
        while !c.done() {
            if let Some(ch) = channel {
                let id = ch
                    .wait()
                    .map_err(|e| format!("Failed to get cq_event ({e})"))?;
                if id != self.cq.id() {
                    return Err(format!("CQ event for unknown CQ {id:?}"));
                }
                self.cq
                    .req_notify(false)
                    .map_err(|e| format!("Couldn't request CQ notification ({e})"))?;
            }
            wcs.clear();
            loop {
                self.cq
                    .poll(&mut wcs, 2)
                    .map_err(|e| format!("poll CQ failed {e}"))?;
                if channel.is_some() || !wcs.is_empty() {
                    break;
                }
            }
            for wc in &wcs {
                c.on_wc(wc, |n| self.post_recv(n), || self.post_send())
                    .map_err(|e| wc_err(e, wcs.len()))?;
            }
        }
        report(start, self.size, o.iters);

        if !o.client && o.chk {
            for i in (0..size).step_by(page) {
                let mut b = [0u8];
                self.mr.read(i + off, &mut b).map_err(|e| e.to_string())?;
                if b[0] != chk_byte(i / page) {
                    println!("invalid data in page {}", i / page);
                }
            }
        }
        Ok(())
    }
}
