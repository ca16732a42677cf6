//! One run of a relay's delivery loop: [`RelayLoop`].
//!
//! The loop's state lives in the fields of [`RelayLoop`]. Each turn first
//! decides what to start (a subscription, a write, a claim), then waits in
//! one `select!` for the next event and hands it to the method named for it.

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use tokio::{sync::Notify, task::JoinError, time::Instant};
use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};
use tracing::{Instrument, Span};

use super::{
    RelayConfig, RelayReport,
    cursor::Cursor,
    inflight::{Inflight, Joined},
    later,
    maintainer::{self, Maintained},
    pacing::Decision,
    writer::{ResultWriter, Written},
};
use crate::{
    BatchRequest, ClaimedTask, Maintenance, Result, TaskId, Wakeups, Worker, activity::Activity,
    telemetry, transition,
};

/// After a wake-up stream ended, the relay subscribes again no sooner than
/// this (or its poll interval, if shorter) after its last subscription.
const RESUBSCRIBE_SPACING: Duration = Duration::from_secs(1);

/// Under a backlog, claims start from the lowest id again at least this
/// often (or every poll interval, if shorter); see [`Cursor`].
const CURSOR_RESTART: Duration = Duration::from_secs(1);

/// The state of one [`Relay::run`](super::Relay::run), from its start to its
/// report, and one method per event its loop waits for.
///
/// Fields drop in declaration order: should the run be dropped rather than
/// shut down, the subscription and the claim under way are aborted first,
/// then the maintenance task, the write under way, and the handlers last.
pub(super) struct RelayLoop<'a, S> {
    /// A subscription to wake-ups under way, in a task of its own: a
    /// database going away must not hold handlers' results or shutdown.
    subscribing: Option<AbortOnDropHandle<Result<Option<Wakeups>>>>,
    /// A write started because nothing ran: claim after it, since what it
    /// wrote may be due again soon (a retry).
    idle_write: bool,
    /// The claim under way, in a task of its own so handlers' results are
    /// taken and written while it runs.
    claiming: Option<Claiming>,
    /// When the poll timer says to claim: set after each claim (`None` when
    /// a backlog or a short claim from the cursor calls for the next one
    /// sooner), cleared once it fires.
    poll_at: Option<Instant>,
    /// Under a backlog each claim continues after the last one.
    cursor: Cursor,
    /// Whether the last claim came back full: while a backlog remains, claim
    /// again as handler slots free up (see `Pacing`).
    more: bool,
    /// Claim at the next turn, whatever slots are free: at once when the run
    /// starts; afterwards when the poll timer, the maintenance task, a
    /// wake-up or a new subscription says so, or when what was just claimed
    /// or written says more may be available.
    claim_now: bool,
    /// When to subscribe to wake-ups again while there are none.
    resubscribe_at: Instant,
    /// The maintenance task. Aborted if this loop is dropped instead of shut
    /// down.
    maintaining: AbortOnDropHandle<Maintained>,
    /// Tells the maintenance task to stop, at shutdown.
    stop_maintaining: CancellationToken,
    /// The claim loop wakes the maintenance task through this when the next
    /// due time may have moved (a retry written, a wake-up for new tasks).
    rescheduled: Arc<Notify>,
    /// The maintenance task wakes the claim loop through this when it made
    /// tasks available.
    available: Arc<Notify>,
    /// When it last claimed tasks and wrote results, for its heartbeats.
    activity: Arc<Activity>,
    /// When the last subscription to wake-ups came back, whatever it came to.
    subscribed_at: Instant,
    /// The store's wake-ups; `None` when it offers none, when subscribing
    /// failed, or once the stream ended, until a subscription succeeds.
    wakeups: Option<Wakeups>,
    /// Handlers' results on their way back to the table.
    writer: ResultWriter,
    /// The handlers running.
    inflight: Inflight<S>,
    /// What the run did so far.
    report: RelayReport,
    /// The relay's settings.
    config: &'a RelayConfig,
    /// The relay's store, handlers and settings.
    worker: &'a Worker<S>,
}

impl<'a, S: Maintenance> RelayLoop<'a, S> {
    /// Starts a run of the relay sending through `worker` with `config`:
    /// subscribes to wake-ups, and spawns the maintenance task.
    pub(super) async fn start(worker: &'a Worker<S>, config: &'a RelayConfig) -> Self {
        let mut report = RelayReport::default();
        // A claim takes only as many tasks as there are free handler slots,
        // so no claim waits in a queue while its lease runs down. While a
        // backlog remains, claim again once half the slots are free, or
        // once all are when handlers are fast (see `Pacing`); after a sleep
        // or a wake-up, claim whatever is free.
        let slots = config.batch_size.min(worker.config().concurrency);
        let inflight = Inflight::new(worker.clone(), slots);
        // After a failed write, try again well within the lease.
        let retry_delay = config.poll_interval.min(worker.config().lease_duration / 4);
        let writer = ResultWriter::new(config.write_delay, config.batch_size, retry_delay);
        let subscribed = worker.store().wakeups().await;
        let (wakeups, resubscribe_in) = subscription(subscribed, config, &mut report);
        let subscribed_at = Instant::now();
        let available = Arc::new(Notify::new());
        let rescheduled = Arc::new(Notify::new());
        let stop_maintaining = CancellationToken::new();
        let activity = Arc::new(Activity::new());
        let maintaining = AbortOnDropHandle::new(tokio::spawn(maintainer::run(
            worker.clone(),
            config.clone(),
            maintainer::Signals {
                available: available.clone(),
                rescheduled: rescheduled.clone(),
                activity: activity.clone(),
            },
            stop_maintaining.clone(),
        )));
        let resubscribe_at = later(Instant::now(), resubscribe_in);
        Self {
            subscribing: None,
            idle_write: false,
            claiming: None,
            poll_at: None,
            cursor: Cursor::new(config.poll_interval.min(CURSOR_RESTART)),
            more: false,
            claim_now: true,
            resubscribe_at,
            maintaining,
            stop_maintaining,
            rescheduled,
            available,
            activity,
            subscribed_at,
            wakeups,
            writer,
            inflight,
            report,
            config,
            worker,
        }
    }

    /// Runs the loop until `shutdown` is cancelled, then shuts down
    /// ([`shut_down`](Self::shut_down)) and returns the report.
    ///
    /// Every turn drops the futures of the `select!` that did not finish, so
    /// each of them must be cancel-safe, and is: the next result of a
    /// handler or end of a claim's task ([`tokio::sync::mpsc::UnboundedReceiver::recv`]
    /// and [`tokio::task::JoinSet::join_next_with_id`]), awaiting a task through
    /// `&mut` its handle (the subscription, the claim, the write), the next
    /// item of the wake-up stream, a [`Notify`] notification (a dropped
    /// `notified()` that was notified passes the notification on) and sleeps
    /// until instants kept in fields or recomputed each turn.
    pub(super) async fn run(mut self, shutdown: CancellationToken) -> RelayReport {
        while !shutdown.is_cancelled() {
            self.subscribe_if_due();
            self.write_if_due();
            let pace = self.claim_if_due();
            let stragglers_at = self.stragglers_at(pace);
            let write_at = self.writer.deadline();
            tokio::select! {
                biased;
                // The loop's condition ends it.
                () = shutdown.cancelled() => {}
                joined = self.inflight.next(), if self.inflight.running() > 0 => {
                    self.on_handler_finished(joined);
                }
                subscribed = joined(&mut self.subscribing), if self.subscribing.is_some() => {
                    self.on_subscribed(subscribed);
                }
                claimed = claimed(&mut self.claiming), if self.claiming.is_some() => {
                    self.on_claimed(claimed);
                }
                written = self.writer.written(), if self.writer.is_writing() => {
                    self.on_written(written);
                }
                // Timers that only wake the loop: the results are due for
                // their write, the handlers still running are stragglers (so
                // the free slots are claimed), or it is time to subscribe
                // again. The next turn starts what is due.
                () = sleep_until(write_at) => {}
                () = sleep_until(stragglers_at) => {}
                () = tokio::time::sleep_until(self.resubscribe_at), if self.wakeups.is_none() => {}
                () = sleep_until(self.poll_at), if !self.claim_now => self.on_poll_due(),
                () = self.available.notified(), if !self.claim_now && !self.more => {
                    self.on_available();
                }
                woken = next_wakeup(&mut self.wakeups), if !self.claim_now && !self.more => {
                    self.on_wakeup(woken);
                }
            }
        }
        self.shut_down().await
    }

    /// Subscribes to wake-ups again, in a task of its own, if there are none,
    /// no subscription is under way and its time has come.
    fn subscribe_if_due(&mut self) {
        if self.wakeups.is_none()
            && self.subscribing.is_none()
            && Instant::now() >= self.resubscribe_at
        {
            let worker = self.worker.clone();
            self.subscribing = Some(AbortOnDropHandle::new(tokio::spawn(async move {
                worker.store().wakeups().await
            })));
        }
    }

    /// Hands the results of handlers that finished to the writer, starts a
    /// write if one is due (or nothing else runs), and wakes the maintenance
    /// task if a write scheduled a retry.
    fn write_if_due(&mut self) {
        self.inflight.reap(&mut self.writer);
        if !self.writer.is_writing() {
            if self.inflight.is_empty()
                && self.claiming.is_none()
                && self.writer.waiting() > 0
                && !self.writer.is_retrying()
            {
                // Nothing runs that a later write could share a
                // statement with, so write now.
                self.writer.start(self.worker);
                self.idle_write = true;
            } else if self.writer.is_due() {
                self.writer.start(self.worker);
            }
        }
        if self.writer.take_retries_written() {
            self.rescheduled.notify_one();
        }
    }

    /// Starts a claim for the free handler slots if none is under way, one is
    /// called for (or a backlog remains and [`Pacing`](super::pacing::Pacing)
    /// says so) and unwritten results leave room. Returns what pacing said.
    fn claim_if_due(&mut self) -> Decision {
        let free = self.inflight.free();
        let backpressure = self.writer.len() >= self.config.max_unwritten;
        let pace = self.inflight.pace(Instant::now());
        // Every slot taken by batches: the next batch is claimed while they
        // run, and starts as their slots free.
        let ahead = free == 0 && self.inflight.can_claim_ahead();
        if self.claiming.is_none()
            && !self.inflight.has_queued()
            && (self.claim_now || (self.more && (pace == Decision::Claim || ahead)))
            && (free > 0 || ahead)
            && !backpressure
        {
            self.claim_now = false;
            let after = self.cursor.next(Instant::now());
            let limit = match ahead {
                true => self.config.batch_size.min(self.worker.config().concurrency),
                false => free.min(self.config.batch_size),
            };
            self.claiming = Some(self.start_claim(limit, after));
        }
        pace
    }

    /// When to decide again if what still runs are slow handlers (after
    /// `pace` said to wait under a backlog with no claim under way).
    fn stragglers_at(&self, pace: Decision) -> Option<Instant> {
        match pace {
            Decision::Wait(at) if self.more && self.claiming.is_none() => at,
            _ => None,
        }
    }

    /// Event: a handler finished (or its task ended); its result waits for
    /// its write.
    fn on_handler_finished(&mut self, joined: Joined) {
        self.inflight.finish(joined, &mut self.writer);
    }

    /// Event: the subscription under way came back, with wake-ups or not.
    fn on_subscribed(&mut self, subscribed: Subscribed) {
        self.subscribing = None;
        let result = subscribed.unwrap_or_else(|error| {
            Err(crate::Error::database(format!(
                "the subscription task ended abnormally: {error}"
            )))
        });
        let (wakeups, resubscribe_in) = subscription(result, self.config, &mut self.report);
        self.wakeups = wakeups;
        self.subscribed_at = Instant::now();
        self.resubscribe_at = later(self.subscribed_at, resubscribe_in);
        if self.wakeups.is_some() {
            // What was committed while nothing listened sent no
            // wake-up that reached this relay: look once.
            self.claim_now = true;
        }
    }

    /// Event: the claim under way came back; its handlers start, and the
    /// next claim is planned.
    fn on_claimed(&mut self, claimed: Claimed) {
        let Some(claim) = self.claiming.take() else {
            return;
        };
        if let Ok(Ok((tasks, _))) = &claimed {
            self.inflight.claim_returned(claim.at);
            if !tasks.is_empty() {
                self.activity.claimed();
            }
        }
        let from_cursor = claim.after.is_some();
        let started = self.started(claimed, &claim);
        self.more = started == Ok(true);
        // The poll timer restarts only after a claim, so handlers
        // finishing all the time never hold the next poll back.
        let delay = match started {
            Ok(true) => None, // a backlog: claim again as slots free up
            // A short claim that started after the cursor says
            // nothing of the ids below it: look there at once.
            Ok(false) if from_cursor => {
                self.claim_now = true;
                None
            }
            // Tasks that become due are promoted by the maintenance
            // task, which then wakes this loop.
            Ok(false) | Err(()) => Some(self.config.poll_interval),
        };
        self.poll_at = delay.map(|delay| later(Instant::now(), delay));
    }

    /// Event: the write under way came back.
    fn on_written(&mut self, written: Written) {
        if matches!(&written, Ok((_, Ok(_)))) {
            self.activity.wrote();
        }
        self.writer.finish(written, &mut self.report);
        if std::mem::take(&mut self.idle_write) && self.inflight.is_empty() {
            self.claim_now = true;
        }
    }

    /// Event: the poll interval passed since the last claim.
    fn on_poll_due(&mut self) {
        self.claim_now = true;
        self.poll_at = None;
    }

    /// Event: the maintenance task made tasks available.
    fn on_available(&mut self) {
        self.claim_now = true;
    }

    /// Event: a wake-up came (`Some`), or the wake-up stream ended (`None`).
    fn on_wakeup(&mut self, woken: Option<()>) {
        self.claim_now = true;
        // New tasks may be scheduled for later.
        self.rescheduled.notify_one();
        if woken.is_none() {
            // Its connection ended (the server restarted, or a
            // standby was promoted): subscribe again at once, on
            // whichever server the pool reaches now; but no
            // sooner than RESUBSCRIBE_SPACING (or a poll, if
            // shorter) after the last subscription, so a server
            // that keeps ending the session right after LISTEN
            // is not asked in a tight loop.
            tracing::warn!("relay lost its wake-up stream; polling until it resubscribes");
            self.wakeups = None;
            self.resubscribe_at = later(
                self.subscribed_at,
                self.config.poll_interval.min(RESUBSCRIBE_SPACING),
            );
        }
    }

    /// Event: shutdown. Stops claiming, gives back a claim still under way,
    /// waits for running handlers up to `shutdown_timeout` and cuts the
    /// rest, writes every result it can within another `shutdown_timeout`,
    /// and returns the report, with what the maintenance task did.
    async fn shut_down(mut self) -> RelayReport {
        self.give_back_claim().await;
        self.inflight.give_back_queued(&mut self.writer);
        self.stop_maintaining.cancel();
        self.drain().await;
        // The last write, bounded like the wait for handlers.
        let last_write = self.writer.flush(self.worker, &mut self.report);
        if tokio::time::timeout(self.config.shutdown_timeout, last_write)
            .await
            .is_err()
        {
            self.report.errors += 1;
        }
        self.writer.abandon(&mut self.report);
        self.report.peak_unwritten = self.writer.peak() as u64;
        self.join_maintenance().await
    }

    /// Starts claiming up to `limit` available tasks with ids above `after`
    /// in a task of its own.
    fn start_claim(&self, limit: usize, after: Option<TaskId>) -> Claiming {
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

    /// Starts the handlers of what `claim` took, and moves the cursor on.
    /// `Ok(true)` when the claim came back full (more may be available).
    fn started(&mut self, claimed: Claimed, claim: &Claiming) -> Result<bool, ()> {
        let (mut records, span) = match claimed {
            Ok(Ok(claimed)) => claimed,
            Ok(Err(error)) => {
                self.report.errors += 1;
                self.cursor.restart();
                tracing::warn!(error = %error.chain(), "relay could not claim tasks");
                return Err(());
            }
            Err(error) => {
                self.report.errors += 1;
                self.cursor.restart();
                tracing::warn!(%error, "relay's claim task ended abnormally");
                return Err(());
            }
        };
        let full = records.len() == claim.limit;
        self.cursor.claimed(&records, full);
        let expired = self.worker.set_aside_expired(&mut records);
        self.report.expired += expired;
        let started = records.len() as u64;
        self.inflight
            .start(records, claim.at, &span, &mut self.writer);
        self.report.claimed += started;
        claim
            .cycle
            .record("outbox.claimed", telemetry::int(started));
        claim
            .cycle
            .record("outbox.expired", telemetry::int(expired));
        Ok(full)
    }

    /// At shutdown: waits up to `shutdown_timeout` for a claim still under
    /// way, and gives its tasks back unstarted.
    async fn give_back_claim(&mut self) {
        let Some(claim) = self.claiming.take() else {
            return;
        };
        match tokio::time::timeout(self.config.shutdown_timeout, claim.task).await {
            Ok(Ok(Ok((mut records, _)))) => {
                self.report.expired += self.worker.set_aside_expired(&mut records);
                for record in records {
                    let fence = self.worker.fence(&record);
                    self.writer.push(
                        transition::release(fence),
                        later(claim.at, self.worker.config().lease_duration),
                    );
                }
            }
            _ => self.report.errors += 1,
        }
    }

    /// After shutdown: waits for running handlers up to the deadline, then
    /// cuts the rest and gives their claims back.
    async fn drain(&mut self) {
        let deadline = sleep_for(self.config.shutdown_timeout);
        tokio::pin!(deadline);
        while self.inflight.running() > 0 {
            tokio::select! {
                joined = self.inflight.next() => self.inflight.finish(joined, &mut self.writer),
                () = &mut deadline => {
                    tracing::warn!(
                        cut = self.inflight.running(),
                        "relay shut down with handlers still running; their claims are given back"
                    );
                    self.inflight.abort(&mut self.writer).await;
                    return;
                }
            }
        }
    }

    /// The report, with what the maintenance task (told to stop) did. Its
    /// statements are short, but a database that stopped answering must not
    /// hold the shutdown: bounded like the last write.
    async fn join_maintenance(self) -> RelayReport {
        let mut report = self.report;
        match tokio::time::timeout(self.config.shutdown_timeout, self.maintaining).await {
            Ok(Ok(maintained)) => {
                report.promoted += maintained.promoted;
                report.rescued += maintained.rescued;
                report.purged += maintained.purged;
                report.purge_time += maintained.purge_time;
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
}

/// What a subscription came to, and when to try again if there are no
/// wake-ups: after the poll interval when subscribing failed (the database
/// may be back by then; the error is counted in `report`), after the purge
/// interval when the store offers none.
fn subscription(
    result: Result<Option<Wakeups>>,
    config: &RelayConfig,
    report: &mut RelayReport,
) -> (Option<Wakeups>, Duration) {
    match result {
        Ok(wakeups) => (wakeups, config.purge_interval),
        Err(error) => {
            report.errors += 1;
            tracing::warn!(error = %error.chain(), "relay could not subscribe to wake-ups; polling");
            (None, config.poll_interval)
        }
    }
}

/// A claim under way: its task, its size, when it started (its lease
/// started no earlier) and the span of the cycle it begins.
struct Claiming {
    /// The task running the claim.
    task: AbortOnDropHandle<Result<(Vec<ClaimedTask>, Span)>>,
    /// The most tasks it takes.
    limit: usize,
    /// The id it took tasks after; `None`: from the lowest.
    after: Option<TaskId>,
    /// When it started.
    at: Instant,
    /// The span of the cycle it begins.
    cycle: Span,
}

/// What a subscription task came to: the wake-ups, if the store offers any.
type Subscribed = Result<Result<Option<Wakeups>>, JoinError>;

/// What a claim task came to: the records and the claim's span.
type Claimed = Result<Result<(Vec<ClaimedTask>, Span)>, JoinError>;

/// The outcome of the claim under way; never resolves when there is none.
async fn claimed(claiming: &mut Option<Claiming>) -> Claimed {
    match claiming {
        Some(claim) => (&mut claim.task).await,
        None => std::future::pending().await,
    }
}

/// The outcome of a task; never resolves when there is none.
async fn joined<T>(task: &mut Option<AbortOnDropHandle<T>>) -> Result<T, JoinError> {
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

/// The next wake-up, or never when there is no stream; `None` when it ended.
async fn next_wakeup(wakeups: &mut Option<Wakeups>) -> Option<()> {
    match wakeups {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}
