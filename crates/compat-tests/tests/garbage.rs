//! The C ABI under garbage input: `c/garbage.c` (compiled here against the
//! installed rdma-core headers, run against `target/compat`) calls the
//! verbs with impossible sizes, ports, indices and access flags, work
//! requests a QP cannot take (among them an SGE count far above the QP's
//! limit, with the list ending at a guard page), objects still in use,
//! unmapped memory — where rdma-core returns an error, softrdma must return
//! the same one — and NULL, destroyed, wrong-kind and wild object pointers
//! to every exported destructor and constructor — where rdma-core would
//! dereference them, softrdma returns EINVAL. Then an RDMA WRITE on a QP
//! connected to itself must still work.
//!
//! The program prints one line per check; the test fails on any `FAIL`
//! line, a crash, or too few checks. Needs gcc and libibverbs-dev.

use softrdma_compat_tests::c_programs::{LIBIBVERBS, build_c_program};
use softrdma_compat_tests::*;
use std::path::Path;
use std::time::Duration;

/// `127.61.x.y`: this file's loopback addresses.
const NET: u8 = 61;

#[test]
fn verbs_under_garbage_fail_cleanly_and_the_device_survives() {
    require_compat_dir();
    let bin = build_c_program(
        "garbage",
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &[LIBIBVERBS],
    );
    let addr = unique_loopback_addr(NET);
    let out = run_with_timeout(
        &mut Endpoint::compat(&bin, addr).command::<&str>(&[]),
        Duration::from_secs(60),
    );
    let fails: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .collect();
    let oks = out.stdout.lines().filter(|l| l.starts_with("ok ")).count();
    println!("{oks} checks passed");
    assert!(
        out.signal().is_none(),
        "garbage.c was killed by signal {:?}:\n{out}",
        out.signal()
    );
    assert!(
        fails.is_empty(),
        "failed checks:\n{}\n\n{out}",
        fails.join("\n")
    );
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(oks >= 90, "only {oks} checks ran:\n{out}");
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("ok   an RDMA WRITE")),
        "{out}"
    );
}
