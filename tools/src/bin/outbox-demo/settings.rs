//! The demo's settings: quick retries and short leases, so that injected
//! failures and a killed relay resolve in seconds, on the relay's side and
//! the shipping service's.

use std::time::Duration;

use diesel_outbox_core::{RelayConfig, RetryPolicy, WorkerConfig};

/// Share of handler calls that fail (retryably).
pub(crate) const FAILURE_PERCENT: u8 = 10;

/// How long a claim holds a task: what a task claimed by the killed relay
/// waits before another relay may take it.
pub(crate) const LEASE: Duration = Duration::from_secs(3);

/// The backoff of a retried task, and of a message the shipping service
/// failed to apply: 100 ms doubling up to 1 s, with 20 % jitter.
pub(crate) fn retry() -> RetryPolicy {
    RetryPolicy::new(Duration::from_millis(100), Duration::from_secs(1), 0.2).unwrap_or_default()
}

/// Worker settings named `owner`.
pub(crate) fn worker(owner: &str) -> WorkerConfig {
    WorkerConfig::default()
        .owner(owner)
        .handler_timeout(Duration::from_secs(1))
        .lease_duration(LEASE)
        .retry(retry())
}

/// Relay settings.
pub(crate) fn relay() -> RelayConfig {
    RelayConfig::default()
        .poll_interval(Duration::from_millis(100))
        .retention(None)
}
