//! Generation of the RC workload's operations: kind, length, buffers (SGE
//! lists over several MRs), remote targets, and what the model expects of
//! each (see [`super::rc`] for why the expectations are exact).

use super::Kind;
use super::mem::RngExt;
use super::rc::{COUNTERS, MAX_MSG, Msg, Op, REMOTE, Recv, SHARED, SRQ_MSG, World};
use softrdma_transport::{RecvWr, SendFlags, SendWr, WrOpcode};

impl World {
    fn gen_len(&mut self, mtu: u64, max: u64) -> u64 {
        let r = &mut self.rng;
        let l = match r.below(100) {
            0..5 => 0,
            5..30 => r.range(1, 64),
            30..60 => r.range(65, mtu),
            60..88 => r.range(mtu + 1, 4 * mtu),
            88..98 => r.range(4 * mtu + 1, (16 * mtu).min(32 * 1024)),
            _ => r.range((16 * mtu).min(32 * 1024), MAX_MSG),
        };
        l.min(max)
    }

    fn pick_kind(&mut self) -> Kind {
        const W: [(Kind, u64); 9] = [
            (Kind::Send, 16),
            (Kind::SendImm, 8),
            (Kind::SendInline, 6),
            (Kind::Write, 16),
            (Kind::WriteImm, 8),
            (Kind::Read, 18),
            (Kind::CmpSwap, 8),
            (Kind::FetchAdd, 8),
            (Kind::SharedFetchAdd, 6),
        ];
        // The SENDs and WRITEs lead the table.
        let kinds = if self.cfg.no_reads { &W[..5] } else { &W[..] };
        let mut x = self.rng.below(kinds.iter().map(|w| w.1).sum());
        for &(k, w) in kinds {
            if x < w {
                return k;
            }
            x -= w;
        }
        unreachable!()
    }

    /// Generates and posts one operation on direction `d`; false if its
    /// buffers are not free yet (nothing was posted).
    pub(crate) fn post_one(&mut self, d: usize, last: bool) -> bool {
        let kind = self.pick_kind();
        let (s, r, mtu, srq) = {
            let x = &self.dirs[d];
            (x.s, x.r, x.mtu, x.srq)
        };
        let mut max = if srq { SRQ_MSG } else { MAX_MSG };
        if self.cfg.direct {
            // Below peer copy, which the simulated memory does not do.
            max = max.min(softrdma_transport::PEER_COPY_MIN as u64 - 1);
        }
        let len = match kind {
            Kind::SendInline => self.rng.range(0, 256),
            Kind::CmpSwap | Kind::FetchAdd | Kind::SharedFetchAdd => 8,
            _ => self.gen_len(mtu, max),
        };
        // Local buffers.
        let local = if kind == Kind::SendInline || len == 0 {
            Vec::new()
        } else {
            let set = match kind {
                Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm => {
                    self.dirs[d].src.clone()
                }
                _ => self.dirs[d].dst.clone(),
            };
            let maxp = if len == 8 && kind.is_atomic() { 2 } else { 4 };
            match self.mem[s].alloc(&mut self.rng, &set, len, maxp) {
                Some(p) => p,
                None => return false,
            }
        };
        // The receive WQE a SEND / WRITE-with-immediate will consume.
        let needs_recv = matches!(
            kind,
            Kind::Send | Kind::SendImm | Kind::SendInline | Kind::WriteImm
        );
        let recv = if needs_recv && !srq {
            let cap = if kind == Kind::WriteImm {
                self.rng.range(0, 32)
            } else if self.rng.chance(0.5) {
                len + self.rng.range(0, 32)
            } else {
                len
            };
            let set = self.dirs[d].rbuf.clone();
            let pieces = if cap == 0 {
                Some(Vec::new())
            } else {
                self.mem[r].alloc(&mut self.rng, &set, cap, 4)
            };
            match pieces {
                Some(p) => Some(p),
                None => {
                    self.mem[s].unalloc(&local);
                    return false;
                }
            }
        } else {
            None
        };
        let x = &mut self.dirs[d];
        let seq = x.next_op;
        x.next_op += 1;
        let wr_id = ((d as u64) << 32) | seq;
        let mut wr = SendWr::new(wr_id, kind.opcode());
        let signaled = last || x.unsignaled_run >= 6 || self.rng.chance(0.5);
        x.unsignaled_run = if signaled { 0 } else { x.unsignaled_run + 1 };
        if signaled {
            wr.flags = SendFlags::SIGNALED;
        }
        if self.rng.chance(0.04) {
            wr.flags = wr.flags.with(SendFlags::FENCE);
        }
        let mut op = Op {
            wr_id,
            kind,
            len,
            signaled,
            local,
            expect: None,
            remote: None,
            msg: None,
            shared: None,
        };
        wr.sgl = op.local.iter().map(|p| self.mem[s].sge(p)).collect();
        if len == 0 && kind != Kind::SendInline && self.rng.chance(0.5) {
            // A zero-length SGE (no lkey check applies to it).
            wr.sgl = [softrdma_transport::Sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }]
            .into();
        }
        self.fill_op(d, &mut op, &mut wr);
        if let Some(pieces) = recv {
            let x = &mut self.dirs[d];
            let rid = (1u64 << 63) | ((d as u64) << 32) | x.next_recv;
            x.next_recv += 1;
            let rec = Recv { wr_id: rid, pieces };
            let at = if self.rng.chance(self.cfg.late_recv) {
                self.net.now + std::time::Duration::from_micros(self.rng.range(1, 300))
            } else {
                self.net.now
            };
            self.dirs[d].late.push_back((at, rec));
            self.post_due_recvs(d);
        }
        let now = self.net.now;
        let sq = self.dirs[d].sq;
        let node = &mut self.net.nodes[s];
        let mut rec = [0u8; softrdma_wire::direct::DIRECT_MAX_LEN];
        // The express post first, as a driver with a cell posts.
        let express = self.cfg.express_post.then(|| node.ep.express(sq)).flatten();
        let posted = express.and_then(|x| {
            let e = softrdma_transport::ExpressWr::of(&wr)?;
            x.post(now, &e, &mut node.mem, &mut rec)
        });
        let wr = match posted {
            Some(t) => {
                self.net.send_direct(s, &t, &rec[..t.len]);
                None
            }
            None => Some(wr),
        };
        let node = &mut self.net.nodes[s];
        let posted = match wr {
            None => Ok(None),
            Some(wr) => node
                .ep
                .post_send_direct(now, sq, wr, &mut node.mem, &mut rec),
        };
        match posted {
            Ok(Some(t)) => self.net.send_direct(s, &t, &rec[..t.len]),
            Ok(None) => {}
            Err(e) => panic!("post_send on direction {d} failed: {e}"),
        }
        self.bytes += len;
        match self.counts.iter_mut().find(|c| c.0 == kind) {
            Some(c) => c.1 += 1,
            None => self.counts.push((kind, 1)),
        }
        self.dirs[d].ops.push_back(op);
        true
    }

    /// Sets the remote side of an operation: data, targets and the model's
    /// expectations.
    fn fill_op(&mut self, d: usize, op: &mut Op, wr: &mut SendWr) {
        let (s, r) = (self.dirs[d].s, self.dirs[d].r);
        let len = op.len;
        match op.kind {
            Kind::Send | Kind::SendImm | Kind::SendInline => {
                let data = self.rng.bytes(len as usize);
                let imm = (op.kind == Kind::SendImm).then(|| self.rng.next_u32());
                if op.kind == Kind::SendInline {
                    wr.flags = wr.flags.with(SendFlags::INLINE);
                    wr.inline = Some(data.clone());
                } else {
                    self.mem[s].app_fill(&mut self.net.nodes[s].mem, &op.local, &data);
                }
                wr.imm_data = imm.unwrap_or(0);
                op.msg = Some(self.new_msg(d, len, imm, Some(data)));
            }
            Kind::Write | Kind::WriteImm | Kind::Read => {
                let x = &self.dirs[d];
                let mr = self.rng.below(3) as usize;
                let off = x.remote[mr] + self.rng.range(0, REMOTE - len);
                let rm = self.mem[r].mrs[mr];
                wr.remote_addr = rm.iova.wrapping_add(off);
                wr.rkey = rm.rkey;
                op.remote = Some((mr, off, len));
                let host = self.mem[r].host(mr, off);
                if op.kind == Kind::Read {
                    op.expect = Some(self.mem[r].shadow.read(host, len as usize));
                } else {
                    let overlaps = self.dirs[d].ops.iter().any(|o| {
                        o.kind == Kind::Read
                            && o.remote
                                .is_some_and(|(m, a, l)| m == mr && a < off + len && off < a + l)
                    });
                    if overlaps {
                        // A duplicate of that READ would be re-executed after
                        // this WRITE; the fence keeps the READ's bytes old.
                        wr.flags = wr.flags.with(SendFlags::FENCE);
                    }
                    let data = self.rng.bytes(len as usize);
                    self.mem[s].app_fill(&mut self.net.nodes[s].mem, &op.local, &data);
                    self.mem[r].shadow.write(host, &data);
                    if op.kind == Kind::WriteImm {
                        let imm = self.rng.next_u32();
                        wr.imm_data = imm;
                        op.msg = Some(self.new_msg(d, len, Some(imm), None));
                    }
                }
            }
            Kind::CmpSwap | Kind::FetchAdd => {
                let k = self.rng.below(COUNTERS);
                let off = self.dirs[d].counters + 8 * k;
                let rm = self.mem[r].mrs[0];
                wr.remote_addr = rm.iova.wrapping_add(off);
                wr.rkey = rm.rkey;
                let host = self.mem[r].host(0, off);
                let cur = u64::from_ne_bytes(self.mem[r].shadow.read(host, 8).try_into().unwrap());
                let new = if op.kind == Kind::CmpSwap {
                    wr.compare_add = if self.rng.chance(0.6) {
                        cur
                    } else {
                        self.rng.next_u64()
                    };
                    wr.swap = self.rng.next_u64();
                    if cur == wr.compare_add { wr.swap } else { cur }
                } else {
                    wr.compare_add = self.rng.next_u64();
                    cur.wrapping_add(wr.compare_add)
                };
                self.mem[r].shadow.write(host, &new.to_ne_bytes());
                op.expect = Some(cur.to_ne_bytes().to_vec());
                op.remote = Some((0, off, 8));
            }
            Kind::SharedFetchAdd => {
                let k = self.rng.below(SHARED) as usize;
                let off = self.shared_at[r] + 8 * k as u64;
                let rm = self.mem[r].mrs[0];
                wr.remote_addr = rm.iova.wrapping_add(off);
                wr.rkey = rm.rkey;
                wr.compare_add = self.rng.range(1, 1 << 32);
                op.shared = Some((k, wr.compare_add));
                op.remote = Some((0, off, 8));
                let h = self.mem[r].host(0, off);
                self.mem[r].shadow.forget(h, 8);
            }
        }
    }

    fn new_msg(&mut self, d: usize, len: u64, imm: Option<u32>, data: Option<Vec<u8>>) -> u64 {
        let x = &mut self.dirs[d];
        let index = x.next_msg;
        x.next_msg += 1;
        x.msgs.push_back(Msg {
            index,
            len,
            imm,
            data,
        });
        index
    }

    /// Posts the receives of direction `d` whose time has come, in order.
    pub(crate) fn post_due_recvs(&mut self, d: usize) {
        let now = self.net.now;
        let (r, rq) = (self.dirs[d].r, self.dirs[d].rq);
        while self.dirs[d].late.front().is_some_and(|(t, _)| *t <= now) {
            let (_, rec) = self.dirs[d].late.pop_front().unwrap();
            let sgl = rec.pieces.iter().map(|p| self.mem[r].sge(p)).collect();
            let wr = RecvWr {
                wr_id: rec.wr_id,
                sgl,
            };
            // Through the QP's cell first, as a driver with one posts.
            let ep = &mut self.net.nodes[r].ep;
            let wr = match self.cfg.express_post.then(|| ep.express(rq)).flatten() {
                Some(x) => x.post_recv(wr).err(),
                None => Some(wr),
            };
            if let Some(wr) = wr {
                ep.post_recv(now, rq, wr).unwrap();
            }
            self.dirs[d].recvs.push_back(rec);
        }
    }
}

impl Kind {
    pub(crate) fn opcode(self) -> WrOpcode {
        match self {
            Kind::Send | Kind::SendInline => WrOpcode::Send,
            Kind::SendImm => WrOpcode::SendWithImm,
            Kind::Write => WrOpcode::RdmaWrite,
            Kind::WriteImm => WrOpcode::RdmaWriteWithImm,
            Kind::Read => WrOpcode::RdmaRead,
            Kind::CmpSwap => WrOpcode::AtomicCmpAndSwp,
            Kind::FetchAdd | Kind::SharedFetchAdd => WrOpcode::AtomicFetchAndAdd,
        }
    }
    pub(crate) fn is_atomic(self) -> bool {
        matches!(self, Kind::CmpSwap | Kind::FetchAdd | Kind::SharedFetchAdd)
    }
}
