//! `<infiniband/sa.h>`: path records (`rdma_route::path_rec`,
//! `RDMA_OPTION_IB_PATH`).

use core::ffi::c_int;

use super::{assert_layout, ibv_gid, zeroable};

/// `struct ibv_sa_path_rec` (`__be` fields are big-endian).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ibv_path_record` (wire-format path record, big-endian fields).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_path_record {
    pub service_id: u64,
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub flowlabel_hoplimit: u32,
    pub tclass: u8,
    pub reversible_numpath: u8,
    pub pkey: u16,
    pub qosclass_sl: u16,
    pub mtu: u8,
    pub rate: u8,
    pub packetlifetime: u8,
    pub preference: u8,
    pub reserved: [u8; 6],
}

/// `struct ibv_path_data` (`rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH)`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_path_data {
    pub flags: u32,
    pub reserved: u32,
    pub path: ibv_path_record,
}

pub const IBV_PATH_RECORD_REVERSIBLE: u8 = 0x80;
pub const IBV_PATH_FLAG_GMP: u32 = 1 << 0;
pub const IBV_PATH_FLAG_PRIMARY: u32 = 1 << 1;
pub const IBV_PATH_FLAG_ALTERNATE: u32 = 1 << 2;
pub const IBV_PATH_FLAG_OUTBOUND: u32 = 1 << 3;
pub const IBV_PATH_FLAG_INBOUND: u32 = 1 << 4;
pub const IBV_PATH_FLAG_INBOUND_REVERSE: u32 = 1 << 5;
pub const IBV_PATH_FLAG_BIDIRECTIONAL: u32 = IBV_PATH_FLAG_OUTBOUND | IBV_PATH_FLAG_INBOUND_REVERSE;

zeroable!(ibv_sa_path_rec, ibv_path_record, ibv_path_data);

assert_layout!(ibv_sa_path_rec, 64, 8;
    dgid => 0, sgid => 16, dlid => 32, slid => 34, raw_traffic => 36, flow_label => 40,
    hop_limit => 44, traffic_class => 45, reversible => 48, numb_path => 52, pkey => 54, sl => 56,
    mtu_selector => 57, mtu => 58, rate_selector => 59, rate => 60,
    packet_life_time_selector => 61, packet_life_time => 62, preference => 63);
assert_layout!(ibv_path_record, 64, 8; dgid => 8, sgid => 24, dlid => 40, reserved => 58);
assert_layout!(ibv_path_data, 72, 8; path => 8);
