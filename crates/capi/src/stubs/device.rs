//! Devices and contexts: device list, open/close, device/port/GID/P_Key
//! queries, async events.
//!
//! Implementation notes for whoever replaces these (see `shared/reference/
//! abi.md` §2.1–2.2, §4): `ibv_open_device` allocates a
//! [`verbs_context`](crate::ffi::verbs_context) and returns `&vctx.context`
//! with `abi_compat = VERBS_ABI_IS_EXTENDED`, `sz = 648`, the live `ops`
//! slots set (`poll_cq`, `req_notify_cq`, `post_send`, `post_recv`,
//! `post_srq_recv`) and `vctx.query_port`/`vctx.query_device_ex` set. The
//! exported `ibv_query_port` writes only the 48-byte `_compat_ibv_port_attr`.

use core::ffi::c_int;

use super::stubs;
use crate::ffi::*;
use crate::guard::ret;

stubs! {
    /// `struct ibv_context *ibv_import_device(int cmd_fd)` (IBVERBS_1.10).
    fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context => ret::null(libc::EOPNOTSUPP);
}
