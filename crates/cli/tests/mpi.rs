//! Open MPI over UCX over softrdma: `softrdma run mpirun -np 2` and `-np 4`
//! run examples/mpi/mpi_check.c (point-to-point across UCX's eager and
//! rendezvous sizes, broadcast/allreduce/alltoall/allgather, MPI_Put and
//! MPI_Get between fences), which checks every byte and exits 0 only if all
//! were right. mpirun's ranks inherit `softrdma run`'s view; the device
//! counters show the traffic went through softrdma.
//!
//! Needs openmpi-bin and libopenmpi-dev (scripts/install-deps.sh); fails without.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

const TIMEOUT: Duration = Duration::from_secs(120);
/// `127.83.x.y`: this file's device addresses.
const NET: u8 = 83;

fn mpi_check(ranks: u32) {
    let mpicc = require_tool("mpicc", "libopenmpi-dev");
    require_tool("mpirun", "openmpi-bin");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/mpi/mpi_check.c");
    let dir = Scratch::new(&format!("mpi{ranks}"));
    let bin = dir.path("mpi_check");
    compile(
        mpicc.to_str().unwrap(),
        &[&src],
        &bin,
        &["-Wall", "-Wextra"],
    );

    let addr = unique_loopback_addr(NET);
    let stats = dir.path("stats");
    let np = ranks.to_string();
    let mut c = softrdma_run(
        addr,
        &[
            "mpirun",
            "-np",
            &np,
            // CI runs as root on 2 cores.
            "--allow-run-as-root",
            "--oversubscribe",
            "--mca",
            "pml",
            "ucx",
            "--mca",
            "osc",
            "ucx",
            "-x",
            "UCX_TLS=rc_verbs,ud_verbs,self",
            "-x",
            "SOFTRDMA_STATS",
            bin.to_str().unwrap(),
        ],
    );
    c.env("SOFTRDMA_STATS", &stats)
        // Open MPI writes its session directory under TMPDIR.
        .env("TMPDIR", &dir.0);
    let out = run_with_timeout(&mut c, TIMEOUT);
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(
        out.stdout.contains(&format!(
            "mpi_check: {ranks} ranks: point-to-point, collectives, one-sided: all bytes OK"
        )),
        "{out}"
    );
    // Each rank moves at least its 4 MiB ring message through the device.
    let rx = carried_bytes(&stats);
    assert!(
        rx > u64::from(ranks) * (4 << 20),
        "softrdma carried only {rx} bytes: the ranks did not talk through it: {out}"
    );
}

#[test]
fn mpirun_np2() {
    mpi_check(2);
}

#[test]
fn mpirun_np4() {
    mpi_check(4);
}
