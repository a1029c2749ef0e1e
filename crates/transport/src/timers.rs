//! The QPs' timer deadlines (retransmission, RNR) in a min-heap, so the
//! driver's "when is the next timer?" ([`crate::Endpoint::poll_timeout`]) and
//! "which QPs are due?" cost O(log n) instead of a scan of every QP.
//!
//! A QP's deadline moves often (every ACK that makes progress pushes the
//! retransmission timer out), so the heap is lazy: `armed` holds each QP's
//! true deadline and the heap holds, for every armed QP, at least one entry
//! no later than it. A deadline that moves later pushes nothing; only the
//! heap's top is kept exact, so [`TimerHeap::earliest`] is always the true
//! earliest deadline.

use crate::time::Instant;
use crate::types::Qpn;
use rustc_hash::FxHashMap as HashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Deadlines by QP (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct TimerHeap {
    heap: BinaryHeap<Reverse<(Instant, Qpn)>>,
    armed: HashMap<Qpn, Instant>,
}

impl TimerHeap {
    /// `qpn`'s earliest armed timer is now `t` (`None`: none armed, or the
    /// QP is gone).
    pub(crate) fn set(&mut self, qpn: Qpn, t: Option<Instant>) {
        match t {
            Some(t) => {
                // Most calls (one per packet sent) leave the deadline as it
                // was: one lookup then.
                if self.armed.get(&qpn) == Some(&t) {
                    return;
                }
                let old = self.armed.insert(qpn, t);
                if old.is_none_or(|o| t < o) {
                    self.heap.push(Reverse((t, qpn)));
                }
            }
            None => {
                if self.armed.remove(&qpn).is_none() {
                    return;
                }
            }
        }
        self.fix_top();
    }

    /// The earliest deadline of any QP.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// Takes the QPs whose deadline is at or before `now` (each once); the
    /// caller fires them and [`TimerHeap::set`]s their next deadline.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Qpn> {
        let mut due = Vec::new();
        while let Some(&Reverse((t, q))) = self.heap.peek() {
            if t > now {
                break;
            }
            self.heap.pop();
            match self.armed.get(&q) {
                Some(&a) if a <= now => {
                    self.armed.remove(&q);
                    due.push(q);
                }
                Some(&a) => self.heap.push(Reverse((a, q))),
                None => {}
            }
        }
        self.fix_top();
        due
    }

    /// Makes the top entry exact: stale entries (a QP disarmed, or armed
    /// later than the entry says) are dropped or moved to the true deadline.
    fn fix_top(&mut self) {
        while let Some(&Reverse((t, q))) = self.heap.peek() {
            match self.armed.get(&q) {
                Some(&a) if a == t => break,
                Some(&a) => {
                    self.heap.pop();
                    self.heap.push(Reverse((a, q)));
                }
                None => {
                    self.heap.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    #[test]
    fn earliest_follows_deadlines_that_move_both_ways() {
        let mut h = TimerHeap::default();
        assert_eq!(h.earliest(), None);
        h.set(1, Some(at(100)));
        h.set(2, Some(at(50)));
        assert_eq!(h.earliest(), Some(at(50)));
        // QP 2's deadline moves out past QP 1's: QP 1 is next.
        h.set(2, Some(at(300)));
        assert_eq!(h.earliest(), Some(at(100)));
        // And back in.
        h.set(2, Some(at(10)));
        assert_eq!(h.earliest(), Some(at(10)));
        h.set(2, None);
        assert_eq!(h.earliest(), Some(at(100)));
        h.set(1, None);
        assert_eq!(h.earliest(), None);
    }

    #[test]
    fn setting_an_unchanged_deadline_or_disarming_an_unarmed_qp_changes_nothing() {
        let mut h = TimerHeap::default();
        h.set(1, Some(at(100)));
        h.set(1, Some(at(100)));
        h.set(2, None);
        assert_eq!(h.heap.len(), 1, "no second entry for an unchanged deadline");
        assert_eq!(h.earliest(), Some(at(100)));
        assert_eq!(h.take_due(at(100)), vec![1]);
        assert_eq!(h.earliest(), None);
    }

    #[test]
    fn due_qps_come_once_and_later_ones_stay() {
        let mut h = TimerHeap::default();
        h.set(1, Some(at(100)));
        h.set(2, Some(at(200)));
        h.set(3, Some(at(300)));
        // QP 1 armed earlier, then later: its old entry must not fire it early.
        h.set(1, Some(at(250)));
        assert_eq!(h.take_due(at(150)), Vec::<Qpn>::new());
        assert_eq!(h.earliest(), Some(at(200)));
        let mut d = h.take_due(at(260));
        d.sort_unstable();
        assert_eq!(d, [1, 2]);
        assert_eq!(h.earliest(), Some(at(300)));
        assert!(h.take_due(at(260)).is_empty(), "taken once");
        assert_eq!(h.take_due(at(300)), [3]);
        assert_eq!(h.earliest(), None);
    }

    #[test]
    fn matches_a_scan_under_random_updates() {
        let mut h = TimerHeap::default();
        let mut truth: HashMap<Qpn, Instant> = HashMap::default();
        let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = |n: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % n
        };
        let mut now = 0;
        for _ in 0..20_000 {
            let q = rnd(16) as Qpn;
            match rnd(4) {
                0 => {
                    h.set(q, None);
                    truth.remove(&q);
                }
                1 => {
                    now += rnd(50);
                    let mut d = h.take_due(at(now));
                    d.sort_unstable();
                    let mut want: Vec<Qpn> = truth
                        .iter()
                        .filter(|&(_, &t)| t <= at(now))
                        .map(|(&q, _)| q)
                        .collect();
                    want.sort_unstable();
                    assert_eq!(d, want);
                    truth.retain(|_, t| *t > at(now));
                }
                _ => {
                    let t = at(now + 1 + rnd(500));
                    h.set(q, Some(t));
                    truth.insert(q, t);
                }
            }
            assert_eq!(h.earliest(), truth.values().min().copied());
        }
    }
}
