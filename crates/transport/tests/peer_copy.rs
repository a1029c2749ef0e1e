//! Peer copy between two sans-IO endpoints (`qp/peer.rs`): the packets a
//! lane would carry are handed over with a fake copier that reads the other
//! endpoint's memory, at literal times. Checks bytes, statuses, that a
//! failed check copies nothing, duplicates, and failing copies.

use softrdma_transport::{
    Access, AddressVector, AtomicOp, Config, CqHandle, Datagram, Endpoint, Instant, Memory, Mtu,
    PEER_COPY_MIN, PeerCopyError, PeerSeg, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState,
    QpType, Qpn, SendFlags, SendWr, Sge, Wc, WcStatus, WrOpcode,
};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Flat memory: host addresses `base..base + buf.len()`.
struct Flat {
    base: u64,
    buf: Vec<u8>,
}

impl Flat {
    fn at(&self, addr: u64, len: usize) -> &[u8] {
        let o = (addr - self.base) as usize;
        &self.buf[o..o + len]
    }
}

impl Memory for Flat {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        dst.copy_from_slice(self.at(addr, dst.len()));
    }
    fn write(&mut self, addr: u64, src: &[u8]) {
        let o = (addr - self.base) as usize;
        self.buf[o..o + src.len()].copy_from_slice(src);
    }
    fn atomic(&mut self, _addr: u64, _op: AtomicOp) -> u64 {
        unreachable!("no atomics here")
    }
}

/// The receiver's memory plus a fake copier from the sender's: what the
/// engine's `process_vm_readv` does, or the failure it is told to report.
struct Lane<'a> {
    me: &'a mut Flat,
    peer: &'a Flat,
    fail: Option<PeerCopyError>,
    copies: &'a mut u32,
}

impl Memory for Lane<'_> {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        self.me.read(addr, dst);
    }
    fn write(&mut self, addr: u64, src: &[u8]) {
        self.me.write(addr, src);
    }
    fn atomic(&mut self, addr: u64, op: AtomicOp) -> u64 {
        self.me.atomic(addr, op)
    }
    fn read_peer(&mut self, src: &[PeerSeg], dst: &[PeerSeg]) -> Result<(), PeerCopyError> {
        *self.copies += 1;
        if let Some(e) = self.fail {
            return Err(e);
        }
        let bytes: Vec<u8> = src
            .iter()
            .flat_map(|s| self.peer.at(s.addr, s.len as usize).to_vec())
            .collect();
        let mut off = 0;
        for d in dst {
            self.me.write(d.addr, &bytes[off..off + d.len as usize]);
            off += d.len as usize;
        }
        assert_eq!(off, bytes.len(), "source and destination totals differ");
        Ok(())
    }
}

struct Node {
    ep: Endpoint,
    mem: Flat,
    ip: IpAddr,
    qpn: Qpn,
    cq: CqHandle,
    key: u32,
    fail: Option<PeerCopyError>,
    copies: u32,
}

const LEN: usize = 1 << 20;
const A_BASE: u64 = 0x10_0000;
const B_BASE: u64 = 0x80_0000;

fn node(last_octet: u8, base: u64, fill: u8) -> Node {
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, last_octet));
    let mut ep = Endpoint::new(Config::new(ip, u64::from(last_octet)));
    let pd = ep.alloc_pd().unwrap();
    let (cq, _) = ep.create_cq(64).unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = ep.reg_mr(pd, base, LEN as u64, base, all).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: true,
    };
    let (qpn, _) = ep.create_qp(&init).unwrap();
    Node {
        ep,
        mem: Flat {
            base,
            buf: (0..LEN).map(|i| (i % 251) as u8 ^ fill).collect(),
        },
        ip,
        qpn,
        cq,
        key: mr.lkey,
        fail: None,
        copies: 0,
    }
}

fn connect(n: &mut Node, peer_ip: IpAddr, peer_qpn: Qpn) {
    let now = Instant::ZERO;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: Access::REMOTE_WRITE | Access::REMOTE_READ,
        ..QpAttr::default()
    };
    let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    n.ep.modify_qp(now, n.qpn, &a, init).unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::M4096;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = 100;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr = AddressVector::to_ip(peer_ip);
    let rtr = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    n.ep.modify_qp(now, n.qpn, &a, rtr).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = 100;
    a.timeout = 10; // 4.1 ms
    a.retry_cnt = 2;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    let rts = M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
    n.ep.modify_qp(now, n.qpn, &a, rts).unwrap();
    n.ep.set_peer_copy(n.qpn, true).unwrap();
}

fn pair() -> (Node, Node) {
    let mut a = node(1, A_BASE, 0);
    let mut b = node(2, B_BASE, 0x5A);
    let (a_ip, b_ip, a_qpn, b_qpn) = (a.ip, b.ip, a.qpn, b.qpn);
    connect(&mut a, b_ip, b_qpn);
    connect(&mut b, a_ip, a_qpn);
    (a, b)
}

fn drain(n: &mut Node, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = n.ep.poll_transmit(now, &mut n.mem, &mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

/// Hands `payload` from `from` to `to` as a lane does.
fn lane(to: &mut Node, from: &Node, now: Instant, payload: &[u8]) {
    let d = Datagram {
        src: SocketAddr::new(from.ip, 4791),
        dst_ip: to.ip,
        payload,
    };
    let mut mem = Lane {
        me: &mut to.mem,
        peer: &from.mem,
        fail: to.fail,
        copies: &mut to.copies,
    };
    to.ep.handle_datagram_unchecked_icrc(now, &d, &mut mem);
}

/// Runs both ways over the lane until neither has anything to send.
fn run(a: &mut Node, b: &mut Node, now: Instant) {
    loop {
        let (to_b, to_a) = (drain(a, now), drain(b, now));
        if to_b.is_empty() && to_a.is_empty() {
            return;
        }
        for p in &to_b {
            lane(b, a, now, p);
        }
        for p in &to_a {
            lane(a, b, now, p);
        }
    }
}

fn wcs(n: &mut Node) -> Vec<Wc> {
    let mut v = Vec::new();
    n.ep.poll_cq(n.cq, 16, |w| v.push(w)).unwrap();
    v
}

fn wr(op: WrOpcode, n: &Node, local: u64, len: u32, remote: u64, rkey: u32) -> SendWr {
    let mut w = SendWr::new(7, op);
    w.flags = SendFlags::SIGNALED;
    w.sgl = vec![Sge {
        addr: local,
        length: len,
        lkey: n.key,
    }];
    w.remote_addr = remote;
    w.rkey = rkey;
    w
}

const T0: Instant = Instant::from_millis(1);

#[test]
fn write_is_one_packet_and_one_copy_from_gathered_sges() {
    let (mut a, mut b) = pair();
    let len = 64 * 1024;
    // Two SGEs, the second from further into A's region.
    let mut w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 40_000, B_BASE + 8, b.key);
    w.sgl.push(Sge {
        addr: A_BASE + 500_000,
        length: len - 40_000,
        lkey: a.key,
    });
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    assert_eq!(req.len(), 1, "one packet for the whole message");
    assert_eq!(req[0][0], 0xE0, "SOFTRDMA_RC_RDMA_WRITE_ONLY_PEER");
    lane(&mut b, &a, T0, &req[0]);
    assert_eq!(b.copies, 1);
    let mut want = a.mem.at(A_BASE, 40_000).to_vec();
    want.extend_from_slice(a.mem.at(A_BASE + 500_000, len as usize - 40_000));
    assert_eq!(b.mem.at(B_BASE + 8, len as usize), &want[..]);
    run(&mut a, &mut b, T0);
    let done = wcs(&mut a);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status, WcStatus::Success);
}

#[test]
fn small_messages_keep_to_packets() {
    let (mut a, mut b) = pair();
    let len = PEER_COPY_MIN - 1;
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, len, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    assert_eq!(req.len(), 4, "4 KiB packets");
    assert!(req.iter().all(|p| p[0] < 0xC0));
    for p in &req {
        lane(&mut b, &a, T0, p);
    }
    assert_eq!(b.copies, 0);
    assert_eq!(
        b.mem.at(B_BASE, len as usize),
        a.mem.at(A_BASE, len as usize)
    );
}

/// A bad rkey or a range outside the region: REM_ACCESS_ERR at the
/// requester, the responder's memory untouched and nothing copied.
#[test]
fn bad_rkey_and_out_of_bounds_copy_nothing() {
    for (remote, bad_key) in [(B_BASE, true), (B_BASE + LEN as u64 - 1000, false)] {
        let (mut a, mut b) = pair();
        let before = b.mem.buf.clone();
        let rkey = if bad_key { b.key ^ 0x100 } else { b.key };
        let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 64 * 1024, remote, rkey);
        a.ep.post_send(T0, a.qpn, w).unwrap();
        run(&mut a, &mut b, T0);
        assert_eq!(b.copies, 0);
        assert!(b.mem.buf == before, "responder memory changed");
        let done = wcs(&mut a);
        assert_eq!(done[0].status, WcStatus::RemAccessErr, "bad key {bad_key}");
        // The READ direction: nothing copied into the requester either.
        let (mut a, mut b) = pair();
        let before = a.mem.buf.clone();
        let w = wr(WrOpcode::RdmaRead, &a, A_BASE, 64 * 1024, remote, rkey);
        a.ep.post_send(T0, a.qpn, w).unwrap();
        run(&mut a, &mut b, T0);
        assert_eq!(a.copies, 0);
        assert!(a.mem.buf == before, "requester memory changed");
        assert_eq!(wcs(&mut a)[0].status, WcStatus::RemAccessErr);
    }
}

/// A WRITE whose ACK is lost is sent again after the timeout: the
/// responder re-ACKs the duplicate without copying again.
#[test]
fn duplicate_write_is_acked_not_copied() {
    let (mut a, mut b) = pair();
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 32 * 1024, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    lane(&mut b, &a, T0, &req[0]);
    let lost_ack = drain(&mut b, T0);
    assert_eq!(lost_ack.len(), 1);
    let t1 = T0 + Duration::from_millis(20);
    a.ep.handle_timeout(t1);
    let again = drain(&mut a, t1);
    assert_eq!(again, req, "the same descriptor again");
    lane(&mut b, &a, t1, &again[0]);
    assert_eq!(b.copies, 1, "a duplicate is not executed twice");
    run(&mut a, &mut b, t1);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::Success);
}

/// A READ: the responder names its checked range, the requester copies it.
/// A retransmitted request is answered again and copied again, safely.
#[test]
fn read_copies_at_the_requester_and_a_duplicate_copies_again() {
    let (mut a, mut b) = pair();
    let len = 1 << 19;
    let w = wr(
        WrOpcode::RdmaRead,
        &a,
        A_BASE + 4096,
        len,
        B_BASE + 64,
        b.key,
    );
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    assert_eq!((req.len(), req[0][0]), (1, 0xE2));
    lane(&mut b, &a, T0, &req[0]);
    let first = drain(&mut b, T0);
    assert_eq!((first.len(), first[0][0]), (1, 0xE3));
    // The response is lost; the request goes again after the timeout.
    let t1 = T0 + Duration::from_millis(20);
    a.ep.handle_timeout(t1);
    let again = drain(&mut a, t1);
    assert_eq!(again, req);
    lane(&mut b, &a, t1, &again[0]);
    let resp = drain(&mut b, t1);
    assert_eq!(resp.len(), 1);
    // Both responses arrive: the first completes the READ, the second is stale.
    lane(&mut a, &b, t1, &first[0]);
    lane(&mut a, &b, t1, &resp[0]);
    assert_eq!(a.copies, 1);
    assert_eq!(
        a.mem.at(A_BASE + 4096, len as usize),
        b.mem.at(B_BASE + 64, len as usize)
    );
    let done = wcs(&mut a);
    assert_eq!((done.len(), done[0].status), (1, WcStatus::Success));
}

/// Failing copies: a requester gone leaves the WRITE unanswered (the retry
/// timer ends it); a fault is the requester's error (REM_OP_ERR); a READ
/// whose responder memory vanished is REM_ACCESS_ERR.
#[test]
fn failing_copies_are_clean_errors() {
    let (mut a, mut b) = pair();
    b.fail = Some(PeerCopyError::Gone);
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 64 * 1024, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let mut now = T0;
    for _ in 0..4 {
        run(&mut a, &mut b, now);
        now = now + Duration::from_millis(20);
        a.ep.handle_timeout(now);
    }
    assert_eq!(wcs(&mut a)[0].status, WcStatus::RetryExcErr);
    assert!(wcs(&mut b).is_empty());

    let (mut a, mut b) = pair();
    b.fail = Some(PeerCopyError::Fault);
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 64 * 1024, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    run(&mut a, &mut b, T0);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::RemOpErr);

    let (mut a, mut b) = pair();
    a.fail = Some(PeerCopyError::Fault);
    let w = wr(WrOpcode::RdmaRead, &a, A_BASE, 64 * 1024, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    run(&mut a, &mut b, T0);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::RemAccessErr);
}

/// Off the wire (the checked entry), a peer-copy packet is dropped unread.
#[test]
fn peer_packets_from_a_wire_are_dropped() {
    let (mut a, mut b) = pair();
    let before = b.mem.buf.clone();
    let w = wr(WrOpcode::RdmaWrite, &a, A_BASE, 64 * 1024, B_BASE, b.key);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    let d = Datagram {
        src: SocketAddr::new(a.ip, 4791),
        dst_ip: b.ip,
        payload: &req[0],
    };
    b.ep.handle_datagram(T0, &d, &mut b.mem);
    assert_eq!(b.ep.stats().drop_malformed, 1);
    assert!(b.mem.buf == before);
    assert!(drain(&mut b, T0).is_empty());
}

fn post_recv(n: &mut Node, addr: u64, len: u32) {
    let wr = softrdma_transport::RecvWr {
        wr_id: 42,
        sgl: vec![Sge {
            addr,
            length: len,
            lkey: n.key,
        }],
    };
    n.ep.post_recv(T0, n.qpn, wr).unwrap();
}

/// A SEND with immediate: one packet, one copy into the receive WQE.
#[test]
fn send_lands_in_the_receive_wqe() {
    let (mut a, mut b) = pair();
    post_recv(&mut b, B_BASE + 100, 200_000);
    let len = 100_000;
    let mut w = wr(WrOpcode::SendWithImm, &a, A_BASE + 3, len, 0, 0);
    w.imm_data = 0xABCD;
    a.ep.post_send(T0, a.qpn, w).unwrap();
    let req = drain(&mut a, T0);
    assert_eq!((req.len(), req[0][0]), (1, 0xE5));
    lane(&mut b, &a, T0, &req[0]);
    run(&mut a, &mut b, T0);
    assert_eq!(
        b.mem.at(B_BASE + 100, len as usize),
        a.mem.at(A_BASE + 3, len as usize)
    );
    let r = wcs(&mut b);
    assert_eq!(
        (r[0].status, r[0].byte_len, r[0].imm_data),
        (WcStatus::Success, len, 0xABCD)
    );
    assert_eq!(wcs(&mut a)[0].status, WcStatus::Success);
}

/// A SEND longer than the receive WQE: nothing copied, LOC_LEN_ERR at the
/// responder, REM_INV_REQ_ERR at the requester.
#[test]
fn send_too_long_for_the_wqe_copies_nothing() {
    let (mut a, mut b) = pair();
    post_recv(&mut b, B_BASE, 20_000);
    let before = b.mem.buf.clone();
    let w = wr(WrOpcode::Send, &a, A_BASE, 40_000, 0, 0);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    run(&mut a, &mut b, T0);
    assert_eq!(b.copies, 0);
    assert!(b.mem.buf == before);
    assert_eq!(wcs(&mut b)[0].status, WcStatus::LocLenErr);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::RemInvReqErr);
}

/// A SEND that finds no receive posted is RNR-NAKed before anything is
/// copied, and copied once when its retry finds one.
#[test]
fn send_without_a_receive_waits_and_copies_once() {
    let (mut a, mut b) = pair();
    let len = 32 * 1024;
    let w = wr(WrOpcode::Send, &a, A_BASE, len, 0, 0);
    a.ep.post_send(T0, a.qpn, w).unwrap();
    run(&mut a, &mut b, T0);
    b.ep.handle_timeout(T0 + Duration::from_millis(50));
    run(&mut a, &mut b, T0 + Duration::from_millis(50));
    assert_eq!(b.copies, 0);
    assert!(wcs(&mut a).is_empty());
    post_recv(&mut b, B_BASE, len);
    let mut now = T0 + Duration::from_millis(50);
    for _ in 0..20 {
        now = now + Duration::from_millis(10);
        a.ep.handle_timeout(now);
        b.ep.handle_timeout(now);
        run(&mut a, &mut b, now);
    }
    assert_eq!(b.copies, 1);
    assert_eq!(wcs(&mut a)[0].status, WcStatus::Success);
    assert_eq!(wcs(&mut b)[0].byte_len, len);
    assert_eq!(
        b.mem.at(B_BASE, len as usize),
        a.mem.at(A_BASE, len as usize)
    );
}
