//! Who reads the socket while an application thread busy-polls its CQ, and
//! the bookkeeping of what a busy poller left unsent (`tx_pending`): split
//! from the engine so the ownership rules between pollers and the progress
//! thread read in one place. The decisions are in `policy`; these methods
//! read and write the atomics in `Shared` around them.

use super::policy::{self, Back};
use super::{KEY_SOCKET, Shared};
use softrdma_udp::Poller;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

impl Shared {
    /// An application thread that spins on a CQ posted or sent (at `now`):
    /// it is busy with the device, the progress thread stays in standby.
    pub(super) fn note_busy(&self, now: u64) {
        if policy::counts_as_busy(self.busy_poll, self.last_poll.load(Ordering::Relaxed), now) {
            self.last_call.store(now, Ordering::Relaxed);
        }
    }

    /// Puts the socket in the progress thread's epoll set or takes it out:
    /// out while an application thread polls (it reads the socket itself).
    pub(super) fn update_watch(&self, poller: &Poller) -> bool {
        let mut w = self.watching.lock().unwrap_or_else(|p| p.into_inner());
        let want = policy::watch_socket(
            self.last_call.load(Ordering::Relaxed),
            self.now().as_nanos(),
            self.waiters.load(Ordering::Relaxed) > 0,
        );
        if *w != want {
            // Only the device socket: a busy poller reads no other (the
            // other addresses' sockets stay in the set, `Shared::rx_others`).
            let r = if want {
                poller.add_socket(&self.socket, KEY_SOCKET)
            } else {
                poller.remove_fd(self.socket.as_fd(), KEY_SOCKET)
            };
            if r.is_ok() {
                *w = want;
            }
            // Handed to the progress thread, the inbox needs the doorbell as
            // the socket needs epoll: what arrived already wakes it now.
            if want && !self.shm_may_sleep() {
                let _ = self.waker.wake();
            }
        }
        *w
    }

    /// A poller returns completions to its application. If requests for
    /// this device's responders waited in the socket while the application
    /// was away lately (it spins on memory between polls, as `ib_write_lat`
    /// does), the socket goes back to the progress thread now rather than
    /// at its next tick, up to 100 µs later.
    pub(super) fn leave(&self, now: u64) {
        if policy::hand_back_on_leave(now, self.serve_until.load(Ordering::Relaxed)) {
            self.last_poll.store(0, Ordering::Relaxed);
            self.last_call.store(0, Ordering::Relaxed);
            self.left_at.store(now, Ordering::Relaxed);
            self.update_watch(&self.poller);
        }
    }

    /// The application called the device at `at` (or later): `last_call`
    /// moves forward to it, never back.
    pub(super) fn note_called(&self, at: u64) {
        if at > self.last_call.load(Ordering::Relaxed) {
            self.last_call.store(at, Ordering::Relaxed);
        }
    }

    /// Whether a poller's return matters to the socket's hand-over: it
    /// handed the socket to the progress thread (`left_at`), or a serve
    /// window is open (`serve_until`). Else `back` and `leave` do nothing.
    pub(super) fn handing_over(&self) -> bool {
        self.left_at.load(Ordering::Relaxed) != 0 || self.serve_until.load(Ordering::Relaxed) != 0
    }

    /// A poller called at `now`: it is the application's last call, and
    /// the poller is back ([`Shared::back`]). Returns `now`.
    pub(super) fn poller_back(&self, now: u64) -> u64 {
        self.last_call.store(now, Ordering::Relaxed);
        self.back(now);
        now
    }

    /// A poller is back (at `now`): `policy::on_back` (back quickly, it
    /// polls in a tight loop after all: stop handing over).
    pub(super) fn back(&self, now: u64) {
        match policy::on_back(self.left_at.load(Ordering::Relaxed), now) {
            Back::Nothing => {}
            Back::Forget => self.left_at.store(0, Ordering::Relaxed),
            Back::StopServing => {
                self.left_at.store(0, Ordering::Relaxed);
                self.serve_until.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Marks packets as queued and not sent (`tx_pending`) at `now`.
    ///
    /// A load and stores, not a swap: a busy poller marks its held ACK on
    /// every message, and a locked instruction waits for the stores before
    /// it to leave. Two threads marking at once both store their time, and
    /// the later may stay: the flush waits that much longer (the two marks
    /// are nanoseconds apart).
    pub(super) fn set_pending(&self, now: u64) {
        if !self.tx_pending.load(Ordering::Relaxed) {
            self.pending_since.store(now, Ordering::Relaxed);
            self.tx_pending.store(true, Ordering::Relaxed);
        }
    }

    /// Makes sure the progress thread looks at `tx_pending` soon
    /// (`policy::must_wake_for_pending`).
    pub(super) fn ensure_tick(&self, now: u64) {
        if policy::must_wake_for_pending(self.sleeping_until.load(Ordering::SeqCst), now) {
            let _ = self.waker.wake();
        }
    }
}
