//! Shared receive queues. (`ibv_post_srq_recv` is inline and reaches the
//! engine through `ibv_context_ops::post_srq_recv`; XRC SRQs go through
//! `verbs_context::create_srq_ex`/`get_srq_num`.)

use core::ffi::c_int;

use super::{NOT_IMPLEMENTED, stubs};
use crate::ffi::*;
use crate::guard::ret;

stubs! {
    /// `struct ibv_srq *ibv_create_srq(struct ibv_pd *, struct ibv_srq_init_attr *)` (IBVERBS_1.1).
    fn ibv_create_srq(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq
        => ret::null(NOT_IMPLEMENTED);
    /// `int ibv_modify_srq(struct ibv_srq *, struct ibv_srq_attr *, int srq_attr_mask)` (IBVERBS_1.1).
    fn ibv_modify_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    /// `int ibv_query_srq(struct ibv_srq *, struct ibv_srq_attr *)` (IBVERBS_1.1).
    fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int => ret::pos(NOT_IMPLEMENTED);
    /// `int ibv_destroy_srq(struct ibv_srq *srq)` (IBVERBS_1.1).
    fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int => ret::pos(NOT_IMPLEMENTED);
}
