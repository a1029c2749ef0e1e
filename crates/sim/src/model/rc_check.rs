//! The RC oracle: drives the world, checks every completion as it is polled
//! and, at the end, the receive queues, the shared counters and every byte
//! of memory.

use super::mem::RngExt;
use super::rc::{Op, World};
use super::{Kind, Report, add_stats};
use softrdma_transport::{
    Instant, QpAttr, QpAttrMask, QpState, Stats, Wc, WcFlags, WcOpcode, WcStatus,
};
use std::time::Duration;

type Res = Result<(), String>;

/// Virtual time after which a run is declared stuck.
const LIMIT: Instant = Instant::from_millis(300_000);

impl World {
    pub(crate) fn run(&mut self) -> Result<Report, String> {
        if std::env::var_os("SOFTRDMA_SIM_TRACE").is_some() {
            self.net.record();
        }
        let r = self.drive().and_then(|()| self.finish());
        if r.is_err() && self.net.trace.is_some() {
            let lines = self.net.lines();
            for l in lines.iter().rev().take(2000).rev() {
                eprintln!("{l}");
            }
        }
        r.map_err(|e| {
            format!(
                "seed {}: t={}us: {e}",
                self.cfg.seed,
                crate::trace::micros(self.net.now)
            )
        })?;
        Ok(self.report())
    }

    fn drive(&mut self) -> Res {
        let mut extra_done = false;
        loop {
            self.post_phase();
            if self.budget == 0 && !extra_done {
                // Every direction's last WR must be signaled, or its
                // completion could never be observed.
                extra_done = true;
                for d in 0..self.dirs.len() {
                    let needs = self.dirs[d].ops.back().is_some_and(|o| !o.signaled);
                    if needs && !self.conn_failed[self.dirs[d].conn] {
                        while !self.post_one(d, true) {
                            self.step_once()?;
                        }
                    }
                }
            }
            let more = self.step_once()?;
            if self.cfg.reconnect && self.budget > 0 {
                for c in 0..self.conn_failed.len() {
                    let idle = self
                        .dirs
                        .iter()
                        .filter(|d| d.conn == c)
                        .all(|d| d.ops.is_empty());
                    if self.conn_failed[c] && idle {
                        self.teardown(c)?;
                    }
                }
            }
            if self.conn_failed.iter().all(|f| *f) {
                // Nothing left to post to.
                self.budget = 0;
                extra_done = true;
            }
            if self.budget == 0 && self.dirs.iter().all(|d| d.ops.is_empty()) {
                return Ok(());
            }
            if !more {
                // Nothing in flight: jump to the next late receive or slot.
                let next = self.next_pending();
                match next {
                    Some(t) if t > self.net.now => self.net.now = t,
                    Some(_) => {}
                    None if self.budget == 0 => {
                        return Err(format!("stuck: {}", self.pending_summary()));
                    }
                    None => {}
                }
            }
            if self.net.now > LIMIT {
                return Err(format!("no end in sight: {}", self.pending_summary()));
            }
        }
    }

    fn step_once(&mut self) -> Result<bool, String> {
        for d in 0..self.dirs.len() {
            if !self.dirs[d].failed {
                self.post_due_recvs(d);
            }
        }
        self.repost_slots();
        let more = self.net.step();
        self.poll_all()?;
        Ok(more)
    }

    fn post_phase(&mut self) {
        for d in 0..self.dirs.len() {
            if self.budget == 0 || self.conn_failed[self.dirs[d].conn] || !self.rng.chance(0.3) {
                continue;
            }
            for _ in 0..self.rng.range(1, 4) {
                let out = self.dirs[d].ops.len();
                if self.budget == 0 || out >= self.cfg.window {
                    break;
                }
                let last = out + 1 == self.cfg.window || self.budget == 1;
                if !self.post_one(d, last) {
                    break;
                }
                self.budget -= 1;
            }
        }
    }

    fn next_pending(&self) -> Option<Instant> {
        let late = self
            .dirs
            .iter()
            .filter(|d| !d.failed)
            .filter_map(|d| d.late.front().map(|l| l.0));
        let slots = self.slots.iter().flatten().filter_map(|s| s.1);
        late.chain(slots).min()
    }

    fn pending_summary(&self) -> String {
        let mut s = String::new();
        for (i, d) in self.dirs.iter().enumerate() {
            if !d.ops.is_empty() || !d.late.is_empty() {
                s += &format!(
                    "[dir {i} {}->{}: {} ops (first {:#x}), {} late recvs, {} posted recvs, {} msgs] ",
                    d.s,
                    d.r,
                    d.ops.len(),
                    d.ops.front().map_or(0, |o| o.wr_id),
                    d.late.len(),
                    d.recvs.len(),
                    d.msgs.len()
                );
            }
        }
        s
    }

    fn repost_slots(&mut self) {
        let now = self.net.now;
        for n in 0..self.slots.len() {
            for k in 0..self.slots[n].len() {
                if self.slots[n][k].1.is_some_and(|t| t <= now) {
                    self.post_slot(n, k);
                }
            }
        }
    }

    fn poll_all(&mut self) -> Res {
        let mut wcs = Vec::new();
        for n in 0..self.net.nodes.len() {
            wcs.clear();
            let cq = self.rcq[n];
            self.net.nodes[n]
                .ep
                .poll_cq(cq, usize::MAX, |w| wcs.push(w))
                .unwrap();
            for w in &wcs {
                self.on_recv(n, w)?;
            }
        }
        for n in 0..self.net.nodes.len() {
            wcs.clear();
            let cq = self.scq[n];
            self.net.nodes[n]
                .ep
                .poll_cq(cq, usize::MAX, |w| wcs.push(w))
                .unwrap();
            for w in &wcs {
                self.on_send(n, w)?;
            }
        }
        Ok(())
    }

    fn qp_state(&self, node: usize, qpn: u32) -> QpState {
        self.net.nodes[node].ep.query_qp(qpn).unwrap().0.qp_state
    }

    fn on_send(&mut self, node: usize, wc: &Wc) -> Res {
        let d = (0..self.dirs.len())
            .find(|&d| self.dirs[d].s == node && self.dirs[d].sq == wc.qp_num)
            .ok_or_else(|| format!("send completion for unknown QP: {wc:?}"))?;
        let sig_all = self.dirs[d].sig_all;
        // Unsignaled WRs before this one completed successfully, silently.
        loop {
            let op = self.dirs[d]
                .ops
                .front()
                .ok_or_else(|| format!("completion of no posted WR: {wc:?}"))?;
            if op.wr_id == wc.wr_id {
                break;
            }
            if op.signaled || sig_all || self.dirs[d].failed {
                return Err(format!(
                    "dir {d}: WR {:#x} got no completion before {:#x} ({:?})",
                    op.wr_id, wc.wr_id, wc.status
                ));
            }
            let op = self.dirs[d].ops.pop_front().unwrap();
            self.op_ok(d, op, None)?;
        }
        let op = self.dirs[d].ops.pop_front().unwrap();
        if !(op.signaled || sig_all || wc.status != WcStatus::Success) {
            return Err(format!(
                "dir {d}: unsignaled WR {:#x} was signaled",
                op.wr_id
            ));
        }
        match wc.status {
            WcStatus::Success if !self.dirs[d].failed => self.op_ok(d, op, Some(wc)),
            WcStatus::RetryExcErr if self.cfg.allow_exhaustion && !self.dirs[d].failed => {
                self.dirs[d].failed = true;
                self.conn_failed[self.dirs[d].conn] = true;
                self.exhausted += 1;
                if self.qp_state(node, wc.qp_num) != QpState::Err {
                    return Err(format!("dir {d}: QP not in ERR after {:?}", wc.status));
                }
                self.op_failed(d, op);
                Ok(())
            }
            WcStatus::WrFlushErr if self.dirs[d].failed => {
                self.op_failed(d, op);
                Ok(())
            }
            s => Err(format!(
                "dir {d}: WR {:#x} ({:?}, {} bytes) completed {s:?}{}",
                op.wr_id,
                op.kind,
                op.len,
                if self.dirs[d].failed {
                    " after an error"
                } else {
                    ""
                }
            )),
        }
    }

    /// A WR completed successfully (`wc` is None for an unsignaled one).
    fn op_ok(&mut self, d: usize, op: Op, wc: Option<&Wc>) -> Res {
        let s = self.dirs[d].s;
        if let Some(wc) = wc {
            let want_flags = match op.kind {
                Kind::SendImm | Kind::WriteImm => WcFlags::WITH_IMM,
                _ => WcFlags::EMPTY,
            };
            if wc.opcode != op.kind.opcode().wc_opcode()
                || u64::from(wc.byte_len) != op.len
                || wc.wc_flags != want_flags
            {
                return Err(format!("dir {d}: bad completion for {op:?}: {wc:?}"));
            }
        }
        if let Some(m) = op.msg
            && m >= self.dirs[d].delivered
        {
            return Err(format!(
                "dir {d}: message {m} acknowledged to the sender but not delivered ({} so far)",
                self.dirs[d].delivered
            ));
        }
        if let Some(want) = &op.expect {
            let got = self.mem[s].gather(&self.net.nodes[s].mem, &op.local);
            if &got != want {
                return Err(format!(
                    "dir {d}: {:?} {:#x} of {} bytes returned wrong data (first diff at {:?})",
                    op.kind,
                    op.wr_id,
                    op.len,
                    got.iter().zip(want).position(|(a, b)| a != b)
                ));
            }
            self.mem[s].expect(&op.local, want);
        }
        if let Some((k, add)) = op.shared {
            let got = self.mem[s].gather(&self.net.nodes[s].mem, &op.local);
            self.mem[s].expect(&op.local, &got);
            let orig = u64::from_ne_bytes(got.try_into().unwrap());
            let r = self.dirs[d].r;
            self.shared_log[r][k].1.push((d, op.wr_id, add, Some(orig)));
        }
        self.mem[s].free(&op.local);
        Ok(())
    }

    fn op_failed(&mut self, d: usize, op: Op) {
        self.nfailed += 1;
        let (s, r) = (self.dirs[d].s, self.dirs[d].r);
        if matches!(op.kind, Kind::Read) || op.kind.is_atomic() {
            self.mem[s].forget(&op.local);
        }
        if let Some((mr, off, len)) = op.remote
            && op.kind != Kind::Read
        {
            let h = self.mem[r].host(mr, off);
            self.mem[r].shadow.forget(h, len as usize);
        }
        if let Some((k, add)) = op.shared {
            self.shared_log[r][k].1.push((d, op.wr_id, add, None));
        }
        self.mem[s].free(&op.local);
    }

    fn on_recv(&mut self, node: usize, wc: &Wc) -> Res {
        let d = (0..self.dirs.len())
            .find(|&d| self.dirs[d].r == node && self.dirs[d].rq == wc.qp_num)
            .ok_or_else(|| format!("receive completion for unknown QP: {wc:?}"))?;
        let pieces = if self.dirs[d].srq {
            let slot = wc.wr_id as usize;
            let when = self.net.now + Duration::from_micros(self.rng.range(0, 100));
            let s = self.slots[node]
                .get_mut(slot)
                .filter(|s| s.1.is_none())
                .ok_or_else(|| format!("completion of an SRQ slot not posted: {wc:?}"))?;
            s.1 = Some(when);
            s.0.clone()
        } else {
            let rec = self.dirs[d]
                .recvs
                .pop_front()
                .ok_or_else(|| format!("dir {d}: receive completion with none posted: {wc:?}"))?;
            if rec.wr_id != wc.wr_id {
                return Err(format!(
                    "dir {d}: receive {:#x} completed before {:#x}",
                    wc.wr_id, rec.wr_id
                ));
            }
            self.mem[node].free(&rec.pieces);
            rec.pieces
        };
        match wc.status {
            WcStatus::Success if !self.dirs[d].recv_flushed => {}
            WcStatus::WrFlushErr if self.qp_state(node, wc.qp_num) == QpState::Err => {
                self.dirs[d].recv_flushed = !self.dirs[d].srq;
                self.mem[node].forget(&pieces);
                return Ok(());
            }
            s => return Err(format!("dir {d}: receive completed {s:?}: {wc:?}")),
        }
        let x = &mut self.dirs[d];
        let m = x
            .msgs
            .pop_front()
            .ok_or_else(|| format!("dir {d}: a message nobody sent arrived: {wc:?}"))?;
        x.delivered += 1;
        let opcode = if m.data.is_some() {
            WcOpcode::Recv
        } else {
            WcOpcode::RecvRdmaWithImm
        };
        let flags = if m.imm.is_some() {
            WcFlags::WITH_IMM
        } else {
            WcFlags::EMPTY
        };
        if wc.opcode != opcode
            || u64::from(wc.byte_len) != m.len
            || wc.wc_flags != flags
            || m.imm.is_some_and(|i| i != wc.imm_data)
            || wc.src_qp != 0
        {
            return Err(format!(
                "dir {d}: message {} ({} bytes, imm {:?}) arrived as {wc:?}",
                m.index, m.len, m.imm
            ));
        }
        if let Some(data) = &m.data {
            let got = self.mem[node].gather(&self.net.nodes[node].mem, &pieces);
            if got[..data.len()] != data[..] {
                return Err(format!(
                    "dir {d}: message {} ({} bytes) arrived corrupted",
                    m.index, m.len
                ));
            }
            self.mem[node].expect_prefix(&pieces, data);
        }
        Ok(())
    }

    /// Moves both QPs of a failed connection to ERR, checks the flushes,
    /// destroys them and connects a new pair.
    fn teardown(&mut self, c: usize) -> Res {
        let now = self.net.now;
        let err = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        for d in 0..self.dirs.len() {
            if self.dirs[d].conn == c {
                let (s, sq) = (self.dirs[d].s, self.dirs[d].sq);
                self.net.nodes[s]
                    .ep
                    .modify_qp(now, sq, &err, QpAttrMask::STATE)
                    .unwrap();
            }
        }
        self.net.flush();
        self.poll_all()?;
        for d in 0..self.dirs.len() {
            if self.dirs[d].conn == c && !self.dirs[d].recvs.is_empty() {
                return Err(format!(
                    "dir {d}: {} receives not flushed",
                    self.dirs[d].recvs.len()
                ));
            }
        }
        for (node, qpn) in self.reconnect(c) {
            self.net.nodes[node].ep.destroy_qp(qpn).unwrap();
        }
        self.reconnects += 1;
        Ok(())
    }

    /// End of the run: quiesce, flush the receive queues, check the shared
    /// counters and every byte of memory.
    fn finish(&mut self) -> Res {
        self.net.run_idle(self.net.now + Duration::from_secs(60));
        self.poll_all()?;
        for d in 0..self.dirs.len() {
            let x = &self.dirs[d];
            if !x.failed && !self.conn_failed[x.conn] && !x.msgs.is_empty() {
                return Err(format!("dir {d}: {} messages never arrived", x.msgs.len()));
            }
        }
        let now = self.net.now;
        let err = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        for d in 0..self.dirs.len() {
            let (s, sq) = (self.dirs[d].s, self.dirs[d].sq);
            self.net.nodes[s]
                .ep
                .modify_qp(now, sq, &err, QpAttrMask::STATE)
                .unwrap();
        }
        self.poll_all()?;
        for (d, x) in self.dirs.iter().enumerate() {
            if !x.recvs.is_empty() || !x.ops.is_empty() {
                return Err(format!(
                    "dir {d}: {} receives / {} WRs never completed",
                    x.recvs.len(),
                    x.ops.len()
                ));
            }
        }
        self.check_shared()?;
        for n in 0..self.mem.len() {
            self.mem[n]
                .shadow
                .compare(&self.net.nodes[n].mem)
                .map_err(|e| format!("node {n}: {e}"))?;
        }
        Ok(())
    }

    /// Fetch-adds with positive addends on a shared counter are linearizable
    /// iff, sorted by the value they returned, each returned the sum of the
    /// initial value and the addends before it — and each QP's own results
    /// increase in posting order. With failed ones (which may or may not
    /// have executed) the returned values must still be distinct and ordered
    /// per QP.
    fn check_shared(&mut self) -> Res {
        for r in 0..self.shared_log.len() {
            for k in 0..self.shared_log[r].len() {
                let (init, log) = &self.shared_log[r][k];
                let h = self.mem[r].host(0, self.shared_at[r] + 8 * k as u64);
                let fin = u64::from_ne_bytes(self.net.nodes[r].mem.bytes(h, 8).try_into().unwrap());
                let mut ok: Vec<(u64, u64)> =
                    log.iter().filter_map(|e| e.3.map(|o| (o, e.2))).collect();
                for d in 0..self.dirs.len() {
                    let mine: Vec<u64> = log
                        .iter()
                        .filter(|e| e.0 == d)
                        .filter_map(|e| e.3)
                        .collect();
                    if mine.windows(2).any(|w| w[0] >= w[1]) {
                        return Err(format!(
                            "shared counter {r}/{k}: dir {d} saw {mine:?} (not increasing)"
                        ));
                    }
                }
                ok.sort_unstable();
                if ok.windows(2).any(|w| w[0].0 == w[1].0) {
                    return Err(format!(
                        "shared counter {r}/{k}: two fetch-adds returned the same value"
                    ));
                }
                let all_ok = log.iter().all(|e| e.3.is_some());
                if all_ok {
                    let mut cur = *init;
                    for (orig, add) in &ok {
                        if *orig != cur {
                            return Err(format!(
                                "shared counter {r}/{k}: returned {orig}, linear order expects {cur}"
                            ));
                        }
                        cur += add;
                    }
                    if fin != cur {
                        return Err(format!(
                            "shared counter {r}/{k}: final {fin}, expected {cur}"
                        ));
                    }
                } else {
                    let lo = ok.last().map_or(*init, |(o, a)| o + a);
                    let hi = init + log.iter().map(|e| e.2).sum::<u64>();
                    if fin < lo || fin > hi || ok.first().is_some_and(|f| f.0 < *init) {
                        return Err(format!(
                            "shared counter {r}/{k}: final {fin} outside {lo}..={hi}"
                        ));
                    }
                }
                self.mem[r].shadow.write(h, &fin.to_ne_bytes());
            }
        }
        Ok(())
    }

    fn report(&self) -> Report {
        let mut stats = Stats::default();
        for n in &self.net.nodes {
            add_stats(&mut stats, &n.ep.stats());
        }
        let failed_ops = self.nfailed;
        let ops: usize = self.counts.iter().map(|c| c.1).sum();
        Report {
            by_kind: self.counts.clone(),
            succeeded: ops - failed_ops,
            failed: failed_ops,
            bytes: self.bytes,
            elapsed: self.net.now,
            net: self.net.stats,
            stats,
            exhausted_dirs: self.exhausted,
            failed_conns: self.conn_failed.iter().filter(|f| **f).count(),
            dirs: self.dirs.len(),
            reconnects: self.reconnects,
        }
    }
}
