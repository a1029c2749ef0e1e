//! Device memory (`ibv_alloc_dm`): buffers the device owns, which the
//! application reaches only by copying (`ibv_memcpy_to_dm` /
//! `ibv_memcpy_from_dm`) and the transport through zero-based regions
//! registered over them (`ibv_reg_dm_mr`), from local work requests and
//! from remote peers alike.
//!
//! On a NIC this is on-chip memory (mlx5's MEMIC); here it is memory of the
//! engine, outside every application allocation. The rules are a NIC's:
//! at most [`MAX_DM_SIZE`] bytes allocated at once (per process: each
//! process runs its own engine), copies in 4-byte words (offset and length
//! multiples of 4, as mlx5 requires), regions only zero-based, and a buffer
//! with regions over it cannot be freed (EBUSY).

use softrdma_transport::{Access, VerbsError};
use std::alloc::Layout;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Device memory a process may hold at once (`max_dm_size`).
pub const MAX_DM_SIZE: u64 = 256 * 1024;
/// Largest alignment a buffer may ask for (`log_align_req`): a page.
pub const MAX_LOG_ALIGN: u32 = 12;
/// Copies move whole words of this many bytes.
pub const DM_WORD: u64 = 4;
/// Access rights a region over device memory may have (`ZERO_BASED` required).
pub const DM_MR_ACCESS: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0
        | Access::ZERO_BASED.0,
);

/// One device-memory buffer. Shared (`Arc`) by every handle on it (the
/// allocation, imports) and every region registered over it, so its bytes
/// live as long as anything can reach them.
#[derive(Debug)]
pub struct DeviceMemory {
    ptr: NonNull<u8>,
    layout: Layout,
    handle: u32,
    /// Regions registered over it (`ibv_free_dm` is EBUSY while non-zero).
    mrs: AtomicU32,
    /// `ibv_free_dm` succeeded: no new import finds it.
    freed: AtomicBool,
    /// The table's count of bytes in use, given back on drop.
    in_use: Arc<AtomicU64>,
}

// SAFETY: the buffer is plain bytes owned by this value; every access goes
// through raw-pointer copies (never references), as device memory is
// written by the transport and the application concurrently, exactly like
// registered application memory.
unsafe impl Send for DeviceMemory {}
// SAFETY: as above; the other fields are atomics or immutable.
unsafe impl Sync for DeviceMemory {}

impl DeviceMemory {
    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.layout.size() as u64
    }

    /// Never true (a buffer has at least one byte); for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.layout.size() == 0
    }

    /// The handle `ibv_import_dm` takes.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Regions registered over it.
    pub fn regions(&self) -> u32 {
        self.mrs.load(Ordering::SeqCst)
    }

    /// Checks a copy of `len` bytes at `offset`: whole words, inside.
    fn check(&self, offset: u64, len: u64) -> Result<(), VerbsError> {
        if !offset.is_multiple_of(DM_WORD) || !len.is_multiple_of(DM_WORD) {
            return Err(VerbsError::InvalidArgument(format!(
                "device memory copies are whole {DM_WORD}-byte words (offset {offset}, length {len})"
            )));
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(VerbsError::InvalidArgument(format!(
                "{len} bytes at {offset} are outside the {} bytes of device memory",
                self.len()
            ))),
        }
    }

    /// `ibv_memcpy_to_dm`: copies `src` to `offset`.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<(), VerbsError> {
        self.check(offset, src.len() as u64)?;
        // SAFETY: `check` keeps `[offset, offset + len)` inside the buffer,
        // which is allocated and owned by `self`; `src` is a valid slice
        // that cannot overlap it (the buffer is never handed out as a slice).
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.ptr.as_ptr().add(offset as usize),
                src.len(),
            );
        }
        Ok(())
    }

    /// `ibv_memcpy_from_dm`: copies from `offset` into `dst`.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), VerbsError> {
        self.check(offset, dst.len() as u64)?;
        // SAFETY: as in `write`, with source and destination swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset as usize),
                dst.as_mut_ptr(),
                dst.len(),
            );
        }
        Ok(())
    }

    /// The process address of byte `offset` (for the region's host side).
    pub(crate) fn host_addr(&self, offset: u64) -> u64 {
        self.ptr.as_ptr() as u64 + offset
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        self.in_use
            .fetch_sub(self.layout.size() as u64, Ordering::SeqCst);
        // SAFETY: allocated in `DmTable::alloc` with this very layout, and
        // freed once: nothing else owns the pointer.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A region's hold on its device memory: keeps the bytes alive and the
/// buffer busy until the region is deregistered (dropped with it).
#[derive(Debug)]
pub struct DmUse(Arc<DeviceMemory>);

impl DmUse {
    /// The buffer held.
    pub fn memory(&self) -> &Arc<DeviceMemory> {
        &self.0
    }
}

impl Drop for DmUse {
    fn drop(&mut self) {
        self.0.mrs.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The device memory of one engine: the bytes in use and the handles.
/// Its own lock, never the endpoint's (a forked child allocates through its
/// parent's context, whose endpoint lock a parent thread may have held).
#[derive(Debug, Default)]
pub(crate) struct DmTable {
    in_use: Arc<AtomicU64>,
    next_handle: AtomicU32,
    by_handle: Mutex<HashMap<u32, Weak<DeviceMemory>>>,
}

impl DmTable {
    /// `ibv_alloc_dm`: `length` zeroed bytes aligned to `2^log_align`.
    pub(crate) fn alloc(
        &self,
        length: u64,
        log_align: u32,
    ) -> Result<Arc<DeviceMemory>, VerbsError> {
        if length == 0 || length > MAX_DM_SIZE {
            return Err(VerbsError::InvalidArgument(format!(
                "device memory of {length} bytes (1..={MAX_DM_SIZE})"
            )));
        }
        if log_align > MAX_LOG_ALIGN {
            return Err(VerbsError::InvalidArgument(format!(
                "alignment 2^{log_align} (at most 2^{MAX_LOG_ALIGN})"
            )));
        }
        // Reserve the bytes first, so concurrent allocations never overshoot.
        let prev = self.in_use.fetch_add(length, Ordering::SeqCst);
        if prev + length > MAX_DM_SIZE {
            self.in_use.fetch_sub(length, Ordering::SeqCst);
            return Err(VerbsError::NoMemory(format!(
                "device memory: {prev} of {MAX_DM_SIZE} bytes in use"
            )));
        }
        let align = (1usize << log_align).max(64);
        let layout = Layout::from_size_align(length as usize, align)
            .map_err(|e| VerbsError::InvalidArgument(e.to_string()))?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            self.in_use.fetch_sub(length, Ordering::SeqCst);
            return Err(VerbsError::NoMemory("device memory".into()));
        };
        let handle = self
            .next_handle
            .fetch_add(1, Ordering::SeqCst)
            .wrapping_add(1);
        let dm = Arc::new(DeviceMemory {
            ptr,
            layout,
            handle,
            mrs: AtomicU32::new(0),
            freed: AtomicBool::new(false),
            in_use: self.in_use.clone(),
        });
        let mut t = self.by_handle.lock().unwrap_or_else(|p| p.into_inner());
        t.retain(|_, w| w.strong_count() > 0);
        t.insert(handle, Arc::downgrade(&dm));
        Ok(dm)
    }

    /// `ibv_import_dm`: the live, not freed buffer with this handle.
    pub(crate) fn import(&self, handle: u32) -> Option<Arc<DeviceMemory>> {
        let t = self.by_handle.lock().unwrap_or_else(|p| p.into_inner());
        t.get(&handle)
            .and_then(Weak::upgrade)
            .filter(|d| !d.freed.load(Ordering::SeqCst))
    }

    /// Bytes allocated now.
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::SeqCst)
    }
}

/// `ibv_free_dm`: EBUSY while regions are registered over `dm`; otherwise
/// no import finds it any more (its bytes go with the last handle).
pub fn free(dm: &DeviceMemory) -> Result<(), VerbsError> {
    if dm.regions() > 0 {
        return Err(VerbsError::Busy(format!(
            "device memory {} has {} regions",
            dm.handle,
            dm.regions()
        )));
    }
    dm.freed.store(true, Ordering::SeqCst);
    Ok(())
}

/// Checks an `ibv_reg_dm_mr` and returns the host range and a hold on `dm`:
/// `ZERO_BASED` is required (the region's addresses are offsets), no rights
/// beyond [`DM_MR_ACCESS`], `[offset, offset + length)` inside the buffer.
pub(crate) fn region(
    dm: &Arc<DeviceMemory>,
    offset: u64,
    length: u64,
    access: Access,
) -> Result<(u64, DmUse), VerbsError> {
    if !access.contains(Access::ZERO_BASED) {
        return Err(VerbsError::InvalidArgument(
            "device memory regions are zero-based (IBV_ACCESS_ZERO_BASED)".into(),
        ));
    }
    if !access.without(DM_MR_ACCESS).is_empty() {
        return Err(VerbsError::InvalidArgument(format!(
            "access {access:?} on device memory"
        )));
    }
    match offset.checked_add(length) {
        Some(end) if end <= dm.len() => {}
        _ => {
            return Err(VerbsError::InvalidArgument(format!(
                "{length} bytes at {offset} are outside the {} bytes of device memory",
                dm.len()
            )));
        }
    }
    dm.mrs.fetch_add(1, Ordering::SeqCst);
    Ok((dm.host_addr(offset), DmUse(dm.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_limits_alignment_and_accounting() {
        let t = DmTable::default();
        assert!(t.alloc(0, 0).is_err());
        assert!(t.alloc(MAX_DM_SIZE + 1, 0).is_err());
        assert!(t.alloc(64, MAX_LOG_ALIGN + 1).is_err());
        let a = t.alloc(MAX_DM_SIZE / 2, 6).unwrap();
        assert_eq!(a.host_addr(0) % 64, 0);
        let b = t.alloc(MAX_DM_SIZE / 2, MAX_LOG_ALIGN).unwrap();
        assert_eq!(b.host_addr(0) % 4096, 0);
        assert_eq!(t.in_use(), MAX_DM_SIZE);
        let e = t.alloc(4, 0).unwrap_err();
        assert_eq!(e.errno(), 12, "ENOMEM when the device memory is used up");
        drop(a);
        assert_eq!(t.in_use(), MAX_DM_SIZE / 2);
        assert!(t.alloc(4, 0).is_ok());
        assert_ne!(b.handle(), 0);
    }

    #[test]
    fn copies_are_whole_words_inside_the_buffer() {
        let t = DmTable::default();
        let d = t.alloc(100, 0).unwrap();
        let mut z = [1u8; 100];
        d.read(0, &mut z).unwrap();
        assert_eq!(z, [0u8; 100], "allocated zeroed");
        d.write(4, b"abcdefgh").unwrap();
        let mut out = [0u8; 12];
        d.read(0, &mut out).unwrap();
        assert_eq!(&out, b"\0\0\0\0abcdefgh");
        for (off, len) in [(1, 4), (4, 3), (104, 4), (0, 104), (u64::MAX - 3, 4)] {
            let mut buf = vec![0u8; len];
            assert_eq!(
                d.read(off, &mut buf).unwrap_err().errno(),
                22,
                "{off}+{len}"
            );
            assert_eq!(d.write(off, &buf).unwrap_err().errno(), 22, "{off}+{len}");
        }
    }

    #[test]
    fn regions_keep_the_buffer_busy_and_alive() {
        let t = DmTable::default();
        let d = t.alloc(128, 0).unwrap();
        let h = d.handle();
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::ZERO_BASED;
        assert!(
            region(&d, 0, 128, Access::LOCAL_WRITE).is_err(),
            "not zero-based"
        );
        assert!(region(&d, 0, 128, rw | Access::MW_BIND).is_err());
        assert!(region(&d, 64, 68, rw).is_err(), "past the end");
        let (host, hold) = region(&d, 64, 64, rw).unwrap();
        assert_eq!(host, d.host_addr(64));
        assert_eq!(free(&d).unwrap_err().errno(), 16, "EBUSY with a region");
        assert!(t.import(h).is_some());
        drop(d);
        // The region still holds the bytes.
        assert_eq!(t.in_use(), 128);
        assert_eq!(hold.memory().regions(), 1);
        free(hold.memory()).unwrap_err();
        let m = hold.memory().clone();
        drop(hold);
        free(&m).unwrap();
        assert!(t.import(h).is_none(), "freed: no import");
        drop(m);
        assert_eq!(t.in_use(), 0);
    }
}
