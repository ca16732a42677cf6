//! Worker settings: [`WorkerConfig`] with documented defaults and bounds.

use std::time::Duration;

use crate::{
    Error, Result, RetryPolicy,
    limits::{self, MAX_CONCURRENCY, MAX_OWNER_BYTES},
};

/// How a [`Worker`](crate::Worker) sends.
///
/// Start from the defaults and change what you need with the setters, each
/// named like its setting; the fields stay readable. [`Worker::with_config`]
/// checks the result with [`validate`](Self::validate).
///
/// ```
/// use std::time::Duration;
/// use diesel_outbox_core::{RetryPolicy, WorkerConfig};
///
/// let config = WorkerConfig::default()
///     .owner("billing-1")
///     .handler_timeout(Duration::from_secs(10))
///     .lease_duration(Duration::from_secs(60))
///     .concurrency(8)
///     .retry(RetryPolicy::new(Duration::from_secs(2), Duration::from_secs(300), 0.2)?);
/// config.validate()?;
/// assert_eq!(config.concurrency, 8);
/// # Ok::<(), diesel_outbox_core::Error>(())
/// ```
///
/// | setting | default | allowed | meaning |
/// |---|---|---|---|
/// | `handler_timeout` | 5 s | positive, at most half the lease (so at most 50 years) | a handler running longer is cut; the attempt is a retryable failure |
/// | `lease_duration` | 30 s | at least twice `handler_timeout`, at most [`MAX_DURATION`](limits::MAX_DURATION) (100 years) | how long a claim lasts |
/// | `concurrency` | 32 | 1 to [`MAX_CONCURRENCY`] (10,000) | handlers running at once within a round or a relay |
/// | `retry` | [`RetryPolicy::default`] | cap at most 100 years, checked by [`RetryPolicy::new`] | backoff between attempts |
/// | `owner` | `worker-<pid>-<random>` | 1 to [`MAX_OWNER_BYTES`] (255) bytes | the name written into `lease_owner` |
///
/// [`Worker::with_config`]: crate::Worker::with_config
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// Longest time one handler call may take.
    pub handler_timeout: Duration,
    /// How long a claim lasts on the database clock.
    pub lease_duration: Duration,
    /// Handlers running at once within one round.
    pub concurrency: usize,
    /// Backoff between attempts.
    pub retry: RetryPolicy,
    /// Name of this worker in `lease_owner`; unique per process.
    pub owner: String,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            handler_timeout: Duration::from_secs(5),
            lease_duration: Duration::from_secs(30),
            concurrency: 32,
            retry: RetryPolicy::default(),
            owner: format!("worker-{}-{:08x}", std::process::id(), fastrand::u32(..)),
        }
    }
}

impl WorkerConfig {
    /// Sets the longest time one handler call may take.
    #[must_use]
    pub fn handler_timeout(mut self, handler_timeout: Duration) -> Self {
        self.handler_timeout = handler_timeout;
        self
    }

    /// Sets how long a claim lasts on the database clock.
    #[must_use]
    pub fn lease_duration(mut self, lease_duration: Duration) -> Self {
        self.lease_duration = lease_duration;
        self
    }

    /// Sets how many handlers run at once within a round or a relay.
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Sets the backoff between attempts.
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the name written into `lease_owner`; keep it unique per process.
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Checks every setting against its bounds (see the table on
    /// [`WorkerConfig`]) and that the settings work together;
    /// [`Error::Config`] names the first one that does not.
    ///
    /// ```
    /// use std::time::Duration;
    /// use diesel_outbox_core::WorkerConfig;
    ///
    /// let config = WorkerConfig::default().lease_duration(Duration::from_secs(200 * 365 * 86_400));
    /// assert_eq!(config.validate().unwrap_err().field(), Some("lease_duration"));
    /// ```
    pub fn validate(&self) -> Result<()> {
        limits::check_positive_duration("handler_timeout", self.handler_timeout)?;
        limits::check_duration("lease_duration", self.lease_duration)?;
        if self.lease_duration < self.handler_timeout.saturating_mul(2) {
            return Err(Error::Config {
                field: "lease_duration",
                reason: format!(
                    "{:?} must be at least twice the handler timeout {:?}, so a claim \
                     outlives its handler and the completion write",
                    self.lease_duration, self.handler_timeout
                ),
            });
        }
        limits::check_count("concurrency", self.concurrency, MAX_CONCURRENCY)?;
        // `retry` is checked when it is built: `RetryPolicy::new` refuses a
        // cap above `MAX_DURATION`, and its fields cannot be set otherwise.
        if self.owner.is_empty() {
            return Err(Error::Config {
                field: "owner",
                reason: "must not be empty".into(),
            });
        }
        if self.owner.len() > MAX_OWNER_BYTES {
            return Err(Error::Config {
                field: "owner",
                reason: format!(
                    "{} bytes exceed {MAX_OWNER_BYTES}, what the lease_owner column holds",
                    self.owner.len()
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MAX_DURATION;

    /// One past the longest allowed duration.
    const TOO_LONG: Duration = MAX_DURATION.saturating_add(Duration::from_micros(1));

    #[test]
    fn every_setting_out_of_range_is_refused_by_name() {
        let default = WorkerConfig::default();
        default.validate().expect("the defaults are valid");
        // No `..`: a new setting does not compile here until it has cases below.
        let WorkerConfig {
            handler_timeout: _,
            lease_duration: _,
            concurrency: _,
            retry: _,
            owner: _,
        } = &default;
        let with = || default.clone();
        let cases = [
            ("handler_timeout", with().handler_timeout(Duration::ZERO)),
            (
                "handler_timeout",
                with()
                    .handler_timeout(TOO_LONG)
                    .lease_duration(MAX_DURATION),
            ),
            ("lease_duration", with().lease_duration(TOO_LONG)),
            ("lease_duration", with().lease_duration(Duration::ZERO)),
            (
                "lease_duration",
                with()
                    .handler_timeout(Duration::from_secs(5))
                    .lease_duration(Duration::from_secs(9)),
            ),
            ("concurrency", with().concurrency(0)),
            ("concurrency", with().concurrency(MAX_CONCURRENCY + 1)),
            ("owner", with().owner("")),
            ("owner", with().owner("w".repeat(MAX_OWNER_BYTES + 1))),
        ];
        for (field, config) in &cases {
            let refused = config.validate().expect_err(field);
            assert_eq!(refused.field(), Some(*field), "{config:?}: {refused}");
        }
        // `retry` can only be built through `RetryPolicy::new`, which refuses it.
        let refused = RetryPolicy::new(Duration::ZERO, TOO_LONG, 0.0).expect_err("retry.cap");
        assert_eq!(refused.field(), Some("retry.cap"));

        let mut named: Vec<&str> = cases.iter().map(|(field, _)| *field).collect();
        named.push("retry.cap");
        named.dedup();
        assert_eq!(
            named,
            [
                "handler_timeout",
                "lease_duration",
                "concurrency",
                "owner",
                "retry.cap"
            ]
        );
    }

    #[test]
    fn every_setting_at_its_bound_is_accepted() {
        let config = WorkerConfig::default()
            .handler_timeout(MAX_DURATION / 2)
            .lease_duration(MAX_DURATION)
            .concurrency(MAX_CONCURRENCY)
            .retry(RetryPolicy::new(MAX_DURATION, MAX_DURATION, 1.0).expect("cap at the bound"))
            .owner("w".repeat(MAX_OWNER_BYTES));
        config.validate().expect("bounds are inclusive");
        let smallest = WorkerConfig::default()
            .handler_timeout(Duration::from_nanos(1))
            .lease_duration(Duration::from_nanos(2))
            .concurrency(1)
            .owner("w");
        smallest
            .validate()
            .expect("the smallest settings are valid");
    }
}
