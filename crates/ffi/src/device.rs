//! Device, GID, device/port attributes and async events (`verbs.h`).

use core::ffi::{c_char, c_int, c_uint};

use super::{
    IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX, assert_layout, ibv_atomic_cap, ibv_context, ibv_cq,
    ibv_event_type, ibv_mtu, ibv_node_type, ibv_port_state, ibv_qp, ibv_srq, ibv_transport_type,
    ibv_wq, prefixed_structs, union_debug, zeroable,
};

/// `union ibv_gid`: 16 raw bytes, or the (big-endian) subnet prefix + interface id.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    pub raw: [u8; 16],
    pub global: ibv_gid_global,
}

/// The `global` view of [`ibv_gid`] (both fields big-endian).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_gid_global {
    pub subnet_prefix: u64,
    pub interface_id: u64,
}

impl ibv_gid {
    /// The 16 raw bytes (every bit pattern is valid for both views).
    pub fn raw(&self) -> [u8; 16] {
        // SAFETY: both members are plain integers covering all 16 bytes, so any
        // initialised `ibv_gid` is a valid `[u8; 16]`.
        unsafe { self.raw }
    }
}

impl core::fmt::Debug for ibv_gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ibv_gid({:02x?})", self.raw())
    }
}

/// `struct ibv_gid_entry` (output of `ibv_query_gid_ex`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`.
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct _ibv_device_ops`: two unused legacy slots at the start of `ibv_device`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct _ibv_device_ops {
    pub _dummy1:
        Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut ibv_context>,
    pub _dummy2: Option<unsafe extern "C" fn(context: *mut ibv_context)>,
}

/// `struct ibv_device`. Binaries read `transport_type` and `ibdev_path` directly.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: ibv_node_type,
    pub transport_type: ibv_transport_type,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `struct ibv_device_attr` (232 bytes; `ibv_query_device`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    /// Big-endian.
    pub node_guid: u64,
    /// Big-endian.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: ibv_atomic_cap,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `ibv_odp_caps.per_transport_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_odp_caps_per_transport {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: ibv_odp_caps_per_transport,
}

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_tso_caps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_packet_pacing_caps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_cq_moderation_caps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_pci_atomic_caps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex` (400 bytes; `verbs_context::query_device_ex`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: ibv_tso_caps,
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    pub raw_packet_caps: u32,
    pub tm_caps: ibv_tm_caps,
    pub cq_mod_caps: ibv_cq_moderation_caps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

prefixed_structs! {
    /// `struct _compat_ibv_port_attr`: the 48-byte prefix of [`ibv_port_attr`]
    /// (no `port_cap_flags2`). The exported `ibv_query_port@IBVERBS_1.1` must write
    /// only this much: libmlx5 and old binaries pass 48-byte buffers. Only forward
    /// declared in the public header, so it is not in `tests/layout.rs`.
    pub struct _compat_ibv_port_attr {
        pub state: ibv_port_state,
        pub max_mtu: ibv_mtu,
        pub active_mtu: ibv_mtu,
        pub gid_tbl_len: c_int,
        pub port_cap_flags: u32,
        pub max_msg_sz: u32,
        pub bad_pkey_cntr: u32,
        pub qkey_viol_cntr: u32,
        pub pkey_tbl_len: u16,
        pub lid: u16,
        pub sm_lid: u16,
        pub lmc: u8,
        pub max_vl_num: u8,
        pub sm_sl: u8,
        pub subnet_timeout: u8,
        pub init_type_reply: u8,
        pub active_width: u8,
        pub active_speed: u8,
        pub phys_state: u8,
        pub link_layer: u8,
        pub flags: u8,
    }
    /// `struct ibv_port_attr` (52 bytes, as the inline `ibv_query_port` passes to
    /// `verbs_context::query_port`).
    pub struct ibv_port_attr: _compat_ibv_port_attr {
        pub port_cap_flags2: u16,
    }
}

/// `ibv_async_event.element`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut ibv_wq,
    pub port_num: c_int,
}

/// `struct ibv_async_event` (`ibv_get_async_event`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    pub event_type: ibv_event_type,
}

union_debug!(ibv_async_event_element);

zeroable!(
    ibv_gid,
    ibv_gid_global,
    ibv_gid_entry,
    _ibv_device_ops,
    ibv_device,
    ibv_device_attr,
    ibv_query_device_ex_input,
    ibv_odp_caps_per_transport,
    ibv_odp_caps,
    ibv_tso_caps,
    ibv_rss_caps,
    ibv_packet_pacing_caps,
    ibv_tm_caps,
    ibv_cq_moderation_caps,
    ibv_pci_atomic_caps,
    ibv_device_attr_ex,
    ibv_port_attr,
    _compat_ibv_port_attr,
    ibv_async_event_element,
    ibv_async_event,
);

// Offsets from shared/reference/abi/off/offsets.txt (gcc, installed 44.0 headers).
assert_layout!(ibv_gid, 16, 8; raw => 0, global => 0, global.subnet_prefix => 0, global.interface_id => 8);
assert_layout!(ibv_gid_entry, 32, 8;
    gid => 0, gid_index => 16, port_num => 20, gid_type => 24, ndev_ifindex => 28);
assert_layout!(_ibv_device_ops, 16, 8; _dummy1 => 0, _dummy2 => 8);
assert_layout!(ibv_device, 664, 8;
    _ops => 0, node_type => 16, transport_type => 20, name => 24, dev_name => 88,
    dev_path => 152, ibdev_path => 408);
assert_layout!(ibv_device_attr, 232, 8;
    fw_ver => 0, node_guid => 64, sys_image_guid => 72, max_mr_size => 80, page_size_cap => 88,
    vendor_id => 96, vendor_part_id => 100, hw_ver => 104, max_qp => 108, max_qp_wr => 112,
    device_cap_flags => 116, max_sge => 120, max_sge_rd => 124, max_cq => 128, max_cqe => 132,
    max_mr => 136, max_pd => 140, max_qp_rd_atom => 144, max_ee_rd_atom => 148,
    max_res_rd_atom => 152, max_qp_init_rd_atom => 156, max_ee_init_rd_atom => 160,
    atomic_cap => 164, max_ee => 168, max_rdd => 172, max_mw => 176, max_raw_ipv6_qp => 180,
    max_raw_ethy_qp => 184, max_mcast_grp => 188, max_mcast_qp_attach => 192,
    max_total_mcast_qp_attach => 196, max_ah => 200, max_fmr => 204, max_map_per_fmr => 208,
    max_srq => 212, max_srq_wr => 216, max_srq_sge => 220, max_pkeys => 224,
    local_ca_ack_delay => 226, phys_port_cnt => 227);
assert_layout!(ibv_query_device_ex_input, 4, 4; comp_mask => 0);
assert_layout!(ibv_odp_caps, 24, 8; general_caps => 0, per_transport_caps => 8);
assert_layout!(ibv_tso_caps, 8, 4);
assert_layout!(ibv_rss_caps, 32, 8; rx_hash_fields_mask => 16, rx_hash_function => 24);
assert_layout!(ibv_packet_pacing_caps, 12, 4);
assert_layout!(ibv_tm_caps, 20, 4);
assert_layout!(ibv_cq_moderation_caps, 4, 2);
assert_layout!(ibv_pci_atomic_caps, 6, 2);
assert_layout!(ibv_device_attr_ex, 400, 8;
    orig_attr => 0, comp_mask => 232, odp_caps => 240, completion_timestamp_mask => 264,
    hca_core_clock => 272, device_cap_flags_ex => 280, tso_caps => 288, rss_caps => 296,
    max_wq_type_rq => 328, packet_pacing_caps => 332, raw_packet_caps => 344, tm_caps => 348,
    cq_mod_caps => 368, max_dm_size => 376, pci_atomic_caps => 384, xrc_odp_caps => 392,
    phys_port_cnt_ex => 396);
assert_layout!(ibv_port_attr, 52, 4;
    state => 0, max_mtu => 4, active_mtu => 8, gid_tbl_len => 12, port_cap_flags => 16,
    max_msg_sz => 20, bad_pkey_cntr => 24, qkey_viol_cntr => 28, pkey_tbl_len => 32, lid => 34,
    sm_lid => 36, lmc => 38, max_vl_num => 39, sm_sl => 40, subnet_timeout => 41,
    init_type_reply => 42, active_width => 43, active_speed => 44, phys_state => 45,
    link_layer => 46, flags => 47, port_cap_flags2 => 48);
assert_layout!(_compat_ibv_port_attr, 48, 4; flags => 47);
assert_layout!(ibv_async_event, 16, 8; element => 0, event_type => 8);
