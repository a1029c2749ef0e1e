//! UD: Q_Key, the 40-byte GRH area with the real IPv4 header, src_qp, the
//! port MTU limit.

use softrdma_sim::Net;
use softrdma_sim::setup::{PairOpts, Side, ud_dest, ud_side};
use softrdma_sim::trace::{assert_lines, wc_line};
use softrdma_transport::{Instant, QpState, RecvWr, SendFlags, SendWr, Sge, Wc, WrOpcode};

const QKEY: u32 = 0x1111_1111;

fn ud_pair() -> (Net, Side, Side) {
    let mut net = Net::new(2, 3);
    let o = PairOpts::default();
    let a = ud_side(&mut net, 0, QKEY, &o);
    let b = ud_side(&mut net, 1, QKEY, &o);
    net.record();
    (net, a, b)
}

fn send(net: &mut Net, a: &Side, b: &Side, id: u64, len: u32, qkey: u32) {
    let mut w = SendWr::new(id, WrOpcode::SendWithImm);
    w.flags = SendFlags::SIGNALED;
    w.imm_data = 0xABCD_0000 | id as u32;
    w.sgl = [Sge {
        addr: a.mr.iova,
        length: len,
        lkey: a.mr.lkey,
    }]
    .into();
    w.ud = Some(ud_dest(net, b, qkey));
    let now = net.now;
    net.nodes[0].ep.post_send(now, a.qpn, w).unwrap();
}

fn recv(net: &mut Net, b: &Side, id: u64, off: u64, len: u32) {
    let now = net.now;
    let w = RecvWr {
        wr_id: id,
        sgl: [Sge {
            addr: b.mr.iova + off,
            length: len,
            lkey: b.mr.lkey,
        }]
        .into(),
    };
    net.nodes[1].ep.post_recv(now, b.qpn, w).unwrap();
}

fn wcs(net: &mut Net, node: usize, cq: softrdma_transport::CqHandle) -> Vec<Wc> {
    let mut v = Vec::new();
    net.nodes[node]
        .ep
        .poll_cq(cq, usize::MAX, |w| v.push(w))
        .unwrap();
    v
}

/// The receive buffer starts with 20 zero bytes and the IPv4 header of the
/// datagram (as rxe's `union rdma_network_hdr`), then the payload; byte_len
/// counts the 40 bytes; src_qp is the sender's QPN from the DETH; sl is the
/// packet type.
#[test]
fn ud_grh_qkey_src_qp() {
    let (mut net, a, b) = ud_pair();
    let data: Vec<u8> = (0..100u8).collect();
    net.nodes[0].mem.fill(a.mr.iova, &data);
    recv(&mut net, &b, 7, 0, 256);
    send(&mut net, &a, &b, 1, 100, QKEY);
    net.run_idle(Instant::from_millis(10));
    assert_lines(
        &net.lines(),
        &["0.000 0>1 UD_SEND_ONLY_WITH_IMMEDIATE psn=0 qkey=0x11111111 imm=0xabcd0001 len=100"],
    );
    let s = wcs(&mut net, 0, a.scq);
    assert_eq!(
        s.iter().map(wc_line).collect::<Vec<_>>(),
        ["1 Send Success len=100 WITH_IMM"]
    );
    let r = wcs(&mut net, 1, b.rcq);
    assert_eq!(
        r.iter().map(wc_line).collect::<Vec<_>>(),
        ["7 Recv Success len=140 imm=0xabcd0001 GRH"]
    );
    assert_eq!(r[0].src_qp, a.qpn);
    assert_eq!(r[0].qp_num, b.qpn);
    // The RoCE packet type as mlx5 reports it (RoCEv2 | IPv4): UCX's UD
    // transport reads it to find the destination address in the GRH area.
    assert_eq!(r[0].sl, 0xA, "sl: RoCEv2 over IPv4");
    let buf = net.nodes[1].mem.bytes(b.mr.iova, 140).to_vec();
    assert_eq!(buf[..20], [0; 20]);
    // UDP payload: BTH 12 + DETH 8 + ImmDt 4 + 100 + ICRC 4 = 128.
    let total = (20 + 8 + 128u16).to_be_bytes();
    let ip = &buf[20..40];
    assert_eq!(ip[..4], [0x45, 0, total[0], total[1]]);
    assert_eq!(ip[6], 0x40, "DF");
    assert_eq!(ip[8..10], [64, 17], "TTL, UDP");
    assert_eq!(ip[12..20], [10, 0, 0, 1, 10, 0, 0, 2]);
    assert_eq!(softrdma_wire::ip::inet_checksum(ip), 0, "header checksum");
    assert_eq!(buf[40..140], data[..]);
}

/// A Q_Key that is not the receiver's is dropped and counted; a Q_Key with
/// the MSB set means "use the sender QP's own Q_Key" (IBTA 10.2.5).
#[test]
fn ud_qkey_mismatch_dropped_and_counted() {
    let (mut net, a, b) = ud_pair();
    recv(&mut net, &b, 7, 0, 256);
    send(&mut net, &a, &b, 1, 8, 0x2222_2222);
    net.run_idle(Instant::from_millis(10));
    assert!(wcs(&mut net, 1, b.rcq).is_empty());
    assert_eq!(net.nodes[1].ep.stats().drop_bad_qkey, 1);
    send(&mut net, &a, &b, 2, 8, 0x8000_0000);
    net.run_idle(Instant::from_millis(10));
    assert_lines(
        &net.lines(),
        &[
            "0.000 0>1 UD_SEND_ONLY_WITH_IMMEDIATE psn=0 qkey=0x22222222 imm=0xabcd0001 len=8",
            "5.000 0>1 UD_SEND_ONLY_WITH_IMMEDIATE psn=1 qkey=0x11111111 imm=0xabcd0002 len=8",
        ],
    );
    let r = wcs(&mut net, 1, b.rcq);
    assert_eq!(
        r.iter().map(wc_line).collect::<Vec<_>>(),
        ["7 Recv Success len=48 imm=0xabcd0002 GRH"]
    );
}

/// A UD message larger than the port MTU (4096) is not sent and completes
/// LOC_LEN_ERR (rxe fakes success per C10-93.1.1; we report it). The QP keeps
/// working.
#[test]
fn ud_larger_than_mtu_is_loc_len_err() {
    let (mut net, a, b) = ud_pair();
    recv(&mut net, &b, 7, 0, 8192);
    send(&mut net, &a, &b, 1, 4097, QKEY);
    send(&mut net, &a, &b, 2, 4096, QKEY);
    net.run_idle(Instant::from_millis(10));
    assert_lines(
        &net.lines(),
        &["0.000 0>1 UD_SEND_ONLY_WITH_IMMEDIATE psn=0 qkey=0x11111111 imm=0xabcd0002 len=4096"],
    );
    let s = wcs(&mut net, 0, a.scq);
    assert_eq!(
        s.iter().map(wc_line).collect::<Vec<_>>(),
        [
            "1 Send LocLenErr len=4097 WITH_IMM",
            "2 Send Success len=4096 WITH_IMM"
        ]
    );
    assert_eq!(
        net.nodes[0].ep.query_qp(a.qpn).unwrap().0.qp_state,
        QpState::Rts
    );
    let r = wcs(&mut net, 1, b.rcq);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].byte_len, 4136);
}
