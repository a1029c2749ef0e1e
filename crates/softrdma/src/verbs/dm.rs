//! Device memory (`ibv_alloc_dm`): buffers of the device, reached by
//! copying and through zero-based regions (native backend only).

use super::device::{Context, Dev};
use super::mr::RemoteBuf;
use super::pd::{Pd, PdImp};
use crate::Result;
use softrdma_engine::dm::{DeviceMemory as Buf, DmUse};
use softrdma_transport::{Access, Sge, VerbsError};
use std::fmt;
use std::sync::Arc;

/// A device-memory buffer (`struct ibv_dm`): its bytes are the device's;
/// the application copies in and out in 4-byte words, work requests and
/// peers reach it through a [`DmMr`].
pub struct DeviceMemory {
    ctx: Context,
    buf: Arc<Buf>,
}

impl fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceMemory")
            .field("handle", &self.buf.handle())
            .field("len", &self.buf.len())
            .finish()
    }
}

impl DeviceMemory {
    pub(crate) fn alloc(ctx: &Context, len: u64, log_align: u32) -> Result<DeviceMemory> {
        match &ctx.dev {
            Dev::Native(e) => Ok(DeviceMemory {
                ctx: ctx.clone(),
                buf: e.alloc_dm(len, log_align)?,
            }),
            Dev::RdmaCore(_) => Err(VerbsError::NotSupported(
                "device memory on the rdma-core backend".into(),
            )
            .into()),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.buf.len()
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The device this memory belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// `ibv_memcpy_to_dm`: `offset` and `src.len()` multiples of 4, inside.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        Ok(self.buf.write(offset, src)?)
    }

    /// `ibv_memcpy_from_dm`: `offset` and `dst.len()` multiples of 4, inside.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        Ok(self.buf.read(offset, dst)?)
    }
}

/// A zero-based region over device memory (`ibv_reg_dm_mr`): work requests
/// and peers address it by offset from 0. Deregistered when dropped; the
/// memory stays allocated while a region over it lives.
pub struct DmMr {
    pd: Pd,
    lkey: u32,
    rkey: u32,
    len: u64,
    _hold: DmUse,
}

impl fmt::Debug for DmMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmMr")
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("len", &self.len)
            .finish()
    }
}

impl DmMr {
    pub(crate) fn new(
        pd: &Pd,
        dm: &DeviceMemory,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<DmMr> {
        match &pd.0.imp {
            PdImp::Native(e, h) => {
                let (m, hold) =
                    e.reg_dm_mr(*h, &dm.buf, offset, len, access | Access::ZERO_BASED)?;
                Ok(DmMr {
                    pd: pd.clone(),
                    lkey: m.lkey,
                    rkey: m.rkey,
                    len,
                    _hold: hold,
                })
            }
            PdImp::RdmaCore(_) => Err(VerbsError::NotSupported(
                "device memory on the rdma-core backend".into(),
            )
            .into()),
        }
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An SGE for `len` bytes at region offset `offset`.
    pub fn sge(&self, offset: u64, len: u32) -> Result<Sge> {
        match offset.checked_add(u64::from(len)) {
            Some(end) if end <= self.len => Ok(Sge {
                addr: offset,
                length: len,
                lkey: self.lkey,
            }),
            _ => Err(VerbsError::InvalidArgument(format!(
                "{len} bytes at {offset} outside a {}-byte region",
                self.len
            ))
            .into()),
        }
    }

    /// This region as a remote target (zero-based: its address is 0).
    pub fn remote(&self) -> RemoteBuf {
        RemoteBuf {
            addr: 0,
            rkey: self.rkey,
            len: self.len,
        }
    }
}

impl Drop for DmMr {
    fn drop(&mut self) {
        if let PdImp::Native(e, _) = &self.pd.0.imp {
            let _ = e.dereg_mr(self.lkey);
        }
    }
}
