//! RDMA middleware run unmodified against `target/compat`: fio's rdma
//! engine, qperf over rdma_cm, libfabric's verbs provider (`fi_pingpong`).
//!
//! - [`require_tool`]: a program of a Debian package, or a failure saying
//!   what to install.
//! - [`run_pair_after_stdout`]: a server whose readiness is a line it prints
//!   (fio prints "waiting for connection" once it called `rdma_listen`).
//! - [`IbNetns`]: a network namespace with an interface named `ib0`, for
//!   libfabric, which ignores loopback interfaces and by default only takes
//!   addresses of interfaces whose name starts with `ib` (`FI_VERBS_IFACE`).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::pair::PairOutput;
use crate::{RunOutput, spawn};

/// `/usr/bin/<program>` of Debian package `package`; panics with what to
/// install when it is missing (`scripts/install-deps.sh` installs them).
pub fn require_tool(package: &str, program: &str) -> PathBuf {
    let path = Path::new("/usr/bin").join(program);
    assert!(
        path.is_file(),
        "{} not found: install Debian package `{package}` (`apt-get install {package}`; \
         scripts/install-deps.sh does it, CI runs that first)",
        path.display()
    );
    path
}

/// Client attempts when the connection manager turned the client away.
const CLIENT_ATTEMPTS: u32 = 3;

/// Whether a client's output says its connection request was turned away
/// (REJECTED or UNREACHABLE) although the server listened.
pub fn turned_away(out: &RunOutput) -> bool {
    let t = out.combined();
    t.contains("RDMA_CM_EVENT_REJECTED") || t.contains("RDMA_CM_EVENT_UNREACHABLE")
}

/// Runs `server`, waits until its stdout contains `marker` (run it
/// line-buffered, e.g. under `stdbuf -oL`), then runs `client()` as
/// [`crate::run_pair`] does; everything is killed at `timeout`.
///
/// A client that `retry` says was turned away is run again (at most three
/// times in all) while the server still waits, and the report's
/// note says so. Seen under load (1 run in 8 of `tests/fio.rs` on 2 busy
/// vCPUs): the client's REQs went unanswered for ~20 s and it got REJECTED
/// although the server had printed that it listened — a host-device CM
/// matter of its own, not what these tests are about.
pub fn run_pair_after_stdout(
    server: &mut Command,
    marker: &str,
    mut client: impl FnMut() -> Command,
    retry: fn(&RunOutput) -> bool,
    timeout: Duration,
) -> PairOutput {
    let deadline = Instant::now() + timeout;
    let mut s = spawn(server);
    if !s.wait_for_stdout(deadline, |o| o.contains(marker)) {
        return PairOutput::server_only(
            s,
            format!("the server did not print {marker:?} within {timeout:?}"),
        );
    }
    let mut notes = Vec::new();
    let mut attempt = 1;
    let out = loop {
        let mut c = spawn(&mut client());
        while c.poll().is_none() && s.poll().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // A server that ended first leaves its client a few seconds.
        let until = if c.poll().is_none() && s.poll().is_some() {
            deadline.min(Instant::now() + crate::pair::PEER_FAILED_GRACE)
        } else {
            deadline
        };
        let out = c.finish(until);
        if !out.timed_out() && s.poll().is_none() && attempt < CLIENT_ATTEMPTS && retry(&out) {
            eprintln!("client attempt {attempt} was turned away; retrying");
            notes.push(format!(
                "client attempt {attempt} was turned away; retried:\n{out}"
            ));
            attempt += 1;
            continue;
        }
        break out;
    };
    let mut pair = finish_server(s, out, deadline);
    pair.note = join_notes(notes, pair.note);
    pair
}

/// Waits for the server after its client ended (a failed client gives it
/// [`crate::pair::PEER_FAILED_GRACE`]).
fn finish_server(s: crate::Spawned, client: RunOutput, deadline: Instant) -> PairOutput {
    let mut until = deadline;
    let mut note = None;
    if client.code() != Some(0) {
        until = until.min(Instant::now() + crate::pair::PEER_FAILED_GRACE);
        note = Some("the client failed; the server was given a few seconds more".to_owned());
    }
    let server = s.finish(until);
    if server.timed_out() && note.is_none() {
        note = Some("timeout: killed the server".to_owned());
    }
    PairOutput {
        server,
        client: Some(client),
        note,
    }
}

fn join_notes(mut notes: Vec<String>, last: Option<String>) -> Option<String> {
    notes.extend(last);
    (!notes.is_empty()).then(|| notes.join("\n"))
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A network namespace with `lo` up and a veth pair whose end `ib0` holds
/// `10.<x>.<y>.1/24` (both ends up). Removed on drop.
///
/// A veth rather than a dummy interface: this kernel has no `dummy` module,
/// and the other namespace tests already need veth.
#[derive(Debug)]
pub struct IbNetns {
    pub name: String,
    pub addr: Ipv4Addr,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .map_err(|e| format!("cannot run `ip` (apt-get install iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl IbNetns {
    /// Creates it; panics with the failing command. Root only
    /// ([`crate::is_root`]).
    pub fn create() -> IbNetns {
        crate::netns::remove_stale();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let ns = IbNetns {
            name: format!("{}{pid}-ib{n}", crate::netns::NETNS_PREFIX),
            addr: Ipv4Addr::new(10, 250, (pid % 250) as u8, (n % 250) as u8 + 1),
        };
        let cidr = format!("{}/24", ns.addr);
        let name = ns.name.as_str();
        let steps: [&[&str]; 6] = [
            &["netns", "add", name],
            &[
                "-n", name, "link", "add", "ib0", "type", "veth", "peer", "name", "ibpeer0",
            ],
            &["-n", name, "addr", "add", &cidr, "dev", "ib0"],
            &["-n", name, "link", "set", "lo", "up"],
            &["-n", name, "link", "set", "ibpeer0", "up"],
            &["-n", name, "link", "set", "ib0", "up"],
        ];
        for step in steps {
            if let Err(e) = ip(step) {
                panic!("creating network namespace {name}: {e}");
            }
        }
        ns
    }

    /// `command` run inside the namespace (`ip netns exec`, which keeps the
    /// environment set on the returned command).
    pub fn exec(&self, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
}

impl Drop for IbNetns {
    fn drop(&mut self) {
        if crate::netns::list_netns().contains(&self.name)
            && let Err(e) = ip(&["netns", "del", &self.name])
        {
            eprintln!("could not remove network namespace {}: {e}", self.name);
        }
    }
}
