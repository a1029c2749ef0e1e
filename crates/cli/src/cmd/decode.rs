//! `softrdma decode FILE.pcap...`: one line per RoCEv2 packet plus an ICRC verdict.
//!
//! Output (stdout): for each packet to the RoCEv2 UDP port, `FRAME TIME SUMMARY`
//! where TIME is seconds since the file's first frame and SUMMARY is
//! [`softrdma_wire::Decoded`]'s one-line form; a `# FILE` line precedes each file
//! when several are given. The last line is `N packets, N ok, N bad`.

use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use softrdma_wire::decode::udp_dst_port;
use softrdma_wire::ip::{ROCEV2_PORT, parse_ip_udp};
use softrdma_wire::{PcapReader, decode_ip_packet};

use super::{CliError, EXIT_FAILED, Output, check_write};

/// Arguments of `softrdma decode`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Capture files: classic pcap with Ethernet, Linux cooked (SLL/SLL2) or raw IP
    /// link type (convert pcapng with `editcap -F pcap`).
    #[arg(required = true, value_name = "FILE.pcap")]
    files: Vec<PathBuf>,

    /// UDP destination port carrying RoCEv2; other traffic is skipped.
    #[arg(long, default_value_t = ROCEV2_PORT, value_name = "PORT")]
    port: u16,

    /// Print only bad packets and the summary.
    #[arg(short, long)]
    quiet: bool,
}

/// Packet counts over all files.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) ok: u64,
    pub(crate) bad: u64,
    /// Frames that are not UDP to the port (ARP, other traffic).
    pub(crate) skipped: u64,
}

impl Tally {
    /// `N packets, N ok, N bad` (and skipped frames if any).
    pub(crate) fn summary(&self) -> String {
        let mut s = format!(
            "{} packets, {} ok, {} bad",
            self.ok + self.bad,
            self.ok,
            self.bad
        );
        if self.skipped > 0 {
            let _ = write!(s, " ({} other frames skipped)", self.skipped);
        }
        s
    }
}

pub(crate) fn run(args: &Args) -> Result<ExitCode, CliError> {
    // Read and check every file first so a typo in the last name fails before
    // any output.
    let mut files = Vec::with_capacity(args.files.len());
    for path in &args.files {
        let bytes =
            fs::read(path).map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
        PcapReader::new(&bytes).map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
        files.push((path, bytes));
    }
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut tally = Tally::default();
    for (path, bytes) in &files {
        let header = (files.len() > 1).then(|| format!("# {}", path.display()));
        if decode_file(args.port, args.quiet, bytes, header, &mut out, &mut tally)?
            == Output::Closed
        {
            return Ok(ExitCode::SUCCESS);
        }
    }
    let end = writeln!(out, "{}", tally.summary()).and_then(|()| out.flush());
    if check_write(end)? == Output::Closed {
        return Ok(ExitCode::SUCCESS);
    }
    Ok(if tally.bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    })
}

/// Decodes one file: packets to UDP `port`, all lines or (`quiet`) only bad
/// ones. `header` is printed before its first line (so `--quiet` names only
/// the files that have bad packets).
pub(crate) fn decode_file(
    port: u16,
    quiet: bool,
    bytes: &[u8],
    mut header: Option<String>,
    out: &mut impl Write,
    tally: &mut Tally,
) -> Result<Output, CliError> {
    let mut emit = |out: &mut dyn Write, line: &str| {
        let r = match header.take() {
            Some(h) => writeln!(out, "{h}").and_then(|()| writeln!(out, "{line}")),
            None => writeln!(out, "{line}"),
        };
        check_write(r)
    };
    let reader = PcapReader::new(bytes).map_err(|e| CliError::new(e.to_string()))?;
    let mut t0 = None;
    for (i, rec) in reader.enumerate() {
        let frame = i + 1;
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                // A capture cut off mid-record (tcpdump killed): report it as a bad
                // packet so the exit status shows it, and stop reading this file.
                tally.bad += 1;
                return emit(out, &format!("{frame:>5} ERROR truncated record: {e}"));
            }
        };
        let Some(ip) = rec.ip_packet() else {
            tally.skipped += 1;
            continue;
        };
        if udp_dst_port(ip) != Some(port) {
            tally.skipped += 1;
            continue;
        }
        let t = rec.ts_ns().saturating_sub(*t0.get_or_insert(rec.ts_ns()));
        let when = format!(
            "{frame:>5} {:>4}.{:06}",
            t / 1_000_000_000,
            t % 1_000_000_000 / 1000
        );
        let line = match decode_ip_packet(ip) {
            Ok(d) if d.is_ok() => {
                tally.ok += 1;
                if quiet {
                    continue;
                }
                format!("{when} {d}")
            }
            Ok(d) => {
                tally.bad += 1;
                format!("{when} {d}")
            }
            Err(e) => {
                tally.bad += 1;
                match parse_ip_udp(ip) {
                    Ok(env) => format!(
                        "{when} {} > {} ERROR {e}",
                        SocketAddr::new(env.src, env.src_port),
                        SocketAddr::new(env.dst, env.dst_port)
                    ),
                    Err(_) => format!("{when} ERROR {e}"),
                }
            }
        };
        if emit(out, &line)? == Output::Closed {
            return Ok(Output::Closed);
        }
    }
    Ok(Output::Open)
}
