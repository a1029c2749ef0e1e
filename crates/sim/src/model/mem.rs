//! Memory bookkeeping for the randomized workloads: registered regions
//! carved into areas, FIFO ring allocators for buffers whose lifetime ends in
//! completion order, and a shadow copy of every node's memory that the oracle
//! keeps byte-exact (with a "known" mask for bytes a failed operation may or
//! may not have touched).

use crate::memory::SimMemory;
use softrdma_transport::{Mr, Rng, Sge};
use std::collections::VecDeque;

/// Random helpers over the transport's seeded generator.
pub(crate) trait RngExt {
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64;
    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool;
    /// Random bytes.
    fn bytes(&mut self, n: usize) -> Vec<u8>;
}

impl RngExt for Rng {
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

/// A shadow of one node's memory: the bytes the oracle expects, and whether
/// it knows them (a byte a failed WRITE may have reached is unknown).
#[derive(Debug, Default)]
pub(crate) struct Shadow {
    regions: Vec<(u64, Vec<u8>, Vec<bool>)>,
}

impl Shadow {
    pub(crate) fn add_region(&mut self, host: u64, len: usize) {
        self.regions.push((host, vec![0; len], vec![true; len]));
    }

    fn find(&mut self, host: u64, len: usize) -> (&mut Vec<u8>, &mut Vec<bool>, usize) {
        for (b, d, k) in &mut self.regions {
            if host >= *b && host + len as u64 <= *b + d.len() as u64 {
                return (d, k, (host - *b) as usize);
            }
        }
        panic!("shadow: no region holds {host:#x}+{len}");
    }

    /// The expected bytes (all must be known).
    pub(crate) fn read(&mut self, host: u64, len: usize) -> Vec<u8> {
        let (d, k, o) = self.find(host, len);
        assert!(
            k[o..o + len].iter().all(|x| *x),
            "shadow read of unknown bytes"
        );
        d[o..o + len].to_vec()
    }

    pub(crate) fn write(&mut self, host: u64, data: &[u8]) {
        let (d, k, o) = self.find(host, data.len());
        d[o..o + data.len()].copy_from_slice(data);
        k[o..o + data.len()].fill(true);
    }

    pub(crate) fn forget(&mut self, host: u64, len: usize) {
        let (_, k, o) = self.find(host, len);
        k[o..o + len].fill(false);
    }

    /// Compares every known byte with the real memory; describes the first difference.
    pub(crate) fn compare(&self, mem: &SimMemory) -> Result<(), String> {
        for (base, d, k) in &self.regions {
            let real = mem.bytes(*base, d.len());
            if let Some(i) = (0..d.len()).find(|&i| k[i] && d[i] != real[i]) {
                let end = (i + 16).min(d.len());
                return Err(format!(
                    "memory at {:#x} differs from the model: expected {:02x?}, found {:02x?}",
                    base + i as u64,
                    &d[i..end],
                    &real[i..end]
                ));
            }
        }
        Ok(())
    }
}

/// A FIFO allocator over one area of one MR: buffers are freed in the order
/// they were allocated (completion order), so a ring suffices.
#[derive(Debug)]
pub(crate) struct Ring {
    pub(crate) mr: usize,
    base: u64,
    size: u64,
    live: VecDeque<(u64, u64)>,
    tail: u64,
}

/// An allocation: MR index, offset in the MR, length, and the ring's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) mr: usize,
    pub(crate) off: u64,
    pub(crate) len: u64,
    ring: usize,
    start: u64,
}

impl Ring {
    pub(crate) fn new(mr: usize, base: u64, size: u64) -> Ring {
        Ring {
            mr,
            base,
            size,
            live: VecDeque::new(),
            tail: 0,
        }
    }

    /// `len` contiguous bytes, or None while the ring is too full.
    fn alloc(&mut self, len: u64, ring: usize) -> Option<Piece> {
        let (head, empty) = match self.live.front() {
            Some(&(s, _)) => (s, false),
            None => {
                self.tail = 0;
                (0, true)
            }
        };
        let start = if empty || self.tail > head {
            if self.tail + len <= self.size {
                self.tail
            } else if len < head {
                0
            } else {
                return None;
            }
        } else if self.tail + len < head {
            self.tail
        } else {
            return None;
        };
        self.tail = start + len;
        self.live.push_back((start, len));
        Some(Piece {
            mr: self.mr,
            off: self.base + start,
            len,
            ring,
            start,
        })
    }

    fn free(&mut self, p: &Piece) {
        let f = self.live.pop_front();
        assert_eq!(f, Some((p.start, p.len)), "ring freed out of order");
    }
}

/// A node's registered memory: the MRs, where each is carved up, the rings
/// and the shadow.
#[derive(Debug)]
pub(crate) struct NodeMem {
    pub(crate) mrs: Vec<Mr>,
    carved: Vec<u64>,
    pub(crate) rings: Vec<Ring>,
    pub(crate) shadow: Shadow,
}

impl NodeMem {
    pub(crate) fn new(mrs: Vec<Mr>) -> NodeMem {
        let mut shadow = Shadow::default();
        for m in &mrs {
            shadow.add_region(m.host, m.length as usize);
        }
        NodeMem {
            carved: vec![0; mrs.len()],
            mrs,
            rings: Vec::new(),
            shadow,
        }
    }

    /// Reserves `len` bytes (8-aligned) of MR `mr`; returns the offset.
    pub(crate) fn carve(&mut self, mr: usize, len: u64) -> u64 {
        let off = self.carved[mr];
        self.carved[mr] = (off + len + 7) & !7;
        assert!(self.carved[mr] <= self.mrs[mr].length, "MR {mr} too small");
        off
    }

    /// A new ring of `size` bytes in every MR; returns their indices.
    pub(crate) fn rings(&mut self, size: u64) -> Vec<usize> {
        (0..self.mrs.len())
            .map(|m| {
                let base = self.carve(m, size);
                self.rings.push(Ring::new(m, base, size));
                self.rings.len() - 1
            })
            .collect()
    }

    /// Allocates `len` bytes as up to `max_pieces` pieces from random rings of
    /// `set`; None (nothing allocated) if the rings are too full.
    pub(crate) fn alloc(
        &mut self,
        rng: &mut Rng,
        set: &[usize],
        len: u64,
        max_pieces: usize,
    ) -> Option<Vec<Piece>> {
        let k = if len < 2 {
            1
        } else {
            rng.range(1, max_pieces.min(len as usize) as u64) as usize
        };
        // k-1 distinct cut points in 1..len.
        let mut cuts: Vec<u64> = (0..k - 1).map(|_| rng.range(1, len - 1)).collect();
        cuts.sort_unstable();
        cuts.dedup();
        cuts.push(len);
        let mut out: Vec<Piece> = Vec::new();
        let mut prev = 0;
        for c in cuts {
            let r = set[rng.below(set.len() as u64) as usize];
            match self.rings[r].alloc(c - prev, r) {
                Some(p) => out.push(p),
                None => {
                    // Give back what this call took (newest first is still
                    // FIFO order for each ring, as nothing else allocated).
                    for p in out.iter().rev() {
                        self.rings[p.ring].unfree_last(p);
                    }
                    return None;
                }
            }
            prev = c;
        }
        Some(out)
    }

    pub(crate) fn free(&mut self, pieces: &[Piece]) {
        for p in pieces {
            if p.ring != usize::MAX {
                self.rings[p.ring].free(p);
            }
        }
    }

    /// Gives back pieces just allocated (nothing else allocated since).
    pub(crate) fn unalloc(&mut self, pieces: &[Piece]) {
        for p in pieces.iter().rev() {
            self.rings[p.ring].unfree_last(p);
        }
    }

    /// A piece outside any ring (carved once, e.g. an SRQ slot).
    pub(crate) fn fixed_piece(&self, mr: usize, off: u64, len: u64) -> Piece {
        Piece {
            mr,
            off,
            len,
            ring: usize::MAX,
            start: 0,
        }
    }

    pub(crate) fn host(&self, mr: usize, off: u64) -> u64 {
        self.mrs[mr].host + off
    }

    /// The SGE of a piece.
    pub(crate) fn sge(&self, p: &Piece) -> Sge {
        let m = &self.mrs[p.mr];
        Sge {
            addr: m.iova.wrapping_add(p.off),
            length: p.len as u32,
            lkey: m.lkey,
        }
    }

    /// Writes `data` across `pieces` into real memory and the shadow (the
    /// application filling its own buffers).
    pub(crate) fn app_fill(&mut self, mem: &mut SimMemory, pieces: &[Piece], data: &[u8]) {
        let mut o = 0usize;
        for p in pieces {
            let h = self.host(p.mr, p.off);
            let d = &data[o..o + p.len as usize];
            mem.fill(h, d);
            self.shadow.write(h, d);
            o += p.len as usize;
        }
    }

    /// The real bytes across `pieces`, concatenated.
    pub(crate) fn gather(&self, mem: &SimMemory, pieces: &[Piece]) -> Vec<u8> {
        let mut v = Vec::new();
        for p in pieces {
            v.extend_from_slice(mem.bytes(self.host(p.mr, p.off), p.len as usize));
        }
        v
    }

    /// Records `data` as the expected content of `pieces` (a completed transfer).
    pub(crate) fn expect(&mut self, pieces: &[Piece], data: &[u8]) {
        let mut o = 0usize;
        for p in pieces {
            let h = self.host(p.mr, p.off);
            self.shadow.write(h, &data[o..o + p.len as usize]);
            o += p.len as usize;
        }
    }

    /// Records `data` as the expected content of the first `data.len()` bytes
    /// of `pieces` (a message in a larger receive buffer).
    pub(crate) fn expect_prefix(&mut self, pieces: &[Piece], data: &[u8]) {
        let mut o = 0usize;
        for p in pieces {
            if o == data.len() {
                break;
            }
            let n = (p.len as usize).min(data.len() - o);
            let h = self.host(p.mr, p.off);
            self.shadow.write(h, &data[o..o + n]);
            o += n;
        }
    }

    /// Forgets the content of `pieces` (a transfer that may or may not have happened).
    pub(crate) fn forget(&mut self, pieces: &[Piece]) {
        for p in pieces {
            let h = self.host(p.mr, p.off);
            self.shadow.forget(h, p.len as usize);
        }
    }
}

impl Ring {
    /// Undoes the newest allocation (an aborted multi-piece allocation).
    fn unfree_last(&mut self, p: &Piece) {
        let l = self.live.pop_back();
        assert_eq!(l, Some((p.start, p.len)));
        self.tail = self.live.back().map_or(0, |&(s, n)| s + n);
    }
}
