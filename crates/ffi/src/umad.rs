//! `<infiniband/umad.h>` (libibumad 44): the MAD buffer header
//! (`struct ib_user_mad`) and the CA/port descriptions.

use crate::assert_layout;
use core::ffi::{c_char, c_int, c_uint};

/// `UMAD_CA_NAME_LEN`.
pub const UMAD_CA_NAME_LEN: usize = 20;
/// `UMAD_CA_MAX_PORTS`.
pub const UMAD_CA_MAX_PORTS: usize = 10;
/// `UMAD_USER_RMPP`: `umad_reg_attr.flags` asking for RMPP in user space.
pub const UMAD_USER_RMPP: u32 = 1;

/// `ib_mad_addr_t`: where a MAD goes or came from.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_mad_addr {
    pub qpn: u32,
    pub qkey: u32,
    pub lid: u16,
    pub sl: u8,
    pub path_bits: u8,
    pub grh_present: u8,
    pub gid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// Network byte order.
    pub gid: [u8; 16],
    pub flow_label: u32,
    pub pkey_index: u16,
    pub reserved: [u8; 6],
}
assert_layout!(ib_mad_addr, 44, 4; gid => 16, flow_label => 32, pkey_index => 36);

/// `struct ib_user_mad`: the header before the MAD in every umad buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_user_mad {
    pub agent_id: u32,
    pub status: u32,
    pub timeout_ms: u32,
    pub retries: u32,
    pub length: u32,
    pub addr: ib_mad_addr,
    // uint8_t data[0] follows.
}
assert_layout!(ib_user_mad, 64, 4; length => 16, addr => 20);

/// `umad_port_t`.
#[repr(C)]
#[derive(Debug)]
pub struct umad_port {
    pub ca_name: [c_char; UMAD_CA_NAME_LEN],
    pub portnum: c_int,
    pub base_lid: c_uint,
    pub lmc: c_uint,
    pub sm_lid: c_uint,
    pub sm_sl: c_uint,
    pub state: c_uint,
    pub phys_state: c_uint,
    pub rate: c_uint,
    pub capmask: u32,
    pub gid_prefix: u64,
    pub port_guid: u64,
    pub pkeys_size: c_uint,
    pub pkeys: *mut u16,
    pub link_layer: [c_char; UMAD_CA_NAME_LEN],
}
assert_layout!(umad_port, 112, 8;
    capmask => 52, gid_prefix => 56, port_guid => 64, pkeys_size => 72, pkeys => 80,
    link_layer => 88);

/// `umad_ca_t`.
#[repr(C)]
#[derive(Debug)]
pub struct umad_ca {
    pub ca_name: [c_char; UMAD_CA_NAME_LEN],
    pub node_type: c_uint,
    pub numports: c_int,
    pub fw_ver: [c_char; 20],
    pub ca_type: [c_char; 40],
    pub hw_ver: [c_char; 20],
    pub node_guid: u64,
    pub system_guid: u64,
    pub ports: [*mut umad_port; UMAD_CA_MAX_PORTS],
}
assert_layout!(umad_ca, 208, 8;
    node_type => 20, fw_ver => 28, ca_type => 48, hw_ver => 88, node_guid => 112,
    system_guid => 120, ports => 128);

/// `struct umad_device_node`: one entry of `umad_get_ca_device_list`.
#[repr(C)]
#[derive(Debug)]
pub struct umad_device_node {
    pub next: *mut umad_device_node,
    pub ca_name: *const c_char,
}
assert_layout!(umad_device_node, 16, 8; ca_name => 8);

/// `struct umad_reg_attr` (`umad_register2`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct umad_reg_attr {
    pub mgmt_class: u8,
    pub mgmt_class_version: u8,
    pub flags: u32,
    pub method_mask: [u64; 2],
    pub oui: u32,
    pub rmpp_version: u8,
}
assert_layout!(umad_reg_attr, 32, 8; flags => 4, method_mask => 8, oui => 24, rmpp_version => 28);
