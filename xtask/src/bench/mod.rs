//! `cargo xtask bench`: the same-host benchmark suite in one run.
//!
//! Measures, in repetitions that interleave softrdma and its baselines (this
//! shared 2-vCPU VM drifts by tens of percent between runs, so only same-run
//! ratios mean anything):
//! - Debian's unmodified perftest over `target/compat` (two processes on
//!   their own `SOFTRDMA_ADDR` loopback addresses, over UDP: the wire path,
//!   `SOFTRDMA_SHM=0`): `ib_write_bw` at 4 KiB,
//!   64 KiB and 1 MiB, `ib_read_bw` and `ib_send_bw` at 64 KiB, 8-byte
//!   `ib_send_lat`, `ib_write_lat`, `ib_read_lat` busy-polling and
//!   `ib_send_lat -e`, `ib_read_lat -e` with completion events;
//! - the same WRITE sizes through the Rust API (`examples/bench.rs`), also
//!   over UDP;
//! - baselines: qperf `tcp_bw` at the same sizes and `tcp_lat -m 8` between two
//!   processes on 127.0.0.1, and a one-thread memcpy;
//! - CPU seconds per GB moved (both processes, from /proc), and the CPU use of
//!   an idle process blocked on a completion channel;
//! - the same-host group (`same_host.rs`): perftest over the shared-memory
//!   lanes and over UDP (`SOFTRDMA_SHM=0`), each run's path checked from its
//!   counters, next to UCX's shared-memory transport (`ucx_perftest`).
//!
//! Prints a table of medians and replaces the marked section of BENCHMARKS.md.

mod baselines;
mod parse;
mod procs;
mod report;
mod same_host;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Result;
use baselines::{Qperf, idle, memcpy_bw};
use procs::{free_addrs, free_tcp_port, run_one, run_pair};

/// The groups of `--only`.
const GROUPS: [&str; 7] = [
    "tcp",
    "memcpy",
    "perftest-bw",
    "rust-bw",
    "lat",
    "same-host",
    "idle",
];

/// How the two processes of a perftest pair are set up.
#[derive(Debug)]
pub(crate) enum Setup<'a> {
    /// The wire path: each on its own `SOFTRDMA_ADDR` (127.86.x.y), the
    /// same-host path off (`SOFTRDMA_SHM=0`), so that the rows compared with
    /// TCP (and with `--compare`'s older builds) measure UDP.
    Wire,
    /// Both on the host device's default address, the same-host path on
    /// (`SOFTRDMA_SHM` unset, the default) or off (`SOFTRDMA_SHM=0`), their
    /// counters appended to `stats`.
    SameHost {
        shm: bool,
        /// `SOFTRDMA_PEER_COPY=0` when false.
        peer_copy: bool,
        stats: &'a Path,
    },
}

impl Setup<'_> {
    /// A suffix for log names.
    fn tag(&self) -> &'static str {
        match self {
            Setup::Wire => "",
            Setup::SameHost {
                shm: true,
                peer_copy: true,
                ..
            } => "_shm",
            Setup::SameHost { shm: true, .. } => "_pkt",
            Setup::SameHost { shm: false, .. } => "_udp",
        }
    }
}

/// Message sizes of the bandwidth measurements.
pub(crate) const SIZES: [(usize, &str); 3] = [(4096, "4K"), (65536, "64K"), (1 << 20, "1M")];

#[derive(Debug, Clone)]
pub(crate) struct Opts {
    pub(crate) quick: bool,
    pub(crate) reps: usize,
    /// Seconds per bandwidth measurement.
    pub(crate) secs: u32,
    /// Round trips per latency measurement.
    pub(crate) iters: u32,
    /// Seconds the idle process is watched.
    pub(crate) idle_secs: u64,
    pub(crate) write_md: bool,
    /// Groups to run (empty: all): tcp, memcpy, perftest-bw, rust-bw, lat,
    /// same-host, idle.
    pub(crate) only: Vec<String>,
    /// Another build of the C-ABI libraries (a directory like target/compat)
    /// that every perftest measurement also runs against, interleaved.
    pub(crate) compare: Option<PathBuf>,
    /// Use the libraries and example as they are (no cargo build).
    pub(crate) no_build: bool,
}

impl Opts {
    fn parse(args: &[String]) -> Result<Opts> {
        let mut o = Opts {
            quick: false,
            reps: 3,
            secs: 2,
            iters: 10_000,
            idle_secs: 5,
            write_md: true,
            only: Vec::new(),
            compare: None,
            no_build: false,
        };
        let mut reps = None;
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--quick" => o.quick = true,
                "--no-md" => o.write_md = false,
                "--no-build" => o.no_build = true,
                "--reps" => {
                    let v = it.next().ok_or("--reps needs a number")?;
                    reps = Some(v.parse().map_err(|_| format!("bad --reps {v}"))?);
                }
                "--only" => {
                    let v = it.next().ok_or("--only needs a list")?;
                    o.only = v.split(',').map(str::to_owned).collect();
                    if let Some(g) = o.only.iter().find(|g| !GROUPS.contains(&g.as_str())) {
                        return Err(format!("--only: unknown group `{g}`\n\n{HELP}"));
                    }
                }
                "--compare" => {
                    let v = it.next().ok_or("--compare needs a directory")?;
                    let d = PathBuf::from(v);
                    if !d.join("libibverbs.so.1").exists() {
                        return Err(format!("--compare {v}: no libibverbs.so.1 there"));
                    }
                    o.compare = Some(d);
                }
                other => return Err(format!("unknown bench option `{other}`\n\n{}", HELP)),
            }
        }
        if o.quick {
            (o.reps, o.secs, o.iters, o.idle_secs) = (1, 1, 2_000, 2);
        }
        if let Some(r) = reps {
            o.reps = r;
        }
        if o.reps == 0 {
            return Err("--reps must be at least 1".into());
        }
        Ok(o)
    }

    fn runs(&self, group: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|g| g == group)
    }

    /// The command line that reproduces this run.
    pub(crate) fn command(&self, args: &[String]) -> String {
        let mut c = "cargo xtask bench".to_owned();
        for a in args {
            c.push(' ');
            c.push_str(a);
        }
        c
    }
}

pub(crate) const HELP: &str = "usage: cargo xtask bench [--quick] [--reps N] [--no-md] [--only GROUPS] [--compare DIR]\n  \
     --quick    one repetition, 1 s per bandwidth test (about a minute)\n  \
     --reps N   repetitions (default 3; the table shows medians)\n  \
     --no-md    print only; do not update BENCHMARKS.md\n  \
     --no-build use target/compat and the bench example as built last\n  \
     --only G   comma-separated groups: tcp, memcpy, perftest-bw, rust-bw, lat,\n             \
     same-host, idle (same-host: perftest over the shared-memory path and\n             \
     over UDP with SOFTRDMA_SHM=0, UCX ucx_perftest UCX_TLS=sm,self alongside)\n  \
     --compare DIR  also run every perftest measurement against the libibverbs.so.1\n             \
     in DIR (e.g. a copy of target/compat built before a change), interleaved,\n             \
     and add a before/after table (not the same-host group's runs)";

/// One measured value and what goes with it (CPU s/GB for bandwidths, p99 for latencies).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) v: f64,
    pub(crate) aux: f64,
}

/// Samples per measurement key.
pub(crate) type Results = BTreeMap<String, Vec<Sample>>;

struct Ctx {
    opts: Opts,
    compat: PathBuf,
    bench_exe: PathBuf,
    dir: PathBuf,
    results: Results,
    failures: Vec<String>,
}

impl Ctx {
    fn record(&mut self, key: &str, r: Result<Sample>) {
        match r {
            Ok(s) => {
                eprintln!("  {key}: {:.3} ({:.3})", s.v, s.aux);
                self.results.entry(key.to_owned()).or_default().push(s);
            }
            Err(e) => {
                eprintln!("  {key}: FAILED\n{e}");
                self.failures
                    .push(format!("{key}: {}", e.lines().next().unwrap_or("")));
            }
        }
    }

    fn perftest(
        &self,
        libs: &Path,
        tool: &str,
        extra: &[String],
        setup: &Setup<'_>,
    ) -> Result<procs::PairRun> {
        let port = free_tcp_port()?;
        let addrs = match setup {
            Setup::Wire => {
                let a = free_addrs(2)?;
                Some((a, std::net::Ipv4Addr::from(u32::from(a) + 1)))
            }
            Setup::SameHost { .. } => None,
        };
        let mk = |addr: Option<std::net::Ipv4Addr>| {
            let mut c = Command::new(tool);
            c.env("LD_LIBRARY_PATH", libs)
                .args(["-d", "softrdma0", "-x", "0", "-F", "-p", &port.to_string()])
                .args(extra);
            match setup {
                Setup::Wire => {
                    c.env("SOFTRDMA_SHM", "0");
                }
                Setup::SameHost {
                    shm,
                    peer_copy,
                    stats,
                } => {
                    c.env_remove("SOFTRDMA_ADDR").env("SOFTRDMA_STATS", stats);
                    if !*peer_copy {
                        c.env("SOFTRDMA_PEER_COPY", "0");
                    }
                    if *shm {
                        c.env("SOFTRDMA_SHM", "1");
                    } else {
                        c.env("SOFTRDMA_SHM", "0");
                    }
                }
            }
            if let Some(a) = addr {
                c.env("SOFTRDMA_ADDR", a.to_string());
            }
            c
        };
        let mut client = mk(addrs.map(|(_, b)| b));
        client.arg("127.0.0.1");
        let name = format!("{tool}{}{}", extra.join(""), setup.tag()).replace(['-', ' '], "_");
        run_pair(
            &name,
            &self.dir,
            &mut mk(addrs.map(|(a, _)| a)),
            port,
            &mut client,
            Duration::from_secs(90),
        )
    }

    fn perftest_bw(
        &self,
        libs: &Path,
        tool: &str,
        size: usize,
        setup: &Setup<'_>,
    ) -> Result<Sample> {
        let extra = [
            "-s".to_owned(),
            size.to_string(),
            "-D".to_owned(),
            self.opts.secs.to_string(),
        ];
        let r = self.perftest(libs, tool, &extra, setup)?;
        let bw = parse::perftest_bw(&r.client)
            .ok_or_else(|| format!("no BW in:\n{}", procs::tail(&r.client)))?;
        // CPU of both processes over their whole life (setup included) per
        // byte of the timed window: a slight overestimate.
        let gb = bw * f64::from(self.opts.secs) / 1e9;
        Ok(Sample {
            v: bw,
            aux: r.cpu / gb,
        })
    }

    fn perftest_lat(
        &self,
        libs: &Path,
        tool: &str,
        events: bool,
        setup: &Setup<'_>,
    ) -> Result<Sample> {
        let mut extra = vec![
            "-s".to_owned(),
            "8".to_owned(),
            "-n".to_owned(),
            self.opts.iters.to_string(),
        ];
        if events {
            extra.push("-e".to_owned());
        }
        let r = self.perftest(libs, tool, &extra, setup)?;
        let (typ, p99) = parse::perftest_lat(&r.client)
            .ok_or_else(|| format!("no latency in:\n{}", procs::tail(&r.client)))?;
        Ok(Sample { v: typ, aux: p99 })
    }

    fn rust_write(&self, size: usize) -> Result<Sample> {
        let a = free_addrs(2)?;
        let mut c = Command::new(&self.bench_exe);
        c.env("SOFTRDMA_SHM", "0")
            .args(["--only", "write", "--reps", "1"])
            .args(["--secs", &self.opts.secs.to_string()])
            .args(["--size", &size.to_string()])
            .args(["--addr", &a.to_string()]);
        let (out, cpu) = run_one(
            &format!("rust_write_{size}"),
            &self.dir,
            &mut c,
            Duration::from_secs(90),
        )?;
        let bw = parse::result_field(&out, "write_Bps")
            .ok_or_else(|| format!("no RESULT in:\n{}", procs::tail(&out)))?;
        // Measured inside the timed phase by the example itself.
        let cpu_pct = parse::result_field(&out, "write_cpu_client").unwrap_or(f64::NAN)
            + parse::result_field(&out, "write_cpu_server").unwrap_or(f64::NAN);
        let per_gb = if cpu_pct.is_finite() {
            cpu_pct / 100.0 / (bw / 1e9)
        } else {
            cpu / (bw * f64::from(self.opts.secs) / 1e9)
        };
        Ok(Sample { v: bw, aux: per_gb })
    }
}

fn build(root: &Path) -> Result<()> {
    crate::compat(&[])?;
    eprintln!("xtask: cargo build --release -p softrdma --example bench");
    let st = Command::new(crate::cargo())
        .current_dir(root)
        .args(["build", "--release", "-p", "softrdma", "--example", "bench"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !st.success() {
        return Err(format!("cargo build failed ({st})"));
    }
    Ok(())
}

fn check_tools() -> Result<()> {
    for t in ["ib_write_bw", "ib_send_lat", "qperf"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Err(format!(
                "`{t}` not found: apt-get install -y perftest qperf"
            ));
        }
    }
    Ok(())
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{HELP}");
        return Ok(());
    }
    let opts = Opts::parse(args)?;
    check_tools()?;
    let root = crate::workspace_root();
    if !opts.no_build {
        build(&root)?;
    }
    let target = crate::target_dir(&root)?;
    let mut ctx = Ctx {
        compat: target.join("compat"),
        bench_exe: target.join("release/examples/bench"),
        dir: procs::scratch(&target)?,
        opts: opts.clone(),
        results: Results::new(),
        failures: Vec::new(),
    };
    let load_before = procs::loadavg();
    let t_start = Instant::now();
    let mut notes = Vec::new();
    let ucx = opts.runs("same-host") && same_host::ucx_available();
    if opts.runs("same-host") && !ucx {
        let n = same_host::ucx_missing_note();
        eprintln!("xtask bench: {n}");
        notes.push(n);
    }
    let qperf = if opts.runs("tcp") || opts.runs("lat") || opts.runs("same-host") {
        Some(Qperf::start()?)
    } else {
        None
    };
    for rep in 0..opts.reps {
        eprintln!("xtask bench: repetition {} of {}", rep + 1, opts.reps);
        one_rep(&mut ctx, qperf.as_ref());
        if opts.runs("same-host") {
            same_host::one_rep(&mut ctx, qperf.as_ref(), ucx);
        }
    }
    drop(qperf);
    if opts.runs("idle") {
        let r = idle(&ctx);
        ctx.record("idle", r);
    }
    let meta = report::Meta {
        command: opts.command(args),
        reps: opts.reps,
        secs: opts.secs,
        iters: opts.iters,
        idle_secs: opts.idle_secs,
        load_before,
        load_after: procs::loadavg(),
        minutes: t_start.elapsed().as_secs_f64() / 60.0,
        failures: ctx.failures.clone(),
        compare: opts.compare.clone(),
        wire: GROUPS.iter().any(|g| *g != "same-host" && opts.runs(g)),
        same_host: opts.runs("same-host"),
        notes,
    };
    let md = report::render(&ctx.results, &meta);
    println!("\n{md}");
    if opts.write_md {
        report::update_benchmarks_md(&root.join("BENCHMARKS.md"), &md)?;
        println!("BENCHMARKS.md updated (section \"{}\")", report::TITLE);
    }
    if ctx.failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} measurement(s) failed (logs in {})",
            ctx.failures.len(),
            ctx.dir.display()
        ))
    }
}

fn one_rep(ctx: &mut Ctx, qperf: Option<&Qperf>) {
    let o = ctx.opts.clone();
    if o.runs("memcpy") {
        for (size, tag) in SIZES {
            ctx.record(
                &format!("memcpy/{tag}"),
                Ok(Sample {
                    v: memcpy_bw(size),
                    aux: f64::NAN,
                }),
            );
        }
    }
    if let (true, Some(q)) = (o.runs("tcp"), qperf) {
        for (_, tag) in SIZES {
            let r = q
                .test(
                    ctx,
                    &["-m", tag, "tcp_bw"],
                    &format!("qperf_bw_{tag}"),
                    "bw",
                )
                .map(|(bw, cpu)| Sample {
                    v: bw,
                    aux: cpu / (bw * f64::from(o.secs) / 1e9),
                });
            ctx.record(&format!("tcp_bw/{tag}"), r);
        }
    }
    // Each perftest measurement runs against target/compat and, with
    // --compare, right after against the other build ("@base" keys).
    let mut builds = vec![(String::new(), ctx.compat.clone())];
    if let Some(d) = &o.compare {
        builds.push(("@base".to_owned(), d.clone()));
    }
    if o.runs("perftest-bw") {
        let runs = SIZES
            .iter()
            .map(|&(size, tag)| ("ib_write_bw", size, format!("ib_write_bw/{tag}")))
            .chain([
                ("ib_read_bw", 65536, "ib_read_bw/64K".to_owned()),
                ("ib_send_bw", 65536, "ib_send_bw/64K".to_owned()),
            ]);
        for (tool, size, key) in runs {
            for (suffix, libs) in &builds {
                let r = ctx.perftest_bw(libs, tool, size, &Setup::Wire);
                ctx.record(&format!("{key}{suffix}"), r);
            }
        }
    }
    if o.runs("rust-bw") {
        for (size, tag) in SIZES {
            let r = ctx.rust_write(size);
            ctx.record(&format!("rust_write/{tag}"), r);
        }
    }
    if o.runs("lat") {
        if let Some(q) = qperf {
            let r = q
                .test(ctx, &["-m", "8", "tcp_lat"], "qperf_lat", "latency")
                .map(|(us, _)| Sample {
                    v: us,
                    aux: f64::NAN,
                });
            ctx.record("tcp_lat", r);
        }
        for (tool, ev) in [
            ("ib_send_lat", false),
            ("ib_write_lat", false),
            ("ib_read_lat", false),
            ("ib_send_lat", true),
            ("ib_read_lat", true),
        ] {
            for (suffix, libs) in &builds {
                let r = ctx.perftest_lat(libs, tool, ev, &Setup::Wire);
                ctx.record(&format!("{tool}{}{suffix}", if ev { " -e" } else { "" }), r);
            }
        }
    }
}
