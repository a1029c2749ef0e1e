//! Helpers of rdmalib's tests: two devices in one process, a connected
//! pair, deterministic data.
#![allow(dead_code)]

use rdmalib::softrdma::verbs::{Context, EngineConfig};
use rdmalib::{Client, Config, Connection, Mode, Server};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// Hang protection of every wait in the tests (never reached when they pass).
pub(crate) const T: Duration = Duration::from_secs(20);

/// A UDP port that was free a moment ago.
pub(crate) fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Two devices, `127.73.<n>.1` and `127.73.<n>.2`, on one free port
/// (`n` differs per call, so tests of one binary never share addresses).
pub(crate) fn two_devices() -> (Context, Context) {
    static NEXT: AtomicU8 = AtomicU8::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let port = free_port();
    let dev = |h: u8| {
        let ip = IpAddr::V4(Ipv4Addr::new(127, 73, n, h));
        Context::open_with(EngineConfig::bound_to(SocketAddr::new(ip, port))).unwrap()
    };
    (dev(1), dev(2))
}

/// A configuration with the hang protection.
pub(crate) fn config(mode: Mode) -> Config {
    Config {
        timeout: Some(T),
        ..Config::with_mode(mode)
    }
}

/// A connected (server side, client side) pair on two fresh devices.
pub(crate) fn pair(server: Config, client: Config) -> (Connection, Connection) {
    let (cs, cc) = two_devices();
    let mut srv = Server::bind_on(&cs, SocketAddr::new(cs.local_addr().ip(), 0), server).unwrap();
    let at = srv.local_addr();
    let t = std::thread::spawn(move || srv.accept().unwrap());
    let c = Client::on(&cc, at, client).unwrap().connect().unwrap();
    (t.join().unwrap(), c)
}

/// Deterministic bytes.
pub(crate) fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}
