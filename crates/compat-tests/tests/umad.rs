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
