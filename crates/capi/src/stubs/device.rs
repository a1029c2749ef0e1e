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

use core::ffi::{c_char, c_int};

use super::{NOT_IMPLEMENTED, stub_hit, stubs};
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};

/// `struct ibv_device **ibv_get_device_list(int *num_devices)` (IBVERBS_1.1).
/// Like rdma-core, first stores 0 in `*num_devices` (if non-NULL); then fails
/// as rdma-core does on a machine without RDMA support: `NULL` with
/// `errno = ENOSYS` (`ibv_devices` prints "Failed to get IB devices list").
///
/// # Safety
///
/// `num_devices` must be NULL or valid for writing an `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    ffi_guard(
        || ret::null(libc::EIO),
        || {
            if !num_devices.is_null() {
                // SAFETY: non-NULL, and the caller passes a writable `int`.
                unsafe { num_devices.write(0) };
            }
            stub_hit("ibv_get_device_list");
            ret::null(NOT_IMPLEMENTED)
        },
    )
}

stubs! {
    /// `void ibv_free_device_list(struct ibv_device **list)` (IBVERBS_1.1).
    fn ibv_free_device_list(list: *mut *mut ibv_device) => ();
    /// `const char *ibv_get_device_name(struct ibv_device *device)` (IBVERBS_1.1).
    fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char
        => ret::null_const(NOT_IMPLEMENTED);
    /// `int ibv_get_device_index(struct ibv_device *device)` (IBVERBS_1.9):
    /// the kernel index, or -1.
    fn ibv_get_device_index(device: *mut ibv_device) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `__be64 ibv_get_device_guid(struct ibv_device *device)` (IBVERBS_1.1).
    fn ibv_get_device_guid(device: *mut ibv_device) -> u64 => 0;
    /// `struct ibv_context *ibv_open_device(struct ibv_device *device)` (IBVERBS_1.1).
    fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context => ret::null(NOT_IMPLEMENTED);
    /// `int ibv_close_device(struct ibv_context *context)` (IBVERBS_1.1).
    fn ibv_close_device(context: *mut ibv_context) -> c_int => ret::pos(NOT_IMPLEMENTED);
    /// `struct ibv_context *ibv_import_device(int cmd_fd)` (IBVERBS_1.10).
    fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context => ret::null(libc::EOPNOTSUPP);
    /// `int ibv_query_device(struct ibv_context *, struct ibv_device_attr *)` (IBVERBS_1.1).
    fn ibv_query_device(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    /// `int ibv_query_port(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *)`
    /// (IBVERBS_1.1). Must write at most 48 bytes.
    fn ibv_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut _compat_ibv_port_attr)
        -> c_int => ret::pos(NOT_IMPLEMENTED);
    /// `int ibv_query_gid(struct ibv_context *, uint8_t port_num, int index, union ibv_gid *)`
    /// (IBVERBS_1.1).
    fn ibv_query_gid(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut ibv_gid) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int _ibv_query_gid_ex(ctx, uint32_t port_num, uint32_t gid_index,
    /// struct ibv_gid_entry *, uint32_t flags, size_t entry_size)` (IBVERBS_1.11):
    /// 0 or a positive errno (`ENODATA` for an empty entry).
    fn _ibv_query_gid_ex(
        context: *mut ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> c_int => ret::pos(NOT_IMPLEMENTED);
    /// `ssize_t _ibv_query_gid_table(ctx, struct ibv_gid_entry *, size_t max_entries,
    /// uint32_t flags, size_t entry_size)` (IBVERBS_1.11): count or negative errno.
    fn _ibv_query_gid_table(
        context: *mut ibv_context,
        entries: *mut ibv_gid_entry,
        max_entries: usize,
        flags: u32,
        entry_size: usize,
    ) -> isize => -(NOT_IMPLEMENTED as isize);
    /// `int ibv_query_gid_type(struct ibv_context *, uint8_t port_num, unsigned int index,
    /// enum ibv_gid_type_sysfs *type)` (IBVERBS_PRIVATE_34, imported by `ibv_devinfo`).
    fn ibv_query_gid_type(
        context: *mut ibv_context,
        port_num: u8,
        index: core::ffi::c_uint,
        type_: *mut ibv_gid_type_sysfs,
    ) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int ibv_query_pkey(struct ibv_context *, uint8_t port_num, int index, __be16 *pkey)`
    /// (IBVERBS_1.1).
    fn ibv_query_pkey(context: *mut ibv_context, port_num: u8, index: c_int, pkey: *mut u16) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int ibv_get_pkey_index(struct ibv_context *, uint8_t port_num, __be16 pkey)`
    /// (IBVERBS_1.5): the index, or -1 with errno.
    fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int ibv_get_async_event(struct ibv_context *, struct ibv_async_event *)`
    /// (IBVERBS_1.1): 0, or -1 with errno.
    fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `void ibv_ack_async_event(struct ibv_async_event *event)` (IBVERBS_1.1).
    fn ibv_ack_async_event(event: *mut ibv_async_event) => ();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_list_stub_zeroes_count_and_fails_with_enosys() {
        let mut n: c_int = 7;
        // SAFETY: `n` is a valid, writable int.
        let list = unsafe { ibv_get_device_list(&mut n) };
        assert!(list.is_null());
        assert_eq!(n, 0);
        assert_eq!(crate::guard::errno(), libc::ENOSYS);
        // SAFETY: NULL is allowed.
        assert!(unsafe { ibv_get_device_list(core::ptr::null_mut()) }.is_null());
        assert!(ibv_open_device(core::ptr::null_mut()).is_null());
        // Int verbs return the positive errno.
        assert_eq!(ibv_close_device(core::ptr::null_mut()), libc::ENOSYS);
    }
}
