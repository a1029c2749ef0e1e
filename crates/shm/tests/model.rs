//! A model check of the link protocol (issue 17): every interleaving, at the
//! granularity of the calls the engine makes, of
//! - a producer and a receiver that goes to sleep (wake-ups: no push is ever
//!   left in a lane while its receiver sleeps without a doorbell), and
//! - a producer that dies while the next holder of its member slot joins and
//!   attaches and the receiver reclaims the dead producer's lane (slot
//!   reuse: the new holder's datagrams are never wiped, nothing is read
//!   twice or out of order, an attach never sticks in a reclaim);
//!
//! and seeded random schedules for order, wrap-around and full lanes.
//!
//! The calls run on a real inbox (a memfd, attached through
//! `/proc/self/fd`); only the scheduling is the model's, in one thread, so
//! every run is the same. Each schedule is replayed from a fresh inbox.
//! The checker is shown to find a lost wake-up in a receiver that checks
//! for work before raising its doorbell flag (the race the protocol's
//! re-check closes), so it can fail.

use softrdma_shm::{Inbox, Outlet, PushError, SLOTS};
use std::cell::RefCell;
use std::net::SocketAddr;

fn src() -> SocketAddr {
    "127.0.0.1:4791".parse().unwrap()
}

/// The choices of one schedule: replays `prefix`, then takes the first
/// option at every later decision, recording how many there were.
struct Chooser {
    prefix: Vec<usize>,
    made: Vec<(usize, usize)>,
}

impl Chooser {
    fn pick(&mut self, options: usize) -> usize {
        assert!(options > 0);
        let c = self.prefix.get(self.made.len()).copied().unwrap_or(0);
        assert!(c < options, "a replayed schedule diverged");
        self.made.push((c, options));
        c
    }
}

/// Runs `schedule` once per distinct sequence of choices (depth first, by
/// replay); returns how many schedules there were and the first failure.
fn explore(mut schedule: impl FnMut(&mut Chooser) -> Result<(), String>) -> (u64, Option<String>) {
    let mut prefix = Vec::new();
    let mut count = 0;
    let mut first_failure = None;
    loop {
        let mut ch = Chooser {
            prefix: std::mem::take(&mut prefix),
            made: Vec::new(),
        };
        let r = schedule(&mut ch);
        count += 1;
        if let Err(e) = r {
            let choices: Vec<usize> = ch.made.iter().map(|&(c, _)| c).collect();
            first_failure.get_or_insert(format!("{e} (schedule {choices:?})"));
        }
        let mut made = ch.made;
        loop {
            match made.pop() {
                None => return (count, first_failure),
                Some((c, n)) if c + 1 < n => {
                    made.push((c + 1, n));
                    break;
                }
                Some(_) => {}
            }
        }
        prefix = made.into_iter().map(|(c, _)| c).collect();
    }
}

/// How the modelled receiver goes to sleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sleep {
    /// The engine's: `want_doorbell` raises the flag, then re-checks the
    /// lanes (and stays up if something arrived).
    Protocol,
    /// Broken on purpose: looks for work first, raises the flag after.
    CheckThenRaise,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receiver {
    Awake,
    /// (`CheckThenRaise` only) found nothing, flag not raised yet.
    Deciding,
    Asleep,
}

/// One schedule of `k` single-datagram pushes against a receiver that
/// sleeps whenever it finds nothing. The producer's steps: push datagram
/// i; look at the doorbell flag and ring if raised. The receiver's: poll
/// everything, then decide to sleep; asleep, it runs again only once rung
/// (the doorbell datagram makes its socket readable; reading it lowers the
/// flag, as the progress thread's `shm_awake` does).
fn wake_schedule(ch: &mut Chooser, k: u64, sleep: Sleep) -> Result<(), String> {
    let inbox = Inbox::create().unwrap();
    let out = Outlet::attach(std::process::id(), inbox.fd(), 5, 1).unwrap();
    let mut pc = 0u64;
    let mut rung = false;
    let mut r = Receiver::Awake;
    let mut got = 0u64;
    let mut steps = 0;
    loop {
        let producer = pc < 2 * k;
        let receiver = r != Receiver::Asleep || rung;
        let runs_producer = match (producer, receiver) {
            (false, false) => break,
            (true, false) => true,
            (false, true) => false,
            (true, true) => ch.pick(2) == 0,
        };
        steps += 1;
        assert!(steps < 100 * k + 100, "the receiver never settles");
        if runs_producer {
            if pc.is_multiple_of(2) {
                out.push(src(), src().ip(), &(pc / 2).to_le_bytes())
                    .map_err(|e| format!("push failed: {e:?}"))?;
            } else if out.doorbell_wanted() {
                rung = true;
            }
            pc += 1;
            continue;
        }
        match r {
            Receiver::Asleep => {
                rung = false;
                inbox.awake();
                r = Receiver::Awake;
            }
            Receiver::Awake => {
                let mut order = Ok(());
                inbox.poll(usize::MAX, |_, e| {
                    let v = u64::from_le_bytes(e.data.try_into().unwrap_or_default());
                    if v != got {
                        order = Err(format!("datagram {v} arrived, {got} expected"));
                    }
                    got += 1;
                });
                order?;
                match sleep {
                    Sleep::Protocol => {
                        if inbox.want_doorbell() {
                            inbox.awake();
                        } else {
                            r = Receiver::Asleep;
                        }
                    }
                    Sleep::CheckThenRaise => {
                        if !inbox.has_work() {
                            r = Receiver::Deciding;
                        }
                    }
                }
            }
            Receiver::Deciding => {
                let _ = inbox.want_doorbell();
                r = Receiver::Asleep;
            }
        }
    }
    if got != k {
        return Err(format!(
            "lost wake-up: the receiver sleeps with {} datagram(s) in its lane and no doorbell",
            k - got
        ));
    }
    Ok(())
}

#[test]
fn every_interleaving_of_pushes_and_sleeps_wakes_the_receiver() {
    for k in 1..=4 {
        let (n, failure) = explore(|ch| wake_schedule(ch, k, Sleep::Protocol));
        assert!(failure.is_none(), "{k} pushes, {n} schedules: {failure:?}");
        println!("{k} pushes: {n} schedules");
        assert!(n > k * k, "{k} pushes: only {n} schedules explored");
    }
}

#[test]
fn the_checker_finds_the_lost_wake_up_of_a_receiver_that_raises_its_flag_late() {
    let (n, failure) = explore(|ch| wake_schedule(ch, 2, Sleep::CheckThenRaise));
    let failure = failure.expect("a receiver that checks before raising its flag loses a wake-up");
    assert!(
        failure.contains("lost wake-up"),
        "{failure} ({n} schedules)"
    );
}

/// The slot-reuse model's shared state (the reclaim's `live` callback runs
/// steps of the new holder, so it is behind a `RefCell`).
struct Reuse {
    /// The registry's answer for the slot: the live holder's generation.
    holder: Option<u64>,
    old: Option<Outlet>,
    /// Steps done by the old holder (attach, push a0, push a1, die) and the
    /// new one (join, attach, push b0, push b1).
    old_pc: usize,
    new_pc: usize,
    new: Option<Outlet>,
    error: Option<String>,
}

const SLOT: u8 = 7;

impl Reuse {
    fn old_can(&self) -> bool {
        self.old_pc < 4
    }

    /// The slot is taken again only once its holder died.
    fn new_can(&self) -> bool {
        self.old_pc == 4 && self.new_pc < 4
    }

    fn step_old(&mut self, fd: i32) {
        match self.old_pc {
            0 => match Outlet::attach(std::process::id(), fd, SLOT, 1) {
                Ok(o) => self.old = Some(o),
                Err(e) => self.fail(format!("the first holder's attach failed: {e}")),
            },
            1 | 2 => {
                let v = [b'a', (self.old_pc - 1) as u8];
                if let Some(o) = &self.old
                    && let Err(e) = o.push(src(), src().ip(), &v)
                {
                    self.fail(format!("push a: {e:?}"));
                }
            }
            _ => {
                // SIGKILL: its mapping goes, the registry frees the slot.
                self.old = None;
                self.holder = None;
            }
        }
        self.old_pc += 1;
    }

    fn step_new(&mut self, fd: i32) {
        match self.new_pc {
            0 => self.holder = Some(2),
            1 => match Outlet::attach(std::process::id(), fd, SLOT, 2) {
                Ok(o) => self.new = Some(o),
                Err(e) => self.fail(format!("the next holder's attach failed: {e}")),
            },
            _ => {
                let v = [b'b', (self.new_pc - 2) as u8];
                if let Some(o) = &self.new
                    && let Err(e) = o.push(src(), src().ip(), &v)
                {
                    self.fail(format!("push b: {e:?}"));
                }
            }
        }
        self.new_pc += 1;
    }

    fn fail(&mut self, e: String) {
        self.error.get_or_insert(e);
    }
}

/// One schedule of the slot-reuse model. The receiver has `budget` steps,
/// each a poll or a reclaim; inside a reclaim, after it read a lane's
/// owner and before it compares it with the registry's answer, any number
/// of the new holder's next steps may run (the window the reclaim's
/// compare-and-swap closes).
///
/// `stale`: broken on purpose, the receiver asks the registry before the
/// new holder's steps and the reclaim, from a list taken earlier (what
/// `Inbox::reclaim`'s contract forbids).
fn reuse_schedule(ch: &mut Chooser, budget: usize, stale: bool) -> Result<(), String> {
    let inbox = Inbox::create().unwrap();
    let fd = inbox.fd();
    let m = RefCell::new(Reuse {
        holder: Some(1),
        old: None,
        old_pc: 0,
        new_pc: 0,
        new: None,
        error: None,
    });
    let mut delivered: Vec<Vec<u8>> = Vec::new();
    let mut receiver_left = budget;
    loop {
        let (old, new) = {
            let m = m.borrow();
            (m.old_can(), m.new_can())
        };
        let mut actors = Vec::new();
        if old {
            actors.push(0);
        }
        if new {
            actors.push(1);
        }
        if receiver_left > 0 {
            actors.push(2);
        }
        if actors.is_empty() {
            break;
        }
        let who = actors[ch.pick(actors.len())];
        match who {
            0 => m.borrow_mut().step_old(fd),
            1 => m.borrow_mut().step_new(fd),
            _ => {
                receiver_left -= 1;
                if ch.pick(2) == 0 {
                    inbox.poll(usize::MAX, |slot, e| {
                        assert_eq!(slot, SLOT);
                        delivered.push(e.data.to_vec());
                    });
                } else {
                    // How many of the new holder's steps run inside `live`.
                    let inside = ch.pick(3);
                    if stale {
                        let mut mm = m.borrow_mut();
                        let snapshot = mm.holder;
                        for _ in 0..inside {
                            if mm.new_can() {
                                mm.step_new(fd);
                            }
                        }
                        drop(mm);
                        inbox.reclaim(|_| snapshot);
                        continue;
                    }
                    inbox.reclaim(|slot| {
                        let mut m = m.borrow_mut();
                        for _ in 0..inside {
                            if m.new_can() {
                                m.step_new(fd);
                            }
                        }
                        assert_eq!(slot, SLOT);
                        m.holder
                    });
                }
            }
        }
    }
    inbox.poll(usize::MAX, |_, e| delivered.push(e.data.to_vec()));
    let m = m.into_inner();
    if let Some(e) = m.error {
        return Err(e);
    }
    let b: Vec<&Vec<u8>> = delivered.iter().filter(|d| d[0] == b'b').collect();
    if b != [&vec![b'b', 0], &vec![b'b', 1]] {
        return Err(format!(
            "the next holder's datagrams were not delivered once each, in order: {delivered:?}"
        ));
    }
    let first_b = delivered.iter().position(|d| d[0] == b'b').unwrap_or(0);
    let a: Vec<&Vec<u8>> = delivered.iter().filter(|d| d[0] == b'a').collect();
    let a_ok = matches!(a.len(), 0..=2)
        && a.iter().enumerate().all(|(i, d)| usize::from(d[1]) == i)
        && delivered[first_b..].iter().all(|d| d[0] == b'b');
    if !a_ok {
        return Err(format!(
            "the dead holder's datagrams came twice, out of order or after the next holder's: {delivered:?}"
        ));
    }
    if inbox.lane_owner(SLOT) != 2 {
        return Err(format!(
            "the lane ends owned by {}, not by the live holder",
            inbox.lane_owner(SLOT)
        ));
    }
    Ok(())
}

#[test]
fn every_interleaving_of_a_death_a_slot_reuse_and_reclaims_keeps_the_new_holders_datagrams() {
    let (n, failure) = explore(|ch| reuse_schedule(ch, 3, false));
    println!("{n} schedules");
    assert!(failure.is_none(), "{n} schedules: {failure:?}");
    assert!(n > 1000, "only {n} schedules explored");
}

#[test]
fn the_checker_finds_the_wiped_lane_of_a_reclaim_that_asks_the_registry_too_early() {
    let (n, failure) = explore(|ch| reuse_schedule(ch, 3, true));
    let failure =
        failure.expect("a reclaim deciding from a stale list wipes the next holder's lane");
    assert!(failure.contains("holder"), "{failure} ({n} schedules)");
}

/// A tiny deterministic generator (xorshift64*), so every run takes the
/// same schedule.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// A datagram's bytes: its sequence number and a length that varies with it.
fn datagram(seq: u64) -> Vec<u8> {
    let mut d = seq.to_le_bytes().to_vec();
    d.resize(8 + (seq % 300) as usize, (seq % 251) as u8);
    d
}

/// Random batches staged and published against random pops, many lanes'
/// worth: order and contents are kept across wrap-around; a stage is
/// refused exactly when published and staged datagrams fill every slot.
#[test]
fn seeded_schedules_keep_order_across_wrap_around_and_full_lanes() {
    for seed in [1u64, 0x9E37_79B9_7F4A_7C15, 42] {
        let inbox = Inbox::create().unwrap();
        let out = Outlet::attach(std::process::id(), inbox.fd(), 9, 1).unwrap();
        let mut rng = Rng(seed);
        let total = 5 * SLOTS + 37;
        let (mut next_push, mut next_pop, mut staged) = (0u64, 0u64, 0u64);
        let mut refused = 0;
        while next_pop < total {
            // Producer steps come twice as often as pops, and pops take
            // fewer: the lane fills up again and again.
            match rng.below(4) {
                0 | 1 => {
                    for _ in 0..=rng.below(80) {
                        if next_push == total {
                            break;
                        }
                        match out.stage(src(), src().ip(), &datagram(next_push)) {
                            Ok(()) => {
                                next_push += 1;
                                staged += 1;
                            }
                            Err(PushError::Full) => {
                                assert_eq!(out.backlog() + staged, SLOTS, "refused while not full");
                                refused += 1;
                                break;
                            }
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                    if rng.below(2) == 0 {
                        out.publish();
                        staged = 0;
                    }
                }
                2 => {
                    out.publish();
                    staged = 0;
                }
                _ => {
                    let max = 1 + rng.below(100) as usize;
                    let before = out.backlog();
                    let n = inbox.poll(max, |slot, e| {
                        assert_eq!(slot, 9);
                        assert_eq!(e.data, datagram(next_pop), "datagram {next_pop}");
                        next_pop += 1;
                    });
                    assert_eq!(n as u64, before.min(max as u64), "staged ones stay unseen");
                }
            }
        }
        assert_eq!(next_push, total);
        println!("seed {seed}: {refused} stages refused on a full lane");
        assert!(refused > 0, "seed {seed}: the lane never filled up");
        assert!(!inbox.has_work());
    }
}
