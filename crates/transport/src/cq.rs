//! Completion queues and shared receive queues: plain bounded queues plus
//! their notification state.
//!
//! A CQ's completions are a [`CqRing`] the endpoint shares with its driver:
//! the endpoint queues into it (under whatever serialises the endpoint), and
//! a driver may take completions from it without that, as an application's
//! poll takes a device's CQEs without the driver's other locks
//! (docs/PLAN-direct-queues.md, step 1).

use crate::Instant;
use crate::mr::PdHandle;
use crate::wr::{RecvWr, Wc};
use softrdma_sync::{SpinGuard, SpinLock};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Handle of a completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqHandle(pub u32);

/// Handle of a shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqHandle(pub u32);

/// What a `req_notify_cq` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arm {
    /// The next completion of any kind.
    Next,
    /// The next solicited (or error) completion.
    Solicited,
}

/// A CQ's queued completions, oldest first, with what a push checks and
/// changes (its size, its arm, the latest stamp), all under one lock of their
/// own ([`SpinLock`]: released with a store, as the express cells' are). A
/// push then needs the ring alone, not the endpoint
/// (docs/PLAN-direct-queues.md, "the responder lent").
#[derive(Debug)]
pub struct CqRing {
    queue: SpinLock<Queue>,
    /// `queue.wcs.len()`, written under the lock: what a poller reads first,
    /// so an empty CQ costs it no lock.
    len: AtomicUsize,
}

#[derive(Debug)]
struct Queue {
    wcs: VecDeque<Wc>,
    /// The CQ's size: a push that finds this many queued overflows.
    cqe: u32,
    arm: Option<Arm>,
    /// The latest timestamp queued: each completion is stamped after it.
    /// Callers pass in the time they read on entry, and one descheduled
    /// before it took the engine would otherwise queue an older stamp after
    /// a newer one (`ibv_rc_pingpong -t` then sees time run backwards); a
    /// device's CQEs are written at distinct times.
    last_stamp: Instant,
}

impl Queue {
    /// Queues `wc` stamped `now`, or just after the latest stamp queued;
    /// returns whether the CQ's arm fired for it (and disarms it).
    fn queue(&mut self, now: Instant, mut wc: Wc, solicited: bool) -> bool {
        wc.timestamp = now;
        if now <= self.last_stamp && self.last_stamp != Instant::ZERO {
            wc.timestamp = Instant::from_nanos(self.last_stamp.as_nanos() + 1);
        }
        self.last_stamp = wc.timestamp;
        self.wcs.push_back(wc);
        let fire = match self.arm {
            Some(Arm::Next) => true,
            Some(Arm::Solicited) => solicited || wc.status != crate::WcStatus::Success,
            None => false,
        };
        if fire {
            self.arm = None;
        }
        fire
    }
}

/// The CQ was full; the completion was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow;

impl CqRing {
    fn new(cqe: u32) -> CqRing {
        CqRing {
            queue: SpinLock::new(Queue {
                wcs: VecDeque::new(),
                cqe,
                arm: None,
                last_stamp: Instant::ZERO,
            }),
            len: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> SpinGuard<'_, Queue> {
        self.queue.lock()
    }

    /// Completions queued (may be out of date as soon as it is read).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether no completion is queued (as [`CqRing::len`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes up to `max` completions, oldest first, handing each to `f`
    /// (under the ring's lock, a spin lock: `f` must be short and must not
    /// poll this CQ).
    pub fn poll(&self, max: usize, mut f: impl FnMut(Wc)) -> usize {
        if max == 0 || self.is_empty() {
            return 0;
        }
        let mut q = self.lock();
        let n = max.min(q.wcs.len());
        for wc in q.wcs.drain(..n) {
            f(wc);
        }
        self.len.store(q.wcs.len(), Ordering::Release);
        n
    }

    /// Queues a completion; returns whether an armed notification fired
    /// (and disarms it).
    pub(crate) fn push(&self, wc: Wc, solicited: bool) -> Result<bool, Overflow> {
        let mut q = self.lock();
        if q.wcs.len() >= q.cqe as usize {
            return Err(Overflow);
        }
        let fired = q.queue(wc.timestamp, wc, solicited);
        self.len.store(q.wcs.len(), Ordering::Release);
        Ok(fired)
    }

    /// Queues the completions of `items` (each into its ring, stamped
    /// `now`, in order; the flag: a solicited event), all or none. None if
    /// a ring has no room for its share (an overflow is the transport's
    /// error to raise), or is armed at all unless `fire`; with `fire`,
    /// returns which items fired their ring's arm (and disarmed it): the
    /// caller raises the notifications. A lent responder's completions
    /// (`qp/express/exec.rs`): the rings' locks are the only ones it takes,
    /// each ring's once, in address order.
    pub(crate) fn push_lent(
        now: Instant,
        items: [Option<(&CqRing, Wc, bool)>; 2],
        fire: bool,
    ) -> Option<[bool; 2]> {
        let room = |q: &Queue, n: usize| {
            n == 0 || ((q.arm.is_none() || fire) && q.wcs.len() + n <= q.cqe as usize)
        };
        match items {
            [Some((a, w0, s0)), Some((b, w1, _))] if !std::ptr::eq(a, b) => {
                // Two rings: locked in address order.
                let a_first = (a as *const CqRing) < (b as *const CqRing);
                let (mut qa, mut qb) = if a_first {
                    let qa = a.lock();
                    (qa, b.lock())
                } else {
                    let qb = b.lock();
                    (a.lock(), qb)
                };
                if !(room(&qa, 1) && room(&qb, 1)) {
                    return None;
                }
                let fired = [qa.queue(now, w0, s0), qb.queue(now, w1, false)];
                a.len.store(qa.wcs.len(), Ordering::Release);
                b.len.store(qb.wcs.len(), Ordering::Release);
                Some(fired)
            }
            // One ring (one item, or both into the same CQ): the common
            // case, a QP whose send and receive CQ are one.
            [first, second] => {
                // None at all (a WRITE that settles nothing): done.
                let Some(ring) = first.as_ref().or(second.as_ref()).map(|(r, ..)| *r) else {
                    return Some([false; 2]);
                };
                let mut q = ring.lock();
                let n = usize::from(first.is_some()) + usize::from(second.is_some());
                if !room(&q, n) {
                    return None;
                }
                let mut fired = [false; 2];
                for (i, item) in [first, second].into_iter().enumerate() {
                    if let Some((_, wc, solicited)) = item {
                        fired[i] = q.queue(now, wc, solicited);
                    }
                }
                ring.len.store(q.wcs.len(), Ordering::Release);
                Some(fired)
            }
        }
    }

    /// Changes the CQ's size, unless fewer than what is queued (false); in
    /// the same hold of the lock as the check, so no push slips between.
    pub(crate) fn resize(&self, cqe: u32) -> bool {
        let mut q = self.lock();
        if (cqe as usize) < q.wcs.len() {
            return false;
        }
        q.cqe = cqe;
        true
    }

    /// Arms the CQ for its next completion, or its next solicited one; an
    /// arm for any completion is not narrowed by a later solicited-only one.
    pub(crate) fn arm(&self, solicited_only: bool) {
        let mut q = self.lock();
        q.arm = Some(match (solicited_only, q.arm) {
            (false, _) | (true, Some(Arm::Next)) => Arm::Next,
            (true, _) => Arm::Solicited,
        });
    }

    /// Keeps only the completions `keep` accepts, in order.
    fn retain(&self, mut keep: impl FnMut(&Wc) -> bool) {
        let mut q = self.lock();
        q.wcs.retain(|w| keep(w));
        self.len.store(q.wcs.len(), Ordering::Release);
    }

    #[cfg(test)]
    fn snapshot(&self) -> Vec<Wc> {
        self.lock().wcs.iter().copied().collect()
    }
}

#[derive(Debug)]
pub(crate) struct Cq {
    pub(crate) entries: Arc<CqRing>,
    /// QPs (and SRQs) using this CQ: destroy is EBUSY while non-zero.
    pub(crate) users: u32,
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`: a completion that finds the CQ
    /// full is dropped without an error (no CQ_ERR, the QP carries on).
    pub(crate) ignore_overrun: bool,
}

impl Cq {
    pub(crate) fn new(cqe: u32) -> Cq {
        Cq {
            entries: Arc::new(CqRing::new(cqe)),
            users: 0,
            ignore_overrun: false,
        }
    }

    /// Drops the completions of QP `qpn`.
    pub(crate) fn forget_qp(&self, qpn: u32) {
        self.entries.retain(|w| w.qp_num != qpn);
    }

    /// Queues a completion; returns whether an armed notification fired.
    pub(crate) fn push(&self, wc: Wc, solicited: bool) -> Result<bool, Overflow> {
        self.entries.push(wc, solicited)
    }
}

#[derive(Debug)]
pub(crate) struct Srq {
    pub(crate) pd: PdHandle,
    pub(crate) wqes: VecDeque<RecvWr>,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    /// Async event when the queue drops below this many WRs (0 = disarmed).
    pub(crate) limit: u32,
    pub(crate) users: u32,
    /// An XRC SRQ: its domain and the CQ its receive completions go to.
    pub(crate) xrc: Option<XrcSrq>,
    /// A tag-matching SRQ (`IBV_SRQT_TM`): its tag list and CQ.
    pub(crate) tm: Option<crate::tm::TmSrq>,
}

/// What makes an SRQ an XRC SRQ (`IBV_SRQT_XRC`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct XrcSrq {
    /// The XRC domain (the driver's id for it); only XRC target QPs of the
    /// same domain may deliver to this SRQ.
    pub(crate) xrcd: u32,
    pub(crate) cq: CqHandle,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{WcOpcode, WcStatus};

    fn stamped(ns: u64) -> Wc {
        let mut wc = Wc::new(ns, WcStatus::Success, WcOpcode::Recv, 1);
        wc.timestamp = Instant::from_nanos(ns);
        wc
    }

    /// A completion queued after another with an older or equal time (its
    /// thread read the clock, then waited) is stamped just after it.
    #[test]
    fn a_late_older_stamp_never_runs_the_queue_backwards() {
        let cq = Cq::new(8);
        for ns in [1_000, 5_000_000, 1_150_000, 5_000_000, 6_000_000] {
            cq.push(stamped(ns), false).unwrap();
        }
        let queued = cq.entries.snapshot();
        let stamps: Vec<u64> = queued.iter().map(|w| w.timestamp.as_nanos()).collect();
        assert_eq!(stamps, [1_000, 5_000_000, 5_000_001, 5_000_002, 6_000_000]);
        // Only the stamp changed.
        let ids: Vec<u64> = queued.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [1_000, 5_000_000, 1_150_000, 5_000_000, 6_000_000]);
    }

    /// The size a push checks is the ring's own: a CQ resized to what it
    /// holds overflows on the next push, a resize below that is refused
    /// and changes nothing, and room polled free is room again.
    #[test]
    fn a_push_checks_the_size_the_ring_holds() {
        let cq = Cq::new(4);
        for id in 0..3 {
            cq.push(stamped(id + 1), false).unwrap();
        }
        assert!(!cq.entries.resize(2));
        cq.push(stamped(10), false).unwrap();
        assert_eq!(cq.push(stamped(11), false), Err(Overflow));
        assert!(cq.entries.resize(4));
        assert_eq!(cq.push(stamped(12), false), Err(Overflow));
        assert_eq!(cq.entries.poll(1, |_| ()), 1);
        cq.push(stamped(13), false).unwrap();
        assert_eq!(cq.entries.len(), 4);
    }

    /// An arm fires once, for the completion it asked for; a solicited-only
    /// arm does not narrow an arm for any completion.
    #[test]
    fn an_arm_fires_once_for_what_it_asked() {
        let cq = Cq::new(16);
        assert_eq!(cq.push(stamped(1), true), Ok(false));
        cq.entries.arm(true);
        assert_eq!(cq.push(stamped(2), false), Ok(false));
        assert_eq!(cq.push(stamped(3), true), Ok(true));
        assert_eq!(cq.push(stamped(4), true), Ok(false));
        cq.entries.arm(false);
        cq.entries.arm(true);
        assert_eq!(cq.push(stamped(5), false), Ok(true));
        assert_eq!(cq.push(stamped(6), false), Ok(false));
        cq.entries.arm(true);
        let mut failed = stamped(7);
        failed.status = WcStatus::GeneralErr;
        assert_eq!(cq.push(failed, false), Ok(true));
    }

    /// A lent responder's push: both completions or none, into one ring
    /// or two; an armed ring refuses unless the caller fires (then it
    /// learns which fired, and the arm is spent); a ring without room for
    /// its share refuses either way.
    #[test]
    fn a_lent_push_is_all_or_nothing() {
        let (recv, send) = (Cq::new(2), Cq::new(1));
        let (r, s) = (&*recv.entries, &*send.entries);
        let t = Instant::from_nanos(50);
        let two = |a: u64, b: u64| [Some((r, stamped(a), true)), Some((s, stamped(b), false))];
        assert_eq!(CqRing::push_lent(t, two(1, 2), false), Some([false, false]));
        // The send CQ is full: nothing queued into the receive CQ either.
        assert_eq!(CqRing::push_lent(t, two(3, 4), true), None);
        assert_eq!((r.len(), s.len()), (1, 1));
        s.poll(1, |_| ());
        r.arm(true);
        assert_eq!(CqRing::push_lent(t, two(5, 6), false), None);
        assert_eq!((r.len(), s.len()), (1, 0));
        assert_eq!(CqRing::push_lent(t, two(7, 8), true), Some([true, false]));
        // Both into one ring, stamped in order after its latest.
        let one = Cq::new(4);
        let o = &*one.entries;
        let both = [Some((o, stamped(9), false)), Some((o, stamped(10), false))];
        assert_eq!(CqRing::push_lent(t, both, false), Some([false, false]));
        let stamps: Vec<u64> = o
            .snapshot()
            .iter()
            .map(|w| w.timestamp.as_nanos())
            .collect();
        assert_eq!(stamps, [50, 51]);
        let three = [Some((o, stamped(11), false)), Some((o, stamped(12), false))];
        o.arm(false);
        assert_eq!(CqRing::push_lent(t, three, true), Some([true, false]));
        let full = [Some((o, stamped(13), false)), None];
        assert_eq!(CqRing::push_lent(t, full, true), None);
        assert_eq!(CqRing::push_lent(t, [None, None], false), Some([false; 2]));
    }

    /// The ring under its spin lock, as the engine uses it: one producer
    /// (the engine lock's holder) queues while two pollers take
    /// completions without it. Each completion is taken once, and each
    /// poller sees its share in queue order.
    #[test]
    fn two_pollers_take_each_completion_once_and_in_order() {
        use std::sync::atomic::AtomicU64;
        const N: u64 = 200_000;
        let cq = Cq::new(u32::MAX);
        let ring = Arc::clone(&cq.entries);
        let taken = Arc::new(AtomicU64::new(0));
        let pollers: Vec<_> = (0..2)
            .map(|_| {
                let (ring, taken) = (Arc::clone(&ring), Arc::clone(&taken));
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    // Bounded: a broken lock loses or repeats completions,
                    // and the count might then never be reached.
                    let start = std::time::Instant::now();
                    while taken.load(Ordering::Relaxed) < N
                        && start.elapsed() < std::time::Duration::from_secs(30)
                    {
                        let n = ring.poll(4, |w| got.push(w.wr_id));
                        taken.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    got
                })
            })
            .collect();
        for id in 0..N {
            cq.push(Wc::new(id, WcStatus::Success, WcOpcode::Recv, 1), false)
                .unwrap();
        }
        let mut all = Vec::new();
        for p in pollers {
            let got = p.join().unwrap();
            assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order");
            all.extend(got);
        }
        all.sort_unstable();
        assert_eq!(all, (0..N).collect::<Vec<_>>());
        assert!(ring.is_empty());
    }
}
