//! Sequence NAKs, go-back-N (on NAK and on timeout), retry exhaustion and RNR.

use crate::{Pair, rdma, sge, wr};
use softrdma_sim::DropRule;
use softrdma_sim::setup::PairOpts;
use softrdma_sim::trace::assert_lines;
use softrdma_transport::{Instant, QpState, WrOpcode};

fn writes(p: &mut Pair, ids: std::ops::Range<u64>) {
    let b = p.b;
    for i in ids {
        p.post(
            0,
            rdma(i, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 16)], &b, 16 * i),
        );
    }
}

/// A gap gets exactly one sequence NAK carrying the expected PSN; later
/// out-of-order packets are dropped silently; the NAK implicitly ACKs what
/// came before and the requester goes back to the NAKed PSN. A second gap,
/// after the expected PSN arrived, gets its own NAK.
#[test]
fn one_sequence_nak_per_gap_and_go_back_n() {
    let mut p = Pair::new(PairOpts::default());
    p.net.drops.push(DropRule::psn(0, 101));
    writes(&mut p, 0..5);
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=100 A va=0x100001000 rkey=mr1 dlen=16 len=16",
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=101 A va=0x100001010 rkey=mr1 dlen=16 len=16 DROPPED",
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=102 A va=0x100001020 rkey=mr1 dlen=16 len=16",
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=103 A va=0x100001030 rkey=mr1 dlen=16 len=16",
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=104 A va=0x100001040 rkey=mr1 dlen=16 len=16",
            "5.000 1>0 RC_ACKNOWLEDGE psn=100 ACK msn=1",
            "5.000 1>0 RC_ACKNOWLEDGE psn=101 NAK-SEQ msn=1",
            "10.000 0>1 RC_RDMA_WRITE_ONLY psn=101 A va=0x100001010 rkey=mr1 dlen=16 len=16",
            "10.000 0>1 RC_RDMA_WRITE_ONLY psn=102 A va=0x100001020 rkey=mr1 dlen=16 len=16",
            "10.000 0>1 RC_RDMA_WRITE_ONLY psn=103 A va=0x100001030 rkey=mr1 dlen=16 len=16",
            "10.000 0>1 RC_RDMA_WRITE_ONLY psn=104 A va=0x100001040 rkey=mr1 dlen=16 len=16",
            "15.000 1>0 RC_ACKNOWLEDGE psn=104 ACK msn=5",
        ],
    );
    assert_eq!(p.swc(0).len(), 5);
    // A second gap.
    p.net.drops.push(DropRule::psn(0, 106));
    writes(&mut p, 5..8);
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "20.000 0>1 RC_RDMA_WRITE_ONLY psn=105 A va=0x100001050 rkey=mr1 dlen=16 len=16",
            "20.000 0>1 RC_RDMA_WRITE_ONLY psn=106 A va=0x100001060 rkey=mr1 dlen=16 len=16 DROPPED",
            "20.000 0>1 RC_RDMA_WRITE_ONLY psn=107 A va=0x100001070 rkey=mr1 dlen=16 len=16",
            "25.000 1>0 RC_ACKNOWLEDGE psn=105 ACK msn=6",
            "25.000 1>0 RC_ACKNOWLEDGE psn=106 NAK-SEQ msn=6",
            "30.000 0>1 RC_RDMA_WRITE_ONLY psn=106 A va=0x100001060 rkey=mr1 dlen=16 len=16",
            "30.000 0>1 RC_RDMA_WRITE_ONLY psn=107 A va=0x100001070 rkey=mr1 dlen=16 len=16",
            "35.000 1>0 RC_ACKNOWLEDGE psn=107 ACK msn=8",
        ],
    );
    assert_eq!(p.swc(0).len(), 3);
    assert_eq!(p.net.nodes[1].ep.stats().tx_nak_seq, 2);
}

/// With the last packet (the only one asking for an ACK) lost, nothing comes
/// back; the retransmit timer fires exactly 4.096 µs × 2^timeout after the
/// first packet and the whole message is resent. The responder re-ACKs the
/// duplicates and ACKs the new packet in one coalesced ACK.
#[test]
fn go_back_n_on_timeout_exact_value() {
    for (timeout, at, back) in [
        (10u8, "4194.304", "4199.304"),
        (14, "67108.864", "67113.864"),
    ] {
        let mut p = Pair::new(PairOpts {
            timeout,
            mtu: softrdma_transport::Mtu::M256,
            ..PairOpts::default()
        });
        p.recv(1, 1, 0, 1024);
        p.net.drops.push(DropRule::psn(0, 102));
        p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 600)]));
        p.idle();
        assert_lines(
            &p.net.lines(),
            &[
                "0.000 0>1 RC_SEND_FIRST psn=100 len=256",
                "0.000 0>1 RC_SEND_MIDDLE psn=101 len=256",
                "0.000 0>1 RC_SEND_LAST psn=102 A len=88 DROPPED",
                &format!("{at} 0>1 RC_SEND_FIRST psn=100 len=256"),
                &format!("{at} 0>1 RC_SEND_MIDDLE psn=101 len=256"),
                &format!("{at} 0>1 RC_SEND_LAST psn=102 A len=88"),
                &format!("{back} 1>0 RC_ACKNOWLEDGE psn=102 ACK msn=1"),
            ],
        );
        assert_eq!(p.swc(0), ["1 Send Success len=600"]);
        assert_eq!(p.rwc(1), ["1 Recv Success len=600"]);
        assert_eq!(p.net.nodes[0].ep.stats().timeouts, 1);
    }
}

/// retry_cnt = 2 against a dead link: the first transmission, exactly two
/// retries one timeout apart, then RETRY_EXC_ERR at the third expiry; every
/// other send WR and every posted receive flushes, and the QP is in ERR.
#[test]
fn retry_exhaustion_after_exactly_retry_cnt_retries() {
    let mut p = Pair::new(PairOpts {
        retry_cnt: 2,
        ..PairOpts::default()
    });
    p.net.drops.push(DropRule::all_from(0));
    p.recv(0, 50, 0, 64);
    p.recv(0, 51, 64, 64);
    writes(&mut p, 1..2);
    let mut s = wr(2, WrOpcode::Send, vec![sge(&p.a, 0, 8)]);
    s.flags = softrdma_transport::SendFlags::EMPTY; // unsignaled: flushed anyway
    p.post(0, s);
    p.idle();
    let d = " DROPPED";
    let w = "RC_RDMA_WRITE_ONLY psn=100 A va=0x100001010 rkey=mr1 dlen=16 len=16";
    let s = "RC_SEND_ONLY psn=101 A len=8";
    assert_lines(
        &p.net.lines(),
        &[
            &format!("0.000 0>1 {w}{d}"),
            &format!("0.000 0>1 {s}{d}"),
            &format!("4194.304 0>1 {w}{d}"),
            &format!("4194.304 0>1 {s}{d}"),
            &format!("8388.608 0>1 {w}{d}"),
            &format!("8388.608 0>1 {s}{d}"),
        ],
    );
    assert_eq!(p.net.now, Instant::from_nanos(12_582_912));
    assert_eq!(
        p.swc(0),
        ["1 RdmaWrite RetryExcErr len=16", "2 Send WrFlushErr len=8"]
    );
    assert_eq!(
        p.rwc(0),
        ["50 Recv WrFlushErr len=0", "51 Recv WrFlushErr len=0"]
    );
    assert_eq!(p.state(0), QpState::Err);
    assert_eq!(p.net.nodes[0].ep.stats().timeouts, 3);
}

/// No receive posted: RNR NAK with the offending PSN and the responder's
/// min_rnr_timer code (14 = 1.28 ms); the requester resends exactly 1.28 ms
/// after the NAK arrived, and succeeds once a receive is posted.
#[test]
fn rnr_nak_waits_the_table_time() {
    let mut p = Pair::new(PairOpts {
        min_rnr_timer: 14,
        ..PairOpts::default()
    });
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.net.run_to(Instant::from_micros(1000));
    p.recv(1, 9, 0, 8);
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_SEND_ONLY psn=100 A len=8",
            "5.000 1>0 RC_ACKNOWLEDGE psn=100 RNR(timer=14) msn=0",
            "1290.000 0>1 RC_SEND_ONLY psn=100 A len=8",
            "1295.000 1>0 RC_ACKNOWLEDGE psn=100 ACK msn=1",
        ],
    );
    assert_eq!(p.swc(0), ["1 Send Success len=8"]);
    assert_eq!(p.rwc(1), ["9 Recv Success len=8"]);
}

/// With an RNR hold (`Config::rnr_hold_ns`, the engine's default), a SEND
/// that finds no receive waits for one: the receive posted 300 µs later
/// draws a sequence NAK at the held PSN and the requester resends at once —
/// no RNR NAK, so a sender that allows no RNR retry (fio's rdma engine)
/// succeeds. The WRITE pipelined behind it is dropped silently and resent.
#[test]
fn rnr_hold_then_receive_resends_at_once() {
    let mut p = Pair::new(PairOpts {
        min_rnr_timer: 14,
        rnr_retry: 0,
        ..PairOpts::default()
    });
    p.net.nodes[1].ep.set_rnr_hold_ns(2_000_000);
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    writes(&mut p, 2..3);
    p.net.run_to(Instant::from_micros(300));
    p.recv(1, 9, 0, 8);
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_SEND_ONLY psn=100 A len=8",
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=101 A va=0x100001020 rkey=mr1 dlen=16 len=16",
            "300.000 1>0 RC_ACKNOWLEDGE psn=100 NAK-SEQ msn=0",
            "305.000 0>1 RC_SEND_ONLY psn=100 A len=8",
            "305.000 0>1 RC_RDMA_WRITE_ONLY psn=101 A va=0x100001020 rkey=mr1 dlen=16 len=16",
            "310.000 1>0 RC_ACKNOWLEDGE psn=101 ACK msn=2",
        ],
    );
    assert_eq!(
        p.swc(0),
        ["1 Send Success len=8", "2 RdmaWrite Success len=16"]
    );
    assert_eq!(p.rwc(1), ["9 Recv Success len=8"]);
    assert_eq!(p.net.nodes[1].ep.stats().tx_rnr_nak, 0);
}

/// A hold that ends with no receive posted sends the RNR NAK then, and the
/// RNR rules apply as without a hold (rnr_retry = 0: RNR_RETRY_EXC_ERR).
#[test]
fn rnr_hold_expires_into_the_rnr_nak() {
    let mut p = Pair::new(PairOpts {
        min_rnr_timer: 14,
        rnr_retry: 0,
        ..PairOpts::default()
    });
    p.net.nodes[1].ep.set_rnr_hold_ns(2_000_000);
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_SEND_ONLY psn=100 A len=8",
            "2005.000 1>0 RC_ACKNOWLEDGE psn=100 RNR(timer=14) msn=0",
        ],
    );
    assert_eq!(p.swc(0), ["1 Send RnrRetryExcErr len=8"]);
    assert_eq!(p.net.nodes[1].ep.stats().tx_rnr_nak, 1);
}

/// rnr_retry = 2: one transmission and two RNR retries, then RNR_RETRY_EXC_ERR.
#[test]
fn rnr_retry_exhaustion() {
    let mut p = Pair::new(PairOpts {
        min_rnr_timer: 14,
        rnr_retry: 2,
        ..PairOpts::default()
    });
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.post(0, wr(2, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_SEND_ONLY psn=100 A len=8",
            "0.000 0>1 RC_SEND_ONLY psn=101 A len=8",
            "5.000 1>0 RC_ACKNOWLEDGE psn=100 RNR(timer=14) msn=0",
            "1290.000 0>1 RC_SEND_ONLY psn=100 A len=8",
            "1290.000 0>1 RC_SEND_ONLY psn=101 A len=8",
            "1295.000 1>0 RC_ACKNOWLEDGE psn=100 RNR(timer=14) msn=0",
            "2580.000 0>1 RC_SEND_ONLY psn=100 A len=8",
            "2580.000 0>1 RC_SEND_ONLY psn=101 A len=8",
            "2585.000 1>0 RC_ACKNOWLEDGE psn=100 RNR(timer=14) msn=0",
        ],
    );
    assert_eq!(
        p.swc(0),
        ["1 Send RnrRetryExcErr len=8", "2 Send WrFlushErr len=8"]
    );
    assert_eq!(p.state(0), QpState::Err);
    // The responder knows nothing of it.
    assert_eq!(p.state(1), QpState::Rts);
}

/// rnr_retry = 7 is infinite: 30 RNR NAKs, then the receive arrives and the
/// SEND and the WRITE queued behind it succeed. The RNR NAK tells the
/// requester where to resume, so the packets behind the NAKed one draw no
/// sequence NAKs and use up no transport retries (retry_cnt = 1 here).
#[test]
fn rnr_retry_7_is_infinite() {
    let mut p = Pair::new(PairOpts {
        min_rnr_timer: 1,
        rnr_retry: 7,
        retry_cnt: 1,
        ..PairOpts::default()
    });
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    writes(&mut p, 2..3);
    // Each cycle: NAK lands 10 µs after the send, resend 10 µs later.
    p.net.run_to(Instant::from_micros(30 * 20 - 1));
    p.recv(1, 9, 0, 8);
    p.idle();
    let lines = p.net.lines();
    let rnr = lines.iter().filter(|l| l.contains("RNR(timer=1)")).count();
    assert_eq!(rnr, 30);
    assert!(!lines.iter().any(|l| l.contains("NAK-SEQ")), "{lines:#?}");
    assert_eq!(
        p.swc(0),
        ["1 Send Success len=8", "2 RdmaWrite Success len=16"]
    );
    assert_eq!(p.net.nodes[0].ep.stats().rx_rnr_nak, 30);
}

/// Progress resets the retry counter: with retry_cnt = 1,
/// two losses far apart are each recovered by the one retry allowed.
#[test]
fn progress_resets_the_retry_counter() {
    let mut p = Pair::new(PairOpts {
        retry_cnt: 1,
        ..PairOpts::default()
    });
    p.net.drops.push(DropRule::psn(0, 101));
    p.net.drops.push(DropRule::psn(0, 104));
    writes(&mut p, 0..3);
    p.idle();
    writes(&mut p, 3..6);
    p.idle();
    assert_eq!(p.swc(0).len(), 6);
    assert_eq!(p.state(0), QpState::Rts);
    // Two losses in a row at the same PSN exhaust it.
    p.net.drops.push(DropRule::psn(0, 107).times(2));
    writes(&mut p, 6..9);
    p.idle();
    assert_eq!(
        p.swc(0),
        [
            "6 RdmaWrite Success len=16",
            "7 RdmaWrite RetryExcErr len=16",
            "8 RdmaWrite WrFlushErr len=16"
        ]
    );
}
