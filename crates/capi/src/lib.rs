//! # softrdma-capi: the C ABI (`libibverbs.so.1`)
//!
//! This crate is built as a `staticlib` (`target/<profile>/libibverbs.a`) that
//! `cargo xtask compat` links with `cc -shared` and the version script
//! `maps/libibverbs.map` into `target/compat/libibverbs.so.1`, a drop-in for
//! rdma-core 44's library: every default-version symbol at its rdma-core
//! version node (`IBVERBS_1.0` ... `IBVERBS_1.14`, `IBVERBS_PRIVATE_34`), and
//! nothing else exported (`local: *`). Unmodified binaries built against
//! rdma-core then run with `LD_LIBRARY_PATH=target/compat`. See
//! `crates/capi/README.md` for the build, the checks and how to replace a stub.
//!
//! - [`ffi`]: `#[repr(C)]` mirrors of the verbs / rdma_cm structs and enums,
//!   layout-checked at compile time and against the installed headers
//!   (`tests/layout.rs`).
//! - [`guard`]: the panic barrier ([`guard::ffi_guard`]) and errno helpers
//!   every export uses.
//! - [`stubs`]: the exported functions, one module per area.
//!
//! Panic policy: no panic crosses the ABI. Every export runs inside
//! `ffi_guard`, which needs `panic = "unwind"` (the workspace default); with
//! `panic = "abort"` a bug would kill the host process instead of failing the
//! call.

pub use softrdma_ffi as ffi;
pub mod guard;
pub mod rdmacm;
pub mod stubs;
pub mod umad;
pub mod verbs;
