//! The express post (`qp/express.rs`): an idle RC QP whose peer is on a
//! lane lends its requester to its cell; a lone small SEND or WRITE posted
//! through the cell leaves as a direct record without the endpoint, with
//! the ACK the responder owes, is settled by its plain ACK, and is the
//! transport's again (a started WQE) for anything else.

#[allow(dead_code, unused_imports)]
mod peer_harness;
use peer_harness::*;
use softrdma_transport::{Datagram, Event, Express, ExpressWr, WcOpcode};
use std::net::SocketAddr;

fn express_pair() -> (Node, Node) {
    pair_with(|c| {
        c.lane_acks = true;
        c.direct = true;
        c.express = true;
    })
}

fn cell(n: &mut Node) -> Arc<Express> {
    n.ep.express(n.qpn).expect("an RC QP has a cell")
}

fn send8(n: &Node, at: u64) -> SendWr {
    wr(WrOpcode::Send, n, at, 8, 0, 0)
}

/// Posts an 8-byte SEND from `at` through `x` at `now`: the record, or
/// the WR, for the transport's post.
#[allow(clippy::result_large_err)] // the WR back by value, for the transport's post
fn post(x: &Express, n: &mut Node, now: Instant, at: u64) -> Result<Vec<u8>, SendWr> {
    let w = send8(n, at);
    let mut out = [0u8; softrdma_wire::direct::DIRECT_MAX_LEN];
    let e = ExpressWr::of(&w).expect("one SGE");
    match x.post(now, &e, &mut n.mem, &mut out) {
        Some(t) => Ok(out[..t.len].to_vec()),
        None => Err(w),
    }
}

/// `count` receives of 64 bytes at `base` + 4 KiB, + 8 KiB, ...
fn receives(n: &mut Node, base: u64, count: u64) {
    for i in 0..count {
        post_recv(n, base + 4096 * (i + 1), 64);
    }
}

/// Past the retransmission timeout `connect` sets (4.1 ms) and the lease.
fn later(k: u64) -> Instant {
    T0 + Duration::from_millis(10 * k)
}

/// The first post of each side goes the transport's way (the cells know
/// no region yet: the transport's post shows them one) and each packet
/// handled lends the requester it found idle. After A's second SEND, a
/// record of its cell carrying the ACK of B's first, both are lent, A's
/// SEND is out and B owes its ACK.
fn lent_pair() -> (Node, Node, Arc<Express>, Arc<Express>) {
    lent_pair_with(6)
}

/// [`lent_pair`], with `b_receives` receives posted at B (at least 2).
fn lent_pair_with(b_receives: u64) -> (Node, Node, Arc<Express>, Arc<Express>) {
    let (mut a, mut b) = express_pair();
    let (xa, xb) = (cell(&mut a), cell(&mut b));
    receives(&mut a, A_BASE, 6);
    receives(&mut b, B_BASE, b_receives);
    let w = post(&xa, &mut a, T0, A_BASE).expect_err("not lent before any traffic");
    let rec = post_direct(&mut a, T0, w).expect("a direct record");
    lane(&mut b, &a, T0, &rec);
    let w = post(&xb, &mut b, T0, B_BASE).expect_err("lent, but no region known");
    let reply = post_direct(&mut b, T0, w).expect("a direct record");
    assert_eq!(softrdma_wire::lane_packets(&reply).len(), 2, "SEND and ACK");
    lane(&mut a, &b, T0, &reply);
    assert_eq!(wcs(&mut a).len(), 2, "A's SEND done, B's arrived");
    let rec = post(&xa, &mut a, T0, A_BASE + 8).expect("A is lent");
    assert_eq!(softrdma_wire::lane_packets(&rec).len(), 2, "SEND and ACK");
    lane(&mut b, &a, T0, &rec);
    assert_eq!(wcs(&mut b).len(), 3, "B's SEND done, A's two arrived");
    assert_eq!(b.mem.at(B_BASE + 4096 * 2, 8), a.mem.at(A_BASE + 8, 8));
    (a, b, xa, xb)
}

/// [`lent_pair`], A's SEND settled by the ACK B owed, sent alone: both
/// lent and idle, the completions taken.
fn idle_pair() -> (Node, Node, Arc<Express>, Arc<Express>) {
    idle_pair_with(6)
}

/// [`idle_pair`], with `b_receives` receives posted at B (at least 2).
fn idle_pair_with(b_receives: u64) -> (Node, Node, Arc<Express>, Arc<Express>) {
    let (mut a, mut b, xa, xb) = lent_pair_with(b_receives);
    run(&mut a, &mut b, T0);
    assert_eq!(wcs(&mut a).len(), 1, "A's second SEND");
    (a, b, xa, xb)
}

#[test]
fn a_ping_pong_goes_through_the_cells_with_the_acks_they_owe() {
    let (mut a, mut b, xa, xb) = lent_pair();
    for i in 1..4u64 {
        let (at_a, at_b) = (A_BASE + 16 * i, B_BASE + 16 * i);
        a.mem.write(at_a, &[i as u8; 8]);
        b.mem.write(at_b, &[0x80 | i as u8; 8]);
        let reply = post(&xb, &mut b, T0, at_b).expect("B is lent and idle");
        assert!(drain(&mut b, T0).is_empty(), "the record is all B sends");
        lane(&mut a, &b, T0, &reply);
        // A's SEND completed (B's record carried its ACK), B's arrived.
        let got = wcs(&mut a);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got.iter()
                .all(|w| w.status == WcStatus::Success && w.byte_len == 8)
        );
        assert_eq!(a.mem.at(A_BASE + 4096 * (i + 1), 8), &[0x80 | i as u8; 8]);
        let rec = post(&xa, &mut a, T0, at_a).expect("A is lent and idle");
        lane(&mut b, &a, T0, &rec);
        let got = wcs(&mut b);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(b.mem.at(B_BASE + 4096 * (i + 2), 8), &[i as u8; 8]);
    }
    // A's last SEND waits for the ACK B owes: the first flush that finds
    // it sends it alone.
    assert!(wcs(&mut a).is_empty());
    run(&mut a, &mut b, T0);
    assert_eq!(wcs(&mut a).len(), 1, "A's last SEND settled by a lone ACK");
    assert_eq!(a.ep.stats().tx_express, 4);
    assert_eq!(b.ep.stats().tx_express, 3);
    assert_eq!(a.ep.stats().retransmits + b.ep.stats().retransmits, 0);
    // Each side's responder was lent with its requester and executed the
    // other's last three records through the cell.
    assert_eq!((a.ep.stats().rx_lent, b.ep.stats().rx_lent), (3, 3));
}

#[test]
fn a_lost_record_is_sent_again_as_a_packet_after_the_lease() {
    let (mut a, mut b, xa, _) = idle_pair();
    let _lost = post(&xa, &mut a, T0, A_BASE).expect("a record");
    a.ep.handle_timeout(later(1));
    let again = drain(&mut a, later(1));
    assert_eq!(again.len(), 1, "the message, as a packet");
    assert_eq!(a.ep.stats().retransmits, 1);
    lane(&mut b, &a, later(1), &again[0]);
    run(&mut a, &mut b, later(1));
    let got = wcs(&mut a);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(b.mem.at(B_BASE + 4096 * 3, 8), a.mem.at(A_BASE, 8));
}

/// The cell keeps a few fields of an outstanding WR, not the WR: taken
/// back, the message is the one posted (its id, opcode, immediate data,
/// remote address and key, and bytes).
#[test]
fn a_message_taken_back_is_the_wr_posted() {
    let (mut a, mut b, xa, _) = idle_pair();
    let at = A_BASE + 40;
    a.mem.write(at, b"reclaim!");
    let mut w = wr(WrOpcode::RdmaWriteWithImm, &a, at, 8, B_BASE + 512, b.key);
    w.wr_id = 77;
    w.imm_data = 0x1234_5678;
    let mut out = [0u8; softrdma_wire::direct::DIRECT_MAX_LEN];
    let e = ExpressWr::of(&w).expect("one SGE");
    let _lost = xa.post(T0, &e, &mut a.mem, &mut out).expect("a record");
    a.ep.handle_timeout(later(1));
    let again = drain(&mut a, later(1));
    assert_eq!(again.len(), 1, "the message, as a packet");
    lane(&mut b, &a, later(1), &again[0]);
    run(&mut a, &mut b, later(1));
    assert_eq!(b.mem.at(B_BASE + 512, 8), b"reclaim!");
    let got = wcs(&mut b);
    assert_eq!(got.len(), 1, "{got:?}");
    let r = &got[0];
    assert_eq!(
        (r.opcode, r.imm_data, r.byte_len),
        (WcOpcode::RecvRdmaWithImm, 0x1234_5678, 8)
    );
    let got = wcs(&mut a);
    assert_eq!(got.len(), 1, "{got:?}");
    let s = &got[0];
    assert_eq!(
        (s.wr_id, s.opcode, s.status),
        (77, WcOpcode::RdmaWrite, WcStatus::Success)
    );
}

#[test]
fn a_post_the_cell_does_not_take_goes_behind_the_lent_message() {
    let (mut a, mut b, xa, _) = idle_pair();
    let first = post(&xa, &mut a, T0, A_BASE).expect("a record");
    // A second SEND while the first is out: the transport's, after it.
    let w = post(&xa, &mut a, T0, A_BASE + 64).expect_err("one out at most");
    assert!(
        post_direct(&mut a, T0, w).is_none(),
        "queued behind the first"
    );
    let second = drain(&mut a, T0);
    assert_eq!(second.len(), 1);
    lane(&mut b, &a, T0, &first);
    lane(&mut b, &a, T0, &second[0]);
    run(&mut a, &mut b, T0);
    let got = wcs(&mut b);
    assert_eq!(got.len(), 2, "A's two SENDs: {got:?}");
    assert_eq!(b.mem.at(B_BASE + 4096 * 3, 8), a.mem.at(A_BASE, 8));
    assert_eq!(b.mem.at(B_BASE + 4096 * 4, 8), a.mem.at(A_BASE + 64, 8));
    let got = wcs(&mut a);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(b.ep.stats().tx_nak_seq, 0, "in order");
}

#[test]
fn an_rnr_nak_gives_the_message_back_to_the_transport() {
    // B's two receives went to A's first two SENDs.
    let (mut a, mut b, xa, _) = idle_pair_with(2);
    let rec = post(&xa, &mut a, T0, A_BASE + 24).expect("A is lent");
    lane(&mut b, &a, T0, &rec);
    run(&mut a, &mut b, T0);
    assert_eq!(a.ep.stats().rx_rnr_nak, 1);
    assert!(wcs(&mut a).is_empty(), "waits for its RNR timer");
    post_recv(&mut b, B_BASE + 4096 * 3, 64);
    a.ep.handle_timeout(later(1));
    run(&mut a, &mut b, later(1));
    let got = wcs(&mut a);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(b.mem.at(B_BASE + 4096 * 3, 8), a.mem.at(A_BASE + 24, 8));
}

#[test]
fn a_message_lent_when_the_qp_fails_is_flushed() {
    let (mut a, _b, xa, _) = idle_pair();
    let _out = post(&xa, &mut a, T0, A_BASE).expect("a record");
    a.ep.modify_qp(T0, a.qpn, &to(QpState::Err), M::STATE)
        .unwrap();
    let got = wcs(&mut a);
    assert_eq!(got.len(), 1 + 5, "the lent SEND and five receives: {got:?}");
    assert_eq!(got[0].status, WcStatus::WrFlushErr);
    assert_eq!(got[0].opcode, WcOpcode::Send);
    let w = post(&xa, &mut a, T0, A_BASE).expect_err("not lent in ERR");
    assert_eq!(w.wr_id, 7);
}

#[test]
fn a_region_changed_since_its_check_is_not_read_by_the_cell() {
    let (mut a, _b, xa, _) = idle_pair();
    let key = a.key;
    a.ep.dereg_mr(key).unwrap();
    let w = post(&xa, &mut a, T0, A_BASE).expect_err("the region is gone");
    // The transport's post finds the key gone: a local protection error.
    assert!(post_direct(&mut a, T0, w).is_none());
    let _ = drain(&mut a, T0);
    let got = wcs(&mut a);
    assert_eq!(got[0].status, WcStatus::LocProtErr, "{got:?}");
}

#[test]
fn an_empty_send_goes_through_the_cell_and_a_list_of_sges_does_not() {
    let (mut a, mut b, xa, _) = idle_pair();
    let mut out = [0u8; softrdma_wire::direct::DIRECT_MAX_LEN];
    let mut w = SendWr::new(9, WrOpcode::Send);
    w.flags = SendFlags::SIGNALED;
    let e = ExpressWr::of(&w).expect("no SGE");
    let t = xa
        .post(T0, &e, &mut a.mem, &mut out)
        .expect("an empty SEND");
    lane(&mut b, &a, T0, &out[..t.len]);
    let got = wcs(&mut b);
    assert_eq!((got.len(), got[0].byte_len), (1, 0), "{got:?}");
    run(&mut a, &mut b, T0);
    let got = wcs(&mut a);
    assert_eq!(
        (got.len(), got[0].wr_id, got[0].byte_len),
        (1, 9, 0),
        "{got:?}"
    );
    // Two SGEs: the transport's post, which checks the list.
    let mut w = send8(&a, A_BASE);
    w.sgl.push(w.sgl[0]);
    assert!(ExpressWr::of(&w).is_none());
}

/// A driver that pushes the record before it reads the clock posts with a
/// lower bound of the time and raises it right after
/// (`Express::posted_at`, the engine's express post): a message taken back
/// times out from the raised time, which never goes down.
#[test]
fn a_message_taken_back_times_out_from_its_raised_posting_time() {
    let (mut a, _b, xa, _) = idle_pair();
    let _lost = post(&xa, &mut a, T0, A_BASE).expect("a record");
    xa.posted_at(T0 + Duration::from_millis(5));
    xa.posted_at(T0);
    // The lease (an ACK timeout, 4.1 ms, from the lending at T0) is over:
    // the message is the transport's, its retransmission timer from 5 ms.
    let t = T0 + Duration::from_millis(7);
    a.ep.handle_timeout(t);
    assert!(drain(&mut a, t).is_empty(), "due at 9.1 ms, not before");
    assert_eq!(a.ep.stats().retransmits, 0);
    let t = T0 + Duration::from_millis(10);
    a.ep.handle_timeout(t);
    assert_eq!(drain(&mut a, t).len(), 1, "the message, as a packet");
    assert_eq!(a.ep.stats().retransmits, 1);
}

/// A record for a lent responder whose CQ is armed: a caller that cannot
/// raise the notification (a driver's poller without its lock) has it
/// declined, with nothing changed; the transport executes it through the
/// cell and raises the notification, once, which disarms the CQ.
#[test]
fn an_armed_cq_fires_once_through_the_transport_and_is_declined_without_it() {
    let (mut a, mut b, xa, xb) = idle_pair();
    let lent = b.ep.stats().rx_lent;
    b.ep.req_notify_cq(b.cq, false).unwrap();
    a.mem.write(A_BASE + 40, &[0x5A; 8]);
    let rec = post(&xa, &mut a, T0, A_BASE + 40).expect("A is lent");
    let r = softrdma_wire::direct::read_request(&rec).expect("a SEND record");
    let d = Datagram {
        src: SocketAddr::new(a.ip, 4791),
        dst_ip: b.ip,
        payload: &rec,
    };
    assert_eq!(xb.exec(T0, &d, &r, &mut b.mem, false), None);
    assert!(wcs(&mut b).is_empty());
    assert_eq!(b.ep.stats().rx_lent, lent);
    lane(&mut b, &a, T0, &rec);
    let mut notified = 0;
    while let Some(e) = b.ep.poll_event() {
        notified += usize::from(matches!(e, Event::CompletionNotify(c) if c == b.cq));
    }
    assert_eq!(notified, 1);
    assert_eq!(b.ep.stats().rx_lent, lent + 1, "through the cell");
    let got = wcs(&mut b);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].status, got[0].opcode),
        (WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(b.mem.at(B_BASE + 4096 * 3, 8), &[0x5A; 8]);
    run(&mut a, &mut b, T0);
    assert_eq!(wcs(&mut a).len(), 1, "A's SEND settled");
    // Disarmed by the notification: the next one raises none.
    let rec = post(&xa, &mut a, T0, A_BASE + 40).expect("A is lent");
    lane(&mut b, &a, T0, &rec);
    assert_eq!(b.ep.stats().rx_lent, lent + 2);
    assert_eq!(wcs(&mut b).len(), 1);
    assert!(b.ep.poll_event().is_none());
}

/// A receive region deregistered since the lent responder learnt it is
/// not written by the cell: the transport takes the record, finds the key
/// gone and fails the receive (and the QP), with the memory untouched.
#[test]
fn a_receive_region_gone_is_not_written_by_the_lent_responder() {
    let (mut a, mut b, xa, _) = idle_pair();
    let lent = b.ep.stats().rx_lent;
    let before = b.mem.at(B_BASE + 4096 * 3, 8).to_vec();
    b.ep.dereg_mr(b.key).unwrap();
    a.mem.write(A_BASE + 48, &[0xC3; 8]);
    let rec = post(&xa, &mut a, T0, A_BASE + 48).expect("A is lent");
    lane(&mut b, &a, T0, &rec);
    assert_eq!(b.ep.stats().rx_lent, lent);
    assert_eq!(b.mem.at(B_BASE + 4096 * 3, 8), &before[..], "untouched");
    let got = wcs(&mut b);
    assert_eq!(got[0].status, WcStatus::LocProtErr, "{got:?}");
    assert_eq!(b.ep.query_qp(b.qpn).unwrap().0.qp_state, QpState::Err);
}

/// Posts an 8-byte RDMA WRITE from `at` to `remote` under `rkey` through
/// `x`: its record.
fn write_through(x: &Express, n: &mut Node, at: u64, remote: u64, rkey: u32) -> Vec<u8> {
    let w = wr(WrOpcode::RdmaWrite, n, at, 8, remote, rkey);
    let mut out = [0u8; softrdma_wire::direct::DIRECT_MAX_LEN];
    let e = ExpressWr::of(&w).expect("one SGE");
    let t = x.post(T0, &e, &mut n.mem, &mut out).expect("lent and idle");
    out[..t.len].to_vec()
}

/// WRITEs through the lent responder: to the region the cell learnt from
/// B's receives (its key is also its R_Key), they land through the cell;
/// one under the key of a region the cell knows from a post but that
/// grants no remote writes goes to the transport, which refuses it (a
/// remote access error at the requester) with the memory untouched.
#[test]
fn a_write_lands_through_the_cell_only_in_a_region_granting_it() {
    let (mut a, mut b, xa, _) = idle_pair();
    let b_key = b.key;
    for i in 1..=2u8 {
        let before = b.ep.stats().rx_lent;
        a.mem.write(A_BASE + 64, &[i; 8]);
        let rec = write_through(&xa, &mut a, A_BASE + 64, B_BASE + 512, b_key);
        lane(&mut b, &a, T0, &rec);
        assert_eq!(b.ep.stats().rx_lent, before + 1, "WRITE {i}");
        assert_eq!(b.mem.at(B_BASE + 512, 8), &[i; 8]);
        run(&mut a, &mut b, T0);
        let got = wcs(&mut a);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].status, WcStatus::Success);
    }
    // A second region of B's memory, local writes only, that B sends from.
    let pd = b.ep.query_mr(b_key).unwrap().pd;
    let local =
        b.ep.reg_mr(pd, B_BASE, 4096, B_BASE, Access::LOCAL_WRITE)
            .unwrap();
    let mut w = wr(WrOpcode::Send, &b, B_BASE + 16, 8, 0, 0);
    w.sgl = [Sge {
        addr: B_BASE + 16,
        length: 8,
        lkey: local.lkey,
    }]
    .into();
    let rec = post_direct(&mut b, T0, w).expect("a record");
    lane(&mut a, &b, T0, &rec);
    run(&mut a, &mut b, T0);
    assert_eq!(wcs(&mut b).len(), 1, "B's SEND");
    wcs(&mut a);
    let before = b.mem.at(B_BASE + 1024, 8).to_vec();
    let lent = b.ep.stats().rx_lent;
    a.mem.write(A_BASE + 64, &[0xEE; 8]);
    let rec = write_through(&xa, &mut a, A_BASE + 64, B_BASE + 1024, local.rkey);
    lane(&mut b, &a, T0, &rec);
    run(&mut a, &mut b, T0);
    assert_eq!(b.ep.stats().rx_lent, lent, "not through the cell");
    assert_eq!(b.mem.at(B_BASE + 1024, 8), &before[..], "untouched");
    let got = wcs(&mut a);
    assert_eq!(got[0].status, WcStatus::RemAccessErr, "{got:?}");
}
