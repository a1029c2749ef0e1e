//! Duplicate requests: SEND/WRITE re-ACKed and never re-executed, READ
//! re-executed against current memory, atomics replayed from the saved value.

use crate::{Pair, atomic, rdma, sge, u64_at, wr};
use softrdma_sim::DropRule;
use softrdma_sim::setup::PairOpts;
use softrdma_sim::trace::assert_lines;
use softrdma_transport::{Instant, WrOpcode};
use softrdma_wire::{AtomicEth, Bth, Headers, Opcode, Psn, Reth};

/// The ACK of a SEND is lost; the retransmitted SEND is a duplicate: ACKed
/// with PSN = expected - 1 (C9-105), the receive completes once.
#[test]
fn duplicate_send_is_reacked_not_redelivered() {
    let mut p = Pair::new(PairOpts::default());
    p.recv(1, 1, 0, 64);
    p.recv(1, 2, 64, 64);
    p.net
        .drops
        .push(DropRule::opcode(1, Opcode::RC_ACKNOWLEDGE));
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_SEND_ONLY psn=100 A len=8",
            "5.000 1>0 RC_ACKNOWLEDGE psn=100 ACK msn=1 DROPPED",
            "4194.304 0>1 RC_SEND_ONLY psn=100 A len=8",
            "4199.304 1>0 RC_ACKNOWLEDGE psn=100 ACK msn=1",
        ],
    );
    assert_eq!(p.swc(0), ["1 Send Success len=8"]);
    assert_eq!(p.rwc(1), ["1 Recv Success len=8"]);
    assert_eq!(p.net.nodes[1].ep.stats().rx_duplicates, 1);
}

/// The READ response is lost and the application changes the memory in the
/// meantime: the duplicate READ is executed again and returns the new bytes.
#[test]
fn duplicate_read_is_reexecuted() {
    let mut p = Pair::new(PairOpts::default());
    p.pattern(1, 0, 16, 1);
    let b = p.b;
    p.net.drops.push(DropRule::psn(1, 100));
    p.post(
        0,
        rdma(1, WrOpcode::RdmaRead, vec![sge(&p.a, 0x100, 16)], &b, 0),
    );
    p.net.run_to(Instant::from_micros(100));
    let new = p.pattern(1, 0, 16, 2);
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_RDMA_READ_REQUEST psn=100 A va=0x100001000 rkey=mr1 dlen=16",
            "5.000 1>0 RC_RDMA_READ_RESPONSE_ONLY psn=100 ACK msn=1 len=16 DROPPED",
            "4194.304 0>1 RC_RDMA_READ_REQUEST psn=100 A va=0x100001000 rkey=mr1 dlen=16",
            "4199.304 1>0 RC_RDMA_READ_RESPONSE_ONLY psn=100 ACK msn=1 len=16",
        ],
    );
    assert_eq!(p.swc(0), ["1 RdmaRead Success len=16"]);
    assert_eq!(p.bytes(0, 0x100, 16), new);
}

/// The ATOMIC ACK is lost and the application stores 7 at the address in the
/// meantime: the duplicate is answered from the saved original value (1000),
/// not executed again (which would return 7 and leave 12).
#[test]
fn duplicate_atomic_is_replayed_never_reexecuted() {
    for op in [WrOpcode::AtomicFetchAndAdd, WrOpcode::AtomicCmpAndSwp] {
        let mut p = Pair::new(PairOpts::default());
        let addr = p.b.mr.iova + 0x100;
        p.net.nodes[1].mem.fill(addr, &1000u64.to_ne_bytes());
        let b = p.b;
        p.net.drops.push(DropRule::psn(1, 100));
        let mut w = atomic(1, op, sge(&p.a, 0x200, 8), &b, 0x100);
        w.compare_add = if op == WrOpcode::AtomicFetchAndAdd {
            5
        } else {
            1000
        };
        w.swap = 2000;
        p.post(0, w);
        p.net.run_to(Instant::from_micros(100));
        p.net.nodes[1].mem.fill(addr, &7u64.to_ne_bytes());
        p.idle();
        let req = if op == WrOpcode::AtomicFetchAndAdd {
            "RC_FETCH_ADD psn=100 A va=0x100001100 rkey=mr1 swap_add=5 cmp=0"
        } else {
            "RC_COMPARE_SWAP psn=100 A va=0x100001100 rkey=mr1 swap_add=2000 cmp=1000"
        };
        assert_lines(
            &p.net.lines(),
            &[
                &format!("0.000 0>1 {req}"),
                "5.000 1>0 RC_ATOMIC_ACKNOWLEDGE psn=100 ACK msn=1 orig=1000 DROPPED",
                &format!("4194.304 0>1 {req}"),
                "4199.304 1>0 RC_ATOMIC_ACKNOWLEDGE psn=100 ACK msn=1 orig=1000",
            ],
        );
        assert_eq!(u64_at(&p, 0, 0x200), 1000);
        assert_eq!(u64_at(&p, 1, 0x100), 7);
        assert_eq!(p.swc(0).len(), 1);
    }
}

/// With max_dest_rd_atomic = 1 the responder remembers only the newest
/// READ: a duplicate of an older one finds no slot and is dropped silently
/// (class D); a duplicate of the newest is executed again.
#[test]
fn duplicate_read_without_resource_is_dropped() {
    let mut p = Pair::new(PairOpts {
        rd_atomic: 1,
        ..PairOpts::default()
    });
    let b = p.b;
    for i in 0..2 {
        p.post(
            0,
            rdma(i, WrOpcode::RdmaRead, vec![sge(&p.a, 0x100, 16)], &b, 0),
        );
        p.idle();
    }
    assert_eq!(p.swc(0).len(), 2);
    p.net.lines();
    for psn in [100, 101] {
        let mut h = Headers::new(Bth::new(Opcode::RC_RDMA_READ_REQUEST, b.qpn, Psn::new(psn)));
        h.bth.ack_req = true;
        h.reth = Some(Reth {
            va: b.mr.iova,
            rkey: b.mr.rkey,
            dma_len: 16,
        });
        p.net.inject(0, 1, &h, &[]);
    }
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "20.000 0>1 RC_RDMA_READ_REQUEST psn=100 A va=0x100001000 rkey=mr1 dlen=16",
            "20.000 0>1 RC_RDMA_READ_REQUEST psn=101 A va=0x100001000 rkey=mr1 dlen=16",
            "25.000 1>0 RC_RDMA_READ_RESPONSE_ONLY psn=101 ACK msn=2 len=16",
        ],
    );
    assert_eq!(p.net.nodes[1].ep.stats().rx_duplicates, 2);
    assert_eq!(p.net.nodes[1].ep.stats().drop_out_of_seq, 1);
    // The requester finished long ago: the response is stale to it.
    assert_eq!(p.net.nodes[0].ep.stats().drop_out_of_seq, 1);
    assert!(p.swc(0).is_empty());
}

/// rxe's READ/atomic depth, 128 (`max_rd_atomic` = `max_dest_rd_atomic` =
/// the device's `max_qp_rd_atom`): 128 atomics leave at once, the 129th and
/// 130th wait for credits; the responder keeps all 128 newest results, so a
/// duplicate of the oldest one it still holds (PSN 102) is replayed with its
/// saved value, while PSN 101, pushed out by the 129th, is dropped.
#[test]
fn rxe_depth_128_outstanding_atomics() {
    let mut p = Pair::new(PairOpts {
        rd_atomic: 128,
        ..PairOpts::default()
    });
    let b = p.b;
    for i in 0..130u64 {
        let mut w = atomic(
            i,
            WrOpcode::AtomicFetchAndAdd,
            sge(&p.a, 0x1000 + 8 * i, 8),
            &b,
            0x100,
        );
        w.compare_add = 1;
        p.post(0, w);
    }
    p.idle();
    let lines = p.net.lines();
    let at = |t: &str, op: &str| {
        lines
            .iter()
            .filter(|l| l.starts_with(&format!("{t} ")) && l.contains(op))
            .count()
    };
    assert_eq!(at("0.000", "0>1 RC_FETCH_ADD"), 128, "{lines:#?}");
    assert_eq!(at("5.000", "1>0 RC_ATOMIC_ACKNOWLEDGE"), 128, "{lines:#?}");
    assert_eq!(at("10.000", "0>1 RC_FETCH_ADD"), 2, "{lines:#?}");
    assert_eq!(at("15.000", "1>0 RC_ATOMIC_ACKNOWLEDGE"), 2, "{lines:#?}");
    assert_eq!(lines.len(), 260, "{lines:#?}");
    assert_eq!(p.swc(0).len(), 130);
    assert_eq!(u64_at(&p, 1, 0x100), 130);
    for i in 0..130u64 {
        assert_eq!(u64_at(&p, 0, 0x1000 + 8 * i), i, "result of atomic {i}");
    }

    for psn in [102, 101] {
        let mut h = Headers::new(Bth::new(Opcode::RC_FETCH_ADD, b.qpn, Psn::new(psn)));
        h.bth.ack_req = true;
        h.atomic_eth = Some(AtomicEth {
            va: b.mr.iova + 0x100,
            rkey: b.mr.rkey,
            swap_add: 1,
            compare: 0,
        });
        p.net.inject(0, 1, &h, &[]);
    }
    p.idle();
    let lines = p.net.lines();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[2].ends_with("1>0 RC_ATOMIC_ACKNOWLEDGE psn=102 ACK msn=130 orig=2"),
        "{lines:#?}"
    );
    assert_eq!(u64_at(&p, 1, 0x100), 130, "a duplicate executed again");
    assert_eq!(p.net.nodes[1].ep.stats().rx_duplicates, 2);
    assert_eq!(p.net.nodes[1].ep.stats().drop_out_of_seq, 1);
}
