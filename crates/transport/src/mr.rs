//! Memory registration and protection: every local and remote access is
//! checked here (key, PD, rights, bounds with overflow checks) before the
//! [`Memory`] implementation touches a byte.

use crate::table::Table;
use crate::types::Access;

/// Access to the memory behind registered regions, in the host address space.
///
/// The transport calls these only after checking that `[addr, addr + len)`
/// lies inside a registered region with the needed rights. The engine
/// implements it over process memory; tests over plain buffers.
pub trait Memory {
    /// Copies `dst.len()` bytes starting at host address `addr` into `dst`.
    fn read(&mut self, addr: u64, dst: &mut [u8]);
    /// Copies `src` to host address `addr`.
    fn write(&mut self, addr: u64, src: &[u8]);
    /// Performs an 8-byte atomic at the 8-byte aligned host address `addr` on a
    /// value in host byte order and returns the original value.
    fn atomic(&mut self, addr: u64, op: AtomicOp) -> u64;
}

/// A remote atomic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Store `swap` if the current value equals `compare`.
    CompareSwap {
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// Add `add` (wrapping).
    FetchAdd {
        /// Addend.
        add: u64,
    },
}

impl AtomicOp {
    /// The value after applying the operation to `orig`.
    pub fn apply(self, orig: u64) -> u64 {
        match self {
            AtomicOp::CompareSwap { compare, swap } => {
                if orig == compare {
                    swap
                } else {
                    orig
                }
            }
            AtomicOp::FetchAdd { add } => orig.wrapping_add(add),
        }
    }
}

/// Handle of a protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdHandle(pub u32);

/// A registered memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// Owning protection domain.
    pub pd: PdHandle,
    /// First I/O virtual address (what SGEs and RETHs name).
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
    /// Host address corresponding to `iova`.
    pub host: u64,
    /// Rights.
    pub access: Access,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// Why an access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessError {
    /// No region has this key (or it was deregistered).
    BadKey,
    /// The region belongs to another protection domain.
    PdMismatch,
    /// The region does not grant the needed right.
    NoPermission,
    /// The range leaves the region (or wraps around 2^64).
    OutOfBounds,
    /// An atomic address is not 8-byte aligned.
    Misaligned,
}

#[derive(Debug, Default)]
pub(crate) struct MrTable {
    mrs: Table<Mr>,
}

impl MrTable {
    /// Registers a region; keys are `slot << 8 | tag` with a random 8-bit tag.
    pub(crate) fn insert(
        &mut self,
        pd: PdHandle,
        iova: u64,
        length: u64,
        host: u64,
        access: Access,
        tag: u8,
    ) -> Mr {
        let slot = self.mrs.insert_with(|i| {
            let key = ((i + 1) << 8) | u32::from(tag);
            Mr {
                pd,
                iova,
                length,
                host,
                access,
                lkey: key,
                rkey: key,
            }
        });
        *self.mrs.get(slot).expect("just inserted")
    }

    fn slot_of(key: u32) -> Option<u32> {
        (key >> 8).checked_sub(1)
    }

    pub(crate) fn get(&self, key: u32) -> Option<&Mr> {
        let mr = self.mrs.get(Self::slot_of(key)?)?;
        (mr.lkey == key).then_some(mr)
    }

    pub(crate) fn remove(&mut self, key: u32) -> Option<Mr> {
        let slot = Self::slot_of(key)?;
        if self.mrs.get(slot)?.lkey != key {
            return None;
        }
        self.mrs.remove(slot)
    }

    /// Checks an access through `key` to `[va, va + len)` and returns the host address.
    ///
    /// A zero-length access needs no valid key (C9-88) and returns 0.
    pub(crate) fn check(
        &self,
        key: u32,
        pd: PdHandle,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<u64, AccessError> {
        if len == 0 {
            return Ok(0);
        }
        let mr = self.get(key).ok_or(AccessError::BadKey)?;
        if mr.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if !mr.access.contains(need) {
            return Err(AccessError::NoPermission);
        }
        let end = va.checked_add(len).ok_or(AccessError::OutOfBounds)?;
        let mr_end = mr
            .iova
            .checked_add(mr.length)
            .ok_or(AccessError::OutOfBounds)?;
        if va < mr.iova || end > mr_end {
            return Err(AccessError::OutOfBounds);
        }
        Ok(mr.host.wrapping_add(va - mr.iova))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks() {
        let mut t = MrTable::default();
        let pd = PdHandle(1);
        let mr = t.insert(pd, 0x1000, 0x100, 0x9000, Access::REMOTE_WRITE, 0xAB);
        assert_eq!(mr.lkey & 0xFF, 0xAB);
        let k = mr.rkey;
        assert_eq!(
            t.check(k, pd, 0x1000, 0x100, Access::REMOTE_WRITE),
            Ok(0x9000)
        );
        assert_eq!(t.check(k, pd, 0x10FF, 1, Access::REMOTE_WRITE), Ok(0x90FF));
        assert_eq!(
            t.check(k, pd, 0x10FF, 2, Access::REMOTE_WRITE),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(k, pd, 0xFFF, 1, Access::REMOTE_WRITE),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(k, pd, u64::MAX, 2, Access::REMOTE_WRITE),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(k, pd, 0x1000, 1, Access::REMOTE_READ),
            Err(AccessError::NoPermission)
        );
        assert_eq!(
            t.check(k, PdHandle(2), 0x1000, 1, Access::REMOTE_WRITE),
            Err(AccessError::PdMismatch)
        );
        assert_eq!(
            t.check(k ^ 1, pd, 0x1000, 1, Access::REMOTE_WRITE),
            Err(AccessError::BadKey)
        );
        assert_eq!(t.check(0xdead, pd, 0, 0, Access::REMOTE_WRITE), Ok(0));
        assert!(t.remove(k).is_some());
        assert_eq!(
            t.check(k, pd, 0x1000, 1, Access::REMOTE_WRITE),
            Err(AccessError::BadKey)
        );
    }
}
