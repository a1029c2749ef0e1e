//! RC under loss, duplication and reordering: every op completes once, bytes exact.

use softrdma_sim::setup::{PairOpts, connect};
use softrdma_sim::{Faults, Net};
use softrdma_transport::{Instant, RecvWr, SendFlags, SendWr, Sge, WcStatus, WrOpcode};
use std::time::Duration;

#[test]
fn rc_mixed_under_faults() {
    for seed in 1..=8u64 {
        let mut net = Net::new(2, seed);
        net.faults = Faults {
            loss: 0.1,
            duplicate: 0.05,
            reorder: 0.1,
            reorder_delay: Duration::from_micros(200),
            bitflip: 0.02,
            latency: Duration::from_micros(5),
        };
        let o = PairOpts {
            buf_len: 4 << 20,
            ..PairOpts::default()
        };
        let (a, b) = connect(&mut net, 0, 1, &o);
        let pattern: Vec<u8> = (0..65536u32)
            .map(|i| (i ^ (i >> 8) ^ seed as u32) as u8)
            .collect();
        net.nodes[0].mem.fill(a.mr.iova, &pattern);
        let n = 200u64;
        let now = net.now;
        for i in 0..n {
            net.nodes[1]
                .ep
                .post_recv(
                    now,
                    b.qpn,
                    RecvWr {
                        wr_id: i,
                        sgl: [Sge {
                            addr: b.mr.iova + 100_000 + i * 3000,
                            length: 3000,
                            lkey: b.mr.lkey,
                        }]
                        .into(),
                    },
                )
                .unwrap();
        }
        let mut expect = Vec::new();
        for i in 0..n {
            let len = 1 + (i * 37 % 2999) as u32;
            let mut wr = match i % 4 {
                0 => SendWr::new(i, WrOpcode::Send),
                1 => {
                    let mut w = SendWr::new(i, WrOpcode::RdmaWrite);
                    w.remote_addr = b.mr.iova + 700_000 + i * 3000;
                    w.rkey = b.mr.rkey;
                    w
                }
                2 => {
                    let mut w = SendWr::new(i, WrOpcode::RdmaRead);
                    w.remote_addr = b.mr.iova + 700_000 + (i - 1) * 3000;
                    w.rkey = b.mr.rkey;
                    w
                }
                _ => {
                    let mut w = SendWr::new(i, WrOpcode::AtomicFetchAndAdd);
                    w.remote_addr = b.mr.iova + 8;
                    w.rkey = b.mr.rkey;
                    w.compare_add = 1;
                    w
                }
            };
            wr.flags = SendFlags::SIGNALED;
            let (addr, l) = match i % 4 {
                2 => (
                    a.mr.iova + 200_000 + i * 3000,
                    1 + ((i - 1) * 37 % 2999) as u32,
                ),
                3 => (a.mr.iova + 900_000 + i * 8, 8),
                _ => (a.mr.iova + i * 100, len),
            };
            wr.sgl = [Sge {
                addr,
                length: l,
                lkey: a.mr.lkey,
            }]
            .into();
            expect.push(i);
            net.nodes[0].ep.post_send(now, a.qpn, wr).unwrap();
        }
        net.record();
        let done = net.run_until(Instant::from_millis(60_000), |net| {
            net.nodes[0].ep.cq_len(a.scq) == n as usize
        });
        let mut got = Vec::new();
        net.nodes[0]
            .ep
            .poll_cq(a.scq, usize::MAX, |w| got.push((w.wr_id, w.status)))
            .unwrap();
        assert!(
            done,
            "seed {seed}: {} of {n} completed at {:?}; {:?} {:?}",
            got.len(),
            net.now,
            net.stats,
            net.nodes[0].ep.stats()
        );
        if !got.iter().all(|(_, s)| *s == WcStatus::Success) {
            let bad = got.iter().find(|(_, s)| *s != WcStatus::Success).unwrap();
            println!(
                "first failure {bad:?}; stats {:?} {:?}",
                net.nodes[0].ep.stats(),
                net.nodes[1].ep.stats()
            );
            for l in net.lines().iter().rev().take(150).rev() {
                println!("{l}");
            }
            panic!("seed {seed}");
        }
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), expect);
        // Every send arrived exactly once, in order, byte-exact.
        let mut rx = Vec::new();
        net.nodes[1]
            .ep
            .poll_cq(b.rcq, usize::MAX, |w| rx.push(w))
            .unwrap();
        let sends: Vec<u64> = (0..n).filter(|i| i % 4 == 0).collect();
        assert_eq!(rx.len(), sends.len(), "seed {seed}");
        for (w, i) in rx.iter().zip(&sends) {
            let len = 1 + (i * 37 % 2999) as usize;
            assert_eq!(w.status, WcStatus::Success);
            assert_eq!(w.byte_len as usize, len);
            let off = (i * 100) as usize;
            assert_eq!(
                net.nodes[1]
                    .mem
                    .bytes(b.mr.iova + 100_000 + w.wr_id * 3000, len),
                &pattern[off..off + len]
            );
        }
        for i in (0..n).filter(|i| i % 4 == 1) {
            let len = 1 + (i * 37 % 2999) as usize;
            let off = (i * 100) as usize;
            assert_eq!(
                net.nodes[1].mem.bytes(b.mr.iova + 700_000 + i * 3000, len),
                &pattern[off..off + len]
            );
            let r = i + 1;
            assert_eq!(
                net.nodes[0].mem.bytes(a.mr.iova + 200_000 + r * 3000, len),
                &pattern[off..off + len]
            );
        }
        // Fetch-adds executed exactly once each: the counter is n/4 and the
        // returned originals are a permutation of 0..n/4 (here: in order).
        let c = u64::from_ne_bytes(net.nodes[1].mem.bytes(b.mr.iova + 8, 8).try_into().unwrap());
        assert_eq!(c, n / 4, "seed {seed}");
        for (k, i) in (0..n).filter(|i| i % 4 == 3).enumerate() {
            let v = u64::from_ne_bytes(
                net.nodes[0]
                    .mem
                    .bytes(a.mr.iova + 900_000 + i * 8, 8)
                    .try_into()
                    .unwrap(),
            );
            assert_eq!(v, k as u64);
        }
        assert!(net.stats.lost > 0);
    }
}
