//! Issue 5: Debian's unmodified rdmacm-utils over softrdma's librdmacm, two
//! processes on this host (three or four for mckey), each with its own
//! loopback `SOFTRDMA_ADDR` (127.46.x.y), each run with timeouts:
//!
//! - `rping -s -a S -C 100 -v` / `rping -c -a S -C 100 -v`, and again with
//!   `-S 65535` (rping itself refuses `-S 65536`, see `rdmacm.rs`): exactly
//!   100 `ping data:` lines on the client and `server ping data:` lines on
//!   the server, each with rping's content;
//! - `rdma_server` / `rdma_client -s S`: `start` and `end 0` on both sides;
//!   and the same for `rdma_xserver -c x` / `rdma_xclient -c x` (XRC, issue 20);
//! - `ucmatose -c 10` / `ucmatose -s S -c 10` and `udaddy` / `udaddy -s S`:
//!   the data-transfer lines and `return status 0` on both sides;
//! - `mckey -m 224.1.2.3 -b R` receivers and a `mckey -m 224.1.2.3 -b S -s`
//!   sender: one receiver, and two receivers in two processes (every process
//!   that joined gets the data);
//! - `cmtime -b S` / `cmtime -s S -c 50`: the client's report has all seven
//!   steps with numbers; the server still serves and is killed afterwards.
//!
//! The server's readiness is its device's UDP socket (`cm::run_cm_pair`).
//! Needs `cargo xtask compat` and rdmacm-utils; fails (never skips) without.
//! `SOFTRDMA_COMPAT_PCAP_DIR=<dir>` captures every process's packets there.

use std::sync::Mutex;

use softrdma_compat_tests::rdmacm::*;
use softrdma_compat_tests::*;

/// `127.46.x.y`: this file's loopback addresses.
const NET: u8 = 46;
const LABEL: &str = "rdmacm";

fn host() -> Host {
    require_compat_dir();
    Host::local(unique_loopback_addr(NET))
}

#[test]
fn rping_100() {
    run_rping(&host(), &host(), None, LABEL);
}

#[test]
fn rping_100_size_65535() {
    run_rping(&host(), &host(), Some(65535), LABEL);
}

#[test]
fn rdma_server_rdma_client() {
    run_rdma_server_client(&host(), &host(), LABEL);
}

#[test]
fn rdma_xserver_rdma_xclient_xrc() {
    run_rdma_xserver_xclient(&host(), &host(), LABEL);
}

#[test]
fn ucmatose_10_connections() {
    run_ucmatose(&host(), &host(), LABEL);
}

#[test]
fn udaddy_default() {
    run_udaddy(&host(), &host(), LABEL);
}

/// The mckey tests share the group 224.1.2.3 on this host's loopback: one
/// at a time, or a receiver would count the other test's messages.
static MCKEY: Mutex<()> = Mutex::new(());

#[test]
fn mckey_one_receiver() {
    let _one = MCKEY.lock().unwrap_or_else(|e| e.into_inner());
    run_mckey(&[host()], &host(), LABEL);
}

#[test]
fn mckey_two_receiver_processes() {
    let _one = MCKEY.lock().unwrap_or_else(|e| e.into_inner());
    run_mckey(&[host(), host()], &host(), LABEL);
}

#[test]
fn cmtime_50_connections() {
    run_cmtime(&host(), &host(), LABEL);
}
