//! The verbs and connection-manager calls rsockets make, as small wrappers:
//! librdmacm reaches the one engine of the process through libibverbs' C ABI
//! (and the `rdma_*` forwards of [`crate::cm`]); the inline verbs
//! (`ibv_post_send`, `ibv_poll_cq`, ...) go through the context's `ops` table
//! as rdma-core's inline functions do. Every pointer passed here is one this
//! module created (or the engine returned) and that its owner keeps alive.

use core::ffi::{c_int, c_uint, c_void};
use core::ptr;

use crate::ffi::*;
use crate::guard::errno;

unsafe extern "C" {
    fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
    fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
    fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr;
    fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    fn ibv_get_cq_event(
        channel: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int;
    fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint);
    fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah;
    fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int;
    fn ibv_query_gid(
        context: *mut ibv_context,
        port_num: u8,
        index: c_int,
        gid: *mut ibv_gid,
    ) -> c_int;
}

/// `Err(errno)` for a `-1`/non-zero return.
pub(super) type Res<T> = Result<T, c_int>;

fn check(r: c_int) -> Res<()> {
    if r == 0 {
        Ok(())
    } else {
        let e = errno();
        Err(if e == 0 { libc::EIO } else { e })
    }
}

fn nonnull<T>(p: *mut T) -> Res<*mut T> {
    if p.is_null() {
        Err(match errno() {
            0 => libc::ENOMEM,
            e => e,
        })
    } else {
        Ok(p)
    }
}

/// The verbs objects of one connected rsocket: PD, completion channel, one
/// CQ for sends and receives, and the QP on the cm_id.
pub(super) struct Verbs {
    pub(super) id: *mut rdma_cm_id,
    pub(super) pd: *mut ibv_pd,
    pub(super) chan: *mut ibv_comp_channel,
    pub(super) cq: *mut ibv_cq,
    pub(super) qp: *mut ibv_qp,
    ops: *const ibv_context_ops,
}

// SAFETY: the objects are the engine's, usable from any thread (the C ABI is
// thread-safe); the rsocket owning them serializes its own use with a mutex.
unsafe impl Send for Verbs {}

impl Verbs {
    /// PD, channel (non-blocking fd), CQ of `cqe` entries (armed), and an RC
    /// QP on `id` with `sq_sig_all`.
    pub(super) fn create(id: *mut rdma_cm_id, sq: u32, rq: u32, inline: u32) -> Res<(Verbs, u32)> {
        Self::create_qp(id, IBV_QPT_RC, sq, rq, inline)
    }

    /// The same with a QP of type `qp_type` (RC: 2 send SGEs, 1 receive
    /// SGE; UD: 1 send SGE, 2 receive SGEs for the GRH and the data).
    pub(super) fn create_qp(
        id: *mut rdma_cm_id,
        qp_type: ibv_qp_type,
        sq: u32,
        rq: u32,
        inline: u32,
    ) -> Res<(Verbs, u32)> {
        // SAFETY: `id` is a live cm_id with a device (bound/resolved).
        let ctx = unsafe { (*id).verbs };
        if ctx.is_null() {
            return Err(libc::ENODEV);
        }
        // SAFETY: live context.
        let pd = nonnull(unsafe { ibv_alloc_pd(ctx) })?;
        let mut v = Verbs {
            id,
            pd,
            chan: ptr::null_mut(),
            cq: ptr::null_mut(),
            qp: ptr::null_mut(),
            // SAFETY: live context; the ops table lives as long as it.
            ops: unsafe { &raw const (*ctx).ops },
        };
        // SAFETY: live context.
        v.chan = nonnull(unsafe { ibv_create_comp_channel(ctx) })?;
        // SAFETY: the channel's fd.
        unsafe {
            let fl = libc::fcntl((*v.chan).fd, libc::F_GETFL);
            libc::fcntl((*v.chan).fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        // SAFETY: live context and channel.
        v.cq = nonnull(unsafe { ibv_create_cq(ctx, (sq + rq) as c_int, id.cast(), v.chan, 0) })?;
        v.arm()?;
        let mut attr: ibv_qp_init_attr = unsafe_zeroed();
        attr.send_cq = v.cq;
        attr.recv_cq = v.cq;
        attr.qp_type = qp_type;
        attr.sq_sig_all = 1;
        attr.cap.max_send_wr = sq;
        attr.cap.max_recv_wr = rq;
        let ud = qp_type == IBV_QPT_UD;
        attr.cap.max_send_sge = if ud { 1 } else { 2 };
        attr.cap.max_recv_sge = if ud { 2 } else { 1 };
        attr.cap.max_inline_data = inline;
        // SAFETY: live id and PD, local attr.
        check(unsafe { crate::cm::rdma_create_qp(id, pd, &mut attr) })?;
        // SAFETY: rdma_create_qp set it.
        v.qp = unsafe { (*id).qp };
        Ok((v, attr.cap.max_inline_data))
    }

    /// The QP's number.
    pub(super) fn qp_num(&self) -> u32 {
        // SAFETY: live QP.
        unsafe { (*self.qp).qp_num }
    }

    /// The completion channel's fd (readable when an armed CQ has an event).
    pub(super) fn fd(&self) -> c_int {
        // SAFETY: live channel.
        unsafe { (*self.chan).fd }
    }

    /// Registers `len` bytes at `addr` with local and remote write access.
    pub(super) fn reg(&self, addr: *mut u8, len: usize) -> Res<*mut ibv_mr> {
        let acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        // SAFETY: live PD; the caller keeps the region alive until dereg.
        nonnull(unsafe { ibv_reg_mr(self.pd, addr.cast(), len, acc as c_int) })
    }

    /// Deregisters an MR of this PD.
    pub(super) fn dereg(&self, mr: *mut ibv_mr) {
        // SAFETY: an MR registered by `reg`, deregistered once.
        unsafe { ibv_dereg_mr(mr) };
    }

    /// `ibv_req_notify_cq(cq, 0)`.
    pub(super) fn arm(&self) -> Res<()> {
        // SAFETY: the live context's ops table.
        let f = unsafe { (*self.ops).req_notify_cq }.ok_or(libc::ENOSYS)?;
        // SAFETY: live CQ.
        check(unsafe { f(self.cq, 0) })
    }

    /// Takes one CQ event if there is one (non-blocking) and acks it.
    pub(super) fn take_event(&self) -> bool {
        let mut cq = ptr::null_mut();
        let mut c = ptr::null_mut();
        // SAFETY: live channel, local outputs.
        if unsafe { ibv_get_cq_event(self.chan, &mut cq, &mut c) } == 0 {
            // SAFETY: the CQ the event named (ours).
            unsafe { ibv_ack_cq_events(cq, 1) };
            true
        } else {
            false
        }
    }

    /// Polls up to `wc.len()` completions.
    pub(super) fn poll(&self, wc: &mut [ibv_wc]) -> Res<usize> {
        // SAFETY: the live context's ops table.
        let f = unsafe { (*self.ops).poll_cq }.ok_or(libc::ENOSYS)?;
        // SAFETY: live CQ; `wc` is writable for its length.
        let n = unsafe { f(self.cq, wc.len() as c_int, wc.as_mut_ptr()) };
        if n < 0 {
            Err(libc::EIO)
        } else {
            Ok(n as usize)
        }
    }

    /// Posts one send work request.
    pub(super) fn post_send(&self, wr: &mut ibv_send_wr) -> Res<()> {
        // SAFETY: the live context's ops table.
        let f = unsafe { (*self.ops).post_send }.ok_or(libc::ENOSYS)?;
        let mut bad = ptr::null_mut();
        // SAFETY: live QP; `wr` and its SGEs are valid for the call (inline
        // data is copied; registered buffers are the rsocket's own).
        let r = unsafe { f(self.qp, wr, &mut bad) };
        if r == 0 { Ok(()) } else { Err(r.abs()) }
    }

    /// Posts one zero-length receive (`wr_id` given).
    pub(super) fn post_recv(&self, wr_id: u64) -> Res<()> {
        // SAFETY: the live context's ops table.
        let f = unsafe { (*self.ops).post_recv }.ok_or(libc::ENOSYS)?;
        let mut wr = ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: live QP, local WR with no SGE.
        let r = unsafe { f(self.qp, &mut wr, &mut bad) };
        if r == 0 { Ok(()) } else { Err(r.abs()) }
    }

    /// Posts one receive of the given SGEs.
    pub(super) fn post_recv_sges(&self, wr_id: u64, sges: &mut [ibv_sge]) -> Res<()> {
        // SAFETY: the live context's ops table.
        let f = unsafe { (*self.ops).post_recv }.ok_or(libc::ENOSYS)?;
        let mut wr = ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as c_int,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: live QP; the SGEs name registered memory of the caller.
        let r = unsafe { f(self.qp, &mut wr, &mut bad) };
        if r == 0 { Ok(()) } else { Err(r.abs()) }
    }

    /// An address handle to `dgid` from our GID `sgid` (RoCE: global).
    pub(super) fn create_ah(&self, sgid: [u8; 16], dgid: [u8; 16]) -> Res<*mut ibv_ah> {
        // SAFETY: live id.
        let (ctx, port) = unsafe { ((*self.id).verbs, (*self.id).port_num.max(1)) };
        let mut sgid_index = 0u8;
        for i in 0..16 {
            let mut g: ibv_gid = unsafe_zeroed();
            // SAFETY: live context, local output.
            if unsafe { ibv_query_gid(ctx, port, i, &mut g) } == 0 && unsafe { g.raw } == sgid {
                sgid_index = i as u8;
                break;
            }
        }
        let mut attr: ibv_ah_attr = unsafe_zeroed();
        attr.is_global = 1;
        attr.grh.dgid.raw = dgid;
        attr.grh.sgid_index = sgid_index;
        attr.grh.hop_limit = 64;
        attr.port_num = port;
        // SAFETY: live PD, local attr.
        nonnull(unsafe { ibv_create_ah(self.pd, &mut attr) })
    }

    pub(super) fn destroy_ah(&self, ah: *mut ibv_ah) {
        // SAFETY: an AH of ours, destroyed once.
        unsafe { ibv_destroy_ah(ah) };
    }

    /// Destroys the QP, CQ, channel and PD (not the id). `mrs` first.
    pub(super) fn destroy(&mut self, mrs: &mut [*mut ibv_mr]) {
        for mr in mrs.iter_mut().filter(|m| !m.is_null()) {
            // SAFETY: an MR of ours, deregistered once.
            unsafe { ibv_dereg_mr(*mr) };
            *mr = ptr::null_mut();
        }
        if !self.qp.is_null() {
            // SAFETY: live id with our QP.
            unsafe { crate::cm::rdma_destroy_qp(self.id) };
            self.qp = ptr::null_mut();
        }
        if !self.cq.is_null() {
            // SAFETY: our CQ, its QP gone.
            unsafe { ibv_destroy_cq(self.cq) };
            self.cq = ptr::null_mut();
        }
        if !self.chan.is_null() {
            // SAFETY: our channel, its CQ gone.
            unsafe { ibv_destroy_comp_channel(self.chan) };
            self.chan = ptr::null_mut();
        }
        if !self.pd.is_null() {
            // SAFETY: our PD, nothing left on it.
            unsafe { ibv_dealloc_pd(self.pd) };
            self.pd = ptr::null_mut();
        }
    }
}

/// An all-zero value of a C struct (every type used here is plain data for
/// which zero is valid: integers, raw pointers, unions of those).
pub(super) fn unsafe_zeroed<T: Copy>() -> T {
    // SAFETY: only instantiated with `#[repr(C)]` plain-data FFI structs.
    unsafe { core::mem::zeroed() }
}

/// A zeroed, page-aligned memory region that the peer writes into by RDMA:
/// never referenced as a Rust slice while registered; read and written by
/// raw copies only.
pub(super) struct Region {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory owned by this value.
unsafe impl Send for Region {}

impl Region {
    pub(super) fn new(len: usize) -> Res<Region> {
        let layout =
            std::alloc::Layout::from_size_align(len.max(1), 4096).map_err(|_| libc::EINVAL)?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            Err(libc::ENOMEM)
        } else {
            Ok(Region {
                ptr,
                len: len.max(1),
            })
        }
    }
    pub(super) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub(super) fn addr(&self, off: usize) -> u64 {
        self.ptr as u64 + off as u64
    }
    /// Copies `out.len()` bytes from `off` (bounds-checked).
    pub(super) fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.len);
        // SAFETY: in bounds; `out` is a distinct Rust buffer.
        unsafe { ptr::copy_nonoverlapping(self.ptr.add(off), out.as_mut_ptr(), out.len()) };
    }
    /// Copies `data` to `off` (bounds-checked).
    pub(super) fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: in bounds; `data` is a distinct Rust buffer.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) };
    }
    /// A volatile read of a `u64`/`u32` the peer may be writing (the SGL).
    pub(super) fn read_u64(&self, off: usize) -> u64 {
        assert!(off + 8 <= self.len && off.is_multiple_of(8));
        // SAFETY: in bounds and aligned.
        unsafe { ptr::read_volatile(self.ptr.add(off).cast::<u64>()) }
    }
    pub(super) fn read_u32(&self, off: usize) -> u32 {
        assert!(off + 4 <= self.len && off.is_multiple_of(4));
        // SAFETY: in bounds and aligned.
        unsafe { ptr::read_volatile(self.ptr.add(off).cast::<u32>()) }
    }
    pub(super) fn write_u64(&self, off: usize, v: u64) {
        assert!(off + 8 <= self.len && off.is_multiple_of(8));
        // SAFETY: in bounds and aligned.
        unsafe { ptr::write_volatile(self.ptr.add(off).cast::<u64>(), v) }
    }
    pub(super) fn write_u32(&self, off: usize, v: u32) {
        assert!(off + 4 <= self.len && off.is_multiple_of(4));
        // SAFETY: in bounds and aligned.
        unsafe { ptr::write_volatile(self.ptr.add(off).cast::<u32>(), v) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, 4096).expect("layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}
