//! A relay's claimed tasks, running their handlers: each alone, or a batch
//! handler's together.

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
    ClaimedTask, Store, Worker,
    transition::{self, Fence},
    unit::{Finished, Unit},
};

/// Handlers running as tokio tasks, with the claims each one holds: one
/// task per delivery, or one per batch handler's batch, and at most the
/// worker's `concurrency` deliveries in all. The relay claims only as many
/// tasks as there are free slots, so a claimed task starts at once, with
/// one exception: while only batches hold the slots, one claim may be taken
/// ahead and wait for them ([`can_claim_ahead`](Self::can_claim_ahead)).
/// How long handlers run decides when the relay claims again ([`Pacing`]).
pub(super) struct Inflight<S> {
    worker: Worker<S>,
    tasks: JoinSet<Finished>,
    /// The claims of each running handler task (one, or a batch's, in the
    /// batch's order), when they were taken, and when the handler started.
    fences: HashMap<Id, Running>,
    /// Deliveries running, over every handler task.
    delivering: usize,
    /// Handler tasks running a batch handler's batch.
    batches: usize,
    /// A claim taken ahead while batches ran, waiting for their slots.
    queued: Option<Queued>,
    pacing: Pacing,
}

/// A claim taken ahead: its records, when it was taken, and its span.
struct Queued {
    records: Vec<ClaimedTask>,
    claimed_at: Instant,
    claim: Span,
}

/// One running handler task's claims.
struct Running {
    fences: Vec<Fence>,
    batch: bool,
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
            delivering: 0,
            batches: 0,
            queued: None,
            pacing: Pacing::new(slots),
        }
    }

    /// Deliveries running.
    pub(super) fn running(&self) -> usize {
        self.delivering
    }

    /// Handler slots not running.
    pub(super) fn free(&self) -> usize {
        self.worker
            .config()
            .concurrency
            .saturating_sub(self.delivering)
    }

    /// Whether the relay may claim the next batch while every slot is taken:
    /// when only batch handlers run (their slots free a batch at a time, so
    /// what it claims waits for the batches running now, each cut at the
    /// handler timeout) and no claim already waits. A publisher's batch is
    /// then on the wire while the next one is claimed. What waits starts as
    /// slots free, in claim order, each part with its lease checked again.
    pub(super) fn can_claim_ahead(&self) -> bool {
        self.queued.is_none() && self.batches > 0 && self.batches == self.fences.len()
    }

    /// Whether a claim taken ahead waits for slots: no other claim starts
    /// until it has (it would overtake it, or take its place).
    pub(super) fn has_queued(&self) -> bool {
        self.queued.is_some()
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

    /// Starts the handlers of tasks claimed at `claimed_at` (in the span
    /// `claim`), in slots the claim was sized to: a batch handler's tasks of
    /// one kind in one handler task, every other task in one of its own. A
    /// claim taken ahead ([`can_claim_ahead`](Self::can_claim_ahead)) waits
    /// for slots, and starts as they free. A claim whose lease has less left than the
    /// handler timeout (the claim itself took that long, or it waited) is
    /// given back unstarted.
    pub(super) fn start(
        &mut self,
        records: Vec<ClaimedTask>,
        claimed_at: Instant,
        claim: &Span,
        writer: &mut ResultWriter,
    ) {
        if records.len() > self.free() {
            self.queued = Some(Queued {
                records,
                claimed_at,
                claim: claim.clone(),
            });
            return;
        }
        if !self.worker.lease_outlasts_handler(claimed_at.into_std()) {
            for record in &records {
                let fence = self.worker.fence(record);
                writer.push(transition::release(fence), self.lease_end(claimed_at));
            }
            return;
        }
        for unit in self.worker.units(records) {
            let fences: Vec<Fence> = unit
                .records()
                .iter()
                .map(|record| self.worker.fence(record))
                .collect();
            let batch = matches!(unit, Unit::Batch(..));
            let running = self.start_unit(unit, claim.clone());
            self.delivering += fences.len();
            self.batches += usize::from(batch);
            self.fences.insert(
                running,
                Running {
                    fences,
                    batch,
                    claimed_at,
                    started_at: Instant::now(),
                },
            );
        }
    }

    /// Spawns the handler task of `unit`.
    fn start_unit(&mut self, unit: Unit, claim: Span) -> Id {
        let worker = self.worker.clone();
        self.tasks
            .spawn(async move { worker.attempt_unit(unit, claim).await })
            .id()
    }

    /// Hands the results of handlers that finished to `writer`, without waiting.
    pub(super) fn reap(&mut self, writer: &mut ResultWriter) {
        while let Some(joined) = self.tasks.try_join_next_with_id() {
            self.finish(joined, writer);
        }
    }

    /// Waits for the next handler to finish (pending forever when none runs).
    pub(super) async fn next(&mut self) -> Result<(Id, Finished), JoinError> {
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

    /// Hands `writer` the completions of a finished handler task or, for one
    /// cut at shutdown (handler panics are caught inside the attempt), its
    /// claims given back as interrupted runs.
    pub(super) fn finish(
        &mut self,
        joined: Result<(Id, Finished), JoinError>,
        writer: &mut ResultWriter,
    ) {
        let (id, finished) = match joined {
            Ok((id, finished)) => (id, Some(finished)),
            Err(error) => (error.id(), None),
        };
        let Some(running) = self.fences.remove(&id) else {
            return;
        };
        self.delivering = self.delivering.saturating_sub(running.fences.len());
        self.batches -= usize::from(running.batch);
        let lease_end = self.lease_end(running.claimed_at);
        match finished {
            Some(finished) => {
                let now = Instant::now();
                self.pacing
                    .handler_finished(now.saturating_duration_since(running.started_at), now);
                let mut fences = running.fences.into_iter();
                for completion in finished {
                    fences.next();
                    writer.push(completion, lease_end);
                }
                // A unit always answers for each of its claims; were one
                // missing, its claim is given back rather than left to lapse.
                for fence in fences {
                    writer.push(transition::interrupt(fence), lease_end);
                }
            }
            None => {
                for fence in running.fences {
                    writer.push(transition::interrupt(fence), lease_end);
                }
            }
        }
        self.start_queued(writer);
    }

    /// Starts as much of the claim taken ahead as the free slots take, in
    /// claim order; the rest waits for the next slots to free.
    fn start_queued(&mut self, writer: &mut ResultWriter) {
        let free = self.free();
        let Some(queued) = self.queued.as_mut() else {
            return;
        };
        let fits = free.min(queued.records.len());
        if fits == 0 {
            return;
        }
        let rest = queued.records.split_off(fits);
        let now = std::mem::replace(&mut queued.records, rest);
        let (claimed_at, claim) = (queued.claimed_at, queued.claim.clone());
        if queued.records.is_empty() {
            self.queued = None;
        }
        self.start(now, claimed_at, &claim, writer);
    }

    /// Gives back a claim taken ahead that never started (at shutdown).
    pub(super) fn give_back_queued(&mut self, writer: &mut ResultWriter) {
        if let Some(queued) = self.queued.take() {
            let lease_end = self.lease_end(queued.claimed_at);
            for record in &queued.records {
                writer.push(transition::release(self.worker.fence(record)), lease_end);
            }
        }
    }

    /// When a claim taken at `claimed_at` lapses.
    fn lease_end(&self, claimed_at: Instant) -> Instant {
        super::later(claimed_at, self.worker.config().lease_duration)
    }
}
