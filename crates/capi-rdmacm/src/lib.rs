//! # softrdma-capi-rdmacm: the C ABI of `librdmacm.so.1`
//!
//! Built as a `staticlib` (`target/<profile>/librdmacm.a`) that `cargo xtask
//! compat` links with `maps/librdmacm.map` into `target/compat/librdmacm.so.1`,
//! with `DT_NEEDED libibverbs.so.1` on our own `target/compat/libibverbs.so.1`.
//! Every default-version symbol of rdma-core 44's librdmacm is exported at its
//! node (`RDMACM_1.0` ... `RDMACM_1.3`).
//!
//! **No second verbs engine lives here.** Objects that librdmacm creates
//! (`cm_id->verbs`, `id->pd`, CQs, QPs) are used by applications through
//! libibverbs' exports and the inline `ops` tables, so they must come from the
//! one engine inside `libibverbs.so.1`. When this crate is implemented it calls
//! into libibverbs through its C ABI only: declare the functions it needs in an
//! `unsafe extern "C" { ... }` block (`ibv_open_device`, `ibv_alloc_pd`,
//! `ibv_create_cq`, `ibv_create_qp`, `ibv_modify_qp`, ... and any private
//! `IBVERBS_PRIVATE_34` hooks added for it) and let the link against
//! `libibverbs.so.1` resolve them. Do **not** depend on the `softrdma-capi`
//! crate (or the engine crates) from here: a staticlib bundles its
//! dependencies, so that would link a private copy of every `ibv_*` function
//! and of the engine into librdmacm.
//!
//! The `#[repr(C)]` mirrors come from `softrdma-ffi`, and the panic/errno
//! helpers are shared with `softrdma-capi` at the *source* level (a `#[path]`
//! include of `crates/capi/src/guard.rs`): plain data and helpers with no
//! exported symbol, so nothing is duplicated in the ABI.
//!
//! - [`cm`]: the `rdma_*` connection-manager API, each forwarding to its
//!   implementation inside `libibverbs.so.1` (`__softrdma_rdma_*`).
//! - [`rsocket`]: the `r*` socket API (rsockets, rdma-core's protocol).
//! - [`strs`]: `rdma_event_str`, already real.

pub use softrdma_ffi as ffi;
#[path = "../../capi/src/guard.rs"]
pub mod guard;

pub mod cm;
pub mod rsocket;
pub mod strs;
