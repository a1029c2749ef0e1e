//! `softrdma ping`: an rping-like connectivity check through the connection
//! manager. The server accepts RC connections (`rdma_listen`/`rdma_accept`
//! through `softrdma::cm`) and echoes every message; the client connects
//! (`rdma_resolve_addr`, `rdma_resolve_route`, `rdma_connect`), sends
//! `--count` messages one at a time and prints each round trip.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use softrdma::cm::{Acceptor, ConnOptions, Connection, Connector};
use softrdma::verbs::{
    Access, Context, Cq, EngineConfig, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus, WrOpcode,
};

use super::{CliError, OrErr, print_out};

/// rping's default port.
pub(crate) const DEFAULT_PORT: u16 = 7174;
/// Largest message a client may ask the server to echo.
const MAX_PING: u32 = 16 << 20;

/// Arguments of `softrdma ping`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The server to ping (name or address); omit with --server.
    #[arg(
        value_name = "HOST",
        required_unless_present = "server",
        conflicts_with = "server"
    )]
    host: Option<String>,

    /// Be the server: accept connections and echo every message.
    #[arg(long)]
    server: bool,

    /// Server: the address to listen on; it becomes this process's device
    /// address too [default: the device's address, SOFTRDMA_ADDR or
    /// 127.0.0.1].
    #[arg(short, long, value_name = "ADDR", requires = "server")]
    addr: Option<IpAddr>,

    /// Server: exit after the first client disconnects.
    #[arg(long, requires = "server")]
    once: bool,

    /// The connection manager port (rdma_cm's port space, not UDP).
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,

    /// Messages to send.
    #[arg(short, long, default_value_t = 10, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    count: u64,

    /// Bytes per message.
    #[arg(short, long, default_value_t = 64, value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(1..=MAX_PING as i64))]
    size: u32,

    /// Seconds between messages.
    #[arg(short, long, default_value_t = 0.1, value_name = "SECONDS")]
    interval: f64,

    /// Seconds to wait for each reply.
    #[arg(short = 'W', long, default_value_t = 5.0, value_name = "SECONDS")]
    timeout: f64,
}

pub(crate) fn run(args: &Args) -> Result<ExitCode, CliError> {
    if !(0.0..=3600.0).contains(&args.interval) || !(0.001..=3600.0).contains(&args.timeout) {
        return Err(CliError::new(
            "--interval and --timeout must be 0..3600 seconds",
        ));
    }
    if args.server {
        serve(args).map_err(|e| CliError::new(format!("ping server: {e}")))?;
        return Ok(ExitCode::SUCCESS);
    }
    let host = args.host.as_deref().unwrap_or_default();
    client(args, host)
}

fn device(addr: Option<IpAddr>) -> Result<Context, CliError> {
    match addr {
        None => crate::cmd::open_device(),
        Some(ip) => {
            let mut cfg = EngineConfig::from_env().or_err("softrdma configuration")?;
            let port = cfg.addr.port;
            cfg.addr = softrdma_udp::AddrConfig::exact(SocketAddr::new(ip, port));
            Context::open_with(cfg).or_err(format_args!("cannot open a softrdma device at {ip}"))
        }
    }
}

/// Waits for one completion: sleeps on the connection's completion channel.
fn wait_event(conn: &Connection) -> Result<Wc, CliError> {
    let cq = conn.cq();
    let ch = conn
        .comp_channel()
        .ok_or_else(|| CliError::new("connection without a completion channel"))?;
    loop {
        if let Some(w) = cq.poll_one().or_err("poll_cq")? {
            return Ok(w);
        }
        cq.req_notify(false).or_err("req_notify_cq")?;
        if let Some(w) = cq.poll_one().or_err("poll_cq")? {
            return Ok(w);
        }
        ch.wait().or_err("waiting for a completion")?;
    }
}

fn serve(args: &Args) -> Result<(), CliError> {
    let ctx = device(args.addr)?;
    let ip = args.addr.unwrap_or(ctx.local_addr().ip());
    let opts = ConnOptions {
        comp_channel: true,
        timeout: Some(Duration::from_secs(10)),
        ..ConnOptions::default()
    };
    let acceptor = Acceptor::bind_with(&ctx, SocketAddr::new(ip, args.port), opts)
        .or_err(format_args!("cannot listen on {ip} port {}", args.port))?;
    print_out(&format!(
        "softrdma ping server: listening on {} (device {} at UDP {})\n",
        acceptor.local_addr(),
        ctx.name(),
        ctx.local_addr()
    ))?;
    loop {
        let req = acceptor.incoming().or_err("waiting for a connection")?;
        let size = req
            .private_data()
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0);
        if size == 0 || size > MAX_PING {
            let _ = req.reject(b"bad size");
            continue;
        }
        let peer = req
            .peer_addr()
            .map_or_else(|| "?".to_string(), |a| a.to_string());
        let conn = req.accept(b"softrdma ping").or_err("accept")?;
        print_out(&format!("{peer}: connected, {size}-byte messages\n"))?;
        let n = echo(&conn, size).or_err(format_args!("{peer}"));
        match n {
            Ok(n) => print_out(&format!("{peer}: disconnected after {n} messages\n"))?,
            Err(e) => print_out(&format!("{e}\n"))?,
        }
        drop(conn);
        if args.once {
            break;
        }
    }
    // The engine appends the counters at exit when SOFTRDMA_STATS asks.
    drop(ctx);
    Ok(())
}

/// Echoes messages until the peer disconnects; returns how many.
fn echo(conn: &Connection, size: u32) -> Result<u64, CliError> {
    let mr = conn
        .pd()
        .alloc_mr(size as usize, Access::LOCAL_WRITE)
        .or_err("alloc_mr")?;
    let recv = || -> Result<(), CliError> {
        conn.qp()
            .post_recv(RecvWr {
                wr_id: 1,
                sgl: [mr.sge(0, size as usize).or_err("sge")?].into(),
            })
            .or_err("post_recv")
    };
    recv()?;
    let mut n = 0;
    loop {
        let w = wait_event(conn)?;
        match (w.status, w.opcode) {
            (WcStatus::Success, WcOpcode::Recv) => {
                let mut s = SendWr::new(2, WrOpcode::Send);
                s.flags = SendFlags::SIGNALED;
                s.sgl = [mr.sge(0, w.byte_len as usize).or_err("sge")?].into();
                conn.qp().post_send(s).or_err("post_send")?;
            }
            (WcStatus::Success, _) => {
                n += 1;
                recv()?;
            }
            // The peer disconnected: our QP went to ERR, the receive flushed.
            (WcStatus::WrFlushErr, _) => return Ok(n),
            (st, op) => return Err(CliError::new(format!("{op:?} failed: {st:?}"))),
        }
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, CliError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .or_err(format_args!("cannot resolve {host:?}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| CliError::new(format!("{host:?} has no address")))
}

fn client(args: &Args, host: &str) -> Result<ExitCode, CliError> {
    let dst = resolve(host, args.port)?;
    let ctx = crate::cmd::open_device()?;
    let conn = Connector::on(&ctx)
        .connect(dst, &args.size.to_le_bytes())
        .map_err(|e| connect_error(dst, &e))?;
    let size = args.size as usize;
    let mr = conn
        .pd()
        .alloc_mr(2 * size, Access::LOCAL_WRITE)
        .or_err("alloc_mr")?;
    let mut out = format!(
        "PING {host} ({}) through the softrdma CM: {} bytes, local {}, QP {:#x} -> {:#x}\n",
        dst.ip(),
        size,
        ctx.local_addr().ip(),
        conn.qp().qpn(),
        conn.peer_param().qp_num
    );
    print_out(&std::mem::take(&mut out))?;
    let timeout = Duration::from_secs_f64(args.timeout);
    let mut rtts = Vec::with_capacity(args.count as usize);
    for seq in 1..=args.count {
        let pattern: Vec<u8> = (0..size).map(|i| (seq as usize + i) as u8).collect();
        mr.write(0, &pattern).or_err("buffer")?;
        conn.qp()
            .post_recv(RecvWr {
                wr_id: seq,
                sgl: [mr.sge(size, size).or_err("sge")?].into(),
            })
            .or_err("post_recv")?;
        let mut s = SendWr::new(seq, WrOpcode::Send);
        s.flags = SendFlags::SIGNALED;
        s.sgl = [mr.sge(0, size).or_err("sge")?].into();
        let t0 = Instant::now();
        conn.qp().post_send(s).or_err("post_send")?;
        wait_both(conn.cq(), timeout).map_err(|e| CliError::new(format!("seq {seq}: {e}")))?;
        let rtt = t0.elapsed().as_secs_f64() * 1e6;
        if mr.to_vec(size, size).or_err("buffer")? != pattern {
            return Err(CliError::new(format!(
                "seq {seq}: the echo differs from the message"
            )));
        }
        rtts.push(rtt);
        print_out(&format!(
            "{size} bytes from {}: seq={seq} rtt={rtt:.1} µs\n",
            dst.ip()
        ))?;
        if seq < args.count && args.interval > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(args.interval));
        }
    }
    conn.disconnect().or_err("disconnect")?;
    let mut sorted = rtts.clone();
    sorted.sort_by(f64::total_cmp);
    let mean = rtts.iter().sum::<f64>() / rtts.len() as f64;
    print_out(&format!(
        "--- {host} softrdma ping ---\n{} sent, {} received, 0% loss; rtt min/avg/p50/max = {:.1}/{:.1}/{:.1}/{:.1} µs\n",
        args.count,
        rtts.len(),
        sorted[0],
        mean,
        sorted[(sorted.len() - 1) / 2],
        sorted[sorted.len() - 1]
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// Says what a failed connection attempt means for a ping.
fn connect_error(dst: SocketAddr, e: &softrdma::cm::Error) -> CliError {
    use softrdma::cm::Error as E;
    let why = match e {
        E::AddrError { .. } => format!("no softrdma device answers at {} ({e})", dst.ip()),
        E::Rejected { reason: 8, .. } => format!(
            "nothing listens on port {} at {} (rejected: invalid service ID)",
            dst.port(),
            dst.ip()
        ),
        E::Rejected { .. } => format!("{dst} refused the connection ({e})"),
        E::Unreachable { .. } | E::TimedOut(_) => format!("{dst} did not answer ({e})"),
        other => format!("cannot connect to {dst}: {other}"),
    };
    CliError::new(why)
}

/// Busy-polls until the send and the reply's receive completed.
fn wait_both(cq: &Cq, timeout: Duration) -> Result<(), CliError> {
    let wcs = cq
        .poll_blocking(2, timeout)
        .map_err(|_| CliError::new(format!("no reply within {} s", timeout.as_secs_f64())))?;
    for w in wcs {
        if w.status != WcStatus::Success {
            return Err(CliError::new(format!(
                "{:?} failed: {:?}",
                w.opcode, w.status
            )));
        }
    }
    Ok(())
}
