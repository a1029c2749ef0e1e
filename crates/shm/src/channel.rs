//! A channel: one direction of a connected QP pair on one host, a
//! single-producer, single-consumer ring of variable-length records packed
//! densely (docs/PLAN-direct-queues.md, step 2).
//!
//! A lane ([`crate::Ring`]) gives every datagram a 4 KiB slot, so each
//! message lands on a line and a page not touched for 511 messages: the
//! consumer's look at its next slot cost 40–420 ns in this VM's slow mode
//! (BENCHMARKS.md, "Where a same-host message's time goes"). Here a
//! 40-byte record takes 48 bytes, right after the one before it.
//!
//! Layout (offsets from the channel's start):
//!
//! ```text
//! 0     (the producer's line: nothing shared yet)
//! 64    tail: u64  bytes ever consumed (the consumer's; the producer reads
//!                  it only when its last reading says the ring is full)
//! 72    ack: u64   the consumer's word for the producer (RC: the PSN it
//!                  acknowledged through)
//! 80    nak: u64   likewise (RC: a NAK's syndrome and PSN); both meaning
//!                  what the caller gives them
//! 128   data: `cap` bytes, records at multiples of 8
//! ```
//!
//! A record at byte position `p` (ever written, so `p % cap` in the data)
//! is an 8-byte header, then its bytes. The header holds the length (24
//! bits) and `p / 8 + 1` (40 bits above them); the producer writes the
//! bytes, then the header with a release store, and the consumer takes the
//! record when the header at its tail names the tail's position: so its
//! check and a small record share a line, stale records of a lap before
//! read as "empty", and fresh (zeroed) memory does too. A record that would
//! cross the end is preceded by a pad header that sends the consumer to the
//! start. Nothing the peer writes makes either side touch memory outside
//! the channel: positions are reduced modulo `cap`, and a length that would
//! run past the end stops the consumer there.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes before the data.
const DATA_AT: usize = 128;
const TAIL: usize = 64;
const ACK: usize = 72;
const NAK: usize = 80;
const HEADER: usize = 8;
const LEN_BITS: u32 = 24;
const LEN_MASK: u64 = (1 << LEN_BITS) - 1;
const POS_MASK: u64 = (1 << (64 - LEN_BITS)) - 1;
/// The length of a pad header.
const PAD: u64 = LEN_MASK;

/// Why a push did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelError {
    /// The consumer has not freed room for the record yet.
    Full,
    /// Longer than [`Channel::max_record`].
    TooBig,
}

/// A view of one channel. It does not own the memory (see
/// [`Channel::new`]).
#[derive(Debug)]
pub struct Channel {
    base: *mut u8,
    cap: u64,
    /// The producer's next position (this process's; one producer).
    head: AtomicU64,
    /// The producer's last reading of `tail`.
    tail_seen: AtomicU64,
}

// SAFETY: a pointer into shared memory whose concurrent accesses go through
// atomics (headers, tail, ack, nak) or through bytes the protocol gives to
// one side at a time; `Channel::new`'s contract keeps the mapping alive.
unsafe impl Send for Channel {}
// SAFETY: as above; `Channel::new`'s caller serializes pushes and pops.
unsafe impl Sync for Channel {}

impl Channel {
    /// Bytes of a channel with `cap` bytes of records.
    pub const fn bytes(cap: usize) -> usize {
        DATA_AT + cap
    }

    /// A view of the channel at `base`, with `cap` bytes of records.
    ///
    /// # Safety
    /// `cap` is a power of two of at least 4096 and at most 2^30; `base` is
    /// 64-byte aligned and points to [`Channel::bytes`]`(cap)` bytes, zeroed
    /// when the channel was made, that stay mapped, readable and writable
    /// while the view lives. At most one thread (in any process) pushes at
    /// a time, through one view, and at most one pops.
    pub unsafe fn new(base: *mut u8, cap: usize) -> Channel {
        assert!(cap.is_power_of_two() && (4096..=1 << 30).contains(&cap));
        Channel {
            base,
            cap: cap as u64,
            head: AtomicU64::new(0),
            tail_seen: AtomicU64::new(0),
        }
    }

    /// The longest record a push takes: a quarter of the ring, so a record
    /// and the pad before it always fit in an empty ring.
    pub fn max_record(&self) -> usize {
        (self.cap / 4) as usize
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is TAIL, ACK, NAK or a data offset below `cap`, a
        // multiple of 8, so the word lies inside the channel, aligned; the
        // channel outlives `self`, and both processes access it atomically.
        unsafe { &*self.base.add(at).cast::<AtomicU64>() }
    }

    fn data(&self, pos: u64) -> usize {
        DATA_AT + (pos % self.cap) as usize
    }

    fn header(&self, pos: u64) -> &AtomicU64 {
        self.word(self.data(pos))
    }

    fn tag(pos: u64) -> u64 {
        ((pos / 8 + 1) & POS_MASK) << LEN_BITS
    }

    /// The room a record of `len` bytes takes: its header and its bytes,
    /// up to the next multiple of 8 (producer and consumer both step by it).
    fn room(len: u64) -> u64 {
        (HEADER as u64 + len).next_multiple_of(8)
    }

    /// Consumer: the length in the header at `pos` if it is published for
    /// `pos` (read with acquire: the record's bytes are then visible).
    fn published(&self, pos: u64) -> Option<u64> {
        let h = self.header(pos).load(Ordering::Acquire);
        (h & !LEN_MASK == Self::tag(pos)).then_some(h & LEN_MASK)
    }

    /// The consumer's word for the producer (RC: acknowledged through).
    pub fn ack(&self) -> &AtomicU64 {
        self.word(ACK)
    }

    /// The consumer's second word for the producer (RC: a NAK).
    pub fn nak(&self) -> &AtomicU64 {
        self.word(NAK)
    }

    /// Producer: writes a record of `len` bytes, filled in place by `fill`,
    /// and publishes it.
    pub fn push_with(&self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), ChannelError> {
        if len > self.max_record() {
            return Err(ChannelError::TooBig);
        }
        let need = Self::room(len as u64);
        let head = self.head.load(Ordering::Relaxed);
        let to_end = self.cap - head % self.cap;
        let (pad, at) = if need > to_end {
            (true, head + to_end)
        } else {
            (false, head)
        };
        let end = at + need;
        if end.wrapping_sub(self.tail_seen.load(Ordering::Relaxed)) > self.cap {
            let tail = self.word(TAIL).load(Ordering::Acquire);
            self.tail_seen.store(tail, Ordering::Relaxed);
            if end.wrapping_sub(tail) > self.cap {
                return Err(ChannelError::Full);
            }
        }
        let body = self.data(at) + HEADER;
        // SAFETY: the bytes from `at` to `end` are free (end - tail <= cap)
        // and lie inside the data (a record never crosses the end): the
        // consumer reads them only after the header's release store below,
        // and we are the only producer.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.base.add(body), len) };
        fill(buf);
        if pad {
            self.header(head)
                .store(Self::tag(head) | PAD, Ordering::Release);
        }
        self.header(at)
            .store(Self::tag(at) | len as u64, Ordering::Release);
        self.head.store(end, Ordering::Relaxed);
        Ok(())
    }

    /// Producer: copies `data` in as one record.
    pub fn push(&self, data: &[u8]) -> Result<(), ChannelError> {
        self.push_with(data.len(), |b| b.copy_from_slice(data))
    }

    /// Consumer: whether no record waits (one load, on the line the last
    /// record ended on or the next one).
    pub fn is_empty(&self) -> bool {
        self.published(self.word(TAIL).load(Ordering::Relaxed))
            .is_none()
    }

    /// Consumer: hands up to `max` waiting records to `f`, oldest first,
    /// then frees their room. Returns how many it handed over. A header
    /// whose length would run past the end of the data (a peer writing
    /// nonsense) stops the pop there, for good.
    pub fn pop(&self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let start = self.word(TAIL).load(Ordering::Relaxed);
        let mut tail = start;
        let mut n = 0;
        // A pop never takes more than one ring's worth.
        while n < max && tail.wrapping_sub(start) < self.cap {
            let Some(len) = self.published(tail) else {
                break;
            };
            let to_end = self.cap - tail % self.cap;
            if len == PAD {
                tail += to_end;
                continue;
            }
            let need = Self::room(len);
            if need > to_end {
                break;
            }
            let body = self.data(tail) + HEADER;
            // SAFETY: published (the header read with acquire), inside the
            // data (need <= to_end), and not reused before the tail store
            // below.
            f(unsafe { std::slice::from_raw_parts(self.base.add(body), len as usize) });
            tail += need;
            n += 1;
        }
        if tail != start {
            self.word(TAIL).store(tail, Ordering::Release);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    const CAP: usize = 4096;

    /// A zeroed, 64-byte aligned channel on the heap.
    struct Heap {
        mem: Vec<u128>,
    }

    impl Heap {
        fn new() -> Heap {
            Heap {
                mem: vec![0; Channel::bytes(CAP) / 16 + 4],
            }
        }

        fn channel(&mut self) -> Channel {
            let p = self.mem.as_mut_ptr().cast::<u8>();
            let pad = p.align_offset(64);
            // SAFETY: the allocation holds the channel after `pad`; the test
            // keeps `self` alive and pushes and pops from one thread.
            unsafe { Channel::new(p.add(pad), CAP) }
        }
    }

    fn record(i: u32, len: usize) -> Vec<u8> {
        (0..len).map(|k| (i as usize * 31 + k) as u8).collect()
    }

    #[test]
    fn small_records_sit_side_by_side() {
        let mut h = Heap::new();
        let c = h.channel();
        assert!(c.is_empty());
        c.push(&[1; 40]).unwrap();
        c.push(&[2; 40]).unwrap();
        assert!(!c.is_empty());
        // 8 + 40 bytes each, the second's header right after the first.
        assert_eq!(c.header(48).load(Ordering::Relaxed), Channel::tag(48) | 40);
        let mut got = Vec::new();
        assert_eq!(c.pop(usize::MAX, |r| got.push(r.to_vec())), 2);
        assert_eq!(got, [vec![1; 40], vec![2; 40]]);
        assert!(c.is_empty());
        assert_eq!(c.word(TAIL).load(Ordering::Relaxed), 96);
    }

    #[test]
    fn a_record_that_would_cross_the_end_starts_over_after_a_pad() {
        let mut h = Heap::new();
        let c = h.channel();
        // 3 × 1032 bytes leave 1000 before the end: a 1024-byte record
        // (1032 with its header) does not fit there.
        for i in 0..3 {
            c.push(&record(i, 1024)).unwrap();
        }
        assert_eq!(c.pop(usize::MAX, |_| {}), 3);
        c.push(&record(3, 1024)).unwrap();
        assert_eq!(c.header(3096).load(Ordering::Relaxed) & LEN_MASK, PAD);
        let mut got = Vec::new();
        assert_eq!(c.pop(usize::MAX, |r| got.push(r.to_vec())), 1);
        assert_eq!(got, [record(3, 1024)]);
        assert_eq!(c.word(TAIL).load(Ordering::Relaxed), 4096 + 1032);
    }

    #[test]
    fn a_full_ring_refuses_until_the_consumer_frees_room() {
        let mut h = Heap::new();
        let c = h.channel();
        let mut pushed = 0;
        while c.push(&record(pushed, 56)).is_ok() {
            pushed += 1;
        }
        assert_eq!(pushed as usize, CAP / 64);
        assert_eq!(c.push(&[0; 8]), Err(ChannelError::Full));
        assert_eq!(c.pop(1, |r| assert_eq!(r, record(0, 56))), 1);
        c.push(&record(pushed, 56)).unwrap();
        assert_eq!(c.push(&[0; 8]), Err(ChannelError::Full));
        let mut n = 0;
        c.pop(usize::MAX, |r| {
            n += 1;
            assert_eq!(r, record(n, 56));
        });
        assert_eq!(n, pushed);
    }

    #[test]
    fn too_big_records_are_refused() {
        let mut h = Heap::new();
        let c = h.channel();
        assert_eq!(c.push(&[0; CAP / 4 + 1]), Err(ChannelError::TooBig));
        c.push(&[0; CAP / 4]).unwrap();
    }

    /// A lap's stale record, and a header naming another position, read as
    /// "empty"; a length running past the end stops the consumer.
    #[test]
    fn stale_or_forged_headers_are_not_taken() {
        let mut h = Heap::new();
        let c = h.channel();
        c.push(&[5; 16]).unwrap();
        assert_eq!(c.pop(usize::MAX, |_| {}), 1);
        // Back at position 0 a lap later, the old record is stale.
        c.word(TAIL).store(CAP as u64, Ordering::Relaxed);
        assert!(c.is_empty());
        assert_eq!(c.pop(usize::MAX, |_| panic!("stale")), 0);
        // A forged header at the tail whose length runs past the end.
        let at = CAP as u64 + 4000;
        c.word(TAIL).store(at, Ordering::Relaxed);
        c.header(at)
            .store(Channel::tag(at) | 200, Ordering::Release);
        assert_eq!(c.pop(usize::MAX, |_| panic!("out of bounds")), 0);
        assert_eq!(c.word(TAIL).load(Ordering::Relaxed), at);
    }

    #[test]
    fn the_words_for_the_producer_are_the_consumers() {
        let mut h = Heap::new();
        let c = h.channel();
        c.ack().store(41, Ordering::Release);
        c.nak().store(7, Ordering::Release);
        c.push(&[1; 8]).unwrap();
        c.pop(usize::MAX, |_| {});
        assert_eq!(c.ack().load(Ordering::Acquire), 41);
        assert_eq!(c.nak().load(Ordering::Acquire), 7);
    }

    /// Two threads, many laps: each record arrives whole and in order
    /// (the header's release store publishes the bytes written before it).
    #[test]
    fn two_threads_pass_every_record_in_order() {
        const N: u32 = 200_000;
        let mut h = Heap::new();
        let c = h.channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..N {
                    let r = record(i, (i % 97) as usize);
                    while c.push(&r) == Err(ChannelError::Full) {
                        // Two cores shared with other tests: let the
                        // consumer run rather than spin out a time slice.
                        std::thread::yield_now();
                    }
                }
            });
            let mut next = 0;
            while next < N {
                let got = c.pop(usize::MAX, |r| {
                    assert_eq!(r, record(next, (next % 97) as usize));
                    next += 1;
                });
                if got == 0 {
                    std::thread::yield_now();
                }
            }
        });
        assert!(c.is_empty());
    }

    proptest! {
        /// Against a queue: any mix of pushes (0 to 1024 bytes) and pops
        /// keeps every record, in order, byte for byte, across many laps,
        /// and refuses a push only when the model has no room for it.
        #[test]
        fn behaves_as_a_bounded_queue(ops in prop::collection::vec((0usize..1025, 0usize..4), 1..400)) {
            let mut h = Heap::new();
            let c = h.channel();
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            let mut used = 0u64;
            for (i, (len, pops)) in ops.into_iter().enumerate() {
                let r = record(i as u32, len);
                let need = (HEADER + len).next_multiple_of(8) as u64;
                let head = c.head.load(Ordering::Relaxed);
                let to_end = CAP as u64 - head % CAP as u64;
                let room = CAP as u64 - used;
                let cost = if need > to_end { need + to_end } else { need };
                match c.push(&r) {
                    Ok(()) => {
                        prop_assert!(cost <= room);
                        used += cost;
                        model.push_back(r);
                    }
                    Err(e) => {
                        prop_assert_eq!(e, ChannelError::Full);
                        prop_assert!(cost > room);
                    }
                }
                for _ in 0..pops {
                    let before = c.word(TAIL).load(Ordering::Relaxed);
                    let mut got = None;
                    let n = c.pop(1, |b| got = Some(b.to_vec()));
                    prop_assert_eq!(n, usize::from(got.is_some()));
                    prop_assert_eq!(got, model.pop_front());
                    used -= c.word(TAIL).load(Ordering::Relaxed) - before;
                }
            }
            let mut rest = Vec::new();
            c.pop(usize::MAX, |b| rest.push(b.to_vec()));
            prop_assert_eq!(rest, Vec::from(model));
        }
    }
}
