//! A QP's receive queue, and the express receive post: while the queue's
//! *gate* is open, the driver posts receives into an [`ExpressRecv`] cell
//! under the cell's own lock, without its engine lock, the endpoint's QP
//! lookup or a clock read (`ibv_post_recv`, ~240 ns a call of a same-host
//! ping-pong's message, BENCHMARKS.md "The express receive post").
//!
//! The transport's queue ([`RecvQueue`]) takes what waits in the cell
//! (*pull*) before every read or change of its own, so receives keep the
//! order of their posts, whichever way each went. The gate is open only
//! where a post needs nothing of the transport: the QP is neither in
//! RESET (the post fails) nor in ERR (the receive is flushed at once),
//! and holds no RNR NAK (the receive ends the hold). The transport moves
//! the gate, under the cell's lock and with a pull, at each of those
//! changes; the cell checks the WR's SGE count and the queue's room, and
//! declines what fails either, for the transport's post to refuse with its
//! error.
//!
//! A responder lent with its requester (`qp/express/exec.rs`) takes its
//! receives from the cell: the lending moves the queue's own into the
//! cell, in front of what was posted there ([`RecvQueue::lend`]), and
//! the transport's next pull takes back whatever is left.

use crate::types::QpState;
use crate::wr::RecvWr;
use softrdma_sync::{SpinGuard, SpinLock};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The cell a QP's receives may be posted into without the driver's lock.
#[derive(Debug)]
pub struct ExpressRecv {
    cell: SpinLock<Cell>,
    /// Receives wait in the cell: the transport's pull takes the lock only
    /// then.
    waiting: AtomicBool,
    /// What the transport's queue holds, as of its last change: stored by
    /// the transport after each, under the cell's lock where the queue
    /// grew (so a room check never overfills), without it where it shrank
    /// (a stale, larger count only declines a post).
    held: AtomicUsize,
    max_wr: usize,
    max_sge: usize,
}

#[derive(Debug, Default)]
pub(super) struct Cell {
    open: bool,
    /// The transport's own queue, lent with its responder
    /// ([`RecvQueue::lend`]): older than `posted`, and not counted again
    /// when pulled back.
    lent: VecDeque<RecvWr>,
    /// Posted here, not yet pulled.
    posted: VecDeque<RecvWr>,
    /// Receives of `posted` a lent responder took ([`Cell::take_next`]),
    /// not yet counted in [`RecvQueue::pulled`].
    taken: u64,
}

impl Cell {
    /// The receive a message takes next, if the transport's queue holds
    /// none (`held`, read under the cell's lock: it grows only under it).
    pub(super) fn next(&self, x: &ExpressRecv) -> Option<&RecvWr> {
        if x.held.load(Ordering::Relaxed) != 0 {
            return None;
        }
        self.lent.front().or_else(|| self.posted.front())
    }

    /// Takes the receive [`Cell::next`] gave.
    pub(super) fn take_next(&mut self) -> Option<RecvWr> {
        if let Some(w) = self.lent.pop_front() {
            return Some(w);
        }
        let w = self.posted.pop_front()?;
        self.taken += 1;
        Some(w)
    }
}

impl ExpressRecv {
    fn new(max_wr: u32, max_sge: u32) -> ExpressRecv {
        ExpressRecv {
            cell: SpinLock::default(),
            waiting: AtomicBool::new(false),
            held: AtomicUsize::new(0),
            max_wr: max_wr as usize,
            max_sge: max_sge as usize,
        }
    }

    pub(super) fn lock(&self) -> SpinGuard<'_, Cell> {
        self.cell.lock()
    }

    /// Queues `wr` if the gate is open, it has no more SGEs than the QP
    /// takes and the queue has room; otherwise hands it back untouched, for
    /// the transport's post (which refuses it, or takes it with what the
    /// post must do: a flush in ERR, the end of a held RNR NAK).
    // The WR goes back by value, as it came: boxing it would allocate.
    #[allow(clippy::result_large_err)]
    pub fn post(&self, wr: RecvWr) -> Result<(), RecvWr> {
        let mut g = self.lock();
        let held = self.held.load(Ordering::Relaxed);
        let queued = held + g.lent.len() + g.posted.len();
        let fits = wr.sgl.len() <= self.max_sge && queued < self.max_wr;
        if !(g.open && fits) {
            return Err(wr);
        }
        g.posted.push_back(wr);
        self.waiting.store(true, Ordering::Release);
        Ok(())
    }
}

/// A QP's own receive queue, with its express cell if it has one.
#[derive(Debug, Default)]
pub(crate) struct RecvQueue {
    q: VecDeque<RecvWr>,
    express: Option<Arc<ExpressRecv>>,
    /// Receives taken from the cell ([`crate::Stats::recv_express`]).
    pulled: u64,
}

impl RecvQueue {
    /// The queue's cell, made on the first call (closed: the QP's owner
    /// opens it, [`RecvQueue::gate`]).
    pub(crate) fn express(&mut self, max_wr: u32, max_sge: u32) -> Arc<ExpressRecv> {
        let x = self
            .express
            .get_or_insert_with(|| Arc::new(ExpressRecv::new(max_wr, max_sge)));
        Arc::clone(x)
    }

    /// Opens or closes the gate, taking what waits in the cell first.
    pub(crate) fn gate(&mut self, open: bool) {
        if let Some(x) = &self.express {
            let mut g = x.lock();
            self.pulled += Self::pull_locked(&mut self.q, x, &mut g);
            g.open = open;
        }
    }

    /// Takes the receives that wait in the cell if the queue holds none.
    /// The queue's own are older than the cell's, so its front is the next
    /// receive either way: a message taking one pulls nothing while the
    /// queue holds more, and then all the cell holds at once (a ping-pong
    /// that keeps its receive depth posted paid a pull of one, ~100
    /// instructions with the cell's lock, on every message; callgrind of
    /// `ib_send_lat`).
    pub(crate) fn pull_if_empty(&mut self) {
        if self.q.is_empty() {
            self.pull();
        }
    }

    /// Takes the receives that wait in the cell, behind the queue's own.
    pub(crate) fn pull(&mut self) {
        if let Some(x) = &self.express
            && x.waiting.load(Ordering::Acquire)
        {
            self.pulled += Self::pull_locked(&mut self.q, x, &mut x.lock());
        }
    }

    /// [`RecvQueue::pull`] under the cell's lock; how many it took that
    /// were posted there (with those a lent responder took meanwhile).
    fn pull_locked(q: &mut VecDeque<RecvWr>, x: &ExpressRecv, g: &mut Cell) -> u64 {
        let n = g.posted.len() as u64 + std::mem::take(&mut g.taken);
        // What was lent is older than what waits in the cell, and nothing
        // joined the queue meanwhile (it grows only with a pull first).
        if !g.lent.is_empty() {
            debug_assert!(q.is_empty());
            std::mem::swap(q, &mut g.lent);
        }
        if q.is_empty() {
            std::mem::swap(q, &mut g.posted);
        } else {
            // One at a time: a ping-pong pulls one receive a message, and
            // `VecDeque::append` cost ~100 instructions for it (callgrind
            // of `ib_send_lat`, whose queue holds its receive depth).
            while let Some(w) = g.posted.pop_front() {
                q.push_back(w);
            }
        }
        x.waiting.store(false, Ordering::Relaxed);
        x.held.store(q.len(), Ordering::Relaxed);
        n
    }

    /// Receives taken from the cell so far (by the transport, or by its
    /// lent responder).
    pub(crate) fn pulled(&self) -> u64 {
        self.pulled + self.express.as_ref().map_or(0, |x| x.lock().taken)
    }

    /// Lends the queue to the cell, for a responder lent with it to take
    /// receives from (`qp/express.rs`): the cell then holds every receive,
    /// the queue's in front; any pull takes them back. False, with nothing
    /// moved, without a cell or with its gate closed.
    pub(crate) fn lend(&mut self) -> bool {
        let Some(x) = &self.express else { return false };
        let mut g = x.lock();
        if !g.open {
            return false;
        }
        if !self.q.is_empty() {
            debug_assert!(g.lent.is_empty());
            std::mem::swap(&mut self.q, &mut g.lent);
            x.waiting.store(true, Ordering::Release);
            x.held.store(0, Ordering::Relaxed);
        }
        true
    }

    /// After the queue shrank: the cell's room check sees it.
    fn note_shrunk(&self) {
        if let Some(x) = &self.express {
            x.held.store(self.q.len(), Ordering::Relaxed);
        }
    }

    pub(crate) fn len(&mut self) -> usize {
        self.pull();
        self.q.len()
    }

    /// The oldest receive of the transport's queue, as of the last pull
    /// (after [`RecvQueue::pull_if_empty`]: the next receive, if any).
    pub(crate) fn peek(&self) -> Option<&RecvWr> {
        self.q.front()
    }

    pub(crate) fn pop_front(&mut self) -> Option<RecvWr> {
        self.pull_if_empty();
        let w = self.q.pop_front();
        if w.is_some() {
            self.note_shrunk();
        }
        w
    }

    /// Queues a receive the transport's post took, behind those waiting
    /// in the cell (under its lock, so a room check there counts it).
    pub(crate) fn push_back(&mut self, wr: RecvWr) {
        match &self.express {
            Some(x) => {
                let mut g = x.lock();
                self.pulled += Self::pull_locked(&mut self.q, x, &mut g);
                self.q.push_back(wr);
                x.held.store(self.q.len(), Ordering::Relaxed);
            }
            None => self.q.push_back(wr),
        }
    }

    /// Everything queued, oldest first, leaving the queue empty.
    pub(crate) fn take_all(&mut self) -> VecDeque<RecvWr> {
        self.pull();
        let q = std::mem::take(&mut self.q);
        self.note_shrunk();
        q
    }

    /// Whether the transport's queue holds a receive now (after a pull).
    pub(crate) fn is_empty(&mut self) -> bool {
        self.len() == 0
    }
}

impl super::Qp {
    /// The QP's express receive cell, made on the first call; none for a
    /// QP that takes its receives from an SRQ.
    pub(crate) fn express_recv(&mut self) -> Option<Arc<ExpressRecv>> {
        if self.srq.is_some() || self.qp_type.is_xrc() {
            return None;
        }
        let x = self.rq.express(self.cap.max_recv_wr, self.cap.max_recv_sge);
        self.gate_recvs();
        Some(x)
    }

    /// Opens the receive gate where a post needs nothing of the transport
    /// (see the module's doc), closes it elsewhere; after any change of
    /// the QP's state or of its held RNR NAK.
    pub(crate) fn gate_recvs(&mut self) {
        let open =
            !matches!(self.state, QpState::Reset | QpState::Err) && self.resp.rnr_held.is_none();
        self.rq.gate(open);
    }

    /// The QP is gone: its cell takes no receive again.
    pub(crate) fn close_recvs(&mut self) {
        self.rq.gate(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::{Sge, Sgl};

    fn wr(id: u64) -> RecvWr {
        RecvWr {
            wr_id: id,
            sgl: Sgl::default(),
        }
    }

    /// A queue of `max_wr` receives of one SGE, its gate open.
    fn open(max_wr: u32) -> (RecvQueue, Arc<ExpressRecv>) {
        let mut q = RecvQueue::default();
        let x = q.express(max_wr, 1);
        q.gate(true);
        (q, x)
    }

    fn ids(q: &mut RecvQueue) -> Vec<u64> {
        q.take_all().into_iter().map(|w| w.wr_id).collect()
    }

    #[test]
    fn a_closed_cell_declines_and_an_open_one_keeps_the_order_of_posts() {
        let mut q = RecvQueue::default();
        let x = q.express(4, 1);
        assert_eq!(x.post(wr(1)).map_err(|w| w.wr_id), Err(1));
        q.push_back(wr(1));
        q.gate(true);
        x.post(wr(2)).unwrap();
        q.push_back(wr(3));
        x.post(wr(4)).unwrap();
        q.pull();
        assert_eq!(q.peek().map(|w| w.wr_id), Some(1));
        assert_eq!(ids(&mut q), [1, 2, 3, 4]);
        assert_eq!(q.pulled(), 2);
    }

    #[test]
    fn the_cell_declines_a_full_queue_and_too_many_sges() {
        let (mut q, x) = open(2);
        x.post(wr(1)).unwrap();
        q.push_back(wr(2));
        // Two of two: the third goes to the transport, which refuses it.
        assert!(x.post(wr(3)).is_err());
        assert_eq!(q.pop_front().map(|w| w.wr_id), Some(1));
        x.post(wr(3)).unwrap();
        assert!(x.post(wr(4)).is_err());
        let mut two = wr(5);
        two.sgl = Sgl::from(vec![Sge::default(), Sge::default()]);
        assert_eq!(q.pop_front().map(|w| w.wr_id), Some(2));
        assert!(x.post(two).is_err());
        assert_eq!(ids(&mut q), [3]);
    }

    #[test]
    fn closing_the_gate_pulls_what_waits() {
        let (mut q, x) = open(8);
        x.post(wr(7)).unwrap();
        q.gate(false);
        assert!(x.post(wr(8)).is_err());
        assert!(!x.waiting.load(Ordering::Relaxed));
        assert_eq!(q.q.len(), 1);
        assert_eq!(ids(&mut q), [7]);
    }
}
