//! Helpers of the cm_* tests: two devices in one process on a shared free
//! UDP port, and bounded event waits (hang protection only).
#![allow(dead_code)]

use softrdma::cm::{CmEvent, EventChannel, EventKind};
use softrdma::verbs::{Context, EngineConfig};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Hang protection for every wait.
pub(crate) const T: Duration = Duration::from_secs(10);

/// A UDP port that was free a moment ago on 127.0.0.1 (likely free on 127.0.0.x too).
pub(crate) fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `127.0.0.last`.
pub(crate) fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// A device at `127.0.0.last:port`.
pub(crate) fn device(last: u8, port: u16) -> Context {
    Context::open_with(EngineConfig::bound_to(SocketAddr::new(ip(last), port))).unwrap()
}

/// Two devices, 127.0.0.a and 127.0.0.b, on one free port.
pub(crate) fn two_devices(a: u8, b: u8) -> (Context, Context) {
    let port = free_port();
    (device(a, port), device(b, port))
}

/// The next event, failing the test if none comes in time.
pub(crate) fn next(ch: &EventChannel) -> CmEvent {
    ch.get_event_timeout(T)
        .unwrap()
        .unwrap_or_else(|| panic!("no CM event within {T:?}"))
}

/// The next event, which must be of `kind`.
pub(crate) fn expect(ch: &EventChannel, kind: EventKind) -> CmEvent {
    let e = next(ch);
    assert_eq!(e.kind(), kind, "unexpected event {e:?}");
    e
}

/// 16 bytes describing a buffer: address, rkey, length.
pub(crate) fn buf_desc(addr: u64, rkey: u32, len: u32) -> Vec<u8> {
    let mut v = addr.to_be_bytes().to_vec();
    v.extend_from_slice(&rkey.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
    v
}

/// The inverse of [`buf_desc`].
pub(crate) fn parse_desc(b: &[u8]) -> (u64, u32, u32) {
    (
        u64::from_be_bytes(b[0..8].try_into().unwrap()),
        u32::from_be_bytes(b[8..12].try_into().unwrap()),
        u32::from_be_bytes(b[12..16].try_into().unwrap()),
    )
}

/// Deterministic test bytes.
pub(crate) fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2654435761) >> 24) as u8)
        .collect()
}
