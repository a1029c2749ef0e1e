//! `softrdma::rsocket` (issue 19, outcome 4): `RStream`/`RListener` between
//! two devices of this process, and against Debian's unmodified `rstream`
//! (rdmacm-utils) over `target/compat/librdmacm.so.1`, both ways, each byte
//! checked. rstream's `-T v` checks every byte it receives and sends a
//! running counter (`format_buf`): the Rust side speaks the same.
//!
//! The rstream cases need `cargo xtask compat` and rdmacm-utils; they fail
//! (never skip) without.

mod common;

use common::Proc;
use common::loopback::two_devices_in;
use softrdma::rsocket::{RListener, RStream};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Hang protection for a whole exchange.
const T: Duration = Duration::from_secs(120);

/// rstream's byte pattern: a counter running over every byte one side sends.
#[derive(Default)]
struct Counter(u8);

impl Counter {
    fn take(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                let b = self.0;
                self.0 = self.0.wrapping_add(1);
                b
            })
            .collect()
    }
}

/// rstream's exchange (`-S size -C count`, one iteration) from one side:
/// the client sends first, the server receives first; 16 bytes to
/// synchronise, then `count` transfers of `size` bytes each way.
fn exchange(s: &mut RStream, client: bool, size: usize, count: usize) {
    let (mut out, mut expect) = (Counter::default(), Counter::default());
    let mut send = |s: &mut RStream, n: usize| s.write_all(&out.take(n)).unwrap();
    let mut recv = |s: &mut RStream, n: usize| {
        let mut got = vec![0u8; n];
        s.read_exact(&mut got).unwrap();
        assert!(got == expect.take(n), "received bytes differ");
    };
    if client {
        send(s, 16);
        recv(s, 16);
        (0..count).for_each(|_| send(s, size));
        (0..count).for_each(|_| recv(s, size));
    } else {
        recv(s, 16);
        send(s, 16);
        (0..count).for_each(|_| recv(s, size));
        (0..count).for_each(|_| send(s, size));
    }
}

#[test]
fn rstream_pair_in_one_process_moves_bytes_exactly_and_closes() {
    let (ca, cb) = two_devices_in(63);
    let l = RListener::bind_on(&cb, SocketAddr::new(cb.local_addr().ip(), 7471)).unwrap();
    let at = l.local_addr();
    let server = std::thread::spawn(move || {
        let mut s = l.accept().unwrap();
        exchange(&mut s, false, 65536, 40);
        // The peer's close reads as the end of the stream.
        let mut rest = Vec::new();
        assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);
    });
    let mut c = RStream::connect_on(&ca, at).unwrap();
    assert_eq!(c.peer_addr(), Some(at));
    exchange(&mut c, true, 65536, 40);
    c.shutdown(Shutdown::Both).unwrap();
    assert!(c.write(b"late").is_err(), "a write after shutdown fails");
    drop(c);
    server.join().unwrap();
}

/// `target/compat`, where `cargo xtask compat` puts the C-ABI libraries.
fn compat_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test>-<hash>
    let target = exe
        .ancestors()
        .nth(3)
        .expect("test binaries live in target/<profile>/deps");
    let dir = target.join("compat");
    assert!(
        dir.join("librdmacm.so.1").is_file(),
        "{} is missing: run `cargo xtask compat` first",
        dir.display()
    );
    dir
}

/// Debian's `rstream ROLE -p PORT -S size -C count -T v` on a device of its
/// own at `addr`:`udp`.
fn rstream(addr: IpAddr, udp: u16, args: &[String]) -> Command {
    let bin = PathBuf::from("/usr/bin/rstream");
    assert!(bin.is_file(), "/usr/bin/rstream is missing (rdmacm-utils)");
    let mut cmd = Command::new("/usr/bin/stdbuf");
    cmd.arg("-oL").arg(bin).args(args);
    cmd.env("LD_LIBRARY_PATH", compat_dir())
        .env_remove("LD_PRELOAD")
        .env("SOFTRDMA_HOST", "0")
        .env("SOFTRDMA_ADDR", addr.to_string())
        .env("SOFTRDMA_PORT", udp.to_string());
    cmd
}

fn ip(d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 64, d))
}

fn args(role: &str, addr: IpAddr, port: u16, size: usize, count: usize) -> Vec<String> {
    [
        role,
        &addr.to_string(),
        "-p",
        &port.to_string(),
        "-S",
        &size.to_string(),
        "-C",
        &count.to_string(),
        "-T",
        "v",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn rstream_client_to_debian_rstream_server_byte_exact() {
    let udp = common::free_udp_port();
    let port = common::free_tcp_port();
    let (size, count) = (65536, 50);
    let mut srv = Proc::spawn(
        "rstream server",
        rstream(ip(2), udp, &args("-b", ip(2), port, size, count)),
    );
    srv.wait_for("its header", T, |o| o.contains("name"));
    let ctx = common::loopback::device_at(ip(1), udp);
    let mut c = RStream::connect_on(&ctx, SocketAddr::new(ip(2), port)).unwrap();
    exchange(&mut c, true, size, count);
    let out = srv.finish(T);
    out.assert_success();
    assert!(
        out.stdout.contains("custom    64k     50      1"),
        "rstream's result line:\n{out}"
    );
}

#[test]
fn debian_rstream_client_to_rlistener_byte_exact() {
    let udp = common::free_udp_port();
    let port = common::free_tcp_port();
    let (size, count) = (100_000, 20);
    let ctx = common::loopback::device_at(ip(3), udp);
    let l = RListener::bind_on(&ctx, SocketAddr::new(ip(3), port)).unwrap();
    let server = std::thread::spawn(move || {
        let mut s = l.accept().unwrap();
        exchange(&mut s, false, size, count);
    });
    let cli = Proc::spawn(
        "rstream client",
        rstream(ip(4), udp, &args("-s", ip(3), port, size, count)),
    );
    let out = cli.finish(T);
    out.assert_success();
    assert!(
        out.stdout.contains("custom"),
        "rstream's result line:\n{out}"
    );
    server.join().unwrap();
}

/// `AsyncRStream` (feature `tokio`): an accepted and a connected stream in
/// one runtime move 1 MiB each way byte-exact, concurrently, and the
/// writer's shutdown reads as the end of the stream.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_rstreams_echo_a_mebibyte_and_see_the_end() {
    use softrdma::rsocket::AsyncRStream;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (ca, cb) = two_devices_in(65);
    let l = RListener::bind_on(&cb, SocketAddr::new(cb.local_addr().ip(), 7471)).unwrap();
    let at = l.local_addr();
    let data = Counter::default().take(1 << 20);
    let echo = tokio::spawn(async move {
        let mut s = l.accept_async().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        s.write_all(&got).await.unwrap();
        s.shutdown().await.unwrap();
        got.len()
    });
    let c = AsyncRStream::connect_on(&ca, at).await.unwrap();
    let (mut rd, mut wr) = tokio::io::split(c);
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        wr.write_all(&sent).await.unwrap();
        wr.shutdown().await.unwrap();
        wr
    });
    let mut back = Vec::new();
    tokio::time::timeout(T, rd.read_to_end(&mut back))
        .await
        .expect("the echo within the time limit")
        .unwrap();
    assert_eq!(echo.await.unwrap(), data.len());
    assert!(back == data, "the echo differs");
    drop(writer.await.unwrap());
}
