//! Verbs: the `libibverbs` object model, safe.
//!
//! ```no_run
//! use softrdma::verbs::*;
//! # fn main() -> softrdma::Result<()> {
//! let ctx = Context::open()?;                 // the softrdma device of this process
//! let pd = ctx.alloc_pd()?;
//! let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let cq = ctx.create_cq(64, None)?;
//! let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
//! println!("QP {:#x} on {}", qp.qpn(), ctx.local_addr());
//! # let _ = mr; Ok(()) }
//! ```
//!
//! Objects hold their parents (`Arc`), so they are destroyed children first,
//! whatever order the application drops them in. Completions, attributes and
//! work requests are the transport's plain types, re-exported here.

mod cq;
mod device;
mod mr;
mod pd;
mod qp;

pub use cq::{CompChannel, Cq, CqId};
pub use device::{Context, Gid, devices};
pub use mr::{Mr, RawMr, RemoteBuf};
pub use pd::{Ah, Pd};
pub use qp::{ConnectParams, Qp, QpInit, Srq};
pub use softrdma_engine::{DeviceAttr, EngineConfig, PortAttr};
pub use softrdma_transport::{
    Access, AddressVector, AsyncEventType, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType, Qpn,
    RecvWr, SendFlags, SendWr, Sge, Stats, UdDest, Wc, WcFlags, WcOpcode, WcStatus, WrOpcode,
};
