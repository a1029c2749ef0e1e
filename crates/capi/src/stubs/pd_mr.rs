//! Protection domains and memory regions (plus PD/MR/DM import).

use core::ffi::{c_int, c_void};

use super::{NOT_IMPLEMENTED, stubs};
use crate::ffi::*;
use crate::guard::ret;

stubs! {
    /// `struct ibv_mr *ibv_reg_dmabuf_mr(pd, uint64_t offset, size_t length, uint64_t iova,
    /// int fd, int access)` (IBVERBS_1.12).
    fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int)
        -> *mut ibv_mr => ret::null(libc::EOPNOTSUPP);
    /// `int ibv_rereg_mr(struct ibv_mr *, int flags, struct ibv_pd *, void *addr, size_t length,
    /// int access)` (IBVERBS_1.1): 0 or an `IBV_REREG_MR_ERR_*` code with errno.
    fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize,
        access: c_int) -> c_int => { crate::guard::set_errno(NOT_IMPLEMENTED); IBV_REREG_MR_ERR_INPUT };
    /// `struct ibv_pd *ibv_import_pd(struct ibv_context *, uint32_t pd_handle)` (IBVERBS_1.10).
    fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd
        => ret::null(libc::EOPNOTSUPP);
    /// `void ibv_unimport_pd(struct ibv_pd *pd)` (IBVERBS_1.10).
    fn ibv_unimport_pd(pd: *mut ibv_pd) => ();
    /// `struct ibv_mr *ibv_import_mr(struct ibv_pd *, uint32_t mr_handle)` (IBVERBS_1.10).
    fn ibv_import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr => ret::null(libc::EOPNOTSUPP);
    /// `void ibv_unimport_mr(struct ibv_mr *mr)` (IBVERBS_1.10).
    fn ibv_unimport_mr(mr: *mut ibv_mr) => ();
    /// `struct ibv_dm *ibv_import_dm(struct ibv_context *, uint32_t dm_handle)` (IBVERBS_1.13).
    fn ibv_import_dm(context: *mut ibv_context, dm_handle: u32) -> *mut ibv_dm
        => ret::null(libc::EOPNOTSUPP);
    /// `void ibv_unimport_dm(struct ibv_dm *dm)` (IBVERBS_1.13).
    fn ibv_unimport_dm(dm: *mut ibv_dm) => ();
}
