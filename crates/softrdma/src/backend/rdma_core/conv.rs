//! Conversions between rdma-core's C structs and softrdma's plain Rust types
//! (no `unsafe`: union members are read by `sys.rs` and handed in).
//!
//! Both directions live here because two libraries need them: this backend
//! reads what the system's rdma-core returns, and the C ABI crate
//! (`softrdma-capi`, the drop-in `libibverbs.so.1`) writes the same structs
//! for C programs. The crate root re-exports the module for it as
//! `softrdma::rdma_core_conv`, hidden from the docs: it is not part of the API.

use core::ffi::{c_char, c_int};
use softrdma_engine::cm_proto::{ConnParam, UdParam};
use softrdma_engine::{DeviceAttr, DeviceInfo, PortAttr};
use softrdma_ffi::{self as f, Zeroable};
use softrdma_transport::{
    Access, AddressVector, Mtu, QpAttr, QpCap, QpState, Wc, WcFlags, WcOpcode, WcStatus,
};
use std::net::{IpAddr, Ipv4Addr};

/// A C `char` array up to its NUL, as text.
pub fn c_chars(s: &[c_char]) -> String {
    let bytes: Vec<u8> = s
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Copies `s` into a C `char` array, NUL-terminated and truncated to fit.
pub fn put_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    if let Some(z) = dst.get_mut(n) {
        *z = 0;
    }
}

/// How one field converts between its softrdma type `R` and its C type `C`:
/// the kinds of field [`mirror!`] lists.
trait Field<R, C> {
    fn to_c(r: &R) -> C;
    fn from_c(c: &C) -> R;
}

/// The same type on both sides.
enum Same {}

impl<T: Copy> Field<T, T> for Same {
    fn to_c(r: &T) -> T {
        *r
    }
    fn from_c(c: &T) -> T {
        *c
    }
}

/// A limit: `u32` in softrdma, a C `int` (clamped to `INT_MAX`; a negative
/// one reads as 0).
enum Count {}

impl Field<u32, c_int> for Count {
    fn to_c(r: &u32) -> c_int {
        (*r).min(i32::MAX as u32) as c_int
    }
    fn from_c(c: &c_int) -> u32 {
        u32::try_from(*c).unwrap_or(0)
    }
}

/// A GUID: big-endian in C.
enum BigEndian {}

impl Field<u64, u64> for BigEndian {
    fn to_c(r: &u64) -> u64 {
        r.to_be()
    }
    fn from_c(c: &u64) -> u64 {
        u64::from_be(*c)
    }
}

/// Text: a NUL-terminated `char` array in C (truncated to fit).
enum Text {}

impl<const N: usize> Field<String, [c_char; N]> for Text {
    fn to_c(r: &String) -> [c_char; N] {
        let mut d = [0; N];
        put_str(&mut d, r);
        d
    }
    fn from_c(c: &[c_char; N]) -> String {
        c_chars(c)
    }
}

/// Defines the conversions both ways between a softrdma struct and its C
/// mirror from one list of the fields they share (the same name on both
/// sides), grouped by [`Field`] kind. The C struct starts zeroed; the
/// softrdma value starts as `$start` (the engine's attribute structs are
/// non-exhaustive: they cannot be built field by field).
macro_rules! mirror {
    (
        $(#[$to_doc:meta])* fn $to_c:ident(&$rust:ty) -> $c:ty;
        $(#[$from_doc:meta])* fn $from_c:ident(&$c_in:ty) -> $rust_out:ty = $start:expr;
        $($kind:ident: $($field:ident),+;)+
    ) => {
        $(#[$to_doc])*
        pub fn $to_c(a: &$rust) -> $c {
            let mut d = <$c as Zeroable>::zeroed();
            $($(d.$field = <$kind as Field<_, _>>::to_c(&a.$field);)+)+
            d
        }

        $(#[$from_doc])*
        // Setting the listed fields one by one is the point (`$start` may be `Default`).
        #[allow(clippy::field_reassign_with_default)]
        pub fn $from_c(c: &$c_in) -> $rust_out {
            let mut d = $start;
            $($(d.$field = <$kind as Field<_, _>>::from_c(&c.$field);)+)+
            d
        }
    };
}

/// The attributes of a device that does not exist: what the non-exhaustive
/// engine structs start from when read from C.
fn unspecified_device() -> DeviceInfo {
    DeviceInfo::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

mirror! {
    /// softrdma's [`DeviceAttr`] as `struct ibv_device_attr`.
    fn device_attr_to_c(&DeviceAttr) -> f::ibv_device_attr;
    /// `struct ibv_device_attr` as softrdma's [`DeviceAttr`].
    fn device_attr(&f::ibv_device_attr) -> DeviceAttr = unspecified_device().attr();
    Text: fw_ver;
    BigEndian: node_guid, sys_image_guid;
    Same: max_mr_size, page_size_cap, vendor_id, vendor_part_id, hw_ver, device_cap_flags,
        atomic_cap, max_pkeys, local_ca_ack_delay, phys_port_cnt;
    Count: max_qp, max_qp_wr, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd,
        max_qp_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_mw, max_mcast_grp,
        max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_srq, max_srq_wr,
        max_srq_sge;
}

mirror! {
    /// softrdma's [`PortAttr`] as `struct ibv_port_attr`.
    fn port_attr_to_c(&PortAttr) -> f::ibv_port_attr;
    /// `struct ibv_port_attr` as softrdma's [`PortAttr`].
    fn port_attr(&f::ibv_port_attr) -> PortAttr = unspecified_device().port_attr(0);
    Same: state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
        port_cap_flags2;
}

mirror! {
    /// Work queue capacities as `struct ibv_qp_cap`.
    fn cap_to_c(&QpCap) -> f::ibv_qp_cap;
    /// `struct ibv_qp_cap` as work queue capacities.
    fn cap_from_c(&f::ibv_qp_cap) -> QpCap = QpCap::default();
    Same: max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
}

/// An address vector as `struct ibv_ah_attr`.
pub fn av_to_c(a: &AddressVector) -> f::ibv_ah_attr {
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
pub fn av_from_c(a: &f::ibv_ah_attr) -> AddressVector {
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

/// QP attributes as `struct ibv_qp_attr` (the mask says which ones count).
pub fn qp_attr_to_c(a: &QpAttr) -> f::ibv_qp_attr {
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
pub fn qp_attr_from_c(a: &f::ibv_qp_attr) -> QpAttr {
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

/// A completion as `struct ibv_wc`.
pub fn wc_to_c(w: &Wc) -> f::ibv_wc {
    let imm = if w.wc_flags.contains(WcFlags::WITH_INV) {
        f::ibv_wc_imm {
            invalidated_rkey: w.imm_data,
        }
    } else {
        // softrdma keeps immediate data as the number on the wire; C stores it big-endian.
        f::ibv_wc_imm {
            imm_data: w.imm_data.to_be(),
        }
    };
    f::ibv_wc {
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

/// A completion; `imm` is the raw `imm_data`/`invalidated_rkey` union word.
pub fn wc_from_c(w: &f::ibv_wc, imm: u32) -> Wc {
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

/// Private data as the pointer and length of `struct rdma_conn_param` or
/// `rdma_ud_param`: it borrows `data`, at most 255 bytes are passed.
fn private_data_to_c(data: &[u8]) -> (*const core::ffi::c_void, u8) {
    let len = data.len().min(usize::from(u8::MAX));
    let ptr = if len == 0 {
        core::ptr::null()
    } else {
        data.as_ptr().cast()
    };
    (ptr, len as u8)
}

/// Connection parameters as `struct rdma_conn_param`; its private data
/// pointer borrows `p.private_data` (at most 255 bytes are passed).
pub fn conn_param_to_c(p: &ConnParam) -> f::rdma_conn_param {
    let mut c = f::rdma_conn_param::zeroed();
    (c.private_data, c.private_data_len) = private_data_to_c(&p.private_data);
    c.responder_resources = p.responder_resources;
    c.initiator_depth = p.initiator_depth;
    c.flow_control = u8::from(p.flow_control);
    c.retry_count = p.retry_count;
    c.rnr_retry_count = p.rnr_retry_count;
    c.srq = u8::from(p.srq);
    c.qp_num = p.qp_num;
    c
}

/// `struct rdma_conn_param` of an event, with its private data copied out.
pub fn conn_param_from_c(c: &f::rdma_conn_param, private_data: Vec<u8>) -> ConnParam {
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

/// UD parameters as `struct rdma_ud_param`; its private data pointer
/// borrows `u.private_data` (at most 255 bytes are passed).
pub fn ud_param_to_c(u: &UdParam) -> f::rdma_ud_param {
    let mut d = f::rdma_ud_param::zeroed();
    (d.private_data, d.private_data_len) = private_data_to_c(&u.private_data);
    d.ah_attr = av_to_c(&u.ah_attr);
    d.qp_num = u.qp_num;
    d.qkey = u.qkey;
    d
}

/// `struct rdma_ud_param` of an event, with its private data copied out.
pub fn ud_param_from_c(u: &f::rdma_ud_param, private_data: Vec<u8>) -> UdParam {
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
    fn device_and_port_attributes_round_trip() {
        let info = DeviceInfo::new("10.1.2.3".parse().unwrap());
        let a = info.attr();
        assert_eq!(device_attr(&device_attr_to_c(&a)), a);
        let p = info.port_attr(2);
        assert_eq!(port_attr(&port_attr_to_c(&p)), p);
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
