//! `softrdma`: the command-line tool of the softrdma RoCEv2 stack.
//!
//! Each subcommand is one module under `cmd/` exposing a clap `Args` struct and
//! `run(&Args) -> Result<ExitCode, CliError>`. Adding one means: a new module,
//! a variant in [`Command`] and an arm in [`run`]; nothing else changes.

#![forbid(unsafe_code)]

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// softrdma: RDMA over RoCEv2 in user space, no RDMA NIC needed.
///
/// All processes of a user on a host share one software RDMA device
/// (softrdma0) whose GIDs are the host's addresses, on UDP port 4791
/// (SOFTRDMA_PORT); SOFTRDMA_ADDR picks GID 0. Nothing to start or
/// configure. Start with `softrdma perf`.
#[derive(Debug, Parser)]
#[command(name = "softrdma", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmark RDMA WRITE, READ, SEND and atomics: bandwidth, message rate, latency.
    #[command(long_about = cmd::perf::LONG_ABOUT, after_long_help = cmd::perf::EXAMPLES)]
    Perf(cmd::perf::Args),

    /// List RDMA devices (like ibv_devices).
    ///
    /// softrdma0 is one device per host, shared by the user's processes; this
    /// process joins it at SOFTRDMA_ADDR, or 127.0.0.1.
    Devices(cmd::devices::Args),

    /// Show the device, its port and GID table, and its UDP address (like ibv_devinfo).
    ///
    /// GID 0 is the device's address (IPv4 as ::ffff:a.b.c.d, RoCE v2); the
    /// last line gives the UDP address and port the device sends from and
    /// listens on.
    Devinfo(cmd::devinfo::Args),

    /// Check connectivity through the connection manager, rping style, with per-message RTT.
    ///
    /// `softrdma ping --server` accepts connections and echoes every message;
    /// `softrdma ping HOST` connects (rdma_resolve_addr/route, rdma_connect),
    /// sends --count messages one at a time, prints each round trip and a
    /// summary, and disconnects.
    Ping(cmd::ping::Args),

    /// Run a command with its softrdma packets written to a pcap file.
    ///
    /// Sets SOFTRDMA_PCAP=FILE for CMD: its device writes every packet it
    /// sends and receives (Ethernet link type; Wireshark's RRoCE dissector and
    /// `softrdma decode` read it). Then prints how many packets were captured
    /// and whether their ICRCs check (every packet with --decode). Every
    /// softrdma process CMD starts writes the same FILE, so capture one
    /// process per file (`softrdma perf` records both directions in its own
    /// process and keeps its server out of the file). Exit status: CMD's
    /// failure, else 1 if a packet is bad, else 0.
    Capture(cmd::capture::Args),

    /// Show packet, retransmit, NAK, RNR and drop counters of softrdma devices.
    ///
    /// There is no daemon: counters live in each process. `softrdma stats --
    /// CMD` runs CMD with SOFTRDMA_STATS=FILE, to which each softrdma device
    /// appends its counters when its process ends (softrdma's own commands do
    /// today), and prints them. `--file` prints such a file; `--self-test`
    /// runs a short exchange between two devices in this process, including
    /// an RNR wait, a stray datagram and a bad rkey, and prints their counters.
    Stats(cmd::stats::Args),

    /// Decode the RoCEv2 packets of pcap captures, one line each, and check every ICRC.
    ///
    /// Exit status: 0 if every packet parsed and had a correct ICRC, 1 if any did
    /// not, 2 on an unreadable file or a usage error.
    Decode(cmd::decode::Args),

    /// Run an unmodified program over softrdma: UCX, Open MPI, rdma-core tools.
    ///
    /// Puts softrdma's libibverbs.so.1 and librdmacm.so.1 first on
    /// LD_LIBRARY_PATH (found next to this binary as `cargo xtask compat`
    /// leaves them, or in SOFTRDMA_COMPAT_DIR) and shows CMD, in a private
    /// user + mount namespace, /dev/infiniband/uverbs0 and
    /// /sys/class/infiniband/softrdma0 (ports, GID table with RoCE v2 types
    /// and net devices) as middleware looks for them. No root needed; every
    /// process CMD starts (mpirun's ranks) sees the same; programs inside and
    /// outside share the host device. Where user namespaces are forbidden it
    /// warns and sets only the library path. Exit status: CMD's (127 if it
    /// cannot be found).
    ///
    /// Example: softrdma run mpirun -np 2 --mca pml ucx ./ring
    Run(cmd::run::Args),
}

fn run(cli: &Cli) -> Result<ExitCode, cmd::CliError> {
    match &cli.command {
        Command::Perf(args) => cmd::perf::run(args),
        Command::Devices(args) => cmd::devices::run(args),
        Command::Devinfo(args) => cmd::devinfo::run(args),
        Command::Ping(args) => cmd::ping::run(args),
        Command::Capture(args) => cmd::capture::run(args),
        Command::Stats(args) => cmd::stats::run(args),
        Command::Decode(args) => cmd::decode::run(args),
        Command::Run(args) => cmd::run::run(args),
    }
}

/// A usage error as one line: clap's message, its hints, and where help is.
fn usage_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .filter(|l| !l.starts_with("Usage:"))
        .collect();
    if let Some(first) = parts.first_mut() {
        *first = first.strip_prefix("error: ").unwrap_or(first);
    }
    format!("{} (see --help)", parts.join(" "))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `softrdma` alone: the overview, on stderr, status 2.
            let _ = e.print();
            return ExitCode::from(cmd::EXIT_ERROR);
        }
        Err(e) if e.use_stderr() => {
            eprintln!("softrdma: error: {}", usage_line(&e));
            return ExitCode::from(cmd::EXIT_ERROR);
        }
        // --help, --version: clap prints them.
        Err(e) => e.exit(),
    };
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("softrdma: error: {e}");
            ExitCode::from(cmd::EXIT_ERROR)
        }
    }
}
