//! A seeded simulation of two softrdma endpoints over a lossy network:
//! thousands of mixed RC operations, every one checked by the oracle.
//!
//! ```text
//! cargo run -p softrdma-sim --example demo -- [--seed N] [--loss 0.05] [--ops 5000]
//! ```
//!
//! Exits non-zero if the oracle rejects anything.

use softrdma_sim::Faults;
use softrdma_sim::model::{RcConfig, run_rc};
use std::process::ExitCode;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: cannot parse {v:?}"))
        })
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let seed = arg(&args, "--seed", 1u64);
    let loss = arg(&args, "--loss", 0.05f64);
    let ops = arg(&args, "--ops", 5000usize);
    let mut cfg = RcConfig::standard(seed, loss, ops);
    cfg.nodes = 2;
    cfg.conns = vec![(0, 1), (0, 1)];
    cfg.srq_node = None;
    cfg.faults = Faults::mixed(loss);
    cfg.allow_exhaustion = loss > 0.2;
    println!(
        "softrdma simulation: 2 endpoints, 2 RC connections, seed {seed}, {:.1} % loss \
         (+ duplication, reordering, bit flips), {ops} operations",
        loss * 100.0
    );
    let wall = std::time::Instant::now();
    match run_rc(&cfg) {
        Ok(r) => {
            println!("{r}");
            println!("wall time       {:.2?}", wall.elapsed());
            if r.failed == 0 {
                println!(
                    "all {} operations verified byte-exact (completions, messages, memory, atomics)",
                    r.ops()
                );
            } else {
                println!(
                    "{} operations verified; {} ended in retry exhaustion or its flush, as allowed at this loss",
                    r.succeeded, r.failed
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("VERIFICATION FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
