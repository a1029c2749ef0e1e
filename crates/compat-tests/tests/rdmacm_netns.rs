//! Issue 5 across two "hosts": every rdmacm-utils case of `tests/rdmacm.rs`
//! with the server in one network namespace and the client in another,
//! joined by a veth pair (`NetnsPair`: `srcompat-<pid>-<n>-{a,b}`,
//! 10.x.y.1 and 10.x.y.2), with the same checks.
//!
//! mckey: a receiver in namespace a, a second receiver and the sender in
//! namespace b (a second address, 10.x.y.3, on b's veth): the group's
//! messages cross the veth and also loop back to the receiver on the
//! sender's own "host".
//!
//! Each test creates its own namespaces and removes them when it ends, also
//! on failure. Creating namespaces needs root: other users get a loud
//! `SKIPPED (needs root)` and a passing test (CI runs as root).
//! Needs `cargo xtask compat` and rdmacm-utils; fails (never skips) without.

use softrdma_compat_tests::rdmacm::*;
use softrdma_compat_tests::*;

const LABEL: &str = "rdmacm-netns";

/// The namespaces and a host in each (server in a, client in b); `None`
/// after the skip notice when not root.
fn hosts(test: &str) -> Option<(NetnsPair, Host, Host)> {
    if !netns_allowed(&format!("rdmacm netns {test}")) {
        return None;
    }
    require_compat_dir();
    let ns = NetnsPair::create();
    let a = Host::in_netns(ns.addr_a, &ns.a);
    let b = Host::in_netns(ns.addr_b, &ns.b);
    Some((ns, a, b))
}

#[test]
fn rping_100() {
    if let Some((_ns, a, b)) = hosts("rping") {
        run_rping(&a, &b, None, LABEL);
    }
}

#[test]
fn rping_100_size_65535() {
    if let Some((_ns, a, b)) = hosts("rping -S 65535") {
        run_rping(&a, &b, Some(65535), LABEL);
    }
}

#[test]
fn rdma_server_rdma_client() {
    if let Some((_ns, a, b)) = hosts("rdma_server/rdma_client") {
        run_rdma_server_client(&a, &b, LABEL);
    }
}

#[test]
fn ucmatose_10_connections() {
    if let Some((_ns, a, b)) = hosts("ucmatose") {
        run_ucmatose(&a, &b, LABEL);
    }
}

#[test]
fn udaddy_default() {
    if let Some((_ns, a, b)) = hosts("udaddy") {
        run_udaddy(&a, &b, LABEL);
    }
}

#[test]
fn mckey_receivers_on_both_hosts() {
    if let Some((ns, a, b)) = hosts("mckey") {
        let b2 = Host::in_netns(ns.add_addr(true, 3), &ns.b);
        run_mckey(&[a, b2], &b, LABEL);
    }
}

#[test]
fn cmtime_50_connections() {
    if let Some((_ns, a, b)) = hosts("cmtime") {
        run_cmtime(&a, &b, LABEL);
    }
}
