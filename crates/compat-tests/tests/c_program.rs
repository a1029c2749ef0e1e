//! Issue 4, "beyond the tools": `c/rc_demo.c`, a C program written from
//! rdma-core's documentation (not one of its examples), compiled here with
//! `cc ... -libverbs` against the installed headers and run against
//! `target/compat` as two processes: RC over a TCP side channel with RDMA
//! WRITE WITH IMMEDIATE, an inline SEND, fetch-and-add and compare-and-swap,
//! RDMA READ back, and a wrong-rkey RDMA WRITE that must fail with
//! `IBV_WC_REM_ACCESS_ERR` without touching the peer (see the program's
//! header for every check). Also: `ibv_wc_status_str` prints what rdma-core
//! prints.
//!
//! Needs `cargo xtask compat`, gcc and libibverbs-dev; fails (never skips) without.

use std::path::{Path, PathBuf};
use std::time::Duration;

use softrdma_compat_tests::c_programs::{LIBIBVERBS, build_c_program};
use softrdma_compat_tests::pair::pcap_path;
use softrdma_compat_tests::pingpong::run_pingpong_pair;
use softrdma_compat_tests::*;

/// `127.45.x.y`: this file's loopback addresses.
const NET: u8 = 45;
const TIMEOUT: Duration = Duration::from_secs(60);

/// rdma-core 44's `ibv_wc_status_str` for 0..=24 and 1000 (libibverbs/enum_strs.c).
const STATUS_STRINGS: &str = "0 success
1 local length error
2 local QP operation error
3 local EE context operation error
4 local protection error
5 Work Request Flushed Error
6 memory management operation error
7 bad response error
8 local access error
9 remote invalid request error
10 remote access error
11 remote operation error
12 transport retry counter exceeded
13 RNR retry counter exceeded
14 local RDD violation error
15 remote invalid RD request
16 aborted error
17 invalid EE context number
18 invalid EE context state
19 fatal error
20 response timeout error
21 general error
22 TM error
23 TM software rendezvous
24 unknown
1000 unknown
";

/// `c/rc_demo.c`, compiled once per test process.
fn rc_demo() -> PathBuf {
    build_c_program(
        "rc_demo",
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &[LIBIBVERBS],
    )
}

#[test]
fn links_against_target_compat() {
    let bin = rc_demo();
    let compat = require_compat_dir();
    let out = run_with_timeout(compat_command("ldd").arg(&bin), TIMEOUT);
    assert_eq!(out.code(), Some(0), "{out}");
    let expected = format!(
        "libibverbs.so.1 => {}",
        compat.join("libibverbs.so.1").display()
    );
    assert!(
        out.stdout.lines().any(|l| l.trim().starts_with(&expected)),
        "`{expected}` not in ldd's output: {out}"
    );
}

#[test]
fn wc_status_strings_are_rdma_cores() {
    let bin = rc_demo();
    let ours = run_with_timeout(compat_command(&bin).arg("--strings"), TIMEOUT);
    assert_eq!(ours.code(), Some(0), "{ours}");
    assert_eq!(ours.stdout, STATUS_STRINGS, "{ours}");
    // And the same bytes as the system's real libibverbs (no device needed).
    let real = run_with_timeout(system_command(&bin).arg("--strings"), TIMEOUT);
    assert_eq!(real.code(), Some(0), "{real}");
    assert_eq!(
        ours.stdout, real.stdout,
        "ours:\n{ours}\nrdma-core:\n{real}"
    );
}

#[test]
fn rc_write_imm_inline_atomics_read_and_bad_rkey() {
    let bin = rc_demo();
    let compat = require_compat_dir();
    let server = Endpoint::compat(&bin, unique_loopback_addr(NET))
        .with_pcap(pcap_path("c_program-rc_demo-server"));
    let client = Endpoint::compat(&bin, unique_loopback_addr(NET))
        .with_pcap(pcap_path("c_program-rc_demo-client"));
    let out = run_pingpong_pair(&server, &client, &[], TIMEOUT);
    let lib = compat.join("libibverbs.so.1");
    let mut problems = Vec::new();
    for (who, run) in [
        ("server", Some(&out.server)),
        ("client", out.client.as_ref()),
    ] {
        let Some(run) = run else {
            problems.push(format!("{who}: not started"));
            continue;
        };
        if run.code() != Some(0) {
            problems.push(format!("{who}: did not exit with 0"));
        }
        if !run.stderr.is_empty() {
            problems.push(format!("{who}: wrote to stderr"));
        }
        if run.stdout.lines().last() != Some(&format!("{who}: PASS")) {
            problems.push(format!("{who}: no `{who}: PASS` at the end"));
        }
        if !run
            .stdout
            .contains(&format!("{who}: libibverbs {}", lib.display()))
        {
            problems.push(format!("{who}: did not load {}", lib.display()));
        }
        if !run.stdout.contains(&format!("{who}: device softrdma0")) {
            problems.push(format!("{who}: did not open softrdma0"));
        }
    }
    let expect = [
        (
            "server",
            "server: write with immediate 0xc0ffee01 delivered 1024 bytes",
        ),
        (
            "server",
            "server: inline send received: inline SEND from rc_demo, 48 bytes long",
        ),
        (
            "client",
            "client: wrong-rkey write completed with status 10: remote access error",
        ),
    ];
    for (who, line) in expect {
        let text = if who == "server" {
            Some(&out.server.stdout)
        } else {
            out.client.as_ref().map(|c| &c.stdout)
        };
        if !text.is_some_and(|t| t.contains(line)) {
            problems.push(format!("{who}: no `{line}`"));
        }
    }
    assert!(
        problems.is_empty(),
        "rc_demo pair failed:\n{}\n{out}",
        problems.join("\n")
    );
}
