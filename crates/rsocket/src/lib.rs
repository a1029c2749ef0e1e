//! rdma-core's rsockets protocol (`librdmacm/rsocket.c`), sans I/O: what two
//! rsocket peers tell each other and in which form, so that librdmacm's
//! rsockets (`softrdma-capi-rdmacm`) and a Rust stream share one copy of it.
//!
//! # Contract
//!
//! * **Wire-exact.** [`proto`] is rdma-core's format byte for byte: the
//!   40-byte `struct rs_conn_data` of the CM REQ/REP, the 16-byte
//!   `struct rs_sge` written into a peer's target SGL, and the 32-bit
//!   immediate of every RDMA WRITE WITH IMMEDIATE. A peer running rdma-core's
//!   rsockets interoperates.
//! * **No I/O, no verbs, no engine.** Nothing here posts work requests,
//!   touches registered memory or waits; callers do, with whatever verbs they
//!   have.
//!
//! Modules: [`proto`] (the wire format), [`stream`] (one stream's
//! credits, sequence numbers and buffers).

pub mod proto;
pub mod stream;
