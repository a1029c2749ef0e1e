//! The harness of the peer-copy tests: two sans-IO endpoints whose
//! packets a fake lane hands over, with a fake copier that reads the other
//! endpoint's memory.

pub(crate) use softrdma_transport::{
    Access, AddressVector, AtomicOp, Config, CqHandle, Datagram, Endpoint, Instant, Memory, Mtu,
    PEER_COPY_MIN, PeerCopyError, PeerSeg, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState,
    QpType, Qpn, RecvWr, SendFlags, SendWr, Sge, Wc, WcStatus, WrOpcode,
};
pub(crate) use std::net::{IpAddr, Ipv4Addr, SocketAddr};
pub(crate) use std::time::Duration;

/// Flat memory: host addresses `base..base + buf.len()`.
pub(crate) struct Flat {
    pub(crate) base: u64,
    pub(crate) buf: Vec<u8>,
}

impl Flat {
    pub(crate) fn at(&self, addr: u64, len: usize) -> &[u8] {
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
pub(crate) struct Lane<'a> {
    me: &'a mut Flat,
    peer: &'a Flat,
    pub(crate) fail: Option<PeerCopyError>,
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
    fn read_peer(
        &mut self,
        _from: u64,
        src: &[PeerSeg],
        dst: &[PeerSeg],
        _dst_on_demand: bool,
    ) -> Result<(), PeerCopyError> {
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

pub(crate) struct Node {
    pub(crate) ep: Endpoint,
    pub(crate) mem: Flat,
    pub(crate) ip: IpAddr,
    pub(crate) qpn: Qpn,
    pub(crate) cq: CqHandle,
    pub(crate) key: u32,
    pub(crate) fail: Option<PeerCopyError>,
    pub(crate) copies: u32,
}

pub(crate) const LEN: usize = 1 << 20;
pub(crate) const A_BASE: u64 = 0x10_0000;
pub(crate) const B_BASE: u64 = 0x80_0000;

pub(crate) fn node(last_octet: u8, base: u64, fill: u8) -> Node {
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

pub(crate) fn connect(n: &mut Node, peer_ip: IpAddr, peer_qpn: Qpn) {
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

pub(crate) fn pair() -> (Node, Node) {
    let mut a = node(1, A_BASE, 0);
    let mut b = node(2, B_BASE, 0x5A);
    let (a_ip, b_ip, a_qpn, b_qpn) = (a.ip, b.ip, a.qpn, b.qpn);
    connect(&mut a, b_ip, b_qpn);
    connect(&mut b, a_ip, a_qpn);
    (a, b)
}

pub(crate) fn drain(n: &mut Node, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = n.ep.poll_transmit(now, &mut n.mem, &mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

/// Hands `payload` from `from` to `to` as a lane does.
pub(crate) fn lane(to: &mut Node, from: &Node, now: Instant, payload: &[u8]) {
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
pub(crate) fn run(a: &mut Node, b: &mut Node, now: Instant) {
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

pub(crate) fn wcs(n: &mut Node) -> Vec<Wc> {
    let mut v = Vec::new();
    n.ep.poll_cq(n.cq, 16, |w| v.push(w)).unwrap();
    v
}

pub(crate) fn wr(op: WrOpcode, n: &Node, local: u64, len: u32, remote: u64, rkey: u32) -> SendWr {
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

pub(crate) const T0: Instant = Instant::from_millis(1);

pub(crate) fn post_recv(n: &mut Node, addr: u64, len: u32) {
    let wr = RecvWr {
        wr_id: 42,
        sgl: vec![Sge {
            addr,
            length: len,
            lkey: n.key,
        }],
    };
    n.ep.post_recv(T0, n.qpn, wr).unwrap();
}
