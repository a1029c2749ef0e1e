//! Host memory for simulated endpoints: separate buffers at fake host addresses.

use softrdma_transport::{AtomicOp, Memory};

/// One node's memory: disjoint regions at synthetic host addresses.
#[derive(Debug, Default)]
pub struct SimMemory {
    regions: Vec<(u64, Vec<u8>)>,
    /// Bytes written through the [`Memory`] trait (what the transport touched).
    pub writes: u64,
}

impl SimMemory {
    /// Allocates `len` zeroed bytes; returns their host address.
    ///
    /// Regions sit 4 GiB apart with unmapped gaps, so an out-of-bounds access
    /// the transport failed to refuse would panic here instead of corrupting.
    pub fn alloc(&mut self, len: usize) -> u64 {
        let base = 0x1_0000_0000u64 * (self.regions.len() as u64 + 1) + 0x1000;
        self.regions.push((base, vec![0; len]));
        base
    }

    fn find(&self, addr: u64, len: usize) -> (usize, usize) {
        for (i, (b, v)) in self.regions.iter().enumerate() {
            if addr >= *b && addr + len as u64 <= *b + v.len() as u64 {
                return (i, (addr - b) as usize);
            }
        }
        panic!("access outside every region: {addr:#x}+{len}");
    }

    /// The bytes at `addr..addr+len`.
    pub fn bytes(&self, addr: u64, len: usize) -> &[u8] {
        let (i, o) = self.find(addr, len);
        &self.regions[i].1[o..o + len]
    }

    /// Every region as (host address, bytes), in allocation order.
    pub fn regions(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.regions.iter().map(|(b, v)| (*b, v.as_slice()))
    }

    /// A copy of every region, to compare against later ([`SimMemory::regions`]).
    pub fn snapshot(&self) -> Vec<(u64, Vec<u8>)> {
        self.regions.clone()
    }

    /// Overwrites bytes at `addr` (the application writing its own buffer).
    pub fn fill(&mut self, addr: u64, data: &[u8]) {
        let (i, o) = self.find(addr, data.len());
        self.regions[i].1[o..o + data.len()].copy_from_slice(data);
    }
}

impl Memory for SimMemory {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        dst.copy_from_slice(self.bytes(addr, dst.len()));
    }
    fn write(&mut self, addr: u64, src: &[u8]) {
        self.writes += src.len() as u64;
        self.fill(addr, src);
    }
    fn atomic(&mut self, addr: u64, op: AtomicOp) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.bytes(addr, 8));
        let orig = u64::from_ne_bytes(b);
        self.fill(addr, &op.apply(orig).to_ne_bytes());
        orig
    }
}
