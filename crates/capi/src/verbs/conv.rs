//! Conversions between rdma-core's C structs and softrdma's Rust types.
//!
//! Most are shared with softrdma's rdma-core backend, which converts the
//! same structs the other way (`softrdma::rdma_core_conv`); what is defined
//! here is where the C ABI's rules differ.

use crate::ffi::*;
use core::ffi::c_int;
use softrdma::rdma_core_conv as shared;
use softrdma_engine::DeviceAttr;
use softrdma_engine::transport::{Access, Mtu, QpAttr, QpState};

pub(crate) use shared::{
    av_from_c, av_to_c, cap_from_c, cap_to_c, port_attr_to_c as port_attr, put_str, wc_to_c,
};

/// The device attributes `ibv_query_device` reports.
pub(crate) fn device_attr(mut a: DeviceAttr) -> ibv_device_attr {
    // Memory windows (type 1 and 2B) are offered through the C API (`mw.rs`).
    a.max_mw = a.max_mw.max(a.max_mr);
    a.device_cap_flags |= IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    // XRC domains, SRQs and QPs (`xrc.rs`).
    a.device_cap_flags |= IBV_DEVICE_XRC;
    shared::device_attr_to_c(&a)
}

/// Bits of `ibv_access_flags` that are hints softrdma ignores (IBV_ACCESS_OPTIONAL_RANGE).
const OPTIONAL_ACCESS: u32 = 0x3FF0_0000;

pub(crate) fn access_from_c(a: u32) -> Access {
    Access(a & !OPTIONAL_ACCESS)
}

/// Converts the attributes a mask names; a value the mask names but the
/// enum does not know is EINVAL. An enum the mask does not name, the access
/// hints and `sq_draining` (output only) keep their defaults.
pub(crate) fn qp_attr_from_c(a: &ibv_qp_attr, mask: u32) -> Result<QpAttr, c_int> {
    use softrdma_engine::transport::QpAttrMask as M;
    /// `value` if the mask names `field` (EINVAL if unknown), else `default`.
    fn named<T>(mask: M, field: M, value: Option<T>, default: T) -> Result<T, c_int> {
        if mask.contains(field) {
            value.ok_or(libc::EINVAL)
        } else {
            Ok(default)
        }
    }
    let (m, d) = (M(mask), QpAttr::default());
    Ok(QpAttr {
        qp_state: named(m, M::STATE, QpState::from_u32(a.qp_state), d.qp_state)?,
        cur_qp_state: named(
            m,
            M::CUR_STATE,
            QpState::from_u32(a.cur_qp_state),
            d.cur_qp_state,
        )?,
        path_mtu: named(m, M::PATH_MTU, Mtu::from_u32(a.path_mtu), d.path_mtu)?,
        qp_access_flags: access_from_c(a.qp_access_flags),
        sq_draining: d.sq_draining,
        ..shared::qp_attr_from_c(a)
    })
}

/// QP attributes as `ibv_query_qp` reports them.
pub(crate) fn qp_attr_to_c(a: &QpAttr) -> ibv_qp_attr {
    let mut d = shared::qp_attr_to_c(a);
    // What this library has always reported here: 2, rdma-core's
    // IBV_MIG_ARMED (softrdma's backend reports IBV_MIG_MIGRATED).
    d.path_mig_state = IBV_MIG_ARMED;
    d
}
