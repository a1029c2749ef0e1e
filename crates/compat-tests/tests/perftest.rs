//! Issue 6: Debian's unmodified perftest programs against `target/compat`,
//! server and client as two processes on this host (loopback addresses
//! 127.48.x.y, one per process), with default options unless given:
//! `ib_write_bw`, `ib_write_lat`, `ib_read_bw`, `ib_read_lat`, `ib_send_bw`,
//! `ib_send_lat`, `ib_atomic_bw` and `ib_atomic_lat` (each with `-A
//! FETCH_AND_ADD` and `-A CMP_AND_SWAP`), all of them again with `-R`
//! (connection through rdma_cm), and `ib_write_bw -s 1048576 -n 200`,
//! `ib_send_bw -e`, `ib_send_lat -c UD`.
//!
//! Each pair must exit 0 on both sides with only perftest's "Device not
//! recognized" notice on stderr, show the test's title, `rdma_cm QPs : ON`
//! with `-R` (else OFF) and the connection type, and print a result line
//! with the expected `#bytes` and `#iterations` and sane numbers (BW average
//! and message rate > 0; 0 < t_min <= t_typical <= t_max) — on the client,
//! and on the server too except for the READ and atomic latency tests,
//! whose passive side prints none. At most two pairs run at a time.
//!
//! Needs `cargo xtask compat` and perftest; fails (never skips) without.

use std::sync::{Condvar, Mutex};

use softrdma_compat_tests::perftest::{CASES, perftest_case, run_perftest_case};
use softrdma_compat_tests::rdmacm::Host;
use softrdma_compat_tests::{require_compat_dir, unique_loopback_addr};

/// `127.48.x.y`: this file's loopback addresses.
const NET: u8 = 48;
/// Pairs running at once, whatever cargo's test threads.
const MAX_PAIRS: usize = 2;

static RUNNING: Mutex<usize> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// A slot among [`MAX_PAIRS`], released on drop (also on panic).
struct Slot;

impl Slot {
    fn take() -> Slot {
        let mut n = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        while *n >= MAX_PAIRS {
            n = FREED.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        *n += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        FREED.notify_one();
    }
}

fn run(name: &str, rdma_cm: bool) {
    let case = perftest_case(name);
    assert!(!rdma_cm || case.with_rdma_cm(), "{name} has no -R case");
    require_compat_dir();
    let _slot = Slot::take();
    let server = Host::local(unique_loopback_addr(NET));
    let client = Host::local(unique_loopback_addr(NET));
    run_perftest_case(&case, rdma_cm, &server, &client, "perftest");
}

macro_rules! cases {
    ($($name:ident: $case:literal;)*) => {
        $(
            mod $name {
                #[test]
                fn default() {
                    super::run($case, false);
                }

                #[test]
                fn rdma_cm() {
                    super::run($case, true);
                }
            }
        )*
    };
}

cases! {
    ib_write_bw: "write_bw";
    ib_write_lat: "write_lat";
    ib_read_bw: "read_bw";
    ib_read_lat: "read_lat";
    ib_send_bw: "send_bw";
    ib_send_lat: "send_lat";
    ib_atomic_bw_fetch_and_add: "atomic_bw_fetch_and_add";
    ib_atomic_bw_cmp_and_swap: "atomic_bw_cmp_and_swap";
    ib_atomic_lat_fetch_and_add: "atomic_lat_fetch_and_add";
    ib_atomic_lat_cmp_and_swap: "atomic_lat_cmp_and_swap";
}

#[test]
fn ib_write_bw_1m_200_iterations() {
    run("write_bw_1m_200", false);
}

#[test]
fn ib_send_bw_completion_events() {
    run("send_bw_events", false);
}

#[test]
fn ib_send_lat_ud() {
    run("send_lat_ud", false);
}

#[test]
fn every_case_has_a_test() {
    let src = include_str!("perftest.rs");
    for c in CASES {
        let listed = if c.with_rdma_cm() {
            format!(": \"{}\";", c.name)
        } else {
            format!("run(\"{}\", false)", c.name)
        };
        assert!(src.contains(&listed), "no test for {}", c.name);
    }
}
