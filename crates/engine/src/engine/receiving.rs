//! A thread blocked for a completion event receives the device's packets
//! itself (`channel::Receiver`).
//!
//! Before, a packet woke the progress thread, which processed it and wrote
//! the channel's eventfd, which woke the application thread: two wake-ups
//! per completion, 30–70 µs each across vCPUs here (reference/baselines.md),
//! so `ib_send_lat -e` took 1.5× qperf's `tcp_lat`. Now the waiting thread
//! sleeps on its channel and on the device socket at once, and the progress
//! thread leaves the socket to it (`policy::watch_socket`) while it waits:
//! the packet wakes the thread that wants the completion, which processes
//! it, sends the ACK, and returns. The progress thread keeps the timers and
//! the other sockets. One thread receives this way at a time; others block
//! in `read(2)` as before.
//!
//! A waiter whose previous wait was short polls for a while before it
//! sleeps (`policy::WaiterSpin`): a ping-pong peer's answer then finds it
//! awake, with the same-host doorbell flag down, and wakes nobody. A wait
//! that ended while polling keeps the socket and the inbox for the thread's
//! next wait (`policy::keeps_socket_after_wait`); the progress thread,
//! ticking meanwhile (`policy::waiter_tick`), takes them back if the thread
//! neither waits nor polls.
//!
//! The socket joins the waiter's epoll set at a wait and stays there between
//! waits, until a busy poller finds its CQ empty with no wait for
//! [`policy::WAITER_SOCKET_NS`]: a socket in any epoll set costs each
//! datagram a wake-up callback in the sender's kernel even while nobody
//! sleeps in the set (BENCHMARKS.md, "Issue 16, outcome 6"), which a busy
//! poller would pay on every packet. The channel's eventfd stays there too,
//! until another channel waits or it closes; and a thread about to receive
//! does not hand the socket to the progress thread first. Each wait took
//! five `epoll_ctl`s before, most of an event-mode ping-pong's system calls
//! (`strace -c` of `ib_send_lat -e`: 8 a round trip), and the hand-over
//! raised the same-host doorbell flag for the moment between, so peers rang.

use super::rx::Rx;
use super::{KEY_SOCKET, Shared, policy};
use crate::channel::Receiver;
use softrdma_udp::{EventFd, Interest, Poller};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

/// The channel's key in the waiter's epoll set.
const KEY_CHANNEL: u8 = 5;

/// The epoll set a receiving waiter sleeps in: the device socket (from the
/// first wait until a busy poller takes it out), and the channel it waits
/// for (added for the wait).
#[derive(Debug)]
pub(super) struct WaiterPoller {
    poller: Poller,
    /// The channel whose eventfd is in the set: (number, fd); (0, _): none.
    /// A channel takes itself out as it closes (`channel_closed`), so the
    /// fd is that channel's while it is recorded here.
    channel: Mutex<(u64, RawFd)>,
    /// The process that opened it (`fork_generation`): a forked child has
    /// the parent's engine without its threads, and must not read its
    /// socket (nor change the epoll set it shares with the parent).
    forks: u64,
}

impl WaiterPoller {
    pub(super) fn new() -> io::Result<WaiterPoller> {
        Ok(WaiterPoller {
            poller: Poller::new()?,
            channel: Mutex::new((0, -1)),
            forks: softrdma_udp::fork_private::fork_generation(),
        })
    }

    /// This process's set (None in a forked child).
    fn ours(&self) -> Option<&Poller> {
        (self.forks == softrdma_udp::fork_private::fork_generation()).then_some(&self.poller)
    }

    /// Puts channel `id`'s `efd` in the set, in place of another channel's.
    fn watch_channel(&self, poller: &Poller, id: u64, efd: &EventFd) -> io::Result<()> {
        let mut ch = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        if ch.0 == id {
            return Ok(());
        }
        if ch.0 != 0 {
            // SAFETY: a recorded channel is open (it leaves the record
            // before its eventfd closes), so `ch.1` is its eventfd.
            let old = unsafe { BorrowedFd::borrow_raw(ch.1) };
            let _ = poller.remove_fd(old, KEY_CHANNEL);
            *ch = (0, -1);
        }
        poller.add_fd(efd.as_fd(), KEY_CHANNEL, Interest::Readable)?;
        *ch = (id, efd.as_raw_fd());
        Ok(())
    }

    /// Channel `id` closes: its eventfd leaves the set.
    fn forget_channel(&self, id: u64, efd: &EventFd) {
        let mut ch = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        if ch.0 == id {
            if let Some(poller) = self.ours() {
                let _ = poller.remove_fd(efd.as_fd(), KEY_CHANNEL);
            }
            *ch = (0, -1);
        }
    }
}

impl Receiver for Shared {
    fn before_block(&self, receives: bool) {
        self.flush_pending();
        self.last_call.store(0, Ordering::Relaxed);
        self.last_poll.store(0, Ordering::Relaxed);
        // A thread about to receive reads the socket and the inbox as soon
        // as it waits (see the module documentation).
        if receives && self.waiter_can_receive() {
            return;
        }
        self.hand_to_progress();
    }

    fn wait_receiving(
        &self,
        channel: u64,
        efd: &EventFd,
        ready: &dyn Fn() -> bool,
    ) -> io::Result<bool> {
        let Some(wp) = self.waiter_poller.as_ref() else {
            self.hand_to_progress();
            return Ok(false);
        };
        let Some(poller) = wp.ours() else {
            self.hand_to_progress();
            return Ok(false);
        };
        let Ok(mut socket_in) = self.waiter_lock.try_lock() else {
            // Another thread receives.
            self.hand_to_progress();
            return Ok(false);
        };
        if !*socket_in {
            if poller.add_socket(&self.socket, KEY_SOCKET).is_err() {
                // Block in `read(2)` as before; the progress thread receives.
                drop(socket_in);
                self.hand_to_progress();
                return Ok(false);
            }
            *socket_in = true;
        }
        if let Err(e) = wp.watch_channel(poller, channel, efd) {
            drop(socket_in);
            self.hand_to_progress();
            return Err(e);
        }
        let mut taken = Taken::new(self);
        taken.spun = self.receive_until_readable(poller, ready)?;
        // What came into the inbox meanwhile is read here, not by the
        // progress thread woken for it as the socket goes back (`Taken`'s
        // drop). Not the socket: a `recvmmsg` more on every wait's path.
        self.rx_inbox(Rx::Progress, self.now().as_nanos());
        Ok(true)
    }

    fn channel_closed(&self, channel: u64, efd: &EventFd) {
        if let Some(wp) = &self.waiter_poller {
            wp.forget_channel(channel, efd);
        }
    }
}

impl Shared {
    /// Whether a thread about to wait for an event would receive itself:
    /// this process's waiter set, with no other thread receiving. (If one
    /// starts meanwhile, that one receives, and this thread's
    /// `wait_receiving` hands over to the progress thread anyway.)
    fn waiter_can_receive(&self) -> bool {
        self.waiter_poller
            .as_ref()
            .and_then(WaiterPoller::ours)
            .is_some()
            && self.waiter_lock.try_lock().is_ok()
    }

    /// Wakes the thread of this process that reads the inbox, which raised
    /// the doorbell flag to sleep: one blocked for a completion event that
    /// took the socket sleeps in its own set, where the progress thread's
    /// waker does not reach; else the progress thread. Waking only the
    /// progress thread left a datagram this process pushed into its own
    /// lane (a QP's peer in the same process) unread while the waiter
    /// slept: pyverbs' `test_cq_events_rc` ran out of retries about once
    /// in 60 runs (`tests/own_lane_waiter.rs`). The waiter counts itself
    /// before it raises the flag (both `SeqCst`, as the ringer's reads of
    /// them), so a ringer that saw the flag up sees the count.
    pub(super) fn wake_inbox_reader(&self) {
        let waiter = self
            .waiter_poller
            .as_ref()
            .and_then(WaiterPoller::ours)
            .filter(|_| self.waiters.load(Ordering::SeqCst) > 0);
        match waiter {
            Some(p) => {
                let _ = p.waker().wake();
            }
            None => {
                let _ = self.waker.wake();
            }
        }
    }

    /// The progress thread receives from now on: the socket goes back into
    /// its epoll set now (it may be in standby, ticking up to a millisecond
    /// apart), and same-host senders must ring; what they pushed before is
    /// read at once.
    pub(super) fn hand_to_progress(&self) {
        self.update_watch(&self.poller);
        if !self.shm_may_sleep() {
            let _ = self.waker.wake();
        }
    }
}

/// The socket taken from the progress thread for one wait; given back when
/// dropped, however the wait ends (a signal, or a thread cancelled in
/// `epoll_wait`, which unwinds).
struct Taken<'a> {
    s: &'a Shared,
    /// The wait ended while the thread still polled (it may keep the
    /// socket for its next wait, `policy::keeps_socket_after_wait`).
    spun: bool,
}

impl<'a> Taken<'a> {
    fn new(s: &'a Shared) -> Taken<'a> {
        s.waiters.fetch_add(1, Ordering::SeqCst);
        s.waited_at.store(u64::MAX, Ordering::Relaxed);
        // The progress thread lets go of the socket (under the lock its own
        // updates take) before this thread sleeps on it.
        s.update_watch(&s.poller);
        Taken { s, spun: false }
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        // The socket stays in the waiter's set for the next wait.
        let now = self.s.now().as_nanos().max(1);
        self.s.waited_at.store(now, Ordering::Relaxed);
        let sleeping_until = self.s.sleeping_until.load(Ordering::SeqCst);
        let keep = policy::keeps_socket_after_wait(self.spun, sleeping_until, now);
        if keep {
            // Busy with the device, as a poller: the progress thread takes
            // the socket back only if this thread neither waits nor polls
            // for a while (`policy::watch_socket`), at its next tick. The
            // doorbell flag stays down.
            self.s.last_call.store(now, Ordering::Relaxed);
        }
        self.s.waiters.fetch_sub(1, Ordering::SeqCst);
        if !keep {
            // Back to the progress thread; it is woken if datagrams wait in
            // the inbox (the doorbell flag stays raised: senders ring it).
            self.s.update_watch(&self.s.poller);
        }
    }
}

impl Shared {
    /// Receives until the channel in `poller` is readable: polling first
    /// while `policy::WaiterSpin` says so (its previous wait was short: a
    /// peer answers, and finds this thread awake), then asleep. Returns
    /// whether it ended while polling.
    fn receive_until_readable(
        &self,
        poller: &Poller,
        ready: &dyn Fn() -> bool,
    ) -> io::Result<bool> {
        let start = self.now().as_nanos();
        let spin = policy::WaiterSpin::new(start, self.last_wait.load(Ordering::Relaxed));
        let ended = |now: u64, spun: bool| {
            self.last_wait
                .store(now.saturating_sub(start), Ordering::Relaxed);
            if spun {
                self.waits_spun.fetch_add(1, Ordering::Relaxed);
            }
        };
        // The channel may be readable already (an event came before the call).
        let mut look = true;
        if spin.spins(start) {
            self.shm_awake();
        }
        loop {
            let now = self.now().as_nanos();
            let spinning = spin.spins(now);
            let notifies = self.notifies.load(Ordering::Relaxed);
            // What arrived before this thread took the socket, or since the
            // last look; answers are sent at once. Spinning, it reads the
            // socket only as a busy poller does while the lanes carry the
            // traffic (`Rx::Linger`).
            let mode = if spinning { Rx::Linger } else { Rx::Progress };
            let got = self.rx_burst(mode, now);
            self.rx_by_waiter.fetch_add(got as u64, Ordering::Relaxed);
            self.flush_pending();
            if spinning {
                // A channel was notified: this one, if it holds an event
                // (asked in memory: an `epoll_wait` per event was a system
                // call of each event-mode message).
                if look || self.notifies.load(Ordering::Relaxed) != notifies {
                    look = false;
                    if ready() {
                        ended(now, true);
                        return Ok(true);
                    }
                }
                std::hint::spin_loop();
                continue;
            }
            // Same-host senders ring the doorbell only if the flag is up;
            // if they pushed already, look again without sleeping.
            let deadline = (!self.shm_may_sleep()).then(std::time::Instant::now);
            let ev = poller.wait_interruptible(deadline)?;
            if ev.readable & (1 << KEY_CHANNEL) != 0 {
                ended(self.now().as_nanos(), false);
                return Ok(false);
            }
        }
    }

    /// A busy poller found its CQ empty at `now`: if the device socket is
    /// still in the waiter's epoll set and no thread waited for
    /// [`policy::WAITER_SOCKET_NS`], it leaves the set. One atomic load
    /// while it is out (always, for a process that never waits).
    pub(super) fn waiter_lets_go(&self, now: u64) {
        let waited_at = self.waited_at.load(Ordering::Relaxed);
        if waited_at == 0 || policy::waiter_keeps_socket(waited_at, now) {
            return;
        }
        let Some(poller) = self.waiter_poller.as_ref().and_then(WaiterPoller::ours) else {
            return;
        };
        // Taken: a thread is about to wait, or waits.
        let Ok(mut socket_in) = self.waiter_lock.try_lock() else {
            return;
        };
        if *socket_in && poller.remove_fd(self.socket.as_fd(), KEY_SOCKET).is_ok() {
            *socket_in = false;
        }
        if !*socket_in {
            self.waited_at.store(0, Ordering::Relaxed);
        }
    }

    /// Whether a thread blocked for a completion event receives now.
    pub(super) fn receiving_waiter(&self) -> bool {
        self.waiters.load(Ordering::Relaxed) > 0
    }

    /// `rx_by_waiter`: datagrams (and lane datagrams) a thread blocked for
    /// a completion event received itself; `waits_spun`: waits that ended
    /// while polling; `progress_wakeups`: times the progress thread woke.
    pub(super) fn waiter_counters(&self) -> [(&'static str, u64); 3] {
        [
            ("rx_by_waiter", self.rx_by_waiter.load(Ordering::Relaxed)),
            ("waits_spun", self.waits_spun.load(Ordering::Relaxed)),
            (
                "progress_wakeups",
                self.progress_wakeups.load(Ordering::Relaxed),
            ),
        ]
    }
}
