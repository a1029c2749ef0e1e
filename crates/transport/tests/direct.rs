//! Direct records (`qp/direct.rs`, `Config::direct`): a lone small SEND or
//! WRITE, or a READ below peer copy's size, posted to an idle RC QP whose
//! peer is on a lane leaves at the post as a compact record, and is from
//! then on the message the packet would have been: its PSN, its ACK
//! (carried or not), retransmission as a packet, RNR, duplicates and the
//! responder's checks are the transport's.

#[allow(dead_code, unused_imports)]
mod peer_harness;
use peer_harness::*;
use softrdma_wire::direct::is_direct;

fn direct_pair() -> (Node, Node) {
    pair_with(|c| {
        c.lane_acks = true;
        c.direct = true;
        c.express = true;
    })
}

fn send8(n: &Node, at: u64) -> SendWr {
    wr(WrOpcode::Send, n, at, 8, 0, 0)
}

/// An 8-byte SEND from `at`, posted as the engine posts a lone WR.
fn send_direct(n: &mut Node, at: u64) -> Option<Vec<u8>> {
    let w = send8(n, at);
    post_direct(n, T0, w)
}

/// Two receives at B, for two 8-byte SENDs.
fn two_receives(b: &mut Node) {
    post_recv(b, B_BASE + 4096, 64);
    post_recv(b, B_BASE + 8192, 64);
}

/// Past the retransmission timeout `connect` sets (4.1 ms).
fn after_timeout() -> Instant {
    T0 + Duration::from_millis(10)
}

#[test]
fn a_ping_pong_goes_as_direct_records_that_carry_the_acks() {
    let (mut a, mut b) = direct_pair();
    post_recv(&mut a, A_BASE + 4096, 64);
    post_recv(&mut b, B_BASE + 4096, 64);
    let rec = send_direct(&mut a, A_BASE).expect("a direct record");
    assert!(is_direct(&rec));
    assert!(drain(&mut a, T0).is_empty(), "the record is the message");
    lane(&mut b, &a, T0, &rec);
    let got = wcs(&mut b);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].status, got[0].byte_len), (WcStatus::Success, 8));
    assert_eq!(b.mem.at(B_BASE + 4096, 8), a.mem.at(A_BASE, 8));
    assert_eq!(b.ep.stats().rx_express, 1, "the responder's express path");
    assert_eq!(b.ep.stats().rx_in_place, 1, "read in place");
    assert!(b.ep.wants_transmit(), "B owes A's SEND its ACK");
    // B's reply carries the ACK of A's SEND: nothing else leaves B, and
    // B says so (the engine skips a flush that would find nothing).
    let reply = send_direct(&mut b, B_BASE).expect("a direct record");
    assert!(!b.ep.wants_transmit(), "the reply was all B had to send");
    assert!(drain(&mut b, T0).is_empty(), "the ACK rode the reply");
    lane(&mut a, &b, T0, &reply);
    let got = wcs(&mut a);
    assert_eq!(got.len(), 2, "A's SEND completed, B's arrived: {got:?}");
    assert!(got.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(a.mem.at(A_BASE + 4096, 8), b.mem.at(B_BASE, 8));
    assert_eq!((a.ep.stats().tx_direct, a.ep.stats().rx_direct), (1, 1));
    assert_eq!((b.ep.stats().tx_direct, b.ep.stats().rx_direct), (1, 1));
    // The capture's view: each record is the RoCE packets it stands for.
    let pkts = softrdma_wire::lane_packets(&reply);
    assert_eq!(pkts.len(), 2, "B's SEND, then the ACK it carried");
    assert!(pkts.iter().all(|p| softrdma_wire::Packet::parse(p).is_ok()));
}

#[test]
fn a_direct_write_lands_only_past_the_responders_checks() {
    let (mut a, mut b) = direct_pair();
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 8, B_BASE + 64, b.key);
    let rec = post_direct(&mut a, T0, w).expect("a direct record");
    lane(&mut b, &a, T0, &rec);
    assert_eq!(b.mem.at(B_BASE + 64, 8), a.mem.at(A_BASE, 8));
    run(&mut a, &mut b, T0);
    let got = wcs(&mut a);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::Success);
    // A bad rkey: REM_ACCESS_ERR, and B's memory untouched.
    let before = b.mem.at(B_BASE + 128, 8).to_vec();
    let w = wr(
        WrOpcode::RdmaWrite,
        &a,
        A_BASE + 8,
        8,
        B_BASE + 128,
        b.key ^ 0x55,
    );
    let rec = post_direct(&mut a, T0, w).expect("a direct record");
    lane(&mut b, &a, T0, &rec);
    assert_eq!(b.mem.at(B_BASE + 128, 8), &before[..]);
    assert_eq!(b.ep.stats().access_violations, 1);
    // The express path took the first WRITE (read in place) and left
    // this one to the generic path, which refused it.
    assert_eq!(b.ep.stats().rx_express, 1);
    assert_eq!(b.ep.stats().rx_in_place, 1);
    run(&mut a, &mut b, T0);
    let got = wcs(&mut a);
    assert_eq!(got[0].status, WcStatus::RemAccessErr, "{got:?}");
}

/// A record read in place (`direct::read_request`) is checked as a packet
/// is: one from another address than the QP's peer is dropped and counted,
/// one at a PSN ahead of the expected one is NAKed, and neither lands.
#[test]
fn a_record_read_in_place_from_a_stranger_or_out_of_order_does_not_land() {
    let (mut a, mut b) = direct_pair();
    let before = b.mem.at(B_BASE + 64, 8).to_vec();
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 8, B_BASE + 64, b.key);
    let rec = post_direct(&mut a, T0, w).expect("a direct record");
    let real = a.ip;
    a.ip = "127.9.9.9".parse().expect("an address");
    lane(&mut b, &a, T0, &rec);
    a.ip = real;
    assert_eq!(b.mem.at(B_BASE + 64, 8), &before[..]);
    assert_eq!(b.ep.stats().drop_bad_addr, 1);
    // The record with its PSN moved one ahead: a sequence NAK.
    let mut ahead = rec.clone();
    ahead[11] = ahead[11].wrapping_add(1);
    lane(&mut b, &a, T0, &ahead);
    assert_eq!(b.mem.at(B_BASE + 64, 8), &before[..]);
    assert_eq!(b.ep.stats().tx_nak_seq, 1);
    assert_eq!((b.ep.stats().rx_express, b.ep.stats().rx_in_place), (0, 0));
    // The record itself, from the peer: it lands, read in place.
    lane(&mut b, &a, T0, &rec);
    assert_eq!(b.mem.at(B_BASE + 64, 8), a.mem.at(A_BASE, 8));
    assert_eq!((b.ep.stats().rx_express, b.ep.stats().rx_in_place), (1, 1));
}

#[test]
fn a_lost_record_is_sent_again_as_a_packet() {
    let (mut a, mut b) = direct_pair();
    post_recv(&mut b, B_BASE + 4096, 64);
    let _lost = send_direct(&mut a, A_BASE).expect("a direct record");
    assert!(drain(&mut a, T0).is_empty());
    let later = after_timeout();
    a.ep.handle_timeout(later);
    let again = drain(&mut a, later);
    assert_eq!(again.len(), 1);
    assert!(!is_direct(&again[0]), "the retransmission is a RoCE packet");
    assert_eq!(a.ep.stats().retransmits, 1);
    lane(&mut b, &a, later, &again[0]);
    assert_eq!(wcs(&mut b).len(), 1);
    assert_eq!(b.mem.at(B_BASE + 4096, 8), a.mem.at(A_BASE, 8));
    run(&mut a, &mut b, later);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::Success);
}

#[test]
fn a_record_executed_twice_is_a_duplicate_acked_again() {
    let (mut a, mut b) = direct_pair();
    two_receives(&mut b);
    let rec = send_direct(&mut a, A_BASE).expect("a direct record");
    lane(&mut b, &a, T0, &rec);
    let lost_ack = drain(&mut b, T0);
    assert_eq!(lost_ack.len(), 1, "B's ACK, which A never gets");
    let later = after_timeout();
    a.ep.handle_timeout(later);
    let again = drain(&mut a, later);
    lane(&mut b, &a, later, &again[0]);
    assert_eq!(b.ep.stats().rx_duplicates, 1);
    run(&mut a, &mut b, later);
    assert_eq!(wcs(&mut b).len(), 1, "one message, one receive taken");
    let got = wcs(&mut a);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::Success);
}

#[test]
fn a_record_that_finds_no_receive_is_sent_again_after_the_rnr_nak() {
    let (mut a, mut b) = direct_pair();
    let rec = send_direct(&mut a, A_BASE).expect("a direct record");
    lane(&mut b, &a, T0, &rec);
    run(&mut a, &mut b, T0);
    assert_eq!(a.ep.stats().rx_rnr_nak, 1);
    assert!(wcs(&mut a).is_empty() && wcs(&mut b).is_empty());
    post_recv(&mut b, B_BASE + 4096, 64);
    let later = after_timeout();
    a.ep.handle_timeout(later);
    run(&mut a, &mut b, later);
    assert_eq!(wcs(&mut b).len(), 1);
    assert_eq!(b.mem.at(B_BASE + 4096, 8), a.mem.at(A_BASE, 8));
    assert_eq!(wcs(&mut a)[0].status, WcStatus::Success);
}

/// A SEND larger than its receive: the express path leaves it to the
/// generic one, which fails the receive (LOC_LEN_ERR) and NAKs it, and
/// nothing lands.
#[test]
fn a_record_that_does_not_fit_its_receive_gets_the_generic_answer() {
    let (mut a, mut b) = direct_pair();
    post_recv(&mut b, B_BASE + 4096, 4);
    let before = b.mem.at(B_BASE + 4096, 8).to_vec();
    let rec = send_direct(&mut a, A_BASE).expect("a direct record");
    lane(&mut b, &a, T0, &rec);
    assert_eq!(b.ep.stats().rx_express, 0);
    assert_eq!(b.mem.at(B_BASE + 4096, 8), &before[..]);
    let got = wcs(&mut b);
    assert_eq!(got[0].status, WcStatus::LocLenErr, "{got:?}");
    run(&mut a, &mut b, T0);
    let got = wcs(&mut a);
    assert_eq!(got[0].status, WcStatus::RemInvReqErr, "{got:?}");
}

/// A post behind a record in flight goes as a packet with the next PSN,
/// and arrives after it.
#[test]
fn a_packet_posted_behind_a_record_follows_it_in_order() {
    let (mut a, mut b) = direct_pair();
    two_receives(&mut b);
    let rec = send_direct(&mut a, A_BASE).expect("a direct record");
    assert!(send_direct(&mut a, A_BASE + 8).is_none(), "not idle");
    let next = drain(&mut a, T0);
    assert_eq!(next.len(), 1);
    lane(&mut b, &a, T0, &rec);
    lane(&mut b, &a, T0, &next[0]);
    let got = wcs(&mut b);
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(b.mem.at(B_BASE + 4096, 8), a.mem.at(A_BASE, 8));
    assert_eq!(b.mem.at(B_BASE + 8192, 8), a.mem.at(A_BASE + 8, 8));
    run(&mut a, &mut b, T0);
    assert_eq!(wcs(&mut a).len(), 2);
}

#[test]
fn only_a_lone_small_message_to_an_idle_lane_qp_goes_direct() {
    // Off (the default, and on the wire).
    let (mut a, _b) = pair_with(|c| c.lane_acks = true);
    assert!(send_direct(&mut a, A_BASE).is_none());
    assert_eq!(drain(&mut a, T0).len(), 1, "it goes as a packet");
    // No lane to the peer.
    let (mut a, _b) = direct_pair();
    a.ep.set_peer_copy(a.qpn, false).unwrap();
    assert!(send_direct(&mut a, A_BASE).is_none());
    // An atomic, then a SEND behind it.
    let (mut a, b) = direct_pair();
    let add = wr(WrOpcode::AtomicFetchAndAdd, &a, A_BASE, 8, B_BASE, b.key);
    assert!(post_direct(&mut a, T0, add).is_none());
    assert!(send_direct(&mut a, A_BASE).is_none());
    assert_eq!(drain(&mut a, T0).len(), 2);
    // A READ large enough for peer copy.
    let (mut a, b) = direct_pair();
    let big = wr(WrOpcode::RdmaRead, &a, A_BASE, 64 << 10, B_BASE, b.key);
    assert!(post_direct(&mut a, T0, big).is_none());
    // Too large for a record.
    let (mut a, _b) = direct_pair();
    let big = wr(WrOpcode::Send, &a, A_BASE, 256, 0, 0);
    assert!(post_direct(&mut a, T0, big).is_none());
    // A bad lkey: the packet path reports it.
    let (mut a, _b) = direct_pair();
    let mut bad = send8(&a, A_BASE);
    bad.sgl[0].lkey ^= 0x55;
    assert!(post_direct(&mut a, T0, bad).is_none());
    assert!(drain(&mut a, T0).is_empty());
    assert_eq!(wcs(&mut a)[0].status, WcStatus::LocProtErr);
}

/// A READ's request goes as a record; the responder answers it as it
/// answers a packet, one response per MTU, and the bytes land.
#[test]
fn a_read_request_goes_as_a_record_and_its_responses_land() {
    for len in [8u32, 9000] {
        let (mut a, mut b) = direct_pair();
        let read = wr(WrOpcode::RdmaRead, &a, A_BASE, len, B_BASE + 64, b.key);
        let rec = post_direct(&mut a, T0, read).expect("a direct record");
        assert!(is_direct(&rec));
        assert!(drain(&mut a, T0).is_empty(), "the record is the request");
        lane(&mut b, &a, T0, &rec);
        let responses = drain(&mut b, T0);
        // 4 KiB MTU: one response for 8 bytes, a record; three packets for
        // 9000.
        assert_eq!(responses.len(), (len as usize).div_ceil(4096));
        assert!(responses.iter().all(|r| is_direct(r) == (len == 8)));
        for r in &responses {
            lane(&mut a, &b, T0, r);
        }
        let got = wcs(&mut a);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].status, got[0].byte_len), (WcStatus::Success, len));
        let n = len as usize;
        assert_eq!(a.mem.at(A_BASE, n), b.mem.at(B_BASE + 64, n));
        // The next post takes the PSN after the READ's responses.
        post_recv(&mut b, B_BASE + 4096, 64);
        let next = send_direct(&mut a, A_BASE).expect("idle again");
        lane(&mut b, &a, T0, &next);
        assert_eq!(wcs(&mut b)[0].status, WcStatus::Success);
    }
}

/// A READ record whose response is lost: the request goes again as a
/// packet at the timeout, the responder answers the duplicate, and the
/// READ completes once.
#[test]
fn a_read_record_answered_again_after_a_lost_response() {
    let (mut a, mut b) = direct_pair();
    let read = wr(WrOpcode::RdmaRead, &a, A_BASE, 8, B_BASE, b.key);
    let rec = post_direct(&mut a, T0, read).expect("a direct record");
    lane(&mut b, &a, T0, &rec);
    let lost = drain(&mut b, T0);
    assert_eq!(lost.len(), 1, "the response, lost");
    assert!(is_direct(&lost[0]), "a response record");
    let later = after_timeout();
    a.ep.handle_timeout(later);
    let again = drain(&mut a, later);
    assert_eq!(again.len(), 1);
    assert!(!is_direct(&again[0]), "a retransmission is a packet");
    for p in &again {
        lane(&mut b, &a, later, p);
    }
    run(&mut a, &mut b, later);
    let got = wcs(&mut a);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(a.mem.at(A_BASE, 8), b.mem.at(B_BASE, 8));
}

/// With records off, or no lane to the peer, a READ's response is a packet.
#[test]
fn read_responses_are_packets_without_records_or_a_lane() {
    for no_lane in [true, false] {
        let (mut a, mut b) = if no_lane {
            direct_pair()
        } else {
            pair_with(|c| c.lane_acks = true)
        };
        if no_lane {
            b.ep.set_peer_copy(b.qpn, false).unwrap();
        }
        let read = wr(WrOpcode::RdmaRead, &a, A_BASE, 8, B_BASE, b.key);
        let req = post_direct(&mut a, T0, read).unwrap_or_else(|| drain(&mut a, T0).remove(0));
        lane(&mut b, &a, T0, &req);
        let resp = drain(&mut b, T0);
        assert_eq!(resp.len(), 1);
        assert!(!is_direct(&resp[0]));
        lane(&mut a, &b, T0, &resp[0]);
        assert_eq!(wcs(&mut a)[0].status, WcStatus::Success);
        assert_eq!(a.mem.at(A_BASE, 8), b.mem.at(B_BASE, 8));
    }
}

/// The responder's driver takes a READ's response record right after the
/// request (`take_direct_answer`): the same record `poll_transmit` would
/// give, and nothing left for it; anything else at the front of the queue
/// stays for `poll_transmit`.
#[test]
fn a_read_response_record_is_taken_at_once() {
    let (mut a, mut b) = direct_pair();
    let read = wr(WrOpcode::RdmaRead, &a, A_BASE, 8, B_BASE, b.key);
    let rec = post_direct(&mut a, T0, read).expect("a direct record");
    lane(&mut b, &a, T0, &rec);
    let mut buf = Vec::new();
    let t =
        b.ep.take_direct_answer(T0, b.qpn, &mut b.mem, &mut buf)
            .expect("the response");
    assert!(is_direct(&buf[..t.len]));
    assert!(!b.ep.wants_transmit(), "nothing left to flush");
    assert!(drain(&mut b, T0).is_empty());
    assert!(
        b.ep.take_direct_answer(T0, b.qpn, &mut b.mem, &mut buf)
            .is_none()
    );
    lane(&mut a, &b, T0, &buf[..t.len]);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::Success);
    assert_eq!(a.mem.at(A_BASE, 8), b.mem.at(B_BASE, 8));
    // A SEND's ACK at the front (B owes it, then A READs): not a READ, so
    // nothing is taken and the queue keeps its order.
    post_recv(&mut b, B_BASE + 4096, 64);
    let send = send_direct(&mut a, A_BASE).expect("a direct record");
    lane(&mut b, &a, T0, &send);
    assert!(
        b.ep.take_direct_answer(T0, b.qpn, &mut b.mem, &mut buf)
            .is_none()
    );
    assert_eq!(drain(&mut b, T0).len(), 1, "the ACK");
}

/// A READ that fails the responder's checks is NAKed, not answered: the
/// driver takes nothing at once, and the NAK goes as a packet, which ends
/// the READ in REM_ACCESS_ERR with nothing read.
#[test]
fn a_bad_read_is_not_taken_at_once() {
    let (mut a, mut b) = direct_pair();
    let before = a.mem.at(A_BASE, 8).to_vec();
    let read = wr(WrOpcode::RdmaRead, &a, A_BASE, 8, B_BASE, b.key ^ 0x100);
    let rec = post_direct(&mut a, T0, read).expect("a direct record");
    lane(&mut b, &a, T0, &rec);
    let mut buf = Vec::new();
    assert!(
        b.ep.take_direct_answer(T0, b.qpn, &mut b.mem, &mut buf)
            .is_none()
    );
    let nak = drain(&mut b, T0);
    assert_eq!(nak.len(), 1);
    assert!(!is_direct(&nak[0]), "a NAK is a packet");
    lane(&mut a, &b, T0, &nak[0]);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::RemAccessErr);
    assert_eq!(a.mem.at(A_BASE, 8), &before[..]);
}
