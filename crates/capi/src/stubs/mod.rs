//! Every symbol of rdma-core 44's `libibverbs.so.1` (all default-version
//! symbols, `maps/libibverbs.map`), grouped by area.
//!
//! Most are still stubs that fail in rdma-core's convention for their kind
//! with `errno`/return value [`NOT_IMPLEMENTED`] (see [`crate::guard::ret`]).
//! Pure functions are already real: the `*_str` functions and rate
//! conversions ([`strs`]), `ibv_get_sysfs_path`/`ibv_read_sysfs_file` and the
//! fork helpers ([`misc`]).
//!
//! To implement an area, replace its `stubs! { ... }` entries with ordinary
//! functions of the same signature:
//!
//! ```text
//! /// ... # Safety: `context` must be a context returned by `ibv_open_device`.
//! #[unsafe(no_mangle)]
//! pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
//!     ffi_guard(|| ret::null(libc::EIO), || { /* ... */ })
//! }
//! ```
//!
//! Keep the name, the signature and the `ffi_guard`; `cargo xtask compat`
//! and `crates/compat-tests/tests/exports.rs` check that every symbol of the
//! map stays exported at its version node. Set `SOFTRDMA_LOG_STUBS=1` to have each stub print its
//! name on stderr when it is called (useful to see what a C program needs next).

pub mod ah;
pub mod misc;
pub mod pd_mr;
pub mod provider;
pub mod qp;
pub mod strs;

pub(crate) use crate::guard::stubs;
pub use crate::guard::{NOT_IMPLEMENTED, stub_hit};
