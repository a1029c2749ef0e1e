//! The device librdmacm hands out: one context per process (`id->verbs`)
//! and its default protection domain (`id->pd`).

use crate::ffi::*;
use softrdma_engine::Engine;
use std::sync::{Arc, OnceLock};

struct Shared(usize, usize);

static CM_DEV: OnceLock<Shared> = OnceLock::new();

/// The context and default PD of librdmacm's device (opened on first use).
pub(crate) fn device(engine: &Arc<Engine>) -> (*mut ibv_context, *mut ibv_pd) {
    let s = CM_DEV.get_or_init(|| {
        let ctx =
            crate::verbs::device::open_context(engine.clone(), crate::verbs::device::the_device());
        // SAFETY: `ctx` was just created by this library.
        let pd = unsafe { crate::verbs::pd_mr::ibv_alloc_pd(ctx) };
        Shared(ctx as usize, pd as usize)
    });
    (s.0 as *mut ibv_context, s.1 as *mut ibv_pd)
}

/// `struct ibv_context **rdma_get_devices(int *num_devices)`: NULL-terminated.
///
/// # Safety
///
/// `num_devices` must be NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_get_devices(
    num_devices: *mut core::ffi::c_int,
) -> *mut *mut ibv_context {
    crate::guard::ffi_guard(
        || crate::guard::ret::null(libc::EIO),
        || {
            let engine = match Engine::global() {
                Ok(e) => e,
                Err(_) => return crate::guard::ret::null(libc::ENODEV),
            };
            let (ctx, _) = device(&engine);
            if !num_devices.is_null() {
                // SAFETY: non-NULL, writable per the contract.
                unsafe { num_devices.write(1) };
            }
            Box::into_raw(Box::new([ctx, core::ptr::null_mut()])).cast()
        },
    )
}

/// `void rdma_free_devices(struct ibv_context **list)`.
///
/// # Safety
///
/// `list` must come from `rdma_get_devices`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_rdma_free_devices(list: *mut *mut ibv_context) {
    crate::guard::ffi_guard(
        || (),
        || {
            if !list.is_null() {
                // SAFETY: allocated in rdma_get_devices as a boxed 2-element array.
                drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_context; 2]>()) });
            }
        },
    )
}
