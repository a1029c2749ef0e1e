//! The data path reached through `ibv_context_ops`: `ibv_post_send`,
//! `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`
//! are inline in applications and call these slots.

use super::conv::wc_to_c;
use super::objects::{self as o, Ah, Cq, Kind, Qp, Srq};
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};
use core::ffi::c_int;
use softrdma_engine::transport::{RecvWr, SendFlags, SendWr, Sge, UdDest, WrOpcode};

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
unsafe fn sges(sg: *const ibv_sge, n: c_int) -> Result<Vec<Sge>, c_int> {
    if n <= 0 {
        return Ok(Vec::new());
    }
    if sg.is_null() || n > 1024 {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller guarantees `n` readable SGEs.
    let s = unsafe { core::slice::from_raw_parts(sg, n as usize) };
    Ok(s.iter()
        .map(|e| Sge {
            addr: e.addr,
            length: e.length,
            lkey: e.lkey,
        })
        .collect())
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
    // SAFETY: forwarded contract.
    let sgl = unsafe { sges(w.sg_list, w.num_sge) }?;
    if flags.contains(SendFlags::INLINE)
        && !matches!(opcode, WrOpcode::RdmaRead)
        && !opcode.is_atomic()
    {
        let total: usize = sgl.iter().map(|s| s.length as usize).sum();
        if total > MAX_INLINE {
            return Err(libc::EINVAL);
        }
        let mut data = Vec::with_capacity(total);
        for s in &sgl {
            if s.length > 0 {
                // SAFETY: inline SGEs name application memory readable now (verbs contract).
                data.extend_from_slice(unsafe {
                    core::slice::from_raw_parts(s.addr as *const u8, s.length as usize)
                });
            }
        }
        r.inline = Some(data);
    } else {
        r.sgl = sgl;
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

/// `ops.post_send`: 0, or a positive errno with `*bad_wr` at the first refused WR.
unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    ffi_guard(
        || ret::pos(libc::EIO),
        || {
            let set_bad = |w: *mut ibv_send_wr| {
                if !bad_wr.is_null() {
                    // SAFETY: the caller passes a writable `bad_wr`.
                    unsafe { bad_wr.write(w) };
                }
            };
            // SAFETY: registry-checked.
            let Some(q) = (unsafe { o::obj::<Qp>(qp.cast(), Kind::Qp) }) else {
                set_bad(wr);
                return ret::pos(libc::EINVAL);
            };
            // Convert the whole chain first, then post it under one lock.
            let mut ptrs = Vec::new();
            let mut wrs = Vec::new();
            let mut p = wr;
            let mut conv_err = None;
            while !p.is_null() {
                // SAFETY: application-owned chain of readable WRs (verbs contract).
                let w = unsafe { &*p };
                // SAFETY: as above.
                match unsafe { send_wr(q, w) } {
                    Ok(r) => {
                        wrs.push(r);
                        ptrs.push(p);
                    }
                    Err(e) => {
                        conv_err = Some((p, e));
                        break;
                    }
                }
                p = w.next;
            }
            let posted = q.engine.post_send_many(q.qpn, wrs);
            let n = posted.as_ref().map_or_else(|(i, _)| *i, |()| ptrs.len());
            for &p in &ptrs[..n] {
                // SAFETY: the application's chain, still readable.
                let w = unsafe { &*p };
                if w.opcode == IBV_WR_BIND_MW {
                    // SAFETY: reading the bind member of an IBV_WR_BIND_MW request.
                    let b = unsafe { w.ext.bind_mw };
                    super::mw::note_bound(b.mw, b.rkey);
                }
            }
            if let Err((i, e)) = posted {
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

/// Reads a chain of receive WRs.
///
/// # Safety
///
/// `wr` must be a readable chain.
unsafe fn recv_chain(
    wr: *mut ibv_recv_wr,
    max_sge: u32,
) -> (
    Vec<*mut ibv_recv_wr>,
    Vec<RecvWr>,
    Option<(*mut ibv_recv_wr, c_int)>,
) {
    let mut ptrs = Vec::new();
    let mut wrs = Vec::new();
    let mut p = wr;
    while !p.is_null() {
        // SAFETY: application-owned readable chain.
        let w = unsafe { &*p };
        if i64::from(w.num_sge) > i64::from(max_sge) {
            return (ptrs, wrs, Some((p, libc::EINVAL)));
        }
        // SAFETY: as above.
        match unsafe { sges(w.sg_list, w.num_sge) } {
            Ok(sgl) => {
                wrs.push(RecvWr {
                    wr_id: w.wr_id,
                    sgl,
                });
                ptrs.push(p);
            }
            Err(e) => return (ptrs, wrs, Some((p, e))),
        }
        p = w.next;
    }
    (ptrs, wrs, None)
}

/// `ops.post_recv`.
unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    ffi_guard(
        || ret::pos(libc::EIO),
        || {
            let set_bad = |w: *mut ibv_recv_wr| {
                if !bad_wr.is_null() {
                    // SAFETY: the caller passes a writable `bad_wr`.
                    unsafe { bad_wr.write(w) };
                }
            };
            // SAFETY: registry-checked.
            let Some(q) = (unsafe { o::obj::<Qp>(qp.cast(), Kind::Qp) }) else {
                set_bad(wr);
                return ret::pos(libc::EINVAL);
            };
            // SAFETY: application-owned chain.
            let (ptrs, wrs, err) = unsafe { recv_chain(wr, q.max_sge.1) };
            if let Err((i, e)) = q.engine.post_recv_many(q.qpn, wrs) {
                set_bad(ptrs[i]);
                return e.errno();
            }
            if let Some((p, e)) = err {
                set_bad(p);
                return e;
            }
            0
        },
    )
}

/// `ops.post_srq_recv`.
unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    ffi_guard(
        || ret::pos(libc::EIO),
        || {
            let set_bad = |w: *mut ibv_recv_wr| {
                if !bad_wr.is_null() {
                    // SAFETY: the caller passes a writable `bad_wr`.
                    unsafe { bad_wr.write(w) };
                }
            };
            // SAFETY: registry-checked.
            let Some(s) = (unsafe { o::obj::<Srq>(srq.cast(), Kind::Srq) }) else {
                set_bad(wr);
                return ret::pos(libc::EINVAL);
            };
            // SAFETY: application-owned chain (the engine checks the SRQ's max_sge).
            let (ptrs, wrs, err) = unsafe { recv_chain(wr, u32::MAX) };
            let h = s.h;
            let r = s.engine.with(|ep, _| {
                for (i, w) in wrs.into_iter().enumerate() {
                    ep.post_srq_recv(h, w).map_err(|e| (i, e))?;
                }
                Ok(())
            });
            if let Err((i, e)) = r {
                set_bad(ptrs[i]);
                return e.errno();
            }
            if let Some((p, e)) = err {
                set_bad(p);
                return e;
            }
            0
        },
    )
}

/// `ops.poll_cq`: the number of completions written, or -1 on a bad CQ.
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    ffi_guard(
        || -1,
        || {
            // SAFETY: registry-checked.
            let Some(c) = (unsafe { o::obj::<Cq>(cq.cast(), Kind::Cq) }) else {
                return ret::neg(libc::EINVAL);
            };
            if num_entries <= 0 {
                return 0;
            }
            if wc.is_null() {
                return ret::neg(libc::EINVAL);
            }
            let mut i = 0usize;
            let r = c.engine.poll_cq(c.h, num_entries as usize, |w| {
                // SAFETY: the caller's array holds `num_entries` entries; i < num_entries.
                unsafe { wc.add(i).write(wc_to_c(&w)) };
                i += 1;
            });
            match r {
                Ok(n) => n as c_int,
                Err(e) => ret::neg(e.errno()),
            }
        },
    )
}

/// `ops.req_notify_cq`.
unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    ffi_guard(
        || ret::pos(libc::EIO),
        || {
            // SAFETY: registry-checked.
            let Some(c) = (unsafe { o::obj::<Cq>(cq.cast(), Kind::Cq) }) else {
                return ret::pos(libc::EINVAL);
            };
            let h = c.h;
            match c
                .engine
                .with(|ep, _| ep.req_notify_cq(h, solicited_only != 0))
            {
                Ok(()) => 0,
                Err(e) => ret::pos(e.errno()),
            }
        },
    )
}
