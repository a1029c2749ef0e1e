//! Flat memory for sans-IO endpoint tests (shared by several test files).

use softrdma_transport::{
    Access, AddressVector, Datagram, Endpoint, Instant, Memory, Mtu, QpAttr, QpAttrMask as M,
    QpState, Qpn,
};
use std::net::{IpAddr, SocketAddr};

/// Brings RC (or XRC) QP `qpn` of `ep` from RESET to RTS, connected to
/// `peer_qpn` at `peer_ip`: every remote right, MTU 1024, PSNs 100, four
/// READs/atomics each way, RC's full attribute set at every step (as
/// ibv_xsrq_pingpong passes it to both XRC halves).
pub(crate) fn connect(ep: &mut Endpoint, qpn: Qpn, peer_ip: IpAddr, peer_qpn: Qpn) {
    let now = Instant::ZERO;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        ..QpAttr::default()
    };
    let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    ep.modify_qp(now, qpn, &a, init).unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::M1024;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = 100;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr = AddressVector::to_ip(peer_ip);
    let rtr = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
    ep.modify_qp(now, qpn, &a, rtr | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER)
        .unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = 100;
    a.timeout = 10;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    let rts = M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN;
    ep.modify_qp(now, qpn, &a, rts | M::MAX_QP_RD_ATOMIC)
        .unwrap();
}

/// Every packet `ep` has to send at `now`.
pub(crate) fn drain(ep: &mut Endpoint, mem: &mut Flat, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = ep.poll_transmit(now, mem, &mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

/// Hands `ep` (at `to_ip`) a packet from `from_ip` at `now`.
pub(crate) fn deliver(
    ep: &mut Endpoint,
    mem: &mut Flat,
    to_ip: IpAddr,
    from_ip: IpAddr,
    now: Instant,
    payload: &[u8],
) {
    let d = Datagram {
        src: SocketAddr::new(from_ip, 4791),
        dst_ip: to_ip,
        payload,
    };
    ep.handle_datagram(now, &d, mem);
}

/// Flat memory for one sans-IO endpoint: host addresses `base..base + len`.
pub(crate) struct Flat {
    pub(crate) base: u64,
    pub(crate) buf: Vec<u8>,
}

impl Flat {
    /// `len` bytes at host address `base`, byte `i` holding `i % 251` (a
    /// pattern no power-of-two stride repeats), so a misplaced copy shows.
    pub(crate) fn patterned(base: u64, len: usize) -> Flat {
        Flat {
            base,
            buf: (0..len).map(|i| (i % 251) as u8).collect(),
        }
    }
}

impl Memory for Flat {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        let o = (addr - self.base) as usize;
        dst.copy_from_slice(&self.buf[o..o + dst.len()]);
    }
    fn write(&mut self, addr: u64, src: &[u8]) {
        let o = (addr - self.base) as usize;
        self.buf[o..o + src.len()].copy_from_slice(src);
    }
    fn atomic(&mut self, addr: u64, op: softrdma_transport::AtomicOp) -> u64 {
        let o = (addr - self.base) as usize;
        let old = u64::from_ne_bytes(self.buf[o..o + 8].try_into().unwrap());
        let new = match op {
            softrdma_transport::AtomicOp::FetchAdd { add } => old.wrapping_add(add),
            softrdma_transport::AtomicOp::CompareSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
        };
        self.buf[o..o + 8].copy_from_slice(&new.to_ne_bytes());
        old
    }
}
