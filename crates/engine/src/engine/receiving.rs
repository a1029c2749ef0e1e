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
//! awake, with the same-host doorbell flag down, and wakes nobody.
//!
//! The socket joins the waiter's epoll set at a wait and stays there between
//! waits, until a busy poller finds its CQ empty with no wait for
//! [`policy::WAITER_SOCKET_NS`]: a socket in any epoll set costs each
//! datagram a wake-up callback in the sender's kernel even while nobody
//! sleeps in the set (BENCHMARKS.md, "Issue 16, outcome 6"), which a busy
//! poller would pay on every packet.

use super::rx::Rx;
use super::{KEY_SOCKET, Shared, policy};
use crate::channel::Receiver;
use softrdma_udp::{EventFd, Interest, Poller};
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

/// The channel's key in the waiter's epoll set.
const KEY_CHANNEL: u8 = 5;

/// The epoll set a receiving waiter sleeps in: the device socket (from the
/// first wait until a busy poller takes it out), and the channel it waits
/// for (added for the wait).
#[derive(Debug)]
pub(super) struct WaiterPoller {
    poller: Poller,
    /// The process that opened it: a forked child has the parent's engine
    /// without its threads, and must not read its socket (nor change the
    /// epoll set it shares with the parent).
    pid: u32,
}

impl WaiterPoller {
    pub(super) fn new() -> io::Result<WaiterPoller> {
        Ok(WaiterPoller {
            poller: Poller::new()?,
            pid: std::process::id(),
        })
    }

    /// This process's set (None in a forked child).
    fn ours(&self) -> Option<&Poller> {
        (self.pid == std::process::id()).then_some(&self.poller)
    }
}

impl Receiver for Shared {
    fn wait_receiving(&self, efd: &EventFd) -> io::Result<bool> {
        let Some(poller) = self.waiter_poller.as_ref().and_then(WaiterPoller::ours) else {
            return Ok(false);
        };
        let Ok(mut socket_in) = self.waiter_lock.try_lock() else {
            return Ok(false);
        };
        if !*socket_in {
            if poller.add_socket(&self.socket, KEY_SOCKET).is_err() {
                // Block in `read(2)` as before; the progress thread receives.
                return Ok(false);
            }
            *socket_in = true;
        }
        poller.add_fd(efd.as_fd(), KEY_CHANNEL, Interest::Readable)?;
        let _taken = Taken::new(self, poller, efd);
        self.receive_until_readable(poller).map(|()| true)
    }
}

/// The socket taken from the progress thread for one wait; given back when
/// dropped, however the wait ends (a signal, or a thread cancelled in
/// `epoll_wait`, which unwinds).
struct Taken<'a> {
    s: &'a Shared,
    poller: &'a Poller,
    efd: &'a EventFd,
}

impl<'a> Taken<'a> {
    fn new(s: &'a Shared, poller: &'a Poller, efd: &'a EventFd) -> Taken<'a> {
        s.waiters.fetch_add(1, Ordering::SeqCst);
        s.waited_at.store(u64::MAX, Ordering::Relaxed);
        // The progress thread lets go of the socket (under the lock its own
        // updates take) before this thread sleeps on it.
        s.update_watch(&s.poller);
        Taken { s, poller, efd }
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        // The socket stays in the waiter's set for the next wait.
        let now = self.s.now().as_nanos().max(1);
        self.s.waited_at.store(now, Ordering::Relaxed);
        self.s.waiters.fetch_sub(1, Ordering::SeqCst);
        // Back to the progress thread; it is woken if datagrams wait in the
        // inbox (the doorbell flag stays raised: senders ring it).
        self.s.update_watch(&self.s.poller);
        let _ = self.poller.remove_fd(self.efd.as_fd(), KEY_CHANNEL);
    }
}

impl Shared {
    /// Receives until the channel in `poller` is readable: polling first
    /// while `policy::WaiterSpin` says so (its previous wait was short: a
    /// peer answers, and finds this thread awake), then asleep.
    fn receive_until_readable(&self, poller: &Poller) -> io::Result<()> {
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
                // A channel was notified: this one, if it is readable.
                if look || self.notifies.load(Ordering::Relaxed) != notifies {
                    look = false;
                    let ev = poller.wait_interruptible(Some(std::time::Instant::now()))?;
                    if ev.readable & (1 << KEY_CHANNEL) != 0 {
                        ended(now, true);
                        return Ok(());
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
                return Ok(());
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
    /// a completion event received itself.
    pub(super) fn waiter_counters(&self) -> [(&'static str, u64); 2] {
        [
            ("rx_by_waiter", self.rx_by_waiter.load(Ordering::Relaxed)),
            ("waits_spun", self.waits_spun.load(Ordering::Relaxed)),
        ]
    }
}
