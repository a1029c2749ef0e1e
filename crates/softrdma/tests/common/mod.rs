//! Helpers for tests that run the examples as real processes: finding (and if
//! needed building) the example binaries, children that are killed when the
//! test fails or hangs, and free ports; in [`netns`], network namespaces to
//! run them in. [`loopback`] serves the tests whose devices are all in the
//! test's own process.
#![allow(dead_code)]

pub(crate) mod loopback;
pub(crate) mod netns;

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The examples the process tests run.
pub(crate) const EXAMPLES: &[&str] = &["rc_pingpong", "ud_pingpong", "verbs_peer", "fault_peer"];

/// Path of example `name`, built for the profile this test was built with.
///
/// `cargo test` builds the examples before running tests; a narrower run
/// (`cargo test --test two_process`) does not, so on first use this runs
/// `cargo build --examples` for the same profile (a no-op when up to date,
/// and it keeps the binaries from going stale).
pub(crate) fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test>-<hash>
        let profile_dir = exe
            .parent()
            .and_then(|d| d.parent())
            .expect("test binary lives in target/<profile>/deps")
            .to_path_buf();
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug")
            .to_string();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "softrdma"]);
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
        // Build into the target directory this test binary came from.
        if let Some(target) = profile_dir.parent() {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        let out = cmd
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .output()
            .expect("run cargo build for the examples");
        assert!(
            out.status.success(),
            "building the examples failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        profile_dir.join("examples")
    });
    let p = dir.join(name);
    assert!(p.exists(), "example binary {} is missing", p.display());
    p
}

/// A TCP port that was free a moment ago.
pub(crate) fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a TCP port")
        .port()
}

/// A UDP port that was free on 127.0.0.1 a moment ago (and very likely on 127.0.0.N).
pub(crate) fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("bind a UDP port")
        .port()
}

/// Whether some socket listens on TCP `port` (per /proc/net/tcp and tcp6).
pub(crate) fn is_listening(port: u16) -> bool {
    let needle = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                // local_address is column 1, st (state) column 3; 0A = LISTEN.
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&needle) && cols[3] == "0A"
            })
        })
    })
}

/// A child process whose output is collected; it is killed when dropped.
pub(crate) struct Proc {
    pub(crate) name: String,
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

fn collect(
    mut r: impl Read + Send + 'static,
    into: Arc<Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut br = BufReader::new(&mut r);
        let mut line = String::new();
        while matches!(br.read_line(&mut line), Ok(n) if n > 0) {
            into.lock().unwrap().push_str(&line);
            line.clear();
        }
    })
}

impl Proc {
    /// Starts `cmd` with piped output.
    pub(crate) fn spawn(name: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({cmd:?}): {e}"));
        let out = Arc::new(Mutex::new(String::new()));
        let err = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().expect("stdout"), Arc::clone(&out)),
            collect(child.stderr.take().expect("stderr"), Arc::clone(&err)),
        ];
        Proc {
            name: name.to_string(),
            child,
            out,
            err,
            readers,
        }
    }

    /// Output so far.
    pub(crate) fn stdout(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Error output so far.
    pub(crate) fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Waits until `pred(stdout)` holds; panics (killing the child) on timeout
    /// or if the child exits first.
    pub(crate) fn wait_for(&mut self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) {
        let t0 = Instant::now();
        loop {
            if pred(&self.stdout()) {
                return;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                // Its last lines may still be on their way through the
                // reader thread: a survivor that reports its last round
                // and exits at once is not a failure.
                std::thread::sleep(Duration::from_millis(50));
                if pred(&self.stdout()) {
                    return;
                }
                panic!(
                    "{} exited ({st}) before {what}\n--- stdout\n{}--- stderr\n{}",
                    self.name,
                    self.stdout(),
                    self.stderr()
                );
            }
            if t0.elapsed() > timeout {
                let _ = self.child.kill();
                panic!(
                    "{}: no {what} after {timeout:?}\n--- stdout\n{}--- stderr\n{}",
                    self.name,
                    self.stdout(),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for exit (killing the child after `timeout`); returns status and output.
    pub(crate) fn finish(mut self, timeout: Duration) -> Output {
        let t0 = Instant::now();
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(st)) => break Some(st),
                Ok(None) if t0.elapsed() > timeout => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("wait for {}: {e}", self.name),
            }
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let o = Output {
            name: self.name.clone(),
            status,
            stdout: self.stdout(),
            stderr: self.stderr(),
        };
        if status.is_none() {
            panic!("{} timed out after {timeout:?}\n{o}", self.name);
        }
        o
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Still running when dropped: the test failed or panicked.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs a pingpong example (`rc_pingpong`, `ud_pingpong`) with rdma-core's
/// command line, `-p PORT opts`: `server(args)` starts the server and, once
/// it listens (the C client does not retry its connect), `client(args)` the
/// client, whose args end with the server's host. Returns both outputs.
pub(crate) fn pingpong_pair(
    opts: &[&str],
    timeout: Duration,
    server: impl FnOnce(&[&str]) -> Proc,
    client: impl FnOnce(&[&str]) -> Proc,
) -> (Output, Output) {
    let tcp = free_tcp_port();
    let tcp_s = tcp.to_string();
    let mut args = vec!["-p", &tcp_s];
    args.extend_from_slice(opts);
    let mut s = server(&args);
    s.wait_for("the TCP listener", timeout, |_| is_listening(tcp));
    args.push("127.0.0.1");
    let c = client(&args).finish(timeout);
    let s = s.finish(timeout);
    (s, c)
}

/// Checks the closing report of a pingpong run: `iters` exchanges of
/// `size` bytes each way.
pub(crate) fn check_pingpong_report(o: &Output, size: u64, iters: u64) {
    let bytes = o.line("bytes in");
    assert!(
        bytes.starts_with(&format!("{} bytes in ", size * iters * 2))
            && bytes.ends_with(" Mbit/sec"),
        "{}: {bytes:?}",
        o.name
    );
    let it = o.line("iters in");
    assert!(
        it.starts_with(&format!("{iters} iters in ")) && it.ends_with(" usec/iter"),
        "{}: {it:?}",
        o.name
    );
}

/// `verbs_peer`'s server and client arguments for TCP port `tcp` (the
/// server on 127.0.0.1): initial PSNs just below 2^24, so both send queues
/// wrap within the first message, and a 1 KiB MTU.
pub(crate) fn verbs_peer_args(tcp: &str) -> [Vec<&str>; 2] {
    [
        vec![
            "server", "--port", tcp, "--psn", "0xfffff0", "--mtu", "1024",
        ],
        vec![
            "client",
            "127.0.0.1",
            "--port",
            tcp,
            "--psn",
            "0xffff00",
            "--mtu",
            "1024",
        ],
    ]
}

/// What a `verbs_peer` pair that passed printed: the server was passive in
/// phase 1, the client active, and both ended with `PASS`.
pub(crate) fn check_verbs_peer(s: &Output, c: &Output) {
    for (o, first) in [(s, "passive"), (c, "active")] {
        assert!(o.stdout.contains(&format!("phase 1 ({first}) OK")), "{o}");
        assert_eq!(o.stdout.lines().last(), Some("PASS"), "{o}");
    }
}

/// Panics, showing every output, unless all children exited with code 0.
pub(crate) fn assert_all_succeeded(outs: &[&Output]) {
    if outs.iter().any(|o| !o.status.is_some_and(|s| s.success())) {
        let all: Vec<String> = outs.iter().map(|o| o.to_string()).collect();
        panic!("a child failed\n{}", all.join("\n"));
    }
}

/// What a finished child left.
pub(crate) struct Output {
    pub(crate) name: String,
    pub(crate) status: Option<ExitStatus>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Output {
    /// Panics unless the child exited with code 0.
    pub(crate) fn assert_success(&self) -> &Self {
        assert!(
            self.status.is_some_and(|s| s.success()),
            "{} failed\n{self}",
            self.name
        );
        self
    }

    /// Counter `key` of the `STATS key=value ...` line the peer programs
    /// print last.
    pub(crate) fn stat(&self, key: &str) -> u64 {
        let line = self.line("STATS ");
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{key}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{}: no {key} in {line:?}", self.name))
    }

    /// The first stdout line containing `needle`.
    pub(crate) fn line(&self, needle: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{}: no line with {needle:?}\n{self}", self.name))
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--- {} exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.name, self.status, self.stdout, self.stderr
        )
    }
}
