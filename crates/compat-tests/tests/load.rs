//! Step 0 of the ABI plan: every Debian rdma-core/perftest binary loads
//! against `target/compat` (BIND_NOW: every imported symbol and version node
//! must resolve) and runs its usage path without crashing.
//!
//! Needs `cargo xtask compat` and the Debian packages; fails (never skips)
//! without them.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use softrdma_compat_tests::*;

const TIMEOUT: Duration = Duration::from_secs(20);

/// How each target binary prints its usage, as observed with the real
/// rdma-core 44 libraries: (binary, argument, exit code, text that must appear).
/// None of them has a dedicated help option that exits 0; `-h` is an unknown
/// option (or, for perftest and rping, the help option) and prints the usage.
const USAGE: [(&str, &str, i32, &str); 27] = [
    ("ibv_devinfo", "-h", 255, "Usage: ibv_devinfo"),
    (
        "ibv_rc_pingpong",
        "-h",
        1,
        "ibv_rc_pingpong            start a server and wait for connection",
    ),
    (
        "ibv_uc_pingpong",
        "-h",
        1,
        "ibv_uc_pingpong            start a server and wait for connection",
    ),
    (
        "ibv_ud_pingpong",
        "-h",
        1,
        "ibv_ud_pingpong            start a server and wait for connection",
    ),
    (
        "ibv_srq_pingpong",
        "-h",
        1,
        "ibv_srq_pingpong            start a server and wait for connection",
    ),
    (
        "ibv_xsrq_pingpong",
        "-h",
        1,
        "ibv_xsrq_pingpong            start a server and wait for connection",
    ),
    ("cmtime", "-h", 1, "usage: cmtime"),
    ("mckey", "-h", 1, "usage: mckey"),
    ("rcopy", "-h", 1, "usage 1: rcopy"),
    ("rdma_client", "-h", 1, "usage: rdma_client"),
    ("rdma_server", "-h", 1, "usage: rdma_server"),
    ("rdma_xclient", "-h", 1, "usage: rdma_xclient"),
    ("rdma_xserver", "-h", 1, "usage: rdma_xserver"),
    ("riostream", "-h", 1, "usage: riostream"),
    // rping exits with EINVAL (22) after printing its usage.
    (
        "rping",
        "-h",
        22,
        "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]",
    ),
    ("rstream", "-h", 1, "usage: rstream"),
    ("ucmatose", "-h", 1, "usage: ucmatose"),
    ("udaddy", "-h", 1, "usage: udaddy"),
    ("udpong", "-h", 1, "usage: udpong"),
    (
        "ib_atomic_bw",
        "-h",
        1,
        "ib_atomic_bw            start a server and wait for connection",
    ),
    (
        "ib_atomic_lat",
        "-h",
        1,
        "ib_atomic_lat            start a server and wait for connection",
    ),
    (
        "ib_read_bw",
        "-h",
        1,
        "ib_read_bw            start a server and wait for connection",
    ),
    (
        "ib_read_lat",
        "-h",
        1,
        "ib_read_lat            start a server and wait for connection",
    ),
    (
        "ib_send_bw",
        "-h",
        1,
        "ib_send_bw            start a server and wait for connection",
    ),
    (
        "ib_send_lat",
        "-h",
        1,
        "ib_send_lat            start a server and wait for connection",
    ),
    (
        "ib_write_bw",
        "-h",
        1,
        "ib_write_bw            start a server and wait for connection",
    ),
    (
        "ib_write_lat",
        "-h",
        1,
        "ib_write_lat            start a server and wait for connection",
    ),
];

/// Lines of `ldd -r` output that mean a binary would not load (BIND_NOW).
fn load_errors(ldd_output: &str) -> Vec<&str> {
    ldd_output
        .lines()
        .filter(|l| {
            l.contains("undefined symbol")
                || l.contains("not found")
                || l.contains("symbol lookup error")
        })
        .collect()
}

/// `lib => path` entries of `ldd` output.
fn resolved(ldd_output: &str, lib: &str) -> Option<String> {
    ldd_output.lines().find_map(|l| {
        let (name, rest) = l.trim().split_once(" => ")?;
        (name == lib).then(|| rest.split(" (").next().unwrap_or(rest).trim().to_owned())
    })
}

/// Runs `ldd -r` on `bin` with our libraries and checks that it fully resolves
/// to them. Returns a description of every problem.
fn check_loads(bin: &Path, compat: &Path) -> Vec<String> {
    let out = run_with_timeout(compat_command("ldd").arg("-r").arg(bin), TIMEOUT);
    let text = out.combined();
    let mut problems = Vec::new();
    if out.code() != Some(0) {
        problems.push(format!("{}: ldd -r failed: {out}", bin.display()));
    }
    for line in load_errors(&text) {
        problems.push(format!("{}: {}", bin.display(), line.trim()));
    }
    let (needed, _) = dynamic_entries(bin);
    // libibverbs is needed directly or through librdmacm by every target.
    let mut ours = vec!["libibverbs.so.1"];
    if needed.iter().any(|n| n == "librdmacm.so.1") {
        ours.push("librdmacm.so.1");
    }
    for lib in ours {
        let expected = compat.join(lib);
        match resolved(&text, lib) {
            Some(path) if Path::new(&path) == expected => {}
            other => problems.push(format!(
                "{}: {lib} resolves to {other:?}, expected {}",
                bin.display(),
                expected.display()
            )),
        }
    }
    problems
}

#[test]
fn target_binaries_are_the_packages_executables() {
    let packages = require_packages();
    let all: Vec<String> = packages
        .values()
        .flatten()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for bin in TARGET_BINARIES {
        assert!(
            all.iter().any(|b| b == bin),
            "{bin} is not an executable of {PACKAGES:?}: {PACKAGES_HINT}"
        );
    }
    // Every target binary has a usage expectation, except ibv_devices (no usage).
    for bin in TARGET_BINARIES {
        assert!(
            bin == "ibv_devices" || USAGE.iter().any(|u| u.0 == bin),
            "no usage expectation for {bin}"
        );
    }
}

#[test]
fn all_target_binaries_resolve_against_target_compat() {
    let compat = require_compat_dir();
    require_packages();
    let mut problems = Vec::new();
    for bin in TARGET_BINARIES {
        problems.extend(check_loads(&require_binary(bin), &compat));
    }
    assert!(
        problems.is_empty(),
        "{} load problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_other_package_executable_resolves_too() {
    // ibv_asyncwatch and the raw_ethernet_* tools are not targets, but with the
    // full rdma-core export set they must load as well.
    let compat = require_compat_dir();
    let packages = require_packages();
    let mut problems = Vec::new();
    let mut checked = 0;
    for bin in packages.values().flatten() {
        let name = bin.file_name().unwrap().to_string_lossy();
        if TARGET_BINARIES.contains(&name.as_ref()) {
            continue;
        }
        let (needed, _) = dynamic_entries(bin);
        if needed
            .iter()
            .any(|n| n == "libibverbs.so.1" || n == "librdmacm.so.1")
        {
            checked += 1;
            problems.extend(check_loads(bin, &compat));
        }
    }
    assert!(
        problems.is_empty(),
        "{} load problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        checked > 0,
        "found no other rdma executables in {PACKAGES:?}"
    );
}

#[test]
fn usage_paths_run_like_with_rdma_core() {
    require_compat_dir();
    require_packages();
    let mut failures = Vec::new();
    for (bin, arg, code, text) in USAGE {
        let path = require_binary(bin);
        let ours = run_with_timeout(compat_command(&path).arg0(bin).arg(arg), TIMEOUT);
        if ours.timed_out() || ours.signal().is_some() {
            failures.push(format!("crashed or hung: {ours}"));
            continue;
        }
        if ours.code() != Some(code) {
            failures.push(format!("expected exit code {code}: {ours}"));
        }
        if !ours.combined().contains(text) {
            failures.push(format!("usage text {text:?} missing: {ours}"));
        }
        // argv[0] is the bare name, as when run from $PATH (the usage text
        // echoes it). The usage path does not depend on the verbs library: the output must
        // be byte-for-byte what the binary prints with the real rdma-core.
        let real = run_with_timeout(system_command(&path).arg0(bin).arg(arg), TIMEOUT);
        if real.code() == Some(code) && (real.stdout != ours.stdout || real.stderr != ours.stderr) {
            failures.push(format!(
                "output differs from rdma-core's:\n{real}\n=== ours ===\n{ours}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} usage failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn ibv_devices_runs_without_crashing() {
    require_compat_dir();
    let out = run_with_timeout(&mut compat_command(require_binary("ibv_devices")), TIMEOUT);
    assert!(!out.timed_out() && out.signal().is_none(), "{out}");
    let text = out.combined();
    let listed = out.code() == Some(0) && text.contains("device") && text.contains("node GUID");
    let failed = out.code() == Some(1) && text.contains("Failed to get IB devices list");
    assert!(
        listed || failed,
        "ibv_devices neither listed devices nor reported a clean failure: {out}"
    );
    assert!(
        !text.contains("symbol lookup error") && !text.contains("not found"),
        "{out}"
    );
}
