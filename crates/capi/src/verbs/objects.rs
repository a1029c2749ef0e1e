//! The C objects softrdma hands out, and the registry that validates every
//! pointer an application passes back.
//!
//! Each object is a `#[repr(C)]` struct whose first field is the rdma-core
//! struct the application sees, followed by softrdma's own fields. Pointers
//! are checked against a registry of live objects (with their kind) before
//! they are dereferenced, so a NULL, destroyed or wrong-kind pointer gives
//! EINVAL instead of a crash.

use crate::ffi::*;
use crate::guard::{ret, with_arg};
use rustc_hash::FxHashMap as HashMap;
use softrdma_engine::transport::{
    AddressVector, CqHandle, CqRing, Mr as TransportMr, PdHandle, QpType, Qpn, SrqHandle,
    VerbsError, Wc,
};
use softrdma_engine::{CompChannel, Engine};
use std::cell::Cell;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

/// What a registered pointer points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Context,
    Pd,
    Mr,
    Cq,
    Channel,
    Qp,
    Srq,
    Ah,
    Mw,
    Dm,
    Td,
    Xrcd,
    CmChannel,
    CmId,
    CmEvent,
}

#[derive(Default)]
struct Registry {
    live: HashMap<usize, Kind>,
    /// Engine handles back to the objects (for completion and async events).
    cqs: HashMap<u32, usize>,
    qps: HashMap<u32, usize>,
    srqs: HashMap<u32, usize>,
}

static REG: LazyLock<RwLock<Registry>> = LazyLock::new(|| RwLock::new(Registry::default()));

fn reg() -> std::sync::RwLockReadGuard<'static, Registry> {
    REG.read().unwrap_or_else(|p| p.into_inner())
}
fn reg_mut() -> std::sync::RwLockWriteGuard<'static, Registry> {
    REG.write().unwrap_or_else(|p| p.into_inner())
}

/// Bumped (under the registry's write lock) whenever an object is
/// registered or unregistered: a pointer found live at generation `g` is
/// live as long as the generation is still `g` ([`is_live`]'s cache).
static LIVE_GENERATION: AtomicU64 = AtomicU64::new(1);

/// Per thread: the objects it last found live, with the generation then.
/// A busy poller passes the same CQ and QP on every call; the registry's
/// read lock was ~4 % of a spinning `ib_send_lat` (perf record).
const LIVE_CACHE: usize = 4;
thread_local! {
    // One cell per entry: a hit reads the entries it compares, not a copy
    // of all four.
    static LAST_LIVE: [Cell<(usize, Kind, u64)>; LIVE_CACHE] =
        const { [const { Cell::new((0, Kind::Context, 0)) }; LIVE_CACHE] };
}

/// Records a live object.
pub(crate) fn register(ptr: usize, kind: Kind) {
    let mut r = reg_mut();
    r.live.insert(ptr, kind);
    LIVE_GENERATION.fetch_add(1, Ordering::Release);
}

/// Forgets an object (before it is freed).
pub(crate) fn unregister(ptr: usize) {
    let mut r = reg_mut();
    r.live.remove(&ptr);
    LIVE_GENERATION.fetch_add(1, Ordering::Release);
}

/// True if `ptr` is a live object of `kind`.
pub(crate) fn is_live(ptr: usize, kind: Kind) -> bool {
    if ptr == 0 {
        return false;
    }
    // Read before the lookup: a change after it shows as a newer generation.
    let g = LIVE_GENERATION.load(Ordering::Acquire);
    let entry = (ptr, kind, g);
    if LAST_LIVE.with(|c| c.iter().any(|e| e.get() == entry)) {
        return true;
    }
    let live = reg().live.get(&ptr) == Some(&kind);
    if live {
        LAST_LIVE.with(|c| {
            for i in (1..LIVE_CACHE).rev() {
                c[i].set(c[i - 1].get());
            }
            c[0].set(entry);
        });
    }
    live
}

/// Every live object of `kind` (e.g. the contexts `ibv_import_device` searches).
pub(crate) fn live_of(kind: Kind) -> Vec<usize> {
    reg()
        .live
        .iter()
        .filter(|(_, k)| **k == kind)
        .map(|(p, _)| *p)
        .collect()
}

pub(crate) fn map_cq(h: CqHandle, ptr: Option<usize>) {
    let mut r = reg_mut();
    match ptr {
        Some(p) => r.cqs.insert(h.0, p),
        None => r.cqs.remove(&h.0),
    };
}
pub(crate) fn map_qp(q: Qpn, ptr: Option<usize>) {
    let mut r = reg_mut();
    match ptr {
        Some(p) => r.qps.insert(q, p),
        None => r.qps.remove(&q),
    };
}
pub(crate) fn map_srq(h: SrqHandle, ptr: Option<usize>) {
    let mut r = reg_mut();
    match ptr {
        Some(p) => r.srqs.insert(h.0, p),
        None => r.srqs.remove(&h.0),
    };
}
pub(crate) fn cq_ptr(h: CqHandle) -> Option<usize> {
    reg().cqs.get(&h.0).copied()
}
pub(crate) fn qp_ptr(q: Qpn) -> Option<usize> {
    reg().qps.get(&q).copied()
}
pub(crate) fn srq_ptr(h: SrqHandle) -> Option<usize> {
    reg().srqs.get(&h.0).copied()
}

/// A context: `verbs_context` (whose tail is the `ibv_context` applications
/// see) plus the engine.
#[repr(C)]
pub(crate) struct Ctx {
    pub(crate) vctx: verbs_context,
    pub(crate) engine: Arc<Engine>,
    /// `context.cmd_fd`: a memfd of this context (or the fd `ibv_import_device`
    /// was given), so a dup of it names the context (`import.rs`).
    pub(crate) cmd_fd: Option<OwnedFd>,
    /// `context.async_fd`: this context's own queue of the device's async
    /// events (None if no eventfd could be made: the engine's is shared).
    pub(crate) async_queue: Option<Arc<softrdma_engine::AsyncQueue>>,
}

/// Offset of `ibv_context` inside [`Ctx`].
pub(crate) const CTX_OFFSET: usize = core::mem::offset_of!(verbs_context, context);

/// What an `ibv_pd` pointer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PdRole {
    /// From `ibv_alloc_pd`: `ibv_dealloc_pd` frees the engine's PD.
    Owned,
    /// From `ibv_import_pd`: another handle on a PD of this process;
    /// `ibv_unimport_pd` forgets it, `ibv_dealloc_pd` frees the PD.
    Imported,
    /// From `ibv_alloc_parent_domain`: stands for its PD (which it keeps
    /// busy) wherever a PD is accepted; `ibv_dealloc_pd` frees only it.
    Parent,
}

#[repr(C)]
pub(crate) struct Pd {
    pub(crate) pd: ibv_pd,
    pub(crate) h: PdHandle,
    pub(crate) engine: Arc<Engine>,
    pub(crate) role: PdRole,
}

impl Pd {
    /// Hands out a pointer for the engine's PD `h`, opened on `context`.
    pub(crate) fn publish(
        context: *mut ibv_context,
        h: PdHandle,
        engine: &Arc<Engine>,
        role: PdRole,
    ) -> *mut ibv_pd {
        let pd = ibv_pd {
            context,
            handle: h.0,
        };
        let engine = engine.clone();
        publish(
            Pd {
                pd,
                h,
                engine,
                role,
            },
            Kind::Pd,
        )
        .cast()
    }

    /// Hands out a pointer for the engine's region `m` of this PD (`pd` is
    /// this PD's pointer): `addr` and `length` as the application sees them,
    /// `handle` what `ibv_import_mr` takes.
    pub(crate) fn publish_mr(
        &self,
        pd: *mut ibv_pd,
        addr: *mut core::ffi::c_void,
        length: usize,
        handle: u32,
        m: &TransportMr,
        imported: bool,
    ) -> *mut ibv_mr {
        let mr = self.c_mr(pd, addr, length, handle, m);
        let engine = self.engine.clone();
        publish(
            Mr {
                mr,
                engine,
                imported,
                dm: None,
            },
            Kind::Mr,
        )
        .cast()
    }

    /// [`Pd::publish_mr`] for a new region over device memory (`hold`), its
    /// lkey as handle.
    pub(crate) fn publish_mr_on(
        &self,
        pd: *mut ibv_pd,
        addr: *mut core::ffi::c_void,
        length: usize,
        m: &TransportMr,
        hold: Option<softrdma_engine::dm::DmUse>,
    ) -> *mut ibv_mr {
        let mr = self.c_mr(pd, addr, length, m.lkey, m);
        let engine = self.engine.clone();
        publish(
            Mr {
                mr,
                engine,
                imported: false,
                dm: hold,
            },
            Kind::Mr,
        )
        .cast()
    }

    fn c_mr(
        &self,
        pd: *mut ibv_pd,
        addr: *mut core::ffi::c_void,
        length: usize,
        handle: u32,
        m: &TransportMr,
    ) -> ibv_mr {
        ibv_mr {
            context: self.pd.context,
            pd,
            addr,
            length,
            handle,
            lkey: m.lkey,
            rkey: m.rkey,
        }
    }
}

#[repr(C)]
pub(crate) struct Mr {
    pub(crate) mr: ibv_mr,
    pub(crate) engine: Arc<Engine>,
    /// From `ibv_import_mr` (`ibv_unimport_mr` forgets it without deregistering).
    pub(crate) imported: bool,
    /// A region over device memory (`ibv_reg_dm_mr`): keeps the memory
    /// alive and busy until the region is deregistered.
    pub(crate) dm: Option<softrdma_engine::dm::DmUse>,
}

/// Device memory (`dm.rs`): a handle on a buffer of the engine.
#[repr(C)]
pub(crate) struct Dm {
    pub(crate) dm: ibv_dm,
    pub(crate) mem: Arc<softrdma_engine::dm::DeviceMemory>,
    /// From `ibv_import_dm` (`ibv_unimport_dm` forgets it).
    pub(crate) imported: bool,
}

/// A memory window (`mw.rs`).
#[repr(C)]
pub(crate) struct Mw {
    pub(crate) mw: ibv_mw,
    pub(crate) engine: Arc<Engine>,
}

#[repr(C)]
pub(crate) struct Channel {
    pub(crate) ch: ibv_comp_channel,
    pub(crate) inner: Arc<CompChannel>,
    /// CQs attached (destroy is EBUSY while non-zero).
    pub(crate) users: AtomicU32,
}

/// A CQ; allocated as `ibv_cq_ex` so the extended API can use the same object.
#[repr(C)]
pub(crate) struct Cq {
    pub(crate) cq: ibv_cq_ex,
    pub(crate) h: CqHandle,
    /// Its completions, polled without the engine lock (`Engine::poll_cq_ring`).
    pub(crate) ring: Arc<CqRing>,
    pub(crate) engine: Arc<Engine>,
    pub(crate) channel: *mut Channel,
    /// Events handed out by `ibv_get_cq_event` (acknowledged ones are in `cq.comp_events_completed`).
    pub(crate) events: AtomicU32,
    /// The completion `ibv_start_poll`/`ibv_next_poll` made current (`cq_ex.rs`).
    pub(crate) cur: Mutex<Option<Wc>>,
}

/// A QP; allocated as `ibv_qp_ex` so `ibv_qp_to_qp_ex` can return it.
#[repr(C)]
pub(crate) struct Qp {
    pub(crate) qp: ibv_qp_ex,
    pub(crate) engine: Arc<Engine>,
    pub(crate) qpn: Qpn,
    pub(crate) qp_type: QpType,
    pub(crate) sq_sig_all: bool,
    pub(crate) ex: bool,
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`.
    pub(crate) block_self_mcast: bool,
    /// (max_send_sge, max_recv_sge) granted at creation: a post with more
    /// SGEs is refused before its list is read (as rxe does).
    pub(crate) max_sge: (u32, u32),
    /// A handle from `ibv_open_qp` on another handle's XRC receive QP:
    /// destroying it closes the handle only (`xrc.rs`).
    pub(crate) opened: bool,
    /// Work requests built by `ibv_wr_*` since `ibv_wr_start` (`qp_ex.rs`).
    pub(crate) batch: Mutex<super::qp_ex::Batch>,
    /// The express cell its lone posts go through first (RC QPs on the
    /// same-host path: `Engine::express`).
    pub(crate) express: Option<Arc<softrdma_engine::transport::Express>>,
}

#[repr(C)]
pub(crate) struct Srq {
    pub(crate) srq: ibv_srq,
    pub(crate) h: SrqHandle,
    pub(crate) engine: Arc<Engine>,
    /// The SGEs a receive may have (fixed at creation): checked before an
    /// application's SGE list is read.
    pub(crate) max_sge: u32,
}

#[repr(C)]
pub(crate) struct Ah {
    pub(crate) ah: ibv_ah,
    pub(crate) av: AddressVector,
}

/// Moves `v` to the heap, registers it and returns the pointer.
pub(crate) fn publish<T>(v: T, kind: Kind) -> *mut T {
    let p = Box::into_raw(Box::new(v));
    register(p as usize, kind);
    p
}

/// Unregisters and frees an object created by [`publish`].
///
/// # Safety
///
/// `p` must come from `publish::<T>` and not be used afterwards.
pub(crate) unsafe fn retire<T>(p: *mut T) {
    unregister(p as usize);
    // SAFETY: per the contract, `p` came from Box::into_raw and is freed once.
    drop(unsafe { Box::from_raw(p) });
}

/// Looks up the softrdma object behind an application pointer.
///
/// # Safety
///
/// The registry guarantees `p` is a live object of this kind, created by
/// `publish`; the caller must not keep the reference past its destruction
/// (destroy calls are the application's responsibility, as in rdma-core).
pub(crate) unsafe fn obj<'a, T>(p: *const core::ffi::c_void, kind: Kind) -> Option<&'a T> {
    if is_live(p as usize, kind) {
        // SAFETY: registered pointers point to live `T`s of this kind.
        Some(unsafe { &*(p as *const T) })
    } else {
        None
    }
}

/// The context object behind an `ibv_context *`.
///
/// # Safety
///
/// As for [`obj`].
pub(crate) unsafe fn ctx<'a>(c: *const ibv_context) -> Option<&'a Ctx> {
    let base = (c as usize).wrapping_sub(CTX_OFFSET);
    if c.is_null() || !is_live(base, Kind::Context) {
        return None;
    }
    // SAFETY: the registry holds the address of a live Ctx whose ibv_context is `c`.
    Some(unsafe { &*(base as *const Ctx) })
}

/// The frame of an export that acts on one object ([`with_arg`]): `f` runs
/// on the live object of `kind` behind `p`; anything else is EINVAL.
pub(crate) fn with_obj<T, R>(
    p: *const core::ffi::c_void,
    kind: Kind,
    fail: fn(core::ffi::c_int) -> R,
    f: impl FnOnce(&T) -> R,
) -> R {
    // SAFETY: registry-checked (`obj`); the object is the application's to
    // keep alive during the call, as in rdma-core.
    with_arg(|| unsafe { obj::<T>(p, kind) }, fail, f)
}

/// [`with_obj`] for a context (`ibv_context *`).
pub(crate) fn with_ctx<R>(
    c: *const ibv_context,
    fail: fn(core::ffi::c_int) -> R,
    f: impl FnOnce(&Ctx) -> R,
) -> R {
    // SAFETY: registry-checked (`ctx`), as in `with_obj`.
    with_arg(|| unsafe { ctx(c) }, fail, f)
}

/// The frame of `ibv_destroy_*`, `ibv_dealloc_*` and `ibv_dereg_mr` on the
/// live object of `kind` behind `p`: `release` gives back what the engine
/// holds for it (an error refuses, e.g. EBUSY), then the object is freed.
/// 0, or a positive errno (EINVAL for anything but a live object).
pub(crate) fn destroy<T>(
    p: *mut core::ffi::c_void,
    kind: Kind,
    release: impl FnOnce(&T) -> Result<(), VerbsError>,
) -> core::ffi::c_int {
    with_obj(p, kind, ret::pos, |o: &T| match release(o) {
        Ok(()) => {
            // SAFETY: a live `T` from `publish` (checked above), released.
            unsafe { retire(p.cast::<T>()) };
            0
        }
        Err(e) => ret::pos(e.errno()),
    })
}

// SAFETY: the raw pointers inside the C structs are only dereferenced by the
// application; softrdma reaches objects through the registry under its lock.
unsafe impl Send for Cq {}
// SAFETY: as above; shared fields are atomics or immutable after creation.
unsafe impl Sync for Cq {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_live_pointer_dies_with_its_object() {
        // Addresses no real object has (odd, tiny).
        let (p, q) = (0x11, 0x13);
        assert!(!is_live(p, Kind::Cq));
        register(p, Kind::Cq);
        assert!(is_live(p, Kind::Cq));
        assert!(is_live(p, Kind::Cq), "from the cache");
        assert!(!is_live(p, Kind::Qp), "wrong kind");
        // Another thread's change shows here at once.
        std::thread::spawn(move || unregister(p)).join().unwrap();
        assert!(!is_live(p, Kind::Cq));
        // The same address reused for another kind.
        register(p, Kind::Qp);
        assert!(!is_live(p, Kind::Cq));
        assert!(is_live(p, Kind::Qp));
        // More objects than the cache holds: each still answers right.
        let many: Vec<usize> = (0..2 * LIVE_CACHE).map(|i| q + 2 * i).collect();
        for &m in &many {
            register(m, Kind::Mr);
        }
        for _ in 0..2 {
            assert!(many.iter().all(|&m| is_live(m, Kind::Mr)));
        }
        for &m in &many {
            unregister(m);
        }
        assert!(many.iter().all(|&m| !is_live(m, Kind::Mr)));
        unregister(p);
        assert!(!is_live(p, Kind::Qp));
    }
}
