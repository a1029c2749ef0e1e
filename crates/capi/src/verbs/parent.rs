//! Thread domains and parent domains (`ibv_alloc_td`, `ibv_dealloc_td`,
//! `ibv_alloc_parent_domain`, reached through `verbs_context`).
//!
//! A parent domain stands for its protection domain wherever one is accepted
//! (QPs, CQs with `IBV_CQ_INIT_ATTR_MASK_PD`, MRs, SRQs, AHs) and keeps it
//! busy until `ibv_dealloc_pd` frees the parent domain. Its custom allocators
//! are accepted and never called: they exist so a provider can place the
//! queue buffers the hardware reads, and softrdma's queues are not in the
//! application's memory. A thread domain is a locking hint; every softrdma
//! object is thread-safe, so it only needs to exist.

use super::objects::{self as o, Kind, Pd, PdRole};
use crate::ffi::*;
use crate::guard::ret;
use core::ffi::c_int;

/// Extended-context slots for thread and parent domains.
pub(crate) fn install_vctx_ops(v: &mut verbs_context) {
    v.alloc_td = Some(alloc_td);
    v.dealloc_td = Some(dealloc_td);
    v.alloc_parent_domain = Some(alloc_parent_domain);
}

/// A thread domain.
#[repr(C)]
struct Td {
    td: ibv_td,
}

unsafe extern "C" fn alloc_td(
    context: *mut ibv_context,
    attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    o::with_ctx(context, ret::null, |_| {
        // SAFETY: `attr` is NULL or readable (verbs contract).
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return ret::null(libc::EINVAL);
        }
        o::publish(
            Td {
                td: ibv_td { context },
            },
            Kind::Td,
        )
        .cast()
    })
}

unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    o::destroy(td.cast(), Kind::Td, |_: &Td| Ok(()))
}

unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    o::with_ctx(context, ret::null, |_| {
        if attr.is_null() {
            return ret::null(libc::EINVAL);
        }
        // SAFETY: non-NULL, readable per the verbs contract.
        let a = unsafe { *attr };
        let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
        if a.comp_mask & !known != 0 || (!a.td.is_null() && !o::is_live(a.td as usize, Kind::Td)) {
            return ret::null(libc::EINVAL);
        }
        // SAFETY: registry-checked.
        let Some(p) = (unsafe { o::obj::<Pd>(a.pd.cast(), Kind::Pd) }) else {
            return ret::null(libc::EINVAL);
        };
        if p.role == PdRole::Parent {
            return ret::null(libc::EINVAL);
        }
        let h = p.h;
        if let Err(e) = p.engine.pd_acquire(h) {
            return ret::null(e.errno());
        }
        Pd::publish(context, h, &p.engine, PdRole::Parent)
    })
}
