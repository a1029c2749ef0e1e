//! Helpers for the compatibility tests: they run Debian's unmodified rdma-core
//! and perftest binaries against our `target/compat/libibverbs.so.1` and
//! `librdmacm.so.1` (built by `cargo xtask compat`).
//!
//! The tests never skip (except the network-namespace ones when not root):
//! if `target/compat` or the Debian packages are missing they fail and say
//! what to run ([`require_compat_dir`], [`require_packages`]).
//!
//! - [`run_with_timeout`] / [`spawn`]: one process in its own process group,
//!   output captured, the group killed at the timeout or on drop.
//! - [`pair`]: a server and a client ([`run_pair`], [`Endpoint`]): the
//!   client starts once the server listens on its TCP port, both are killed
//!   at the timeout, and the report holds both outputs; unique loopback
//!   addresses for `SOFTRDMA_ADDR` and unique TCP ports.
//! - [`pingpong`]: the ping-pong acceptance cases and their output checks.
//! - [`cm`]: pairs of rdma_cm programs ([`cm::run_cm_pair`]: the server's
//!   readiness is its device's UDP socket, not a TCP listener).
//! - [`rdmacm`]: the rdmacm-utils acceptance cases and their output checks.
//! - [`perftest`]: the perftest acceptance cases and their result parser.
//! - [`netns`]: two network namespaces joined by a veth pair (RAII).
//! - [`middleware`]: fio, qperf and libfabric against target/compat.
//! - [`c_programs`]: compiles the C programs of `c/` for the tests that run
//!   them.
//! - [`parse_version_script`], [`defined_dynamic_symbols`]: what a library
//!   should export and what it does (shared with `cargo xtask compat`).

pub mod c_programs;
pub mod cm;
pub mod middleware;
pub mod netns;
pub mod pair;
pub mod perftest;
pub mod pingpong;
pub mod rdmacm;
mod symbols;

pub use netns::{NetnsPair, is_root, netns_allowed};
pub use pair::{
    Endpoint, PairOutput, is_listening, run_pair, unique_loopback_addr, unique_tcp_port,
};
pub use pingpong::{
    CASES, PingpongCase, case, check_pingpong, parse_pingpong, run_pingpong_case, run_xsrq_pingpong,
};
pub use symbols::{DynSym, VersionScript, parse_dyn_syms, parse_version_script};

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The Debian packages whose binaries we must run.
pub const PACKAGES: [&str; 3] = ["ibverbs-utils", "rdmacm-utils", "perftest"];

/// How to get the packages, for failure messages.
pub const PACKAGES_HINT: &str = "install them with `apt-get install ibverbs-utils rdmacm-utils perftest libibverbs-dev librdmacm-dev infiniband-diags libibumad-dev` \
     (the project's CI script does this before `cargo test`)";

/// The 28 target binaries (the import lists in `shared/reference/abi/imports.txt`;
/// all of them ELF executables of [`PACKAGES`]).
pub const TARGET_BINARIES: [&str; 28] = [
    // ibverbs-utils
    "ibv_devices",
    "ibv_devinfo",
    "ibv_rc_pingpong",
    "ibv_uc_pingpong",
    "ibv_ud_pingpong",
    "ibv_srq_pingpong",
    "ibv_xsrq_pingpong",
    // rdmacm-utils
    "cmtime",
    "mckey",
    "rcopy",
    "rdma_client",
    "rdma_server",
    "rdma_xclient",
    "rdma_xserver",
    "riostream",
    "rping",
    "rstream",
    "ucmatose",
    "udaddy",
    "udpong",
    // perftest
    "ib_atomic_bw",
    "ib_atomic_lat",
    "ib_read_bw",
    "ib_read_lat",
    "ib_send_bw",
    "ib_send_lat",
    "ib_write_bw",
    "ib_write_lat",
];

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// The cargo target directory (`$CARGO_TARGET_DIR` or `<repo>/target`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d),
        Some(d) => repo_root().join(d),
        None => repo_root().join("target"),
    }
}

/// `target/compat`, where `cargo xtask compat` puts the libraries.
pub fn compat_dir() -> PathBuf {
    target_dir().join("compat")
}

/// [`compat_dir`], after checking that both libraries are there; panics with
/// the command to run otherwise.
pub fn require_compat_dir() -> PathBuf {
    let dir = compat_dir();
    for lib in ["libibverbs.so.1", "librdmacm.so.1"] {
        assert!(
            dir.join(lib).is_file(),
            "{} is missing: run `cargo xtask compat` first (it builds target/compat/libibverbs.so.1 \
             and librdmacm.so.1; CI runs it before `cargo test`)",
            dir.join(lib).display()
        );
    }
    dir.canonicalize().expect("canonical target/compat")
}

/// The files of an installed Debian package (`dpkg -L`), or `None` if it is
/// not installed.
pub fn package_files(package: &str) -> Option<Vec<PathBuf>> {
    let out = Command::new("dpkg").args(["-L", package]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(PathBuf::from)
            .collect(),
    )
}

/// Checks that [`PACKAGES`] are installed and returns, per package, its ELF
/// executables in `/usr/bin`. Panics with [`PACKAGES_HINT`] otherwise.
pub fn require_packages() -> BTreeMap<&'static str, Vec<PathBuf>> {
    let mut result = BTreeMap::new();
    let mut missing = Vec::new();
    for pkg in PACKAGES {
        match package_files(pkg) {
            Some(files) => {
                let bins = files
                    .into_iter()
                    .filter(|p| p.parent() == Some(Path::new("/usr/bin")) && is_elf(p))
                    .collect();
                result.insert(pkg, bins);
            }
            None => missing.push(pkg),
        }
    }
    assert!(
        missing.is_empty(),
        "Debian packages {missing:?} are not installed: {PACKAGES_HINT}"
    );
    result
}

/// The installed path of a target binary (`/usr/bin`, or `/usr/sbin` where
/// infiniband-diags puts `ibstat`); panics with [`PACKAGES_HINT`] if absent.
pub fn require_binary(name: &str) -> PathBuf {
    let path = Path::new("/usr/bin").join(name);
    let sbin = Path::new("/usr/sbin").join(name);
    if !path.is_file() && sbin.is_file() {
        return sbin;
    }
    assert!(
        path.is_file(),
        "{} not found: {PACKAGES_HINT}",
        path.display()
    );
    path
}

/// Whether `path` starts with the ELF magic.
pub fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// A command that runs `program` with `LD_LIBRARY_PATH` pointing at our
/// libraries (and nothing else from the caller's `LD_LIBRARY_PATH`/`LD_PRELOAD`).
pub fn compat_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", require_compat_dir())
        .env_remove("LD_PRELOAD");
    cmd
}

/// The same command against the system's real rdma-core libraries.
pub fn system_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_remove("LD_LIBRARY_PATH").env_remove("LD_PRELOAD");
    cmd
}

/// The `GID[  i]:` lines of `ibv_devinfo -v` output, trimmed, in order.
pub fn gid_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("GID["))
        .collect()
}

/// The result of [`run_with_timeout`].
#[derive(Debug)]
pub struct RunOutput {
    /// The command as run (for messages).
    pub command: String,
    /// `None` if the process had to be killed at the timeout.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl RunOutput {
    /// Whether the process was killed because it exceeded the timeout.
    pub fn timed_out(&self) -> bool {
        self.status.is_none()
    }

    /// The exit code, if it exited normally.
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// The signal that ended it, if any (not counting our timeout kill).
    pub fn signal(&self) -> Option<i32> {
        self.status.and_then(|s| s.signal())
    }

    /// stdout followed by stderr.
    pub fn combined(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl fmt::Display for RunOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = match (self.status, self.code(), self.signal()) {
            (None, _, _) => format!("TIMED OUT after {:?} (killed)", self.elapsed),
            (_, Some(c), _) => format!("exit code {c}"),
            (_, _, Some(s)) => format!(
                "killed by signal {s}{}",
                if s == 11 { " (SIGSEGV)" } else { "" }
            ),
            _ => "unknown status".to_owned(),
        };
        write!(
            f,
            "`{}`: {how} in {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command, self.elapsed, self.stdout, self.stderr
        )
    }
}

fn describe(cmd: &Command) -> String {
    let mut s = String::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            s.push_str(&format!("{}={} ", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    s.push_str(&cmd.get_program().to_string_lossy());
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Output read so far from one pipe (shared with its reader thread).
type SharedBuf = Arc<Mutex<Vec<u8>>>;

/// Reads `pipe` to its end in a thread, appending to a buffer that can be
/// looked at while the process runs ([`Spawned::stdout_so_far`]).
fn reader(pipe: Option<impl Read + Send + 'static>) -> (SharedBuf, thread::JoinHandle<String>) {
    let shared: SharedBuf = Arc::default();
    let buf = Arc::clone(&shared);
    let handle = thread::spawn(move || {
        if let Some(mut p) = pipe {
            let mut chunk = [0u8; 16384];
            loop {
                match p.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => buf.lock().unwrap().extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        let all = buf.lock().unwrap();
        String::from_utf8_lossy(&all).into_owned()
    });
    (shared, handle)
}

/// Kills the whole process group `pgid` (a child started as a group leader).
fn kill_group(pgid: u32) {
    // SAFETY: kill(2) on our own child's process group; no memory involved.
    unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
}

/// A running child process started by [`spawn`]: its own process group,
/// stdin from `/dev/null`, stdout and stderr captured by reader threads.
///
/// Dropping it without [`Spawned::finish`] kills the process group, so a
/// panicking test leaves no process behind.
#[derive(Debug)]
pub struct Spawned {
    command: String,
    child: Child,
    out: Option<thread::JoinHandle<String>>,
    err: Option<thread::JoinHandle<String>>,
    out_buf: SharedBuf,
    err_buf: SharedBuf,
    start: Instant,
    status: Option<ExitStatus>,
    done: bool,
}

/// Starts `cmd` as described at [`Spawned`]; panics if it cannot be started.
pub fn spawn(cmd: &mut Command) -> Spawned {
    let command = describe(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{command}`: {e}"));
    let (out_buf, out) = reader(child.stdout.take());
    let (err_buf, err) = reader(child.stderr.take());
    Spawned {
        command,
        child,
        out: Some(out),
        err: Some(err),
        out_buf,
        err_buf,
        start,
        status: None,
        done: false,
    }
}

impl Spawned {
    /// The process id (= its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The command as started (for messages).
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The exit status if the process has exited (non-blocking).
    pub fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            match self.child.try_wait() {
                Ok(s) => self.status = s,
                Err(e) => panic!("waiting for `{}`: {e}", self.command),
            }
        }
        self.status
    }

    /// What the process has written to stdout so far (a C program writes
    /// it when its stdio buffer is flushed: line-buffered programs, or ones
    /// run under `stdbuf -oL`, show each line at once).
    pub fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&self.out_buf.lock().unwrap()).into_owned()
    }

    /// The same for stderr.
    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.err_buf.lock().unwrap()).into_owned()
    }

    /// Waits until `pred` holds for the stdout written so far; `false` if
    /// the process exits first (and its output still does not satisfy
    /// `pred`) or `deadline` passes.
    pub fn wait_for_stdout(&mut self, deadline: Instant, pred: impl Fn(&str) -> bool) -> bool {
        loop {
            if pred(&self.stdout_so_far()) {
                return true;
            }
            if self.poll().is_some() || Instant::now() >= deadline {
                // The reader may still be draining the pipe.
                thread::sleep(Duration::from_millis(50));
                return pred(&self.stdout_so_far());
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Time since the process was started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Kills the process group now (SIGKILL); [`Spawned::finish`] then
    /// reports a timeout unless the process had already exited.
    pub fn kill(&mut self) {
        if self.poll().is_none() {
            kill_group(self.child.id());
            let _ = self.child.wait();
        }
    }

    /// Kills `victim` (SIGKILL) and waits up to `bound` for this process,
    /// its peer, to exit; returns its output and how long after the kill it
    /// exited (`None`: still running at `bound`, then killed).
    pub fn outlive(
        mut self,
        victim: &mut Spawned,
        bound: Duration,
    ) -> (RunOutput, Option<Duration>) {
        victim.kill();
        let killed = Instant::now();
        let mut after = None;
        while killed.elapsed() < bound {
            if self.poll().is_some() {
                after = Some(killed.elapsed());
                break;
            }
            thread::sleep(Duration::from_millis(2));
        }
        (self.finish(Instant::now()), after)
    }

    /// Waits until the process exits or `deadline` passes (then kills its
    /// process group) and collects its output.
    pub fn finish(mut self, deadline: Instant) -> RunOutput {
        let status = loop {
            if let Some(s) = self.poll() {
                break Some(s);
            }
            if Instant::now() >= deadline {
                kill_group(self.child.id());
                let _ = self.child.wait();
                break None;
            }
            thread::sleep(Duration::from_millis(10));
        };
        let elapsed = self.start.elapsed();
        let (out, err) = (self.out.take().unwrap(), self.err.take().unwrap());
        // Processes the child left behind may still hold the pipes open. They
        // keep the process group alive (so its id cannot have been reused):
        // give them a moment, then kill the group so the readers finish.
        let grace = Instant::now();
        while !(out.is_finished() && err.is_finished()) {
            if grace.elapsed() > Duration::from_secs(2) {
                kill_group(self.child.id());
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        self.done = true;
        RunOutput {
            command: std::mem::take(&mut self.command),
            status,
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
            elapsed,
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if !self.done {
            // Also reaps leftovers of a process that already exited.
            kill_group(self.child.id());
            let _ = self.child.wait();
        }
    }
}

/// Runs `cmd` with stdin from `/dev/null`, capturing stdout and stderr; if it
/// has not finished after `timeout` its whole process group is killed with
/// SIGKILL and the result reports the timeout (`status == None`).
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> RunOutput {
    spawn(cmd).finish(Instant::now() + timeout)
}

/// `readelf <args> <path>`'s stdout; panics if readelf cannot run or fails.
fn readelf(args: &[&str], path: &Path) -> String {
    let out = Command::new("readelf")
        .args(args)
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run readelf (install binutils): {e}"));
    assert!(
        out.status.success(),
        "readelf {} {} failed: {out:?}",
        args.join(" "),
        path.display()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The defined, non-local dynamic symbols of `lib` (version-node marker
/// symbols excluded).
pub fn defined_dynamic_symbols(lib: &Path) -> Vec<DynSym> {
    parse_dyn_syms(&readelf(&["--dyn-syms", "-W"], lib))
}

/// The version definitions of `lib` (`readelf -V`): `(node, parent)` in order,
/// without the `BASE` (soname) entry.
pub fn version_definitions(lib: &Path) -> Vec<(String, Option<String>)> {
    let text = readelf(&["-V"], lib);
    let mut defs: Vec<(String, Option<String>)> = Vec::new();
    let mut in_defs = false;
    for line in text.lines() {
        if line.starts_with("Version definition section") {
            in_defs = true;
            continue;
        }
        if line.starts_with("Version needs section") || line.starts_with("Version symbols section")
        {
            in_defs = false;
        }
        if !in_defs {
            continue;
        }
        if let Some(i) = line.find("Name: ") {
            if line.contains("Flags: BASE") {
                continue;
            }
            defs.push((line[i + 6..].trim().to_owned(), None));
        } else if let Some(i) = line.find("Parent 1: ")
            && let Some(last) = defs.last_mut()
        {
            last.1 = Some(line[i + 10..].trim().to_owned());
        }
    }
    defs
}

/// `DT_NEEDED` and `DT_SONAME` entries of an ELF file (`readelf -d`).
pub fn dynamic_entries(path: &Path) -> (Vec<String>, Option<String>) {
    let text = readelf(&["-d"], path);
    let bracketed = |l: &str| {
        l.split_once('[')
            .and_then(|(_, r)| r.split_once(']'))
            .map(|(v, _)| v.to_owned())
    };
    let needed = text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(bracketed)
        .collect();
    let soname = text
        .lines()
        .find(|l| l.contains("(SONAME)"))
        .and_then(bracketed);
    (needed, soname)
}

/// The system's real rdma-core library `name` (e.g. `libibverbs.so.1`), as
/// installed by Debian's libibverbs1/librdmacm1.
pub fn system_library(name: &str) -> PathBuf {
    for dir in [
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p.canonicalize().unwrap();
        }
    }
    panic!("the system's {name} was not found: {PACKAGES_HINT}");
}

/// Whether `cond` holds within a second (polled every 5 ms). For checks of
/// sockets this process just closed: tests running at the same time spawn
/// children, and a child holds copies of this process's sockets from fork to
/// exec, so a closed socket can stay bound or listening for that moment.
#[cfg(test)]
pub(crate) fn within_a_second(cond: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    while !cond() {
        if t0.elapsed() > Duration::from_secs(1) {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_kills_and_reports() {
        let out = run_with_timeout(Command::new("sleep").arg("10"), Duration::from_millis(200));
        assert!(out.timed_out(), "{out}");
        assert!(out.elapsed < Duration::from_secs(5));
    }

    #[test]
    fn captures_output_and_status() {
        let out = run_with_timeout(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(10),
        );
        assert_eq!(out.code(), Some(3), "{out}");
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        let out = run_with_timeout(
            Command::new("sh").args(["-c", "kill -SEGV $$"]),
            Duration::from_secs(10),
        );
        assert_eq!(out.signal(), Some(libc::SIGSEGV), "{out}");
    }
}
