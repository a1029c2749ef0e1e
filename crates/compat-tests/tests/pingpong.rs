//! Issue 4: Debian's unmodified `ibv_{rc,uc,ud,srq}_pingpong` (and, issue 20,
//! `ibv_xsrq_pingpong` with and without `-e`, checked by `run_xsrq_pingpong`) as server and
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

/// Issue 20: Debian's `ibv_xsrq_pingpong` (XRC domain, XRC SRQ, XRC send and
/// receive QPs), polling and with completion events.
#[test]
fn xsrq_pingpong() {
    let bin = require_binary("ibv_xsrq_pingpong");
    let server = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let client = Endpoint::compat(&bin, unique_loopback_addr(NET));
    run_xsrq_pingpong(server, client, &[], "loopback");
}

#[test]
fn xsrq_pingpong_events() {
    let bin = require_binary("ibv_xsrq_pingpong");
    let server = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let client = Endpoint::compat(&bin, unique_loopback_addr(NET));
    run_xsrq_pingpong(server, client, &["-e"], "loopback");
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
    let out = run_pingpong_pair(&server, &client, &[], std::time::Duration::from_secs(4));
    assert!(out.server.timed_out(), "{out}");
    assert!(out.client.as_ref().unwrap().timed_out(), "{out}");
    assert!(out.to_string().contains("TIMED OUT"), "{out}");
    assert!(!out.both_succeeded());
}

/// `ibv_rc_pingpong -t` (extended CQs with completion timestamps; each side
/// prints the spread of its receive completions' clock) and `-j` (buffers in
/// device memory: `ibv_alloc_dm`, `ibv_reg_dm_mr`, `ibv_memcpy_to/from_dm`).
/// Both sides exit 0 after all iterations; `-t`'s clock figures are sane.
#[test]
fn rc_pingpong_timestamps_and_device_memory() {
    let bin = c_program(&case("rc_default"));
    for opt in ["-t", "-j"] {
        let server = Endpoint::compat(&bin, unique_loopback_addr(NET));
        let client = Endpoint::compat(&bin, unique_loopback_addr(NET));
        let port = unique_tcp_port().to_string();
        let out = run_pair(
            &mut server.command(&["-g", "0", "-n", "200", opt, "-p", &port]),
            port.parse().unwrap(),
            &mut client.command(&[
                "-g",
                "0",
                "-n",
                "200",
                opt,
                "-p",
                &port,
                &server.addr.to_string(),
            ]),
            std::time::Duration::from_secs(60),
        );
        let client_run = out.client.as_ref().expect("client started");
        for run in [&out.server, client_run] {
            assert_eq!(run.code(), Some(0), "{opt}: {out}");
            assert!(run.stderr.is_empty(), "{opt}: {out}");
            assert!(run.stdout.contains("200 iters in"), "{opt}: {out}");
            if opt == "-t" {
                // "Min/Max/Average receive completion clock cycles = N":
                // the device clock ticks in ns, so these are gaps between
                // completions, well under the 60 s the pair may take.
                let value = |what: &str| -> f64 {
                    let line = run
                        .stdout
                        .lines()
                        .find(|l| l.starts_with(what))
                        .unwrap_or_else(|| panic!("no {what:?} line: {out}"));
                    line.rsplit('=').next().unwrap().trim().parse().unwrap()
                };
                let min = value("Min receive completion clock cycles");
                let max = value("Max receive completion clock cycles");
                let avg = value("Average receive completion clock cycles");
                assert!(0.0 < min && min <= avg && avg <= max && max < 60e9, "{out}");
            }
        }
    }
}
