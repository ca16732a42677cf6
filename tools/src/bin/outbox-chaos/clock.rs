//! Times that processes can compare: the system-wide monotonic clock.
//!
//! Records from several processes are merged by time, and some of those
//! processes run with a faked wall clock (the clock-skew scenario), so
//! records never use the wall clock. `CLOCK_MONOTONIC` is read straight from
//! the kernel (through rustix, not the C library a time faker hooks into), so
//! it is the same clock in every process on the machine.

use std::time::Duration;

use rustix::time::{ClockId, clock_gettime};

/// Microseconds on the machine's monotonic clock.
pub(crate) fn now_us() -> u64 {
    let now = clock_gettime(ClockId::Monotonic);
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let micros = u64::try_from(now.tv_nsec).unwrap_or(0) / 1000;
    secs * 1_000_000 + micros
}

/// The process's wall clock in milliseconds since the Unix epoch, as the
/// C library reports it (and as a time faker changes it).
pub(crate) fn wall_ms() -> i64 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// Microseconds from `earlier` to `later`, as a duration (zero if reversed).
pub(crate) fn between(earlier: u64, later: u64) -> Duration {
    Duration::from_micros(later.saturating_sub(earlier))
}

/// Milliseconds, for figures.
pub(crate) fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
