//! # softrdma-engine: the software RDMA NIC
//!
//! Contract: an [`Engine`] is this process's member of the host's RoCEv2
//! device `softrdma0` (or, with `SOFTRDMA_HOST=0`, a device of its own). It
//! joins the host device through the registry (`softrdma-host`) and a
//! steered `SO_REUSEPORT` group (`host.rs`), so a packet reaches the process
//! owning its destination with no other process in between. It owns its
//! UDP socket (crate `softrdma-udp`), the [`softrdma_transport::Endpoint`]
//! with every PD, MR, CQ, SRQ and QP, a progress thread that receives
//! packets and fires timers (sleeping in `epoll_wait` when idle), completion
//! and async event channels backed by real eventfds, and the one
//! implementation of the transport's memory access over process memory.
//!
//! QP1 carries the CM's MADs to its [`cm_proto::Cm`] and every other
//! class's to the MAD agents of [`mad`] (libibumad's registrations, and the
//! device's own Performance Management agent).
//!
//! Verbs logic lives in the transport; the engine adds locking, clocks and
//! I/O only. Higher layers (the safe Rust API, the C ABI) reach it through
//! typed operations, one per verb or CM call (modelled on rdma-core's
//! `verbs_context_ops`: [`Engine::create_qp`], [`Engine::modify_qp`],
//! [`Engine::cm_connect`], ...), never through closures over its insides,
//! and through the dedicated fast paths ([`Engine::post_send`],
//! [`Engine::poll_cq`]) for the data path.

#![warn(missing_docs)]

mod capture;
mod channel;
pub mod clock;
mod cm;
mod config;
pub mod device;
pub mod dm;
mod engine;
mod faults;
mod host;
pub mod mad;
mod memory;
mod stats_dump;

// The public interface is:
pub use channel::{AsyncChannel, AsyncEvent, AsyncQueue, CompChannel};
pub use cm::CmChannel;
pub use config::{EngineConfig, Linger};
pub use device::{DeviceAttr, DeviceInfo, PortAttr};
pub use engine::Engine;
pub use memory::check_mapped;
pub use softrdma_cm as cm_proto;
pub use softrdma_transport as transport;
pub use softrdma_udp::SocketStats;
pub use softrdma_udp::kernel_udp_socket;
pub use stats_dump::{BLOCK_MARK, ENV_STATS};
