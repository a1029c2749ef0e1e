//! Checks every `#[repr(C)]` mirror in `softrdma_ffi` against the
//! real rdma-core headers: a generated C program, compiled with `cc` against
//! `<infiniband/verbs.h>`, `<infiniband/sa.h>` and `<rdma/rdma_cma.h>`, prints
//! `sizeof`/`_Alignof` of every mirrored type, `offsetof`/`sizeof` of every
//! mirrored field (nested members and anonymous unions included), and the value
//! of every enum constant; the test compares them with Rust's `size_of`,
//! `align_of`, `offset_of!` and the constants.
//!
//! The headers come from Debian's `libibverbs-dev` and `librdmacm-dev`; without
//! them this test fails (it never skips).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr::addr_of;

use softrdma_ffi::*;

/// One mirrored type: its C spelling and the Rust-side numbers.
struct Layout {
    c_type: String,
    size: usize,
    align: usize,
    fields: Vec<Field>,
}

/// One field: the C member designator (as accepted by `offsetof`) and the
/// Rust-side offset and size.
struct Field {
    c_path: String,
    offset: usize,
    size: usize,
}

fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

/// Size of the (possibly nested) field `$t.$f`, computed without a value.
macro_rules! field_size {
    ($t:ty, $($f:ident).+) => {{
        let u = MaybeUninit::<$t>::uninit();
        let p = u.as_ptr();
        // SAFETY: `addr_of!` only computes the address of a field inside `u`;
        // nothing is read or referenced.
        size_of_pointee(unsafe { addr_of!((*p).$($f).+) })
    }};
}

/// `kind name { field, nested.field, "c.path" = rust.path, ... }` -> `Vec<Layout>`.
/// `kind` is `struct`, `union` or `typedef` (the C spelling is then just `name`).
macro_rules! layouts {
    ($( $kind:ident $t:ident { $( $($c:literal =)? $($f:ident).+ ),* $(,)? } ),* $(,)?) => {
        vec![$(
            Layout {
                c_type: c_type_name(stringify!($kind), stringify!($t)),
                size: size_of::<$t>(),
                align: align_of::<$t>(),
                fields: vec![$(
                    Field {
                        c_path: layouts!(@c_path $($c)? ; $($f).+),
                        offset: std::mem::offset_of!($t, $($f).+),
                        size: field_size!($t, $($f).+),
                    }
                ),*],
            }
        ),*]
    };
    (@c_path $c:literal ; $($f:ident).+) => { String::from($c) };
    (@c_path ; $($f:ident).+) => { stringify!($($f).+).replace(' ', "") };
}

fn c_type_name(kind: &str, name: &str) -> String {
    if kind == "typedef" {
        name.to_owned()
    } else {
        format!("{kind} {name}")
    }
}

/// `NAME, "C expression" = NAME, ...` -> `Vec<(C expression, Rust name, value)>`.
macro_rules! constants {
    ($( $($c:literal =)? $n:ident ),* $(,)?) => {
        vec![$(
            (constants!(@c $($c)? ; $n), stringify!($n), $n as u64)
        ),*]
    };
    (@c $c:literal ; $n:ident) => { $c };
    (@c ; $n:ident) => { stringify!($n) };
}

/// Rust-only helper types: C anonymous structs/unions (checked through the
/// fields of their parent), types that the public headers only forward-declare,
/// and opaque types.
const NOT_IN_C_HEADERS: &[&str] = &[
    "ibv_gid_global",
    "ibv_odp_caps_per_transport",
    "ibv_async_event_element",
    "ibv_send_wr_imm",
    "ibv_send_wr_rdma",
    "ibv_send_wr_atomic",
    "ibv_send_wr_ud",
    "ibv_send_wr_wr",
    "ibv_send_wr_xrc",
    "ibv_send_wr_qp_type",
    "ibv_send_wr_bind_mw",
    "ibv_send_wr_tso",
    "ibv_send_wr_ext",
    "ibv_ops_wr_tm_add",
    "ibv_ops_wr_tm",
    "ibv_wc_imm",
    "rdma_addr_src",
    "rdma_addr_dst",
    "rdma_addr_addr",
    "rdma_cm_event_param",
    // Forward-declared only in verbs.h; checked by `assert_layout!` (48 bytes).
    "_compat_ibv_port_attr",
    // Opaque (`opaque_type!`): never dereferenced.
    "verbs_ex_private",
    "ibv_flow_action_esp_attr",
];

/// Constants that are not in the public headers (rdma-core's private
/// `driver.h`), checked by reading rdma-core 44's source instead.
const NOT_IN_PUBLIC_HEADERS: &[&str] = &[
    "IBV_GID_TYPE_SYSFS_IB_ROCE_V1",
    "IBV_GID_TYPE_SYSFS_ROCE_V2",
    "VERBS_LOG_LEVEL_NONE",
    "VERBS_LOG_ERR",
    "VERBS_LOG_WARN",
    "VERBS_LOG_INFO",
    "VERBS_LOG_DEBUG",
];

fn all_layouts() -> Vec<Layout> {
    layouts! {
    typedef pthread_mutex_t {},
    typedef pthread_cond_t {},
    union ibv_gid {
        raw, global, global.subnet_prefix, global.interface_id,
    },
    struct ibv_gid_entry {
        gid, gid_index, port_num, gid_type, ndev_ifindex,
    },
    struct _ibv_device_ops {
        _dummy1, _dummy2,
    },
    struct ibv_device {
        _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path,
    },
    struct ibv_device_attr {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, vendor_part_id,
        hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq, max_cqe, max_mr,
        max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom,
        max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp,
        max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr,
        max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay,
        phys_port_cnt,
    },
    struct ibv_query_device_ex_input {
        comp_mask,
    },
    struct ibv_odp_caps {
        general_caps, per_transport_caps, per_transport_caps.rc_odp_caps,
        per_transport_caps.uc_odp_caps, per_transport_caps.ud_odp_caps,
    },
    struct ibv_tso_caps {
        max_tso, supported_qpts,
    },
    struct ibv_rss_caps {
        supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size,
        rx_hash_fields_mask, rx_hash_function,
    },
    struct ibv_packet_pacing_caps {
        qp_rate_limit_min, qp_rate_limit_max, supported_qpts,
    },
    struct ibv_tm_caps {
        max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge,
    },
    struct ibv_cq_moderation_caps {
        max_cq_count, max_cq_period,
    },
    struct ibv_pci_atomic_caps {
        fetch_add, swap, compare_swap,
    },
    struct ibv_device_attr_ex {
        orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock,
        device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps,
        raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps,
        phys_port_cnt_ex,
    },
    struct ibv_port_attr {
        state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, link_layer, flags, port_cap_flags2,
    },
    struct ibv_async_event {
        element, element.cq, element.qp, element.srq, element.wq, element.port_num, event_type,
    },
    struct ibv_context_ops {
        _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
        _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
        _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
        _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
        _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp, _compat_modify_qp,
        _compat_destroy_qp, post_send, post_recv, _compat_create_ah, _compat_destroy_ah,
        _compat_attach_mcast, _compat_detach_mcast, _compat_async_event,
    },
    struct ibv_context {
        device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat,
    },
    struct verbs_context {
        query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
        create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm, modify_flow_action_esp,
        destroy_flow_action, create_flow_action_esp, modify_qp_rate_limit, alloc_parent_domain,
        dealloc_td, alloc_td, modify_cq, post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table,
        destroy_wq, modify_wq, create_wq, query_rt_values, create_cq_ex, "priv" = priv_,
        query_device_ex, ibv_destroy_flow, ABI_placeholder2, ibv_create_flow, ABI_placeholder1,
        open_qp, create_qp_ex, get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3,
        sz, context,
    },
    struct ibv_pd {
        context, handle,
    },
    struct ibv_td_init_attr {
        comp_mask,
    },
    struct ibv_td {
        context,
    },
    struct ibv_parent_domain_init_attr {
        pd, td, comp_mask, alloc, free, pd_context,
    },
    struct ibv_xrcd_init_attr {
        comp_mask, fd, oflags,
    },
    struct ibv_xrcd {
        context,
    },
    struct ibv_mr {
        context, pd, addr, length, handle, lkey, rkey,
    },
    struct ibv_mw {
        context, pd, rkey, handle, "type" = type_,
    },
    struct ibv_mw_bind_info {
        mr, addr, length, mw_access_flags,
    },
    struct ibv_mw_bind {
        wr_id, send_flags, bind_info,
    },
    struct ibv_alloc_dm_attr {
        length, log_align_req, comp_mask,
    },
    struct ibv_dm {
        context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle,
    },
    struct ibv_global_route {
        dgid, flow_label, sgid_index, hop_limit, traffic_class,
    },
    struct ibv_ah_attr {
        grh, dlid, sl, src_path_bits, static_rate, is_global, port_num,
    },
    struct ibv_ah {
        context, pd, handle,
    },
    struct ibv_comp_channel {
        context, fd, refcnt,
    },
    struct ibv_cq {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed,
    },
    struct ibv_poll_cq_attr {
        comp_mask,
    },
    struct ibv_wc_tm_info {
        tag, "priv" = priv_,
    },
    struct ibv_cq_ex {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
        read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp,
        read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts, read_cvlan,
        read_flow_tag, read_tm_info, read_completion_wallclock_ns,
    },
    struct ibv_cq_init_attr_ex {
        cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain,
    },
    struct ibv_moderate_cq {
        cq_count, cq_period,
    },
    struct ibv_modify_cq_attr {
        attr_mask, moderate,
    },
    struct ibv_srq_attr {
        max_wr, max_sge, srq_limit,
    },
    struct ibv_srq_init_attr {
        srq_context, attr,
    },
    struct ibv_tm_cap {
        max_num_tags, max_ops,
    },
    struct ibv_srq_init_attr_ex {
        srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap,
    },
    struct ibv_srq {
        context, srq_context, pd, handle, mutex, cond, events_completed,
    },
    struct ibv_wq_init_attr {
        wq_context, wq_type, max_wr, max_sge, pd, cq, comp_mask, create_flags,
    },
    struct ibv_wq_attr {
        attr_mask, wq_state, curr_wq_state, flags, flags_mask,
    },
    struct ibv_wq {
        context, wq_context, pd, cq, wq_num, handle, state, wq_type, post_recv, mutex, cond,
        events_completed, comp_mask,
    },
    struct ibv_rwq_ind_table {
        context, ind_tbl_handle, ind_tbl_num, comp_mask,
    },
    struct ibv_rwq_ind_table_init_attr {
        log_ind_tbl_size, ind_tbl, comp_mask,
    },
    struct ibv_qp_cap {
        max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
    },
    struct ibv_qp_init_attr {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all,
    },
    struct ibv_rx_hash_conf {
        rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask,
    },
    struct ibv_qp_init_attr_ex {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
        create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags,
    },
    struct ibv_qp_open_attr {
        comp_mask, qp_num, xrcd, qp_context, qp_type,
    },
    struct ibv_qp_attr {
        qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
        qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify,
        sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt,
        rnr_retry, alt_port_num, alt_timeout, rate_limit,
    },
    struct ibv_qp_rate_limit_attr {
        rate_limit, max_burst_sz, typical_pkt_sz, comp_mask,
    },
    struct ibv_qp {
        context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond,
        events_completed,
    },
    struct ibv_qp_ex {
        qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add, wr_bind_mw,
        wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send, wr_send_imm,
        wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn, wr_set_inline_data,
        wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start, wr_complete, wr_abort,
        wr_atomic_write,
    },
    struct ibv_ece {
        vendor_id, options, comp_mask,
    },
    struct ibv_flow_attr {
        comp_mask, "type" = type_, size, priority, num_of_specs, port, flags,
    },
    struct ibv_flow {
        comp_mask, context, handle,
    },
    struct ibv_flow_action {
        context,
    },
    struct ibv_counters_init_attr {
        comp_mask,
    },
    struct ibv_counters {
        context,
    },
    struct ibv_counter_attach_attr {
        counter_desc, index, comp_mask,
    },
    struct ibv_values_ex {
        comp_mask, raw_clock,
    },
    struct ibv_sge {
        addr, length, lkey,
    },
    struct ibv_data_buf {
        addr, length,
    },
    struct ibv_send_wr {
        wr_id, next, sg_list, num_sge, opcode, send_flags, "imm_data" = imm.imm_data,
        "invalidate_rkey" = imm.invalidate_rkey, wr, wr.rdma, wr.rdma.remote_addr, wr.rdma.rkey,
        wr.atomic, wr.atomic.remote_addr, wr.atomic.compare_add, wr.atomic.swap, wr.atomic.rkey,
        wr.ud, wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey, qp_type, qp_type.xrc,
        qp_type.xrc.remote_srqn, "bind_mw" = ext.bind_mw, "bind_mw.mw" = ext.bind_mw.mw,
        "bind_mw.rkey" = ext.bind_mw.rkey, "bind_mw.bind_info" = ext.bind_mw.bind_info,
        "tso" = ext.tso, "tso.hdr" = ext.tso.hdr, "tso.hdr_sz" = ext.tso.hdr_sz,
        "tso.mss" = ext.tso.mss,
    },
    struct ibv_recv_wr {
        wr_id, next, sg_list, num_sge,
    },
    struct ibv_ops_wr {
        wr_id, next, opcode, flags, tm, tm.unexpected_cnt, tm.handle, tm.add, tm.add.recv_wr_id,
        tm.add.sg_list, tm.add.num_sge, tm.add.tag, tm.add.mask,
    },
    struct ibv_wc {
        wr_id, status, opcode, vendor_err, byte_len, "imm_data" = imm.imm_data,
        "invalidated_rkey" = imm.invalidated_rkey, qp_num, src_qp, wc_flags, pkey_index, slid, sl,
        dlid_path_bits,
    },
    struct ibv_grh {
        version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid,
    },
    struct ibv_sa_path_rec {
        dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible,
        numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate, packet_life_time_selector,
        packet_life_time, preference,
    },
    struct ibv_path_record {
        service_id, dgid, sgid, dlid, slid, flowlabel_hoplimit, tclass, reversible_numpath, pkey,
        qosclass_sl, mtu, rate, packetlifetime, preference, reserved,
    },
    struct ibv_path_data {
        flags, reserved, path,
    },
    struct rdma_ib_addr {
        sgid, dgid, pkey,
    },
    struct rdma_addr {
        "src_addr" = src.src_addr, "src_sin" = src.src_sin, "src_sin6" = src.src_sin6,
        "src_storage" = src.src_storage, "dst_addr" = dst.dst_addr, "dst_sin" = dst.dst_sin,
        "dst_sin6" = dst.dst_sin6, "dst_storage" = dst.dst_storage, addr, addr.ibaddr,
    },
    struct rdma_route {
        addr, path_rec, num_paths,
    },
    struct rdma_event_channel {
        fd,
    },
    struct rdma_cm_id {
        verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq,
        recv_cq_channel, recv_cq, srq, pd, qp_type,
    },
    struct rdma_conn_param {
        private_data, private_data_len, responder_resources, initiator_depth, flow_control,
        retry_count, rnr_retry_count, srq, qp_num,
    },
    struct rdma_ud_param {
        private_data, private_data_len, ah_attr, qp_num, qkey,
    },
    struct rdma_cm_event {
        id, listen_id, event, status, param, param.conn, param.ud,
    },
    struct rdma_addrinfo {
        ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr,
        ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route, ai_connect_len,
        ai_connect, ai_next,
    },
    struct rdma_cm_join_mc_attr_ex {
        comp_mask, join_flags, addr,
    },
    struct ib_mad_addr {
        qpn, qkey, lid, sl, path_bits, grh_present, gid_index, hop_limit, traffic_class, gid,
        flow_label, pkey_index, reserved,
    },
    struct ib_user_mad {
        agent_id, status, timeout_ms, retries, length, addr,
    },
    struct umad_port {
        ca_name, portnum, base_lid, lmc, sm_lid, sm_sl, state, phys_state, rate, capmask,
        gid_prefix, port_guid, pkeys_size, pkeys, link_layer,
    },
    struct umad_ca {
        ca_name, node_type, numports, fw_ver, ca_type, hw_ver, node_guid, system_guid, ports,
    },
    struct umad_device_node {
        next, ca_name,
    },
    struct umad_reg_attr {
        mgmt_class, mgmt_class_version, flags, method_mask, oui, rmpp_version,
    },
    }
}

fn all_constants() -> Vec<(&'static str, &'static str, u64)> {
    constants![
        IBV_NODE_UNKNOWN,
        IBV_NODE_CA,
        IBV_NODE_SWITCH,
        IBV_NODE_ROUTER,
        IBV_NODE_RNIC,
        IBV_NODE_USNIC,
        IBV_NODE_USNIC_UDP,
        IBV_NODE_UNSPECIFIED,
        IBV_TRANSPORT_UNKNOWN,
        IBV_TRANSPORT_IB,
        IBV_TRANSPORT_IWARP,
        IBV_TRANSPORT_USNIC,
        IBV_TRANSPORT_USNIC_UDP,
        IBV_TRANSPORT_UNSPECIFIED,
        IBV_DEVICE_RESIZE_MAX_WR,
        IBV_DEVICE_BAD_PKEY_CNTR,
        IBV_DEVICE_BAD_QKEY_CNTR,
        IBV_DEVICE_RAW_MULTI,
        IBV_DEVICE_AUTO_PATH_MIG,
        IBV_DEVICE_CHANGE_PHY_PORT,
        IBV_DEVICE_UD_AV_PORT_ENFORCE,
        IBV_DEVICE_CURR_QP_STATE_MOD,
        IBV_DEVICE_SHUTDOWN_PORT,
        IBV_DEVICE_INIT_TYPE,
        IBV_DEVICE_PORT_ACTIVE_EVENT,
        IBV_DEVICE_SYS_IMAGE_GUID,
        IBV_DEVICE_RC_RNR_NAK_GEN,
        IBV_DEVICE_SRQ_RESIZE,
        IBV_DEVICE_N_NOTIFY_CQ,
        IBV_DEVICE_MEM_WINDOW,
        IBV_DEVICE_UD_IP_CSUM,
        IBV_DEVICE_XRC,
        IBV_DEVICE_MEM_MGT_EXTENSIONS,
        IBV_DEVICE_MEM_WINDOW_TYPE_2A,
        IBV_DEVICE_MEM_WINDOW_TYPE_2B,
        IBV_DEVICE_RC_IP_CSUM,
        IBV_DEVICE_RAW_IP_CSUM,
        IBV_DEVICE_MANAGED_FLOW_STEERING,
        IBV_DEVICE_RAW_SCATTER_FCS,
        IBV_DEVICE_PCI_WRITE_END_PADDING,
        IBV_FORK_DISABLED,
        IBV_FORK_ENABLED,
        IBV_FORK_UNNEEDED,
        IBV_ATOMIC_NONE,
        IBV_ATOMIC_HCA,
        IBV_ATOMIC_GLOB,
        IBV_DM_MASK_HANDLE,
        IBV_ODP_SUPPORT_SEND,
        IBV_ODP_SUPPORT_RECV,
        IBV_ODP_SUPPORT_WRITE,
        IBV_ODP_SUPPORT_READ,
        IBV_ODP_SUPPORT_ATOMIC,
        IBV_ODP_SUPPORT_SRQ_RECV,
        IBV_ODP_SUPPORT,
        IBV_ODP_SUPPORT_IMPLICIT,
        IBV_RX_HASH_FUNC_TOEPLITZ,
        IBV_RX_HASH_SRC_IPV4,
        IBV_RX_HASH_DST_IPV4,
        IBV_RX_HASH_SRC_IPV6,
        IBV_RX_HASH_DST_IPV6,
        IBV_RX_HASH_SRC_PORT_TCP,
        IBV_RX_HASH_DST_PORT_TCP,
        IBV_RX_HASH_SRC_PORT_UDP,
        IBV_RX_HASH_DST_PORT_UDP,
        IBV_RX_HASH_IPSEC_SPI,
        IBV_RX_HASH_INNER,
        IBV_RAW_PACKET_CAP_CVLAN_STRIPPING,
        IBV_RAW_PACKET_CAP_SCATTER_FCS,
        IBV_RAW_PACKET_CAP_IP_CSUM,
        IBV_RAW_PACKET_CAP_DELAY_DROP,
        IBV_TM_CAP_RC,
        IBV_PCI_ATOMIC_OPERATION_4_BYTE_SIZE_SUP,
        IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP,
        IBV_PCI_ATOMIC_OPERATION_16_BYTE_SIZE_SUP,
        IBV_MTU_256,
        IBV_MTU_512,
        IBV_MTU_1024,
        IBV_MTU_2048,
        IBV_MTU_4096,
        IBV_PORT_NOP,
        IBV_PORT_DOWN,
        IBV_PORT_INIT,
        IBV_PORT_ARMED,
        IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
        IBV_LINK_LAYER_UNSPECIFIED,
        IBV_LINK_LAYER_INFINIBAND,
        IBV_LINK_LAYER_ETHERNET,
        IBV_PORT_SM,
        IBV_PORT_NOTICE_SUP,
        IBV_PORT_TRAP_SUP,
        IBV_PORT_OPT_IPD_SUP,
        IBV_PORT_AUTO_MIGR_SUP,
        IBV_PORT_SL_MAP_SUP,
        IBV_PORT_MKEY_NVRAM,
        IBV_PORT_PKEY_NVRAM,
        IBV_PORT_LED_INFO_SUP,
        IBV_PORT_SYS_IMAGE_GUID_SUP,
        IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP,
        IBV_PORT_EXTENDED_SPEEDS_SUP,
        IBV_PORT_CAP_MASK2_SUP,
        IBV_PORT_CM_SUP,
        IBV_PORT_SNMP_TUNNEL_SUP,
        IBV_PORT_REINIT_SUP,
        IBV_PORT_DEVICE_MGMT_SUP,
        IBV_PORT_VENDOR_CLASS_SUP,
        IBV_PORT_DR_NOTICE_SUP,
        IBV_PORT_CAP_MASK_NOTICE_SUP,
        IBV_PORT_BOOT_MGMT_SUP,
        IBV_PORT_LINK_LATENCY_SUP,
        IBV_PORT_CLIENT_REG_SUP,
        IBV_PORT_IP_BASED_GIDS,
        IBV_PORT_SET_NODE_DESC_SUP,
        IBV_PORT_INFO_EXT_SUP,
        IBV_PORT_VIRT_SUP,
        IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP,
        IBV_PORT_LINK_WIDTH_2X_SUP,
        IBV_PORT_LINK_SPEED_HDR_SUP,
        IBV_PORT_LINK_SPEED_NDR_SUP,
        IBV_GID_TYPE_IB,
        IBV_GID_TYPE_ROCE_V1,
        IBV_GID_TYPE_ROCE_V2,
        IBV_SYSFS_NAME_MAX,
        IBV_SYSFS_PATH_MAX,
        IBV_EVENT_CQ_ERR,
        IBV_EVENT_QP_FATAL,
        IBV_EVENT_QP_REQ_ERR,
        IBV_EVENT_QP_ACCESS_ERR,
        IBV_EVENT_COMM_EST,
        IBV_EVENT_SQ_DRAINED,
        IBV_EVENT_PATH_MIG,
        IBV_EVENT_PATH_MIG_ERR,
        IBV_EVENT_DEVICE_FATAL,
        IBV_EVENT_PORT_ACTIVE,
        IBV_EVENT_PORT_ERR,
        IBV_EVENT_LID_CHANGE,
        IBV_EVENT_PKEY_CHANGE,
        IBV_EVENT_SM_CHANGE,
        IBV_EVENT_SRQ_ERR,
        IBV_EVENT_SRQ_LIMIT_REACHED,
        IBV_EVENT_QP_LAST_WQE_REACHED,
        IBV_EVENT_CLIENT_REREGISTER,
        IBV_EVENT_GID_CHANGE,
        IBV_EVENT_WQ_FATAL,
        IBV_WC_SUCCESS,
        IBV_WC_LOC_LEN_ERR,
        IBV_WC_LOC_QP_OP_ERR,
        IBV_WC_LOC_EEC_OP_ERR,
        IBV_WC_LOC_PROT_ERR,
        IBV_WC_WR_FLUSH_ERR,
        IBV_WC_MW_BIND_ERR,
        IBV_WC_BAD_RESP_ERR,
        IBV_WC_LOC_ACCESS_ERR,
        IBV_WC_REM_INV_REQ_ERR,
        IBV_WC_REM_ACCESS_ERR,
        IBV_WC_REM_OP_ERR,
        IBV_WC_RETRY_EXC_ERR,
        IBV_WC_RNR_RETRY_EXC_ERR,
        IBV_WC_LOC_RDD_VIOL_ERR,
        IBV_WC_REM_INV_RD_REQ_ERR,
        IBV_WC_REM_ABORT_ERR,
        IBV_WC_INV_EECN_ERR,
        IBV_WC_INV_EEC_STATE_ERR,
        IBV_WC_FATAL_ERR,
        IBV_WC_RESP_TIMEOUT_ERR,
        IBV_WC_GENERAL_ERR,
        IBV_WC_TM_ERR,
        IBV_WC_TM_RNDV_INCOMPLETE,
        IBV_WC_SEND,
        IBV_WC_RDMA_WRITE,
        IBV_WC_RDMA_READ,
        IBV_WC_COMP_SWAP,
        IBV_WC_FETCH_ADD,
        IBV_WC_BIND_MW,
        IBV_WC_LOCAL_INV,
        IBV_WC_TSO,
        IBV_WC_ATOMIC_WRITE,
        IBV_WC_RECV,
        IBV_WC_RECV_RDMA_WITH_IMM,
        IBV_WC_TM_ADD,
        IBV_WC_TM_DEL,
        IBV_WC_TM_SYNC,
        IBV_WC_TM_RECV,
        IBV_WC_TM_NO_TAG,
        IBV_WC_DRIVER1,
        IBV_WC_DRIVER2,
        IBV_WC_DRIVER3,
        IBV_WC_IP_CSUM_OK_SHIFT,
        IBV_WC_EX_WITH_BYTE_LEN,
        IBV_WC_EX_WITH_IMM,
        IBV_WC_EX_WITH_QP_NUM,
        IBV_WC_EX_WITH_SRC_QP,
        IBV_WC_EX_WITH_SLID,
        IBV_WC_EX_WITH_SL,
        IBV_WC_EX_WITH_DLID_PATH_BITS,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
        IBV_WC_EX_WITH_CVLAN,
        IBV_WC_EX_WITH_FLOW_TAG,
        IBV_WC_EX_WITH_TM_INFO,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
        IBV_WC_STANDARD_FLAGS,
        IBV_CREATE_CQ_SUP_WC_FLAGS,
        IBV_WC_GRH,
        IBV_WC_WITH_IMM,
        IBV_WC_IP_CSUM_OK,
        IBV_WC_WITH_INV,
        IBV_WC_TM_SYNC_REQ,
        IBV_WC_TM_MATCH,
        IBV_WC_TM_DATA_VALID,
        IBV_CQ_INIT_ATTR_MASK_FLAGS,
        IBV_CQ_INIT_ATTR_MASK_PD,
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
        IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
        IBV_CQ_ATTR_MODERATE,
        IBV_CQ_ATTR_RESERVED,
        IBV_ACCESS_OPTIONAL_FIRST,
        IBV_ACCESS_OPTIONAL_RANGE,
        IBV_ACCESS_LOCAL_WRITE,
        IBV_ACCESS_REMOTE_WRITE,
        IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC,
        IBV_ACCESS_MW_BIND,
        IBV_ACCESS_ZERO_BASED,
        IBV_ACCESS_ON_DEMAND,
        IBV_ACCESS_HUGETLB,
        IBV_ACCESS_RELAXED_ORDERING,
        IBV_REREG_MR_CHANGE_TRANSLATION,
        IBV_REREG_MR_CHANGE_PD,
        IBV_REREG_MR_CHANGE_ACCESS,
        IBV_REREG_MR_FLAGS_SUPPORTED,
        IBV_REREG_MR_ERR_INPUT,
        IBV_REREG_MR_ERR_DONT_FORK_NEW,
        IBV_REREG_MR_ERR_DO_FORK_OLD,
        IBV_REREG_MR_ERR_CMD,
        IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW,
        IBV_MW_TYPE_1,
        IBV_MW_TYPE_2,
        IBV_XRCD_INIT_ATTR_FD,
        IBV_XRCD_INIT_ATTR_OFLAGS,
        IBV_XRCD_INIT_ATTR_RESERVED,
        IBV_ADVISE_MR_ADVICE_PREFETCH,
        IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
        IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
        IBV_ADVISE_MR_FLAG_FLUSH,
        IBV_RATE_MAX,
        IBV_RATE_2_5_GBPS,
        IBV_RATE_5_GBPS,
        IBV_RATE_10_GBPS,
        IBV_RATE_20_GBPS,
        IBV_RATE_30_GBPS,
        IBV_RATE_40_GBPS,
        IBV_RATE_60_GBPS,
        IBV_RATE_80_GBPS,
        IBV_RATE_120_GBPS,
        IBV_RATE_14_GBPS,
        IBV_RATE_56_GBPS,
        IBV_RATE_112_GBPS,
        IBV_RATE_168_GBPS,
        IBV_RATE_25_GBPS,
        IBV_RATE_100_GBPS,
        IBV_RATE_200_GBPS,
        IBV_RATE_300_GBPS,
        IBV_RATE_28_GBPS,
        IBV_RATE_50_GBPS,
        IBV_RATE_400_GBPS,
        IBV_RATE_600_GBPS,
        IBV_RATE_800_GBPS,
        IBV_RATE_1200_GBPS,
        IBV_SRQ_MAX_WR,
        IBV_SRQ_LIMIT,
        IBV_SRQT_BASIC,
        IBV_SRQT_XRC,
        IBV_SRQT_TM,
        IBV_SRQ_INIT_ATTR_TYPE,
        IBV_SRQ_INIT_ATTR_PD,
        IBV_SRQ_INIT_ATTR_XRCD,
        IBV_SRQ_INIT_ATTR_CQ,
        IBV_SRQ_INIT_ATTR_TM,
        IBV_SRQ_INIT_ATTR_RESERVED,
        IBV_WQT_RQ,
        IBV_WQ_INIT_ATTR_FLAGS,
        IBV_WQ_INIT_ATTR_RESERVED,
        IBV_WQ_FLAGS_CVLAN_STRIPPING,
        IBV_WQ_FLAGS_SCATTER_FCS,
        IBV_WQ_FLAGS_DELAY_DROP,
        IBV_WQ_FLAGS_PCI_WRITE_END_PADDING,
        IBV_WQ_FLAGS_RESERVED,
        IBV_WQS_RESET,
        IBV_WQS_RDY,
        IBV_WQS_ERR,
        IBV_WQS_UNKNOWN,
        IBV_WQ_ATTR_STATE,
        IBV_WQ_ATTR_CURR_STATE,
        IBV_WQ_ATTR_FLAGS,
        IBV_WQ_ATTR_RESERVED,
        IBV_QPT_RC,
        IBV_QPT_UC,
        IBV_QPT_UD,
        IBV_QPT_RAW_PACKET,
        IBV_QPT_XRC_SEND,
        IBV_QPT_XRC_RECV,
        IBV_QPT_DRIVER,
        IBV_QP_INIT_ATTR_PD,
        IBV_QP_INIT_ATTR_XRCD,
        IBV_QP_INIT_ATTR_CREATE_FLAGS,
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER,
        IBV_QP_INIT_ATTR_IND_TABLE,
        IBV_QP_INIT_ATTR_RX_HASH,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB,
        IBV_QP_CREATE_SCATTER_FCS,
        IBV_QP_CREATE_CVLAN_STRIPPING,
        IBV_QP_CREATE_SOURCE_QPN,
        IBV_QP_CREATE_PCI_WRITE_END_PADDING,
        IBV_QP_EX_WITH_RDMA_WRITE,
        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
        IBV_QP_EX_WITH_SEND,
        IBV_QP_EX_WITH_SEND_WITH_IMM,
        IBV_QP_EX_WITH_RDMA_READ,
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_QP_EX_WITH_LOCAL_INV,
        IBV_QP_EX_WITH_BIND_MW,
        IBV_QP_EX_WITH_SEND_WITH_INV,
        IBV_QP_EX_WITH_TSO,
        IBV_QP_EX_WITH_ATOMIC_WRITE,
        IBV_QP_OPEN_ATTR_NUM,
        IBV_QP_OPEN_ATTR_XRCD,
        IBV_QP_OPEN_ATTR_CONTEXT,
        IBV_QP_OPEN_ATTR_TYPE,
        IBV_QP_OPEN_ATTR_RESERVED,
        IBV_QP_STATE,
        IBV_QP_CUR_STATE,
        IBV_QP_EN_SQD_ASYNC_NOTIFY,
        IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX,
        IBV_QP_PORT,
        IBV_QP_QKEY,
        IBV_QP_AV,
        IBV_QP_PATH_MTU,
        IBV_QP_TIMEOUT,
        IBV_QP_RETRY_CNT,
        IBV_QP_RNR_RETRY,
        IBV_QP_RQ_PSN,
        IBV_QP_MAX_QP_RD_ATOMIC,
        IBV_QP_ALT_PATH,
        IBV_QP_MIN_RNR_TIMER,
        IBV_QP_SQ_PSN,
        IBV_QP_MAX_DEST_RD_ATOMIC,
        IBV_QP_PATH_MIG_STATE,
        IBV_QP_CAP,
        IBV_QP_DEST_QPN,
        IBV_QP_RATE_LIMIT,
        IBV_QPS_RESET,
        IBV_QPS_INIT,
        IBV_QPS_RTR,
        IBV_QPS_RTS,
        IBV_QPS_SQD,
        IBV_QPS_SQE,
        IBV_QPS_ERR,
        IBV_QPS_UNKNOWN,
        IBV_MIG_MIGRATED,
        IBV_MIG_REARM,
        IBV_MIG_ARMED,
        IBV_WR_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        IBV_WR_SEND,
        IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV,
        IBV_WR_BIND_MW,
        IBV_WR_SEND_WITH_INV,
        IBV_WR_TSO,
        IBV_WR_DRIVER1,
        IBV_WR_ATOMIC_WRITE,
        IBV_SEND_FENCE,
        IBV_SEND_SIGNALED,
        IBV_SEND_SOLICITED,
        IBV_SEND_INLINE,
        IBV_SEND_IP_CSUM,
        IBV_WR_TAG_ADD,
        IBV_WR_TAG_DEL,
        IBV_WR_TAG_SYNC,
        IBV_OPS_SIGNALED,
        IBV_OPS_TM_SYNC,
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS,
        IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
        IBV_ALLOCATOR_USE_DEFAULT,
        IBV_COUNTER_PACKETS,
        IBV_COUNTER_BYTES,
        IBV_READ_COUNTERS_ATTR_PREFER_CACHED,
        IBV_VALUES_MASK_RAW_CLOCK,
        IBV_VALUES_MASK_RESERVED,
        IBV_FLOW_ATTR_NORMAL,
        IBV_FLOW_ATTR_ALL_DEFAULT,
        IBV_FLOW_ATTR_MC_DEFAULT,
        IBV_FLOW_ATTR_SNIFFER,
        IBV_FLOW_ATTR_FLAGS_DONT_TRAP,
        IBV_FLOW_ATTR_FLAGS_EGRESS,
        IBV_CREATE_IND_TABLE_RESERVED,
        IB_ROCE_UDP_ENCAP_VALID_PORT_MIN,
        IB_ROCE_UDP_ENCAP_VALID_PORT_MAX,
        IB_GRH_FLOWLABEL_MASK,
        ETHERNET_LL_SIZE,
        RDMA_CM_EVENT_ADDR_RESOLVED,
        RDMA_CM_EVENT_ADDR_ERROR,
        RDMA_CM_EVENT_ROUTE_RESOLVED,
        RDMA_CM_EVENT_ROUTE_ERROR,
        RDMA_CM_EVENT_CONNECT_REQUEST,
        RDMA_CM_EVENT_CONNECT_RESPONSE,
        RDMA_CM_EVENT_CONNECT_ERROR,
        RDMA_CM_EVENT_UNREACHABLE,
        RDMA_CM_EVENT_REJECTED,
        RDMA_CM_EVENT_ESTABLISHED,
        RDMA_CM_EVENT_DISCONNECTED,
        RDMA_CM_EVENT_DEVICE_REMOVAL,
        RDMA_CM_EVENT_MULTICAST_JOIN,
        RDMA_CM_EVENT_MULTICAST_ERROR,
        RDMA_CM_EVENT_ADDR_CHANGE,
        RDMA_CM_EVENT_TIMEWAIT_EXIT,
        RDMA_PS_IPOIB,
        RDMA_PS_TCP,
        RDMA_PS_UDP,
        RDMA_PS_IB,
        RDMA_IB_IP_PS_MASK,
        RDMA_IB_IP_PORT_MASK,
        RDMA_IB_IP_PS_TCP,
        RDMA_IB_IP_PS_UDP,
        RDMA_IB_PS_IB,
        RDMA_UDP_QKEY,
        RDMA_MAX_RESP_RES,
        RDMA_MAX_INIT_DEPTH,
        RAI_PASSIVE,
        RAI_NUMERICHOST,
        RAI_NOROUTE,
        RAI_FAMILY,
        RDMA_OPTION_ID,
        RDMA_OPTION_IB,
        RDMA_OPTION_ID_TOS,
        RDMA_OPTION_ID_REUSEADDR,
        RDMA_OPTION_ID_AFONLY,
        RDMA_OPTION_ID_ACK_TIMEOUT,
        RDMA_OPTION_IB_PATH,
        RDMA_CM_JOIN_MC_ATTR_ADDRESS,
        RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
        RDMA_CM_JOIN_MC_ATTR_RESERVED,
        RDMA_MC_JOIN_FLAG_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_RESERVED,
        SOL_RDMA,
        RDMA_SQSIZE,
        RDMA_RQSIZE,
        RDMA_INLINE,
        RDMA_IOMAPSIZE,
        RDMA_ROUTE,
        IBV_PATH_RECORD_REVERSIBLE,
        IBV_PATH_FLAG_GMP,
        IBV_PATH_FLAG_PRIMARY,
        IBV_PATH_FLAG_ALTERNATE,
        IBV_PATH_FLAG_OUTBOUND,
        IBV_PATH_FLAG_INBOUND,
        IBV_PATH_FLAG_INBOUND_REVERSE,
        IBV_PATH_FLAG_BIDIRECTIONAL,
        "IB_UVERBS_ACCESS_OPTIONAL_LAST" = IBV_ACCESS_OPTIONAL_LAST,
        "(uintptr_t)__VERBS_ABI_IS_EXTENDED" = VERBS_ABI_IS_EXTENDED,
        UMAD_CA_NAME_LEN,
        UMAD_CA_MAX_PORTS,
        UMAD_USER_RMPP,
    ]
}

/// The mirror sources, to check that every type and constant is covered here.
const FFI_SOURCES: &[(&str, &str)] = &[
    ("lib.rs", include_str!("../src/lib.rs")),
    ("consts.rs", include_str!("../src/consts.rs")),
    ("device.rs", include_str!("../src/device.rs")),
    ("context.rs", include_str!("../src/context.rs")),
    ("resources.rs", include_str!("../src/resources.rs")),
    ("wr.rs", include_str!("../src/wr.rs")),
    ("sa.rs", include_str!("../src/sa.rs")),
    ("cm.rs", include_str!("../src/cm.rs")),
    ("umad.rs", include_str!("../src/umad.rs")),
];

/// Names declared as `pub <keyword> NAME` in the ffi sources (plus the names
/// given to `opaque_type!`).
fn declared(keyword: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (_, src) in FFI_SOURCES {
        let mut lines = src.lines().peekable();
        while let Some(raw) = lines.next() {
            let line = raw.trim_start();
            // Top-level items only (associated consts of impls are indented).
            if let Some(rest) = raw.strip_prefix(&format!("pub {keyword} ")) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.push(name);
            }
            if keyword == "struct" && line.starts_with("opaque_type!(") {
                // opaque_type!(\n /// doc \n name \n);
                for l in lines.by_ref() {
                    let l = l.trim();
                    if !l.starts_with("///") && !l.is_empty() {
                        names.push(l.trim_end_matches(')').to_owned());
                        break;
                    }
                }
            }
        }
    }
    names.retain(|n| !n.is_empty() && n != "$name");
    names
}

fn headers_hint() -> &'static str {
    "the rdma-core development headers are missing: install Debian's libibverbs-dev, \
     librdmacm-dev and libibumad-dev (apt-get install libibverbs-dev librdmacm-dev \
     libibumad-dev; the project's test script installs them) so that <infiniband/verbs.h>, \
     <rdma/rdma_cma.h> and <infiniband/umad.h> exist"
}

/// Writes, compiles and runs the C probe; returns its stdout.
fn run_c_probe(layouts: &[Layout], constants: &[(&str, &str, u64)]) -> String {
    for h in [
        "/usr/include/infiniband/verbs.h",
        "/usr/include/rdma/rdma_cma.h",
        "/usr/include/infiniband/sa.h",
        "/usr/include/infiniband/umad.h",
    ] {
        assert!(Path::new(h).exists(), "{h} not found: {}", headers_hint());
    }
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <stdint.h>\n\
         #include <infiniband/verbs.h>\n#include <infiniband/sa.h>\n\
         #include <rdma/rdma_cma.h>\n#include <rdma/rdma_verbs.h>\n#include <rdma/rsocket.h>\n\
         #include <infiniband/umad.h>\n\
         int main(void) {\n",
    );
    for l in layouts {
        writeln!(
            c,
            "  printf(\"T|%s|%zu|%zu\\n\", \"{0}\", sizeof({0}), _Alignof({0}));",
            l.c_type
        )
        .unwrap();
        for f in &l.fields {
            writeln!(
                c,
                "  printf(\"F|%s|%s|%zu|%zu\\n\", \"{0}\", \"{1}\", offsetof({0}, {1}), sizeof((({0} *)0)->{1}));",
                l.c_type, f.c_path
            )
            .unwrap();
        }
    }
    for (expr, name, _) in constants {
        writeln!(
            c,
            "  printf(\"C|%s|%llu\\n\", \"{name}\", (unsigned long long)(long long)({expr}));"
        )
        .unwrap();
    }
    c.push_str("  return 0;\n}\n");

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("capi-layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, &c).unwrap();
    let out = Command::new("cc")
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `cc` ({e}): install a C compiler (Debian: gcc)"));
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("No such file or directory")
            && (stderr.contains("infiniband/") || stderr.contains("rdma/"))
        {
            panic!("{}\n{stderr}", headers_hint());
        }
        panic!(
            "the C layout probe {} failed to compile:\n{stderr}",
            src.display()
        );
    }
    let run = Command::new(&exe).output().expect("run the C layout probe");
    assert!(run.status.success(), "C layout probe failed: {run:?}");
    String::from_utf8(run.stdout).unwrap()
}

#[test]
fn mirrors_match_installed_headers() {
    let layouts = all_layouts();
    let constants = all_constants();
    let output = run_c_probe(&layouts, &constants);

    let mut c_types = BTreeMap::new();
    let mut c_fields = BTreeMap::new();
    let mut c_consts = BTreeMap::new();
    for line in output.lines() {
        let parts: Vec<&str> = line.split('|').collect();
        match parts.as_slice() {
            ["T", t, size, align] => {
                c_types.insert(
                    t.to_string(),
                    (
                        size.parse::<usize>().unwrap(),
                        align.parse::<usize>().unwrap(),
                    ),
                );
            }
            ["F", t, f, off, size] => {
                c_fields.insert(
                    (t.to_string(), f.to_string()),
                    (
                        off.parse::<usize>().unwrap(),
                        size.parse::<usize>().unwrap(),
                    ),
                );
            }
            ["C", name, value] => {
                c_consts.insert(name.to_string(), value.parse::<u64>().unwrap());
            }
            _ => panic!("unexpected probe line {line:?}"),
        }
    }

    let mut errors = Vec::new();
    let mut nfields = 0;
    for l in &layouts {
        let c = c_types[&l.c_type];
        if c != (l.size, l.align) {
            errors.push(format!(
                "{}: C size/align {:?}, Rust ({}, {})",
                l.c_type, c, l.size, l.align
            ));
        }
        for f in &l.fields {
            nfields += 1;
            let c = c_fields[&(l.c_type.clone(), f.c_path.clone())];
            if c != (f.offset, f.size) {
                errors.push(format!(
                    "{}.{}: C offset/size {:?}, Rust ({}, {})",
                    l.c_type, f.c_path, c, f.offset, f.size
                ));
            }
        }
    }
    for (_, name, value) in &constants {
        if c_consts[*name] != *value {
            errors.push(format!("{name}: C {}, Rust {value}", c_consts[*name]));
        }
    }
    assert!(
        errors.is_empty(),
        "{} layout/constant mismatches:\n{}",
        errors.len(),
        errors.join("\n")
    );
    // Guard against the probe silently checking nothing.
    assert!(
        layouts.len() > 80 && nfields > 600 && constants.len() > 400,
        "{} {nfields}",
        layouts.len()
    );
}

#[test]
fn every_mirror_and_constant_is_checked() {
    let layouts = all_layouts();
    let checked: Vec<String> = layouts
        .iter()
        .map(|l| l.c_type.rsplit(' ').next().unwrap().to_owned())
        .collect();
    let mut missing = Vec::new();
    for kw in ["struct", "union"] {
        for name in declared(kw) {
            if !checked.contains(&name) && !NOT_IN_C_HEADERS.contains(&name.as_str()) {
                missing.push(format!("{kw} {name}"));
            }
        }
    }
    let consts: Vec<&str> = all_constants().iter().map(|c| c.1).collect();
    for name in declared("const") {
        let upper = name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if upper
            && !consts.contains(&name.as_str())
            && !NOT_IN_PUBLIC_HEADERS.contains(&name.as_str())
        {
            missing.push(format!("const {name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "mirrors not covered by tests/layout.rs: {missing:?}"
    );
    assert!(
        declared("struct").len() > 90,
        "the source scan found too few structs"
    );
}
