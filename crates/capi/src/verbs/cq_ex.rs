//! Extended CQs: `ibv_create_cq_ex` (through `verbs_context::create_cq_ex`)
//! and the polling functions of `struct ibv_cq_ex` that the inline
//! `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` / `ibv_wc_read_*` call.
//!
//! `start_poll` and `next_poll` take one completion off the CQ (as `poll_cq`
//! does, busy polling included), make it current and publish its `status`
//! and `wr_id` in the struct; the `read_*` functions read the current one.
//! ENOENT means the CQ is empty. The fields offered are
//! `IBV_WC_STANDARD_FLAGS` and both completion timestamps: the device clock
//! (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`, 1 GHz, see
//! `softrdma_engine::clock`) and wall-clock nanoseconds
//! (`..._WALLCLOCK`), and tag-matching information
//! (`IBV_WC_EX_WITH_TM_INFO`, `ibv_wc_read_tm_info`: the tag and the TMH's
//! application context of a completion flagged `IBV_WC_TM_MATCH`, else
//! zeros). VLANs and flow tags need a NIC's Ethernet offloads: such a CQ is
//! EOPNOTSUPP.

use super::conv::wc_to_c;
use super::cq::new_cq;
use super::objects::{self as o, Cq, Kind, Pd, PdRole};
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};
use core::ffi::{c_int, c_uint};
use softrdma_engine::transport::Wc;

/// Completion fields an extended CQ can report.
const SUPPORTED_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK
    | IBV_WC_EX_WITH_TM_INFO;
/// Creation flags accepted: single-threaded use (a hint: every CQ is
/// thread-safe) and ignoring overruns (a completion that finds the CQ full
/// is dropped instead of raising CQ_ERR and failing its QP).
const SUPPORTED_CREATE_FLAGS: u32 =
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
const KNOWN_COMP_MASK: u32 = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;

/// `verbs_context::create_cq_ex`.
pub(crate) unsafe extern "C" fn vctx_create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    o::with_ctx(context, ret::null, |c| {
        if attr.is_null() {
            return ret::null(libc::EINVAL);
        }
        // SAFETY: non-NULL, readable per the caller's contract.
        let a = unsafe { *attr };
        if a.comp_mask & !KNOWN_COMP_MASK != 0 {
            return ret::null(libc::EINVAL);
        }
        if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 {
            return ret::null(libc::EOPNOTSUPP);
        }
        let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
            a.flags
        } else {
            0
        };
        if flags & !SUPPORTED_CREATE_FLAGS != 0 {
            return ret::null(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
            // SAFETY: registry-checked.
            let pd = unsafe { o::obj::<Pd>(a.parent_domain.cast(), Kind::Pd) };
            if !pd.is_some_and(|p| p.role == PdRole::Parent) {
                return ret::null(libc::EINVAL);
            }
        }
        let (Ok(cqe), Ok(vector)) = (c_int::try_from(a.cqe), c_int::try_from(a.comp_vector)) else {
            return ret::null(libc::EINVAL);
        };
        let p = new_cq(c, context, cqe, a.cq_context, a.channel, vector);
        if p.is_null() {
            return core::ptr::null_mut();
        }
        if flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN != 0 {
            // SAFETY: `p` was just created; its handle is plain data.
            let h = unsafe { (*p).h };
            if let Err(e) = c.engine.set_cq_ignore_overrun(h, true) {
                // SAFETY: `p` is ours alone still; destroy it as ibv_destroy_cq would.
                unsafe { super::cq::ibv_destroy_cq(p.cast()) };
                return ret::null(e.errno());
            }
        }
        // SAFETY: `p` was just created and is not yet visible to the
        // application: nothing else reads these fields now.
        unsafe { install(&raw mut (*p).cq, a.wc_flags) };
        p.cast()
    })
}

/// Fills the poll functions of a new extended CQ (those for fields not asked
/// for stay NULL, as in rdma-core's providers).
///
/// # Safety
///
/// `cq` must point to a CQ no other thread uses yet.
unsafe fn install(cq: *mut ibv_cq_ex, wc_flags: u64) {
    // SAFETY: per the contract.
    let c = unsafe { &mut *cq };
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_wc_flags = Some(read_wc_flags);
    let has = |f: u64| wc_flags & f != 0;
    if has(IBV_WC_EX_WITH_BYTE_LEN) {
        c.read_byte_len = Some(read_byte_len);
    }
    if has(IBV_WC_EX_WITH_IMM) {
        c.read_imm_data = Some(read_imm_data);
    }
    if has(IBV_WC_EX_WITH_QP_NUM) {
        c.read_qp_num = Some(read_qp_num);
    }
    if has(IBV_WC_EX_WITH_SRC_QP) {
        c.read_src_qp = Some(read_src_qp);
    }
    if has(IBV_WC_EX_WITH_SLID) {
        c.read_slid = Some(read_slid);
    }
    if has(IBV_WC_EX_WITH_SL) {
        c.read_sl = Some(read_sl);
    }
    if has(IBV_WC_EX_WITH_DLID_PATH_BITS) {
        c.read_dlid_path_bits = Some(read_dlid_path_bits);
    }
    if has(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) {
        c.read_completion_ts = Some(read_completion_ts);
    }
    if has(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) {
        c.read_completion_wallclock_ns = Some(read_completion_wallclock_ns);
    }
    if has(IBV_WC_EX_WITH_TM_INFO) {
        c.read_tm_info = Some(read_tm_info);
    }
}

/// Takes the next completion and makes it current: 0, ENOENT when the CQ is
/// empty, or another errno.
fn advance(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: registry-checked.
    let Some(q) = (unsafe { o::obj::<Cq>(cq.cast(), Kind::Cq) }) else {
        return libc::EINVAL;
    };
    let mut got = None;
    if let Err(e) = q.engine.poll_cq_ring(&q.ring, q.h, 1, |w| got = Some(w)) {
        return e.errno();
    }
    *q.cur.lock().unwrap_or_else(|p| p.into_inner()) = got;
    let Some(w) = got else {
        return libc::ENOENT;
    };
    // SAFETY: a live CQ (checked above); `status` and `wr_id` are the plain
    // fields the inline API reads after a successful poll.
    unsafe {
        (&raw mut (*cq).status).write(w.status.as_u32());
        (&raw mut (*cq).wr_id).write(w.wr_id);
    }
    0
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    ffi_guard(
        || ret::pos(libc::EIO),
        || {
            // SAFETY: NULL or readable per the verbs contract.
            if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
                return ret::pos(libc::EINVAL);
            }
            let r = advance(cq);
            if r != 0 {
                crate::guard::set_errno(r);
            }
            r
        },
    )
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    ffi_guard(
        || ret::pos(libc::EIO),
        || {
            let r = advance(cq);
            if r != 0 {
                crate::guard::set_errno(r);
            }
            r
        },
    )
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    o::with_obj(
        cq.cast(),
        Kind::Cq,
        |_| (),
        |q: &Cq| {
            *q.cur.lock().unwrap_or_else(|p| p.into_inner()) = None;
        },
    )
}

/// Reads a field of the current completion (0 if there is none).
fn read<R: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&Wc) -> R) -> R {
    read_with(cq, |_, w| f(w))
}

/// As [`read`], with the CQ (its engine's clocks) at hand.
fn read_with<R: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&Cq, &Wc) -> R) -> R {
    o::with_obj(
        cq.cast(),
        Kind::Cq,
        |_| R::default(),
        |q: &Cq| {
            let cur = q.cur.lock().unwrap_or_else(|p| p.into_inner());
            cur.as_ref().map(|w| f(q, w)).unwrap_or_default()
        },
    )
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    read(cq, |w| w.opcode.as_u32())
}
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.vendor_err)
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.byte_len)
}
/// Big-endian immediate data, or the invalidated R_Key (as `ibv_wc.imm_data`).
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: both union members are plain u32s.
    read(cq, |w| unsafe { wc_to_c(w).imm.imm_data })
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.qp_num)
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.src_qp)
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    read(cq, |w| w.wc_flags.0)
}
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| u32::from(w.slid))
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |w| w.sl)
}
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |w| w.dlid_path_bits)
}
/// The device clock when the completion was queued (ticks of
/// `hca_core_clock`, here nanoseconds of `CLOCK_MONOTONIC`).
unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    read_with(cq, |q, w| q.engine.device_clock(w.timestamp))
}
/// Wall-clock nanoseconds since the Unix epoch when the completion was queued.
unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    read_with(cq, |q, w| q.engine.wallclock(w.timestamp))
}
/// The tag and application context of a matched tag-matching receive
/// (zeros for any other completion).
unsafe extern "C" fn read_tm_info(cq: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info) {
    if tm_info.is_null() {
        return;
    }
    let (tag, priv_) = read(cq, |w| (w.tm_tag, w.tm_priv));
    // SAFETY: non-NULL; the caller passes a whole `ibv_wc_tm_info`.
    unsafe { tm_info.write(ibv_wc_tm_info { tag, priv_ }) };
}
