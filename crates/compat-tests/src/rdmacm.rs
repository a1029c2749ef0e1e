//! The rdmacm-utils acceptance cases of issue 5 (`rping`, `rdma_server` /
//! `rdma_client`, `ucmatose`, `udaddy`, `mckey`, `cmtime`), their output
//! checks, and a [`Host`] to run them on this host or in a network namespace.
//!
//! Every program runs with the options the issue gives and no others (their
//! default rdma_cm ports are fine: each process has its own device address).
//! One exception: rping's `-S 65536` is refused by rping itself ("Invalid
//! size 65536 (valid range is 23 to 65536)", exit 22, also on rdma-core's
//! own libraries: its check is `size > 65535`), so the large case is
//! `-S 65535`.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cm::{ServerEnd, run_cm_pair, turned_away};
use crate::pair::{Endpoint, PairOutput, pcap_path};
use crate::{RunOutput, require_binary, spawn};

/// Per pair: generous, since other builds and tests share the two cores.
pub const PAIR_TIMEOUT: Duration = Duration::from_secs(60);

/// rping's message count in the acceptance cases.
pub const RPING_COUNT: usize = 100;

/// The multicast group of the mckey case.
pub const MCAST_GROUP: &str = "224.1.2.3";

/// Where one process runs: its device address and, optionally, a network
/// namespace.
#[derive(Debug, Clone)]
pub struct Host {
    pub addr: Ipv4Addr,
    pub netns: Option<String>,
}

impl Host {
    /// A process on this host (loopback address).
    pub fn local(addr: Ipv4Addr) -> Host {
        Host { addr, netns: None }
    }

    /// A process in network namespace `ns`.
    pub fn in_netns(addr: Ipv4Addr, ns: &str) -> Host {
        Host {
            addr,
            netns: Some(ns.to_owned()),
        }
    }

    /// `program` (from `/usr/bin`) against `target/compat` on this host,
    /// capturing packets if `SOFTRDMA_COMPAT_PCAP_DIR` is set (`label`).
    pub fn endpoint(&self, program: &str, label: &str) -> Endpoint {
        let ep = Endpoint::compat(require_binary(program), self.addr)
            .with_pcap(pcap_path(&format!("{label}-{}", self.addr)));
        match &self.netns {
            Some(ns) => ep.in_netns(ns),
            None => ep,
        }
    }

    /// `program args` as a command on this host.
    pub fn command(&self, program: &str, label: &str, args: &[String]) -> Command {
        self.endpoint(program, label).command(args)
    }

    /// The same under `stdbuf -oL`, so its stdout lines can be read while it runs.
    pub fn line_buffered(&self, program: &str, label: &str, args: &[String]) -> Command {
        let mut ep = self.endpoint(program, label);
        let prog = std::mem::replace(&mut ep.program, stdbuf());
        let mut full = vec!["-oL".to_owned(), prog.display().to_string()];
        full.extend(args.iter().cloned());
        ep.command(&full)
    }
}

fn stdbuf() -> PathBuf {
    let p = PathBuf::from("/usr/bin/stdbuf");
    assert!(p.is_file(), "/usr/bin/stdbuf is missing (coreutils)");
    p
}

/// Owned arguments, as [`Host::command`] takes them.
pub fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// `rping ROLE -a ADDR -p PORT -C PINGS -v -V`: `pings` verified pings on
/// rdma_cm port `port` (ROLE `-s` or `-c`).
pub fn rping_args(role: &str, addr: Ipv4Addr, port: u16, pings: usize) -> Vec<String> {
    strings(&[
        role,
        "-a",
        &addr.to_string(),
        "-p",
        &port.to_string(),
        "-C",
        &pings.to_string(),
        "-v",
        "-V",
    ])
}

/// Collects problems of one run; `Err` with all of them and the outputs.
#[derive(Default)]
struct Problems(String);

impl Problems {
    fn add(&mut self, who: &str, what: impl std::fmt::Display) {
        let _ = writeln!(self.0, "{who}: {what}");
    }

    /// Checks exit 0 and that every stderr line is one of `allowed_stderr`.
    fn exited_ok(&mut self, who: &str, run: Option<&RunOutput>, allowed_stderr: &[&str]) {
        let Some(run) = run else {
            self.add(who, "not started");
            return;
        };
        if run.code() != Some(0) {
            self.add(who, "did not exit with 0");
        }
        for line in run.stderr.lines() {
            if !allowed_stderr.contains(&line) {
                self.add(who, format_args!("unexpected stderr line {line:?}"));
            }
        }
    }

    fn finish(self, case: &str, out: impl std::fmt::Display) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(format!("{case} failed:\n{}\n{out}", self.0))
        }
    }
}

// ---------------------------------------------------------------- rping

/// The text rping puts in ping `n` of `size` bytes (without the trailing
/// NUL): `rdma-ping-<n>: ` and then characters from `'A' + n` on, cycling
/// through `A..=z` (rdma-core's `rping_test_client`).
pub fn rping_text(n: usize, size: usize) -> String {
    let mut s = format!("rdma-ping-{n}: ");
    let mut c = b'A' + (n % 58) as u8;
    while s.len() < size - 1 {
        s.push(c as char);
        c = if c == b'z' { b'A' } else { c + 1 };
    }
    s.truncate(size - 1);
    s
}

/// Checks that `stdout` is exactly `count` lines `<prefix><rping_text(n)>`,
/// n = 0, 1, ...
pub fn check_rping_lines(
    stdout: &str,
    prefix: &str,
    count: usize,
    size: usize,
) -> Result<(), String> {
    let lines: Vec<&str> = stdout.lines().collect();
    if lines.len() != count {
        return Err(format!(
            "{} lines, expected {count} `{prefix}...` lines",
            lines.len()
        ));
    }
    for (n, line) in lines.iter().enumerate() {
        let want = format!("{prefix}{}", rping_text(n, size));
        if *line != want {
            let show = |s: &str| s.chars().take(80).collect::<String>();
            return Err(format!(
                "line {n} is {:?}... ({} bytes), expected {:?}... ({} bytes)",
                show(line),
                line.len(),
                show(&want),
                want.len()
            ));
        }
    }
    Ok(())
}

/// stderr lines rping prints on a normal end: the DISCONNECTED event, and
/// the server's report that its wait for the next message ended with the
/// disconnect (state 10 = DISCONNECTED).
const RPING_STDERR: [&str; 3] = [
    "server DISCONNECT EVENT...",
    "client DISCONNECT EVENT...",
    "wait for RDMA_READ_ADV state 10",
];

/// Checks a finished `rping -C count -v [-S size]` pair: both exit 0 with
/// only `RPING_STDERR` lines on stderr; the client printed `ping data: `
/// and the server `server ping data: ` for each of the `count` pings, with
/// rping's exact content.
pub fn check_rping(out: &PairOutput, count: usize, size: usize) -> Result<(), String> {
    let mut p = Problems::default();
    p.exited_ok("server", Some(&out.server), &RPING_STDERR);
    p.exited_ok("client", out.client.as_ref(), &RPING_STDERR);
    if let Err(e) = check_rping_lines(&out.server.stdout, "server ping data: ", count, size) {
        p.add("server", e);
    }
    if let Some(c) = &out.client
        && let Err(e) = check_rping_lines(&c.stdout, "ping data: ", count, size)
    {
        p.add("client", e);
    }
    p.finish(&format!("rping -C {count} -S {size}"), out)
}

/// Runs `rping -s -a S -C 100 -v [-S size]` on `server` and `rping -c -a S
/// -C 100 -v [-S size]` on `client`; panics with both outputs on a problem.
pub fn run_rping(server: &Host, client: &Host, size: Option<usize>, label: &str) {
    let mut args = strings(&["-a", &server.addr.to_string(), "-C", "100", "-v"]);
    if let Some(s) = size {
        args.extend(strings(&["-S", &s.to_string()]));
    }
    let sargs: Vec<String> = std::iter::once("-s".to_owned())
        .chain(args.clone())
        .collect();
    let cargs: Vec<String> = std::iter::once("-c".to_owned()).chain(args).collect();
    let label = format!("{label}-rping");
    let out = run_cm_pair(
        &mut server.command("rping", &label, &sargs),
        server.addr,
        || client.command("rping", &label, &cargs),
        turned_away,
        ServerEnd::Exits,
        PAIR_TIMEOUT,
    );
    // rping's default size: 64 bytes.
    if let Err(e) = check_rping(&out, RPING_COUNT, size.unwrap_or(64)) {
        panic!("{label}: {e}");
    }
}

// ---------------------------------------------------------------- line checks

/// Checks that `expected` appear in `stdout` in this order (other lines may
/// come between), that the last line is `last`, and that no line mentions a
/// CM event or an error (what these programs print when something fails).
pub fn check_lines(stdout: &str, expected: &[&str], last: &str) -> Result<(), String> {
    let lines: Vec<&str> = stdout.lines().collect();
    let mut i = 0;
    for want in expected {
        match lines[i..].iter().position(|l| l.starts_with(want)) {
            Some(k) => i += k + 1,
            None => return Err(format!("no line `{want}` (in this order)")),
        }
    }
    if lines.last() != Some(&last) {
        return Err(format!("the last line is not `{last}`"));
    }
    if let Some(l) = lines.iter().find(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("event:") || l.contains("error") || l.contains("fail")
    }) {
        return Err(format!("unexpected line {l:?}"));
    }
    Ok(())
}

/// A client/server case whose success is a sequence of lines on each side.
struct LinesCase {
    name: &'static str,
    program: &'static str,
    server_args: Vec<String>,
    client_args: Vec<String>,
    server_lines: &'static [&'static str],
    client_lines: &'static [&'static str],
    last: &'static str,
}

fn run_lines_case(case: LinesCase, server: &Host, client: &Host, label: &str) {
    let label = format!("{label}-{}", case.name);
    let out = run_cm_pair(
        &mut server.command(case.program, &label, &case.server_args),
        server.addr,
        || client.command(case.program, &label, &case.client_args),
        turned_away,
        ServerEnd::Exits,
        PAIR_TIMEOUT,
    );
    let mut p = Problems::default();
    p.exited_ok("server", Some(&out.server), &[]);
    p.exited_ok("client", out.client.as_ref(), &[]);
    if let Err(e) = check_lines(&out.server.stdout, case.server_lines, case.last) {
        p.add("server", e);
    }
    if let Some(c) = &out.client
        && let Err(e) = check_lines(&c.stdout, case.client_lines, case.last)
    {
        p.add("client", e);
    }
    if let Err(e) = p.finish(case.name, &out) {
        panic!("{label}: {e}");
    }
}

/// `ucmatose -c 10` / `ucmatose -s S -c 10`: ten RC connections, data both
/// ways, `return status 0` on both sides.
pub fn run_ucmatose(server: &Host, client: &Host, label: &str) {
    run_lines_case(
        LinesCase {
            name: "ucmatose",
            program: "ucmatose",
            server_args: strings(&["-c", "10"]),
            client_args: strings(&["-s", &server.addr.to_string(), "-c", "10"]),
            server_lines: &[
                "cmatose: starting server",
                "initiating data transfers",
                "completing sends",
                "receiving data transfers",
                "data transfers complete",
                "cmatose: disconnecting",
                "disconnected",
                "test complete",
            ],
            client_lines: &[
                "cmatose: starting client",
                "cmatose: connecting",
                "receiving data transfers",
                "sending replies",
                "data transfers complete",
                "test complete",
            ],
            last: "return status 0",
        },
        server,
        client,
        label,
    );
}

/// `udaddy` / `udaddy -s S`: UD over rdma_cm (SIDR), `return status 0` on
/// both sides.
pub fn run_udaddy(server: &Host, client: &Host, label: &str) {
    run_lines_case(
        LinesCase {
            name: "udaddy",
            program: "udaddy",
            server_args: vec![],
            client_args: strings(&["-s", &server.addr.to_string()]),
            server_lines: &[
                "udaddy: starting server",
                "receiving data transfers",
                "sending replies",
                "data transfers complete",
                "test complete",
            ],
            client_lines: &[
                "udaddy: starting client",
                "udaddy: connecting",
                "initiating data transfers",
                "receiving data transfers",
                "data transfers complete",
                "test complete",
            ],
            last: "return status 0",
        },
        server,
        client,
        label,
    );
}

/// `rdma_server` / `rdma_client -s S`: each prints exactly `<name>: start`
/// and `<name>: end 0`.
pub fn run_rdma_server_client(server: &Host, client: &Host, label: &str) {
    let label = format!("{label}-rdma_server_client");
    let cargs = strings(&["-s", &server.addr.to_string()]);
    let out = run_cm_pair(
        &mut server.command("rdma_server", &label, &[]),
        server.addr,
        || client.command("rdma_client", &label, &cargs),
        turned_away,
        ServerEnd::Exits,
        PAIR_TIMEOUT,
    );
    let mut p = Problems::default();
    p.exited_ok("server", Some(&out.server), &[]);
    p.exited_ok("client", out.client.as_ref(), &[]);
    for (who, run) in [
        ("rdma_server", Some(&out.server)),
        ("rdma_client", out.client.as_ref()),
    ] {
        if let Some(r) = run {
            let want = format!("{who}: start\n{who}: end 0\n");
            if r.stdout != want {
                p.add(who, format_args!("stdout is not {want:?}"));
            }
        }
    }
    if let Err(e) = p.finish("rdma_server/rdma_client", &out) {
        panic!("{label}: {e}");
    }
}

/// Issue 20: `rdma_xserver -c x -p P` / `rdma_xclient -c x -s S -p P` (an
/// XRC receive QP and XRC SRQ from rdma_cm, the SRQ number in the accept's
/// private data, one inline SEND from an XRC send QP): each prints exactly
/// `<name>: start` and `<name>: end 0`.
pub fn run_rdma_xserver_xclient(server: &Host, client: &Host, label: &str) {
    let label = format!("{label}-rdma_xserver_xclient");
    let port = crate::pair::unique_tcp_port().to_string();
    let sargs = strings(&["-c", "x", "-p", &port]);
    let cargs = strings(&["-c", "x", "-s", &server.addr.to_string(), "-p", &port]);
    let out = run_cm_pair(
        &mut server.command("rdma_xserver", &label, &sargs),
        server.addr,
        || client.command("rdma_xclient", &label, &cargs),
        turned_away,
        ServerEnd::Exits,
        Duration::from_secs(30),
    );
    let mut p = Problems::default();
    p.exited_ok("server", Some(&out.server), &[]);
    p.exited_ok("client", out.client.as_ref(), &[]);
    for (who, run) in [
        ("rdma_xserver", Some(&out.server)),
        ("rdma_xclient", out.client.as_ref()),
    ] {
        if let Some(r) = run {
            // These two print argv[0], the program's full path.
            let path = require_binary(who).display().to_string();
            let want = format!("{path}: start\n{path}: end 0\n");
            if r.stdout != want {
                p.add(who, format_args!("stdout is not {want:?}"));
            }
        }
    }
    if let Err(e) = p.finish("rdma_xserver/rdma_xclient", &out) {
        panic!("{label}: {e}");
    }
}

// ---------------------------------------------------------------- cmtime

/// cmtime's steps, in the order of its report.
pub const CMTIME_STEPS: [&str; 7] = [
    "create id",
    "resolve addr",
    "resolve route",
    "create qp",
    "connect",
    "disconnect",
    "destroy",
];

/// One row of cmtime's report: total ms, max ms, min us, us / conn.
pub type CmtimeRow = [f64; 4];

/// Parses cmtime's client output: the progress lines, then the report
/// table with a row of four numbers for each of [`CMTIME_STEPS`]. Fails on
/// any `event:` line (a connection that failed).
pub fn parse_cmtime(stdout: &str) -> Result<Vec<CmtimeRow>, String> {
    if let Some(l) = stdout.lines().find(|l| l.contains("event:")) {
        return Err(format!("a connection failed: {l:?}"));
    }
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with("step"));
    let header = lines.next().ok_or("no report table (`step ...` header)")?;
    if !(header.contains("total ms") && header.contains("us / conn")) {
        return Err(format!("unexpected header {header:?}"));
    }
    let mut rows = Vec::new();
    for step in CMTIME_STEPS {
        let line = lines
            .next()
            .ok_or_else(|| format!("the report has no `{step}` row"))?;
        let (name, nums) = line
            .split_once(':')
            .ok_or_else(|| format!("unexpected row {line:?}"))?;
        if name.trim() != step {
            return Err(format!("row {line:?}: expected step `{step}`"));
        }
        let vals: Vec<f64> = nums
            .split_whitespace()
            .map(|v| v.parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("row {line:?}: not four numbers"))?;
        let row: CmtimeRow = vals
            .try_into()
            .map_err(|_| format!("row {line:?}: not four numbers"))?;
        if row.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(format!("row {line:?}: a negative or odd number"));
        }
        rows.push(row);
    }
    if let Some(extra) = lines.find(|l| !l.trim().is_empty()) {
        return Err(format!("unexpected line after the report: {extra:?}"));
    }
    Ok(rows)
}

/// `cmtime -b S` server and `cmtime -s S -c 50` client: the client exits 0
/// with a complete report (connect took a positive time), the server still
/// serves (it runs until killed) and is killed afterwards.
pub fn run_cmtime(server: &Host, client: &Host, label: &str) {
    let label = format!("{label}-cmtime");
    let saddr = server.addr.to_string();
    let out = run_cm_pair(
        &mut server.command("cmtime", &label, &strings(&["-b", &saddr])),
        server.addr,
        || client.command("cmtime", &label, &strings(&["-s", &saddr, "-c", "50"])),
        turned_away,
        ServerEnd::RunsUntilKilled,
        PAIR_TIMEOUT,
    );
    let mut p = Problems::default();
    p.exited_ok("client", out.client.as_ref(), &[]);
    if !out.server.timed_out() {
        p.add("server", "ended by itself: it should serve until killed");
    }
    if !out.server.stderr.is_empty() {
        p.add("server", "wrote to stderr");
    }
    if let Some(c) = &out.client {
        match parse_cmtime(&c.stdout) {
            Err(e) => p.add("client", e),
            Ok(rows) => {
                if rows[4][0] <= 0.0 {
                    p.add("client", "the connect step took no time at all");
                }
            }
        }
        for step in [
            "creating id",
            "resolving address",
            "resolving route",
            "creating qp",
            "connecting",
            "disconnecting",
            "destroying id",
        ] {
            if !c.stdout.lines().any(|l| l == step) {
                p.add("client", format_args!("no progress line `{step}`"));
            }
        }
    }
    if let Err(e) = p.finish("cmtime -c 50", &out) {
        panic!("{label}: {e}");
    }
}

// ---------------------------------------------------------------- mckey

/// Runs mckey receivers (`mckey -m 224.1.2.3 -b R`) on `receivers`, waits
/// until each has joined the group, then a sender (`mckey -m 224.1.2.3 -b S
/// -s`) on `sender`. Every process must end with `return status 0`, the
/// receivers after "receiving data transfers" and "data transfers complete"
/// (mckey's 10 messages reached each of them).
pub fn run_mckey(receivers: &[Host], sender: &Host, label: &str) {
    let label = format!("{label}-mckey");
    let deadline = Instant::now() + PAIR_TIMEOUT;
    let mut report = String::new();
    let mut problems = Problems::default();
    let mut running = Vec::new();
    let joined = format!("mckey: joined dgid: ::ffff:{MCAST_GROUP}");
    for (i, r) in receivers.iter().enumerate() {
        let args = strings(&["-m", MCAST_GROUP, "-b", &r.addr.to_string()]);
        let mut p = spawn(&mut r.line_buffered("mckey", &label, &args));
        if !p.wait_for_stdout(deadline, |o| o.contains(&joined)) {
            problems.add(&format!("receiver {i}"), "did not join the group");
        }
        running.push((format!("receiver {i}"), p));
    }
    // Without a sender the receivers would wait for ever: stop them now.
    let mut until = Instant::now();
    if problems.0.is_empty() {
        let args = strings(&["-m", MCAST_GROUP, "-b", &sender.addr.to_string(), "-s"]);
        running.push((
            "sender".into(),
            spawn(&mut sender.command("mckey", &label, &args)),
        ));
        until = deadline;
    }
    // The sender first (it ends first), then the receivers; a failure gives
    // the others a few seconds only.
    let mut outs = Vec::new();
    while let Some((who, p)) = running.pop() {
        let out = p.finish(until);
        if out.code() != Some(0) {
            until = until.min(Instant::now() + Duration::from_secs(5));
        }
        outs.push((who, out));
    }
    for (who, out) in outs.iter().rev() {
        let _ = writeln!(report, "===== {who} =====\n{out}");
        problems.exited_ok(who, Some(out), &[]);
        let check = if who == "sender" {
            check_lines(
                &out.stdout,
                &[
                    "mckey: starting client",
                    "mckey: joining",
                    &joined,
                    "initiating data transfers",
                    "data transfers complete",
                    "test complete",
                ],
                "return status 0",
            )
        } else {
            check_lines(
                &out.stdout,
                &[
                    "mckey: starting server",
                    "mckey: joining",
                    &joined,
                    "receiving data transfers",
                    "data transfers complete",
                    "test complete",
                ],
                "return status 0",
            )
        };
        if let Err(e) = check {
            problems.add(who, e);
        }
    }
    if let Err(e) = problems.finish("mckey", report) {
        panic!("{label}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rping_text_matches_rping() {
        assert_eq!(
            rping_text(0, 64),
            "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
        );
        assert_eq!(
            rping_text(2, 64),
            "rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst"
        );
        // Wraps from 'z' to 'A', and the start moves on with n.
        let t = rping_text(57, 64);
        assert!(t.starts_with("rdma-ping-57: zABC"), "{t}");
        assert!(rping_text(58, 64).starts_with("rdma-ping-58: ABC"));
        assert_eq!(rping_text(99, 65535).len(), 65534);
    }

    const CMTIME: &str = "creating id
resolving address
resolving route
creating qp
connecting
disconnecting
destroying id
step              total ms     max ms     min us  us / conn
create id    :        0.02       0.00       0.00       0.44
resolve addr :       19.87      19.48   12635.00     397.36
resolve route:        1.70       0.16      13.00      34.02
create qp    :        0.20       0.07       1.00       3.96
connect      :        1.71       1.64    1023.00      34.10
disconnect   :        1.23       0.51      82.00      24.66
destroy      :        0.10       0.01       1.00       2.04
";

    #[test]
    fn parses_cmtime_report() {
        let rows = parse_cmtime(CMTIME).unwrap();
        assert_eq!(rows.len(), 7);
        assert_eq!(rows[1], [19.87, 19.48, 12635.0, 397.36]);
        // A rejected connection, and its glued numbers, are errors.
        let bad = CMTIME.replace(
            "connecting\n",
            "connecting\nevent: RDMA_CM_EVENT_REJECTED, error: 8\n",
        );
        assert!(parse_cmtime(&bad).is_err());
        let glued = CMTIME.replace("1.23       0.51      82.00", "0.00       0.001000000000.00");
        assert!(parse_cmtime(&glued).is_err());
        assert!(parse_cmtime(&CMTIME[..CMTIME.len() - 60]).is_err());
    }

    #[test]
    fn rping_line_checks() {
        let good: String = (0..3)
            .map(|n| format!("ping data: {}\n", rping_text(n, 64)))
            .collect();
        check_rping_lines(&good, "ping data: ", 3, 64).unwrap();
        assert!(check_rping_lines(&good, "ping data: ", 4, 64).is_err());
        assert!(check_rping_lines(&good, "server ping data: ", 3, 64).is_err());
        let swapped = good.replacen("rdma-ping-1", "rdma-ping-2", 1);
        assert!(check_rping_lines(&swapped, "ping data: ", 3, 64).is_err());
        let corrupt = good.replacen("XYZ", "XYY", 1);
        assert!(check_rping_lines(&corrupt, "ping data: ", 3, 64).is_err());
    }

    #[test]
    fn line_checks() {
        let out = "a\nb\nx\nc\nreturn status 0\n";
        assert!(check_lines(out, &["a", "c"], "return status 0").is_ok());
        assert!(check_lines(out, &["c", "a"], "return status 0").is_err());
        assert!(check_lines(out, &["a"], "return status 1").is_err());
        let failed = "a\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\nreturn status 0\n";
        assert!(check_lines(failed, &["a"], "return status 0").is_err());
    }
}
