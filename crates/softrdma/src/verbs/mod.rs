//! Verbs: the `libibverbs` object model, safe.
//!
//! A complete RDMA WRITE between two RC queue pairs of this process's device
//! (over real UDP on loopback), checked byte for byte:
//!
//! ```
//! use softrdma::verbs::*;
//! use std::time::Duration;
//! # fn main() -> softrdma::Result<()> {
//! let ctx = Context::open()?; // this process's device (127.0.0.N by default)
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64, None)?;
//! let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
//! let src = pd.register(b"hello, RDMA", access)?;
//! let dst = pd.alloc_mr(4096, access)?;
//!
//! // Two RC QPs connected to each other (normally one per peer).
//! let a = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
//! let b = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
//! for q in [&a, &b] {
//!     q.to_init(Access::REMOTE_WRITE, 0)?;
//! }
//! let gid = ctx.query_gid(1, 0)?;
//! a.connect(&ConnectParams::new(b.qpn(), gid, 200, 100))?;
//! b.connect(&ConnectParams::new(a.qpn(), gid, 100, 200))?;
//!
//! // WRITE `src` into `dst`; the target side posts nothing.
//! let target = dst.remote();
//! let mut wr = SendWr::new(7, WrOpcode::RdmaWrite);
//! wr.flags = SendFlags::SIGNALED;
//! wr.sgl = [src.sge(0, src.len())?].into();
//! wr.remote_addr = target.addr;
//! wr.rkey = target.rkey;
//! a.post_send(wr)?;
//!
//! let wc = cq.poll_blocking(1, Duration::from_secs(5))?;
//! assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
//! assert_eq!(dst.to_vec(0, 11)?, b"hello, RDMA");
//! # Ok(()) }
//! ```
//!
//! Objects hold their parents (`Arc`), so they are destroyed children first,
//! whatever order the application drops them in. Completions, attributes and
//! work requests are the transport's plain types, re-exported here.
//!
//! Everything here runs on either [`Backend`]: softrdma's software device
//! (the default when the machine has no RDMA device) or the system's
//! rdma-core, loaded at run time, for real NICs. `SOFTRDMA_BACKEND=native`
//! or `=rdma-core` chooses; so does [`Context::builder`].

pub(crate) mod cq;
pub(crate) mod device;
mod dm;
mod mr;
pub(crate) mod pd;
pub(crate) mod qp;

pub use crate::backend::{BACKEND_ENV, Backend, BackendInfo};
pub use cq::{CompChannel, Cq, CqId};
pub use device::{Context, DeviceBuilder, Gid, devices};
pub use dm::{DeviceMemory, DmMr};
pub use mr::{Mr, RawMr, RemoteBuf};
pub use pd::{Ah, Pd};
pub use qp::{ConnectParams, Qp, QpInit, Srq};
pub use softrdma_engine::{DeviceAttr, EngineConfig, PortAttr};
pub use softrdma_transport::{
    Access, AddressVector, AsyncEventType, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType, Qpn,
    RecvWr, SendFlags, SendWr, Sge, Stats, UdDest, Wc, WcFlags, WcOpcode, WcStatus, WrOpcode,
};
