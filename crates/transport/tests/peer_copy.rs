//! Peer copy between two sans-IO endpoints (`qp/peer.rs`): the packets a
//! lane would carry are handed over with a fake copier that reads the other
//! endpoint's memory, at literal times. Checks bytes, statuses, that a
//! failed check copies nothing, duplicates, and failing copies.

#[allow(dead_code, unused_imports)]
mod peer_harness;
use peer_harness::*;

#[test]
fn write_is_one_packet_and_one_copy_from_gathered_sges() {
    let (mut a, mut b) = pair();
    let len = 64 * 1024;
    // Two SGEs, the second from further into A's region.
    let mut w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 40_000, B_BASE + 8, b.key);
    w.sgl.push(Sge {
        addr: A_BASE + 500_000,
        length: len - 40_000,
        lkey: a.key,
    });
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    assert_eq!(req.len(), 1, "one packet for the whole message");
    assert_eq!(req[0][0], 0xE0, "SOFTRDMA_RC_RDMA_WRITE_ONLY_PEER");
    lane(&mut b, &a, T0, &req[0]);
    assert_eq!(b.copies, 1);
    let mut want = a.mem.at(A_BASE, 40_000).to_vec();
    want.extend_from_slice(a.mem.at(A_BASE + 500_000, len as usize - 40_000));
    assert_eq!(b.mem.at(B_BASE + 8, len as usize), &want[..]);
    run(&mut a, &mut b, T0);
    let done = wcs(&mut a);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status, WcStatus::Success);
}

#[test]
fn small_messages_keep_to_packets() {
    let (mut a, mut b) = pair();
    let len = PEER_COPY_MIN - 1;
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, len, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    assert_eq!(req.len(), 4, "4 KiB packets");
    assert!(req.iter().all(|p| p[0] < 0xC0));
    for p in &req {
        lane(&mut b, &a, T0, p);
    }
    assert_eq!(b.copies, 0);
    assert_eq!(
        b.mem.at(B_BASE, len as usize),
        a.mem.at(A_BASE, len as usize)
    );
}

/// A bad rkey or a range outside the region: REM_ACCESS_ERR at the
/// requester, the responder's memory untouched and nothing copied.
#[test]
fn bad_rkey_and_out_of_bounds_copy_nothing() {
    for (remote, bad_key) in [(B_BASE, true), (B_BASE + LEN as u64 - 1000, false)] {
        let (mut a, mut b) = pair();
        let before = b.mem.buf.clone();
        let rkey = if bad_key { b.key ^ 0x100 } else { b.key };
        let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 64 * 1024, remote, rkey);
        a.ep.post_send(T0, a.qpn, w).unwrap();
        run(&mut a, &mut b, T0);
        assert_eq!(b.copies, 0);
        assert!(b.mem.buf == before, "responder memory changed");
        let done = wcs(&mut a);
        assert_eq!(done[0].status, WcStatus::RemAccessErr, "bad key {bad_key}");
        // The READ direction: nothing copied into the requester either.
        let (mut a, mut b) = pair();
        let before = a.mem.buf.clone();
        let w = wr(WrOpcode::RdmaRead, &a, A_BASE, 64 * 1024, remote, rkey);
        a.ep.post_send(T0, a.qpn, w).unwrap();
        run(&mut a, &mut b, T0);
        assert_eq!(a.copies, 0);
        assert!(a.mem.buf == before, "requester memory changed");
        assert_eq!(wcs(&mut a)[0].status, WcStatus::RemAccessErr);
    }
}

/// A WRITE whose ACK is lost is sent again after the timeout: the
/// responder re-ACKs the duplicate without copying again.
#[test]
fn duplicate_write_is_acked_not_copied() {
    let (mut a, mut b) = pair();
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 32 * 1024, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    lane(&mut b, &a, T0, &req[0]);
    let lost_ack = drain(&mut b, T0);
    assert_eq!(lost_ack.len(), 1);
    let t1 = T0 + Duration::from_millis(20);
    a.ep.handle_timeout(t1);
    let again = drain(&mut a, t1);
    assert_eq!(again, req, "the same descriptor again");
    lane(&mut b, &a, t1, &again[0]);
    assert_eq!(b.copies, 1, "a duplicate is not executed twice");
    run(&mut a, &mut b, t1);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::Success);
}

/// A READ: the responder names its checked range, the requester copies it.
/// A retransmitted request is answered again and copied again, safely.
#[test]
fn read_copies_at_the_requester_and_a_duplicate_copies_again() {
    let (mut a, mut b) = pair();
    let len = 1 << 19;
    let w = wr(
        WrOpcode::RdmaRead,
        &a,
        A_BASE + 4096,
        len,
        B_BASE + 64,
        b.key,
    );
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    assert_eq!((req.len(), req[0][0]), (1, 0xE2));
    lane(&mut b, &a, T0, &req[0]);
    let first = drain(&mut b, T0);
    assert_eq!((first.len(), first[0][0]), (1, 0xE3));
    // The response is lost; the request goes again after the timeout.
    let t1 = T0 + Duration::from_millis(20);
    a.ep.handle_timeout(t1);
    let again = drain(&mut a, t1);
    assert_eq!(again, req);
    lane(&mut b, &a, t1, &again[0]);
    let resp = drain(&mut b, t1);
    assert_eq!(resp.len(), 1);
    // Both responses arrive: the first completes the READ, the second is stale.
    lane(&mut a, &b, t1, &first[0]);
    lane(&mut a, &b, t1, &resp[0]);
    assert_eq!(a.copies, 1);
    assert_eq!(
        a.mem.at(A_BASE + 4096, len as usize),
        b.mem.at(B_BASE + 64, len as usize)
    );
    let done = wcs(&mut a);
    assert_eq!((done.len(), done[0].status), (1, WcStatus::Success));
}

/// Failing copies: a requester gone leaves the WRITE unanswered (the retry
/// timer ends it); a fault is the requester's error (REM_OP_ERR); a READ
/// whose responder memory vanished is REM_ACCESS_ERR.
#[test]
fn failing_copies_are_clean_errors() {
    let (mut a, mut b) = pair();
    b.fail = Some(PeerCopyError::Gone);
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 64 * 1024, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let mut now = T0;
    for _ in 0..4 {
        run(&mut a, &mut b, now);
        now = now + Duration::from_millis(20);
        a.ep.handle_timeout(now);
    }
    assert_eq!(wcs(&mut a)[0].status, WcStatus::RetryExcErr);
    assert!(wcs(&mut b).is_empty());

    let (mut a, mut b) = pair();
    b.fail = Some(PeerCopyError::Fault);
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 64 * 1024, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    run(&mut a, &mut b, T0);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::RemOpErr);

    let (mut a, mut b) = pair();
    a.fail = Some(PeerCopyError::Fault);
    let w = wr(WrOpcode::RdmaRead, &a, A_BASE, 64 * 1024, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    run(&mut a, &mut b, T0);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::RemAccessErr);
}

/// Off the wire (the checked entry), a peer-copy packet is dropped unread.
#[test]
fn peer_packets_from_a_wire_are_dropped() {
    let (mut a, mut b) = pair();
    let before = b.mem.buf.clone();
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 64 * 1024, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    let d = Datagram {
        src: SocketAddr::new(a.ip, 4791),
        dst_ip: b.ip,
        payload: &req[0],
    };
    b.ep.handle_datagram(T0, &d, &mut b.mem);
    assert_eq!(b.ep.stats().drop_malformed, 1);
    assert!(b.mem.buf == before);
    assert!(drain(&mut b, T0).is_empty());
}
