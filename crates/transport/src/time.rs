//! Time as a value: the transport never reads a clock.

use core::fmt;
use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time in nanoseconds since an arbitrary epoch chosen by the driver.
///
/// Tests use literal values (`Instant::from_micros(1000)`); the engine uses a
/// monotonic clock.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// From nanoseconds.
    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }
    /// From microseconds.
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us * 1_000)
    }
    /// From milliseconds.
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(ms * 1_000_000)
    }
    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, o: Instant) -> Duration {
        self.saturating_since(o)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={}.{:03}us", self.0 / 1000, self.0 % 1000)
    }
}
