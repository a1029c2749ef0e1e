//! Queue pairs and shared receive queues.

use super::cq::{Cq, CqImp};
use super::device::Gid;
use super::pd::{Pd, PdImp};
use crate::backend::rdma_core::sys;
use crate::{Error, Result};
use softrdma_engine::Engine;
use softrdma_engine::transport::Express;
use softrdma_transport::{
    Access, AddressVector, Mtu, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState, QpType, Qpn,
    RecvWr, SendWr, SrqHandle, VerbsError,
};
use std::fmt;
use std::sync::Arc;

fn other_device(what: &str) -> Error {
    VerbsError::InvalidArgument(format!("the {what} belongs to another device")).into()
}

/// rdma-core's post result with the failing request's index.
fn posted(
    r: std::result::Result<(), (usize, sys::Failure)>,
) -> std::result::Result<(), (usize, Error)> {
    r.map_err(|(n, f)| (n, f.into()))
}

/// What to create a QP with (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone)]
pub struct QpInit<'a> {
    /// Transport.
    pub qp_type: QpType,
    /// Send completions go here.
    pub send_cq: &'a Cq,
    /// Receive completions go here.
    pub recv_cq: &'a Cq,
    /// Shared receive queue, if any.
    pub srq: Option<&'a Srq>,
    /// Requested capacities (the QP reports the actual ones).
    pub cap: QpCap,
    /// Signal every send WR.
    pub sq_sig_all: bool,
}

impl<'a> QpInit<'a> {
    /// Defaults: 128 WRs each way, 4 SGEs, 64 inline bytes, selective signalling.
    pub fn new(qp_type: QpType, send_cq: &'a Cq, recv_cq: &'a Cq) -> QpInit<'a> {
        QpInit {
            qp_type,
            send_cq,
            recv_cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 128,
                max_recv_wr: 128,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        }
    }
}

/// A QP of one backend.
pub(crate) enum QpImp {
    /// The engine, and the QP's express cell if its lone posts go through
    /// one (`Engine::express`).
    Native(Arc<Engine>, Option<Arc<Express>>),
    RdmaCore(sys::Qp),
}

pub(crate) struct QpInner {
    _pd: Pd,
    qpn: Qpn,
    qp_type: QpType,
    cap: QpCap,
    imp: QpImp,
    _cqs: (Cq, Cq),
    _srq: Option<Srq>,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        if let QpImp::Native(e, _) = &self.imp {
            let q = self.qpn;
            let _ = e.destroy_qp(q);
        }
    }
}

/// A queue pair (`struct ibv_qp`).
pub struct Qp(pub(crate) Arc<QpInner>);

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Qp({:?} {:#x})", self.0.qp_type, self.0.qpn)
    }
}

/// How to connect an RC/UC QP to its peer (what pingpong programs exchange).
#[derive(Debug, Clone, Copy)]
pub struct ConnectParams {
    /// The peer's QP number.
    pub remote_qpn: Qpn,
    /// The peer's GID.
    pub remote_gid: Gid,
    /// The first PSN the peer sends (our receive PSN).
    pub remote_psn: u32,
    /// The first PSN we send.
    pub local_psn: u32,
    /// Local GID index to send from.
    pub sgid_index: u8,
    /// Path MTU.
    pub mtu: Mtu,
    /// Rights granted to the peer.
    pub access: Access,
    /// READ/atomic depth both ways.
    pub rd_atomic: u8,
    /// Local ACK timeout exponent (14: ~67 ms).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7: infinite).
    pub rnr_retry: u8,
    /// RNR timer code (12: 0.64 ms).
    pub min_rnr_timer: u8,
}

impl ConnectParams {
    /// ibv_rc_pingpong's settings towards `remote_qpn` at `remote_gid`.
    pub fn new(remote_qpn: Qpn, remote_gid: Gid, remote_psn: u32, local_psn: u32) -> Self {
        ConnectParams {
            remote_qpn,
            remote_gid,
            remote_psn,
            local_psn,
            sgid_index: 0,
            mtu: Mtu::M1024,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            rd_atomic: 16,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
        }
    }
}

/// The rdma-core handles a QP is created with.
pub(crate) struct RcParts<'a> {
    pub(crate) pd: &'a Arc<sys::Pd>,
    pub(crate) spec: sys::QpSpec<'a>,
}

impl Qp {
    pub(crate) fn new(pd: &Pd, init: &QpInit<'_>) -> Result<Qp> {
        match &pd.0.imp {
            PdImp::Native(e, h) => {
                let cq = |c: &Cq| match &c.0.imp {
                    CqImp::Native(ce, _) if Arc::ptr_eq(ce, e) => Ok(c.0.h),
                    _ => Err(other_device("CQ")),
                };
                let srq = match init.srq.map(|s| &s.0.imp) {
                    None => None,
                    Some(SrqImp::Native(h)) => Some(*h),
                    Some(SrqImp::RdmaCore(_)) => return Err(other_device("SRQ")),
                };
                let a = QpInitAttr {
                    qp_type: init.qp_type,
                    pd: *h,
                    send_cq: cq(init.send_cq)?,
                    recv_cq: cq(init.recv_cq)?,
                    srq,
                    cap: init.cap,
                    sq_sig_all: init.sq_sig_all,
                };
                let (qpn, cap) = e.create_qp(&a)?;
                Ok(Qp::assemble(
                    pd,
                    init,
                    qpn,
                    cap,
                    QpImp::Native(Arc::clone(e), e.express(qpn)),
                ))
            }
            PdImp::RdmaCore(p) => Qp::with_rdma_core(pd, p, init, |parts| {
                Ok(sys::Qp::new(parts.pd, &parts.spec)?)
            }),
        }
    }

    /// Creates an rdma-core QP with `create` (`ibv_create_qp`, or
    /// `rdma_create_qp` for a CM id) from `init`'s handles.
    pub(crate) fn with_rdma_core(
        pd: &Pd,
        p: &Arc<sys::Pd>,
        init: &QpInit<'_>,
        create: impl FnOnce(&RcParts<'_>) -> Result<sys::Qp>,
    ) -> Result<Qp> {
        let cq = |c: &'_ Cq| match &c.0.imp {
            CqImp::RdmaCore(rc) => Ok(Arc::clone(rc)),
            CqImp::Native(..) => Err(other_device("CQ")),
        };
        let (scq, rcq) = (cq(init.send_cq)?, cq(init.recv_cq)?);
        let srq = match init.srq.map(|s| &s.0.imp) {
            None => None,
            Some(SrqImp::RdmaCore(s)) => Some(Arc::clone(s)),
            Some(SrqImp::Native(_)) => return Err(other_device("SRQ")),
        };
        let parts = RcParts {
            pd: p,
            spec: sys::QpSpec {
                qp_type: init.qp_type,
                send_cq: &scq,
                recv_cq: &rcq,
                srq: srq.as_ref(),
                cap: init.cap,
                sq_sig_all: init.sq_sig_all,
            },
        };
        let q = create(&parts)?;
        let (qpn, cap) = (q.qpn, q.cap);
        Ok(Qp::assemble(pd, init, qpn, cap, QpImp::RdmaCore(q)))
    }

    fn assemble(pd: &Pd, init: &QpInit<'_>, qpn: Qpn, cap: QpCap, imp: QpImp) -> Qp {
        Qp(Arc::new(QpInner {
            _pd: pd.clone(),
            qpn,
            qp_type: init.qp_type,
            cap,
            imp,
            _cqs: (init.send_cq.clone(), init.recv_cq.clone()),
            _srq: init.srq.cloned(),
        }))
    }

    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.0.qpn
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.0.qp_type
    }

    /// The actual capacities.
    pub fn cap(&self) -> QpCap {
        self.0.cap
    }

    /// Modifies attributes (`ibv_modify_qp`); errors name what is wrong or missing.
    pub fn modify(&self, attr: &QpAttr, mask: M) -> Result<()> {
        match &self.0.imp {
            QpImp::Native(e, _) => {
                let q = self.0.qpn;
                Ok(e.modify_qp(q, attr, mask)?)
            }
            QpImp::RdmaCore(q) => Ok(q.modify(attr, mask)?),
        }
    }

    /// Moves the QP to ERR (what a disconnection does to it).
    pub(crate) fn to_error(&self) -> Result<()> {
        match &self.0.imp {
            QpImp::Native(..) => self.modify(
                &QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                },
                M::STATE,
            ),
            QpImp::RdmaCore(q) => Ok(q.to_error()?),
        }
    }

    /// Current attributes (`ibv_query_qp`).
    pub fn query(&self) -> Result<QpAttr> {
        match &self.0.imp {
            QpImp::Native(e, _) => {
                let q = self.0.qpn;
                Ok(e.query_qp(q)?.0)
            }
            QpImp::RdmaCore(q) => Ok(q.query()?),
        }
    }

    /// RESET → INIT for RC/UC (granting `access`) or UD (with `qkey`).
    pub fn to_init(&self, access: Access, qkey: u32) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            ..QpAttr::default()
        };
        let mask = if self.0.qp_type == QpType::Ud {
            a.qkey = qkey;
            M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY
        } else {
            a.qp_access_flags = access;
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
        };
        self.modify(&a, mask)
    }

    /// INIT → RTR → RTS towards a peer (RC/UC), as ibv_rc_pingpong does.
    pub fn connect(&self, p: &ConnectParams) -> Result<()> {
        let rc = self.0.qp_type == QpType::Rc;
        let mut av = AddressVector::to_ip(p.remote_gid.to_ip());
        av.sgid_index = p.sgid_index;
        let mut a = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: p.mtu,
            dest_qp_num: p.remote_qpn,
            rq_psn: p.remote_psn,
            max_dest_rd_atomic: p.rd_atomic,
            min_rnr_timer: p.min_rnr_timer,
            ah_attr: av,
            ..QpAttr::default()
        };
        let mut mask = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
        if rc {
            mask = mask | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        }
        self.modify(&a, mask)?;
        a.qp_state = QpState::Rts;
        a.sq_psn = p.local_psn;
        a.timeout = p.timeout;
        a.retry_cnt = p.retry_cnt;
        a.rnr_retry = p.rnr_retry;
        a.max_rd_atomic = p.rd_atomic;
        let mut mask = M::STATE | M::SQ_PSN;
        if rc {
            mask = mask | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        }
        self.modify(&a, mask)
    }

    /// INIT → RTR → RTS for UD with initial send PSN `psn`.
    pub fn activate_ud(&self, psn: u32) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        };
        self.modify(&a, M::STATE)?;
        a.qp_state = QpState::Rts;
        a.sq_psn = psn;
        self.modify(&a, M::STATE | M::SQ_PSN)
    }

    /// Posts a send work request (`ibv_post_send`).
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        match &self.0.imp {
            QpImp::Native(e, x) => Ok(e.post_send_via(x.as_deref(), self.0.qpn, wr)?),
            QpImp::RdmaCore(q) => {
                posted(q.post_send(std::slice::from_ref(&wr))).map_err(|(_, e)| e)
            }
        }
    }

    /// Posts a receive work request (`ibv_post_recv`).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        match &self.0.imp {
            QpImp::Native(e, x) => Ok(e
                .post_recv_via(x.as_deref(), self.0.qpn, std::iter::once(wr))
                .map_err(|(_, e)| e)?),
            QpImp::RdmaCore(q) => {
                posted(q.post_recv(std::slice::from_ref(&wr))).map_err(|(_, e)| e)
            }
        }
    }

    /// Posts a chain of send work requests under one lock and one doorbell
    /// (`ibv_post_send` with a `next` list): the cheap way to post many small
    /// ones. On failure, the work requests before the bad one stay posted and
    /// the error says how many that is (rdma-core's `bad_wr`).
    pub fn post_send_many(
        &self,
        wrs: impl IntoIterator<Item = SendWr>,
    ) -> std::result::Result<(), (usize, Error)> {
        match &self.0.imp {
            QpImp::Native(e, _) => e
                .post_send_many(self.0.qpn, wrs)
                .map_err(|(n, e)| (n, e.into())),
            QpImp::RdmaCore(q) => posted(q.post_send(&wrs.into_iter().collect::<Vec<_>>())),
        }
    }

    /// Posts a chain of receive work requests under one lock; on failure as
    /// [`Qp::post_send_many`].
    pub fn post_recv_many(
        &self,
        wrs: impl IntoIterator<Item = RecvWr>,
    ) -> std::result::Result<(), (usize, Error)> {
        match &self.0.imp {
            QpImp::Native(e, x) => e
                .post_recv_via(x.as_deref(), self.0.qpn, wrs)
                .map_err(|(n, e)| (n, e.into())),
            QpImp::RdmaCore(q) => posted(q.post_recv(&wrs.into_iter().collect::<Vec<_>>())),
        }
    }
}

/// An SRQ of one backend.
pub(crate) enum SrqImp {
    Native(SrqHandle),
    RdmaCore(Arc<sys::Srq>),
}

pub(crate) struct SrqInner {
    pd: Pd,
    pub(crate) imp: SrqImp,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if let (SrqImp::Native(h), PdImp::Native(e, _)) = (&self.imp, &self.pd.0.imp) {
            let h = *h;
            let _ = e.destroy_srq(h);
        }
    }
}

/// A shared receive queue (`struct ibv_srq`). Cheap to clone.
#[derive(Clone)]
pub struct Srq(pub(crate) Arc<SrqInner>);

impl fmt::Debug for Srq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.imp {
            SrqImp::Native(h) => write!(f, "Srq({})", h.0),
            SrqImp::RdmaCore(s) => write!(f, "Srq({:p})", Arc::as_ptr(s)),
        }
    }
}

impl Srq {
    pub(crate) fn new(pd: &Pd, max_wr: u32, max_sge: u32, limit: u32) -> Result<Srq> {
        let imp = match &pd.0.imp {
            PdImp::Native(e, h) => {
                let h = *h;
                let (s, _, _) = e.create_srq(h, max_wr, max_sge, limit)?;
                SrqImp::Native(s)
            }
            PdImp::RdmaCore(p) => {
                SrqImp::RdmaCore(Arc::new(sys::Srq::new(p, max_wr, max_sge, limit)?))
            }
        };
        Ok(Srq(Arc::new(SrqInner {
            pd: pd.clone(),
            imp,
        })))
    }

    fn engine(&self) -> Option<&Arc<Engine>> {
        match &self.0.pd.0.imp {
            PdImp::Native(e, _) => Some(e),
            PdImp::RdmaCore(_) => None,
        }
    }

    /// Posts a receive work request (`ibv_post_srq_recv`).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        match (&self.0.imp, self.engine()) {
            (SrqImp::Native(h), Some(e)) => {
                let h = *h;
                Ok(e.post_srq_recv(h, wr)?)
            }
            (SrqImp::RdmaCore(s), _) => {
                posted(s.post_recv(std::slice::from_ref(&wr))).map_err(|(_, e)| e)
            }
            (SrqImp::Native(_), None) => Err(other_device("SRQ")),
        }
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    pub fn set_limit(&self, limit: u32) -> Result<()> {
        match (&self.0.imp, self.engine()) {
            (SrqImp::Native(h), Some(e)) => {
                let h = *h;
                Ok(e.modify_srq(h, None, Some(limit))?)
            }
            (SrqImp::RdmaCore(s), _) => Ok(s.set_limit(limit)?),
            (SrqImp::Native(_), None) => Err(other_device("SRQ")),
        }
    }
}
