//! The background delivery loop: [`Relay`].
//!
//! A relay claims available tasks in batches with `SKIP LOCKED`, as many as
//! it has free handler slots, runs their handlers at once (at most the
//! worker's concurrency; a claim's handlers share at most as many tokio tasks
//! as the runtime has worker threads), writes results back in batches within the
//! write delay, and sleeps until a wake-up, a promotion or the poll interval.
//! Beside that loop, a maintenance task promotes waiting tasks once due,
//! rescues lapsed leases, purges and counts, so none of that ever delays a
//! claim. Any number of relays may run, in one process or many, without a
//! distributed lock: claims never overlap and completion writes are fenced.

mod config;
mod cursor;
mod inflight;
pub(crate) mod maintainer;
mod pacing;
mod run_loop;
mod writer;

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use config::RelayConfig;

use self::run_loop::RelayLoop;
use crate::{Maintenance, Result, Worker, telemetry};

/// What one [`Relay::run`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayReport {
    /// Tasks claimed and handed to a handler.
    pub claimed: u64,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed and will be retried.
    pub retried: u64,
    /// Tasks that failed for good.
    pub failed: u64,
    /// Tasks found expired and marked failed unsent.
    pub expired: u64,
    /// Waiting tasks made available once due.
    pub promoted: u64,
    /// Running tasks whose lease lapsed, made available again (or failed
    /// when out of attempts).
    pub rescued: u64,
    /// Claims given back: never started (too little lease left after the
    /// claim) or cut at shutdown.
    pub released: u64,
    /// Results dropped unwritten because their lease lapsed first, or because
    /// neither they nor a failure in their place could be written. Their tasks
    /// are claimed and delivered again.
    pub dropped: u64,
    /// The most results that waited for a write at once.
    pub peak_unwritten: u64,
    /// Finished tasks purged for retention.
    pub purged: u64,
    /// Time spent purging them: each purge pass from its start to its last
    /// statement's answer (taking a pool connection and any failed
    /// statement included), without the pauses between passes. While a
    /// purge keeps up it is at most about half of the time its cycles ran.
    pub purge_time: Duration,
    /// Database errors met and logged (the relay and its maintenance task
    /// kept going).
    pub errors: u64,
}

/// The background loop that delivers whatever was not sent right after commit.
///
/// ```no_run
/// # async fn demo<S: diesel_outbox_core::Maintenance>(worker: diesel_outbox_core::Worker<S>) -> diesel_outbox_core::Result<()> {
/// use diesel_outbox_core::{Relay, RelayConfig};
/// use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};
///
/// let shutdown = CancellationToken::new();
/// let relay = Relay::new(worker, RelayConfig::default())?;
/// let running = tokio::spawn({
///     let shutdown = shutdown.clone();
///     async move { relay.run(shutdown).await }
/// });
/// // ... on SIGTERM:
/// shutdown.cancel();
/// let report = running.await.expect("the relay task");
/// # let _ = report;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Relay<S> {
    worker: Worker<S>,
    config: RelayConfig,
}

impl<S: Maintenance> Relay<S> {
    /// A relay sending through `worker` (its store, handlers and settings).
    pub fn new(worker: Worker<S>, config: RelayConfig) -> Result<Self> {
        config.validate_with(worker.config())?;
        telemetry::describe();
        Ok(Self { worker, config })
    }

    /// The relay's settings.
    pub fn config(&self) -> &RelayConfig {
        &self.config
    }

    /// Runs until `shutdown` is cancelled, then stops claiming, waits for
    /// running handlers up to `shutdown_timeout`, cuts the rest and gives
    /// their claims back, writes every result it can within another
    /// `shutdown_timeout`, and returns (what it could not write is counted in
    /// [`RelayReport::dropped`]).
    ///
    /// Database errors never end the loop: they are logged and counted, and
    /// the relay tries again after the poll interval.
    pub async fn run(&self, shutdown: CancellationToken) -> RelayReport {
        RelayLoop::start(&self.worker, &self.config)
            .await
            .run(shutdown)
            .await
    }
}

/// `at + duration`, or a year after `at` when that is past what an
/// `Instant` can hold (settings are bounded far below that).
fn later(at: Instant, duration: Duration) -> Instant {
    at.checked_add(duration)
        .or_else(|| at.checked_add(Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(at)
}
