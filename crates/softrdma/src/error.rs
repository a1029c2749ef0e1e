//! The error type of the safe API.

use softrdma_transport::VerbsError;
use std::io;

/// Why a call failed. [`Error::errno`] gives the errno rdma-core would return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verb was refused (bad argument, full queue, object busy, ...).
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// A system-level failure (socket, eventfd, thread).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// No device to open: the backend's library cannot be loaded, or it
    /// lists no (such) device (`ENODEV`).
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    /// A buffer range outside the memory region it names.
    #[error("range {offset}+{len} is outside the {size}-byte memory region")]
    OutOfRange {
        /// Start of the range.
        offset: usize,
        /// Length of the range.
        len: usize,
        /// Size of the region.
        size: usize,
    },
}

impl Error {
    /// The positive errno rdma-core reports for this failure.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Verbs(e) => e.errno(),
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::NoDevice(_) => libc::ENODEV,
            Error::OutOfRange { .. } => libc::EINVAL,
        }
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;
