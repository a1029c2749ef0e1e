//! Peer copy of SENDs between two sans-IO endpoints (`qp/peer.rs`,
//! `qp/responder/peer.rs`): the receive WQE gets the bytes in one copy,
//! after the RNR, length and lkey checks; at literal times.

#[allow(dead_code, unused_imports)]
mod peer_harness;
use peer_harness::*;

/// A SEND with immediate: one packet, one copy into the receive WQE.
#[test]
fn send_lands_in_the_receive_wqe() {
    let (mut a, mut b) = pair();
    post_recv(&mut b, B_BASE + 100, 200_000);
    let len = 100_000;
    let mut w = wr(WrOpcode::SendWithImm, &a, A_BASE + 3, len, 0, 0);
    w.imm_data = 0xABCD;
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    assert_eq!((req.len(), req[0][0]), (1, 0xE5));
    lane(&mut b, &a, T0, &req[0]);
    run(&mut a, &mut b, T0);
    assert_eq!(
        b.mem.at(B_BASE + 100, len as usize),
        a.mem.at(A_BASE + 3, len as usize)
    );
    let r = wcs(&mut b);
    assert_eq!(
        (r[0].status, r[0].byte_len, r[0].imm_data),
        (WcStatus::Success, len, 0xABCD)
    );
    assert_eq!(wcs(&mut a)[0].status, WcStatus::Success);
}

/// A SEND longer than the receive WQE: nothing copied, LOC_LEN_ERR at the
/// responder, REM_INV_REQ_ERR at the requester.
#[test]
fn send_too_long_for_the_wqe_copies_nothing() {
    let (mut a, mut b) = pair();
    post_recv(&mut b, B_BASE, 20_000);
    let before = b.mem.buf.clone();
    let w = wr(WrOpcode::Send, &a, A_BASE, 40_000, 0, 0);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    run(&mut a, &mut b, T0);
    assert_eq!(b.copies, 0);
    assert!(b.mem.buf == before);
    assert_eq!(wcs(&mut b)[0].status, WcStatus::LocLenErr);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::RemInvReqErr);
}

/// A SEND that finds no receive posted is RNR-NAKed before anything is
/// copied, and copied once when its retry finds one.
#[test]
fn send_without_a_receive_waits_and_copies_once() {
    let (mut a, mut b) = pair();
    let len = 32 * 1024;
    let w = wr(WrOpcode::Send, &a, A_BASE, len, 0, 0);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    run(&mut a, &mut b, T0);
    b.ep.handle_timeout(T0 + Duration::from_millis(50));
    run(&mut a, &mut b, T0 + Duration::from_millis(50));
    assert_eq!(b.copies, 0);
    assert!(wcs(&mut a).is_empty());
    post_recv(&mut b, B_BASE, len);
    let mut now = T0 + Duration::from_millis(50);
    for _ in 0..20 {
        now = now + Duration::from_millis(10);
        a.ep.handle_timeout(now);
        b.ep.handle_timeout(now);
        run(&mut a, &mut b, now);
    }
    assert_eq!(b.copies, 1);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::Success);
    assert_eq!(wcs(&mut b)[0].byte_len, len);
    assert_eq!(
        b.mem.at(B_BASE, len as usize),
        a.mem.at(A_BASE, len as usize)
    );
}
