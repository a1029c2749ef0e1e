//! Unmodified rdma-core programs over `target/compat` under network faults:
//! `ibv_rc_pingpong -c` (every received buffer validated) and `rping -V`
//! (every ping's data verified), on this host with the engine's seeded fault
//! injector (`SOFTRDMA_FAULTS`; this kernel has no netem) and across two
//! network namespaces with nftables dropping RoCE packets at random: 1 % and
//! 10 % both ways, 30 % one way (toward the server; at 30 % both ways eight
//! failed tries in a row for one message, `retry_cnt = 7`'s limit, become
//! likely within a run: see `crates/softrdma/tests/faults.rs`).
//!
//! For `ibv_rc_pingpong`, loss spares RC ACKs (`ackloss=0`; the nftables
//! rule matches the BTH opcode): each side exits as soon as its own last
//! message is acknowledged and the peer's has arrived, so a lost ACK of a
//! peer's last message leaves that peer retrying against a dead process
//! (RETRY_EXC_ERR) — true of rdma-core with any provider and any lossy
//! network, not a softrdma property. Requests are lost both ways. rping
//! (which tolerates flushes at the end) and the Rust exchange
//! (`crates/softrdma/tests/faults.rs`) lose ACKs too. Duplication,
//! reordering and delay are applied both ways (the injector sends what it
//! still holds when a process exits, as a network delivers what is in
//! flight).
//!
//! Each test checks the faults happened (the injector's `report=1` line,
//! nftables' counters) as well as the programs' own output.

use softrdma_compat_tests::cm::{ServerEnd, run_cm_pair, turned_away};
use softrdma_compat_tests::pingpong::pingpong_args;
use softrdma_compat_tests::rdmacm::{Host, check_rping};
use softrdma_compat_tests::*;
use std::process::{Command, Stdio};

/// `127.60.x.y`: this file's loopback addresses.
const NET: u8 = 60;

/// Removes the injector's `softrdma faults:` report lines from both sides'
/// stderr (the programs' checks want their own stderr only) and returns
/// (datagrams, dropped, duplicated, reordered) summed over both.
fn take_reports(out: &mut PairOutput) -> [u64; 4] {
    let mut sum = [0u64; 4];
    let runs = std::iter::once(&mut out.server).chain(out.client.as_mut());
    for run in runs {
        let mut kept = String::new();
        for line in run.stderr.lines() {
            match line.strip_prefix("softrdma faults: ") {
                Some(rest) => {
                    for (i, part) in rest.split(',').take(4).enumerate() {
                        sum[i] += part
                            .split_whitespace()
                            .next()
                            .and_then(|n| n.parse::<u64>().ok())
                            .unwrap_or_else(|| panic!("bad report {line:?}"));
                    }
                }
                None => {
                    kept.push_str(line);
                    kept.push('\n');
                }
            }
        }
        run.stderr = kept;
    }
    sum
}

/// Takes the injector's reports out of `out` ([`take_reports`]), checks
/// what is left with the programs' own `check` (panics with `label` on a
/// problem), prints what was injected and returns it.
fn check_under_faults(
    label: &str,
    out: &mut PairOutput,
    check: impl FnOnce(&PairOutput) -> Result<(), String>,
) -> [u64; 4] {
    let sums = take_reports(out);
    if let Err(e) = check(out) {
        panic!("{label}: {e}");
    }
    println!(
        "{label}: {:.2?}; injected: {} datagrams, {} dropped, {} duplicated, {} reordered",
        out.server.elapsed, sums[0], sums[1], sums[2], sums[3]
    );
    sums
}

fn with_faults(mut c: Command, faults: Option<&str>) -> Command {
    c.env_remove("SOFTRDMA_FAULTS");
    if let Some(f) = faults {
        c.env("SOFTRDMA_FAULTS", f);
    }
    c
}

/// `ibv_rc_pingpong -g 0 -c -n <iters> -s <size>` between `server` and `client`.
fn rc_pingpong(
    server: Endpoint,
    client: Endpoint,
    (iters, size): (u64, u64),
    faults: [Option<&str>; 2],
    name: &'static str,
) -> [u64; 4] {
    let case = PingpongCase {
        name,
        program: "ibv_rc_pingpong",
        args: &["-c"],
        qps: 1,
        iters,
        size,
    };
    let port = unique_tcp_port();
    let (iters, size) = (iters.to_string(), size.to_string());
    let (sargs, cargs) = pingpong_args(port, &["-c", "-n", &iters, "-s", &size], server.addr);
    let mut out = run_pair(
        &mut with_faults(server.command(&sargs), faults[0]),
        port,
        &mut with_faults(client.command(&cargs), faults[1]),
        pingpong::PAIR_TIMEOUT,
    );
    check_under_faults(name, &mut out, |out| {
        check_pingpong(&case, out, server.addr, client.addr)
    })
}

fn rc_pingpong_bin() -> std::path::PathBuf {
    require_binary("ibv_rc_pingpong")
}

/// A server and a client `ibv_rc_pingpong` on this host.
fn local_rc_pingpong_pair() -> (Endpoint, Endpoint) {
    let bin = rc_pingpong_bin();
    (
        Endpoint::compat(&bin, unique_loopback_addr(NET)),
        Endpoint::compat(&bin, unique_loopback_addr(NET)),
    )
}

#[test]
fn rc_pingpong_under_duplication_reordering_and_20ms_delay() {
    let (s, c) = local_rc_pingpong_pair();
    let sums = rc_pingpong(
        s,
        c,
        (30, 4096),
        [
            Some("dup=0.05,reorder=0.1,delay=20ms,seed=41,report=1"),
            Some("dup=0.05,reorder=0.1,delay=20ms,seed=42,report=1"),
        ],
        "rc_pingpong dup+reorder+20ms",
    );
    assert!(
        sums[2] > 0 && sums[3] > 0,
        "no duplication or reordering: {sums:?}"
    );
}

#[test]
fn rc_pingpong_with_10_percent_loss_of_requests() {
    let (s, c) = local_rc_pingpong_pair();
    let sums = rc_pingpong(
        s,
        c,
        (100, 4096),
        [
            Some("loss=0.1,ackloss=0,seed=43,report=1"),
            Some("loss=0.1,ackloss=0,seed=44,report=1"),
        ],
        "rc_pingpong 10% loss",
    );
    assert!(sums[1] > 0, "nothing dropped: {sums:?}");
}

/// `rping -s` on `server`, `rping -c -V -v -C <count> -S <size>` on `client`.
fn rping(
    server: &Host,
    client: &Host,
    count: usize,
    size: usize,
    faults: [Option<&str>; 2],
    label: &str,
) -> [u64; 4] {
    let a = server.addr.to_string();
    let (c, sz) = (count.to_string(), size.to_string());
    let common = ["-a", &a, "-C", &c, "-S", &sz, "-v", "-V"];
    let sargs: Vec<String> = std::iter::once("-s")
        .chain(common)
        .map(String::from)
        .collect();
    let cargs: Vec<String> = std::iter::once("-c")
        .chain(common)
        .map(String::from)
        .collect();
    let mut out = run_cm_pair(
        &mut with_faults(server.command("rping", label, &sargs), faults[0]),
        server.addr,
        || with_faults(client.command("rping", label, &cargs), faults[1]),
        turned_away,
        ServerEnd::Exits,
        rdmacm::PAIR_TIMEOUT,
    );
    check_under_faults(label, &mut out, |out| check_rping(out, count, size))
}

#[test]
fn rping_under_duplication_reordering_delay_and_loss() {
    let server = Host::local(unique_loopback_addr(NET));
    let client = Host::local(unique_loopback_addr(NET));
    let sums = rping(
        &server,
        &client,
        30,
        1024,
        [
            Some("loss=0.05,dup=0.05,reorder=0.1,delay=5ms,seed=51,report=1"),
            Some("loss=0.05,dup=0.05,reorder=0.1,delay=5ms,seed=52,report=1"),
        ],
        "faults-rping",
    );
    assert!(sums[1] > 0 && sums[2] > 0 && sums[3] > 0, "{sums:?}");
}

// ---------------------------------------------------------------------------
// Across network namespaces, with nftables

/// Drops `percent` % of the RoCE packets arriving in namespace `ns`; with
/// `spare_acks`, not RC ACKs (first UDP payload byte, the BTH opcode, 0x11).
fn nft_loss(ns: &str, percent: u32, spare_acks: bool) {
    use std::io::Write;
    let which = if spare_acks { "@th,64,8 != 0x11 " } else { "" };
    let rules = format!(
        "table inet softrdma_loss {{\n chain input {{\n  type filter hook input priority 0; \
         policy accept;\n  udp dport 4791 {which}numgen random mod 100 < {percent} counter drop\n }}\n}}\n"
    );
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft (apt-get install nftables)");
    c.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft in {ns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn nft_dropped(ns: &str) -> u64 {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "nft",
            "list",
            "chain",
            "inet",
            "softrdma_loss",
            "input",
        ])
        .output()
        .expect("nft list");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {text}"))
}

/// `ibv_rc_pingpong -c -n <100..500> -s <size>` across two namespaces with
/// `percent` % loss of requests arriving in the server's namespace and, if
/// `both_ways`, in the client's (ACKs spared, see the module documentation).
fn rc_pingpong_across_namespaces(test: &'static str, percent: u32, both_ways: bool, size: u64) {
    if !netns_allowed(&format!("faults::{test}")) {
        return;
    }
    let ns = NetnsPair::create();
    nft_loss(&ns.b, percent, true);
    if both_ways {
        nft_loss(&ns.a, percent, true);
    }
    let bin = rc_pingpong_bin();
    let client = Endpoint::compat(&bin, ns.addr_a).in_netns(&ns.a);
    let server = Endpoint::compat(&bin, ns.addr_b).in_netns(&ns.b);
    // Enough requests that the rule drops some for sure: at 1 %, 100
    // iterations (about 400 requests into each namespace) lose none about 1
    // time in 55; 500 iterations, 1 in 5e8. At 10 %, 50 iterations lose
    // none 1 time in 1e9. And as few as that: at 30 % one way (ACKs
    // spared), a message fails when its request is lost eight times in a
    // row (`retry_cnt = 7`, 0.3^8 = 7e-5): 100 iterations failed 2 CI-like
    // runs in about 40; 40 iterations still drop some for sure (0.7^40 =
    // 6e-7 to lose none) and should fail about 1 run in 400.
    let iters = (500 / u64::from(percent)).clamp(40, 500);
    rc_pingpong(server, client, (iters, size), [None, None], test);
    check_nft_dropped(&ns, both_ways);
}

/// `rping -C <count> -S 1024 -V` across two namespaces with `percent` % loss of
/// every RoCE packet (ACKs and CM MADs included) arriving in the server's
/// namespace and, if `both_ways`, in the client's.
fn rping_across_namespaces(test: &str, percent: u32, both_ways: bool) {
    if !netns_allowed(&format!("faults::{test}")) {
        return;
    }
    let ns = NetnsPair::create();
    nft_loss(&ns.b, percent, false);
    if both_ways {
        nft_loss(&ns.a, percent, false);
    }
    let client = Host::in_netns(ns.addr_a, &ns.a);
    let server = Host::in_netns(ns.addr_b, &ns.b);
    // Enough packets that the rule drops some for sure (about 6 arrive in
    // each namespace per ping, so 30 pings at 1 % lose none 1 time in 6;
    // 30 at 10 %, 1 in 1e8; 10 at 30 %, 1 in 1e9), and few enough at 30 %
    // that no packet is lost eight times in a row, `retry_cnt = 7`'s limit
    // (0.3^8 = 7e-5 per packet: 100 pings failed about 1 run in 25 on a
    // loaded machine; 40 pings, 1 in 60; 10 pings should fail 1 in 250).
    let count = (300 / percent as usize).clamp(10, 300);
    rping(
        &server,
        &client,
        count,
        1024,
        [None, None],
        "faults-netns-rping",
    );
    check_nft_dropped(&ns, both_ways);
}

/// Issue 16: three `rping -V` pairs at once between two namespaces with one
/// address each, 1 % loss both ways: three processes per "host" share its
/// address (the host device), servers on three rdma_cm ports.
#[test]
fn three_rping_pairs_sharing_each_hosts_address_with_1_percent_loss() {
    if !netns_allowed("faults::three_rping_pairs_sharing_each_hosts_address") {
        return;
    }
    let ns = NetnsPair::create();
    nft_loss(&ns.b, 1, false);
    nft_loss(&ns.a, 1, false);
    // About 6 packets per ping arrive in each namespace: 3 x 100 pings at 1 %
    // drop some for sure (P(none) < 1e-7).
    let (count, size) = (100, 1024);
    let runs: Vec<_> = (0..3)
        .map(|i| {
            let client = Host::in_netns(ns.addr_a, &ns.a);
            let server = Host::in_netns(ns.addr_b, &ns.b);
            let port = unique_tcp_port().to_string();
            std::thread::spawn(move || {
                let a = server.addr.to_string();
                let (c, sz) = (count.to_string(), size.to_string());
                let common = ["-a", &a, "-p", &port, "-C", &c, "-S", &sz, "-v", "-V"];
                let args = |role: &str| -> Vec<String> {
                    std::iter::once(role)
                        .chain(common)
                        .map(String::from)
                        .collect()
                };
                let label = format!("faults-netns-shared-{i}");
                let out = run_cm_pair(
                    &mut server.command("rping", &label, &args("-s")),
                    server.addr,
                    || client.command("rping", &label, &args("-c")),
                    turned_away,
                    ServerEnd::Exits,
                    rdmacm::PAIR_TIMEOUT,
                );
                (
                    i,
                    check_rping(&out, count, size).map_err(|e| format!("{e}\n{out}")),
                )
            })
        })
        .collect();
    for r in runs {
        let (i, res) = r.join().unwrap();
        if let Err(e) = res {
            panic!("pair {i}: {e}");
        }
    }
    check_nft_dropped(&ns, true);
}

/// The loss rules really dropped packets (in `b`, and in `a` if it has one).
fn check_nft_dropped(ns: &NetnsPair, both_ways: bool) {
    let b = nft_dropped(&ns.b);
    let a = both_ways.then(|| nft_dropped(&ns.a));
    println!("nftables dropped {b} packets in the server's namespace, {a:?} in the client's");
    assert!(b > 0 && a.is_none_or(|a| a > 0), "no loss: {b} / {a:?}");
}

#[test]
fn rc_pingpong_across_namespaces_with_1_percent_loss() {
    rc_pingpong_across_namespaces(
        "rc_pingpong_across_namespaces_with_1_percent_loss",
        1,
        true,
        4096,
    );
}

#[test]
fn rc_pingpong_across_namespaces_with_10_percent_loss() {
    rc_pingpong_across_namespaces(
        "rc_pingpong_across_namespaces_with_10_percent_loss",
        10,
        true,
        4096,
    );
}

/// One-packet messages (1024 B at the pingpong's MTU 1024): with four, each
/// try needs four requests through (0.7^4), and the run sometimes meets
/// eight failed tries in a row for one message, which is `retry_cnt = 7`'s
/// RETRY_EXC_ERR (2 of about 18 runs here), not a fault. With one, a try fails with
/// probability 0.3 and eight in a row (7e-5 per try) were seen twice in
/// about 40 CI-like runs of 100 iterations; `rc_pingpong_across_namespaces`
/// now runs 40.
#[test]
fn rc_pingpong_across_namespaces_with_30_percent_loss_one_way() {
    rc_pingpong_across_namespaces(
        "rc_pingpong_across_namespaces_with_30_percent_loss_one_way",
        30,
        false,
        1024,
    );
}

#[test]
fn rping_across_namespaces_with_1_percent_loss() {
    rping_across_namespaces("rping_across_namespaces_with_1_percent_loss", 1, true);
}

#[test]
fn rping_across_namespaces_with_10_percent_loss() {
    rping_across_namespaces("rping_across_namespaces_with_10_percent_loss", 10, true);
}

#[test]
fn rping_across_namespaces_with_30_percent_loss_one_way() {
    rping_across_namespaces(
        "rping_across_namespaces_with_30_percent_loss_one_way",
        30,
        false,
    );
}
