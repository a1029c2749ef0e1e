//! Memory windows: `ibv_alloc_mw`, `ibv_bind_mw` (type 1) and
//! `ibv_dealloc_mw`, which the inline functions of `verbs.h` reach through
//! `ibv_context_ops`, and the conversion of bind requests for `ibv_post_send`
//! (`IBV_WR_BIND_MW`) and `ibv_wr_bind_mw`. The windows themselves live in
//! the transport (`softrdma_transport::Mw`).
//!
//! As in rxe, `ibv_mw.rkey` follows the window's key: binding through
//! `ibv_bind_mw` moves it to the next key (`ibv_inc_rkey`), and a posted
//! type 2 bind sets it to the key the request names (after a bind that then
//! fails with a completion error, the application must undo this).

use super::conv::access_from_c;
use super::objects::{self as o, Kind, Mr, Mw, Pd, Qp};
use crate::ffi::*;
use crate::guard::ret;
use core::ffi::c_int;
use softrdma_engine::transport::{Access, MwBind, MwType, SendFlags, SendWr, WrOpcode};

/// Fills the memory-window slots of a context's ops table.
pub(crate) fn install_ops(ops: &mut ibv_context_ops) {
    ops.alloc_mw = Some(alloc_mw);
    ops.bind_mw = Some(bind_mw);
    ops.dealloc_mw = Some(dealloc_mw);
}

/// `ibv_inc_rkey`: the next key of a window (the low byte is the consumer key).
pub(crate) fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xFFFF_FF00) | (rkey.wrapping_add(1) & 0xFF)
}

/// Converts a bind of window `mw` to key `rkey` (EINVAL for a bad window or
/// region, or a zero-based window, which softrdma does not offer).
pub(crate) fn bind_from_c(
    mw: *mut ibv_mw,
    rkey: u32,
    info: &ibv_mw_bind_info,
) -> Result<MwBind, c_int> {
    // SAFETY: registry-checked.
    let w = unsafe { o::obj::<Mw>(mw.cast(), Kind::Mw) }.ok_or(libc::EINVAL)?;
    let access = access_from_c(info.mw_access_flags);
    if access.contains(Access::ZERO_BASED) {
        return Err(libc::EINVAL);
    }
    let mr_lkey = if info.length == 0 {
        0
    } else {
        // SAFETY: registry-checked.
        let m = unsafe { o::obj::<Mr>(info.mr.cast(), Kind::Mr) }.ok_or(libc::EINVAL)?;
        m.mr.lkey
    };
    Ok(MwBind {
        mw_rkey: w.mw.rkey,
        new_rkey: rkey,
        mr_lkey,
        addr: info.addr,
        length: info.length,
        access,
    })
}

/// After a bind was posted: the window's key is the one it named.
pub(crate) fn note_bound(mw: *mut ibv_mw, rkey: u32) {
    // SAFETY: registry-checked; `rkey` is a plain field applications read.
    if unsafe { o::obj::<Mw>(mw.cast(), Kind::Mw) }.is_some() {
        // SAFETY: a live window (checked above).
        unsafe { (&raw mut (*mw).rkey).write(rkey) };
    }
}

/// `ops.alloc_mw`: type 1 or 2 (any other type is EINVAL).
unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw {
    o::with_obj(pd.cast(), Kind::Pd, ret::null, |p: &Pd| {
        let Some(t) = MwType::from_u32(type_) else {
            return ret::null(libc::EINVAL);
        };
        let h = p.h;
        match p.engine.alloc_mw(h, t) {
            Ok(rkey) => o::publish(
                Mw {
                    mw: ibv_mw {
                        context: p.pd.context,
                        pd,
                        rkey,
                        handle: rkey >> 8,
                        type_,
                    },
                    engine: p.engine.clone(),
                },
                Kind::Mw,
            )
            .cast(),
            Err(e) => ret::null(e.errno()),
        }
    })
}

/// `ops.bind_mw` (`ibv_bind_mw`, type 1; the inline wrapper checked the
/// type and the region's context and PD): posts a BIND_MW work request and
/// moves `mw->rkey` to the next key.
unsafe extern "C" fn bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int {
    o::with_obj(qp.cast(), Kind::Qp, ret::pos, |q: &Qp| {
        // SAFETY: registry-checked.
        let Some(w) = (unsafe { o::obj::<Mw>(mw.cast(), Kind::Mw) }) else {
            return ret::pos(libc::EINVAL);
        };
        if mw_bind.is_null() {
            return ret::pos(libc::EINVAL);
        }
        // SAFETY: non-NULL, readable per the verbs contract.
        let b = unsafe { *mw_bind };
        let new_rkey = inc_rkey(w.mw.rkey);
        let bind = match bind_from_c(mw, new_rkey, &b.bind_info) {
            Ok(v) => v,
            Err(e) => return ret::pos(e),
        };
        let mut wr = SendWr::new(b.wr_id, WrOpcode::BindMw);
        wr.flags = SendFlags(b.send_flags);
        wr.bind = Some(bind);
        match q.engine.post_send_many(q.qpn, [wr]) {
            Ok(()) => {
                note_bound(mw, new_rkey);
                0
            }
            Err((_, e)) => ret::pos(e.errno()),
        }
    })
}

/// `ops.dealloc_mw`: a bound window stops granting access at once.
unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    o::destroy(mw.cast(), Kind::Mw, |w: &Mw| {
        let key = w.mw.rkey;
        w.engine.dealloc_mw(key)
    })
}
