//! Every call into rdma-core, and every raw pointer it hands out, lives in
//! this module.
//!
//! Each C object is owned by one handle type here whose invariant is "the
//! pointer is live and was returned by rdma-core for this object"; a handle
//! holds an `Arc` of every object its C counterpart depends on (a CQ its
//! device and channel, a QP its PD, CQs and SRQ, a CM id its event channel),
//! so rdma-core never sees a child outlive its parent, whatever order the
//! safe API drops things in. The handles are `Send + Sync`: libibverbs and
//! librdmacm objects are thread-safe (verbs(7): "all verbs are thread safe").
//!
//! The data path (`ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`) is `static inline` in `verbs.h`; it is
//! done here as the header does it, through `ctx->ops`.

use super::conv;
use super::dl::{Cm, Libs, Verbs};
use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of};
use core::ptr::NonNull;
use softrdma_engine::cm_proto::{ConnParam, EventParam};
use softrdma_ffi::{self as f, Zeroable};
use softrdma_transport::{
    Access, AddressVector, QpAttr, QpAttrMask, QpCap, QpState, QpType, RecvWr, SendFlags, SendWr,
    Wc, WrOpcode,
};
use std::collections::HashMap;
use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A failed rdma-core call: which one, and its errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) call: &'static str,
    pub(crate) errno: i32,
}

fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
        .unwrap_or(libc::EIO)
}

/// rdma-core's int results: 0, a positive errno, or -1 with `errno` set
/// (librdmacm, older verbs) — some providers return a negative errno.
fn check(call: &'static str, r: c_int) -> Result<(), Failure> {
    match r {
        0 => Ok(()),
        r if r > 0 => Err(Failure { call, errno: r }),
        -1 => Err(Failure {
            call,
            errno: last_errno(),
        }),
        r => Err(Failure {
            call,
            errno: r.saturating_neg(),
        }),
    }
}

fn non_null<T>(call: &'static str, p: *mut T) -> Result<NonNull<T>, Failure> {
    NonNull::new(p).ok_or_else(|| Failure {
        call,
        errno: last_errno(),
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on `n` zeroed `T`s, on the stack when few.
fn with_buf<T: Zeroable + Copy, R>(n: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    const STACK: usize = 8;
    if n <= STACK {
        let mut a = [T::zeroed(); STACK];
        f(&mut a[..n])
    } else {
        let mut v = vec![T::zeroed(); n];
        f(&mut v)
    }
}

/// Index of `p` in the array starting at `base` (for `bad_wr`), clamped to `n`.
fn index_in<T>(base: *const T, p: *const T, n: usize) -> usize {
    if p.is_null() {
        return 0;
    }
    let off = (p as usize).wrapping_sub(base as usize) / size_of::<T>().max(1);
    off.min(n)
}

// ------------------------------------------------------------------ devices

/// An open device context.
pub(crate) struct Device {
    v: &'static Verbs,
    ctx: NonNull<f::ibv_context>,
    /// Opened through `rdma_get_devices` (librdmacm's context, shared with
    /// its CM ids): the list to give back; otherwise we opened it ourselves.
    cm_list: Option<(&'static Cm, NonNull<*mut f::ibv_context>)>,
    name: String,
}

// SAFETY: an ibv_context may be used from any thread (libibverbs locks
// internally); the handle is immutable after creation.
unsafe impl Send for Device {}
// SAFETY: as for Send.
unsafe impl Sync for Device {}

impl std::fmt::Debug for Device {
    fn fmt(&self, fm: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(fm, "Device({})", self.name)
    }
}

/// `ibv_get_device_name`.
///
/// # Safety
///
/// `dev` is a device of a live device list or context.
unsafe fn device_name(v: &Verbs, dev: *mut f::ibv_device) -> String {
    // SAFETY: per the contract.
    let n = unsafe { (v.f.ibv_get_device_name)(dev) };
    if n.is_null() {
        return String::new();
    }
    // SAFETY: a NUL-terminated name inside the device struct.
    unsafe { CStr::from_ptr(n) }.to_string_lossy().into_owned()
}

impl Device {
    /// Names of the devices libibverbs lists (`ibv_get_device_list`).
    pub(crate) fn names(v: &'static Verbs) -> Result<Vec<String>, Failure> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-parameter.
        let list = non_null("ibv_get_device_list", unsafe {
            (v.f.ibv_get_device_list)(&mut n)
        })?;
        let mut names = Vec::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` entries and a terminating NULL.
            let dev = unsafe { *list.as_ptr().add(i) };
            if dev.is_null() {
                break;
            }
            // SAFETY: an entry of the live list.
            names.push(unsafe { device_name(v, dev) });
        }
        // SAFETY: freed once, nothing of it is used after.
        unsafe { (v.f.ibv_free_device_list)(list.as_ptr()) };
        Ok(names)
    }

    /// Opens device `name` (`None`: the first). When librdmacm is loaded the
    /// context is librdmacm's own (`rdma_get_devices`), so PDs, CQs and QPs
    /// made on it work with CM ids; otherwise `ibv_open_device`.
    pub(crate) fn open(libs: Libs, name: Option<&str>) -> Result<Device, Failure> {
        let v = libs.verbs;
        if let Ok(cm) = libs.cm {
            let mut n: c_int = 0;
            // SAFETY: `n` is a valid out-parameter.
            if let Some(list) = NonNull::new(unsafe { (cm.f.rdma_get_devices)(&mut n) }) {
                for i in 0..usize::try_from(n).unwrap_or(0) {
                    // SAFETY: the list holds `n` contexts and a NULL.
                    let ctx = unsafe { *list.as_ptr().add(i) };
                    let Some(ctx) = NonNull::new(ctx) else { break };
                    // SAFETY: a live context of librdmacm's; `device` is set.
                    let dev_name = unsafe { device_name(v, (*ctx.as_ptr()).device) };
                    if name.is_none_or(|n| n == dev_name) {
                        return Ok(Device {
                            v,
                            ctx,
                            cm_list: Some((cm, list)),
                            name: dev_name,
                        });
                    }
                }
                // SAFETY: the list came from rdma_get_devices and is not used again.
                unsafe { (cm.f.rdma_free_devices)(list.as_ptr()) };
            }
        }
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-parameter.
        let list = non_null("ibv_get_device_list", unsafe {
            (v.f.ibv_get_device_list)(&mut n)
        })?;
        let mut found = Err(Failure {
            call: "ibv_get_device_list",
            errno: libc::ENODEV,
        });
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` entries and a NULL.
            let dev = unsafe { *list.as_ptr().add(i) };
            if dev.is_null() {
                break;
            }
            // SAFETY: an entry of the live list.
            let dev_name = unsafe { device_name(v, dev) };
            if name.is_none_or(|n| n == dev_name) {
                // SAFETY: opened before the list is freed, as libibverbs requires.
                found =
                    non_null("ibv_open_device", unsafe { (v.f.ibv_open_device)(dev) }).map(|ctx| {
                        Device {
                            v,
                            ctx,
                            cm_list: None,
                            name: dev_name,
                        }
                    });
                break;
            }
        }
        // SAFETY: freed once; the opened context stays valid.
        unsafe { (v.f.ibv_free_device_list)(list.as_ptr()) };
        found
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// `ibv_query_device`.
    pub(crate) fn query_device(&self) -> Result<f::ibv_device_attr, Failure> {
        let mut a = f::ibv_device_attr::zeroed();
        // SAFETY: live context, valid out-parameter.
        check("ibv_query_device", unsafe {
            (self.v.f.ibv_query_device)(self.ctx.as_ptr(), &mut a)
        })?;
        Ok(a)
    }

    /// `ibv_query_port`, as the inline function in `verbs.h` does it: the
    /// extended context's `query_port` if it has one, else the exported
    /// compatibility entry point with the 48-byte prefix.
    pub(crate) fn query_port(&self, port: u8) -> Result<f::ibv_port_attr, Failure> {
        let ctx = self.ctx.as_ptr();
        let mut a = f::ibv_port_attr::zeroed();
        // SAFETY: reading a field of the live context.
        if unsafe { (*ctx).abi_compat } as usize == f::VERBS_ABI_IS_EXTENDED {
            let vctx = ctx
                .cast::<u8>()
                .wrapping_sub(f::verbs_context::CONTEXT_OFFSET)
                .cast::<f::verbs_context>();
            // SAFETY: an extended context is the tail of a `verbs_context`;
            // `sz` (just before the context) always exists, and it says
            // whether the struct is long enough to hold `query_port`.
            let sz = unsafe { (*vctx).sz };
            if sz >= size_of::<f::verbs_context>() - offset_of!(f::verbs_context, query_port) {
                // SAFETY: within the provider's `verbs_context` (checked above).
                if let Some(q) = unsafe { (*vctx).query_port } {
                    // SAFETY: live context and a full-size out-parameter.
                    return check("ibv_query_port", unsafe {
                        q(ctx, port, &mut a, size_of::<f::ibv_port_attr>())
                    })
                    .map(|()| a);
                }
            }
        }
        // SAFETY: live context; the compat entry writes at most the 48-byte
        // prefix of the (larger, zeroed) `a`.
        check("ibv_query_port", unsafe {
            (self.v.f.ibv_query_port)(ctx, port, (&mut a as *mut f::ibv_port_attr).cast())
        })?;
        Ok(a)
    }

    /// `ibv_query_gid`.
    pub(crate) fn query_gid(&self, port: u8, index: usize) -> Result<[u8; 16], Failure> {
        let index = c_int::try_from(index).map_err(|_| Failure {
            call: "ibv_query_gid",
            errno: libc::EINVAL,
        })?;
        let mut g = f::ibv_gid { raw: [0; 16] };
        // SAFETY: live context, valid out-parameter.
        check("ibv_query_gid", unsafe {
            (self.v.f.ibv_query_gid)(self.ctx.as_ptr(), port, index, &mut g)
        })?;
        Ok(g.raw())
    }

    /// `ibv_query_pkey` (host order).
    pub(crate) fn query_pkey(&self, port: u8, index: u16) -> Result<u16, Failure> {
        let mut p: u16 = 0;
        // SAFETY: live context, valid out-parameter.
        check("ibv_query_pkey", unsafe {
            (self.v.f.ibv_query_pkey)(self.ctx.as_ptr(), port, c_int::from(index), &mut p)
        })?;
        Ok(u16::from_be(p))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        match self.cm_list {
            // SAFETY: the list from rdma_get_devices, given back once; the
            // context stays librdmacm's.
            Some((cm, list)) => unsafe { (cm.f.rdma_free_devices)(list.as_ptr()) },
            None => {
                // SAFETY: opened by us; every child holds an Arc of this
                // device, so none is left.
                let _ = unsafe { (self.v.f.ibv_close_device)(self.ctx.as_ptr()) };
            }
        }
    }
}

// ------------------------------------------------------------------ PD, AH, MR

/// A protection domain, with the address handles made on it.
pub(crate) struct Pd {
    dev: Arc<Device>,
    ptr: NonNull<f::ibv_pd>,
    /// Address handles by destination, created on first use and kept until
    /// the PD goes (UD work requests name destinations by address vector).
    ahs: Mutex<HashMap<conv::AvKey, NonNull<f::ibv_ah>>>,
}

// SAFETY: see the module documentation; the AH table is behind a mutex.
unsafe impl Send for Pd {}
// SAFETY: as for Send.
unsafe impl Sync for Pd {}

impl Pd {
    /// `ibv_alloc_pd`.
    pub(crate) fn alloc(dev: &Arc<Device>) -> Result<Pd, Failure> {
        // SAFETY: live context.
        let ptr = non_null("ibv_alloc_pd", unsafe {
            (dev.v.f.ibv_alloc_pd)(dev.ctx.as_ptr())
        })?;
        Ok(Pd {
            dev: Arc::clone(dev),
            ptr,
            ahs: Mutex::new(HashMap::new()),
        })
    }

    /// The address handle for `av` (`ibv_create_ah` on first use).
    fn ah(&self, av: &AddressVector) -> Result<NonNull<f::ibv_ah>, Failure> {
        let key = conv::AvKey::of(av);
        let mut ahs = lock(&self.ahs);
        if let Some(a) = ahs.get(&key) {
            return Ok(*a);
        }
        let mut attr = conv::av_to_c(av);
        // SAFETY: live PD, valid attributes.
        let ah = non_null("ibv_create_ah", unsafe {
            (self.dev.v.f.ibv_create_ah)(self.ptr.as_ptr(), &mut attr)
        })?;
        ahs.insert(key, ah);
        Ok(ah)
    }

    /// Makes sure an address handle for `av` exists (`ibv_create_ah`).
    pub(crate) fn prepare_ah(&self, av: &AddressVector) -> Result<(), Failure> {
        self.ah(av).map(|_| ())
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        for (_, ah) in lock(&self.ahs).drain() {
            // SAFETY: created on this PD; no QP of the PD is left to use it.
            let _ = unsafe { (self.dev.v.f.ibv_destroy_ah)(ah.as_ptr()) };
        }
        // SAFETY: every child holds an Arc of this PD, so none is left.
        let _ = unsafe { (self.dev.v.f.ibv_dealloc_pd)(self.ptr.as_ptr()) };
    }
}

/// A memory registration.
pub(crate) struct Mr {
    pd: Arc<Pd>,
    ptr: NonNull<f::ibv_mr>,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

// SAFETY: see the module documentation.
unsafe impl Send for Mr {}
// SAFETY: as for Send.
unsafe impl Sync for Mr {}

impl Mr {
    /// `ibv_reg_mr`.
    ///
    /// # Safety
    ///
    /// `[addr, addr + len)` must stay valid for reads and writes by the
    /// device (per `access`) until the returned registration is dropped.
    pub(crate) unsafe fn register(
        pd: &Arc<Pd>,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Mr, Failure> {
        let acc = c_int::try_from(access.0).map_err(|_| Failure {
            call: "ibv_reg_mr",
            errno: libc::EINVAL,
        })?;
        // SAFETY: live PD; the memory contract is the caller's.
        let ptr = non_null("ibv_reg_mr", unsafe {
            (pd.dev.v.f.ibv_reg_mr)(pd.ptr.as_ptr(), addr.cast(), len, acc)
        })?;
        // SAFETY: a live MR just returned.
        let (lkey, rkey) = unsafe { ((*ptr.as_ptr()).lkey, (*ptr.as_ptr()).rkey) };
        Ok(Mr {
            pd: Arc::clone(pd),
            ptr,
            lkey,
            rkey,
        })
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by us, deregistered once.
        let _ = unsafe { (self.pd.dev.v.f.ibv_dereg_mr)(self.ptr.as_ptr()) };
    }
}

// ------------------------------------------------------------------ CQ

/// A completion channel.
pub(crate) struct CompChannel {
    dev: Arc<Device>,
    ptr: NonNull<f::ibv_comp_channel>,
}

// SAFETY: see the module documentation.
unsafe impl Send for CompChannel {}
// SAFETY: as for Send.
unsafe impl Sync for CompChannel {}

impl CompChannel {
    /// `ibv_create_comp_channel`.
    pub(crate) fn new(dev: &Arc<Device>) -> Result<CompChannel, Failure> {
        // SAFETY: live context.
        let ptr = non_null("ibv_create_comp_channel", unsafe {
            (dev.v.f.ibv_create_comp_channel)(dev.ctx.as_ptr())
        })?;
        Ok(CompChannel {
            dev: Arc::clone(dev),
            ptr,
        })
    }

    /// The channel's file descriptor.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: reading a field of the live channel.
        unsafe { (*self.ptr.as_ptr()).fd }
    }

    /// `ibv_get_cq_event` and, at once, `ibv_ack_cq_events` (so destroying
    /// the CQ never waits for us): the `cq_context` of the CQ that fired.
    /// `WouldBlock` when the fd is non-blocking and nothing is pending.
    pub(crate) fn get_event(&self) -> io::Result<usize> {
        let mut cq: *mut f::ibv_cq = core::ptr::null_mut();
        let mut ctx: *mut c_void = core::ptr::null_mut();
        // SAFETY: live channel, valid out-parameters.
        let r = unsafe { (self.dev.v.f.ibv_get_cq_event)(self.ptr.as_ptr(), &mut cq, &mut ctx) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        if !cq.is_null() {
            // SAFETY: the CQ of the event; it cannot be destroyed before this ack.
            unsafe { (self.dev.v.f.ibv_ack_cq_events)(cq, 1) };
        }
        Ok(ctx as usize)
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ on it holds an Arc of it, so none is left.
        let _ = unsafe { (self.dev.v.f.ibv_destroy_comp_channel)(self.ptr.as_ptr()) };
    }
}

/// A completion queue.
pub(crate) struct Cq {
    dev: Arc<Device>,
    _channel: Option<Arc<CompChannel>>,
    ptr: NonNull<f::ibv_cq>,
    pub(crate) cqe: u32,
}

// SAFETY: see the module documentation.
unsafe impl Send for Cq {}
// SAFETY: as for Send.
unsafe impl Sync for Cq {}

impl Cq {
    /// `ibv_create_cq` with `cq_context` = `tag` (what channel events report).
    pub(crate) fn new(
        dev: &Arc<Device>,
        cqe: u32,
        tag: usize,
        channel: Option<&Arc<CompChannel>>,
    ) -> Result<Cq, Failure> {
        let n = c_int::try_from(cqe).map_err(|_| Failure {
            call: "ibv_create_cq",
            errno: libc::EINVAL,
        })?;
        let ch = channel.map_or(core::ptr::null_mut(), |c| c.ptr.as_ptr());
        // SAFETY: live context and channel (of the same device, or EINVAL).
        let ptr = non_null("ibv_create_cq", unsafe {
            (dev.v.f.ibv_create_cq)(dev.ctx.as_ptr(), n, tag as *mut c_void, ch, 0)
        })?;
        // SAFETY: a live CQ just returned.
        let cqe = u32::try_from(unsafe { (*ptr.as_ptr()).cqe }).unwrap_or(cqe);
        Ok(Cq {
            dev: Arc::clone(dev),
            _channel: channel.cloned(),
            ptr,
            cqe,
        })
    }

    /// `ibv_poll_cq` (inline: `cq->context->ops.poll_cq`): appends up to
    /// `max` completions to `out`, returns how many.
    pub(crate) fn poll(&self, out: &mut Vec<Wc>, max: usize) -> Result<usize, Failure> {
        const BATCH: usize = 16;
        let cq = self.ptr.as_ptr();
        // SAFETY: `context` of a live CQ is its live device context.
        let Some(poll) = (unsafe { (*(*cq).context).ops.poll_cq }) else {
            return Err(Failure {
                call: "ibv_poll_cq",
                errno: libc::EOPNOTSUPP,
            });
        };
        let mut buf = [f::ibv_wc::zeroed(); BATCH];
        let mut got = 0;
        while got < max {
            let want = (max - got).min(BATCH);
            // SAFETY: live CQ; `buf` has room for `want` completions.
            let n = unsafe { poll(cq, want as c_int, buf.as_mut_ptr()) };
            if n < 0 {
                return Err(Failure {
                    call: "ibv_poll_cq",
                    errno: if n == -1 {
                        libc::EIO
                    } else {
                        n.saturating_neg()
                    },
                });
            }
            let n = (n as usize).min(want);
            for w in buf.iter().take(n) {
                // SAFETY: both union members are plain u32s.
                let imm = unsafe { w.imm.imm_data };
                out.push(conv::wc_from_c(w, imm));
            }
            got += n;
            if n < want {
                break;
            }
        }
        Ok(got)
    }

    /// `ibv_req_notify_cq` (inline: `cq->context->ops.req_notify_cq`).
    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<(), Failure> {
        let cq = self.ptr.as_ptr();
        // SAFETY: `context` of a live CQ is its live device context.
        let Some(req) = (unsafe { (*(*cq).context).ops.req_notify_cq }) else {
            return Err(Failure {
                call: "ibv_req_notify_cq",
                errno: libc::EOPNOTSUPP,
            });
        };
        // SAFETY: live CQ.
        check("ibv_req_notify_cq", unsafe {
            req(cq, c_int::from(solicited_only))
        })
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: every QP using it holds an Arc of it, so none is left;
        // channel events were acknowledged when read.
        let _ = unsafe { (self.dev.v.f.ibv_destroy_cq)(self.ptr.as_ptr()) };
    }
}

// ------------------------------------------------------------------ SRQ, QP

/// Fills `sges` from a receive request's scatter list.
fn fill_sges(sges: &mut [f::ibv_sge], sgl: &[softrdma_transport::Sge]) {
    for (d, s) in sges.iter_mut().zip(sgl) {
        *d = f::ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
}

/// A C work request with a scatter/gather list and a `next` link.
trait Chained: Copy + Zeroable {
    fn links(&mut self) -> (&mut *mut f::ibv_sge, &mut *mut Self);
}

impl Chained for f::ibv_recv_wr {
    fn links(&mut self) -> (&mut *mut f::ibv_sge, &mut *mut Self) {
        (&mut self.sg_list, &mut self.next)
    }
}

impl Chained for f::ibv_send_wr {
    fn links(&mut self) -> (&mut *mut f::ibv_sge, &mut *mut Self) {
        (&mut self.sg_list, &mut self.next)
    }
}

/// Points request `i` of `cw` at its `counts[i]` SGEs (consecutive in
/// `sges`, whose length is their sum) and at request `i + 1`; returns the
/// head. Every pointer is derived from the two base pointers taken here,
/// after the last use of the slices.
fn link<W: Chained>(
    cw: &mut [W],
    sges: &mut [f::ibv_sge],
    counts: impl Iterator<Item = usize>,
) -> *mut W {
    let (n, slen) = (cw.len(), sges.len());
    let base = cw.as_mut_ptr();
    let sbase = sges.as_mut_ptr();
    let mut at = 0;
    for (i, k) in counts.enumerate().take(n) {
        let sg = if k == 0 || at + k > slen {
            core::ptr::null_mut()
        } else {
            sbase.wrapping_add(at)
        };
        let next = if i + 1 < n {
            base.wrapping_add(i + 1)
        } else {
            core::ptr::null_mut()
        };
        // SAFETY: `i < n`, so `base + i` is an element of `cw`, which the
        // borrow keeps alive and unaliased.
        let (s, nx) = unsafe { (*base.add(i)).links() };
        (*s, *nx) = (sg, next);
        at += k;
    }
    base
}

/// Posts receive requests through `post` (QP or SRQ slot): builds the C
/// chain on the stack (or heap when long) and maps `bad_wr` to a count.
fn post_recvs(
    call: &'static str,
    wrs: &[RecvWr],
    post: impl FnOnce(*mut f::ibv_recv_wr, *mut *mut f::ibv_recv_wr) -> c_int,
) -> Result<(), (usize, Failure)> {
    if wrs.is_empty() {
        return Ok(());
    }
    let total: usize = wrs.iter().map(|w| w.sgl.len()).sum();
    with_buf::<f::ibv_sge, _>(total, |sges| {
        with_buf::<f::ibv_recv_wr, _>(wrs.len(), |cw| {
            let mut at = 0;
            for (c, w) in cw.iter_mut().zip(wrs) {
                let n = w.sgl.len();
                if let Some(dst) = sges.get_mut(at..at + n) {
                    fill_sges(dst, &w.sgl);
                }
                c.wr_id = w.wr_id;
                c.num_sge = c_int::try_from(n).unwrap_or(c_int::MAX);
                at += n;
            }
            let head = link(cw, sges, wrs.iter().map(|w| w.sgl.len()));
            let mut bad: *mut f::ibv_recv_wr = core::ptr::null_mut();
            let r = post(head, &mut bad);
            check(call, r).map_err(|e| (index_in(head, bad, wrs.len()), e))
        })
    })
}

/// A shared receive queue.
pub(crate) struct Srq {
    pd: Arc<Pd>,
    ptr: NonNull<f::ibv_srq>,
}

// SAFETY: see the module documentation.
unsafe impl Send for Srq {}
// SAFETY: as for Send.
unsafe impl Sync for Srq {}

impl Srq {
    /// `ibv_create_srq`.
    pub(crate) fn new(pd: &Arc<Pd>, max_wr: u32, max_sge: u32, limit: u32) -> Result<Srq, Failure> {
        let mut a = f::ibv_srq_init_attr::zeroed();
        a.attr = f::ibv_srq_attr {
            max_wr,
            max_sge,
            srq_limit: limit,
        };
        // SAFETY: live PD, valid attributes.
        let ptr = non_null("ibv_create_srq", unsafe {
            (pd.dev.v.f.ibv_create_srq)(pd.ptr.as_ptr(), &mut a)
        })?;
        Ok(Srq {
            pd: Arc::clone(pd),
            ptr,
        })
    }

    /// `ibv_post_srq_recv` (inline: `srq->context->ops.post_srq_recv`).
    pub(crate) fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), (usize, Failure)> {
        let srq = self.ptr.as_ptr();
        // SAFETY: `context` of a live SRQ is its live device context.
        let Some(post) = (unsafe { (*(*srq).context).ops.post_srq_recv }) else {
            return Err((
                0,
                Failure {
                    call: "ibv_post_srq_recv",
                    errno: libc::EOPNOTSUPP,
                },
            ));
        };
        post_recvs("ibv_post_srq_recv", wrs, |wr, bad| {
            // SAFETY: live SRQ; `wr` is a well-formed chain whose SGEs name
            // memory only through lkeys the device checks.
            unsafe { post(srq, wr, bad) }
        })
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`.
    pub(crate) fn set_limit(&self, limit: u32) -> Result<(), Failure> {
        let mut a = f::ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        // SAFETY: live SRQ, valid attributes.
        check("ibv_modify_srq", unsafe {
            (self.pd.dev.v.f.ibv_modify_srq)(self.ptr.as_ptr(), &mut a, f::IBV_SRQ_LIMIT as c_int)
        })
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: every QP using it holds an Arc of it, so none is left.
        let _ = unsafe { (self.pd.dev.v.f.ibv_destroy_srq)(self.ptr.as_ptr()) };
    }
}

/// What a QP is created with.
pub(crate) struct QpSpec<'a> {
    pub(crate) qp_type: QpType,
    pub(crate) send_cq: &'a Arc<Cq>,
    pub(crate) recv_cq: &'a Arc<Cq>,
    pub(crate) srq: Option<&'a Arc<Srq>>,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
}

impl QpSpec<'_> {
    fn to_c(&self) -> f::ibv_qp_init_attr {
        let mut a = f::ibv_qp_init_attr::zeroed();
        a.send_cq = self.send_cq.ptr.as_ptr();
        a.recv_cq = self.recv_cq.ptr.as_ptr();
        a.srq = self.srq.map_or(core::ptr::null_mut(), |s| s.ptr.as_ptr());
        a.cap = conv::cap_to_c(&self.cap);
        a.qp_type = self.qp_type.as_u32();
        a.sq_sig_all = c_int::from(self.sq_sig_all);
        a
    }
}

/// A queue pair.
pub(crate) struct Qp {
    pd: Arc<Pd>,
    _cqs: (Arc<Cq>, Arc<Cq>),
    _srq: Option<Arc<Srq>>,
    /// The CM id the QP was created on (`rdma_create_qp`).
    cm: Option<Arc<IdCell>>,
    ptr: NonNull<f::ibv_qp>,
    pub(crate) qpn: u32,
    pub(crate) cap: QpCap,
}

// SAFETY: see the module documentation.
unsafe impl Send for Qp {}
// SAFETY: as for Send.
unsafe impl Sync for Qp {}

impl Qp {
    /// `ibv_create_qp`.
    pub(crate) fn new(pd: &Arc<Pd>, spec: &QpSpec<'_>) -> Result<Qp, Failure> {
        let mut a = spec.to_c();
        // SAFETY: live PD, CQs and SRQ (the spec borrows their handles).
        let ptr = non_null("ibv_create_qp", unsafe {
            (pd.dev.v.f.ibv_create_qp)(pd.ptr.as_ptr(), &mut a)
        })?;
        Ok(Qp::wrap(pd, spec, ptr, &a.cap, None))
    }

    fn wrap(
        pd: &Arc<Pd>,
        spec: &QpSpec<'_>,
        ptr: NonNull<f::ibv_qp>,
        cap: &f::ibv_qp_cap,
        cm: Option<Arc<IdCell>>,
    ) -> Qp {
        Qp {
            pd: Arc::clone(pd),
            _cqs: (Arc::clone(spec.send_cq), Arc::clone(spec.recv_cq)),
            _srq: spec.srq.cloned(),
            cm,
            // SAFETY: reading a field of the live QP just created.
            qpn: unsafe { (*ptr.as_ptr()).qp_num },
            ptr,
            cap: conv::cap_from_c(cap),
        }
    }

    /// `ibv_modify_qp`.
    pub(crate) fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Failure> {
        let mut a = conv::qp_attr_to_c(attr);
        let m = c_int::try_from(mask.0).map_err(|_| Failure {
            call: "ibv_modify_qp",
            errno: libc::EINVAL,
        })?;
        // SAFETY: live QP, valid attributes.
        check("ibv_modify_qp", unsafe {
            (self.pd.dev.v.f.ibv_modify_qp)(self.ptr.as_ptr(), &mut a, m)
        })
    }

    /// `ibv_modify_qp` to ERR.
    pub(crate) fn to_error(&self) -> Result<(), Failure> {
        let a = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        self.modify(&a, QpAttrMask::STATE)
    }

    /// `ibv_query_qp` of every attribute.
    pub(crate) fn query(&self) -> Result<QpAttr, Failure> {
        let mut a = f::ibv_qp_attr::zeroed();
        let mut init = f::ibv_qp_init_attr::zeroed();
        let all = (1 << 21) - 1; // IBV_QP_STATE .. IBV_QP_DEST_QPN
        // SAFETY: live QP, valid out-parameters.
        check("ibv_query_qp", unsafe {
            (self.pd.dev.v.f.ibv_query_qp)(self.ptr.as_ptr(), &mut a, all, &mut init)
        })?;
        Ok(conv::qp_attr_from_c(&a))
    }

    /// `ibv_post_send` (inline: `qp->context->ops.post_send`) of a chain.
    /// On failure: how many requests were posted before the bad one.
    ///
    /// Inline data goes from the request's own buffer (`SendWr::inline`,
    /// with `IBV_SEND_INLINE`); `SendFlags::INLINE` without it is dropped, so
    /// the device reads application memory only through checked lkeys.
    pub(crate) fn post_send(&self, wrs: &[SendWr]) -> Result<(), (usize, Failure)> {
        if wrs.is_empty() {
            return Ok(());
        }
        let qp = self.ptr.as_ptr();
        // SAFETY: `context` of a live QP is its live device context.
        let Some(post) = (unsafe { (*(*qp).context).ops.post_send }) else {
            return Err((
                0,
                Failure {
                    call: "ibv_post_send",
                    errno: libc::EOPNOTSUPP,
                },
            ));
        };
        // Address handles first: a failure there posts the requests before it.
        let mut ahs = Vec::new();
        let mut ah_err = None;
        if wrs.iter().any(|w| w.ud.is_some()) {
            for w in wrs {
                match w.ud.as_ref().map(|u| self.pd.ah(&u.av)).transpose() {
                    Ok(a) => ahs.push(a),
                    Err(e) => {
                        ah_err = Some(e);
                        break;
                    }
                }
            }
        }
        let ok_count = if ah_err.is_some() {
            ahs.len()
        } else {
            wrs.len()
        };
        let wrs = wrs.get(..ok_count).unwrap_or_default();
        // Inline data takes one SGE (none when empty), pointing at the
        // request's own buffer.
        let count = |w: &SendWr| match &w.inline {
            Some(d) => usize::from(!d.is_empty()),
            None => w.sgl.len(),
        };
        let total: usize = wrs.iter().map(count).sum();
        let posted = with_buf::<f::ibv_sge, _>(total, |sges| {
            with_buf::<f::ibv_send_wr, _>(wrs.len(), |cw| {
                if cw.is_empty() {
                    return Ok(());
                }
                let mut at = 0;
                for (i, (c, w)) in cw.iter_mut().zip(wrs).enumerate() {
                    let n = count(w);
                    let mut flags = w.flags.without(SendFlags::INLINE);
                    match &w.inline {
                        Some(data) => {
                            flags = flags | SendFlags::INLINE;
                            if let Some(s) = sges.get_mut(at).filter(|_| n > 0) {
                                *s = f::ibv_sge {
                                    addr: data.as_ptr() as u64,
                                    length: u32::try_from(data.len()).unwrap_or(u32::MAX),
                                    lkey: 0,
                                };
                            }
                        }
                        None => {
                            if let Some(dst) = sges.get_mut(at..at + n) {
                                fill_sges(dst, &w.sgl);
                            }
                        }
                    }
                    at += n;
                    c.wr_id = w.wr_id;
                    c.num_sge = c_int::try_from(n).unwrap_or(c_int::MAX);
                    c.opcode = w.opcode.as_u32();
                    c.send_flags = flags.0;
                    match w.opcode {
                        WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => {
                            c.imm = f::ibv_send_wr_imm {
                                imm_data: w.imm_data.to_be(),
                            };
                        }
                        WrOpcode::SendWithInv | WrOpcode::LocalInv => {
                            c.imm = f::ibv_send_wr_imm {
                                invalidate_rkey: w.imm_data,
                            };
                        }
                        _ => {}
                    }
                    match (w.opcode, ahs.get(i).copied().flatten(), &w.ud) {
                        (
                            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead,
                            _,
                            _,
                        ) => {
                            c.wr = f::ibv_send_wr_wr {
                                rdma: f::ibv_send_wr_rdma {
                                    remote_addr: w.remote_addr,
                                    rkey: w.rkey,
                                },
                            };
                        }
                        (WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd, _, _) => {
                            c.wr = f::ibv_send_wr_wr {
                                atomic: f::ibv_send_wr_atomic {
                                    remote_addr: w.remote_addr,
                                    compare_add: w.compare_add,
                                    swap: w.swap,
                                    rkey: w.rkey,
                                },
                            };
                        }
                        (_, Some(ah), Some(ud)) => {
                            c.wr = f::ibv_send_wr_wr {
                                ud: f::ibv_send_wr_ud {
                                    ah: ah.as_ptr(),
                                    remote_qpn: ud.remote_qpn,
                                    remote_qkey: ud.remote_qkey,
                                },
                            };
                        }
                        _ => {}
                    }
                }
                let head = link(cw, sges, wrs.iter().map(count));
                let mut bad: *mut f::ibv_send_wr = core::ptr::null_mut();
                // SAFETY: live QP; `head` is a well-formed chain whose SGEs
                // name application memory only through lkeys the device
                // checks, or our own inline buffers, which outlive the call
                // (the device copies inline data during it); its AHs belong
                // to the QP's PD and live as long as it.
                let r = unsafe { post(qp, head, &mut bad) };
                check("ibv_post_send", r).map_err(|e| (index_in(head, bad, wrs.len()), e))
            })
        });
        posted?;
        match ah_err {
            Some(e) => Err((ok_count, e)),
            None => Ok(()),
        }
    }

    /// `ibv_post_recv` (inline: `qp->context->ops.post_recv`) of a chain.
    pub(crate) fn post_recv(&self, wrs: &[RecvWr]) -> Result<(), (usize, Failure)> {
        let qp = self.ptr.as_ptr();
        // SAFETY: `context` of a live QP is its live device context.
        let Some(post) = (unsafe { (*(*qp).context).ops.post_recv }) else {
            return Err((
                0,
                Failure {
                    call: "ibv_post_recv",
                    errno: libc::EOPNOTSUPP,
                },
            ));
        };
        post_recvs("ibv_post_recv", wrs, |wr, bad| {
            // SAFETY: live QP; `wr` is a well-formed chain whose SGEs name
            // memory only through lkeys the device checks.
            unsafe { post(qp, wr, bad) }
        })
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        if let Some(cell) = &self.cm {
            let id = lock(&cell.id);
            if let Some(id) = *id {
                // SAFETY: the id is live while its cell holds it (under the
                // lock); it must not keep a pointer to the QP destroyed below.
                unsafe {
                    if (*id.as_ptr()).qp == self.ptr.as_ptr() {
                        (*id.as_ptr()).qp = core::ptr::null_mut();
                    }
                }
            }
        }
        // SAFETY: created by us (or by rdma_create_qp for us), destroyed once.
        let _ = unsafe { (self.pd.dev.v.f.ibv_destroy_qp)(self.ptr.as_ptr()) };
    }
}

// ------------------------------------------------------------------ CM

/// Socket address in C form (a union big enough for both families).
fn sockaddr_of(a: SocketAddr) -> f::rdma_addr_src {
    let mut u = f::rdma_addr_src::zeroed();
    match a {
        SocketAddr::V4(v4) => {
            u.src_sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
        }
        SocketAddr::V6(v6) => {
            u.src_sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
        }
    }
    u
}

/// A C socket address as a Rust one (`None` for AF_UNSPEC and others).
fn socket_addr(u: &f::rdma_addr_src) -> Option<SocketAddr> {
    // SAFETY: every member is plain bytes over the same storage; the family
    // field says which view is meaningful.
    unsafe {
        match c_int::from(u.src_addr.sa_family) {
            libc::AF_INET => {
                let s = u.src_sin;
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes()),
                    u16::from_be(s.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let s = u.src_sin6;
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(s.sin6_addr.s6_addr),
                    u16::from_be(s.sin6_port),
                    s.sin6_flowinfo,
                    s.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// A CM event channel (`struct rdma_event_channel`).
pub(crate) struct EventChannel {
    cm: &'static Cm,
    ptr: NonNull<f::rdma_event_channel>,
}

// SAFETY: see the module documentation.
unsafe impl Send for EventChannel {}
// SAFETY: as for Send.
unsafe impl Sync for EventChannel {}

/// An event read from a channel, copied out and already acknowledged.
#[derive(Debug)]
pub(crate) struct RawEvent {
    pub(crate) kind: u32,
    pub(crate) status: i32,
    pub(crate) id: u32,
    pub(crate) listen_id: Option<u32>,
    pub(crate) param: EventParam,
    /// The id of a connection request.
    pub(crate) new_id: Option<CmId>,
}

/// Handles of CM ids (what events name them by), kept in `id->context`.
static NEXT_HANDLE: AtomicU32 = AtomicU32::new(1);

fn private_data(p: *const c_void, len: u8) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: librdmacm's event holds `len` bytes at `p` until acknowledged.
    unsafe { core::slice::from_raw_parts(p.cast::<u8>(), usize::from(len)) }.to_vec()
}

impl EventChannel {
    /// `rdma_create_event_channel`.
    pub(crate) fn new(cm: &'static Cm) -> Result<EventChannel, Failure> {
        // SAFETY: no arguments.
        let ptr = non_null("rdma_create_event_channel", unsafe {
            (cm.f.rdma_create_event_channel)()
        })?;
        Ok(EventChannel { cm, ptr })
    }

    /// The channel's file descriptor.
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: reading a field of the live channel.
        unsafe { (*self.ptr.as_ptr()).fd }
    }

    /// `rdma_get_cm_event` (non-blocking if the fd is): the event copied out
    /// and acknowledged at once (so `rdma_destroy_id` never waits for us);
    /// `None` if nothing is pending.
    pub(crate) fn next(self: &Arc<Self>) -> io::Result<Option<RawEvent>> {
        let mut ev: *mut f::rdma_cm_event = core::ptr::null_mut();
        // SAFETY: live channel, valid out-parameter.
        let r = unsafe { (self.cm.f.rdma_get_cm_event)(self.ptr.as_ptr(), &mut ev) };
        if r != 0 || ev.is_null() {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: a live event (until acknowledged below) whose `id` is live
        // (librdmacm keeps an id until its events are acknowledged).
        let raw = unsafe {
            let e = &*ev;
            let id = e.id;
            let kind = e.event;
            let ud = matches!((*id).ps, f::RDMA_PS_UDP | f::RDMA_PS_IPOIB);
            let conn = || {
                let c = e.param.conn;
                EventParam::Conn(conv::conn_param_from_c(
                    &c,
                    private_data(c.private_data, c.private_data_len),
                ))
            };
            let udp = || {
                let u = e.param.ud;
                EventParam::Ud(conv::ud_param_from_c(
                    &u,
                    private_data(u.private_data, u.private_data_len),
                ))
            };
            let param = match kind {
                f::RDMA_CM_EVENT_MULTICAST_JOIN | f::RDMA_CM_EVENT_MULTICAST_ERROR => udp(),
                f::RDMA_CM_EVENT_CONNECT_REQUEST
                | f::RDMA_CM_EVENT_CONNECT_RESPONSE
                | f::RDMA_CM_EVENT_ESTABLISHED
                | f::RDMA_CM_EVENT_REJECTED => {
                    if ud {
                        udp()
                    } else {
                        conn()
                    }
                }
                _ => EventParam::None,
            };
            let listen_id =
                (!e.listen_id.is_null()).then(|| (*e.listen_id).context as usize as u32);
            let (handle, new_id) = if kind == f::RDMA_CM_EVENT_CONNECT_REQUEST {
                // A new id (inheriting the listener's context): ours from now on.
                let h = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
                (*id).context = h as usize as *mut c_void;
                let new = NonNull::new(id).map(|p| CmId {
                    cell: Arc::new(IdCell {
                        cm: self.cm,
                        id: Mutex::new(Some(p)),
                        channel: Mutex::new(Arc::clone(self)),
                    }),
                });
                (h, new)
            } else {
                ((*id).context as usize as u32, None)
            };
            RawEvent {
                kind,
                status: e.status,
                id: handle,
                listen_id,
                param,
                new_id,
            }
        };
        // SAFETY: the event read above, acknowledged once; nothing of it is used after.
        let _ = unsafe { (self.cm.f.rdma_ack_cm_event)(ev) };
        Ok(Some(raw))
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id on it holds an Arc of it, so none is left.
        unsafe { (self.cm.f.rdma_destroy_event_channel)(self.ptr.as_ptr()) };
    }
}

/// The shared part of a CM id: the pointer (`None` once destroyed) and the
/// channel it reports to. QPs created on the id hold it too.
pub(crate) struct IdCell {
    cm: &'static Cm,
    id: Mutex<Option<NonNull<f::rdma_cm_id>>>,
    channel: Mutex<Arc<EventChannel>>,
}

// SAFETY: the pointer is only used under the mutex (or, for reads of fields
// librdmacm never changes after creation, while the id is live).
unsafe impl Send for IdCell {}
// SAFETY: as for Send.
unsafe impl Sync for IdCell {}

/// A CM id (`struct rdma_cm_id`), destroyed when dropped.
pub(crate) struct CmId {
    cell: Arc<IdCell>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, fm: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fm.write_str("CmId")
    }
}

impl CmId {
    /// `rdma_create_id` on `ch`, for QPs of `qp_type`; returns the id and
    /// the handle its events carry.
    pub(crate) fn new(
        ch: &Arc<EventChannel>,
        ps: u16,
        qp_type: QpType,
    ) -> Result<(CmId, u32), Failure> {
        let h = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
        let mut id: *mut f::rdma_cm_id = core::ptr::null_mut();
        // SAFETY: live channel, valid out-parameter.
        check("rdma_create_id", unsafe {
            (ch.cm.f.rdma_create_id)(
                ch.ptr.as_ptr(),
                &mut id,
                h as usize as *mut c_void,
                f::rdma_port_space::from(ps),
            )
        })?;
        let id = non_null("rdma_create_id", id)?;
        if qp_type == QpType::Uc {
            // rdma_create_id derives RC from the TCP port space; librdmacm
            // reads the field when it creates and connects the QP.
            // SAFETY: a field of the live id nobody else knows yet.
            unsafe { (*id.as_ptr()).qp_type = f::IBV_QPT_UC };
        }
        Ok((
            CmId {
                cell: Arc::new(IdCell {
                    cm: ch.cm,
                    id: Mutex::new(Some(id)),
                    channel: Mutex::new(Arc::clone(ch)),
                }),
            },
            h,
        ))
    }

    /// Runs `f` on the live id, under the id's lock.
    fn with<R>(
        &self,
        call: &'static str,
        f: impl FnOnce(&'static Cm, *mut f::rdma_cm_id) -> Result<R, Failure>,
    ) -> Result<R, Failure> {
        let g = lock(&self.cell.id);
        match *g {
            Some(id) => f(self.cell.cm, id.as_ptr()),
            None => Err(Failure {
                call,
                errno: libc::EINVAL,
            }),
        }
    }

    /// The port space value.
    pub(crate) fn port_space(&self) -> u16 {
        self.with("rdma_cm_id", |_, id| {
            // SAFETY: reading a field of the live id.
            Ok(unsafe { (*id).ps } as u16)
        })
        .unwrap_or(0)
    }

    /// Local and peer address (`rdma_get_local_addr`/`rdma_get_peer_addr`,
    /// inline in `rdma_cma.h`).
    pub(crate) fn addrs(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        self.with("rdma_cm_id", |_, id| {
            // SAFETY: reading fields of the live id; the destination union
            // has the same layout as the source one.
            let (src, dst) = unsafe {
                let a = &(*id).route.addr;
                (
                    a.src,
                    core::ptr::read((&raw const a.dst).cast::<f::rdma_addr_src>()),
                )
            };
            Ok((socket_addr(&src), socket_addr(&dst)))
        })
        .unwrap_or((None, None))
    }

    pub(crate) fn bind(&self, addr: SocketAddr) -> Result<(), Failure> {
        self.with("rdma_bind_addr", |cm, id| {
            let mut a = sockaddr_of(addr);
            // SAFETY: live id, a socket address of the family it says.
            check("rdma_bind_addr", unsafe {
                (cm.f.rdma_bind_addr)(id, (&raw mut a).cast())
            })
        })
    }

    pub(crate) fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: i32,
    ) -> Result<(), Failure> {
        self.with("rdma_resolve_addr", |cm, id| {
            let mut s = src.map(sockaddr_of);
            let mut d = sockaddr_of(dst);
            let sp = s.as_mut().map_or(core::ptr::null_mut(), |s| {
                (s as *mut f::rdma_addr_src).cast()
            });
            // SAFETY: live id; socket addresses of the families they say.
            check("rdma_resolve_addr", unsafe {
                (cm.f.rdma_resolve_addr)(id, sp, (&raw mut d).cast(), timeout_ms)
            })
        })
    }

    pub(crate) fn resolve_route(&self, timeout_ms: i32) -> Result<(), Failure> {
        self.with("rdma_resolve_route", |cm, id| {
            // SAFETY: live id.
            check("rdma_resolve_route", unsafe {
                (cm.f.rdma_resolve_route)(id, timeout_ms)
            })
        })
    }

    pub(crate) fn listen(&self, backlog: i32) -> Result<(), Failure> {
        self.with("rdma_listen", |cm, id| {
            // SAFETY: live id.
            check("rdma_listen", unsafe { (cm.f.rdma_listen)(id, backlog) })
        })
    }

    pub(crate) fn accept(&self, p: &ConnParam) -> Result<(), Failure> {
        self.with("rdma_accept", |cm, id| {
            let mut c = conv::conn_param_to_c(p);
            // SAFETY: live id; the private data pointer borrows `p`.
            check("rdma_accept", unsafe { (cm.f.rdma_accept)(id, &mut c) })
        })
    }

    pub(crate) fn reject(&self, private_data: &[u8]) -> Result<(), Failure> {
        self.with("rdma_reject", |cm, id| {
            let len = private_data.len().min(usize::from(u8::MAX));
            let p = if len == 0 {
                core::ptr::null()
            } else {
                private_data.as_ptr().cast()
            };
            // SAFETY: live id; `len` readable bytes at `p`.
            check("rdma_reject", unsafe {
                (cm.f.rdma_reject)(id, p, len as u8)
            })
        })
    }

    pub(crate) fn connect(&self, p: &ConnParam) -> Result<(), Failure> {
        self.with("rdma_connect", |cm, id| {
            let mut c = conv::conn_param_to_c(p);
            // SAFETY: live id; the private data pointer borrows `p`.
            check("rdma_connect", unsafe { (cm.f.rdma_connect)(id, &mut c) })
        })
    }

    pub(crate) fn establish(&self) -> Result<(), Failure> {
        self.with("rdma_establish", |cm, id| {
            // SAFETY: live id.
            check("rdma_establish", unsafe { (cm.f.rdma_establish)(id) })
        })
    }

    pub(crate) fn disconnect(&self) -> Result<(), Failure> {
        self.with("rdma_disconnect", |cm, id| {
            // SAFETY: live id.
            check("rdma_disconnect", unsafe { (cm.f.rdma_disconnect)(id) })
        })
    }

    pub(crate) fn join_multicast(&self, group: IpAddr) -> Result<(), Failure> {
        self.with("rdma_join_multicast", |cm, id| {
            let mut a = sockaddr_of(SocketAddr::new(group, 0));
            // SAFETY: live id; a socket address of the family it says.
            check("rdma_join_multicast", unsafe {
                (cm.f.rdma_join_multicast)(id, (&raw mut a).cast(), core::ptr::null_mut())
            })
        })
    }

    pub(crate) fn leave_multicast(&self, group: IpAddr) -> Result<(), Failure> {
        self.with("rdma_leave_multicast", |cm, id| {
            let mut a = sockaddr_of(SocketAddr::new(group, 0));
            // SAFETY: live id; a socket address of the family it says.
            check("rdma_leave_multicast", unsafe {
                (cm.f.rdma_leave_multicast)(id, (&raw mut a).cast())
            })
        })
    }

    /// `rdma_migrate_id` to `ch`.
    pub(crate) fn migrate(&self, ch: &Arc<EventChannel>) -> Result<(), Failure> {
        self.with("rdma_migrate_id", |cm, id| {
            // SAFETY: live id and channel.
            check("rdma_migrate_id", unsafe {
                (cm.f.rdma_migrate_id)(id, ch.ptr.as_ptr())
            })?;
            *lock(&self.cell.channel) = Arc::clone(ch);
            Ok(())
        })
    }

    /// `rdma_set_option(id, RDMA_OPTION_ID, name, value)`.
    pub(crate) fn set_option(&self, name: c_int, value: &mut [u8]) -> Result<(), Failure> {
        self.with("rdma_set_option", |cm, id| {
            // SAFETY: live id; `value` is writable for its length.
            check("rdma_set_option", unsafe {
                (cm.f.rdma_set_option)(
                    id,
                    f::RDMA_OPTION_ID,
                    name,
                    value.as_mut_ptr().cast(),
                    value.len(),
                )
            })
        })
    }

    /// `rdma_init_qp_attr` for `state`.
    pub(crate) fn init_qp_attr(&self, state: QpState) -> Result<(QpAttr, QpAttrMask), Failure> {
        self.with("rdma_init_qp_attr", |cm, id| {
            let mut a = f::ibv_qp_attr::zeroed();
            a.qp_state = state.as_u32();
            let mut mask: c_int = 0;
            // SAFETY: live id, valid out-parameters.
            check("rdma_init_qp_attr", unsafe {
                (cm.f.rdma_init_qp_attr)(id, &mut a, &mut mask)
            })?;
            Ok((conv::qp_attr_from_c(&a), QpAttrMask(mask as u32)))
        })
    }

    /// `rdma_create_qp` on the id with `pd`, which must be on the id's
    /// device; librdmacm moves it to INIT (UD: RTS) and drives it from then on.
    pub(crate) fn create_qp(&self, pd: &Arc<Pd>, spec: &QpSpec<'_>) -> Result<Qp, Failure> {
        self.with("rdma_create_qp", |cm, id| {
            // SAFETY: reading a field of the live id.
            if unsafe { (*id).verbs } != pd.dev.ctx.as_ptr() {
                return Err(Failure {
                    call: "rdma_create_qp",
                    errno: libc::EINVAL,
                });
            }
            let mut a = spec.to_c();
            // SAFETY: live id, PD, CQs and SRQ.
            check("rdma_create_qp", unsafe {
                (cm.f.rdma_create_qp)(id, pd.ptr.as_ptr(), &mut a)
            })?;
            // SAFETY: rdma_create_qp succeeded, so `id->qp` is the new QP.
            let qp = non_null("rdma_create_qp", unsafe { (*id).qp })?;
            Ok(Qp::wrap(pd, spec, qp, &a.cap, Some(Arc::clone(&self.cell))))
        })
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        let mut g = lock(&self.cell.id);
        if let Some(id) = g.take() {
            // SAFETY: the live id, destroyed once; its events were all
            // acknowledged when read, so this does not wait for us. A QP on
            // it stays valid (librdmacm does not touch `id->qp` here).
            let _ = unsafe { (self.cell.cm.f.rdma_destroy_id)(id.as_ptr()) };
        }
    }
}

/// `O_NONBLOCK` on a descriptor rdma-core hands out (a completion or event
/// channel's; its documentation allows changing the mode).
pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl F_GETFL/F_SETFL on a descriptor the caller keeps open;
    // they touch no memory.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
