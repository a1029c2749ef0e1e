//! The host device at every host address: its GID table lists the host's
//! usable addresses (GID 0 the device address, then loopback and the
//! interfaces'), and each process is a member of the group at each of them.
//!
//! - `ibv_devinfo -v` with nothing configured: GID 0 is `127.0.0.1`, `::1`
//!   is among the others;
//! - in a network namespace pair (root only, like the other netns tests):
//!   an `rping -s -a 0.0.0.0` server started with nothing configured (its
//!   device at 127.0.0.1) serves a client from the other namespace that
//!   connects to its veth address, and a second server the same way serves
//!   a client of its own namespace that connects to 127.0.0.1, both `-V`;
//! - one process binds rdma_cm ids to 127.0.0.1 and then to its veth
//!   address (`c/bind_addrs.c`): both are addresses of its device;
//! - the table follows the host's addresses: an `rping -s -a 0.0.0.0`
//!   server already running when an address is added to its namespace's
//!   veth joins the device there (its socket appears, it says so under
//!   `SOFTRDMA_DEBUG`), leaves when the address is removed (the socket goes,
//!   the GID entry is emptied), joins again at the same GID index when it
//!   comes back, and serves a client from the other namespace that connects
//!   to it.
//!
//! Needs `cargo xtask compat` and rdmacm-utils; fails (never skips) without.

use softrdma_compat_tests::c_programs::{LIBIBVERBS, LIBRDMACM, build_c_program};
use softrdma_compat_tests::cm::{self, ServerEnd, run_cm_pair, turned_away};
use softrdma_compat_tests::pair::PairOutput;
use softrdma_compat_tests::rdmacm::{Host, check_rping, rping_args, strings};
use softrdma_compat_tests::*;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const PINGS: usize = 20;
const TIMEOUT: Duration = Duration::from_secs(60);

/// `program args` against `target/compat` in namespace `ns` with nothing
/// configured (no `SOFTRDMA_ADDR`): the device takes its default address.
fn unconfigured(ns: &str, program: &Path, args: &[String]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "env"]);
    for k in [
        "SOFTRDMA_ADDR",
        "SOFTRDMA_PORT",
        "SOFTRDMA_PCAP",
        "SOFTRDMA_HOST",
        "LD_PRELOAD",
    ] {
        c.args(["-u", k]);
    }
    c.arg(format!(
        "LD_LIBRARY_PATH={}",
        require_compat_dir().display()
    ));
    c.arg(program).args(args);
    c
}

#[test]
fn devinfo_lists_every_host_address() {
    let bin = require_binary("ibv_devinfo");
    let out = run_with_timeout(
        compat_command(bin)
            .env_remove("SOFTRDMA_ADDR")
            .env_remove("SOFTRDMA_PORT")
            .env_remove("SOFTRDMA_HOST")
            .arg("-v"),
        TIMEOUT,
    );
    assert_eq!(out.code(), Some(0), "{out}");
    let gids = gid_lines(&out.stdout);
    assert_eq!(
        gids.first().copied(),
        Some("GID[  0]:\t\t::ffff:127.0.0.1, RoCE v2"),
        "GID 0 must be 127.0.0.1 with nothing configured: {out}"
    );
    assert!(
        gids[1..].iter().any(|g| g.ends_with("\t::1, RoCE v2")),
        "::1 must be among the GIDs: {out}"
    );
    assert!(
        !gids.iter().any(|g| g.contains("fe80:")),
        "no link-local GIDs: {out}"
    );
    let len = out
        .stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("gid_tbl_len:"))
        .map(str::trim);
    // rxe's fixed table (engine::device::GID_TBL_LEN); empty entries are not printed.
    assert_eq!(len, Some("1024"), "{out}");
}

#[test]
fn a_wildcard_listener_serves_the_veth_and_the_loopback_address() {
    if !netns_allowed("host addresses: rping -s -a 0.0.0.0") {
        return;
    }
    require_compat_dir();
    let rping = require_binary("rping");
    let ns = NetnsPair::create();
    let any = Ipv4Addr::UNSPECIFIED;
    let lo = Ipv4Addr::LOCALHOST;

    // A client on the other "host" connects to the veth address.
    let p1 = unique_tcp_port();
    let client_a = Host::in_netns(ns.addr_a, &ns.a);
    let out = run_cm_pair(
        &mut unconfigured(&ns.b, &rping, &rping_args("-s", any, p1, PINGS)),
        // Its device is at 127.0.0.1; the veth address is its other GID.
        ns.addr_b,
        || {
            client_a.command(
                "rping",
                "host-addrs",
                &rping_args("-c", ns.addr_b, p1, PINGS),
            )
        },
        turned_away,
        ServerEnd::Exits,
        TIMEOUT,
    );
    if let Err(e) = check_rping(&out, PINGS, 64) {
        panic!("client from the other namespace to {}: {e}", ns.addr_b);
    }

    // A client on the same "host", also with nothing configured, connects
    // to 127.0.0.1.
    let p2 = unique_tcp_port();
    let out = run_cm_pair(
        &mut unconfigured(&ns.b, &rping, &rping_args("-s", any, p2, PINGS)),
        lo,
        || unconfigured(&ns.b, &rping, &rping_args("-c", lo, p2, PINGS)),
        turned_away,
        ServerEnd::Exits,
        TIMEOUT,
    );
    if let Err(e) = check_rping(&out, PINGS, 64) {
        panic!("client of the same namespace to 127.0.0.1: {e}");
    }
}

#[test]
fn one_process_binds_loopback_and_its_veth_address() {
    if !netns_allowed("host addresses: rdma_bind_addr to two addresses") {
        return;
    }
    require_compat_dir();
    let bin = build_c_program(
        "bind_addrs",
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &[LIBRDMACM, LIBIBVERBS],
    );
    let ns = NetnsPair::create();
    let addrs = strings(&["127.0.0.1", &ns.addr_b.to_string()]);
    let out = run_with_timeout(&mut unconfigured(&ns.b, &bin, &addrs), TIMEOUT);
    assert_eq!(out.code(), Some(0), "{out}");
    for a in &addrs {
        assert!(
            out.stdout.contains(&format!("bind {a} ok")),
            "binding {a}: {out}"
        );
    }
}

#[test]
fn a_running_listener_serves_an_address_added_after_it_started() {
    if !netns_allowed("host addresses: an address added while rping -s runs") {
        return;
    }
    require_compat_dir();
    let rping = require_binary("rping");
    let ns = NetnsPair::create();
    let port = unique_tcp_port();
    let mut cmd = unconfigured(
        &ns.b,
        &rping,
        &rping_args("-s", Ipv4Addr::UNSPECIFIED, port, PINGS),
    );
    cmd.env("SOFTRDMA_DEBUG", "1");
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut server = spawn(&mut cmd);
    let wait_bound = |server: &mut Spawned, addr: Ipv4Addr, what: &str| {
        while !cm::device_bound(server.pid(), addr) {
            assert!(
                server.poll().is_none() && std::time::Instant::now() < deadline,
                "{what}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_bound(&mut server, Ipv4Addr::LOCALHOST, "the server did not start");
    // Its veth address bound too: the device has read the addresses it
    // starts with, so the next one is a change it must follow.
    wait_bound(
        &mut server,
        ns.addr_b,
        "the server did not join its veth address",
    );
    // The namespace gets a second address on its veth while rping runs,
    // loses it, and gets it back.
    let added = ns.add_addr(true, 77);
    wait_bound(
        &mut server,
        added,
        "the running server did not join the device at the added address",
    );
    ns.del_addr(true, added);
    while cm::device_bound(server.pid(), added) {
        assert!(
            server.poll().is_none() && std::time::Instant::now() < deadline,
            "the running server did not leave the removed address"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    ns.add_addr(true, 77);
    wait_bound(
        &mut server,
        added,
        "the running server did not join it again",
    );
    std::thread::sleep(Duration::from_millis(100));
    let client = Host::in_netns(ns.addr_a, &ns.a);
    let c = spawn(&mut client.command(
        "rping",
        "host-addrs-added",
        &rping_args("-c", added, port, PINGS),
    ));
    let client_out = c.finish(deadline);
    let mut out = PairOutput {
        server: server.finish(std::time::Instant::now() + Duration::from_secs(10)),
        client: Some(client_out),
        note: None,
    };
    // The notes under SOFTRDMA_DEBUG (joined, left, joined again at the
    // same, emptied GID index), then rping's own checks without them.
    let joined = format!("softrdma: the host device is now also at {added} (GID ");
    let left = format!("softrdma: the host device is no longer at {added} (GID Some(");
    let notes: Vec<&str> = out
        .server
        .stderr
        .lines()
        .filter(|l| l.starts_with(&joined) || l.starts_with(&left))
        .collect();
    assert_eq!(notes.len(), 3, "joined, left, joined:\n{out}");
    let index = |l: &str| {
        l.rsplit("GID ")
            .next()
            .map(|t| t.trim_matches(|c: char| !c.is_ascii_digit()).to_owned())
    };
    assert!(
        notes.iter().all(|l| index(l) == index(notes[0])),
        "one GID index throughout: {notes:?}"
    );
    out.server.stderr = out
        .server
        .stderr
        .lines()
        .filter(|l| !l.starts_with(&joined) && !l.starts_with(&left))
        // With the same-host path on (SOFTRDMA_SHM=1), the note on a QP's
        // peer copy decision.
        .filter(|l| !l.starts_with("softrdma: QP to QPN "))
        .map(|l| format!("{l}\n"))
        .collect();
    if let Err(e) = check_rping(&out, PINGS, 64) {
        panic!("client to the address added at {added}: {e}");
    }
}
