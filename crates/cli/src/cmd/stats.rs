//! `softrdma stats`: packet, retransmit, NAK, RNR and drop counters of
//! softrdma devices.
//!
//! softrdma has no daemon: each process runs its own device, so counters
//! live in the process. Three ways to see them:
//!
//! - `softrdma stats -- CMD ARGS...` runs CMD with `SOFTRDMA_STATS=FILE`; each
//!   device CMD's processes open appends its counters to FILE when the
//!   process finishes (format in [`super::counters`]); they are printed when
//!   CMD exits. softrdma's own commands (`perf`, `ping`) write them today.
//! - `softrdma stats --file FILE` prints such a file.
//! - `softrdma stats --self-test` runs a short exchange between two devices
//!   in this process (WRITE, READ, SEND with an RNR wait, atomics, a stray
//!   datagram, a bad rkey) and prints both devices' counters.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use softrdma::verbs::{
    Access, ConnectParams, Context, EngineConfig, QpInit, QpType, RecvWr, SendFlags, SendWr,
    WcStatus, WrOpcode,
};

use super::counters::{ENV_STATS, Snapshot};
use super::{CliError, OrErr, print_out};

/// Arguments of `softrdma stats`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["file", "self_test", "cmd"])))]
pub(crate) struct Args {
    /// Print the counters as a JSON array of {pid, device, addr, when, counters{...}}.
    #[arg(long)]
    json: bool,

    /// Print a counters file written earlier (by a process run with SOFTRDMA_STATS=FILE).
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,

    /// Run a short exchange between two devices in this process and print their counters.
    #[arg(long)]
    self_test: bool,

    /// Keep the counters file of `-- CMD` here (default: a temporary file, removed).
    #[arg(long, value_name = "FILE", requires = "cmd")]
    keep: Option<PathBuf>,

    /// The command to run, after `--`.
    #[arg(last = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

pub(crate) fn run(args: &Args) -> Result<ExitCode, CliError> {
    if let Some(f) = &args.file {
        let snaps = read_file(f)?;
        if snaps.is_empty() {
            return Err(CliError::new(format!("{}: no counters in it", f.display())));
        }
        show(args, &snaps, None)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.self_test {
        let snaps = self_test()?;
        show(
            args,
            &snaps,
            Some(&["device A (requester)", "device B (responder)"]),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    run_cmd(args)
}

fn read_file(f: &Path) -> Result<Vec<Snapshot>, CliError> {
    let text = std::fs::read_to_string(f).or_err(format_args!("{}", f.display()))?;
    Snapshot::parse_dump(&text).map_err(|e| CliError::new(format!("{}: {e}", f.display())))
}

fn show(args: &Args, snaps: &[Snapshot], titles: Option<&[&str]>) -> Result<(), CliError> {
    if args.json {
        let v: Vec<serde_json::Value> = snaps.iter().map(Snapshot::to_json).collect();
        let mut s = serde_json::to_string_pretty(&v).expect("serializable");
        s.push('\n');
        return print_out(&s);
    }
    let mut s = String::new();
    for (i, snap) in snaps.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        let title = titles.and_then(|t| t.get(i)).copied().unwrap_or("");
        s.push_str(&snap.render(title));
    }
    print_out(&s)
}

fn run_cmd(args: &Args) -> Result<ExitCode, CliError> {
    let (prog, rest) = args
        .cmd
        .split_first()
        .ok_or_else(|| CliError::new("no command given after --"))?;
    let (path, temporary) = match &args.keep {
        Some(p) => (
            std::path::absolute(p).or_err(format_args!("{}", p.display()))?,
            false,
        ),
        None => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!("softrdma-stats-{}-{nanos}.txt", std::process::id());
            (std::env::temp_dir().join(name), true)
        }
    };
    let _ = std::fs::remove_file(&path);
    let status = Command::new(prog)
        .args(rest)
        .env(ENV_STATS, &path)
        .status()
        .or_err(format_args!("cannot run {}", prog.to_string_lossy()));
    let snaps = match &status {
        Ok(_) if path.exists() => read_file(&path),
        _ => Ok(Vec::new()),
    };
    if temporary {
        let _ = std::fs::remove_file(&path);
    }
    let status = status?;
    let snaps = snaps?;
    let name = prog.to_string_lossy();
    if snaps.is_empty() {
        return Err(CliError::new(format!(
            "{name} wrote no counters: SOFTRDMA_STATS is written by softrdma's own commands \
             (perf, ping); other programs' devices do not write it yet"
        )));
    }
    show(args, &snaps, None)?;
    match status.code() {
        Some(0) => Ok(ExitCode::SUCCESS),
        Some(c) => Err(CliError::new(format!("{name} exited with status {c}"))),
        None => Err(CliError::new(format!("{name} was killed by a signal"))),
    }
}

const T: Duration = Duration::from_secs(5);

/// Two devices in this process on a free UDP port of 127.0.0.1 and
/// 127.0.0.2; returns their counters after a short exchange.
fn self_test() -> Result<Vec<Snapshot>, CliError> {
    let port = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .or_err("finding a free UDP port")?
        .port();
    let at = |d| {
        EngineConfig::bound_to(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, d)),
            port,
        ))
    };
    let a = Context::open_with(at(1)).or_err("opening device A")?;
    let b = Context::open_with(at(2)).or_err("opening device B")?;
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let (pa, pb) = (
        a.alloc_pd().or_err("alloc_pd")?,
        b.alloc_pd().or_err("alloc_pd")?,
    );
    let ma = pa.alloc_mr(1 << 16, all).or_err("alloc_mr")?;
    let mb = pb.alloc_mr(1 << 16, all).or_err("alloc_mr")?;
    let (ca, cb) = (
        a.create_cq(256, None).or_err("create_cq")?,
        b.create_cq(256, None).or_err("create_cq")?,
    );
    let qa = pa
        .create_qp(&QpInit::new(QpType::Rc, &ca, &ca))
        .or_err("create_qp")?;
    let qb = pb
        .create_qp(&QpInit::new(QpType::Rc, &cb, &cb))
        .or_err("create_qp")?;
    let remote = all.without(Access::LOCAL_WRITE);
    qa.to_init(remote, 0).or_err("to_init")?;
    qb.to_init(remote, 0).or_err("to_init")?;
    let (ga, gb) = (
        a.query_gid(1, 0).or_err("query_gid")?,
        b.query_gid(1, 0).or_err("query_gid")?,
    );
    qa.connect(&ConnectParams::new(qb.qpn(), gb, 100, 200))
        .or_err("connect")?;
    qb.connect(&ConnectParams::new(qa.qpn(), ga, 200, 100))
        .or_err("connect")?;

    let req = |id: u64, op: WrOpcode, len: usize, rkey: u32| -> Result<SendWr, CliError> {
        let mut w = SendWr::new(id, op);
        w.flags = SendFlags::SIGNALED;
        w.sgl = [ma.sge(0, len).or_err("sge")?].into();
        w.remote_addr = mb.addr();
        w.rkey = rkey;
        w.compare_add = 1;
        Ok(w)
    };
    let expect_ok = |n: usize| -> Result<(), CliError> {
        for w in ca.poll_blocking(n, T).or_err("waiting for completions")? {
            if w.status != WcStatus::Success {
                return Err(CliError::new(format!(
                    "{:?} failed: {:?}",
                    w.opcode, w.status
                )));
            }
        }
        Ok(())
    };
    // 64 WRITEs and 16 READs of 4 KiB, 16 fetch-and-adds.
    for i in 0..64 {
        qa.post_send(req(i, WrOpcode::RdmaWrite, 4096, mb.rkey())?)
            .or_err("post_send")?;
    }
    expect_ok(64)?;
    for i in 0..16 {
        qa.post_send(req(100 + i, WrOpcode::RdmaRead, 4096, mb.rkey())?)
            .or_err("post_send")?;
        qa.post_send(req(200 + i, WrOpcode::AtomicFetchAndAdd, 8, mb.rkey())?)
            .or_err("post_send")?;
    }
    expect_ok(32)?;
    // A SEND before B posted a receive: B answers RNR NAKs until it does.
    // The receive is posted once B has sent one (a fixed pause lost the race
    // to a loaded machine's scheduler now and then).
    qa.post_send(req(300, WrOpcode::Send, 64, 0)?)
        .or_err("post_send")?;
    let deadline = std::time::Instant::now() + T;
    while total(&Snapshot::of(&b, "now"), |n| n == "tx_rnr_nak") == 0 {
        if std::time::Instant::now() > deadline {
            return Err(CliError::new(
                "B sent no RNR NAK for a SEND without a receive",
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    qb.post_recv(RecvWr {
        wr_id: 1,
        sgl: [mb.sge(0, 4096).or_err("sge")?].into(),
    })
    .or_err("post_recv")?;
    expect_ok(1)?;
    cb.poll_blocking(1, T).or_err("waiting for the receive")?;
    // A datagram that is no RoCEv2 packet: B drops it and counts why.
    let dropped = |s: &Snapshot| total(s, |n| n.starts_with("drop_"));
    let before = dropped(&Snapshot::of(&b, "now"));
    let stray = UdpSocket::bind("127.0.0.3:0").or_err("stray socket")?;
    stray
        .send_to(&[0x64; 40], b.local_addr())
        .or_err("sending a stray datagram")?;
    let t0 = std::time::Instant::now();
    while dropped(&Snapshot::of(&b, "now")) == before && t0.elapsed() < T {
        std::thread::sleep(Duration::from_millis(2));
    }
    // A WRITE with a wrong rkey: B refuses it (access violation) and A's
    // QP ends in the error state.
    qa.post_send(req(400, WrOpcode::RdmaWrite, 64, mb.rkey() ^ 0x80)?)
        .or_err("post_send")?;
    let w = ca
        .poll_blocking(1, T)
        .or_err("waiting for the refused WRITE")?;
    if w[0].status != WcStatus::RemAccessErr {
        return Err(CliError::new(format!(
            "a WRITE with a wrong rkey completed with {:?}",
            w[0].status
        )));
    }
    Ok(vec![Snapshot::of(&a, "now"), Snapshot::of(&b, "now")])
}

/// The sum of the counters of `s` whose names `pick` takes.
fn total(s: &Snapshot, pick: impl Fn(&str) -> bool) -> u64 {
    s.counters
        .iter()
        .filter(|(n, _)| pick(n))
        .map(|(_, v)| v)
        .sum()
}
