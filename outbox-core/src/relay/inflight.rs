//! A relay's claimed tasks: queued for a handler slot, or running.

use std::{
    collections::{HashMap, VecDeque},
    time::Instant,
};

use tokio::task::{Id, JoinError, JoinSet};

use crate::{
    Record, Store, Worker,
    transition::{self, Completion, Fence},
};

/// Claimed tasks waiting for one of the worker's `concurrency` handler slots,
/// and handlers running as tokio tasks with the claim each one holds.
pub(super) struct Inflight<S> {
    worker: Worker<S>,
    queue: VecDeque<(Record, Instant)>,
    tasks: JoinSet<Completion>,
    fences: HashMap<Id, Fence>,
}

impl<S: Store> Inflight<S> {
    pub(super) fn new(worker: Worker<S>) -> Self {
        Self {
            worker,
            queue: VecDeque::new(),
            tasks: JoinSet::new(),
            fences: HashMap::new(),
        }
    }

    /// Tasks claimed and not started.
    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Handlers running.
    pub(super) fn running(&self) -> usize {
        self.tasks.len()
    }

    /// Whether nothing is claimed.
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.tasks.is_empty()
    }

    /// Queues a claimed task; `claimed_at` is when its lease began.
    pub(super) fn queue(&mut self, record: Record, claimed_at: Instant) {
        self.queue.push_back((record, claimed_at));
    }

    /// Starts queued tasks while handler slots are free. A task whose lease
    /// has less left than the handler timeout is given back unstarted.
    pub(super) fn start(&mut self, done: &mut Vec<Completion>) {
        while self.tasks.len() < self.worker.config().concurrency {
            let Some((record, claimed_at)) = self.queue.pop_front() else {
                return;
            };
            let fence = self.worker.fence(&record);
            if !self.worker.lease_outlasts_handler(claimed_at) {
                done.push(transition::release(fence));
                continue;
            }
            let worker = self.worker.clone();
            let handle = self
                .tasks
                .spawn(async move { worker.attempt(record).await.0 });
            self.fences.insert(handle.id(), fence);
        }
    }

    /// Collects the results of handlers that finished, without waiting.
    pub(super) fn reap(&mut self, done: &mut Vec<Completion>) {
        while let Some(joined) = self.tasks.try_join_next_with_id() {
            done.extend(self.finish(joined));
        }
    }

    /// Waits for the next handler to finish (pending forever when none runs).
    pub(super) async fn next(&mut self) -> Option<Completion> {
        match self.tasks.join_next_with_id().await {
            Some(joined) => self.finish(joined),
            None => std::future::pending().await,
        }
    }

    /// Gives back every queued claim.
    pub(super) fn release_queued(&mut self, done: &mut Vec<Completion>) {
        while let Some((record, _)) = self.queue.pop_front() {
            done.push(transition::release(self.worker.fence(&record)));
        }
    }

    /// Cuts every running handler and gives its claim back.
    pub(super) async fn abort(&mut self, done: &mut Vec<Completion>) {
        self.tasks.abort_all();
        while let Some(joined) = self.tasks.join_next_with_id().await {
            done.extend(self.finish(joined));
        }
    }

    /// The completion of a finished handler task, or for one aborted at
    /// shutdown (handler panics are caught inside the attempt), a release of
    /// its claim.
    fn finish(&mut self, joined: Result<(Id, Completion), JoinError>) -> Option<Completion> {
        match joined {
            Ok((id, completion)) => {
                self.fences.remove(&id);
                Some(completion)
            }
            Err(error) => self.fences.remove(&error.id()).map(transition::release),
        }
    }
}
