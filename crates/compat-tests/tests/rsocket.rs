//! Issue 19: rsockets. Debian's unmodified rsocket programs (rdmacm-utils)
//! and `librspreload.so` (librdmacm1) over softrdma's librdmacm, two
//! processes on this host, each with its own loopback `SOFTRDMA_ADDR`
//! (127.52.x.y), each run with a timeout:
//!
//! - `rstream` with its default test list (latency and bandwidth, 64 B to
//!   1 MiB), and with `-T b`, `-T n`, `-T a`, `-T a -T n` (blocking,
//!   non-blocking, async through rpoll, both), each with `-T v` (rstream
//!   checks every byte), and `-T r` (rdma_getaddrinfo); over IPv6 (`::1`);
//! - `riostream` (riomap/riowrite: the peer writes straight into a mapped
//!   buffer, the receiver spins on its last byte) with `-T v`, `-T a -T v`
//!   and `-T n -T v` at 1 MiB, and 64-byte round trips; not its default
//!   list: both sides spin on memory there, which on a 2-vCPU machine
//!   starves the progress threads that move the bytes (~2 ms a round trip,
//!   100k of them);
//! - `rcopy` of a 20 MB random file, compared byte for byte;
//! - `udpong` (datagram rsockets over UD, address discovery over UDP):
//!   1000 datagrams of 1000 bytes each non-blocking, blocking and async
//!   (`-T n`, `-T b`, `-T a`), and 100 echoed 64-byte datagrams (`-T e`);
//!   not its default list: 10000 echoes, each retransmitted after 1 ms, and
//!   every late echo adds a datagram that stays in flight for good, so on a
//!   loaded 2-vCPU machine the run slows to a crawl (rdma-core on a NIC
//!   never takes 1 ms);
//! - `LD_PRELOAD=librspreload.so` under a Python TCP echo pair (`py/rs_echo.py`)
//!   moving 20 MB, byte-exact, with both sockets confirmed to be rsockets;
//! - the same with a Python UDP echo pair (`py/rs_udp_echo.py`): 200
//!   datagrams of 512 bytes echoed byte-exact over datagram rsockets;
//! - the C API through ctypes (`py/rsocket_api.py`): EBADF, EINVAL,
//!   ENOTCONN, ECONNREFUSED, EPIPE, EAGAIN, rpoll, half-close, and 8 MiB
//!   written then closed at once all arriving; IPv4 and IPv6.
//!
//! Needs `cargo xtask compat`, rdmacm-utils, librdmacm1 and python3; fails
//! (never skips) without.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use softrdma_compat_tests::pair::PairOutput;
use softrdma_compat_tests::rdmacm::{Host, strings};
use softrdma_compat_tests::*;

/// `127.52.x.y`: this file's loopback addresses.
const NET: u8 = 52;
const LABEL: &str = "rsocket";
const TIMEOUT: Duration = Duration::from_secs(120);
/// Debian's librspreload (package librdmacm1).
const PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";

fn host() -> Host {
    require_compat_dir();
    Host::local(unique_loopback_addr(NET))
}

fn py(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("py").join(name)
}

fn assert_ok(what: &str, out: &PairOutput) {
    assert!(out.both_succeeded(), "{what} failed:\n{out}");
}

/// rstream's result lines (after the header), from both sides.
fn result_lines(out: &PairOutput) -> Vec<String> {
    let mut v = Vec::new();
    for r in [Some(&out.server), out.client.as_ref()]
        .into_iter()
        .flatten()
    {
        v.extend(r.stdout.lines().skip(1).map(str::to_owned));
    }
    v
}

/// `rstream -b ADDR` / `rstream -s ADDR` with the same `opts` on both sides.
fn rstream(opts: &[&str], server: Option<&str>) -> PairOutput {
    pair("rstream", opts, server, TIMEOUT)
}

/// `PROGRAM -b ADDR` / `PROGRAM -s ADDR` (rstream, riostream) with `opts`.
/// The server runs under `stdbuf -oL`: it prints its header once it listens,
/// and the client starts then (a busy machine can take seconds to get there).
fn pair(program: &str, opts: &[&str], server: Option<&str>, timeout: Duration) -> PairOutput {
    let (s, c) = (host(), host());
    let port = unique_tcp_port().to_string();
    let saddr = server.map_or(s.addr.to_string(), str::to_owned);
    let mut sargs = strings(&["-b", &saddr, "-p", &port]);
    let mut cargs = strings(&["-s", &saddr, "-p", &port]);
    sargs.extend(strings(opts));
    cargs.extend(strings(opts));
    let label = format!("{LABEL}-{program}");
    run_after_ready(
        &mut s.line_buffered(program, &label, &sargs),
        |o| o.contains("name"),
        &mut c.command(program, &label, &cargs),
        true,
        timeout,
    )
}

/// Starts `server`, waits until its stdout satisfies `ready` (it listens),
/// then runs `client`; everything is killed at `timeout`. A server that
/// serves until killed (`exits` false) is killed when the client is done.
fn run_after_ready(
    server: &mut Command,
    ready: impl Fn(&str) -> bool,
    client: &mut Command,
    exits: bool,
    timeout: Duration,
) -> PairOutput {
    let deadline = Instant::now() + timeout;
    let mut s = spawn(server);
    if !s.wait_for_stdout(deadline, ready) {
        return PairOutput {
            server: s.finish(Instant::now()),
            client: None,
            note: Some("the server never said it listens".to_owned()),
        };
    }
    let c = spawn(client).finish(deadline);
    let until = if !exits {
        Instant::now()
    } else if c.code() == Some(0) {
        deadline
    } else {
        (Instant::now() + Duration::from_secs(5)).min(deadline)
    };
    PairOutput {
        server: s.finish(until),
        client: Some(c),
        note: None,
    }
}

/// A custom rstream run: `xfers` transfers of 1 MiB each way, both sides
/// print one result line.
fn rstream_custom(modes: &[&str]) {
    let mut opts = vec!["-S", "1048576", "-C", "50"];
    for m in modes {
        opts.extend(["-T", m]);
    }
    let out = rstream(&opts, None);
    assert_ok(&format!("rstream {}", opts.join(" ")), &out);
    let lines = result_lines(&out);
    assert_eq!(lines.len(), 2, "one result line per side:\n{out}");
    assert!(
        lines.iter().all(|l| l.starts_with("custom    1m      50")),
        "{out}"
    );
}

#[test]
fn rstream_default_tests() {
    // 100k 64-byte round trips and 3.5 GB in all: minutes on a loaded VM.
    let out = pair("rstream", &[], None, Duration::from_secs(300));
    assert_ok("rstream (default test list)", &out);
    let client = out
        .client
        .as_ref()
        .map(|c| c.stdout.clone())
        .unwrap_or_default();
    for name in [
        "64_lat", "4k_lat", "64k_lat", "1m_lat", "64_bw", "4k_bw", "64k_bw", "1m_bw",
    ] {
        assert!(
            client.lines().any(|l| l.starts_with(name)),
            "no {name} line:\n{out}"
        );
    }
}

#[test]
fn rstream_blocking_verify() {
    rstream_custom(&["b", "v"]);
}

#[test]
fn rstream_nonblocking_verify() {
    rstream_custom(&["n", "v"]);
}

#[test]
fn rstream_async_verify() {
    rstream_custom(&["a", "v"]);
}

#[test]
fn rstream_async_nonblocking_verify() {
    rstream_custom(&["a", "n", "v"]);
}

#[test]
fn rstream_rdma_getaddrinfo() {
    rstream_custom(&["r", "v"]);
}

#[test]
fn rstream_ipv6() {
    let out = rstream(&["-S", "65536", "-C", "100", "-T", "v"], Some("::1"));
    assert_ok("rstream over ::1", &out);
    assert_eq!(result_lines(&out).len(), 2, "{out}");
}

/// riostream with `opts` (same on both sides): one result line each.
fn riostream(opts: &[&str], want: &str) {
    let out = pair("riostream", opts, None, TIMEOUT);
    assert_ok(&format!("riostream {}", opts.join(" ")), &out);
    let lines = result_lines(&out);
    assert_eq!(lines.len(), 2, "one result line per side:\n{out}");
    assert!(lines.iter().all(|l| l.starts_with(want)), "{out}");
}

#[test]
fn riostream_verify() {
    riostream(
        &["-S", "1048576", "-C", "20", "-I", "5", "-T", "v"],
        "custom    1m      20      5",
    );
}

#[test]
fn riostream_async_verify() {
    riostream(
        &["-S", "1048576", "-C", "20", "-I", "5", "-T", "a", "-T", "v"],
        "custom    1m      20      5",
    );
}

#[test]
fn riostream_nonblocking_verify() {
    riostream(
        &["-S", "1048576", "-C", "20", "-I", "5", "-T", "n", "-T", "v"],
        "custom    1m      20      5",
    );
}

#[test]
fn riostream_64_byte_round_trips() {
    riostream(
        &["-S", "64", "-C", "1", "-I", "200", "-T", "v"],
        "custom    64      1       200",
    );
}

#[test]
fn rcopy_20mb_byte_exact() {
    let (s, c) = (host(), host());
    let dir = std::env::temp_dir().join(format!("softrdma-rcopy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, dst) = (dir.join("src.bin"), dir.join("dst.bin"));
    let mut data = vec![0u8; 20_000_000];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(&src, &data).unwrap();
    let _ = std::fs::remove_file(&dst);
    let port = unique_tcp_port().to_string();
    let label = format!("{LABEL}-rcopy");
    let target = format!("{}:{}", s.addr, dst.display());
    let cargs = strings(&[src.to_str().unwrap(), &target, "-p", &port]);
    let out = run_after_ready(
        &mut s.command("rcopy", &label, &strings(&["-p", &port])),
        |o| o.contains("waiting for connection"),
        &mut c.command("rcopy", &label, &cargs),
        false,
        TIMEOUT,
    );
    let client = out.client.as_ref().expect("client ran");
    assert_eq!(client.code(), Some(0), "rcopy client failed:\n{out}");
    assert!(client.stdout.contains("20000000 bytes in"), "{out}");
    let got = std::fs::read(&dst).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        got == data,
        "the copy differs ({} of 20000000 bytes):\n{out}",
        got.len()
    );
}

/// The Python echo pair under `LD_PRELOAD=librspreload.so` (`addr`: where
/// the server listens).
fn preload_echo(addr: Option<&str>) {
    assert!(
        Path::new(PRELOAD).is_file(),
        "{PRELOAD} missing (package librdmacm1)"
    );
    let (s, c) = (host(), host());
    let listen = addr.map_or(s.addr.to_string(), str::to_owned);
    let port = unique_tcp_port().to_string();
    let script = py("rs_echo.py").display().to_string();
    let label = format!("{LABEL}-preload");
    let mut server = s.command(
        "python3",
        &label,
        &strings(&[&script, "server", &listen, &port]),
    );
    server.env("LD_PRELOAD", PRELOAD);
    let mut client = c.command(
        "python3",
        &label,
        &strings(&[&script, "client", &listen, &port, "20000000"]),
    );
    client.env("LD_PRELOAD", PRELOAD);
    let out = run_after_ready(
        &mut server,
        |o| o.contains("listening"),
        &mut client,
        true,
        TIMEOUT,
    );
    assert_ok("python echo under librspreload", &out);
    assert!(out.server.stdout.contains("listening rsocket"), "{out}");
    assert!(out.server.stdout.contains("served 20000000"), "{out}");
    let client = out.client.as_ref().map(|c| c.stdout.as_str()).unwrap_or("");
    assert!(client.contains("echo 20000000 ok rsocket"), "{out}");
}

#[test]
fn preload_python_echo_20mb() {
    preload_echo(None);
}

#[test]
fn preload_python_echo_ipv6() {
    preload_echo(Some("::1"));
}

/// `py/rsocket_api.py ADDR PORT` in one process.
fn api(addr: Option<&str>) {
    let h = host();
    let a = addr.map_or(h.addr.to_string(), str::to_owned);
    let port = unique_tcp_port().to_string();
    let script = py("rsocket_api.py").display().to_string();
    let out = run_with_timeout(
        &mut h.command("python3", LABEL, &strings(&[&script, &a, &port])),
        TIMEOUT,
    );
    assert!(
        out.code() == Some(0) && out.stdout.contains("all ok"),
        "rsocket_api.py failed:\n{out}"
    );
}

#[test]
fn api_errors_half_close_and_close_ipv4() {
    api(None);
}

#[test]
fn api_errors_half_close_and_close_ipv6() {
    api(Some("::1"));
}

/// Whether process `pid`'s network namespace has a UDP socket bound to
/// `addr:port` (`/proc/<pid>/net/udp`).
fn udp_bound(pid: u32, addr: std::net::Ipv4Addr, port: u16) -> bool {
    let want = format!("{:08X}:{port:04X}", u32::from_le_bytes(addr.octets()));
    std::fs::read_to_string(format!("/proc/{pid}/net/udp")).is_ok_and(|t| {
        t.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
    })
}

/// `udpong -b ADDR` (serves until killed) and `udpong -s ADDR` with `opts`;
/// the client's last line must start with `want`.
fn udpong(opts: &[&str], want: &str) {
    let (s, c) = (host(), host());
    let port = unique_tcp_port();
    let ps = port.to_string();
    let label = format!("{LABEL}-udpong");
    let mut server = spawn(&mut s.command(
        "udpong",
        &label,
        &strings(&["-b", &s.addr.to_string(), "-p", &ps]),
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !udp_bound(server.pid(), s.addr, port) {
        assert!(
            server.poll().is_none() && Instant::now() < deadline,
            "udpong server did not bind {}:{port}:\n{}",
            s.addr,
            server.finish(Instant::now())
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut cargs = strings(&["-s", &s.addr.to_string(), "-p", &ps]);
    cargs.extend(strings(opts));
    let client = run_with_timeout(
        &mut c.command("udpong", &label, &cargs),
        Duration::from_secs(60),
    );
    let server = server.finish(Instant::now());
    let last = client.stdout.lines().last().unwrap_or("").to_owned();
    assert!(
        client.code() == Some(0) && last.starts_with(want),
        "udpong {} failed:\n===== client =====\n{client}\n===== server =====\n{server}",
        opts.join(" ")
    );
}

#[test]
fn udpong_1000_datagrams_nonblocking() {
    udpong(&["-S", "1000", "-C", "1000", "-T", "n"], "custom    1000");
}

#[test]
fn udpong_1000_datagrams_blocking() {
    udpong(&["-S", "1000", "-C", "1000", "-T", "b"], "custom    1000");
}

#[test]
fn udpong_1000_datagrams_async() {
    udpong(&["-S", "1000", "-C", "1000", "-T", "a"], "custom    1000");
}

#[test]
fn udpong_100_echoes() {
    udpong(
        &["-S", "64", "-C", "100", "-T", "e"],
        "custom    64      200",
    );
}

#[test]
fn preload_python_udp_echo() {
    assert!(
        Path::new(PRELOAD).is_file(),
        "{PRELOAD} missing (package librdmacm1)"
    );
    let (s, c) = (host(), host());
    let port = unique_tcp_port();
    let ps = port.to_string();
    let addr = s.addr.to_string();
    let script = py("rs_udp_echo.py").display().to_string();
    let label = format!("{LABEL}-preload-udp");
    let mut cmd = s.command(
        "python3",
        &label,
        &strings(&[&script, "server", &addr, &ps]),
    );
    cmd.env("LD_PRELOAD", PRELOAD);
    let mut server = spawn(&mut cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    assert!(
        server.wait_for_stdout(deadline, |o| o.contains("bound")),
        "the UDP echo server did not start:\n{}",
        server.finish(Instant::now())
    );
    let mut cmd = c.command(
        "python3",
        &label,
        &strings(&[&script, "client", &addr, &ps, "200"]),
    );
    cmd.env("LD_PRELOAD", PRELOAD);
    let client = run_with_timeout(&mut cmd, TIMEOUT);
    let server = server.finish(Instant::now() + Duration::from_secs(10));
    let ok = client.code() == Some(0)
        && client.stdout.contains("echoed 200 of 200 rsocket")
        && server.stdout.contains("bound rsocket");
    assert!(
        ok,
        "python UDP echo under librspreload failed:\n===== client =====\n{client}\n===== server =====\n{server}"
    );
}

/// Keepalive (`SO_KEEPALIVE`, `TCP_KEEPIDLE` 1 s) finds a peer that stopped
/// answering (`py/rs_keepalive.py`: the server stops itself with SIGSTOP
/// after accepting 3 connections): `rpoll` reports the connection with
/// keepalive broken (`POLLERR`), `SO_ERROR` is `ETIMEDOUT`, a reader blocked
/// in `rrecv` on another such connection wakes with `ETIMEDOUT`, and the
/// connection without keepalive stays quiet. Both processes have a device of
/// their own (`SOFTRDMA_HOST=0`), so the stopped one is no member of the
/// host device that the tests running beside it share.
#[test]
fn keepalive_detects_a_hung_peer() {
    let (s, c) = (host(), host());
    let port = unique_tcp_port().to_string();
    let addr = s.addr.to_string();
    let script = py("rs_keepalive.py").display().to_string();
    let label = format!("{LABEL}-keepalive");
    let mut server = s.command(
        "python3",
        &label,
        &strings(&[&script, "server", &addr, &port]),
    );
    server.env("SOFTRDMA_HOST", "0");
    let mut client = c.command(
        "python3",
        &label,
        &strings(&[&script, "client", &addr, &port]),
    );
    client.env("SOFTRDMA_HOST", "0");
    let out = run_after_ready(
        &mut server,
        |o| o.contains("listening"),
        &mut client,
        false,
        Duration::from_secs(60),
    );
    let client = out.client.as_ref().map(|c| c.stdout.as_str()).unwrap_or("");
    assert!(
        out.client.as_ref().and_then(|c| c.code()) == Some(0) && client.contains("all ok"),
        "keepalive test failed:\n{out}"
    );
    assert!(client.contains("ok rpoll: A broken"), "{out}");
    assert!(client.contains("woke with ETIMEDOUT"), "{out}");
    assert!(out.server.stdout.contains("stopping"), "{out}");
}

/// librspreload's fork mode (`RDMAV_FORK_SAFE=1`, rdma-core's own scheme in
/// `preload.c`): a forking Python echo server (`py/rs_fork_echo.py`) whose
/// sockets start as kernel TCP sockets; each connection moves to an
/// rsocket at its first read or write, in the forked child (the child
/// listens on the same port as an rsocket, tells the client over TCP, and
/// accepts). 3 connections of 2 MB each, byte-exact, both ends rsockets.
#[test]
fn preload_fork_mode_echo() {
    assert!(
        Path::new(PRELOAD).is_file(),
        "{PRELOAD} missing (package librdmacm1)"
    );
    let (s, c) = (host(), host());
    let addr = s.addr.to_string();
    let port = unique_tcp_port().to_string();
    let script = py("rs_fork_echo.py").display().to_string();
    let label = format!("{LABEL}-fork");
    let mut server = s.command(
        "python3",
        &label,
        &strings(&[&script, "server", &addr, &port, "3"]),
    );
    server
        .env("LD_PRELOAD", PRELOAD)
        .env("RDMAV_FORK_SAFE", "1");
    let mut client = c.command(
        "python3",
        &label,
        &strings(&[&script, "client", &addr, &port, "3", "2000000"]),
    );
    client
        .env("LD_PRELOAD", PRELOAD)
        .env("RDMAV_FORK_SAFE", "1");
    let out = run_after_ready(
        &mut server,
        |o| o.contains("listening"),
        &mut client,
        true,
        TIMEOUT,
    );
    assert_ok("forking echo under librspreload's fork mode", &out);
    assert!(
        out.server.stdout.contains("listening kernel socket"),
        "{out}"
    );
    assert!(out.server.stdout.contains("all served"), "{out}");
    let client = out.client.as_ref().map(|c| c.stdout.as_str()).unwrap_or("");
    for k in 0..3 {
        assert!(
            out.server
                .stdout
                .contains(&format!("child {k} served 2000000 rsocket")),
            "{out}"
        );
        assert!(client.contains(&format!("echo {k} ok rsocket")), "{out}");
    }
}
