//! The transport's [`Memory`] over this process's address space.
//!
//! This is the one place the engine dereferences registered memory.
//! Regions registered for on-demand paging (`IBV_ACCESS_ON_DEMAND`) are not
//! dereferenced at all: their memory may be unmapped at any time, so it is
//! copied through the kernel ([`kernel_copy`]), which reports a hole as
//! `EFAULT` where a plain load or store would kill the process.

use softrdma_transport::{AtomicOp, Memory, Unmapped};
use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Process memory, addressed by host virtual address.
///
/// The transport calls these methods only for ranges its MR table admitted:
/// ranges inside a region whose registration promised (an `unsafe` contract in
/// the Rust API, the verbs contract in the C ABI) that the memory stays
/// allocated until deregistration. Deregistration takes the endpoint lock that
/// every call here runs under, so no access outlives a registration. The
/// `*_on_demand` methods serve on-demand-paging regions, which promise
/// nothing of the kind.
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
        let Some((&last, body)) = src.split_last() else {
            return;
        };
        // SAFETY: as in `read`; the region was registered with write rights the
        // transport checked, and `src` is a packet buffer distinct from it.
        unsafe {
            std::ptr::copy_nonoverlapping(body.as_ptr(), addr as *mut u8, body.len());
            store_last(addr + body.len() as u64, last);
        }
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

    fn read_on_demand(&mut self, addr: u64, dst: &mut [u8]) -> Result<(), Unmapped> {
        kernel_copy(dst.as_mut_ptr() as u64, addr, dst.len())
    }

    fn write_on_demand(&mut self, addr: u64, src: &[u8]) -> Result<(), Unmapped> {
        // The last byte last, as `write` places it (programs poll it).
        let Some((last, body)) = src.split_last() else {
            return Ok(());
        };
        kernel_copy(addr, body.as_ptr() as u64, body.len())?;
        fence(Ordering::Release);
        kernel_copy(addr + body.len() as u64, std::ptr::from_ref(last) as u64, 1)
    }

    /// Read, apply, write back, each through the kernel. Every remote atomic
    /// runs under the endpoint lock, so this is atomic with respect to the
    /// others (`IBV_ATOMIC_HCA`), as [`Memory::atomic`] is.
    fn atomic_on_demand(&mut self, addr: u64, op: AtomicOp) -> Result<u64, Unmapped> {
        let mut orig = [0u8; 8];
        self.read_on_demand(addr, &mut orig)?;
        let orig = u64::from_ne_bytes(orig);
        self.write_on_demand(addr, &op.apply(orig).to_ne_bytes())?;
        Ok(orig)
    }
}

/// Copies `len` bytes from `from` to `to`, both addresses of this process,
/// with `process_vm_readv` on our own pid: the kernel copies as a device
/// would through its page tables, faulting pages in, and answers `EFAULT`
/// for a source not mapped readable or a destination not mapped writable,
/// where `memcpy` would raise SIGSEGV. What on-demand paging costs per
/// access: a system call (BENCHMARKS.md, "Issue 20: on-demand paging").
fn kernel_copy(to: u64, from: u64, len: usize) -> Result<(), Unmapped> {
    if len == 0 {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: to as *mut libc::c_void,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: from as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the kernel checks both ranges against our page tables and
    // copies nothing where they are not mapped with the rights needed; the
    // callers pass a Rust buffer (borrowed for the call) and a range of an
    // on-demand region, which the engine holds no reference into, so the
    // store aliases nothing Rust assumes unchanged.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == len as isize {
        Ok(())
    } else {
        Err(Unmapped)
    }
}

/// Stores the last byte of a placement, after the rest of it.
///
/// Programs poll the last byte of a buffer a peer writes into to learn that
/// the whole buffer arrived (rdma-core's `riostream`, perftest's
/// `ib_write_lat`): a NIC places a message's bytes in address order, so they
/// may. `memcpy` does not: glibc's vector copy stores the head of a
/// 1 KiB–4 KiB copy after its tail, and `rep movsb` may make its stores
/// visible in any order; a poller then saw the last byte while the first
/// ones were stale (`riostream -T v`: "data verification failed", then a
/// hang, about 1 round trip in 5000). So every placement copies all but its
/// last byte, then stores that one by itself behind a release fence (on
/// x86 a separate store after string stores is ordered after them all).
///
/// # Safety
///
/// `addr` is writable memory of this process that no Rust reference covers.
pub(crate) unsafe fn store_last(addr: u64, byte: u8) {
    fence(Ordering::Release);
    // SAFETY: per the contract. Volatile: the store is for another thread
    // (or process) polling the byte, never elided or merged.
    unsafe { std::ptr::write_volatile(addr as *mut u8, byte) }
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
    use super::{HostMemory, check_mapped};
    use softrdma_transport::{AtomicOp, Memory, Unmapped};

    /// On-demand accesses reach mapped memory and report holes and
    /// read-only pages as `Unmapped`, never a signal. (Holes made and
    /// filled after registration: `tests/odp.rs`.)
    #[test]
    fn on_demand_accesses_report_holes() {
        let mut m = HostMemory;
        let mut words = vec![0u64; 512];
        let a = words.as_mut_ptr() as u64;
        m.write_on_demand(a + 10, b"odp bytes").unwrap();
        let mut back = [0u8; 9];
        m.read_on_demand(a + 10, &mut back).unwrap();
        assert_eq!(&back, b"odp bytes");
        let fa = AtomicOp::FetchAdd { add: 5 };
        assert_eq!(m.atomic_on_demand(a + 64, fa), Ok(0));
        assert_eq!(m.atomic_on_demand(a + 64, fa), Ok(5));
        assert_eq!(words[8], 10);
        // Address 16 (the zero page) is never mapped.
        assert_eq!(m.read_on_demand(16, &mut back), Err(Unmapped));
        assert_eq!(m.write_on_demand(16, b"x"), Err(Unmapped));
        assert_eq!(m.atomic_on_demand(16, fa), Err(Unmapped));
        // Code: readable, not writable, so no atomics either.
        let code = on_demand_accesses_report_holes as *const () as u64;
        m.read_on_demand(code, &mut back).unwrap();
        assert_eq!(m.write_on_demand(code, b"x"), Err(Unmapped));
        assert_eq!(m.atomic_on_demand(code & !7, fa), Err(Unmapped));
    }

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

/// The order of a placement's stores, observed: the destination's last byte
/// sits alone on a page made read-only, so the copy faults at its first
/// store to that byte; the handler records whether every other byte was in
/// place by then, opens the page and lets the store go on. glibc's `memcpy`
/// of 1 KiB stores its first 32 bytes last and fails this.
#[cfg(test)]
mod order_tests {
    use super::HostMemory;
    use core::ffi::{c_int, c_void};
    use softrdma_transport::Memory;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

    /// The read-only page, the destination and its length (for the handler).
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    static DST: AtomicUsize = AtomicUsize::new(0);
    static LEN: AtomicUsize = AtomicUsize::new(0);
    static FAULTS: AtomicUsize = AtomicUsize::new(0);
    static BODY_FIRST: AtomicBool = AtomicBool::new(false);

    fn pattern(i: usize) -> u8 {
        (i % 251) as u8 + 1
    }

    fn page_size() -> usize {
        // SAFETY: no arguments to misuse.
        unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
    }

    extern "C" fn on_segv(_: c_int, info: *mut libc::siginfo_t, _: *mut c_void) {
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
        let at = unsafe { (*info).si_addr() } as usize;
        let (page, dst, len) = (PAGE.load(SeqCst), DST.load(SeqCst), LEN.load(SeqCst));
        let ps = page_size();
        if page == 0 || at < dst || at >= page + ps {
            // Not this test's fault: the default action once it recurs.
            // SAFETY: async-signal-safe.
            unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
            return;
        }
        if FAULTS.fetch_add(1, SeqCst) == 0 {
            // SAFETY: the destination's bytes before the protected page are
            // mapped and readable.
            let ok = (0..len - 1).all(
                |i| unsafe { core::ptr::read_volatile((dst as *const u8).add(i)) } == pattern(i),
            );
            BODY_FIRST.store(ok, SeqCst);
        }
        // SAFETY: our own mapping; async-signal-safe.
        unsafe { libc::mprotect(page as *mut c_void, ps, libc::PROT_READ | libc::PROT_WRITE) };
    }

    #[test]
    fn a_placement_stores_its_last_byte_after_all_the_others() {
        let ps = page_size();
        // SAFETY: sigaction is plain data; all zeroes is a valid value.
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: as above; filled in below.
        let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
        sa.sa_sigaction = on_segv as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        // SAFETY: valid pointers to the two structures.
        assert_eq!(unsafe { libc::sigaction(libc::SIGSEGV, &sa, &mut old) }, 0);
        for len in [2usize, 64, 1000, 1024, 4096, 65536] {
            let pages = len.div_ceil(ps) + 1;
            // SAFETY: a fresh private anonymous mapping.
            let base = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    pages * ps,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            let page = base as usize + (pages - 1) * ps;
            let dst = page - (len - 1);
            let src: Vec<u8> = (0..len).map(pattern).collect();
            FAULTS.store(0, SeqCst);
            BODY_FIRST.store(false, SeqCst);
            DST.store(dst, SeqCst);
            LEN.store(len, SeqCst);
            PAGE.store(page, SeqCst);
            // SAFETY: the last page of our mapping.
            let r = unsafe { libc::mprotect(page as *mut c_void, ps, libc::PROT_READ) };
            assert_eq!(r, 0);
            HostMemory.write(dst as u64, &src);
            PAGE.store(0, SeqCst);
            assert_eq!(
                FAULTS.load(SeqCst),
                1,
                "{len} bytes: the last byte's page was written once"
            );
            assert!(
                BODY_FIRST.load(SeqCst),
                "{len} bytes: the last byte was stored before the rest"
            );
            // SAFETY: `len` bytes of our mapping, all written now.
            let got = unsafe { core::slice::from_raw_parts(dst as *const u8, len) };
            assert_eq!(got, &src[..]);
            // SAFETY: our mapping, unmapped once.
            unsafe { libc::munmap(base, pages * ps) };
        }
        // SAFETY: the handler saved above.
        unsafe { libc::sigaction(libc::SIGSEGV, &old, core::ptr::null_mut()) };
    }
}
