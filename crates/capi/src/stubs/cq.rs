//! Completion channels and completion queues. (`ibv_poll_cq` and
//! `ibv_req_notify_cq` are inline in the header and reach the engine through
//! `ibv_context_ops::{poll_cq, req_notify_cq}`.)

use core::ffi::{c_int, c_uint, c_void};

use super::{NOT_IMPLEMENTED, stubs};
use crate::ffi::*;
use crate::guard::ret;

stubs! {
    /// `struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *)`
    /// (IBVERBS_1.0 only). Back it with a real fd (eventfd/pipe).
    fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel
        => ret::null(NOT_IMPLEMENTED);
    /// `int ibv_destroy_comp_channel(struct ibv_comp_channel *)` (IBVERBS_1.0 only).
    fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int => ret::pos(NOT_IMPLEMENTED);
    /// `struct ibv_cq *ibv_create_cq(struct ibv_context *, int cqe, void *cq_context,
    /// struct ibv_comp_channel *, int comp_vector)` (IBVERBS_1.1).
    fn ibv_create_cq(context: *mut ibv_context, cqe: c_int, cq_context: *mut c_void,
        channel: *mut ibv_comp_channel, comp_vector: c_int) -> *mut ibv_cq => ret::null(NOT_IMPLEMENTED);
    /// `int ibv_resize_cq(struct ibv_cq *cq, int cqe)` (IBVERBS_1.1).
    fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int => ret::pos(NOT_IMPLEMENTED);
    /// `int ibv_destroy_cq(struct ibv_cq *cq)` (IBVERBS_1.1).
    fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int => ret::pos(NOT_IMPLEMENTED);
    /// `int ibv_get_cq_event(struct ibv_comp_channel *, struct ibv_cq **cq, void **cq_context)`
    /// (IBVERBS_1.1): blocks in `read()` (a cancellation point); 0, or -1 with errno.
    fn ibv_get_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void)
        -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)` (IBVERBS_1.1).
    fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) => ();
}
