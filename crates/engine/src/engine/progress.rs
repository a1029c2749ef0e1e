//! The progress thread: sleeps in `epoll_wait` when idle (0 % CPU), leaves
//! the socket to application threads that busy-poll their CQ, and keeps
//! polling the socket itself for a while after packets arrived when nobody
//! else in the process wants the CPU (a receive-only peer, such as a perftest
//! server sitting in a TCP read, then pays no wake-up per batch).

use super::Shared;
use super::events::earliest;
use super::policy::{self, LingerStep, Lingering, LoadSample, LoadWindow, Missed, Progress};
use super::rx::Rx;
use softrdma_udp::Poller;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

/// `loadavg`: `/proc/loadavg`, opened by the engine's start (see
/// [`open_loadavg`]). The decisions are `policy::Progress`'s; this loop
/// gathers their inputs and acts on them.
pub(super) fn progress_loop(s: &Shared, poller: &Poller, loadavg: Option<File>) {
    // While an application polls its CQ it reads the socket itself; the
    // progress thread then stops watching the socket, so it does not wake for
    // every packet and compete for the two vCPUs with the poller (on small
    // VMs that costs milliseconds of scheduling delay).
    let mut others = OthersCpu::new(loadavg);
    let mut policy = Progress::new();
    while !s.shutdown.load(Ordering::SeqCst) {
        let now = s.now().as_nanos();
        let watching = s.update_watch(poller);
        let last_poll = s.last_poll.load(Ordering::Relaxed);
        // A thread blocked for a completion event receives itself (see
        // `receiving.rs`): the timers and the rest are this thread's, at the
        // pace of watching (no standby ticks: the timers must be read).
        let waiter = s.receiving_waiter();
        let timers = if watching || waiter {
            // The CM's deadlines (MAD retransmission, time-wait) count too.
            earliest(&mut s.lock()).map_or(u64::MAX, |t| t.as_nanos())
        } else {
            // Standby: the poller holds the locks most of the time; do not
            // queue behind it for timers that can wait a tick.
            // (Every few ticks it waits for the lock anyway.)
            match s.core.try_lock() {
                Ok(mut core) => {
                    policy.lock_taken();
                    earliest(&mut core).map_or(u64::MAX, |t| t.as_nanos())
                }
                Err(_) => match policy.lock_missed() {
                    Missed::Skip => u64::MAX,
                    Missed::Wait => earliest(&mut s.lock()).map_or(u64::MAX, |t| t.as_nanos()),
                },
            }
        };
        let attended = watching || waiter;
        let sleep = policy.sleep(now, attended, last_poll, timers);
        // Back from standby: requests that waited for the application to
        // poll mean it leaves between polls; from now on it hands the socket
        // back whenever it leaves (`Shared::leave`).
        let requests_before = sleep.count_requests.then(|| s.requests_received());
        // Answers held for an application's post go out by their due time
        // if it does not post, as do answers left unsent while this thread
        // owns the socket (`policy::answers_due`).
        let held_due = policy::answers_due(
            now,
            s.left_at.load(Ordering::Relaxed),
            attended,
            s.tx_pending.load(Ordering::Relaxed),
            s.pending_since.load(Ordering::Relaxed),
        );
        // Watching, this thread is the inbox's reader: same-host senders
        // ring while it sleeps; if they pushed already, it does not sleep.
        // A waiter that polls may keep the socket between its waits: this
        // thread looks at least every tick then (`policy::waiter_tick`).
        let spinning_waiter = waiter && policy::waiter_spins(s.last_wait.load(Ordering::Relaxed));
        let deadline = if watching && !s.shm_may_sleep() {
            now
        } else {
            sleep
                .until
                .min(held_due)
                .min(policy::waiter_tick(now, spinning_waiter))
        };
        s.sleeping_until.store(deadline, Ordering::SeqCst);
        let when =
            (deadline != u64::MAX).then(|| std::time::Instant::now() + ns_until(deadline, s));
        let events = poller.wait(when);
        s.sleeping_until.store(0, Ordering::SeqCst);
        s.progress_wakeups.fetch_add(1, Ordering::Relaxed);
        s.shm_awake_if_watching();
        let readable = events.as_ref().map_or(0, |e| e.readable);
        let others_readable = events
            .as_ref()
            .ok()
            .map(|e| e.is_readable(super::KEY_SOCKET) || e.is_readable(super::KEY_MCAST));
        if readable & (1 << super::KEY_ADDRS) != 0 {
            s.on_addr_change();
        }
        if readable & (1 << super::KEY_FORWARD) != 0 {
            s.rx_forwarded();
        }
        let now = s.now().as_nanos();
        let notifies = s.notifies.load(Ordering::Relaxed);
        let holding = policy::holds_answers(now, s.left_at.load(Ordering::Relaxed));
        let got = if watching {
            let got = s.rx_burst(if holding { Rx::Held } else { Rx::Progress }, now);
            policy.received(now, got);
            if requests_before.is_some_and(|r| s.requests_received() > r) {
                s.serve_until
                    .store(Progress::serve_until(now), Ordering::Relaxed);
            }
            got
        } else if policy::reads_others(others_readable) {
            // A busy poller owns the device socket; the others are ours.
            s.rx_others()
        } else {
            0
        };
        // What a poller or a post left unsent goes now, unless its owner
        // is still in the middle of a burst (it sends it itself).
        if policy.flush(
            now,
            attended,
            holding && watching,
            s.tx_pending.load(Ordering::Relaxed),
            s.pending_since.load(Ordering::Relaxed),
        ) {
            s.flush_pending();
        }
        if policy.fire_timers(now, attended) {
            s.handle_timers();
        }
        s.shm_sweep();
        // A thread woken through a completion channel needs a CPU: leave it one.
        let woke_someone = s.notifies.load(Ordering::Relaxed) != notifies;
        // Holding answers, the application is about to come back: a third
        // spinner would take the CPU it needs.
        if !holding && Progress::linger(got, watching, woke_someone, s.linger) {
            linger(s, &mut others);
        }
    }
}

/// Keeps polling the socket while `policy::Lingering` says so (packets keep
/// coming, no application thread polls, no thread was woken through a
/// completion channel, and in mode auto the CPU is free).
fn linger(s: &Shared, others: &mut OthersCpu) {
    let mut policy = Lingering::new(s.now().as_nanos());
    let notifies = s.notifies.load(Ordering::Relaxed);
    while !s.shutdown.load(Ordering::Relaxed) {
        let now = s.now().as_nanos();
        match policy.before_poll(now, s.last_call.load(Ordering::Relaxed), s.linger) {
            LingerStep::Stop => return,
            LingerStep::CheckLoad if !others.idle(now) => return,
            _ => {}
        }
        let got = s.rx_burst(Rx::Linger, now);
        let woke_someone = got > 0 && s.notifies.load(Ordering::Relaxed) != notifies;
        match policy.after_poll(now, got, woke_someone) {
            LingerStep::Continue { tick: true } => s.handle_timers(),
            LingerStep::Continue { tick: false } => {}
            _ => return,
        }
        std::hint::spin_loop();
    }
}

/// The samples behind `policy::LoadWindow`: the process's and this thread's
/// CPU clocks, and the machine's runnable threads (`/proc/loadavg`; a
/// sampled count includes passers-by such as the peer's progress thread
/// ticking), read only when a window ends.
#[derive(Debug)]
struct OthersCpu {
    /// `/proc/loadavg`, kept open: reopening it every window cost two
    /// system calls and briefly held one more fd, which a process counting
    /// its fds (a leak check) saw come and go.
    loadavg: Option<File>,
    window: LoadWindow,
}

impl OthersCpu {
    fn new(loadavg: Option<File>) -> OthersCpu {
        let start = LoadSample {
            process: cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID),
            thread: cpu_time(libc::CLOCK_THREAD_CPUTIME_ID),
            runnable: 0,
        };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        OthersCpu {
            loadavg,
            window: LoadWindow::new(start, cpus),
        }
    }

    /// The verdict of the last completed window (`now`: wall-clock ns).
    fn idle(&mut self, now: u64) -> bool {
        if !self.window.due(now) {
            return self.window.idle();
        }
        let (process, thread) = (
            cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID),
            cpu_time(libc::CLOCK_THREAD_CPUTIME_ID),
        );
        let runnable = self.loadavg.as_ref().map_or(0, runnable);
        self.window.close(
            now,
            LoadSample {
                process,
                thread,
                runnable,
            },
        )
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

/// How long from now until `deadline` (transport time), for `epoll_wait`.
fn ns_until(deadline: u64, s: &Shared) -> std::time::Duration {
    std::time::Duration::from_nanos(deadline.saturating_sub(s.now().as_nanos()))
}

#[cfg(test)]
mod tests {
    use super::super::policy::CPU_WINDOW_NS;
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
    fn samples_only_when_the_window_ends() {
        let mut o = OthersCpu::new(None);
        let before = o.window.clone();
        assert!(
            o.idle(CPU_WINDOW_NS - 1),
            "optimistic before the first window"
        );
        assert_eq!(o.window, before, "no sample before the window ends");
        o.idle(CPU_WINDOW_NS);
        assert_ne!(o.window, before, "a sample when it ends");
    }
}
