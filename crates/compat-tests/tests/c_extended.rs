//! Issue 11: `c/ext_verbs.c`, a C program using the extended verbs rdma-core's
//! pyverbs suite exercises (extended CQs and their poll functions, the
//! `ibv_wr_*` send API, memory windows of both types, atomic write,
//! `ibv_rereg_mr`, device/PD/MR import, parent domains), compiled with
//! `cc ... -libverbs` against the installed headers and run against
//! `target/compat` (see the program's header for every check). This runs in
//! CI whether or not python3-pyverbs is installed. `c/xrc_verbs.c` does the
//! same for the XRC object verbs (issue 20), `c/odp_verbs.c` for on-demand
//! paging, `c/tm_verbs.c` for tag matching (issue 20).
//!
//! Needs `cargo xtask compat`, gcc and libibverbs-dev; fails (never skips) without.

use std::path::Path;
use std::time::Duration;

use softrdma_compat_tests::c_programs::{LIBIBVERBS, build_c_program};
use softrdma_compat_tests::pair::unique_loopback_addr;
use softrdma_compat_tests::*;

/// `127.49.x.y`: this file's loopback addresses.
const NET: u8 = 49;

/// Builds `c/<name>.c`, runs it against `target/compat` on an address of
/// its own for at most `secs` seconds, and checks it passed every check.
fn run_c_program(name: &str, secs: u64) {
    run_c_program_with(name, secs, &[]);
}

/// [`run_c_program`] with extra environment variables.
fn run_c_program_with(name: &str, secs: u64, env: &[(&str, &str)]) {
    let bin = build_c_program(name, Path::new(env!("CARGO_TARGET_TMPDIR")), &[LIBIBVERBS]);
    let addr = unique_loopback_addr(NET);
    let mut cmd = compat_command(&bin);
    cmd.env("SOFTRDMA_ADDR", addr.to_string())
        .envs(env.iter().copied());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(secs));
    assert_eq!(out.code(), Some(0), "{out}");
    assert_eq!(out.stdout.lines().last(), Some("PASS"), "{out}");
    assert!(!out.stdout.contains("FAILED"), "{out}");
}

#[test]
fn extended_cq_qp_mw_rereg_import_parent_domain() {
    run_c_program("ext_verbs", 60);
}

/// Issue 20: `c/xrc_verbs.c`, XRC domains (a file's domain, O_CREAT/O_EXCL,
/// ENOENT), XRC SRQ numbers, XRC receive and send QPs, `ibv_open_qp`.
#[test]
fn xrc_domains_srqs_qps_open_qp() {
    run_c_program("xrc_verbs", 30);
}

/// Issue 20: `c/odp_verbs.c`, on-demand paging: the caps, ON_DEMAND regions
/// over memory unmapped and mapped after registration (REM_ACCESS_ERR,
/// LOC_PROT_ERR, the bytes where mapped), implicit ODP, `ibv_advise_mr`.
#[test]
fn on_demand_paging() {
    run_c_program("odp_verbs", 60);
}

/// Issue 20: `c/tm_verbs.c`, tag matching: `tm_caps`, TM SRQs, ADD / DEL /
/// SYNC and their completions, eager messages matched and unexpected,
/// NO_TAG, phase synchronisation, rendezvous (the receiver's READ and FIN).
#[test]
fn tag_matching() {
    run_c_program("tm_verbs", 60);
}

/// The same over the same-host lanes (`SOFTRDMA_SHM=1`), where a SEND of
/// 16 KiB or more goes by peer copy: the 20 KiB eager message is matched
/// and its TMH stripped there too.
#[test]
fn tag_matching_over_the_lanes() {
    run_c_program_with("tm_verbs", 60, &[("SOFTRDMA_SHM", "1")]);
}
