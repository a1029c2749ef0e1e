//! UCX over softrdma through `softrdma run`: `ucx_info -d` finds softrdma0
//! with rc_verbs and ud_verbs; `ucx_perftest` between two processes passes
//! UCT tests (rc_verbs, ud_verbs) and UCP tests (tag, RMA, stream) with
//! `UCX_TLS=rc_verbs,ud_verbs,self` and with every transport but shared
//! memory and TCP; UCX's `ucp_hello_world` carries a 200 kB message
//! (rendezvous over RDMA) whose every byte is checked, and the device's
//! counters show the traffic went through softrdma.
//!
//! Needs ucx-utils and libucx-dev (scripts/install-deps.sh); fails without.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

const TIMEOUT: Duration = Duration::from_secs(60);
/// `127.82.x.y`: this file's device addresses.
const NET: u8 = 82;
const RDMA_TLS: &str = "rc_verbs,ud_verbs,self";

#[test]
fn ucx_info_lists_softrdma0() {
    require_tool("ucx_info", "ucx-utils");
    let addr = unique_loopback_addr(NET);
    let out = run_with_timeout(&mut softrdma_run(addr, &["ucx_info", "-d"]), TIMEOUT);
    assert_eq!(out.code(), Some(0), "{out}");
    let text = &out.stdout;
    let md = text
        .find("# Memory domain: softrdma0")
        .unwrap_or_else(|| panic!("no softrdma0 memory domain: {out}"));
    let rest = &text[md..];
    let section = &rest[..rest[1..]
        .find("# Memory domain:")
        .map_or(rest.len(), |i| i + 1)];
    for tl in ["rc_verbs", "ud_verbs"] {
        assert!(
            section.contains(&format!("#      Transport: {tl}")),
            "softrdma0 without {tl}: {section}"
        );
    }
    assert!(
        section.contains("#         Device: softrdma0:1"),
        "{section}"
    );
}

/// One `ucx_perftest` pair: the server and the client with the same
/// arguments; both must exit 0 and the client print its final line.
fn perftest(tls: &str, args: &[&str]) {
    require_tool("ucx_perftest", "ucx-utils");
    let addr = unique_loopback_addr(NET);
    let port = unique_tcp_port().to_string();
    let make = |peer: Option<&str>| {
        let mut c = softrdma_run(addr, &["ucx_perftest", "-p", &port]);
        c.args(args).env("UCX_TLS", tls);
        if let Some(p) = peer {
            c.arg(p);
        }
        c
    };
    let (s, c) = server_client(
        make(None),
        make(Some(&addr.to_string())),
        port.parse().unwrap(),
        TIMEOUT,
    );
    let what = format!("UCX_TLS={tls} ucx_perftest {}", args.join(" "));
    assert_eq!(c.code(), Some(0), "{what}: client: {c}\nserver: {s}");
    assert_eq!(s.code(), Some(0), "{what}: server: {s}");
    assert!(
        c.stdout.lines().any(|l| l.starts_with("Final:")),
        "{what}: no Final line: {c}"
    );
}

#[test]
fn uct_rc_verbs() {
    let d = ["-d", "softrdma0:1", "-x", "rc_verbs"];
    perftest(
        RDMA_TLS,
        &[&d[..], &["-t", "am_lat", "-n", "2000"]].concat(),
    );
    perftest(
        RDMA_TLS,
        &[
            &d[..],
            &["-t", "put_bw", "-D", "zcopy", "-s", "65536", "-n", "500"],
        ]
        .concat(),
    );
    perftest(
        RDMA_TLS,
        &[
            &d[..],
            &["-t", "am_bw", "-D", "bcopy", "-s", "4096", "-n", "2000"],
        ]
        .concat(),
    );
}

#[test]
fn uct_ud_verbs() {
    let d = ["-d", "softrdma0:1", "-x", "ud_verbs"];
    perftest(
        RDMA_TLS,
        &[&d[..], &["-t", "am_lat", "-n", "2000"]].concat(),
    );
    perftest(
        RDMA_TLS,
        &[
            &d[..],
            &["-t", "am_bw", "-D", "bcopy", "-s", "1024", "-n", "2000"],
        ]
        .concat(),
    );
}

/// The UCP tests that died with "UD endpoint ... unhandled timeout error"
/// while softrdma reported sl 0 in UD receive completions.
#[test]
fn ucp_over_rc_and_ud_verbs() {
    for t in [
        &["-t", "tag_lat", "-n", "2000"][..],
        &["-t", "tag_bw", "-s", "65536", "-n", "300"],
        &["-t", "ucp_put_bw", "-s", "65536", "-n", "300"],
        &["-t", "ucp_get", "-s", "65536", "-n", "300"],
        &["-t", "stream_bw", "-s", "65536", "-n", "300"],
    ] {
        perftest(RDMA_TLS, t);
    }
}

/// UCX's own choice among everything but shared memory and TCP.
#[test]
fn ucp_default_transports_without_shm_and_tcp() {
    for t in [
        &["-t", "tag_lat", "-n", "2000"][..],
        &["-t", "tag_bw", "-s", "1048576", "-n", "50"],
        &["-t", "ucp_put_bw", "-s", "65536", "-n", "300"],
    ] {
        perftest("^sm,tcp,cma", t);
    }
}

/// `ucp_hello_world` (UCX's example, built here): the client receives a
/// 200 000-byte string, past the rendezvous threshold, and prints it; every
/// byte must be UCX's pattern ('A' + i % 26). Both processes' device
/// counters must show the packets.
#[test]
fn ucp_hello_world_bytes() {
    let examples = Path::new("/usr/share/doc/libucx-dev/examples");
    let src = examples.join("ucp_hello_world.c");
    assert!(
        src.is_file(),
        "{} missing: install the Debian package libucx-dev",
        src.display()
    );
    let dir = Scratch::new("ucp-hello");
    let bin = dir.path("ucp_hello_world");
    let inc = format!("-I{}", examples.display());
    compile("cc", &[&src], &bin, &[&inc, "-lucp", "-lucs"]);

    const LEN: usize = 200_000;
    let addr = unique_loopback_addr(NET);
    let port = unique_tcp_port();
    let stats = dir.path("stats");
    let make = |peer: Option<String>| -> Command {
        let mut c = softrdma_run(addr, &[bin.as_os_str()]);
        c.args(["-p", &port.to_string(), "-s", &LEN.to_string()])
            .env("UCX_TLS", RDMA_TLS)
            .env("SOFTRDMA_STATS", &stats);
        if let Some(p) = peer {
            c.args(["-n", &p]);
        }
        c
    };
    let (s, c) = server_client(make(None), make(Some(addr.to_string())), port, TIMEOUT);
    assert_eq!(s.code(), Some(0), "server: {s}");
    assert_eq!(c.code(), Some(0), "client: {c}\nserver: {s}");
    let printed = c
        .stdout
        .split("----- UCP TEST SUCCESS ----\n\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n---").next())
        .unwrap_or_else(|| panic!("no message printed: {c}"));
    let expected: String = (0..LEN - 1)
        .map(|i| (b'A' + (i % 26) as u8) as char)
        .collect();
    assert_eq!(printed.len(), expected.len(), "message length");
    assert!(printed == expected, "the message's bytes differ");
    let rx = carried_bytes(&stats);
    assert!(
        rx > LEN as u64,
        "softrdma carried {rx} bytes, less than the message: the transfer did not go through it"
    );
}
