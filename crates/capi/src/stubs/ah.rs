//! Address handles (and the L2 resolution helper libmlx5 imports).

use core::ffi::c_int;

use super::{NOT_IMPLEMENTED, stubs};
use crate::ffi::*;
use crate::guard::ret;

stubs! {
    /// `int ibv_resolve_eth_l2_from_gid(struct ibv_context *, struct ibv_ah_attr *,
    /// uint8_t eth_mac[6], uint16_t *vid)` (IBVERBS_1.1; imported by libmlx5).
    fn ibv_resolve_eth_l2_from_gid(context: *mut ibv_context, attr: *mut ibv_ah_attr, eth_mac: *mut u8,
        vid: *mut u16) -> c_int => ret::neg(NOT_IMPLEMENTED);
}
