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
