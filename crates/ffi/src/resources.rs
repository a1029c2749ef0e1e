//! Verbs objects and their attribute structs: PD, MR, MW, XRCD, TD, DM, AH,
//! completion channel, CQ (+ `ibv_cq_ex`), SRQ, WQ, QP (+ `ibv_qp_ex`), flows,
//! counters (`verbs.h`).

use core::ffi::{c_int, c_uint, c_void};

use super::*;

// ---------------------------------------------------------------- PD / TD / XRCD

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_td_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

/// `struct ibv_td`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    pub comp_mask: u32,
    pub alloc: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            pd_context: *mut c_void,
            size: usize,
            alignment: usize,
            resource_type: u64,
        ) -> *mut c_void,
    >,
    pub free: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            pd_context: *mut c_void,
            ptr: *mut c_void,
            resource_type: u64,
        ),
    >,
    pub pd_context: *mut c_void,
}

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

/// `struct ibv_xrcd`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

// ---------------------------------------------------------------- MR / MW / DM

/// `struct ibv_mr`. Binaries read `lkey`, `rkey`, `addr`, `length`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    pub type_: ibv_mw_type,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    /// `enum ibv_access_flags`.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind` (`ibv_bind_mw`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

/// `struct ibv_dm` (device memory).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_dm {
    pub context: *mut ibv_context,
    pub memcpy_to_dm: Option<
        unsafe extern "C" fn(
            dm: *mut ibv_dm,
            dm_offset: u64,
            host_addr: *const c_void,
            length: usize,
        ) -> c_int,
    >,
    pub memcpy_from_dm: Option<
        unsafe extern "C" fn(
            host_addr: *mut c_void,
            dm: *mut ibv_dm,
            dm_offset: u64,
            length: usize,
        ) -> c_int,
    >,
    pub comp_mask: u32,
    pub handle: u32,
}

// ---------------------------------------------------------------- AH

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    /// `enum ibv_rate`.
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_ah`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

// ---------------------------------------------------------------- CQ

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// `struct ibv_wc_tm_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_wc_tm_info {
    pub tag: u64,
    pub priv_: u32,
}

prefixed_structs! {
    /// `struct ibv_cq` (128 bytes). Binaries touch only `context` (inline
    /// `ibv_poll_cq`/`ibv_req_notify_cq` go through `cq->context->ops`).
    pub struct ibv_cq {
        pub context: *mut ibv_context,
        pub channel: *mut ibv_comp_channel,
        pub cq_context: *mut c_void,
        pub handle: u32,
        pub cqe: c_int,
        pub mutex: pthread_mutex_t,
        pub cond: pthread_cond_t,
        pub comp_events_completed: u32,
        pub async_events_completed: u32,
    }
    /// `struct ibv_cq_ex`: an [`ibv_cq`] prefix followed by the extended-poll
    /// function table (`ibv_start_poll`, `ibv_next_poll`, `ibv_wc_read_*`).
    pub struct ibv_cq_ex: ibv_cq {
        pub comp_mask: u32,
        pub status: ibv_wc_status,
        pub wr_id: u64,
        pub start_poll: Option<
            unsafe extern "C" fn(current: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int,
        >,
        pub next_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_int>,
        pub end_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex)>,
        pub read_opcode: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> ibv_wc_opcode>,
        pub read_vendor_err: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_byte_len: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        /// Returns big-endian immediate data.
        pub read_imm_data: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_qp_num: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_src_qp: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_wc_flags: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_uint>,
        pub read_slid: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_sl: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u8>,
        pub read_dlid_path_bits: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u8>,
        pub read_completion_ts: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u64>,
        pub read_cvlan: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u16>,
        pub read_flow_tag: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
        pub read_tm_info:
            Option<unsafe extern "C" fn(current: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info)>,
        pub read_completion_wallclock_ns:
            Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u64>,
    }
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    /// `enum ibv_create_cq_wc_flags`.
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_moderate_cq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_moderate_cq {
    pub cq_count: u16,
    pub cq_period: u16,
}

/// `struct ibv_modify_cq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_modify_cq_attr {
    pub attr_mask: u32,
    pub moderate: ibv_moderate_cq,
}

// ---------------------------------------------------------------- SRQ

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

prefixed_structs! {
    /// `struct ibv_srq_init_attr`.
    pub struct ibv_srq_init_attr {
        pub srq_context: *mut c_void,
        pub attr: ibv_srq_attr,
    }
    /// `struct ibv_srq_init_attr_ex`.
    pub struct ibv_srq_init_attr_ex: ibv_srq_init_attr {
        pub comp_mask: u32,
        pub srq_type: ibv_srq_type,
        pub pd: *mut ibv_pd,
        pub xrcd: *mut ibv_xrcd,
        pub cq: *mut ibv_cq,
        pub tm_cap: ibv_tm_cap,
    }
}

/// `struct ibv_srq` (128 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

// ---------------------------------------------------------------- WQ

/// `struct ibv_wq_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_wq_init_attr {
    pub wq_context: *mut c_void,
    pub wq_type: ibv_wq_type,
    pub max_wr: u32,
    pub max_sge: u32,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub comp_mask: u32,
    pub create_flags: u32,
}

/// `struct ibv_wq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_wq_attr {
    pub attr_mask: u32,
    pub wq_state: ibv_wq_state,
    pub curr_wq_state: ibv_wq_state,
    pub flags: u32,
    pub flags_mask: u32,
}

/// `struct ibv_wq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_wq {
    pub context: *mut ibv_context,
    pub wq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub wq_num: u32,
    pub handle: u32,
    pub state: ibv_wq_state,
    pub wq_type: ibv_wq_type,
    pub post_recv: Option<
        unsafe extern "C" fn(
            current: *mut ibv_wq,
            recv_wr: *mut ibv_recv_wr,
            bad_recv_wr: *mut *mut ibv_recv_wr,
        ) -> c_int,
    >,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
    pub comp_mask: u32,
}

/// `struct ibv_rwq_ind_table`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_rwq_ind_table {
    pub context: *mut ibv_context,
    pub ind_tbl_handle: c_int,
    pub ind_tbl_num: c_int,
    pub comp_mask: u32,
}

/// `struct ibv_rwq_ind_table_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_rwq_ind_table_init_attr {
    pub log_ind_tbl_size: u32,
    pub ind_tbl: *mut *mut ibv_wq,
    pub comp_mask: u32,
}

// ---------------------------------------------------------------- QP

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

prefixed_structs! {
    /// `struct ibv_qp_init_attr` (`ibv_create_qp`; `cap` is written back).
    pub struct ibv_qp_init_attr {
        pub qp_context: *mut c_void,
        pub send_cq: *mut ibv_cq,
        pub recv_cq: *mut ibv_cq,
        pub srq: *mut ibv_srq,
        pub cap: ibv_qp_cap,
        pub qp_type: ibv_qp_type,
        pub sq_sig_all: c_int,
    }
    /// `struct ibv_qp_init_attr_ex` (`ibv_create_qp_ex`, `rdma_create_qp_ex`).
    pub struct ibv_qp_init_attr_ex: ibv_qp_init_attr {
        /// `enum ibv_qp_init_attr_mask`.
        pub comp_mask: u32,
        pub pd: *mut ibv_pd,
        pub xrcd: *mut ibv_xrcd,
        pub create_flags: u32,
        pub max_tso_header: u16,
        pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
        pub rx_hash_conf: ibv_rx_hash_conf,
        pub source_qpn: u32,
        /// `enum ibv_qp_create_send_ops_flags`.
        pub send_ops_flags: u64,
    }
}

/// `struct ibv_qp_open_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_open_attr {
    pub comp_mask: u32,
    pub qp_num: u32,
    pub xrcd: *mut ibv_xrcd,
    pub qp_context: *mut c_void,
    pub qp_type: ibv_qp_type,
}

/// `struct ibv_qp_attr` (`ibv_modify_qp`, `ibv_query_qp`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_attr {
    pub qp_state: ibv_qp_state,
    pub cur_qp_state: ibv_qp_state,
    pub path_mtu: ibv_mtu,
    pub path_mig_state: ibv_mig_state,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_qp_rate_limit_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_rate_limit_attr {
    pub rate_limit: u32,
    pub max_burst_sz: u32,
    pub typical_pkt_sz: u16,
    pub comp_mask: u32,
}

/// `struct ibv_qp` (160 bytes). Binaries read `qp_num` and (inline) `context`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: ibv_qp_state,
    pub qp_type: ibv_qp_type,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp_ex` (352 bytes): an [`ibv_qp`] followed by the `ibv_wr_*`
/// work-request builder table (returned by `ibv_qp_to_qp_ex`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    /// `enum ibv_send_flags`.
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            rkey: u32,
            remote_addr: u64,
            compare: u64,
            swap: u64,
        ),
    >,
    pub wr_atomic_fetch_add:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64)>,
    pub wr_bind_mw: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            mw: *mut ibv_mw,
            rkey: u32,
            bind_info: *const ibv_mw_bind_info,
        ),
    >,
    pub wr_local_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64)>,
    pub wr_rdma_write:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64)>,
    /// `imm_data` is big-endian.
    pub wr_rdma_write_imm: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: u32),
    >,
    pub wr_send: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    /// `imm_data` is big-endian.
    pub wr_send_imm: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, imm_data: u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
    pub wr_send_tso:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, hdr: *mut c_void, hdr_sz: u16, mss: u16)>,
    pub wr_set_ud_addr: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            ah: *mut ibv_ah,
            remote_qpn: u32,
            remote_qkey: u32,
        ),
    >,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, remote_srqn: u32)>,
    pub wr_set_inline_data:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize)>,
    pub wr_set_inline_data_list: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf),
    >,
    pub wr_set_sge:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32)>,
    pub wr_set_sge_list:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    pub wr_atomic_write: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            rkey: u32,
            remote_addr: u64,
            atomic_wr: *const c_void,
        ),
    >,
}

/// `struct ibv_ece` (enhanced connection establishment).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

// ---------------------------------------------------------------- flows / counters / values

/// `struct ibv_flow_attr` (followed in memory by `num_of_specs` flow specs).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_flow_attr {
    pub comp_mask: u32,
    pub type_: ibv_flow_attr_type,
    pub size: u16,
    pub priority: u16,
    pub num_of_specs: u8,
    pub port: u8,
    pub flags: u32,
}

/// `struct ibv_flow`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_flow {
    pub comp_mask: u32,
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_flow_action`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_flow_action {
    pub context: *mut ibv_context,
}

opaque_type!(
    /// `struct ibv_flow_action_esp_attr` (IPsec offload; never supported here).
    ibv_flow_action_esp_attr
);

/// `struct ibv_counters_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_counters_init_attr {
    pub comp_mask: u32,
}

/// `struct ibv_counters`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_counters {
    pub context: *mut ibv_context,
}

/// `struct ibv_counter_attach_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_counter_attach_attr {
    pub counter_desc: ibv_counter_description,
    pub index: u32,
    pub comp_mask: u32,
}

/// `struct ibv_values_ex` (`ibv_query_rt_values_ex`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}

zeroable!(
    ibv_pd,
    ibv_td_init_attr,
    ibv_td,
    ibv_parent_domain_init_attr,
    ibv_xrcd_init_attr,
    ibv_xrcd,
    ibv_mr,
    ibv_mw,
    ibv_mw_bind_info,
    ibv_mw_bind,
    ibv_alloc_dm_attr,
    ibv_dm,
    ibv_global_route,
    ibv_ah_attr,
    ibv_ah,
    ibv_comp_channel,
    ibv_cq,
    ibv_poll_cq_attr,
    ibv_wc_tm_info,
    ibv_cq_ex,
    ibv_cq_init_attr_ex,
    ibv_moderate_cq,
    ibv_modify_cq_attr,
    ibv_srq_attr,
    ibv_srq_init_attr,
    ibv_tm_cap,
    ibv_srq_init_attr_ex,
    ibv_srq,
    ibv_wq_init_attr,
    ibv_wq_attr,
    ibv_wq,
    ibv_rwq_ind_table,
    ibv_rwq_ind_table_init_attr,
    ibv_qp_cap,
    ibv_qp_init_attr,
    ibv_rx_hash_conf,
    ibv_qp_init_attr_ex,
    ibv_qp_open_attr,
    ibv_qp_attr,
    ibv_qp_rate_limit_attr,
    ibv_qp,
    ibv_qp_ex,
    ibv_ece,
    ibv_flow_attr,
    ibv_flow,
    ibv_flow_action,
    ibv_counters_init_attr,
    ibv_counters,
    ibv_counter_attach_attr,
    ibv_values_ex,
);

// Offsets from shared/reference/abi/off/offsets.txt; sizes of the structs not
// listed there were taken from gcc and are re-checked by tests/layout.rs.
assert_layout!(ibv_pd, 16, 8; context => 0, handle => 8);
assert_layout!(ibv_td_init_attr, 4, 4);
assert_layout!(ibv_td, 8, 8);
assert_layout!(ibv_parent_domain_init_attr, 48, 8; comp_mask => 16, alloc => 24, free => 32, pd_context => 40);
assert_layout!(ibv_xrcd_init_attr, 12, 4; comp_mask => 0, fd => 4, oflags => 8);
assert_layout!(ibv_xrcd, 8, 8; context => 0);
assert_layout!(ibv_mr, 48, 8;
    context => 0, pd => 8, addr => 16, length => 24, handle => 32, lkey => 36, rkey => 40);
assert_layout!(ibv_mw, 32, 8; rkey => 16, handle => 20, type_ => 24);
assert_layout!(ibv_mw_bind_info, 32, 8; mr => 0, addr => 8, length => 16, mw_access_flags => 24);
assert_layout!(ibv_mw_bind, 48, 8; wr_id => 0, send_flags => 8, bind_info => 16);
assert_layout!(ibv_alloc_dm_attr, 16, 8);
assert_layout!(ibv_dm, 32, 8; comp_mask => 24, handle => 28);
assert_layout!(ibv_global_route, 24, 8;
    dgid => 0, flow_label => 16, sgid_index => 20, hop_limit => 21, traffic_class => 22);
assert_layout!(ibv_ah_attr, 32, 8;
    grh => 0, dlid => 24, sl => 26, src_path_bits => 27, static_rate => 28, is_global => 29,
    port_num => 30);
assert_layout!(ibv_ah, 24, 8; context => 0, pd => 8, handle => 16);
assert_layout!(ibv_comp_channel, 16, 8; context => 0, fd => 8, refcnt => 12);
assert_layout!(ibv_cq, 128, 8;
    context => 0, channel => 8, cq_context => 16, handle => 24, cqe => 28, mutex => 32,
    cond => 72, comp_events_completed => 120, async_events_completed => 124);
assert_layout!(ibv_poll_cq_attr, 4, 4);
assert_layout!(ibv_wc_tm_info, 16, 8);
assert_layout!(ibv_cq_ex, 288, 8;
    comp_events_completed => 120, async_events_completed => 124, comp_mask => 128, status => 132,
    wr_id => 136, start_poll => 144, next_poll => 152, end_poll => 160, read_opcode => 168,
    read_completion_wallclock_ns => 280);
assert_layout!(ibv_cq_init_attr_ex, 56, 8;
    cqe => 0, cq_context => 8, channel => 16, comp_vector => 24, wc_flags => 32, comp_mask => 40,
    flags => 44, parent_domain => 48);
assert_layout!(ibv_moderate_cq, 4, 2);
assert_layout!(ibv_modify_cq_attr, 8, 4);
assert_layout!(ibv_srq_attr, 12, 4; max_wr => 0, max_sge => 4, srq_limit => 8);
assert_layout!(ibv_srq_init_attr, 24, 8; srq_context => 0, attr => 8);
assert_layout!(ibv_tm_cap, 8, 4);
assert_layout!(ibv_srq_init_attr_ex, 64, 8;
    srq_context => 0, attr => 8, comp_mask => 20, srq_type => 24, pd => 32, xrcd => 40, cq => 48,
    tm_cap => 56);
assert_layout!(ibv_srq, 128, 8;
    context => 0, srq_context => 8, pd => 16, handle => 24, mutex => 32, cond => 72,
    events_completed => 120);
assert_layout!(ibv_wq_init_attr, 48, 8);
assert_layout!(ibv_wq_attr, 20, 4);
assert_layout!(ibv_wq, 152, 8; post_recv => 48, mutex => 56, cond => 96, events_completed => 144);
assert_layout!(ibv_rwq_ind_table, 24, 8);
assert_layout!(ibv_rwq_ind_table_init_attr, 24, 8);
assert_layout!(ibv_qp_cap, 20, 4;
    max_send_wr => 0, max_recv_wr => 4, max_send_sge => 8, max_recv_sge => 12,
    max_inline_data => 16);
assert_layout!(ibv_qp_init_attr, 64, 8;
    qp_context => 0, send_cq => 8, recv_cq => 16, srq => 24, cap => 32, qp_type => 52,
    sq_sig_all => 56);
assert_layout!(ibv_rx_hash_conf, 24, 8);
assert_layout!(ibv_qp_init_attr_ex, 136, 8;
    qp_context => 0, send_cq => 8, recv_cq => 16, srq => 24, cap => 32, qp_type => 52,
    sq_sig_all => 56, comp_mask => 60, pd => 64, xrcd => 72, create_flags => 80,
    max_tso_header => 84, rwq_ind_tbl => 88, rx_hash_conf => 96, source_qpn => 120,
    send_ops_flags => 128);
assert_layout!(ibv_qp_open_attr, 32, 8);
assert_layout!(ibv_qp_attr, 144, 8;
    qp_state => 0, cur_qp_state => 4, path_mtu => 8, path_mig_state => 12, qkey => 16,
    rq_psn => 20, sq_psn => 24, dest_qp_num => 28, qp_access_flags => 32, cap => 36,
    ah_attr => 56, alt_ah_attr => 88, pkey_index => 120, alt_pkey_index => 122,
    en_sqd_async_notify => 124, sq_draining => 125, max_rd_atomic => 126,
    max_dest_rd_atomic => 127, min_rnr_timer => 128, port_num => 129, timeout => 130,
    retry_cnt => 131, rnr_retry => 132, alt_port_num => 133, alt_timeout => 134,
    rate_limit => 136);
assert_layout!(ibv_qp_rate_limit_attr, 16, 4);
assert_layout!(ibv_qp, 160, 8;
    context => 0, qp_context => 8, pd => 16, send_cq => 24, recv_cq => 32, srq => 40,
    handle => 48, qp_num => 52, state => 56, qp_type => 60, mutex => 64, cond => 104,
    events_completed => 152);
assert_layout!(ibv_qp_ex, 352, 8;
    qp_base => 0, comp_mask => 160, wr_id => 168, wr_flags => 176, wr_atomic_cmp_swp => 184,
    wr_atomic_fetch_add => 192, wr_bind_mw => 200, wr_local_inv => 208, wr_rdma_read => 216,
    wr_rdma_write => 224, wr_rdma_write_imm => 232, wr_send => 240, wr_send_imm => 248,
    wr_send_inv => 256, wr_send_tso => 264, wr_set_ud_addr => 272, wr_set_xrc_srqn => 280,
    wr_set_inline_data => 288, wr_set_inline_data_list => 296, wr_set_sge => 304,
    wr_set_sge_list => 312, wr_start => 320, wr_complete => 328, wr_abort => 336,
    wr_atomic_write => 344);
assert_layout!(ibv_ece, 12, 4);
assert_layout!(ibv_flow_attr, 20, 4);
assert_layout!(ibv_flow, 24, 8);
assert_layout!(ibv_flow_action, 8, 8);
assert_layout!(ibv_counters_init_attr, 4, 4);
assert_layout!(ibv_counters, 8, 8);
assert_layout!(ibv_counter_attach_attr, 12, 4);
assert_layout!(ibv_values_ex, 24, 8);
// `ibv_cq` is a prefix of `ibv_cq_ex` (`ibv_cq_ex_to_cq` is a cast).
const _: () = assert!(
    core::mem::offset_of!(ibv_cq_ex, async_events_completed)
        == core::mem::offset_of!(ibv_cq, async_events_completed)
);
