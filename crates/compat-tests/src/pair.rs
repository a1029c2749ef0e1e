//! Server/client pairs of processes on this host: unique addresses and TCP
//! ports, waiting for the server to listen, joint timeouts, and a combined
//! report with both processes' output.

use std::fmt;
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::{RunOutput, Spawned, require_compat_dir, spawn};

/// The UDP port every softrdma device binds (RoCEv2's), unless `SOFTRDMA_PORT`.
pub const ROCE_PORT: u16 = 4791;

/// How long the survivor of a pair may keep running after its peer failed.
pub(crate) const PEER_FAILED_GRACE: Duration = Duration::from_secs(5);

static NEXT_PORT: AtomicU32 = AtomicU32::new(0);
static NEXT_HOST: AtomicU32 = AtomicU32::new(0);

fn pid() -> u32 {
    std::process::id()
}

/// A TCP port for a server's side channel: free now on this host (both IPv4
/// and IPv6 wildcards), below the ephemeral range, and different for every
/// call of this process and, most likely, of concurrent test processes.
pub fn unique_tcp_port() -> u16 {
    const BASE: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let offset = pid().wrapping_mul(97) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
        let port = (BASE + (offset + n) % SPAN) as u16;
        let v4 = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok();
        let v6 = TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, port)).is_ok();
        if v4 && v6 {
            return port;
        }
    }
    panic!("no free TCP port in {BASE}..{}", BASE + SPAN);
}

/// A loopback address `127.<net>.<h>.<l>` whose RoCEv2 UDP port is free now,
/// for one process's `SOFTRDMA_ADDR`. Each test file passes its own `net`
/// (so files never clash); the host part mixes this process's id and a
/// counter (so tests of one file, and concurrent runs, don't either).
pub fn unique_loopback_addr(net: u8) -> Ipv4Addr {
    let base = pid().wrapping_mul(251) % 64_000;
    for _ in 0..64_000 {
        let n = (base + NEXT_HOST.fetch_add(1, Ordering::Relaxed)) % 64_000;
        let (h, l) = ((n / 250) as u8, (n % 250 + 2) as u8);
        let addr = Ipv4Addr::new(127, net, h, l);
        if UdpSocket::bind((addr, ROCE_PORT)).is_ok() {
            return addr;
        }
    }
    panic!("no free address in 127.{net}.0.0/16 for UDP port {ROCE_PORT}");
}

/// Whether a socket of the network namespace of process `pid` listens on TCP
/// `port` (`/proc/<pid>/net/tcp{,6}`, state `0A`).
pub fn is_listening(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// Both processes' results. `client` is `None` when it was never started
/// (the server failed or never listened); `note` says why things stopped early.
#[derive(Debug)]
pub struct PairOutput {
    pub server: RunOutput,
    pub client: Option<RunOutput>,
    pub note: Option<String>,
}

impl PairOutput {
    /// The result of a pair whose client never started, because of `note`;
    /// the server is killed if it still runs.
    pub(crate) fn server_only(server: Spawned, note: String) -> PairOutput {
        PairOutput {
            server: server.finish(Instant::now()),
            client: None,
            note: Some(note),
        }
    }

    /// Both exited with status 0.
    pub fn both_succeeded(&self) -> bool {
        self.server.code() == Some(0) && self.client.as_ref().is_some_and(|c| c.code() == Some(0))
    }
}

impl fmt::Display for PairOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = &self.note {
            writeln!(f, "note: {n}")?;
        }
        writeln!(f, "===== server =====\n{}", self.server)?;
        match &self.client {
            Some(c) => writeln!(f, "===== client =====\n{c}"),
            None => writeln!(f, "===== client =====\n(not started)"),
        }
    }
}

/// Why a pair's server was given up on before its client started.
pub(crate) enum NotReady {
    Exited,
    TimedOut,
}

/// Polls until `ready(pid)` holds for server `s` (its readiness as seen from
/// outside); `Err` if it exits first or `deadline` passes.
pub(crate) fn wait_until_ready(
    s: &mut Spawned,
    deadline: Instant,
    ready: impl Fn(u32) -> bool,
) -> Result<(), NotReady> {
    loop {
        if ready(s.pid()) {
            return Ok(());
        }
        if s.poll().is_some() {
            return Err(NotReady::Exited);
        }
        if Instant::now() >= deadline {
            return Err(NotReady::TimedOut);
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Runs a server and, once it listens on TCP `port`, a client; waits for
/// both until `timeout` (from the server's start) and kills whatever still
/// runs then. If one of them fails, the other gets a few seconds before it is
/// killed too (a peer waiting for a dead partner would otherwise hang).
pub fn run_pair(
    server: &mut Command,
    port: u16,
    client: &mut Command,
    timeout: Duration,
) -> PairOutput {
    let deadline = Instant::now() + timeout;
    let mut s = spawn(server);
    if let Err(why) = wait_until_ready(&mut s, deadline, |pid| is_listening(pid, port)) {
        let note = match why {
            NotReady::Exited => format!("the server exited before listening on TCP port {port}"),
            NotReady::TimedOut => {
                format!("the server did not listen on TCP port {port} within {timeout:?}: killed")
            }
        };
        return PairOutput::server_only(s, note);
    }
    let mut c = spawn(client);
    let mut until = deadline;
    let mut note = None;
    loop {
        let (ss, cs) = (s.poll(), c.poll());
        if ss.is_some() && cs.is_some() {
            break;
        }
        let failed = [("server", ss), ("client", cs)]
            .into_iter()
            .find(|(_, st)| st.is_some_and(|st| !st.success()));
        if let Some((who, _)) = failed
            && note.is_none()
        {
            until = until.min(Instant::now() + PEER_FAILED_GRACE);
            note = Some(format!(
                "the {who} failed; its peer was given {PEER_FAILED_GRACE:?} more to finish"
            ));
        }
        if Instant::now() >= until {
            if note.is_none() {
                note = Some(format!("timeout after {timeout:?}: killed what still ran"));
            }
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    let now = Instant::now();
    PairOutput {
        server: s.finish(now),
        client: Some(c.finish(now)),
        note,
    }
}

/// Where and how one side of a pair runs: a program, against our C ABI
/// (`compat`: `LD_LIBRARY_PATH=target/compat`) or as is (the Rust examples),
/// optionally inside a network namespace, with its device at `addr`.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub program: PathBuf,
    pub compat: bool,
    pub netns: Option<String>,
    pub addr: Ipv4Addr,
    /// `SOFTRDMA_PCAP` for this process, if set.
    pub pcap: Option<PathBuf>,
}

impl Endpoint {
    /// An rdma-core program run against `target/compat` on this host.
    pub fn compat(program: impl AsRef<Path>, addr: Ipv4Addr) -> Self {
        Endpoint {
            program: program.as_ref().to_owned(),
            compat: true,
            netns: None,
            addr,
            pcap: None,
        }
    }

    /// A program that links softrdma itself (a Rust example) on this host.
    pub fn native(program: impl AsRef<Path>, addr: Ipv4Addr) -> Self {
        Endpoint {
            compat: false,
            ..Self::compat(program, addr)
        }
    }

    /// The same, run inside network namespace `ns`.
    pub fn in_netns(mut self, ns: &str) -> Self {
        self.netns = Some(ns.to_owned());
        self
    }

    /// Captures this process's packets to `SOFTRDMA_PCAP=path`
    /// (decode with `cargo run -p softrdma-cli -- decode path`).
    pub fn with_pcap(mut self, path: Option<PathBuf>) -> Self {
        self.pcap = path;
        self
    }

    /// The command running the program with `args`.
    pub fn command<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Command {
        let mut vars: Vec<(String, String)> = Vec::new();
        if self.compat {
            vars.push((
                "LD_LIBRARY_PATH".into(),
                require_compat_dir().display().to_string(),
            ));
        }
        vars.push(("SOFTRDMA_ADDR".into(), self.addr.to_string()));
        if let Some(p) = &self.pcap {
            vars.push(("SOFTRDMA_PCAP".into(), p.display().to_string()));
        }
        let mut cmd = match &self.netns {
            None => {
                let mut c = Command::new(&self.program);
                c.env_remove("LD_LIBRARY_PATH")
                    .env_remove("SOFTRDMA_PORT")
                    .env_remove("SOFTRDMA_PCAP");
                for (k, v) in &vars {
                    c.env(k, v);
                }
                c
            }
            Some(ns) => {
                // `ip netns exec` keeps the environment, but spell it out with
                // env(1) so the failure message shows the exact command line.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "env"]);
                for k in ["LD_LIBRARY_PATH", "SOFTRDMA_PORT", "SOFTRDMA_PCAP"] {
                    c.args(["-u", k]);
                }
                for (k, v) in &vars {
                    c.arg(format!("{k}={v}"));
                }
                c.arg(&self.program);
                c
            }
        };
        cmd.env_remove("LD_PRELOAD").args(args);
        cmd
    }
}

/// A directory for packet captures if the developer asked for them with
/// `SOFTRDMA_COMPAT_PCAP_DIR=<dir>`: `<dir>/<name>`.
pub fn pcap_path(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("SOFTRDMA_COMPAT_PCAP_DIR")?;
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join(format!("{name}.pcap")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_addresses_are_distinct() {
        let ports: Vec<u16> = (0..20).map(|_| unique_tcp_port()).collect();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ports.len(), "{ports:?}");
        let addrs: Vec<Ipv4Addr> = (0..20).map(|_| unique_loopback_addr(99)).collect();
        let mut sorted = addrs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), addrs.len(), "{addrs:?}");
        assert!(
            addrs
                .iter()
                .all(|a| a.octets()[0] == 127 && a.octets()[1] == 99)
        );
    }

    #[test]
    fn listening_socket_is_seen() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(is_listening(std::process::id(), port));
        drop(l);
        assert!(crate::within_a_second(|| !is_listening(
            std::process::id(),
            port
        )));
    }

    #[test]
    fn pair_of_shell_commands() {
        let port = unique_tcp_port();
        // A "server" that listens with a Python-free tool is not guaranteed
        // here; use a server that exits at once to test the early exit path.
        let out = run_pair(
            Command::new("sh").args(["-c", "echo srv; exit 3"]),
            port,
            &mut Command::new("true"),
            Duration::from_secs(10),
        );
        assert!(out.client.is_none(), "{out}");
        assert_eq!(out.server.code(), Some(3));
        assert!(out.to_string().contains("srv"), "{out}");
        assert!(!out.both_succeeded());
    }
}
