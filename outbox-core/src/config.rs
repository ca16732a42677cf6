//! Worker settings: [`WorkerConfig`] with documented defaults.

use std::time::Duration;

use crate::{Error, Result, RetryPolicy};

/// How a [`Worker`](crate::Worker) sends.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | `handler_timeout` | 5 s | a handler running longer is cut; the attempt is a retryable failure |
/// | `lease_duration` | 30 s | how long a claim lasts; at least twice `handler_timeout` |
/// | `concurrency` | 32 | handlers running at once within a round |
/// | `retry` | [`RetryPolicy::default`] | backoff between attempts |
/// | `owner` | `worker-<pid>-<random>` | the name written into `lease_owner` |
#[derive(Debug, Clone)]
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
    /// Checks that the settings can work together.
    pub fn validate(&self) -> Result<()> {
        if self.handler_timeout.is_zero() {
            return Err(Error::Config {
                field: "handler_timeout",
                reason: "must be positive".into(),
            });
        }
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
        if self.concurrency == 0 {
            return Err(Error::Config {
                field: "concurrency",
                reason: "must be at least 1".into(),
            });
        }
        if self.owner.is_empty() {
            return Err(Error::Config {
                field: "owner",
                reason: "must not be empty".into(),
            });
        }
        Ok(())
    }
}
