//! Issue 12: the examples over the rdma-core backend, talking to peers on the
//! native backend, both ways: `rc_pingpong` (plain, events, multi-packet
//! messages checked), `ud_pingpong`, and `verbs_peer` (every operation type,
//! messages far larger than the MTU, PSNs that wrap). The rdma-core side
//! loads softrdma's drop-in `target/compat/libibverbs.so.1` as "the system's
//! rdma-core" (needs `cargo xtask compat`).

mod backend_common;
mod common;

use backend_common::{Side, TIMEOUT, addr_pair, check_backend_line, on_side, pair};
use common::{Proc, example, free_tcp_port, free_udp_port};
use std::process::Command;

fn cmd(name: &str, side: Side, addr: &str, udp: u16, args: &[&str]) -> Command {
    let mut c = Command::new(example(name));
    c.args(args);
    on_side(&mut c, side, addr, udp);
    c
}

/// A pingpong example: server on `server`, client on `client`, each to
/// report `iters` exchanges of `size` bytes.
fn pingpong(name: &str, server: Side, client: Side, opts: &[&str], (size, iters): (u64, u64)) {
    let (sa, ca) = addr_pair(10);
    let udp = free_udp_port();
    let spawn = |role: &str, side: Side, addr: &str, args: &[&str]| {
        Proc::spawn(
            &format!("{name} {role} ({})", side.name()),
            cmd(name, side, addr, udp, args),
        )
    };
    let (s, c) = common::pingpong_pair(
        opts,
        TIMEOUT,
        |args| spawn("server", server, &sa, args),
        |args| spawn("client", client, &ca, args),
    );
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
        common::check_pingpong_report(o, size, iters);
    }
}

#[test]
fn rc_pingpong_rdma_core_server_native_client() {
    pingpong(
        "rc_pingpong",
        Side::RdmaCore,
        Side::Native,
        &["-g", "0", "-n", "500"],
        (4096, 500),
    );
}

#[test]
fn rc_pingpong_native_server_rdma_core_client() {
    pingpong(
        "rc_pingpong",
        Side::Native,
        Side::RdmaCore,
        &["-g", "0", "-n", "500"],
        (4096, 500),
    );
}

#[test]
fn rc_pingpong_events_both_rdma_core() {
    // Completion channels (ibv_get_cq_event through the dlopen backend) on both sides.
    pingpong(
        "rc_pingpong",
        Side::RdmaCore,
        Side::RdmaCore,
        &["-g", "0", "-e", "-n", "300"],
        (4096, 300),
    );
}

#[test]
fn rc_pingpong_multi_packet_checked_mixed() {
    // 64 packets per message; -c checks every page arrived.
    let opts = ["-g", "0", "-s", "65536", "-m", "1024", "-n", "100", "-c"];
    pingpong(
        "rc_pingpong",
        Side::Native,
        Side::RdmaCore,
        &opts,
        (65536, 100),
    );
    pingpong(
        "rc_pingpong",
        Side::RdmaCore,
        Side::Native,
        &opts,
        (65536, 100),
    );
}

#[test]
fn ud_pingpong_mixed_both_ways() {
    // Address handles (the rdma-core side's PD cache of ibv_ah) and GRH buffers.
    let opts = ["-g", "0", "-s", "1024", "-n", "300", "-c"];
    pingpong(
        "ud_pingpong",
        Side::RdmaCore,
        Side::Native,
        &opts,
        (1024, 300),
    );
    pingpong(
        "ud_pingpong",
        Side::Native,
        Side::RdmaCore,
        &opts,
        (1024, 300),
    );
}

/// `verbs_peer`: every operation, both phases, `server` vs `client`.
fn verbs_peer(server: Side, client: Side) {
    let (sa, ca) = addr_pair(10);
    let udp = free_udp_port();
    let tcp = free_tcp_port().to_string();
    let [server_args, client_args] = common::verbs_peer_args(&tcp);
    let s = Proc::spawn(
        &format!("verbs_peer server ({})", server.name()),
        cmd("verbs_peer", server, &sa, udp, &server_args),
    );
    let (s, c) = pair(s, "backend: ", || {
        Proc::spawn(
            &format!("verbs_peer client ({})", client.name()),
            cmd("verbs_peer", client, &ca, udp, &client_args),
        )
    });
    check_backend_line(&s, server);
    check_backend_line(&c, client);
    common::check_verbs_peer(&s, &c);
}

#[test]
fn verbs_peer_rdma_core_server_native_client() {
    verbs_peer(Side::RdmaCore, Side::Native);
}

#[test]
fn verbs_peer_native_server_rdma_core_client() {
    verbs_peer(Side::Native, Side::RdmaCore);
}
