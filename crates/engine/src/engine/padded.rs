//! A value alone in its cache lines: the engine's locks and the progress
//! thread's own words, which other threads would otherwise find in the lines
//! of the fields they use. Unpadded, the compiler's layout of `Shared`
//! decided what shared a line: removing one 16-byte field took
//! `ib_write_bw -s 64` from 177 to 149 MB/s in the VM's slow mode (0.25 µs a
//! line). Padding every hot word went wrong the other way: the progress
//! thread reads several of the poller's words each turn, one line each then,
//! and `ib_send_bw -s 64` fell from 168 to 138 MB/s; so the poller's words
//! stay together. Chosen by issue 17's `ib_send_bw`/`ib_write_bw -s 64` pairs
//! (BENCHMARKS.md, "Fewer instructions a message").
//!
//! 128 bytes, as crossbeam's `CachePadded` on x86-64: the spatial prefetcher
//! fetches lines in pairs.

use std::ops::Deref;

/// `T` aligned (and so padded) to 128 bytes.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Padded<T>(T);

impl<T> Padded<T> {
    pub(super) const fn new(t: T) -> Padded<T> {
        Padded(t)
    }
}

impl<T> Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_padded_values_never_share_a_line() {
        struct Two {
            a: Padded<std::sync::atomic::AtomicU64>,
            b: Padded<std::sync::atomic::AtomicBool>,
        }
        let t = Two {
            a: Padded::new(0.into()),
            b: Padded::new(false.into()),
        };
        let (a, b) = (&*t.a as *const _ as usize, &*t.b as *const _ as usize);
        assert_eq!(a % 128, 0);
        assert_eq!(b % 128, 0);
        assert!(a.abs_diff(b) >= 128);
    }
}
