//! Backends: what a [`crate::verbs::Context`] runs on.
//!
//! - [`Backend::Native`]: softrdma's own software device (the engine in this
//!   process: RoCEv2 over a UDP socket).
//! - [`Backend::RdmaCore`]: the system's rdma-core, `libibverbs.so.1` and
//!   `librdmacm.so.1` loaded at run time (no build-time dependency), so the
//!   same API drives real RDMA NICs (or rxe/siw).
//!
//! Objects of the safe API hold one of two internal representations (the
//! engine's handles, or rdma-core's pointers in the owning handles of
//! `rdma_core::sys`); every public method dispatches on it.

pub(crate) mod rdma_core;

use crate::{Error, Result};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::OnceLock;

/// Which implementation of RDMA a device uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// softrdma's software device: RoCEv2 over a UDP socket, in this process
    /// (configured by `SOFTRDMA_ADDR`, `SOFTRDMA_PORT`, ...).
    Native,
    /// The system's rdma-core (`libibverbs.so.1`, `librdmacm.so.1`), loaded
    /// at run time: real RDMA NICs, or the kernel's rxe/siw.
    RdmaCore,
}

/// The environment variable that picks the backend: `native`, `rdma-core`
/// or `auto` (the default).
pub const BACKEND_ENV: &str = "SOFTRDMA_BACKEND";

impl Backend {
    /// Its name: `native` or `rdma-core`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::RdmaCore => "rdma-core",
        }
    }

    /// The backend `SOFTRDMA_BACKEND` names; `None` when it is unset, empty
    /// or `auto`. An unknown value is an error.
    pub fn from_env() -> Result<Option<Backend>> {
        match std::env::var(BACKEND_ENV) {
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(e) => Err(invalid(format!("{BACKEND_ENV}: {e}"))),
            Ok(v) if v.trim().is_empty() || v.trim().eq_ignore_ascii_case("auto") => Ok(None),
            Ok(v) => v
                .parse()
                .map(Some)
                .map_err(|e: Error| invalid(format!("{BACKEND_ENV}={v}: {e}"))),
        }
    }

    /// The backend used when none is named: [`Backend::RdmaCore`] if the
    /// system's `libibverbs.so.1` loads and lists at least one device, and
    /// it is not softrdma's own drop-in (`target/compat`), and the process
    /// was not given `SOFTRDMA_ADDR`/`SOFTRDMA_PORT` (which configure the
    /// software device); otherwise [`Backend::Native`]. Decided once per process.
    pub fn detect() -> Backend {
        static DETECTED: OnceLock<Backend> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let configured = |k: &str| {
                std::env::var_os(k).is_some_and(|v| !v.to_string_lossy().trim().is_empty())
            };
            if configured("SOFTRDMA_ADDR") || configured("SOFTRDMA_PORT") {
                return Backend::Native;
            }
            if rdma_core::has_hardware_device() {
                Backend::RdmaCore
            } else {
                Backend::Native
            }
        })
    }

    /// What `SOFTRDMA_BACKEND` names, else [`Backend::detect`].
    pub fn selected() -> Result<Backend> {
        Ok(Backend::from_env()?.unwrap_or_else(Backend::detect))
    }
}

fn invalid(msg: String) -> Error {
    Error::Verbs(softrdma_transport::VerbsError::InvalidArgument(msg))
}

impl FromStr for Backend {
    type Err = Error;

    /// `native`, or `rdma-core` (also `rdma_core`, `rdmacore`, `ibverbs`).
    fn from_str(s: &str) -> Result<Backend> {
        match s.trim().to_ascii_lowercase().as_str() {
            "native" | "softrdma" => Ok(Backend::Native),
            "rdma-core" | "rdma_core" | "rdmacore" | "ibverbs" => Ok(Backend::RdmaCore),
            other => Err(invalid(format!(
                "unknown backend {other:?} (native, rdma-core or auto)"
            ))),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a context runs on, as the examples print it: `native`, or
/// `rdma-core (/usr/lib/x86_64-linux-gnu/libibverbs.so.1)`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendInfo {
    /// The backend.
    pub backend: Backend,
    /// For rdma-core: the `libibverbs.so.1` that was loaded.
    pub library: Option<PathBuf>,
}

impl fmt::Display for BackendInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.library {
            Some(p) => write!(f, "{} ({})", self.backend, p.display()),
            None => write!(f, "{}", self.backend),
        }
    }
}
