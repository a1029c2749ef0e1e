//! Issue 12: the examples over the rdma-core backend, talking to peers on the
//! native backend, both ways: `rc_pingpong` (plain, events, multi-packet
//! messages checked), `ud_pingpong`, and `verbs_peer` (every operation type,
//! messages far larger than the MTU, PSNs that wrap). The rdma-core side
//! loads softrdma's drop-in `target/compat/libibverbs.so.1` as "the system's
//! rdma-core" (needs `cargo xtask compat`).

mod backend_common;
mod common;

use backend_common::{Side, TIMEOUT, addr_pair, check_backend_line, on_side, pair};
use common::{Output, Proc, example, free_tcp_port, free_udp_port, is_listening};
use std::process::Command;

fn cmd(name: &str, side: Side, addr: &str, udp: u16, args: &[&str]) -> Command {
    let mut c = Command::new(example(name));
    c.args(args);
    on_side(&mut c, side, addr, udp);
    c
}

/// A pingpong example: server on `server`, client on `client`.
fn pingpong(name: &str, server: Side, client: Side, opts: &[&str]) -> (Output, Output) {
    let (sa, ca) = addr_pair(10);
    let udp = free_udp_port();
    let tcp = free_tcp_port();
    let tcp_s = tcp.to_string();
    let mut args = vec!["-p", &tcp_s];
    args.extend_from_slice(opts);
    let mut s = Proc::spawn(
        &format!("{name} server ({})", server.name()),
        cmd(name, server, &sa, udp, &args),
    );
    s.wait_for("the TCP listener", TIMEOUT, |_| is_listening(tcp));
    args.push("127.0.0.1");
    let c = Proc::spawn(
        &format!("{name} client ({})", client.name()),
        cmd(name, client, &ca, udp, &args),
    );
    let c = c.finish(TIMEOUT);
    let s = s.finish(TIMEOUT);
    common::assert_all_succeeded(&[&s, &c]);
    check_backend_line(&s, server);
    check_backend_line(&c, client);
    for (o, addr) in [(&s, &sa), (&c, &ca)] {
        assert!(o.stdout.starts_with("backend: "), "the first line: {o}");
        assert!(
            o.line("local address:")
                .contains(&format!("GID ::ffff:{addr}")),
            "{o}"
        );
        assert!(!o.stdout.contains("invalid data"), "{o}");
    }
    (s, c)
}

fn check_counts(s: &Output, c: &Output, size: u64, iters: u64) {
    for o in [s, c] {
        assert!(
            o.line("bytes in")
                .starts_with(&format!("{} bytes in ", size * iters * 2)),
            "{o}"
        );
        assert!(
            o.line("iters in")
                .starts_with(&format!("{iters} iters in ")),
            "{o}"
        );
    }
}

#[test]
fn rc_pingpong_rdma_core_server_native_client() {
    let (s, c) = pingpong(
        "rc_pingpong",
        Side::RdmaCore,
        Side::Native,
        &["-g", "0", "-n", "500"],
    );
    check_counts(&s, &c, 4096, 500);
}

#[test]
fn rc_pingpong_native_server_rdma_core_client() {
    let (s, c) = pingpong(
        "rc_pingpong",
        Side::Native,
        Side::RdmaCore,
        &["-g", "0", "-n", "500"],
    );
    check_counts(&s, &c, 4096, 500);
}

#[test]
fn rc_pingpong_events_both_rdma_core() {
    // Completion channels (ibv_get_cq_event through the dlopen backend) on both sides.
    let (s, c) = pingpong(
        "rc_pingpong",
        Side::RdmaCore,
        Side::RdmaCore,
        &["-g", "0", "-e", "-n", "300"],
    );
    check_counts(&s, &c, 4096, 300);
}

#[test]
fn rc_pingpong_multi_packet_checked_mixed() {
    // 64 packets per message; -c checks every page arrived.
    let opts = ["-g", "0", "-s", "65536", "-m", "1024", "-n", "100", "-c"];
    let (s, c) = pingpong("rc_pingpong", Side::Native, Side::RdmaCore, &opts);
    check_counts(&s, &c, 65536, 100);
    let (s, c) = pingpong("rc_pingpong", Side::RdmaCore, Side::Native, &opts);
    check_counts(&s, &c, 65536, 100);
}

#[test]
fn ud_pingpong_mixed_both_ways() {
    // Address handles (the rdma-core side's PD cache of ibv_ah) and GRH buffers.
    let opts = ["-g", "0", "-s", "1024", "-n", "300", "-c"];
    let (s, c) = pingpong("ud_pingpong", Side::RdmaCore, Side::Native, &opts);
    check_counts(&s, &c, 1024, 300);
    let (s, c) = pingpong("ud_pingpong", Side::Native, Side::RdmaCore, &opts);
    check_counts(&s, &c, 1024, 300);
}

/// `verbs_peer`: every operation, both phases, `server` vs `client`.
fn verbs_peer(server: Side, client: Side) {
    let (sa, ca) = addr_pair(10);
    let udp = free_udp_port();
    let tcp = free_tcp_port().to_string();
    let s = Proc::spawn(
        &format!("verbs_peer server ({})", server.name()),
        cmd(
            "verbs_peer",
            server,
            &sa,
            udp,
            &[
                "server", "--port", &tcp, "--psn", "0xfffff0", "--mtu", "1024",
            ],
        ),
    );
    let (s, c) = pair(s, "backend: ", || {
        Proc::spawn(
            &format!("verbs_peer client ({})", client.name()),
            cmd(
                "verbs_peer",
                client,
                &ca,
                udp,
                &[
                    "client",
                    "127.0.0.1",
                    "--port",
                    &tcp,
                    "--psn",
                    "0xffff00",
                    "--mtu",
                    "1024",
                ],
            ),
        )
    });
    for (o, side, first) in [(&s, server, "passive"), (&c, client, "active")] {
        check_backend_line(o, side);
        assert!(o.stdout.contains(&format!("phase 1 ({first}) OK")), "{o}");
        assert_eq!(o.stdout.lines().last(), Some("PASS"), "{o}");
    }
}

#[test]
fn verbs_peer_rdma_core_server_native_client() {
    verbs_peer(Side::RdmaCore, Side::Native);
}

#[test]
fn verbs_peer_native_server_rdma_core_client() {
    verbs_peer(Side::Native, Side::RdmaCore);
}
