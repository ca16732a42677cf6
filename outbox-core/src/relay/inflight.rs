//! A relay's claimed tasks, running their handlers: each alone, or a batch
//! handler's together.

use std::{collections::HashMap, ops::Range};

use futures_util::{FutureExt, StreamExt, stream::FuturesUnordered};
use tokio::{
    sync::mpsc,
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

/// Handlers running, with the claims each one holds: units of one
/// delivery, or of a batch handler's batch, and at most the worker's
/// `concurrency` deliveries in all. The units a claim started run at once,
/// shared in claim order among at most as many tokio tasks as the runtime
/// has worker threads, each of which sends its units' results as their
/// handlers finish: a task of its own per delivery cost about a third of
/// the relay's CPU (see `docs/benchmarks.md`). The relay claims only as
/// many tasks as there are free slots, so a claimed task starts at once,
/// with one exception: while only batches hold the slots, one claim may be
/// taken ahead and wait for them ([`can_claim_ahead`](Self::can_claim_ahead)).
/// How long handlers run decides when the relay claims again ([`Pacing`]).
pub(super) struct Inflight<S> {
    worker: Worker<S>,
    /// The tasks running the units, each a share of one claim's.
    tasks: JoinSet<()>,
    /// Each unit's results, sent by its task when its handler is done
    /// (those done together in one message).
    sender: mpsc::UnboundedSender<Vec<(UnitKey, Finished)>>,
    finished: mpsc::UnboundedReceiver<Vec<(UnitKey, Finished)>>,
    /// The claims of each running unit (one, or a batch's, in the batch's
    /// order), when they were taken, and when the handler started.
    fences: HashMap<UnitKey, Running>,
    /// The keys of each task's units.
    shares: HashMap<Id, Range<UnitKey>>,
    /// The key of the next unit started.
    next_key: UnitKey,
    /// The runtime's worker threads: how many tasks a claim's units share.
    threads: usize,
    /// Deliveries running, over every unit.
    delivering: usize,
    /// Units running a batch handler's batch.
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

/// Which unit a result belongs to.
type UnitKey = u64;

/// One running unit's claims.
struct Running {
    fences: Vec<Fence>,
    batch: bool,
    claimed_at: Instant,
    started_at: Instant,
}

/// What ended while handlers ran: units, with their results, or a task of
/// units (all of which sent their results first, unless it was cut).
pub(super) enum Joined {
    Units(Vec<(UnitKey, Finished)>),
    Task(Result<Id, JoinError>),
}

impl<S: Store> Inflight<S> {
    /// Handlers of `worker`, at most `slots` of them started by one claim.
    pub(super) fn new(worker: Worker<S>, slots: usize) -> Self {
        let (sender, finished) = mpsc::unbounded_channel();
        Self {
            worker,
            tasks: JoinSet::new(),
            sender,
            finished,
            fences: HashMap::new(),
            shares: HashMap::new(),
            next_key: 0,
            threads: tokio::runtime::Handle::try_current()
                .map_or(1, |runtime| runtime.metrics().num_workers())
                .max(1),
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
        self.fences.is_empty()
    }

    /// Starts the handlers of tasks claimed at `claimed_at` (in the span
    /// `claim`), in slots the claim was sized to: a batch handler's tasks of
    /// one kind in one unit, every other task in one of its own, all of them
    /// at once, shared among at most as many tokio tasks as the runtime has
    /// worker threads. A claim taken ahead
    /// ([`can_claim_ahead`](Self::can_claim_ahead)) waits for slots, and
    /// starts as they free. A claim whose lease has less left than the
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
        let mut units = self.worker.units(records);
        // At most as many tasks as the runtime has threads to run them,
        // each with a share of the units in claim order.
        let per_task = units.len().div_ceil(self.threads).max(1);
        let started_at = Instant::now();
        while !units.is_empty() {
            let rest = units.split_off(per_task.min(units.len()));
            let share = std::mem::replace(&mut units, rest);
            let first = self.next_key;
            self.next_key += share.len() as UnitKey;
            let claims: Vec<(Vec<Fence>, bool)> = share
                .iter()
                .map(|unit| {
                    let fences = unit
                        .records()
                        .iter()
                        .map(|record| self.worker.fence(record))
                        .collect();
                    (fences, matches!(unit, Unit::Batch(..)))
                })
                .collect();
            // Results come back through the channel, which is read only
            // after this returns: every unit is registered by then.
            let task = self
                .tasks
                .spawn(run_units(
                    self.worker.clone(),
                    share,
                    first,
                    claim.clone(),
                    self.sender.clone(),
                ))
                .id();
            self.shares.insert(task, first..self.next_key);
            for (key, (fences, batch)) in (first..).zip(claims) {
                self.delivering += fences.len();
                self.batches += usize::from(batch);
                self.fences.insert(
                    key,
                    Running {
                        fences,
                        batch,
                        claimed_at,
                        started_at,
                    },
                );
            }
        }
    }

    /// Hands the results of handlers that finished to `writer`, without
    /// waiting, and forgets the tasks that ended.
    pub(super) fn reap(&mut self, writer: &mut ResultWriter) {
        self.take_sent(writer);
        while let Some(ended) = self.tasks.try_join_next_with_id() {
            self.end_task(ended.map(|(id, ())| id), writer);
        }
        self.start_queued(writer);
    }

    /// Waits for the next unit to finish, or task to end (pending forever
    /// when none runs).
    pub(super) async fn next(&mut self) -> Joined {
        tokio::select! {
            biased;
            Some(units) = self.finished.recv() => Joined::Units(units),
            Some(ended) = self.tasks.join_next_with_id() => {
                Joined::Task(ended.map(|(id, ())| id))
            }
            else => std::future::pending().await,
        }
    }

    /// Cuts every running handler and gives its claim back.
    pub(super) async fn abort(&mut self, writer: &mut ResultWriter) {
        self.tasks.abort_all();
        while let Some(ended) = self.tasks.join_next_with_id().await {
            self.finish(Joined::Task(ended.map(|(id, ())| id)), writer);
        }
    }

    /// Hands `writer` the completions of units that finished. For a task
    /// that ended: first the results it sent, then, for each of its units
    /// that sent none (it was cut at shutdown; handler panics are caught
    /// inside the attempt), its claims given back as interrupted runs.
    pub(super) fn finish(&mut self, joined: Joined, writer: &mut ResultWriter) {
        match joined {
            Joined::Units(units) => self.finish_units(units, writer),
            Joined::Task(ended) => self.end_task(ended, writer),
        }
        self.start_queued(writer);
    }

    /// Hands `writer` the completions the tasks have sent so far.
    fn take_sent(&mut self, writer: &mut ResultWriter) {
        while let Ok(units) = self.finished.try_recv() {
            self.finish_units(units, writer);
        }
    }

    /// A task ended: the results it sent, then its units that sent none.
    fn end_task(&mut self, ended: Result<Id, JoinError>, writer: &mut ResultWriter) {
        let task = ended.unwrap_or_else(|error| error.id());
        self.take_sent(writer);
        for key in self.shares.remove(&task).unwrap_or_default() {
            self.finish_unit(key, None, writer);
        }
    }

    /// Hands `writer` the completions of `units`.
    fn finish_units(&mut self, units: Vec<(UnitKey, Finished)>, writer: &mut ResultWriter) {
        for (key, finished) in units {
            self.finish_unit(key, Some(finished), writer);
        }
    }

    /// Hands `writer` the completions of the unit `key`, or its claims
    /// given back as interrupted runs when it has none.
    fn finish_unit(&mut self, key: UnitKey, finished: Option<Finished>, writer: &mut ResultWriter) {
        let Some(running) = self.fences.remove(&key) else {
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

/// The task of a share of one claim's `units`, numbered from `first`: runs
/// them all at once and sends each one's results as its handler is done.
async fn run_units<S: Store>(
    worker: Worker<S>,
    units: Vec<Unit>,
    first: UnitKey,
    claim: Span,
    sender: mpsc::UnboundedSender<Vec<(UnitKey, Finished)>>,
) {
    let mut running: FuturesUnordered<_> = (first..)
        .zip(units)
        .map(|(key, unit)| {
            worker
                .attempt_unit(unit, claim.clone())
                .map(move |finished| (key, finished))
        })
        .collect();
    drop(claim);
    while let Some(done) = running.next().await {
        // With the others done by now, in one message: the relay wakes once
        // for them.
        let mut done = vec![done];
        while let Some(Some(more)) = running.next().now_or_never() {
            done.push(more);
        }
        // The relay keeps its receiver for as long as it runs this task.
        let _ = sender.send(done);
        if !running.is_empty() {
            // The send usually woke the relay's loop into this thread's
            // LIFO slot, which no other thread may steal: let it run before
            // any other handler here, which might block the thread.
            tokio::task::yield_now().await;
        }
    }
}
