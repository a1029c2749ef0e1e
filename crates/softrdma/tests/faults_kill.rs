//! A peer killed with SIGKILL in the middle of a transfer, many times over,
//! against one long-lived survivor (`fault_peer serve`; the victims are
//! `fault_peer stream`, both streaming SENDs and RDMA WRITEs at each other
//! with 16 requests in flight).
//!
//! After each kill the survivor must get error completions for everything it
//! had posted (the first one RETRY_EXC_ERR or a flush, all the others
//! flushed: none missing), the CM's DISCONNECTED, and free everything; its
//! open file descriptors must be exactly what they were before the first
//! connection and its resident memory must not grow from round to round.
//!
//! - On this host, the dead peer's closed port answers with ICMP port
//!   unreachable, so the survivor learns at once.
//! - Across network namespaces with ICMP dropped on the survivor's side (a
//!   host that vanished without a word), the survivor learns from its own
//!   retransmission timer: `retry_cnt` + 1 tries of the CM's local ACK
//!   timeout (2^14 x 4.096 us = 67 ms), about 0.55 s, then RETRY_EXC_ERR;
//!   it disconnects, and DISCONNECTED follows when the CM gives up on its
//!   unanswered DREQ (about 10 s). Needs root.
//!
//! Times are measured from the kill to the survivor's report and printed;
//! the assertions are hang bounds a few times larger.

mod common;

use common::netns::{Netns, skip_unless_root};
use common::{Proc, example, free_udp_port};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(90);

/// One `ROUND i ...` report of the survivor.
#[derive(Debug)]
struct Round {
    status: String,
    completions: u64,
    errors: u64,
    disconnected_ms: u64,
    fds: u64,
    rss_kb: u64,
    /// From the kill to the report, as the test saw it.
    after_kill: Duration,
}

fn kv(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
        .to_string()
}

fn num(line: &str, key: &str) -> u64 {
    kv(line, key)
        .parse()
        .unwrap_or_else(|_| panic!("{key} in {line:?}"))
}

/// Runs `rounds` victims against the survivor; returns (baseline fds, baseline
/// RSS, the rounds).
fn kill_rounds(
    survivor: Command,
    victim: impl Fn(u32) -> Command,
    rounds: u32,
    bound: Duration,
) -> (u64, u64, Vec<Round>) {
    let mut s = Proc::spawn("survivor", survivor);
    s.wait_for("LISTENING", TIMEOUT, |o| o.contains("LISTENING"));
    let first = s.stdout();
    let listening = first.lines().find(|l| l.starts_with("LISTENING")).unwrap();
    let (fd0, rss0) = (num(listening, "fds"), num(listening, "rss_kb"));
    let mut out = Vec::new();
    for r in 0..rounds {
        let mut v = Proc::spawn(&format!("victim {r}"), victim(r));
        v.wait_for("STREAMING", TIMEOUT, |o| o.contains("STREAMING"));
        // Both ways busy: let a few more requests go out, then kill.
        let accepted = format!("ROUND {r} ACCEPTED");
        s.wait_for(&accepted, TIMEOUT, |o| o.contains(&accepted));
        let killed = Instant::now();
        // Dropping a running child kills it with SIGKILL (and reaps it).
        drop(v);
        let done = format!("ROUND {r} status=");
        s.wait_for("the round's report", bound + Duration::from_secs(5), |o| {
            o.contains(&done)
        });
        let after_kill = killed.elapsed();
        let text = s.stdout();
        let line = text.lines().find(|l| l.starts_with(&done)).unwrap();
        out.push(Round {
            status: kv(line, "status"),
            completions: num(line, "completions"),
            errors: num(line, "errors"),
            disconnected_ms: num(line, "disconnected_ms"),
            fds: num(line, "fds"),
            rss_kb: num(line, "rss_kb"),
            after_kill,
        });
    }
    let o = s.finish(TIMEOUT);
    o.assert_success();
    (fd0, rss0, out)
}

fn check(rounds: &[Round], fd0: u64, rss0: u64, bound: Duration, first_status: &[&str]) {
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "round {i}: {} after {:.0?} (disconnected {} ms after the first error), \
             {} completions, {} errors, {} fds, {} KiB",
            r.status, r.after_kill, r.disconnected_ms, r.completions, r.errors, r.fds, r.rss_kb
        );
        assert!(
            first_status.contains(&r.status.as_str()),
            "round {i}: first error {} (expected one of {first_status:?})",
            r.status
        );
        // Every send and receive that was outstanding completed in error
        // (the survivor only stops counting once none is missing).
        assert!(
            r.errors >= 16,
            "round {i}: only {} error completions",
            r.errors
        );
        assert!(
            r.after_kill < bound,
            "round {i}: {:?} after the kill",
            r.after_kill
        );
        assert!(
            r.fds == fd0,
            "round {i}: {} open fds, {fd0} before the first connection",
            r.fds
        );
    }
    // Memory: no growth from the second round on beyond allocator noise
    // (the first connection warms up thread caches and tables).
    let base = rounds[1.min(rounds.len() - 1)].rss_kb;
    let last = rounds.last().unwrap().rss_kb;
    assert!(
        last <= base + 1024,
        "resident memory grew from {base} KiB (round 1) to {last} KiB (before: {rss0} KiB)"
    );
}

#[test]
fn killed_peer_on_this_host_surfaces_at_once_and_resources_return() {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let k = NEXT.fetch_add(1, Ordering::SeqCst);
    let udp = free_udp_port();
    let peer = example("fault_peer");
    let srv = format!("127.0.8.{}", 1 + k);
    let bound = Duration::from_secs(5);
    let survivor = {
        let mut c = Command::new(&peer);
        c.args(["serve", &format!("{srv}:7471"), "--rounds", "5"])
            .args(["--bound-ms", &bound.as_millis().to_string()])
            .env("SOFTRDMA_ADDR", &srv)
            .env("SOFTRDMA_PORT", udp.to_string())
            .env_remove("SOFTRDMA_FAULTS")
            .env_remove("SOFTRDMA_PCAP")
            .stdin(Stdio::null());
        c
    };
    let victim = |r: u32| {
        let mut c = Command::new(&peer);
        c.args(["stream", &format!("{srv}:7471")])
            .env("SOFTRDMA_ADDR", format!("127.0.8.{}", 100 + r))
            .env("SOFTRDMA_PORT", udp.to_string())
            .env_remove("SOFTRDMA_FAULTS")
            .env_remove("SOFTRDMA_PCAP")
            .stdin(Stdio::null());
        c
    };
    let (fd0, rss0, rounds) = kill_rounds(survivor, victim, 5, bound);
    // ICMP port unreachable ends the connection: the QP is flushed.
    check(&rounds, fd0, rss0, bound, &["WrFlushErr", "RetryExcErr"]);
}

// ---------------------------------------------------------------------------

#[test]
fn killed_peer_without_icmp_surfaces_after_the_retry_timeout() {
    if skip_unless_root("faults_kill::killed_peer_without_icmp_surfaces_after_the_retry_timeout") {
        return;
    }
    let net = Netns::create("kill", 215, false);
    // The survivor (namespace 0) hears no ICMP: a dead peer just goes quiet.
    net.nft(
        0,
        "table inet softrdma_noicmp {\n chain input {\n  type filter hook input priority 0; \
         policy accept;\n  meta l4proto icmp drop\n }\n}\n",
    );
    let srv = format!("{}:7471", net.addr[0]);
    // retry_cnt 7 + 1 tries x 67 ms = 0.55 s to RETRY_EXC_ERR; then the
    // survivor disconnects and its DREQ goes unanswered: the CM retransmits
    // it 6 times (250 ms doubling to 2 s, 9.75 s in all) before it reports
    // DISCONNECTED, as the kernel's CM does.
    let bound = Duration::from_secs(15);
    let peer = example("fault_peer");
    let survivor = net.cmd(
        0,
        &peer,
        ["serve", &srv, "--rounds", "1", "--bound-ms", "15000"],
    );
    let victim = |_| net.cmd(1, &peer, ["stream", &srv]);
    let (fd0, rss0, rounds) = kill_rounds(survivor, victim, 1, bound);
    check(&rounds, fd0, rss0, bound, &["RetryExcErr"]);
    for r in &rounds {
        assert!(
            r.after_kill >= Duration::from_millis(400),
            "the survivor noticed within {:?}, before its retries could run out",
            r.after_kill
        );
    }
}
