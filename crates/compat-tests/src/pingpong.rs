//! The rdma-core ping-pong programs (`ibv_{rc,uc,ud,srq}_pingpong`): the
//! acceptance cases, their output parser and the checks on a finished pair.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use crate::pair::{Endpoint, PairOutput, pcap_path, run_pair, unique_tcp_port};

/// Per pair: generous, since other builds and tests share the two cores.
pub const PAIR_TIMEOUT: Duration = Duration::from_secs(60);

/// One acceptance case: `program -g 0 <args>` on both sides.
#[derive(Debug, Clone, Copy)]
pub struct PingpongCase {
    /// A short name for messages and capture files.
    pub name: &'static str,
    /// The program's name (in `/usr/bin` for the C ones).
    pub program: &'static str,
    /// Arguments besides `-g 0 -p <port> [host]`.
    pub args: &'static [&'static str],
    /// QPs (and so `local address` lines) per side.
    pub qps: usize,
    pub iters: u64,
    /// Message size: the `bytes` line is `size * iters * 2`.
    pub size: u64,
}

/// The pairs issue 4 lists, in its order.
pub const CASES: [PingpongCase; 8] = [
    PingpongCase {
        name: "rc_default",
        program: "ibv_rc_pingpong",
        args: &[],
        qps: 1,
        iters: 1000,
        size: 4096,
    },
    PingpongCase {
        name: "rc_size_1",
        program: "ibv_rc_pingpong",
        args: &["-s", "1"],
        qps: 1,
        iters: 1000,
        size: 1,
    },
    PingpongCase {
        name: "rc_multi_packet",
        program: "ibv_rc_pingpong",
        args: &["-s", "65536", "-m", "1024"],
        qps: 1,
        iters: 1000,
        size: 65536,
    },
    PingpongCase {
        name: "rc_10000_iters",
        program: "ibv_rc_pingpong",
        args: &["-n", "10000"],
        qps: 1,
        iters: 10000,
        size: 4096,
    },
    PingpongCase {
        name: "rc_events",
        program: "ibv_rc_pingpong",
        args: &["-e"],
        qps: 1,
        iters: 1000,
        size: 4096,
    },
    PingpongCase {
        name: "uc_default",
        program: "ibv_uc_pingpong",
        args: &[],
        qps: 1,
        iters: 1000,
        size: 4096,
    },
    PingpongCase {
        name: "ud_1024",
        program: "ibv_ud_pingpong",
        args: &["-s", "1024"],
        qps: 1,
        iters: 1000,
        size: 1024,
    },
    PingpongCase {
        name: "srq_16_qps",
        program: "ibv_srq_pingpong",
        args: &["-q", "16"],
        qps: 16,
        iters: 1000,
        size: 4096,
    },
];

/// The case called `name`.
pub fn case(name: &str) -> PingpongCase {
    *CASES
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no ping-pong case {name}"))
}

/// One `local address:` / `remote address:` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PpAddress {
    pub lid: u32,
    pub qpn: u32,
    pub psn: u32,
    pub gid: String,
}

/// Everything a ping-pong program prints on stdout.
#[derive(Debug, Clone, PartialEq)]
pub struct PpReport {
    pub local: Vec<PpAddress>,
    pub remote: Vec<PpAddress>,
    pub bytes: u64,
    pub iters: u64,
}

fn hex(field: &str, prefix: &str) -> Option<u32> {
    u32::from_str_radix(field.trim().strip_prefix(prefix)?.strip_prefix("0x")?, 16).ok()
}

/// `LID 0x0000, QPN 0x1decbb, PSN 0x4711ee, GID ::ffff:1.2.3.4` (ud_pingpong
/// prints `PSN 0x...: GID` on its local line).
fn parse_address(rest: &str) -> Option<PpAddress> {
    let (lid, rest) = rest.trim().split_once(", ")?;
    let (qpn, rest) = rest.split_once(", ")?;
    let (psn, gid) = rest
        .split_once(", GID ")
        .or_else(|| rest.split_once(": GID "))?;
    Some(PpAddress {
        lid: hex(lid, "LID ")?,
        qpn: hex(qpn, "QPN ")?,
        psn: hex(psn, "PSN ")?,
        gid: gid.trim().to_owned(),
    })
}

/// Parses a ping-pong program's stdout; every line must be one it prints on
/// success.
pub fn parse_pingpong(stdout: &str) -> Result<PpReport, String> {
    let mut local = Vec::new();
    let mut remote = Vec::new();
    let mut bytes = Vec::new();
    let mut iters = Vec::new();
    for line in stdout.lines() {
        let bad = || format!("unexpected line {line:?}");
        if line.starts_with("backend: ") {
            // The Rust examples name their backend first (softrdma issue 12).
            continue;
        }
        if let Some(rest) = line.strip_prefix("  local address:  ") {
            local.push(parse_address(rest).ok_or_else(bad)?);
        } else if let Some(rest) = line.strip_prefix("  remote address: ") {
            remote.push(parse_address(rest).ok_or_else(bad)?);
        } else if let Some((n, rest)) = line.split_once(" bytes in ") {
            if !rest.ends_with(" Mbit/sec") {
                return Err(bad());
            }
            bytes.push(n.parse::<u64>().map_err(|_| bad())?);
        } else if let Some((n, rest)) = line.split_once(" iters in ") {
            if !rest.ends_with(" usec/iter") {
                return Err(bad());
            }
            iters.push(n.parse::<u64>().map_err(|_| bad())?);
        } else {
            return Err(bad());
        }
    }
    match (bytes.as_slice(), iters.as_slice()) {
        ([b], [i]) => Ok(PpReport {
            local,
            remote,
            bytes: *b,
            iters: *i,
        }),
        _ => Err(format!(
            "expected one `bytes in` and one `iters in` line, got {bytes:?} and {iters:?}"
        )),
    }
}

/// The checks on a finished pair of ping-pong processes: both exited 0 with
/// empty stderr; each printed `case.qps` local and remote addresses with LID
/// 0 and its own GID (`::ffff:<SOFTRDMA_ADDR>`); each side's remote
/// addresses are the other's local ones, in order; both report
/// `case.iters` iterations and `2 * size * iters` bytes.
pub fn check_pingpong(
    case: &PingpongCase,
    out: &PairOutput,
    server_addr: Ipv4Addr,
    client_addr: Ipv4Addr,
) -> Result<(), String> {
    let mut problems = String::new();
    let client = out.client.as_ref();
    let sides = [
        ("server", Some(&out.server), server_addr),
        ("client", client, client_addr),
    ];
    let mut reports = Vec::new();
    for (who, run, addr) in sides {
        let Some(run) = run else {
            let _ = writeln!(problems, "{who}: not started");
            continue;
        };
        if run.code() != Some(0) {
            let _ = writeln!(problems, "{who}: did not exit with 0");
        }
        if !run.stderr.is_empty() {
            let _ = writeln!(problems, "{who}: wrote to stderr");
        }
        match parse_pingpong(&run.stdout) {
            Err(e) => {
                let _ = writeln!(problems, "{who}: {e}");
            }
            Ok(r) => {
                let gid = format!("::ffff:{addr}");
                if r.local.len() != case.qps || r.remote.len() != case.qps {
                    let _ = writeln!(
                        problems,
                        "{who}: {} local and {} remote addresses, expected {} of each",
                        r.local.len(),
                        r.remote.len(),
                        case.qps
                    );
                }
                for a in &r.local {
                    if a.gid != gid || a.lid != 0 || a.qpn == 0 || a.qpn > 0xff_ffff {
                        let _ = writeln!(
                            problems,
                            "{who}: local address {a:?}: expected LID 0, GID {gid}, a 24-bit QPN"
                        );
                    }
                }
                if r.iters != case.iters || r.bytes != 2 * case.size * case.iters {
                    let _ = writeln!(
                        problems,
                        "{who}: reports {} iters and {} bytes, expected {} and {}",
                        r.iters,
                        r.bytes,
                        case.iters,
                        2 * case.size * case.iters
                    );
                }
                reports.push((who, r));
            }
        }
    }
    if let [(_, s), (_, c)] = reports.as_slice() {
        if s.remote != c.local {
            let _ = writeln!(
                problems,
                "the server's remote addresses {:?} are not the client's local ones {:?}",
                s.remote, c.local
            );
        }
        if c.remote != s.local {
            let _ = writeln!(
                problems,
                "the client's remote addresses {:?} are not the server's local ones {:?}",
                c.remote, s.local
            );
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{} pair failed:\n{problems}\n{out}", case.name))
    }
}

/// The command lines of rdma-core's ping-pong programs (and of
/// `c/rc_demo.c`, which follows them): `-g 0 -p <port> <args>` for the
/// server, the same and the server's address for the client.
pub fn pingpong_args(port: u16, args: &[&str], server: Ipv4Addr) -> (Vec<String>, Vec<String>) {
    let mut sargs: Vec<String> = vec!["-g".into(), "0".into(), "-p".into(), port.to_string()];
    sargs.extend(args.iter().map(|a| a.to_string()));
    let mut cargs = sargs.clone();
    cargs.push(server.to_string());
    (sargs, cargs)
}

/// Runs `server` and `client` with [`pingpong_args`] on a fresh TCP port.
pub fn run_pingpong_pair(
    server: &Endpoint,
    client: &Endpoint,
    args: &[&str],
    timeout: Duration,
) -> PairOutput {
    let port = unique_tcp_port();
    let (sargs, cargs) = pingpong_args(port, args, server.addr);
    run_pair(
        &mut server.command(&sargs),
        port,
        &mut client.command(&cargs),
        timeout,
    )
}

/// Runs `case` with `server` and `client` (the client connects to the
/// server's address), checks it with [`check_pingpong`] and panics with both
/// processes' output on any problem. `label` names the capture files when
/// `SOFTRDMA_COMPAT_PCAP_DIR` is set.
pub fn run_pingpong_case(case: &PingpongCase, server: Endpoint, client: Endpoint, label: &str) {
    let server = server.with_pcap(pcap_path(&format!("{label}-{}-server", case.name)));
    let client = client.with_pcap(pcap_path(&format!("{label}-{}-client", case.name)));
    let out = run_pingpong_pair(&server, &client, case.args, PAIR_TIMEOUT);
    if let Err(e) = check_pingpong(case, &out, server.addr, client.addr) {
        panic!("{label}: {e}");
    }
}

/// One `local:`/`remote:` line of `ibv_xsrq_pingpong`, without its label:
/// `LID 0000, QPN RECV 028ba0 SEND 028ba1, PSN d79f5d, SRQN 000001, GID ...`.
fn xsrq_lines<'a>(stdout: &'a str, label: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix(label))
        .map(str::trim)
        .collect()
}

/// Debian's `ibv_xsrq_pingpong -g 0` as server and client (`args` added to
/// both, e.g. `-e`), two processes: both exit 0 with `success`, each prints
/// one local and one remote line, each side's remote line is the other's
/// local one, and the SRQ numbers are not 0 (softrdma numbers XRC SRQs
/// from 1, so 0 would mean the number never reached the program).
pub fn run_xsrq_pingpong(server: Endpoint, client: Endpoint, args: &[&str], label: &str) {
    let name = format!("xsrq{}", args.join(""));
    let server = server.with_pcap(pcap_path(&format!("{label}-{name}-server")));
    let client = client.with_pcap(pcap_path(&format!("{label}-{name}-client")));
    // A run takes well under a second; the bound is for a hang.
    let out = run_pingpong_pair(&server, &client, args, Duration::from_secs(30));
    let mut problems = String::new();
    let mut sides = Vec::new();
    for (who, run) in [
        ("server", Some(&out.server)),
        ("client", out.client.as_ref()),
    ] {
        let Some(r) = run else {
            let _ = writeln!(problems, "the {who} did not run");
            continue;
        };
        if r.code() != Some(0) || r.timed_out() {
            let _ = writeln!(problems, "the {who} did not exit 0");
        }
        if r.stdout.lines().last() != Some("success") {
            let _ = writeln!(problems, "the {who} did not end with \"success\"");
        }
        let (local, remote) = (
            xsrq_lines(&r.stdout, "local:"),
            xsrq_lines(&r.stdout, "remote:"),
        );
        if local.len() != 1 || remote.len() != 1 {
            let _ = writeln!(problems, "the {who} printed {local:?} / {remote:?}");
            continue;
        }
        if local[0].contains("SRQN 000000") {
            let _ = writeln!(problems, "the {who}'s SRQ number is 0: {}", local[0]);
        }
        sides.push((local[0].to_owned(), remote[0].to_owned()));
    }
    if let [(sl, sr), (cl, cr)] = sides.as_slice()
        && (sl != cr || cl != sr)
    {
        let _ = writeln!(problems, "the addresses do not cross-match");
    }
    if !problems.is_empty() {
        panic!("{label}: ibv_xsrq_pingpong {args:?}:\n{problems}\n{out}");
    }
}

/// The installed path of a case's C program (panics with the install hint).
pub fn c_program(case: &PingpongCase) -> PathBuf {
    crate::require_binary(case.program)
}

/// One `#[test]` per entry of [`CASES`] that calls `$run("<case name>")`,
/// and a test that fails when a case has none: the test files that run the
/// whole list (on one host, across namespaces) share it this way.
#[macro_export]
macro_rules! pingpong_tests {
    ($run:path) => {
        $crate::pingpong_tests!($run;
            rc_pingpong_default: "rc_default",
            rc_pingpong_size_1: "rc_size_1",
            rc_pingpong_multi_packet_65536_mtu_1024: "rc_multi_packet",
            rc_pingpong_10000_iterations: "rc_10000_iters",
            rc_pingpong_completion_events: "rc_events",
            uc_pingpong_default: "uc_default",
            ud_pingpong_1024: "ud_1024",
            srq_pingpong_16_qps: "srq_16_qps",
        );
    };
    ($run:path; $($test:ident: $case:literal,)*) => {
        $(
            #[test]
            fn $test() {
                $run($case);
            }
        )*

        #[test]
        fn every_case_has_a_test() {
            // Keeps the list above in step with the case list.
            let tested = [$($case),*];
            for c in $crate::CASES {
                assert!(tested.contains(&c.name), "no test for {}", c.name);
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const RC: &str =
        "  local address:  LID 0x0000, QPN 0x1decbb, PSN 0x4711ee, GID ::ffff:127.0.0.92
  remote address: LID 0x0000, QPN 0x0a6a74, PSN 0x27edbe, GID ::ffff:127.0.0.91
2000 bytes in 0.05 seconds = 0.31 Mbit/sec
1000 iters in 0.05 seconds = 51.90 usec/iter
";

    #[test]
    fn parses_rc_and_ud_output() {
        let r = parse_pingpong(RC).unwrap();
        assert_eq!(
            r.local,
            vec![PpAddress {
                lid: 0,
                qpn: 0x1decbb,
                psn: 0x4711ee,
                gid: "::ffff:127.0.0.92".into()
            }]
        );
        assert_eq!(r.remote[0].qpn, 0x0a6a74);
        assert_eq!((r.bytes, r.iters), (2000, 1000));
        let ud = RC.replacen("PSN 0x4711ee, GID", "PSN 0x4711ee: GID", 1);
        assert_eq!(parse_pingpong(&ud).unwrap(), r);
    }

    #[test]
    fn rejects_other_output() {
        assert!(parse_pingpong(&format!("{RC}Failed status\n")).is_err());
        assert!(parse_pingpong("  local address:  LID 0x0000\n").is_err());
        let two = format!("{RC}1000 iters in 0.05 seconds = 51.90 usec/iter\n");
        assert!(parse_pingpong(&two).is_err());
        assert!(parse_pingpong("").is_err());
    }
}
