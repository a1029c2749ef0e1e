//! Two real processes on one host, each with its own device on its own
//! 127.0.0.x address (`SOFTRDMA_ADDR`) and a shared free UDP port
//! (`SOFTRDMA_PORT`): the `rc_pingpong` and `ud_pingpong` examples with
//! rdma-core's command lines, and `verbs_peer`, which exchanges every operation
//! type with messages far larger than the MTU and PSNs that wrap.
//!
//! Every child has a timeout and is killed if the test fails; the tests check
//! exit codes and parse the programs' output.

mod common;

use common::{Output, Proc, example, free_tcp_port, free_udp_port};
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// Hang protection for each child (never a performance assertion).
const TIMEOUT: Duration = Duration::from_secs(60);

#[path = "../examples/common/pingpong.rs"]
#[allow(unreachable_pub, unused_imports)]
mod pingpong;

/// Distinct addresses for each pair of processes in this test binary.
fn addr_pair() -> (String, String) {
    static NEXT: AtomicU8 = AtomicU8::new(0);
    let k = NEXT.fetch_add(1, Ordering::SeqCst) % 100;
    (
        format!("127.0.0.{}", 20 + k),
        format!("127.0.0.{}", 130 + k),
    )
}

fn cmd(example_name: &str, addr: &str, udp_port: u16, args: &[&str]) -> Command {
    let mut c = Command::new(example(example_name));
    c.args(args)
        .env("SOFTRDMA_ADDR", addr)
        .env("SOFTRDMA_PORT", udp_port.to_string())
        .env_remove("SOFTRDMA_PCAP");
    c
}

/// Runs server and client of a pingpong example with `opts`; returns both outputs.
fn pingpong(example_name: &str, opts: &[&str]) -> (Output, Output) {
    let (sa, ca) = addr_pair();
    let udp = free_udp_port();
    let spawn = |role: &str, addr: &str, args: &[&str]| {
        Proc::spawn(
            &format!("{example_name} {role}"),
            cmd(example_name, addr, udp, args),
        )
    };
    common::pingpong_pair(
        opts,
        TIMEOUT,
        |args| spawn("server", &sa, args),
        |args| spawn("client", &ca, args),
    )
}

/// The QPN and PSN of a "local address:" / "remote address:" line.
fn qpn_psn(line: &str) -> (String, String) {
    let field = |key: &str| {
        let i = line
            .find(key)
            .unwrap_or_else(|| panic!("no {key} in {line:?}"))
            + key.len();
        line[i..]
            .split([',', ':'])
            .next()
            .unwrap()
            .trim()
            .to_string()
    };
    (field("QPN "), field("PSN "))
}

/// Checks what every successful pingpong run prints, on both sides.
fn check_pingpong(s: &Output, c: &Output, size: u64, iters: u64, server_addr: bool) {
    common::assert_all_succeeded(&[s, c]);
    for o in [s, c] {
        common::check_pingpong_report(o, size, iters);
        assert!(!o.stdout.contains("invalid data"), "{o}");
        assert!(o.line("local address:").contains("LID 0x0000"), "{o}");
    }
    // Each side's "remote address" is the other's "local address".
    assert_eq!(
        qpn_psn(s.line("local address:")),
        qpn_psn(c.line("remote address:"))
    );
    assert_eq!(
        qpn_psn(c.line("local address:")),
        qpn_psn(s.line("remote address:"))
    );
    if server_addr {
        assert!(
            s.line("local address:").contains("GID ::ffff:127.0.0."),
            "{s}"
        );
    }
}

#[test]
fn rc_pingpong_default_size() {
    let (s, c) = pingpong("rc_pingpong", &["-g", "0"]);
    check_pingpong(&s, &c, 4096, 1000, true);
}

#[test]
fn rc_pingpong_one_byte() {
    let (s, c) = pingpong("rc_pingpong", &["-g", "0", "-s", "1", "-n", "500"]);
    check_pingpong(&s, &c, 1, 500, true);
}

#[test]
fn rc_pingpong_multi_packet_messages_checked() {
    // 64 pages per message, 64 packets of 1 KiB: -c checks every page arrived.
    let (s, c) = pingpong(
        "rc_pingpong",
        &["-g", "0", "-s", "65536", "-m", "1024", "-n", "300", "-c"],
    );
    check_pingpong(&s, &c, 65536, 300, true);
}

#[test]
fn rc_pingpong_events() {
    let (s, c) = pingpong("rc_pingpong", &["-g", "0", "-e", "-n", "500"]);
    check_pingpong(&s, &c, 4096, 500, true);
}

#[test]
fn ud_pingpong_1024() {
    let (s, c) = pingpong("ud_pingpong", &["-g", "0", "-s", "1024", "-n", "500", "-c"]);
    check_pingpong(&s, &c, 1024, 500, true);
    // rdma-core's ud_pingpong prints a colon before GID on its local line.
    assert!(
        s.line("local address:").contains(": GID ::ffff:127.0.0."),
        "{s}"
    );
}

#[test]
fn rc_pingpong_without_gid_fails_cleanly() {
    // Without -g the C programs send a zero GID; on RoCE there is then no route,
    // and the QP cannot reach RTR. Both sides must say so and exit 1, not hang.
    let (s, c) = pingpong("rc_pingpong", &["-n", "10"]);
    for o in [&s, &c] {
        assert_eq!(o.status.and_then(|s| s.code()), Some(1), "{o}");
        assert!(o.line("local address:").ends_with("GID ::"), "{o}");
    }
    assert!(s.stderr.contains("Failed to modify QP to RTR"), "{s}");
}

#[test]
fn verbs_peer_every_operation_large_messages_psn_wrap() {
    let (sa, ca) = addr_pair();
    let udp = free_udp_port();
    let tcp = free_tcp_port().to_string();
    let [server_args, client_args] = common::verbs_peer_args(&tcp);
    // Large messages in packets across the PSN wrap, also on the same-host
    // path (peer copy would make each message one packet).
    let peer = |addr: &str, args: &[&str]| {
        let mut c = cmd("verbs_peer", addr, udp, args);
        c.env("SOFTRDMA_PEER_COPY", "0");
        c
    };
    let server = Proc::spawn("verbs_peer server", peer(&sa, &server_args));
    let client = Proc::spawn("verbs_peer client", peer(&ca, &client_args));
    let c = client.finish(TIMEOUT);
    let s = server.finish(TIMEOUT);
    common::assert_all_succeeded(&[&c, &s]);
    common::check_verbs_peer(&s, &c);
    for o in [&s, &c] {
        // Sanity: thousands of packets each way (messages of up to 2 MiB at 1 KiB MTU).
        let stats = o.line("STATS");
        let tx: u64 = stats
            .split_whitespace()
            .find_map(|f| f.strip_prefix("tx_packets="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(tx > 4000, "{o}");
    }
}

/// The same exchange on the same-host path with peer copy (`SOFTRDMA_SHM=1`):
/// every operation's data checked, large messages one copy each, mostly
/// through mappings of regions shared at registration.
#[test]
fn verbs_peer_every_operation_by_peer_copy() {
    let (sa, ca) = addr_pair();
    let udp = free_udp_port();
    let tcp = free_tcp_port().to_string();
    let [server_args, client_args] = common::verbs_peer_args(&tcp);
    let stats = std::env::temp_dir().join(format!("softrdma-peercopy-{tcp}"));
    let _ = std::fs::remove_file(&stats);
    let peer = |addr: &str, args: &[&str]| {
        let mut c = cmd("verbs_peer", addr, udp, args);
        c.env("SOFTRDMA_SHM", "1")
            .env("SOFTRDMA_STATS", &stats)
            .env_remove("SOFTRDMA_PEER_COPY");
        c
    };
    let server = Proc::spawn("verbs_peer server", peer(&sa, &server_args));
    let client = Proc::spawn("verbs_peer client", peer(&ca, &client_args));
    let c = client.finish(TIMEOUT);
    let s = server.finish(TIMEOUT);
    common::assert_all_succeeded(&[&c, &s]);
    common::check_verbs_peer(&s, &c);
    let text = std::fs::read_to_string(&stats).unwrap_or_default();
    let _ = std::fs::remove_file(&stats);
    let copies: u64 = text
        .lines()
        .filter_map(|l| l.strip_prefix("shm_peer_copies "))
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    assert!(copies > 0, "no peer copies:\n{text}");
    // The buffers' whole pages were shared at registration: most bytes came
    // through mappings of the peer's memfds, not process_vm_readv.
    let sum = |key: &str| -> u64 {
        text.lines()
            .filter_map(|l| l.strip_prefix(key))
            .filter_map(|v| v.trim().parse::<u64>().ok())
            .sum()
    };
    assert!(sum("shm_mr_shared ") > 0, "no region shared:\n{text}");
    let (mapped, bytes) = (
        sum("shm_peer_copy_mapped_bytes "),
        sum("shm_peer_copy_bytes "),
    );
    assert!(
        mapped * 2 > bytes,
        "{mapped} of {bytes} bytes mapped:\n{text}"
    );
}

#[test]
fn pingpong_exchange_message_format() {
    // The 52-byte message of rdma-core's pingpong.c: "%04x:%06x:%06x:%s" and a NUL,
    // the GID as 32 hex digits of its bytes in order.
    let d = pingpong::Dest {
        lid: 0,
        qpn: 0x12_3456,
        psn: 0xAB_CDEF,
        gid: softrdma::verbs::Gid::from_ip("127.0.0.7".parse().unwrap()),
    };
    let w = d.to_wire();
    assert_eq!(w.len(), 52);
    assert_eq!(
        &w[..51],
        b"0000:123456:abcdef:00000000000000000000ffff7f000007"
    );
    assert_eq!(w[51], 0);
    assert_eq!(pingpong::Dest::from_wire(&w), Some(d));
    assert_eq!(d.gid_text(), "::ffff:127.0.0.7");
    // What a C peer with LID 0x1a and an IPv6 GID sends parses the same way.
    let c = b"001a:00abcd:000001:fe800000000000000000000000000001\0";
    let p = pingpong::Dest::from_wire(c).unwrap();
    assert_eq!((p.lid, p.qpn, p.psn), (0x1a, 0xabcd, 1));
    assert_eq!(p.gid_text(), "fe80::1");
    assert_eq!(pingpong::parse_c_ulong("0x10"), Ok(16));
    assert_eq!(pingpong::parse_c_ulong("010"), Ok(8));
    assert_eq!(pingpong::parse_c_ulong("4096"), Ok(4096));
}
