//! # softrdma-cm: the RDMA connection manager, sans-IO
//!
//! Contract: the IB CM protocol (IBTA vol. 1 ch. 12: REQ, REP, RTU, REJ,
//! DREQ, DREP, MRA, SIDR) with the conventions of Linux `rdma_cm` (service IDs
//! from port spaces, the 36-byte `cma_hdr` in REQ/SIDR_REQ private data,
//! rdma_cm events), as pure state machines: MADs in and out as bytes, time
//! as an argument, QPs reached through the [`QpOps`] trait. No sockets, no
//! clocks, no threads. The engine frames MADs in UD packets on QP1 and owns
//! event channels; the C ABI and the Rust API map `rdma_cm_id` onto
//! [`IdHandle`]s.
//!
//! Where softrdma differs from the kernel's CM (and why):
//! - MAD retransmission starts at 250 ms and doubles to 2 s, 6 retries (the
//!   kernel waits ~4 s per try): a missing peer is reported within seconds.
//! - The QP local ACK timeout is 14 (~67 ms) rather than 18-19 derived from
//!   the packet life time, so a dead peer surfaces quickly.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cm;
mod handle;
mod id;
mod types;

// The public interface is:
pub use cm::{
    Cm, CmConfig, LOCAL_ACK_TIMEOUT, MIN_RNR_TIMER, Outgoing, PortAuthority, RDMA_UDP_QKEY,
};
pub use types::{
    CmError, ConnParam, ConnectQp, Event, EventKind, EventParam, IdHandle, PortSpace, QpInfo,
    QpOps, UdParam,
};
