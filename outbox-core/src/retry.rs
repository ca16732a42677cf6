//! How long a task waits before its next attempt: [`RetryPolicy`].

use std::time::Duration;

use crate::{Error, Result, limits::MAX_DURATION};

/// Exponential backoff with a cap and jitter.
///
/// After failed attempt `n` (1-based) the task waits
/// `min(cap, base × 2^(n-1))`, shortened by a random fraction of at most
/// `jitter` so that tasks which failed together do not retry together.
///
/// Defaults: `base` 1 s, `cap` 10 min, `jitter` 0.2, so attempts follow
/// roughly 1 s, 2 s, 4 s, ... and never wait more than ten minutes.
///
/// ```
/// use std::time::Duration;
/// use diesel_outbox_core::RetryPolicy;
///
/// let policy = RetryPolicy::new(Duration::from_millis(100), Duration::from_secs(5), 0.0)?;
/// assert_eq!(policy.delay_with(3, 0.5), Duration::from_millis(400));
/// assert_eq!(policy.delay_with(30, 0.5), Duration::from_secs(5));
/// # Ok::<(), diesel_outbox_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    base: Duration,
    cap: Duration,
    jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(600),
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// A policy with the given first delay, largest delay and jitter fraction.
    ///
    /// `cap` must be at most [`MAX_DURATION`] (100 years: the delay is added
    /// to the database clock), `base` at most `cap`, and `jitter` within
    /// `0.0..=1.0`; [`Error::Config`] names `retry.cap`, `retry.base` or
    /// `retry.jitter` otherwise.
    ///
    /// ```
    /// use std::time::Duration;
    /// use diesel_outbox_core::{RetryPolicy, limits::MAX_DURATION};
    ///
    /// assert!(RetryPolicy::new(Duration::from_secs(1), MAX_DURATION, 0.2).is_ok());
    /// let refused = RetryPolicy::new(Duration::from_secs(1), MAX_DURATION * 2, 0.2);
    /// assert_eq!(refused.unwrap_err().field(), Some("retry.cap"));
    /// ```
    pub fn new(base: Duration, cap: Duration, jitter: f64) -> Result<Self> {
        if cap > MAX_DURATION {
            return Err(Error::Config {
                field: "retry.cap",
                reason: format!(
                    "{cap:?} exceeds {MAX_DURATION:?} (100 years), the longest delay \
                     the databases' time arithmetic represents"
                ),
            });
        }
        if base > cap {
            return Err(Error::Config {
                field: "retry.base",
                reason: format!("{base:?} exceeds the cap {cap:?}"),
            });
        }
        if !(0.0..=1.0).contains(&jitter) {
            return Err(Error::Config {
                field: "retry.jitter",
                reason: format!("{jitter} is not within 0.0..=1.0"),
            });
        }
        Ok(Self { base, cap, jitter })
    }

    /// The first delay.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The largest delay.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// The jitter fraction.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The delay after failed attempt `attempt`, with a random jitter.
    pub fn delay(&self, attempt: i64) -> Duration {
        self.delay_with(attempt, fastrand::f64())
    }

    /// The delay after failed attempt `attempt` for a given uniform sample
    /// `unit` in `[0, 1)`: the deterministic core of [`RetryPolicy::delay`].
    pub fn delay_with(&self, attempt: i64, unit: f64) -> Duration {
        let doublings = u32::try_from(attempt.saturating_sub(1).clamp(0, 64)).unwrap_or(64);
        let full = if doublings >= 64 {
            self.cap
        } else {
            let nanos = self
                .base
                .as_nanos()
                .saturating_mul(1u128 << doublings)
                .min(self.cap.as_nanos());
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
        };
        let factor = 1.0 - self.jitter * unit.clamp(0.0, 1.0);
        if factor >= 1.0 {
            full
        } else {
            full.mul_f64(factor)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn doubles_from_base_up_to_cap() {
        let policy = RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(60), 0.0)
            .expect("valid policy");
        let delays: Vec<u64> = (1..=8).map(|n| policy.delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(policy.delay(i64::MAX), Duration::from_secs(60));
        assert_eq!(policy.delay(0), Duration::from_secs(1));
    }

    #[test]
    fn rejects_unusable_settings() {
        let err = RetryPolicy::new(Duration::from_secs(2), Duration::from_secs(1), 0.1)
            .expect_err("base above cap");
        assert_eq!(err.field(), Some("retry.base"));
        let err = RetryPolicy::new(Duration::ZERO, Duration::from_secs(1), 1.5)
            .expect_err("jitter above one");
        assert_eq!(err.field(), Some("retry.jitter"));
        let err = RetryPolicy::new(Duration::ZERO, MAX_DURATION + Duration::from_micros(1), 0.1)
            .expect_err("cap above the bound");
        assert_eq!(err.field(), Some("retry.cap"));
        let err = RetryPolicy::new(MAX_DURATION * 2, MAX_DURATION, 0.1)
            .expect_err("base above the bounded cap");
        assert_eq!(err.field(), Some("retry.base"));
        RetryPolicy::new(MAX_DURATION, MAX_DURATION, 0.1).expect("the bound itself is allowed");
    }

    proptest! {
        #[test]
        fn jitter_only_shortens_and_never_exceeds_the_cap(attempt in 0i64..200, unit in 0.0f64..1.0) {
            let policy = RetryPolicy::default();
            let plain = RetryPolicy::new(policy.base(), policy.cap(), 0.0).expect("valid");
            let jittered = policy.delay_with(attempt, unit);
            let full = plain.delay_with(attempt, unit);
            prop_assert!(jittered <= full);
            prop_assert!(jittered >= full.mul_f64(0.8) - Duration::from_nanos(1));
            prop_assert!(full <= policy.cap());
        }
    }
}
