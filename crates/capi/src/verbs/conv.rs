//! Conversions between rdma-core's C structs and softrdma's Rust types.

use crate::ffi::*;
use core::ffi::c_int;
use softrdma_engine::transport::{
    Access, AddressVector, Mtu, QpAttr, QpCap, QpState, Wc, WcFlags, WcOpcode,
};
use softrdma_engine::{DeviceAttr, PortAttr};

/// Copies `s` into a fixed C char array, NUL-terminated and truncated to fit.
pub(crate) fn put_str(dst: &mut [core::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as core::ffi::c_char;
    }
    if let Some(z) = dst.get_mut(n) {
        *z = 0;
    }
}

pub(crate) fn device_attr(a: &DeviceAttr) -> ibv_device_attr {
    let mut d = ibv_device_attr::zeroed();
    put_str(&mut d.fw_ver, &a.fw_ver);
    d.node_guid = a.node_guid.to_be();
    d.sys_image_guid = a.sys_image_guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = a.page_size_cap;
    d.vendor_id = a.vendor_id;
    d.vendor_part_id = a.vendor_part_id;
    d.hw_ver = a.hw_ver;
    let i = |v: u32| v.min(i32::MAX as u32) as c_int;
    d.max_qp = i(a.max_qp);
    d.max_qp_wr = i(a.max_qp_wr);
    d.device_cap_flags = a.device_cap_flags;
    d.max_sge = i(a.max_sge);
    d.max_sge_rd = i(a.max_sge_rd);
    d.max_cq = i(a.max_cq);
    d.max_cqe = i(a.max_cqe);
    d.max_mr = i(a.max_mr);
    d.max_pd = i(a.max_pd);
    d.max_qp_rd_atom = i(a.max_qp_rd_atom);
    d.max_res_rd_atom = i(a.max_res_rd_atom);
    d.max_qp_init_rd_atom = i(a.max_qp_init_rd_atom);
    d.atomic_cap = a.atomic_cap;
    // Memory windows (type 1 and 2B) are offered through the C API (`mw.rs`).
    d.max_mw = i(a.max_mw.max(a.max_mr));
    d.device_cap_flags |= IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    d.max_mcast_grp = i(a.max_mcast_grp);
    d.max_mcast_qp_attach = i(a.max_mcast_qp_attach);
    d.max_total_mcast_qp_attach = i(a.max_total_mcast_qp_attach);
    d.max_ah = i(a.max_ah);
    d.max_srq = i(a.max_srq);
    d.max_srq_wr = i(a.max_srq_wr);
    d.max_srq_sge = i(a.max_srq_sge);
    d.max_pkeys = a.max_pkeys;
    d.local_ca_ack_delay = a.local_ca_ack_delay;
    d.phys_port_cnt = a.phys_port_cnt;
    d
}

pub(crate) fn port_attr(p: &PortAttr) -> ibv_port_attr {
    let mut d = ibv_port_attr::zeroed();
    d.state = p.state;
    d.max_mtu = p.max_mtu;
    d.active_mtu = p.active_mtu;
    d.gid_tbl_len = p.gid_tbl_len;
    d.port_cap_flags = p.port_cap_flags;
    d.max_msg_sz = p.max_msg_sz;
    d.bad_pkey_cntr = p.bad_pkey_cntr;
    d.qkey_viol_cntr = p.qkey_viol_cntr;
    d.pkey_tbl_len = p.pkey_tbl_len;
    d.lid = p.lid;
    d.sm_lid = p.sm_lid;
    d.lmc = p.lmc;
    d.max_vl_num = p.max_vl_num;
    d.sm_sl = p.sm_sl;
    d.subnet_timeout = p.subnet_timeout;
    d.init_type_reply = p.init_type_reply;
    d.active_width = p.active_width;
    d.active_speed = p.active_speed;
    d.phys_state = p.phys_state;
    d.link_layer = p.link_layer;
    d.flags = p.flags;
    d.port_cap_flags2 = p.port_cap_flags2;
    d
}

pub(crate) fn wc_to_c(w: &Wc) -> ibv_wc {
    let imm = if w.wc_flags.contains(WcFlags::WITH_INV) {
        ibv_wc_imm {
            invalidated_rkey: w.imm_data,
        }
    } else {
        // The transport keeps immediate data as the wire word; C wants it big-endian in memory.
        ibv_wc_imm {
            imm_data: w.imm_data.to_be(),
        }
    };
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status.as_u32(),
        opcode: w.opcode.as_u32(),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.0,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

/// Reads an `ibv_wc` back (for `ibv_create_ah_from_wc`).
pub(crate) fn wc_from_c(w: &ibv_wc) -> Wc {
    let mut r = Wc::new(
        w.wr_id,
        softrdma_engine::transport::WcStatus::from_u32(w.status)
            .unwrap_or(softrdma_engine::transport::WcStatus::GeneralErr),
        WcOpcode::from_u32(w.opcode).unwrap_or(WcOpcode::Recv),
        w.qp_num,
    );
    r.src_qp = w.src_qp;
    r.wc_flags = WcFlags(w.wc_flags);
    r.byte_len = w.byte_len;
    r
}

pub(crate) fn av_from_c(a: &ibv_ah_attr) -> AddressVector {
    AddressVector {
        // SAFETY-free read of a plain-bytes union member.
        dgid: gid_bytes(&a.grh.dgid),
        sgid_index: a.grh.sgid_index,
        flow_label: a.grh.flow_label,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        is_global: a.is_global != 0,
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
    }
}

pub(crate) fn av_to_c(a: &AddressVector) -> ibv_ah_attr {
    let mut d = ibv_ah_attr::zeroed();
    d.grh.dgid = ibv_gid { raw: a.dgid };
    d.grh.sgid_index = a.sgid_index;
    d.grh.flow_label = a.flow_label;
    d.grh.hop_limit = a.hop_limit;
    d.grh.traffic_class = a.traffic_class;
    d.is_global = u8::from(a.is_global);
    d.dlid = a.dlid;
    d.sl = a.sl;
    d.src_path_bits = a.src_path_bits;
    d.static_rate = a.static_rate;
    d.port_num = a.port_num;
    d
}

/// The 16 bytes of a GID.
pub(crate) fn gid_bytes(g: &ibv_gid) -> [u8; 16] {
    // SAFETY: both union members are plain bytes of the same 16-byte storage.
    unsafe { g.raw }
}

/// Bits of `ibv_access_flags` that are hints softrdma ignores (IBV_ACCESS_OPTIONAL_RANGE).
const OPTIONAL_ACCESS: u32 = 0x3FF0_0000;

pub(crate) fn access_from_c(a: u32) -> Access {
    Access(a & !OPTIONAL_ACCESS)
}

pub(crate) fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

pub(crate) fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// Converts the attributes a mask names; a value the mask names but the
/// enum does not know is EINVAL.
pub(crate) fn qp_attr_from_c(a: &ibv_qp_attr, mask: u32) -> Result<QpAttr, c_int> {
    use softrdma_engine::transport::QpAttrMask as M;
    let m = M(mask);
    let state = |v: u32| QpState::from_u32(v).ok_or(libc::EINVAL);
    let mut r = QpAttr::default();
    if m.contains(M::STATE) {
        r.qp_state = state(a.qp_state)?;
    }
    if m.contains(M::CUR_STATE) {
        r.cur_qp_state = state(a.cur_qp_state)?;
    }
    if m.contains(M::PATH_MTU) {
        r.path_mtu = Mtu::from_u32(a.path_mtu).ok_or(libc::EINVAL)?;
    }
    r.qkey = a.qkey;
    r.rq_psn = a.rq_psn;
    r.sq_psn = a.sq_psn;
    r.dest_qp_num = a.dest_qp_num;
    r.qp_access_flags = access_from_c(a.qp_access_flags);
    r.cap = cap_from_c(&a.cap);
    r.ah_attr = av_from_c(&a.ah_attr);
    r.pkey_index = a.pkey_index;
    r.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    r.max_rd_atomic = a.max_rd_atomic;
    r.max_dest_rd_atomic = a.max_dest_rd_atomic;
    r.min_rnr_timer = a.min_rnr_timer;
    r.port_num = a.port_num;
    r.timeout = a.timeout;
    r.retry_cnt = a.retry_cnt;
    r.rnr_retry = a.rnr_retry;
    Ok(r)
}

pub(crate) fn qp_attr_to_c(a: &QpAttr) -> ibv_qp_attr {
    let mut d = ibv_qp_attr::zeroed();
    d.qp_state = a.qp_state.as_u32();
    d.cur_qp_state = a.cur_qp_state.as_u32();
    d.path_mtu = a.path_mtu.as_u32();
    d.path_mig_state = 2; // IBV_MIG_MIGRATED
    d.qkey = a.qkey;
    d.rq_psn = a.rq_psn;
    d.sq_psn = a.sq_psn;
    d.dest_qp_num = a.dest_qp_num;
    d.qp_access_flags = a.qp_access_flags.0;
    d.cap = cap_to_c(&a.cap);
    d.ah_attr = av_to_c(&a.ah_attr);
    d.pkey_index = a.pkey_index;
    d.en_sqd_async_notify = u8::from(a.en_sqd_async_notify);
    d.sq_draining = u8::from(a.sq_draining);
    d.max_rd_atomic = a.max_rd_atomic;
    d.max_dest_rd_atomic = a.max_dest_rd_atomic;
    d.min_rnr_timer = a.min_rnr_timer;
    d.port_num = a.port_num;
    d.timeout = a.timeout;
    d.retry_cnt = a.retry_cnt;
    d.rnr_retry = a.rnr_retry;
    d
}
