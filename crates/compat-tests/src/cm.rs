//! Pairs of rdma_cm programs (rdmacm-utils, perftest `-R`, our C program).
//!
//! An rdma_cm server listens on a port of its *device* (inside softrdma), not
//! on a TCP socket, so [`crate::run_pair`]'s readiness check does not apply.
//! [`run_cm_pair`] instead waits until the server's device has bound its
//! RoCEv2 UDP socket (`<addr>:4791` in `/proc/<pid>/net/udp`, the server's
//! network namespace), and retries the client (a few times, and says so in
//! the report) when it was turned away because the server had bound but not
//! yet called `rdma_listen` — the only way to tell from outside.

use std::net::Ipv4Addr;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::pair::{NotReady, PEER_FAILED_GRACE, PairOutput, ROCE_PORT, wait_until_ready};
use crate::{RunOutput, spawn};

/// Client attempts when the server turned it away while starting up.
const CLIENT_ATTEMPTS: u32 = 5;
/// Pause between bind detection and the client, and between attempts.
const SETTLE: Duration = Duration::from_millis(100);
const RETRY_PAUSE: Duration = Duration::from_millis(300);

/// `addr:port` as `/proc/net/udp` prints a local address (`0200327F:12B7`).
fn proc_net_addr(addr: Ipv4Addr, port: u16) -> String {
    format!("{:08X}:{port:04X}", u32::from_le_bytes(addr.octets()))
}

/// Whether, in the network namespace of process `pid`, a UDP socket is
/// bound to `addr` on the RoCEv2 port: a softrdma device is up there.
pub fn device_bound(pid: u32, addr: Ipv4Addr) -> bool {
    let want = proc_net_addr(addr, ROCE_PORT);
    std::fs::read_to_string(format!("/proc/{pid}/net/udp")).is_ok_and(|t| {
        t.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
    })
}

/// Whether a client's output says it was turned away for want of a listener
/// (REJECTED with "invalid service id", or refused): worth another try while
/// the server starts up.
pub fn turned_away(out: &RunOutput) -> bool {
    let text = out.combined();
    text.contains("RDMA_CM_EVENT_REJECTED")
        || text.contains("Connection refused")
        || text.contains("Couldn't connect")
        || text.contains("Failed to connect")
}

/// What the server of a pair does when the client is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerEnd {
    /// It exits by itself (most programs).
    Exits,
    /// It serves until killed (`cmtime`): killed once the client finished;
    /// its [`RunOutput::timed_out`] is then true.
    RunsUntilKilled,
}

/// Runs an rdma_cm server whose device is at `server_addr`, waits for the
/// device to come up, then runs the client (`client()` builds its command;
/// retried as described in the module doc while `retry` says so). Kills
/// everything at `timeout` (from the server's start); if one side fails the
/// other gets a few seconds more.
pub fn run_cm_pair(
    server: &mut Command,
    server_addr: Ipv4Addr,
    mut client: impl FnMut() -> Command,
    retry: fn(&RunOutput) -> bool,
    end: ServerEnd,
    timeout: Duration,
) -> PairOutput {
    let deadline = Instant::now() + timeout;
    let mut s = spawn(server);
    if let Err(why) = wait_until_ready(&mut s, deadline, |pid| device_bound(pid, server_addr)) {
        let why = match why {
            NotReady::Exited => "exited before its device came up".to_owned(),
            NotReady::TimedOut => {
                format!("did not bring up its device within {timeout:?}: killed")
            }
        };
        return PairOutput::server_only(
            s,
            format!("the server {why} (no UDP socket on {server_addr}:{ROCE_PORT})"),
        );
    }
    thread::sleep(SETTLE);
    let mut notes = Vec::new();
    let mut attempt = 1;
    let (client_out, mut until) = loop {
        let mut c = spawn(&mut client());
        let mut until = deadline;
        let mut server_failed = false;
        loop {
            let (ss, cs) = (s.poll(), c.poll());
            if cs.is_some() {
                break;
            }
            if let Some(st) = ss
                && !server_failed
            {
                server_failed = true;
                until = until.min(Instant::now() + PEER_FAILED_GRACE);
                notes.push(format!(
                    "the server ended ({st}) before the client; the client was given \
                     {PEER_FAILED_GRACE:?} more to finish"
                ));
            }
            if Instant::now() >= until {
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
        let out = c.finish(Instant::now());
        let again = !out.timed_out()
            && retry(&out)
            && s.poll().is_none()
            && attempt < CLIENT_ATTEMPTS
            && Instant::now() + RETRY_PAUSE < deadline;
        if again {
            eprintln!("client attempt {attempt} turned away while the server started; retrying");
            notes.push(format!(
                "client attempt {attempt} was turned away while the server started; retried:\n{out}"
            ));
            attempt += 1;
            thread::sleep(RETRY_PAUSE);
            continue;
        }
        if out.timed_out() {
            notes.push(format!("timeout after {timeout:?}: killed what still ran"));
        }
        break (out, until);
    };
    let client_ok = client_out.code() == Some(0);
    let server = match end {
        ServerEnd::Exits => {
            if !client_ok {
                until = until.min(Instant::now() + PEER_FAILED_GRACE);
                notes.push(format!(
                    "the client failed; the server was given {PEER_FAILED_GRACE:?} more to finish"
                ));
            }
            let server = s.finish(until);
            if server.timed_out() && client_ok {
                notes.push(format!("timeout after {timeout:?}: killed the server"));
            }
            server
        }
        ServerEnd::RunsUntilKilled => {
            let exited = s.poll();
            let server = s.finish(Instant::now());
            if let Some(st) = exited {
                notes.push(format!(
                    "the server, which serves until killed, had already ended: {st}"
                ));
            }
            server
        }
    };
    PairOutput {
        server,
        client: Some(client_out),
        note: (!notes.is_empty()).then(|| notes.join("\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn proc_net_address_format() {
        assert_eq!(
            proc_net_addr(Ipv4Addr::new(127, 50, 0, 2), 4791),
            "0200327F:12B7"
        );
    }

    /// A stand-in "server" whose device is a UDP socket of this process (the
    /// check reads the network namespace, not the process), and a client
    /// that is turned away once, then succeeds.
    #[test]
    fn client_turned_away_once_is_retried_and_server_killed() {
        let addr = crate::unique_loopback_addr(98);
        let _device = UdpSocket::bind((addr, ROCE_PORT)).unwrap();
        let dir = std::env::temp_dir().join(format!("cm-retry-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let script = format!(
            "if [ -e {0} ]; then echo served; else touch {0}; \
             echo 'event: RDMA_CM_EVENT_REJECTED, error: 8'; exit 1; fi",
            dir.display()
        );
        let out = run_cm_pair(
            Command::new("sleep").arg("30"),
            addr,
            || {
                let mut c = Command::new("sh");
                c.args(["-c", &script]);
                c
            },
            turned_away,
            ServerEnd::RunsUntilKilled,
            Duration::from_secs(20),
        );
        let _ = std::fs::remove_file(&dir);
        let client = out.client.as_ref().unwrap();
        assert_eq!(client.code(), Some(0), "{out}");
        assert_eq!(client.stdout, "served\n", "{out}");
        assert!(out.server.timed_out(), "{out}");
        assert!(
            out.note
                .as_deref()
                .unwrap_or("")
                .contains("attempt 1 was turned away"),
            "{out}"
        );
    }

    #[test]
    fn server_without_device_is_reported() {
        let addr = crate::unique_loopback_addr(98);
        let out = run_cm_pair(
            Command::new("sh").args(["-c", "echo no device; exit 3"]),
            addr,
            || Command::new("true"),
            turned_away,
            ServerEnd::Exits,
            Duration::from_secs(20),
        );
        assert!(out.client.is_none(), "{out}");
        assert_eq!(out.server.code(), Some(3));
        assert!(
            out.to_string().contains("exited before its device came up"),
            "{out}"
        );
    }

    #[test]
    fn sees_a_bound_udp_socket() {
        let pid = std::process::id();
        let addr = crate::unique_loopback_addr(98);
        let unbound = || !device_bound(pid, addr);
        // Free again after the probe above (see `within_a_second`).
        assert!(crate::within_a_second(unbound));
        let sock = UdpSocket::bind((addr, ROCE_PORT)).unwrap();
        assert!(device_bound(pid, addr));
        drop(sock);
        assert!(crate::within_a_second(unbound), "{addr} still bound");
    }
}
