//! Memory registration and protection: every local and remote access is
//! checked here (key, PD, rights, bounds with overflow checks) before the
//! [`Memory`] implementation touches a byte.

use crate::types::Access;
use rustc_hash::FxHashMap as HashMap;
pub use softrdma_wire::{PeerFile, PeerSeg, PlaceOffer, TicketRef};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// [`Memory::read`] from a region registered for on-demand paging
    /// (`Access::ON_DEMAND`): its memory may have been unmapped since
    /// registration, which must give [`Unmapped`], never a fault of the
    /// process. Memory that is always mapped reads as `read`.
    fn read_on_demand(&mut self, addr: u64, dst: &mut [u8]) -> Result<(), Unmapped> {
        self.read(addr, dst);
        Ok(())
    }
    /// [`Memory::write`] into an on-demand-paging region (see
    /// [`Memory::read_on_demand`]): on [`Unmapped`], part of `src` may have
    /// landed.
    fn write_on_demand(&mut self, addr: u64, src: &[u8]) -> Result<(), Unmapped> {
        self.write(addr, src);
        Ok(())
    }
    /// [`Memory::atomic`] in an on-demand-paging region (see
    /// [`Memory::read_on_demand`]).
    fn atomic_on_demand(&mut self, addr: u64, op: AtomicOp) -> Result<u64, Unmapped> {
        Ok(self.atomic(addr, op))
    }
    /// The first `out.len()` bytes of the sender's ranges `src` (totalling
    /// as many), into `out`, as [`Memory::read_peer`] reaches them: tag
    /// matching reads a SEND's header before it knows where the rest goes.
    /// Memory with no peer refuses.
    fn read_peer_head(
        &mut self,
        from: u64,
        src: &[PeerSeg],
        out: &mut [u8],
    ) -> Result<(), PeerCopyError> {
        let _ = (from, src, out);
        Err(PeerCopyError::Unsupported)
    }
    /// The same-host path's one copy: copies the ranges `src` of the process
    /// that sent the packet being handled (in order; `from`: the
    /// incarnation the packet names, which must be the sender's) into the host ranges
    /// `dst` of this one, which the transport checked like a `write`'s.
    /// Both total the same. `dst_on_demand`: some of `dst` lies in an
    /// on-demand-paging region, so it may be unmapped and must be written
    /// only in ways that report that (`PeerCopyError::Fault`) rather than
    /// fault. Only packets from a shared-memory lane carry such ranges;
    /// memory with no peer (the wire's) refuses.
    fn read_peer(
        &mut self,
        from: u64,
        src: &[PeerSeg],
        dst: &[PeerSeg],
        dst_on_demand: bool,
    ) -> Result<(), PeerCopyError> {
        let _ = (from, src, dst, dst_on_demand);
        Err(PeerCopyError::Unsupported)
    }
    /// A ticket for a responder's placement of a same-host READ (`qp/peer.rs`,
    /// `softrdma_shm::TicketBook`), if this memory offers placement and a
    /// ticket is free.
    fn arm_ticket(&mut self) -> Option<Box<dyn PlacementTicket>> {
        None
    }
    /// The responder's side of a placement: takes the ticket of `offer` (made
    /// by the process that sent the packet being handled, incarnation
    /// `from`) and copies `offer.dst.len` bytes at host address `src` of this
    /// process, which the transport checked under an rkey, into the
    /// requester's range. False if the ticket could not be taken or the
    /// range not reached: then nothing was written and the READ is answered
    /// as without an offer. Memory with no peer refuses.
    fn place_peer(&mut self, from: u64, offer: &PlaceOffer, src: u64) -> bool {
        let _ = (from, offer, src);
        false
    }
}

/// A placement ticket a READ requester armed ([`Memory::arm_ticket`]).
/// Dropping it revokes it: once the drop returns, no responder writes under
/// it any more (it waits for one that is writing).
pub trait PlacementTicket: std::fmt::Debug + Send {
    /// The ticket as an offer names it.
    fn offer(&self) -> TicketRef;
    /// Ends the ticket as [`Drop`] does; true if a responder placed the
    /// data (visible to this thread now).
    fn settle(self: Box<Self>) -> bool;
}

/// An on-demand-paging region's memory is not mapped (or not with the
/// rights the access needs) where an access reached it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unmapped;

/// Where an admitted access lands: the host address, and whether the region
/// is on-demand paging, so its memory must be reached through the
/// `*_on_demand` methods of [`Memory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Host {
    /// Host address of the access's first byte.
    pub(crate) addr: u64,
    /// The region was registered with `Access::ON_DEMAND`.
    pub(crate) on_demand: bool,
}

impl Host {
    /// Copies from here into `dst` (see [`Memory::read_on_demand`]).
    pub(crate) fn read(self, mem: &mut dyn Memory, dst: &mut [u8]) -> Result<(), AccessError> {
        if self.on_demand {
            return mem
                .read_on_demand(self.addr, dst)
                .map_err(|_| AccessError::Unmapped);
        }
        mem.read(self.addr, dst);
        Ok(())
    }

    /// Copies `src` to here.
    pub(crate) fn write(self, mem: &mut dyn Memory, src: &[u8]) -> Result<(), AccessError> {
        if self.on_demand {
            return mem
                .write_on_demand(self.addr, src)
                .map_err(|_| AccessError::Unmapped);
        }
        mem.write(self.addr, src);
        Ok(())
    }

    /// Performs `op` on the 8 bytes here.
    pub(crate) fn atomic(self, mem: &mut dyn Memory, op: AtomicOp) -> Result<u64, AccessError> {
        if self.on_demand {
            return mem
                .atomic_on_demand(self.addr, op)
                .map_err(|_| AccessError::Unmapped);
        }
        Ok(mem.atomic(self.addr, op))
    }
}

/// Why [`Memory::read_peer`] failed. `dst` may be partly written; nothing
/// outside it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerCopyError {
    /// This memory has no peer to copy from.
    Unsupported,
    /// The peer process is gone.
    Gone,
    /// The kernel refused access to the peer's memory.
    Denied,
    /// A peer range is not mapped (or fewer bytes than asked were copied).
    Fault,
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
    /// The memfd its whole pages were moved into, if the engine shared
    /// them at registration (same-host path): peer-copy packets name it.
    pub share: Option<PeerFile>,
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
    /// The region is on-demand paging and its memory is not mapped there.
    Unmapped,
}

/// Bits of a key that name the slot of the primary table (the low 15).
const SLOT_BITS: u32 = 15;
/// Slots of the primary table; more regions than this live in `overflow`.
const PRIMARY_SLOTS: usize = 1 << SLOT_BITS;
/// A freed slot is reused only once this many other slots were freed after it
/// (or the primary table is full), so a key is not handed out again soon
/// after its region was deregistered.
const QUARANTINE: usize = 1024;

/// A slot of the primary table.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    mr: Option<Mr>,
    /// Tag of the last key this slot held: the next one differs.
    last_tag: u16,
}

/// The registered regions, by key.
///
/// A key is `tag << 15 | slot`: the low 15 bits index the primary table (an
/// O(1) lookup), bits 15..31 are a non-zero 16-bit tag from a keyed PRF
/// (SipHash-2-4 keyed from the endpoint's seed, so seeing some keys does not
/// predict others), bit 31 is clear (memory-window keys have it set, see
/// `mw.rs`). A lookup compares the whole key, so a guess must hit both the
/// slot and the tag. Freed slots wait in a FIFO quarantine before reuse, and
/// a reused slot never gets its previous tag. Past 32768 live regions, keys
/// are random 31-bit values in a hash map.
#[derive(Debug)]
pub(crate) struct MrTable {
    slots: Vec<Slot>,
    /// Freed slots, oldest first.
    free: VecDeque<u16>,
    overflow: HashMap<u32, Mr>,
    prf: KeyPrf,
    /// Bumped by every change to a region or its removal: a copy of a
    /// region's check made outside the table (the express post's cache,
    /// `qp/express.rs`) is good while the generation it was made at holds.
    generation: Arc<AtomicU64>,
}

impl Default for MrTable {
    fn default() -> Self {
        MrTable::new(0)
    }
}

impl MrTable {
    /// An empty table whose key tags derive from `seed`.
    pub(crate) fn new(seed: u64) -> MrTable {
        MrTable {
            slots: Vec::new(),
            free: VecDeque::new(),
            overflow: HashMap::default(),
            prf: KeyPrf::new(seed),
            generation: Arc::default(),
        }
    }

    /// The table's generation (see the field), shared.
    pub(crate) fn generation(&self) -> &Arc<AtomicU64> {
        &self.generation
    }

    /// A region changes or goes: every copy of a check is stale.
    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Registers a region and returns it with its (equal) L_Key and R_Key.
    pub(crate) fn insert(
        &mut self,
        pd: PdHandle,
        iova: u64,
        length: u64,
        host: u64,
        access: Access,
    ) -> Mr {
        let mut mr = Mr {
            pd,
            iova,
            length,
            host,
            access,
            lkey: 0,
            rkey: 0,
            share: None,
        };
        let slot = if self.free.len() > QUARANTINE
            || (self.slots.len() >= PRIMARY_SLOTS && !self.free.is_empty())
        {
            self.free.pop_front().map(usize::from)
        } else if self.slots.len() < PRIMARY_SLOTS {
            self.slots.push(Slot::default());
            Some(self.slots.len() - 1)
        } else {
            None
        };
        let Some(slot) = slot else {
            // Primary table full: a random key that no live region has.
            let key = loop {
                let k = self.prf.next() as u32 & 0x7FFF_FFFF;
                if k >> SLOT_BITS != 0 && self.get(k).is_none() {
                    break k;
                }
            };
            mr.lkey = key;
            mr.rkey = key;
            self.overflow.insert(key, mr);
            return mr;
        };
        let s = &mut self.slots[slot];
        let tag = loop {
            let t = (self.prf.next() >> 48) as u16;
            if t != 0 && t != s.last_tag {
                break t;
            }
        };
        s.last_tag = tag;
        let key = (u32::from(tag) << SLOT_BITS) | slot as u32;
        mr.lkey = key;
        mr.rkey = key;
        s.mr = Some(mr);
        mr
    }

    fn slot_of(key: u32) -> usize {
        (key & (PRIMARY_SLOTS as u32 - 1)) as usize
    }

    pub(crate) fn get(&self, key: u32) -> Option<&Mr> {
        if let Some(mr) = self
            .slots
            .get(Self::slot_of(key))
            .and_then(|s| s.mr.as_ref())
            && mr.lkey == key
        {
            return Some(mr);
        }
        if self.overflow.is_empty() {
            return None;
        }
        self.overflow.get(&key)
    }

    /// The shared memfd of the region whose key is `key`, if any.
    pub(crate) fn share_of(&self, key: u32) -> Option<PeerFile> {
        self.get(key).and_then(|m| m.share)
    }

    /// The region whose key is `key`, to change in place (`mr_rereg.rs`).
    pub(crate) fn get_mut(&mut self, key: u32) -> Option<&mut Mr> {
        self.bump();
        let slot = Self::slot_of(key);
        if self
            .slots
            .get(slot)
            .and_then(|s| s.mr.as_ref())
            .is_some_and(|m| m.lkey == key)
        {
            return self.slots[slot].mr.as_mut();
        }
        self.overflow.get_mut(&key)
    }

    pub(crate) fn remove(&mut self, key: u32) -> Option<Mr> {
        self.bump();
        let slot = Self::slot_of(key);
        if let Some(s) = self.slots.get_mut(slot)
            && s.mr.is_some_and(|m| m.lkey == key)
        {
            self.free.push_back(slot as u16);
            return s.mr.take();
        }
        self.overflow.remove(&key)
    }

    /// Checks an access through `key` to `[va, va + len)` and returns the host address.
    ///
    /// A zero-length access needs no valid key (C9-88) and returns address 0.
    pub(crate) fn check(
        &self,
        key: u32,
        pd: PdHandle,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Host, AccessError> {
        if len == 0 {
            return Ok(Host::default());
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
        Ok(Host {
            addr: mr.host.wrapping_add(va - mr.iova),
            on_demand: mr.access.contains(Access::ON_DEMAND),
        })
    }
}

/// The source of key tags: SipHash-2-4 over a counter, keyed by 128 bits
/// expanded from the endpoint's seed. Unlike the xoshiro generator used for
/// QPNs, its outputs say nothing about each other without the key.
#[derive(Debug)]
struct KeyPrf {
    k0: u64,
    k1: u64,
    counter: u64,
}

impl KeyPrf {
    fn new(seed: u64) -> KeyPrf {
        let mut r = crate::rng::Rng::new(seed ^ 0x6B65_7973_2D6D_7221);
        KeyPrf {
            k0: r.next_u64(),
            k1: r.next_u64(),
            counter: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.counter += 1;
        siphash24(self.k0, self.k1, self.counter)
    }
}

/// SipHash-2-4 (Aumasson & Bernstein) of the 8-byte little-endian message `m`.
fn siphash24(k0: u64, k1: u64, m: u64) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    // One message block, then the final block holding only the length (8).
    for block in [m, 8 << 56] {
        v[3] ^= block;
        round(&mut v);
        round(&mut v);
        v[0] ^= block;
    }
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn reg(t: &mut MrTable) -> u32 {
        t.insert(PdHandle(1), 0x1000, 0x100, 0x9000, Access::LOCAL_WRITE)
            .lkey
    }

    #[test]
    fn checks() {
        let mut t = MrTable::new(7);
        let pd = PdHandle(1);
        let mr = t.insert(pd, 0x1000, 0x100, 0x9000, Access::REMOTE_WRITE);
        assert_eq!(mr.lkey, mr.rkey);
        let k = mr.rkey;
        assert_eq!(
            t.check(k, pd, 0x1000, 0x100, Access::REMOTE_WRITE)
                .map(|h| h.addr),
            Ok(0x9000)
        );
        assert_eq!(
            t.check(k, pd, 0x10FF, 1, Access::REMOTE_WRITE)
                .map(|h| h.addr),
            Ok(0x90FF)
        );
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
        // Any other key fails: another slot, or the right slot with another tag.
        for bit in 0..32 {
            assert_eq!(
                t.check(k ^ (1 << bit), pd, 0x1000, 1, Access::REMOTE_WRITE),
                Err(AccessError::BadKey),
                "key with bit {bit} flipped"
            );
        }
        assert_eq!(
            t.check(0xdead, pd, 0, 0, Access::REMOTE_WRITE),
            Ok(Host::default())
        );
        assert!(t.remove(k).is_some());
        assert!(t.remove(k).is_none(), "removed twice");
        assert_eq!(
            t.check(k, pd, 0x1000, 1, Access::REMOTE_WRITE),
            Err(AccessError::BadKey)
        );
    }

    /// Keys carry 16 random bits above a 15-bit slot, bit 31 clear, never 0.
    #[test]
    fn key_layout_and_tag_randomness() {
        let mut t = MrTable::new(1);
        let keys: Vec<u32> = (0..4096).map(|_| reg(&mut t)).collect();
        let mut tags = HashSet::new();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(k & 0x7FFF, i as u32, "slot in the low bits");
            assert_eq!(k >> 31, 0, "bit 31 belongs to memory windows");
            assert_ne!(k >> 15, 0, "zero tag");
            tags.insert(k >> 15);
        }
        // 4096 draws from 65535 tags: about 125 collide, so ~3970 distinct.
        assert!(tags.len() > 3900, "{} distinct tags", tags.len());
        // Every tag bit takes both values about equally often.
        for bit in 15..31 {
            let ones = keys.iter().filter(|k| *k & (1 << bit) != 0).count();
            assert!(
                (1800..2300).contains(&ones),
                "bit {bit}: {ones} ones of 4096"
            );
        }
        // Another seed gives other keys; the same seed the same ones.
        let mut u = MrTable::new(2);
        let other: Vec<u32> = (0..64).map(|_| reg(&mut u)).collect();
        assert_ne!(other, keys[..64]);
        let mut v = MrTable::new(1);
        let same: Vec<u32> = (0..64).map(|_| reg(&mut v)).collect();
        assert_eq!(same, keys[..64]);
    }

    /// A deregistered key is not handed out again soon: its slot waits behind
    /// QUARANTINE others, and a reused slot gets a new tag.
    #[test]
    fn keys_are_not_reused_soon_after_dereg() {
        let mut t = MrTable::new(3);
        let live = reg(&mut t);
        let mut recent: VecDeque<u32> = VecDeque::new();
        let mut recent_set = HashSet::new();
        // One region churned 100000 times (the worst case for reuse).
        for _ in 0..100_000 {
            let k = reg(&mut t);
            assert!(
                !recent_set.contains(&k),
                "key {k:#x} reused soon after dereg"
            );
            assert_ne!(k, live);
            assert!(t.remove(k).is_some());
            recent.push_back(k);
            recent_set.insert(k);
            if recent.len() > 2 * QUARANTINE {
                recent_set.remove(&recent.pop_front().unwrap());
            }
        }
        // The quarantine bounds the table: live regions + QUARANTINE + 1 slots.
        assert!(t.slots.len() <= QUARANTINE + 3, "{} slots", t.slots.len());
        assert!(t.get(live).is_some());
    }

    /// Past the primary table, regions live in the overflow map, with the same
    /// guarantees (unique, bit 31 clear) and O(1) lookups.
    #[test]
    fn more_regions_than_primary_slots() {
        let mut t = MrTable::new(4);
        let n = PRIMARY_SLOTS + 1000;
        let keys: Vec<u32> = (0..n).map(|_| reg(&mut t)).collect();
        assert_eq!(keys.iter().collect::<HashSet<_>>().len(), n);
        assert_eq!(t.overflow.len(), 1000);
        for k in &keys {
            assert_eq!(k >> 31, 0);
            assert_eq!(t.get(*k).map(|m| m.lkey), Some(*k));
        }
        // Freed primary slots are reused once the primary table is full.
        assert!(t.remove(keys[5]).is_some());
        let again = reg(&mut t);
        assert_eq!(again & 0x7FFF, 5);
        assert_ne!(again, keys[5]);
        for k in &keys[PRIMARY_SLOTS..] {
            assert!(t.remove(*k).is_some());
            assert!(t.get(*k).is_none());
        }
        assert!(t.overflow.is_empty());
    }

    #[test]
    fn get_mut_finds_the_same_region() {
        let mut t = MrTable::new(5);
        let k = reg(&mut t);
        t.get_mut(k).unwrap().length = 7;
        assert_eq!(t.get(k).unwrap().length, 7);
        assert!(t.get_mut(k ^ 0x8000).is_none());
    }

    /// SipHash-2-4 against the standard library's implementation of it.
    #[test]
    #[allow(deprecated)]
    fn siphash_matches_std() {
        use std::hash::{Hasher, SipHasher};
        for (k0, k1, m) in [
            (
                0x0706_0504_0302_0100,
                0x0F0E_0D0C_0B0A_0908,
                0x0706_0504_0302_0100,
            ),
            (1, 2, 3u64),
            (u64::MAX, 0, 0xDEAD_BEEF),
        ] {
            let mut h = SipHasher::new_with_keys(k0, k1);
            h.write(&m.to_le_bytes());
            assert_eq!(siphash24(k0, k1, m), h.finish());
        }
        // The reference implementation's test vector for the 8-byte message 00..07.
        assert_eq!(
            siphash24(
                0x0706_0504_0302_0100,
                0x0F0E_0D0C_0B0A_0908,
                0x0706_0504_0302_0100
            ),
            0x93f5_f579_9a93_2462
        );
    }
}
