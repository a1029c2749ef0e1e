//! The data path reached through `ibv_context_ops`: `ibv_post_send`,
//! `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`
//! are inline in applications and call these slots.

use super::conv::wc_to_c;
use super::few::Few;
use super::objects::{self as o, Ah, Cq, Kind, Qp, Srq};
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};
use core::ffi::c_int;
use softrdma_engine::transport::{
    ExpressWr, RecvWr, SendFlags, SendWr, Sge, Sgl, UdDest, VerbsError, WrOpcode,
};

/// Fills the live slots of a context's ops table.
pub(crate) fn install_ops(ops: &mut ibv_context_ops) {
    ops.poll_cq = Some(poll_cq);
    ops.req_notify_cq = Some(req_notify_cq);
    ops.post_send = Some(post_send);
    ops.post_recv = Some(post_recv);
    ops.post_srq_recv = Some(post_srq_recv);
}

/// Largest inline payload accepted whatever the QP's cap (abi.md §0.9:
/// rdma_xclient posts inline data on a QP created with max_inline_data 0).
pub(crate) const MAX_INLINE: usize = 512;

/// Reads an SGE list.
///
/// # Safety
///
/// `sg` must point to `n` readable SGEs (or `n <= 0`).
pub(super) unsafe fn sges(sg: *const ibv_sge, n: c_int) -> Result<Sgl, c_int> {
    // SAFETY: forwarded contract.
    let s = unsafe { sge_slice(sg, n) }?;
    // One SGE (most requests) is put in place: the iterator's `collect`
    // into the list cost a lone post ~40 instructions more (callgrind of
    // `ib_send_lat`'s `ibv_post_recv`).
    Ok(match s {
        [e] => Sgl::from_buf([sge_of(e)]),
        _ => s.iter().map(sge_of).collect(),
    })
}

/// An SGE as the transport takes it.
fn sge_of(e: &ibv_sge) -> Sge {
    Sge {
        addr: e.addr,
        length: e.length,
        lkey: e.lkey,
    }
}

/// An SGE list as the application wrote it (no copy: an inline post reads
/// its data through it and keeps no list).
///
/// # Safety
///
/// As for [`sges`]; the slice must not outlive the application's list.
unsafe fn sge_slice<'a>(sg: *const ibv_sge, n: c_int) -> Result<&'a [ibv_sge], c_int> {
    if n <= 0 {
        return Ok(&[]);
    }
    if sg.is_null() || n > 1024 {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller guarantees `n` readable SGEs.
    Ok(unsafe { core::slice::from_raw_parts(sg, n as usize) })
}

/// Converts one `ibv_send_wr` (not its `next`).
///
/// # Safety
///
/// `w` must be a readable work request whose SGEs are readable, and for
/// `IBV_SEND_INLINE` whose SGE ranges are readable memory (the verbs contract).
unsafe fn send_wr(q: &Qp, w: &ibv_send_wr) -> Result<SendWr, c_int> {
    let opcode = WrOpcode::from_u32(w.opcode).ok_or(libc::EINVAL)?;
    if opcode == WrOpcode::AtomicWrite {
        // Only the extended API (`ibv_wr_atomic_write`) carries its data.
        return Err(libc::EINVAL);
    }
    let mut r = SendWr::new(w.wr_id, opcode);
    let flags = SendFlags(w.send_flags);
    r.flags = flags;
    if i64::from(w.num_sge) > i64::from(q.max_sge.0) {
        return Err(libc::EINVAL);
    }
    if flags.contains(SendFlags::INLINE)
        && !matches!(opcode, WrOpcode::RdmaRead)
        && !opcode.is_atomic()
    {
        // SAFETY: forwarded contract.
        let sgl = unsafe { sge_slice(w.sg_list, w.num_sge) }?;
        let total: usize = sgl.iter().map(|s| s.length as usize).sum();
        if total > MAX_INLINE {
            return Err(libc::EINVAL);
        }
        let mut data = Vec::with_capacity(total);
        for s in sgl {
            if s.length > 0 {
                // SAFETY: inline SGEs name application memory readable now (verbs contract).
                data.extend_from_slice(unsafe {
                    core::slice::from_raw_parts(s.addr as *const u8, s.length as usize)
                });
            }
        }
        r.inline = Some(data);
    } else {
        // SAFETY: forwarded contract.
        r.sgl = unsafe { sges(w.sg_list, w.num_sge) }?;
    }
    // SAFETY: reading union members as plain integers.
    unsafe {
        match opcode {
            WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => {
                r.imm_data = u32::from_be(w.imm.imm_data)
            }
            WrOpcode::SendWithInv | WrOpcode::LocalInv => r.imm_data = w.imm.invalidate_rkey,
            WrOpcode::BindMw => {
                let b = w.ext.bind_mw;
                r.bind = Some(super::mw::bind_from_c(b.mw, b.rkey, &b.bind_info)?);
            }
            _ => {}
        }
        match opcode {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                r.remote_addr = w.wr.rdma.remote_addr;
                r.rkey = w.wr.rdma.rkey;
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                r.remote_addr = w.wr.atomic.remote_addr;
                r.rkey = w.wr.atomic.rkey;
                r.compare_add = w.wr.atomic.compare_add;
                r.swap = w.wr.atomic.swap;
            }
            _ => {}
        }
        if q.qp_type == softrdma_engine::transport::QpType::XrcSend {
            r.xrc_remote_srqn = w.qp_type.xrc.remote_srqn;
        }
        if q.qp_type == softrdma_engine::transport::QpType::Ud {
            let ud = w.wr.ud;
            let Some(ah) = o::obj::<Ah>(ud.ah.cast(), Kind::Ah) else {
                return Err(libc::EINVAL);
            };
            r.ud = Some(UdDest {
                av: ah.av,
                remote_qpn: ud.remote_qpn,
                remote_qkey: ud.remote_qkey,
            });
        }
    }
    Ok(r)
}

/// The express form of `w` ([`ExpressWr`]) if it may have one: a SEND or
/// RDMA WRITE (± immediate data) of an RC QP (`qp_type`, granted `max_sge`
/// send SGEs), with at most one SGE, or inline data from one. `None` leaves it to [`send_wr`], which also
/// refuses what is wrong with it.
///
/// # Safety
///
/// As [`send_wr`]'s.
unsafe fn express_wr<'a>(
    qp_type: softrdma_engine::transport::QpType,
    max_sge: u32,
    w: &'a ibv_send_wr,
) -> Option<ExpressWr<'a>> {
    let (opcode, imm, write) = match w.opcode {
        IBV_WR_SEND => (WrOpcode::Send, false, false),
        IBV_WR_SEND_WITH_IMM => (WrOpcode::SendWithImm, true, false),
        IBV_WR_RDMA_WRITE => (WrOpcode::RdmaWrite, false, true),
        IBV_WR_RDMA_WRITE_WITH_IMM => (WrOpcode::RdmaWriteWithImm, true, true),
        _ => return None,
    };
    if qp_type != softrdma_engine::transport::QpType::Rc
        || !(0..=1).contains(&w.num_sge)
        || i64::from(w.num_sge) > i64::from(max_sge)
    {
        return None;
    }
    // SAFETY: forwarded contract (a readable list of `num_sge` SGEs).
    let sge = unsafe { sge_slice(w.sg_list, w.num_sge) }
        .ok()?
        .first()
        .map(sge_of);
    let flags = SendFlags(w.send_flags);
    let inline = match sge {
        _ if !flags.contains(SendFlags::INLINE) => None,
        Some(s) if s.length as usize > MAX_INLINE => return None,
        Some(s) if s.length > 0 => {
            let (at, len) = (s.addr as *const u8, s.length as usize);
            // SAFETY: an inline SGE names application memory readable
            // during the post (verbs contract).
            Some(unsafe { core::slice::from_raw_parts(at, len) })
        }
        // An empty one need not name any memory.
        _ => Some(&[][..]),
    };
    // SAFETY: reading union members as plain integers.
    let (imm_data, remote_addr, rkey) = unsafe {
        (
            if imm { u32::from_be(w.imm.imm_data) } else { 0 },
            if write { w.wr.rdma.remote_addr } else { 0 },
            if write { w.wr.rdma.rkey } else { 0 },
        )
    };
    Some(ExpressWr {
        wr_id: w.wr_id,
        opcode,
        flags,
        sge: sge.filter(|_| inline.is_none()),
        inline,
        imm_data,
        remote_addr,
        rkey,
    })
}

/// A list of work requests as C links them.
pub(super) trait Chained {
    fn next(&self) -> *mut Self;
}

impl Chained for ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

impl Chained for ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

/// The post verbs: converts the chain `wr` up to the first request `conv`
/// refuses, posts what it converted with `post` (which also gets their
/// pointers, and says which request the QP or SRQ refused), and returns 0,
/// or a positive errno with `*bad_wr` at the first request not posted. The
/// requests go to the live object of `kind` behind `target`; anything else
/// fails at `wr` with EINVAL.
///
/// # Safety
///
/// `wr` must be NULL or a readable chain and `bad_wr` NULL or writable
/// (the verbs contract).
pub(super) unsafe fn post_chain<T, W: Chained, R>(
    target: *mut core::ffi::c_void,
    kind: Kind,
    wr: *mut W,
    bad_wr: *mut *mut W,
    conv: impl Fn(&T, &W) -> Result<R, c_int> + Copy,
    post: impl Fn(&T, Few<R>, &[*mut W]) -> Result<(), (usize, VerbsError)>,
) -> c_int {
    let one = |t: &T, w: &W, p: *mut W| {
        let r = conv(t, w)?;
        post(t, Few::One([r]), &[p]).map_err(|(_, e)| e.errno())
    };
    // SAFETY: forwarded contract.
    unsafe { post_requests(target, kind, wr, bad_wr, conv, one, &post) }
}

/// [`post_chain`] with a poster of its own for a lone request (`one`, which
/// converts it too: most posts, as `ib_send_lat`, UCX and libfabric post
/// one at a time), which skips the chain's gathering: a lone `ibv_post_recv` was ~150
/// instructions cheaper (of ~490, callgrind), and each move of a 184-byte
/// `SendWr` into the gathering was a `memcpy`, 2.3 % of a same-host
/// `ib_write_lat` client's time (`perf record`, BENCHMARKS.md "A lone
/// post").
///
/// # Safety
///
/// As [`post_chain`]'s.
pub(super) unsafe fn post_requests<T, W: Chained, R>(
    target: *mut core::ffi::c_void,
    kind: Kind,
    wr: *mut W,
    bad_wr: *mut *mut W,
    mut conv: impl FnMut(&T, &W) -> Result<R, c_int>,
    one: impl FnOnce(&T, &W, *mut W) -> Result<(), c_int>,
    many: impl FnOnce(&T, Few<R>, &[*mut W]) -> Result<(), (usize, VerbsError)>,
) -> c_int {
    // SAFETY: `wr` is NULL or readable (verbs contract).
    if !wr.is_null() && unsafe { (*wr).next() }.is_null() {
        // SAFETY: forwarded contract.
        return unsafe { post_lone(target, kind, wr, bad_wr, one) };
    }
    ffi_guard(
        || ret::pos(libc::EIO),
        || {
            // SAFETY: the caller passes a writable (or NULL) `bad_wr`.
            let set_bad = |w: *mut W| unsafe { report_bad(bad_wr, w) };
            // SAFETY: registry-checked.
            let Some(t) = (unsafe { o::obj::<T>(target, kind) }) else {
                set_bad(wr);
                return ret::pos(libc::EINVAL);
            };
            // Convert the whole chain first, then post it under one lock.
            let mut ptrs = Few::default();
            let mut wrs = Few::default();
            let mut p = wr;
            let mut conv_err = None;
            while !p.is_null() {
                // SAFETY: application-owned chain of readable WRs (verbs contract).
                let w = unsafe { &*p };
                match conv(t, w) {
                    Ok(r) => {
                        wrs.push(r);
                        ptrs.push(p);
                    }
                    Err(e) => {
                        conv_err = Some((p, e));
                        break;
                    }
                }
                p = w.next();
            }
            let ptrs = ptrs.as_slice();
            if let Err((i, e)) = many(t, wrs, ptrs) {
                set_bad(ptrs[i]);
                return e.errno();
            }
            if let Some((p, e)) = conv_err {
                set_bad(p);
                return e;
            }
            0
        },
    )
}

/// [`post_requests`] of a lone request `wr` (its `next` is NULL). Its
/// frame holds what the request needs and no more: the closure
/// `catch_unwind` runs is moved into its frame, and the chain's larger one
/// cost a lone `ibv_post_send` 16 instructions more (callgrind).
///
/// # Safety
///
/// As [`post_chain`]'s.
#[inline(always)]
unsafe fn post_lone<T, W>(
    target: *mut core::ffi::c_void,
    kind: Kind,
    wr: *mut W,
    bad_wr: *mut *mut W,
    one: impl FnOnce(&T, &W, *mut W) -> Result<(), c_int>,
) -> c_int {
    ffi_guard(
        || ret::pos(libc::EIO),
        move || {
            let refuse = |e: c_int| {
                // SAFETY: the caller passes a writable (or NULL) `bad_wr`.
                unsafe { report_bad(bad_wr, wr) };
                e
            };
            // SAFETY: registry-checked.
            let Some(t) = (unsafe { o::obj::<T>(target, kind) }) else {
                return refuse(ret::pos(libc::EINVAL));
            };
            // SAFETY: `wr` is readable (verbs contract).
            match one(t, unsafe { &*wr }, wr) {
                Ok(()) => 0,
                Err(e) => refuse(e),
            }
        },
    )
}

/// Stores `w`, the first request not posted, in `*bad_wr` (if given).
///
/// # Safety
///
/// `bad_wr` is NULL or writable (the verbs contract).
#[inline(always)]
unsafe fn report_bad<W>(bad_wr: *mut *mut W, w: *mut W) {
    if !bad_wr.is_null() {
        // SAFETY: not NULL, so writable (the caller's contract).
        unsafe { bad_wr.write(w) };
    }
}

/// `ops.post_send`: 0, or a positive errno with `*bad_wr` at the first refused WR.
unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: each request of the chain is readable, with its SGEs and inline
    // data (the verbs contract `post_chain` relies on too).
    let conv = |q: &Qp, w: &ibv_send_wr| unsafe { send_wr(q, w) };
    // A lone request may take the QP's express cell, read straight from
    // the application's request; a `SendWr` is built only if it does not.
    let one = |q: &Qp, w: &ibv_send_wr, _| {
        let mut x = q.express.as_deref();
        if let Some(cell) = x
            // SAFETY: as `conv`.
            && let Some(e) = unsafe { express_wr(q.qp_type, q.max_sge.0, w) }
        {
            if q.engine.post_send_express(cell, q.qpn, &e) {
                return Ok(());
            }
            // Declined: not asked again (a QP with a message out, as in a
            // stream of lone posts, would take both locks twice a post).
            x = None;
        }
        let r = conv(q, w)?;
        let posted = q.engine.post_send_via(x, q.qpn, r);
        posted.map(|()| note_bind(w)).map_err(|e| e.errno())
    };
    let many = |q: &Qp, wrs, ptrs: &[*mut ibv_send_wr]| {
        let posted = q.engine.post_send_many(q.qpn, wrs);
        let n = posted.as_ref().map_or_else(|(i, _)| *i, |()| ptrs.len());
        for &p in &ptrs[..n] {
            // SAFETY: the application's chain, still readable.
            note_bind(unsafe { &*p });
        }
        posted
    };
    // SAFETY: application-owned chain and `bad_wr` (verbs contract).
    unsafe { post_requests(qp.cast(), Kind::Qp, wr, bad_wr, conv, one, many) }
}

/// After a posted request: an `IBV_WR_BIND_MW` records the rkey it binds.
fn note_bind(w: &ibv_send_wr) {
    if w.opcode == IBV_WR_BIND_MW {
        // SAFETY: reading the bind member of an IBV_WR_BIND_MW request.
        let b = unsafe { w.ext.bind_mw };
        super::mw::note_bound(b.mw, b.rkey);
    }
}

/// Converts one `ibv_recv_wr` (not its `next`): EINVAL for more than
/// `max_sge` SGEs.
///
/// # Safety
///
/// `w`'s SGE list must be readable.
unsafe fn recv_wr(w: &ibv_recv_wr, max_sge: u32) -> Result<RecvWr, c_int> {
    if i64::from(w.num_sge) > i64::from(max_sge) {
        return Err(libc::EINVAL);
    }
    // SAFETY: forwarded contract.
    let sgl = unsafe { sges(w.sg_list, w.num_sge) }?;
    Ok(RecvWr {
        wr_id: w.wr_id,
        sgl,
    })
}

/// `ops.post_recv`.
unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: each request's SGE list is readable (verbs contract).
    let conv = |q: &Qp, w: &ibv_recv_wr| unsafe { recv_wr(w, q.max_sge.1) };
    let post = |q: &Qp, wrs, _: &[_]| q.engine.post_recv_via(q.express.as_deref(), q.qpn, wrs);
    // SAFETY: application-owned chain and `bad_wr` (verbs contract).
    unsafe { post_chain(qp.cast(), Kind::Qp, wr, bad_wr, conv, post) }
}

/// `ops.post_srq_recv`.
unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: each request's SGE list is readable (verbs contract).
    let conv = |s: &Srq, w: &ibv_recv_wr| unsafe { recv_wr(w, s.max_sge) };
    let post = |s: &Srq, wrs: Few<RecvWr>, _: &[_]| {
        let h = s.h;
        s.engine.post_srq_recv_many(h, wrs)
    };
    // SAFETY: application-owned chain and `bad_wr` (verbs contract).
    unsafe { post_chain(srq.cast(), Kind::Srq, wr, bad_wr, conv, post) }
}

/// `ops.poll_cq`: the number of completions written, or -1 on a bad CQ.
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    o::with_obj(cq.cast(), Kind::Cq, ret::neg, |c: &Cq| {
        if num_entries <= 0 {
            return 0;
        }
        if wc.is_null() {
            return ret::neg(libc::EINVAL);
        }
        let mut i = 0usize;
        let r = c
            .engine
            .poll_cq_ring(&c.ring, c.h, num_entries as usize, |w| {
                // SAFETY: the caller's array holds `num_entries` entries; i < num_entries.
                unsafe { wc.add(i).write(wc_to_c(&w)) };
                i += 1;
            });
        match r {
            Ok(n) => n as c_int,
            Err(e) => ret::neg(e.errno()),
        }
    })
}

/// `ops.req_notify_cq`.
unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    o::with_obj(cq.cast(), Kind::Cq, ret::pos, |c: &Cq| {
        let h = c.h;
        match c.engine.req_notify_cq(h, solicited_only != 0) {
            Ok(()) => 0,
            Err(e) => ret::pos(e.errno()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_engine::transport::QpType;

    fn wr(opcode: u32, flags: u32, sge: &mut ibv_sge, n: c_int) -> ibv_send_wr {
        // SAFETY: `ibv_send_wr` is plain C data; all zeros is a valid value.
        let mut w: ibv_send_wr = unsafe { core::mem::zeroed() };
        w.wr_id = 42;
        w.opcode = opcode;
        w.send_flags = flags;
        w.sg_list = sge;
        w.num_sge = n;
        w
    }

    /// The C ABI's express form of a lone post: the fields `send_wr` would
    /// give, read straight from the request; `None` for what the cell does
    /// not take or `send_wr` refuses.
    #[test]
    fn express_wr_reads_what_send_wr_would() {
        let data = *b"inline!!";
        let mut sge = ibv_sge {
            addr: data.as_ptr() as u64,
            length: 8,
            lkey: 7,
        };
        // An RDMA WRITE with immediate data from one SGE.
        let mut w = wr(IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED, &mut sge, 1);
        w.imm = ibv_send_wr_imm {
            imm_data: 0x1234_5678u32.to_be(),
        };
        w.wr.rdma.remote_addr = 0xA000;
        w.wr.rdma.rkey = 99;
        // SAFETY: `w` and its SGE are readable.
        let e = unsafe { express_wr(QpType::Rc, 1, &w) }.expect("one SGE");
        let s = e.sge.expect("the SGE");
        assert_eq!(
            (e.wr_id, e.opcode, e.inline),
            (42, WrOpcode::RdmaWriteWithImm, None)
        );
        assert_eq!((s.addr, s.length, s.lkey), (sge.addr, 8, 7));
        assert_eq!(
            (e.imm_data, e.remote_addr, e.rkey),
            (0x1234_5678, 0xA000, 99)
        );
        // An inline SEND: the bytes, no SGE.
        let w = wr(IBV_WR_SEND, IBV_SEND_INLINE, &mut sge, 1);
        // SAFETY: as above; the inline bytes are readable.
        let e = unsafe { express_wr(QpType::Rc, 1, &w) }.expect("inline");
        assert_eq!((e.inline, e.sge), (Some(&data[..]), None));
        // Inline and no SGE: an empty message.
        let w = wr(IBV_WR_SEND, IBV_SEND_INLINE, &mut sge, 0);
        // SAFETY: as above.
        let e = unsafe { express_wr(QpType::Rc, 1, &w) }.expect("empty");
        assert_eq!(e.inline, Some(&[][..]));
        // Not for the cell: a READ, two SGEs, more SGEs than granted, UD,
        // an oversized inline payload.
        let none = |op, flags, n, qp_type, max_sge, sge: &mut ibv_sge| {
            let w = wr(op, flags, sge, n);
            // SAFETY: as above (a list of two reads past `sge` only if
            // taken, and it is refused before).
            unsafe { express_wr(qp_type, max_sge, &w) }.is_none()
        };
        assert!(none(IBV_WR_RDMA_READ, 0, 1, QpType::Rc, 1, &mut sge));
        assert!(none(IBV_WR_SEND, 0, 2, QpType::Rc, 2, &mut sge));
        assert!(none(IBV_WR_SEND, 0, 1, QpType::Rc, 0, &mut sge));
        assert!(none(IBV_WR_SEND, 0, 1, QpType::Ud, 1, &mut sge));
        sge.length = MAX_INLINE as u32 + 1;
        assert!(none(
            IBV_WR_SEND,
            IBV_SEND_INLINE,
            1,
            QpType::Rc,
            1,
            &mut sge
        ));
    }
}
