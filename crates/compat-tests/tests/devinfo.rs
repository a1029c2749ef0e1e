//! Issue 4: `ibv_devices`, `ibv_devinfo` and `ibv_devinfo -v` (Debian's
//! unmodified binaries) against `target/compat`, each with its own
//! `SOFTRDMA_ADDR`, must exit 0 and describe softrdma0 as DESIGN.md §3 fixes
//! it: port 1 ACTIVE, Ethernet, MTU 4096, GID 0 the RoCEv2 IPv4-mapped address.
//!
//! Needs `cargo xtask compat` and ibverbs-utils; fails (never skips) without.

use std::net::Ipv4Addr;
use std::time::Duration;

use softrdma_compat_tests::*;

const TIMEOUT: Duration = Duration::from_secs(30);
/// `127.41.x.y`: this file's loopback addresses.
const NET: u8 = 41;

/// Runs a tool with its device at `addr`; panics unless it exits 0 with no stderr.
fn run(tool: &str, args: &[&str], addr: Ipv4Addr) -> RunOutput {
    let bin = require_binary(tool);
    let out = run_with_timeout(
        compat_command(bin)
            .env("SOFTRDMA_ADDR", addr.to_string())
            .args(args),
        TIMEOUT,
    );
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stderr.is_empty(), "unexpected stderr: {out}");
    out
}

/// `key: value` lines of devinfo output (first occurrence of each key).
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.trim().split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

fn expect_field(out: &RunOutput, key: &str, value: &str) {
    assert_eq!(
        field(&out.stdout, key),
        Some(value),
        "`{key}` should be {value:?}: {out}"
    );
}

#[test]
fn ibv_devices_lists_softrdma0() {
    let addr = unique_loopback_addr(NET);
    let out = run("ibv_devices", &[], addr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines.len() >= 3, "{out}");
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["device", "node", "GUID"],
        "{out}"
    );
    assert!(
        lines[1]
            .trim()
            .chars()
            .all(|c| c == '-' || c.is_whitespace()),
        "{out}"
    );
    let devices: Vec<Vec<&str>> = lines[2..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(devices.len(), 1, "exactly one device expected: {out}");
    let dev = &devices[0];
    assert_eq!(dev.len(), 2, "{out}");
    assert_eq!(dev[0], "softrdma0", "{out}");
    assert!(
        dev[1].len() == 16 && dev[1].chars().all(|c| c.is_ascii_hexdigit()),
        "the GUID should be 16 hex digits: {out}"
    );
    assert_ne!(dev[1], "0000000000000000", "{out}");
}

fn check_common(out: &RunOutput) {
    let first = out.stdout.lines().next().unwrap_or("");
    assert_eq!(first, "hca_id:\tsoftrdma0", "{out}");
    assert_eq!(
        out.stdout.matches("hca_id:").count(),
        1,
        "one device expected: {out}"
    );
    expect_field(out, "transport", "InfiniBand (0)");
    expect_field(out, "vendor_id", "0xffffff");
    expect_field(out, "vendor_part_id", "0");
    expect_field(out, "phys_port_cnt", "1");
    expect_field(out, "port", "1");
    expect_field(out, "state", "PORT_ACTIVE (4)");
    expect_field(out, "max_mtu", "4096 (5)");
    expect_field(out, "active_mtu", "4096 (5)");
    expect_field(out, "link_layer", "Ethernet");
    expect_field(out, "port_lid", "0");
    let guid = field(&out.stdout, "node_guid").unwrap_or_else(|| panic!("no node_guid: {out}"));
    let groups: Vec<&str> = guid.split(':').collect();
    assert!(
        groups.len() == 4
            && groups
                .iter()
                .all(|g| g.len() == 4 && g.chars().all(|c| c.is_ascii_hexdigit())),
        "node_guid {guid:?} is not xxxx:xxxx:xxxx:xxxx: {out}"
    );
    assert!(
        !field(&out.stdout, "fw_ver").unwrap_or("").is_empty(),
        "{out}"
    );
}

#[test]
fn ibv_devinfo_describes_the_port() {
    let addr = unique_loopback_addr(NET);
    let out = run("ibv_devinfo", &[], addr);
    check_common(&out);
    // Without -v there are no GIDs or device limits.
    assert!(!out.stdout.contains("GID["), "{out}");
    assert!(!out.stdout.contains("max_qp:"), "{out}");
}

#[test]
fn ibv_devinfo_verbose_shows_the_roce_v2_gid() {
    let addr = unique_loopback_addr(NET);
    let out = run("ibv_devinfo", &["-v"], addr);
    check_common(&out);
    let gids = gid_lines(&out.stdout);
    assert!(!gids.is_empty(), "no GID lines: {out}");
    assert_eq!(
        gids[0],
        format!("GID[  0]:\t\t::ffff:{addr}, RoCE v2"),
        "GID 0 must be the RoCEv2 IPv4-mapped SOFTRDMA_ADDR: {out}"
    );
    // rxe's fixed table (engine::device::GID_TBL_LEN), empty entries not printed.
    expect_field(&out, "gid_tbl_len", "1024");
    // The limits the C programs rely on (shared/reference/abi.md §4.1).
    expect_field(&out, "atomic_cap", "ATOMIC_HCA (1)");
    // rxe's READ/atomic depths: perftest sets its QP's max_rd_atomic to
    // the peer's max_qp_rd_atom, so against rxe it needs 128.
    expect_field(&out, "max_qp_rd_atom", "128");
    expect_field(&out, "max_qp_init_rd_atom", "128");
    expect_field(&out, "max_res_rd_atom", "258048");
    expect_field(&out, "max_pkeys", "1");
    expect_field(&out, "phys_state", "LINK_UP (5)");
    expect_field(&out, "max_msg_sz", "0x80000000");
    for key in ["max_qp", "max_cq", "max_mr", "max_pd", "max_srq"] {
        let v: u64 = field(&out.stdout, key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("`{key}` missing or not a number: {out}"));
        assert!(v >= 65536, "{key} = {v} < 65536: {out}");
    }
}

#[test]
fn ibv_devinfo_rejects_a_missing_port_like_rdma_core() {
    // rdma-core: a port number above phys_port_cnt is rc 4 (abi.md §4.2).
    let addr = unique_loopback_addr(NET);
    let out = run_with_timeout(
        compat_command(require_binary("ibv_devinfo"))
            .env("SOFTRDMA_ADDR", addr.to_string())
            .args(["-i", "2"]),
        TIMEOUT,
    );
    assert_eq!(out.code(), Some(4), "{out}");
}
