//! Memory windows (IBTA 10.6.7, rxe `rxe_mw.c`): remote access to part of a
//! registered region, granted and revoked by the owner without re-registering.
//!
//! - **Type 1** windows are bound by `ibv_bind_mw` (a BIND_MW work request
//!   the library posts), start out valid with length 0, and are invalidated
//!   by binding them again with length 0.
//! - **Type 2** windows are bound by a BIND_MW work request posted on a QP of
//!   the window's PD and then answer only to that QP; LOCAL_INV on the owner's
//!   side or SEND_WITH_INV from the peer invalidates them.
//!
//! A window's R_Key is `(MW_INDEX_BASE + slot) << 8 | key`: the upper 24
//! bits name the window (disjoint from memory-region keys), the low 8 bits are
//! the consumer key each bind sets (`ibv_inc_rkey`). Remote accesses through a
//! window are checked here (state, PD, bound QP, rights, bounds) and then
//! translated through the region it is bound to, whose own rights no longer
//! matter (the window grants them).

use crate::error::{VerbsError, inval};
use crate::mr::{AccessError, Host, MrTable, PdHandle};
use crate::qp::{Ctx, Qp};
use crate::table::Table;
use crate::types::{Access, Qpn, WcStatus, WrOpcode};

/// First window index: window keys have bit 31 set, region keys do not.
const MW_INDEX_BASE: u32 = 0x80_0000;

/// Memory window type (`enum ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MwType {
    /// Type 1: bound with `ibv_bind_mw`, usable by any QP of its PD.
    One = 1,
    /// Type 2: bound by a work request, usable by the QP that bound it.
    Two = 2,
}

impl MwType {
    /// The type for an `ibv_mw_type` value.
    pub fn from_u32(v: u32) -> Option<MwType> {
        match v {
            1 => Some(MwType::One),
            2 => Some(MwType::Two),
            _ => None,
        }
    }
}

/// What a BIND_MW work request asks for (`struct ibv_mw_bind_info` plus keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBind {
    /// The window's current R_Key.
    pub mw_rkey: u32,
    /// The R_Key after the bind (only its low 8 bits are the consumer's).
    pub new_rkey: u32,
    /// L_Key of the region to bind to (ignored when `length` is 0).
    pub mr_lkey: u32,
    /// First address of the window, in the region's address space.
    pub addr: u64,
    /// Length in bytes; 0 unbinds (type 1 only).
    pub length: u64,
    /// Rights the window grants (REMOTE_READ/WRITE/ATOMIC).
    pub access: Access,
}

/// A memory window as [`crate::Endpoint::query_mw`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mw {
    /// Owning protection domain.
    pub pd: PdHandle,
    /// Type.
    pub mw_type: MwType,
    /// Current R_Key.
    pub rkey: u32,
    /// Bound (usable) rather than free/invalidated.
    pub valid: bool,
    /// Granted rights.
    pub access: Access,
    /// First address.
    pub addr: u64,
    /// Length (0: nothing bound).
    pub length: u64,
    /// L_Key of the region it is bound to.
    pub mr_key: Option<u32>,
    /// The QP a type 2 window is bound to.
    pub qpn: Option<Qpn>,
}

impl Mw {
    fn unbind(&mut self) {
        self.valid = self.mw_type == MwType::One;
        self.access = Access::EMPTY;
        self.addr = 0;
        self.length = 0;
        self.mr_key = None;
        self.qpn = None;
    }
}

#[derive(Debug, Default)]
pub(crate) struct MwTable {
    mws: Table<Mw>,
}

impl MwTable {
    fn slot_of(key: u32) -> Option<u32> {
        (key >> 8).checked_sub(MW_INDEX_BASE)
    }

    /// The window named by the index part of `key`, whatever its key byte.
    fn by_index_mut(&mut self, key: u32) -> Option<&mut Mw> {
        self.mws.get_mut(Self::slot_of(key)?)
    }

    /// The window whose current R_Key is exactly `key`.
    pub(crate) fn get(&self, key: u32) -> Option<&Mw> {
        let mw = self.mws.get(Self::slot_of(key)?)?;
        (mw.rkey == key).then_some(mw)
    }

    /// Binds (C10-72..75, o10-36.2.x, o10-37.2.x; rxe `rxe_check_bind_mw`).
    fn bind(&mut self, mrs: &MrTable, qpn: Qpn, qp_pd: PdHandle, b: &MwBind) -> Result<(), ()> {
        let mw = self.by_index_mut(b.mw_rkey).ok_or(())?;
        if mw.rkey != b.mw_rkey || b.access.contains(Access::ZERO_BASED) {
            return Err(());
        }
        match mw.mw_type {
            MwType::One if !mw.valid => return Err(()),
            MwType::Two if mw.valid || mw.pd != qp_pd || b.length == 0 => return Err(()),
            _ => {}
        }
        if b.length > 0 {
            let mr = mrs.get(b.mr_lkey).ok_or(())?;
            let allowed = mr.pd == mw.pd
                && mr.access.contains(Access::MW_BIND)
                && !mr.access.contains(Access::ZERO_BASED)
                && (!b
                    .access
                    .intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
                    || mr.access.contains(Access::LOCAL_WRITE));
            let end = b.addr.checked_add(b.length).ok_or(())?;
            if !allowed || b.addr < mr.iova || end > mr.iova.saturating_add(mr.length) {
                return Err(());
            }
        }
        mw.unbind();
        mw.rkey = (mw.rkey & !0xFF) | (b.new_rkey & 0xFF);
        if b.length > 0 {
            mw.valid = true;
            mw.access = b.access;
            mw.addr = b.addr;
            mw.length = b.length;
            mw.mr_key = Some(b.mr_lkey);
            if mw.mw_type == MwType::Two {
                mw.qpn = Some(qpn);
            }
        }
        Ok(())
    }

    /// Unbinds every window bound to region `mr_key` (being deregistered).
    pub(crate) fn unbind_mr(&mut self, mr_key: u32) {
        self.unbind_where(|mw| mw.mr_key == Some(mr_key));
    }

    /// Unbinds every type 2 window bound to QP `qpn` (being destroyed).
    pub(crate) fn unbind_qp(&mut self, qpn: Qpn) {
        self.unbind_where(|mw| mw.qpn == Some(qpn));
    }

    fn unbind_where(&mut self, f: impl Fn(&Mw) -> bool) {
        for mw in self.mws.iter_mut() {
            if f(mw) {
                mw.unbind();
            }
        }
    }

    /// Invalidates a bound type 2 window of `pd` (LOCAL_INV, SEND_WITH_INV).
    fn invalidate(&mut self, pd: PdHandle, key: u32) -> Result<(), ()> {
        let mw = self.by_index_mut(key).ok_or(())?;
        if mw.rkey != key || mw.mw_type != MwType::Two || !mw.valid || mw.pd != pd {
            return Err(());
        }
        mw.unbind();
        Ok(())
    }
}

/// True for the work requests the requester executes locally (no packet).
pub(crate) fn is_local_op(op: WrOpcode) -> bool {
    matches!(op, WrOpcode::BindMw | WrOpcode::LocalInv)
}

/// Checks a remote access through `rkey` (a window's or a region's) by QP
/// `qpn` of `pd` to `[va, va + len)`; returns where it lands in host memory.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_remote(
    mrs: &MrTable,
    mws: &MwTable,
    qpn: Qpn,
    pd: PdHandle,
    rkey: u32,
    va: u64,
    len: u64,
    need: Access,
) -> Result<Host, AccessError> {
    let Some(mw) = mws.get(rkey).filter(|_| len > 0) else {
        return mrs.check(rkey, pd, va, len, need);
    };
    if mw.pd != pd {
        return Err(AccessError::PdMismatch);
    }
    let usable = mw.valid && mw.length > 0 && (mw.mw_type == MwType::One || mw.qpn == Some(qpn));
    let mr_key = mw.mr_key.filter(|_| usable).ok_or(AccessError::BadKey)?;
    if !mw.access.contains(need) {
        return Err(AccessError::NoPermission);
    }
    let end = va.checked_add(len).ok_or(AccessError::OutOfBounds)?;
    if va < mw.addr || end > mw.addr.saturating_add(mw.length) {
        return Err(AccessError::OutOfBounds);
    }
    // The window's rights replace the region's; the region still translates.
    mrs.check(mr_key, pd, va, len, Access::EMPTY)
}

/// Executes a SEND_WITH_INV's invalidation on the responder's side.
pub(crate) fn remote_invalidate(mws: &mut MwTable, pd: PdHandle, rkey: u32) -> Result<(), ()> {
    mws.invalidate(pd, rkey)
}

impl Qp {
    /// Executes the local operation (BIND_MW, LOCAL_INV) at `req.idx` when the
    /// requester reaches it, in order after the requests before it were sent
    /// (rxe `rxe_do_local_ops`). It completes in order too: when everything
    /// before it is acknowledged ([`Qp::complete_local_ops`]). A failure
    /// completes it with MW_BIND_ERR / LOC_QP_OP_ERR and moves the QP to ERR.
    pub(crate) fn run_local_op(&mut self, ctx: &mut Ctx<'_>) {
        let idx = self.req.idx;
        let (qpn, pd, psn) = (self.qpn, self.pd, self.req.psn);
        let w = &mut self.sq[idx];
        let r = match (w.wr.opcode, w.wr.bind) {
            (WrOpcode::BindMw, Some(b)) => ctx
                .mws
                .bind(ctx.mrs, qpn, pd, &b)
                .map_err(|()| WcStatus::MwBindErr),
            (WrOpcode::LocalInv, _) => ctx
                .mws
                .invalidate(pd, w.wr.imm_data)
                .map_err(|()| WcStatus::LocQpOpErr),
            _ => Err(WcStatus::LocQpOpErr),
        };
        if let Err(status) = r {
            // Left unstarted: reported when it reaches the head of the queue.
            w.error = Some(status);
            if idx == 0 {
                self.fail_front(ctx, status);
            }
            return;
        }
        // No PSN: an ACK of the packet before it acknowledges it too.
        w.started = true;
        w.npkts = 0;
        w.next_pkt = 0;
        w.first_psn = psn;
        w.last_psn = psn.sub(1);
        self.req.idx += 1;
        self.complete_local_ops(ctx);
    }

    /// Completes executed local operations at the head of the send queue
    /// (everything before them has completed).
    pub(crate) fn complete_local_ops(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(w) = self.sq.front() {
            if !(w.started && w.error.is_none() && is_local_op(w.wr.opcode)) {
                break;
            }
            self.complete_front(ctx, WcStatus::Success);
        }
    }
}

impl crate::Endpoint {
    /// Allocates a memory window in `pd` (`ibv_alloc_mw`); returns its R_Key.
    /// A type 1 window starts valid and unbound, a type 2 window free.
    pub fn alloc_mw(&mut self, pd: PdHandle, mw_type: MwType) -> Result<u32, VerbsError> {
        if self.mws.mws.len() >= self.config().limits.max_mr as usize {
            return Err(VerbsError::NoMemory("too many memory windows".into()));
        }
        self.pd_acquire(pd)?;
        let tag = self.rng.next_u32() as u8;
        let slot = self.mws.mws.insert_with(|i| Mw {
            pd,
            mw_type,
            rkey: ((MW_INDEX_BASE + i) << 8) | u32::from(tag),
            valid: mw_type == MwType::One,
            access: Access::EMPTY,
            addr: 0,
            length: 0,
            mr_key: None,
            qpn: None,
        });
        Ok(self.mws.mws.get(slot).expect("just inserted").rkey)
    }

    /// The window whose index `rkey` names (any key byte).
    pub fn query_mw(&self, rkey: u32) -> Option<Mw> {
        self.mws.mws.get(MwTable::slot_of(rkey)?).copied()
    }

    /// Frees a window (`ibv_dealloc_mw`); a bound window stops granting access.
    pub fn dealloc_mw(&mut self, rkey: u32) -> Result<(), VerbsError> {
        let slot = MwTable::slot_of(rkey)
            .filter(|s| self.mws.mws.get(*s).is_some())
            .ok_or_else(|| VerbsError::NotFound(format!("MW {rkey:#x}")))?;
        let mw = self.mws.mws.remove(slot).expect("checked");
        self.pd_release(mw.pd);
        Ok(())
    }

    /// Checks a BIND_MW request before it is queued (what rdma-core checks at
    /// post time); the bind itself happens when the requester reaches it.
    pub(crate) fn check_bind_wr(&self, bind: Option<&MwBind>) -> Result<(), VerbsError> {
        let Some(b) = bind else {
            return inval("BIND_MW without bind information");
        };
        if self.query_mw(b.mw_rkey).is_none() {
            return inval(format!("no memory window {:#x}", b.mw_rkey));
        }
        Ok(())
    }
}
