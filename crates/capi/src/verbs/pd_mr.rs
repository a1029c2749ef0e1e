//! Protection domains and memory regions.

use super::conv::access_from_c;
use super::objects::{self as o, Kind, Mr, Pd};
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};
use core::ffi::{c_int, c_uint, c_void};

/// `struct ibv_pd *ibv_alloc_pd(struct ibv_context *)`.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    ffi_guard(
        || ret::null(libc::EIO),
        || {
            // SAFETY: registry-checked.
            let Some(c) = (unsafe { o::ctx(context) }) else {
                return ret::null(libc::EINVAL);
            };
            match c.engine.with(|ep, _| ep.alloc_pd()) {
                Ok(h) => {
                    let p = o::publish(
                        Pd {
                            pd: ibv_pd {
                                context,
                                handle: h.0,
                            },
                            h,
                            engine: c.engine.clone(),
                        },
                        Kind::Pd,
                    );
                    p.cast()
                }
                Err(e) => ret::null(e.errno()),
            }
        },
    )
}

/// `int ibv_dealloc_pd(struct ibv_pd *)`: EBUSY while objects use the PD.
///
/// # Safety
///
/// `pd` must not be used after a successful call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    ffi_guard(
        || ret::pos(libc::EIO),
        || {
            // SAFETY: registry-checked.
            let Some(p) = (unsafe { o::obj::<Pd>(pd.cast(), Kind::Pd) }) else {
                return ret::pos(libc::EINVAL);
            };
            let h = p.h;
            match p.engine.with(|ep, _| ep.dealloc_pd(h)) {
                Ok(()) => {
                    // SAFETY: live Pd from `publish`, released by the engine above.
                    unsafe { o::retire(pd.cast::<Pd>()) };
                    0
                }
                Err(e) => ret::pos(e.errno()),
            }
        },
    )
}

fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: registry-checked.
    let Some(p) = (unsafe { o::obj::<Pd>(pd.cast(), Kind::Pd) }) else {
        return ret::null(libc::EINVAL);
    };
    let access = access_from_c(access);
    if access.contains(softrdma_engine::transport::Access::ON_DEMAND) {
        // No page faults to resolve in user space: ODP is not offered.
        return ret::null(libc::EOPNOTSUPP);
    }
    let h = p.h;
    match p
        .engine
        .with(|ep, _| ep.reg_mr(h, addr as u64, length as u64, iova, access))
    {
        Ok(m) => {
            let mr = ibv_mr {
                context: p.pd.context,
                pd,
                addr,
                length,
                handle: m.lkey,
                lkey: m.lkey,
                rkey: m.rkey,
            };
            o::publish(
                Mr {
                    mr,
                    engine: p.engine.clone(),
                },
                Kind::Mr,
            )
            .cast()
        }
        Err(e) => ret::null(e.errno()),
    }
}

/// `ibv_reg_mr@IBVERBS_1.1`: registers `[addr, addr+length)` addressed as itself.
///
/// The memory must stay valid until `ibv_dereg_mr`, as with any RDMA device.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    ffi_guard(
        || ret::null(libc::EIO),
        || reg(pd, addr, length, addr as u64, access as c_uint),
    )
}

/// `ibv_reg_mr_iova`: registers `[addr, addr+length)` addressed as `iova`.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    ffi_guard(
        || ret::null(libc::EIO),
        || reg(pd, addr, length, iova, access as c_uint),
    )
}

/// `ibv_reg_mr_iova2` (what the `ibv_reg_mr` macro calls with non-constant flags).
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    ffi_guard(
        || ret::null(libc::EIO),
        || reg(pd, addr, length, iova, access),
    )
}

/// `int ibv_dereg_mr(struct ibv_mr *)`.
///
/// # Safety
///
/// `mr` must not be used after a successful call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    ffi_guard(
        || ret::pos(libc::EIO),
        || {
            // SAFETY: registry-checked.
            let Some(m) = (unsafe { o::obj::<Mr>(mr.cast(), Kind::Mr) }) else {
                return ret::pos(libc::EINVAL);
            };
            let key = m.mr.lkey;
            match m.engine.with(|ep, _| ep.dereg_mr(key)) {
                Ok(()) => {
                    // SAFETY: live Mr from `publish`, deregistered above.
                    unsafe { o::retire(mr.cast::<Mr>()) };
                    0
                }
                Err(e) => ret::pos(e.errno()),
            }
        },
    )
}
