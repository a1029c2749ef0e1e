//! Segmentation, AckReq, the send window and ACK coalescing.

use crate::{Pair, ack_req, rdma, sge, wr};
use softrdma_sim::setup::PairOpts;
use softrdma_sim::trace::assert_lines;
use softrdma_transport::{Mtu, WrOpcode};

/// A 2.5-MTU SEND, WRITE and READ at every MTU: FIRST/MIDDLE/LAST, full
/// packets until the last, RETH only on the first WRITE packet and on the
/// READ request, AckReq on the last packet, AETH on READ FIRST/LAST only.
#[test]
fn segmentation_at_each_mtu() {
    for mtu in [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096] {
        let m = mtu.bytes();
        let len = m * 5 / 2;
        let mut p = Pair::new(PairOpts {
            mtu,
            ..PairOpts::default()
        });
        let data = p.pattern(0, 0, len as usize, 3);
        p.recv(1, 7, 0, len);
        let b = p.b;
        p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, len)]));
        p.post(
            0,
            rdma(2, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, len)], &b, 0x40000),
        );
        p.post(
            0,
            rdma(
                3,
                WrOpcode::RdmaRead,
                vec![sge(&p.a, 0x80000, len)],
                &b,
                0x40000,
            ),
        );
        p.idle();
        let h = m / 2;
        assert_lines(
            &p.net.lines(),
            &[
                &format!("0.000 0>1 RC_SEND_FIRST psn=100 len={m}"),
                &format!("0.000 0>1 RC_SEND_MIDDLE psn=101 len={m}"),
                &format!("0.000 0>1 RC_SEND_LAST psn=102 A len={h}"),
                &format!(
                    "0.000 0>1 RC_RDMA_WRITE_FIRST psn=103 va=0x100041000 rkey=mr1 dlen={len} len={m}"
                ),
                &format!("0.000 0>1 RC_RDMA_WRITE_MIDDLE psn=104 len={m}"),
                &format!("0.000 0>1 RC_RDMA_WRITE_LAST psn=105 A len={h}"),
                &format!(
                    "0.000 0>1 RC_RDMA_READ_REQUEST psn=106 A va=0x100041000 rkey=mr1 dlen={len}"
                ),
                // The responder answers in PSN order; the two ACKs before the
                // READ response coalesce into one for the WRITE's last PSN.
                "5.000 1>0 RC_ACKNOWLEDGE psn=105 ACK msn=2",
                &format!("5.000 1>0 RC_RDMA_READ_RESPONSE_FIRST psn=106 ACK msn=3 len={m}"),
                &format!("5.000 1>0 RC_RDMA_READ_RESPONSE_MIDDLE psn=107 len={m}"),
                &format!("5.000 1>0 RC_RDMA_READ_RESPONSE_LAST psn=108 ACK msn=3 len={h}"),
            ],
        );
        assert_eq!(
            p.swc(0),
            [
                format!("1 Send Success len={len}"),
                format!("2 RdmaWrite Success len={len}"),
                format!("3 RdmaRead Success len={len}"),
            ]
        );
        assert_eq!(p.rwc(1), [format!("7 Recv Success len={len}")]);
        assert_eq!(p.bytes(1, 0, len as usize), data);
        assert_eq!(p.bytes(1, 0x40000, len as usize), data);
        assert_eq!(p.bytes(0, 0x80000, len as usize), data);
    }
}

/// A message of exactly one MTU is an ONLY packet; one byte more makes FIRST+LAST.
#[test]
fn segmentation_boundaries() {
    let mut p = Pair::new(PairOpts {
        mtu: Mtu::M256,
        ..PairOpts::default()
    });
    p.recv(1, 1, 0, 4096);
    p.recv(1, 2, 4096, 4096);
    p.recv(1, 3, 8192, 4096);
    p.post(0, wr(1, WrOpcode::Send, vec![]));
    p.post(0, wr(2, WrOpcode::Send, vec![sge(&p.a, 0, 256)]));
    p.post(0, wr(3, WrOpcode::Send, vec![sge(&p.a, 0, 257)]));
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_SEND_ONLY psn=100 A len=0",
            "0.000 0>1 RC_SEND_ONLY psn=101 A len=256",
            "0.000 0>1 RC_SEND_FIRST psn=102 len=256",
            "0.000 0>1 RC_SEND_LAST psn=103 A len=1",
            "5.000 1>0 RC_ACKNOWLEDGE psn=103 ACK msn=3",
        ],
    );
    assert_eq!(
        p.rwc(1),
        [
            "1 Recv Success len=0",
            "2 Recv Success len=256",
            "3 Recv Success len=257"
        ]
    );
}

/// A 200-packet SEND: AckReq on the packet after 64 without one (indices 64,
/// 129, 194) and on the last; the requester stops at 128 unacknowledged PSNs
/// and resumes when an ACK opens the window.
#[test]
fn ack_req_every_64_and_window_128() {
    let mut p = Pair::new(PairOpts {
        mtu: Mtu::M256,
        ..PairOpts::default()
    });
    let data = p.pattern(0, 0, 200 * 256, 9);
    p.recv(1, 1, 0x10000, 200 * 256);
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 200 * 256)]));
    p.idle();
    let lines = p.net.lines();
    assert_eq!(lines.len(), 200 + 3);
    assert_lines(
        &ack_req(&lines),
        &[
            "0.000 0>1 RC_SEND_MIDDLE psn=164 A len=256",
            "10.000 0>1 RC_SEND_MIDDLE psn=229 A len=256",
            "20.000 0>1 RC_SEND_MIDDLE psn=294 A len=256",
            "20.000 0>1 RC_SEND_LAST psn=299 A len=256",
        ],
    );
    // The window: 128 packets at t=0 (PSN 100..227); the ACK of 164 lets
    // PSNs up to 292 go; the ACK of 229 the rest.
    let sent_at = |t: &str| lines.iter().filter(|l| l.starts_with(t)).count();
    assert_eq!(sent_at("0.000 0>1"), 128);
    assert_eq!(sent_at("10.000 0>1"), 65);
    assert_eq!(sent_at("20.000 0>1"), 7);
    let acks: Vec<String> = lines
        .iter()
        .filter(|l| l.contains("1>0"))
        .cloned()
        .collect();
    assert_lines(
        &acks,
        &[
            "5.000 1>0 RC_ACKNOWLEDGE psn=164 ACK msn=0",
            "15.000 1>0 RC_ACKNOWLEDGE psn=229 ACK msn=0",
            // 294 and 299 arrive together: one coalesced ACK.
            "25.000 1>0 RC_ACKNOWLEDGE psn=299 ACK msn=1",
        ],
    );
    assert_eq!(p.swc(0), ["1 Send Success len=51200"]);
    assert_eq!(p.bytes(1, 0x10000, 200 * 256), data);
}

/// Requests that arrive together are acknowledged once, with the last PSN;
/// one that arrives later gets its own ACK.
#[test]
fn ack_coalescing() {
    let mut p = Pair::new(PairOpts::default());
    let b = p.b;
    for i in 0..4 {
        p.post(
            0,
            rdma(i, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 16)], &b, 64 * i),
        );
    }
    p.net.run_to(softrdma_transport::Instant::from_micros(2));
    p.post(
        0,
        rdma(9, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 16)], &b, 1024),
    );
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=100 A va=0x100001000 rkey=mr1 dlen=16 len=16",
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=101 A va=0x100001040 rkey=mr1 dlen=16 len=16",
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=102 A va=0x100001080 rkey=mr1 dlen=16 len=16",
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=103 A va=0x1000010c0 rkey=mr1 dlen=16 len=16",
            "2.000 0>1 RC_RDMA_WRITE_ONLY psn=104 A va=0x100001400 rkey=mr1 dlen=16 len=16",
            "5.000 1>0 RC_ACKNOWLEDGE psn=103 ACK msn=4",
            "7.000 1>0 RC_ACKNOWLEDGE psn=104 ACK msn=5",
        ],
    );
    assert_eq!(p.swc(0).len(), 5);
}
