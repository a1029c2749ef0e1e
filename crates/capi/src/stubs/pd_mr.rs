//! Memory-region variants softrdma does not offer (dma-buf). `ibv_rereg_mr`,
//! PD/MR import and device memory are real (`verbs::rereg`, `verbs::import`,
//! `verbs::dm`).

use core::ffi::c_int;

use super::stubs;
use crate::ffi::*;
use crate::guard::ret;

stubs! {
    /// `struct ibv_mr *ibv_reg_dmabuf_mr(pd, uint64_t offset, size_t length, uint64_t iova,
    /// int fd, int access)` (IBVERBS_1.12).
    fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int)
        -> *mut ibv_mr => ret::null(libc::EOPNOTSUPP);
}
