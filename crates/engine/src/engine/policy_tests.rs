//! Tests of the progress policy at literal times (`policy.rs`): each pins
//! one decision at one time, boundaries at the limit and one ns either side.
use super::*;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const NONE: u64 = u64::MAX;

// --- who owns the socket (busy_poll) ---

#[test]
fn an_application_that_polled_50us_ago_keeps_the_socket() {
    let now = 10 * MS;
    assert!(app_spinning(now - 50 * US, now));
    assert!(!watch_socket(now - 50 * US, now, false));
}

#[test]
fn spin_window_boundary() {
    let t = 5 * MS;
    assert!(app_spinning(t, t + SPIN_WINDOW_NS - 1));
    assert!(!app_spinning(t, t + SPIN_WINDOW_NS));
    assert!(!app_spinning(t, t + SPIN_WINDOW_NS + 1));
    assert!(watch_socket(t, t + SPIN_WINDOW_NS, false));
    assert!(!watch_socket(t, t + SPIN_WINDOW_NS - 1, false));
    // A call stamped after `now` (another thread's clock read) spins.
    assert!(app_spinning(t + 1, t));
}

#[test]
fn only_a_post_behind_other_work_of_a_spinning_application_is_gathered() {
    let now = 10 * MS;
    // Polled empty 2 µs ago, posted 1 µs ago: a burst's second post, or
    // one behind requests in flight.
    assert!(defers_post(now - US, now - 2 * US, now, true));
    // The first post to an idle QP after a poll (a ping-pong's) goes at once.
    assert!(!defers_post(now - US, now - 2 * US, now, false));
    // Not spinning: the last call left the window, or no empty poll lately.
    assert!(!defers_post(now - SPIN_WINDOW_NS, now - 2 * US, now, true));
    assert!(defers_post(
        now - SPIN_WINDOW_NS + 1,
        now - 2 * US,
        now,
        true
    ));
    assert!(!defers_post(now - US, now - POLLER_NS, now, true));
    assert!(defers_post(now - US, now - POLLER_NS + 1, now, true));
}

#[test]
fn an_application_that_announced_it_blocks_gives_the_socket_back_at_once() {
    // `before_block` stores 0: any time past the window watches.
    assert!(watch_socket(0, SPIN_WINDOW_NS, false));
    assert!(!watch_socket(0, SPIN_WINDOW_NS - 1, false));
    assert!(watch_socket(0, 3 * MS, false));
    assert!(!app_spinner(0, 20 * MS));
}

#[test]
fn a_thread_receiving_for_its_completion_event_keeps_the_socket() {
    // Long after any poll, while it waits: the progress thread leaves the
    // socket to it (two readers would both wake for every packet).
    assert!(!watch_socket(0, 3 * MS, true));
    assert!(!watch_socket(3 * MS, 3 * MS, true));
    // Gone, the progress thread takes it back.
    assert!(watch_socket(0, 3 * MS, false));
}

#[test]
fn the_waiters_set_keeps_the_socket_for_a_millisecond_after_a_wait() {
    let t = 7 * MS;
    assert!(waiter_keeps_socket(t, t + WAITER_SOCKET_NS - 1));
    assert!(!waiter_keeps_socket(t, t + WAITER_SOCKET_NS));
    assert!(!waiter_keeps_socket(t, t + WAITER_SOCKET_NS + 1));
    // A thread waits now: however long ago the wait began.
    assert!(waiter_keeps_socket(u64::MAX, t));
    // A wait that ended after `now` (another thread's clock read).
    assert!(waiter_keeps_socket(t + 1, t));
}

#[test]
fn poller_window_boundary() {
    let t = 7 * MS;
    assert!(app_spinner(t, t));
    assert!(app_spinner(t, t + POLLER_NS - 1));
    assert!(!app_spinner(t, t + POLLER_NS));
    assert!(!app_spinner(t, t + POLLER_NS + 1));
}

#[test]
fn posts_count_as_busy_only_with_busy_polling_from_a_spinner() {
    let t = 30 * MS;
    assert!(counts_as_busy(true, t, t + POLLER_NS - 1));
    assert!(!counts_as_busy(true, t, t + POLLER_NS));
    assert!(!counts_as_busy(false, t, t + 1));
}

#[test]
fn leaving_hands_the_socket_back_only_inside_the_serve_window() {
    let until = 2_000 * MS;
    assert!(hand_back_on_leave(until - 1, until));
    assert!(!hand_back_on_leave(until, until));
    assert!(!hand_back_on_leave(until + 1, until));
    // Never opened.
    assert!(!hand_back_on_leave(1, 0));
}

#[test]
fn quick_return_rule() {
    let left = 40 * MS;
    assert_eq!(on_back(0, left), Back::Nothing);
    assert_eq!(on_back(left, left), Back::StopServing);
    assert_eq!(on_back(left, left + QUICK_RETURN_NS - 1), Back::StopServing);
    assert_eq!(on_back(left, left + QUICK_RETURN_NS), Back::Forget);
    assert_eq!(on_back(left, left + QUICK_RETURN_NS + 1), Back::Forget);
}

#[test]
fn pending_age_boundary() {
    let since = 3 * MS;
    assert!(!pending_older_than(false, since, since + MS, STANDBY_NS));
    assert!(!pending_older_than(
        true,
        since,
        since + STANDBY_NS - 1,
        STANDBY_NS
    ));
    assert!(pending_older_than(
        true,
        since,
        since + STANDBY_NS,
        STANDBY_NS
    ));
    assert!(pending_older_than(
        true,
        since,
        since + STANDBY_NS + 1,
        STANDBY_NS
    ));
}

#[test]
fn pending_packets_wake_a_progress_thread_asleep_past_two_ticks() {
    let now = 9 * MS;
    assert!(must_wake_for_pending(NONE, now));
    assert!(must_wake_for_pending(now + 2 * MAX_STANDBY_NS + 1, now));
    assert!(!must_wake_for_pending(now + 2 * MAX_STANDBY_NS, now));
    assert!(!must_wake_for_pending(now + 2 * MAX_STANDBY_NS - 1, now));
    assert!(!must_wake_for_pending(0, now), "awake");
}

// --- the progress thread's sleep ---

#[test]
fn watching_and_active_sleeps_at_most_the_backstop() {
    let mut p = Progress::new();
    // Active since 0 (start): the backstop applies until ACTIVE_NS.
    let s = p.sleep(ACTIVE_NS - 1, true, 0, NONE);
    assert_eq!(
        s,
        Sleep {
            until: ACTIVE_NS - 1 + BACKSTOP_NS,
            count_requests: false
        }
    );
    // An earlier timer wins.
    assert_eq!(p.sleep(MS, true, 0, 5 * MS).until, 5 * MS);
    // A timer exactly at the backstop.
    assert_eq!(
        p.sleep(MS, true, 0, MS + BACKSTOP_NS).until,
        MS + BACKSTOP_NS
    );
    // A later one (an ACK timeout) is capped.
    assert_eq!(p.sleep(MS, true, 0, 30 * MS).until, MS + BACKSTOP_NS);
}

#[test]
fn idle_past_active_window_sleeps_until_the_next_timer_or_forever() {
    let mut p = Progress::new();
    assert_eq!(p.sleep(ACTIVE_NS, true, 0, NONE).until, NONE);
    assert_eq!(p.sleep(ACTIVE_NS + 1, true, 0, NONE).until, NONE);
    assert_eq!(p.sleep(ACTIVE_NS, true, 0, 900 * MS).until, 900 * MS);
}

#[test]
fn packets_keep_the_device_active() {
    let mut p = Progress::new();
    p.received(500 * MS, 1);
    assert_eq!(
        p.sleep(500 * MS + ACTIVE_NS - 1, true, 0, NONE).until,
        700 * MS - 1 + BACKSTOP_NS
    );
    assert_eq!(p.sleep(500 * MS + ACTIVE_NS, true, 0, NONE).until, NONE);
    // An empty read does not.
    let mut p = Progress::new();
    p.received(500 * MS, 0);
    assert_eq!(p.sleep(500 * MS, true, 0, NONE).until, NONE);
}

#[test]
fn standby_ticks_100us_then_backs_off_to_1ms_while_the_application_spins() {
    let mut p = Progress::new();
    let mut now = 10 * MS;
    let last_poll = now - 50 * US;
    // First standby after watching: the first pace.
    let s = p.sleep(now, false, last_poll, NONE);
    assert_eq!(s.until, now + 100 * US);
    assert!(!s.count_requests);
    for want in [200, 400, 800, 1000, 1000] {
        now += US;
        assert_eq!(p.sleep(now, false, last_poll, NONE).until, now + want * US);
    }
}

#[test]
fn standby_with_an_application_that_only_posts_stays_at_the_first_pace() {
    let mut p = Progress::new();
    let now = 50 * MS;
    assert_eq!(p.sleep(now, false, 0, NONE).until, now + STANDBY_NS);
    assert_eq!(p.sleep(now, false, 0, NONE).until, now + STANDBY_NS);
    // Last empty poll exactly POLLER_NS ago: not a spinner.
    assert_eq!(
        p.sleep(now, false, now - POLLER_NS, NONE).until,
        now + STANDBY_NS
    );
    // One ns later it was: the period doubles.
    assert_eq!(
        p.sleep(now, false, now - POLLER_NS + 1, NONE).until,
        now + 2 * STANDBY_NS
    );
}

#[test]
fn standby_wakes_for_an_earlier_timer_and_resets_after_watching() {
    let mut p = Progress::new();
    let now = 50 * MS;
    assert_eq!(p.sleep(now, false, now, now + 30 * US).until, now + 30 * US);
    assert_eq!(p.sleep(now, false, now, NONE).until, now + 2 * STANDBY_NS);
    let s = p.sleep(now, true, now, NONE);
    assert!(s.count_requests, "back from standby");
    // Standby counts as activity: the backstop applies.
    assert_eq!(s.until, now + BACKSTOP_NS);
    assert!(!p.sleep(now, true, now, NONE).count_requests);
    assert_eq!(p.sleep(now, false, now, NONE).until, now + STANDBY_NS);
}

#[test]
fn standby_counts_as_activity() {
    let mut p = Progress::new();
    let t = 1_000 * MS;
    p.sleep(t, false, 0, NONE);
    assert_eq!(
        p.sleep(t + ACTIVE_NS - 1, true, 0, NONE).until,
        t + ACTIVE_NS - 1 + BACKSTOP_NS
    );
    assert_eq!(p.sleep(t + ACTIVE_NS, true, 0, NONE).until, NONE);
}

#[test]
fn standby_skips_a_taken_lock_three_times_then_waits() {
    let mut p = Progress::new();
    assert_eq!(p.lock_missed(), Missed::Skip);
    assert_eq!(p.lock_missed(), Missed::Skip);
    assert_eq!(p.lock_missed(), Missed::Skip);
    assert_eq!(p.lock_missed(), Missed::Wait);
    assert_eq!(p.lock_missed(), Missed::Skip);
    p.lock_missed();
    p.lock_taken();
    assert_eq!(p.lock_missed(), Missed::Skip);
    assert_eq!(p.lock_missed(), Missed::Skip);
    assert_eq!(p.lock_missed(), Missed::Skip);
    assert_eq!(p.lock_missed(), Missed::Wait);
}

#[test]
fn serve_window_opens_for_a_second() {
    assert_eq!(Progress::serve_until(7 * MS), 7 * MS + 1_000 * MS);
}

#[test]
fn after_the_wait_flushes_and_fires_timers() {
    let mut p = Progress::new();
    let now = 20 * MS;
    p.sleep(now, true, 0, 25 * MS);
    // Watching: always.
    assert!(p.flush(now, true, false, false, 0));
    assert!(p.fire_timers(now, true));
    p.sleep(now, false, 0, 25 * MS);
    // Standby: what waited a tick, timers that are due.
    assert!(!p.flush(now, false, false, false, 0));
    assert!(!p.flush(now, false, false, true, now - STANDBY_NS + 1));
    assert!(p.flush(now, false, false, true, now - STANDBY_NS));
    assert!(!p.fire_timers(25 * MS - 1, false));
    assert!(p.fire_timers(25 * MS, false));
    assert!(p.fire_timers(25 * MS + 1, false));
    // Skipped timers (lock taken): none fire in standby.
    p.sleep(now, false, 0, NONE);
    assert!(!p.fire_timers(u64::MAX - 1, false));
}

#[test]
fn lingers_after_packets_unless_off_or_someone_woke() {
    for mode in [Linger::Auto, Linger::On] {
        assert!(Progress::linger(1, true, false, mode));
        assert!(!Progress::linger(0, true, false, mode));
        assert!(!Progress::linger(1, false, false, mode));
        assert!(!Progress::linger(1, true, true, mode));
    }
    assert!(!Progress::linger(1, true, false, Linger::Off));
}

// --- lingering ---

#[test]
fn lingering_checks_the_load_only_in_auto_and_yields_to_a_poller() {
    let now = 100 * MS;
    let l = Lingering::new(now);
    assert_eq!(l.before_poll(now, 0, Linger::Auto), LingerStep::CheckLoad);
    assert_eq!(l.before_poll(now, 0, Linger::On), LingerStep::Poll);
    // An application that polled or posted within the spin window.
    let call = now - SPIN_WINDOW_NS + 1;
    assert_eq!(l.before_poll(now, call, Linger::On), LingerStep::Stop);
    assert_eq!(l.before_poll(now, call, Linger::Auto), LingerStep::Stop);
    assert_eq!(
        l.before_poll(now, now - SPIN_WINDOW_NS, Linger::On),
        LingerStep::Poll
    );
}

#[test]
fn lingers_200us_after_the_last_packet() {
    let t = 100 * MS;
    let mut l = Lingering::new(t);
    assert_eq!(
        l.after_poll(t + LINGER_NS - 1, 0, false),
        LingerStep::Continue { tick: true }
    );
    assert_eq!(
        l.after_poll(t + LINGER_NS, 0, false),
        LingerStep::Continue { tick: false }
    );
    assert_eq!(l.after_poll(t + LINGER_NS + 1, 0, false), LingerStep::Stop);
    // A packet restarts the 200 µs.
    let mut l = Lingering::new(t);
    assert_eq!(
        l.after_poll(t + 150 * US, 2, false),
        LingerStep::Continue { tick: true }
    );
    assert_eq!(
        l.after_poll(t + 150 * US + LINGER_NS, 0, false),
        LingerStep::Continue { tick: true }
    );
    assert_eq!(
        l.after_poll(t + 150 * US + LINGER_NS + 1, 0, false),
        LingerStep::Stop
    );
}

#[test]
fn lingering_stops_when_a_packet_woke_someone() {
    let t = 100 * MS;
    let mut l = Lingering::new(t);
    assert_eq!(l.after_poll(t + US, 1, true), LingerStep::Stop);
    // A notification with no packet read this round: the packet rule.
    let mut l = Lingering::new(t);
    assert_eq!(
        l.after_poll(t + US, 0, true),
        LingerStep::Continue { tick: false }
    );
}

#[test]
fn lingering_fires_timers_every_100us() {
    let t = 100 * MS;
    let mut l = Lingering::new(t);
    assert_eq!(
        l.after_poll(t + STANDBY_NS - 1, 1, false),
        LingerStep::Continue { tick: false }
    );
    assert_eq!(
        l.after_poll(t + STANDBY_NS, 1, false),
        LingerStep::Continue { tick: true }
    );
    assert_eq!(
        l.after_poll(t + 2 * STANDBY_NS - 1, 1, false),
        LingerStep::Continue { tick: false }
    );
    assert_eq!(
        l.after_poll(t + 2 * STANDBY_NS, 1, false),
        LingerStep::Continue { tick: true }
    );
}

// --- the load window ---

fn sample(process: u64, thread: u64, runnable: usize) -> LoadSample {
    LoadSample {
        process,
        thread,
        runnable,
    }
}

#[test]
fn verdict_holds_until_the_window_ends() {
    let w = LoadWindow::new(sample(5 * MS, MS, 0), 2);
    assert!(w.idle(), "optimistic before the first window");
    assert!(!w.due(CPU_WINDOW_NS - 1));
    assert!(w.due(CPU_WINDOW_NS));
    assert!(w.due(CPU_WINDOW_NS + 1));
}

#[test]
fn others_below_a_quarter_cpu_are_idle() {
    // Over 10 ms the progress thread used 4 ms, the process 6.5 ms: the
    // others 2.5 ms, exactly a quarter: not idle.
    let mut w = LoadWindow::new(sample(0, 0, 0), 2);
    assert!(!w.close(10 * MS, sample(6_500 * US, 4 * MS, 1)));
    assert!(!w.idle());
    assert!(!w.due(20 * MS - 1));
    assert!(w.due(20 * MS));
    // Next window: the others used one ns less than a quarter.
    assert!(w.close(20 * MS, sample(6_500 * US + 2_500 * US - 1, 4 * MS, 1)));
    assert!(w.idle());
    // More: not idle.
    assert!(!w.close(30 * MS, sample(9 * MS + 2_500 * US, 4 * MS, 1)));
}

#[test]
fn the_progress_threads_own_cpu_does_not_count() {
    // It spun 7 ms of 10 ms (lingering), the process used 8 ms: the
    // others used 1 ms.
    let mut w = LoadWindow::new(sample(MS, MS, 0), 2);
    assert!(w.close(10 * MS, sample(9 * MS, 8 * MS, 1)));
}

#[test]
fn more_runnable_threads_than_cpus_plus_one_is_loaded() {
    let mut w = LoadWindow::new(sample(0, 0, 0), 2);
    assert!(w.close(10 * MS, sample(0, 0, 3)));
    assert!(!w.close(20 * MS, sample(0, 0, 4)));
    // Unknown (0): idle.
    assert!(w.close(30 * MS, sample(0, 0, 0)));
}

// --- the busy poller and the same-host path ---

#[test]
fn a_poller_without_same_host_traffic_reads_the_socket_every_time() {
    assert!(poller_reads_socket(5 * MS, 5 * MS, 0, 0));
    assert!(poller_reads_socket(5 * MS, 5 * MS - 1, 0, 0));
    // However many reads found nothing.
    assert!(poller_reads_socket(5 * MS, 5 * MS, 0, SOCKET_GAP_DOUBLINGS));
}

#[test]
fn a_poller_fed_by_the_inbox_reads_the_socket_every_20us() {
    let t = 50 * MS;
    // The inbox delivered 1 µs ago; the socket was read 5 µs ago: skip.
    assert!(!poller_reads_socket(t, t - 5 * US, t - US, 0));
    assert!(!poller_reads_socket(t, t - SOCKET_GAP_NS + 1, t - US, 0));
    assert!(poller_reads_socket(t, t - SOCKET_GAP_NS, t - US, 0));
}

#[test]
fn empty_socket_reads_stretch_the_gap_to_320us_and_a_datagram_resets_it() {
    let t = 50 * MS;
    assert_eq!(socket_gap(0), 20 * US);
    assert_eq!(socket_gap(1), 40 * US);
    assert_eq!(socket_gap(SOCKET_GAP_DOUBLINGS), 320 * US);
    assert_eq!(socket_gap(u32::MAX), 320 * US);
    // After two empty reads: every 80 µs.
    assert!(!poller_reads_socket(t, t - 80 * US + 1, t - US, 2));
    assert!(poller_reads_socket(t, t - 80 * US, t - US, 2));
    // The count stops where the gap does, and a read that finds one
    // datagram starts it over.
    let mut misses = 0;
    for _ in 0..10 {
        misses = socket_misses_after(misses, 0);
    }
    assert_eq!(misses, SOCKET_GAP_DOUBLINGS);
    assert!(!poller_reads_socket(t, t - 320 * US + 1, t - US, misses));
    assert!(poller_reads_socket(t, t - 320 * US, t - US, misses));
    assert_eq!(socket_misses_after(misses, 1), 0);
}

#[test]
fn the_progress_thread_reads_the_other_sockets_only_when_the_wait_says_so() {
    assert!(reads_others(Some(true)));
    // A standby tick: nothing to read.
    assert!(!reads_others(Some(false)));
    // A failed wait said nothing: look.
    assert!(reads_others(None));
}

#[test]
fn same_host_traffic_stops_counting_after_10ms() {
    let t = 50 * MS;
    assert!(!poller_reads_socket(t, t - US, t - SHM_ACTIVE_NS + 1, 0));
    assert!(poller_reads_socket(t, t - US, t - SHM_ACTIVE_NS, 0));
    assert!(poller_reads_socket(
        t,
        t - US,
        t - SHM_ACTIVE_NS,
        SOCKET_GAP_DOUBLINGS
    ));
}

// --- a thread blocked for a completion event (receiving.rs) ---

#[test]
fn a_waiter_spins_after_a_short_wait_and_sleeps_after_a_long_one() {
    let now = 7 * MS;
    let short = WaiterSpin::new(now, 30 * US);
    assert!(short.spins(now));
    assert!(short.spins(now + WAITER_SPIN_NS - 1));
    assert!(!short.spins(now + WAITER_SPIN_NS));
    // The boundary of the previous wait.
    assert!(WaiterSpin::new(now, WAITER_SPIN_GAP_NS).spins(now));
    assert!(!WaiterSpin::new(now, WAITER_SPIN_GAP_NS + 1).spins(now));
    // The first wait, or one after an idle second: straight to sleep.
    assert!(!WaiterSpin::new(now, NONE).spins(now));
    assert!(!WaiterSpin::new(now, 1_000 * MS).spins(now));
}

#[test]
fn answers_are_held_for_an_application_that_left_lately() {
    let left = 50 * MS;
    assert!(!holds_answers(left, 0), "the application is back");
    assert!(holds_answers(left, left));
    assert!(holds_answers(left + HOLD_WINDOW_NS - 1, left));
    assert!(!holds_answers(left + HOLD_WINDOW_NS, left), "away too long");
    // Held answers go once they waited ANSWER_HOLD_NS, watching or not,
    // and the progress thread is up by then.
    let p = Progress::new();
    let since = left + 3 * US;
    assert!(!p.flush(since + ANSWER_HOLD_NS - 1, true, true, true, since));
    assert!(p.flush(since + ANSWER_HOLD_NS, true, true, true, since));
    assert!(!p.flush(since, true, true, false, 0), "nothing held");
    assert_eq!(held_answers_due(true, since), since + ANSWER_HOLD_NS);
    assert_eq!(held_answers_due(false, since), u64::MAX);
}

#[test]
fn answers_left_unsent_wake_the_progress_thread_while_it_holds_them_or_owns_the_socket() {
    let left = 50 * MS;
    let since = left + HOLD_WINDOW_NS - 5 * US;
    let due = since + ANSWER_HOLD_NS;
    // Holding: by their due time, attended or not.
    let now = left + HOLD_WINDOW_NS - 1;
    assert_eq!(answers_due(now, left, false, true, since), due);
    assert_eq!(answers_due(now, left, true, true, since), due);
    // The window ended after the flush kept them: owning the socket, the
    // thread still wakes for them (it slept for good before).
    let now = left + HOLD_WINDOW_NS;
    assert!(!holds_answers(now, left));
    assert_eq!(answers_due(now, left, true, true, since), due);
    // A busy poller owns the socket: it sends them; standby ticks anyway.
    assert_eq!(answers_due(now, left, false, true, since), NONE);
    assert_eq!(answers_due(now, 0, false, true, since), NONE);
    // Nothing unsent: no deadline.
    assert_eq!(answers_due(now, left, true, false, since), NONE);
    assert_eq!(answers_due(left, left, true, false, since), NONE);
}

#[test]
fn a_wait_that_ended_polling_keeps_the_socket_if_the_progress_thread_looks_within_two_ticks() {
    let now = 10 * MS;
    // Awake: it decides with the thread's last call.
    assert!(keeps_socket_after_wait(true, 0, now));
    assert!(keeps_socket_after_wait(true, now + 2 * MAX_STANDBY_NS, now));
    assert!(!keeps_socket_after_wait(
        true,
        now + 2 * MAX_STANDBY_NS + 1,
        now
    ));
    assert!(!keeps_socket_after_wait(true, NONE, now), "asleep for good");
    // A wait that slept hands them back.
    assert!(!keeps_socket_after_wait(false, 0, now));
}

#[test]
fn the_progress_thread_ticks_every_millisecond_while_a_waiter_polls() {
    assert_eq!(waiter_tick(5 * MS, true), 5 * MS + MAX_STANDBY_NS);
    assert_eq!(waiter_tick(5 * MS, false), NONE);
    assert!(waiter_spins(WAITER_SPIN_GAP_NS));
    assert!(!waiter_spins(WAITER_SPIN_GAP_NS + 1));
    assert!(!waiter_spins(NONE), "no wait yet");
}
