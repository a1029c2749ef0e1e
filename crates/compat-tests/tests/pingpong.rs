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

use softrdma_compat_tests::pingpong::c_program;
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

#[test]
fn rc_pingpong_default() {
    run_case("rc_default");
}

#[test]
fn rc_pingpong_size_1() {
    run_case("rc_size_1");
}

#[test]
fn rc_pingpong_multi_packet_65536_mtu_1024() {
    run_case("rc_multi_packet");
}

#[test]
fn rc_pingpong_10000_iterations() {
    run_case("rc_10000_iters");
}

#[test]
fn rc_pingpong_completion_events() {
    run_case("rc_events");
}

#[test]
fn uc_pingpong_default() {
    run_case("uc_default");
}

#[test]
fn ud_pingpong_1024() {
    run_case("ud_1024");
}

#[test]
fn srq_pingpong_16_qps() {
    run_case("srq_16_qps");
}

#[test]
fn every_case_has_a_test() {
    // Keeps this file in step with the case list.
    let src = include_str!("pingpong.rs");
    for c in CASES {
        assert!(
            src.contains(&format!("run_case(\"{}\")", c.name)),
            "no test for {}",
            c.name
        );
    }
}

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
    let port = unique_tcp_port();
    let p = port.to_string();
    let out = run_pair(
        &mut server.command(&["-g", "0", "-p", &p]),
        port,
        &mut client.command(&["-g", "0", "-p", &p, &server.addr.to_string()]),
        std::time::Duration::from_secs(4),
    );
    assert!(out.server.timed_out(), "{out}");
    assert!(out.client.as_ref().unwrap().timed_out(), "{out}");
    assert!(out.to_string().contains("TIMED OUT"), "{out}");
    assert!(!out.both_succeeded());
}
