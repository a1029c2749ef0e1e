//! Helpers of the cm_* tests: two devices in one process on a shared free
//! UDP port, ids resolved towards a listener, and bounded event waits (hang
//! protection only). Its tests declare `mod common;` too.
#![allow(dead_code)]

use crate::common::loopback::{device_at, two_devices_at};
use softrdma::cm::{CmEvent, CmId, Connection, EventChannel, EventKind, PortSpace, QpOptions};
use softrdma::verbs::{Access, Context, Mr, QpType, RecvWr};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Hang protection for every wait.
pub(crate) const T: Duration = Duration::from_secs(10);

/// `127.0.0.last`.
pub(crate) fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// A device at `127.0.0.last:port`.
pub(crate) fn device(last: u8, port: u16) -> Context {
    device_at(ip(last), port)
}

/// Two devices, 127.0.0.a and 127.0.0.b, on one free port.
pub(crate) fn two_devices(a: u8, b: u8) -> (Context, Context) {
    two_devices_at(ip(a), ip(b))
}

/// Port space and QP type of an RC connection.
pub(crate) const TCP_RC: (PortSpace, QpType) = (PortSpace::Tcp, QpType::Rc);
/// Port space and QP type of a UC connection.
pub(crate) const TCP_UC: (PortSpace, QpType) = (PortSpace::Tcp, QpType::Uc);
/// Port space and QP type of UD (SIDR, multicast).
pub(crate) const UDP_UD: (PortSpace, QpType) = (PortSpace::Udp, QpType::Ud);

/// An event channel on each device, and the address where the second
/// one's listener goes: port `port` of `cb`.
pub(crate) fn channels(
    ca: &Context,
    cb: &Context,
    port: u16,
) -> (EventChannel, EventChannel, SocketAddr) {
    let (cha, chb) = (
        EventChannel::new(ca).unwrap(),
        EventChannel::new(cb).unwrap(),
    );
    (cha, chb, SocketAddr::new(cb.local_addr().ip(), port))
}

/// An id of `ps` and `qp_type` on `ch`, bound to `at` and listening with
/// room for `backlog` requests.
pub(crate) fn listener(
    ch: &EventChannel,
    (ps, qp_type): (PortSpace, QpType),
    at: SocketAddr,
    backlog: u32,
) -> CmId {
    let l = CmId::new(ch, ps, qp_type).unwrap();
    l.bind_addr(at).unwrap();
    l.listen(backlog).unwrap();
    l
}

/// A synchronous id of `ps` and `qp_type` on `ctx` (waits bounded by [`T`])
/// with `dst` resolved and a default QP: ready to connect.
pub(crate) fn resolved_sync(
    ctx: &Context,
    (ps, qp_type): (PortSpace, QpType),
    dst: SocketAddr,
) -> CmId {
    let id = CmId::new_sync(ctx, ps, qp_type).unwrap();
    id.set_sync_timeout(Some(T));
    id.resolve_addr(None, dst, Duration::from_secs(2)).unwrap();
    id.resolve_route(Duration::from_secs(2)).unwrap();
    id.create_qp(None, &QpOptions::default()).unwrap();
    id
}

/// A region of `len` bytes on `conn`'s PD, with a receive (`wr_id` 1) for
/// all of it posted.
pub(crate) fn recv_buffer(conn: &Connection, len: usize) -> Mr {
    let mr = conn.pd().alloc_mr(len, Access::LOCAL_WRITE).unwrap();
    conn.qp()
        .post_recv(RecvWr {
            wr_id: 1,
            sgl: [mr.sge(0, len).unwrap()].into(),
        })
        .unwrap();
    mr
}

/// An id of `ps` and `qp_type` on `ch` with `dst` resolved (address and
/// route, each event checked).
pub(crate) fn resolved(
    ch: &EventChannel,
    (ps, qp_type): (PortSpace, QpType),
    dst: SocketAddr,
) -> CmId {
    let id = CmId::new(ch, ps, qp_type).unwrap();
    id.resolve_addr(None, dst, Duration::from_secs(2)).unwrap();
    assert!(expect(ch, EventKind::AddrResolved).is_for(&id));
    id.resolve_route(Duration::from_secs(2)).unwrap();
    assert!(expect(ch, EventKind::RouteResolved).is_for(&id));
    id
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
