//! Issue 11: `c/ext_verbs.c`, a C program using the extended verbs rdma-core's
//! pyverbs suite exercises (extended CQs and their poll functions, the
//! `ibv_wr_*` send API, memory windows of both types, atomic write,
//! `ibv_rereg_mr`, device/PD/MR import, parent domains), compiled with
//! `cc ... -libverbs` against the installed headers and run against
//! `target/compat` (see the program's header for every check). This runs in
//! CI whether or not python3-pyverbs is installed.
//!
//! Needs `cargo xtask compat`, gcc and libibverbs-dev; fails (never skips) without.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use softrdma_compat_tests::pair::unique_loopback_addr;
use softrdma_compat_tests::*;

/// `127.49.x.y`: this file's loopback addresses.
const NET: u8 = 49;

fn build() -> PathBuf {
    let header = Path::new("/usr/include/infiniband/verbs.h");
    assert!(
        header.is_file(),
        "{} is missing: install libibverbs-dev ({PACKAGES_HINT})",
        header.display()
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/ext_verbs.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ext_verbs");
    let result = Command::new("cc")
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
        result.status.success(),
        "compiling {} failed:\n{}{}",
        src.display(),
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

#[test]
fn extended_cq_qp_mw_rereg_import_parent_domain() {
    let bin = build();
    let addr = unique_loopback_addr(NET);
    let out = run_with_timeout(
        compat_command(&bin).env("SOFTRDMA_ADDR", addr.to_string()),
        Duration::from_secs(60),
    );
    assert_eq!(out.code(), Some(0), "{out}");
    assert_eq!(out.stdout.lines().last(), Some("PASS"), "{out}");
    assert!(!out.stdout.contains("FAILED"), "{out}");
}
