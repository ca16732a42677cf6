//! Relay settings: [`RelayConfig`] with documented defaults.

use std::time::Duration;

use crate::{Error, Result};

/// How a [`Relay`](crate::Relay) runs. Handler timeout, lease duration,
/// concurrency and retry policy come from the worker's
/// [`WorkerConfig`](crate::WorkerConfig).
///
/// | setting | default | meaning |
/// |---|---|---|
/// | `batch_size` | 100 | most tasks one claim takes, and results per completion write |
/// | `poll_interval` | 1 s | longest sleep when nothing is due (a wake-up or the next due time ends it sooner) |
/// | `shutdown_timeout` | 10 s | how long `run` waits for running handlers after shutdown is requested |
/// | `retention` | 7 days | finished tasks older than this are purged; `None` keeps them |
/// | `purge_interval` | 60 s | how often retention is applied and the backlog gauge refreshed |
/// | `purge_batch` | 1,000 | rows per purge statement |
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Most tasks one claim takes, and results per completion write.
    pub batch_size: usize,
    /// Longest sleep when nothing is due.
    pub poll_interval: Duration,
    /// How long `run` waits for running handlers after shutdown is requested.
    pub shutdown_timeout: Duration,
    /// Finished tasks older than this are purged; `None` keeps them.
    pub retention: Option<Duration>,
    /// How often retention is applied.
    pub purge_interval: Duration,
    /// Rows per purge statement.
    pub purge_batch: usize,
    /// Longest time a finished result waits before it is written back.
    pub write_delay: Duration,
    /// Results waiting for a write beyond which the relay stops claiming.
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
    /// Checks that the settings can work.
    pub fn validate(&self) -> Result<()> {
        let positive = |field: &'static str, ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(Error::Config {
                    field,
                    reason: "must be positive".into(),
                })
            }
        };
        positive("batch_size", self.batch_size > 0)?;
        positive("poll_interval", !self.poll_interval.is_zero())?;
        positive("purge_interval", !self.purge_interval.is_zero())?;
        positive("purge_batch", self.purge_batch > 0)
    }
}
