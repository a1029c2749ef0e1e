//! READs placed by their responder (`qp/peer.rs`): the requester arms a
//! fake ticket, the responder's fake placer writes into the requester's
//! memory under it. Checks bytes, statuses, who copied, and the tickets'
//! ends: settled, revoked, never taken by a duplicate or a late request.

#[allow(dead_code, unused_imports)]
mod peer_harness;
use peer_harness::*;

const DST: u64 = A_BASE + 4096;
const SRC: u64 = B_BASE + 64;

/// A pair whose requester A arms tickets, its whole region shared.
fn placing() -> (Node, Node) {
    let (mut a, b) = pair();
    a.book = Some(Book::default());
    share(&mut a, A_BASE, LEN as u64);
    (a, b)
}

fn log(n: &Node) -> Vec<Ev> {
    n.book.as_ref().unwrap().log()
}

fn state(n: &Node, i: u32) -> Ticket {
    n.book.as_ref().unwrap().state(i)
}

fn post_read(a: &mut Node, b: &Node, dst: u64, len: u32) {
    let w = wr(WrOpcode::RdmaRead, a, dst, len, SRC, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
}

/// One successful completion, and `len` bytes of B's at `dst`.
fn assert_read(a: &mut Node, b: &Node, dst: u64, len: u32) {
    let done = wcs(a);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status, WcStatus::Success);
    let len = len as usize;
    assert!(a.mem.at(dst, len) == b.mem.at(SRC, len), "wrong bytes");
}

#[test]
fn read_into_a_shared_region_is_placed_by_the_responder() {
    let (mut a, mut b) = placing();
    let len = 64 * 1024;
    post_read(&mut a, &b, DST, len);
    let req = drain(&mut a, T0);
    assert_eq!((req.len(), req[0][0]), (1, 0xE2));
    lane_mut(&mut b, &mut a, T0, &req[0]);
    // Placed before any answer reaches A.
    assert_eq!(state(&a, 0), Ticket::Placed);
    run(&mut a, &mut b, T0);
    assert_read(&mut a, &b, DST, len);
    assert_eq!((a.copies, b.places), (0, 1));
    assert_eq!(log(&a), [Ev::Arm(0), Ev::Take(0), Ev::Settle(0, true)]);
}

/// A responder that cannot place names its range: A revokes, then copies.
#[test]
fn refused_placement_falls_back_to_the_requesters_copy() {
    let (mut a, mut b) = placing();
    b.placer = Placer::Refuse;
    let len = 64 * 1024;
    post_read(&mut a, &b, DST, len);
    run(&mut a, &mut b, T0);
    assert_read(&mut a, &b, DST, len);
    assert_eq!((a.copies, b.places), (1, 1));
    // Revoked before the copy, so no placer can write under it after.
    assert_eq!(log(&a), [Ev::Arm(0), Ev::Settle(0, false), Ev::Copy]);
    assert_eq!(state(&a, 0), Ticket::Revoked);
}

/// Offered up to PLACE_MAX, for one SGE wholly inside a shared region;
/// otherwise no ticket, and A copies.
#[test]
fn no_offer_when_too_long_gathered_or_not_shared() {
    #[derive(Debug)]
    enum Case {
        Len(u32),
        TwoSges,
        Unshared,
        Straddling,
    }
    let half = LEN as u64 / 2;
    for case in [
        Case::Len(PLACE_MAX),
        Case::Len(PLACE_MAX + 1),
        Case::TwoSges,
        Case::Unshared,
        Case::Straddling,
    ] {
        let (mut a, mut b) = placing();
        let (mut dst, mut len) = (DST, 64 * 1024);
        let mut w = wr(WrOpcode::RdmaRead, &a, dst, len, SRC, b.key);
        match case {
            Case::Len(l) => {
                len = l;
                w.sgl[0].length = l;
            }
            Case::TwoSges => {
                w.sgl[0].length = len / 2;
                w.sgl.push(Sge {
                    addr: DST + u64::from(len / 2),
                    length: len / 2,
                    lkey: a.key,
                });
            }
            Case::Unshared => assert!(a.ep.set_mr_share(a.key, None)),
            // Shared: only the first half; the READ crosses its end.
            Case::Straddling => {
                share(&mut a, A_BASE, half);
                dst = A_BASE + half - 4096;
                w.sgl[0].addr = dst;
            }
        }
        w.remote_addr = SRC;
        a.ep.post_send(T0, a.qpn, w).unwrap();
        run(&mut a, &mut b, T0);
        assert_read(&mut a, &b, dst, len);
        if matches!(case, Case::Len(PLACE_MAX)) {
            assert_eq!(a.copies, 0);
            assert_eq!(log(&a), [Ev::Arm(0), Ev::Take(0), Ev::Settle(0, true)]);
            continue;
        }
        assert_eq!((a.copies, b.places), (1, 0), "{case:?}");
        assert_eq!(log(&a), [Ev::Copy], "{case:?}");
    }
}

/// A duplicate READ request is answered with the range, never placed, even
/// while its ticket is still armed (the first answer lost before A saw it).
#[test]
fn a_duplicate_read_is_never_placed() {
    for first in [Placer::Honest, Placer::Refuse] {
        let (mut a, mut b) = placing();
        b.placer = first;
        let len = 64 * 1024;
        post_read(&mut a, &b, DST, len);
        let req = drain(&mut a, T0);
        lane_mut(&mut b, &mut a, T0, &req[0]);
        let lost = drain(&mut b, T0);
        assert_eq!(lost.len(), 1);
        // The retransmission offers the same ticket.
        let t1 = T0 + Duration::from_millis(20);
        a.ep.handle_timeout(t1);
        let again = drain(&mut a, t1);
        assert_eq!(again, req);
        b.placer = Placer::Honest;
        lane_mut(&mut b, &mut a, t1, &again[0]);
        assert_eq!(b.places, 1, "place_peer called for a duplicate");
        let resp = drain(&mut b, t1);
        assert_eq!(resp.len(), 1);
        lane_mut(&mut a, &mut b, t1, &resp[0]);
        assert_read(&mut a, &b, DST, len);
        assert_eq!(a.copies, 1);
        let placed = first == Placer::Honest;
        let want = if placed {
            vec![Ev::Arm(0), Ev::Take(0), Ev::Settle(0, true), Ev::Copy]
        } else {
            vec![Ev::Arm(0), Ev::Settle(0, false), Ev::Copy]
        };
        assert_eq!(log(&a), want);
    }
}

/// A READ leaving the send queue by flush (ERR), reset or destroy revokes
/// its ticket; its request arriving late then places nothing.
#[test]
fn a_flushed_reset_or_destroyed_read_revokes_its_ticket() {
    #[derive(Debug, PartialEq)]
    enum End {
        Flush,
        Reset,
        Destroy,
    }
    for how in [End::Flush, End::Reset, End::Destroy] {
        let (mut a, mut b) = placing();
        post_read(&mut a, &b, DST, 64 * 1024);
        let req = drain(&mut a, T0);
        assert_eq!(log(&a), [Ev::Arm(0)]);
        match how {
            End::Flush => a.ep.modify_qp(T0, a.qpn, &to(QpState::Err), M::STATE),
            End::Reset => a.ep.modify_qp(T0, a.qpn, &to(QpState::Reset), M::STATE),
            End::Destroy => a.ep.destroy_qp(a.qpn),
        }
        .unwrap();
        if how == End::Flush {
            let done = wcs(&mut a);
            assert_eq!(done.len(), 1);
            assert_eq!(done[0].status, WcStatus::WrFlushErr);
        }
        assert_eq!(log(&a), [Ev::Arm(0), Ev::Drop(0)], "{how:?}");
        assert_eq!(state(&a, 0), Ticket::Revoked);
        let before = a.mem.buf.clone();
        lane_mut(&mut b, &mut a, T0, &req[0]);
        assert_eq!(b.places, 1);
        assert!(a.mem.buf == before, "placed under a revoked ticket");
        run(&mut a, &mut b, T0);
        assert!(a.mem.buf == before, "{how:?}");
        assert_eq!(a.copies, 0);
    }
}

/// "Placed" from a responder that did not take the ticket is not believed:
/// dropped as malformed; the retransmitted request (a new ticket, a
/// duplicate, so never placed) is answered with the range and A copies.
#[test]
fn placed_answer_without_a_placed_ticket_is_dropped() {
    let (mut a, mut b) = placing();
    b.placer = Placer::Lie;
    let len = 64 * 1024;
    post_read(&mut a, &b, DST, len);
    let before = a.mem.buf.clone();
    run(&mut a, &mut b, T0);
    assert_eq!(a.ep.stats().drop_malformed, 1);
    assert!(wcs(&mut a).is_empty(), "completed on a false answer");
    assert!(a.mem.buf == before);
    assert_eq!(log(&a), [Ev::Arm(0), Ev::Settle(0, false)]);
    let t1 = T0 + Duration::from_millis(20);
    a.ep.handle_timeout(t1);
    run(&mut a, &mut b, t1);
    assert_read(&mut a, &b, DST, len);
    assert_eq!((a.copies, b.places), (1, 1));
    let want = [
        Ev::Arm(0),
        Ev::Settle(0, false),
        Ev::Arm(1),
        Ev::Settle(1, false),
        Ev::Copy,
    ];
    assert_eq!(log(&a), want);
    assert_eq!(a.ep.stats().drop_malformed, 1);
}
