//! The progress thread: sleeps in `epoll_wait` when idle (0 % CPU), leaves
//! the socket to application threads that busy-poll their CQ, and keeps
//! polling the socket itself for a while after packets arrived when nobody
//! else in the process wants the CPU (a receive-only peer, such as a perftest
//! server sitting in a TCP read, then pays no wake-up per batch).

use super::Shared;
use super::events::earliest;
use super::rx::Rx;
use crate::Linger;
use softrdma_udp::Poller;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

/// How recently an application must have polled a CQ for the progress thread
/// to leave the socket to it.
pub(super) const SPIN_WINDOW_NS: u64 = 100_000;
/// How often the progress thread checks whether the polling stopped, at
/// first; while it goes on, the period doubles up to `MAX_STANDBY_NS` (each
/// tick costs a context switch on a CPU a poller needs).
const STANDBY_NS: u64 = 100_000;
/// The longest standby period: how late a deferred post or ACK may be sent,
/// and responder work be noticed, when an application stops calling without
/// saying so (`before_block`).
pub(super) const MAX_STANDBY_NS: u64 = 1_000_000;
/// How long an application that left requests waiting keeps handing the
/// socket back when it leaves (`Shared::leave`), after the last such time.
const SERVE_NS: u64 = 1_000_000_000;
/// How long after the last packet or poll the progress thread still counts
/// the device as active (and sleeps at most `BACKSTOP_NS`); idle longer, it
/// sleeps until the next timer, if any.
const ACTIVE_NS: u64 = 200_000_000;
/// Longest sleep of the progress thread while the device is active.
const BACKSTOP_NS: u64 = 10_000_000;
/// How long the progress thread keeps polling after the last packet.
const LINGER_NS: u64 = 200_000;
/// The window over which the other threads' CPU use is measured: several
/// scheduler ticks (250 Hz here), since a running thread's CPU time only
/// advances at ticks and context switches.
const CPU_WINDOW_NS: u64 = 10_000_000;

/// `loadavg`: `/proc/loadavg`, opened by the engine's start (see
/// [`open_loadavg`]).
pub(super) fn progress_loop(s: &Shared, poller: &Poller, loadavg: Option<File>) {
    // While an application polls its CQ it reads the socket itself; the
    // progress thread then stops watching the socket, so it does not wake for
    // every packet and compete for the two vCPUs with the poller (on small
    // VMs that costs milliseconds of scheduling delay).
    let mut others = OthersCpu::new(loadavg);
    let mut was_watching = true;
    let mut active_at = 0;
    let mut standby = STANDBY_NS;
    let mut timers_at;
    let mut missed = 0;
    while !s.shutdown.load(Ordering::SeqCst) {
        let now = s.now().as_nanos();
        let watching = s.update_watch(poller);
        let deadline = if watching {
            standby = STANDBY_NS;
            // The CM's deadlines (MAD retransmission, time-wait) count too.
            let mut d = earliest(&s.lock()).map_or(u64::MAX, |t| t.as_nanos());
            timers_at = d;
            if now.saturating_sub(active_at) < ACTIVE_NS {
                // While traffic flows, a new timer further out than this (an
                // ACK timeout, 17 ms and up) need not wake this thread
                // (`Shared::after`): it looks at the timers by then anyway.
                d = d.min(now + BACKSTOP_NS);
            }
            d
        } else {
            active_at = now;
            // Backs off while a spinning application stays busy with the
            // device (it does everything itself then); one that only posts
            // gets ticks at the first pace, so responder work waits little.
            standby = if was_watching || !s.app_spinner(now) {
                STANDBY_NS
            } else {
                (standby * 2).min(MAX_STANDBY_NS)
            };
            // Standby: the poller holds the locks most of the time; do not
            // queue behind it for timers that can wait a tick.
            // (Every few ticks it waits for the lock anyway.)
            timers_at = match s.core.try_lock() {
                Ok(core) => {
                    missed = 0;
                    earliest(&core).map_or(u64::MAX, |t| t.as_nanos())
                }
                Err(_) if missed < 3 => {
                    missed += 1;
                    u64::MAX
                }
                Err(_) => {
                    missed = 0;
                    earliest(&s.lock()).map_or(u64::MAX, |t| t.as_nanos())
                }
            };
            timers_at.min(now + standby)
        };
        // Back from standby: requests that waited for the application to
        // poll mean it leaves between polls; from now on it hands the socket
        // back whenever it leaves (`Shared::leave`).
        let requests_before =
            (!was_watching && watching).then(|| s.rx_requests.load(Ordering::Relaxed));
        was_watching = watching;
        s.sleeping_until.store(deadline, Ordering::SeqCst);
        let when =
            (deadline != u64::MAX).then(|| s.epoch + std::time::Duration::from_nanos(deadline));
        let _ = poller.wait(when);
        s.sleeping_until.store(0, Ordering::SeqCst);
        let now = s.now().as_nanos();
        let notifies = s.notifies.load(Ordering::Relaxed);
        let got = if watching {
            let got = s.rx_burst(Rx::Progress);
            if got > 0 {
                active_at = now;
            }
            if requests_before.is_some_and(|r| s.rx_requests.load(Ordering::Relaxed) > r) {
                s.serve_until.store(now + SERVE_NS, Ordering::Relaxed);
            }
            got
        } else {
            let mut rx = s.rx.lock().unwrap_or_else(|p| p.into_inner());
            s.rx_mcast(&mut rx)
        };
        // What a poller or a post left unsent goes now, unless its owner
        // is still in the middle of a burst (it sends it itself).
        if watching || s.pending_older_than(now, STANDBY_NS) {
            s.flush_pending();
        }
        if watching || now >= timers_at {
            s.handle_timers();
        }
        // A thread woken through a completion channel needs a CPU: leave it one.
        let woke_someone = s.notifies.load(Ordering::Relaxed) != notifies;
        if got > 0 && watching && !woke_someone && s.linger != Linger::Off {
            linger(s, &mut others);
        }
    }
}

/// Keeps polling the socket while packets keep coming (each within
/// `LINGER_NS` of the last), as long as no application thread polls, no
/// thread was woken through a completion channel, and the other threads of
/// the process leave the CPU alone: on a 2-vCPU machine a third spinner would
/// cost everyone milliseconds of scheduling delay.
fn linger(s: &Shared, others: &mut OthersCpu) {
    let mut last_rx = s.now().as_nanos();
    let mut next_tick = last_rx + STANDBY_NS;
    let notifies = s.notifies.load(Ordering::Relaxed);
    while !s.shutdown.load(Ordering::Relaxed) {
        let now = s.now().as_nanos();
        if s.app_spinning(now) || (s.linger == Linger::Auto && !others.idle(now)) {
            return;
        }
        if s.rx_burst(Rx::Progress) > 0 {
            last_rx = now;
            if s.notifies.load(Ordering::Relaxed) != notifies {
                return;
            }
        } else if now.saturating_sub(last_rx) > LINGER_NS {
            return;
        }
        if now >= next_tick {
            s.handle_timers();
            next_tick = now + STANDBY_NS;
        }
        std::hint::spin_loop();
    }
}

/// Whether spinning is cheap right now: the other threads of this process
/// left the CPU alone (measured from the process's and this thread's CPU
/// clocks over `CPU_WINDOW_NS`) and the machine has at most one runnable
/// thread more than CPUs (`/proc/loadavg`; a sampled count includes
/// passers-by such as the peer's progress thread ticking). On an
/// oversubscribed machine a spinner burns its share of the CPU and then waits
/// behind everyone else, while a thread that sleeps is run soon after its
/// wake-up.
#[derive(Debug)]
struct OthersCpu {
    /// `/proc/loadavg`, kept open: reopening it every window cost two
    /// system calls and briefly held one more fd, which a process counting
    /// its fds (a leak check) saw come and go.
    loadavg: Option<File>,
    at: u64,
    process: u64,
    thread: u64,
    cpus: usize,
    idle: bool,
}

impl OthersCpu {
    fn new(loadavg: Option<File>) -> OthersCpu {
        OthersCpu {
            loadavg,
            at: 0,
            process: cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID),
            thread: cpu_time(libc::CLOCK_THREAD_CPUTIME_ID),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            idle: true,
        }
    }

    /// The verdict of the last completed window (`now`: wall-clock ns): the
    /// other threads used less than a quarter of a CPU, and at its end at
    /// most one thread more was runnable than there are CPUs.
    fn idle(&mut self, now: u64) -> bool {
        let wall = now.saturating_sub(self.at);
        if wall >= CPU_WINDOW_NS {
            let (p, t) = (
                cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID),
                cpu_time(libc::CLOCK_THREAD_CPUTIME_ID),
            );
            let others = p
                .saturating_sub(self.process)
                .saturating_sub(t.saturating_sub(self.thread));
            let runnable = self.loadavg.as_ref().map_or(0, runnable);
            self.idle = others.saturating_mul(4) < wall && runnable <= self.cpus + 1;
            (self.at, self.process, self.thread) = (now, p, t);
        }
        self.idle
    }
}

/// `/proc/loadavg` for [`progress_loop`], opened before the progress
/// thread starts so the fd exists from the engine's start on.
pub(super) fn open_loadavg() -> Option<File> {
    File::open("/proc/loadavg").ok()
}

/// Threads runnable on the machine now (the 4th field of `loadavg`,
/// `running/total`; this thread included). 0 if unknown.
fn runnable(loadavg: &File) -> usize {
    // The kernel renders the file afresh for every read from offset 0.
    let mut buf = [0u8; 128];
    let n = loadavg.read_at(&mut buf, 0).unwrap_or(0);
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|s| {
            let f = s.split_whitespace().nth(3)?;
            f.split('/').next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// A CPU-time clock in ns (0 if it cannot be read).
fn cpu_time(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_clocks_advance_with_work() {
        let t0 = cpu_time(libc::CLOCK_THREAD_CPUTIME_ID);
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(cpu_time(libc::CLOCK_THREAD_CPUTIME_ID) > t0, "{x}");
        assert!(cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID) > 0);
    }

    #[test]
    fn reads_runnable_threads() {
        // This test's thread is running while it reads, twice from one fd.
        let f = open_loadavg().unwrap();
        assert!(runnable(&f) >= 1);
        assert!(runnable(&f) >= 1);
    }

    #[test]
    fn verdict_holds_until_the_window_ends() {
        let mut o = OthersCpu::new(None);
        assert!(
            o.idle(CPU_WINDOW_NS - 1),
            "optimistic before the first window"
        );
        o.idle = false;
        assert!(!o.idle(CPU_WINDOW_NS - 1));
    }
}
