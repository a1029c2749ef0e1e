//! Tag matching through two sans-IO endpoints: a requester QP sending to a
//! responder QP on a TM SRQ. A multi-packet eager message drops its TMH
//! once; an unexpected message that met an RNR NAK counts once; a
//! rendezvous READ whose response is lost is retried, completes the tag
//! once, and the FIN goes out as one SEND carrying the tag.

use softrdma_transport::tm::{RNDV_HDR_LEN, SrqOp, TMH_LEN, TagEntry, TmCap, TmOp, Tmh, tmh_op};
use softrdma_transport::{
    Access, Config, CqHandle, Endpoint, Instant, QpCap, QpInitAttr, QpType, Qpn, RecvWr, SendFlags,
    SendWr, Sge, SrqHandle, Wc, WcFlags, WcOpcode, WcStatus, WrOpcode,
};
use softrdma_wire::{Opcode, Packet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

mod flat;
use flat::Flat;

const BASE: u64 = 0x10_0000;
const LEN: usize = 1 << 16;
/// Where the requester's messages are built.
const MSG: u64 = 0;
/// The requester's rendezvous data.
const RNDV_DATA: u64 = 0x8000;
/// The responder's tag buffer and ordinary receive buffer.
const TAG_BUF: u64 = 0x4000;
const PLAIN_BUF: u64 = 0xC000;

struct Node {
    ep: Endpoint,
    mem: Flat,
    ip: IpAddr,
    lkey: u32,
    rkey: u32,
    cq: CqHandle,
    qpn: Qpn,
}

fn node(last_octet: u8, srq: bool) -> (Node, Option<SrqHandle>) {
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, last_octet));
    let mut ep = Endpoint::new(Config::new(ip, u64::from(last_octet)));
    let pd = ep.alloc_pd().unwrap();
    let mr = ep
        .reg_mr(
            pd,
            BASE,
            LEN as u64,
            BASE,
            Access::LOCAL_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let (cq, _) = ep.create_cq(64).unwrap();
    let srq = srq.then(|| {
        ep.create_tm_srq(
            pd,
            cq,
            8,
            1,
            0,
            TmCap {
                max_num_tags: 4,
                max_ops: 4,
            },
        )
        .unwrap()
        .0
    });
    let cap = QpCap {
        max_send_wr: if srq.is_some() { 0 } else { 8 },
        max_recv_wr: if srq.is_some() { 0 } else { 8 },
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (qpn, _) = ep
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq,
            cap,
            sq_sig_all: false,
        })
        .unwrap();
    let n = Node {
        ep,
        mem: Flat::patterned(BASE, LEN),
        ip,
        lkey: mr.lkey,
        rkey: mr.rkey,
        cq,
        qpn,
    };
    (n, srq)
}

fn connect(n: &mut Node, peer_ip: IpAddr, peer_qpn: Qpn) {
    flat::connect(&mut n.ep, n.qpn, peer_ip, peer_qpn);
}

struct Pair {
    a: Node,
    b: Node,
    srq: SrqHandle,
    now: Instant,
}

fn pair() -> Pair {
    let (mut a, _) = node(1, false);
    let (mut b, srq) = node(2, true);
    let (a_ip, b_ip, a_qpn, b_qpn) = (a.ip, b.ip, a.qpn, b.qpn);
    connect(&mut a, b_ip, b_qpn);
    connect(&mut b, a_ip, a_qpn);
    Pair {
        a,
        b,
        srq: srq.unwrap(),
        now: Instant::ZERO,
    }
}

fn drain(n: &mut Node, now: Instant) -> Vec<Vec<u8>> {
    flat::drain(&mut n.ep, &mut n.mem, now)
}

fn deliver(to: &mut Node, from_ip: IpAddr, now: Instant, payload: &[u8]) {
    flat::deliver(&mut to.ep, &mut to.mem, to.ip, from_ip, now, payload);
}

fn opcode(p: &[u8]) -> Opcode {
    Packet::parse(p).unwrap().hdr.bth.opcode
}

impl Pair {
    /// Moves packets both ways (timers too) until both are quiet; `drop`
    /// decides (by direction a→b, opcode) which to lose, once each.
    fn run(&mut self, mut drop: impl FnMut(bool, Opcode) -> bool) -> Vec<(bool, Vec<u8>)> {
        let mut seen = Vec::new();
        for _ in 0..200 {
            let (a_ip, b_ip) = (self.a.ip, self.b.ip);
            let ab = drain(&mut self.a, self.now);
            let ba = drain(&mut self.b, self.now);
            if ab.is_empty() && ba.is_empty() {
                let next = [self.a.ep.poll_timeout(), self.b.ep.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                let Some(t) = next else { return seen };
                self.now = t.max(self.now + Duration::from_micros(1));
                self.a.ep.handle_timeout(self.now);
                self.b.ep.handle_timeout(self.now);
                continue;
            }
            for p in ab {
                if !drop(true, opcode(&p)) {
                    deliver(&mut self.b, a_ip, self.now, &p);
                }
                seen.push((true, p));
            }
            for p in ba {
                if !drop(false, opcode(&p)) {
                    deliver(&mut self.a, b_ip, self.now, &p);
                }
                seen.push((false, p));
            }
        }
        panic!("no quiet after 200 rounds");
    }

    fn send(&mut self, len: u32) {
        let mut w = SendWr::new(1, WrOpcode::Send);
        w.flags = SendFlags::SIGNALED;
        w.sgl = [Sge {
            addr: BASE + MSG,
            length: len,
            lkey: self.a.lkey,
        }]
        .into();
        self.a.ep.post_send(self.now, self.a.qpn, w).unwrap();
    }

    fn write_msg(&mut self, tmh: Tmh) {
        let o = MSG as usize;
        self.a.mem.buf[o..o + TMH_LEN].copy_from_slice(&tmh.to_bytes());
    }

    fn op(&mut self, wr_id: u64, op: TmOp, unexpected: u32, sync: bool) -> u32 {
        let o = SrqOp {
            wr_id,
            op,
            unexpected,
            sync,
            signaled: false,
        };
        self.b.ep.post_srq_op(self.now, self.srq, o).unwrap()
    }

    fn add_tag(&mut self, tag: u64, len: u32) {
        let sgl = vec![Sge {
            addr: BASE + TAG_BUF,
            length: len,
            lkey: self.b.lkey,
        }];
        let e = TagEntry {
            tag,
            mask: u64::MAX,
            recv_wr_id: tag,
            sgl: sgl.into(),
        };
        self.op(0, TmOp::Add(e), 0, false);
    }

    fn b_wcs(&mut self) -> Vec<Wc> {
        let mut v = Vec::new();
        self.b.ep.poll_cq(self.b.cq, 64, |w| v.push(w)).unwrap();
        v
    }

    fn a_wcs(&mut self) -> Vec<Wc> {
        let mut v = Vec::new();
        self.a.ep.poll_cq(self.a.cq, 64, |w| v.push(w)).unwrap();
        v
    }
}

#[test]
fn a_multi_packet_eager_message_loses_its_tmh_once() {
    let mut p = pair();
    p.add_tag(5, 4096);
    p.write_msg(Tmh {
        opcode: tmh_op::EAGER,
        app_ctx: 9,
        tag: 5,
    });
    p.send(3000); // three packets at MTU 1024
    let seen = p.run(|_, _| false);
    assert_eq!(seen.iter().filter(|(ab, _)| *ab).count(), 3);
    let w = p.b_wcs();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        (w[0].status, w[0].opcode, w[0].wr_id, w[0].byte_len),
        (
            WcStatus::Success,
            WcOpcode::TmRecv,
            5,
            3000 - TMH_LEN as u32
        )
    );
    assert_eq!(w[0].wc_flags, WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID);
    assert_eq!((w[0].tm_tag, w[0].tm_priv), (5, 9));
    let (src, dst) = (MSG as usize + TMH_LEN, TAG_BUF as usize);
    assert_eq!(
        p.b.mem.buf[dst..dst + 3000 - TMH_LEN],
        p.a.mem.buf[src..src + 3000 - TMH_LEN]
    );
}

#[test]
fn an_unexpected_message_after_an_rnr_nak_counts_once() {
    let mut p = pair();
    p.add_tag(5, 4096);
    p.write_msg(Tmh {
        opcode: tmh_op::EAGER,
        app_ctx: 0,
        tag: 6,
    });
    p.send(100);
    // No ordinary receive: RNR NAK, nothing counted.
    let mut ab = drain(&mut p.a, p.now);
    assert_eq!(ab.len(), 1);
    deliver(&mut p.b, p.a.ip, p.now, &ab.remove(0));
    let ba = drain(&mut p.b, p.now);
    assert!(
        ba.iter()
            .any(|x| Packet::parse(x).unwrap().hdr.aeth.is_some())
    );
    for x in ba {
        deliver(&mut p.a, p.b.ip, p.now, &x);
    }
    let lkey = p.b.lkey;
    let plain = RecvWr {
        wr_id: 77,
        sgl: [Sge {
            addr: BASE + PLAIN_BUF,
            length: 4096,
            lkey,
        }]
        .into(),
    };
    p.b.ep.post_srq_recv(p.srq, plain).unwrap();
    p.run(|_, _| false);
    let w = p.b_wcs();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        (w[0].opcode, w[0].wr_id, w[0].byte_len),
        (WcOpcode::TmRecv, 77, 100)
    );
    assert_eq!(w[0].wc_flags, WcFlags::EMPTY);
    // One unexpected message: a SYNC with 1 puts matching back on.
    p.op(0, TmOp::Sync, 1, true);
    p.write_msg(Tmh {
        opcode: tmh_op::EAGER,
        app_ctx: 0,
        tag: 5,
    });
    p.send(100);
    p.run(|_, _| false);
    let w = p.b_wcs();
    assert_eq!((w.len(), w[0].wr_id), (1, 5), "{w:?}");
    assert!(w[0].wc_flags.contains(WcFlags::TM_MATCH));
}

#[test]
fn a_rendezvous_read_whose_response_is_lost_is_retried_then_fins() {
    let mut p = pair();
    p.add_tag(7, 4096);
    let rlen: u32 = 2500;
    p.write_msg(Tmh {
        opcode: tmh_op::RNDV,
        app_ctx: 3,
        tag: 7,
    });
    let o = MSG as usize + TMH_LEN;
    p.a.mem.buf[o..o + 8].copy_from_slice(&(BASE + RNDV_DATA).to_be_bytes());
    p.a.mem.buf[o + 8..o + 12].copy_from_slice(&p.a.rkey.to_be_bytes());
    p.a.mem.buf[o + 12..o + 16].copy_from_slice(&rlen.to_be_bytes());
    // The FIN lands in the requester's receive.
    let lkey = p.a.lkey;
    let fin_buf = RecvWr {
        wr_id: 88,
        sgl: [Sge {
            addr: BASE + 0xF000,
            length: 64,
            lkey,
        }]
        .into(),
    };
    p.a.ep.post_recv(p.now, p.a.qpn, fin_buf).unwrap();
    p.send(RNDV_HDR_LEN as u32);
    let mut lost = false;
    let seen = p.run(|ab, op| {
        // Lose the first READ response packet once.
        let hit = ab && op == Opcode::RC_RDMA_READ_RESPONSE_FIRST && !lost;
        lost |= hit;
        hit
    });
    assert!(lost, "a READ response went by");
    let w = p.b_wcs();
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(
        (
            w[0].opcode,
            w[0].wr_id,
            w[0].wc_flags,
            w[0].tm_tag,
            w[0].tm_priv
        ),
        (WcOpcode::TmRecv, 7, WcFlags::TM_MATCH, 7, 3)
    );
    assert_eq!(
        (
            w[1].status,
            w[1].opcode,
            w[1].wr_id,
            w[1].wc_flags,
            w[1].byte_len
        ),
        (
            WcStatus::Success,
            WcOpcode::TmRecv,
            7,
            WcFlags::TM_DATA_VALID,
            rlen
        )
    );
    let (src, dst) = (RNDV_DATA as usize, TAG_BUF as usize);
    let n = rlen as usize;
    assert_eq!(p.b.mem.buf[dst..dst + n], p.a.mem.buf[src..src + n]);
    // READ requests went out twice (the retry), the FIN once.
    let reads = seen
        .iter()
        .filter(|(ab, x)| !ab && opcode(x) == Opcode::RC_RDMA_READ_REQUEST)
        .count();
    assert_eq!(reads, 2);
    let fins: Vec<_> = seen
        .iter()
        .filter(|(ab, x)| !ab && opcode(x) == Opcode::RC_SEND_ONLY)
        .collect();
    assert_eq!(fins.len(), 1);
    let a = p.a_wcs();
    let fin = a
        .iter()
        .find(|w| w.opcode == WcOpcode::Recv)
        .expect("the FIN");
    assert_eq!((fin.wr_id, fin.byte_len), (88, TMH_LEN as u32));
    let f = 0xF000;
    let tmh = Tmh::parse(&p.a.mem.buf[f..f + TMH_LEN]).unwrap();
    assert_eq!((tmh.opcode, tmh.tag, tmh.app_ctx), (tmh_op::FIN, 7, 3));
    assert_eq!(
        a.iter().filter(|w| w.opcode == WcOpcode::Send).count(),
        1,
        "the header SEND completes: {a:?}"
    );
}
