//! Memory regions.
//!
//! A [`Mr`] owns its buffer, so it can be neither freed nor moved while
//! registered, and it never hands out plain references to it: the device may
//! write it at any moment (receives, remote WRITEs, atomics), so all access
//! goes through [`Mr::read`]/[`Mr::write`], which synchronize with the
//! device, or through the `unsafe` slice views for zero-copy users.

use super::pd::Pd;
use crate::{Error, Result};
use softrdma_transport::{Access, Sge};
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::fmt;
use std::ptr::NonNull;

const ALIGN: usize = 4096;

/// Where a peer's buffer is: what a WRITE/READ/atomic work request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteBuf {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

/// A registered buffer owned by this object (`ibv_reg_mr` on memory it allocated).
pub struct Mr {
    pd: Pd,
    ptr: NonNull<u8>,
    len: usize,
    lkey: u32,
    rkey: u32,
}

// SAFETY: the buffer is a heap allocation owned by the Mr; the Mr only touches
// it inside `Engine::with` (the device lock), the device only under the same
// lock, and the `unsafe` views put the burden on their caller.
unsafe impl Send for Mr {}
// SAFETY: as for Send: shared access is synchronized by the device lock.
unsafe impl Sync for Mr {}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .finish()
    }
}

fn layout(len: usize) -> Layout {
    Layout::from_size_align(len.max(1), ALIGN).expect("size fits a layout")
}

impl Mr {
    pub(crate) fn alloc(pd: &Pd, len: usize, access: Access) -> Result<Mr> {
        if len > isize::MAX as usize - ALIGN {
            return Err(Error::OutOfRange {
                offset: 0,
                len,
                size: 0,
            });
        }
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout(len)) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            Error::Io(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                "MR allocation",
            ))
        })?;
        let a = ptr.as_ptr() as u64;
        let h = pd.0.h;
        match pd
            .0
            .ctx
            .engine
            .with(|ep, _| ep.reg_mr(h, a, len as u64, a, access))
        {
            Ok(m) => Ok(Mr {
                pd: pd.clone(),
                ptr,
                len,
                lkey: m.lkey,
                rkey: m.rkey,
            }),
            Err(e) => {
                // SAFETY: allocated above with this layout, never registered.
                unsafe { dealloc(ptr.as_ptr(), layout(len)) };
                Err(e.into())
            }
        }
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// Address of the first byte (what SGEs and remote addresses name).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(e) if e <= self.len => Ok(()),
            _ => Err(Error::OutOfRange {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// An SGE for `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        self.check(offset, len)?;
        Ok(Sge {
            addr: self.addr() + offset as u64,
            length: u32::try_from(len).map_err(|_| Error::OutOfRange {
                offset,
                len,
                size: self.len,
            })?,
            lkey: self.lkey,
        })
    }

    /// This region as a remote target (to send to a peer).
    pub fn remote(&self) -> RemoteBuf {
        RemoteBuf {
            addr: self.addr(),
            rkey: self.rkey,
            len: self.len as u64,
        }
    }

    /// Copies bytes out of the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len())?;
        self.pd.0.ctx.engine.with(|_, _| {
            // SAFETY: in bounds (checked); the device writes this memory only
            // under the lock held here, so the copy does not race with it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.as_ptr().add(offset),
                    dst.as_mut_ptr(),
                    dst.len(),
                )
            }
        });
        Ok(())
    }

    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check(offset, src.len())?;
        self.pd.0.ctx.engine.with(|_, _| {
            // SAFETY: as in `read`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr(),
                    self.ptr.as_ptr().add(offset),
                    src.len(),
                )
            }
        });
        Ok(())
    }

    /// A copy of `len` bytes at `offset`.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// The region as a slice, without synchronization (zero-copy readers).
    ///
    /// # Safety
    ///
    /// While the slice lives, no posted receive, RDMA READ response, remote
    /// WRITE or atomic may modify the region (no such work may be outstanding
    /// and no peer may hold write or atomic rights it could use).
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation is `len` initialized bytes; the caller excludes writers.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The region as a mutable slice, without synchronization (zero-copy writers).
    ///
    /// # Safety
    ///
    /// As for [`Mr::as_slice`], and additionally no outstanding SEND, WRITE or
    /// remote READ may read the region while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: as above; the caller excludes every other access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let lkey = self.lkey;
        // Deregister first: after this no work request or peer can reach the memory.
        let _ = self.pd.0.ctx.engine.with(|ep, _| ep.dereg_mr(lkey));
        // SAFETY: allocated in `alloc` with this layout; deregistered above.
        unsafe { dealloc(self.ptr.as_ptr(), layout(self.len)) };
    }
}

/// A registration of memory the application owns (`Pd::register_raw`).
pub struct RawMr {
    pd: Pd,
    addr: u64,
    len: usize,
    lkey: u32,
    rkey: u32,
}

impl fmt::Debug for RawMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawMr")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}

impl RawMr {
    /// # Safety
    ///
    /// See [`Pd::register_raw`].
    pub(crate) unsafe fn new(pd: &Pd, ptr: *mut u8, len: usize, access: Access) -> Result<RawMr> {
        let a = ptr as u64;
        let h = pd.0.h;
        let m =
            pd.0.ctx
                .engine
                .with(|ep, _| ep.reg_mr(h, a, len as u64, a, access))?;
        Ok(RawMr {
            pd: pd.clone(),
            addr: a,
            len,
            lkey: m.lkey,
            rkey: m.rkey,
        })
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// First address.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// This region as a remote target.
    pub fn remote(&self) -> RemoteBuf {
        RemoteBuf {
            addr: self.addr,
            rkey: self.rkey,
            len: self.len as u64,
        }
    }
}

impl Drop for RawMr {
    fn drop(&mut self) {
        let lkey = self.lkey;
        let _ = self.pd.0.ctx.engine.with(|ep, _| ep.dereg_mr(lkey));
    }
}
