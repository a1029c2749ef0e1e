//! Memory regions.
//!
//! A [`Mr`] owns its buffer, so it can be neither freed nor moved while
//! registered, and it never hands out plain references to it: the device may
//! write it at any moment (receives, remote WRITEs, atomics), so all access
//! goes through [`Mr::read`]/[`Mr::write`], which synchronize with the
//! device, or through the `unsafe` slice views for zero-copy users.
//!
//! The same holds on both backends: the buffer is deregistered before it is
//! freed. The native device writes memory only under its lock, which
//! `read`/`write` take; a NIC (rdma-core backend) writes by DMA, ordered
//! with the application by completions, as always with RDMA: read what a
//! completion reported, write what no posted request is using.

use super::pd::{Pd, PdImp};
use crate::backend::rdma_core::sys;
use crate::{Error, Result};
use softrdma_transport::{Access, Sge};
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{Ordering, fence};

/// A registration of one backend.
enum Reg {
    Native,
    RdmaCore(sys::Mr),
    /// Deregistered (during drop).
    Gone,
}

/// Registers `[addr, addr + len)` on `pd`'s device.
///
/// # Safety
///
/// The memory stays valid for the device's reads and writes (per `access`)
/// until the returned registration is deregistered.
unsafe fn register(pd: &Pd, addr: *mut u8, len: usize, access: Access) -> Result<(Reg, u32, u32)> {
    match &pd.0.imp {
        PdImp::Native(e, h) => {
            let (h, a) = (*h, addr as u64);
            let m = e.reg_mr(h, a, len as u64, a, access)?;
            Ok((Reg::Native, m.lkey, m.rkey))
        }
        PdImp::RdmaCore(p) => {
            // SAFETY: forwarded contract.
            let m = unsafe { sys::Mr::register(p, addr, len, access) }?;
            let (l, r) = (m.lkey, m.rkey);
            Ok((Reg::RdmaCore(m), l, r))
        }
    }
}

/// Undoes [`register`]: afterwards no work request or peer reaches the memory.
fn deregister(pd: &Pd, reg: &mut Reg, lkey: u32) {
    match std::mem::replace(reg, Reg::Gone) {
        Reg::Native => {
            if let PdImp::Native(e, _) = &pd.0.imp {
                let _ = e.dereg_mr(lkey);
            }
        }
        Reg::RdmaCore(m) => drop(m),
        Reg::Gone => {}
    }
}

/// Runs `f` synchronized with the device: under the native device's lock,
/// or between fences on rdma-core (DMA is ordered by completions).
fn synced(pd: &Pd, f: impl FnOnce()) {
    match &pd.0.imp {
        PdImp::Native(e, _) => e.with_memory_synced(f),
        PdImp::RdmaCore(_) => {
            fence(Ordering::Acquire);
            f();
            fence(Ordering::Release);
        }
    }
}

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
    reg: Reg,
    ptr: NonNull<u8>,
    len: usize,
    lkey: u32,
    rkey: u32,
}

// SAFETY: the buffer is a heap allocation owned by the Mr; the Mr only touches
// it inside `synced` (the native device lock, which the native device holds
// whenever it touches memory; on rdma-core the device's DMA is ordered with
// the application by completions), and the `unsafe` views put the burden on
// their caller. The rdma-core registration handle is Send + Sync.
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
        // rdma-core refuses zero-length registrations; the allocation has a byte.
        let reg_len = match &pd.0.imp {
            PdImp::Native(..) => len,
            PdImp::RdmaCore(_) => len.max(1),
        };
        // SAFETY: the allocation is owned by the Mr, which deregisters it
        // before freeing it (Drop).
        match unsafe { register(pd, ptr.as_ptr(), reg_len, access) } {
            Ok((reg, lkey, rkey)) => Ok(Mr {
                pd: pd.clone(),
                reg,
                ptr,
                len,
                lkey,
                rkey,
            }),
            Err(e) => {
                // SAFETY: allocated above with this layout, never registered.
                unsafe { dealloc(ptr.as_ptr(), layout(len)) };
                Err(e)
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
        synced(&self.pd, || {
            // SAFETY: in bounds (checked); the native device writes this
            // memory only under the lock held here, a NIC only as posted
            // work and peers' rights allow (see the module documentation).
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
        synced(&self.pd, || {
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
        // Deregister first: after this no work request or peer can reach the memory.
        deregister(&self.pd, &mut self.reg, self.lkey);
        // SAFETY: allocated in `alloc` with this layout; deregistered above.
        unsafe { dealloc(self.ptr.as_ptr(), layout(self.len)) };
    }
}

/// A registration of memory the application owns (`Pd::register_raw`).
pub struct RawMr {
    pd: Pd,
    reg: Reg,
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
        // SAFETY: forwarded contract (the RawMr deregisters when dropped).
        let (reg, lkey, rkey) = unsafe { register(pd, ptr, len, access) }?;
        Ok(RawMr {
            pd: pd.clone(),
            reg,
            addr: ptr as u64,
            len,
            lkey,
            rkey,
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
        deregister(&self.pd, &mut self.reg, self.lkey);
    }
}
