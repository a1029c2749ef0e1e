//! Who reads the socket while an application thread busy-polls its CQ, and
//! the bookkeeping of what a busy poller left unsent (`tx_pending`): split
//! from the engine so the ownership rules between pollers and the progress
//! thread read in one place.

use super::progress::{MAX_STANDBY_NS, SPIN_WINDOW_NS};
use super::{KEY_SOCKET, Shared};
use softrdma_udp::Poller;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

/// A poller back this soon after handing the socket over polls in a tight loop.
const QUICK_RETURN_NS: u64 = 5_000;
/// How recently an application must have found a CQ empty for its posts to
/// be gathered (it spins, so a poll follows the burst).
const POLLER_NS: u64 = 10_000_000;

impl Shared {
    /// Whether an application thread found a CQ empty within `POLLER_NS` of
    /// `now`: it spins on its CQ, and polls again after whatever it does.
    pub(super) fn app_spinner(&self, now: u64) -> bool {
        now.saturating_sub(self.last_poll.load(Ordering::Relaxed)) < POLLER_NS
    }

    /// Whether an application thread polled or posted within `SPIN_WINDOW_NS`
    /// of `now`: it reads the socket itself when its CQ runs dry.
    pub(super) fn app_spinning(&self, now: u64) -> bool {
        now.saturating_sub(self.last_call.load(Ordering::Relaxed)) < SPIN_WINDOW_NS
    }

    /// An application thread that spins on a CQ posted or sent (at `now`):
    /// it is busy with the device, the progress thread stays in standby.
    pub(super) fn note_busy(&self, now: u64) {
        if self.busy_poll && self.app_spinner(now) {
            self.last_call.store(now, Ordering::Relaxed);
        }
    }

    /// Puts the socket in the progress thread's epoll set or takes it out:
    /// out while an application thread polls (it reads the socket itself).
    pub(super) fn update_watch(&self, poller: &Poller) -> bool {
        let mut w = self.watching.lock().unwrap_or_else(|p| p.into_inner());
        let want = !self.app_spinning(self.now().as_nanos());
        if *w != want {
            let r = if want {
                poller.add_socket(&self.socket, KEY_SOCKET)
            } else {
                poller.remove_fd(self.socket.as_fd(), KEY_SOCKET)
            };
            if r.is_ok() {
                *w = want;
            }
        }
        *w
    }

    /// A poller returns completions to its application. If requests for
    /// this device's responders waited in the socket while the application
    /// was away lately (it spins on memory between polls, as `ib_write_lat`
    /// does), the socket goes back to the progress thread now rather than
    /// at its next tick, up to 100 µs later.
    pub(super) fn leave(&self) {
        let now = self.now().as_nanos();
        if now < self.serve_until.load(Ordering::Relaxed) {
            self.last_poll.store(0, Ordering::Relaxed);
            self.last_call.store(0, Ordering::Relaxed);
            self.left_at.store(now, Ordering::Relaxed);
            self.update_watch(&self.poller);
        }
    }

    /// A poller is back (at `now`). Back within `QUICK_RETURN_NS` of
    /// leaving, it polls in a tight loop after all (a ping-pong that lost
    /// the CPU for a while looks like one that leaves): stop handing over.
    pub(super) fn back(&self, now: u64) {
        let left = self.left_at.load(Ordering::Relaxed);
        if left != 0 {
            self.left_at.store(0, Ordering::Relaxed);
            if now.saturating_sub(left) < QUICK_RETURN_NS {
                self.serve_until.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Marks packets as queued and not sent (`tx_pending`).
    pub(super) fn set_pending(&self) {
        if !self.tx_pending.swap(true, Ordering::Relaxed) {
            self.pending_since
                .store(self.now().as_nanos(), Ordering::Relaxed);
        }
    }

    /// Whether packets have waited in `tx_pending` since before `now - age`.
    pub(super) fn pending_older_than(&self, now: u64, age: u64) -> bool {
        self.tx_pending.load(Ordering::Relaxed)
            && now.saturating_sub(self.pending_since.load(Ordering::Relaxed)) >= age
    }

    /// Makes sure the progress thread looks at `tx_pending` within about
    /// `MAX_STANDBY_NS`: it ticks that often while an application polls, but
    /// may still sleep without a deadline when the polling just began.
    pub(super) fn ensure_tick(&self) {
        let soon = self.now().as_nanos() + 2 * MAX_STANDBY_NS;
        if self.sleeping_until.load(Ordering::SeqCst) > soon {
            let _ = self.waker.wake();
        }
    }
}
