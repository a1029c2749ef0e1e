//! Address handles (and the L2 resolution helper libmlx5 imports).

use core::ffi::c_int;

use super::{NOT_IMPLEMENTED, stubs};
use crate::ffi::*;
use crate::guard::ret;

stubs! {
    /// `struct ibv_ah *ibv_create_ah(struct ibv_pd *, struct ibv_ah_attr *)` (IBVERBS_1.1).
    fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah => ret::null(NOT_IMPLEMENTED);
    /// `int ibv_destroy_ah(struct ibv_ah *ah)` (IBVERBS_1.1).
    fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int => ret::pos(NOT_IMPLEMENTED);
    /// `int ibv_init_ah_from_wc(struct ibv_context *, uint8_t port_num, struct ibv_wc *,
    /// struct ibv_grh *, struct ibv_ah_attr *)` (IBVERBS_1.1): 0, or -1 with errno.
    fn ibv_init_ah_from_wc(context: *mut ibv_context, port_num: u8, wc: *mut ibv_wc, grh: *mut ibv_grh,
        ah_attr: *mut ibv_ah_attr) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *, struct ibv_wc *, struct ibv_grh *,
    /// uint8_t port_num)` (IBVERBS_1.1; udaddy, perftest UD).
    fn ibv_create_ah_from_wc(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut ibv_grh, port_num: u8)
        -> *mut ibv_ah => ret::null(NOT_IMPLEMENTED);
    /// `int ibv_resolve_eth_l2_from_gid(struct ibv_context *, struct ibv_ah_attr *,
    /// uint8_t eth_mac[6], uint16_t *vid)` (IBVERBS_1.1; imported by libmlx5).
    fn ibv_resolve_eth_l2_from_gid(context: *mut ibv_context, attr: *mut ibv_ah_attr, eth_mac: *mut u8,
        vid: *mut u16) -> c_int => ret::neg(NOT_IMPLEMENTED);
}
