//! The device's clocks, as completion timestamps and
//! `ibv_query_rt_values_ex` report them.
//!
//! The transport stamps each completion with its own time (ns since the
//! engine's epoch). The *device clock* (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`,
//! `raw_clock`) is `CLOCK_MONOTONIC` in nanoseconds, so every process of the
//! host device reads one clock, as with a NIC's; it ticks at 1 GHz
//! ([`HCA_CORE_CLOCK_KHZ`]) over all 64 bits ([`TIMESTAMP_MASK`]). Wall-clock
//! time (`..._WALLCLOCK`) is `CLOCK_REALTIME` taken when asked, less the age
//! of the completion, so a clock step after the completion does not skew it.

use softrdma_transport::Instant;
use std::time::{Duration, SystemTime};

/// The device clock's frequency in kHz (`hca_core_clock`): 1 tick per ns.
pub const HCA_CORE_CLOCK_KHZ: u64 = 1_000_000;
/// Bits of the device clock a completion timestamp carries
/// (`completion_timestamp_mask`).
pub const TIMESTAMP_MASK: u64 = u64::MAX;

/// `CLOCK_MONOTONIC` in nanoseconds.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always
    // exists on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// `CLOCK_REALTIME` in nanoseconds since the Unix epoch (0 before it).
pub(crate) fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Where the engine's epoch lies on the device clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceClock {
    /// `CLOCK_MONOTONIC` (ns) at the engine's epoch.
    base_ns: u64,
}

impl DeviceClock {
    /// The device clock of an engine whose epoch began `since_epoch` ago.
    pub(crate) fn new(since_epoch: Duration) -> DeviceClock {
        let since = u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX);
        DeviceClock {
            base_ns: monotonic_ns().saturating_sub(since),
        }
    }

    /// Transport time now: `CLOCK_MONOTONIC` less the epoch, read directly
    /// (`std::time::Instant::elapsed` normalises a `timespec` difference and
    /// multiplies in 128 bits: ~100 instructions a read against ~25, and the
    /// engine reads the clock on every post and poll; callgrind, BENCHMARKS.md
    /// "Fewer instructions a message").
    pub(crate) fn now(self) -> Instant {
        Instant::from_nanos(monotonic_ns().saturating_sub(self.base_ns))
    }

    /// The device clock at transport time `t`.
    pub(crate) fn at(self, t: Instant) -> u64 {
        self.base_ns.wrapping_add(t.as_nanos()) & TIMESTAMP_MASK
    }
}

/// Wall-clock time (ns since the Unix epoch) of transport time `t`, given
/// the transport time `now` and the wall clock read at that moment.
pub(crate) fn wallclock_at(t: Instant, now: Instant, realtime_now_ns: u64) -> u64 {
    realtime_now_ns.saturating_sub(now.as_nanos().saturating_sub(t.as_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_clock_is_monotonic_ns_at_the_epoch_plus_transport_time() {
        let before = monotonic_ns();
        let c = DeviceClock::new(Duration::from_millis(5));
        let after = monotonic_ns();
        let at0 = c.at(Instant::ZERO);
        assert!(at0 + 5_000_000 >= before && at0 + 5_000_000 <= after);
        assert_eq!(c.at(Instant::from_micros(7)) - at0, 7_000);
    }

    #[test]
    fn wallclock_subtracts_the_completion_age() {
        let now = Instant::from_millis(10);
        assert_eq!(
            wallclock_at(Instant::from_millis(4), now, 1_000_000_000),
            994_000_000
        );
        // A completion "from the future" (cannot happen) reads as now.
        assert_eq!(wallclock_at(Instant::from_millis(11), now, 5), 5);
        let r = realtime_ns();
        // After 2020-01-01 and before 2100.
        assert!(r > 1_577_836_800_000_000_000 && r < 4_102_444_800_000_000_000);
    }
}
