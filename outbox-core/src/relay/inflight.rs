//! A relay's claimed tasks, each running its handler.

use std::collections::HashMap;

use tokio::{
    task::{Id, JoinError, JoinSet},
    time::Instant,
};

use tracing::Span;

use super::{
    pacing::{Decision, Pacing},
    writer::ResultWriter,
};
use crate::{
    Record, Store, Worker,
    transition::{self, Completion, Fence},
};

/// Handlers running as tokio tasks, at most the worker's `concurrency`, with
/// the claim each one holds. The relay claims only as many tasks as there
/// are free slots, so a claimed task starts at once; nothing waits in a queue.
/// How long handlers run decides when the relay claims again ([`Pacing`]).
pub(super) struct Inflight<S> {
    worker: Worker<S>,
    tasks: JoinSet<Completion>,
    /// Each running handler's claim, when that claim was taken, and when
    /// the handler started.
    fences: HashMap<Id, Running>,
    pacing: Pacing,
}

/// One running handler's claim.
struct Running {
    fence: Fence,
    claimed_at: Instant,
    started_at: Instant,
}

impl<S: Store> Inflight<S> {
    /// Handlers of `worker`, at most `slots` of them started by one claim.
    pub(super) fn new(worker: Worker<S>, slots: usize) -> Self {
        Self {
            worker,
            tasks: JoinSet::new(),
            fences: HashMap::new(),
            pacing: Pacing::new(slots),
        }
    }

    /// Handlers running.
    pub(super) fn running(&self) -> usize {
        self.tasks.len()
    }

    /// Handler slots not running.
    pub(super) fn free(&self) -> usize {
        self.worker
            .config()
            .concurrency
            .saturating_sub(self.tasks.len())
    }

    /// Whether a relay under a backlog claims at `now` ([`Pacing::decide`]).
    pub(super) fn pace(&self, now: Instant) -> Decision {
        self.pacing.decide(self.free(), now)
    }
    /// A claim started at `started` came back now.
    pub(super) fn claim_returned(&mut self, started: Instant) {
        let now = Instant::now();
        self.pacing
            .claim_returned(now.saturating_duration_since(started), now);
    }

    /// Whether no handler runs.
    pub(super) fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Starts the handler of a task claimed at `claimed_at` (in the span
    /// `claim`), in a slot the claim was sized to. A claim whose lease has
    /// less left than the handler timeout (the claim itself took that long)
    /// is given back unstarted.
    pub(super) fn start(
        &mut self,
        record: Record,
        claimed_at: Instant,
        claim: Span,
        writer: &mut ResultWriter,
    ) {
        let fence = self.worker.fence(&record);
        if !self.worker.lease_outlasts_handler(claimed_at.into_std()) {
            writer.push(transition::release(fence), self.lease_end(claimed_at));
            return;
        }
        let worker = self.worker.clone();
        let handle = self
            .tasks
            .spawn(async move { worker.attempt(record, claim).await.0 });
        let started_at = Instant::now();
        self.fences.insert(
            handle.id(),
            Running {
                fence,
                claimed_at,
                started_at,
            },
        );
    }

    /// Hands the results of handlers that finished to `writer`, without waiting.
    pub(super) fn reap(&mut self, writer: &mut ResultWriter) {
        while let Some(joined) = self.tasks.try_join_next_with_id() {
            self.finish(joined, writer);
        }
    }

    /// Waits for the next handler to finish (pending forever when none runs).
    pub(super) async fn next(&mut self) -> Result<(Id, Completion), JoinError> {
        match self.tasks.join_next_with_id().await {
            Some(joined) => joined,
            None => std::future::pending().await,
        }
    }

    /// Cuts every running handler and gives its claim back.
    pub(super) async fn abort(&mut self, writer: &mut ResultWriter) {
        self.tasks.abort_all();
        while let Some(joined) = self.tasks.join_next_with_id().await {
            self.finish(joined, writer);
        }
    }

    /// Hands `writer` the completion of a finished handler task or, for one
    /// cut at shutdown (handler panics are caught inside the attempt), the
    /// claim given back as an interrupted run.
    pub(super) fn finish(
        &mut self,
        joined: Result<(Id, Completion), JoinError>,
        writer: &mut ResultWriter,
    ) {
        let (id, completion) = match joined {
            Ok((id, completion)) => (id, Some(completion)),
            Err(error) => (error.id(), None),
        };
        if let Some(running) = self.fences.remove(&id) {
            let completion = match completion {
                Some(completion) => {
                    let now = Instant::now();
                    self.pacing
                        .handler_finished(now.saturating_duration_since(running.started_at), now);
                    completion
                }
                None => transition::interrupt(running.fence),
            };
            writer.push(completion, self.lease_end(running.claimed_at));
        }
    }

    /// When a claim taken at `claimed_at` lapses.
    fn lease_end(&self, claimed_at: Instant) -> Instant {
        super::later(claimed_at, self.worker.config().lease_duration)
    }
}
