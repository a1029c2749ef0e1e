//! ACKs carried by requests on a same-host lane (`qp/lane_ack.rs`,
//! `Config::lane_acks`): a reply carries the ACK of the request it answers,
//! only a lone plain ACK rides, and an ACK is never lost with a request
//! that could not be built.

#[allow(dead_code, unused_imports)]
mod peer_harness;
use peer_harness::*;

/// Whether a lane datagram is a request carrying an ACK.
fn carries_ack(pkt: &[u8]) -> bool {
    pkt[8] & softrdma_wire::LANE_ACK != 0
}

fn lane_acks() -> (Node, Node) {
    pair_with(|c| c.lane_acks = true)
}

/// An 8-byte SEND (a packet, not a peer copy).
fn send8(n: &Node, at: u64) -> SendWr {
    wr(WrOpcode::Send, n, at, 8, 0, 0)
}

/// A sends B an 8-byte SEND from `at` over the lane; returns its packet.
fn send_to_b(a: &mut Node, b: &mut Node, at: u64) -> Vec<u8> {
    a.ep.post_send(T0, a.qpn, send8(a, at)).unwrap();
    let mut req = drain(a, T0);
    assert_eq!(req.len(), 1);
    lane(b, a, T0, &req[0]);
    req.remove(0)
}

/// A ping-pong: B's reply carries the ACK of A's SEND; A completes its
/// SEND from it and takes the reply; no ACK travels alone.
#[test]
fn a_reply_carries_the_ack_of_the_request_it_answers() {
    let (mut a, mut b) = lane_acks();
    post_recv(&mut a, A_BASE + 4096, 64);
    post_recv(&mut b, B_BASE + 4096, 64);
    let req = send_to_b(&mut a, &mut b, A_BASE);
    assert!(!carries_ack(&req), "A owes B nothing yet");
    assert_eq!(wcs(&mut b).len(), 1, "B got the SEND");
    // B replies before anything sends its ACK (the engine holds it).
    b.ep.post_send(T0, b.qpn, send8(&b, B_BASE)).unwrap();
    let reply = drain(&mut b, T0);
    assert_eq!(reply.len(), 1, "the ACK rode the reply: {reply:?}");
    assert!(carries_ack(&reply[0]));
    lane(&mut a, &b, T0, &reply[0]);
    let got = wcs(&mut a);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(a.mem.at(A_BASE + 4096, 8), b.mem.at(B_BASE, 8));
    // A's next SEND carries the ACK of B's reply the same way.
    post_recv(&mut b, B_BASE + 8192, 64);
    let next = send_to_b(&mut a, &mut b, A_BASE + 8);
    assert!(carries_ack(&next));
    let got = wcs(&mut b);
    assert_eq!(
        got.len(),
        2,
        "B's reply completed, A's SEND arrived: {got:?}"
    );
    assert!(got.iter().all(|w| w.status == WcStatus::Success));
}

/// Off (the default, and the wire): the ACK is a packet of its own.
#[test]
fn without_lane_acks_the_ack_is_its_own_packet() {
    let (mut a, mut b) = pair();
    post_recv(&mut b, B_BASE + 4096, 64);
    send_to_b(&mut a, &mut b, A_BASE);
    b.ep.post_send(T0, b.qpn, send8(&b, B_BASE)).unwrap();
    let out = drain(&mut b, T0);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|p| !carries_ack(p)));
}

/// An RNR NAK keeps its own packet (only a plain ACK rides).
#[test]
fn an_rnr_nak_never_rides() {
    let (mut a, mut b) = lane_acks();
    send_to_b(&mut a, &mut b, A_BASE); // no receive posted at B
    b.ep.post_send(T0, b.qpn, send8(&b, B_BASE)).unwrap();
    let out = drain(&mut b, T0);
    assert_eq!(out.len(), 2, "the RNR NAK and B's SEND: {out:?}");
    assert!(out.iter().all(|p| !carries_ack(p)));
    assert!(out.iter().any(|p| p[0] == 0x11), "an ACK/NAK packet");
}

/// A request that cannot be built (a bad lkey) takes no ACK with it: the
/// ACK still goes, alone, and A's SEND completes.
#[test]
fn an_ack_is_not_lost_with_a_request_that_failed() {
    let (mut a, mut b) = lane_acks();
    post_recv(&mut b, B_BASE + 4096, 64);
    send_to_b(&mut a, &mut b, A_BASE);
    wcs(&mut b);
    let mut bad = send8(&b, B_BASE);
    bad.sgl[0].lkey ^= 0x55;
    b.ep.post_send(T0, b.qpn, bad).unwrap();
    let out = drain(&mut b, T0);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0][0], 0x11, "the ACK, alone");
    lane(&mut a, &b, T0, &out[0]);
    let got = wcs(&mut a);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(wcs(&mut b)[0].status, WcStatus::LocProtErr);
}
