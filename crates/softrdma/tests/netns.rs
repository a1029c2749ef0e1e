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

use common::{Proc, example};
use std::process::{Command, Stdio};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(120);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs a setup command; panics with its output on failure.
fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `nft -f -` inside namespace `ns` with `rules` on standard input.
fn nft_in(ns: &str, rules: &str) {
    use std::io::Write;
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(rules.as_bytes())
        .expect("write nft rules");
    let out = c.wait_with_output().expect("wait for nft");
    assert!(
        out.status.success(),
        "nft -f in {ns} failed: {}\n(the kernel needs nf_tables with numgen)",
        String::from_utf8_lossy(&out.stderr)
    );
}

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

/// Two namespaces joined by a veth pair; removes both when dropped.
struct Netns {
    ns: [String; 2],
    veth: [String; 2],
    /// IPv4 addresses of the veth ends (the TCP side channel uses them).
    addr: [String; 2],
    /// The devices' addresses (`SOFTRDMA_ADDR`): `addr`, or IPv6 ones.
    roce: [String; 2],
}

impl Netns {
    /// The namespaces; with `ipv6`, each veth end also gets a unique local
    /// IPv6 address, and the devices use those.
    fn create(ipv6: bool) -> Netns {
        let id = std::process::id();
        // Both tests of this file run at once: the family keeps them apart.
        let tag = format!("{:x}{}", id % 0x10_0000, if ipv6 { "6" } else { "4" });
        let n = Netns {
            ns: [format!("srdma{tag}a"), format!("srdma{tag}b")],
            veth: [format!("sr{tag}a"), format!("sr{tag}b")],
            addr: [
                format!("10.213.{}.1", id % 250),
                format!("10.213.{}.2", id % 250),
            ],
            roce: Default::default(),
        };
        let mut n = n;
        n.roce = if ipv6 {
            [1, 2].map(|h| format!("fd00:5d:{:x}::{h}", id % 0x10000))
        } else {
            n.addr.clone()
        };
        // From here on Drop removes whatever exists, also after a failed step.
        let veth = &n.veth;
        for ns in &n.ns {
            sh(&["ip", "netns", "add", ns]);
        }
        sh(&[
            "ip", "link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1],
        ]);
        for ((ns, dev), addr) in n.ns.iter().zip(veth).zip(&n.addr) {
            sh(&["ip", "link", "set", dev, "netns", ns]);
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                dev,
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        if ipv6 {
            for ((ns, dev), addr) in n.ns.iter().zip(veth).zip(&n.roce) {
                // `nodad`: usable at once, not tentative for a second or two.
                let cidr = format!("{addr}/64");
                sh(&["ip", "-n", ns, "addr", "add", &cidr, "dev", dev, "nodad"]);
            }
        }
        n
    }

    /// 5 % random loss of RoCEv2 packets arriving in each namespace.
    fn add_loss(&self) {
        for ns in &self.ns {
            nft_in(
                ns,
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

    /// Packets counted by the rules of namespace `i` so far: IPv4 RoCE
    /// packets, IPv6 RoCE packets, and those dropped.
    fn counters(&self, i: usize) -> [u64; 3] {
        let out = sh(&[
            "ip",
            "netns",
            "exec",
            &self.ns[i],
            "nft",
            "list",
            "chain",
            "inet",
            "softrdma_loss",
            "input",
        ]);
        let words: Vec<&str> = out.split_whitespace().collect();
        let counts: Vec<u64> = words
            .windows(2)
            .filter(|w| w[0] == "packets")
            .filter_map(|w| w[1].parse().ok())
            .collect();
        counts
            .try_into()
            .unwrap_or_else(|_| panic!("not three packet counters in:\n{out}"))
    }

    /// A command run inside namespace `i` with the device on its address.
    fn cmd(&self, i: usize, program: &std::path::Path, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i], "env"])
            .arg(format!("SOFTRDMA_ADDR={}", self.roce[i]))
            .arg(program)
            .args(args)
            .env_remove("SOFTRDMA_PORT")
            .env_remove("SOFTRDMA_PCAP");
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth end, and with it the peer end;
        // a veth that never made it into a namespace is deleted by name.
        for ns in &self.ns {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth[0]])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn stat(out: &str, key: &str) -> u64 {
    out.lines()
        .find(|l| l.starts_with("STATS "))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix(&format!("{key}=")))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in:\n{out}"))
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
    if !is_root() {
        let msg = format!(
            "SKIPPED (needs root): netns::{test} creates network namespaces; run as root (CI does)"
        );
        // Written to the real stderr: the test harness captures print! output of
        // passing tests, and this line must show in every run.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "\n!!!!!!!! {msg} !!!!!!!!\n");
        return;
    }
    require("ip", "-V", "iproute2");
    require("nft", "--version", "nftables");
    let peer = example("verbs_peer");
    let net = Netns::create(ipv6);
    net.add_loss();

    let tcp = "18515";
    // Local ACK timeout 2^12 x 4.096 us = 17 ms instead of the pingpong
    // programs' 14 (67 ms): each lost tail packet or ACK costs one timeout, and
    // there are about 70 per run. The READ is 1 MiB: re-requests that arrive
    // while its response stream runs must rewind it (transport
    // tests/duplicate_read.rs).
    let opts = ["--timeout", "12", "--read-len", "1048579"];
    let server = Proc::spawn(
        "verbs_peer server (ns b)",
        net.cmd(1, &peer, &[&["server", "--port", tcp][..], &opts].concat()),
    );
    let client = Proc::spawn(
        "verbs_peer client (ns a)",
        net.cmd(
            0,
            &peer,
            &[
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
    let counters = [net.counters(0), net.counters(1)];
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
    let retransmits = stat(&c.stdout, "retransmits") + stat(&s.stdout, "retransmits");
    assert!(retransmits > 0, "loss but no retransmits?\n{c}\n{s}");
}
