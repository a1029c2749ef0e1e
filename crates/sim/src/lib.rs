//! # softrdma-sim: deterministic simulation of softrdma endpoints
//!
//! Contract: everything here is reproducible from a seed. Endpoints from
//! `softrdma-transport` exchange packets over a simulated network with a
//! virtual clock and injected faults (loss, duplication, reordering, delay,
//! bit flips); no sockets, no wall-clock time. Used by the transport's tests
//! and by the simulator demo.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod memory;
mod net;
pub mod setup;

pub use memory::SimMemory;
pub use net::{Faults, Net, NetStats, Node};
