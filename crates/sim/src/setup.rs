//! Ready-made objects for tests: a buffer registered on each side and a
//! connected QP pair brought to RTS the way ibv_rc_pingpong does it.

use crate::net::Net;
use softrdma_transport::{
    Access, AddressVector, CqHandle, Mr, Mtu, PdHandle, QpAttr, QpAttrMask as M, QpCap, QpInitAttr,
    QpState, QpType, Qpn,
};

/// Knobs for [`connect`].
#[derive(Debug, Clone, Copy)]
pub struct PairOpts {
    /// Transport.
    pub qp_type: QpType,
    /// Path MTU.
    pub mtu: Mtu,
    /// Registered buffer per side.
    pub buf_len: usize,
    /// Initial send PSN of side A (side B's is `psn_b`).
    pub psn_a: u32,
    /// Initial send PSN of side B.
    pub psn_b: u32,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR timer code each side NAKs with.
    pub min_rnr_timer: u8,
    /// READ/atomic depth both ways.
    pub rd_atomic: u8,
    /// Rights each QP grants its peer.
    pub qp_access: Access,
    /// Rights of each MR.
    pub mr_access: Access,
    /// CQ entries.
    pub cqe: u32,
    /// WRs per queue.
    pub max_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// Signal every send WR.
    pub sq_sig_all: bool,
}

impl Default for PairOpts {
    fn default() -> Self {
        let all = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        PairOpts {
            qp_type: QpType::Rc,
            mtu: Mtu::M1024,
            buf_len: 1 << 20,
            psn_a: 100,
            psn_b: 0x00FF_FF00,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            rd_atomic: 16,
            qp_access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            mr_access: all,
            cqe: 65536,
            max_wr: 4096,
            max_sge: 8,
            sq_sig_all: false,
        }
    }
}

/// One side of a connected pair.
#[derive(Debug, Clone, Copy)]
pub struct Side {
    /// Node index in the net.
    pub node: usize,
    /// Protection domain.
    pub pd: PdHandle,
    /// Send CQ.
    pub scq: CqHandle,
    /// Receive CQ.
    pub rcq: CqHandle,
    /// QP number.
    pub qpn: Qpn,
    /// The registered buffer.
    pub mr: Mr,
}

/// Creates PD, CQs, a QP and a registered buffer on `node`, QP left in RESET.
pub fn side(net: &mut Net, node: usize, o: &PairOpts) -> Side {
    let n = &mut net.nodes[node];
    let pd = n.ep.alloc_pd().unwrap();
    let (scq, _) = n.ep.create_cq(o.cqe).unwrap();
    let (rcq, _) = n.ep.create_cq(o.cqe).unwrap();
    let (qpn, _) =
        n.ep.create_qp(&QpInitAttr {
            qp_type: o.qp_type,
            pd,
            send_cq: scq,
            recv_cq: rcq,
            srq: None,
            cap: QpCap {
                max_send_wr: o.max_wr,
                max_recv_wr: o.max_wr,
                max_send_sge: o.max_sge,
                max_recv_sge: o.max_sge,
                max_inline_data: 256,
            },
            sq_sig_all: o.sq_sig_all,
        })
        .unwrap();
    let host = n.mem.alloc(o.buf_len);
    let mr =
        n.ep.reg_mr(pd, host, o.buf_len as u64, host, o.mr_access)
            .unwrap();
    // Traces print this MR's key as `mr<node>`.
    net.key_names.push((mr.rkey, format!("mr{node}")));
    Side {
        node,
        pd,
        scq,
        rcq,
        qpn,
        mr,
    }
}

/// Brings `s` from RESET to RTS towards `peer` (RC/UC), as ibv_rc_pingpong does.
pub fn bring_up(net: &mut Net, s: &Side, peer: &Side, o: &PairOpts, sq_psn: u32, rq_psn: u32) {
    let now = net.now;
    let peer_ip = net.nodes[peer.node].addr;
    let ep = &mut net.nodes[s.node].ep;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: o.qp_access,
        port_num: 1,
        ..QpAttr::default()
    };
    ep.modify_qp(
        now,
        s.qpn,
        &a,
        M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = o.mtu;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = o.rd_atomic;
    a.min_rnr_timer = o.min_rnr_timer;
    a.ah_attr = AddressVector::to_ip(peer_ip);
    let rtr = if o.qp_type.is_reliable() {
        M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER
    } else {
        M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN
    };
    ep.modify_qp(now, s.qpn, &a, rtr).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = sq_psn;
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = o.rd_atomic;
    let rts = if o.qp_type.is_reliable() {
        M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
    } else {
        M::STATE | M::SQ_PSN
    };
    ep.modify_qp(now, s.qpn, &a, rts).unwrap();
}

/// A connected pair between nodes `a` and `b`.
pub fn connect(net: &mut Net, a: usize, b: usize, o: &PairOpts) -> (Side, Side) {
    let sa = side(net, a, o);
    let sb = side(net, b, o);
    bring_up(net, &sa, &sb, o, o.psn_a, o.psn_b);
    bring_up(net, &sb, &sa, o, o.psn_b, o.psn_a);
    (sa, sb)
}

/// An XRC connection: an XRC send QP on one node, and on the other an XRC
/// receive QP of domain 1 with XRC SRQs of that domain, each with its own CQ.
#[derive(Debug, Clone)]
pub struct XrcPair {
    /// The sender: its XRC send QP, PD, CQ (`scq` = `rcq`) and buffer.
    pub send: Side,
    /// The target: its XRC receive QP, a PD and buffer for the SRQs
    /// (`scq`/`rcq` are the first SRQ's CQ).
    pub recv: Side,
    /// (SRQ, its CQ, its XRC SRQ number) on the target.
    pub srqs: Vec<(softrdma_transport::SrqHandle, CqHandle, u32)>,
}

/// An XRC send QP on node `a` connected to an XRC receive QP on node `b`
/// with `n_srqs` XRC SRQs (`o.max_wr` WRs each), both at RTS.
pub fn xrc_pair(net: &mut Net, a: usize, b: usize, o: &PairOpts, n_srqs: usize) -> XrcPair {
    let send = side(
        net,
        a,
        &PairOpts {
            qp_type: QpType::XrcSend,
            ..*o
        },
    );
    let nb = &mut net.nodes[b];
    let pd = nb.ep.alloc_pd().unwrap();
    let qpn = nb.ep.create_xrc_recv_qp(1).unwrap();
    let mut srqs = Vec::new();
    for _ in 0..n_srqs.max(1) {
        let (cq, _) = nb.ep.create_cq(o.cqe).unwrap();
        let (h, _, _) = nb
            .ep
            .create_xrc_srq(pd, 1, cq, o.max_wr, o.max_sge, 0)
            .unwrap();
        let num = nb.ep.srq_num(h).unwrap();
        srqs.push((h, cq, num));
    }
    let host = nb.mem.alloc(o.buf_len);
    let mr = nb
        .ep
        .reg_mr(pd, host, o.buf_len as u64, host, o.mr_access)
        .unwrap();
    net.key_names.push((mr.rkey, format!("mr{b}")));
    let recv = Side {
        node: b,
        pd,
        scq: srqs[0].1,
        rcq: srqs[0].1,
        qpn,
        mr,
    };
    let xo = PairOpts {
        qp_type: QpType::XrcRecv,
        ..*o
    };
    let so = PairOpts {
        qp_type: QpType::XrcSend,
        ..*o
    };
    bring_up(net, &send, &recv, &so, o.psn_a, o.psn_b);
    bring_up(net, &recv, &send, &xo, o.psn_b, o.psn_a);
    XrcPair { send, recv, srqs }
}

/// A UD QP on `node` with its own PD, CQs and MR, brought to RTS with `qkey`.
pub fn ud_side(net: &mut Net, node: usize, qkey: u32, o: &PairOpts) -> Side {
    let o = PairOpts {
        qp_type: QpType::Ud,
        ..*o
    };
    let s = side(net, node, &o);
    let now = net.now;
    let ep = &mut net.nodes[node].ep;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qkey,
        port_num: 1,
        ..QpAttr::default()
    };
    ep.modify_qp(now, s.qpn, &a, M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY)
        .unwrap();
    a.qp_state = QpState::Rtr;
    ep.modify_qp(now, s.qpn, &a, M::STATE).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = 0;
    ep.modify_qp(now, s.qpn, &a, M::STATE | M::SQ_PSN).unwrap();
    s
}

/// The UD destination of `peer` as seen from anywhere in `net`.
pub fn ud_dest(net: &Net, peer: &Side, qkey: u32) -> softrdma_transport::UdDest {
    softrdma_transport::UdDest {
        av: AddressVector::to_ip(net.nodes[peer.node].addr),
        remote_qpn: peer.qpn,
        remote_qkey: qkey,
    }
}
