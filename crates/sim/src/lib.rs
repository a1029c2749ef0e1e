//! # softrdma-sim: deterministic simulation of softrdma endpoints
//!
//! Contract: everything here is reproducible from a seed. Endpoints from
//! `softrdma-transport` exchange packets over a simulated network with a
//! virtual clock and injected faults (loss, duplication, reordering, delay,
//! bit flips); no sockets, no wall-clock time.
//!
//! - [`Net`]: the network, clock, fault model, drop rules and packet trace;
//! - [`trace`]: one readable line per packet, for trace tests with literal times;
//! - [`setup`]: ready-made PDs, CQs, MRs and connected QPs;
//! - [`fuzz`]: the transport under hostile packet sequences, with every
//!   memory access checked (a fuzz target and a smoke test run it);
//! - [`model`]: randomized workloads with an oracle that checks every
//!   completion, every byte and every atomic (RC, UC, UD, SRQ).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod fuzz;
mod memory;
pub mod model;
mod net;
pub mod setup;
pub mod trace;

pub use memory::SimMemory;
pub use net::{DropRule, Faults, Net, NetStats, Node};
