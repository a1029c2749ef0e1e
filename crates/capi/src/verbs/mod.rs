//! The implemented verbs: thin conversions from rdma-core's C structs to
//! engine calls (no verbs logic lives here; it is all in the transport).
//! Every pointer an application passes in is checked against a registry of
//! live objects first (`objects`), so NULL, destroyed or wrong-kind
//! pointers give EINVAL instead of a crash.

pub mod ah;
mod conv;
pub mod cq;
mod cq_ex;
pub mod device;
pub mod dm;
mod few;
pub mod import;
mod mw;
pub(crate) mod objects;
mod parent;
pub mod pd_mr;
mod post;
pub mod qp;
mod qp_ex;
pub mod rereg;
pub mod srq;
mod tm;
pub(crate) mod xrc;
