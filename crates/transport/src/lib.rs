//! # softrdma-transport: the RoCEv2 transport, sans-IO
//!
//! Contract: this crate is the whole logic of a software RDMA device — queue
//! pairs (RC, UC, UD) with requester, completer and responder as Linux rxe
//! splits them, memory registration and protection checks, CQs and SRQs — and
//! none of its I/O. It has no sockets, no clocks (time is an argument), no
//! threads and no OS randomness (a seed is configured). Memory is reached only
//! through the [`Memory`] trait, after the MR table allowed the access.
//!
//! The [`Endpoint`] is driven quinn-style: verbs and `handle_*` calls are
//! inputs; `poll_transmit`, `poll_event` and `poll_timeout` are outputs.
//! Where behaviour differs from rxe, the code says so (e.g. `retry_cnt = 7` is
//! a count here, as in IBTA, not infinity as in rxe).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod attr;
mod config;
mod cq;
mod endpoint;
mod error;
mod mr;
mod mr_rereg;
mod mw;
mod qp;
mod rng;
mod stats;
mod table;
mod time;
mod timers;
pub mod tm;
mod types;
mod wr;

// The public interface is:
pub use attr::{AddressVector, QpAttr, QpCap, QpInitAttr, check_modify};
pub use config::{Config, DeviceLimits};
pub use cq::{CqHandle, CqRing, SrqHandle};
pub use endpoint::{Datagram, Endpoint, Event, Transmit};
pub use error::VerbsError;
pub use mr::{
    AccessError, AtomicOp, Memory, Mr, PdHandle, PeerCopyError, PeerFile, PeerSeg, PlaceOffer,
    PlacementTicket, TicketRef, Unmapped,
};
pub use mr_rereg::Rereg;
pub use mw::{Mw, MwBind, MwType};
pub use qp::{
    Executed, Express, ExpressRecv, ExpressWr, PEER_COPY_MIN, PLACE_MAX, fill_icrc_between,
};
pub use rng::Rng;
pub use stats::Stats;
pub use time::Instant;
pub use types::{
    Access, AsyncEventType, GSI_QKEY, GSI_QPN, MULTICAST_QPN, Mtu, QpAttrMask, QpState, QpType,
    Qpn, SendFlags, WcFlags, WcOpcode, WcStatus, WrOpcode,
};
pub use wr::{RecvWr, SendWr, Sge, Sgl, UdDest, Wc};
