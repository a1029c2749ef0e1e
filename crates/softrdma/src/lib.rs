//! # softrdma: RDMA for everyone
//!
//! A safe, idiomatic Rust API over softrdma's user-space RoCEv2 device, which
//! needs no RDMA NIC, no kernel module and no root: laptops, containers and CI
//! get real RDMA semantics (RC, UC, UD; SEND, WRITE, READ, atomics) over UDP,
//! wire-compatible with Linux Soft-RoCE.
//!
//! Contract: everything here is safe Rust. Memory that remote peers may touch
//! is owned by a registered [`verbs::Mr`] (so it cannot be freed or moved
//! while registered) or registered through the documented `unsafe`
//! [`verbs::Pd::register_raw`]. Every access a work request or a peer makes is
//! checked against the registration by the engine before a byte moves.
//!
//! Modules: [`verbs`] (devices, PD, MR, CQ, QP, SRQ, AH), [`cm`]
//! (connection management) and [`rsocket`] (stream sockets over RDMA with
//! rdma-core's rsockets protocol).
//!
//! Backends: the same API runs on softrdma's software device or, loaded at
//! run time, on the system's rdma-core (`libibverbs.so.1`/`librdmacm.so.1`)
//! for real RDMA NICs; see [`verbs::Backend`].

#![warn(missing_docs)]

mod backend;
pub mod cm;
mod error;
pub mod rsocket;
pub mod verbs;

pub use error::{Error, Result};

/// Conversions between rdma-core's C structs and softrdma's types, which
/// the C ABI crate (`softrdma-capi`) shares with the rdma-core backend. Not
/// part of the API: no stability promise.
#[doc(hidden)]
pub use backend::rdma_core::conv as rdma_core_conv;
