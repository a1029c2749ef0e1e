//! What the `softrdma run` tests share: the command, the Debian tools they
//! need, server/client pairs and the device counters.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub use softrdma_compat_tests::{
    RunOutput, Spawned, is_listening, require_compat_dir, run_with_timeout, spawn,
    unique_loopback_addr, unique_tcp_port,
};

pub const BIN: &str = env!("CARGO_BIN_EXE_softrdma");

/// `softrdma run -- ARGS` with its device at `addr`, no other inherited
/// softrdma configuration, and the libraries `cargo xtask compat` built.
pub fn softrdma_run<S: AsRef<std::ffi::OsStr>>(addr: Ipv4Addr, args: &[S]) -> Command {
    softrdma_run_with(addr, &[], args)
}

/// [`softrdma_run`] with options of `softrdma run` before the `--`.
pub fn softrdma_run_with<S: AsRef<std::ffi::OsStr>>(
    addr: Ipv4Addr,
    options: &[&str],
    args: &[S],
) -> Command {
    let mut c = softrdma(addr);
    c.arg("run").args(options).arg("--").args(args);
    c
}

/// `softrdma` with its device at `addr`, no other inherited softrdma
/// configuration, and the libraries `cargo xtask compat` built.
pub fn softrdma(addr: Ipv4Addr) -> Command {
    let compat = require_compat_dir();
    let mut c = Command::new(BIN);
    for v in [
        "SOFTRDMA_PORT",
        "SOFTRDMA_PCAP",
        "SOFTRDMA_STATS",
        "SOFTRDMA_RUN",
        "SOFTRDMA_HOST",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
    ] {
        c.env_remove(v);
    }
    c.env("SOFTRDMA_ADDR", addr.to_string())
        .env("SOFTRDMA_COMPAT_DIR", compat);
    c
}

/// The path of `tool`, or a panic saying which Debian package has it.
pub fn require_tool(tool: &str, package: &str) -> PathBuf {
    for dir in ["/usr/bin", "/usr/sbin", "/bin"] {
        let p = Path::new(dir).join(tool);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{tool} not found: install the Debian package {package} \
         (./scripts/install-deps.sh does, as CI runs it before `cargo test`)"
    );
}

/// A scratch directory for one test, removed on drop.
#[derive(Debug)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let d =
            std::env::temp_dir().join(format!("softrdma-run-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        Scratch(d)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles C `sources` into `out` with `cc` (or `compiler`) and `flags`;
/// panics with the compiler's output on failure.
pub fn compile(compiler: &str, sources: &[&Path], out: &Path, flags: &[&str]) {
    let mut c = Command::new(compiler);
    c.args(["-O2", "-o"]).arg(out).args(sources).args(flags);
    let r = run_with_timeout(&mut c, Duration::from_secs(120));
    assert_eq!(r.code(), Some(0), "compiling failed: {r}");
}

/// Runs a server, waits until it listens on TCP `port`, runs the client,
/// and returns both outputs (the server is killed at the deadline).
pub fn server_client(
    mut server: Command,
    mut client: Command,
    port: u16,
    timeout: Duration,
) -> (RunOutput, RunOutput) {
    let deadline = Instant::now() + timeout;
    let mut s = spawn(&mut server);
    while !is_listening(s.pid(), port) {
        if s.poll().is_some() || Instant::now() > deadline {
            let out = s.finish(Instant::now());
            panic!("the server never listened on TCP {port}: {out}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let c = run_with_timeout(
        &mut client,
        deadline.saturating_duration_since(Instant::now()),
    );
    let s = s.finish(deadline);
    (s, c)
}

/// The sum of counter `name` over every block of a `SOFTRDMA_STATS` file.
pub fn stat_sum(file: &Path, name: &str) -> u64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Payload bytes the device carried into the processes of a
/// `SOFTRDMA_STATS` file: received in packets (UDP or the same-host lanes)
/// plus copied by a process straight out of its peer's memory (peer copy on
/// the same-host path, where a large transfer is no packet at all).
pub fn carried_bytes(file: &Path) -> u64 {
    stat_sum(file, "rx_bytes") + stat_sum(file, "shm_peer_copy_bytes")
}

/// `cmd` run through `wrapper WRAPPER_ARGS... PROGRAM ARGS...` (setpriv, a
/// seccomp launcher), with `cmd`'s environment changes.
pub fn wrapped(cmd: &Command, wrapper: &Path, wrapper_args: &[&str]) -> Command {
    let mut w = Command::new(wrapper);
    w.args(wrapper_args)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => w.env(k, v),
            None => w.env_remove(k),
        };
    }
    w
}

/// Counter `name` of each process's block of a `SOFTRDMA_STATS` file.
pub fn stat_per_process(file: &Path, name: &str) -> Vec<u64> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.split("# softrdma-stats")
        .skip(1)
        .map(|block| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
                .unwrap_or(0)
        })
        .collect()
}
