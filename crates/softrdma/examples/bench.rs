//! Same-host benchmark: softrdma between two processes next to TCP over
//! loopback between the same two processes, measured in the same run.
//!
//! ```text
//! cargo run --release -p softrdma --example bench
//! cargo run --release -p softrdma --example bench -- --reps 5 --secs 2
//! ```
//!
//! The program starts a copy of itself as the server (`--serve`), on its own
//! device address, and talks to it over a TCP control connection. Each
//! repetition measures, in this order:
//!
//! 1. RDMA WRITE bandwidth: 64 KiB WRITEs (`--size`), `--depth` outstanding,
//!    one in `--signal` signalled; the target process only runs its progress
//!    thread (it sits in a blocking read on the control socket, like a
//!    perftest server);
//! 2. TCP stream bandwidth with the same write size (reader discards);
//! 3. 8-byte SEND/RECV ping-pong, both sides busy-polling their CQ (inline
//!    sends); one-way latency is half the round trip;
//! 4. 8-byte TCP ping-pong with TCP_NODELAY and blocking reads.
//!
//! It prints a table of medians over the repetitions with the ratio
//! softrdma / TCP, plus CPU time per side and the socket counters that explain
//! the numbers (system calls per packet, GSO/GRO batching). A `memcpy` row
//! gives the ceiling for a copy of the same size. The last line
//! (`RESULT key=value ...`) is for `cargo xtask bench`.
//!
//! `--idle` instead measures nothing itself: it connects two devices of this
//! process, then blocks on a completion channel nobody signals, so a harness
//! can read what a waiting process costs (`cargo xtask bench` does).

use clap::Parser;
use softrdma::verbs::{
    Access, CompChannel, ConnectParams, Context, Cq, EngineConfig, Gid, Mr, Mtu, Qp, QpInit,
    QpType, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode,
};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Parser, Clone)]
#[command(name = "bench", about = "softrdma vs TCP on loopback, two processes")]
struct Args {
    /// Repetitions (the table shows medians).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seconds per bandwidth measurement.
    #[arg(long, default_value_t = 1.0)]
    secs: f64,
    /// Round trips per latency measurement.
    #[arg(long, default_value_t = 10_000)]
    iters: usize,
    /// Bytes per RDMA WRITE / TCP write.
    #[arg(long, default_value_t = 65536)]
    size: usize,
    /// RDMA WRITEs outstanding.
    #[arg(long, default_value_t = 128)]
    depth: usize,
    /// Signal one WRITE in this many.
    #[arg(long, default_value_t = 16)]
    signal: usize,
    /// Path MTU (1024, 2048 or 4096).
    #[arg(long, default_value_t = 4096)]
    mtu: u32,
    /// Device address of this (client) process; the server takes the next one.
    #[arg(long, default_value = "127.0.0.101")]
    addr: Ipv4Addr,
    /// Run only some measurements (for profiling): write, tcp-bw, lat, tcp-lat.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Block on a completion channel forever after a short exchange between two
    /// devices of this process (`--addr` and the next address); prints READY.
    #[arg(long)]
    idle: bool,
    /// Internal: run as the server, with this control port.
    #[arg(long, hide = true)]
    serve: Option<u16>,
    /// Internal: the UDP port both devices use.
    #[arg(long, hide = true)]
    udp_port: Option<u16>,
}

impl Args {
    /// Whether measurement `m` is part of this run.
    fn runs(&self, m: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == m)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.serve.is_none() {
        // Its devices are software ones with set addresses (Context::open_with).
        println!("backend: {}", softrdma::verbs::Backend::Native);
    }
    let r = match args.serve {
        Some(ctl) => serve(&args, ctl),
        None if args.idle => idle(&args),
        None => client(&args),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "bench{}: {e}",
                if args.serve.is_some() { " server" } else { "" }
            );
            ExitCode::FAILURE
        }
    }
}

type Res<T> = Result<T, String>;

/// This process's initial PSN: random, as rdma-core's programs pick theirs
/// (`lrand48() & 0xffffff`), so a stray or forged packet of an earlier run
/// does not land in the window.
fn psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    static PSN: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PSN.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        (h.finish() as u32) & 0xFF_FFFF
    })
}

fn err<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

/// CPU seconds (user + system) this process used so far, all threads.
fn cpu_secs() -> f64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Line-oriented control connection.
struct Ctl {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Ctl {
    fn new(s: TcpStream) -> Res<Ctl> {
        let _ = s.set_nodelay(true);
        Ok(Ctl {
            r: BufReader::new(s.try_clone().map_err(err("clone"))?),
            w: s,
        })
    }
    fn send(&mut self, l: &str) -> Res<()> {
        self.w
            .write_all(format!("{l}\n").as_bytes())
            .map_err(err("control write"))
    }
    fn recv(&mut self) -> Res<String> {
        let mut s = String::new();
        match self.r.read_line(&mut s) {
            Ok(0) => Err("control connection closed".into()),
            Ok(_) => Ok(s.trim_end().to_string()),
            Err(e) => Err(format!("control read: {e}")),
        }
    }
    fn ask(&mut self, l: &str) -> Res<String> {
        self.send(l)?;
        self.recv()
    }
}

/// One device with a QP, a CQ (with a completion channel if asked) and a
/// registered buffer.
struct Rdma {
    ctx: Context,
    qp: Qp,
    cq: Cq,
    mr: Mr,
    ch: Option<CompChannel>,
}

fn rdma_setup(addr: Ipv4Addr, udp_port: u16, len: usize, depth: usize) -> Res<Rdma> {
    rdma_setup_with(addr, udp_port, len, depth, false)
}

fn rdma_setup_with(
    addr: Ipv4Addr,
    udp_port: u16,
    len: usize,
    depth: usize,
    channel: bool,
) -> Res<Rdma> {
    let cfg = EngineConfig::bound_to(SocketAddr::new(IpAddr::V4(addr), udp_port));
    let ctx = Context::open_with(cfg).map_err(err("open device"))?;
    let pd = ctx.alloc_pd().map_err(err("alloc_pd"))?;
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = pd.alloc_mr(len, all).map_err(err("alloc_mr"))?;
    let ch = if channel {
        Some(ctx.create_comp_channel().map_err(err("channel"))?)
    } else {
        None
    };
    let cq = ctx
        .create_cq((2 * depth + 64) as u32, ch.as_ref())
        .map_err(err("create_cq"))?;
    let mut init = QpInit::new(QpType::Rc, &cq, &cq);
    init.cap.max_send_wr = depth as u32 + 8;
    init.cap.max_recv_wr = 256;
    let qp = pd.create_qp(&init).map_err(err("create_qp"))?;
    qp.to_init(all.without(Access::LOCAL_WRITE), 0)
        .map_err(err("to_init"))?;
    Ok(Rdma {
        ctx,
        qp,
        cq,
        mr,
        ch,
    })
}

fn hello(r: &Rdma, psn: u32) -> String {
    format!(
        "HELLO {} {} {} {} {}",
        r.qp.qpn(),
        psn,
        r.ctx.local_addr().ip(),
        r.mr.addr(),
        r.mr.rkey()
    )
}

/// (qpn, psn, ip, addr, rkey) of a HELLO line.
fn parse_hello(l: &str) -> Res<(u32, u32, IpAddr, u64, u32)> {
    let f: Vec<&str> = l.split_whitespace().collect();
    let bad = || format!("bad HELLO {l:?}");
    if f.len() != 6 || f[0] != "HELLO" {
        return Err(bad());
    }
    Ok((
        f[1].parse().map_err(|_| bad())?,
        f[2].parse().map_err(|_| bad())?,
        f[3].parse().map_err(|_| bad())?,
        f[4].parse().map_err(|_| bad())?,
        f[5].parse().map_err(|_| bad())?,
    ))
}

fn mtu_of(m: u32) -> Res<Mtu> {
    match m {
        1024 => Ok(Mtu::M1024),
        2048 => Ok(Mtu::M2048),
        4096 => Ok(Mtu::M4096),
        _ => Err(format!("unsupported MTU {m}")),
    }
}

fn connect(r: &Rdma, peer: &str, my_psn: u32, mtu: u32) -> Res<(u64, u32)> {
    let (qpn, psn, ip, addr, rkey) = parse_hello(peer)?;
    let mut cp = ConnectParams::new(qpn, Gid::from_ip(ip), psn, my_psn);
    cp.mtu = mtu_of(mtu)?;
    r.qp.connect(&cp).map_err(err("connect"))?;
    Ok((addr, rkey))
}

fn post_recvs(r: &Rdma, n: usize) -> Res<()> {
    for i in 0..n {
        r.qp.post_recv(RecvWr {
            wr_id: i as u64,
            sgl: [r.mr.sge(0, 64).map_err(err("sge"))?].into(),
        })
        .map_err(err("post_recv"))?;
    }
    Ok(())
}

/// Sends one 8-byte inline message, signalled every 32nd.
fn send8(r: &Rdma, i: usize) -> Res<()> {
    let mut w = SendWr::new(i as u64, WrOpcode::Send);
    w.inline = Some((i as u64).to_le_bytes().to_vec());
    w.flags = if i % 32 == 31 {
        SendFlags::INLINE | SendFlags::SIGNALED
    } else {
        SendFlags::INLINE
    };
    r.qp.post_send(w).map_err(err("post_send"))
}

/// Busy-polls until one receive completed (reposting it); send completions are drained.
fn wait_recv(r: &Rdma, wcs: &mut Vec<softrdma::verbs::Wc>) -> Res<()> {
    let t0 = Instant::now();
    loop {
        wcs.clear();
        r.cq.poll(wcs, 16).map_err(err("poll"))?;
        let mut got = false;
        for w in wcs.iter() {
            if w.status != WcStatus::Success {
                return Err(format!("completion {w:?}"));
            }
            if w.opcode == WcOpcode::Recv {
                r.qp.post_recv(RecvWr {
                    wr_id: w.wr_id,
                    sgl: [r.mr.sge(0, 64).map_err(err("sge"))?].into(),
                })
                .map_err(err("post_recv"))?;
                got = true;
            }
        }
        if got {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(10) {
            return Err("no message for 10 s".into());
        }
    }
}

// ----------------------------------------------------------------------------
// Server

fn serve(a: &Args, ctl_port: u16) -> Res<()> {
    let udp_port = a.udp_port.ok_or("--udp-port missing")?;
    let my_addr = Ipv4Addr::from(u32::from(a.addr) + 1);
    let ctl_l = TcpListener::bind(("127.0.0.1", ctl_port)).map_err(err("bind control"))?;
    let data_l = TcpListener::bind("127.0.0.1:0").map_err(err("bind data"))?;
    println!("READY"); // the parent waits for this line before connecting
    let mut ctl = Ctl::new(ctl_l.accept().map_err(err("accept"))?.0)?;
    let r = rdma_setup(my_addr, udp_port, a.size.max(4096) * 64, a.depth)?;
    let mut wcs = Vec::with_capacity(16);
    loop {
        let cmd = ctl.recv()?;
        let mut it = cmd.split_whitespace();
        match it.next().unwrap_or("") {
            "HELLO" => {
                connect(&r, &cmd, psn(), a.mtu)?;
                post_recvs(&r, 128)?;
                ctl.send(&hello(&r, psn()))?;
                ctl.send(&format!(
                    "DATA {}",
                    data_l.local_addr().map_err(err("addr"))?.port()
                ))?;
            }
            "CPU" => ctl.send(&format!("CPU {}", cpu_secs()))?,
            "STATS" => {
                let (s, k) = r.ctx.stats();
                ctl.send(&format!(
                    "STATS {} {} {} {} {} {} {} {}",
                    s.rx_packets,
                    s.tx_packets,
                    k.recv_syscalls,
                    k.send_syscalls,
                    k.gro_batches,
                    s.retransmits,
                    s.tx_nak_seq,
                    s.drop_out_of_seq
                ))?;
            }
            "LAT" => {
                let n: usize = it.next().and_then(|v| v.parse().ok()).ok_or("LAT n")?;
                ctl.send("GO")?;
                for i in 0..n {
                    wait_recv(&r, &mut wcs)?;
                    send8(&r, i)?;
                }
                ctl.send("LAT_DONE")?;
            }
            "TCPBW" => {
                let (mut s, _) = data_l.accept().map_err(err("accept data"))?;
                let mut buf = vec![0u8; a.size];
                let mut total = 0u64;
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => total += n as u64,
                        Err(e) => return Err(format!("tcp read: {e}")),
                    }
                }
                s.write_all(&total.to_le_bytes())
                    .map_err(err("tcp write"))?;
            }
            "TCPLAT" => {
                let (mut s, _) = data_l.accept().map_err(err("accept data"))?;
                s.set_nodelay(true).map_err(err("nodelay"))?;
                let mut b = [0u8; 8];
                while s.read_exact(&mut b).is_ok() {
                    s.write_all(&b).map_err(err("tcp write"))?;
                }
            }
            "QUIT" => return Ok(()),
            other => return Err(format!("unknown command {other:?}")),
        }
    }
}

// ----------------------------------------------------------------------------
// Idle waiter

/// `--idle`: two devices of this process with a connected RC QP pair exchange
/// one SEND each way (so every timer and thread has run), then the main thread
/// arms its CQ and blocks on the completion channel. Nothing ever arrives: the
/// harness reads this process's CPU time from /proc and kills it.
fn idle(a: &Args) -> Res<()> {
    let port = a.udp_port.unwrap_or(4791);
    let x = rdma_setup_with(a.addr, port, 4096, 16, true)?;
    let y = rdma_setup(Ipv4Addr::from(u32::from(a.addr) + 1), port, 4096, 16)?;
    connect(&x, &hello(&y, psn()), psn(), a.mtu)?;
    connect(&y, &hello(&x, psn()), psn(), a.mtu)?;
    post_recvs(&x, 4)?;
    post_recvs(&y, 4)?;
    let mut wcs = Vec::with_capacity(16);
    send8(&x, 0)?;
    wait_recv(&y, &mut wcs)?;
    send8(&y, 0)?;
    wait_recv(&x, &mut wcs)?;
    x.cq.req_notify(false).map_err(err("req_notify"))?;
    println!("READY");
    std::io::stdout().flush().map_err(err("stdout"))?;
    let ch = x.ch.as_ref().ok_or("no channel")?;
    let cq = ch.wait().map_err(err("wait"))?;
    Err(format!("unexpected completion event on {cq:?}"))
}

// ----------------------------------------------------------------------------
// Client

struct Rep {
    rdma_bw: f64,
    tcp_bw: f64,
    rdma_rtt: Vec<f64>,
    tcp_rtt: Vec<f64>,
    /// CPU share (client, server) during each phase, in % of one CPU.
    rdma_cpu: (f64, f64),
    tcp_cpu: (f64, f64),
    lat_cpu: (f64, f64),
    tcplat_cpu: (f64, f64),
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[((v.len() - 1) as f64 * p).round() as usize]
    }
}

fn remote_cpu(ctl: &mut Ctl) -> Res<f64> {
    let l = ctl.ask("CPU")?;
    l.strip_prefix("CPU ")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("bad CPU reply {l:?}"))
}

fn client(a: &Args) -> Res<()> {
    if a.signal == 0 || a.depth < a.signal {
        return Err("need 1 <= --signal <= --depth".into());
    }
    let udp_port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(err("free UDP port"))?
        .port();
    let ctl_port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(err("free TCP port"))?
        .port();
    let exe = std::env::current_exe().map_err(err("current_exe"))?;
    let mut child = Command::new(exe)
        .args(std::env::args().skip(1))
        .args(["--serve", &ctl_port.to_string()])
        .args(["--udp-port", &udp_port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(err("spawn server"))?;
    let r = run_client(a, &mut child, ctl_port, udp_port);
    if r.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    r
}

fn run_client(a: &Args, child: &mut std::process::Child, ctl_port: u16, udp_port: u16) -> Res<()> {
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("server stdout")?)
        .read_line(&mut line)
        .map_err(err("server start"))?;
    if line.trim() != "READY" {
        return Err(format!("server did not start ({line:?})"));
    }
    let mut ctl =
        Ctl::new(TcpStream::connect(("127.0.0.1", ctl_port)).map_err(err("connect control"))?)?;
    let r = rdma_setup(a.addr, udp_port, a.size.max(4096) * 64, a.depth)?;
    post_recvs(&r, 128)?;
    ctl.send(&hello(&r, psn()))?;
    let peer = ctl.recv()?;
    let (raddr, rkey) = connect(&r, &peer, psn(), a.mtu)?;
    let data_port: u16 = ctl
        .recv()?
        .strip_prefix("DATA ")
        .and_then(|v| v.parse().ok())
        .ok_or("bad DATA line")?;

    let load_before = loadavg();
    let memcpy = memcpy_bw(a.size);
    let mut reps = Vec::new();
    for rep in 0..a.reps {
        // (wall clock, own CPU, server CPU) around each phase.
        let mark = |ctl: &mut Ctl| -> Res<(Instant, f64, f64)> {
            Ok((Instant::now(), cpu_secs(), remote_cpu(ctl)?))
        };
        let c0 = mark(&mut ctl)?;
        let rdma_bw = if a.runs("write") {
            rdma_write_bw(a, &r, raddr, rkey)?
        } else {
            f64::NAN
        };
        let c1 = mark(&mut ctl)?;
        let tcp_bw = if a.runs("tcp-bw") {
            tcp_bw(a, &mut ctl, data_port)?
        } else {
            f64::NAN
        };
        let c2 = mark(&mut ctl)?;
        let rdma_rtt = if a.runs("lat") {
            rdma_lat(a, &r, &mut ctl)?
        } else {
            Vec::new()
        };
        let c3 = mark(&mut ctl)?;
        let tcp_rtt = if a.runs("tcp-lat") {
            tcp_lat(a, &mut ctl, data_port)?
        } else {
            Vec::new()
        };
        let c4 = mark(&mut ctl)?;
        let d = |x: (Instant, f64, f64), y: (Instant, f64, f64)| {
            let wall = (y.0 - x.0).as_secs_f64();
            (100.0 * (y.1 - x.1) / wall, 100.0 * (y.2 - x.2) / wall)
        };
        eprintln!(
            "rep {}: WRITE {:.2} GB/s, TCP {:.2} GB/s, SEND/RECV RTT p50 {:.1} us, TCP RTT p50 {:.1} us",
            rep + 1,
            rdma_bw / 1e9,
            tcp_bw / 1e9,
            median(&mut rdma_rtt.clone()),
            median(&mut tcp_rtt.clone())
        );
        reps.push(Rep {
            rdma_bw,
            tcp_bw,
            rdma_rtt,
            tcp_rtt,
            rdma_cpu: d(c0, c1),
            tcp_cpu: d(c1, c2),
            lat_cpu: d(c2, c3),
            tcplat_cpu: d(c3, c4),
        });
    }
    let stats = ctl.ask("STATS")?;
    ctl.send("QUIT")?;
    report(a, &reps, memcpy, &r, &stats);
    let med = |f: &dyn Fn(&Rep) -> f64| median(&mut reps.iter().map(f).collect::<Vec<_>>());
    println!(
        "RESULT write_Bps={:.0} write_cpu_client={:.1} write_cpu_server={:.1} rtt_p50_us={:.2}",
        med(&|x| x.rdma_bw),
        med(&|x| x.rdma_cpu.0),
        med(&|x| x.rdma_cpu.1),
        med(&|x| median(&mut x.rdma_rtt.clone()))
    );
    // Other work on the machine skews everything here: say how busy it was.
    println!(
        "load average (1/5/15 min) before: {load_before}, after: {}",
        loadavg()
    );
    Ok(())
}

fn rdma_write_bw(a: &Args, r: &Rdma, raddr: u64, rkey: u32) -> Res<f64> {
    let slots = 64;
    let mut wcs = Vec::with_capacity(64);
    let mut posted = 0usize;
    let mut done = 0usize; // WRITEs known complete (a signalled one retires its batch)
    let warmup = Duration::from_millis(200);
    let run = Duration::from_secs_f64(a.secs);
    let t0 = Instant::now();
    let mut start: Option<(Instant, usize)> = None;
    loop {
        let now = Instant::now();
        if start.is_none() && now - t0 >= warmup {
            start = Some((now, done));
        }
        let stop = start.is_some_and(|(s, _)| now - s >= run);
        // Keep `depth` in flight, posting in batches of `signal` whose last
        // WRITE is signalled: its completion retires the whole batch.
        while !stop && posted - done + a.signal <= a.depth {
            for k in 0..a.signal {
                let slot = posted % slots;
                let mut w = SendWr::new(posted as u64, WrOpcode::RdmaWrite);
                w.sgl = [r.mr.sge(slot * a.size, a.size).map_err(err("sge"))?].into();
                w.remote_addr = raddr + (slot * a.size) as u64;
                w.rkey = rkey;
                if k == a.signal - 1 {
                    w.flags = SendFlags::SIGNALED;
                }
                r.qp.post_send(w).map_err(err("post_send"))?;
                posted += 1;
            }
        }
        if stop && done == posted {
            let (s, d0) = start.expect("started");
            return Ok(((done - d0) * a.size) as f64 / s.elapsed().as_secs_f64());
        }
        wcs.clear();
        r.cq.poll(&mut wcs, 64).map_err(err("poll"))?;
        for w in &wcs {
            if w.status != WcStatus::Success {
                return Err(format!("WRITE completion {w:?}"));
            }
            done = w.wr_id as usize + 1;
        }
        if now - t0 > run + warmup + Duration::from_secs(30) {
            return Err("WRITE bandwidth run did not finish".into());
        }
    }
}

fn tcp_bw(a: &Args, ctl: &mut Ctl, port: u16) -> Res<f64> {
    ctl.send("TCPBW")?;
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(err("tcp connect"))?;
    let buf = vec![0x5Au8; a.size];
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(200) {
        s.write_all(&buf).map_err(err("tcp write"))?;
    }
    // The reader's total includes the warm-up bytes, so time from the start of
    // the warm-up; its reply comes once everything arrived.
    let t0 = warm;
    let run = Duration::from_secs_f64(a.secs) + Duration::from_millis(200);
    while t0.elapsed() < run {
        s.write_all(&buf).map_err(err("tcp write"))?;
    }
    s.shutdown(std::net::Shutdown::Write)
        .map_err(err("shutdown"))?;
    let mut b = [0u8; 8];
    s.read_exact(&mut b).map_err(err("tcp read total"))?;
    let total = u64::from_le_bytes(b);
    Ok(total as f64 / t0.elapsed().as_secs_f64())
}

fn rdma_lat(a: &Args, r: &Rdma, ctl: &mut Ctl) -> Res<Vec<f64>> {
    let warm = 1000;
    let n = a.iters + warm;
    if ctl.ask(&format!("LAT {n}"))? != "GO" {
        return Err("server refused LAT".into());
    }
    let mut wcs = Vec::with_capacity(16);
    let mut rtt = Vec::with_capacity(a.iters);
    for i in 0..n {
        let t = Instant::now();
        send8(r, i)?;
        wait_recv(r, &mut wcs)?;
        if i >= warm {
            rtt.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    if ctl.recv()? != "LAT_DONE" {
        return Err("server did not finish LAT".into());
    }
    Ok(rtt)
}

fn tcp_lat(a: &Args, ctl: &mut Ctl, port: u16) -> Res<Vec<f64>> {
    ctl.send("TCPLAT")?;
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(err("tcp connect"))?;
    s.set_nodelay(true).map_err(err("nodelay"))?;
    let warm = 1000;
    let mut rtt = Vec::with_capacity(a.iters);
    let mut b = [0u8; 8];
    for i in 0..a.iters + warm {
        let t = Instant::now();
        s.write_all(&(i as u64).to_le_bytes())
            .map_err(err("tcp write"))?;
        s.read_exact(&mut b).map_err(err("tcp read"))?;
        if i >= warm {
            rtt.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(rtt)
}

/// The first three fields of /proc/loadavg.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// memcpy bandwidth of `size`-byte copies (hot buffers), for reference.
fn memcpy_bw(size: usize) -> f64 {
    let src = vec![1u8; size];
    let mut dst = vec![0u8; size];
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < Duration::from_millis(300) {
        for _ in 0..64 {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        n += 64;
    }
    (n * size as u64) as f64 / t0.elapsed().as_secs_f64()
}

fn report(a: &Args, reps: &[Rep], memcpy: f64, r: &Rdma, server_stats: &str) {
    let med = |f: &dyn Fn(&Rep) -> f64| median(&mut reps.iter().map(f).collect::<Vec<_>>());
    let rdma_bw = med(&|x| x.rdma_bw);
    let tcp_bw = med(&|x| x.tcp_bw);
    let rdma_p50 = med(&|x| median(&mut x.rdma_rtt.clone()));
    let tcp_p50 = med(&|x| median(&mut x.tcp_rtt.clone()));
    let rdma_p99 = med(&|x| pct(&mut x.rdma_rtt.clone(), 0.99));
    let tcp_p99 = med(&|x| pct(&mut x.tcp_rtt.clone(), 0.99));
    let cpu = |f: &dyn Fn(&Rep) -> (f64, f64)| {
        format!("{:.0}% / {:.0}%", med(&|x| f(x).0), med(&|x| f(x).1))
    };
    let kib = a.size / 1024;
    println!();
    println!(
        "softrdma bench: 2 processes on 127.0.0.x, path MTU {}, {} reps (medians); {} CPUs",
        a.mtu,
        a.reps,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| measurement | softrdma | TCP loopback | softrdma / TCP |");
    println!("|---|---|---|---|");
    println!(
        "| {kib} KiB bandwidth (RDMA WRITE, {} outstanding, 1 in {} signalled / TCP stream) | {:.2} GB/s | {:.2} GB/s | {:.2} |",
        a.depth,
        a.signal,
        rdma_bw / 1e9,
        tcp_bw / 1e9,
        rdma_bw / tcp_bw
    );
    println!(
        "| 8 B latency, one-way = RTT/2, p50 (SEND/RECV busy-poll / TCP_NODELAY blocking) | {:.1} us | {:.1} us | {:.2} |",
        rdma_p50 / 2.0,
        tcp_p50 / 2.0,
        rdma_p50 / tcp_p50
    );
    println!(
        "| 8 B round trip p50 / p99 | {:.1} / {:.1} us | {:.1} / {:.1} us | |",
        rdma_p50, rdma_p99, tcp_p50, tcp_p99
    );
    println!(
        "| CPU (% of one CPU), client / server, during bandwidth | {} | {} | |",
        cpu(&|x| x.rdma_cpu),
        cpu(&|x| x.tcp_cpu)
    );
    println!(
        "| CPU (% of one CPU), client / server, during latency | {} | {} | |",
        cpu(&|x| x.lat_cpu),
        cpu(&|x| x.tcplat_cpu)
    );
    println!(
        "| memcpy {kib} KiB, one thread (ceiling) | {:.1} GB/s | | {:.3} (WRITE / memcpy) |",
        memcpy / 1e9,
        rdma_bw / memcpy
    );
    let (s, k) = r.ctx.stats();
    println!();
    println!(
        "client device: {} packets sent in {} send calls ({} GSO batches), {} received in {} receive calls, {} retransmits, {} sends that would block",
        s.tx_packets,
        k.send_syscalls,
        k.gso_batches,
        s.rx_packets,
        k.recv_syscalls,
        s.retransmits,
        k.send_would_block
    );
    println!(
        "client transport: {} timeouts, {} NAKs received ({} RNR), {} duplicates, {} out of sequence dropped",
        s.timeouts, s.rx_nak, s.rx_rnr_nak, s.rx_duplicates, s.drop_out_of_seq
    );
    let f: Vec<&str> = server_stats.split_whitespace().collect();
    if f.len() == 9 {
        println!(
            "server device: {} packets received in {} receive calls ({} GRO batches), {} sent in {} send calls, {} retransmits, {} sequence NAKs sent, {} out of sequence dropped",
            f[1], f[3], f[5], f[2], f[4], f[6], f[7], f[8]
        );
    }
}
