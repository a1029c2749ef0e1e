//! Errors of verbs calls. Each carries the errno rdma-core returns for it;
//! failed *work requests* are not errors but completions with a status.

/// Why a verbs call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// A bad argument or an operation not allowed in the object's state (EINVAL).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A queue or table is full (ENOMEM).
    #[error("out of resources: {0}")]
    NoMemory(String),
    /// The object is still in use by others (EBUSY).
    #[error("resource busy: {0}")]
    Busy(String),
    /// No such object (ENOENT for lookups, EINVAL at the ABI where rdma-core does).
    #[error("no such object: {0}")]
    NotFound(String),
    /// Not supported by this device (EOPNOTSUPP).
    #[error("operation not supported: {0}")]
    NotSupported(String),
}

impl VerbsError {
    /// The positive errno rdma-core reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            VerbsError::InvalidArgument(_) => 22, // EINVAL
            VerbsError::NoMemory(_) => 12,        // ENOMEM
            VerbsError::Busy(_) => 16,            // EBUSY
            VerbsError::NotFound(_) => 22,        // EINVAL, as rdma-core does for bad handles
            VerbsError::NotSupported(_) => 95,    // EOPNOTSUPP
        }
    }
}

/// Shorthand for an `InvalidArgument` error.
pub(crate) fn inval<T>(msg: impl Into<String>) -> Result<T, VerbsError> {
    Err(VerbsError::InvalidArgument(msg.into()))
}
