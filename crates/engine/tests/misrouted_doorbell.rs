//! A same-host doorbell (the datagram that wakes a member sleeping with
//! packets in its inbox) is steered by the receiver's member slot like its
//! packets. One that reaches another member means the group's table is
//! stale (a member died and the kernel moved sockets): that member must
//! reconcile, as for any misrouted packet. It used to take the doorbell
//! silently, and with the lanes on, doorbells and CM MADs are all a pair
//! sends over UDP: the stale table stayed, and every later doorbell to the
//! sleeping receiver went astray too.

use softrdma_engine::{Engine, EngineConfig};
use softrdma_host::Registry;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// A free UDP port on 127.0.0.1: the engine's device (and its registry,
/// `port-<n>`) is this test's alone.
fn free_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

/// The engine's doorbell for member slot `slot`: a BTH with opcode 0xC0
/// (manufacturer-specific) whose destination QPN is `slot << 16`, then the
/// magic `SRDMADBL`.
fn doorbell(slot: u8) -> [u8; 20] {
    let mut d = [0u8; 20];
    d[0] = 0xC0;
    d[2..4].copy_from_slice(&0xFFFFu16.to_be_bytes());
    d[4..8].copy_from_slice(&(u32::from(slot) << 16).to_be_bytes());
    d[12..20].copy_from_slice(b"SRDMADBL");
    d
}

fn epoch(reg: &Registry, ip: IpAddr) -> u32 {
    let g = reg.lock().unwrap();
    reg.read_group(&g, ip).unwrap().epoch
}

#[test]
fn a_doorbell_for_another_member_starts_a_reconciliation() {
    let port = free_port();
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut cfg = EngineConfig::bound_to(SocketAddr::new(ip, port));
    cfg.busy_poll = false;
    let engine = Engine::start(cfg).unwrap();
    let reg = Registry::open_for_port(port).unwrap();
    let me = reg.members().unwrap();
    assert_eq!(me.len(), 1, "this test's device has one member: {me:?}");
    let other = me[0].slot % 255 + 1;
    // Let a reconciliation from the start (if any) pass its gap.
    std::thread::sleep(Duration::from_millis(300));
    let before = epoch(&reg, ip);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    // A doorbell for our own slot is just a wake-up.
    s.send_to(&doorbell(me[0].slot), (ip, port)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        epoch(&reg, ip),
        before,
        "no reconciliation for our own doorbell"
    );
    // One for a slot that is not ours reached the wrong member.
    s.send_to(&doorbell(other), (ip, port)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while epoch(&reg, ip) == before {
        assert!(
            Instant::now() < deadline,
            "a misrouted doorbell did not start a reconciliation (epoch stays {before})"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(engine);
}
