//! Flat memory for sans-IO endpoint tests (shared by several test files).

use softrdma_transport::Memory;

/// Flat memory for one sans-IO endpoint: host addresses `base..base + len`.
pub(crate) struct Flat {
    pub(crate) base: u64,
    pub(crate) buf: Vec<u8>,
}

impl Memory for Flat {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        let o = (addr - self.base) as usize;
        dst.copy_from_slice(&self.buf[o..o + dst.len()]);
    }
    fn write(&mut self, addr: u64, src: &[u8]) {
        let o = (addr - self.base) as usize;
        self.buf[o..o + src.len()].copy_from_slice(src);
    }
    fn atomic(&mut self, addr: u64, op: softrdma_transport::AtomicOp) -> u64 {
        let o = (addr - self.base) as usize;
        let old = u64::from_ne_bytes(self.buf[o..o + 8].try_into().unwrap());
        let new = match op {
            softrdma_transport::AtomicOp::FetchAdd { add } => old.wrapping_add(add),
            softrdma_transport::AtomicOp::CompareSwap { compare, swap } => {
                if old == compare {
                    swap
                } else {
                    old
                }
            }
        };
        self.buf[o..o + 8].copy_from_slice(&new.to_ne_bytes());
        old
    }
}
