//! Randomized workloads with an oracle.
//!
//! [`run_rc`] builds several nodes with several RC connections between them
//! (both directions busy at once, one node's QPs sharing an SRQ), posts
//! thousands of random operations — SENDs with SGE lists across MRs,
//! inline SENDs, immediates, zero-length messages, multi-MTU messages at all
//! five MTUs, WRITEs, READs, compare-swaps and fetch-adds, some fenced, some
//! unsignaled, receives sometimes posted late — over a faulty network, and
//! checks everything: every WR completes exactly once, in order, with the
//! right fields; every message arrives exactly once, in order, byte-exact;
//! every READ and atomic returns what the sequential model says; shared
//! counters are linearizable; and at the end every byte of every node's
//! registered memory equals the model's shadow copy.
//!
//! [`run_uc`] and [`run_ud`] do the same for the unreliable transports,
//! where the oracle accepts lost messages but nothing partial, corrupt,
//! duplicated or out of order.
//!
//! A rejected run names the seed, the virtual time and what was wrong; with
//! `SOFTRDMA_SIM_TRACE=1` in the environment it also prints the last 2000
//! packets (see [`crate::trace`]).

mod mem;
mod rc;
mod rc_check;
mod rc_gen;
mod uc;
mod ud;

pub use uc::{UcConfig, UcReport, run_uc};
pub use ud::{UdConfig, UdReport, run_ud};

use crate::net::{Faults, NetStats};
use softrdma_transport::{Instant, Stats};
use std::fmt;

/// Operation kinds the RC workload generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// SEND from an SGE list.
    Send,
    /// SEND with immediate.
    SendImm,
    /// Inline SEND (payload copied at post time).
    SendInline,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate (consumes a receive).
    WriteImm,
    /// RDMA READ.
    Read,
    /// Compare-and-swap on a counter private to the QP.
    CmpSwap,
    /// Fetch-and-add on a counter private to the QP.
    FetchAdd,
    /// Fetch-and-add on a counter several QPs on several nodes hit.
    SharedFetchAdd,
}

/// What [`run_rc`] runs.
#[derive(Debug, Clone, PartialEq)]
pub struct RcConfig {
    /// Seed of everything.
    pub seed: u64,
    /// Network faults.
    pub faults: Faults,
    /// Operations to post in total (over all directions).
    pub ops: usize,
    /// Nodes.
    pub nodes: usize,
    /// Connections (node pairs; a pair may repeat for several QPs).
    pub conns: Vec<(usize, usize)>,
    /// This node's QPs receive through one shared receive queue.
    pub srq_node: Option<usize>,
    /// Accept retry exhaustion (RETRY_EXC_ERR then flushes) as an outcome.
    pub allow_exhaustion: bool,
    /// Local ACK timeout exponent of every QP.
    pub timeout: u8,
    /// Transport retries of every QP (a count; rnr_retry is 7, infinite).
    pub retry_cnt: u8,
    /// Probability that a receive is posted up to 300 µs late (RNR NAKs).
    pub late_recv: f64,
    /// Unconfirmed operations per direction.
    pub window: usize,
    /// After an error, tear the connection down and connect a new QP pair
    /// (so a lossy run still reaches its operation count).
    pub reconnect: bool,
    /// Lone small SENDs, WRITEs and READs to idle QPs leave as direct
    /// records, and small READs are answered with response records
    /// (`Config::direct`, the same-host path's; messages then stay below
    /// `PEER_COPY_MIN`, since the QPs are marked as reached through a lane).
    pub direct: bool,
    /// With `direct`: the responder executes in-order one-packet SENDs and
    /// WRITEs off records by its express path (`Config::express`).
    pub express: bool,
    /// With `direct`: posts go through each QP's express cell first
    /// (`Endpoint::express`, `Express::post`), as the C ABI's do.
    pub express_post: bool,
    /// Only SENDs and WRITEs (± immediate data, inline), no READs or
    /// atomics: the traffic a responder lent with its requester takes.
    pub no_reads: bool,
    /// With `direct`: records carry the responder's plain ACKs
    /// (`Config::lane_acks`, on in the engine).
    pub lane_acks: bool,
}

impl RcConfig {
    /// Three nodes, four connections (two between nodes 0 and 1), node 1's
    /// QPs on an SRQ, `ops` operations, `loss` with the usual fault mix.
    pub fn standard(seed: u64, loss: f64, ops: usize) -> RcConfig {
        RcConfig {
            seed,
            faults: Faults::mixed(loss),
            ops,
            nodes: 3,
            conns: vec![(0, 1), (0, 1), (1, 2), (2, 0)],
            srq_node: Some(1),
            allow_exhaustion: false,
            timeout: 8,
            retry_cnt: 7,
            late_recv: 0.1,
            window: 48,
            reconnect: true,
            direct: false,
            express: false,
            express_post: false,
            no_reads: false,
            lane_acks: false,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    /// Operations posted, by kind.
    pub by_kind: Vec<(Kind, usize)>,
    /// Operations that completed successfully.
    pub succeeded: usize,
    /// Operations that completed with an error (exhaustion or flush).
    pub failed: usize,
    /// Payload bytes posted.
    pub bytes: u64,
    /// Virtual time at the end.
    pub elapsed: Instant,
    /// Network counters.
    pub net: NetStats,
    /// Transport counters summed over the nodes.
    pub stats: Stats,
    /// Directions whose requester ran out of retries (RETRY_EXC_ERR).
    pub exhausted_dirs: usize,
    /// Connections that saw an error.
    pub failed_conns: usize,
    /// Directions in all.
    pub dirs: usize,
    /// Connections torn down and connected again after an error.
    pub reconnects: usize,
}

impl Report {
    /// Operations posted.
    pub fn ops(&self) -> usize {
        self.by_kind.iter().map(|k| k.1).sum()
    }
}

/// Runs the RC workload; `Err` describes the first thing the oracle rejected.
pub fn run_rc(cfg: &RcConfig) -> Result<Report, String> {
    let mut w = rc::World::new(cfg);
    w.run()
}

/// Adds transport counters (the struct is non-exhaustive, so field by field).
pub fn add_stats(a: &mut Stats, b: &Stats) {
    a.tx_packets += b.tx_packets;
    a.tx_bytes += b.tx_bytes;
    a.rx_packets += b.rx_packets;
    a.rx_bytes += b.rx_bytes;
    a.retransmits += b.retransmits;
    a.timeouts += b.timeouts;
    a.tx_nak_seq += b.tx_nak_seq;
    a.tx_nak_other += b.tx_nak_other;
    a.tx_rnr_nak += b.tx_rnr_nak;
    a.rx_nak += b.rx_nak;
    a.rx_rnr_nak += b.rx_rnr_nak;
    a.rx_duplicates += b.rx_duplicates;
    a.drop_bad_icrc += b.drop_bad_icrc;
    a.drop_malformed += b.drop_malformed;
    a.drop_unknown_qpn += b.drop_unknown_qpn;
    a.drop_bad_state += b.drop_bad_state;
    a.drop_bad_pkey += b.drop_bad_pkey;
    a.drop_bad_qkey += b.drop_bad_qkey;
    a.drop_bad_addr += b.drop_bad_addr;
    a.drop_out_of_seq += b.drop_out_of_seq;
    a.drop_no_wqe += b.drop_no_wqe;
    a.access_violations += b.access_violations;
    a.cq_overflows += b.cq_overflows;
    a.tx_direct += b.tx_direct;
    a.rx_direct += b.rx_direct;
    a.rx_express += b.rx_express;
    a.rx_in_place += b.rx_in_place;
    a.tx_express += b.tx_express;
    a.recv_express += b.recv_express;
    a.rx_lent += b.rx_lent;
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        let n = &self.net;
        writeln!(
            f,
            "operations      {} ({} ok, {} failed)",
            self.ops(),
            self.succeeded,
            self.failed
        )?;
        for (k, c) in &self.by_kind {
            writeln!(f, "  {:<16}{c}", format!("{k:?}"))?;
        }
        writeln!(f, "payload bytes   {}", self.bytes)?;
        writeln!(
            f,
            "virtual time    {} µs",
            crate::trace::micros(self.elapsed)
        )?;
        writeln!(
            f,
            "packets         {} sent, {} delivered, {} lost, {} duplicated, {} reordered, {} corrupted",
            n.sent, n.delivered, n.lost, n.duplicated, n.reordered, n.corrupted
        )?;
        writeln!(
            f,
            "recovery        {} retransmits, {} timeouts, {} seq NAKs, {} RNR NAKs, {} duplicates seen",
            s.retransmits, s.timeouts, s.tx_nak_seq, s.tx_rnr_nak, s.rx_duplicates
        )?;
        writeln!(
            f,
            "drops           {} bad ICRC, {} out of sequence, {} malformed, {} bad state",
            s.drop_bad_icrc, s.drop_out_of_seq, s.drop_malformed, s.drop_bad_state
        )?;
        write!(
            f,
            "exhaustion      {} RETRY_EXC_ERR ({} directions), {} reconnects",
            self.exhausted_dirs, self.dirs, self.reconnects
        )
    }
}
