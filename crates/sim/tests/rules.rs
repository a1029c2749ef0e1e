//! Trace tests, one per transport rule: the exact packets on the wire (opcode,
//! PSN, AckReq, AETH syndrome and MSN, RETH) at literal virtual times, and the
//! exact completions. Every pair starts at t=0 with a one-way latency of 5 µs,
//! so a request sent at t=0 is answered at t=5 and the answer lands at t=10.
//!
//! Node 0 is the requester "A" (send PSN 100 unless a test says otherwise),
//! node 1 the responder "B"; each has one 1 MiB MR at 0x100001000 printed as
//! `mr0`/`mr1`.

#[path = "rules/access.rs"]
mod access;
#[path = "rules/clock.rs"]
mod clock;
#[path = "rules/dup.rs"]
mod dup;
#[path = "rules/errors.rs"]
mod errors;
#[path = "rules/mw.rs"]
mod mw;
#[path = "rules/retry.rs"]
mod retry;
#[path = "rules/seg.rs"]
mod seg;
#[path = "rules/ud.rs"]
mod ud;
#[path = "rules/wrap.rs"]
mod wrap;

use softrdma_sim::Net;
use softrdma_sim::setup::{PairOpts, Side, connect};
use softrdma_sim::trace::wc_line;
use softrdma_transport::{
    CqHandle, Instant, QpState, RecvWr, SendFlags, SendWr, Sge, Wc, WrOpcode,
};

/// A connected RC (or UC) pair with tracing on.
pub(crate) struct Pair {
    pub(crate) net: Net,
    pub(crate) a: Side,
    pub(crate) b: Side,
}

impl Pair {
    pub(crate) fn new(o: PairOpts) -> Pair {
        let mut net = Net::new(2, 1);
        let (a, b) = connect(&mut net, 0, 1, &o);
        net.record();
        Pair { net, a, b }
    }

    pub(crate) fn side(&self, node: usize) -> Side {
        if node == 0 { self.a } else { self.b }
    }

    /// Posts a send WR on `node`'s QP at the current time.
    pub(crate) fn post(&mut self, node: usize, wr: SendWr) {
        let s = self.side(node);
        let now = self.net.now;
        self.net.nodes[node].ep.post_send(now, s.qpn, wr).unwrap();
    }

    /// Posts a receive of `len` bytes at offset `off` of `node`'s MR.
    pub(crate) fn recv(&mut self, node: usize, wr_id: u64, off: u64, len: u32) {
        let s = self.side(node);
        let now = self.net.now;
        let wr = RecvWr {
            wr_id,
            sgl: [sge(&s, off, len)].into(),
        };
        self.net.nodes[node].ep.post_recv(now, s.qpn, wr).unwrap();
    }

    /// Completions on a CQ, as [`wc_line`]s.
    pub(crate) fn wcs(&mut self, node: usize, cq: CqHandle) -> Vec<String> {
        self.wcs_raw(node, cq).iter().map(wc_line).collect()
    }

    pub(crate) fn wcs_raw(&mut self, node: usize, cq: CqHandle) -> Vec<Wc> {
        let mut v = Vec::new();
        self.net.nodes[node]
            .ep
            .poll_cq(cq, usize::MAX, |w| v.push(w))
            .unwrap();
        v
    }

    /// Send-queue completions of `node`.
    pub(crate) fn swc(&mut self, node: usize) -> Vec<String> {
        let cq = self.side(node).scq;
        self.wcs(node, cq)
    }

    /// Receive-queue completions of `node`.
    pub(crate) fn rwc(&mut self, node: usize) -> Vec<String> {
        let cq = self.side(node).rcq;
        self.wcs(node, cq)
    }

    pub(crate) fn state(&self, node: usize) -> QpState {
        let s = self.side(node);
        self.net.nodes[node].ep.query_qp(s.qpn).unwrap().0.qp_state
    }

    /// Runs until nothing is pending (or 10 s of virtual time).
    pub(crate) fn idle(&mut self) {
        self.net.run_idle(Instant::from_millis(10_000));
    }

    /// Fills `node`'s MR at `off` with a recognisable pattern; returns it.
    pub(crate) fn pattern(&mut self, node: usize, off: u64, len: usize, salt: u8) -> Vec<u8> {
        let d: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
            .collect();
        let addr = self.side(node).mr.iova + off;
        self.net.nodes[node].mem.fill(addr, &d);
        d
    }

    pub(crate) fn bytes(&self, node: usize, off: u64, len: usize) -> Vec<u8> {
        let addr = self.side(node).mr.iova + off;
        self.net.nodes[node].mem.bytes(addr, len).to_vec()
    }
}

/// An SGE of `len` bytes at offset `off` of a side's MR.
pub(crate) fn sge(s: &Side, off: u64, len: u32) -> Sge {
    Sge {
        addr: s.mr.iova + off,
        length: len,
        lkey: s.mr.lkey,
    }
}

/// A signaled WR.
pub(crate) fn wr(id: u64, op: WrOpcode, sgl: Vec<Sge>) -> SendWr {
    let mut w = SendWr::new(id, op);
    w.flags = SendFlags::SIGNALED;
    w.sgl = sgl.into();
    w
}

/// A signaled RDMA WR (WRITE/READ) to offset `roff` of the peer's MR.
pub(crate) fn rdma(id: u64, op: WrOpcode, sgl: Vec<Sge>, peer: &Side, roff: u64) -> SendWr {
    let mut w = wr(id, op, sgl);
    w.remote_addr = peer.mr.iova + roff;
    w.rkey = peer.mr.rkey;
    w
}

/// A signaled atomic on the 8 bytes at `roff` of the peer's MR, result to `local`.
pub(crate) fn atomic(id: u64, op: WrOpcode, local: Sge, peer: &Side, roff: u64) -> SendWr {
    rdma(id, op, vec![local], peer, roff)
}

/// Lines of a trace that carry the AckReq bit.
pub(crate) fn ack_req(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.split_whitespace().any(|t| t == "A"))
        .cloned()
        .collect()
}

pub(crate) fn u64_at(p: &Pair, node: usize, off: u64) -> u64 {
    u64::from_ne_bytes(p.bytes(node, off, 8).try_into().unwrap())
}
