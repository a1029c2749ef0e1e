//! The RC workload: connections between nodes, random operations in both
//! directions of each, and the model state the oracle ([`super::rc_check`])
//! checks completions and memory against.
//!
//! Why the model can predict every byte: each direction of a connection owns
//! its own areas (send buffers and READ/atomic result buffers on the
//! requester, receive buffers, a WRITE/READ area and atomic counters on the
//! responder), so only operations of one QP — executed in PSN order — ever
//! touch them; a WRITE that overlaps a READ still outstanding is fenced, so a
//! re-executed duplicate READ cannot see it. Only the shared counters are
//! hit by several QPs at once, and those are checked for linearizability.

use super::mem::{NodeMem, Piece, RngExt};
use super::{Kind, RcConfig};
use crate::net::Net;
use crate::setup::{PairOpts, Side, bring_up};
use softrdma_transport::{
    Access, CqHandle, Instant, Mtu, QpCap, QpInitAttr, QpType, Qpn, RecvWr, Rng, SrqHandle,
};
use std::collections::VecDeque;

/// Largest message.
pub(crate) const MAX_MSG: u64 = 64 * 1024;
/// Largest message into an SRQ slot.
pub(crate) const SRQ_MSG: u64 = 16 * 1024;
/// Ring sizes (per MR, per direction) and the WRITE/READ area.
const RING: u64 = 96 * 1024;
pub(crate) const REMOTE: u64 = 80 * 1024;
/// SRQ slots per node with an SRQ.
const SRQ_SLOTS: usize = 48;
/// Counters per direction (private) and per node (shared).
pub(crate) const COUNTERS: u64 = 8;
pub(crate) const SHARED: u64 = 4;
/// The send queue depth; the model keeps fewer unconfirmed WRs than this.
const SQ_DEPTH: u32 = 128;

#[derive(Debug)]
pub(crate) struct Op {
    pub(crate) wr_id: u64,
    pub(crate) kind: Kind,
    pub(crate) len: u64,
    pub(crate) signaled: bool,
    /// Local buffers: the source of SEND/WRITE, the destination of READ/atomics.
    pub(crate) local: Vec<Piece>,
    /// Bytes expected in `local` when it completes (READ data, atomic original).
    pub(crate) expect: Option<Vec<u8>>,
    /// WRITE/READ range on the responder: (MR, offset, len); atomics: the counter.
    pub(crate) remote: Option<(usize, u64, u64)>,
    /// Index of the message it delivers (SEND, WRITE with immediate).
    pub(crate) msg: Option<u64>,
    /// Shared counter: (index, addend).
    pub(crate) shared: Option<(usize, u64)>,
}

#[derive(Debug)]
pub(crate) struct Msg {
    pub(crate) index: u64,
    pub(crate) len: u64,
    pub(crate) imm: Option<u32>,
    /// SEND payload (None: WRITE with immediate, whose data goes to `remote`).
    pub(crate) data: Option<Vec<u8>>,
}

#[derive(Debug)]
pub(crate) struct Recv {
    pub(crate) wr_id: u64,
    pub(crate) pieces: Vec<Piece>,
}

/// One direction of one connection: requester QP `sq` on node `s`, responder
/// QP `rq` on node `r`.
#[derive(Debug)]
pub(crate) struct Dir {
    pub(crate) conn: usize,
    pub(crate) s: usize,
    pub(crate) r: usize,
    pub(crate) sq: Qpn,
    pub(crate) rq: Qpn,
    pub(crate) mtu: u64,
    pub(crate) srq: bool,
    /// The requester QP signals every WR.
    pub(crate) sig_all: bool,
    pub(crate) src: Vec<usize>,
    pub(crate) dst: Vec<usize>,
    pub(crate) rbuf: Vec<usize>,
    /// Offsets of the WRITE/READ area in each MR of `r`.
    pub(crate) remote: Vec<u64>,
    /// Offset of the private counters in MR 0 of `r`.
    pub(crate) counters: u64,
    pub(crate) ops: VecDeque<Op>,
    pub(crate) next_op: u64,
    pub(crate) recvs: VecDeque<Recv>,
    pub(crate) late: VecDeque<(Instant, Recv)>,
    pub(crate) next_recv: u64,
    pub(crate) msgs: VecDeque<Msg>,
    pub(crate) next_msg: u64,
    /// Messages the receiver completed successfully.
    pub(crate) delivered: u64,
    /// The requester reported an error; everything after is a flush.
    pub(crate) failed: bool,
    /// The receive queue reported a flush; everything after is a flush.
    pub(crate) recv_flushed: bool,
    pub(crate) unsignaled_run: u32,
}

/// A fetch-add on a shared counter: direction, WR id, addend, and the value
/// it returned (None: it failed, and may or may not have executed).
pub(crate) type SharedResult = (usize, u64, u64, Option<u64>);

/// The whole simulated system plus the model.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) cfg: RcConfig,
    pub(crate) net: Net,
    pub(crate) rng: Rng,
    pub(crate) mem: Vec<NodeMem>,
    pub(crate) scq: Vec<CqHandle>,
    pub(crate) rcq: Vec<CqHandle>,
    pub(crate) srq: Vec<Option<SrqHandle>>,
    /// SRQ slots per node: pieces, and the time a free slot is re-posted.
    pub(crate) slots: Vec<Vec<(Vec<Piece>, Option<Instant>)>>,
    pub(crate) dirs: Vec<Dir>,
    /// Per connection: an error was seen on it; post nothing more.
    pub(crate) conn_failed: Vec<bool>,
    pub(crate) pds: Vec<softrdma_transport::PdHandle>,
    /// Offset of each node's shared counters in its MR 0.
    pub(crate) shared_at: Vec<u64>,
    /// Per (node, counter): initial value and the results seen
    /// (direction, op sequence, addend, original value or None if failed).
    pub(crate) shared_log: Vec<Vec<(u64, Vec<SharedResult>)>>,
    pub(crate) budget: usize,
    /// Directions that ran out of retries, and operations that failed.
    pub(crate) exhausted: usize,
    pub(crate) nfailed: usize,
    pub(crate) reconnects: usize,
    pub(crate) counts: Vec<(Kind, usize)>,
    pub(crate) bytes: u64,
}

const MTUS: [Mtu; 5] = [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096];

impl World {
    pub(crate) fn new(cfg: &RcConfig) -> World {
        let mut net = Net::new_with(cfg.nodes, cfg.seed, |c| {
            c.direct = cfg.direct;
            c.express = cfg.direct && cfg.express;
            c.lane_acks = cfg.direct && cfg.lane_acks;
        });
        net.faults = cfg.faults;
        let rng = Rng::new(cfg.seed ^ 0xA5A5_0000_1234);
        let n = cfg.nodes;
        // Count roles to size the MRs.
        let mut req = vec![0u64; n];
        let mut resp = vec![0u64; n];
        for &(x, y) in &cfg.conns {
            req[x] += 1;
            req[y] += 1;
            resp[x] += 1;
            resp[y] += 1;
        }
        let all = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let (mut mem, mut scq, mut rcq, mut srq, mut pds) =
            (vec![], vec![], vec![], vec![], vec![]);
        for i in 0..n {
            let srq_area = if cfg.srq_node == Some(i) {
                SRQ_SLOTS as u64 * SRQ_MSG
            } else {
                0
            };
            let per_mr = req[i] * 2 * RING + resp[i] * (RING + REMOTE) + 4096 + srq_area;
            let node = &mut net.nodes[i];
            let pd = node.ep.alloc_pd().unwrap();
            let mut mrs = Vec::new();
            for m in 0..3u64 {
                let host = node.mem.alloc(per_mr as usize);
                // MR 0 addressed by host address, MR 1 at a high IOVA, MR 2
                // zero-based: RETH and SGE addresses are IOVAs, not host ones.
                let iova = match m {
                    0 => host,
                    1 => 0x7F00_0000_0000 + (i as u64) * 0x10_0000_0000,
                    _ => 0,
                };
                mrs.push(node.ep.reg_mr(pd, host, per_mr, iova, all).unwrap());
            }
            let cqe = 1 << 16;
            scq.push(node.ep.create_cq(cqe).unwrap().0);
            rcq.push(node.ep.create_cq(cqe).unwrap().0);
            srq.push(if cfg.srq_node == Some(i) {
                Some(node.ep.create_srq(pd, SRQ_SLOTS as u32, 4, 0).unwrap().0)
            } else {
                None
            });
            pds.push(pd);
            mem.push(NodeMem::new(mrs));
        }
        let mut w = World {
            cfg: cfg.clone(),
            net,
            rng,
            mem,
            scq,
            rcq,
            srq,
            slots: vec![Vec::new(); n],
            dirs: Vec::new(),
            conn_failed: vec![false; cfg.conns.len()],
            shared_at: vec![0; n],
            pds,
            shared_log: vec![Vec::new(); n],
            budget: cfg.ops,
            exhausted: 0,
            nfailed: 0,
            reconnects: 0,
            counts: Vec::new(),
            bytes: 0,
        };
        for i in 0..n {
            w.shared_at[i] = w.mem[i].carve(0, 8 * SHARED);
            for c in 0..SHARED {
                let v = w.rng.range(0, 1 << 40);
                let h = w.mem[i].host(0, w.shared_at[i] + 8 * c);
                w.app_write(i, h, &v.to_ne_bytes());
                w.shared_log[i].push((v, Vec::new()));
            }
        }
        for (c, &(x, y)) in cfg.conns.clone().iter().enumerate() {
            w.connect(c, x, y);
        }
        for i in 0..n {
            if w.srq[i].is_some() {
                w.setup_srq(i);
            }
        }
        w
    }

    /// Application write of its own memory (real and shadow).
    pub(crate) fn app_write(&mut self, node: usize, host: u64, data: &[u8]) {
        self.net.nodes[node].mem.fill(host, data);
        self.mem[node].shadow.write(host, data);
    }

    /// Creates and connects a fresh QP pair for connection `c`: random MTU,
    /// PSNs just below the wrap, READ depth, RNR timer and signalling.
    /// Returns (QPN, sq_sig_all) per side and the MTU.
    fn open(&mut self, x: usize, y: usize) -> ([(Qpn, bool); 2], Mtu) {
        let mtu = MTUS[self.rng.below(5) as usize];
        let o = PairOpts {
            mtu,
            psn_a: 0xFF_FFFF - self.rng.range(0, 3000) as u32,
            psn_b: 0xFF_FFFF - self.rng.range(0, 3000) as u32,
            timeout: self.cfg.timeout,
            retry_cnt: self.cfg.retry_cnt,
            rnr_retry: 7,
            min_rnr_timer: self.rng.range(1, 3) as u8,
            rd_atomic: [1u8, 2, 4, 8, 16, 128][self.rng.below(6) as usize],
            ..PairOpts::default()
        };
        let mut sides = Vec::new();
        let mut out = [(0, false); 2];
        for (i, node) in [x, y].into_iter().enumerate() {
            let sig_all = self.rng.chance(0.2);
            let pd = self.pds[node];
            let ep = &mut self.net.nodes[node].ep;
            let (qpn, _) = ep
                .create_qp(&QpInitAttr {
                    qp_type: QpType::Rc,
                    pd,
                    send_cq: self.scq[node],
                    recv_cq: self.rcq[node],
                    srq: self.srq[node],
                    cap: QpCap {
                        max_send_wr: SQ_DEPTH,
                        max_recv_wr: SQ_DEPTH * 2,
                        max_send_sge: 4,
                        max_recv_sge: 4,
                        max_inline_data: 256,
                    },
                    sq_sig_all: sig_all,
                })
                .unwrap();
            out[i] = (qpn, sig_all);
            sides.push(Side {
                node,
                pd,
                scq: self.scq[node],
                rcq: self.rcq[node],
                qpn,
                mr: self.mem[node].mrs[0],
            });
        }
        bring_up(&mut self.net, &sides[0], &sides[1], &o, o.psn_a, o.psn_b);
        bring_up(&mut self.net, &sides[1], &sides[0], &o, o.psn_b, o.psn_a);
        if self.cfg.direct {
            // Peers on a lane, as the engine marks them: direct records.
            for s in &sides {
                self.net.nodes[s.node]
                    .ep
                    .set_peer_copy(s.qpn, true)
                    .unwrap();
            }
        }
        (out, mtu)
    }

    fn connect(&mut self, c: usize, x: usize, y: usize) {
        let (q, mtu) = self.open(x, y);
        for (a, b) in [(0, 1), (1, 0)] {
            let (s, r) = ([x, y][a], [x, y][b]);
            let src = self.mem[s].rings(RING);
            let dst = self.mem[s].rings(RING);
            let srq = self.srq[r].is_some();
            let rbuf = if srq { vec![] } else { self.mem[r].rings(RING) };
            let remote: Vec<u64> = (0..3).map(|m| self.mem[r].carve(m, REMOTE)).collect();
            let counters = self.mem[r].carve(0, 8 * COUNTERS);
            self.dirs.push(Dir {
                conn: c,
                s,
                r,
                sq: q[a].0,
                rq: q[b].0,
                mtu: u64::from(mtu.bytes()),
                srq,
                sig_all: q[a].1,
                src,
                dst,
                rbuf,
                remote,
                counters,
                ops: VecDeque::new(),
                next_op: 0,
                recvs: VecDeque::new(),
                late: VecDeque::new(),
                next_recv: 0,
                msgs: VecDeque::new(),
                next_msg: 0,
                delivered: 0,
                failed: false,
                recv_flushed: false,
                unsignaled_run: 0,
            });
            let d = self.dirs.len() - 1;
            self.init_areas(d);
        }
    }

    /// The application (re)initialises a direction's WRITE/READ area and
    /// counters with random data (real memory and shadow).
    fn init_areas(&mut self, d: usize) {
        let r = self.dirs[d].r;
        for m in 0..3 {
            let fill = self.rng.bytes(REMOTE as usize);
            let h = self.mem[r].host(m, self.dirs[d].remote[m]);
            self.app_write(r, h, &fill);
        }
        for k in 0..COUNTERS {
            let v = self.rng.next_u64().to_ne_bytes();
            let h = self.mem[r].host(0, self.dirs[d].counters + 8 * k);
            self.app_write(r, h, &v);
        }
    }

    /// After an error on connection `c` has run its course (no WR of either
    /// direction unresolved), tears both QPs down — moving them to ERR
    /// flushes the posted receives, which the caller checks — and connects
    /// a fresh pair (new QPNs, so packets of the old pair still in flight are
    /// dropped), as an application reconnecting would.
    pub(crate) fn reconnect(&mut self, c: usize) -> Vec<(usize, Qpn)> {
        let ds: Vec<usize> = (0..self.dirs.len())
            .filter(|&d| self.dirs[d].conn == c)
            .collect();
        let (x, y) = (self.dirs[ds[0]].s, self.dirs[ds[0]].r);
        let old = vec![(x, self.dirs[ds[0]].sq), (y, self.dirs[ds[1]].sq)];
        let (q, mtu) = self.open(x, y);
        for (k, &d) in ds.iter().enumerate() {
            let r = self.dirs[d].r;
            let late: Vec<Recv> = self.dirs[d].late.drain(..).map(|l| l.1).collect();
            for rec in late {
                self.mem[r].forget(&rec.pieces);
                self.mem[r].free(&rec.pieces);
            }
            let x = &mut self.dirs[d];
            debug_assert!(x.ops.is_empty() && x.recvs.is_empty());
            x.sq = q[k].0;
            x.rq = q[1 - k].0;
            x.sig_all = q[k].1;
            x.mtu = u64::from(mtu.bytes());
            x.msgs.clear();
            x.delivered = x.next_msg;
            x.failed = false;
            x.recv_flushed = false;
            x.unsignaled_run = 0;
            self.init_areas(d);
        }
        self.conn_failed[c] = false;
        old
    }

    fn setup_srq(&mut self, node: usize) {
        for slot in 0..SRQ_SLOTS {
            // Each slot: SRQ_MSG bytes in one to three MRs.
            let k = self.rng.range(1, 3);
            let mut pieces = Vec::new();
            let mut left = SRQ_MSG;
            for j in 0..k {
                let len = if j + 1 == k { left } else { left / 2 };
                left -= len;
                let mr = j as usize;
                let off = self.mem[node].carve(mr, len);
                pieces.push(self.mem[node].fixed_piece(mr, off, len));
            }
            self.slots[node].push((pieces, None));
            self.post_slot(node, slot);
        }
    }

    pub(crate) fn post_slot(&mut self, node: usize, slot: usize) {
        let sgl = self.slots[node][slot]
            .0
            .iter()
            .map(|p| self.mem[node].sge(p))
            .collect();
        let wr = RecvWr {
            wr_id: slot as u64,
            sgl,
        };
        let srq = self.srq[node].expect("node has an SRQ");
        self.net.nodes[node].ep.post_srq_recv(srq, wr).unwrap();
        self.slots[node][slot].1 = None;
    }
}
