//! Two "hosts": network namespaces joined by a veth pair, 5 % random loss on
//! the RoCE traffic in each direction, and the RC exchange of `verbs_peer`
//! (every operation type, multi-MiB messages, PSN wrap) running across them,
//! one process per namespace, byte-exact despite the loss. Once with the
//! devices on IPv4 addresses, once on IPv6 ones (`fd00::/8`, GIDs that are
//! not IPv4-mapped), where the test checks that every RoCE packet was IPv6.
//!
//! Needs root (it creates and removes the namespaces; they are removed on
//! every exit path, panics included). Not root: a loud SKIPPED line. Root but
//! a tool missing: the test fails naming the Debian package (`iproute2` for
//! `ip`, `nftables` for `nft`).
//!
//! The loss is an nftables rule (`numgen random mod 100 < 5 drop`) on the input
//! hook inside each namespace, matching UDP port 4791 only: this kernel has no
//! netem qdisc, and the TCP side channel stays loss-free so the test's own
//! bookkeeping does not time out. The test checks the rules really dropped
//! packets and that the transport retransmitted.

mod common;

use common::netns::{Netns, skip_unless_root};
use common::{Proc, example};
use std::process::{Command, Stdio};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Fails (as root) unless `tool` runs; names the package that provides it.
fn require(tool: &str, version_flag: &str, package: &str) {
    let ok = Command::new(tool)
        .arg(version_flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "`{tool}` is missing: install the Debian package `{package}` (apt-get install {package})"
    );
}

/// 5 % random loss of RoCEv2 packets arriving in each namespace, with a
/// counter of the IPv4 and of the IPv6 ones.
fn add_loss(net: &Netns) {
    for i in 0..2 {
        net.nft(
            i,
            "table inet softrdma_loss {\n\
             \x20 chain input {\n\
             \x20   type filter hook input priority 0; policy accept;\n\
             \x20   meta nfproto ipv4 udp dport 4791 counter\n\
             \x20   meta nfproto ipv6 udp dport 4791 counter\n\
             \x20   udp dport 4791 numgen random mod 100 < 5 counter drop\n\
             \x20 }\n\
             }\n",
        );
    }
}

#[test]
fn rc_exchange_across_namespaces_with_5_percent_loss() {
    exchange_with_loss("rc_exchange_across_namespaces_with_5_percent_loss", false);
}

#[test]
fn rc_exchange_across_namespaces_over_ipv6_with_5_percent_loss() {
    exchange_with_loss(
        "rc_exchange_across_namespaces_over_ipv6_with_5_percent_loss",
        true,
    );
}

fn exchange_with_loss(test: &str, ipv6: bool) {
    if skip_unless_root(&format!("netns::{test}")) {
        return;
    }
    require("ip", "-V", "iproute2");
    require("nft", "--version", "nftables");
    let peer = example("verbs_peer");
    let net = Netns::create("dma", 213, ipv6);
    add_loss(&net);

    let tcp = "18515";
    // Local ACK timeout 2^12 x 4.096 us = 17 ms instead of the pingpong
    // programs' 14 (67 ms): each lost tail packet or ACK costs one timeout, and
    // there are about 70 per run. The READ is 1 MiB: re-requests that arrive
    // while its response stream runs must rewind it (transport
    // tests/duplicate_read.rs).
    let opts = ["--timeout", "12", "--read-len", "1048579"];
    let server = Proc::spawn(
        "verbs_peer server (ns b)",
        net.cmd(1, &peer, [&["server", "--port", tcp][..], &opts].concat()),
    );
    let client = Proc::spawn(
        "verbs_peer client (ns a)",
        net.cmd(
            0,
            &peer,
            [
                &["client", &net.addr[1], "--port", tcp, "--psn", "0xffff80"][..],
                &opts,
            ]
            .concat(),
        ),
    );
    let c = client.finish(TIMEOUT);
    let s = server.finish(TIMEOUT);
    common::assert_all_succeeded(&[&c, &s]);
    for o in [&s, &c] {
        assert_eq!(o.stdout.lines().last(), Some("PASS"), "{o}");
    }
    let counters = [0, 1].map(|i| net.packets::<3>(i, "softrdma_loss"));
    let dropped = counters.map(|c| c[2]);
    println!(
        "nft [ipv4, ipv6, dropped] packets {counters:?}; client {}; server {}",
        c.line("STATS"),
        s.line("STATS")
    );
    assert!(
        dropped[0] > 0 && dropped[1] > 0,
        "the loss rules dropped nothing: {dropped:?}"
    );
    // The RoCE traffic used the family of the devices' addresses, both ways.
    let (family, other) = if ipv6 { (1, 0) } else { (0, 1) };
    for c in counters {
        assert!(
            c[family] > 0 && c[other] == 0,
            "wrong IP family: {counters:?}"
        );
    }
    let retransmits = c.stat("retransmits") + s.stat("retransmits");
    assert!(retransmits > 0, "loss but no retransmits?\n{c}\n{s}");
}
