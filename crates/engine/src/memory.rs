//! The transport's [`Memory`] over this process's address space.
//!
//! This is the one place the engine dereferences registered memory.

use softrdma_transport::{AtomicOp, Memory};
use std::sync::atomic::{AtomicU64, Ordering};

/// Process memory, addressed by host virtual address.
///
/// The transport calls these methods only for ranges its MR table admitted:
/// ranges inside a region whose registration promised (an `unsafe` contract in
/// the Rust API, the verbs contract in the C ABI) that the memory stays
/// allocated until deregistration. Deregistration takes the endpoint lock that
/// every call here runs under, so no access outlives a registration.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HostMemory;

impl Memory for HostMemory {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        // SAFETY: `[addr, addr + dst.len())` lies inside a registered region (checked by
        // the transport's MR table under the endpoint lock), which its registrant keeps
        // allocated until deregistration; `dst` is a distinct Rust buffer, so the ranges
        // do not overlap. Concurrent application stores race exactly as with DMA on a NIC.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, dst.as_mut_ptr(), dst.len()) }
    }

    fn write(&mut self, addr: u64, src: &[u8]) {
        // SAFETY: as in `read`; the region was registered with write rights the
        // transport checked, and `src` is a packet buffer distinct from it.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), addr as *mut u8, src.len()) }
    }

    fn atomic(&mut self, addr: u64, op: AtomicOp) -> u64 {
        // SAFETY: the transport checked that `addr` is 8-byte aligned and that the 8
        // bytes lie in a registered region with atomic rights; AtomicU64 has the
        // layout of u64, and all remote atomics go through here, so they are atomic
        // with respect to each other (IBV_ATOMIC_HCA semantics).
        let a = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
        match op {
            AtomicOp::FetchAdd { add } => a.fetch_add(add, Ordering::SeqCst),
            AtomicOp::CompareSwap { compare, swap } => {
                match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
        }
    }
}

/// Checks that `[addr, addr + len)` is mapped in this process, readable, and
/// writable too if `write` (what the kernel's `ib_umem_get` checks when
/// rdma-core registers memory: `EFAULT` otherwise; `EINVAL` if the range
/// wraps around). Registering memory that is not there would let a peer's
/// WRITE or READ fault in the progress thread; refusing it at registration,
/// as rdma-core does, keeps that from happening. Reads `/proc/self/maps`
/// (registration is a slow path).
pub fn check_mapped(addr: u64, len: u64, write: bool) -> Result<(), i32> {
    let end = addr.checked_add(len).ok_or(libc::EINVAL)?;
    if len == 0 {
        return Ok(());
    }
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|_| libc::EFAULT)?;
    // Walk the (address-ordered) mappings, extending the covered prefix.
    let mut covered = addr;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        if hi <= covered {
            continue;
        }
        let p = perms.as_bytes();
        let usable = p.first() == Some(&b'r') && (!write || p.get(1) == Some(&b'w'));
        if lo > covered || !usable {
            return Err(libc::EFAULT);
        }
        covered = hi;
        if covered >= end {
            return Ok(());
        }
    }
    Err(libc::EFAULT)
}

#[cfg(test)]
mod tests {
    use super::check_mapped;

    #[test]
    fn mapped_ranges_and_holes() {
        let v = vec![7u8; 3 * 4096];
        let a = v.as_ptr() as u64;
        assert_eq!(check_mapped(a, v.len() as u64, true), Ok(()));
        assert_eq!(check_mapped(a, 0, true), Ok(()));
        assert_eq!(check_mapped(u64::MAX - 10, 100, false), Err(libc::EINVAL));
        // Code is mapped but not writable.
        let f = mapped_ranges_and_holes as *const () as u64;
        assert_eq!(check_mapped(f, 16, false), Ok(()));
        assert_eq!(check_mapped(f, 16, true), Err(libc::EFAULT));
        // Address 16 (the zero page) is never mapped.
        assert_eq!(check_mapped(16, 16, false), Err(libc::EFAULT));
    }
}
