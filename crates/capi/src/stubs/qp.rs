//! Queue pairs, multicast attach, ECE. (`ibv_post_send`/`ibv_post_recv` are
//! inline and reach the engine through `ibv_context_ops::{post_send,
//! post_recv}`; `ibv_create_qp_ex` goes through `verbs_context::create_qp_ex`.)

use core::ffi::c_int;

use super::{NOT_IMPLEMENTED, stubs};
use crate::ffi::*;
use crate::guard::ret;

stubs! {
    /// `struct ibv_qp *ibv_create_qp(struct ibv_pd *, struct ibv_qp_init_attr *)` (IBVERBS_1.1).
    /// Must write the actual caps back into `init_attr->cap`.
    fn ibv_create_qp(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp
        => ret::null(NOT_IMPLEMENTED);
    /// `int ibv_modify_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask)` (IBVERBS_1.1).
    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    /// `int ibv_query_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask,
    /// struct ibv_qp_init_attr *)` (IBVERBS_1.1).
    fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr) -> c_int => ret::pos(NOT_IMPLEMENTED);
    /// `int ibv_destroy_qp(struct ibv_qp *qp)` (IBVERBS_1.1).
    fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int => ret::pos(NOT_IMPLEMENTED);
    /// `struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)` (IBVERBS_1.6): the
    /// extended QP if it was created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, else NULL.
    fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex => ret::null(libc::EOPNOTSUPP);
    /// `int ibv_query_qp_data_in_order(struct ibv_qp *, enum ibv_wr_opcode, uint32_t flags)`
    /// (IBVERBS_1.14): 1 if data lands in order, else 0.
    fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: ibv_wr_opcode, flags: u32) -> c_int => 0;
    /// `int ibv_set_ece(struct ibv_qp *, struct ibv_ece *)` (IBVERBS_1.10).
    fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int => ret::pos(libc::EOPNOTSUPP);
    /// `int ibv_query_ece(struct ibv_qp *, struct ibv_ece *)` (IBVERBS_1.10).
    fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int => ret::pos(libc::EOPNOTSUPP);
    /// `int ibv_attach_mcast(struct ibv_qp *, const union ibv_gid *, uint16_t lid)` (IBVERBS_1.1).
    fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    /// `int ibv_detach_mcast(struct ibv_qp *, const union ibv_gid *, uint16_t lid)` (IBVERBS_1.1).
    fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
}
