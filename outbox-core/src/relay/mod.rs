//! The background delivery loop: [`Relay`].
//!
//! A relay claims available tasks in batches with `SKIP LOCKED`, as many as
//! it has free handler slots, runs their handlers as tokio tasks (at most the
//! worker's concurrency at once), writes results back in batches within the
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
mod writer;

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};
use tracing::{Instrument, Span};

pub use config::RelayConfig;

use self::{cursor::Cursor, inflight::Inflight, pacing::Decision, writer::ResultWriter};
use crate::{BatchRequest, Maintenance, Result, Wakeups, Worker, telemetry, transition};

/// After a wake-up stream ended, the relay subscribes again no sooner than
/// this (or its poll interval, if shorter) after its last subscription.
const RESUBSCRIBE_SPACING: Duration = Duration::from_secs(1);

/// Under a backlog, claims start from the lowest id again at least this
/// often (or every poll interval, if shorter); see [`Cursor`].
const CURSOR_RESTART: Duration = Duration::from_secs(1);

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
        let config = &self.config;
        let mut report = RelayReport::default();
        // A claim takes only as many tasks as there are free handler slots,
        // so no claim waits in a queue while its lease runs down. While a
        // backlog remains, claim again once half the slots are free, or
        // once all are when handlers are fast (see `Pacing`); after a sleep
        // or a wake-up, claim whatever is free.
        let slots = config.batch_size.min(self.worker.config().concurrency);
        let mut inflight = Inflight::new(self.worker.clone(), slots);
        // After a failed write, try again well within the lease.
        let retry_delay = config
            .poll_interval
            .min(self.worker.config().lease_duration / 4);
        let mut writer = ResultWriter::new(config.write_delay, config.batch_size, retry_delay);
        let (mut wakeups, mut resubscribe_in) = self.subscribe(&mut report).await;
        let mut subscribed_at = Instant::now();
        // The maintenance task wakes the claim loop when it made tasks
        // available; the claim loop wakes it when the next due time may
        // have moved (a retry written, a wake-up for new tasks).
        let available = Arc::new(tokio::sync::Notify::new());
        let rescheduled = Arc::new(tokio::sync::Notify::new());
        let stop_maintaining = CancellationToken::new();
        // Aborted if this future is dropped instead of shut down.
        let maintaining = AbortOnDropHandle::new(tokio::spawn(maintainer::run(
            self.worker.clone(),
            config.clone(),
            available.clone(),
            rescheduled.clone(),
            stop_maintaining.clone(),
        )));
        let mut resubscribe_at = later(Instant::now(), resubscribe_in);
        // Claim at once; afterwards when the poll timer or a wake-up says so,
        // or when handler slots free up under a backlog.
        let mut claim_now = true;
        let mut more = false;
        // Under a backlog each claim continues after the last one.
        let mut cursor = Cursor::new(config.poll_interval.min(CURSOR_RESTART));
        let mut poll_at: Option<Instant> = None;
        // The claim under way, in a task of its own so handlers' results are
        // taken and written while it runs.
        let mut claiming: Option<Claiming> = None;
        // A write started because nothing ran: claim after it, since what
        // it wrote may be due again soon (a retry).
        let mut idle_write = false;
        // A subscription to wake-ups under way, in a task of its own: a
        // database going away must not hold handlers' results or shutdown.
        let mut subscribing: Option<AbortOnDropHandle<Result<Option<Wakeups>>>> = None;
        while !shutdown.is_cancelled() {
            if wakeups.is_none() && subscribing.is_none() && Instant::now() >= resubscribe_at {
                let worker = self.worker.clone();
                subscribing = Some(AbortOnDropHandle::new(tokio::spawn(async move {
                    worker.store().wakeups().await
                })));
            }
            inflight.reap(&mut writer);
            if !writer.is_writing() {
                if inflight.is_empty()
                    && claiming.is_none()
                    && writer.waiting() > 0
                    && !writer.is_retrying()
                {
                    // Nothing runs that a later write could share a
                    // statement with, so write now.
                    writer.start(&self.worker);
                    idle_write = true;
                } else if writer.is_due() {
                    writer.start(&self.worker);
                }
            }
            if writer.take_retries_written() {
                rescheduled.notify_one();
            }
            let free = inflight.free();
            let backpressure = writer.len() >= config.max_unwritten;
            let pace = inflight.pace(Instant::now());
            if claiming.is_none()
                && (claim_now || (more && pace == Decision::Claim))
                && free > 0
                && !backpressure
            {
                claim_now = false;
                let after = cursor.next(Instant::now());
                claiming = Some(self.start_claim(free.min(config.batch_size), after));
            }
            // When to decide again if what still runs are slow handlers.
            let stragglers_at = match pace {
                Decision::Wait(at) if more && claiming.is_none() => at,
                _ => None,
            };
            let write_at = writer.deadline();
            tokio::select! {
                biased;
                () = shutdown.cancelled() => {}
                joined = inflight.next(), if inflight.running() > 0 => {
                    inflight.finish(joined, &mut writer);
                }
                subscribed = joined(&mut subscribing), if subscribing.is_some() => {
                    subscribing = None;
                    let result = subscribed.unwrap_or_else(|error| {
                        Err(crate::Error::database(format!("the subscription task ended abnormally: {error}")))
                    });
                    (wakeups, resubscribe_in) = self.subscription(result, &mut report);
                    subscribed_at = Instant::now();
                    resubscribe_at = later(subscribed_at, resubscribe_in);
                    if wakeups.is_some() {
                        // What was committed while nothing listened sent no
                        // wake-up that reached this relay: look once.
                        claim_now = true;
                    }
                }
                claimed = claimed(&mut claiming), if claiming.is_some() => {
                    let Some(claim) = claiming.take() else { continue };
                    if matches!(claimed, Ok(Ok(_))) {
                        inflight.claim_returned(claim.at);
                    }
                    let from_cursor = claim.after.is_some();
                    let started = self.started(
                        claimed,
                        &claim,
                        &mut inflight,
                        &mut writer,
                        &mut cursor,
                        &mut report,
                    );
                    more = started == Ok(true);
                    // The poll timer restarts only after a claim, so handlers
                    // finishing all the time never hold the next poll back.
                    let delay = match started {
                        Ok(true) => None, // a backlog: claim again as slots free up
                        // A short claim that started after the cursor says
                        // nothing of the ids below it: look there at once.
                        Ok(false) if from_cursor => {
                            claim_now = true;
                            None
                        }
                        // Tasks that become due are promoted by the maintenance
                        // task, which then wakes this loop.
                        Ok(false) | Err(()) => Some(config.poll_interval),
                    };
                    poll_at = delay.map(|delay| later(Instant::now(), delay));
                }
                written = writer.written(), if writer.is_writing() => {
                    writer.finish(written, &mut report);
                    if std::mem::take(&mut idle_write) && inflight.is_empty() {
                        claim_now = true;
                    }
                }
                () = sleep_until(write_at) => {}
                () = sleep_until(stragglers_at) => {}
                () = tokio::time::sleep_until(resubscribe_at), if wakeups.is_none() => {}
                () = sleep_until(poll_at), if !claim_now => {
                    claim_now = true;
                    poll_at = None;
                }
                () = available.notified(), if !claim_now && !more => {
                    claim_now = true;
                }
                woken = next_wakeup(&mut wakeups), if !claim_now && !more => {
                    claim_now = true;
                    // New tasks may be scheduled for later.
                    rescheduled.notify_one();
                    if woken.is_none() {
                        // Its connection ended (the server restarted, or a
                        // standby was promoted): subscribe again at once, on
                        // whichever server the pool reaches now; but no
                        // sooner than RESUBSCRIBE_SPACING (or a poll, if
                        // shorter) after the last subscription, so a server
                        // that keeps ending the session right after LISTEN
                        // is not asked in a tight loop.
                        tracing::warn!("relay lost its wake-up stream; polling until it resubscribes");
                        wakeups = None;
                        resubscribe_at = later(
                            subscribed_at,
                            config.poll_interval.min(RESUBSCRIBE_SPACING),
                        );
                    }
                }
            }
        }
        // A claim still under way: its tasks are given back unstarted.
        if let Some(claim) = claiming.take() {
            match tokio::time::timeout(config.shutdown_timeout, claim.task).await {
                Ok(Ok(Ok((mut records, _)))) => {
                    report.expired += self.worker.set_aside_expired(&mut records);
                    for record in records {
                        let fence = self.worker.fence(&record);
                        writer.push(
                            transition::release(fence),
                            later(claim.at, self.worker.config().lease_duration),
                        );
                    }
                }
                _ => report.errors += 1,
            }
        }
        stop_maintaining.cancel();
        self.drain(inflight, &mut writer).await;
        // The last write, bounded like the wait for handlers.
        let last_write = writer.flush(&self.worker, &mut report);
        if tokio::time::timeout(config.shutdown_timeout, last_write)
            .await
            .is_err()
        {
            report.errors += 1;
        }
        writer.abandon(&mut report);
        report.peak_unwritten = writer.peak() as u64;
        // Its statements are short, but a database that stopped answering
        // must not hold the shutdown: bounded like the last write.
        match tokio::time::timeout(config.shutdown_timeout, maintaining).await {
            Ok(Ok(maintained)) => {
                report.promoted += maintained.promoted;
                report.rescued += maintained.rescued;
                report.purged += maintained.purged;
                report.errors += maintained.errors;
            }
            Ok(Err(error)) => {
                report.errors += 1;
                tracing::warn!(%error, "relay maintenance task ended abnormally");
            }
            Err(_) => report.errors += 1,
        }
        report
    }

    /// Starts claiming up to `limit` available tasks with ids above `after`
    /// in a task of its own.
    fn start_claim(&self, limit: usize, after: Option<crate::TaskId>) -> Claiming {
        let request = BatchRequest {
            lease: self.worker.lease_request(),
            limit,
            after,
            due_by: None,
        };
        let worker = self.worker.clone();
        let cycle = telemetry::relay_cycle_span(limit);
        let claim = async move { worker.claim_due(&request).await }.instrument(cycle.clone());
        Claiming {
            at: Instant::now(),
            limit,
            after,
            task: AbortOnDropHandle::new(tokio::spawn(claim)),
            cycle,
        }
    }

    /// Starts the handlers of what `claim` took, and moves `cursor` on.
    /// `Ok(true)` when the claim came back full (more may be available).
    fn started(
        &self,
        claimed: Claimed,
        claim: &Claiming,
        inflight: &mut Inflight<S>,
        writer: &mut ResultWriter,
        cursor: &mut Cursor,
        report: &mut RelayReport,
    ) -> Result<bool, ()> {
        let (mut records, span) = match claimed {
            Ok(Ok(claimed)) => claimed,
            Ok(Err(error)) => {
                report.errors += 1;
                cursor.restart();
                tracing::warn!(error = %error.chain(), "relay could not claim tasks");
                return Err(());
            }
            Err(error) => {
                report.errors += 1;
                cursor.restart();
                tracing::warn!(%error, "relay's claim task ended abnormally");
                return Err(());
            }
        };
        let full = records.len() == claim.limit;
        cursor.claimed(&records, full);
        let expired = self.worker.set_aside_expired(&mut records);
        report.expired += expired;
        let started = records.len() as u64;
        for record in records {
            inflight.start(record, claim.at, span.clone(), writer);
        }
        report.claimed += started;
        claim
            .cycle
            .record("outbox.claimed", telemetry::int(started));
        claim
            .cycle
            .record("outbox.expired", telemetry::int(expired));
        Ok(full)
    }

    /// After shutdown: waits for running handlers up to the deadline, then
    /// cuts the rest and gives their claims back.
    async fn drain(&self, mut inflight: Inflight<S>, writer: &mut ResultWriter) {
        let deadline = sleep_for(self.config.shutdown_timeout);
        tokio::pin!(deadline);
        while inflight.running() > 0 {
            tokio::select! {
                joined = inflight.next() => inflight.finish(joined, writer),
                () = &mut deadline => {
                    tracing::warn!(
                        cut = inflight.running(),
                        "relay shut down with handlers still running; their claims are given back"
                    );
                    inflight.abort(writer).await;
                    return;
                }
            }
        }
    }

    /// Subscribes to the store's wake-ups, and says when to try again if
    /// there are none: after the poll interval when subscribing failed (the
    /// database may be back by then), after the purge interval when the
    /// store offers none.
    async fn subscribe(&self, report: &mut RelayReport) -> (Option<Wakeups>, Duration) {
        let result = self.worker.store().wakeups().await;
        self.subscription(result, report)
    }

    /// What a subscription came to, and when to try again if there is none.
    fn subscription(
        &self,
        result: Result<Option<Wakeups>>,
        report: &mut RelayReport,
    ) -> (Option<Wakeups>, Duration) {
        match result {
            Ok(wakeups) => (wakeups, self.config.purge_interval),
            Err(error) => {
                report.errors += 1;
                tracing::warn!(error = %error.chain(), "relay could not subscribe to wake-ups; polling");
                (None, self.config.poll_interval)
            }
        }
    }
}

/// A claim under way: its task, its size, when it started (its lease
/// started no earlier) and the span of the cycle it begins.
struct Claiming {
    task: AbortOnDropHandle<Result<(Vec<crate::Record>, Span)>>,
    limit: usize,
    /// The id it took tasks after; `None`: from the lowest.
    after: Option<crate::TaskId>,
    at: Instant,
    cycle: Span,
}

/// What a claim task came to: the records and the claim's span.
type Claimed = std::result::Result<Result<(Vec<crate::Record>, Span)>, tokio::task::JoinError>;

/// The outcome of the claim under way; never resolves when there is none.
async fn claimed(claiming: &mut Option<Claiming>) -> Claimed {
    match claiming {
        Some(claim) => (&mut claim.task).await,
        None => std::future::pending().await,
    }
}

/// The outcome of a task; never resolves when there is none.
async fn joined<T>(task: &mut Option<AbortOnDropHandle<T>>) -> Result<T, tokio::task::JoinError> {
    match task {
        Some(task) => task.await,
        None => std::future::pending().await,
    }
}

/// Sleeps for `duration`; `Duration::MAX` sleeps forever.
async fn sleep_for(duration: Duration) {
    match Instant::now().checked_add(duration) {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`; forever when there is no such instant.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// `at + duration`, or a year after `at` when that is past what an
/// `Instant` can hold (settings are bounded far below that).
fn later(at: Instant, duration: Duration) -> Instant {
    at.checked_add(duration)
        .or_else(|| at.checked_add(Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(at)
}

/// The next wake-up, or never when there is no stream; `None` when it ended.
async fn next_wakeup(wakeups: &mut Option<Wakeups>) -> Option<()> {
    match wakeups {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}
