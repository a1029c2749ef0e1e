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

/// A CQ's queued completions, oldest first, under a lock of their own
/// ([`SpinLock`]: released with a store, as the express cells' are).
#[derive(Debug, Default)]
pub struct CqRing {
    entries: SpinLock<VecDeque<Wc>>,
    /// `entries.len()`, written under the lock: what a poller reads first,
    /// so an empty CQ costs it no lock.
    len: AtomicUsize,
}

impl CqRing {
    fn lock(&self) -> SpinGuard<'_, VecDeque<Wc>> {
        self.entries.lock()
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
        let n = max.min(q.len());
        for wc in q.drain(..n) {
            f(wc);
        }
        self.len.store(q.len(), Ordering::Release);
        n
    }

    fn push_back(&self, wc: Wc) {
        let mut q = self.lock();
        q.push_back(wc);
        self.len.store(q.len(), Ordering::Release);
    }

    /// Keeps only the completions `keep` accepts, in order.
    fn retain(&self, keep: impl FnMut(&Wc) -> bool) {
        let mut q = self.lock();
        q.retain(keep);
        self.len.store(q.len(), Ordering::Release);
    }

    #[cfg(test)]
    fn snapshot(&self) -> Vec<Wc> {
        self.lock().iter().copied().collect()
    }
}

#[derive(Debug)]
pub(crate) struct Cq {
    pub(crate) entries: Arc<CqRing>,
    pub(crate) cqe: u32,
    pub(crate) arm: Option<Arm>,
    /// QPs (and SRQs) using this CQ: destroy is EBUSY while non-zero.
    pub(crate) users: u32,
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`: a completion that finds the CQ
    /// full is dropped without an error (no CQ_ERR, the QP carries on).
    pub(crate) ignore_overrun: bool,
    /// The latest timestamp queued: each completion is stamped after it.
    /// Callers pass in the time they read on entry, and one descheduled
    /// before it took the engine would otherwise queue an older stamp after
    /// a newer one (`ibv_rc_pingpong -t` then sees time run backwards); a
    /// device's CQEs are written at distinct times.
    last_stamp: Instant,
}

/// The CQ was full; the completion was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow;

impl Cq {
    pub(crate) fn new(cqe: u32) -> Cq {
        Cq {
            entries: Arc::default(),
            cqe,
            arm: None,
            users: 0,
            ignore_overrun: false,
            last_stamp: Instant::ZERO,
        }
    }

    /// Drops the completions of QP `qpn`.
    pub(crate) fn forget_qp(&self, qpn: u32) {
        self.entries.retain(|w| w.qp_num != qpn);
    }

    /// Queues a completion; returns whether an armed notification fired.
    pub(crate) fn push(&mut self, mut wc: Wc, solicited: bool) -> Result<bool, Overflow> {
        if self.entries.len() >= self.cqe as usize {
            return Err(Overflow);
        }
        if wc.timestamp <= self.last_stamp && self.last_stamp != Instant::ZERO {
            wc.timestamp = Instant::from_nanos(self.last_stamp.as_nanos() + 1);
        }
        self.last_stamp = wc.timestamp;
        self.entries.push_back(wc);
        let fire = match self.arm {
            Some(Arm::Next) => true,
            Some(Arm::Solicited) => solicited || wc.status != crate::WcStatus::Success,
            None => false,
        };
        if fire {
            self.arm = None;
        }
        Ok(fire)
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
        let mut cq = Cq::new(8);
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

    /// The ring under its spin lock, as the engine uses it: one producer
    /// (the engine lock's holder) queues while two pollers take
    /// completions without it. Each completion is taken once, and each
    /// poller sees its share in queue order.
    #[test]
    fn two_pollers_take_each_completion_once_and_in_order() {
        use std::sync::atomic::AtomicU64;
        const N: u64 = 200_000;
        let mut cq = Cq::new(u32::MAX);
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
