//! Queue pairs, multicast attach, ECE. (`ibv_post_send`/`ibv_post_recv` are
//! inline and reach the engine through `ibv_context_ops::{post_send,
//! post_recv}`; `ibv_create_qp_ex` goes through `verbs_context::create_qp_ex`.)

use core::ffi::c_int;

use super::stubs;
use crate::ffi::*;
use crate::guard::ret;

stubs! {
    /// `int ibv_query_qp_data_in_order(struct ibv_qp *, enum ibv_wr_opcode, uint32_t flags)`
    /// (IBVERBS_1.14): 1 if data lands in order, else 0.
    fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: ibv_wr_opcode, flags: u32) -> c_int => 0;
    /// `int ibv_set_ece(struct ibv_qp *, struct ibv_ece *)` (IBVERBS_1.10).
    fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int => ret::pos(libc::EOPNOTSUPP);
    /// `int ibv_query_ece(struct ibv_qp *, struct ibv_ece *)` (IBVERBS_1.10).
    fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int => ret::pos(libc::EOPNOTSUPP);
}
