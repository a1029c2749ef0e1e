//! Processes for `cargo xtask bench`: server/client pairs with a deadline,
//! CPU time from /proc, free loopback addresses and ports.

use std::fs::{self, File};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::Result;

/// Clock ticks per second of /proc's CPU times (`getconf CLK_TCK`; 100 on Linux).
fn clk_tck() -> f64 {
    use std::sync::OnceLock;
    static TCK: OnceLock<f64> = OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The fields after `comm` of `/proc/<pid>/stat` (index 0 is field 3, `state`).
fn stat_fields(pid: &str) -> Option<Vec<u64>> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// CPU seconds (user + system) of the children this process has waited for.
pub(crate) fn reaped_children_cpu() -> f64 {
    // Fields 16 and 17: cutime, cstime.
    stat_fields("self").map_or(0.0, |f| (f[13] + f[14]) as f64 / clk_tck())
}

/// CPU seconds of a running process (all threads), plus its reaped children's.
pub(crate) fn process_cpu(pid: u32) -> f64 {
    // Fields 14–17: utime, stime, cutime, cstime.
    stat_fields(&pid.to_string())
        .map_or(0.0, |f| (f[11] + f[12] + f[13] + f[14]) as f64 / clk_tck())
}

/// Context switches of all threads of a process so far.
pub(crate) fn context_switches(pid: u32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|s| {
            s.lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// Whether `pid` has live (unreaped) children.
pub(crate) fn has_children(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .is_ok_and(|s| !s.trim().is_empty())
}

/// Whether some socket listens on TCP `port` (any address, IPv4 or IPv6).
pub(crate) fn is_listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 3 && c[1].ends_with(&want) && c[3] == "0A"
            })
        })
    })
}

/// A TCP port nobody uses now (the kernel's pick; released before use).
pub(crate) fn free_tcp_port() -> Result<u16> {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free TCP port: {e}"))
}

/// `n` consecutive loopback addresses `127.86.x.y..` whose UDP port 4791 is free.
pub(crate) fn free_addrs(n: u32) -> Result<Ipv4Addr> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id() % 200 * 256;
    for _ in 0..10_000 {
        let k = NEXT.fetch_add(n, Ordering::Relaxed);
        let host = (base + k) % 60_000 + 2;
        let first = Ipv4Addr::new(127, 86, (host >> 8) as u8, (host & 0xFF) as u8);
        let all_free = (0..n).all(|i| {
            let a = Ipv4Addr::from(u32::from(first) + i);
            a.octets()[3] != 0 && UdpSocket::bind((a, 4791)).is_ok()
        });
        if all_free && first.octets()[3] <= 250 {
            return Ok(first);
        }
    }
    Err("no free loopback addresses in 127.86.0.0/16".into())
}

/// What a finished pair left behind.
#[derive(Debug)]
pub(crate) struct PairRun {
    pub(crate) server: String,
    pub(crate) client: String,
    /// CPU seconds of both processes.
    pub(crate) cpu: f64,
}

fn spawn_logged(cmd: &mut Command, log: &Path) -> Result<Child> {
    let out = File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| format!("dup: {e}"))?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))
}

/// Waits for `child` until `deadline`; kills it then. Returns whether it exited by itself with status 0.
fn wait_until(child: &mut Child, deadline: Instant) -> bool {
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return s.success(),
            Ok(None) if Instant::now() < deadline => sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// Scratch directory for logs of one run.
pub(crate) fn scratch(target: &Path) -> Result<PathBuf> {
    let d = target.join("bench");
    fs::create_dir_all(&d).map_err(|e| format!("create {}: {e}", d.display()))?;
    Ok(d)
}

/// Runs `server`, waits until it listens on TCP `port`, runs `client`, and
/// waits for both (killing what still runs at `timeout`). Fails unless both
/// exit with status 0.
pub(crate) fn run_pair(
    name: &str,
    dir: &Path,
    server: &mut Command,
    port: u16,
    client: &mut Command,
    timeout: Duration,
) -> Result<PairRun> {
    let (slog, clog) = (
        dir.join(format!("{name}.server.log")),
        dir.join(format!("{name}.client.log")),
    );
    let cpu0 = reaped_children_cpu();
    let deadline = Instant::now() + timeout;
    let mut s = spawn_logged(server, &slog)?;
    while !is_listening(port) {
        if Instant::now() > deadline || matches!(s.try_wait(), Ok(Some(_))) {
            let _ = s.kill();
            let _ = s.wait();
            return Err(format!(
                "{name}: server never listened on {port}:\n{}",
                read(&slog)
            ));
        }
        sleep(Duration::from_millis(10));
    }
    let mut c = spawn_logged(client, &clog)?;
    let c_ok = wait_until(&mut c, deadline);
    // A server whose client failed would wait forever.
    let s_deadline = if c_ok {
        deadline
    } else {
        Instant::now() + Duration::from_secs(3)
    };
    let s_ok = wait_until(&mut s, s_deadline);
    let run = PairRun {
        server: read(&slog),
        client: read(&clog),
        cpu: reaped_children_cpu() - cpu0,
    };
    if c_ok && s_ok {
        Ok(run)
    } else {
        let why = first_error(&run.client)
            .or_else(|| first_error(&run.server))
            .map(|l| format!(": {l}"))
            .unwrap_or_default();
        Err(format!(
            "{name} failed (client ok: {c_ok}, server ok: {s_ok}){why}\n--- server:\n{}\n--- client:\n{}",
            tail(&run.server),
            tail(&run.client)
        ))
    }
}

/// Runs one process to completion (with a deadline); returns its output and CPU seconds.
pub(crate) fn run_one(
    name: &str,
    dir: &Path,
    cmd: &mut Command,
    timeout: Duration,
) -> Result<(String, f64)> {
    let log = dir.join(format!("{name}.log"));
    let cpu0 = reaped_children_cpu();
    let mut c = spawn_logged(cmd, &log)?;
    let ok = wait_until(&mut c, Instant::now() + timeout);
    let out = read(&log);
    if ok {
        Ok((out, reaped_children_cpu() - cpu0))
    } else {
        Err(format!("{name} failed:\n{}", tail(&out)))
    }
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_default()
}

/// The first line of a log that reports an error (perftest: `Failed status
/// 12: wr_id 0 syndrom 0x0`), for the one-line summary of a failure.
pub(crate) fn first_error(log: &str) -> Option<&str> {
    let lines = || log.lines().map(str::trim);
    lines()
        .find(|l| l.starts_with("Failed status"))
        .or_else(|| lines().find(|l| l.to_ascii_lowercase().contains("error")))
}

/// The last lines of a log, for error messages.
pub(crate) fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}

/// The first three fields of /proc/loadavg.
pub(crate) fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_error_line() {
        let log = " Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x0\n\
                   scnt=1, ccnt=1\nTest exited with Error\n";
        assert_eq!(
            first_error(log),
            Some("Failed status 12: wr_id 0 syndrom 0x0")
        );
        assert_eq!(
            first_error("x\n[1] UCX  ERROR no peer\n"),
            Some("[1] UCX  ERROR no peer")
        );
        assert_eq!(first_error("all good\n"), None);
    }

    #[test]
    fn reads_own_cpu_fields() {
        assert!(process_cpu(std::process::id()) >= 0.0);
        assert!(reaped_children_cpu() >= 0.0);
        assert!(context_switches(std::process::id()) > 0);
    }
}
