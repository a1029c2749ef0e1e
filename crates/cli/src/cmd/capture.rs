//! `softrdma capture --out FILE.pcap -- CMD ARGS...`: runs CMD with
//! `SOFTRDMA_PCAP=FILE.pcap`, so its softrdma device writes every packet it
//! sends and receives to the file (pcap, Ethernet link type: Wireshark's
//! RRoCE dissector and `softrdma decode` read it), then reports how many
//! packets were captured and whether their ICRCs check.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use softrdma_wire::PcapReader;
use softrdma_wire::ip::ROCEV2_PORT;

use super::decode::{Tally, decode_file};
use super::{CliError, EXIT_FAILED, OrErr, Output, check_write};

/// Arguments of `softrdma capture`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The capture file to write (overwritten).
    #[arg(short, long, value_name = "FILE.pcap")]
    out: PathBuf,

    /// CMD is a C program: load softrdma's libibverbs.so.1 and librdmacm.so.1
    /// into it by putting the compat directory first in LD_LIBRARY_PATH.
    #[arg(long)]
    compat: bool,

    /// The compat directory [default: target/compat beside this executable's
    /// target directory, as `cargo xtask compat` leaves it].
    #[arg(long, value_name = "DIR", requires = "compat")]
    compat_dir: Option<PathBuf>,

    /// Print every captured packet (as `softrdma decode` does), not only the summary.
    #[arg(short, long)]
    decode: bool,

    /// The command to run, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

/// The compat directory: `--compat-dir`, or `<target>/compat` where this
/// executable is `<target>/<profile>/softrdma`.
fn compat_dir(args: &Args) -> Result<PathBuf, CliError> {
    let dir = match &args.compat_dir {
        Some(d) => d.clone(),
        None => {
            let exe = std::env::current_exe().or_err("cannot find the softrdma executable")?;
            exe.parent()
                .and_then(Path::parent)
                .map(|t| t.join("compat"))
                .ok_or_else(|| CliError::new("cannot find the target directory"))?
        }
    };
    if !dir.join("libibverbs.so.1").is_file() {
        return Err(CliError::new(format!(
            "no libibverbs.so.1 in {}: build it with `cargo xtask compat` or give --compat-dir",
            dir.display()
        )));
    }
    Ok(dir)
}

/// The UDP port RoCEv2 packets go to: `SOFTRDMA_PORT` or 4791.
fn roce_port() -> u16 {
    std::env::var("SOFTRDMA_PORT")
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(ROCEV2_PORT)
}

pub(crate) fn run(args: &Args) -> Result<ExitCode, CliError> {
    let out = std::path::absolute(&args.out).or_err(format_args!("{}", args.out.display()))?;
    // A stale file would pass for this run's capture.
    match std::fs::remove_file(&out) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(CliError::new(format!("{}: {e}", out.display()))),
    }
    let (prog, rest) = args
        .cmd
        .split_first()
        .ok_or_else(|| CliError::new("no command given after --"))?;
    let mut cmd = Command::new(prog);
    cmd.args(rest).env("SOFTRDMA_PCAP", &out);
    if args.compat {
        let dir = compat_dir(args)?;
        let mut paths = vec![dir];
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        cmd.env(
            "LD_LIBRARY_PATH",
            std::env::join_paths(paths).or_err("LD_LIBRARY_PATH")?,
        );
    }
    let status = cmd
        .status()
        .or_err(format_args!("cannot run {}", prog.to_string_lossy()))?;
    let bytes = match std::fs::read(&out) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(CliError::new(format!(
                "{} {}: nothing captured (it opened no softrdma device{})",
                prog.to_string_lossy(),
                describe(status),
                if args.compat {
                    ""
                } else {
                    "; a C program needs --compat"
                }
            )));
        }
        Err(e) => return Err(CliError::new(format!("{}: {e}", out.display()))),
    };
    PcapReader::new(&bytes).or_err(format_args!("{}", out.display()))?;
    let mut tally = Tally::default();
    let stdout = io::stdout();
    let mut w = io::BufWriter::new(stdout.lock());
    if decode_file(roce_port(), !args.decode, &bytes, None, &mut w, &mut tally)? == Output::Closed {
        return Ok(ExitCode::SUCCESS);
    }
    let r = writeln!(w, "captured {}: {}", out.display(), tally.summary()).and_then(|()| w.flush());
    if check_write(r)? == Output::Closed {
        return Ok(ExitCode::SUCCESS);
    }
    if !status.success() {
        return Err(CliError::new(format!(
            "{} {}",
            prog.to_string_lossy(),
            describe(status)
        )));
    }
    Ok(if tally.bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    })
}

fn describe(s: std::process::ExitStatus) -> String {
    match s.code() {
        Some(0) => "exited normally".into(),
        Some(c) => format!("exited with status {c}"),
        None => "was killed by a signal".into(),
    }
}
