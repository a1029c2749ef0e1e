//! Memory-region variants softrdma does not offer (dma-buf, device memory
//! import). `ibv_rereg_mr` and PD/MR import are real (`verbs::rereg`,
//! `verbs::import`).

use core::ffi::c_int;

use super::stubs;
use crate::ffi::*;
use crate::guard::ret;

stubs! {
    /// `struct ibv_mr *ibv_reg_dmabuf_mr(pd, uint64_t offset, size_t length, uint64_t iova,
    /// int fd, int access)` (IBVERBS_1.12).
    fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int)
        -> *mut ibv_mr => ret::null(libc::EOPNOTSUPP);
    /// `struct ibv_dm *ibv_import_dm(struct ibv_context *, uint32_t dm_handle)` (IBVERBS_1.13).
    fn ibv_import_dm(context: *mut ibv_context, dm_handle: u32) -> *mut ibv_dm
        => ret::null(libc::EOPNOTSUPP);
    /// `void ibv_unimport_dm(struct ibv_dm *dm)` (IBVERBS_1.13).
    fn ibv_unimport_dm(dm: *mut ibv_dm) => ();
}
