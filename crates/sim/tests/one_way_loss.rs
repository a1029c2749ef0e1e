//! 30 % loss of everything one node sends (its READ responses, atomic ACKs
//! and ACKs), the op mix of `fault_peer` from the other node: SEND, RDMA
//! WRITE, WRITE with immediate, a 16-packet RDMA READ, compare-and-swap and
//! fetch-and-add, over 1,000 seeds.
//!
//! With `retry_cnt = 7` a count (IBTA), a request fails once its first
//! missing response is lost eight times in a row (0.3^8 per try chain, a
//! READ opens one chain per lost response): a few exchanges in a thousand
//! end with RETRY_EXC_ERR, which is what the namespace tests of
//! `crates/softrdma/tests/faults.rs` and `crates/compat-tests/tests/faults.rs`
//! meet now and then on a real network. This pins the rate for these seeds
//! and checks every failure is that one: RETRY_EXC_ERR on one WR, flushes
//! after it, success before it, nothing left hanging.

use softrdma_sim::setup::{PairOpts, connect};
use softrdma_sim::{Faults, Net};
use softrdma_transport::{Instant, RecvWr, SendFlags, SendWr, Sge, WcStatus, WrOpcode};
use std::time::Duration;

const OPS: [WrOpcode; 6] = [
    WrOpcode::Send,
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::RdmaRead,
    WrOpcode::AtomicCmpAndSwp,
    WrOpcode::AtomicFetchAndAdd,
];

/// Posts the op mix from node 0 with 30 % loss of node 1's packets and
/// returns node 0's completions (status by WR index) once all arrived.
fn exchange(seed: u64, size: u64) -> Vec<WcStatus> {
    let mut net = Net::new(2, seed);
    net.faults = Faults {
        loss: 0.3,
        ..Faults::default()
    };
    net.loss_only_from = Some(1);
    let o = PairOpts {
        buf_len: 1 << 20,
        ..PairOpts::default()
    };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let now = net.now;
    for i in 0..2 {
        let sge = Sge {
            addr: b.mr.iova + i * size,
            length: size as u32,
            lkey: b.mr.lkey,
        };
        let wr = RecvWr {
            wr_id: i,
            sgl: [sge].into(),
        };
        net.nodes[1].ep.post_recv(now, b.qpn, wr).unwrap();
    }
    for (i, op) in (0u64..).zip(OPS) {
        let atomic = matches!(op, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd);
        let mut w = SendWr::new(i, op);
        w.flags = SendFlags::SIGNALED;
        w.sgl = [Sge {
            addr: a.mr.iova + i * size,
            length: if atomic { 8 } else { size as u32 },
            lkey: a.mr.lkey,
        }]
        .into();
        w.remote_addr = b.mr.iova + 2 * size + if atomic { 8 * i } else { i * size };
        w.rkey = b.mr.rkey;
        net.nodes[0].ep.post_send(now, a.qpn, w).unwrap();
    }
    let mut got = Vec::new();
    let limit = Instant::ZERO + Duration::from_secs(60);
    let done = net.run_until(limit, |n| {
        let _ = n.nodes[0].ep.poll_cq(a.scq, 16, |wc| {
            assert_eq!(wc.wr_id, got.len() as u64, "completions in order");
            got.push(wc.status);
        });
        got.len() == OPS.len()
    });
    assert!(done, "seed {seed}: hung with {got:?}");
    got
}

#[test]
fn thirty_percent_loss_of_responses_recovers_or_exhausts_retry_cnt() {
    let mut failed = Vec::new();
    for seed in 1..=1000 {
        let got = exchange(seed, 16 * 1024);
        let Some(k) = got.iter().position(|s| *s != WcStatus::Success) else {
            continue;
        };
        assert_eq!(got[k], WcStatus::RetryExcErr, "seed {seed}: {got:?}");
        assert!(
            got[k + 1..].iter().all(|s| *s == WcStatus::WrFlushErr),
            "seed {seed}: {got:?}"
        );
        failed.push(seed);
    }
    println!(
        "RETRY_EXC_ERR in {} of 1000 exchanges: {failed:?}",
        failed.len()
    );
    // Deterministic for these seeds; more means recovery got worse.
    assert!(failed.len() <= 3, "{failed:?}");
}
