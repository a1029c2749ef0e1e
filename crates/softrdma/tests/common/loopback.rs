//! Devices of this process on loopback addresses, talking over real UDP:
//! the devices, connected QP pairs, and the ICRC of packets a test makes by
//! hand and sends from a socket of its own.

use softrdma::verbs::{Access, ConnectParams, Context, Cq, EngineConfig, Pd, Qp, QpInit, QpType};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};

/// Every right a region can have.
pub(crate) const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

/// A device at `ip:port`.
pub(crate) fn device_at(ip: IpAddr, port: u16) -> Context {
    Context::open_with(EngineConfig::bound_to(SocketAddr::new(ip, port))).unwrap()
}

/// Two devices, at `a` and at `b`, on one free UDP port.
pub(crate) fn two_devices_at(a: IpAddr, b: IpAddr) -> (Context, Context) {
    let port = super::free_udp_port();
    (device_at(a, port), device_at(b, port))
}

/// Two devices at `127.0.<subnet>.<10 + k>` and `.<11 + k>` on one free UDP
/// port, `k` different for each call of a test binary (its tests run at
/// once).
pub(crate) fn two_devices_in(subnet: u8) -> (Context, Context) {
    static NEXT: AtomicU8 = AtomicU8::new(0);
    let k = NEXT.fetch_add(2, Ordering::SeqCst) % 200;
    let at = |d: u8| IpAddr::V4(Ipv4Addr::new(127, 0, subnet, d));
    two_devices_at(at(10 + k), at(11 + k))
}

/// Connects `a` and `b`, RC or UC QPs in INIT each on the device given with
/// it, to each other: `a` sends from PSN `psns.0`, `b` from `psns.1`.
pub(crate) fn connect_pair(a: (&Context, &Qp), b: (&Context, &Qp), psns: (u32, u32)) {
    let (ga, gb) = (a.0.query_gid(1, 0).unwrap(), b.0.query_gid(1, 0).unwrap());
    a.1.connect(&ConnectParams::new(b.1.qpn(), gb, psns.1, psns.0))
        .unwrap();
    b.1.connect(&ConnectParams::new(a.1.qpn(), ga, psns.0, psns.1))
        .unwrap();
}

/// A UD QP on `pd` completing to `cq`, ready to send and receive with
/// Q_Key `qkey`.
pub(crate) fn ud_qp(pd: &Pd, cq: &Cq, qkey: u32) -> Qp {
    let qp = pd.create_qp(&QpInit::new(QpType::Ud, cq, cq)).unwrap();
    qp.to_init(Access::EMPTY, qkey).unwrap();
    qp.activate_ud(0).unwrap();
    qp
}
