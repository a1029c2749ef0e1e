//! `ibv_context`, its 32-slot `ibv_context_ops` table and the extended
//! `verbs_context` that lives in memory *before* it ("grows up" layout).
//!
//! The inline functions compiled into applications reach the engine through
//! these tables: `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_send`,
//! `ibv_post_recv`, `ibv_post_srq_recv` (and `ibv_{alloc,bind,dealloc}_mw`)
//! through `ctx->ops`, and `ibv_query_port`, `ibv_query_device_ex`,
//! `ibv_create_qp_ex`, ... through `verbs_get_ctx_op(ctx, op)`, which needs
//! `ctx->abi_compat == VERBS_ABI_IS_EXTENDED`, `vctx->sz >= 648 - offsetof(op)`
//! and a non-NULL slot.

use core::ffi::{c_int, c_uint, c_void};

use super::*;

/// Legacy slot type of the `_compat_*` entries (`void *(*)(void)`): never called
/// by rdma-core 44 headers; leave `None`.
pub type compat_slot = Option<unsafe extern "C" fn() -> *mut c_void>;

/// `struct ibv_context_ops` (32 pointer slots, 256 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<
        unsafe extern "C" fn(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int,
    >,
    pub _compat_query_port: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut _compat_ibv_port_attr,
        ) -> c_int,
    >,
    pub _compat_alloc_pd: compat_slot,
    pub _compat_dealloc_pd: compat_slot,
    pub _compat_reg_mr: compat_slot,
    pub _compat_rereg_mr: compat_slot,
    pub _compat_dereg_mr: compat_slot,
    pub alloc_mw: Option<unsafe extern "C" fn(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw>,
    pub bind_mw: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int,
    >,
    pub dealloc_mw: Option<unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int>,
    pub _compat_create_cq: compat_slot,
    pub poll_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int>,
    pub req_notify_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int>,
    pub _compat_cq_event: compat_slot,
    pub _compat_resize_cq: compat_slot,
    pub _compat_destroy_cq: compat_slot,
    pub _compat_create_srq: compat_slot,
    pub _compat_modify_srq: compat_slot,
    pub _compat_query_srq: compat_slot,
    pub _compat_destroy_srq: compat_slot,
    pub post_srq_recv: Option<
        unsafe extern "C" fn(
            srq: *mut ibv_srq,
            recv_wr: *mut ibv_recv_wr,
            bad_recv_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub _compat_create_qp: compat_slot,
    pub _compat_query_qp: compat_slot,
    pub _compat_modify_qp: compat_slot,
    pub _compat_destroy_qp: compat_slot,
    pub post_send: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            wr: *mut ibv_send_wr,
            bad_wr: *mut *mut ibv_send_wr,
        ) -> c_int,
    >,
    pub post_recv: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            wr: *mut ibv_recv_wr,
            bad_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub _compat_create_ah: compat_slot,
    pub _compat_destroy_ah: compat_slot,
    pub _compat_attach_mcast: compat_slot,
    pub _compat_detach_mcast: compat_slot,
    pub _compat_async_event: compat_slot,
}

/// `struct ibv_context` (328 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    /// `VERBS_ABI_IS_EXTENDED` (as a pointer) when this context is the tail of
    /// a [`verbs_context`].
    pub abi_compat: *mut c_void,
}

opaque_type!(
    /// `struct verbs_ex_private` (libibverbs-internal; only the pointer matters).
    verbs_ex_private
);

/// `struct verbs_context` (648 bytes). `context` must be the last member: the
/// application only ever sees `&vctx.context`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct verbs_context {
    pub query_port: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut ibv_port_attr,
            port_attr_len: usize,
        ) -> c_int,
    >,
    pub advise_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            advice: ibv_advise_mr_advice,
            flags: u32,
            sg_list: *mut ibv_sge,
            num_sges: u32,
        ) -> c_int,
    >,
    pub alloc_null_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd) -> *mut ibv_mr>,
    pub read_counters: Option<
        unsafe extern "C" fn(
            counters: *mut ibv_counters,
            counters_value: *mut u64,
            ncounters: u32,
            flags: u32,
        ) -> c_int,
    >,
    pub attach_counters_point_flow: Option<
        unsafe extern "C" fn(
            counters: *mut ibv_counters,
            attr: *mut ibv_counter_attach_attr,
            flow: *mut ibv_flow,
        ) -> c_int,
    >,
    pub create_counters: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_counters_init_attr,
        ) -> *mut ibv_counters,
    >,
    pub destroy_counters: Option<unsafe extern "C" fn(counters: *mut ibv_counters) -> c_int>,
    pub reg_dm_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            dm: *mut ibv_dm,
            dm_offset: u64,
            length: usize,
            access: c_uint,
        ) -> *mut ibv_mr,
    >,
    pub alloc_dm: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_alloc_dm_attr,
        ) -> *mut ibv_dm,
    >,
    pub free_dm: Option<unsafe extern "C" fn(dm: *mut ibv_dm) -> c_int>,
    pub modify_flow_action_esp: Option<
        unsafe extern "C" fn(
            action: *mut ibv_flow_action,
            attr: *mut ibv_flow_action_esp_attr,
        ) -> c_int,
    >,
    pub destroy_flow_action: Option<unsafe extern "C" fn(action: *mut ibv_flow_action) -> c_int>,
    pub create_flow_action_esp: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_flow_action_esp_attr,
        ) -> *mut ibv_flow_action,
    >,
    pub modify_qp_rate_limit:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_rate_limit_attr) -> c_int>,
    pub alloc_parent_domain: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_parent_domain_init_attr,
        ) -> *mut ibv_pd,
    >,
    pub dealloc_td: Option<unsafe extern "C" fn(td: *mut ibv_td) -> c_int>,
    pub alloc_td: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_td_init_attr,
        ) -> *mut ibv_td,
    >,
    pub modify_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int>,
    pub post_srq_ops: Option<
        unsafe extern "C" fn(
            srq: *mut ibv_srq,
            op: *mut ibv_ops_wr,
            bad_op: *mut *mut ibv_ops_wr,
        ) -> c_int,
    >,
    pub destroy_rwq_ind_table:
        Option<unsafe extern "C" fn(rwq_ind_table: *mut ibv_rwq_ind_table) -> c_int>,
    pub create_rwq_ind_table: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_rwq_ind_table_init_attr,
        ) -> *mut ibv_rwq_ind_table,
    >,
    pub destroy_wq: Option<unsafe extern "C" fn(wq: *mut ibv_wq) -> c_int>,
    pub modify_wq:
        Option<unsafe extern "C" fn(wq: *mut ibv_wq, wq_attr: *mut ibv_wq_attr) -> c_int>,
    pub create_wq: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            wq_init_attr: *mut ibv_wq_init_attr,
        ) -> *mut ibv_wq,
    >,
    pub query_rt_values: Option<
        unsafe extern "C" fn(context: *mut ibv_context, values: *mut ibv_values_ex) -> c_int,
    >,
    pub create_cq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_cq_init_attr_ex,
        ) -> *mut ibv_cq_ex,
    >,
    pub priv_: *mut verbs_ex_private,
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            input: *const ibv_query_device_ex_input,
            attr: *mut ibv_device_attr_ex,
            attr_size: usize,
        ) -> c_int,
    >,
    pub ibv_destroy_flow: Option<unsafe extern "C" fn(flow: *mut ibv_flow) -> c_int>,
    /// "DO NOT COPY THIS GARBAGE" (rdma-core): unused.
    pub ABI_placeholder2: Option<unsafe extern "C" fn()>,
    pub ibv_create_flow: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, flow_attr: *mut ibv_flow_attr) -> *mut ibv_flow,
    >,
    /// Unused.
    pub ABI_placeholder1: Option<unsafe extern "C" fn()>,
    pub open_qp: Option<
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp,
    >,
    pub create_qp_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
        ) -> *mut ibv_qp,
    >,
    pub get_srq_num: Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int>,
    pub create_srq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            srq_init_attr_ex: *mut ibv_srq_init_attr_ex,
        ) -> *mut ibv_srq,
    >,
    pub open_xrcd: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            xrcd_init_attr: *mut ibv_xrcd_init_attr,
        ) -> *mut ibv_xrcd,
    >,
    pub close_xrcd: Option<unsafe extern "C" fn(xrcd: *mut ibv_xrcd) -> c_int>,
    pub _ABI_placeholder3: u64,
    /// Must be `size_of::<verbs_context>()` (648) for every op to be usable.
    pub sz: usize,
    pub context: ibv_context,
}

impl verbs_context {
    /// Value to store in [`verbs_context::sz`].
    pub const SIZE: usize = size_of::<verbs_context>();
    /// Offset of the embedded [`ibv_context`] (320): `vctx = ctx - CONTEXT_OFFSET`.
    pub const CONTEXT_OFFSET: usize = core::mem::offset_of!(verbs_context, context);
}

zeroable!(ibv_context_ops, ibv_context, verbs_context);

assert_layout!(ibv_context_ops, 256, 8;
    _compat_query_device => 0, _compat_query_port => 8, _compat_alloc_pd => 16,
    _compat_dealloc_pd => 24, _compat_reg_mr => 32, _compat_rereg_mr => 40, _compat_dereg_mr => 48,
    alloc_mw => 56, bind_mw => 64, dealloc_mw => 72, _compat_create_cq => 80, poll_cq => 88,
    req_notify_cq => 96, _compat_cq_event => 104, _compat_resize_cq => 112,
    _compat_destroy_cq => 120, _compat_create_srq => 128, _compat_modify_srq => 136,
    _compat_query_srq => 144, _compat_destroy_srq => 152, post_srq_recv => 160,
    _compat_create_qp => 168, _compat_query_qp => 176, _compat_modify_qp => 184,
    _compat_destroy_qp => 192, post_send => 200, post_recv => 208, _compat_create_ah => 216,
    _compat_destroy_ah => 224, _compat_attach_mcast => 232, _compat_detach_mcast => 240,
    _compat_async_event => 248);
assert_layout!(ibv_context, 328, 8;
    device => 0, ops => 8, cmd_fd => 264, async_fd => 268, num_comp_vectors => 272, mutex => 280,
    abi_compat => 320);
assert_layout!(verbs_context, 648, 8;
    query_port => 0, advise_mr => 8, alloc_null_mr => 16, read_counters => 24,
    attach_counters_point_flow => 32, create_counters => 40, destroy_counters => 48,
    reg_dm_mr => 56, alloc_dm => 64, free_dm => 72, modify_flow_action_esp => 80,
    destroy_flow_action => 88, create_flow_action_esp => 96, modify_qp_rate_limit => 104,
    alloc_parent_domain => 112, dealloc_td => 120, alloc_td => 128, modify_cq => 136,
    post_srq_ops => 144, destroy_rwq_ind_table => 152, create_rwq_ind_table => 160,
    destroy_wq => 168, modify_wq => 176, create_wq => 184, query_rt_values => 192,
    create_cq_ex => 200, priv_ => 208, query_device_ex => 216, ibv_destroy_flow => 224,
    ABI_placeholder2 => 232, ibv_create_flow => 240, ABI_placeholder1 => 248, open_qp => 256,
    create_qp_ex => 264, get_srq_num => 272, create_srq_ex => 280, open_xrcd => 288,
    close_xrcd => 296, _ABI_placeholder3 => 304, sz => 312, context => 320);
const _: () = assert!(verbs_context::SIZE == 648 && verbs_context::CONTEXT_OFFSET == 320);
