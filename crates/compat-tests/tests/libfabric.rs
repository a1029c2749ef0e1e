//! Issue 18: libfabric's verbs provider (Debian `libfabric-bin`, 1.17),
//! unmodified, over softrdma:
//!
//! - `fi_info -p verbs` lists `softrdma0` with FI_EP_MSG, and with ofi_rxm
//!   (`verbs;ofi_rxm`) FI_EP_RDM;
//! - `fi_pingpong -p "verbs;ofi_rxm" -e rdm` and `-p verbs -e msg`, server
//!   and client in two processes, every size of its sweep (64 B .. 1 MiB),
//!   100 round trips each, with fi_pingpong's data checks (`-c`).
//!
//! libfabric takes for FI_EP_MSG only addresses of interfaces that are up,
//! not loopback, and named `ib*` by default (`FI_VERBS_IFACE`): the test
//! runs in a network namespace it creates with an interface `ib0`
//! ([`IbNetns`]), so it needs root and skips loudly without.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use softrdma_compat_tests::middleware::{IbNetns, require_tool};
use softrdma_compat_tests::*;

const ITERATIONS: &str = "100";

/// `program` inside `ns` against target/compat.
fn in_ns(ns: &IbNetns, program: &Path) -> Command {
    let mut c = ns.exec(program);
    c.env("LD_LIBRARY_PATH", require_compat_dir())
        .env_remove("LD_PRELOAD")
        .env_remove("SOFTRDMA_ADDR")
        .env_remove("FI_PROVIDER")
        .env_remove("FI_VERBS_IFACE");
    c
}

#[test]
fn fi_info_lists_msg_and_rdm() {
    if !netns_allowed("fi_info_lists_msg_and_rdm") {
        return;
    }
    let fi_info = require_tool("libfabric-bin", "fi_info");
    let ns = IbNetns::create();
    let out = run_with_timeout(
        in_ns(&ns, &fi_info).args(["-p", "verbs"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(0), "{out}");
    // Blocks of "provider: ... type: ..." per fi_info entry.
    let entries: Vec<&str> = out.stdout.split("provider: ").skip(1).collect();
    let has = |prov: &str, ty: &str| {
        entries.iter().any(|e| {
            e.lines().next().map(str::trim) == Some(prov)
                && e.contains("domain: softrdma0")
                && e.contains(&format!("type: {ty}"))
        })
    };
    assert!(has("verbs", "FI_EP_MSG"), "no verbs FI_EP_MSG:\n{out}");
    assert!(
        has("verbs;ofi_rxm", "FI_EP_RDM"),
        "no verbs;ofi_rxm FI_EP_RDM:\n{out}"
    );
}

/// fi_pingpong's result rows (`bytes #sent #ack total time MB/sec ...`)
/// whose `#ack` is `=<iterations>`: one per size that completed.
fn completed_sizes(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && f[1] == ITERATIONS && f[2] == format!("={ITERATIONS}"))
                .then(|| f[0].to_owned())
        })
        .collect()
}

fn pingpong(provider: &str, ep: &str) {
    let name = format!("fi_pingpong_{ep}");
    if !netns_allowed(&name) {
        return;
    }
    let prog = require_tool("libfabric-bin", "fi_pingpong");
    let ns = IbNetns::create();
    let port = unique_tcp_port().to_string();
    let args = ["-p", provider, "-e", ep, "-I", ITERATIONS, "-c"];
    let mut server = in_ns(&ns, &prog);
    server.args(args).args(["-B", &port]);
    let mut client = in_ns(&ns, &prog);
    client
        .args(args)
        .args(["-P", &port])
        .arg(ns.addr.to_string());
    let out = run_pair(
        &mut server,
        port.parse().unwrap(),
        &mut client,
        Duration::from_secs(90),
    );
    assert!(out.both_succeeded(), "{name} failed:\n{out}");
    let want = ["64", "256", "1k", "4k", "64k", "1m"];
    let c = out.client.as_ref().expect("client ran");
    for (who, o) in [("server", &out.server), ("client", c)] {
        assert_eq!(
            completed_sizes(&o.stdout),
            want,
            "{who}: not every size completed {ITERATIONS} round trips:\n{out}"
        );
    }
}

#[test]
fn fi_pingpong_rdm_over_rxm() {
    pingpong("verbs;ofi_rxm", "rdm");
}

#[test]
fn fi_pingpong_msg() {
    pingpong("verbs", "msg");
}
