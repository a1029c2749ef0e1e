//! Issue 21: `libibumad.so.3` from `target/compat`.
//!
//! - Debian's unmodified `ibstat` (infiniband-diags, over libibumad's
//!   `umad_get_ca_device_list`/`umad_get_ca`/`umad_get_port`) describes
//!   softrdma0: port 1 Active, LinkUp, link layer Ethernet, LID 0, port GUID
//!   the low half of GID 0 (`::ffff:<SOFTRDMA_ADDR>`); `ibstat -l` lists it.
//! - `c/pma_query.c` reads a second process's port counters with PMA Get
//!   MADs (PortCounters, PortCountersExtended) through `umad_send`/`umad_recv`
//!   on QP1, sends it UD datagrams, and checks the counters grew; an error
//!   status for a bad PortSelect and `ETIMEDOUT` for a Get nobody answers.
//! - A process that registers as the Get server of a class (vendor class
//!   0x09) gets the Get even when it is the second member at its address
//!   (the first, which the kernel's steering gives requests to, hands it
//!   on), and its answer reaches the asker. (Not the PMA's class: a server
//!   serves its class for the whole host device, so it would take the other
//!   tests' PMA requests.)
//!
//! Needs `cargo xtask compat`, infiniband-diags, libibumad-dev and
//! libibverbs-dev; fails (never skips) without.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use softrdma_compat_tests::c_programs::{LIBIBUMAD, LIBIBVERBS, build_c_program};
use softrdma_compat_tests::*;

/// `127.53.x.y`: this file's loopback addresses (`127.53.255.254` is the
/// address nobody serves, in `c/pma_query.c`).
const NET: u8 = 53;
const TIMEOUT: Duration = Duration::from_secs(60);

fn ibstat(args: &[&str], addr: Ipv4Addr) -> RunOutput {
    let out = run_with_timeout(
        compat_command(require_binary("ibstat"))
            .env("SOFTRDMA_ADDR", addr.to_string())
            .args(args),
        TIMEOUT,
    );
    assert_eq!(out.code(), Some(0), "{out}");
    out
}

/// The value of `key: value` in ibstat's output.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.trim().split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

#[test]
fn ibstat_describes_softrdma0() {
    let addr = unique_loopback_addr(NET);
    let out = ibstat(&[], addr);
    assert_eq!(out.stdout.lines().next(), Some("CA 'softrdma0'"), "{out}");
    let guid = format!("0x0000ffff{:08x}", u32::from(addr));
    for (key, value) in [
        ("Number of ports", "1"),
        ("State", "Active"),
        ("Physical state", "LinkUp"),
        ("Rate", "100"),
        ("Base lid", "0"),
        ("Link layer", "Ethernet"),
        ("Port GUID", guid.as_str()),
    ] {
        assert_eq!(field(&out.stdout, key), Some(value), "`{key}`: {out}");
    }
    assert_eq!(ibstat(&["-l"], addr).stdout, "softrdma0\n");
    assert_eq!(ibstat(&["-p"], addr).stdout, format!("{guid}\n"));
    let out = run_with_timeout(
        compat_command(require_binary("ibstat"))
            .env("SOFTRDMA_ADDR", addr.to_string())
            .arg("mlx5_0"),
        TIMEOUT,
    );
    assert_ne!(out.code(), Some(0), "a CA that is not there: {out}");
}

fn pma_query() -> PathBuf {
    build_c_program(
        "pma_query",
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &[LIBIBUMAD, LIBIBVERBS],
    )
}

#[test]
fn pma_reads_a_peers_counters_over_qp1() {
    let bin = pma_query();
    let (peer_addr, my_addr) = (unique_loopback_addr(NET), unique_loopback_addr(NET));
    let mut peer = spawn(
        compat_command(&bin)
            .env("SOFTRDMA_ADDR", peer_addr.to_string())
            .arg("peer"),
    );
    let deadline = Instant::now() + TIMEOUT;
    assert!(
        peer.wait_for_stdout(deadline, |s| s.contains('\n')),
        "peer did not start: {}",
        peer.stderr_so_far()
    );
    let qpn = peer
        .stdout_so_far()
        .lines()
        .find_map(|l| l.strip_prefix("qpn ").map(str::to_owned))
        .expect("qpn line");
    let count = 20;
    let out = run_with_timeout(
        compat_command(&bin)
            .env("SOFTRDMA_ADDR", my_addr.to_string())
            .args(["query", &peer_addr.to_string(), &qpn, &count.to_string()]),
        TIMEOUT,
    );
    let stop = Command::new("kill")
        .args(["-USR1", &peer.pid().to_string()])
        .status()
        .expect("kill");
    assert!(stop.success());
    let peer_out = peer.finish(Instant::now() + TIMEOUT);
    assert_eq!(out.code(), Some(0), "{out}\npeer: {peer_out}");
    assert!(out.stdout.ends_with("ok\n"), "{out}");
    assert_eq!(peer_out.code(), Some(0), "{peer_out}");
    assert!(
        peer_out.stdout.contains(&format!("received {count}\n")),
        "the peer's QP got every datagram: {peer_out}"
    );
}

/// Reads `SOFTRDMA_STATS` dump `path`'s `key` (summed over its blocks).
fn dumped(path: &Path, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse::<u64>().ok())
        .sum()
}

#[test]
fn a_registered_server_gets_requests_for_its_class() {
    let bin = pma_query();
    let (shared, asker) = (unique_loopback_addr(NET), unique_loopback_addr(NET));
    let stats = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("umad-first-member-{}.stats", std::process::id()));
    let _ = std::fs::remove_file(&stats);
    let deadline = Instant::now() + TIMEOUT;
    // The first member at `shared`: the steering's choice for requests.
    let mut first = spawn(
        compat_command(&bin)
            .env("SOFTRDMA_ADDR", shared.to_string())
            .env("SOFTRDMA_STATS", &stats)
            .arg("peer"),
    );
    assert!(
        first.wait_for_stdout(deadline, |s| s.contains("qpn ")),
        "first member: {}",
        first.stderr_so_far()
    );
    let mut server = spawn(
        compat_command(&bin)
            .env("SOFTRDMA_ADDR", shared.to_string())
            .arg("serve"),
    );
    assert!(
        server.wait_for_stdout(deadline, |s| s.contains("serving")),
        "server: {}",
        server.stderr_so_far()
    );
    let out = run_with_timeout(
        compat_command(&bin)
            .env("SOFTRDMA_ADDR", asker.to_string())
            .args(["ask", &shared.to_string()]),
        TIMEOUT,
    );
    let served = server.finish(deadline);
    let stop = Command::new("kill")
        .args(["-USR1", &first.pid().to_string()])
        .status()
        .expect("kill");
    assert!(stop.success());
    let first_out = first.finish(deadline);
    assert_eq!(out.code(), Some(0), "{out}\nserver: {served}");
    assert_eq!(
        out.stdout, "answer 0xc0ffee\n",
        "the server's answer: {out}"
    );
    assert_eq!(served.code(), Some(0), "{served}");
    assert!(served.stdout.contains("served 1\n"), "{served}");
    assert_eq!(first_out.code(), Some(0), "{first_out}");
    assert!(
        dumped(&stats, "host_forwarded") >= 1,
        "the first member handed the request on: {}",
        std::fs::read_to_string(&stats).unwrap_or_default()
    );
    let _ = std::fs::remove_file(&stats);
}
