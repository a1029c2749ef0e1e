//! Helpers of the `backend_*` tests (issue 12): softrdma's own drop-in
//! rdma-core in `target/compat` stands in for "the system's rdma-core", and
//! each side of an exchange is a separate process on a chosen backend:
//!
//! - rdma-core side: `SOFTRDMA_BACKEND=rdma-core LD_LIBRARY_PATH=target/compat`
//!   (the dlopen'ed library runs its own software device, configured by
//!   `SOFTRDMA_ADDR`/`SOFTRDMA_PORT` like any softrdma device);
//! - native side: `SOFTRDMA_BACKEND=native`.
//!
//! Besides the examples, children are this very test binary, re-run with
//! `--exact <child test> --ignored`: the child tests are `#[ignore]`d and do
//! nothing unless [`ROLE_ENV`] is set, so a plain `cargo test` only runs the
//! parents.
#![allow(dead_code)]

use crate::common::Proc;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// Hang protection for each child (never a performance assertion).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(90);

/// Set in children: which role to play (and that they are children).
pub(crate) const ROLE_ENV: &str = "SOFTRDMA_BACKEND_TEST_ROLE";

/// The backend a child runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// softrdma's engine in the process.
    Native,
    /// The dlopen backend over `target/compat`.
    RdmaCore,
}

impl Side {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Side::Native => "native",
            Side::RdmaCore => "rdma-core",
        }
    }
}

/// The cargo target directory this test binary was built into.
pub(crate) fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("test binaries live in target/<profile>/deps")
        .to_path_buf()
}

/// `target/compat`, where `cargo xtask compat` puts softrdma's drop-in
/// `libibverbs.so.1` and `librdmacm.so.1`; panics with what to run if they
/// are not there.
pub(crate) fn compat_dir() -> PathBuf {
    let dir = target_dir().join("compat");
    for lib in ["libibverbs.so.1", "librdmacm.so.1"] {
        assert!(
            dir.join(lib).is_file(),
            "{} is missing: the backend tests use softrdma's drop-in rdma-core as \
             \"the system's\"; run `cargo xtask compat` first (CI runs it before `cargo test`)",
            dir.join(lib).display()
        );
    }
    dir.canonicalize().expect("canonical target/compat")
}

/// Environment of a process on `side` with device address `addr` on UDP `port`.
pub(crate) fn on_side(cmd: &mut Command, side: Side, addr: &str, port: u16) {
    cmd.env("SOFTRDMA_ADDR", addr)
        .env("SOFTRDMA_PORT", port.to_string())
        .env("SOFTRDMA_BACKEND", side.name())
        .env_remove("SOFTRDMA_PCAP")
        .env_remove("LD_PRELOAD");
    match side {
        Side::Native => cmd.env_remove("LD_LIBRARY_PATH"),
        Side::RdmaCore => cmd.env("LD_LIBRARY_PATH", compat_dir()),
    };
}

/// This test binary, running only the (ignored) test `test` as `role`.
pub(crate) fn child(test: &str, role: &str, side: Side, addr: &str, port: u16) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("test executable path"));
    c.args([
        "--exact",
        test,
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env(ROLE_ENV, role);
    on_side(&mut c, side, addr, port);
    c
}

/// The role this process plays, if it is a child.
pub(crate) fn role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// Distinct `127.0.12.x` addresses for each pair of processes of a test
/// binary; `base` keeps the binaries apart.
pub(crate) fn addr_pair(base: u8) -> (String, String) {
    static NEXT: AtomicU8 = AtomicU8::new(0);
    let k = NEXT.fetch_add(2, Ordering::SeqCst) % 40;
    (
        format!("127.0.12.{}", base + k),
        format!("127.0.12.{}", base + k + 1),
    )
}

/// Runs `server` until `ready` shows on its stdout, then `client`; returns
/// both outputs once both exited (each must exit 0).
pub(crate) fn pair(
    server: Proc,
    ready: &str,
    client: impl FnOnce() -> Proc,
) -> (crate::common::Output, crate::common::Output) {
    let mut server = server;
    server.wait_for(ready, TIMEOUT, |o| o.contains(ready));
    let client = client();
    let c = client.finish(TIMEOUT);
    let s = server.finish(TIMEOUT);
    crate::common::assert_all_succeeded(&[&s, &c]);
    (s, c)
}

/// The `backend: ...` line a program printed, checked against `side`.
pub(crate) fn check_backend_line(o: &crate::common::Output, side: Side) {
    let l = o.line("backend: ");
    // (A child test's line starts with libtest's "test <name> ... ".)
    let l = &l[l.find("backend: ").unwrap_or(0)..];
    match side {
        Side::Native => assert_eq!(l, "backend: native", "{o}"),
        Side::RdmaCore => {
            let lib = compat_dir().join("libibverbs.so.1");
            assert_eq!(l, format!("backend: rdma-core ({})", lib.display()), "{o}");
        }
    }
}
