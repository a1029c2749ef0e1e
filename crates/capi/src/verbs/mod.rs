//! The implemented verbs: thin conversions from rdma-core's C structs to
//! engine calls (no verbs logic lives here; it is all in the transport).
//! Every pointer an application passes in is checked against a registry of
//! live objects first ([`objects`]), so NULL, destroyed or wrong-kind
//! pointers give EINVAL instead of a crash.

pub mod ah;
mod conv;
pub(crate) use conv::av_to_c as conv_av_to_c;
pub mod cq;
pub mod device;
pub(crate) mod objects;
pub mod pd_mr;
mod post;
pub mod qp;
pub mod srq;
