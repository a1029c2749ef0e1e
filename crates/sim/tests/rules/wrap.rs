//! PSN wrap-around at 0xFFFFFF -> 0 for SEND, WRITE and multi-packet READ,
//! including a loss and go-back-N across the wrap.

use crate::{Pair, rdma, sge, wr};
use softrdma_sim::DropRule;
use softrdma_sim::setup::PairOpts;
use softrdma_sim::trace::assert_lines;
use softrdma_transport::{Mtu, WrOpcode};

fn pair() -> Pair {
    Pair::new(PairOpts {
        mtu: Mtu::M256,
        psn_a: 0xFF_FFFE,
        ..PairOpts::default()
    })
}

#[test]
fn psn_wrap_send_with_loss_across_the_wrap() {
    let mut p = pair();
    let data = p.pattern(0, 0, 600, 1);
    p.recv(1, 1, 0x1000, 600);
    p.recv(1, 2, 0x2000, 8);
    p.net.drops.push(DropRule::psn(0, 0xFF_FFFF));
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 600)]));
    p.post(0, wr(2, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_SEND_FIRST psn=16777214 len=256",
            "0.000 0>1 RC_SEND_MIDDLE psn=16777215 len=256 DROPPED",
            "0.000 0>1 RC_SEND_LAST psn=0 A len=88",
            "0.000 0>1 RC_SEND_ONLY psn=1 A len=8",
            "5.000 1>0 RC_ACKNOWLEDGE psn=16777215 NAK-SEQ msn=0",
            "10.000 0>1 RC_SEND_MIDDLE psn=16777215 len=256",
            "10.000 0>1 RC_SEND_LAST psn=0 A len=88",
            "10.000 0>1 RC_SEND_ONLY psn=1 A len=8",
            "15.000 1>0 RC_ACKNOWLEDGE psn=1 ACK msn=2",
        ],
    );
    assert_eq!(p.swc(0), ["1 Send Success len=600", "2 Send Success len=8"]);
    assert_eq!(p.rwc(1), ["1 Recv Success len=600", "2 Recv Success len=8"]);
    assert_eq!(p.bytes(1, 0x1000, 600), data);
}

#[test]
fn psn_wrap_write() {
    let mut p = pair();
    let data = p.pattern(0, 0, 600, 2);
    let b = p.b;
    p.post(
        0,
        rdma(1, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 600)], &b, 0x1000),
    );
    p.post(
        0,
        rdma(2, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 8)], &b, 0x2000),
    );
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_RDMA_WRITE_FIRST psn=16777214 va=0x100002000 rkey=mr1 dlen=600 len=256",
            "0.000 0>1 RC_RDMA_WRITE_MIDDLE psn=16777215 len=256",
            "0.000 0>1 RC_RDMA_WRITE_LAST psn=0 A len=88",
            "0.000 0>1 RC_RDMA_WRITE_ONLY psn=1 A va=0x100003000 rkey=mr1 dlen=8 len=8",
            "5.000 1>0 RC_ACKNOWLEDGE psn=1 ACK msn=2",
        ],
    );
    assert_eq!(
        p.swc(0),
        ["1 RdmaWrite Success len=600", "2 RdmaWrite Success len=8"]
    );
    assert_eq!(p.bytes(1, 0x1000, 600), data);
}

/// A READ whose response PSNs wrap: one request consumes three PSNs, the
/// responses carry 0xFFFFFE, 0xFFFFFF, 0 and the next request uses PSN 1.
/// The middle response is lost: the READ is re-issued for the remaining
/// bytes only, at the PSN of the first missing response.
#[test]
fn psn_wrap_read_multi_packet() {
    let mut p = pair();
    let data = p.pattern(1, 0x1000, 600, 3);
    let b = p.b;
    p.net.drops.push(DropRule::psn(1, 0xFF_FFFF));
    p.post(
        0,
        rdma(
            1,
            WrOpcode::RdmaRead,
            vec![sge(&p.a, 0x4000, 600)],
            &b,
            0x1000,
        ),
    );
    p.post(
        0,
        rdma(
            2,
            WrOpcode::RdmaRead,
            vec![sge(&p.a, 0x5000, 8)],
            &b,
            0x1000,
        ),
    );
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_RDMA_READ_REQUEST psn=16777214 A va=0x100002000 rkey=mr1 dlen=600",
            "0.000 0>1 RC_RDMA_READ_REQUEST psn=1 A va=0x100002000 rkey=mr1 dlen=8",
            "5.000 1>0 RC_RDMA_READ_RESPONSE_FIRST psn=16777214 ACK msn=1 len=256",
            "5.000 1>0 RC_RDMA_READ_RESPONSE_MIDDLE psn=16777215 len=256 DROPPED",
            "5.000 1>0 RC_RDMA_READ_RESPONSE_LAST psn=0 ACK msn=1 len=88",
            "5.000 1>0 RC_RDMA_READ_RESPONSE_ONLY psn=1 ACK msn=2 len=8",
            // Responses past the gap are implicit NAKs: go back to the
            // missing PSN, asking for the remaining 344 bytes only.
            "10.000 0>1 RC_RDMA_READ_REQUEST psn=16777215 A va=0x100002100 rkey=mr1 dlen=344",
            "10.000 0>1 RC_RDMA_READ_REQUEST psn=1 A va=0x100002000 rkey=mr1 dlen=8",
            "15.000 1>0 RC_RDMA_READ_RESPONSE_FIRST psn=16777215 ACK msn=2 len=256",
            "15.000 1>0 RC_RDMA_READ_RESPONSE_LAST psn=0 ACK msn=2 len=88",
            "15.000 1>0 RC_RDMA_READ_RESPONSE_ONLY psn=1 ACK msn=2 len=8",
        ],
    );
    assert_eq!(
        p.swc(0),
        ["1 RdmaRead Success len=600", "2 RdmaRead Success len=8"]
    );
    assert_eq!(p.bytes(0, 0x4000, 600), data);
    assert_eq!(p.bytes(0, 0x5000, 8), data[..8]);
}
