//! Protection domains and address handles.

use super::device::{Context, Dev};
use super::mr::{Mr, RawMr};
use super::qp::{Qp, QpInit, Srq};
use crate::Result;
use crate::backend::rdma_core::sys;
use softrdma_engine::Engine;
use softrdma_transport::{Access, AddressVector, PdHandle, VerbsError};
use std::fmt;
use std::sync::Arc;

/// A PD of one backend.
pub(crate) enum PdImp {
    Native(Arc<Engine>, PdHandle),
    RdmaCore(Arc<sys::Pd>),
}

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) imp: PdImp,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // Children hold the PD, so nothing uses it any more (rdma-core: the
        // handle deallocates itself).
        if let PdImp::Native(e, h) = &self.imp {
            let h = *h;
            let _ = e.dealloc_pd(h);
        }
    }
}

/// A protection domain (`struct ibv_pd`). Cheap to clone.
#[derive(Clone)]
pub struct Pd(pub(crate) Arc<PdInner>);

impl fmt::Debug for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.imp {
            PdImp::Native(_, h) => write!(f, "Pd({})", h.0),
            PdImp::RdmaCore(p) => write!(f, "Pd({:p})", Arc::as_ptr(p)),
        }
    }
}

impl Pd {
    pub(crate) fn new(ctx: &Context) -> Result<Pd> {
        let imp = match &ctx.dev {
            Dev::Native(e) => PdImp::Native(Arc::clone(e), e.alloc_pd()?),
            Dev::RdmaCore(d) => PdImp::RdmaCore(Arc::new(sys::Pd::alloc(&d.sys)?)),
        };
        Ok(Pd(Arc::new(PdInner {
            ctx: ctx.clone(),
            imp,
        })))
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// Allocates `len` zeroed bytes (page aligned) and registers them.
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<Mr> {
        Mr::alloc(self, len, access)
    }

    /// Registers a copy of `data` (the registered buffer is owned by the [`Mr`]).
    pub fn register(&self, data: &[u8], access: Access) -> Result<Mr> {
        let mr = Mr::alloc(self, data.len(), access)?;
        mr.write(0, data)?;
        Ok(mr)
    }

    /// Registers memory the caller owns.
    ///
    /// # Safety
    ///
    /// `[ptr, ptr + len)` must be valid for reads and writes, and stay allocated
    /// and unused by Rust references that assume exclusive access, for as long
    /// as the returned [`RawMr`] lives: local work requests and remote peers
    /// (per `access`) read and write it at any time, like a NIC's DMA.
    ///
    /// With [`Access::ON_DEMAND`] (native backend: on-demand paging) the
    /// range need not be mapped, now or later: the device reaches whatever
    /// is mapped there when it accesses it (through the kernel, a system
    /// call per access), and an access to a part not mapped fails as on
    /// hardware (the requester's `RemAccessErr` for a peer's region,
    /// `LocProtErr` for a local SGE). What is mapped there must still
    /// allow such accesses as for any region.
    pub unsafe fn register_raw(&self, ptr: *mut u8, len: usize, access: Access) -> Result<RawMr> {
        // SAFETY: forwarded contract.
        unsafe { RawMr::new(self, ptr, len, access) }
    }

    /// Creates a QP in RESET.
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        Qp::new(self, init)
    }

    /// Creates a shared receive queue.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32, limit: u32) -> Result<Srq> {
        Srq::new(self, max_wr, max_sge, limit)
    }

    /// Registers `[offset, offset + len)` of device memory as a zero-based
    /// region (`ibv_reg_dm_mr`; `ZERO_BASED` is added to `access`). Native
    /// backend only.
    pub fn reg_dm_mr(
        &self,
        dm: &super::DeviceMemory,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<super::DmMr> {
        super::DmMr::new(self, dm, offset, len, access)
    }

    /// Creates an address handle for UD sends.
    ///
    /// A datagram from one UD QP to another (here both on this device); the
    /// receiver's buffer starts with the 40-byte GRH area, as on any RoCE NIC:
    ///
    /// ```
    /// use softrdma::verbs::*;
    /// use std::time::Duration;
    /// # fn main() -> softrdma::Result<()> {
    /// let ctx = Context::open()?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(16, None)?;
    /// let (tx, rx) = (
    ///     pd.create_qp(&QpInit::new(QpType::Ud, &cq, &cq))?,
    ///     pd.create_qp(&QpInit::new(QpType::Ud, &cq, &cq))?,
    /// );
    /// const QKEY: u32 = 0x1111_1111;
    /// for q in [&tx, &rx] {
    ///     q.to_init(Access::EMPTY, QKEY)?;
    ///     q.activate_ud(0)?;
    /// }
    /// let buf = pd.alloc_mr(40 + 64, Access::LOCAL_WRITE)?;
    /// rx.post_recv(RecvWr { wr_id: 1, sgl: [buf.sge(0, 40 + 64)?].into() })?;
    ///
    /// let ah = pd.create_ah(AddressVector::to_ip(ctx.local_addr().ip()))?;
    /// let mut wr = SendWr::new(2, WrOpcode::Send);
    /// wr.flags = SendFlags::SIGNALED;
    /// wr.inline = Some(b"datagram".to_vec());
    /// wr.ud = Some(ah.dest(rx.qpn(), QKEY));
    /// tx.post_send(wr)?;
    ///
    /// let wcs = cq.poll_blocking(2, Duration::from_secs(5))?;
    /// let recv = wcs.iter().find(|w| w.wr_id == 1).unwrap();
    /// assert_eq!((recv.status, recv.byte_len, recv.src_qp), (WcStatus::Success, 40 + 8, tx.qpn()));
    /// assert_eq!(buf.to_vec(40, 8)?, b"datagram");
    /// # Ok(()) }
    /// ```
    pub fn create_ah(&self, av: AddressVector) -> Result<Ah> {
        Ah::new(self, av)
    }
}

/// An address handle (`struct ibv_ah`): where a UD send goes.
pub struct Ah {
    pd: Pd,
    av: AddressVector,
}

impl fmt::Debug for Ah {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ah({})", self.av.dest_ip())
    }
}

impl Ah {
    fn new(pd: &Pd, av: AddressVector) -> Result<Ah> {
        match &pd.0.imp {
            PdImp::Native(e, h) => {
                let ngids = e.gids().len();
                if usize::from(av.sgid_index) >= ngids {
                    return Err(
                        VerbsError::InvalidArgument(format!("no GID {}", av.sgid_index)).into(),
                    );
                }
                if !av.is_global {
                    // RoCE routes by GID: without a GRH there is no destination address.
                    return Err(VerbsError::InvalidArgument(
                        "RoCE address handles need a GRH (is_global)".into(),
                    )
                    .into());
                }
                let h = *h;
                e.pd_acquire(h)?;
            }
            // The PD keeps one `ibv_ah` per destination (UD work requests
            // name their destination by address vector); create it now so
            // errors show here.
            PdImp::RdmaCore(p) => p.prepare_ah(&av)?,
        }
        Ok(Ah { pd: pd.clone(), av })
    }

    /// The address vector.
    pub fn av(&self) -> &AddressVector {
        &self.av
    }

    /// The UD destination for a send through this handle.
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> softrdma_transport::UdDest {
        softrdma_transport::UdDest {
            av: self.av,
            remote_qpn,
            remote_qkey,
        }
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        if let PdImp::Native(e, h) = &self.pd.0.imp {
            let h = *h;
            e.pd_release(h);
        }
    }
}
