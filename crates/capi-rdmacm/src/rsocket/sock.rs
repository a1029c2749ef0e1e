//! Stream rsockets: the table of live sockets (keyed, as in rdma-core, by the
//! fd of the socket's rdma_cm event channel, a real descriptor that no other
//! file can have), their phases (unconnected, listening, connecting,
//! connected) and the waits. Waiting never holds a socket's lock: a waiter
//! polls the CQ for a short spin, then arms it and sleeps in `poll(2)` on the
//! completion channel's fd.

use core::ffi::c_int;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::conn::{Conn, Sizes};
use super::listen::Listener;
use super::sys::Res;
use crate::ffi::*;

/// An outstanding non-blocking `rconnect`, finished by its own thread.
pub(super) struct Pending {
    pub(super) result: Mutex<Option<Res<Box<Conn>>>>,
    pub(super) efd: c_int,
    pub(super) thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        // SAFETY: our eventfd, closed once.
        unsafe { libc::close(self.efd) };
    }
}

pub(super) enum Phase {
    Init,
    Listening(Arc<Listener>),
    Connecting(Arc<Pending>),
    Connected(Box<Conn>),
    /// A connect failed (errno): reads and writes give ENOTCONN.
    Failed,
    Closed,
}

/// Socket options rdma-core records (bit `1 << optname` per level).
#[derive(Default, Clone, Copy)]
pub(super) struct Opts {
    pub(super) so: u64,
    pub(super) tcp: u64,
    pub ipv6: u64,
    pub(super) ip_tos: c_int,
    pub(super) keepalive_time: c_int,
}

pub(super) struct Inner {
    pub(super) id: *mut rdma_cm_id,
    pub(super) phase: Phase,
    pub(super) sizes: Sizes,
    pub(super) opts: Opts,
    pub(super) nonblock: bool,
    pub(super) fd_flags: c_int,
    /// `SO_ERROR`.
    pub(super) err: c_int,
    /// Recent waits of this socket's calls, averaged ([`spin_for`]).
    pub(super) recent_wait: Duration,
}

// SAFETY: the cm_id is used under this mutex (or by the one thread the
// socket hands it to while connecting, joined before the id is destroyed).
unsafe impl Send for Inner {}

pub(super) struct RSock {
    pub(super) fd: c_int,
    pub(super) inner: Mutex<Inner>,
}

impl RSock {
    pub(super) fn new(
        id: *mut rdma_cm_id,
        phase: Phase,
        sizes: Sizes,
        nonblock: bool,
    ) -> Arc<RSock> {
        // SAFETY: a live id of a synchronous kind always has its own channel.
        let fd = unsafe { (*(*id).channel).fd };
        Arc::new(RSock {
            fd,
            inner: Mutex::new(Inner {
                id,
                phase,
                sizes,
                opts: Opts {
                    keepalive_time: 7200,
                    ..Opts::default()
                },
                nonblock,
                fd_flags: 0,
                err: 0,
                recent_wait: Duration::ZERO,
            }),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn table() -> MutexGuard<'static, HashMap<c_int, Arc<RSock>>> {
    static T: OnceLock<Mutex<HashMap<c_int, Arc<RSock>>>> = OnceLock::new();
    T.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

pub(super) fn insert(s: Arc<RSock>) {
    table().insert(s.fd, s);
}
pub(super) fn lookup(fd: c_int) -> Res<Arc<RSock>> {
    table().get(&fd).cloned().ok_or(libc::EBADF)
}
pub(super) fn remove(fd: c_int) -> Res<Arc<RSock>> {
    table().remove(&fd).ok_or(libc::EBADF)
}
pub(super) fn is_rsocket(fd: c_int) -> bool {
    table().contains_key(&fd) || super::dgram::lookup(fd).is_some()
}

/// Moves a finished non-blocking connect into its phase.
pub(super) fn settle(g: &mut Inner) {
    let Phase::Connecting(p) = &g.phase else {
        return;
    };
    let r = p.result.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some(r) = r else { return };
    if let Some(t) = p.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = t.join();
    }
    match r {
        Ok(c) => g.phase = Phase::Connected(c),
        Err(e) => {
            g.err = e;
            g.phase = Phase::Failed;
        }
    }
}

/// How long a waiter polls before it sleeps when its recent waits were
/// short: it polls the device itself (busy poll) meanwhile, so a sleep and
/// the wake-up after it (tens of µs between cores here) are saved whenever
/// the wait ends within it.
///
/// Chosen by same-run pairs of `rstream -T b` (BENCHMARKS.md, "Issue 19",
/// second round, the before/after pairs): with the yielding spin, 64-byte
/// ping-pong 94.5 → 15.5 µs one-way and a 64 KiB stream's context switches
/// 15,372 → 5,387 (median) against 50 µs, at load 5–9.
pub(super) const SPIN_LONG: Duration = Duration::from_micros(1000);
/// How long a waiter polls when its recent waits were longer than
/// [`SPIN_LONG`] (an idle peer: spinning would only burn the CPU).
///
/// rdma-core's `polling_time` default is 10 µs; 50 is what this layer used
/// before (BENCHMARKS.md, "Issue 19", first round).
pub(super) const SPIN_SHORT: Duration = Duration::from_micros(50);

/// The spin for a waiter whose recent waits averaged `recent`
/// (`SOFTRDMA_RS_SPIN_US`, else rdma-core's `polling_time` file, fixes it
/// instead).
pub(super) fn spin_for(recent: Duration) -> Duration {
    static S: OnceLock<Option<Duration>> = OnceLock::new();
    let fixed = *S.get_or_init(|| {
        std::env::var("SOFTRDMA_RS_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_micros)
            .or(super::config::get().polling_time)
    });
    fixed.unwrap_or(if recent <= SPIN_LONG {
        SPIN_LONG
    } else {
        SPIN_SHORT
    })
}

/// A running average of wait times (weight 1/4 for the newest).
pub(super) fn average_wait(old: Duration, new: Duration) -> Duration {
    (old * 3 + new) / 4
}

/// `poll(2)` on one fd for `ms` (EINTR counts as a wake-up).
pub(super) fn wait_fd(fd: c_int, ms: c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Processes completions until `test` holds on the connection (rdma-core's
/// `rs_get_comp`): `Err(EWOULDBLOCK)` if non-blocking and it does not yet,
/// `Err(ENOTCONN)` if the socket is not connected, `Err(ETIMEDOUT)` past
/// `limit`.
pub(super) fn wait_conn<'a>(
    s: &'a RSock,
    mut g: MutexGuard<'a, Inner>,
    nonblock: bool,
    limit: Option<Duration>,
    test: fn(&Conn) -> bool,
) -> (MutexGuard<'a, Inner>, Res<()>) {
    let start = Instant::now();
    let spin = spin_for(g.recent_wait);
    loop {
        let Phase::Connected(c) = &mut g.phase else {
            return (g, Err(libc::ENOTCONN));
        };
        c.update_credits();
        c.poll_cq();
        if test(c) {
            c.update_credits();
            g.recent_wait = average_wait(g.recent_wait, start.elapsed());
            return (g, Ok(()));
        }
        if nonblock {
            c.update_credits();
            return (g, Err(libc::EWOULDBLOCK));
        }
        if limit.is_some_and(|l| start.elapsed() > l) {
            return (g, Err(libc::ETIMEDOUT));
        }
        if start.elapsed() < spin {
            drop(g);
            // Yield, not a hot spin: on a machine with more runnable
            // threads than CPUs the thread that will end this wait (the
            // peer, or this process's progress thread) may be waiting for
            // this very CPU. Measured (BENCHMARKS.md, "Issue 19", second
            // round): at load 9 a hot 1000 µs spin made 64-byte ping-pong
            // 4× slower than sleeping after 50 µs; yielding made it 6×
            // faster.
            std::thread::yield_now();
            g = s.lock();
            continue;
        }
        if !c.arm() || !c.prepare_sleep() {
            continue;
        }
        c.update_credits();
        let fd = c.fd();
        drop(g);
        let woke = wait_fd(fd, 100);
        g = s.lock();
        if woke && let Phase::Connected(c) = &mut g.phase {
            c.take_event();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_is_long_only_while_recent_waits_were_short() {
        // (Neither SOFTRDMA_RS_SPIN_US nor a polling_time file is set in
        // the test environment.)
        assert_eq!(spin_for(Duration::ZERO), SPIN_LONG);
        assert_eq!(spin_for(Duration::from_micros(999)), SPIN_LONG);
        assert_eq!(spin_for(SPIN_LONG), SPIN_LONG);
        assert_eq!(spin_for(Duration::from_micros(1001)), SPIN_SHORT);
        assert_eq!(spin_for(Duration::from_secs(5)), SPIN_SHORT);
    }

    #[test]
    fn average_weighs_the_newest_wait_a_quarter() {
        let us = Duration::from_micros;
        assert_eq!(average_wait(us(0), us(400)), us(100));
        assert_eq!(average_wait(us(400), us(0)), us(300));
        // An idle stretch (a 10 ms wait) pushes a socket to the short spin;
        // three quick waits after it bring the long one back.
        let mut a = average_wait(us(20), us(10_000));
        assert_eq!(spin_for(a), SPIN_SHORT);
        for _ in 0..3 {
            a = average_wait(a, us(20));
        }
        assert!(a > SPIN_LONG, "{a:?}");
        a = average_wait(a, us(20));
        assert_eq!(spin_for(a), SPIN_LONG, "{a:?}");
    }
}
