//! Peer copy on the same-host path (issue 17, step 2; the transport's
//! `qp/peer.rs`): large SENDs, WRITEs and READs of an RC QP whose peer sits behind
//! a lane travel as one packet naming memory ranges, and the owner of the
//! destination copies them from the other process: with `memcpy` through a
//! mapping of the memfd the range's region was shared into at registration
//! ([`MrShares`]), else with `process_vm_readv`.
//!
//! - **Which QPs.** Decided when a QP gets its destination (`ibv_modify_qp`
//!   with the address vector and destination QPN, or the CM connecting it):
//!   its packets would take a lane, and this process can copy from the
//!   peer's memory (`softrdma_shm::can_copy_from`, which opens the peer's
//!   inbox as a link does; the peer's ability to copy from ours is assumed
//!   the same, which holds unless Yama restricts ptrace, and then peer copy
//!   is off). `SOFTRDMA_PEER_COPY=0` turns it off.
//! - **Which process.** A lane datagram's ranges are read from the process
//!   holding the lane's slot in the registry, only while that holder's
//!   incarnation is the one the lane records (`Inbox::lane_owner`), never a
//!   pid the packet names.
//! - **Never on a wire.** A peer-copy packet that cannot take a lane (its
//!   link went down) is dropped, not sent over UDP: RC retransmits it, and
//!   a peer that stays gone ends in `IBV_WC_RETRY_EXC_ERR`.

use super::{ShmPath, add_locked};
use crate::engine::Shared;
use crate::memory::{HostMemory, store_last};
use rustc_hash::FxHashMap as HashMap;
use softrdma_shm::{CopyError, PeerMap, Range, Refused, Shared as SharedRegion};
use softrdma_transport::{
    AtomicOp, GSI_QPN, MULTICAST_QPN, Memory, PEER_COPY_MIN, PeerCopyError, PeerFile, PeerSeg,
    PlaceOffer, PlacementTicket, Unmapped,
};
use softrdma_udp::steer::member_slot;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the peer copies this process did (`SOFTRDMA_STATS`).
#[derive(Debug, Default)]
pub(crate) struct PeerCopyStats {
    pub(crate) copies: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) failed: AtomicU64,
    /// Peer-copy packets dropped because no lane could take them.
    pub(crate) dropped: AtomicU64,
    /// Bytes of `bytes` copied through mappings of peers' shared regions
    /// (the rest by `process_vm_readv`).
    pub(crate) mapped_bytes: AtomicU64,
}

/// Whether a datagram is a peer-copy packet (`softrdma_wire::peer`).
pub(in crate::engine) fn is_peer_packet(pkt: &[u8]) -> bool {
    pkt.first()
        .and_then(|&op| softrdma_wire::Opcode(op).info())
        .is_some_and(|i| i.peer)
}

/// Whether this process may use peer copy at all: `configured` on
/// (`SOFTRDMA_PEER_COPY`), and not where Yama limits ptrace
/// (`ptrace_scope` ≥ 1 lets only ancestors copy, so two peers' rights could
/// differ).
pub(super) fn allowed(configured: bool) -> bool {
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "0".to_owned());
    configured && yama == "0"
}

/// The memory the same-host path works with: this process's, its tickets to
/// offer READs' responders (`place.rs`), and, while a lane datagram is
/// handled (`slot`: its lane), copies from and placements into the process
/// that pushed it.
pub(in crate::engine) struct LaneMemory<'a> {
    pub(in crate::engine) shm: &'a ShmPath,
    pub(in crate::engine) slot: Option<u8>,
}

impl LaneMemory<'_> {
    /// The process that pushed the datagram being handled, if it is the
    /// incarnation `from` the packet names: a descriptor a dead member left
    /// in its lane is not acted on with the slot's next holder (as if the
    /// dead member's packet were lost).
    fn sender(&self, from: u64) -> Option<Producer> {
        let slot = self.slot?;
        let (generation, pid) = self.shm.producer(slot).filter(|&(g, _)| g == from)?;
        Some(Producer {
            slot,
            generation,
            pid,
        })
    }
}

impl Memory for LaneMemory<'_> {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        HostMemory.read(addr, dst);
    }

    fn write(&mut self, addr: u64, src: &[u8]) {
        HostMemory.write(addr, src);
    }

    fn atomic(&mut self, addr: u64, op: AtomicOp) -> u64 {
        HostMemory.atomic(addr, op)
    }

    fn read_on_demand(&mut self, addr: u64, dst: &mut [u8]) -> Result<(), Unmapped> {
        HostMemory.read_on_demand(addr, dst)
    }

    fn write_on_demand(&mut self, addr: u64, src: &[u8]) -> Result<(), Unmapped> {
        HostMemory.write_on_demand(addr, src)
    }

    fn atomic_on_demand(&mut self, addr: u64, op: AtomicOp) -> Result<u64, Unmapped> {
        HostMemory.atomic_on_demand(addr, op)
    }

    fn read_peer_head(
        &mut self,
        from: u64,
        src: &[PeerSeg],
        out: &mut [u8],
    ) -> Result<(), PeerCopyError> {
        // `out` is memory of this process, as the host ranges of a receive.
        let len = u32::try_from(out.len()).map_err(|_| PeerCopyError::Unsupported)?;
        let dst = [PeerSeg::private(out.as_mut_ptr() as u64, len)];
        self.read_peer(from, src, &dst, false)
    }

    fn arm_ticket(&mut self) -> Option<Box<dyn PlacementTicket>> {
        self.shm.place.arm()
    }

    fn place_peer(&mut self, from: u64, offer: &PlaceOffer, src: u64) -> bool {
        self.sender(from)
            .is_some_and(|p| self.shm.place.place(p, offer, src))
    }

    fn read_peer(
        &mut self,
        from: u64,
        src: &[PeerSeg],
        dst: &[PeerSeg],
        dst_on_demand: bool,
    ) -> Result<(), PeerCopyError> {
        if self.slot.is_none() {
            return Err(PeerCopyError::Unsupported);
        }
        let stats = &self.shm.peer_stats;
        // The counters below: under the engine lock, as all of this.
        let Some(from) = self.sender(from) else {
            add_locked(&stats.failed, 1);
            return Err(PeerCopyError::Gone);
        };
        let pid = from.pid;
        let r = self.shm.mr_share.copy(from, src, dst, dst_on_demand);
        match r {
            Ok(mapped) => {
                add_locked(&stats.copies, 1);
                let n: u64 = dst.iter().map(|l| u64::from(l.len)).sum();
                add_locked(&stats.bytes, n);
                add_locked(&stats.mapped_bytes, mapped);
                Ok(())
            }
            Err(e) => {
                add_locked(&stats.failed, 1);
                if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                    eprintln!("softrdma: peer copy from pid {pid} failed: {e:?}");
                }
                Err(match e {
                    CopyError::Gone => PeerCopyError::Gone,
                    CopyError::Denied => PeerCopyError::Denied,
                    CopyError::Fault | CopyError::Invalid | CopyError::Other(_) => {
                        PeerCopyError::Fault
                    }
                })
            }
        }
    }
}

/// Smallest whole-page part of a region shared at registration: a peer
/// copy is at least `PEER_COPY_MIN` long, so smaller regions rarely hold
/// one, and each shared region costs a descriptor and a maps read.
const SHARE_MIN: u64 = PEER_COPY_MIN as u64;
/// Largest region shared at registration. Sharing copies its pages once at
/// registration and once at deregistration (memcpy moved 40–56 GB/s here,
/// `peer_copy` example of `softrdma-shm`, BENCHMARKS.md "Issue 17, step
/// 2"), so 1 GiB costs about 25 ms each way; larger regions keep private
/// memory and `process_vm_readv`.
const SHARE_MAX: u64 = 1 << 30;
/// Peers' memfds mapped at most at once per cache (each a mapping and,
/// while mapped, the memfd's inode); past it all are let go and mapped again
/// on use. Not a tuning constant: a bound on address space.
const MAX_PEER_MAPS: usize = 256;

/// Regions shared at registration (issue 17, step 3; `softrdma_shm::share`):
/// this process's, by key, and the peers' it maps to copy from.
///
/// - At `reg_mr` (peer copy on, `SOFTRDMA_MR_SHARE` not `0`) a region's
///   whole pages of private anonymous memory move into a memfd at the same
///   addresses; the transport's region records it and peer-copy packets
///   name it (descriptor, inode, addresses). At `dereg_mr` (or `rereg_mr`
///   with new memory) the pages go back to private memory first.
/// - A copier maps a named memfd through `/proc/<pid>/fd/<fd>` of the
///   lane's producer (pid from the registry, never from the packet), checks
///   name, inode and size, caches the mapping per (slot, incarnation,
///   inode, descriptor) and copies with `memcpy`; bytes outside shared pages
///   (head and tail pages, unshared regions) still come by
///   `process_vm_readv`. A named memfd that cannot be opened (the region
///   was deregistered) fails the copy: a late copy never reads the
///   owner's private memory in its place.
#[derive(Debug)]
pub(crate) struct MrShares {
    enabled: bool,
    by_key: Mutex<HashMap<u32, u64>>,
    maps: Mutex<HashMap<MapKey, PeerMap>>,
    pub(crate) shared: AtomicU64,
    pub(crate) refused: AtomicU64,
}

impl MrShares {
    /// Whether regions are shared at registration.
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    pub(super) fn new(peer_copy: bool) -> MrShares {
        let off = std::env::var("SOFTRDMA_MR_SHARE").is_ok_and(|v| v == "0");
        MrShares {
            enabled: peer_copy && !off,
            by_key: Mutex::new(HashMap::default()),
            maps: Mutex::new(HashMap::default()),
            shared: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Shares the whole pages of `[host, host + len)` if it qualifies (see
    /// the type); a note under `SOFTRDMA_DEBUG` when a large enough region
    /// cannot be shared.
    pub(crate) fn share(&self, host: u64, len: u64) -> Option<SharedRegion> {
        if !self.enabled {
            return None;
        }
        match softrdma_shm::share(host, len, SHARE_MIN, SHARE_MAX) {
            Ok(s) => {
                self.shared.fetch_add(1, Ordering::Relaxed);
                Some(s)
            }
            Err(Refused::TooSmall) => None,
            Err(e) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                    eprintln!(
                        "softrdma: memory region at {host:#x} (+{len}) not shared: {e}; peers copy it with process_vm_readv"
                    );
                }
                None
            }
        }
    }

    /// The transport's record of a shared region.
    pub(crate) fn file(s: &SharedRegion) -> PeerFile {
        PeerFile {
            fd: s.fd as u32,
            ino: s.ino,
            addr: s.addr,
            len: s.len,
        }
    }

    /// Records that region `key` holds shared region `s`.
    pub(crate) fn registered(&self, key: u32, s: &SharedRegion) {
        let mut m = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(key, s.id);
    }

    /// Gives region `key`'s pages back to private memory, if shared (after
    /// the transport forgot the region, so nothing of ours copies into it).
    pub(crate) fn deregistered(&self, key: u32) {
        let id = {
            let mut m = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
            m.remove(&key)
        };
        if let Some(id) = id {
            softrdma_shm::unshare(id);
        }
    }

    /// Lets go of the mappings of regions of members no longer alive in
    /// the incarnation they were mapped from (`live(slot)`: the slot's live
    /// incarnation), so their memory goes with them.
    pub(super) fn forget_dead(&self, live: impl Fn(u8) -> Option<u64>) {
        let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        maps.retain(|&(slot, g, _, _), _| live(slot) == Some(g));
    }

    /// Copies the ranges `src` of the producer `from` of a lane into our
    /// ranges `dst`: through mappings of its shared regions where the
    /// ranges name one, the rest with one `process_vm_readv`. Returns the
    /// bytes copied by mapping.
    ///
    /// The last byte of `dst` is stored last, by itself ([`store_last`]),
    /// as every placement does: it first comes to a byte here with the
    /// others (the pieces land in no set order: mapped pieces first, then
    /// one `process_vm_readv`, whose kernel copy may be `rep movsb`).
    /// Not with `dst_on_demand`: `dst` may be unmapped (on-demand paging),
    /// so all of it is written by `process_vm_readv`, which reports that
    /// (`Fault`), never by a store here.
    fn copy(
        &self,
        from: Producer,
        src: &[PeerSeg],
        dst: &[PeerSeg],
        dst_on_demand: bool,
    ) -> Result<u64, CopyError> {
        let Producer {
            slot,
            generation,
            pid,
        } = from;
        let total = |v: &[PeerSeg]| v.iter().map(|s| u64::from(s.len)).sum::<u64>();
        let len = total(dst);
        if total(src) != len {
            return Err(CopyError::Invalid);
        }
        let hold = !dst_on_demand && len > 0;
        let mut byte = 0u8;
        let here = (&raw mut byte) as u64;
        // Where the held byte goes, once every other one is in place.
        let mut last_dst = None;
        let mut done = 0u64;
        let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        let (mut remote, mut local) = (Vec::new(), Vec::new());
        let mut mapped = 0u64;
        let mut out = Cursor {
            segs: dst,
            i: 0,
            off: 0,
        };
        for s in src {
            let end = s
                .addr
                .checked_add(u64::from(s.len))
                .ok_or(CopyError::Invalid)?;
            // [s.addr, end) split at the shared pages: before, inside, after.
            let (fa, fe) = match s.file.filter(|_| !dst_on_demand) {
                Some(f) => (
                    f.addr.clamp(s.addr, end),
                    f.addr.saturating_add(f.len).clamp(s.addr, end),
                ),
                None => (end, end),
            };
            let map_key = s.file.map(|f| (slot, generation, f.ino, f.fd));
            if fe > fa
                && let (Some(f), Some(k)) = (s.file, map_key)
            {
                cached(&mut maps, k, || PeerMap::open(pid, f.fd, f.ino, f.len))?;
            }
            for (a, e, inside) in [(s.addr, fa, false), (fa, fe, true), (fe, end, false)] {
                let mut at = a;
                while at < e {
                    let (d, n) = out.take(e - at).ok_or(CopyError::Invalid)?;
                    done += n;
                    // The piece, and the held byte if it ends `dst`.
                    let body = if hold && done == len {
                        last_dst = Some(d + n - 1);
                        n - 1
                    } else {
                        n
                    };
                    for (from_at, to, k) in [(at, d, body), (at + body, here, n - body)] {
                        if k == 0 {
                            continue;
                        }
                        if inside {
                            let (Some(f), Some(m)) = (s.file, map_key.and_then(|k| maps.get(&k)))
                            else {
                                return Err(CopyError::Invalid);
                            };
                            // SAFETY: `to` is a piece of `dst`, which the
                            // transport checked against our MR table (key,
                            // PD, rights, bounds) under the endpoint lock
                            // this runs under and deregistration takes (the
                            // engine holds no Rust reference into registered
                            // memory), or `byte`.
                            if !unsafe { m.copy_to(from_at - f.addr, to, k) } {
                                return Err(CopyError::Fault);
                            }
                            mapped += k;
                        } else {
                            remote.push(Range {
                                addr: from_at,
                                len: k,
                            });
                            local.push(Range { addr: to, len: k });
                        }
                    }
                    at += n;
                }
            }
        }
        drop(maps);
        if !remote.is_empty() {
            // SAFETY: as for the mapped pieces: `local` are pieces of `dst`
            // or `byte`.
            unsafe { softrdma_shm::read_from(pid, &remote, &local) }?;
        }
        if let Some(at) = last_dst {
            // SAFETY: `at` is the last byte of `dst`, checked as above.
            unsafe { store_last(at, byte) };
        }
        Ok(mapped)
    }
}

impl Drop for MrShares {
    /// The engine stops: regions still registered go back to private memory.
    fn drop(&mut self) {
        let m = std::mem::take(self.by_key.get_mut().unwrap_or_else(|p| p.into_inner()));
        for id in m.into_values() {
            softrdma_shm::unshare(id);
        }
    }
}

/// The process a lane's peer-copy packet came from: the lane's slot, the
/// producer's incarnation and its pid (from the registry).
#[derive(Debug, Clone, Copy)]
pub(super) struct Producer {
    pub(super) slot: u8,
    pub(super) generation: u64,
    pub(super) pid: u32,
}

/// A peer's memfd mapping, by (slot, incarnation, inode, descriptor).
pub(super) type MapKey = (u8, u64, u64, u32);

/// The mapping under `key`, opened with `open` if not cached (dropping the
/// slot's mappings from older incarnations, and all past
/// [`MAX_PEER_MAPS`]).
pub(super) fn cached<T>(
    maps: &mut HashMap<MapKey, T>,
    key: MapKey,
    open: impl FnOnce() -> Result<T, CopyError>,
) -> Result<&T, CopyError> {
    if !maps.contains_key(&key) {
        let m = open()?;
        maps.retain(|&(sl, g, _, _), _| sl != key.0 || g == key.1);
        if maps.len() >= MAX_PEER_MAPS {
            maps.clear();
        }
        maps.insert(key, m);
    }
    maps.get(&key).ok_or(CopyError::Invalid)
}

/// Walks a list of ranges in pieces.
struct Cursor<'a> {
    segs: &'a [PeerSeg],
    i: usize,
    off: u64,
}

impl Cursor<'_> {
    /// The next piece of at most `max` bytes: (address, bytes).
    fn take(&mut self, max: u64) -> Option<(u64, u64)> {
        loop {
            let s = self.segs.get(self.i)?;
            let left = u64::from(s.len) - self.off;
            if left == 0 {
                self.i += 1;
                self.off = 0;
                continue;
            }
            let n = left.min(max);
            let a = s.addr + self.off;
            self.off += n;
            return Some((a, n));
        }
    }
}

impl ShmPath {
    /// The incarnation and pid of the process that pushes into lane `slot`:
    /// the registry's holder of the slot, if its incarnation is the lane's
    /// (cached per incarnation; a file read when it changes). Under the
    /// engine lock (as every use of the cache), so plain loads and stores.
    fn producer(&self, slot: u8) -> Option<(u64, u32)> {
        let owner = self.inbox.lane_owner(slot);
        if owner == 0 {
            return None;
        }
        let (generation, pid) = &self.producers[usize::from(slot)];
        if generation.load(Ordering::Relaxed) != owner {
            let info = self.registry.inbox(slot)?;
            if info.generation != owner {
                return None;
            }
            pid.store(info.pid, Ordering::Relaxed);
            generation.store(owner, Ordering::Relaxed);
        }
        Some((owner, pid.load(Ordering::Relaxed)))
    }
}

impl ShmPath {
    /// Whether QPs may use peer copy toward QP `dest_qpn` at an address
    /// that is (`local`) or is not this host's: its datagrams take a lane
    /// (a member's QPN at a local address), and this process can copy from
    /// the member's memory (`can_copy_from`, probed once per incarnation of
    /// the slot). Registry file reads; no engine lock.
    pub(in crate::engine) fn peer_copy_to(&self, local: bool, dest_qpn: u32) -> bool {
        let slot = member_slot(dest_qpn);
        let member = dest_qpn != GSI_QPN && dest_qpn != MULTICAST_QPN && slot != 0;
        if !(self.peer_copy && local && member) {
            return false;
        }
        let Some(info) = self.registry.inbox(slot) else {
            return false;
        };
        let mut cache = self.copyable.lock().unwrap_or_else(|p| p.into_inner());
        let entry = &mut cache[usize::from(slot)];
        if entry.0 != info.generation {
            *entry = (
                info.generation,
                softrdma_shm::can_copy_from(info.pid, info.fd),
            );
        }
        entry.1
    }
}

impl crate::cm::PeerCopyPolicy for ShmPath {
    fn peer_copy(&self, local: bool, dest_qpn: u32) -> bool {
        let ok = self.peer_copy_to(local, dest_qpn);
        debug_note(dest_qpn, ok);
        ok
    }
}

fn debug_note(dest_qpn: u32, ok: bool) {
    if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
        let what = if ok {
            "peer copy for large SENDs, WRITEs and READs"
        } else {
            "no peer copy"
        };
        eprintln!("softrdma: QP to QPN {dest_qpn:#x}: {what}");
    }
}

impl Shared {
    /// Whether an RC QP whose destination is QP `dest_qpn` at `dest_ip` may
    /// use peer copy (`ibv_modify_qp`; see [`ShmPath::peer_copy_to`]).
    pub(in crate::engine) fn peer_copy_to(&self, dest_ip: IpAddr, dest_qpn: u32) -> bool {
        let Some(shm) = &self.shm else {
            return false;
        };
        let local = dest_ip.to_canonical().is_loopback() || self.sockets().has(dest_ip);
        crate::cm::PeerCopyPolicy::peer_copy(shm, local, dest_qpn)
    }

    /// What the CM asks when it connects a QP (none without the path).
    pub(in crate::engine) fn peer_copy_policy(&self) -> Option<&dyn crate::cm::PeerCopyPolicy> {
        self.shm
            .as_ref()
            .map(|s| s as &dyn crate::cm::PeerCopyPolicy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(i: usize) -> u8 {
        (i % 251) as u8 + 1
    }

    /// A copy from this process's own memory, as from a peer: whole pages
    /// through the mapping of their memfd, the rest by `process_vm_readv`,
    /// into pieces of `dst` whose last is one byte (the held byte).
    #[test]
    fn a_copy_lands_whole_through_the_mapping_and_process_vm_readv() {
        // SAFETY: no arguments to misuse.
        let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = 5 * ps;
        // SAFETY: a fresh private anonymous mapping.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // SAFETY: our mapping, `len` bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, len) };
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = pattern(i);
        }
        let base = base as u64;
        let shared = softrdma_shm::share(base, 4 * ps as u64, 0, u64::MAX).unwrap();
        let file = Some(MrShares::file(&shared));
        let shares = MrShares::new(true);
        let from = Producer {
            slot: 1,
            generation: 7,
            pid: std::process::id(),
        };
        let check = |src: &[PeerSeg], first: usize, n: usize, on_demand: bool| {
            let mut out = vec![0u8; n + 9];
            let o = out.as_mut_ptr() as u64;
            let cut = (n / 3) as u32;
            // Three pieces with gaps between them; the last one byte.
            let dst = [
                PeerSeg::private(o, cut),
                PeerSeg::private(o + u64::from(cut) + 4, n as u32 - cut - 1),
                PeerSeg::private(o + n as u64 + 7, 1),
            ];
            let mapped = shares.copy(from, src, &dst, on_demand).unwrap();
            let want: Vec<u8> = (first..first + n).map(pattern).collect();
            let c = cut as usize;
            assert_eq!(out[..c], want[..c]);
            assert_eq!(out[c..c + 4], [0; 4], "a gap stays untouched");
            assert_eq!(out[c + 4..n + 3], want[c..n - 1]);
            assert_eq!(out[n + 3..n + 7], [0; 4]);
            assert_eq!(out[n + 7], want[n - 1], "the held byte");
            assert_eq!(out[n + 8], 0);
            mapped
        };
        // Shared pages then a private tail: the held byte comes by
        // process_vm_readv.
        let n = 4 * ps - 100 + 300;
        let src = [
            PeerSeg {
                file,
                ..PeerSeg::private(base + 100, (4 * ps - 100) as u32)
            },
            PeerSeg::private(base + 4 * ps as u64, 300),
        ];
        assert_eq!(check(&src, 100, n, false), (4 * ps - 100) as u64);
        // On-demand destination: everything by process_vm_readv.
        assert_eq!(check(&src, 100, n, true), 0);
        // Shared pages only: the held byte comes through the mapping.
        let src = [PeerSeg {
            file,
            ..PeerSeg::private(base + 8, 2 * ps as u32)
        }];
        assert_eq!(check(&src, 8, 2 * ps, false), 2 * ps as u64);
        // Lengths that differ: refused, nothing copied.
        let one = [PeerSeg::private(base, 10)];
        let two = [PeerSeg::private(base + 100, 11)];
        assert!(matches!(
            shares.copy(from, &one, &two, false),
            Err(CopyError::Invalid)
        ));
        assert!(softrdma_shm::unshare(shared.id));
        // SAFETY: our mapping.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }
}
