//! XRC under loss, duplication, reordering and bit flips: an XRC send QP
//! spreads SENDs over three XRC SRQs behind one XRC receive QP, mixed with
//! RDMA WRITEs, READs and atomics through it. Every operation completes
//! once, in order, successfully; every SEND lands in the SRQ its XRCETH
//! named, once, in order, byte-exact.

use softrdma_sim::setup::{PairOpts, xrc_pair};
use softrdma_sim::{Faults, Net};
use softrdma_transport::{Instant, RecvWr, SendFlags, SendWr, Sge, WcStatus, WrOpcode};
use std::time::Duration;

#[test]
fn xrc_mixed_under_faults() {
    for seed in 1..=6u64 {
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
        let x = xrc_pair(&mut net, 0, 1, &o, 3);
        let (a, b) = (x.send, x.recv);
        let pattern: Vec<u8> = (0..65536u32)
            .map(|i| (i ^ (i >> 7) ^ seed as u32) as u8)
            .collect();
        net.nodes[0].mem.fill(a.mr.iova, &pattern);
        let n = 160u64;
        let now = net.now;
        // Receives: SRQ k gets the SENDs i with i % 3 == k (i % 4 == 0).
        for i in (0..n).filter(|i| i % 4 == 0) {
            let (srq, _, _) = x.srqs[(i % 3) as usize];
            net.nodes[1]
                .ep
                .post_srq_recv(
                    srq,
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
        let len_of = |i: u64| 1 + (i * 37 % 2999) as u32;
        for i in 0..n {
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
            // Every request names an SRQ of the domain; SENDs spread over all three.
            wr.xrc_remote_srqn = x.srqs[(i % 3) as usize].2;
            let (addr, l) = match i % 4 {
                2 => (a.mr.iova + 200_000 + i * 3000, len_of(i - 1)),
                3 => (a.mr.iova + 900_000 + i * 8, 8),
                _ => (a.mr.iova + i * 100, len_of(i)),
            };
            wr.sgl = [Sge {
                addr,
                length: l,
                lkey: a.mr.lkey,
            }]
            .into();
            net.nodes[0].ep.post_send(now, a.qpn, wr).unwrap();
        }
        let done = net.run_until(Instant::from_millis(60_000), |net| {
            net.nodes[0].ep.cq_len(a.scq) == n as usize
        });
        let mut got = Vec::new();
        net.nodes[0]
            .ep
            .poll_cq(a.scq, usize::MAX, |w| got.push((w.wr_id, w.status)))
            .unwrap();
        assert!(done, "seed {seed}: {} of {n} completed", got.len());
        assert!(
            got.iter().all(|(_, s)| *s == WcStatus::Success),
            "seed {seed}: {got:?}"
        );
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            (0..n).collect::<Vec<_>>()
        );
        // Each SRQ's CQ has exactly its SENDs, in order, byte-exact.
        for (k, (_, cq, _)) in x.srqs.iter().enumerate() {
            let mut recv = Vec::new();
            net.nodes[1]
                .ep
                .poll_cq(*cq, usize::MAX, |w| recv.push(w))
                .unwrap();
            let want: Vec<u64> = (0..n).filter(|i| i % 4 == 0 && i % 3 == k as u64).collect();
            assert_eq!(
                recv.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
                want,
                "seed {seed} SRQ {k}"
            );
            for w in &recv {
                assert_eq!(w.status, WcStatus::Success);
                assert_eq!(w.qp_num, b.qpn);
                assert_eq!(w.byte_len, len_of(w.wr_id));
                let i = w.wr_id;
                let got = net.nodes[1]
                    .mem
                    .bytes(b.mr.iova + 100_000 + i * 3000, len_of(i) as usize);
                let off = (i * 100) as usize;
                assert_eq!(
                    got,
                    &pattern[off..off + len_of(i) as usize],
                    "seed {seed} send {i}"
                );
            }
        }
        // WRITEs landed; READs brought them back; the counter saw every add once.
        for i in (0..n).filter(|i| i % 4 == 1) {
            let got = net.nodes[1]
                .mem
                .bytes(b.mr.iova + 700_000 + i * 3000, len_of(i) as usize);
            let off = (i * 100) as usize;
            assert_eq!(
                got,
                &pattern[off..off + len_of(i) as usize],
                "seed {seed} write {i}"
            );
            let back = net.nodes[0]
                .mem
                .bytes(a.mr.iova + 200_000 + (i + 1) * 3000, len_of(i) as usize);
            assert_eq!(back, got, "seed {seed} read {}", i + 1);
        }
        // The faults did bite: the requester had to resend.
        assert!(
            net.nodes[0].ep.stats().retransmits > 0,
            "seed {seed}: no loss seen"
        );
        let counter = net.nodes[1].mem.bytes(b.mr.iova + 8, 8).to_vec();
        assert_eq!(u64::from_ne_bytes(counter.try_into().unwrap()), n / 4);
    }
}
