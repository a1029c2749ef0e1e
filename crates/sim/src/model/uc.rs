//! The UC workload: connected QPs without acknowledgements. A lost packet
//! loses its whole message — the receive WQE it had started is reused for
//! the next message — and nothing partial or corrupt is ever delivered.
//!
//! The network keeps packets in order (as the IB link layer does; UC cannot
//! tell a stale duplicate of a FIRST/ONLY packet from a new message), losing
//! or corrupting some. Operations run in rounds: post, run until idle, check.
//! Messages are identified by their immediate data or, without one, by an
//! 8-byte tag at the start of the payload.

use super::mem::{NodeMem, Piece, RngExt};
use crate::net::{Faults, Net, NetStats};
use crate::setup::{PairOpts, Side, bring_up};
use softrdma_transport::{
    Access, Mtu, QpCap, QpInitAttr, QpType, Qpn, RecvWr, Rng, SendFlags, SendWr, Wc, WcFlags,
    WcOpcode, WcStatus, WrOpcode,
};
use std::collections::VecDeque;

/// What [`run_uc`] runs.
#[derive(Debug, Clone, PartialEq)]
pub struct UcConfig {
    /// Seed.
    pub seed: u64,
    /// Loss probability (bit flips at a fifth of it).
    pub loss: f64,
    /// Operations in all.
    pub ops: usize,
}

/// What a UC run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UcReport {
    /// Messages posted (SENDs and WRITEs with immediate).
    pub messages: usize,
    /// Messages delivered.
    pub delivered: usize,
    /// WRITEs without immediate posted.
    pub writes: usize,
    /// Network counters.
    pub net: NetStats,
}

const MAX: u64 = 12 * 1024;
const RECVS: usize = 16;

#[derive(Debug)]
struct Msg {
    tag: u64,
    opcode: WrOpcode,
    imm: Option<u32>,
    data: Vec<u8>,
    /// Target of a WRITE: (MR, offset) on the receiver.
    target: Option<(usize, u64)>,
}

#[derive(Debug)]
struct Dir {
    s: usize,
    r: usize,
    sq: Qpn,
    rq: Qpn,
    mtu: u64,
    src: Vec<usize>,
    tgt: Vec<usize>,
    slots: Vec<usize>,
    posted: VecDeque<(u64, Vec<Piece>)>,
    next_recv: u64,
    /// This round's messages, in posting order, and the last delivered tag.
    msgs: Vec<Msg>,
    last_tag: Option<u64>,
    next_tag: u64,
    sent: Vec<(u64, bool)>,
    allocs: Vec<(usize, Vec<Piece>)>,
}

/// Runs the UC workload; `Err` says what the oracle rejected.
pub fn run_uc(cfg: &UcConfig) -> Result<UcReport, String> {
    let mut net = Net::new(3, cfg.seed);
    net.faults = Faults {
        loss: cfg.loss,
        bitflip: cfg.loss / 5.0,
        ..Faults::default()
    };
    let mut rng = Rng::new(cfg.seed ^ 0x0C0C);
    let conns = [(0usize, 1usize), (1, 2), (0, 1)];
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let mut mem = Vec::new();
    let mut cqs = Vec::new();
    for i in 0..3 {
        let n = &mut net.nodes[i];
        let pd = n.ep.alloc_pd().unwrap();
        let mut mrs = Vec::new();
        for m in 0..2u64 {
            let len = 6 << 20;
            let host = n.mem.alloc(len);
            let iova = if m == 0 { host } else { 0x10_0000 };
            mrs.push(n.ep.reg_mr(pd, host, len as u64, iova, all).unwrap());
        }
        let s = n.ep.create_cq(4096).unwrap().0;
        let r = n.ep.create_cq(4096).unwrap().0;
        cqs.push((pd, s, r));
        mem.push(NodeMem::new(mrs));
    }
    let mut dirs = Vec::new();
    for &(x, y) in &conns {
        let mtu = [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096][rng.below(5) as usize];
        let o = PairOpts {
            qp_type: QpType::Uc,
            mtu,
            ..PairOpts::default()
        };
        let mut sides = Vec::new();
        for node in [x, y] {
            let (pd, scq, rcq) = cqs[node];
            let (qpn, _) = net.nodes[node]
                .ep
                .create_qp(&QpInitAttr {
                    qp_type: QpType::Uc,
                    pd,
                    send_cq: scq,
                    recv_cq: rcq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 256,
                        max_recv_wr: 256,
                        max_send_sge: 4,
                        max_recv_sge: 4,
                        max_inline_data: 256,
                    },
                    sq_sig_all: true,
                })
                .unwrap();
            sides.push(Side {
                node,
                pd,
                scq,
                rcq,
                qpn,
                mr: mem[node].mrs[0],
            });
        }
        let (pa, pb) = (
            0xFF_FFF0 - rng.below(64) as u32,
            0xFF_FFF0 - rng.below(64) as u32,
        );
        bring_up(&mut net, &sides[0], &sides[1], &o, pa, pb);
        bring_up(&mut net, &sides[1], &sides[0], &o, pb, pa);
        for (a, b) in [(0, 1), (1, 0)] {
            let (s, r) = (sides[a].node, sides[b].node);
            dirs.push(Dir {
                s,
                r,
                sq: sides[a].qpn,
                rq: sides[b].qpn,
                mtu: u64::from(mtu.bytes()),
                src: mem[s].rings(512 * 1024),
                tgt: mem[r].rings(512 * 1024),
                slots: mem[r].rings(RECVS as u64 * 2 * MAX),
                posted: VecDeque::new(),
                next_recv: 0,
                msgs: Vec::new(),
                last_tag: None,
                next_tag: 0,
                sent: Vec::new(),
                allocs: Vec::new(),
            });
        }
    }
    let mut rep = UcReport {
        messages: 0,
        delivered: 0,
        writes: 0,
        net: NetStats::default(),
    };
    let mut budget = cfg.ops;
    while budget > 0 {
        let now = net.now;
        for d in &mut dirs {
            // Keep receives posted; the ones a lost message started are reused.
            while d.posted.len() < RECVS {
                let set = d.slots.clone();
                let p = mem[d.r]
                    .alloc(&mut rng, &set, MAX, 3)
                    .expect("slots are sized for RECVS");
                let id = d.next_recv;
                d.next_recv += 1;
                let sgl = p.iter().map(|x| mem[d.r].sge(x)).collect();
                net.nodes[d.r]
                    .ep
                    .post_recv(now, d.rq, RecvWr { wr_id: id, sgl })
                    .unwrap();
                d.posted.push_back((id, p));
            }
        }
        let mut before = Vec::new();
        for (k, d) in dirs.iter_mut().enumerate() {
            let n = rng.range(1, 12).min(budget as u64);
            budget -= n as usize;
            for _ in 0..n {
                post(&mut net, &mut mem, &mut rng, d, &mut rep)?;
            }
            // Memory of the WRITE targets before the round.
            for m in &d.msgs {
                if let Some((mr, off)) = m.target {
                    let h = mem[d.r].host(mr, off);
                    before.push((k, m.tag, net.nodes[d.r].mem.bytes(h, m.data.len()).to_vec()));
                }
            }
        }
        net.run_idle(net.now + std::time::Duration::from_secs(1));
        check_round(&mut net, &mut mem, &mut dirs, &cqs, &before, &mut rep)?;
    }
    rep.net = net.stats;
    Ok(rep)
}

fn post(
    net: &mut Net,
    mem: &mut [NodeMem],
    rng: &mut Rng,
    d: &mut Dir,
    rep: &mut UcReport,
) -> Result<(), String> {
    let opcode = [
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
    ][rng.below(4) as usize];
    let inline = opcode == WrOpcode::Send && rng.chance(0.2);
    let with_imm = matches!(opcode, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm);
    let len = match rng.below(10) {
        _ if inline => rng.range(8, 256),
        0..3 => rng.range(if with_imm { 0 } else { 8 }, 64),
        3..7 => rng.range(65, 2 * d.mtu),
        _ => rng.range(2 * d.mtu, MAX),
    };
    let tag = ((d.sq as u64) << 40) | d.next_tag;
    d.next_tag += 1;
    let mut data = rng.bytes(len as usize);
    if !with_imm {
        data[..8].copy_from_slice(&tag.to_le_bytes());
    }
    let mut wr = SendWr::new(tag, opcode);
    wr.flags = SendFlags::SIGNALED;
    wr.imm_data = tag as u32;
    if inline {
        wr.flags = wr.flags.with(SendFlags::INLINE);
        wr.inline = Some(data.clone());
    } else if len > 0 {
        let set = d.src.clone();
        let p = mem[d.s]
            .alloc(rng, &set, len, 4)
            .ok_or("UC source rings full")?;
        mem[d.s].app_fill(&mut net.nodes[d.s].mem, &p, &data);
        wr.sgl = p.iter().map(|x| mem[d.s].sge(x)).collect();
        d.allocs.push((d.s, p));
    }
    let mut target = None;
    if matches!(opcode, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) {
        let set = d.tgt.clone();
        let p = mem[d.r]
            .alloc(rng, &set, len.max(1), 1)
            .ok_or("UC target rings full")?;
        let m = mem[d.r].mrs[p[0].mr];
        wr.remote_addr = m.iova + p[0].off;
        wr.rkey = m.rkey;
        target = Some((p[0].mr, p[0].off));
        d.allocs.push((d.r, p));
    }
    if opcode == WrOpcode::RdmaWrite {
        rep.writes += 1;
    } else {
        rep.messages += 1;
    }
    d.msgs.push(Msg {
        tag,
        opcode,
        imm: with_imm.then_some(tag as u32),
        data,
        target,
    });
    d.sent.push((tag, with_imm));
    let now = net.now;
    net.nodes[d.s]
        .ep
        .post_send(now, d.sq, wr)
        .map_err(|e| e.to_string())
}

fn check_round(
    net: &mut Net,
    mem: &mut [NodeMem],
    dirs: &mut [Dir],
    cqs: &[(
        softrdma_transport::PdHandle,
        softrdma_transport::CqHandle,
        softrdma_transport::CqHandle,
    )],
    before: &[(usize, u64, Vec<u8>)],
    rep: &mut UcReport,
) -> Result<(), String> {
    for (node, &(_, scq, rcq)) in cqs.iter().enumerate() {
        let mut wcs: Vec<Wc> = Vec::new();
        net.nodes[node]
            .ep
            .poll_cq(scq, usize::MAX, |w| wcs.push(w))
            .unwrap();
        for w in &wcs {
            // UC sends complete once on the wire: all succeed, in order.
            let d = dirs
                .iter_mut()
                .find(|d| d.s == node && d.sq == w.qp_num)
                .ok_or("unknown UC QP")?;
            let (tag, imm) = d.sent.remove(0);
            let flags = if imm {
                WcFlags::WITH_IMM
            } else {
                WcFlags::EMPTY
            };
            if w.wr_id != tag || w.status != WcStatus::Success || w.wc_flags != flags {
                return Err(format!("UC send completion {w:?}, expected {tag:#x}"));
            }
        }
        wcs.clear();
        net.nodes[node]
            .ep
            .poll_cq(rcq, usize::MAX, |w| wcs.push(w))
            .unwrap();
        for w in &wcs {
            let d = dirs
                .iter_mut()
                .find(|d| d.r == node && d.rq == w.qp_num)
                .ok_or("unknown UC QP")?;
            // Receive WQEs are consumed strictly in posting order, one per
            // delivered message: a lost message gives its WQE back.
            let (id, pieces) = d.posted.pop_front().ok_or("UC receive with none posted")?;
            if w.wr_id != id || w.status != WcStatus::Success {
                return Err(format!("UC receive {w:?}, expected WQE {id}"));
            }
            let got = mem[node].gather(&net.nodes[node].mem, &pieces);
            let tag = if w.wc_flags.contains(WcFlags::WITH_IMM) {
                d.msgs
                    .iter()
                    .find(|m| m.imm == Some(w.imm_data))
                    .map(|m| m.tag)
            } else {
                Some(u64::from_le_bytes(got[..8].try_into().unwrap()))
            };
            let m = tag
                .and_then(|t| d.msgs.iter().find(|m| m.tag == t))
                .ok_or_else(|| format!("UC: a message nobody sent arrived: {w:?}"))?;
            if d.last_tag.is_some_and(|l| m.tag <= l) {
                return Err(format!(
                    "UC: message {:#x} delivered after {:#x}",
                    m.tag,
                    d.last_tag.unwrap()
                ));
            }
            d.last_tag = Some(m.tag);
            let (op, payload) = match m.opcode {
                WrOpcode::RdmaWriteWithImm => (WcOpcode::RecvRdmaWithImm, None),
                _ => (WcOpcode::Recv, Some(&m.data)),
            };
            if w.opcode != op
                || w.byte_len as usize != m.data.len()
                || m.imm.is_some_and(|i| i != w.imm_data)
            {
                return Err(format!("UC: message {:#x} arrived as {w:?}", m.tag));
            }
            if payload.is_some_and(|p| got[..p.len()] != p[..]) {
                return Err(format!("UC: message {:#x} arrived corrupted", m.tag));
            }
            if let Some((mr, off)) = m.target {
                let h = mem[node].host(mr, off);
                if net.nodes[node].mem.bytes(h, m.data.len()) != &m.data[..] {
                    return Err(format!(
                        "UC: WRITE {:#x} completed but its data is not all there",
                        m.tag
                    ));
                }
            }
            rep.delivered += 1;
            mem[node].free(&pieces);
        }
    }
    // Every WRITE target holds the first k packets of the new data and the
    // old bytes after them (a lost packet ends the message), for some k.
    for (k, tag, old) in before {
        let d = &dirs[*k];
        let m = d.msgs.iter().find(|m| m.tag == *tag).unwrap();
        let (mr, off) = m.target.unwrap();
        let got = net.nodes[d.r].mem.bytes(mem[d.r].host(mr, off), old.len());
        let mtu = d.mtu as usize;
        let n = old.len().div_ceil(mtu);
        let ok = (0..=n).any(|j| {
            let cut = (j * mtu).min(old.len());
            got[..cut] == m.data[..cut] && got[cut..] == old[cut..]
        });
        if !ok {
            return Err(format!("UC: WRITE {tag:#x} left a torn or corrupt region"));
        }
    }
    for d in dirs.iter_mut() {
        if !d.sent.is_empty() {
            return Err("UC: a send WR never completed".into());
        }
        for (node, p) in d.allocs.drain(..) {
            mem[node].free(&p);
        }
        d.msgs.clear();
    }
    Ok(())
}
