//! End-to-end smoke tests of every operation over a clean simulated network.

use softrdma_sim::Net;
use softrdma_sim::setup::{PairOpts, connect};
use softrdma_transport::{
    Instant, RecvWr, SendFlags, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOpcode,
};

fn poll_all(net: &mut Net, node: usize, cq: softrdma_transport::CqHandle) -> Vec<Wc> {
    let mut v = Vec::new();
    net.nodes[node]
        .ep
        .poll_cq(cq, usize::MAX, |w| v.push(w))
        .unwrap();
    v
}

#[test]
fn rc_send_write_read_atomic() {
    let mut net = Net::new(2, 1);
    let o = PairOpts::default();
    let (a, b) = connect(&mut net, 0, 1, &o);
    let abuf = a.mr.iova;
    let bbuf = b.mr.iova;
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    net.nodes[0].mem.fill(abuf, &data);

    // SEND 5000 bytes (5 packets at MTU 1024) into a posted receive.
    let now = net.now;
    net.nodes[1]
        .ep
        .post_recv(
            now,
            b.qpn,
            RecvWr {
                wr_id: 7,
                sgl: [Sge {
                    addr: bbuf,
                    length: 8192,
                    lkey: b.mr.lkey,
                }]
                .into(),
            },
        )
        .unwrap();
    let mut wr = SendWr::new(1, WrOpcode::SendWithImm);
    wr.flags = SendFlags::SIGNALED;
    wr.imm_data = 0xdeadbeef;
    wr.sgl = [Sge {
        addr: abuf,
        length: 5000,
        lkey: a.mr.lkey,
    }]
    .into();
    net.nodes[0].ep.post_send(now, a.qpn, wr).unwrap();
    net.run_idle(Instant::from_millis(100));
    let wcs = poll_all(&mut net, 0, a.scq);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(wcs[0].opcode, WcOpcode::Send);
    let r = poll_all(&mut net, 1, b.rcq);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].wr_id, 7);
    assert_eq!(r[0].byte_len, 5000);
    assert_eq!(r[0].imm_data, 0xdeadbeef);
    assert_eq!(net.nodes[1].mem.bytes(bbuf, 5000), &data[..]);

    // WRITE 3000 bytes to b+10000, then READ them back to a+20000.
    let mut w = SendWr::new(2, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [Sge {
        addr: abuf,
        length: 3000,
        lkey: a.mr.lkey,
    }]
    .into();
    w.remote_addr = bbuf + 10000;
    w.rkey = b.mr.rkey;
    let now = net.now;
    net.nodes[0].ep.post_send(now, a.qpn, w).unwrap();
    let mut rd = SendWr::new(3, WrOpcode::RdmaRead);
    rd.flags = SendFlags::SIGNALED;
    rd.sgl = [Sge {
        addr: abuf + 20000,
        length: 3000,
        lkey: a.mr.lkey,
    }]
    .into();
    rd.remote_addr = bbuf + 10000;
    rd.rkey = b.mr.rkey;
    net.nodes[0].ep.post_send(now, a.qpn, rd).unwrap();
    // FETCH_ADD then CMP_SWAP on b+40000 (value starts at 0).
    let mut fa = SendWr::new(4, WrOpcode::AtomicFetchAndAdd);
    fa.flags = SendFlags::SIGNALED;
    fa.sgl = [Sge {
        addr: abuf + 30000,
        length: 8,
        lkey: a.mr.lkey,
    }]
    .into();
    fa.remote_addr = bbuf + 40000;
    fa.rkey = b.mr.rkey;
    fa.compare_add = 5;
    net.nodes[0].ep.post_send(now, a.qpn, fa).unwrap();
    let mut cs = SendWr::new(5, WrOpcode::AtomicCmpAndSwp);
    cs.flags = SendFlags::SIGNALED;
    cs.sgl = [Sge {
        addr: abuf + 30008,
        length: 8,
        lkey: a.mr.lkey,
    }]
    .into();
    cs.remote_addr = bbuf + 40000;
    cs.rkey = b.mr.rkey;
    cs.compare_add = 5;
    cs.swap = 99;
    net.nodes[0].ep.post_send(now, a.qpn, cs).unwrap();
    net.run_idle(Instant::from_millis(200));
    let wcs = poll_all(&mut net, 0, a.scq);
    let ids: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        vec![
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success),
            (5, WcStatus::Success)
        ]
    );
    assert_eq!(net.nodes[1].mem.bytes(bbuf + 10000, 3000), &data[..3000]);
    assert_eq!(net.nodes[0].mem.bytes(abuf + 20000, 3000), &data[..3000]);
    assert_eq!(net.nodes[0].mem.bytes(abuf + 30000, 8), &0u64.to_ne_bytes());
    assert_eq!(net.nodes[0].mem.bytes(abuf + 30008, 8), &5u64.to_ne_bytes());
    assert_eq!(
        net.nodes[1].mem.bytes(bbuf + 40000, 8),
        &99u64.to_ne_bytes()
    );
}
