//! The background delivery loop: [`Relay`].
//!
//! A relay claims due tasks in batches with `SKIP LOCKED`, runs their handlers
//! as tokio tasks (at most the worker's concurrency at once), writes results
//! back in batches, and sleeps until the next due time, a wake-up or the poll
//! interval. Any number of relays may run, in one process or many, without a
//! distributed lock: claims never overlap and completion writes are fenced.

mod config;
mod inflight;

use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use config::RelayConfig;

use self::inflight::Inflight;
use crate::{
    BatchRequest, Maintenance, Result, Status, Wakeups, Worker, telemetry, transition::Completion,
};

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
    /// Handlers cut at shutdown, their claims given back.
    pub released: u64,
    /// Finished tasks purged for retention.
    pub purged: u64,
    /// Database errors met and logged (the relay kept going).
    pub errors: u64,
}

/// The background loop that delivers whatever was not sent right after commit.
///
/// ```no_run
/// # async fn demo<S: outbox_core::Maintenance>(worker: outbox_core::Worker<S>) -> outbox_core::Result<()> {
/// use outbox_core::{Relay, RelayConfig};
/// use tokio_util::sync::CancellationToken;
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
        Ok(Self { worker, config })
    }

    /// The relay's settings.
    pub fn config(&self) -> &RelayConfig {
        &self.config
    }

    /// Runs until `shutdown` is cancelled, then stops claiming, waits for
    /// running handlers up to `shutdown_timeout`, cuts the rest and gives
    /// their claims back, writes every result, and returns.
    ///
    /// Database errors never end the loop: they are logged and counted, and
    /// the relay tries again after the poll interval.
    pub async fn run(&self, shutdown: CancellationToken) -> RelayReport {
        let mut report = RelayReport::default();
        let mut inflight = Inflight::new(self.worker.clone());
        let mut done: Vec<Completion> = Vec::new();
        let mut wakeups = self.subscribe(&mut report).await;
        let mut next_purge = Instant::now();
        let mut resubscribe_at = Instant::now() + self.config.purge_interval;
        // Claim a full batch whenever fewer than half a batch wait for a
        // handler: at the first pass, after a sleep or a wake-up, and while
        // the last claim came back full (a backlog remains).
        let threshold = self.config.batch_size.div_ceil(2);
        let mut claim_now = true;
        let mut more = false;
        while !shutdown.is_cancelled() {
            if Instant::now() >= next_purge {
                self.maintain(&mut report).await;
                next_purge = Instant::now() + self.config.purge_interval;
            }
            if wakeups.is_none() && Instant::now() >= resubscribe_at {
                wakeups = self.subscribe(&mut report).await;
                resubscribe_at = Instant::now() + self.config.purge_interval;
            }
            inflight.reap(&mut done);
            inflight.start(&mut done);
            let mut failed_claim = false;
            if (claim_now || more) && inflight.queued() < threshold {
                claim_now = false;
                match self.claim(&mut inflight, &mut report).await {
                    Ok(full) => more = full,
                    Err(()) => (more, failed_claim) = (false, true),
                }
                inflight.start(&mut done);
            }
            if done.len() >= self.config.batch_size || (inflight.is_empty() && !done.is_empty()) {
                self.write(&mut done, &mut report).await;
            }
            if more && inflight.queued() < threshold {
                continue;
            }
            let sleep = if more {
                Duration::MAX // wait for handlers to take queued tasks
            } else if failed_claim || !inflight.is_empty() {
                self.config.poll_interval
            } else {
                self.idle_delay(&mut report).await
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => {}
                joined = inflight.next(), if inflight.running() > 0 => done.extend(joined),
                () = sleep_for(sleep), if !more => claim_now = true,
                woken = next_wakeup(&mut wakeups), if !more => {
                    claim_now = true;
                    if woken.is_none() {
                        tracing::warn!("relay lost its wake-up stream; polling until it resubscribes");
                        wakeups = None;
                    }
                }
            }
        }
        self.drain(inflight, &mut done).await;
        self.write(&mut done, &mut report).await;
        report
    }

    /// Claims a batch of due tasks into the queue. `Ok(true)` when the claim
    /// came back full (more may be due).
    async fn claim(
        &self,
        inflight: &mut Inflight<S>,
        report: &mut RelayReport,
    ) -> Result<bool, ()> {
        let request = BatchRequest {
            lease: self.worker.lease_request(),
            limit: self.config.batch_size,
            after: None,
            due_by: None,
        };
        let claimed_at = std::time::Instant::now();
        let records = match self.worker.store().claim_due(&request).await {
            Ok(records) => records,
            Err(error) => {
                report.errors += 1;
                tracing::warn!(%error, "relay could not claim tasks");
                return Err(());
            }
        };
        let full = records.len() == request.limit;
        for record in records {
            if record.status == Status::Failed {
                report.expired += 1;
                telemetry::expired(1);
            } else {
                report.claimed += 1;
                inflight.queue(record, claimed_at);
            }
        }
        Ok(full)
    }

    /// Writes the collected results (fenced); on a database error they are
    /// kept and written with the next batch.
    async fn write(&self, done: &mut Vec<Completion>, report: &mut RelayReport) {
        if done.is_empty() {
            return;
        }
        match self.worker.write(done).await {
            Ok(_) => {
                for completion in done.drain(..) {
                    match (completion.status, &completion.last_error) {
                        (Status::Succeeded, _) => report.succeeded += 1,
                        (Status::Failed, _) => report.failed += 1,
                        (Status::Pending, Some(_)) => report.retried += 1,
                        (Status::Pending, None) => report.released += 1,
                    }
                }
            }
            Err(error) => {
                report.errors += 1;
                tracing::warn!(%error, pending = done.len(), "relay could not write results; will retry");
            }
        }
    }

    /// After shutdown: gives back claims not started yet, waits for running
    /// handlers up to the deadline, then cuts the rest and gives their claims
    /// back too.
    async fn drain(&self, mut inflight: Inflight<S>, done: &mut Vec<Completion>) {
        inflight.release_queued(done);
        let deadline = tokio::time::sleep(self.config.shutdown_timeout);
        tokio::pin!(deadline);
        while inflight.running() > 0 {
            tokio::select! {
                joined = inflight.next() => done.extend(joined),
                () = &mut deadline => {
                    tracing::warn!(
                        cut = inflight.running(),
                        "relay shut down with handlers still running; their claims are given back"
                    );
                    inflight.abort(done).await;
                    return;
                }
            }
        }
    }

    /// How long to sleep when nothing is claimable: until the next due task,
    /// at most the poll interval.
    async fn idle_delay(&self, report: &mut RelayReport) -> Duration {
        match self.worker.store().next_due().await {
            Ok(Some(due_in)) if !due_in.is_zero() => due_in.min(self.config.poll_interval),
            Ok(_) => self.config.poll_interval,
            Err(error) => {
                report.errors += 1;
                tracing::warn!(%error, "relay could not read the next due time");
                self.config.poll_interval
            }
        }
    }

    /// Applies retention and refreshes the backlog gauge.
    async fn maintain(&self, report: &mut RelayReport) {
        let store = self.worker.store();
        if let Some(retention) = self.config.retention {
            match store
                .purge_finished(retention, self.config.purge_batch)
                .await
            {
                Ok(purged) => report.purged += purged,
                Err(error) => {
                    report.errors += 1;
                    tracing::warn!(%error, "relay could not purge finished tasks");
                }
            }
        }
        match store.stats().await {
            Ok(stats) => telemetry::backlog(stats.pending),
            Err(error) => {
                report.errors += 1;
                tracing::warn!(%error, "relay could not read stats");
            }
        }
    }

    async fn subscribe(&self, report: &mut RelayReport) -> Option<Wakeups> {
        match self.worker.store().wakeups().await {
            Ok(wakeups) => wakeups,
            Err(error) => {
                report.errors += 1;
                tracing::warn!(%error, "relay could not subscribe to wake-ups; polling");
                None
            }
        }
    }
}

/// Sleeps for `duration`; `Duration::MAX` sleeps forever.
async fn sleep_for(duration: Duration) {
    match Instant::now().checked_add(duration) {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

/// The next wake-up, or never when there is no stream; `None` when it ended.
async fn next_wakeup(wakeups: &mut Option<Wakeups>) -> Option<()> {
    match wakeups {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}
