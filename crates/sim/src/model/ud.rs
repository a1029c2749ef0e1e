//! The UD workload: datagrams between QPs on three nodes, each message
//! delivered at most once — byte-exact, behind a 40-byte GRH area holding the
//! real IPv4 header, with the sender's QPN — or lost; datagrams with a wrong
//! Q_Key never delivered and counted. The network loses, corrupts and
//! reorders (UD has no duplicate detection, so it does not duplicate).

use super::mem::{NodeMem, Piece, RngExt};
use crate::net::{Faults, Net, NetStats};
use crate::setup::{PairOpts, Side, ud_dest, ud_side};
use softrdma_transport::{
    RecvWr, Rng, SendFlags, SendWr, Wc, WcFlags, WcOpcode, WcStatus, WrOpcode,
};
use softrdma_wire::ip;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// What [`run_ud`] runs.
#[derive(Debug, Clone, PartialEq)]
pub struct UdConfig {
    /// Seed.
    pub seed: u64,
    /// Loss probability (reordering at half, bit flips at a fifth of it).
    pub loss: f64,
    /// Datagrams in all.
    pub ops: usize,
}

/// What a UD run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdReport {
    /// Datagrams posted with the right Q_Key.
    pub sent: usize,
    /// Datagrams delivered.
    pub delivered: usize,
    /// Datagrams posted with a wrong Q_Key (never delivered).
    pub bad_qkey: usize,
    /// Receivers' count of Q_Key drops.
    pub qkey_drops: u64,
    /// Network counters.
    pub net: NetStats,
}

const MAX: u64 = 4096;
const RECVS: usize = 32;

#[derive(Debug)]
struct Q {
    side: Side,
    qkey: u32,
    slots: Vec<usize>,
    src: Vec<usize>,
    posted: VecDeque<(u64, Vec<Piece>)>,
    next_recv: u64,
}

#[derive(Debug)]
struct Dgram {
    from: usize,
    to: usize,
    imm: Option<u32>,
    data: Vec<u8>,
    delivered: bool,
}

/// Runs the UD workload; `Err` says what the oracle rejected.
pub fn run_ud(cfg: &UdConfig) -> Result<UdReport, String> {
    let mut net = Net::new(3, cfg.seed);
    net.faults = Faults {
        loss: cfg.loss,
        reorder: cfg.loss / 2.0,
        bitflip: cfg.loss / 5.0,
        ..Faults::default()
    };
    let mut rng = Rng::new(cfg.seed ^ 0x0D0D);
    let o = PairOpts {
        buf_len: 4096,
        max_wr: 256,
        sq_sig_all: true,
        ..PairOpts::default()
    };
    // Two QPs on each node; a node's QPs share its MRs (registered in the
    // first QP's PD, which the setup gives each QP its own of: use one MR set
    // per QP instead).
    let mut qs: Vec<Q> = Vec::new();
    let mut mem: Vec<NodeMem> = Vec::new();
    for i in 0..6 {
        let node = i / 2;
        let qkey = 0x1000_0000 + i as u32;
        let side = ud_side(&mut net, node, qkey, &o);
        let n = &mut net.nodes[node];
        let host = n.mem.alloc(1 << 20);
        let all = softrdma_transport::Access::LOCAL_WRITE;
        let mr = n.ep.reg_mr(side.pd, host, 1 << 20, host, all).unwrap();
        let mut m = NodeMem::new(vec![mr]);
        let slots = m.rings(RECVS as u64 * (MAX + 64) * 2);
        let src = m.rings(256 * 1024);
        mem.push(m);
        qs.push(Q {
            side,
            qkey,
            slots,
            src,
            posted: VecDeque::new(),
            next_recv: 0,
        });
    }
    let mut rep = UdReport {
        sent: 0,
        delivered: 0,
        bad_qkey: 0,
        qkey_drops: 0,
        net: NetStats::default(),
    };
    let mut budget = cfg.ops;
    while budget > 0 {
        let now = net.now;
        for (i, q) in qs.iter_mut().enumerate() {
            // Receive buffers of payload + 40 (the GRH area), in 1..=3 SGEs.
            while q.posted.len() < RECVS {
                let set = q.slots.clone();
                let p = mem[i].alloc(&mut rng, &set, MAX + 40, 3).unwrap();
                let sgl = p.iter().map(|x| mem[i].sge(x)).collect();
                let id = q.next_recv;
                q.next_recv += 1;
                net.nodes[q.side.node]
                    .ep
                    .post_recv(now, q.side.qpn, RecvWr { wr_id: id, sgl })
                    .unwrap();
                q.posted.push_back((id, p));
            }
        }
        let mut round: HashMap<u64, Dgram> = HashMap::new();
        let mut allocs = Vec::new();
        for _ in 0..rng.range(8, 48).min(budget as u64) {
            budget -= 1;
            let from = rng.below(6) as usize;
            let to = loop {
                let t = rng.below(6) as usize;
                if qs[t].side.node != qs[from].side.node {
                    break t;
                }
            };
            let len = match rng.below(4) {
                0 => rng.range(0, 16),
                1 | 2 => rng.range(17, 1024),
                _ => rng.range(1025, MAX),
            };
            let data = rng.bytes(len as usize);
            let id = rep.sent as u64 + rep.bad_qkey as u64;
            let with_imm = rng.chance(0.5);
            let bad = rng.chance(0.05);
            let mut wr = SendWr::new(
                id,
                if with_imm {
                    WrOpcode::SendWithImm
                } else {
                    WrOpcode::Send
                },
            );
            wr.flags = SendFlags::SIGNALED;
            wr.imm_data = id as u32;
            let qkey = if bad { qs[to].qkey ^ 0x10 } else { qs[to].qkey };
            wr.ud = Some(ud_dest(&net, &qs[to].side, qkey));
            if len > 0 {
                let set = qs[from].src.clone();
                let p = mem[from]
                    .alloc(&mut rng, &set, len, 3)
                    .ok_or("UD source rings full")?;
                mem[from].app_fill(&mut net.nodes[qs[from].side.node].mem, &p, &data);
                wr.sgl = p.iter().map(|x| mem[from].sge(x)).collect();
                allocs.push((from, p));
            }
            let (node, qpn) = (qs[from].side.node, qs[from].side.qpn);
            net.nodes[node]
                .ep
                .post_send(now, qpn, wr)
                .map_err(|e| e.to_string())?;
            if bad {
                rep.bad_qkey += 1;
            } else {
                rep.sent += 1;
            }
            // Identified by the sender's QPN (src_qp) and imm, or without
            // one by length and content (random; equal content, e.g. two
            // empty datagrams from one sender, is interchangeable).
            round.insert(
                id,
                Dgram {
                    from,
                    to,
                    imm: with_imm.then_some(id as u32),
                    data,
                    delivered: bad,
                },
            );
        }
        net.run_idle(net.now + std::time::Duration::from_secs(1));
        check(&mut net, &mut mem, &mut qs, &mut round, &mut rep)?;
        for (i, p) in allocs {
            mem[i].free(&p);
        }
    }
    rep.qkey_drops = net.nodes.iter().map(|n| n.ep.stats().drop_bad_qkey).sum();
    if cfg.loss == 0.0 && (rep.delivered != rep.sent || rep.qkey_drops != rep.bad_qkey as u64) {
        return Err(format!("UD without loss: {rep:?}"));
    }
    rep.net = net.stats;
    Ok(rep)
}

fn check(
    net: &mut Net,
    mem: &mut [NodeMem],
    qs: &mut [Q],
    round: &mut HashMap<u64, Dgram>,
    rep: &mut UdReport,
) -> Result<(), String> {
    let addr: Vec<IpAddr> = net.nodes.iter().map(|n| n.addr).collect();
    let qpns: Vec<u32> = qs.iter().map(|q| q.side.qpn).collect();
    for (i, q) in qs.iter_mut().enumerate() {
        let node = q.side.node;
        let mut wcs: Vec<Wc> = Vec::new();
        net.nodes[node]
            .ep
            .poll_cq(q.side.scq, usize::MAX, |w| wcs.push(w))
            .unwrap();
        for w in &wcs {
            if w.status != WcStatus::Success || round.get(&w.wr_id).is_none_or(|d| d.from != i) {
                return Err(format!("UD send completion {w:?}"));
            }
        }
        wcs.clear();
        net.nodes[node]
            .ep
            .poll_cq(q.side.rcq, usize::MAX, |w| wcs.push(w))
            .unwrap();
        for w in &wcs {
            let (id, pieces) = q.posted.pop_front().ok_or("UD receive with none posted")?;
            if w.wr_id != id || w.status != WcStatus::Success || w.opcode != WcOpcode::Recv {
                return Err(format!("UD receive {w:?}, expected WQE {id}"));
            }
            let got = mem[i].gather(&net.nodes[node].mem, &pieces);
            let len = (w.byte_len as usize)
                .checked_sub(40)
                .ok_or("UD byte_len below 40")?;
            let found = round.iter_mut().find(|(_, d)| {
                !d.delivered
                    && d.to == i
                    && qpns[d.from] == w.src_qp
                    && d.data.len() == len
                    && match d.imm {
                        Some(v) => w.wc_flags.contains(WcFlags::WITH_IMM) && w.imm_data == v,
                        None => {
                            !w.wc_flags.contains(WcFlags::WITH_IMM)
                                && got[40..40 + len] == d.data[..]
                        }
                    }
            });
            let Some((_, d)) = found else {
                return Err(format!(
                    "UD: a datagram nobody sent (or a second copy) arrived: {w:?}"
                ));
            };
            d.delivered = true;
            rep.delivered += 1;
            if got[40..40 + len] != d.data[..] {
                return Err(format!("UD: datagram {id} arrived corrupted"));
            }
            // The GRH area: 20 zero bytes and the IPv4 header of the datagram.
            let src = addr[d.from / 2];
            let dst = addr[node];
            let (IpAddr::V4(s4), IpAddr::V4(d4)) = (src, dst) else {
                unreachable!()
            };
            let imm_len = if d.imm.is_some() { 4 } else { 0 };
            let udp = 12 + 8 + imm_len + len + usize::from(softrdma_wire::pad_for(len)) + 4;
            let want = ip::ipv4_header(
                &ip::Ipv4Fields {
                    src: s4,
                    dst: d4,
                    id: 0,
                    tos: 0,
                    ttl: 64,
                    df: true,
                },
                ip::UDP_HDR_LEN + udp,
            );
            if got[..20] != [0; 20] || got[20..40] != want {
                return Err(format!("UD: bad GRH area {:02x?}", &got[..40]));
            }
            if !w.wc_flags.contains(WcFlags::GRH)
                || w.qp_num != q.side.qpn
                || w.src_qp != qpns[d.from]
            {
                return Err(format!("UD: receive completion fields {w:?}"));
            }
            mem[i].free(&pieces);
        }
    }
    Ok(())
}
