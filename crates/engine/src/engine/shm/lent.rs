//! Records for lent responders, without the engine lock
//! (docs/PLAN-direct-queues.md, "the responder lent too"): a busy poller
//! whose CQ is empty takes the inbox's next records itself and has each
//! executed by its QP's cell (`Express::exec`) as long as the cell takes
//! it; the first it does not take stays in its lane for the engine's
//! path, which runs after it, in order.
//!
//! The inbox has one consumer at a time: whoever holds [`Consumer`]'s
//! lock, which the engine's path takes under the engine lock
//! (`shm_poll_locked`, the sweep) and this path alone. The lock also
//! fences what a lent exec reads: a deregistration takes it once after
//! the MR table moved on (`fence`), so no exec that read the old table
//! still writes once `ibv_dereg_mr` returns; a destroyed QP's cell leaves
//! the map under it.

use super::super::Shared;
use super::{ShmPath, add_locked};
use crate::memory::HostMemory;
use rustc_hash::FxHashMap;
use softrdma_sync::SpinGuard;
use softrdma_transport::{Datagram, Express, Instant};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The inbox's consumer state.
#[derive(Debug, Default)]
pub(crate) struct Consumer {
    /// The express cells of this process's QPs, by QPN.
    cells: FxHashMap<u32, Arc<Express>>,
    /// QPs whose lent responder owed an ACK after an exec here, for the
    /// next flush to schedule (`Shared::schedule_lent_owed`).
    owed: Vec<u32>,
}

impl ShmPath {
    pub(in crate::engine) fn consumer(&self) -> SpinGuard<'_, Consumer> {
        self.consumer.lock()
    }

    /// QP `qpn`'s cell, for its records to be executed here.
    pub(in crate::engine) fn add_cell(&self, qpn: u32, x: &Arc<Express>) {
        self.consumer().cells.insert(qpn, Arc::clone(x));
    }

    /// QP `qpn` is gone: no exec here uses its cell from now on.
    pub(in crate::engine) fn remove_cell(&self, qpn: u32) {
        self.consumer().cells.remove(&qpn);
    }

    /// Waits for the exec in progress, if any: after a change to the MR
    /// table, none that read the table before it still runs.
    pub(in crate::engine) fn fence(&self) {
        drop(self.consumer());
    }
}

impl Shared {
    /// Executes the inbox's next records through their QPs' cells while
    /// they take them, without the engine lock; returns how many, or
    /// `None` if the inbox was empty (the caller need not look again).
    /// Nothing when a capture runs (records are captured on the engine's
    /// path), or when another thread consumes the inbox.
    pub(in crate::engine) fn rx_lent(&self, now: u64) -> Option<usize> {
        let Some(shm) = &self.shm else { return None };
        if self.capture.is_some() {
            return Some(0);
        }
        if !shm.inbox.has_work() {
            return None;
        }
        let Some(mut c) = shm.consumer.try_lock() else {
            return Some(0);
        };
        let t = Instant::from_nanos(now);
        let Consumer { cells, owed } = &mut *c;
        let n = shm.inbox.poll_while(super::super::ACK_CHUNK_SHM, |_, e| {
            let Some(r) = softrdma_wire::direct::read_request(e.data) else {
                return false;
            };
            let Some(x) = cells.get(&r.dest_qp) else {
                return false;
            };
            let d = Datagram {
                src: e.src,
                dst_ip: e.dst_ip,
                payload: e.data,
            };
            if x.exec(t, &d, &r, &mut HostMemory, false).is_none() {
                return false;
            }
            if owed.last() != Some(&r.dest_qp) {
                owed.push(r.dest_qp);
            }
            true
        });
        if n > 0 {
            // Under the consumer lock, as every other write of these.
            add_locked(&shm.received_lent, n as u64);
        }
        drop(c);
        if n > 0 {
            self.shm_rx_at.store(now, Ordering::Relaxed);
            // The ACKs owed: the application's next post carries them, or
            // its next empty poll sends them (`schedule_lent_owed`).
            self.set_pending(now);
        }
        Some(n)
    }

    /// Datagrams delivered so far, by the engine's path (`delivered`) and
    /// executed here: a poller that found its CQ empty looks again if this
    /// moved meanwhile (`Engine::poll_cq_in`), whichever way a completion
    /// came.
    pub(in crate::engine) fn deliveries(&self) -> u64 {
        let lent = self
            .shm
            .as_ref()
            .map_or(0, |s| s.received_lent.load(Ordering::Relaxed));
        self.delivered.load(Ordering::Relaxed) + lent
    }

    /// After a change to the MR table: no lent exec that read the table
    /// before it still runs (see the module's doc).
    pub(in crate::engine) fn fence_lent(&self) {
        if let Some(shm) = &self.shm {
            shm.fence();
        }
    }

    /// Schedules the QPs whose lent responder owed an ACK after an exec
    /// here, if they still owe it (a post carries it, most often), for the
    /// flush under way to send it. Under the engine lock.
    pub(in crate::engine) fn schedule_lent_owed(&self, core: &mut super::super::Core) {
        let Some(shm) = &self.shm else { return };
        let mut c = shm.consumer();
        for qpn in c.owed.drain(..) {
            core.ep.schedule_owed(qpn);
        }
    }
}
