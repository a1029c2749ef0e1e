//! Errors of connection management.

use softrdma_engine::cm_proto::{CmError, EventKind, EventParam};
use softrdma_transport::VerbsError;
use std::io;

/// Why a connection-management call failed. [`Error::errno`] gives the errno
/// librdmacm would set.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection manager refused the call (bad state, address in use,
    /// address not on this device, ...).
    #[error(transparent)]
    Cm(#[from] CmError),
    /// A verb failed (creating the QP, its CQs, ...).
    #[error(transparent)]
    Verbs(#[from] crate::Error),
    /// A system-level failure (event channel, thread).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The peer rejected the connection (`RDMA_CM_EVENT_REJECTED`). `reason`
    /// is the IB CM reason: 28 for `rdma_reject`, 8 when nobody listens on
    /// the port; for UD (SIDR) the SIDR_REP status.
    #[error("connection rejected (reason {reason})")]
    Rejected {
        /// REJ reason or SIDR status.
        reason: i32,
        /// The private data the peer rejected with.
        private_data: Vec<u8>,
    },
    /// The peer did not answer (`RDMA_CM_EVENT_UNREACHABLE`).
    #[error("peer unreachable (status {status})")]
    Unreachable {
        /// Negative errno (usually -ETIMEDOUT).
        status: i32,
    },
    /// Address resolution failed (`RDMA_CM_EVENT_ADDR_ERROR`): no route, no
    /// device at the address, or the timeout passed.
    #[error("address resolution failed (status {status})")]
    AddrError {
        /// Negative errno.
        status: i32,
    },
    /// Route resolution failed (`RDMA_CM_EVENT_ROUTE_ERROR`).
    #[error("route resolution failed (status {status})")]
    RouteError {
        /// Negative errno.
        status: i32,
    },
    /// Connection setup failed after the request was accepted
    /// (`RDMA_CM_EVENT_CONNECT_ERROR`), e.g. the RTU never came.
    #[error("connection setup failed (status {status})")]
    ConnectError {
        /// Negative errno.
        status: i32,
    },
    /// A synchronous call got an event other than the one it waits for.
    #[error("unexpected event {kind:?} (status {status})")]
    UnexpectedEvent {
        /// What arrived.
        kind: EventKind,
        /// Its status.
        status: i32,
    },
    /// A wait ran out of time.
    #[error("timed out: {0}")]
    TimedOut(String),
    /// A bad argument or a call that does not fit the id.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// [`super::getaddrinfo`] found no usable address.
    #[error("address lookup failed: {0}")]
    AddrInfo(String),
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The positive errno librdmacm sets for this failure (`ECONNREFUSED` for
    /// a rejection, as `ucma_complete` does).
    pub fn errno(&self) -> i32 {
        let neg = |status: i32, or: i32| if status < 0 { -status } else { or };
        match self {
            Error::Cm(e) => e.errno(),
            Error::Verbs(e) => e.errno(),
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::Rejected { .. } => libc::ECONNREFUSED,
            Error::Unreachable { status } => neg(*status, libc::EHOSTUNREACH),
            Error::AddrError { status } => neg(*status, libc::EADDRNOTAVAIL),
            Error::RouteError { status } => neg(*status, libc::EHOSTUNREACH),
            Error::ConnectError { status } => neg(*status, libc::ECONNABORTED),
            Error::UnexpectedEvent { .. } => libc::EPROTO,
            Error::TimedOut(_) => libc::ETIMEDOUT,
            Error::InvalidArgument(_) => libc::EINVAL,
            Error::AddrInfo(_) => libc::EADDRNOTAVAIL,
        }
    }

    /// The private data of a rejection, if this is one.
    pub fn rejected_private_data(&self) -> Option<&[u8]> {
        match self {
            Error::Rejected { private_data, .. } => Some(private_data),
            _ => None,
        }
    }

    /// The error an event reports, if it reports one (`None` for successes).
    pub(crate) fn from_event(kind: EventKind, status: i32, param: &EventParam) -> Option<Error> {
        Some(match kind {
            EventKind::Rejected => Error::Rejected {
                reason: status,
                private_data: match param {
                    EventParam::Conn(c) => c.private_data.clone(),
                    EventParam::Ud(u) => u.private_data.clone(),
                    EventParam::None => Vec::new(),
                },
            },
            EventKind::Unreachable => Error::Unreachable { status },
            EventKind::AddrError => Error::AddrError { status },
            EventKind::RouteError => Error::RouteError { status },
            EventKind::ConnectError => Error::ConnectError { status },
            EventKind::MulticastError | EventKind::DeviceRemoval => {
                Error::UnexpectedEvent { kind, status }
            }
            _ if status != 0 => Error::UnexpectedEvent { kind, status },
            _ => return None,
        })
    }
}

impl From<VerbsError> for Error {
    fn from(e: VerbsError) -> Error {
        Error::Verbs(crate::Error::Verbs(e))
    }
}

impl From<Error> for crate::Error {
    fn from(e: Error) -> crate::Error {
        match e {
            Error::Verbs(v) => v,
            Error::Io(i) => crate::Error::Io(i),
            other => {
                let kind = match other.errno() {
                    libc::ETIMEDOUT => io::ErrorKind::TimedOut,
                    libc::ECONNREFUSED => io::ErrorKind::ConnectionRefused,
                    libc::EADDRINUSE => io::ErrorKind::AddrInUse,
                    libc::EADDRNOTAVAIL => io::ErrorKind::AddrNotAvailable,
                    libc::EINVAL => io::ErrorKind::InvalidInput,
                    _ => io::ErrorKind::Other,
                };
                crate::Error::Io(io::Error::new(kind, other))
            }
        }
    }
}
