//! The short soak of the test command (the long one is `scripts/soak.sh`):
//! `fault_peer soak` churns connections between two devices in one process
//! for 15 s — each cycle four rdma_cm connections, on each an RDMA WRITE,
//! a READ back, fetch-and-add, compare-and-swap and a SEND, all checked;
//! 64 registrations of assorted sizes, deregistered again; everything
//! disconnected and freed — and then checks that open file descriptors
//! came back exactly to their level after warm-up, resident memory stayed
//! within a bound, no memory key was reused within 1024 registrations and
//! initial PSNs did not repeat.

mod common;

use common::{Proc, example};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn fifteen_second_connection_churn_keeps_fds_and_memory_flat() {
    let mut c = Command::new(example("fault_peer"));
    c.args([
        "soak",
        "--secs",
        "15",
        "--conns",
        "4",
        "--addr-base",
        "127.0.12",
    ])
    .env_remove("SOFTRDMA_FAULTS")
    .env_remove("SOFTRDMA_PCAP")
    .stdin(Stdio::null());
    let out = Proc::spawn("fault_peer soak", c).finish(Duration::from_secs(120));
    out.assert_success();
    let summary = out.line("SOAK ");
    println!("{summary}");
    let cycles: u64 = summary
        .split_whitespace()
        .find_map(|f| f.strip_prefix("cycles="))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(cycles >= 8, "only {cycles} cycles in 15 s\n{out}");
    assert_eq!(out.stdout.lines().last(), Some("PASS"), "{out}");
}
