//! Issue 16: one device per host. Several unmodified rdma-core programs
//! share one address and UDP 4791 at the same time (a SO_REUSEPORT group,
//! steered by destination QP), and rdma_cm ports are host-wide:
//!
//! - two `rping` servers on one address, on different ports, each with a
//!   client (`-V` verifies every ping's bytes); a third server on a port
//!   that is taken fails at once with `rdma_bind_addr: Address already in use`;
//! - three `ibv_rc_pingpong` pairs at once with nothing configured (no
//!   `SOFTRDMA_ADDR`): all six processes are members of 127.0.0.1.

use softrdma_compat_tests::cm::{ServerEnd, run_cm_pair, turned_away};
use softrdma_compat_tests::pingpong::{case, check_pingpong, pingpong_args};
use softrdma_compat_tests::rdmacm::{Host, check_rping, rping_args};
use softrdma_compat_tests::*;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const PINGS: usize = 20;

#[test]
fn two_rping_servers_share_an_address_and_a_taken_port_is_refused() {
    require_compat_dir();
    let addr = unique_loopback_addr(47);
    let host = Host::local(addr);
    // The first server stays up while the second pair runs on the same
    // address: both are members of one device.
    let p1 = unique_tcp_port();
    let p2 = unique_tcp_port();
    let mut first = spawn(&mut host.command("rping", "host", &rping_args("-s", addr, p1, PINGS)));
    // The host device's registry shows when its listener is up.
    let registry = softrdma_host::Registry::open().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !registry
        .listeners(addr.into())
        .unwrap()
        .iter()
        .any(|&(space, port, _)| space == softrdma_host::PS_TCP && port == p1)
    {
        assert!(first.poll().is_none(), "the first server ended");
        assert!(Instant::now() < deadline, "the first server never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused = run_with_timeout(
        &mut host.command("rping", "host", &rping_args("-s", addr, p1, PINGS)),
        Duration::from_secs(10),
    );
    assert!(
        refused
            .combined()
            .contains("rdma_bind_addr: Address already in use"),
        "a second server on taken port {p1}:\n{refused}"
    );
    assert_ne!(refused.code(), Some(0), "{refused}");
    assert!(
        refused.elapsed < Duration::from_secs(3),
        "the refusal took {:?}",
        refused.elapsed
    );
    assert!(first.poll().is_none(), "the first server ended");

    let out = run_cm_pair(
        &mut host.command("rping", "host", &rping_args("-s", addr, p2, PINGS)),
        addr,
        || host.command("rping", "host", &rping_args("-c", addr, p2, PINGS)),
        turned_away,
        ServerEnd::Exits,
        Duration::from_secs(60),
    );
    if let Err(e) = check_rping(&out, PINGS, 64) {
        panic!("second pair: {e}");
    }
    assert!(first.poll().is_none(), "the first server ended");
    let mut client = spawn(&mut host.command("rping", "host", &rping_args("-c", addr, p1, PINGS)));
    let end = Instant::now() + Duration::from_secs(60);
    while (first.poll().is_none() || client.poll().is_none()) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    let now = Instant::now();
    let out = PairOutput {
        server: first.finish(now),
        client: Some(client.finish(now)),
        note: None,
    };
    if let Err(e) = check_rping(&out, PINGS, 64) {
        panic!("first pair: {e}");
    }
}

#[test]
fn three_rc_pingpong_pairs_at_once_with_nothing_configured() {
    require_compat_dir();
    let c = case("rc_default");
    let lo = Ipv4Addr::LOCALHOST;
    let runs: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let ep = Endpoint::compat(require_binary("ibv_rc_pingpong"), lo);
                let port = unique_tcp_port();
                let (sargs, cargs) = pingpong_args(port, &[], lo);
                let mut s = ep.command(&sargs);
                let mut cl = ep.command(&cargs);
                s.env_remove("SOFTRDMA_ADDR");
                cl.env_remove("SOFTRDMA_ADDR");
                run_pair(&mut s, port, &mut cl, Duration::from_secs(60))
            })
        })
        .collect();
    for (i, r) in runs.into_iter().enumerate() {
        let out = r.join().unwrap();
        if let Err(e) = check_pingpong(&c, &out, lo, lo) {
            panic!("pair {i}: {e}");
        }
    }
}
