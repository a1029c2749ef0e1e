//! Child processes for the two-process tests: the example binaries (built
//! on first use if needed), output collected, killed when dropped, unique
//! loopback addresses for their devices.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// The examples these tests run.
const EXAMPLES: [&str; 3] = ["rdmalib_echo", "rdmalib_file_transfer", "rdmalib_mesh"];

/// The newest modification time of the files under `dir`.
pub(crate) fn newest(dir: &Path) -> SystemTime {
    let mut t = SystemTime::UNIX_EPOCH;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let m = if p.is_dir() {
            newest(&p)
        } else {
            e.metadata().and_then(|m| m.modified()).unwrap_or(t)
        };
        t = t.max(m);
    }
    t
}

/// Path of an example of rdmalib, for the profile of this test binary.
/// `cargo test -p softrdma-rdmalib` builds them before the tests run; when
/// they are missing or older than rdmalib's sources (a narrower run, or the
/// C API's tests), the first call runs `cargo build` for them.
pub(crate) fn example(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        // target/<profile>/deps/<test>-<hash>
        let profile_dir = exe
            .parent()
            .and_then(|d| d.parent())
            .expect("target/<profile>/deps")
            .to_path_buf();
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rdmalib");
        let sources = newest(&crate_dir.join("src")).max(newest(&crate_dir.join("examples")));
        let fresh = EXAMPLES.iter().all(|e| {
            let built = profile_dir.join("examples").join(e).metadata();
            built.and_then(|m| m.modified()).is_ok_and(|t| t >= sources)
        });
        if fresh {
            return profile_dir.join("examples");
        }
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "--quiet", "-p", "softrdma-rdmalib"]);
        for e in EXAMPLES {
            cmd.args(["--example", e]);
        }
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(p) => {
                cmd.args(["--profile", p]);
            }
        }
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
    assert!(p.exists(), "{} is missing", p.display());
    p
}

/// `program` on a device at `addr` (the default RoCE port).
pub(crate) fn device_cmd(program: impl AsRef<OsStr>, addr: Ipv4Addr, args: &[&str]) -> Command {
    let mut c = Command::new(program);
    c.env("SOFTRDMA_ADDR", addr.to_string())
        .env_remove("SOFTRDMA_PORT")
        .args(args);
    c
}

/// Example `name` of rdmalib on a device at `addr`.
pub(crate) fn example_cmd(name: &str, addr: Ipv4Addr, args: &[&str]) -> Command {
    device_cmd(example(name), addr, args)
}

/// A path for file `name` in the tests' scratch directory, unique to this
/// process.
pub(crate) fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{name}", std::process::id()))
}

/// A loopback address `127.<net>.x.y` whose RoCE port is free now, unique per
/// call in this process (and, through the process id, across processes).
pub(crate) fn unique_addr(net: u8) -> Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id().wrapping_mul(97) % 60_000;
    for _ in 0..60_000 {
        let n = (base + NEXT.fetch_add(1, Ordering::Relaxed)) % 60_000;
        let ip = Ipv4Addr::new(127, net, (n / 250) as u8, (n % 250 + 2) as u8);
        if UdpSocket::bind((ip, 4791)).is_ok() {
            return ip;
        }
    }
    panic!("no free address in 127.{net}.0.0/16");
}

/// A running child; killed (SIGKILL) if still running when dropped.
pub(crate) struct Proc {
    name: String,
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
}

fn collect(r: impl Read + Send + 'static, into: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            let mut s = into.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
}

impl Proc {
    pub(crate) fn spawn(name: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let (out, err) = Default::default();
        collect(child.stdout.take().unwrap(), Arc::clone(&out));
        collect(child.stderr.take().unwrap(), Arc::clone(&err));
        Proc {
            name: name.into(),
            child,
            out,
            err,
        }
    }

    pub(crate) fn stdout(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    pub(crate) fn report(&self) -> String {
        format!(
            "--- {} stdout\n{}--- {} stderr\n{}",
            self.name,
            self.stdout(),
            self.name,
            self.err.lock().unwrap()
        )
    }

    /// Waits until stdout has a line containing `needle`; returns it.
    pub(crate) fn wait_line(&mut self, needle: &str, timeout: Duration) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.stdout().lines().find(|l| l.contains(needle)) {
                return l.to_string();
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(50)); // let the readers finish
                panic!(
                    "{} exited ({st}) before {needle:?}\n{}",
                    self.name,
                    self.report()
                );
            }
            assert!(
                t0.elapsed() < timeout,
                "{}: no {needle:?} within {timeout:?}\n{}",
                self.name,
                self.report()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The port of a server's "listening on ADDR:PORT" line.
    pub(crate) fn listening_port(&mut self) -> u16 {
        let l = self.wait_line("listening on", Duration::from_secs(20));
        l.rsplit(':').next().unwrap().trim().parse().unwrap()
    }

    /// Waits for the exit (SIGKILL after `timeout`, then panics).
    pub(crate) fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(50)); // let the readers finish
                return st;
            }
            if t0.elapsed() > timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} hung (killed after {timeout:?})\n{}",
                    self.name,
                    self.report()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL now.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}
