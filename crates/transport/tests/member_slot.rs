//! QPNs of a host-device member carry its slot in bits 23..16, so the
//! kernel's steering program (softrdma_udp::steer) finds the owning process.

use softrdma_transport::{
    Config, CqHandle, Endpoint, PdHandle, QpCap, QpInitAttr, QpType, VerbsError,
};
use std::net::{IpAddr, Ipv4Addr};

fn endpoint(slot: u8, seed: u64) -> Endpoint {
    let mut c = Config::new(IpAddr::V4(Ipv4Addr::LOCALHOST), seed);
    c.member_slot = slot;
    Endpoint::new(c)
}

/// A small UD QP's attributes.
fn ud(pd: PdHandle, cq: CqHandle) -> QpInitAttr {
    QpInitAttr {
        qp_type: QpType::Ud,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    }
}

fn create(ep: &mut Endpoint) -> Result<u32, VerbsError> {
    let pd = ep.alloc_pd()?;
    let (cq, _) = ep.create_cq(4)?;
    ep.create_qp(&ud(pd, cq)).map(|(q, _)| q)
}

#[test]
fn qpns_carry_the_member_slot() {
    for slot in [1u8, 7, 200, 255] {
        for seed in 0..20 {
            let mut ep = endpoint(slot, seed);
            for _ in 0..5 {
                let q = create(&mut ep).unwrap();
                assert_eq!(q >> 16, u32::from(slot), "qpn {q:#x} of slot {slot}");
                assert!(q != 0xFF_FFFF, "never the multicast QPN");
            }
        }
    }
}

#[test]
fn without_a_slot_qpns_are_never_special() {
    for seed in 0..200 {
        let q = create(&mut endpoint(0, seed)).unwrap();
        assert!((0x10..0xFF_FFFF).contains(&q), "qpn {q:#x}");
    }
}

#[test]
fn a_full_slot_refuses_with_enomem() {
    let mut ep = endpoint(255, 3);
    // Slot 255 holds 0xFF0000..=0xFFFFFE: 65535 QPNs.
    let pd = ep.alloc_pd().unwrap();
    let (cq, _) = ep.create_cq(4).unwrap();
    let init = ud(pd, cq);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..65535 {
        let (q, _) = ep.create_qp(&init).unwrap();
        assert!(seen.insert(q));
    }
    let e = ep.create_qp(&init).unwrap_err();
    assert_eq!(e.errno(), 12, "{e}");
}
