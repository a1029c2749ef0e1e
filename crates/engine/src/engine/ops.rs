//! The engine's command boundary: the typed verbs operations higher layers
//! (the safe Rust API, the C ABI) call, modelled on rdma-core's
//! `verbs_context_ops`.
//!
//! Each operation takes plain arguments and returns what the verb returns;
//! none hands out the [`Endpoint`](softrdma_transport::Endpoint) or a
//! closure over it. That keeps the engine free to change how it locks,
//! where per-QP state lives and how it progresses without touching its
//! callers. Today each one runs under the engine lock through the private
//! `with` (answers a busy poller left unsent go first, what the verb queued
//! is sent after).
//!
//! The data path (`post_send`, `post_recv`, `poll_cq`) and multicast
//! attachment have dedicated methods in `engine/mod.rs`; the CM's
//! operations are in `cm_ops.rs`.

use super::Engine;
use softrdma_transport::{
    Access, CqHandle, CqRing, Mr, MwType, PdHandle, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState,
    Qpn, RecvWr, Rereg, SrqHandle, VerbsError,
};
use std::sync::Arc;

impl Engine {
    // ---- protection domains ----

    /// Allocates a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> Result<PdHandle, VerbsError> {
        self.with(|ep, _| ep.alloc_pd())
    }

    /// Frees a protection domain (`ibv_dealloc_pd`); EBUSY while it has users.
    pub fn dealloc_pd(&self, pd: PdHandle) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.dealloc_pd(pd))
    }

    /// Counts one more user of a PD (an address handle, a parent domain).
    pub fn pd_acquire(&self, pd: PdHandle) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.pd_acquire(pd))
    }

    /// Undoes [`Engine::pd_acquire`].
    pub fn pd_release(&self, pd: PdHandle) {
        self.with(|ep, _| ep.pd_release(pd))
    }

    /// Checks that a PD exists, to import it (`ibv_import_pd`).
    pub fn import_pd(&self, pd: PdHandle) -> Result<(), VerbsError> {
        // The PD must exist: take a reference and give it back.
        self.with(|ep, _| {
            ep.pd_acquire(pd)?;
            ep.pd_release(pd);
            Ok(())
        })
    }

    // ---- memory regions and windows ----

    /// Registers `length` bytes at `host`, addressed as `iova` (`ibv_reg_mr`).
    pub fn reg_mr(
        &self,
        pd: PdHandle,
        host: u64,
        length: u64,
        iova: u64,
        access: Access,
    ) -> Result<Mr, VerbsError> {
        // Same-host path: the region's whole pages move into a memfd that
        // peers copy from (`shm/peer_copy.rs`), before anyone can use it.
        // Not an on-demand-paging region's: its memory is the application's
        // to map and unmap as it likes after registration.
        let shares = (self.shared.shm.as_ref().map(|s| &s.mr_share))
            .filter(|_| !access.contains(Access::ON_DEMAND));
        let shared = shares.and_then(|m| m.share(host, length));
        let r = self.with(|ep, _| {
            let mut mr = ep.reg_mr(pd, host, length, iova, access)?;
            if let Some(s) = &shared {
                let f = super::shm::MrShares::file(s);
                ep.set_mr_share(mr.lkey, Some(f));
                mr.share = Some(f);
            }
            Ok(mr)
        });
        if let (Some(m), Some(s)) = (shares, &shared) {
            match &r {
                Ok(mr) => m.registered(mr.lkey, s),
                Err(_) => {
                    softrdma_shm::unshare(s.id);
                }
            }
        }
        r
    }

    /// Looks up a region by key (`ibv_import_mr`, `ibv_rereg_mr` checks).
    pub fn query_mr(&self, key: u32) -> Option<Mr> {
        self.with(|ep, _| ep.query_mr(key))
    }

    /// Changes a region's PD, translation or access (`ibv_rereg_mr`).
    pub fn rereg_mr(&self, key: u32, r: Rereg) -> Result<Mr, VerbsError> {
        let moved = r.translation.is_some();
        let mr = self.with(|ep, _| ep.rereg_mr(key, r))?;
        self.shared.fence_lent();
        let on_demand = mr.access.contains(Access::ON_DEMAND);
        if (moved || on_demand)
            && let Some(shm) = &self.shared.shm
        {
            // The old memory is no longer the region's, or is now the
            // application's to unmap as it likes: back to private.
            shm.mr_share.deregistered(key);
        }
        Ok(mr)
    }

    /// Deregisters a region (`ibv_dereg_mr`).
    pub fn dereg_mr(&self, key: u32) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.dereg_mr(key))?;
        self.shared.fence_lent();
        if let Some(shm) = &self.shared.shm {
            // Gone from the table, so nothing of ours copies into it now:
            // its pages go back to private memory.
            shm.mr_share.deregistered(key);
        }
        Ok(())
    }

    /// Whether every `(lkey, addr, length)` lies in a region of `pd` granting
    /// `need` (the checks of `ibv_advise_mr`).
    pub fn advise_mr(
        &self,
        pd: PdHandle,
        need: Access,
        sges: impl IntoIterator<Item = (u32, u64, u32)>,
    ) -> bool {
        self.with(|ep, _| {
            sges.into_iter().all(|(lkey, addr, length)| {
                ep.query_mr(lkey).is_some_and(|m| {
                    let end = addr.checked_add(u64::from(length));
                    m.pd == pd
                        && m.access.contains(need)
                        && addr >= m.iova
                        && end.is_some_and(|e| e <= m.iova.saturating_add(m.length))
                })
            })
        })
    }

    /// Runs `f`, which reads or writes registered memory, while the device
    /// cannot touch memory (it does so only under the engine lock). Not a
    /// verb: what the safe API's `Mr::read`/`Mr::write` synchronize with.
    pub fn with_memory_synced<R>(&self, f: impl FnOnce() -> R) -> R {
        self.with(|_, _| f())
    }

    /// Allocates a memory window on `pd` (`ibv_alloc_mw`); returns its R_Key.
    pub fn alloc_mw(&self, pd: PdHandle, mw_type: MwType) -> Result<u32, VerbsError> {
        self.with(|ep, _| ep.alloc_mw(pd, mw_type))
    }

    /// Frees a memory window (`ibv_dealloc_mw`).
    pub fn dealloc_mw(&self, rkey: u32) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.dealloc_mw(rkey))
    }

    // ---- device memory ----

    /// Allocates `length` bytes of device memory aligned to `2^log_align`
    /// (`ibv_alloc_dm`; see [`crate::dm`]). Takes no endpoint lock.
    pub fn alloc_dm(
        &self,
        length: u64,
        log_align: u32,
    ) -> Result<Arc<crate::dm::DeviceMemory>, VerbsError> {
        self.shared.dm.alloc(length, log_align)
    }

    /// The device memory with `handle` (`ibv_import_dm`), unless freed.
    pub fn import_dm(&self, handle: u32) -> Option<Arc<crate::dm::DeviceMemory>> {
        self.shared.dm.import(handle)
    }

    /// Registers `[offset, offset + length)` of `dm` as a zero-based region
    /// of `pd` (`ibv_reg_dm_mr`): its addresses are offsets from 0, in local
    /// work requests and for remote peers. The returned hold keeps the
    /// memory alive and busy; drop it when the region is deregistered.
    pub fn reg_dm_mr(
        &self,
        pd: PdHandle,
        dm: &Arc<crate::dm::DeviceMemory>,
        offset: u64,
        length: u64,
        access: Access,
    ) -> Result<(Mr, crate::dm::DmUse), VerbsError> {
        let (host, hold) = crate::dm::region(dm, offset, length, access)?;
        let mr = self.reg_mr(pd, host, length, 0, access)?;
        Ok((mr, hold))
    }

    // ---- completion queues ----

    /// Creates a CQ of at least `cqe` entries (`ibv_create_cq`); returns its
    /// handle and actual size.
    pub fn create_cq(&self, cqe: u32) -> Result<(CqHandle, u32), VerbsError> {
        self.with(|ep, _| ep.create_cq(cqe))
    }

    /// [`Engine::create_cq`], with the CQ's completions for
    /// [`Engine::poll_cq_ring`].
    pub fn create_cq_with_ring(
        &self,
        cqe: u32,
    ) -> Result<(CqHandle, u32, Arc<CqRing>), VerbsError> {
        self.with(|ep, _| {
            let (h, n) = ep.create_cq(cqe)?;
            Ok((h, n, ep.cq_ring(h)?))
        })
    }

    /// Makes a CQ drop completions that find it full instead of failing
    /// (`IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`).
    pub fn set_cq_ignore_overrun(&self, cq: CqHandle, on: bool) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.set_cq_ignore_overrun(cq, on))
    }

    /// Resizes a CQ (`ibv_resize_cq`); returns the new size.
    pub fn resize_cq(&self, cq: CqHandle, cqe: u32) -> Result<u32, VerbsError> {
        self.with(|ep, _| ep.resize_cq(cq, cqe))
    }

    /// Arms a CQ's completion notification (`ibv_req_notify_cq`).
    pub fn req_notify_cq(&self, cq: CqHandle, solicited_only: bool) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.req_notify_cq(cq, solicited_only))
    }

    /// Destroys a CQ (`ibv_destroy_cq`); EBUSY while a QP uses it.
    pub fn destroy_cq(&self, cq: CqHandle) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.destroy_cq(cq))
    }

    // ---- shared receive queues ----

    /// Creates an SRQ on `pd` (`ibv_create_srq`); returns its handle and
    /// actual `max_wr` and `max_sge`.
    pub fn create_srq(
        &self,
        pd: PdHandle,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<(SrqHandle, u32, u32), VerbsError> {
        self.with(|ep, _| ep.create_srq(pd, max_wr, max_sge, limit))
    }

    /// Creates an XRC SRQ of XRC domain `xrcd` whose receive completions
    /// go to `cq` (`ibv_create_srq_ex` with `IBV_SRQT_XRC`).
    pub fn create_xrc_srq(
        &self,
        pd: PdHandle,
        xrcd: u32,
        cq: CqHandle,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<(SrqHandle, u32, u32), VerbsError> {
        self.with(|ep, _| ep.create_xrc_srq(pd, xrcd, cq, max_wr, max_sge, limit))
    }

    /// Creates a tag-matching SRQ whose operation and receive completions
    /// go to `cq` (`ibv_create_srq_ex` with `IBV_SRQT_TM`).
    pub fn create_tm_srq(
        &self,
        pd: PdHandle,
        cq: CqHandle,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
        tm: softrdma_transport::tm::TmCap,
    ) -> Result<(SrqHandle, u32, u32), VerbsError> {
        self.with(|ep, _| ep.create_tm_srq(pd, cq, max_wr, max_sge, limit, tm))
    }

    /// Performs tag-list operations on a TM SRQ in order under one lock
    /// (`ibv_post_srq_ops`); `done`
    /// gets each one's index and handle (an add's new tag; 0 for the
    /// others). On the first refusal, how many were done and why.
    pub fn post_srq_ops(
        &self,
        srq: SrqHandle,
        ops: impl IntoIterator<Item = softrdma_transport::tm::SrqOp>,
        mut done: impl FnMut(usize, u32),
    ) -> Result<(), (usize, VerbsError)> {
        self.with(|ep, now| {
            for (i, o) in ops.into_iter().enumerate() {
                let h = ep.post_srq_op(now, srq, o).map_err(|e| (i, e))?;
                done(i, h);
            }
            Ok(())
        })
    }

    /// The XRC SRQ number of `srq` (`ibv_get_srq_num`); `None` if it is not
    /// an XRC SRQ.
    pub fn srq_num(&self, srq: SrqHandle) -> Option<u32> {
        self.with(|ep, _| ep.srq_num(srq))
    }

    /// Changes an SRQ's size or limit (`ibv_modify_srq`).
    pub fn modify_srq(
        &self,
        srq: SrqHandle,
        max_wr: Option<u32>,
        limit: Option<u32>,
    ) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.modify_srq(srq, max_wr, limit))
    }

    /// An SRQ's `max_wr`, `max_sge` and limit (`ibv_query_srq`).
    pub fn query_srq(&self, srq: SrqHandle) -> Result<(u32, u32, u32), VerbsError> {
        self.with(|ep, _| ep.query_srq(srq))
    }

    /// Posts a receive WR to an SRQ (`ibv_post_srq_recv`).
    pub fn post_srq_recv(&self, srq: SrqHandle, wr: RecvWr) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.post_srq_recv(srq, wr))
    }

    /// Posts receive WRs to an SRQ in order under one lock (`ibv_post_srq_recv`
    /// with a chain); on the first refusal returns how many were posted and why.
    pub fn post_srq_recv_many(
        &self,
        srq: SrqHandle,
        wrs: impl IntoIterator<Item = RecvWr>,
    ) -> Result<(), (usize, VerbsError)> {
        self.with(|ep, _| {
            for (i, w) in wrs.into_iter().enumerate() {
                ep.post_srq_recv(srq, w).map_err(|e| (i, e))?;
            }
            Ok(())
        })
    }

    /// Destroys an SRQ (`ibv_destroy_srq`); EBUSY while a QP uses it.
    pub fn destroy_srq(&self, srq: SrqHandle) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.destroy_srq(srq))
    }

    // ---- queue pairs ----

    /// Creates a QP (`ibv_create_qp`); returns its number and actual capabilities.
    pub fn create_qp(&self, init: &QpInitAttr) -> Result<(Qpn, QpCap), VerbsError> {
        self.with(|ep, _| ep.create_qp(init))
    }

    /// Creates an XRC receive QP of XRC domain `xrcd` (`ibv_create_qp_ex`
    /// with `IBV_QPT_XRC_RECV`).
    pub fn create_xrc_recv_qp(&self, xrcd: u32) -> Result<Qpn, VerbsError> {
        self.with(|ep, _| ep.create_xrc_recv_qp(xrcd))
    }

    /// The XRC domain of XRC receive QP `qpn` (`ibv_open_qp` checks it).
    pub fn qp_xrcd(&self, qpn: Qpn) -> Option<u32> {
        self.with(|ep, _| ep.qp_xrcd(qpn))
    }

    /// Changes a QP's attributes and state (`ibv_modify_qp`).
    pub fn modify_qp(&self, qpn: Qpn, attr: &QpAttr, mask: QpAttrMask) -> Result<(), VerbsError> {
        let copy = self.peer_copy_for(attr, mask);
        self.with(|ep, now| {
            ep.modify_qp(now, qpn, attr, mask)?;
            Self::set_peer_copy(ep, qpn, copy);
            Ok(())
        })
    }

    /// When a modify gives a QP its destination: whether it may use peer
    /// copy (same-host path; decided before the engine lock is taken). A
    /// new address without a destination QPN turns it off (a path change).
    fn peer_copy_for(&self, attr: &QpAttr, mask: QpAttrMask) -> Option<bool> {
        if !mask.contains(QpAttrMask::AV) {
            return None;
        }
        Some(
            mask.contains(QpAttrMask::DEST_QPN)
                && self
                    .shared
                    .peer_copy_to(attr.ah_attr.dest_ip(), attr.dest_qp_num),
        )
    }

    fn set_peer_copy(ep: &mut softrdma_transport::Endpoint, qpn: Qpn, copy: Option<bool>) {
        if let Some(on) = copy {
            let _ = ep.set_peer_copy(qpn, on);
        }
    }

    /// [`Engine::modify_qp`], then the QP's state read under the same lock
    /// (what `ibv_modify_qp` leaves in `qp->state`).
    pub fn modify_qp_state(
        &self,
        qpn: Qpn,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<QpState, VerbsError> {
        let copy = self.peer_copy_for(attr, mask);
        self.with(|ep, now| {
            ep.modify_qp(now, qpn, attr, mask)?;
            Self::set_peer_copy(ep, qpn, copy);
            ep.query_qp(qpn).map(|(a, _)| a.qp_state)
        })
    }

    /// A QP's attributes and creation attributes (`ibv_query_qp`).
    pub fn query_qp(&self, qpn: Qpn) -> Result<(QpAttr, QpInitAttr), VerbsError> {
        self.with(|ep, _| ep.query_qp(qpn))
    }

    /// Destroys a QP (`ibv_destroy_qp`).
    pub fn destroy_qp(&self, qpn: Qpn) -> Result<(), VerbsError> {
        self.with(|ep, _| ep.destroy_qp(qpn))?;
        if let Some(shm) = &self.shared.shm {
            shm.remove_cell(qpn);
        }
        Ok(())
    }
}
