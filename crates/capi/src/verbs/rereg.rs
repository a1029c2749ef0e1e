//! `ibv_rereg_mr`: change a region's PD, memory or rights in place. The keys
//! stay the same (the transport changes the region, `Endpoint::rereg_mr`), so
//! a peer holding the R_Key keeps using it. Argument checks and return codes
//! follow rdma-core's `verbs.c`: `IBV_REREG_MR_ERR_INPUT` for bad arguments,
//! `IBV_REREG_MR_ERR_CMD` when the device refuses, errno set either way.

use super::conv::access_from_c;
use super::objects::{self as o, Kind, Mr, Pd};
use crate::ffi::*;
use crate::guard::set_errno;
use core::ffi::{c_int, c_uint, c_void};
use softrdma_engine::transport::{Access, Rereg};

fn fail(code: c_int, e: c_int) -> c_int {
    set_errno(e);
    code
}

/// `int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
/// size_t length, int access)` (IBVERBS_1.1): 0 or an `IBV_REREG_MR_ERR_*` code.
///
/// # Safety
///
/// `mr` and (with `IBV_REREG_MR_CHANGE_PD`) `pd` are checked against the
/// registry; with `IBV_REREG_MR_CHANGE_TRANSLATION`, `[addr, addr + length)`
/// must stay valid memory until the region is deregistered. `pd` is not
/// looked at without `IBV_REREG_MR_CHANGE_PD`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let bad_input = |e| fail(IBV_REREG_MR_ERR_INPUT, e);
    o::with_obj(mr.cast(), Kind::Mr, bad_input, |m: &Mr| {
        if flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0
            || (flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 && (length == 0 || addr.is_null()))
            || (access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0)
        {
            return bad_input(libc::EINVAL);
        }
        if super::dm::is_dm_mr(m) {
            // A region over device memory has no host translation to change.
            return fail(IBV_REREG_MR_ERR_CMD, libc::EOPNOTSUPP);
        }
        let mut r = Rereg::default();
        if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            // SAFETY: registry-checked.
            let Some(p) = (unsafe { o::obj::<Pd>(pd.cast(), Kind::Pd) }) else {
                return bad_input(libc::EINVAL);
            };
            r.pd = Some(p.h);
        }
        if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
            r.translation = Some((addr as u64, length as u64, addr as u64));
        }
        if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
            r.access = Some(access_from_c(access as c_uint));
        }
        let key = m.mr.lkey;
        if r.translation.is_some() || r.access.is_some() {
            let Some(old) = m.engine.query_mr(key) else {
                return fail(IBV_REREG_MR_ERR_CMD, libc::EINVAL);
            };
            // As ibv_reg_mr: the region as it will be must be mapped, and
            // writable for writable rights (EFAULT), before any peer can
            // reach it. Checked outside the engine lock: it reads
            // /proc/self/maps, and the progress thread needs the lock.
            // An on-demand region's memory is checked only when used.
            let (host, len, _) = r.translation.unwrap_or((old.host, old.length, old.iova));
            let access = r.access.unwrap_or(old.access);
            let write = super::pd_mr::writes_memory(access);
            if !access.contains(Access::ON_DEMAND)
                && let Err(e) = softrdma_engine::check_mapped(host, len, write)
            {
                return fail(IBV_REREG_MR_ERR_CMD, e);
            }
        }
        let rereg = m.engine.rereg_mr(key, r).map_err(|e| e.errno());
        if let Err(e) = rereg {
            return fail(IBV_REREG_MR_ERR_CMD, e);
        }
        // SAFETY: a live MR (checked above); these are plain fields
        // applications read, updated as rdma-core does on success.
        unsafe {
            if flags & IBV_REREG_MR_CHANGE_PD != 0 {
                (&raw mut (*mr).pd).write(pd);
            }
            if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
                (&raw mut (*mr).addr).write(addr);
                (&raw mut (*mr).length).write(length);
            }
        }
        0
    })
}
