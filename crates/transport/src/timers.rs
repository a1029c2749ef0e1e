//! The QPs' timer deadlines (retransmission, RNR) in a min-heap, so the
//! driver's "when is the next timer?" ([`crate::Endpoint::poll_timeout`]) and
//! "which QPs are due?" cost O(log n) instead of a scan of every QP.
//!
//! A QP's deadline moves on every message (a request arms the
//! retransmission timer, its ACK disarms it), so the heap is lazy both ways:
//! each QP's [`Slot`] holds its true deadline and the time of its earliest
//! entry in the heap, and the heap holds, for every armed QP, an entry no
//! later than its deadline. Moving a deadline later or disarming it pushes
//! and pops nothing (one map lookup); entries that no longer match are
//! dropped or moved when they reach the top, which [`TimerHeap::earliest`]
//! and [`TimerHeap::take_due`] do. Before this, the top was kept exact on
//! every change: two heap operations and four lookups a message of a
//! ping-pong (`ib_send_lat`, callgrind: BENCHMARKS.md, "Fewer instructions a
//! message").

use crate::time::Instant;
use crate::types::Qpn;
use rustc_hash::FxHashMap as HashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::hash_map::Entry;

/// Deadlines by QP (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct TimerHeap {
    heap: BinaryHeap<Reverse<(Instant, Qpn)>>,
    slots: HashMap<Qpn, Slot>,
}

/// One QP's part of the heap.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// The QP's earliest armed timer.
    armed: Option<Instant>,
    /// Its earliest entry in the heap, if known (`None` once that entry
    /// left; later ones of the QP may remain, and are dropped in turn).
    queued: Option<Instant>,
}

impl TimerHeap {
    /// `qpn`'s earliest armed timer is now `t` (`None`: none armed, or the
    /// QP is gone).
    pub(crate) fn set(&mut self, qpn: Qpn, t: Option<Instant>) {
        match self.slots.entry(qpn) {
            Entry::Occupied(mut e) => {
                let slot = e.get_mut();
                slot.armed = t;
                if let Some(t) = t
                    && slot.queued.is_none_or(|q| t < q)
                {
                    slot.queued = Some(t);
                    self.heap.push(Reverse((t, qpn)));
                } else if t.is_none() && slot.queued.is_none() {
                    e.remove();
                }
            }
            Entry::Vacant(e) => {
                if let Some(t) = t {
                    e.insert(Slot {
                        armed: Some(t),
                        queued: Some(t),
                    });
                    self.heap.push(Reverse((t, qpn)));
                }
            }
        }
    }

    /// [`TimerHeap::set`] for a QP whose last deadline given here is
    /// `told`: nothing to do (no lookup) if it is still `t`. A QP the heap
    /// returned from [`TimerHeap::take_due`] has none (its `told` must be
    /// cleared then).
    pub(crate) fn tell(&mut self, qpn: Qpn, told: &mut Option<Instant>, t: Option<Instant>) {
        if *told != t {
            *told = t;
            self.set(qpn, t);
        }
    }

    /// The earliest deadline of any QP.
    pub(crate) fn earliest(&mut self) -> Option<Instant> {
        self.fix_top();
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// A time no later than the earliest deadline (the heap's top, which may
    /// be an entry that no longer counts): cheap, for a caller that only
    /// asks whether anything may be due before some time.
    pub(crate) fn bound(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// Takes the QPs whose deadline is at or before `now` (each once); the
    /// caller fires them and [`TimerHeap::set`]s their next deadline.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Qpn> {
        let mut due = Vec::new();
        loop {
            self.fix_top();
            match self.heap.peek() {
                Some(&Reverse((t, q))) if t <= now => {
                    // Exact after `fix_top`: the QP's deadline is `t`, and
                    // this was its earliest entry (later ones are dropped
                    // when they reach the top).
                    self.heap.pop();
                    self.slots.remove(&q);
                    due.push(q);
                }
                _ => break,
            }
        }
        due
    }

    /// Drops or moves top entries until the top is a QP's true deadline.
    fn fix_top(&mut self) {
        while let Some(&Reverse((t, q))) = self.heap.peek() {
            let Some(slot) = self.slots.get_mut(&q) else {
                self.heap.pop();
                continue;
            };
            if slot.armed == Some(t) {
                break;
            }
            // The top is the least of all, so the QP's earliest entry: it
            // goes, and the QP's deadline, if armed, takes its place.
            self.heap.pop();
            slot.queued = slot.armed;
            match slot.armed {
                Some(a) => self.heap.push(Reverse((a, q))),
                None => {
                    self.slots.remove(&q);
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
    fn a_ping_pong_moves_one_entry_and_forgets_a_quiet_qp() {
        // Each message arms the retransmission timer and its ACK disarms it.
        let mut h = TimerHeap::default();
        for i in 0..1_000 {
            h.set(7, Some(at(1_000 + i)));
            assert_eq!(h.earliest(), Some(at(1_000 + i)));
            h.set(7, None);
            assert!(h.heap.len() <= 1, "stale entries do not pile up");
        }
        assert_eq!(h.earliest(), None);
        assert!(h.heap.is_empty() && h.slots.is_empty());
        // Without `earliest` between them, only the first arming pushes.
        for i in 0..1_000 {
            h.set(7, Some(at(5_000 + i)));
            h.set(7, None);
        }
        assert_eq!(h.heap.len(), 1);
        h.set(7, Some(at(9_000)));
        assert_eq!(h.take_due(at(8_999)), Vec::<Qpn>::new());
        assert_eq!(h.earliest(), Some(at(9_000)));
        assert_eq!(h.take_due(at(9_000)), [7]);
        assert!(h.heap.is_empty() && h.slots.is_empty());
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
