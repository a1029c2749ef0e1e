//! Issue 4: Debian's unmodified `ibv_{rc,uc,ud,srq}_pingpong` as server and
//! client, two processes on this host against `target/compat`, each with its
//! own loopback `SOFTRDMA_ADDR` (127.42.x.y) and a unique TCP port. Each pair
//! must finish within a timeout with exit 0, empty stderr, consistent
//! addresses (each side's remote QPN/PSN/GID is the other's local one) and
//! the expected iteration and byte counts (see `check_pingpong`).
//!
//! The tests of this file run concurrently as cargo's test threads allow
//! (by default one per core): at most that many pairs at a time.
//!
//! Needs `cargo xtask compat` and ibverbs-utils; fails (never skips) without.
//! `SOFTRDMA_COMPAT_PCAP_DIR=<dir>` captures every process's packets there.

use softrdma_compat_tests::pingpong::{c_program, run_pingpong_pair};
use softrdma_compat_tests::*;

/// `127.42.x.y`: this file's loopback addresses.
const NET: u8 = 42;

fn run_case(name: &str) {
    let case = case(name);
    let bin = c_program(&case);
    let server = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let client = Endpoint::compat(&bin, unique_loopback_addr(NET));
    run_pingpong_case(&case, server, client, "loopback");
}

// One test per ping-pong case, and one that fails if a case has none.
softrdma_compat_tests::pingpong_tests!(run_case);

/// The harness itself: a client that fails gets its waiting server killed
/// after a short grace, and the report carries both processes' output.
#[test]
fn harness_reports_a_failed_client_and_kills_its_server() {
    let case = case("rc_default");
    let bin = c_program(&case);
    let server = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let client = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let port = unique_tcp_port();
    let wrong_port = unique_tcp_port();
    let out = run_pair(
        &mut server.command(&["-g", "0", "-p", &port.to_string()]),
        port,
        // Nobody listens on `wrong_port`: "Couldn't connect", exit 1.
        &mut client.command(&[
            "-g",
            "0",
            "-p",
            &wrong_port.to_string(),
            &server.addr.to_string(),
        ]),
        std::time::Duration::from_secs(60),
    );
    assert!(out.server.timed_out(), "{out}");
    assert!(
        out.server.elapsed < std::time::Duration::from_secs(30),
        "{out}"
    );
    assert_eq!(out.client.as_ref().unwrap().code(), Some(1), "{out}");
    let err = check_pingpong(&case, &out, server.addr, client.addr).unwrap_err();
    for part in [
        "===== server =====",
        "===== client =====",
        "Couldn't connect",
    ] {
        assert!(err.contains(part), "{part:?} missing from:\n{err}");
    }
}

/// The harness itself: a pair that hangs (a UC client talking to an RC
/// server: its packets are dropped, and it waits forever for a reply) is
/// killed at the timeout.
#[test]
fn harness_kills_a_hanging_pair_at_the_timeout() {
    let uc = c_program(&case("uc_default"));
    let rc = c_program(&case("rc_default"));
    let server = Endpoint::compat(&rc, unique_loopback_addr(NET));
    let client = Endpoint::compat(&uc, unique_loopback_addr(NET));
    let out = run_pingpong_pair(&server, &client, &[], std::time::Duration::from_secs(4));
    assert!(out.server.timed_out(), "{out}");
    assert!(out.client.as_ref().unwrap().timed_out(), "{out}");
    assert!(out.to_string().contains("TIMED OUT"), "{out}");
    assert!(!out.both_succeeded());
}
