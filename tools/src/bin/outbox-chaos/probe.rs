//! [`Probe`]: a store that passes everything through to the real one and
//! records, in the process's record file, which claims it took and which
//! results it wrote back.
//!
//! It implements the public [`Store`] and [`Maintenance`] traits, as a store
//! of the user's own would, so the relay runs unchanged on top of it. From
//! its records a scenario knows what a killed relay held (claimed, result not
//! written) and when a relay wrote results again after a server came back.

use std::time::Duration;

use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, ClaimedTask, LeaseRequest, Maintenance, Page, PageRequest, Record,
    Rescued, Result, Stats, Store, Task, TaskFilter, TaskId, Wakeups, transition::Completion,
};

use super::records::Recorder;

/// A store that records claims and written results.
#[derive(Debug, Clone)]
pub(crate) struct Probe<S> {
    inner: S,
    recorder: Recorder,
}

impl<S> Probe<S> {
    /// Wraps `inner`, recording into `recorder`.
    pub(crate) fn new(inner: S, recorder: Recorder) -> Self {
        Self { inner, recorder }
    }
}

impl<S: Store> Store for Probe<S> {
    type Conn = S::Conn;

    async fn enqueue(&self, conn: &mut S::Conn, task: Task) -> Result<TaskId> {
        self.inner.enqueue(conn, task).await
    }

    async fn enqueue_many(&self, conn: &mut S::Conn, tasks: Vec<Task>) -> Result<Vec<TaskId>> {
        self.inner.enqueue_many(conn, tasks).await
    }

    async fn claim(&self, id: TaskId, lease: &LeaseRequest) -> Result<ClaimOutcome> {
        let outcome = self.inner.claim(id, lease).await?;
        if let ClaimOutcome::Claimed(record) = &outcome {
            self.recorder.claims([(record.id.get(), record.attempts)]);
        }
        Ok(outcome)
    }

    async fn claim_due(&self, request: &BatchRequest) -> Result<Vec<ClaimedTask>> {
        let records = match self.inner.claim_due(request).await {
            Ok(records) => records,
            Err(error) => {
                self.recorder
                    .line(&format!("claimerr {}", kind_of(&error)))
                    .ok();
                return Err(error);
            }
        };
        if !records.is_empty() {
            self.recorder
                .claims(records.iter().map(|r| (r.id.get(), r.attempts)));
        }
        Ok(records)
    }

    async fn complete(&self, completions: &[Completion]) -> Result<u64> {
        match self.inner.complete(completions).await {
            Ok(applied) => {
                self.recorder.written(
                    applied,
                    completions
                        .iter()
                        .map(|c| (c.fence.id.get(), c.fence.attempt)),
                );
                Ok(applied)
            }
            Err(error) => {
                self.recorder
                    .line(&format!(
                        "writeerr {} {}",
                        completions.len(),
                        kind_of(&error)
                    ))
                    .ok();
                Err(error)
            }
        }
    }

    async fn get(&self, id: TaskId) -> Result<Record> {
        self.inner.get(id).await
    }

    async fn outbox_id(&self) -> Result<diesel_outbox_core::OutboxId> {
        self.inner.outbox_id().await
    }

    async fn promote(&self, limit: u32) -> Result<u64> {
        self.inner.promote(limit).await
    }

    async fn rescue(&self, limit: u32) -> Result<Rescued> {
        self.inner.rescue(limit).await
    }
}

/// The database kind of `error` (`deadlock`, `connection`, ...), or `other`;
/// for an error that is not retryable, followed by the start of its message
/// (spaces as `_`), so the record says what it was.
fn kind_of(error: &diesel_outbox_core::Error) -> String {
    let kind = error
        .database_kind()
        .map_or("other", diesel_outbox_core::DatabaseErrorKind::as_str);
    if error.is_retryable() {
        return kind.to_owned();
    }
    let text: String = error
        .chain()
        .to_string()
        .chars()
        .take(100)
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect();
    format!("{kind} {text}")
}

impl<S: Maintenance> Maintenance for Probe<S> {
    async fn stats(&self) -> Result<Stats> {
        self.inner.stats().await
    }

    async fn ages(&self) -> Result<diesel_outbox_core::Ages> {
        self.inner.ages().await
    }

    async fn beat(&self, beat: &diesel_outbox_core::Heartbeat) -> Result<()> {
        self.inner.beat(beat).await
    }

    async fn forget_relay(&self, owner: &str) -> Result<()> {
        self.inner.forget_relay(owner).await
    }

    async fn relays(&self) -> Result<Vec<diesel_outbox_core::RelaySeen>> {
        self.inner.relays().await
    }

    async fn requeue_failed(&self, id: TaskId) -> Result<bool> {
        self.inner.requeue_failed(id).await
    }

    async fn discard_task(&self, id: TaskId) -> Result<bool> {
        self.inner.discard_task(id).await
    }

    async fn purge_batch(&self, older_than: Duration, limit: u32) -> Result<u64> {
        self.inner.purge_batch(older_than, limit).await
    }

    async fn discard_many(&self, ids: &[TaskId]) -> Result<u64> {
        self.inner.discard_many(ids).await
    }

    async fn requeue_failed_many(&self, ids: &[TaskId]) -> Result<u64> {
        self.inner.requeue_failed_many(ids).await
    }

    async fn inspect(&self, id: TaskId) -> Result<diesel_outbox_core::Listed> {
        self.inner.inspect(id).await
    }

    async fn list(&self, filter: &TaskFilter, page: &PageRequest) -> Result<Page> {
        self.inner.list(filter, page).await
    }

    async fn matching_ids(
        &self,
        filter: &TaskFilter,
        after: Option<TaskId>,
        limit: u32,
    ) -> Result<Vec<TaskId>> {
        self.inner.matching_ids(filter, after, limit).await
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        self.inner.next_due().await
    }

    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        self.inner.wakeups().await
    }
}
