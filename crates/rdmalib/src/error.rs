//! The error type of rdmalib.

use softrdma::verbs::WcStatus;
use std::io;
use std::time::Duration;

/// Which operation a failed completion belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// A message ([`crate::Connection::send`]).
    Send,
    /// Receiving a message or a notification.
    Recv,
    /// A one-sided RDMA WRITE.
    Write,
    /// A one-sided RDMA READ.
    Read,
    /// A notification to the peer.
    Notify,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::Send => "send",
            Op::Recv => "receive",
            Op::Write => "RDMA write",
            Op::Read => "RDMA read",
            Op::Notify => "notify",
        })
    }
}

/// Why an rdmalib call failed. [`Error::errno`] gives the errno the C API sets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Connection management failed: no listener, rejected, unreachable,
    /// address in use, ...
    #[error("connection management: {0}")]
    Cm(#[from] softrdma::cm::Error),
    /// A verb failed (creating or registering resources, posting work).
    #[error("verbs: {0}")]
    Verbs(#[from] softrdma::Error),
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The connection was closed locally ([`crate::Connection::close`]) and
    /// can no longer be used; closing it again reports this too.
    #[error("the connection is closed")]
    Closed,
    /// The peer disconnected (or died, or the connection failed earlier):
    /// the queue pair is in the error state and nothing more can be sent or
    /// received. Messages and notifications that arrived before are still
    /// returned first.
    #[error("the peer disconnected")]
    Disconnected,
    /// An operation completed with an error status; the connection is
    /// unusable afterwards (the queue pair is in the error state).
    #[error("{op} failed: completion status {status:?}")]
    Completion {
        /// The operation.
        op: Op,
        /// Its completion status.
        status: WcStatus,
    },
    /// A range outside the peer's advertised buffer (nothing was sent).
    #[error("range {offset}+{len} is outside the peer's {size}-byte buffer")]
    RemoteOutOfBounds {
        /// Start of the range in the peer's buffer.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Size of the peer's buffer.
        size: u64,
    },
    /// A range outside the local buffer (nothing was sent).
    #[error("range {offset}+{len} is outside the local {size}-byte buffer")]
    LocalOutOfBounds {
        /// Start of the range.
        offset: usize,
        /// Length of the range.
        len: usize,
        /// Size of the buffer.
        size: usize,
    },
    /// A message larger than the peer accepts (its `max_message`) or larger
    /// than the space given to receive it.
    #[error("a {len}-byte message exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// The message length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A wait ran longer than the connection's timeout. The operation may
    /// still complete later; the connection stays usable.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The peer does not speak rdmalib's protocol (bad connection private
    /// data, unknown immediate value, malformed notification).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A bad configuration or argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// The positive errno the C API sets for this error.
    ///
    /// | error | errno |
    /// |---|---|
    /// | [`Error::Closed`] | `EBADF` |
    /// | [`Error::Disconnected`] | `ECONNRESET` |
    /// | [`Error::Completion`] | `ETIMEDOUT` for transport/RNR retries exceeded, `ECONNRESET` for flushes, `EIO` otherwise |
    /// | [`Error::RemoteOutOfBounds`], [`Error::LocalOutOfBounds`] | `ERANGE` |
    /// | [`Error::MessageTooLarge`] | `EMSGSIZE` |
    /// | [`Error::Timeout`] | `ETIMEDOUT` |
    /// | [`Error::Protocol`] | `EPROTO` |
    /// | [`Error::InvalidArgument`] | `EINVAL` |
    /// | [`Error::Cm`], [`Error::Verbs`], [`Error::Io`] | what the layer below reports |
    pub fn errno(&self) -> i32 {
        match self {
            Error::Cm(e) => e.errno(),
            Error::Verbs(e) => e.errno(),
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::Closed => libc::EBADF,
            Error::Disconnected => libc::ECONNRESET,
            Error::Completion { status, .. } => match status {
                WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr => libc::ETIMEDOUT,
                WcStatus::WrFlushErr => libc::ECONNRESET,
                _ => libc::EIO,
            },
            Error::RemoteOutOfBounds { .. } | Error::LocalOutOfBounds { .. } => libc::ERANGE,
            Error::MessageTooLarge { .. } => libc::EMSGSIZE,
            Error::Timeout(_) => libc::ETIMEDOUT,
            Error::Protocol(_) => libc::EPROTO,
            Error::InvalidArgument(_) => libc::EINVAL,
        }
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;
