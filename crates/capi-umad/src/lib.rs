//! # softrdma-capi-umad: the C ABI of `libibumad.so.3`
//!
//! Built as a `staticlib` (`target/<profile>/libibumad.a`) that `cargo xtask
//! compat` links with `maps/libibumad.map` into `target/compat/libibumad.so.3`,
//! with `DT_NEEDED libibverbs.so.1` on our own `target/compat/libibverbs.so.1`.
//! Every symbol of rdma-core 44's libibumad is exported at its node
//! (`IBUMAD_1.0` ... `IBUMAD_1.2`), so infiniband-diags (`ibstat`,
//! `perfquery`, ...) and libibmad run on it unmodified.
//!
//! Like `librdmacm.so.1`, this library holds **no engine** and depends on no
//! engine crate: it reaches the process's one engine through the C ABI of
//! `libibverbs.so.1` only.
//!
//! - [`ca`]: `umad_get_ca`, `umad_get_port`, `umad_get_cas_names`, ...
//!   describe `softrdma0` from the public verbs (`ibv_query_device`,
//!   `ibv_query_port`, `ibv_query_gid`, `ibv_query_pkey`), as rdma-core's
//!   libibumad describes a CA from sysfs: port Active, link layer Ethernet,
//!   LID 0, port GUID the low half of GID 0.
//! - [`mad`]: `umad_open_port`, `umad_register*`, `umad_send`, `umad_recv`,
//!   `umad_poll` forward to `__softrdma_umad_*` in `libibverbs.so.1`
//!   (private node `SOFTRDMA_PRIVATE_1`), where QP1 lives.
//! - [`buf`]: the `struct ib_user_mad` helpers (`umad_size`,
//!   `umad_set_addr`, `umad_set_grh`, ...) and the debug dumps.
//! - [`strs`]: `umad_class_str` and the other name tables.
//!
//! The panic/errno helpers are shared with `softrdma-capi` at the source
//! level (a `#[path]` include of `crates/capi/src/guard.rs`).

pub use softrdma_ffi as ffi;
#[path = "../../capi/src/guard.rs"]
pub mod guard;

pub mod buf;
pub mod ca;
pub mod mad;
pub mod strs;
