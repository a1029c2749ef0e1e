//! `IBVERBS_PRIVATE_34`: the provider interface (rdma-core `libibverbs/driver.h`,
//! `cmd_ioctl.h`).
//!
//! Debian's perftest binaries link `libmlx5.so.1` and `libefa.so.1`; those
//! provider libraries import these symbols from *our* library (BIND_NOW, so
//! every one must exist), and their ELF constructors call
//! [`verbs_register_driver_34`] at load time. We never create a device for a
//! provider, so nothing else here is ever reached: the registration is a no-op
//! that does not even look at its argument, and the `ibv_cmd_*` kernel-command
//! helpers fail with `ENOSYS`. Provider-private types (`struct verbs_mr`,
//! command/response buffers, ...) are `void` pointers.
//!
//! `ibv_query_gid_type` is PRIVATE_34 too but is a real verb used by
//! `ibv_devinfo`; it lives in `verbs::device`.

use core::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::AtomicBool;

use super::{NOT_IMPLEMENTED, stubs};
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};

/// `bool verbs_allow_disassociate_destroy` — a *data* symbol (`OBJECT`, 1 byte)
/// in rdma-core, read by providers. `false`, as rdma-core without
/// `RDMAV_ALLOW_DISASSOC_DESTROY` in the environment. `AtomicBool` has the
/// layout of C `bool`.
#[unsafe(no_mangle)]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);

/// `void verbs_register_driver_34(const struct verbs_device_ops *ops)`: called
/// from provider constructors while the process loads. Deliberately a no-op
/// that never dereferences `ops`.
#[unsafe(no_mangle)]
pub extern "C" fn verbs_register_driver_34(ops: *const c_void) {
    let _ = ops;
    ffi_guard(|| (), || ())
}

/// `unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, struct ibv_command_buffer *link)`.
/// rdma-core adds the attribute counts of the linked buffers; we never build
/// command buffers, so `link` is not followed and `num_attrs` is returned.
#[unsafe(no_mangle)]
pub extern "C" fn __ioctl_final_num_attrs(num_attrs: c_uint, link: *mut c_void) -> c_uint {
    let _ = link;
    ffi_guard(|| num_attrs, || num_attrs)
}

/// `void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...)`.
/// Variadic in C; defined here with the fixed arguments only, which is sound
/// on x86_64 SysV for a callee that never reads the variadic part. Drops the
/// message.
#[unsafe(no_mangle)]
pub extern "C" fn __verbs_log(ctx: *mut verbs_context, level: u32, fmt: *const c_char) {
    let _ = (ctx, level, fmt);
    ffi_guard(|| (), || ())
}

/// `int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *,
/// const char *fnfmt, ...)` (variadic; fixed arguments only, see `__verbs_log`).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_read_ibdev_sysfs_file(
    buf: *mut c_char,
    size: usize,
    sysfs_dev: *mut c_void,
    fnfmt: *const c_char,
) -> c_int {
    let _ = (buf, size, sysfs_dev, fnfmt);
    ffi_guard(|| -1, || ret::neg(NOT_IMPLEMENTED))
}

stubs! {
    /// `void *_verbs_init_and_alloc_context(struct ibv_device *, int cmd_fd, size_t alloc_size,
    /// struct verbs_context *context_offset, uint32_t driver_id)`.
    fn _verbs_init_and_alloc_context(device: *mut ibv_device, cmd_fd: c_int, alloc_size: usize,
        context_offset: *mut verbs_context, driver_id: u32) -> *mut c_void => ret::null(NOT_IMPLEMENTED);
    /// `void verbs_uninit_context(struct verbs_context *)`.
    fn verbs_uninit_context(context: *mut verbs_context) => ();
    /// `void verbs_set_ops(struct verbs_context *, const struct verbs_context_ops *)`.
    fn verbs_set_ops(vctx: *mut verbs_context, ops: *const c_void) => ();
    /// `void verbs_init_cq(struct ibv_cq *, struct ibv_context *, struct ibv_comp_channel *,
    /// void *cq_context)`.
    fn verbs_init_cq(cq: *mut ibv_cq, context: *mut ibv_context, channel: *mut ibv_comp_channel,
        cq_context: *mut c_void) => ();
    /// `struct ibv_context *verbs_open_device(struct ibv_device *, void *private_data)`.
    fn verbs_open_device(device: *mut ibv_device, private_data: *mut c_void) -> *mut ibv_context
        => ret::null(NOT_IMPLEMENTED);
    /// `int execute_ioctl(struct ibv_context *, struct ibv_command_buffer *)`.
    fn execute_ioctl(context: *mut ibv_context, cmd: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);

    fn ibv_cmd_get_context(context: *mut verbs_context, cmd: *mut c_void, cmd_size: usize,
        resp: *mut c_void, resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_query_context(ctx: *mut ibv_context, driver: *mut c_void) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_flow_action_esp(ctx: *mut ibv_context, attr: *mut ibv_flow_action_esp_attr,
        flow_action: *mut c_void, driver: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_modify_flow_action_esp(flow_action: *mut c_void, attr: *mut ibv_flow_action_esp_attr,
        driver: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_query_device_any(context: *mut ibv_context, input: *const ibv_query_device_ex_input,
        attr: *mut ibv_device_attr_ex, attr_size: usize, resp: *mut c_void, resp_size: *mut usize) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr,
        cmd: *mut c_void, cmd_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_alloc_pd(context: *mut ibv_context, pd: *mut ibv_pd, cmd: *mut c_void, cmd_size: usize,
        resp: *mut c_void, resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_open_xrcd(context: *mut ibv_context, xrcd: *mut c_void, vxrcd_size: c_int,
        attr: *mut ibv_xrcd_init_attr, cmd: *mut c_void, cmd_size: usize, resp: *mut c_void,
        resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_close_xrcd(xrcd: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, hca_va: u64, access: c_int,
        vmr: *mut c_void, cmd: *mut c_void, cmd_size: usize, resp: *mut c_void, resp_size: usize) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_rereg_mr(vmr: *mut c_void, flags: u32, addr: *mut c_void, length: usize, hca_va: u64,
        access: c_int, pd: *mut ibv_pd, cmd: *mut c_void, cmd_sz: usize, resp: *mut c_void,
        resp_sz: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_dereg_mr(vmr: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_query_mr(pd: *mut ibv_pd, vmr: *mut c_void, mr_handle: u32) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_advise_mr(pd: *mut ibv_pd, advice: ibv_advise_mr_advice, flags: u32,
        sg_list: *mut ibv_sge, num_sge: u32) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int,
        access: c_int, vmr: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_alloc_mw(pd: *mut ibv_pd, type_: ibv_mw_type, mw: *mut ibv_mw, cmd: *mut c_void,
        cmd_size: usize, resp: *mut c_void, resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_dealloc_mw(mw: *mut ibv_mw) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_cq(context: *mut ibv_context, cqe: c_int, channel: *mut ibv_comp_channel,
        comp_vector: c_int, cq: *mut ibv_cq, cmd: *mut c_void, cmd_size: usize, resp: *mut c_void,
        resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_cq_ex(context: *mut ibv_context, cq_attr: *const ibv_cq_init_attr_ex,
        cq: *mut c_void, cmd: *mut c_void, cmd_size: usize, resp: *mut c_void, resp_size: usize,
        cmd_flags: u32) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_poll_cq(cq: *mut ibv_cq, ne: c_int, wc: *mut ibv_wc) -> c_int => ret::neg(NOT_IMPLEMENTED);
    fn ibv_cmd_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_resize_cq(cq: *mut ibv_cq, cqe: c_int, cmd: *mut c_void, cmd_size: usize,
        resp: *mut c_void, resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_modify_cq(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr, cmd: *mut c_void,
        cmd_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_srq(pd: *mut ibv_pd, srq: *mut ibv_srq, attr: *mut ibv_srq_init_attr,
        cmd: *mut c_void, cmd_size: usize, resp: *mut c_void, resp_size: usize) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_srq_ex(context: *mut ibv_context, srq: *mut c_void,
        attr_ex: *mut ibv_srq_init_attr_ex, cmd: *mut c_void, cmd_size: usize, resp: *mut c_void,
        resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_modify_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int,
        cmd: *mut c_void, cmd_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, cmd: *mut c_void,
        cmd_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_qp(pd: *mut ibv_pd, qp: *mut ibv_qp, attr: *mut ibv_qp_init_attr,
        cmd: *mut c_void, cmd_size: usize, resp: *mut c_void, resp_size: usize) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_qp_ex(context: *mut ibv_context, qp: *mut c_void,
        attr_ex: *mut ibv_qp_init_attr_ex, cmd: *mut c_void, cmd_size: usize, resp: *mut c_void,
        resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_qp_ex2(context: *mut ibv_context, qp: *mut c_void,
        qp_attr: *mut ibv_qp_init_attr_ex, cmd: *mut c_void, cmd_size: usize, resp: *mut c_void,
        resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_open_qp(context: *mut ibv_context, qp: *mut c_void, vqp_sz: c_int,
        attr: *mut ibv_qp_open_attr, cmd: *mut c_void, cmd_size: usize, resp: *mut c_void,
        resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_query_qp(qp: *mut ibv_qp, qp_attr: *mut ibv_qp_attr, attr_mask: c_int,
        qp_init_attr: *mut ibv_qp_init_attr, cmd: *mut c_void, cmd_size: usize) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int, cmd: *mut c_void,
        cmd_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_modify_qp_ex(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int,
        cmd: *mut c_void, cmd_size: usize, resp: *mut c_void, resp_size: usize) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_post_send(ibqp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_post_recv(ibqp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_post_srq_recv(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr)
        -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_ah(pd: *mut ibv_pd, ah: *mut ibv_ah, attr: *mut ibv_ah_attr, resp: *mut c_void,
        resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_destroy_ah(ah: *mut ibv_ah) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_flow(qp: *mut ibv_qp, flow_id: *mut ibv_flow, flow_attr: *mut ibv_flow_attr,
        ucmd: *mut c_void, ucmd_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_destroy_flow(flow_id: *mut ibv_flow) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_wq(context: *mut ibv_context, wq_init_attr: *mut ibv_wq_init_attr, wq: *mut ibv_wq,
        cmd: *mut c_void, cmd_size: usize, resp: *mut c_void, resp_size: usize) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_destroy_flow_action(action: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr, cmd: *mut c_void, cmd_size: usize)
        -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_destroy_wq(wq: *mut ibv_wq) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_rwq_ind_table(context: *mut ibv_context,
        init_attr: *mut ibv_rwq_ind_table_init_attr, rwq_ind_table: *mut ibv_rwq_ind_table,
        resp: *mut c_void, resp_size: usize) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_destroy_rwq_ind_table(rwq_ind_table: *mut ibv_rwq_ind_table) -> c_int
        => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_create_counters(context: *mut ibv_context, init_attr: *mut ibv_counters_init_attr,
        vcounters: *mut c_void, link: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_destroy_counters(vcounters: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_read_counters(vcounters: *mut c_void, counters_value: *mut u64, ncounters: u32,
        flags: u32, link: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_alloc_dm(ctx: *mut ibv_context, dm_attr: *const ibv_alloc_dm_attr, dm: *mut c_void,
        link: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_free_dm(dm: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
    fn ibv_cmd_reg_dm_mr(pd: *mut ibv_pd, dm: *mut c_void, offset: u64, length: usize, access: c_uint,
        vmr: *mut c_void, link: *mut c_void) -> c_int => ret::pos(NOT_IMPLEMENTED);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_driver_ignores_any_pointer() {
        // A dangling, misaligned pointer: must not be touched.
        verbs_register_driver_34(core::ptr::dangling::<c_void>());
        verbs_register_driver_34(core::ptr::null());
    }

    #[test]
    fn cmd_helpers_fail_with_enosys() {
        assert_eq!(ibv_cmd_dealloc_pd(core::ptr::null_mut()), libc::ENOSYS);
        assert_eq!(crate::guard::errno(), libc::ENOSYS);
        assert!(verbs_open_device(core::ptr::null_mut(), core::ptr::null_mut()).is_null());
        assert_eq!(__ioctl_final_num_attrs(3, 0x8 as *mut c_void), 3);
        assert!(!verbs_allow_disassociate_destroy.load(std::sync::atomic::Ordering::Relaxed));
    }
}
