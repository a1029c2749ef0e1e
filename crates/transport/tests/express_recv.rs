//! The express receive post (`qp/recv_queue.rs`): receives posted to an RC
//! QP's cell take messages in the order of all posts, whichever way each
//! went; a QP in RESET or ERR, or holding an RNR NAK, hands its receives
//! to the transport, and a full queue or too many SGEs too.

#[allow(dead_code, unused_imports)]
mod peer_harness;
use peer_harness::*;
use softrdma_transport::{Express, VerbsError, WcOpcode};

fn express_pair(rnr_hold_ns: u64) -> (Node, Node) {
    pair_with(|c| {
        c.lane_acks = true;
        c.direct = true;
        c.express = true;
        c.rnr_hold_ns = rnr_hold_ns;
    })
}

fn cell(n: &mut Node) -> Arc<Express> {
    n.ep.express(n.qpn).expect("an RC QP has a cell")
}

/// A receive of 64 bytes at `addr`, its wr_id `id`.
fn recv(n: &Node, id: u64, addr: u64) -> RecvWr {
    RecvWr {
        wr_id: id,
        sgl: [Sge {
            addr,
            length: 64,
            lkey: n.key,
        }]
        .into(),
    }
}

/// A's SEND of 8 bytes from `at`, delivered to B and answered.
fn send(a: &mut Node, b: &mut Node, at: u64) {
    let w = wr(WrOpcode::Send, a, at, 8, 0, 0);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    run(a, b, T0);
}

#[test]
fn receives_take_messages_in_the_order_of_their_posts_whichever_way_they_went() {
    let (mut a, mut b) = express_pair(0);
    let xb = cell(&mut b);
    // 1, 3 and 4 through the cell; 2 and 5 the transport's way.
    for id in 1..=5u64 {
        let w = recv(&b, id, B_BASE + 4096 * id);
        if id == 2 || id == 5 {
            b.ep.post_recv(T0, b.qpn, w).unwrap();
        } else {
            xb.post_recv(w).expect("the gate is open in RTS");
        }
    }
    for i in 1..=5u64 {
        a.mem.write(A_BASE + 16 * i, &[i as u8; 8]);
        send(&mut a, &mut b, A_BASE + 16 * i);
    }
    let got: Vec<_> = wcs(&mut b)
        .into_iter()
        .filter(|w| w.opcode == WcOpcode::Recv)
        .collect();
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert!(got.iter().all(|w| w.status == WcStatus::Success));
    for i in 1..=5u64 {
        assert_eq!(b.mem.at(B_BASE + 4096 * i, 8), &[i as u8; 8], "message {i}");
    }
    assert_eq!(b.ep.stats().recv_express, 3);
}

/// The cell is pulled only when the transport's queue runs out: a message
/// takes the queue's oldest receive while it holds one (the cell's are
/// newer), and the cell's receives follow them in order.
#[test]
fn the_cell_is_pulled_only_when_the_queue_runs_out() {
    let (mut a, mut b) = express_pair(0);
    let xb = cell(&mut b);
    for id in 1..=2u64 {
        b.ep.post_recv(T0, b.qpn, recv(&b, id, B_BASE + 4096 * id))
            .unwrap();
    }
    for id in 3..=4u64 {
        xb.post_recv(recv(&b, id, B_BASE + 4096 * id)).unwrap();
    }
    let mut ids = Vec::new();
    let mut pulled = Vec::new();
    for i in 1..=4u64 {
        a.mem.write(A_BASE + 16 * i, &[i as u8; 8]);
        send(&mut a, &mut b, A_BASE + 16 * i);
        ids.extend(
            wcs(&mut b)
                .into_iter()
                .filter(|w| w.opcode == WcOpcode::Recv)
                .map(|w| w.wr_id),
        );
        pulled.push(b.ep.stats().recv_express);
    }
    assert_eq!(ids, [1, 2, 3, 4]);
    // Nothing pulled while the queue held 1 and 2; then both at once.
    assert_eq!(pulled, [0, 0, 2, 2]);
    for i in 1..=4u64 {
        assert_eq!(b.mem.at(B_BASE + 4096 * i, 8), &[i as u8; 8], "message {i}");
    }
}

#[test]
fn a_full_queue_and_too_many_sges_go_to_the_transport_which_refuses_them() {
    let (_a, mut b) = express_pair(0);
    let xb = cell(&mut b);
    // The harness's QPs take 16 receives of one SGE.
    for id in 0..16u64 {
        xb.post_recv(recv(&b, id, B_BASE + 64 * id)).unwrap();
    }
    let w = xb.post_recv(recv(&b, 16, B_BASE)).expect_err("full");
    let e = b.ep.post_recv(T0, b.qpn, w).expect_err("full");
    assert!(matches!(e, VerbsError::NoMemory(_)), "{e:?}");
    let mut two = recv(&b, 17, B_BASE);
    two.sgl = vec![Sge::default(), Sge::default()].into();
    assert!(xb.post_recv(two).is_err());
    assert_eq!(b.ep.stats().recv_express, 16, "the transport took all 16");
}

#[test]
fn receives_in_the_cell_are_flushed_in_err_and_a_post_there_goes_the_transports_way() {
    let (_a, mut b) = express_pair(0);
    let xb = cell(&mut b);
    xb.post_recv(recv(&b, 1, B_BASE)).unwrap();
    xb.post_recv(recv(&b, 2, B_BASE)).unwrap();
    b.ep.modify_qp(T0, b.qpn, &to(QpState::Err), M::STATE)
        .unwrap();
    let w = xb
        .post_recv(recv(&b, 3, B_BASE))
        .expect_err("closed in ERR");
    b.ep.post_recv(T0, b.qpn, w).unwrap();
    let got = wcs(&mut b);
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2, 3]);
    assert!(got.iter().all(|w| w.status == WcStatus::WrFlushErr));
    // RESET: the transport refuses a post; INIT opens the gate again.
    b.ep.modify_qp(T0, b.qpn, &to(QpState::Reset), M::STATE)
        .unwrap();
    let w = xb
        .post_recv(recv(&b, 4, B_BASE))
        .expect_err("closed in RESET");
    assert!(b.ep.post_recv(T0, b.qpn, w).is_err());
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: Access::REMOTE_WRITE,
        ..QpAttr::default()
    };
    let mask = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    b.ep.modify_qp(T0, b.qpn, &init, mask).unwrap();
    xb.post_recv(recv(&b, 5, B_BASE)).expect("open in INIT");
}

#[test]
fn a_held_rnr_nak_closes_the_gate_and_the_transports_post_ends_it() {
    let (mut a, mut b) = express_pair(1_000_000);
    let xb = cell(&mut b);
    a.mem.write(A_BASE, &[9; 8]);
    send(&mut a, &mut b, A_BASE);
    assert!(wcs(&mut b).is_empty(), "no receive: the RNR NAK is held");
    let w = xb
        .post_recv(recv(&b, 1, B_BASE))
        .expect_err("closed while held");
    b.ep.post_recv(T0, b.qpn, w).unwrap();
    // The post ended the hold: the requester resends at once.
    run(&mut a, &mut b, T0);
    let got = wcs(&mut b);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].wr_id, got[0].status), (1, WcStatus::Success));
    assert_eq!(b.mem.at(B_BASE, 8), &[9; 8]);
    assert_eq!(b.ep.stats().tx_rnr_nak, 0);
    xb.post_recv(recv(&b, 2, B_BASE)).expect("open again");
}
