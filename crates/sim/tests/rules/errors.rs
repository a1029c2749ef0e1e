//! Local errors, length errors, CQ overflow, flushes, fences, signalling,
//! solicited events and an MR deregistered under a READ response stream.

use crate::{Pair, rdma, sge, wr};
use softrdma_sim::DropRule;
use softrdma_sim::setup::PairOpts;
use softrdma_sim::trace::assert_lines;
use softrdma_transport::{
    AsyncEventType, Event, Mtu, QpAttr, QpAttrMask, QpState, SendFlags, WrOpcode,
};

/// A bad lkey is found when the packet is built: the WR before it (already
/// on the wire) still completes normally, then LOC_PROT_ERR, then flushes.
#[test]
fn bad_lkey_on_send_is_loc_prot_err() {
    let mut p = Pair::new(PairOpts::default());
    p.recv(1, 1, 0, 64);
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    let mut bad = sge(&p.a, 0, 8);
    bad.lkey ^= 0x1_0000;
    p.post(0, wr(2, WrOpcode::Send, vec![sge(&p.a, 0, 8), bad]));
    p.post(0, wr(3, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_SEND_ONLY psn=100 A len=8",
            "5.000 1>0 RC_ACKNOWLEDGE psn=100 ACK msn=1",
        ],
    );
    assert_eq!(
        p.swc(0),
        [
            "1 Send Success len=8",
            "2 Send LocProtErr len=16",
            "3 Send WrFlushErr len=8"
        ]
    );
    assert_eq!(p.state(0), QpState::Err);
    assert_eq!(p.rwc(1), ["1 Recv Success len=8"]);
}

/// A SEND larger than the receive buffer: NAK "invalid request", the
/// responder's receive completes LOC_LEN_ERR, the requester's SEND
/// REM_INV_REQ_ERR, both QPs in ERR.
#[test]
fn receive_buffer_too_small() {
    let mut p = Pair::new(PairOpts::default());
    p.recv(1, 1, 0, 15);
    p.recv(1, 2, 64, 64);
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 16)]));
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_SEND_ONLY psn=100 A len=16",
            "5.000 1>0 RC_ACKNOWLEDGE psn=100 NAK-INV msn=0",
        ],
    );
    assert_eq!(p.swc(0), ["1 Send RemInvReqErr len=16"]);
    assert_eq!(
        p.rwc(1),
        ["1 Recv LocLenErr len=0", "2 Recv WrFlushErr len=0"]
    );
    assert_eq!(p.state(0), QpState::Err);
    assert_eq!(p.state(1), QpState::Err);
}

/// A full send CQ: the completion that does not fit is lost, the CQ raises
/// CQ_ERR and the QP goes to ERR.
#[test]
fn cq_overflow_moves_the_qp_to_err() {
    let mut p = Pair::new(PairOpts {
        cqe: 2,
        ..PairOpts::default()
    });
    let b = p.b;
    for i in 1..=3 {
        p.post(
            0,
            rdma(i, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 8)], &b, 0),
        );
    }
    p.idle();
    assert_eq!(
        p.swc(0),
        ["1 RdmaWrite Success len=8", "2 RdmaWrite Success len=8"]
    );
    assert_eq!(p.state(0), QpState::Err);
    assert_eq!(
        p.net.nodes[0].events,
        [Event::CqAsync(p.a.scq, AsyncEventType::CqErr)]
    );
    assert_eq!(p.net.nodes[0].ep.stats().cq_overflows, 1);
}

/// Moving a QP to ERR flushes every outstanding send WR, signaled or not, in
/// order, and every posted receive; a WR posted afterwards flushes at once.
#[test]
fn flush_on_error_includes_unsignaled() {
    let mut p = Pair::new(PairOpts::default());
    p.net.drops.push(DropRule::all_from(0));
    p.recv(0, 10, 0, 8);
    p.recv(0, 11, 8, 8);
    for i in 1..=3 {
        let mut w = wr(i, WrOpcode::Send, vec![sge(&p.a, 0, 4)]);
        if i != 2 {
            w.flags = SendFlags::EMPTY;
        }
        p.post(0, w);
    }
    p.net.run_to(softrdma_transport::Instant::from_micros(100));
    assert!(p.swc(0).is_empty());
    let (now, qpn) = (p.net.now, p.a.qpn);
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    p.net.nodes[0]
        .ep
        .modify_qp(now, qpn, &attr, QpAttrMask::STATE)
        .unwrap();
    p.post(0, wr(4, WrOpcode::Send, vec![]));
    assert_eq!(
        p.swc(0),
        [
            "1 Send WrFlushErr len=4",
            "2 Send WrFlushErr len=4",
            "3 Send WrFlushErr len=4",
            "4 Send WrFlushErr len=0"
        ]
    );
    assert_eq!(
        p.rwc(0),
        ["10 Recv WrFlushErr len=0", "11 Recv WrFlushErr len=0"]
    );
    p.idle();
    // Nothing more is sent from a QP in ERR and no timer stays armed.
    assert_eq!(p.net.next_time(), None);
}

/// A fenced WRITE waits until the READ before it completed, so the READ
/// returns the old bytes; without the fence it goes out at once.
#[test]
fn fence_waits_for_outstanding_reads() {
    let mut p = Pair::new(PairOpts::default());
    let old = p.pattern(1, 0, 16, 1);
    let new = p.pattern(0, 0, 16, 2);
    let b = p.b;
    p.post(
        0,
        rdma(1, WrOpcode::RdmaRead, vec![sge(&p.a, 0x100, 16)], &b, 0),
    );
    let mut w = rdma(2, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 16)], &b, 0);
    w.flags = w.flags.with(SendFlags::FENCE);
    p.post(0, w);
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_RDMA_READ_REQUEST psn=100 A va=0x100001000 rkey=mr1 dlen=16",
            "5.000 1>0 RC_RDMA_READ_RESPONSE_ONLY psn=100 ACK msn=1 len=16",
            "10.000 0>1 RC_RDMA_WRITE_ONLY psn=101 A va=0x100001000 rkey=mr1 dlen=16 len=16",
            "15.000 1>0 RC_ACKNOWLEDGE psn=101 ACK msn=2",
        ],
    );
    assert_eq!(p.bytes(0, 0x100, 16), old);
    assert_eq!(p.bytes(1, 0, 16), new);
    // Without the fence both go at t=20; a fenced SEND after an atomic waits too.
    p.post(
        0,
        rdma(3, WrOpcode::RdmaRead, vec![sge(&p.a, 0x100, 16)], &b, 0),
    );
    p.post(
        0,
        rdma(4, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 16)], &b, 0),
    );
    p.idle();
    let l = p.net.lines();
    assert!(
        l[0].trim_start()
            .starts_with("20.000 0>1 RC_RDMA_READ_REQUEST psn=102"),
        "{l:?}"
    );
    assert!(
        l[1].trim_start()
            .starts_with("20.000 0>1 RC_RDMA_WRITE_ONLY psn=103"),
        "{l:?}"
    );
}

#[test]
fn sq_sig_all_versus_selective_signalling() {
    for sig_all in [true, false] {
        let mut p = Pair::new(PairOpts {
            sq_sig_all: sig_all,
            ..PairOpts::default()
        });
        let b = p.b;
        for i in 1..=4 {
            let mut w = rdma(i, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 8)], &b, 0);
            if i % 2 == 1 {
                w.flags = SendFlags::EMPTY;
            }
            p.post(0, w);
        }
        p.idle();
        let want: Vec<String> = (1..=4)
            .filter(|i| sig_all || i % 2 == 0)
            .map(|i| format!("{i} RdmaWrite Success len=8"))
            .collect();
        assert_eq!(p.swc(0), want);
    }
}

/// req_notify_cq(solicited_only) fires for a SEND with SE set (and for an
/// error completion), not for an ordinary one; req_notify_cq(any) fires for any.
#[test]
fn solicited_event_notification() {
    let mut p = Pair::new(PairOpts::default());
    let rcq = p.b.rcq;
    for i in 0..5 {
        p.recv(1, i, 64 * i, 64);
    }
    p.net.nodes[1].ep.req_notify_cq(rcq, true).unwrap();
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.idle();
    assert!(p.net.nodes[1].events.is_empty());
    let mut se = wr(2, WrOpcode::SendWithImm, vec![sge(&p.a, 0, 8)]);
    se.flags = se.flags.with(SendFlags::SOLICITED);
    se.imm_data = 0x1234_5678;
    p.post(0, se);
    p.idle();
    assert_eq!(p.net.nodes[1].events, [Event::CompletionNotify(rcq)]);
    let l = p.net.lines();
    assert_eq!(
        l[2].trim_start(),
        "10.000 0>1 RC_SEND_ONLY_WITH_IMMEDIATE psn=101 A SE imm=0x12345678 len=8"
    );
    // Fired once: disarmed until armed again.
    p.post(0, wr(3, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.idle();
    assert_eq!(p.net.nodes[1].events.len(), 1);
    // Solicited-only again: an error completion fires it.
    p.net.nodes[1].ep.req_notify_cq(rcq, true).unwrap();
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    let (now, qpn) = (p.net.now, p.b.qpn);
    p.net.nodes[1]
        .ep
        .modify_qp(now, qpn, &attr, QpAttrMask::STATE)
        .unwrap();
    p.net.flush();
    assert_eq!(p.net.nodes[1].events.len(), 2);
    assert_eq!(
        p.rwc(1),
        [
            "0 Recv Success len=8",
            "1 Recv Success len=8 imm=0x12345678",
            "2 Recv Success len=8",
            "3 Recv WrFlushErr len=0",
            "4 Recv WrFlushErr len=0"
        ]
    );
}

/// The MR is deregistered after two of four READ response packets left: the
/// responder looks the MR up for every packet, NAKs the next with "remote
/// access error" and goes to ERR; the requester's READ fails REM_ACCESS_ERR.
#[test]
fn dereg_mr_during_read_response_stream() {
    let mut p = Pair::new(PairOpts {
        mtu: Mtu::M256,
        ..PairOpts::default()
    });
    let b = p.b;
    p.post(
        0,
        rdma(1, WrOpcode::RdmaRead, vec![sge(&p.a, 0, 1024)], &b, 0),
    );
    p.net.flush();
    p.net.advance(); // t=5: the responder has the request
    assert!(p.net.transmit_one(1));
    assert!(p.net.transmit_one(1));
    p.net.nodes[1].ep.dereg_mr(b.mr.rkey).unwrap();
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_RDMA_READ_REQUEST psn=100 A va=0x100001000 rkey=mr1 dlen=1024",
            "5.000 1>0 RC_RDMA_READ_RESPONSE_FIRST psn=100 ACK msn=1 len=256",
            "5.000 1>0 RC_RDMA_READ_RESPONSE_MIDDLE psn=101 len=256",
            "5.000 1>0 RC_ACKNOWLEDGE psn=102 NAK-ACC msn=1",
        ],
    );
    assert_eq!(p.swc(0), ["1 RdmaRead RemAccessErr len=1024"]);
    assert_eq!(p.state(0), QpState::Err);
    assert_eq!(p.state(1), QpState::Err);
}

/// max_rd_atomic = 2: a third READ waits for a credit, i.e. for the first
/// READ to complete; the SEND behind it waits too (requests go in order).
#[test]
fn read_credits_limit_outstanding_reads() {
    let mut p = Pair::new(PairOpts {
        rd_atomic: 2,
        ..PairOpts::default()
    });
    let b = p.b;
    for i in 1..=3 {
        p.post(
            0,
            rdma(i, WrOpcode::RdmaRead, vec![sge(&p.a, 0x100 * i, 8)], &b, 0),
        );
    }
    p.recv(1, 1, 0x8000, 8);
    p.post(0, wr(4, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_RDMA_READ_REQUEST psn=100 A va=0x100001000 rkey=mr1 dlen=8",
            "0.000 0>1 RC_RDMA_READ_REQUEST psn=101 A va=0x100001000 rkey=mr1 dlen=8",
            "5.000 1>0 RC_RDMA_READ_RESPONSE_ONLY psn=100 ACK msn=1 len=8",
            "5.000 1>0 RC_RDMA_READ_RESPONSE_ONLY psn=101 ACK msn=2 len=8",
            "10.000 0>1 RC_RDMA_READ_REQUEST psn=102 A va=0x100001000 rkey=mr1 dlen=8",
            "10.000 0>1 RC_SEND_ONLY psn=103 A len=8",
            "15.000 1>0 RC_RDMA_READ_RESPONSE_ONLY psn=102 ACK msn=3 len=8",
            "15.000 1>0 RC_ACKNOWLEDGE psn=103 ACK msn=4",
        ],
    );
    assert_eq!(p.swc(0).len(), 4);
}

/// A full receive CQ on the responder: the completion is lost, the CQ raises
/// CQ_ERR and the responder QP goes to ERR.
#[test]
fn responder_cq_overflow() {
    let mut p = Pair::new(PairOpts {
        cqe: 2,
        retry_cnt: 0,
        ..PairOpts::default()
    });
    for i in 0..3 {
        p.recv(1, i, 64 * i, 64);
    }
    for i in 0..3 {
        p.post(0, wr(i, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    }
    p.idle();
    assert_eq!(p.rwc(1), ["0 Recv Success len=8", "1 Recv Success len=8"]);
    assert_eq!(p.state(1), QpState::Err);
    assert_eq!(
        p.net.nodes[1].events,
        [Event::CqAsync(p.b.rcq, AsyncEventType::CqErr)]
    );
    // The ACK the responder had queued died with it: the requester times out.
    assert_eq!(p.swc(0)[0], "0 Send RetryExcErr len=8");
}

/// The same with the receive CQ created with IGNORE_OVERRUN: the third
/// receive completion is dropped and counted, no CQ_ERR, the responder QP
/// stays in RTS and ACKs all three SENDs (the data of the third is placed).
#[test]
fn responder_cq_overrun_ignored() {
    let mut p = Pair::new(PairOpts {
        cqe: 2,
        retry_cnt: 0,
        ..PairOpts::default()
    });
    let rcq = p.b.rcq;
    p.net.nodes[1].ep.set_cq_ignore_overrun(rcq, true).unwrap();
    for i in 0..3 {
        p.recv(1, i, 64 * i, 64);
    }
    let data = p.pattern(0, 0, 8, 9);
    for i in 0..3 {
        // One at a time: the requester's CQ (2 entries too) is emptied
        // after each.
        p.post(0, wr(i, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
        p.idle();
        assert_eq!(p.swc(0), [format!("{i} Send Success len=8")]);
    }
    assert_eq!(p.rwc(1), ["0 Recv Success len=8", "1 Recv Success len=8"]);
    assert_eq!(p.state(1), QpState::Rts);
    assert!(
        p.net.nodes[1].events.is_empty(),
        "{:?}",
        p.net.nodes[1].events
    );
    assert_eq!(p.net.nodes[1].ep.stats().cq_overflows, 1);
    assert_eq!(p.bytes(1, 128, 8), data);
}

/// A QP on an SRQ raises LAST_WQE_REACHED once when it enters ERR, not again
/// for every WR posted to it afterwards (each of which flushes at once).
#[test]
fn last_wqe_reached_once() {
    use softrdma_sim::Net;
    use softrdma_sim::setup::{PairOpts as O, Side, bring_up, side};
    use softrdma_transport::{QpCap, QpInitAttr, QpType};
    let mut net = Net::new(2, 1);
    let o = O::default();
    let a = side(&mut net, 0, &o);
    let n = &mut net.nodes[1];
    let pd = n.ep.alloc_pd().unwrap();
    let (srq, _, _) = n.ep.create_srq(pd, 16, 1, 0).unwrap();
    let (cq, _) = n.ep.create_cq(64).unwrap();
    let (qpn, _) =
        n.ep.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: Some(srq),
            cap: QpCap {
                max_send_wr: 16,
                ..QpCap::default()
            },
            sq_sig_all: false,
        })
        .unwrap();
    let b = Side {
        node: 1,
        pd,
        scq: cq,
        rcq: cq,
        qpn,
        mr: a.mr,
    };
    bring_up(&mut net, &b, &a, &o, 1, 1);
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    let now = net.now;
    net.nodes[1]
        .ep
        .modify_qp(now, qpn, &attr, QpAttrMask::STATE)
        .unwrap();
    for i in 0..2 {
        net.nodes[1]
            .ep
            .post_send(now, qpn, softrdma_transport::SendWr::new(i, WrOpcode::Send))
            .unwrap();
    }
    net.flush();
    assert_eq!(
        net.nodes[1].events,
        [Event::QpAsync(qpn, AsyncEventType::QpLastWqeReached)]
    );
    let mut n = 0;
    net.nodes[1].ep.poll_cq(cq, 10, |_| n += 1).unwrap();
    assert_eq!(n, 2, "both WRs flushed");
}
