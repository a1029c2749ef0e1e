//! Address handles.

use super::conv::{av_from_c, av_to_c};
use super::objects::{self as o, Ah, Kind, Pd};
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};
use core::ffi::c_int;
use softrdma_engine::transport::{AddressVector, WcFlags};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `struct ibv_ah *ibv_create_ah(struct ibv_pd *, struct ibv_ah_attr *)`.
/// RoCE routes by GID: the attributes must carry a GRH with a valid source GID index.
///
/// # Safety
///
/// `attr` must be valid for reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    ffi_guard(
        || ret::null(libc::EIO),
        || {
            if attr.is_null() {
                return ret::null(libc::EINVAL);
            }
            // SAFETY: non-NULL, readable per the contract.
            let av = av_from_c(unsafe { &*attr });
            o::with_obj(pd.cast(), Kind::Pd, ret::null, |p: &Pd| create(p, pd, av))
        },
    )
}

/// An AH on `p` (`pd` is its pointer).
fn create(p: &Pd, pd: *mut ibv_pd, av: AddressVector) -> *mut ibv_ah {
    // RoCE needs a GRH; the device has port 1 only (the kernel's
    // rdma_check_ah_attr: EINVAL for any other port).
    if !av.is_global || av.port_num != 1 || usize::from(av.sgid_index) >= p.engine.gids().len() {
        return ret::null(libc::EINVAL);
    }
    let h = p.h;
    if let Err(e) = p.engine.pd_acquire(h) {
        return ret::null(e.errno());
    }
    o::publish(
        Ah {
            ah: ibv_ah {
                context: p.pd.context,
                pd,
                handle: 0,
            },
            av,
        },
        Kind::Ah,
    )
    .cast()
}

/// `int ibv_destroy_ah(struct ibv_ah *)`.
///
/// # Safety
///
/// `ah` must not be used after a successful call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    o::destroy(ah.cast(), Kind::Ah, |a: &Ah| {
        // SAFETY: the AH's PD outlives it (dealloc is EBUSY while the AH is counted).
        if let Some(p) = unsafe { o::obj::<Pd>(a.ah.pd.cast(), Kind::Pd) } {
            let h = p.h;
            p.engine.pd_release(h);
        }
        Ok(())
    })
}

/// The reply address vector for a UD receive: the sender's address from the
/// 40-byte GRH area softrdma wrote (IPv4: 20 zero bytes, then the IPv4 header).
fn reply_av(ctx_gids: &[IpAddr], grh: &[u8; 40]) -> Option<AddressVector> {
    let (src, dst) = if grh[20] >> 4 == 4 && grh[..20].iter().all(|b| *b == 0) {
        let s: [u8; 4] = grh[32..36].try_into().ok()?;
        let d: [u8; 4] = grh[36..40].try_into().ok()?;
        (IpAddr::V4(Ipv4Addr::from(s)), IpAddr::V4(Ipv4Addr::from(d)))
    } else if grh[0] >> 4 == 6 {
        let s: [u8; 16] = grh[8..24].try_into().ok()?;
        let d: [u8; 16] = grh[24..40].try_into().ok()?;
        (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)))
    } else {
        return None;
    };
    let mut av = AddressVector::to_ip(src);
    av.sgid_index = ctx_gids.iter().position(|g| *g == dst).unwrap_or(0) as u8;
    Some(av)
}

/// Reads the GRH area a UD receive left.
///
/// # Safety
///
/// `grh` must point to 40 readable bytes.
unsafe fn grh_bytes(grh: *const ibv_grh) -> [u8; 40] {
    let mut b = [0u8; 40];
    // SAFETY: the caller guarantees 40 readable bytes.
    unsafe { core::ptr::copy_nonoverlapping(grh.cast::<u8>(), b.as_mut_ptr(), 40) };
    b
}

/// `int ibv_init_ah_from_wc(ctx, port, wc, grh, ah_attr)`: 0, or -1 with errno.
///
/// # Safety
///
/// `wc` and `grh` must be readable, `ah_attr` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    o::with_ctx(context, ret::neg, |c| {
        if wc.is_null() || grh.is_null() || ah_attr.is_null() || port_num != 1 {
            return ret::neg(libc::EINVAL);
        }
        // SAFETY: non-NULL, readable per the contract.
        if !WcFlags(unsafe { (*wc).wc_flags }).contains(WcFlags::GRH) {
            return ret::neg(libc::EINVAL);
        }
        // SAFETY: non-NULL, 40 readable bytes per the contract.
        let g = unsafe { grh_bytes(grh) };
        match reply_av(&c.engine.gids(), &g) {
            Some(av) => {
                // SAFETY: non-NULL, writable per the contract.
                unsafe { ah_attr.write(av_to_c(&av)) };
                0
            }
            None => ret::neg(libc::EINVAL),
        }
    })
}

/// `struct ibv_ah *ibv_create_ah_from_wc(pd, wc, grh, port)`.
///
/// # Safety
///
/// `wc` and `grh` must be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    o::with_obj(pd.cast(), Kind::Pd, ret::null, |p: &Pd| {
        let mut attr = ibv_ah_attr::zeroed();
        // SAFETY: forwarded contract; `attr` is a local.
        if unsafe { ibv_init_ah_from_wc(p.pd.context, port_num, wc, grh, &mut attr) } != 0 {
            return core::ptr::null_mut();
        }
        create(p, pd, av_from_c(&attr))
    })
}
