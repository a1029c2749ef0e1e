//! `softrdma`: the command-line tool of the softrdma RoCEv2 stack.
//!
//! Each subcommand is one module under `cmd/` exposing a clap `Args` struct and
//! `run(&Args) -> Result<ExitCode, CliError>`. Adding one means: a new module,
//! a variant in [`Command`] and an arm in [`run`]; nothing else changes.

#![forbid(unsafe_code)]

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// softrdma: a user-space RoCEv2 RDMA stack.
#[derive(Debug, Parser)]
#[command(name = "softrdma", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode the RoCEv2 packets of pcap captures, one line each, and check every ICRC.
    ///
    /// Exit status: 0 if every packet parsed and had a correct ICRC, 1 if any did
    /// not, 2 on an unreadable file or a usage error.
    Decode(cmd::decode::Args),
}

fn run(cli: &Cli) -> Result<ExitCode, cmd::CliError> {
    match &cli.command {
        Command::Decode(args) => cmd::decode::run(args),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("softrdma: error: {e}");
            ExitCode::from(cmd::EXIT_ERROR)
        }
    }
}
