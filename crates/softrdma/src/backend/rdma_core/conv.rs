//! Conversions between rdma-core's C structs and softrdma's plain Rust types
//! (no `unsafe`: union members are read by `sys.rs` and handed in).

use softrdma_engine::cm_proto::{ConnParam, UdParam};
use softrdma_engine::{DeviceAttr, DeviceInfo, PortAttr};
use softrdma_ffi::{self as f, Zeroable};
use softrdma_transport::{
    Access, AddressVector, Mtu, QpAttr, QpCap, QpState, Wc, WcFlags, WcOpcode, WcStatus,
};
use std::net::{IpAddr, Ipv4Addr};

/// A C `char` array up to its NUL, as text.
pub(crate) fn c_chars(s: &[core::ffi::c_char]) -> String {
    let bytes: Vec<u8> = s
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `struct ibv_device_attr` as softrdma's [`DeviceAttr`].
pub(crate) fn device_attr(a: &f::ibv_device_attr) -> DeviceAttr {
    let u = |v: core::ffi::c_int| u32::try_from(v).unwrap_or(0);
    // DeviceAttr is non-exhaustive: start from a value and set every field.
    let mut d = DeviceInfo::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).attr();
    d.fw_ver = c_chars(&a.fw_ver);
    d.node_guid = u64::from_be(a.node_guid);
    d.sys_image_guid = u64::from_be(a.sys_image_guid);
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = a.page_size_cap;
    d.vendor_id = a.vendor_id;
    d.vendor_part_id = a.vendor_part_id;
    d.hw_ver = a.hw_ver;
    d.max_qp = u(a.max_qp);
    d.max_qp_wr = u(a.max_qp_wr);
    d.device_cap_flags = a.device_cap_flags;
    d.max_sge = u(a.max_sge);
    d.max_sge_rd = u(a.max_sge_rd);
    d.max_cq = u(a.max_cq);
    d.max_cqe = u(a.max_cqe);
    d.max_mr = u(a.max_mr);
    d.max_pd = u(a.max_pd);
    d.max_qp_rd_atom = u(a.max_qp_rd_atom);
    d.max_res_rd_atom = u(a.max_res_rd_atom);
    d.max_qp_init_rd_atom = u(a.max_qp_init_rd_atom);
    d.atomic_cap = a.atomic_cap;
    d.max_mw = u(a.max_mw);
    d.max_mcast_grp = u(a.max_mcast_grp);
    d.max_mcast_qp_attach = u(a.max_mcast_qp_attach);
    d.max_total_mcast_qp_attach = u(a.max_total_mcast_qp_attach);
    d.max_ah = u(a.max_ah);
    d.max_srq = u(a.max_srq);
    d.max_srq_wr = u(a.max_srq_wr);
    d.max_srq_sge = u(a.max_srq_sge);
    d.max_pkeys = a.max_pkeys;
    d.local_ca_ack_delay = a.local_ca_ack_delay;
    d.phys_port_cnt = a.phys_port_cnt;
    d
}

/// `struct ibv_port_attr` as softrdma's [`PortAttr`].
pub(crate) fn port_attr(p: &f::ibv_port_attr) -> PortAttr {
    let mut d = DeviceInfo::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).port_attr(0);
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

/// An address vector as `struct ibv_ah_attr`.
pub(crate) fn av_to_c(a: &AddressVector) -> f::ibv_ah_attr {
    let mut d = f::ibv_ah_attr::zeroed();
    d.grh.dgid = f::ibv_gid { raw: a.dgid };
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

/// `struct ibv_ah_attr` as an address vector.
pub(crate) fn av_from_c(a: &f::ibv_ah_attr) -> AddressVector {
    AddressVector {
        dgid: a.grh.dgid.raw(),
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

/// What identifies an address handle in a PD's cache: every field of the
/// address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct AvKey {
    dgid: [u8; 16],
    flow_label: u32,
    dlid: u16,
    fields: [u8; 8],
}

impl AvKey {
    pub(crate) fn of(a: &AddressVector) -> AvKey {
        AvKey {
            dgid: a.dgid,
            flow_label: a.flow_label,
            dlid: a.dlid,
            fields: [
                a.sgid_index,
                a.hop_limit,
                a.traffic_class,
                u8::from(a.is_global),
                a.sl,
                a.src_path_bits,
                a.static_rate,
                a.port_num,
            ],
        }
    }
}

pub(crate) fn cap_to_c(c: &QpCap) -> f::ibv_qp_cap {
    f::ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

pub(crate) fn cap_from_c(c: &f::ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// QP attributes as `struct ibv_qp_attr` (the mask says which ones count).
pub(crate) fn qp_attr_to_c(a: &QpAttr) -> f::ibv_qp_attr {
    let mut d = f::ibv_qp_attr::zeroed();
    d.qp_state = a.qp_state.as_u32();
    d.cur_qp_state = a.cur_qp_state.as_u32();
    d.path_mtu = a.path_mtu.as_u32();
    d.path_mig_state = f::IBV_MIG_MIGRATED;
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

/// `struct ibv_qp_attr` as QP attributes (values the enums do not know
/// become the defaults).
pub(crate) fn qp_attr_from_c(a: &f::ibv_qp_attr) -> QpAttr {
    let d = QpAttr::default();
    QpAttr {
        qp_state: QpState::from_u32(a.qp_state).unwrap_or(d.qp_state),
        cur_qp_state: QpState::from_u32(a.cur_qp_state).unwrap_or(d.cur_qp_state),
        path_mtu: Mtu::from_u32(a.path_mtu).unwrap_or(d.path_mtu),
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: Access(a.qp_access_flags),
        cap: cap_from_c(&a.cap),
        ah_attr: av_from_c(&a.ah_attr),
        pkey_index: a.pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify != 0,
        sq_draining: a.sq_draining != 0,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
    }
}

/// A completion; `imm` is the raw `imm_data`/`invalidated_rkey` union word.
pub(crate) fn wc_from_c(w: &f::ibv_wc, imm: u32) -> Wc {
    let flags = WcFlags(w.wc_flags);
    let opcode = WcOpcode::from_u32(w.opcode).unwrap_or(if w.opcode & 0x80 != 0 {
        WcOpcode::Recv
    } else {
        WcOpcode::Send
    });
    let mut r = Wc::new(
        w.wr_id,
        WcStatus::from_u32(w.status).unwrap_or(WcStatus::GeneralErr),
        opcode,
        w.qp_num,
    );
    r.vendor_err = w.vendor_err;
    r.byte_len = w.byte_len;
    // softrdma keeps immediate data as the number on the wire; C stores it big-endian.
    r.imm_data = if flags.contains(WcFlags::WITH_INV) {
        imm
    } else if flags.contains(WcFlags::WITH_IMM) {
        u32::from_be(imm)
    } else {
        0
    };
    r.src_qp = w.src_qp;
    r.wc_flags = flags;
    r.pkey_index = w.pkey_index;
    r.slid = w.slid;
    r.sl = w.sl;
    r.dlid_path_bits = w.dlid_path_bits;
    r
}

/// Connection parameters as `struct rdma_conn_param`; its private data
/// pointer borrows `p.private_data` (at most 255 bytes are passed).
pub(crate) fn conn_param_to_c(p: &ConnParam) -> f::rdma_conn_param {
    let len = p.private_data.len().min(usize::from(u8::MAX));
    f::rdma_conn_param {
        private_data: if len == 0 {
            core::ptr::null()
        } else {
            p.private_data.as_ptr().cast()
        },
        private_data_len: len as u8,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: u8::from(p.flow_control),
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: u8::from(p.srq),
        qp_num: p.qp_num,
    }
}

/// `struct rdma_conn_param` of an event, with its private data copied out.
pub(crate) fn conn_param_from_c(c: &f::rdma_conn_param, private_data: Vec<u8>) -> ConnParam {
    ConnParam {
        private_data,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        flow_control: c.flow_control != 0,
        retry_count: c.retry_count,
        rnr_retry_count: c.rnr_retry_count,
        srq: c.srq != 0,
        qp_num: c.qp_num,
    }
}

/// `struct rdma_ud_param` of an event, with its private data copied out.
pub(crate) fn ud_param_from_c(u: &f::rdma_ud_param, private_data: Vec<u8>) -> UdParam {
    UdParam {
        private_data,
        ah_attr: av_from_c(&u.ah_attr),
        qp_num: u.qp_num,
        qkey: u.qkey,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_attr_round_trip() {
        let mut a = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: Mtu::M4096,
            dest_qp_num: 0x12_3456,
            rq_psn: 77,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            qp_access_flags: Access::REMOTE_WRITE | Access::REMOTE_READ,
            ah_attr: AddressVector::to_ip("10.1.2.3".parse().unwrap()),
            ..QpAttr::default()
        };
        a.ah_attr.sgid_index = 3;
        assert_eq!(qp_attr_from_c(&qp_attr_to_c(&a)), a);
    }

    #[test]
    fn immediate_data_is_host_order() {
        let mut w = f::ibv_wc::zeroed();
        w.wc_flags = f::IBV_WC_WITH_IMM;
        w.opcode = 128;
        let wc = wc_from_c(&w, 0x0102_0304u32.to_be());
        assert_eq!((wc.imm_data, wc.opcode), (0x0102_0304, WcOpcode::Recv));
        w.wc_flags = f::IBV_WC_WITH_INV;
        assert_eq!(wc_from_c(&w, 0xabcd).imm_data, 0xabcd);
    }

    #[test]
    fn av_keys_tell_destinations_apart() {
        let a = AddressVector::to_ip("10.0.0.1".parse().unwrap());
        let mut b = a;
        assert_eq!(AvKey::of(&a), AvKey::of(&b));
        b.sgid_index = 1;
        assert_ne!(AvKey::of(&a), AvKey::of(&b));
        assert_eq!(av_from_c(&av_to_c(&b)), b);
    }
}
