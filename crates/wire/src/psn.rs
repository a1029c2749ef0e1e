//! 24-bit packet sequence numbers with wrap-around arithmetic (IBTA 9.7.1).

use core::fmt;

/// A packet sequence number: 24 bits, compared modulo 2^24.
///
/// Ordering follows rxe's `psn_compare`: `a` is before `b` when the signed
/// 24-bit difference `a - b` is negative, so a window of 2^23 PSNs is unambiguous.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Mask of the 24 significant bits.
    pub const MASK: u32 = 0x00FF_FFFF;

    /// Creates a PSN, keeping the low 24 bits.
    pub const fn new(v: u32) -> Self {
        Psn(v & Self::MASK)
    }

    /// The raw 24-bit value.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[must_use]
    pub const fn add(self, n: u32) -> Self {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n` modulo 2^24.
    #[must_use]
    pub const fn sub(self, n: u32) -> Self {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The signed distance `self - other` in [-2^23, 2^23). At exactly half the
    /// PSN space apart each PSN is "before" the other, as with rxe's `psn_compare`.
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back: rxe's psn_compare.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// True when `self` comes strictly before `other`.
    pub const fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// True when `self` comes strictly after `other`.
    pub const fn after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        let p = Psn::new(0xFF_FFFE);
        assert_eq!(p.add(3).get(), 1);
        assert_eq!(Psn::new(1).sub(3).get(), 0xFF_FFFE);
        assert!(p.before(p.add(3)));
        assert!(p.add(3).after(p));
        assert_eq!(p.add(3).diff(p), 3);
        assert_eq!(p.diff(p.add(3)), -3);
        assert_eq!(Psn::new(0x1_000_005).get(), 5);
    }

    #[test]
    fn half_window() {
        let a = Psn::new(0);
        assert!(a.add(0x7F_FFFF).after(a));
        assert!(a.add(0x80_0001).before(a));
        // Exactly half apart: the distance is -2^23 both ways.
        assert_eq!(a.add(0x80_0000).diff(a), -0x80_0000);
        assert_eq!(a.diff(a.add(0x80_0000)), -0x80_0000);
    }
}
