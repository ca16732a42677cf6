//! The [`Worker`]: `send` right after commit, `send_async`, and `retry_pending`.

use std::{future::Future, sync::Arc};

use futures_util::FutureExt;
use tokio::{
    runtime::Handle,
    sync::{Semaphore, watch},
    task::JoinHandle,
};
use tracing::{Instrument, Span};

use crate::{
    BatchRequest, ClaimOutcome, ClaimedTask, Error, LeaseRequest, OutboxId, Registry, Result,
    Status, Store, TaskId, WorkerConfig,
    activity::Activity,
    attempt::run_handler,
    telemetry,
    transition::{self, Completion, Outcome},
};

/// Sends tasks through the registered handlers.
///
/// Cheap to clone; clones share the store, the registry and the runtime handle
/// captured when the worker was built.
#[derive(Debug)]
pub struct Worker<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for Worker<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

#[derive(Debug)]
struct Inner<S> {
    store: S,
    registry: Registry,
    config: WorkerConfig,
    runtime: Handle,
    /// How many `send_async` tasks are running.
    in_flight: watch::Sender<usize>,
    /// One permit per `send_async` allowed to run at once: `concurrency`.
    send_slots: Arc<Semaphore>,
    /// The store's outbox id, read before the first claim.
    outbox: tokio::sync::OnceCell<OutboxId>,
    /// `config.owner`, shared by the fences of every claim.
    owner: Arc<str>,
    /// When this worker last claimed and wrote, for its heartbeats.
    activity: Activity,
}

/// Counts one `send_async` task while it lives, even if it panics or is aborted.
struct InFlight(watch::Sender<usize>);

impl InFlight {
    fn start(counter: &watch::Sender<usize>) -> Self {
        counter.send_modify(|n| *n += 1);
        Self(counter.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl<S: Store> Worker<S> {
    /// A worker with the default [`WorkerConfig`].
    ///
    /// Must be called inside a tokio runtime: `send_async` spawns onto it.
    pub fn new(store: S, registry: Registry) -> Result<Self> {
        Self::with_config(store, registry, WorkerConfig::default())
    }

    /// A worker with explicit settings, validated here.
    pub fn with_config(store: S, registry: Registry, config: WorkerConfig) -> Result<Self> {
        config.validate()?;
        telemetry::describe();
        let runtime = Handle::try_current().map_err(|_| Error::Config {
            field: "runtime",
            reason: "a worker must be built inside a tokio runtime".into(),
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                registry,
                runtime,
                in_flight: watch::channel(0).0,
                send_slots: Arc::new(Semaphore::new(config.concurrency)),
                outbox: tokio::sync::OnceCell::new(),
                owner: config.owner.as_str().into(),
                activity: Activity::new(),
                config,
            }),
        })
    }

    /// The store this worker claims from.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The settings in use.
    pub fn config(&self) -> &WorkerConfig {
        &self.inner.config
    }

    /// When this worker last claimed tasks and wrote results, by whatever
    /// path: `send`, rounds, or a relay's claims and writes.
    pub(crate) fn activity(&self) -> &Activity {
        &self.inner.activity
    }

    pub(crate) fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Spawns `work` on the worker's runtime, counted by
    /// [`wait_idle`](Worker::wait_idle) while it runs.
    pub(crate) fn spawn_tracked(&self, work: impl Future<Output = ()> + Send + 'static) {
        let in_flight = InFlight::start(&self.inner.in_flight);
        self.inner.runtime.spawn(async move {
            let _in_flight = in_flight;
            work.await;
        });
    }

    pub(crate) fn lease_request(&self) -> LeaseRequest {
        LeaseRequest {
            owner: self.inner.config.owner.clone(),
            duration: self.inner.config.lease_duration,
        }
    }

    /// One attempt now; call it after the enqueuing transaction committed.
    ///
    /// `Ok` when the handler succeeded, or when the task had already
    /// succeeded (the handler is not called again). Otherwise the error says
    /// why: [`Error::Busy`], [`Error::NotDue`], [`Error::Blocked`],
    /// [`Error::Expired`], [`Error::Failed`], [`Error::Discarded`], [`Error::NotFound`],
    /// [`Error::NoHandler`] or [`Error::Handler`]. A failed attempt is
    /// recorded on the task and retried later by `retry_pending` or a relay.
    pub async fn send(&self, id: TaskId) -> Result<()> {
        self.outbox_id().await?;
        let claim = telemetry::claim_span(id);
        let claimed = self
            .inner
            .store
            .claim(id, &self.lease_request())
            .instrument(claim.clone())
            .await?;
        let record = match claimed {
            ClaimOutcome::Claimed(record) => {
                self.activity().claimed();
                ClaimedTask::from(*record)
            }
            ClaimOutcome::Finished(Status::Succeeded) => return Ok(()),
            ClaimOutcome::Finished(Status::Discarded) => return Err(Error::Discarded(id)),
            ClaimOutcome::Finished(_) => return Err(Error::Failed(id)),
            ClaimOutcome::Expired => {
                telemetry::expired(1);
                self.report_failed_ids([id]);
                return Err(Error::Expired(id));
            }
            ClaimOutcome::NotFound => return Err(Error::NotFound(id)),
            ClaimOutcome::Leased { until } => return Err(Error::Busy { id, until }),
            ClaimOutcome::NotDue { at } => return Err(Error::NotDue { id, at }),
            ClaimOutcome::Blocked => return Err(Error::Blocked { id }),
        };
        let attempt = record.runs();
        let key = crate::HandlerKey::new(record.task.kind.clone(), record.task.version);
        let (completion, outcome) = self.attempt(record, claim).await;
        self.write(std::slice::from_ref(&completion)).await?;
        match outcome {
            Outcome::Succeeded => Ok(()),
            Outcome::NoHandler(_) => Err(Error::NoHandler { id, key }),
            Outcome::Retryable(_) | Outcome::Permanent(_) => Err(Error::Handler {
                id,
                attempt,
                will_retry: !completion.status.is_finished(),
                message: completion.last_error.unwrap_or_default(),
            }),
        }
    }

    /// Spawns [`send`](Worker::send) on the worker's runtime and returns at once.
    ///
    /// The attempt has its own handler timeout, independent of the caller's
    /// request; a failure is logged and left for the relay or the next
    /// `retry_pending`. Awaiting the handle is optional.
    ///
    /// At most `concurrency` of these sends run at once, so a burst cannot
    /// exhaust the connection pool. Beyond that, the task is left to the relay
    /// (or the next `retry_pending`) and the handle resolves to
    /// [`Error::Deferred`] at once; the metric
    /// `outbox_send_async_deferred_total` counts these.
    pub fn send_async(&self, id: TaskId) -> JoinHandle<Result<()>> {
        let Ok(slot) = Arc::clone(&self.inner.send_slots).try_acquire_owned() else {
            telemetry::send_async_deferred();
            tracing::debug!(
                task_id = id.get(),
                "send_async left the task to the relay: the worker is at its concurrency"
            );
            return self
                .inner
                .runtime
                .spawn(std::future::ready(Err(Error::Deferred(id))));
        };
        let worker = self.clone();
        let in_flight = InFlight::start(&self.inner.in_flight);
        self.inner.runtime.spawn(async move {
            let _in_flight = in_flight;
            let _slot = slot;
            let result = worker.send(id).await;
            if let Err(error) = &result {
                tracing::warn!(task_id = id.get(), error = %error.chain(), "asynchronous send did not deliver");
            }
            result
        })
    }

    /// Resolves once no [`send_async`](Worker::send_async) of this worker (or
    /// its clones) is running, nor a call of the failure hook
    /// ([`RegistryBuilder::on_failed`](crate::RegistryBuilder::on_failed)):
    /// for a graceful shutdown, or a test that must see the outcome of sends
    /// it did not await.
    pub async fn wait_idle(&self) {
        let mut in_flight = self.inner.in_flight.subscribe();
        // The sender lives in `self`, so the channel cannot close meanwhile.
        let _ = in_flight.wait_for(|n| *n == 0).await;
    }

    /// The fence of this worker's claim on `record`.
    pub(crate) fn fence(&self, record: &ClaimedTask) -> transition::Fence {
        transition::Fence {
            id: record.id,
            owner: Arc::clone(&self.inner.owner),
            attempt: record.attempts,
            ordering_key: record.task.ordering_key.clone(),
        }
    }

    /// Whether a claim taken at `claimed_at` still has a handler timeout's
    /// worth of lease left, so a handler started now finishes inside it.
    pub(crate) fn lease_outlasts_handler(&self, claimed_at: std::time::Instant) -> bool {
        let config = &self.inner.config;
        config.lease_duration.saturating_sub(claimed_at.elapsed()) >= config.handler_timeout
    }

    /// The store's outbox id ([`Store::outbox_id`]), read once: every
    /// claim reads it first, so the deliveries of what it claims name
    /// their outbox.
    pub async fn outbox_id(&self) -> Result<OutboxId> {
        self.inner
            .outbox
            .get_or_try_init(|| self.inner.store.outbox_id())
            .await
            .cloned()
    }

    /// The outbox id, once read: before every claim (`send`, `claim_due`),
    /// so always known to an attempt.
    pub(crate) fn known_outbox(&self) -> Option<OutboxId> {
        self.inner.outbox.get().cloned()
    }

    /// Claims up to `request.limit` due tasks, in an `outbox.claim` span
    /// (a child of the current span) that the caller passes on to each
    /// task's [`attempt`](Self::attempt).
    pub(crate) async fn claim_due(
        &self,
        request: &BatchRequest,
    ) -> Result<(Vec<ClaimedTask>, Span)> {
        self.outbox_id().await?;
        let span = telemetry::claim_due_span(request.limit);
        let records = self
            .inner
            .store
            .claim_due(request)
            .instrument(span.clone())
            .await?;
        span.record(
            "messaging.batch.message_count",
            telemetry::int(records.len()),
        );
        if !records.is_empty() {
            self.activity().claimed();
        }
        Ok((records, span))
    }

    /// Runs the handler for a claimed record and decides the completion;
    /// `claim` is the span of the claim that took it. What the attempt needs
    /// is taken from the record here; the returned future owns it (see
    /// [`run_handler`] on why it holds no record).
    pub(crate) fn attempt(
        &self,
        record: ClaimedTask,
        claim: Span,
    ) -> impl Future<Output = (Completion, Outcome)> + Send + 'static {
        let fence = self.fence(&record);
        let run = record.runs();
        let max_attempts = record.task.max_attempts;
        let (handler, metrics) = self
            .inner
            .registry
            .resolve(&record.task.kind, record.task.version);
        let handler = handler.cloned();
        let retry = self.inner.config.retry;
        let outbox = self.known_outbox();
        let running = run_handler(
            handler,
            record,
            outbox,
            self.inner.config.handler_timeout,
            claim,
            Arc::clone(&metrics),
        );
        running.map(move |outcome| {
            let completion = transition::decide(fence, run, max_attempts, outcome.clone(), &retry);
            metrics.outcome(&completion);
            (completion, outcome)
        })
    }

    /// Writes completions; a fenced-out write is logged, not an error.
    ///
    /// With a failure hook registered, the results that fail their task are
    /// written apart from the others, through
    /// [`Store::complete_applied`], so that the hook runs for exactly the
    /// failures that applied, once each, after their write committed.
    pub(crate) async fn write(&self, completions: &[Completion]) -> Result<u64> {
        if completions.is_empty() {
            return Ok(0);
        }
        let span = telemetry::write_span(completions.len());
        let applied =
            if self.registry().on_failed().is_some() && completions.iter().any(fails_for_good) {
                let (failures, others): (Vec<Completion>, Vec<Completion>) =
                    completions.iter().cloned().partition(fails_for_good);
                let mut applied = if others.is_empty() {
                    0
                } else {
                    self.inner
                        .store
                        .complete(&others)
                        .instrument(span.clone())
                        .await?
                };
                let failed = self
                    .inner
                    .store
                    .complete_applied(&failures)
                    .instrument(span.clone())
                    .await?;
                applied += failed.len() as u64;
                self.report_failed_ids(failed.into_iter().map(|(id, _)| id));
                applied
            } else {
                self.inner
                    .store
                    .complete(completions)
                    .instrument(span.clone())
                    .await?
            };
        span.record("outbox.applied", telemetry::int(applied));
        self.activity().wrote();
        let stale = completions.len() as u64 - applied.min(completions.len() as u64);
        if stale > 0 {
            tracing::warn!(
                stale,
                "completion writes lost their lease to another worker and changed nothing"
            );
        }
        Ok(applied)
    }

    /// Rescues lapsed leases, `step` rows per statement, until a statement
    /// comes back short; returns how many tasks moved, and runs the failure
    /// hook for those that failed for good.
    pub(crate) async fn rescue(&self, step: u32) -> Result<u64> {
        let mut total = 0;
        loop {
            let rescued = self.inner.store.rescue(step).await?;
            total += rescued.moved;
            self.report_failed_ids(rescued.failed);
            if rescued.moved < u64::from(step) {
                return Ok(total);
            }
        }
    }
}

/// Whether a completion fails its task for good.
fn fails_for_good(completion: &Completion) -> bool {
    completion.status == Status::Failed
}
