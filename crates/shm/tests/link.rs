//! The link's protocol across threads and processes: order, full lanes,
//! wake-ups (a receiver that sleeps never misses a push), attach rules.

use softrdma_shm::{Inbox, Outlet, PushError, SLOTS};
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};

fn src() -> SocketAddr {
    "127.0.0.1:4791".parse().unwrap()
}

#[test]
fn own_inbox_round_trip_through_proc_fd() {
    let inbox = Inbox::create().unwrap();
    let out = Outlet::attach(std::process::id(), inbox.fd(), 9, 1).unwrap();
    out.push(src(), src().ip(), b"hello").unwrap();
    let mut got = Vec::new();
    assert_eq!(
        inbox.poll(16, |slot, e| got.push((slot, e.data.to_vec()))),
        1
    );
    assert_eq!(got, vec![(9, b"hello".to_vec())]);
    assert_eq!(inbox.poll(16, |_, _| panic!("empty")), 0);
    // The producer's incarnation is recorded; peer copy from the owner works.
    assert_eq!(inbox.lane_owner(9), 1);
    assert_eq!(inbox.lane_owner(10), 0);
    assert!(out.can_copy_from_owner());
    assert!(softrdma_shm::can_copy_from(std::process::id(), inbox.fd()));
    assert!(!softrdma_shm::can_copy_from(std::process::id(), 0));
}

#[test]
fn refuses_what_is_not_an_inbox() {
    let f = std::fs::File::open("/proc/self/status").unwrap();
    use std::os::fd::AsRawFd;
    let e = Outlet::attach(std::process::id(), f.as_raw_fd(), 1, 1).unwrap_err();
    assert!(e.to_string().contains("not a softrdma inbox"), "{e}");
    let e = Outlet::attach(std::process::id(), 9999, 1, 1).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
}

/// Two producers (lanes 3 and 200) and a consumer in threads, many times
/// the lane size: each lane's datagrams arrive complete and in order.
#[test]
fn concurrent_producers_keep_per_lane_order() {
    let inbox = Arc::new(Inbox::create().unwrap());
    let total = 20 * SLOTS;
    let producers: Vec<_> = [3u8, 200]
        .into_iter()
        .map(|slot| {
            let out = Outlet::attach(std::process::id(), inbox.fd(), slot, 1).unwrap();
            std::thread::spawn(move || {
                let mut i = 0u64;
                while i < total {
                    // Sizes vary with the sequence number: 8..=4096 bytes.
                    let len = 8 + (i as usize * 37) % 4089;
                    let mut d = vec![slot; len];
                    d[..8].copy_from_slice(&i.to_le_bytes());
                    match out.push(src(), src().ip(), &d) {
                        Ok(()) => i += 1,
                        Err(PushError::Full) => std::thread::yield_now(),
                        Err(e) => panic!("{e:?}"),
                    }
                }
            })
        })
        .collect();
    let mut next = [0u64; 256];
    while next[3] < total || next[200] < total {
        inbox.poll(64, |slot, e| {
            let i = u64::from_le_bytes(e.data[..8].try_into().unwrap());
            assert_eq!(i, next[usize::from(slot)], "lane {slot} in order");
            assert_eq!(e.data.len(), 8 + (i as usize * 37) % 4089);
            assert!(e.data[8..].iter().all(|&b| b == slot));
            next[usize::from(slot)] += 1;
        });
    }
    for p in producers {
        p.join().unwrap();
    }
}

/// The sleep protocol: the consumer announces it sleeps, re-checks, and
/// sleeps until rung; the producer rings whenever it sees the flag after a
/// push. 20 000 single-datagram rounds with no timeout on the sleep: a lost
/// wake-up hangs the test (the harness's timeout fails it).
#[test]
fn a_sleeping_receiver_is_always_woken() {
    let inbox = Arc::new(Inbox::create().unwrap());
    let bell = Arc::new((Mutex::new(0u64), Condvar::new()));
    let rounds = 20_000u64;
    let out = Outlet::attach(std::process::id(), inbox.fd(), 5, 1).unwrap();
    let b2 = Arc::clone(&bell);
    let producer = std::thread::spawn(move || {
        let mut rung = 0;
        for i in 0..rounds {
            while out.push(src(), src().ip(), &i.to_le_bytes()).is_err() {
                std::thread::yield_now();
            }
            if out.doorbell_wanted() {
                *b2.0.lock().unwrap() += 1;
                b2.1.notify_one();
                rung += 1;
            }
        }
        rung
    });
    let mut got = 0u64;
    let mut seen_bells = 0;
    while got < rounds {
        inbox.poll(64, |_, e| {
            assert_eq!(u64::from_le_bytes(e.data.try_into().unwrap()), got);
            got += 1;
        });
        if got < rounds && !inbox.want_doorbell() {
            let mut g = bell.0.lock().unwrap();
            while *g == seen_bells {
                g = bell.1.wait(g).unwrap();
            }
            seen_bells = *g;
        }
        inbox.awake();
    }
    let rung = producer.join().unwrap();
    assert!(rung > 0, "the receiver slept at least once");
}

/// Another process (a forked child) attaches and pushes; the parent reads.
#[test]
fn a_child_process_pushes_into_the_parents_inbox() {
    let inbox = Inbox::create().unwrap();
    let (pid, fd) = (std::process::id(), inbox.fd());
    // SAFETY: the child only attaches, pushes and exits (no locks taken
    // that another thread could hold: the test's other threads do not touch
    // this inbox).
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        let code = match Outlet::attach(pid, fd, 42, 1) {
            Ok(out) => {
                let mut i = 0u32;
                while i < 3000 {
                    if out.push(src(), src().ip(), &i.to_be_bytes()).is_ok() {
                        i += 1;
                    }
                }
                0
            }
            Err(_) => 1,
        };
        // SAFETY: leaves the forked child at once.
        unsafe { libc::_exit(code) };
    }
    let mut next = 0u32;
    let mut status = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while next < 3000 && std::time::Instant::now() < deadline {
        inbox.poll(64, |slot, e| {
            assert_eq!(slot, 42);
            assert_eq!(e.data, next.to_be_bytes());
            next += 1;
        });
    }
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    assert_eq!(status, 0, "the child attached and pushed");
    assert_eq!(next, 3000);
}

/// A lane whose producer is gone gives its memory back and starts afresh
/// for the slot's next holder; a live producer's lane is left alone.
#[test]
fn lanes_of_dead_producers_are_reclaimed() {
    let inbox = Inbox::create().unwrap();
    let me = std::process::id();
    let old = Outlet::attach(me, inbox.fd(), 7, 3).unwrap();
    for i in 0..100u32 {
        old.push(src(), src().ip(), &[i as u8; 4000]).unwrap();
    }
    let live_b = Outlet::attach(me, inbox.fd(), 8, 1).unwrap();
    live_b.push(src(), src().ip(), b"keep").unwrap();
    let before = inbox.resident_bytes();
    assert!(before > 400_000, "100 slots of 4 KB touched: {before}");
    // Slot 7's holder (generation 3) died; slot 8's (generation 1) lives.
    let live = |s: u8| (s == 8).then_some(1);
    assert_eq!(inbox.reclaim(live), 1);
    drop(old);
    let after = inbox.resident_bytes();
    assert!(
        after < 100_000,
        "the lane's ~400 KB came back: {before} -> {after}"
    );
    assert_eq!(inbox.reclaim(live), 0, "nothing more to clear");
    let mut got = Vec::new();
    inbox.poll(usize::MAX, |slot, e| got.push((slot, e.data.to_vec())));
    assert_eq!(
        got,
        vec![(8, b"keep".to_vec())],
        "the dead lane was emptied"
    );
    // The slot's next holder starts with an empty lane.
    let new = Outlet::attach(me, inbox.fd(), 7, 4).unwrap();
    new.push(src(), src().ip(), b"fresh").unwrap();
    inbox.poll(usize::MAX, |slot, e| {
        assert_eq!((slot, e.data), (7, &b"fresh"[..]))
    });
}
