//! The extended send API: `ibv_wr_start`, the `ibv_wr_*` builders and
//! setters, `ibv_wr_complete` / `ibv_wr_abort`, which the inline functions of
//! `verbs.h` reach through the function table of `struct ibv_qp_ex` (a QP
//! created by `ibv_create_qp_ex` with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`).
//!
//! As in rxe: a builder starts a work request from the `wr_id` and
//! `wr_flags` the application stored in the struct; setters complete the
//! last one; an error in any of them is remembered and returned by
//! `ibv_wr_complete`, which posts the batch in order under one lock (and
//! fails like `ibv_post_send`, e.g. EINVAL for a QP not in RTS).

use super::mw::bind_from_c;
use super::objects::{self as o, Ah, Kind, Qp};
use super::post::MAX_INLINE;
use crate::ffi::*;
use core::ffi::{c_int, c_void};
use softrdma_engine::transport::{SendFlags, SendWr, Sge, Sgl, UdDest, WrOpcode};

/// Work requests built since `ibv_wr_start`, and the first error.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    wrs: Vec<SendWr>,
    err: c_int,
}

/// Operations each QP type offers through the extended API (rxe's sets).
pub(crate) fn supported_ops(t: ibv_qp_type) -> u64 {
    const UD: u64 = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    const UC: u64 = UD
        | IBV_QP_EX_WITH_RDMA_WRITE
        | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        | IBV_QP_EX_WITH_LOCAL_INV
        | IBV_QP_EX_WITH_BIND_MW
        | IBV_QP_EX_WITH_SEND_WITH_INV;
    const RC: u64 = UC
        | IBV_QP_EX_WITH_RDMA_READ
        | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
        | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
        | IBV_QP_EX_WITH_ATOMIC_WRITE;
    match t {
        IBV_QPT_RC => RC,
        IBV_QPT_UC => UC,
        IBV_QPT_UD => UD,
        // IBTA annex A14 has no XRC ATOMIC WRITE.
        IBV_QPT_XRC_SEND => RC & !IBV_QP_EX_WITH_ATOMIC_WRITE,
        _ => 0,
    }
}

/// Fills the builder table of a new QP for the operations in `ops`.
///
/// # Safety
///
/// `qp` must point to a QP no other thread uses yet.
pub(crate) unsafe fn install(qp: *mut ibv_qp_ex, ops: u64) {
    // SAFETY: per the contract.
    let q = unsafe { &mut *qp };
    let has = |f: u64| ops & f != 0;
    if has(IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) {
        q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    }
    if has(IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) {
        q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    }
    if has(IBV_QP_EX_WITH_BIND_MW) {
        q.wr_bind_mw = Some(wr_bind_mw);
    }
    if has(IBV_QP_EX_WITH_LOCAL_INV) {
        q.wr_local_inv = Some(wr_local_inv);
    }
    if has(IBV_QP_EX_WITH_ATOMIC_WRITE) {
        q.wr_atomic_write = Some(wr_atomic_write);
    }
    if has(IBV_QP_EX_WITH_RDMA_READ) {
        q.wr_rdma_read = Some(wr_rdma_read);
    }
    if has(IBV_QP_EX_WITH_RDMA_WRITE) {
        q.wr_rdma_write = Some(wr_rdma_write);
    }
    if has(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) {
        q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    }
    if has(IBV_QP_EX_WITH_SEND) {
        q.wr_send = Some(wr_send);
    }
    if has(IBV_QP_EX_WITH_SEND_WITH_IMM) {
        q.wr_send_imm = Some(wr_send_imm);
    }
    if has(IBV_QP_EX_WITH_SEND_WITH_INV) {
        q.wr_send_inv = Some(wr_send_inv);
    }
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
}

/// Runs `f` on the QP's batch (nothing if `qp` is not a live QP).
fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut Batch)) {
    o::with_obj(
        qp.cast(),
        Kind::Qp,
        |_| (),
        |q: &Qp| {
            let mut b = q.batch.lock().unwrap_or_else(|p| p.into_inner());
            f(q, &mut b);
        },
    )
}

/// Starts a work request of `op` from the struct's `wr_id` and `wr_flags`.
fn build(qp: *mut ibv_qp_ex, op: WrOpcode, f: impl FnOnce(&mut SendWr) -> Result<(), c_int>) {
    // SAFETY: `qp` is checked against the registry before these are used;
    // reading the two plain fields the application just stored.
    let fields = |qp: *mut ibv_qp_ex| unsafe {
        (
            (&raw const (*qp).wr_id).read(),
            (&raw const (*qp).wr_flags).read(),
        )
    };
    with_batch(qp, |_, b| {
        if b.err != 0 {
            return;
        }
        let (wr_id, flags) = fields(qp);
        let mut w = SendWr::new(wr_id, op);
        w.flags = SendFlags(flags);
        match f(&mut w) {
            Ok(()) => b.wrs.push(w),
            Err(e) => b.err = e,
        }
    })
}

/// Completes the last work request built (EINVAL if there is none).
fn set_last(qp: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut SendWr) -> Result<(), c_int>) {
    with_batch(qp, |q, b| {
        if b.err != 0 {
            return;
        }
        let r = match b.wrs.last_mut() {
            Some(w) => f(q, w),
            None => Err(libc::EINVAL),
        };
        if let Err(e) = r {
            b.err = e;
        }
    })
}

fn rdma(w: &mut SendWr, rkey: u32, remote_addr: u64) {
    w.rkey = rkey;
    w.remote_addr = remote_addr;
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    build(qp, WrOpcode::AtomicCmpAndSwp, |w| {
        rdma(w, rkey, remote_addr);
        w.compare_add = compare;
        w.swap = swap;
        Ok(())
    })
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    build(qp, WrOpcode::AtomicFetchAndAdd, |w| {
        rdma(w, rkey, remote_addr);
        w.compare_add = add;
        Ok(())
    })
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    bind_info: *const ibv_mw_bind_info,
) {
    build(qp, WrOpcode::BindMw, |w| {
        if bind_info.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: non-NULL, readable per the verbs contract.
        let info = unsafe { *bind_info };
        w.bind = Some(bind_from_c(mw, rkey, &info)?);
        super::mw::note_bound(mw, rkey);
        Ok(())
    })
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    build(qp, WrOpcode::LocalInv, |w| {
        w.imm_data = invalidate_rkey;
        Ok(())
    })
}

unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    build(qp, WrOpcode::AtomicWrite, |w| {
        if atomic_wr.is_null() {
            return Err(libc::EINVAL);
        }
        rdma(w, rkey, remote_addr);
        // SAFETY: the verbs contract: `atomic_wr` points to 8 readable bytes.
        let data = unsafe { atomic_wr.cast::<[u8; 8]>().read_unaligned() };
        w.inline = Some(data.to_vec());
        Ok(())
    })
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    build(qp, WrOpcode::RdmaRead, |w| {
        rdma(w, rkey, remote_addr);
        Ok(())
    })
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    build(qp, WrOpcode::RdmaWrite, |w| {
        rdma(w, rkey, remote_addr);
        Ok(())
    })
}

unsafe extern "C" fn wr_rdma_write_imm(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_data: u32,
) {
    build(qp, WrOpcode::RdmaWriteWithImm, |w| {
        rdma(w, rkey, remote_addr);
        w.imm_data = u32::from_be(imm_data);
        Ok(())
    })
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    build(qp, WrOpcode::Send, |_| Ok(()))
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_data: u32) {
    build(qp, WrOpcode::SendWithImm, |w| {
        w.imm_data = u32::from_be(imm_data);
        Ok(())
    })
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    build(qp, WrOpcode::SendWithInv, |w| {
        w.imm_data = invalidate_rkey;
        Ok(())
    })
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    set_last(qp, |_, w| {
        // SAFETY: registry-checked.
        let ah = unsafe { o::obj::<Ah>(ah.cast(), Kind::Ah) }.ok_or(libc::EINVAL)?;
        w.ud = Some(UdDest {
            av: ah.av,
            remote_qpn,
            remote_qkey,
        });
        Ok(())
    })
}

unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, remote_srqn: u32) {
    set_last(qp, |q, w| {
        if q.qp_type != softrdma_engine::transport::QpType::XrcSend {
            return Err(libc::EINVAL);
        }
        w.xrc_remote_srqn = remote_srqn;
        Ok(())
    })
}

/// Copies inline buffers into the last work request (ENOSPC past the limit).
fn set_inline(qp: *mut ibv_qp_ex, bufs: &[(*const u8, usize)]) {
    set_last(qp, |_, w| {
        let total: usize = bufs.iter().map(|b| b.1).sum();
        if total > MAX_INLINE {
            return Err(libc::ENOSPC);
        }
        let mut data = Vec::with_capacity(total);
        for &(p, n) in bufs {
            if n > 0 {
                // SAFETY: the verbs contract: each buffer is readable now.
                data.extend_from_slice(unsafe { core::slice::from_raw_parts(p, n) });
            }
        }
        w.inline = Some(data);
        w.flags = w.flags.with(SendFlags::INLINE);
        Ok(())
    })
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    set_inline(qp, &[(addr.cast_const().cast(), length)]);
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    if num_buf > 0 && buf_list.is_null() || num_buf > 1024 {
        return set_last(qp, |_, _| Err(libc::EINVAL));
    }
    let list = if num_buf == 0 {
        &[][..]
    } else {
        // SAFETY: the verbs contract: `num_buf` readable entries.
        unsafe { core::slice::from_raw_parts(buf_list, num_buf) }
    };
    let bufs: Vec<_> = list
        .iter()
        .map(|b| (b.addr.cast_const().cast::<u8>(), b.length))
        .collect();
    set_inline(qp, &bufs);
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    set_last(qp, |_, w| {
        // A zero-length SGE names no memory (rxe ignores it).
        w.sgl = if length == 0 {
            Sgl::new()
        } else {
            [Sge { addr, length, lkey }].into()
        };
        Ok(())
    })
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    set_last(qp, |_, w| {
        // As ibv_post_send's lists: EINVAL for a NULL list of entries or
        // more than 1024 of them.
        let n = c_int::try_from(num_sge).map_err(|_| libc::EINVAL)?;
        // SAFETY: the verbs contract: `num_sge` readable entries.
        w.sgl = unsafe { super::post::sges(sg_list, n) }?;
        Ok(())
    })
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    with_batch(qp, |_, b| *b = Batch::default())
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    with_batch(qp, |_, b| *b = Batch::default())
}

/// Posts the batch: 0, the first builder/setter error, or the errno of the
/// first request the QP refused (those before it are posted).
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // The error is the return value, as in rdma-core.
    o::with_obj(
        qp.cast(),
        Kind::Qp,
        |e| e,
        |q: &Qp| {
            let b = core::mem::take(&mut *q.batch.lock().unwrap_or_else(|p| p.into_inner()));
            if b.err != 0 {
                return b.err;
            }
            match q.engine.post_send_many(q.qpn, b.wrs) {
                Ok(()) => 0,
                Err((_, e)) => e.errno(),
            }
        },
    )
}
