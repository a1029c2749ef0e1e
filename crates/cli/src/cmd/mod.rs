//! The subcommands, one module each, and what they share.

use std::fmt;
use std::io;

pub(crate) mod decode;

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
        f.write_str(&self.0)
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
