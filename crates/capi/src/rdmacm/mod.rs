//! librdmacm over the engine's connection manager.
//!
//! Every `rdma_*` function of librdmacm is implemented here, inside
//! `libibverbs.so.1`, as `__softrdma_rdma_*` exported at the private version
//! node `SOFTRDMA_PRIVATE_1`; `librdmacm.so.1` (crate `softrdma-capi-rdmacm`)
//! forwards each `rdma_*` call to it. That way the QPs, CQs and PDs librdmacm
//! makes come from the one engine applications also reach through libibverbs.
//!
//! The device is started by the first call that needs it, on the address the
//! application binds to or resolves from (unless `SOFTRDMA_ADDR` says otherwise):
//! `rping -s -a 127.0.0.2` makes this process's device 127.0.0.2.

pub mod dev;
pub mod ep;
pub mod event;
pub mod id;
pub mod mcast;
mod objects;
pub mod qp;
mod sock;
