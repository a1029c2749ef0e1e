//! Work requests, scatter/gather entries, completions and the GRH (`verbs.h`).

use core::ffi::{c_int, c_uint, c_void};

use super::*;

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_data_buf` (`ibv_wr_set_inline_data_list`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// The anonymous union after `ibv_send_wr::send_flags`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_imm {
    /// `*_WITH_IMM` opcodes: immediate data, big-endian.
    pub imm_data: u32,
    /// `*_INV` opcodes: the rkey to invalidate.
    pub invalidate_rkey: u32,
}

/// `ibv_send_wr.wr.rdma`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `ibv_send_wr.wr.atomic`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `ibv_send_wr.wr.ud`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// `ibv_send_wr.wr`: which member is live depends on the opcode / QP type.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// `ibv_send_wr.qp_type.xrc`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_xrc {
    pub remote_srqn: u32,
}

/// `ibv_send_wr.qp_type`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    pub xrc: ibv_send_wr_xrc,
}

/// `ibv_send_wr.bind_mw` (`IBV_WR_BIND_MW`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `ibv_send_wr.tso` (`IBV_WR_TSO`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The trailing anonymous union of `ibv_send_wr` (`bind_mw` | `tso`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_ext {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr` (128 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: ibv_wr_opcode,
    /// `enum ibv_send_flags`.
    pub send_flags: c_uint,
    /// C: anonymous `union { imm_data; invalidate_rkey; }`.
    pub imm: ibv_send_wr_imm,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    /// C: anonymous `union { bind_mw; tso; }`.
    pub ext: ibv_send_wr_ext,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `ibv_ops_wr.tm.add`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ops_wr_tm_add {
    pub recv_wr_id: u64,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub tag: u64,
    pub mask: u64,
}

/// `ibv_ops_wr.tm`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ops_wr_tm {
    pub unexpected_cnt: u32,
    pub handle: u32,
    pub add: ibv_ops_wr_tm_add,
}

/// `struct ibv_ops_wr` (tag-matching SRQ operations).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_ops_wr {
    pub wr_id: u64,
    pub next: *mut ibv_ops_wr,
    pub opcode: ibv_ops_wr_opcode,
    pub flags: c_int,
    pub tm: ibv_ops_wr_tm,
}

/// The anonymous union of `ibv_wc` after `byte_len`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_wc_imm {
    /// With `IBV_WC_WITH_IMM`: immediate data, big-endian.
    pub imm_data: u32,
    /// With `IBV_WC_WITH_INV`: the invalidated rkey.
    pub invalidated_rkey: u32,
}

/// `struct ibv_wc` (48 bytes; written by `ops.poll_cq`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: ibv_wc_status,
    pub opcode: ibv_wc_opcode,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// C: anonymous `union { imm_data; invalidated_rkey; }`.
    pub imm: ibv_wc_imm,
    pub qp_num: u32,
    pub src_qp: u32,
    /// `enum ibv_wc_flags`.
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_grh`: the 40 bytes a UD receive buffer starts with.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_grh {
    /// Big-endian.
    pub version_tclass_flow: u32,
    /// Big-endian.
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

union_debug!(
    ibv_send_wr_imm,
    ibv_send_wr_wr,
    ibv_send_wr_qp_type,
    ibv_send_wr_ext,
    ibv_wc_imm
);

zeroable!(
    ibv_sge,
    ibv_data_buf,
    ibv_send_wr_imm,
    ibv_send_wr_rdma,
    ibv_send_wr_atomic,
    ibv_send_wr_ud,
    ibv_send_wr_wr,
    ibv_send_wr_xrc,
    ibv_send_wr_qp_type,
    ibv_send_wr_bind_mw,
    ibv_send_wr_tso,
    ibv_send_wr_ext,
    ibv_send_wr,
    ibv_recv_wr,
    ibv_ops_wr_tm_add,
    ibv_ops_wr_tm,
    ibv_ops_wr,
    ibv_wc_imm,
    ibv_wc,
    ibv_grh,
);

assert_layout!(ibv_sge, 16, 8; addr => 0, length => 8, lkey => 12);
assert_layout!(ibv_data_buf, 16, 8);
assert_layout!(ibv_send_wr, 128, 8;
    wr_id => 0, next => 8, sg_list => 16, num_sge => 24, opcode => 28, send_flags => 32,
    imm.imm_data => 36, imm.invalidate_rkey => 36,
    wr.rdma.remote_addr => 40, wr.rdma.rkey => 48,
    wr.atomic.remote_addr => 40, wr.atomic.compare_add => 48, wr.atomic.swap => 56,
    wr.atomic.rkey => 64,
    wr.ud.ah => 40, wr.ud.remote_qpn => 48, wr.ud.remote_qkey => 52,
    qp_type.xrc.remote_srqn => 72, ext.bind_mw => 80, ext.tso => 80);
const _: () = {
    assert!(size_of::<ibv_send_wr_bind_mw>() == 48);
    assert!(size_of::<ibv_send_wr_tso>() == 16);
};
assert_layout!(ibv_recv_wr, 32, 8; wr_id => 0, next => 8, sg_list => 16, num_sge => 24);
assert_layout!(ibv_ops_wr, 72, 8; tm => 24, tm.add.recv_wr_id => 32, tm.add.mask => 64);
assert_layout!(ibv_wc, 48, 8;
    wr_id => 0, status => 8, opcode => 12, vendor_err => 16, byte_len => 20, imm.imm_data => 24,
    imm.invalidated_rkey => 24, qp_num => 28, src_qp => 32, wc_flags => 36, pkey_index => 40,
    slid => 42, sl => 44, dlid_path_bits => 45);
assert_layout!(ibv_grh, 40, 8;
    version_tclass_flow => 0, paylen => 4, next_hdr => 6, hop_limit => 7, sgid => 8, dgid => 24);
