//! Unmodified rdma-core programs over `target/compat` under network faults:
//! `ibv_rc_pingpong -c` (every received buffer validated) and `rping -V`
//! (every ping's data verified), on this host with the engine's seeded fault
//! injector (`SOFTRDMA_FAULTS`; this kernel has no netem) and across two
//! network namespaces with nftables dropping RoCE packets at random.
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

fn with_faults(mut c: Command, faults: Option<&str>) -> Command {
    c.env_remove("SOFTRDMA_FAULTS");
    if let Some(f) = faults {
        c.env("SOFTRDMA_FAULTS", f);
    }
    c
}

/// `ibv_rc_pingpong -g 0 -c -n <iters>` between `server` and `client`.
fn rc_pingpong(
    server: Endpoint,
    client: Endpoint,
    iters: u64,
    faults: [Option<&str>; 2],
    name: &'static str,
) -> [u64; 4] {
    let case = PingpongCase {
        name,
        program: "ibv_rc_pingpong",
        args: &["-c"],
        qps: 1,
        iters,
        size: 4096,
    };
    let port = unique_tcp_port().to_string();
    let n = iters.to_string();
    let sargs = ["-g", "0", "-p", &port, "-c", "-n", &n];
    let mut cargs = sargs.to_vec();
    let saddr = server.addr.to_string();
    cargs.push(&saddr);
    let mut out = run_pair(
        &mut with_faults(server.command(&sargs), faults[0]),
        port.parse().unwrap(),
        &mut with_faults(client.command(&cargs), faults[1]),
        pingpong::PAIR_TIMEOUT,
    );
    let sums = take_reports(&mut out);
    if let Err(e) = check_pingpong(&case, &out, server.addr, client.addr) {
        panic!("{name}: {e}");
    }
    println!(
        "{name}: {:.2?}; injected: {} datagrams, {} dropped, {} duplicated, {} reordered",
        out.server.elapsed, sums[0], sums[1], sums[2], sums[3]
    );
    sums
}

fn rc_pingpong_bin() -> std::path::PathBuf {
    require_binary("ibv_rc_pingpong")
}

#[test]
fn rc_pingpong_under_duplication_reordering_and_20ms_delay() {
    let bin = rc_pingpong_bin();
    let s = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let c = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let sums = rc_pingpong(
        s,
        c,
        30,
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
    let bin = rc_pingpong_bin();
    let s = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let c = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let sums = rc_pingpong(
        s,
        c,
        100,
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
    let sums = take_reports(&mut out);
    if let Err(e) = check_rping(&out, count, size) {
        panic!("{label}: {e}");
    }
    println!(
        "{label}: {:.2?}; injected: {} datagrams, {} dropped, {} duplicated, {} reordered",
        out.server.elapsed, sums[0], sums[1], sums[2], sums[3]
    );
    sums
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

#[test]
fn rc_pingpong_across_namespaces_with_10_percent_loss() {
    if !netns_allowed("faults::rc_pingpong_across_namespaces_with_10_percent_loss") {
        return;
    }
    let ns = NetnsPair::create();
    // Requests both ways, ACKs spared (see the module documentation).
    nft_loss(&ns.a, 10, true);
    nft_loss(&ns.b, 10, true);
    let bin = rc_pingpong_bin();
    let client = Endpoint::compat(&bin, ns.addr_a).in_netns(&ns.a);
    let server = Endpoint::compat(&bin, ns.addr_b).in_netns(&ns.b);
    rc_pingpong(
        server,
        client,
        100,
        [None, None],
        "rc_pingpong netns 10% loss",
    );
    let d = [nft_dropped(&ns.a), nft_dropped(&ns.b)];
    println!("nftables dropped {d:?} packets");
    assert!(d[0] > 0 && d[1] > 0);
}

#[test]
fn rping_across_namespaces_with_10_percent_loss() {
    if !netns_allowed("faults::rping_across_namespaces_with_10_percent_loss") {
        return;
    }
    let ns = NetnsPair::create();
    // Everything both ways, ACKs included.
    nft_loss(&ns.a, 10, false);
    nft_loss(&ns.b, 10, false);
    let client = Host::in_netns(ns.addr_a, &ns.a);
    let server = Host::in_netns(ns.addr_b, &ns.b);
    rping(
        &server,
        &client,
        30,
        1024,
        [None, None],
        "faults-netns-rping",
    );
    let d = [nft_dropped(&ns.a), nft_dropped(&ns.b)];
    println!("nftables dropped {d:?} packets");
    assert!(d[0] > 0 && d[1] > 0);
}
