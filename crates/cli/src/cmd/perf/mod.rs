//! `softrdma perf`: RDMA WRITE, READ, SEND and atomic bandwidth and latency
//! between two softrdma devices.
//!
//! With no `--server`/`--connect`, the command starts a copy of itself as the
//! server process (`softrdma perf --server --spawned`) and measures between
//! the two processes: two members of this host's device, each with its own
//! engine, lock and progress thread, whose packets go through the same-host
//! path (shared-memory lanes, the default) or, with `SOFTRDMA_SHM=0`, over
//! UDP on loopback.
//! The report says which path ran. The two sides exchange QP
//! numbers, PSNs, GIDs and buffer keys over a small TCP control channel
//! (`proto`), which `--server` / `--connect HOST` use across machines too.

mod plot;
mod proto;
mod rdma;
mod report;

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};

use super::counters::Snapshot;
use super::{CliError, OrErr, fmt_size, parse_size};
use proto::Ctl;
use report::{Report, RunConfig};

/// The TCP port of the control channel unless `--port` says otherwise
/// (perftest's, so firewalls already opened for it work).
pub(crate) const DEFAULT_PORT: u16 = 18515;

/// Long help of `softrdma perf` (clap shows it for `--help`).
pub(crate) const LONG_ABOUT: &str = "\
Measure RDMA WRITE, READ, SEND and atomic bandwidth and latency.

With no arguments it runs the whole benchmark on this machine: it starts a \
second softrdma process as the server (another member of this host's \
device), connects an RC queue pair to it and, for every operation and size \
of a short sweep (8 B to 1 MiB in x8 steps; atomics are 8 bytes), measures \
bandwidth with 128 requests in flight and then latency one request at a \
time. Each process has its own engine and progress thread; their packets \
go through shared memory (the same-host path, the default), or with \
SOFTRDMA_SHM=0 over UDP on loopback, as between two hosts; the first line \
says which path ran. \
Both sides busy-poll their completion queues unless --events is given. A \
progress bar runs on stderr; the table goes to stdout.

Columns: bandwidth in MB/s or GB/s (10^6 / 10^9 bytes per second of \
payload), message rate in millions of operations per second, and latency \
percentiles in microseconds. Latency follows perftest: for WRITE and SEND it \
is one-way, half the round trip of a ping-pong; for READ and atomics it is \
the time from posting to the completion (a full round trip).

Across machines: `softrdma perf --server` on one host, `softrdma perf \
--connect HOST` on the other (set SOFTRDMA_ADDR to each host's address so \
the devices are reachable). The server serves one run and exits.

--json prints one JSON object instead of the table:
  {\"tool\": \"softrdma perf\", \"version\": STRING, \"schema\": 1,
   \"config\": {\"mode\": \"loopback\"|\"client\", \"client\": ADDR, \"server\": ADDR,
              \"polling\": \"busy\"|\"events\", \"mtu\": INT, \"depth\": INT,
              \"duration_s\": NUMBER|null, \"iters\": INT|null,
              \"ops\": [OP...], \"sizes\": [INT...], \"tests\": [\"bw\"|\"lat\"...]},
   \"results\": [{\"op\": \"write\"|\"read\"|\"send\"|\"atomic\", \"size\": INT,
                \"iters\": INT, \"seconds\": NUMBER, \"bw_mbps\": NUMBER|null,
                \"msg_rate\": NUMBER|null, \"lat_iters\": INT,
                \"lat_kind\": \"one-way\"|\"round-trip\",
                \"lat_us\": {\"p50\", \"p99\", \"p999\", \"min\", \"max\", \"mean\": NUMBER}|null}],
   \"stats\": {\"client\": COUNTERS, \"server\": COUNTERS}   (with --stats only)}
bw_mbps is 10^6 bytes per second, msg_rate operations per second; iters and \
seconds describe the bandwidth test, lat_iters the latency samples; a test \
that did not run (--lat, --bw) has 0 iterations and null values. \
crates/cli/README.md documents the schema in full.";

/// Examples at the end of `softrdma perf --help`.
pub(crate) const EXAMPLES: &str = "\
Examples:
  softrdma perf                                   everything, two processes on this host
  softrdma perf --op write --sweep 8..64Kx2       one operation, a finer sweep
  softrdma perf --op send --size 4K --lat -n 100000
  softrdma perf --events                          sleep on completion events, no busy polling
  softrdma perf --json --plot run.svg > run.json  machine-readable results and a plot
  SOFTRDMA_ADDR=10.0.0.1 softrdma perf --server                 (on host A)
  SOFTRDMA_ADDR=10.0.0.2 softrdma perf --connect 10.0.0.1       (on host B)";

/// Operations `perf` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Op {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND into posted receives.
    Send,
    /// 8-byte atomic fetch-and-add.
    Atomic,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::Send => "send",
            Op::Atomic => "atomic",
        }
    }

    fn parse(s: &str) -> Option<Op> {
        [Op::Write, Op::Read, Op::Send, Op::Atomic]
            .into_iter()
            .find(|o| o.name() == s)
    }

    /// Whether latency is reported one-way (ping-pong halves) or as a round trip.
    pub(crate) fn one_way(self) -> bool {
        matches!(self, Op::Write | Op::Send)
    }
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Test {
    Bw,
    Lat,
}

impl Test {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Test::Bw => "bw",
            Test::Lat => "lat",
        }
    }
}

/// How long each test runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Amount {
    /// This many measured operations (after a short warm-up).
    Iters(u64),
    /// Operations for this long (after a short warm-up).
    Time(Duration),
}

/// A size sweep `MIN..MAX[xFACTOR]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sweep {
    min: u64,
    max: u64,
    factor: u64,
}

impl Sweep {
    /// The sizes: MIN, MIN*F, ... up to MAX, and MAX itself.
    fn sizes(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut s = self.min;
        while s < self.max {
            v.push(s);
            s = s.saturating_mul(self.factor);
        }
        v.push(self.max);
        v
    }
}

fn parse_sweep(s: &str) -> Result<Sweep, String> {
    let (range, factor) = match s.split_once(['x', '*']) {
        Some((r, f)) => (
            r,
            f.trim()
                .parse::<u64>()
                .map_err(|_| format!("{f:?} is not a sweep factor"))?,
        ),
        None => (s, 2),
    };
    let (a, b) = range
        .split_once("..")
        .ok_or_else(|| format!("{s:?}: expected MIN..MAX[xFACTOR], e.g. 8..1M or 64..64Kx4"))?;
    let (min, max) = (parse_size(a)?, parse_size(b)?);
    if min == 0 || min > max {
        return Err(format!("{s:?}: need 1 <= MIN <= MAX"));
    }
    if factor < 2 {
        return Err(format!("{s:?}: the factor must be at least 2"));
    }
    if max > MAX_SIZE {
        return Err(format!(
            "{s:?}: sizes above {} are not supported",
            fmt_size(MAX_SIZE)
        ));
    }
    Ok(Sweep { min, max, factor })
}

fn parse_msg_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    if n == 0 || n > MAX_SIZE {
        return Err(format!("{s:?}: sizes are 1 B to {}", fmt_size(MAX_SIZE)));
    }
    Ok(n)
}

fn parse_duration(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = if let Some(ms) = t.strip_suffix("ms") {
        (ms, 1e-3)
    } else {
        (t.strip_suffix('s').unwrap_or(t), 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * scale <= 3600.0 => Ok(v * scale),
        _ => Err(format!(
            "{s:?} is not a duration (examples: 0.5, 2s, 200ms)"
        )),
    }
}

/// Largest message size a test may use.
pub(crate) const MAX_SIZE: u64 = 64 << 20;

/// Arguments of `softrdma perf`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Operations to measure, comma separated [default: write,read,send,atomic].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "OP")]
    op: Vec<Op>,

    /// One message size (B, K, M suffixes) instead of a sweep.
    #[arg(short, long, value_parser = parse_msg_size, value_name = "BYTES", conflicts_with = "sweep")]
    size: Option<u64>,

    /// Sizes MIN..MAX, multiplied by FACTOR (default 2) per step, e.g. 8..1M or 64..64Kx4
    /// [default: 8..1Mx8].
    #[arg(long, value_parser = parse_sweep, value_name = "MIN..MAX[xFACTOR]")]
    sweep: Option<Sweep>,

    /// Measured operations per test (after a warm-up), instead of a duration.
    #[arg(short = 'n', long, value_name = "N", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    iters: Option<u64>,

    /// Seconds per test, after a warm-up (`0.5`, `2s`, `200ms`) [default: 0.25].
    #[arg(short = 'D', long, value_parser = parse_duration, value_name = "SECONDS")]
    duration: Option<f64>,

    /// Latency tests only.
    #[arg(long, conflicts_with = "bw")]
    lat: bool,

    /// Bandwidth tests only.
    #[arg(long)]
    bw: bool,

    /// Wait on a completion channel (sleep until a completion event) instead
    /// of busy-polling the completion queue.
    #[arg(short, long)]
    events: bool,

    /// Requests in flight in bandwidth tests.
    #[arg(long, default_value_t = 128, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    depth: u32,

    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 4096, value_name = "BYTES")]
    mtu: u32,

    /// Be the server: wait for one `--connect` client on the control port,
    /// serve its run and exit.
    #[arg(long, conflicts_with_all = ["connect", "json", "plot"])]
    server: bool,

    /// Run against a `softrdma perf --server` on HOST (name or address).
    #[arg(short, long, value_name = "HOST")]
    connect: Option<String>,

    /// TCP port of the control channel (server: to listen on, 0: any free one).
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,

    /// Server: the address the control channel listens on.
    #[arg(
        long,
        default_value = "0.0.0.0",
        value_name = "ADDR",
        requires = "server"
    )]
    listen: std::net::IpAddr,

    /// Print one JSON object (schema in --help) instead of the table.
    #[arg(long)]
    json: bool,

    /// Also draw bandwidth and latency against message size into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,

    /// Also print both devices' packet counters (retransmits, NAKs, drops).
    #[arg(long)]
    stats: bool,

    /// Internal: the server started by a loopback run (prints `PORT n`,
    /// listens on 127.0.0.1, gives up without a client within 30 s).
    #[arg(long, hide = true, requires = "server")]
    spawned: bool,
}

/// What to measure, in order.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) ops: Vec<Op>,
    pub(crate) sizes: Vec<u64>,
    pub(crate) tests: Vec<Test>,
    pub(crate) amount: Amount,
    /// (op, size, test) in run order.
    pub(crate) steps: Vec<(Op, u64, Test)>,
}

impl Plan {
    fn new(a: &Args) -> Plan {
        let ops = if a.op.is_empty() {
            vec![Op::Write, Op::Read, Op::Send, Op::Atomic]
        } else {
            let mut v: Vec<Op> = Vec::new();
            for &o in &a.op {
                if !v.contains(&o) {
                    v.push(o);
                }
            }
            v
        };
        let sizes = match (&a.size, &a.sweep) {
            (Some(s), _) => vec![*s],
            (None, Some(sw)) => sw.sizes(),
            (None, None) => Sweep {
                min: 8,
                max: 1 << 20,
                factor: 8,
            }
            .sizes(),
        };
        let tests = match (a.bw, a.lat) {
            (true, false) => vec![Test::Bw],
            (false, true) => vec![Test::Lat],
            _ => vec![Test::Bw, Test::Lat],
        };
        let amount = match (a.iters, a.duration) {
            (Some(n), _) => Amount::Iters(n),
            (None, Some(d)) => Amount::Time(Duration::from_secs_f64(d)),
            (None, None) => Amount::Time(Duration::from_millis(250)),
        };
        let mut steps = Vec::new();
        for &op in &ops {
            // Atomics are 8 bytes whatever the sweep.
            let op_sizes: Vec<u64> = if op == Op::Atomic {
                vec![8]
            } else {
                sizes.clone()
            };
            for s in op_sizes {
                for &t in &tests {
                    steps.push((op, s, t));
                }
            }
        }
        Plan {
            ops,
            sizes,
            tests,
            amount,
            steps,
        }
    }

    /// Largest size any step uses.
    fn max_size(&self) -> u64 {
        self.steps.iter().map(|s| s.1).max().unwrap_or(8)
    }
}

pub(crate) fn run(args: &Args) -> Result<ExitCode, CliError> {
    if ![256, 512, 1024, 2048, 4096].contains(&args.mtu) {
        return Err(CliError::new(format!(
            "--mtu {}: the path MTU is 256, 512, 1024, 2048 or 4096",
            args.mtu
        )));
    }
    if args.server {
        return serve(args).map(|()| ExitCode::SUCCESS);
    }
    if let Some(p) = &args.plot {
        // Fail before measuring, not after.
        plot::check_path(p)?;
    }
    let plan = Plan::new(args);
    match &args.connect {
        Some(host) => {
            let addr = resolve(host, args.port)?;
            let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .or_err(format_args!("cannot reach a perf server at {addr}"))?;
            client(args, &plan, stream, "client")
        }
        None => {
            let mut child = spawn_server()?;
            let r = (|| {
                let port = read_port(&mut child)?;
                let stream = TcpStream::connect(("127.0.0.1", port))
                    .or_err("cannot connect to the server process")?;
                client(args, &plan, stream, "loopback")
            })();
            finish_child(child, r)
        }
    }
}

/// HOST or HOST:PORT to one socket address.
fn resolve(host: &str, port: u16) -> Result<SocketAddr, CliError> {
    let with_port = if host.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{host}]:{port}")
    } else if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:{port}")
    };
    with_port
        .to_socket_addrs()
        .or_err(format_args!("cannot resolve {host:?}"))?
        .next()
        .ok_or_else(|| CliError::new(format!("{host:?} has no address")))
}

/// Starts `softrdma perf --server --spawned --port 0` with its own device.
fn spawn_server() -> Result<Child, CliError> {
    let exe = std::env::current_exe().or_err("cannot find the softrdma executable")?;
    Command::new(exe)
        .args(["perf", "--server", "--spawned", "--port", "0"])
        // The device's default address (a member of this host's device);
        // one capture file is enough (this process records both
        // directions), and two processes truncating the same file would
        // corrupt it.
        .env_remove("SOFTRDMA_ADDR")
        .env_remove("SOFTRDMA_PCAP")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .or_err("cannot start the server process")
}

/// Reads the child's `PORT n` line.
fn read_port(child: &mut Child) -> Result<u16, CliError> {
    let out = child
        .stdout
        .take()
        .ok_or_else(|| CliError::new("server process has no stdout"))?;
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .or_err("reading from the server process")?;
    line.trim()
        .strip_prefix("PORT ")
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| CliError::new("the server process did not start"))
}

/// Waits for the spawned server; folds its error message into ours.
fn finish_child(mut child: Child, r: Result<ExitCode, CliError>) -> Result<ExitCode, CliError> {
    if r.is_err() {
        let _ = child.kill();
    }
    let status = child.wait();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let server_msg = err
        .lines()
        .map(|l| l.trim().trim_start_matches("softrdma: error: "))
        .find(|l| !l.is_empty())
        .map(str::to_string);
    match (r, server_msg) {
        (Err(e), Some(m)) => Err(CliError::new(format!("{e} (server: {m})"))),
        (Err(e), None) => Err(e),
        (Ok(code), msg) => match status {
            Ok(s) if s.success() => Ok(code),
            _ => Err(CliError::new(format!(
                "the server process failed: {}",
                msg.unwrap_or_else(|| "no message".into())
            ))),
        },
    }
}

fn client(args: &Args, plan: &Plan, stream: TcpStream, mode: &str) -> Result<ExitCode, CliError> {
    let ctx = crate::cmd::open_device()?;
    let mut ctl = Ctl::new(stream)?;
    let len = rdma::buf_len(plan.max_size());
    let mut side = rdma::Side::new(&ctx, len, args.depth, args.events)?;
    let peer = proto::hello(&mut ctl, &side.hello(args.mtu, args.events))?;
    side.connect(&peer, args.mtu)?;

    let cfg = RunConfig {
        mode: mode.to_string(),
        client: ctx.local_addr().to_string(),
        server: SocketAddr::new(peer.gid.to_ip(), ctx.local_addr().port()).to_string(),
        polling: if args.events { "events" } else { "busy" }.to_string(),
        path: String::new(),
        mtu: args.mtu,
        depth: args.depth,
        duration_s: match plan.amount {
            Amount::Time(d) => Some(d.as_secs_f64()),
            Amount::Iters(_) => None,
        },
        iters: match plan.amount {
            Amount::Iters(n) => Some(n),
            Amount::Time(_) => None,
        },
        ops: plan.ops.clone(),
        sizes: plan.sizes.clone(),
        tests: plan.tests.iter().map(|t| t.name().to_string()).collect(),
    };

    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(plan.steps.len() as u64);
        b.set_style(
            ProgressStyle::with_template(
                "{spinner:.green} {elapsed:>3} [{bar:30.cyan/blue}] {pos}/{len} {msg}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        b.enable_steady_tick(Duration::from_millis(100));
        b
    };
    let mut report = Report::new(cfg);
    for &(op, size, test) in &plan.steps {
        bar.set_message(format!("{} {} {}", op.name(), test.name(), fmt_size(size)));
        let r = side
            .run_test(&mut ctl, op, test, size, plan.amount)
            .map_err(|e| {
                CliError::new(format!(
                    "{} {} {}: {e}",
                    op.name(),
                    test.name(),
                    fmt_size(size)
                ))
            });
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                bar.finish_and_clear();
                return Err(e);
            }
        };
        report.add(op, size, r);
        bar.inc(1);
    }
    bar.finish_and_clear();
    report.set_path(path_taken(&ctx));

    let stats = if args.stats {
        let server = ctl.ask("STATS")?;
        let server = proto::parse_stats(&server)?;
        Some((Snapshot::of(&ctx, "now"), server))
    } else {
        None
    };
    ctl.send("QUIT")?;

    if let Some(p) = &args.plot {
        plot::draw(p, &report)?;
    }
    if args.json {
        super::print_out(&report.to_json(stats.as_ref()))?;
    } else {
        let mut text = report.to_table();
        if let Some(p) = &args.plot {
            text.push_str(&format!("plot: {}\n", p.display()));
        }
        if let Some((c, s)) = &stats {
            text.push('\n');
            text.push_str(&c.render("client"));
            text.push_str(&s.render("server"));
        }
        super::print_out(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Which path the client's packets took, from its counters.
fn path_taken(ctx: &softrdma::verbs::Context) -> String {
    let shm = ctx.shm_counters();
    let tx = shm.iter().find(|(k, _)| *k == "shm_tx").map(|(_, v)| *v);
    match tx {
        Some(n) if n > 0 => "shared memory".into(),
        Some(_) => "UDP".into(),
        None if std::env::var("SOFTRDMA_SHM").is_ok_and(|v| v.trim() == "0") => {
            "UDP (SOFTRDMA_SHM=0)".into()
        }
        None => "UDP (no shared-memory path)".into(),
    }
}

/// The server: one client, one run.
fn serve(args: &Args) -> Result<(), CliError> {
    let r = serve_inner(args);
    r.map_err(|e| CliError::new(format!("perf server: {e}")))
}

fn serve_inner(args: &Args) -> Result<(), CliError> {
    let ctx = crate::cmd::open_device()?;
    let listen_ip = if args.spawned {
        std::net::IpAddr::from([127, 0, 0, 1])
    } else {
        args.listen
    };
    let listener = TcpListener::bind((listen_ip, args.port)).or_err(format_args!(
        "cannot listen on TCP {listen_ip}:{}",
        args.port
    ))?;
    let at = listener.local_addr().or_err("listener address")?;
    let stream = if args.spawned {
        super::print_out(&format!("PORT {}\n", at.port()))?;
        accept_within(&listener, Duration::from_secs(30))?
    } else {
        super::print_out(&format!(
            "softrdma perf server: device {} at {} (GID {}), control channel on {at}; waiting for one client\n",
            ctx.name(),
            ctx.local_addr(),
            softrdma::verbs::Gid::from_ip(ctx.local_addr().ip()),
        ))?;
        if ctx.local_addr().ip().is_loopback() && !listen_ip.is_loopback() {
            super::print_out(
                "note: the device is on loopback, so only clients on this host can reach it; \
                 set SOFTRDMA_ADDR to this host's address for others\n",
            )?;
        }
        listener.accept().or_err("accept")?.0
    };
    let peer = stream.peer_addr().ok();
    let mut ctl = Ctl::new(stream)?;
    let first = ctl.recv(None)?;
    let hello = proto::Hello::parse(&first)?;
    let len = hello.len;
    if len > rdma::buf_len(MAX_SIZE) {
        ctl.send("ERR buffer too large")?;
        return Err(CliError::new("client asked for a buffer too large"));
    }
    let mut side = rdma::Side::new(&ctx, len, 16, hello.events)?;
    ctl.send(&side.hello(hello.mtu, hello.events).to_line())?;
    side.connect(&hello, hello.mtu)?;
    if !args.spawned {
        if let Some(p) = peer {
            super::print_out(&format!("client {p} connected (QP {:#x})\n", hello.qpn))?;
        }
    }
    while let Some(line) = ctl.recv_or_eof()? {
        let mut f = line.split_whitespace();
        match f.next().unwrap_or("") {
            "RUN" => {
                let op = f.next().and_then(Op::parse);
                let test = match f.next() {
                    Some("bw") => Some(Test::Bw),
                    Some("lat") => Some(Test::Lat),
                    _ => None,
                };
                let size = f.next().and_then(|s| s.parse::<u64>().ok());
                let (Some(op), Some(test), Some(size)) = (op, test, size) else {
                    return Err(CliError::new(format!("bad request {line:?}")));
                };
                if size > len {
                    return Err(CliError::new(format!("size {size} beyond the buffer")));
                }
                side.serve_test(&mut ctl, op, test, size)?;
            }
            "STATS" => {
                let s = Snapshot::of(&ctx, "now");
                ctl.send(&proto::stats_line(&s))?;
            }
            "QUIT" => break,
            _ => return Err(CliError::new(format!("bad request {line:?}"))),
        }
    }
    if !args.spawned {
        super::print_out("run finished\n")?;
    }
    Ok(())
}

fn accept_within(l: &TcpListener, t: Duration) -> Result<TcpStream, CliError> {
    l.set_nonblocking(true).or_err("listener")?;
    let t0 = std::time::Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).or_err("control socket")?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if t0.elapsed() > t {
                    return Err(CliError::new("no client connected"));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(CliError::new(format!("accept: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps() {
        let s = parse_sweep("8..1Mx8").unwrap();
        assert_eq!(s.sizes(), vec![8, 64, 512, 4096, 32768, 262144, 1 << 20]);
        assert_eq!(
            parse_sweep("1K..4K").unwrap().sizes(),
            vec![1024, 2048, 4096]
        );
        assert_eq!(parse_sweep("64..64").unwrap().sizes(), vec![64]);
        assert!(parse_sweep("8..4").is_err());
        assert!(parse_sweep("8..64x1").is_err());
        assert!(parse_sweep("8-64").is_err());
        assert!(parse_sweep("8..1G").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0.5"), Ok(0.5));
        assert_eq!(parse_duration("2s"), Ok(2.0));
        assert_eq!(parse_duration("200ms"), Ok(0.2));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
