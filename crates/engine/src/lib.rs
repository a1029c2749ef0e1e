//! # softrdma-engine: the software RDMA NIC
//!
//! Contract: an [`Engine`] is one RoCEv2 device in this process. It owns the
//! UDP socket (crate `softrdma-udp`), the [`softrdma_transport::Endpoint`]
//! with every PD, MR, CQ, SRQ and QP, a progress thread that receives
//! packets and fires timers (sleeping in `epoll_wait` when idle), completion
//! and async event channels backed by real eventfds, and the one
//! implementation of the transport's memory access over process memory.
//!
//! Verbs logic lives in the transport; the engine adds locking, clocks and
//! I/O only. Higher layers (the safe Rust API, the C ABI) call
//! [`Engine::with`] for verbs and the dedicated fast paths
//! ([`Engine::post_send`], [`Engine::poll_cq`]) for the data path.

#![warn(missing_docs)]

mod capture;
mod channel;
mod cm;
mod config;
pub mod device;
mod engine;
mod faults;
mod memory;
mod stats_dump;

// The public interface is:
pub use channel::{AsyncChannel, AsyncEvent, CompChannel};
pub use cm::CmChannel;
pub use config::{EngineConfig, Linger};
pub use device::{DeviceAttr, DeviceInfo, PortAttr};
pub use engine::Engine;
pub use memory::check_mapped;
pub use softrdma_cm as cm_proto;
pub use softrdma_transport as transport;
pub use softrdma_udp::SocketStats;
pub use stats_dump::{BLOCK_MARK, ENV_STATS};
