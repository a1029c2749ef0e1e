//! What a lane itself costs a same-host message, next to the floor of one
//! cache line each way (issue 17; docs/PLAN-direct-queues.md, "Time per
//! step"). Two processes ping-pong a 40-byte datagram (an 8-byte SEND's
//! size) and print the one-way time, half the median round trip:
//!
//! * `line`: one 64-byte line per direction, a sequence word and the 40
//!   bytes in it: what any shared-memory transport pays (UCX's included);
//! * `lane`: a [`Ring`] per direction, as the engine's same-host path uses
//!   them (512 slots of 4 KiB: each message lands on a line and page not
//!   touched for 511 messages);
//! * `channel`: a [`Channel`] per direction (64 KiB each), records packed
//!   densely: the next record's header is on the line the last one ended
//!   on, or the next.
//!
//! `cargo run --release -p softrdma-shm --example lane_pingpong [ROUNDS]`
//!
//! Rounds run the three in turn, so the VM's mode changes hit both alike.

use softrdma_shm::{Channel, LANE_BYTES, Ring};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Round trips per measurement; the first tenth warms up.
const ITERS: u64 = 200_000;
const MSG: [u8; 40] = [7; 40];

/// Bytes of records per channel.
const CHANNEL_CAP: usize = 64 << 10;
/// The shared mapping: two lanes, two lines, two channels.
const LINES_AT: usize = 2 * LANE_BYTES;
const CHANNELS_AT: usize = LINES_AT + 128;
const MAP_BYTES: usize = CHANNELS_AT + 2 * Channel::bytes(CHANNEL_CAP);

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let mut line = Vec::new();
    let mut lane = Vec::new();
    let mut channel = Vec::new();
    for _ in 0..rounds {
        line.push(run(Kind::Line));
        lane.push(run(Kind::Lane));
        channel.push(run(Kind::Channel));
    }
    for (name, v) in [
        ("line", &mut line),
        ("lane", &mut lane),
        ("channel", &mut channel),
    ] {
        v.sort_by(f64::total_cmp);
        let s: Vec<String> = v.iter().map(|x| format!("{x:.0}")).collect();
        println!(
            "{name}: one way {:.0} ns (median of {rounds} rounds; all: {})",
            v[v.len() / 2],
            s.join(" ")
        );
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Line,
    Lane,
    Channel,
}

/// One measurement in a fresh mapping and a fresh child; ns one way.
fn run(kind: Kind) -> f64 {
    // SAFETY: a fresh anonymous shared mapping; checked below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            MAP_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED, "mmap");
    let base = base.cast::<u8>();
    // SAFETY: no threads run here; the child only ping-pongs and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        echo(kind, base);
        // SAFETY: leaves the child without running the parent's exit path.
        unsafe { libc::_exit(0) };
    }
    let one_way = ping(kind, base);
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed"
    );
    // SAFETY: the mapping made above, no view of it left.
    unsafe { libc::munmap(base.cast(), MAP_BYTES) };
    one_way
}

/// The line of direction `d` (0: to the child, 1: back).
fn line(base: *mut u8, d: usize) -> &'static AtomicU64 {
    // SAFETY: inside the mapping, 64-byte aligned, alive while the
    // measurement runs; only accessed atomically (the sequence word).
    unsafe { &*base.add(LINES_AT + 64 * d).cast::<AtomicU64>() }
}

fn send_line(base: *mut u8, d: usize, n: u64) {
    // SAFETY: the 40 bytes after the sequence word are the sender's until
    // the release store below publishes them.
    unsafe { std::ptr::copy_nonoverlapping(MSG.as_ptr(), base.add(LINES_AT + 64 * d + 8), 40) };
    line(base, d).store(n, Ordering::Release);
}

fn wait_line(base: *mut u8, d: usize, n: u64) {
    while line(base, d).load(Ordering::Acquire) != n {
        std::hint::spin_loop();
    }
    let mut got = [0u8; 40];
    // SAFETY: published by the acquire load above.
    unsafe { std::ptr::copy_nonoverlapping(base.add(LINES_AT + 64 * d + 8), got.as_mut_ptr(), 40) };
    assert_eq!(got, MSG);
}

fn lanes(base: *mut u8) -> [Ring; 2] {
    // SAFETY: each lane is LANE_BYTES inside the mapping, page-aligned and
    // zeroed; one process pushes into each and the other pops.
    unsafe { [Ring::new(base), Ring::new(base.add(LANE_BYTES))] }
}

const SRC: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4791);
const DST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn channels(base: *mut u8) -> [Channel; 2] {
    let at = |d: usize| CHANNELS_AT + d * Channel::bytes(CHANNEL_CAP);
    // SAFETY: each channel lies inside the mapping, 64-byte aligned and
    // zeroed; one process pushes into each and the other pops.
    unsafe {
        [
            Channel::new(base.add(at(0)), CHANNEL_CAP),
            Channel::new(base.add(at(1)), CHANNEL_CAP),
        ]
    }
}

fn wait_channel(c: &Channel) {
    loop {
        let mut ok = false;
        if c.pop(1, |r| ok = r == MSG) == 1 {
            assert!(ok);
            return;
        }
        std::hint::spin_loop();
    }
}

fn wait_lane(r: &Ring) {
    loop {
        let mut ok = false;
        if r.pop(1, |e| ok = e.data == MSG) == 1 {
            assert!(ok);
            return;
        }
        std::hint::spin_loop();
    }
}

fn echo(kind: Kind, base: *mut u8) {
    let lanes = lanes(base);
    let channels = channels(base);
    for n in 1..=ITERS {
        match kind {
            Kind::Line => {
                wait_line(base, 0, n);
                send_line(base, 1, n);
            }
            Kind::Lane => {
                wait_lane(&lanes[0]);
                lanes[1].push(SRC, DST, &MSG).expect("lane full");
            }
            Kind::Channel => {
                wait_channel(&channels[0]);
                channels[1].push(&MSG).expect("channel full");
            }
        }
    }
}

/// Round trips per timed batch: the clock is read once a batch.
const BATCH: u64 = 1_000;

/// The median batch's mean round trip / 2, in ns, after a warm-up tenth.
fn ping(kind: Kind, base: *mut u8) -> f64 {
    let lanes = lanes(base);
    let channels = channels(base);
    let mut batches = Vec::new();
    let mut t = Instant::now();
    for n in 1..=ITERS {
        match kind {
            Kind::Line => {
                send_line(base, 0, n);
                wait_line(base, 1, n);
            }
            Kind::Lane => {
                lanes[0].push(SRC, DST, &MSG).expect("lane full");
                wait_lane(&lanes[1]);
            }
            Kind::Channel => {
                channels[0].push(&MSG).expect("channel full");
                wait_channel(&channels[1]);
            }
        }
        if n % BATCH == 0 {
            if n > ITERS / 10 {
                batches.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
            }
            t = Instant::now();
        }
    }
    batches.sort_by(f64::total_cmp);
    batches[batches.len() / 2] / 2.0
}
