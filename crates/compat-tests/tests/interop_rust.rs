//! Issue 4: the Rust examples `rc_pingpong` and `ud_pingpong` of the
//! softrdma crate (rdma-core's command line, TCP exchange and output)
//! interoperate with Debian's unmodified C programs on `target/compat`: a
//! Rust server with a C client and a C server with a Rust client, for RC
//! (default and `-s 65536 -m 1024`) and UD (`-s 1024`), with the same checks
//! as `tests/pingpong.rs`.
//!
//! The examples are built on first use with `cargo build -p softrdma
//! --example ...` into the target directory of this test (a no-op when up to
//! date). Needs `cargo xtask compat` and ibverbs-utils; fails (never skips)
//! without.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use softrdma_compat_tests::pingpong::c_program;
use softrdma_compat_tests::*;

/// `127.44.x.y`: this file's loopback addresses.
const NET: u8 = 44;
const EXAMPLES: [&str; 2] = ["rc_pingpong", "ud_pingpong"];

/// `target/<profile>/examples`, after building the examples once per process.
fn examples_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test>-<hash>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test binaries live in target/<profile>/deps")
            .to_path_buf();
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug")
            .to_owned();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "softrdma"]);
        for e in EXAMPLES {
            cmd.args(["--example", e]);
        }
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            p => {
                cmd.args(["--profile", p]);
            }
        }
        if let Some(target) = profile_dir.parent() {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        cmd.current_dir(repo_root());
        // Waits for the build lock if another cargo holds it.
        let out = run_with_timeout(&mut cmd, Duration::from_secs(1200));
        assert_eq!(
            out.code(),
            Some(0),
            "building the softrdma examples failed: {out}"
        );
        profile_dir.join("examples")
    })
}

fn example(name: &str) -> PathBuf {
    let p = examples_dir().join(name);
    assert!(p.is_file(), "example binary {} is missing", p.display());
    p
}

/// `rust_server`: the Rust example serves and the C program connects; else
/// the reverse.
fn run(case_name: &str, rust_server: bool) {
    let case = case(case_name);
    let c_bin = c_program(&case);
    let rust_bin = example(case.program.trim_start_matches("ibv_"));
    let c_side = Endpoint::compat(&c_bin, unique_loopback_addr(NET));
    let rust_side = Endpoint::native(&rust_bin, unique_loopback_addr(NET));
    let (server, client, label) = if rust_server {
        (rust_side, c_side, "rust_server-c_client")
    } else {
        (c_side, rust_side, "c_server-rust_client")
    };
    run_pingpong_case(&case, server, client, label);
}

#[test]
fn rc_rust_server_c_client() {
    run("rc_default", true);
}

#[test]
fn rc_c_server_rust_client() {
    run("rc_default", false);
}

#[test]
fn rc_multi_packet_rust_server_c_client() {
    run("rc_multi_packet", true);
}

#[test]
fn rc_multi_packet_c_server_rust_client() {
    run("rc_multi_packet", false);
}

#[test]
fn ud_rust_server_c_client() {
    run("ud_1024", true);
}

#[test]
fn ud_c_server_rust_client() {
    run("ud_1024", false);
}
