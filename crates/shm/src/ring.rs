//! One lane: a single-producer, single-consumer ring of datagram slots in
//! memory shared by two processes.
//!
//! Layout (offsets from the lane's start, all multiples of 64 so the
//! producer's and the consumer's counters never share a cache line):
//!
//! ```text
//! 0     head: u64   datagrams ever published (written by the producer only;
//!                   its own bookkeeping, the consumer never reads it)
//! 8     owner: u64  the producer's incarnation (its slot's generation), 0: none
//! 64    tail: u64   datagrams ever popped (written by the consumer only)
//! 128   slot 0, slot 1, ... slot SLOTS-1, each SLOT_BYTES (128-byte aligned):
//!         0  seq: u64      number of the datagram in the slot, plus one
//!         8  len: u32      datagram length (<= DATA_CAP)
//!         12 src_port: u16
//!         14 flags: u16    bit 0: source is IPv6, bit 1: destination is IPv6
//!         16 src_ip        4 bytes (IPv4) or 16 (IPv6)
//!            dst_ip        likewise, right after
//!            data          right after: at 24 for two IPv4 addresses
//! ```
//!
//! The producer fills the slot of datagram `n` (at `n % SLOTS`) and then
//! publishes it with a release store of `seq = n + 1` in the slot itself; the
//! consumer, at `tail`, reads the seq of slot `tail % SLOTS` with acquire,
//! takes the slot if it reads `tail + 1`, and frees it with a release store
//! of `tail + 1`. So the consumer's poll and the datagram share a cache
//! line: a datagram of up to 40 bytes between IPv4 addresses (an ACK, an
//! 8-byte SEND or WRITE) reaches the consumer in one line transfer, where
//! a separate `head` counter cost a second one on every message's path
//! (issue 17: 0.27 µs in the VM's slow mode; BENCHMARKS.md, "One cache
//! line per datagram").
//! Nothing the peer writes can make either side touch memory outside the
//! lane: indexes are taken modulo `SLOTS`, lengths are checked against
//! `DATA_CAP`, a pop takes at most `SLOTS` slots, and a seq other than the
//! one expected reads as "empty".

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};

/// Datagram slots per lane. 512 slots of 4 KiB hold half of the largest RC
/// send window the engine uses towards loopback peers (1024 PSNs): with the
/// consumer draining as it goes, `ib_write_bw` never found a lane full.
pub const SLOTS: u64 = 512;
/// Bytes per slot: a header of 24 to 48 bytes and the datagram (a multiple
/// of 128, so each slot starts a pair of cache lines).
pub const SLOT_BYTES: usize = 4352;
/// Largest datagram a slot holds: a 4096-byte MTU's payload and every RoCE
/// header before it, with room to spare. Larger ones take the UDP path.
pub const DATA_CAP: usize = SLOT_BYTES - SLOT_HEADER;
/// The longest slot header (two IPv6 addresses).
const SLOT_HEADER: usize = 48;
/// Where a slot's header (after `seq`) starts.
const META: usize = 8;
/// Where a slot's addresses start.
const ADDRS: usize = 16;
const HEAD: usize = 0;
const OWNER: usize = 8;
const TAIL: usize = 64;
const SLOTS_AT: usize = 128;
/// Bytes of one lane.
pub const LANE_BYTES: usize = SLOTS_AT + SLOTS as usize * SLOT_BYTES;

const SRC_V6: u16 = 1;
const DST_V6: u16 = 2;

/// One datagram in a lane.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// Where it comes from (the sender's device address and port).
    pub src: SocketAddr,
    /// The address it was sent to (one of the receiver's GIDs).
    pub dst_ip: IpAddr,
    /// The UDP payload: a RoCEv2 packet from its BTH on.
    pub data: &'a [u8],
}

/// Why a push did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// Every slot holds a datagram the consumer has not taken yet.
    Full,
    /// The datagram is longer than [`DATA_CAP`].
    TooBig,
}

/// A view of one lane. It does not own the memory: whoever makes it
/// guarantees the lane stays mapped while the view lives, and that only one
/// thread at a time pushes and only one pops.
#[derive(Debug)]
pub struct Ring {
    base: *mut u8,
    /// Datagrams the producer wrote past `head` and has not published yet
    /// ([`Ring::stage`], [`Ring::publish`]); this process's, not shared.
    staged: AtomicU64,
    /// The producer's last reading of `tail` (this process's): the slots
    /// it counts free stay free, so it reads the consumer's counter again
    /// only when this view says the lane is full. Reading it on every
    /// push cost the sender a cache-line transfer per datagram, on the
    /// message's path (the consumer wrote it at its last pop).
    tail_seen: AtomicU64,
}

// SAFETY: the view is a pointer into shared memory whose every concurrent
// access goes through atomics (head, tail) or through slots the protocol
// gives to one side at a time; `Ring::new`'s contract makes the mapping
// outlive the view.
unsafe impl Send for Ring {}
// SAFETY: as above; `&Ring` methods are safe to call from several threads as
// long as pushes (and pops) are serialized, which `Ring::new`'s caller
// promises.
unsafe impl Sync for Ring {}

impl Ring {
    /// A view of the lane at `base`.
    ///
    /// # Safety
    /// `base` is 64-byte aligned and points to [`LANE_BYTES`] bytes that stay
    /// mapped, readable and writable while the `Ring` lives. At most one
    /// thread (in any process) pushes at a time, and at most one pops.
    pub unsafe fn new(base: *mut u8) -> Ring {
        Ring {
            base,
            staged: AtomicU64::new(0),
            tail_seen: AtomicU64::new(0),
        }
    }

    fn counter(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is HEAD, OWNER or TAIL, 8-byte aligned inside the lane
        // (`Ring::new`); the lane outlives `self`; every access to these
        // words, in both processes, is atomic.
        unsafe { &*self.base.add(at).cast::<AtomicU64>() }
    }

    fn slot(&self, seq: u64) -> *mut u8 {
        let i = (seq % SLOTS) as usize;
        // SAFETY: `i < SLOTS`, so the slot lies inside the lane.
        unsafe { self.base.add(SLOTS_AT + i * SLOT_BYTES) }
    }

    /// The producer's incarnation (0: none since the lane was last cleared).
    pub fn owner(&self) -> &AtomicU64 {
        self.counter(OWNER)
    }

    /// Producer: datagrams published and not popped yet (at most
    /// [`SLOTS`]).
    pub fn len(&self) -> u64 {
        let head = self.counter(HEAD).load(Ordering::Acquire);
        let tail = self.counter(TAIL).load(Ordering::Acquire);
        head.wrapping_sub(tail).min(SLOTS)
    }

    /// Consumer: whether nothing waits in the lane (one load of the next
    /// slot's seq, besides the consumer's own `tail`).
    pub fn is_empty(&self) -> bool {
        let tail = self.counter(TAIL).load(Ordering::Relaxed);
        !self.published(tail)
    }

    /// The seq word of the slot datagram `n` uses.
    fn seq(&self, n: u64) -> &AtomicU64 {
        // SAFETY: a slot starts 128-byte aligned inside the lane (`slot`), so
        // its first 8 bytes are an aligned u64 there; every access to it, in
        // both processes, is atomic.
        unsafe { &*self.slot(n).cast::<AtomicU64>() }
    }

    /// Consumer: whether datagram `n` is published (its slot's seq reads
    /// `n + 1`, with acquire: the slot's bytes are then visible).
    fn published(&self, n: u64) -> bool {
        self.seq(n).load(Ordering::Acquire) == n.wrapping_add(1)
    }

    /// Producer: copies a datagram into the next free slot and publishes it.
    pub fn push(&self, src: SocketAddr, dst_ip: IpAddr, data: &[u8]) -> Result<(), PushError> {
        self.stage(src, dst_ip, data)?;
        self.publish();
        Ok(())
    }

    /// Producer: publishes every staged datagram at once: the consumer
    /// sees them together or not at all. Their seqs are stored last one
    /// first, so the first one's (what the consumer reads first) comes after
    /// all the others'.
    pub fn publish(&self) {
        // One producer: loads and stores, not swaps (a locked instruction
        // waits for the slot stores to leave this CPU).
        let n = self.staged.load(Ordering::Relaxed);
        self.staged.store(0, Ordering::Relaxed);
        if n > 0 {
            let head = self.counter(HEAD).load(Ordering::Relaxed);
            for k in (0..n).rev() {
                let d = head.wrapping_add(k);
                self.seq(d).store(d.wrapping_add(1), Ordering::Release);
            }
            self.counter(HEAD)
                .store(head.wrapping_add(n), Ordering::Release);
        }
    }

    /// Producer: copies a datagram into the next free slot without
    /// publishing it yet (see [`Ring::publish`]). A lane full of staged
    /// datagrams stays full until they are published.
    pub fn stage(&self, src: SocketAddr, dst_ip: IpAddr, data: &[u8]) -> Result<(), PushError> {
        if data.len() > DATA_CAP {
            return Err(PushError::TooBig);
        }
        let staged = self.staged.load(Ordering::Relaxed);
        let head = self
            .counter(HEAD)
            .load(Ordering::Relaxed)
            .wrapping_add(staged);
        // A stale view only undercounts the free slots (also across a
        // reset, where the difference wraps to "full"): read afresh then.
        if head.wrapping_sub(self.tail_seen.load(Ordering::Relaxed)) >= SLOTS {
            let tail = self.counter(TAIL).load(Ordering::Acquire);
            self.tail_seen.store(tail, Ordering::Relaxed);
            if head.wrapping_sub(tail) >= SLOTS {
                return Err(PushError::Full);
            }
        }
        let slot = self.slot(head);
        let mut meta = [0u8; SLOT_HEADER - META];
        meta[..4].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        meta[4..6].copy_from_slice(&src.port().to_ne_bytes());
        let flags = u16::from(src.is_ipv6()) * SRC_V6 + u16::from(dst_ip.is_ipv6()) * DST_V6;
        meta[6..8].copy_from_slice(&flags.to_ne_bytes());
        let at = ADDRS - META;
        let at = put_ip(&mut meta, at, src.ip());
        let at = put_ip(&mut meta, at, dst_ip);
        // SAFETY: the slot at `head` is free (head - tail < SLOTS): the
        // consumer does not read it until `publish`'s release store of its
        // seq, and we are the only producer. Both copies stay inside the
        // slot, after its seq word (the header is at most SLOT_HEADER bytes,
        // the data at most DATA_CAP).
        unsafe {
            std::ptr::copy_nonoverlapping(meta.as_ptr(), slot.add(META), at);
            std::ptr::copy_nonoverlapping(data.as_ptr(), slot.add(META + at), data.len());
        }
        self.staged.store(staged + 1, Ordering::Relaxed);
        Ok(())
    }

    /// Consumer: hands up to `max` waiting datagrams to `f`, oldest first,
    /// then frees their slots. Returns how many it handed over. A slot whose
    /// header is corrupt (a length over [`DATA_CAP`]) is skipped.
    pub fn pop(&self, max: usize, mut f: impl FnMut(Entry<'_>)) -> usize {
        self.pop_while(max, |e| {
            f(e);
            true
        })
        .0
    }

    /// [`Ring::pop`], but `f` may leave a datagram where it is (false):
    /// then it stops there, and that datagram is the next one popped.
    /// Returns how many it took, and whether it stopped so.
    pub fn pop_while(&self, max: usize, mut f: impl FnMut(Entry<'_>) -> bool) -> (usize, bool) {
        let tail = self.counter(TAIL).load(Ordering::Relaxed);
        let limit = SLOTS.min(max as u64);
        let mut n = 0;
        let mut stopped = false;
        while n < limit && self.published(tail.wrapping_add(n)) {
            let slot = self.slot(tail.wrapping_add(n));
            let mut meta = [0u8; SLOT_HEADER - META];
            // SAFETY: the slot is published (its seq read with acquire) and
            // is not freed until the tail store below; the read stays inside
            // the slot.
            unsafe { std::ptr::copy_nonoverlapping(slot.add(META), meta.as_mut_ptr(), meta.len()) };
            let len = u32::from_ne_bytes(meta[..4].try_into().unwrap_or_default()) as usize;
            if len > DATA_CAP {
                n += 1;
                continue;
            }
            let port = u16::from_ne_bytes([meta[4], meta[5]]);
            let flags = u16::from_ne_bytes([meta[6], meta[7]]);
            let (src, at) = get_ip(&meta, ADDRS - META, flags & SRC_V6 != 0);
            let (dst_ip, at) = get_ip(&meta, at, flags & DST_V6 != 0);
            // SAFETY: as above: the header is at most SLOT_HEADER bytes and
            // `len <= DATA_CAP`, so the slice stays inside the slot, which
            // nobody writes until we free it.
            let data = unsafe { std::slice::from_raw_parts(slot.add(META + at), len) };
            let took = f(Entry {
                src: SocketAddr::new(src, port),
                dst_ip,
                data,
            });
            if !took {
                stopped = true;
                break;
            }
            n += 1;
        }
        if n > 0 {
            self.counter(TAIL)
                .store(tail.wrapping_add(n), Ordering::Release);
        }
        (n as usize, stopped)
    }
}

/// Writes `ip` into `meta` at `at` (4 bytes for IPv4, 16 for IPv6);
/// returns where the next field starts.
fn put_ip(meta: &mut [u8], at: usize, ip: IpAddr) -> usize {
    match ip {
        IpAddr::V4(a) => {
            meta[at..at + 4].copy_from_slice(&a.octets());
            at + 4
        }
        IpAddr::V6(a) => {
            meta[at..at + 16].copy_from_slice(&a.octets());
            at + 16
        }
    }
}

/// Reads the address `put_ip` wrote at `at`; returns it and where the next
/// field starts.
fn get_ip(meta: &[u8], at: usize, v6: bool) -> (IpAddr, usize) {
    if v6 {
        let mut o = [0u8; 16];
        o.copy_from_slice(&meta[at..at + 16]);
        (Ipv6Addr::from(o).into(), at + 16)
    } else {
        let b = &meta[at..at + 4];
        (Ipv4Addr::new(b[0], b[1], b[2], b[3]).into(), at + 4)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A lane on the heap, 64-byte aligned, zeroed (as a fresh memfd is).
    pub(crate) struct HeapLane {
        mem: Vec<u128>,
    }

    impl HeapLane {
        pub(crate) fn new() -> HeapLane {
            // u128 gives 16-byte alignment; the offset below rounds up to 64.
            HeapLane {
                mem: vec![0u128; LANE_BYTES / 16 + 4],
            }
        }

        pub(crate) fn ring(&mut self) -> Ring {
            let p = self.mem.as_mut_ptr().cast::<u8>();
            let pad = p.align_offset(64);
            // SAFETY: the allocation has LANE_BYTES + 64 bytes, so the
            // aligned lane fits; the test keeps `self` alive while it uses
            // the ring, from one producer and one consumer.
            unsafe { Ring::new(p.add(pad)) }
        }
    }

    fn src() -> SocketAddr {
        "127.0.0.1:4791".parse().unwrap()
    }

    #[test]
    fn keeps_order_and_addresses_across_wrap_around() {
        let mut lane = HeapLane::new();
        let r = lane.ring();
        let v6: IpAddr = "fd00::7".parse().unwrap();
        let mut next_out = 0u32;
        for round in 0..5 * SLOTS as u32 {
            let dst = if round.is_multiple_of(3) {
                v6
            } else {
                src().ip()
            };
            r.push(src(), dst, &round.to_be_bytes()).unwrap();
            if round % 7 == 6 {
                r.pop(usize::MAX, |e| {
                    assert_eq!(e.data, next_out.to_be_bytes());
                    assert_eq!(e.src, src());
                    let want = if next_out.is_multiple_of(3) {
                        v6
                    } else {
                        src().ip()
                    };
                    assert_eq!(e.dst_ip, want);
                    next_out += 1;
                });
            }
        }
        r.pop(usize::MAX, |_| next_out += 1);
        assert_eq!(next_out, 5 * SLOTS as u32);
        assert!(r.is_empty());
    }

    /// A datagram the consumer leaves stops the pop there and is the next
    /// one popped, whole; what came before it is freed.
    #[test]
    fn a_datagram_left_in_place_is_the_next_popped() {
        let mut lane = HeapLane::new();
        let r = lane.ring();
        for i in 0..5u8 {
            r.push(src(), src().ip(), &[i; 3]).unwrap();
        }
        let mut seen = Vec::new();
        let got = r.pop_while(usize::MAX, |e| {
            seen.push(e.data[0]);
            e.data[0] < 2
        });
        assert_eq!(got, (2, true));
        assert_eq!(seen, [0, 1, 2]);
        assert_eq!(r.len(), 3);
        let got = r.pop_while(usize::MAX, |e| {
            seen.push(e.data[0]);
            true
        });
        assert_eq!(got, (3, false));
        assert_eq!(seen, [0, 1, 2, 2, 3, 4]);
        assert!(r.is_empty());
    }

    #[test]
    fn a_full_lane_refuses_until_the_consumer_frees_a_slot() {
        let mut lane = HeapLane::new();
        let r = lane.ring();
        for i in 0..SLOTS {
            r.push(src(), src().ip(), &i.to_le_bytes()).unwrap();
        }
        assert_eq!(r.len(), SLOTS);
        assert_eq!(r.push(src(), src().ip(), b"x"), Err(PushError::Full));
        assert_eq!(r.pop(1, |e| assert_eq!(e.data, 0u64.to_le_bytes())), 1);
        r.push(src(), src().ip(), b"last").unwrap();
        let mut seen = Vec::new();
        r.pop(usize::MAX, |e| seen.push(e.data.to_vec()));
        assert_eq!(seen.len() as u64, SLOTS);
        assert_eq!(seen.last().unwrap(), b"last");
    }

    /// The producer reads the consumer's `tail` (a cache line the consumer
    /// writes at every pop) only when its last reading says full: here the
    /// counter is made to say "full" behind its back, and pushes go on
    /// until its own view fills; then it reads it, and refuses.
    #[test]
    fn the_producer_reads_the_tail_only_when_its_view_says_full() {
        let mut lane = HeapLane::new();
        let r = lane.ring();
        r.push(src(), src().ip(), b"first").unwrap();
        // As if the consumer had popped nothing and the lane were full.
        r.counter(TAIL)
            .store(1u64.wrapping_sub(SLOTS), Ordering::Release);
        for i in 1..SLOTS {
            r.push(src(), src().ip(), &i.to_le_bytes()).unwrap();
        }
        assert_eq!(r.push(src(), src().ip(), b"x"), Err(PushError::Full));
        // The real tail back, one slot freed: the next push reads it again.
        r.counter(TAIL).store(1, Ordering::Release);
        r.push(src(), src().ip(), b"after").unwrap();
        assert_eq!(r.push(src(), src().ip(), b"y"), Err(PushError::Full));
    }

    #[test]
    fn staged_datagrams_appear_together_when_published() {
        let mut lane = HeapLane::new();
        let r = lane.ring();
        r.stage(src(), src().ip(), b"request").unwrap();
        r.stage(src(), src().ip(), b"ack").unwrap();
        assert!(r.is_empty(), "nothing visible before publish");
        assert_eq!(r.pop(usize::MAX, |_| panic!("unpublished")), 0);
        r.publish();
        let mut seen = Vec::new();
        r.pop(usize::MAX, |e| seen.push(e.data.to_vec()));
        assert_eq!(seen, vec![b"request".to_vec(), b"ack".to_vec()]);
        // Staged datagrams count against the room.
        for _ in 0..SLOTS {
            r.stage(src(), src().ip(), b"x").unwrap();
        }
        assert_eq!(r.stage(src(), src().ip(), b"x"), Err(PushError::Full));
        r.publish();
        assert_eq!(r.len(), SLOTS);
    }

    #[test]
    fn refuses_a_datagram_over_the_slot_size() {
        let mut lane = HeapLane::new();
        let r = lane.ring();
        let big = vec![7u8; DATA_CAP + 1];
        assert_eq!(r.push(src(), src().ip(), &big), Err(PushError::TooBig));
        r.push(src(), src().ip(), &big[..DATA_CAP]).unwrap();
        r.pop(1, |e| assert_eq!(e.data.len(), DATA_CAP));
    }

    #[test]
    fn a_corrupt_header_never_reads_outside_the_lane() {
        let mut lane = HeapLane::new();
        let r = lane.ring();
        r.push(src(), src().ip(), b"ok").unwrap();
        r.push(src(), src().ip(), b"bad").unwrap();
        // A misbehaving peer scribbles a huge length into slot 1, and marks
        // every other slot published: far more datagrams than were pushed,
        // with `head` claiming more than the lane holds.
        // SAFETY: slot 1's length field lies inside the lane.
        unsafe {
            r.slot(1).add(META).cast::<u32>().write_unaligned(u32::MAX);
        }
        for n in 2..SLOTS {
            r.seq(n).store(n + 1, Ordering::Release);
        }
        r.counter(HEAD).store(1 << 40, Ordering::Release);
        let mut seen = 0;
        let n = r.pop(usize::MAX, |e| {
            assert!(e.data.len() <= DATA_CAP);
            seen += 1;
        });
        assert_eq!(n as u64, SLOTS, "at most a lane's worth");
        assert!(seen < n, "the corrupt slot was skipped");
    }

    /// The consumer takes a slot only when its seq names the datagram the
    /// consumer expects next: a slot still holding the previous lap's
    /// datagram, a forged seq, or `head` alone publish nothing.
    #[test]
    fn only_the_expected_seq_publishes_a_slot() {
        let mut lane = HeapLane::new();
        let r = lane.ring();
        for i in 0..SLOTS {
            r.push(src(), src().ip(), &i.to_le_bytes()).unwrap();
        }
        assert_eq!(r.pop(usize::MAX, |_| {}) as u64, SLOTS);
        // Slot 0 still holds datagram 0 (seq 1); the consumer waits for
        // datagram SLOTS there.
        assert!(r.is_empty());
        // `head` is the producer's bookkeeping: it publishes nothing.
        r.counter(HEAD).store(SLOTS + 5, Ordering::Release);
        assert!(r.is_empty());
        assert_eq!(r.pop(usize::MAX, |_| panic!("nothing was published")), 0);
        // A seq from a later lap is not the one expected either.
        r.seq(SLOTS).store(2 * SLOTS + 1, Ordering::Release);
        assert!(r.is_empty());
        // The expected one is.
        r.seq(SLOTS).store(SLOTS + 1, Ordering::Release);
        assert!(!r.is_empty());
        assert_eq!(
            r.pop(usize::MAX, |e| assert_eq!(e.data, 0u64.to_le_bytes())),
            1
        );
    }

    /// Between IPv4 addresses a 40-byte datagram (an 8-byte WRITE: BTH,
    /// RETH, data) lies in its slot's first cache line, with the seq the
    /// consumer polls.
    #[test]
    fn a_small_ipv4_datagram_shares_the_line_of_its_seq() {
        let mut lane = HeapLane::new();
        let r = lane.ring();
        let data: Vec<u8> = (1..=40).collect();
        r.push(src(), src().ip(), &data).unwrap();
        // SAFETY: the slot's first 64 bytes lie inside the lane.
        let line = unsafe { std::slice::from_raw_parts(r.slot(0), 64) };
        assert_eq!(&line[24..64], &data[..]);
        assert_eq!(u64::from_ne_bytes(line[..8].try_into().unwrap()), 1);
        r.pop(1, |e| assert_eq!(e.data, &data[..]));
    }

    /// A batch's seqs are stored last one first: stopped midway (as a
    /// consumer on another core may see it), the first datagram is still
    /// unpublished, so the consumer sees the batch whole or not at all.
    #[test]
    fn a_batch_is_published_first_datagram_last() {
        let mut lane = HeapLane::new();
        let r = lane.ring();
        r.stage(src(), src().ip(), b"request").unwrap();
        r.stage(src(), src().ip(), b"ack").unwrap();
        // What `publish` stores first: the batch's last seq.
        r.seq(1).store(2, Ordering::Release);
        assert!(r.is_empty(), "the last datagram alone is not visible");
        r.seq(1).store(0, Ordering::Release);
        r.publish();
        assert_eq!(r.seq(0).load(Ordering::Acquire), 1);
        assert_eq!(r.seq(1).load(Ordering::Acquire), 2);
        let mut seen = Vec::new();
        r.pop(usize::MAX, |e| seen.push(e.data.to_vec()));
        assert_eq!(seen, vec![b"request".to_vec(), b"ack".to_vec()]);
    }
}
