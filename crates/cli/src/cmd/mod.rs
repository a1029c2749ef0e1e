//! The subcommands, one module each, and what they share.

use std::fmt;
use std::io;

pub(crate) mod capture;
pub(crate) mod counters;
pub(crate) mod decode;
pub(crate) mod devices;
pub(crate) mod devinfo;
pub(crate) mod perf;
pub(crate) mod ping;
pub(crate) mod run;
pub(crate) mod stats;

/// Exit status when a check failed (e.g. a packet with a bad ICRC).
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit status for errors that stopped the command (unreadable input, usage).
pub(crate) const EXIT_ERROR: u8 = 2;

/// An error that ends a subcommand; `main` prints it as one line on stderr.
#[derive(Debug)]
pub(crate) struct CliError(String);

impl CliError {
    /// An error with this message.
    pub(crate) fn new(msg: impl Into<String>) -> CliError {
        CliError(msg.into())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line, whatever the source said.
        let mut first = true;
        for part in self.0.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if !first {
                f.write_str(" ")?;
            }
            f.write_str(part)?;
            first = false;
        }
        Ok(())
    }
}

/// Adds what was being done to an error: `op.or_err("open device")?` gives
/// "open device: <cause>".
pub(crate) trait OrErr<T> {
    /// Maps the error to a [`CliError`] prefixed with `what`.
    fn or_err(self, what: impl fmt::Display) -> Result<T, CliError>;
}

impl<T, E: fmt::Display> OrErr<T> for Result<T, E> {
    fn or_err(self, what: impl fmt::Display) -> Result<T, CliError> {
        self.map_err(|e| CliError::new(format!("{what}: {e}")))
    }
}

/// Outcome of writing to stdout: a closed pipe (`softrdma decode x | head`) is
/// not an error worth a message, so callers stop quietly on [`Output::Closed`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// Keep going.
    Open,
    /// The reader went away.
    Closed,
}

/// Maps a stdout write result to [`Output`], or an error for real failures.
pub(crate) fn check_write(r: io::Result<()>) -> Result<Output, CliError> {
    match r {
        Ok(()) => Ok(Output::Open),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(Output::Closed),
        Err(e) => Err(CliError::new(format!("writing output: {e}"))),
    }
}

/// Prints `text` to stdout; a closed pipe is not an error.
pub(crate) fn print_out(text: &str) -> Result<(), CliError> {
    use io::Write;
    let mut out = io::stdout().lock();
    check_write(out.write_all(text.as_bytes()).and_then(|()| out.flush())).map(|_| ())
}

/// Opens this process's device (`SOFTRDMA_ADDR`, `SOFTRDMA_PORT`, ...).
pub(crate) fn open_device() -> Result<softrdma::verbs::Context, CliError> {
    softrdma::verbs::Context::open().map_err(|e| {
        let e = e.to_string();
        let cause = e
            .strip_prefix("softrdma: cannot start the device: ")
            .unwrap_or(&e);
        CliError::new(format!("cannot open the softrdma device: {cause}"))
    })
}

/// Parses a byte count: `4096`, `4K`, `4KiB`, `1M`, `1MiB`, `1G` (binary units).
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 64, 4K, 1MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{s:?}: unknown unit (use K, M or G)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// `4096` → "4 KiB", `8` → "8 B", `1536` → "1536 B".
pub(crate) fn fmt_size(n: u64) -> String {
    if n >= 1 << 30 && n % (1 << 30) == 0 {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n % (1 << 10) == 0 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64"), Ok(64));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("3T").is_err());
        assert_eq!(fmt_size(8), "8 B");
        assert_eq!(fmt_size(4096), "4 KiB");
        assert_eq!(fmt_size(1 << 20), "1 MiB");
        assert_eq!(fmt_size(1500), "1500 B");
    }

    #[test]
    fn errors_are_one_line() {
        let e = CliError::new("cannot bind\n  address in use\n");
        assert_eq!(e.to_string(), "cannot bind address in use");
    }
}
