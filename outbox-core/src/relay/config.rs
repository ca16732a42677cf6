//! Relay settings: [`RelayConfig`] with documented defaults and bounds.

use std::time::Duration;

use crate::{
    Error, Result, WorkerConfig,
    limits::{self, MAX_BATCH_SIZE},
};

/// How a [`Relay`](crate::Relay) runs. Handler timeout, lease duration,
/// concurrency and retry policy come from the worker's
/// [`WorkerConfig`](crate::WorkerConfig).
///
/// Start from the defaults and change what you need with the setters, each
/// named like its setting; the fields stay readable. [`Relay::new`] checks the
/// result with [`validate_with`](Self::validate_with).
///
/// ```
/// use std::time::Duration;
/// use diesel_outbox_core::RelayConfig;
///
/// let config = RelayConfig::default()
///     .batch_size(500)
///     .poll_interval(Duration::from_secs(5))
///     .retention(Duration::from_secs(30 * 24 * 3600));
/// config.validate()?;
/// assert_eq!(config.batch_size, 500);
/// # Ok::<(), diesel_outbox_core::Error>(())
/// ```
///
/// | setting | default | allowed | meaning |
/// |---|---|---|---|
/// | `batch_size` | 100 | 1 to [`MAX_BATCH_SIZE`] (5,000) | most tasks one claim takes, and results per completion write |
/// | `poll_interval` | 1 s | positive, at most 100 years | longest sleep when nothing is available (a wake-up or a promotion ends it sooner); also the longest time between two promotion and rescue steps |
/// | `shutdown_timeout` | 10 s | at most 100 years | how long `run` waits for running handlers after shutdown is requested |
/// | `retention` | 7 days | `None`, or at most 100 years | finished tasks older than this are purged; `None` keeps them |
/// | `purge_interval` | 60 s | positive, at most 100 years | how often retention is applied and the status gauges refreshed; a purge that finds more than a few statements' worth of rows goes on at the next maintenance pass, after its promotion and rescue and a pause as long as its pass took (none once the cycle has run for a whole `purge_interval`), until nothing is left |
/// | `purge_batch` | 1,000 | 1 to [`MAX_BATCH_SIZE`] (5,000) | rows per maintenance statement: purge, promotion of due waiting tasks, rescue of lapsed leases |
/// | `write_delay` | 20 ms | positive, shorter than the worker's `lease_duration` | longest time a finished result waits before the relay writes it back, however full the batch |
/// | `max_unwritten` | 1,000 | at least 1 | results waiting for a write beyond which the relay stops claiming until they are written |
///
/// 100 years is [`MAX_DURATION`](crate::limits::MAX_DURATION).
///
/// [`Relay::new`]: crate::Relay::new
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayConfig {
    /// Most tasks one claim takes, and results per completion write.
    pub batch_size: usize,
    /// Longest sleep when nothing is available, and longest time between two
    /// promotion and rescue steps.
    pub poll_interval: Duration,
    /// How long `run` waits for running handlers after shutdown is requested.
    pub shutdown_timeout: Duration,
    /// Finished tasks older than this are purged; `None` keeps them.
    pub retention: Option<Duration>,
    /// How often retention is applied and the status gauges refreshed.
    pub purge_interval: Duration,
    /// Rows per maintenance statement: purge, promotion, rescue.
    pub purge_batch: usize,
    /// Longest time a finished result waits before the relay writes it back,
    /// however full the batch of results is.
    pub write_delay: Duration,
    /// Results waiting for a write beyond which the relay stops claiming
    /// until they are written.
    pub max_unwritten: usize,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            batch_size: 100,
            poll_interval: Duration::from_secs(1),
            shutdown_timeout: Duration::from_secs(10),
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
            purge_interval: Duration::from_secs(60),
            purge_batch: 1000,
            write_delay: Duration::from_millis(20),
            max_unwritten: 1000,
        }
    }
}

impl RelayConfig {
    /// Sets the most tasks one claim takes, and results per completion write.
    #[must_use]
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Sets the longest sleep when nothing is available, and the longest
    /// time between two promotion and rescue steps.
    #[must_use]
    pub fn poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// Sets how long `run` waits for running handlers after shutdown is
    /// requested.
    #[must_use]
    pub fn shutdown_timeout(mut self, shutdown_timeout: Duration) -> Self {
        self.shutdown_timeout = shutdown_timeout;
        self
    }

    /// Sets how long finished tasks are kept: a duration, or `None` to keep
    /// them for ever.
    #[must_use]
    pub fn retention(mut self, retention: impl Into<Option<Duration>>) -> Self {
        self.retention = retention.into();
        self
    }

    /// Sets how often retention is applied and the status gauges refreshed.
    #[must_use]
    pub fn purge_interval(mut self, purge_interval: Duration) -> Self {
        self.purge_interval = purge_interval;
        self
    }

    /// Sets the rows per maintenance statement: purge, promotion, rescue.
    #[must_use]
    pub fn purge_batch(mut self, purge_batch: usize) -> Self {
        self.purge_batch = purge_batch;
        self
    }

    /// Sets the longest time a finished result waits before the relay writes
    /// it back, however full the batch of results is.
    #[must_use]
    pub fn write_delay(mut self, write_delay: Duration) -> Self {
        self.write_delay = write_delay;
        self
    }

    /// Sets how many results may wait for a write before the relay stops
    /// claiming until they are written.
    #[must_use]
    pub fn max_unwritten(mut self, max_unwritten: usize) -> Self {
        self.max_unwritten = max_unwritten;
        self
    }

    /// Checks every setting against its bounds (see the table on
    /// [`RelayConfig`]); [`Error::Config`] names the first one that does not
    /// fit. What depends on the worker's settings is checked by
    /// [`validate_with`](Self::validate_with).
    ///
    /// ```
    /// use diesel_outbox_core::RelayConfig;
    ///
    /// let config = RelayConfig::default().batch_size(0);
    /// assert_eq!(config.validate().unwrap_err().field(), Some("batch_size"));
    /// ```
    pub fn validate(&self) -> Result<()> {
        limits::check_count("batch_size", self.batch_size, MAX_BATCH_SIZE)?;
        limits::check_positive_duration("poll_interval", self.poll_interval)?;
        limits::check_duration("shutdown_timeout", self.shutdown_timeout)?;
        if let Some(retention) = self.retention {
            limits::check_duration("retention", retention)?;
        }
        limits::check_positive_duration("purge_interval", self.purge_interval)?;
        limits::check_count("purge_batch", self.purge_batch, MAX_BATCH_SIZE)?;
        limits::check_positive_duration("write_delay", self.write_delay)?;
        if self.max_unwritten == 0 {
            return Err(Error::Config {
                field: "max_unwritten",
                reason: "must be at least 1".into(),
            });
        }
        Ok(())
    }

    /// [`validate`](Self::validate), and that the settings work with the
    /// worker's: `write_delay` must be shorter than `lease_duration`, or a
    /// result could wait until its claim had lapsed and been taken over.
    /// [`Relay::new`](crate::Relay::new) calls this.
    ///
    /// ```
    /// use std::time::Duration;
    /// use diesel_outbox_core::{RelayConfig, WorkerConfig};
    ///
    /// let worker = WorkerConfig::default().lease_duration(Duration::from_secs(30));
    /// let config = RelayConfig::default().write_delay(Duration::from_secs(30));
    /// assert_eq!(config.validate_with(&worker).unwrap_err().field(), Some("write_delay"));
    /// ```
    pub fn validate_with(&self, worker: &WorkerConfig) -> Result<()> {
        self.validate()?;
        if self.write_delay >= worker.lease_duration {
            return Err(Error::Config {
                field: "write_delay",
                reason: format!(
                    "{:?} must be shorter than the worker's lease {:?}: a result held \
                     back that long would find its claim lapsed and taken over",
                    self.write_delay, worker.lease_duration
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
        let worker = WorkerConfig::default();
        let default = RelayConfig::default();
        default
            .validate_with(&worker)
            .expect("the defaults are valid");
        // No `..`: a new setting does not compile here until it has cases below.
        let RelayConfig {
            batch_size: _,
            poll_interval: _,
            shutdown_timeout: _,
            retention: _,
            purge_interval: _,
            purge_batch: _,
            write_delay: _,
            max_unwritten: _,
        } = &default;
        let with = || default.clone();
        let cases = [
            ("batch_size", with().batch_size(0)),
            ("batch_size", with().batch_size(MAX_BATCH_SIZE + 1)),
            ("poll_interval", with().poll_interval(Duration::ZERO)),
            ("poll_interval", with().poll_interval(TOO_LONG)),
            ("shutdown_timeout", with().shutdown_timeout(TOO_LONG)),
            ("retention", with().retention(TOO_LONG)),
            ("purge_interval", with().purge_interval(Duration::ZERO)),
            ("purge_interval", with().purge_interval(TOO_LONG)),
            ("purge_batch", with().purge_batch(0)),
            ("purge_batch", with().purge_batch(MAX_BATCH_SIZE + 1)),
            ("write_delay", with().write_delay(Duration::ZERO)),
            ("write_delay", with().write_delay(TOO_LONG)),
            ("write_delay", with().write_delay(worker.lease_duration)),
            ("max_unwritten", with().max_unwritten(0)),
        ];
        for (field, config) in &cases {
            let refused = config.validate_with(&worker).expect_err(field);
            assert_eq!(refused.field(), Some(*field), "{config:?}: {refused}");
        }
        let mut named: Vec<&str> = cases.iter().map(|(field, _)| *field).collect();
        named.dedup();
        assert_eq!(
            named,
            [
                "batch_size",
                "poll_interval",
                "shutdown_timeout",
                "retention",
                "purge_interval",
                "purge_batch",
                "write_delay",
                "max_unwritten"
            ]
        );
    }

    #[test]
    fn every_setting_at_its_bound_is_accepted() {
        let worker = WorkerConfig::default()
            .handler_timeout(MAX_DURATION / 2)
            .lease_duration(MAX_DURATION);
        let largest = RelayConfig::default()
            .batch_size(MAX_BATCH_SIZE)
            .poll_interval(MAX_DURATION)
            .shutdown_timeout(MAX_DURATION)
            .retention(MAX_DURATION)
            .purge_interval(MAX_DURATION)
            .purge_batch(MAX_BATCH_SIZE)
            .write_delay(MAX_DURATION - Duration::from_nanos(1))
            .max_unwritten(usize::MAX);
        largest
            .validate_with(&worker)
            .expect("bounds are inclusive");
        let smallest = RelayConfig::default()
            .batch_size(1)
            .poll_interval(Duration::from_nanos(1))
            .shutdown_timeout(Duration::ZERO)
            .retention(Duration::ZERO)
            .purge_interval(Duration::from_nanos(1))
            .purge_batch(1)
            .write_delay(Duration::from_nanos(1))
            .max_unwritten(1);
        smallest
            .validate_with(&worker)
            .expect("the smallest settings are valid");
        RelayConfig::default()
            .retention(None)
            .validate_with(&worker)
            .expect("no retention is valid");
    }
}
