//! XRC through two sans-IO endpoints: an XRC send QP reaches the XRC SRQ
//! each request names through one XRC receive QP (IBTA annex A14), on the
//! wire as XRC opcodes with an XRCETH; a request naming an SRQ of another
//! XRC domain is NAKed; go-back-N recovers a lost packet.

use softrdma_transport::{
    Access, Config, CqHandle, Endpoint, Instant, QpCap, QpInitAttr, QpState, QpType, Qpn, RecvWr,
    SendFlags, SendWr, Sge, SrqHandle, Wc, WcOpcode, WcStatus, WrOpcode,
};
use softrdma_wire::{Opcode, Packet, xrc_srqn};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

mod flat;
use flat::Flat;

const BASE: u64 = 0x10_0000;
const LEN: usize = 1 << 16;
const XRCD: u32 = 7;

struct Node {
    ep: Endpoint,
    mem: Flat,
    ip: IpAddr,
    lkey: u32,
}

fn node(last_octet: u8) -> (Node, softrdma_transport::PdHandle) {
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, last_octet));
    let mut ep = Endpoint::new(Config::new(ip, u64::from(last_octet)));
    let pd = ep.alloc_pd().unwrap();
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = ep.reg_mr(pd, BASE, LEN as u64, BASE, all).unwrap();
    let n = Node {
        ep,
        mem: Flat::patterned(BASE, LEN),
        ip,
        lkey: mr.lkey,
    };
    (n, pd)
}

fn connect(n: &mut Node, qpn: Qpn, peer_ip: IpAddr, peer_qpn: Qpn) {
    flat::connect(&mut n.ep, qpn, peer_ip, peer_qpn);
}

fn drain(n: &mut Node, now: Instant) -> Vec<Vec<u8>> {
    flat::drain(&mut n.ep, &mut n.mem, now)
}

fn deliver(to: &mut Node, from_ip: IpAddr, now: Instant, payload: &[u8]) {
    flat::deliver(&mut to.ep, &mut to.mem, to.ip, from_ip, now, payload);
}

fn polled(n: &mut Node, cq: CqHandle) -> Vec<Wc> {
    let mut v = Vec::new();
    n.ep.poll_cq(cq, 64, |w| v.push(w)).unwrap();
    v
}

/// A sender with one XRC send QP and a target with one XRC receive QP
/// and two XRC SRQs of domain XRCD, each with its own CQ, and one SRQ of
/// another domain.
struct Setup {
    a: Node,
    b: Node,
    a_qpn: Qpn,
    a_cq: CqHandle,
    b_qpn: Qpn,
    srqs: [(SrqHandle, CqHandle, u32); 3],
}

fn setup() -> Setup {
    let (mut a, a_pd) = node(1);
    let (mut b, b_pd) = node(2);
    let (a_cq, _) = a.ep.create_cq(64).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 0,
        max_inline_data: 0,
    };
    let (a_qpn, _) =
        a.ep.create_qp(&QpInitAttr {
            qp_type: QpType::XrcSend,
            pd: a_pd,
            send_cq: a_cq,
            recv_cq: a_cq,
            srq: None,
            cap,
            sq_sig_all: true,
        })
        .unwrap();
    // An XRC receive QP is made from a domain only, and takes no receives.
    assert!(
        a.ep.create_qp(&QpInitAttr {
            qp_type: QpType::XrcRecv,
            pd: a_pd,
            send_cq: a_cq,
            recv_cq: a_cq,
            srq: None,
            cap,
            sq_sig_all: false,
        })
        .is_err()
    );
    let b_qpn = b.ep.create_xrc_recv_qp(XRCD).unwrap();
    let mut srqs = [(SrqHandle(0), CqHandle(0), 0); 3];
    for (i, s) in srqs.iter_mut().enumerate() {
        let (cq, _) = b.ep.create_cq(64).unwrap();
        let xrcd = if i == 2 { XRCD + 1 } else { XRCD };
        let (h, _, _) = b.ep.create_xrc_srq(b_pd, xrcd, cq, 16, 1, 0).unwrap();
        let num = b.ep.srq_num(h).expect("an XRC SRQ has a number");
        *s = (h, cq, num);
    }
    assert_ne!(srqs[0].2, srqs[1].2);
    assert!(srqs.iter().all(|s| s.2 != 0), "0 is no SRQ's number");
    // A plain SRQ has no XRC number.
    let (plain, _, _) = b.ep.create_srq(b_pd, 4, 1, 0).unwrap();
    assert_eq!(b.ep.srq_num(plain), None);
    let (a_ip, b_ip) = (a.ip, b.ip);
    connect(&mut a, a_qpn, b_ip, b_qpn);
    connect(&mut b, b_qpn, a_ip, a_qpn);
    assert!(
        b.ep.post_recv(
            Instant::ZERO,
            b_qpn,
            RecvWr {
                wr_id: 1,
                sgl: vec![].into()
            }
        )
        .is_err(),
        "receives go to the SRQs"
    );
    Setup {
        a,
        b,
        a_qpn,
        a_cq,
        b_qpn,
        srqs,
    }
}

fn post_srq(s: &mut Setup, i: usize, wr_id: u64, at: u64, len: u32) {
    let lkey = s.b.lkey;
    s.b.ep
        .post_srq_recv(
            s.srqs[i].0,
            RecvWr {
                wr_id,
                sgl: [Sge {
                    addr: BASE + at,
                    length: len,
                    lkey,
                }]
                .into(),
            },
        )
        .unwrap();
}

fn send(s: &mut Setup, wr_id: u64, srqn: u32, at: u64, len: u32) {
    let mut w = SendWr::new(wr_id, WrOpcode::Send);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [Sge {
        addr: BASE + at,
        length: len,
        lkey: s.a.lkey,
    }]
    .into();
    w.xrc_remote_srqn = srqn;
    s.a.ep.post_send(Instant::ZERO, s.a_qpn, w).unwrap();
}

#[test]
fn sends_reach_the_srq_the_xrceth_names() {
    let mut s = setup();
    let (a_ip, b_ip) = (s.a.ip, s.b.ip);
    post_srq(&mut s, 0, 100, 0x8000, 256);
    post_srq(&mut s, 1, 200, 0x9000, 256);
    // Different bytes at the sender for each message.
    s.a.mem.buf[0x100..0x140].fill(0xA1);
    s.a.mem.buf[0x200..0x240].fill(0xB2);
    let srqn1 = s.srqs[1].2;
    let srqn0 = s.srqs[0].2;
    send(&mut s, 1, srqn1, 0x100, 64);
    send(&mut s, 2, srqn0, 0x200, 64);
    let now = Instant::from_millis(1);
    let reqs = drain(&mut s.a, now);
    assert_eq!(reqs.len(), 2);
    for (r, want) in reqs.iter().zip([srqn1, srqn0]) {
        let p = Packet::parse(r).unwrap();
        assert_eq!(p.hdr.bth.opcode, Opcode::XRC_SEND_ONLY);
        assert_eq!(p.hdr.bth.dest_qp, s.b_qpn);
        assert_eq!(p.hdr.xrceth.map(xrc_srqn), Some(want));
        // BTH, XRCETH, then the payload.
        assert_eq!(&r[12..16], &want.to_be_bytes());
        deliver(&mut s.b, a_ip, now, r);
    }
    let acks = drain(&mut s.b, now);
    assert!(!acks.is_empty());
    for r in &acks {
        let p = Packet::parse(r).unwrap();
        assert_eq!(p.hdr.bth.opcode, Opcode::XRC_ACKNOWLEDGE);
        assert_eq!(p.hdr.xrceth, None);
        deliver(&mut s.a, b_ip, now, r);
    }
    // Each message completed on the CQ of the SRQ it named, into its WQE.
    let c1 = polled(&mut s.b, s.srqs[1].1);
    assert_eq!(c1.len(), 1);
    assert_eq!(
        (c1[0].wr_id, c1[0].status, c1[0].opcode),
        (200, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(c1[0].byte_len, 64);
    assert_eq!(c1[0].qp_num, s.b_qpn);
    let c0 = polled(&mut s.b, s.srqs[0].1);
    assert_eq!(c0.len(), 1);
    assert_eq!(c0[0].wr_id, 100);
    assert!(s.b.mem.buf[0x9000..0x9040].iter().all(|&x| x == 0xA1));
    assert!(s.b.mem.buf[0x8000..0x8040].iter().all(|&x| x == 0xB2));
    let done = polled(&mut s.a, s.a_cq);
    let ids: Vec<_> = done.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(ids, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
}

#[test]
fn rdma_write_and_read_use_the_named_srqs_pd() {
    let mut s = setup();
    let (a_ip, b_ip) = (s.a.ip, s.b.ip);
    s.a.mem.buf[0x100..0x900].fill(0x5C);
    let srqn = s.srqs[0].2;
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [Sge {
        addr: BASE + 0x100,
        length: 0x800,
        lkey: s.a.lkey,
    }]
    .into();
    w.remote_addr = BASE + 0x4000;
    w.rkey = s.b.lkey;
    w.xrc_remote_srqn = srqn;
    s.a.ep.post_send(Instant::ZERO, s.a_qpn, w).unwrap();
    let mut r = SendWr::new(2, WrOpcode::RdmaRead);
    r.flags = SendFlags::SIGNALED;
    r.sgl = [Sge {
        addr: BASE + 0xA000,
        length: 0x800,
        lkey: s.a.lkey,
    }]
    .into();
    r.remote_addr = BASE + 0x4000;
    r.rkey = s.b.lkey;
    r.xrc_remote_srqn = srqn;
    s.a.ep.post_send(Instant::ZERO, s.a_qpn, r).unwrap();
    let mut now = Instant::from_millis(1);
    for _ in 0..10 {
        for p in drain(&mut s.a, now) {
            let op = Packet::parse(&p).unwrap().hdr.bth.opcode;
            assert!((0xA0..=0xB7).contains(&op.0), "{op:?}");
            deliver(&mut s.b, a_ip, now, &p);
        }
        for p in drain(&mut s.b, now) {
            let op = Packet::parse(&p).unwrap().hdr.bth.opcode;
            assert!((0xA0..=0xB7).contains(&op.0), "{op:?}");
            deliver(&mut s.a, b_ip, now, &p);
        }
        now = now + Duration::from_millis(1);
    }
    let done: Vec<_> = polled(&mut s.a, s.a_cq)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(done, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert!(s.b.mem.buf[0x4000..0x4800].iter().all(|&x| x == 0x5C));
    assert!(s.a.mem.buf[0xA000..0xA800].iter().all(|&x| x == 0x5C));
}

#[test]
fn an_srq_of_another_domain_is_an_invalid_request() {
    let mut s = setup();
    let (a_ip, b_ip) = (s.a.ip, s.b.ip);
    post_srq(&mut s, 2, 300, 0x8000, 256);
    let foreign = s.srqs[2].2;
    send(&mut s, 9, foreign, 0x100, 16);
    let now = Instant::from_millis(1);
    for p in drain(&mut s.a, now) {
        deliver(&mut s.b, a_ip, now, &p);
    }
    let naks = drain(&mut s.b, now);
    assert_eq!(naks.len(), 1);
    for p in &naks {
        deliver(&mut s.a, b_ip, now, p);
    }
    let done = polled(&mut s.a, s.a_cq);
    assert_eq!(done[0].wr_id, 9);
    assert_eq!(done[0].status, WcStatus::RemInvReqErr);
    // The foreign SRQ kept its WQE; the target QP is in ERR.
    assert!(polled(&mut s.b, s.srqs[2].1).is_empty());
    assert_eq!(s.b.ep.query_qp(s.b_qpn).unwrap().0.qp_state, QpState::Err);
}

#[test]
fn a_send_without_an_srq_number_is_an_invalid_request() {
    let mut s = setup();
    let (a_ip, b_ip) = (s.a.ip, s.b.ip);
    post_srq(&mut s, 0, 1, 0x8000, 256);
    send(&mut s, 5, 0, 0x100, 16);
    let now = Instant::from_millis(1);
    for p in drain(&mut s.a, now) {
        deliver(&mut s.b, a_ip, now, &p);
    }
    for p in drain(&mut s.b, now) {
        deliver(&mut s.a, b_ip, now, &p);
    }
    let done = polled(&mut s.a, s.a_cq);
    assert_eq!((done[0].wr_id, done[0].status), (5, WcStatus::RemInvReqErr));
    assert!(polled(&mut s.b, s.srqs[0].1).is_empty());
}

#[test]
fn a_lost_packet_is_resent_with_its_xrceth() {
    let mut s = setup();
    let (a_ip, b_ip) = (s.a.ip, s.b.ip);
    post_srq(&mut s, 1, 7, 0x8000, 0x1000);
    for (i, x) in s.a.mem.buf[0x1000..0x1C00].iter_mut().enumerate() {
        *x = (i * 7 % 256) as u8;
    }
    let srqn = s.srqs[1].2;
    send(&mut s, 1, srqn, 0x1000, 0xC00); // three packets at MTU 1024
    let mut now = Instant::from_millis(1);
    let first = drain(&mut s.a, now);
    assert_eq!(first.len(), 3);
    let ops: Vec<_> = first
        .iter()
        .map(|p| Packet::parse(p).unwrap().hdr.bth.opcode)
        .collect();
    assert_eq!(
        ops,
        vec![
            Opcode::XRC_SEND_FIRST,
            Opcode::XRC_SEND_MIDDLE,
            Opcode::XRC_SEND_LAST
        ]
    );
    // The middle packet is lost; the others arrive in reverse order.
    deliver(&mut s.b, a_ip, now, &first[2]);
    deliver(&mut s.b, a_ip, now, &first[0]);
    for _ in 0..20 {
        for p in drain(&mut s.b, now) {
            deliver(&mut s.a, b_ip, now, &p);
        }
        now = now + Duration::from_millis(10);
        s.a.ep.handle_timeout(now);
        s.b.ep.handle_timeout(now);
        for p in drain(&mut s.a, now) {
            assert_eq!(
                Packet::parse(&p).unwrap().hdr.xrceth.map(xrc_srqn),
                Some(srqn)
            );
            deliver(&mut s.b, a_ip, now, &p);
        }
    }
    let got = polled(&mut s.b, s.srqs[1].1);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].byte_len),
        (7, WcStatus::Success, 0xC00)
    );
    assert_eq!(s.b.mem.buf[0x8000..0x8C00], s.a.mem.buf[0x1000..0x1C00]);
    let done = polled(&mut s.a, s.a_cq);
    assert_eq!((done[0].wr_id, done[0].status), (1, WcStatus::Success));
}
