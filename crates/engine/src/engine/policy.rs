//! The engine's progress policy, sans-IO: when the progress thread watches
//! the socket or only ticks, how long it sleeps, when it lingers after
//! packets, and who owns the socket while an application busy-polls.
//!
//! Plain data in, a decision out; time is passed in as nanoseconds since the
//! engine's epoch. No atomics, clocks, system calls or `/proc` here: the I/O
//! code (`progress`, `busy_poll`) gathers the inputs from `Shared`, asks, and
//! acts on the answer. The tests below pin every decision at literal times.
//!
//! Every constant names what chose it; "issue 6" is the section "Issue 6:
//! where the time goes, what changed" of `BENCHMARKS.md`.

use crate::Linger;

/// How recently an application must have polled or posted for the progress
/// thread to leave the socket to it.
///
/// Chosen by issue 6, change 1 (`perf stat` on `ib_send_lat -s 8 -n 20000`:
/// 14,735 → 1,912 context switches); re-measure with
/// `cargo xtask bench --only lat`.
pub(super) const SPIN_WINDOW_NS: u64 = 100_000;
/// How often the progress thread checks whether the polling stopped, at
/// first; while it goes on, the period doubles up to [`MAX_STANDBY_NS`]
/// (each tick costs a context switch on a CPU a poller needs). Also the age
/// after which the progress thread sends what a poller left unsent, and the
/// timer tick while it lingers.
///
/// Chosen by issue 6, change 1 (as [`SPIN_WINDOW_NS`]); re-measure with
/// `cargo xtask bench --only lat`.
pub(super) const STANDBY_NS: u64 = 100_000;
/// The longest standby period: how late a deferred post or ACK may be sent,
/// and responder work be noticed, when an application stops calling without
/// saying so (`before_block`).
///
/// Chosen by issue 6, change 1 (as [`SPIN_WINDOW_NS`]); re-measure with
/// `cargo xtask bench --only lat`.
pub(super) const MAX_STANDBY_NS: u64 = 1_000_000;
/// How long an application that left requests waiting keeps handing the
/// socket back when it leaves, after the last such time.
///
/// Chosen by hand (issue 6, change 2 names no value for it); see
/// `cargo xtask bench --only lat` (`ib_write_lat`) to re-measure.
pub(super) const SERVE_NS: u64 = 1_000_000_000;
/// How long after the last packet or poll the progress thread still counts
/// the device as active (and sleeps at most [`BACKSTOP_NS`]); idle longer,
/// it sleeps until the next timer, if any.
///
/// Chosen by issue 6, change 8 (a process blocked on a completion channel
/// wakes 0 times per second); re-measure with `cargo xtask bench --only idle`.
pub(super) const ACTIVE_NS: u64 = 200_000_000;
/// Longest sleep of the progress thread while the device is active: below
/// the shortest ACK timeout (17 ms), so arming one need not wake it.
///
/// Chosen by issue 6, change 8 (as [`ACTIVE_NS`]); re-measure with
/// `cargo xtask bench --only idle`.
pub(super) const BACKSTOP_NS: u64 = 10_000_000;
/// How long the progress thread keeps polling after the last packet.
///
/// Chosen by issue 6, change 6 (`ib_read_lat` 31 → 13 µs; the
/// `ib_write_bw` counters, "server polls (lingers)"); re-measure with
/// `cargo xtask bench --only perftest-bw,lat`.
pub(super) const LINGER_NS: u64 = 200_000;
/// The window over which the other threads' CPU use is measured: several
/// scheduler ticks (250 Hz here), since a running thread's CPU time only
/// advances at ticks and context switches.
///
/// Chosen by issue 6, change 6 ("over 10 ms windows"); re-measure with
/// `cargo xtask bench --only perftest-bw,lat`.
pub(super) const CPU_WINDOW_NS: u64 = 10_000_000;
/// The other threads of the process count as idle while they use less than
/// one CPU in this many (a quarter of a CPU).
///
/// Chosen by hand (issue 6, change 6 says "nothing else in the process wants
/// the CPU"); see `cargo xtask bench --only perftest-bw,lat` to re-measure.
pub(super) const OTHERS_CPU_SHARE: u64 = 4;
/// Runnable threads on the machine, beyond one per CPU, that still let the
/// progress thread linger.
///
/// Chosen by hand (issue 6, change 6: "at most one runnable thread more than
/// vCPUs"); see `cargo xtask bench --only perftest-bw,lat` to re-measure.
pub(super) const EXTRA_RUNNABLE: usize = 1;
/// Standby ticks in a row that may skip the timers when a poller holds the
/// engine lock; the next one waits for the lock.
///
/// Chosen by hand; see `cargo xtask bench --only lat` to re-measure.
pub(super) const MAX_MISSED_LOCKS: u32 = 3;
/// A poller back this soon after handing the socket over polls in a tight
/// loop.
///
/// Chosen by issue 6, change 2 (`ib_write_lat` 89 → 8 µs one-way, with
/// `ib_send_lat` unchanged) at 5 µs; raised by issue 17 (BENCHMARKS.md,
/// "The socket's gap on the same-host path", the hand-over's second
/// state): a poller whose return took a wake-up of its progress thread
/// (20–40 µs on these VMs) kept the serve window open, and with it the
/// wake-ups. At 50 µs, `cargo xtask bench --only lat --compare` gave
/// `ib_write_lat` 0.32–0.67× of 5 µs (10–12 against 18–35 µs over UDP),
/// the rest within noise, and a same-host `ib_write_lat` pair never fell
/// into that state (`scripts/same-host-syscalls.sh`). Re-measure with
/// both.
pub(super) const QUICK_RETURN_NS: u64 = 50_000;
/// How recently an application must have found a CQ empty for its posts to
/// be gathered (it spins, so a poll follows the burst).
///
/// Chosen by hand (issue 6, change 4 names no value for it); see
/// `cargo xtask bench --only perftest-bw` to re-measure.
pub(super) const POLLER_NS: u64 = 10_000_000;

/// While the same-host path delivered datagrams this recently, a busy
/// poller gets its traffic from the inbox and reads the socket only every
/// [`SOCKET_GAP_NS`].
///
/// Chosen by issue 17 (`perf record` of `ib_send_lat -s 8` over shared
/// memory: most of the poller's loop was an empty `recvmmsg`, and a
/// message arriving meanwhile waits for it); re-measure with
/// `cargo xtask bench --only same-host`.
pub(super) const SHM_ACTIVE_NS: u64 = 10_000_000;
/// How long a busy poller leaves the socket unread while the same-host
/// path is active, at first: what comes over UDP then (CM MADs, peers on
/// other hosts) waits at most this long, unless the progress thread takes
/// it first. Each read that finds nothing doubles it, up to
/// [`SOCKET_GAP_DOUBLINGS`] times ([`socket_gap`]).
///
/// Chosen by issue 17 (as [`SHM_ACTIVE_NS`]); re-measure with
/// `cargo xtask bench --only same-host`.
pub(super) const SOCKET_GAP_NS: u64 = 20_000;
/// How often the socket gap doubles while the poller's reads of the socket
/// find nothing: to 320 µs, the longest a datagram over UDP then waits
/// (a CM MAD, a peer on another host; the first of a burst: the burst's
/// next ones wait at most [`SOCKET_GAP_NS`]).
///
/// Chosen by issue 17 (BENCHMARKS.md, "The socket's gap on the same-host
/// path"): at a constant 20 µs, a same-host `ib_write_lat` pair made one
/// empty `recvmmsg` every 5–8 messages in each process (`recv_syscalls`
/// of `SOFTRDMA_STATS`), ~1,800 instructions in user space and a system
/// call each; re-measure with `cargo xtask bench --only same-host`.
pub(super) const SOCKET_GAP_DOUBLINGS: u32 = 4;

/// How long after an application thread left with completions, handing the
/// socket back (`left_at`, see [`hand_back_on_leave`]), the progress thread
/// holds the answers (ACKs) of the requests it processes: the application
/// spins on memory for the data those requests bring (`ib_write_lat`) and
/// posts next, and its post carries them. Sent at once, an ACK ends its
/// requester's poll before the next request arrives, which then finds both
/// applications away from the engine and lands through a wake-up (~30 µs
/// here): a state that sustained itself, `ib_write_lat` 27–35 µs instead of
/// 0.85 µs in 2 of 3 repetitions of one same-host run.
///
/// Chosen by issue 17 (`cargo xtask bench --only same-host`, `ib_write_lat`
/// over the lanes; BENCHMARKS.md, "The machine's two modes"): one
/// application round trip is a few µs, so a millisecond away is no longer
/// a ping-pong.
pub(super) const HOLD_WINDOW_NS: u64 = 1_000_000;
/// The longest a held answer waits for the application's post: then the
/// progress thread sends it (less than a wake-up costs here, 20–30 µs).
///
/// Chosen by issue 17, as [`HOLD_WINDOW_NS`].
pub(super) const ANSWER_HOLD_NS: u64 = 20_000;

/// Whether the progress thread holds the answers of what it receives at
/// `now`, an application thread having left at `left_at` (0: it is back).
pub(super) fn holds_answers(now: u64, left_at: u64) -> bool {
    left_at != 0 && now.saturating_sub(left_at) < HOLD_WINDOW_NS
}

/// When the progress thread must be up to send held answers (`tx_pending`
/// since `pending_since`); `u64::MAX`: nothing held.
pub(super) fn held_answers_due(tx_pending: bool, pending_since: u64) -> u64 {
    if tx_pending {
        pending_since.saturating_add(ANSWER_HOLD_NS)
    } else {
        u64::MAX
    }
}

/// When the progress thread must be up for answers left unsent
/// (`tx_pending` since `pending_since`), at `now`: by their due time
/// ([`held_answers_due`]) while it holds them for an application that
/// left at `left_at` ([`holds_answers`]), and also while it is `attended`
/// (it owns the socket or serves a waiter: nobody else sends them); else
/// never (a busy poller sends them, and standby ticks anyway).
///
/// The hold window may end between the wake-up whose flush kept them (too
/// young) and the next sleep: answers held then must still go. Without
/// the `attended` case the thread could sleep for good with an ACK unsent.
/// A hang seen once (1 run of same-host `ib_send_lat` in about 430,
/// 2026-11-28) looked like that: the server waited for its last send's
/// completion, the client, done, in perftest's closing handshake, its
/// progress thread asleep without a deadline.
pub(super) fn answers_due(
    now: u64,
    left_at: u64,
    attended: bool,
    tx_pending: bool,
    pending_since: u64,
) -> u64 {
    if attended || holds_answers(now, left_at) {
        held_answers_due(tx_pending, pending_since)
    } else {
        u64::MAX
    }
}

/// How long after the last wait for a completion event the device socket
/// stays in the waiting thread's epoll set (`receiving.rs`) while an
/// application busy-polls. In any epoll set, the socket costs each datagram
/// a wake-up callback in the sender's kernel even with nobody asleep there;
/// taking it out and back costs two `epoll_ctl`s per wait.
///
/// Chosen by issue 16, outcome 6 (BENCHMARKS.md, "Issue 16, outcome 6":
/// busy-poll `ib_send_lat` never waits, and paid the callback on every
/// packet; `ib_send_lat -e` and `ib_read_lat -e` wait every 25–45 µs and
/// keep the socket); re-measure with `cargo xtask bench --only lat`.
pub(super) const WAITER_SOCKET_NS: u64 = 1_000_000;

/// How long a thread blocked for a completion event (`receiving.rs`) keeps
/// polling before it sleeps, when its previous wait was short
/// ([`WAITER_SPIN_GAP_NS`]): the answer of a peer in a ping-pong then finds
/// it awake, and it wakes nobody (a wake-up costs 20–30 µs across vCPUs
/// here, qperf `tcp_lat` 25 µs one-way).
///
/// Chosen by issue 17 (`ib_send_lat -e` and `ib_read_lat -e` over the
/// lanes, BENCHMARKS.md "Same-host latency and READ"); re-measure with
/// `cargo xtask bench --only same-host`.
pub(super) const WAITER_SPIN_NS: u64 = 50_000;
/// The longest previous wait after which a waiter spins first: events
/// this frequent come from a peer that answers; after a longer wait the
/// waiter sleeps at once, so a process whose events are sparse, or idle,
/// spends no CPU on waiting.
///
/// Chosen by issue 17, as [`WAITER_SPIN_NS`].
pub(super) const WAITER_SPIN_GAP_NS: u64 = 100_000;

/// A waiter's polling before it sleeps: until [`WaiterSpin::spins`] says
/// no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WaiterSpin {
    until: u64,
}

impl WaiterSpin {
    /// A wait starting at `now`; the previous one lasted `last_wait` ns
    /// (`u64::MAX`: none yet).
    pub(super) fn new(now: u64, last_wait: u64) -> WaiterSpin {
        let spin = if waiter_spins(last_wait) {
            WAITER_SPIN_NS
        } else {
            0
        };
        WaiterSpin {
            until: now.saturating_add(spin),
        }
    }

    /// Whether the waiter polls again at `now` rather than sleep.
    pub(super) fn spins(&self, now: u64) -> bool {
        now < self.until
    }
}

/// Whether a thread waiting for a completion event, its previous wait
/// having lasted `last_wait` ns (`u64::MAX`: none yet), polls before it
/// sleeps ([`WaiterSpin`]): a peer that answers.
pub(super) fn waiter_spins(last_wait: u64) -> bool {
    last_wait <= WAITER_SPIN_GAP_NS
}

/// Whether a thread whose wait for a completion event ended while it still
/// polled (`spun`: a ping-pong's) keeps the device socket and the inbox
/// for its next wait, as a busy poller keeps them between polls: the
/// progress thread, asleep until `sleeping_until` (0: awake), looks within
/// two ticks ([`must_wake_for_pending`]), and takes them back then if the
/// thread is neither waiting nor polling. Given back at every wait's end,
/// they woke the progress thread at almost every message (a doorbell, or
/// the socket back in its set with a datagram in it): 33 000–36 000
/// wake-ups a second in `ib_send_lat -e` over the lanes, each taking the
/// CPU from a polling waiter (2 vCPUs); kept, 1 400 (its ticks), and
/// 13.6–13.8 µs one-way became 2.6–2.7 (BENCHMARKS.md, "Same-host path:
/// which CPU copies").
pub(super) fn keeps_socket_after_wait(spun: bool, sleeping_until: u64, now: u64) -> bool {
    spun && !must_wake_for_pending(sleeping_until, now)
}

/// The latest the progress thread sleeps until at `now` while a thread that
/// polls for its completion events (`spinning_waiter`) has the socket:
/// a tick, so a socket that thread keeps between waits
/// ([`keeps_socket_after_wait`]) comes back within it if the thread leaves.
/// `u64::MAX`: no bound.
pub(super) fn waiter_tick(now: u64, spinning_waiter: bool) -> u64 {
    if spinning_waiter {
        now.saturating_add(MAX_STANDBY_NS)
    } else {
        u64::MAX
    }
}

/// Whether the device socket stays in the waiting thread's epoll set at
/// `now`, the last wait having ended at `waited_at` (`u64::MAX`: a thread
/// waits now).
pub(super) fn waiter_keeps_socket(waited_at: u64, now: u64) -> bool {
    now.saturating_sub(waited_at) < WAITER_SOCKET_NS
}

/// Whether a busy poller reads the socket at `now` (it read it last at
/// `socket_at`, after `misses` reads in a row that found nothing; the inbox
/// last delivered at `shm_at`, 0: never).
pub(super) fn poller_reads_socket(now: u64, socket_at: u64, shm_at: u64, misses: u32) -> bool {
    shm_at == 0
        || now.saturating_sub(shm_at) >= SHM_ACTIVE_NS
        || now.saturating_sub(socket_at) >= socket_gap(misses)
}

/// The socket gap after `misses` reads in a row that found nothing:
/// [`SOCKET_GAP_NS`], doubled per miss up to [`SOCKET_GAP_DOUBLINGS`] times.
pub(super) fn socket_gap(misses: u32) -> u64 {
    SOCKET_GAP_NS << misses.min(SOCKET_GAP_DOUBLINGS)
}

/// The misses in a row after a read of the socket that found `got`
/// datagrams: one more if none (counted no further than the gap grows),
/// else none.
pub(super) fn socket_misses_after(misses: u32, got: usize) -> u32 {
    if got == 0 {
        misses.saturating_add(1).min(SOCKET_GAP_DOUBLINGS)
    } else {
        0
    }
}

/// Whether an application thread found a CQ empty (at `last_poll`) within
/// [`POLLER_NS`] of `now`: it spins on its CQ, and polls again after whatever
/// it does.
pub(super) fn app_spinner(last_poll: u64, now: u64) -> bool {
    now.saturating_sub(last_poll) < POLLER_NS
}

/// Whether a post at `now` is gathered for the poller's next call rather than
/// sent at once (`Shared::doorbell`): the application spins on a CQ
/// (`app_spinning`, `app_spinner`) and the post is `behind` other work: it
/// follows another post with no poll between them, or its QP still has
/// requests in flight. A post to an idle QP right after a poll, as every
/// post of a ping-pong, is sent at once: gathering it only delays it by the
/// application's way from its post back into its poll, and no burst is
/// there to gather.
///
/// Chosen by issue 17: `ib_send_lat -s 8` over the lanes, 0.91–0.93 µs
/// one-way against 0.94–0.96 µs when every post of a spinning application
/// was gathered (5 of 6 pairs, fast mode); `ib_send_bw -s 64` unchanged (3
/// pairs). Re-measure with `cargo xtask bench --only same-host` and
/// `--only perftest-bw`.
pub(super) fn defers_post(last_call: u64, last_poll: u64, now: u64, behind: bool) -> bool {
    behind && app_spinning(last_call, now) && app_spinner(last_poll, now)
}

/// Whether an application thread polled or posted (at `last_call`) within
/// [`SPIN_WINDOW_NS`] of `now`: it reads the socket itself when its CQ runs
/// dry, so the progress thread takes the socket out of its epoll set.
pub(super) fn app_spinning(last_call: u64, now: u64) -> bool {
    now.saturating_sub(last_call) < SPIN_WINDOW_NS
}

/// Whether the progress thread should watch the socket (have it in its epoll
/// set): unless an application thread is busy with the device, or one
/// blocked for a completion event receives itself (`waiter`, see
/// `receiving.rs`).
pub(super) fn watch_socket(last_call: u64, now: u64, waiter: bool) -> bool {
    !waiter && !app_spinning(last_call, now)
}

/// Whether a post or send at `now` counts as the application being busy with
/// the device (it then records `last_call`): busy polling is on and the
/// application spins on a CQ.
pub(super) fn counts_as_busy(busy_poll: bool, last_poll: u64, now: u64) -> bool {
    busy_poll && app_spinner(last_poll, now)
}

/// Whether the progress thread, while a busy poller owns the device socket,
/// reads the other sockets (other host addresses, multicast groups) after a
/// wait: only when the wait reported one readable (`others_readable`; the
/// set is level-triggered, so what a read leaves wakes the next wait), or
/// when the wait failed and reported nothing (`None`).
///
/// Chosen by issue 17 (BENCHMARKS.md, "The socket's gap on the same-host
/// path"): every standby tick of a same-host `ib_write_lat` pair read
/// each of them, one empty `recvmmsg` apiece, on a CPU a poller needed.
pub(super) fn reads_others(others_readable: Option<bool>) -> bool {
    others_readable.unwrap_or(true)
}

/// Whether a poller leaving at `now` with completions hands the socket back
/// to the progress thread (forgets its polls, notes `left_at`, re-arms the
/// socket): only inside the serve window the progress thread opened.
pub(super) fn hand_back_on_leave(now: u64, serve_until: u64) -> bool {
    now < serve_until
}

/// What a poller coming back at `now` does with its last hand-over
/// (`left_at`, 0: none since its last poll).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Back {
    /// It did not hand the socket over: nothing to do.
    Nothing,
    /// It forgets the hand-over (clears `left_at`).
    Forget,
    /// Back within [`QUICK_RETURN_NS`]: it polls in a tight loop after all
    /// (a ping-pong that lost the CPU for a while looks like one that
    /// leaves); it forgets the hand-over and ends the serve window.
    StopServing,
}

/// See [`Back`].
pub(super) fn on_back(left_at: u64, now: u64) -> Back {
    if left_at == 0 {
        Back::Nothing
    } else if now.saturating_sub(left_at) < QUICK_RETURN_NS {
        Back::StopServing
    } else {
        Back::Forget
    }
}

/// Whether packets have waited unsent (`tx_pending`, since `pending_since`)
/// at least `age` at `now`.
pub(super) fn pending_older_than(tx_pending: bool, pending_since: u64, now: u64, age: u64) -> bool {
    tx_pending && now.saturating_sub(pending_since) >= age
}

/// Whether a thread that left packets unsent at `now` must wake the progress
/// thread, sleeping until `sleeping_until` (`u64::MAX`: no deadline), so it
/// looks at them within about [`MAX_STANDBY_NS`]: it ticks that often while
/// an application polls, but may still sleep without a deadline when the
/// polling just began.
pub(super) fn must_wake_for_pending(sleeping_until: u64, now: u64) -> bool {
    sleeping_until > now + 2 * MAX_STANDBY_NS
}

/// How the progress thread looks at the timers before it sleeps in standby
/// when the engine lock is taken (see [`Progress::lock_missed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Missed {
    /// Skip the timers this tick (they can wait one).
    Skip,
    /// Wait for the lock and read them.
    Wait,
}

/// What the progress thread does before waiting in `epoll_wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sleep {
    /// The deadline of the wait (ns since the epoch; `u64::MAX`: none).
    pub(super) until: u64,
    /// Back from standby: count the request packets now, and open the serve
    /// window if more arrive during this wait ([`Progress::serve_until`]).
    pub(super) count_requests: bool,
}

/// The progress thread's state between its waits, and its decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Progress {
    /// Whether the socket was in the epoll set during the last wait.
    was_watching: bool,
    /// The last packet or standby tick (ns since the epoch).
    active_at: u64,
    /// The current standby period (back to [`STANDBY_NS`] on the first
    /// standby tick after watching).
    standby: u64,
    /// The earliest timer seen before the last wait (`u64::MAX`: none, or not
    /// read).
    timers_at: u64,
    /// Standby ticks in a row that found the engine lock taken.
    missed: u32,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// A progress thread that starts out watching the socket.
    pub(super) fn new() -> Progress {
        Progress {
            was_watching: true,
            active_at: 0,
            standby: STANDBY_NS,
            timers_at: u64::MAX,
            missed: 0,
        }
    }

    /// In standby, the engine lock was free: the timers were read.
    pub(super) fn lock_taken(&mut self) {
        self.missed = 0;
    }

    /// In standby, the engine lock was taken (a poller holds it most of the
    /// time): skip the timers for up to [`MAX_MISSED_LOCKS`] ticks in a row,
    /// then wait for it.
    pub(super) fn lock_missed(&mut self) -> Missed {
        if self.missed < MAX_MISSED_LOCKS {
            self.missed += 1;
            Missed::Skip
        } else {
            self.missed = 0;
            Missed::Wait
        }
    }

    /// The wait at `now`: `watching` is whether the socket is in the epoll
    /// set now, `last_poll` when an application last found a CQ empty, and
    /// `timers` the earliest timer deadline (`u64::MAX`: none, or skipped).
    ///
    /// Watching, it sleeps until the next timer, at most [`BACKSTOP_NS`]
    /// while the device was active within [`ACTIVE_NS`]. In standby it ticks
    /// every [`STANDBY_NS`], doubling up to [`MAX_STANDBY_NS`] while a
    /// spinning application stays busy with the device (one that only posts
    /// gets ticks at the first pace, so responder work waits little).
    pub(super) fn sleep(&mut self, now: u64, watching: bool, last_poll: u64, timers: u64) -> Sleep {
        self.timers_at = timers;
        let until = if watching {
            if now.saturating_sub(self.active_at) < ACTIVE_NS {
                timers.min(now + BACKSTOP_NS)
            } else {
                timers
            }
        } else {
            self.active_at = now;
            self.standby = if self.was_watching || !app_spinner(last_poll, now) {
                STANDBY_NS
            } else {
                (self.standby * 2).min(MAX_STANDBY_NS)
            };
            timers.min(now + self.standby)
        };
        let count_requests = !self.was_watching && watching;
        self.was_watching = watching;
        Sleep {
            until,
            count_requests,
        }
    }

    /// After the wait, watching: the progress thread read `got` packets at
    /// `now`.
    pub(super) fn received(&mut self, now: u64, got: usize) {
        if got > 0 {
            self.active_at = now;
        }
    }

    /// Back from standby, request packets arrived during the wait (`now`):
    /// the application leaves between polls; until this deadline, it hands
    /// the socket back whenever it leaves ([`hand_back_on_leave`]).
    pub(super) fn serve_until(now: u64) -> u64 {
        now + SERVE_NS
    }

    /// After the wait (`now`): whether to send what a poller or a post left
    /// unsent (`tx_pending` since `pending_since`); in standby only what
    /// waited a tick, since its owner may still be in the middle of a burst;
    /// `holding` ([`holds_answers`]) only what waited [`ANSWER_HOLD_NS`].
    pub(super) fn flush(
        &self,
        now: u64,
        watching: bool,
        holding: bool,
        tx_pending: bool,
        pending_since: u64,
    ) -> bool {
        if holding {
            pending_older_than(tx_pending, pending_since, now, ANSWER_HOLD_NS)
        } else {
            watching || pending_older_than(tx_pending, pending_since, now, STANDBY_NS)
        }
    }

    /// After the wait (`now`): whether to fire the timers (always while
    /// watching; in standby once the earliest one seen is due).
    pub(super) fn fire_timers(&self, now: u64, watching: bool) -> bool {
        watching || now >= self.timers_at
    }

    /// After the wait: whether to linger (keep polling the socket), having
    /// read `got` packets. Only while watching, not in mode off, and not when
    /// a completion channel was signalled (a woken thread needs a CPU).
    pub(super) fn linger(got: usize, watching: bool, woke_someone: bool, mode: Linger) -> bool {
        got > 0 && watching && !woke_someone && mode != Linger::Off
    }
}

/// What the lingering progress thread does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LingerStep {
    /// Stop lingering: go back to `epoll_wait`.
    Stop,
    /// Mode auto: stop unless the other threads and the machine leave the
    /// CPU alone ([`LoadWindow`]); otherwise poll the socket.
    CheckLoad,
    /// Poll the socket.
    Poll,
    /// Keep going; fire the timers first if `tick`.
    Continue {
        /// A timer tick ([`STANDBY_NS`]) is due.
        tick: bool,
    },
}

/// The progress thread lingering: it keeps polling the socket while packets
/// keep coming (each within [`LINGER_NS`] of the last), as long as no
/// application thread polls, no thread was woken through a completion
/// channel, and (mode auto) the CPU is free: on a 2-vCPU machine a third
/// spinner would cost everyone milliseconds of scheduling delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Lingering {
    last_rx: u64,
    next_tick: u64,
}

impl Lingering {
    /// Lingering starts at `now`, after packets.
    pub(super) fn new(now: u64) -> Lingering {
        Lingering {
            last_rx: now,
            next_tick: now + STANDBY_NS,
        }
    }

    /// Before a poll at `now` (`last_call`: the application's last poll or
    /// post): [`LingerStep::Stop`], [`LingerStep::CheckLoad`] or
    /// [`LingerStep::Poll`].
    pub(super) fn before_poll(&self, now: u64, last_call: u64, mode: Linger) -> LingerStep {
        if app_spinning(last_call, now) {
            LingerStep::Stop
        } else if mode == Linger::Auto {
            LingerStep::CheckLoad
        } else {
            LingerStep::Poll
        }
    }

    /// After a poll at `now` that read `got` packets (`woke_someone`: a
    /// completion channel was signalled since lingering began):
    /// [`LingerStep::Stop`] or [`LingerStep::Continue`].
    pub(super) fn after_poll(&mut self, now: u64, got: usize, woke_someone: bool) -> LingerStep {
        if got > 0 {
            self.last_rx = now;
            if woke_someone {
                return LingerStep::Stop;
            }
        } else if now.saturating_sub(self.last_rx) > LINGER_NS {
            return LingerStep::Stop;
        }
        let tick = now >= self.next_tick;
        if tick {
            self.next_tick = now + STANDBY_NS;
        }
        LingerStep::Continue { tick }
    }
}

/// CPU clocks and the machine's runnable threads, sampled at the end of a
/// window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LoadSample {
    /// The process's CPU time (ns).
    pub(super) process: u64,
    /// The progress thread's CPU time (ns).
    pub(super) thread: u64,
    /// Threads runnable on the machine (0: unknown).
    pub(super) runnable: usize,
}

/// Whether spinning is cheap: the verdict of the last completed window of
/// [`CPU_WINDOW_NS`]. Idle: the other threads of the process used less than
/// a quarter of a CPU ([`OTHERS_CPU_SHARE`]), and at the window's end at most
/// [`EXTRA_RUNNABLE`] thread more was runnable than there are CPUs. On an
/// oversubscribed machine a spinner burns its share of the CPU and then
/// waits behind everyone else, while a thread that sleeps is run soon after
/// its wake-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LoadWindow {
    at: u64,
    process: u64,
    thread: u64,
    cpus: usize,
    idle: bool,
}

impl LoadWindow {
    /// A first window starting at 0, with the clocks at `start` and `cpus`
    /// CPUs; optimistic (idle) until it ends.
    pub(super) fn new(start: LoadSample, cpus: usize) -> LoadWindow {
        LoadWindow {
            at: 0,
            process: start.process,
            thread: start.thread,
            cpus,
            idle: true,
        }
    }

    /// Whether the window ended by `now`: the caller then samples and calls
    /// [`LoadWindow::close`]; otherwise the verdict is [`LoadWindow::idle`].
    pub(super) fn due(&self, now: u64) -> bool {
        now.saturating_sub(self.at) >= CPU_WINDOW_NS
    }

    /// Ends the window at `now` with `sample`, starts the next; the verdict.
    pub(super) fn close(&mut self, now: u64, sample: LoadSample) -> bool {
        let wall = now.saturating_sub(self.at);
        let others = sample
            .process
            .saturating_sub(self.process)
            .saturating_sub(sample.thread.saturating_sub(self.thread));
        self.idle = others.saturating_mul(OTHERS_CPU_SHARE) < wall
            && sample.runnable <= self.cpus + EXTRA_RUNNABLE;
        (self.at, self.process, self.thread) = (now, sample.process, sample.thread);
        self.idle
    }

    /// The verdict of the last completed window.
    pub(super) fn idle(&self) -> bool {
        self.idle
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
