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

use softrdma_compat_tests::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// `127.61.x.y`: this file's loopback addresses.
const NET: u8 = 61;

fn build() -> PathBuf {
    let header = Path::new("/usr/include/infiniband/verbs.h");
    assert!(
        header.is_file(),
        "{} is missing: install libibverbs-dev ({PACKAGES_HINT})",
        header.display()
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/garbage.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("garbage");
    let r = Command::new("cc")
        .args([
            "-std=gnu11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .arg("-libverbs")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc (apt-get install gcc): {e}"));
    assert!(
        r.status.success(),
        "compiling {} failed:\n{}{}",
        src.display(),
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
    out
}

#[test]
fn verbs_under_garbage_fail_cleanly_and_the_device_survives() {
    require_compat_dir();
    let bin = build();
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
