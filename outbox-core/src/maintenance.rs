//! Operations beside sending: [`Maintenance`] (stats, requeue, purge, wake-ups).

use std::{future::Future, pin::Pin, time::Duration};

use futures_util::Stream;

use crate::{Error, Result, Store, TaskId};

/// Counts per status and how far behind the outbox is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Tasks waiting for (or in) an attempt.
    pub pending: u64,
    /// Tasks delivered and kept for retention.
    pub succeeded: u64,
    /// Tasks that failed for good and wait for an operator.
    pub failed: u64,
    /// How long the oldest due task has been due; `None` when nothing is due.
    pub oldest_due_age: Option<Duration>,
}

/// Signals that new tasks may be due (PostgreSQL `NOTIFY`); the stream ends
/// when its connection is lost.
pub type Wakeups = Pin<Box<dyn Stream<Item = ()> + Send>>;

/// What operators and the [`Relay`](crate::Relay) need beyond sending.
pub trait Maintenance: Store {
    /// Counts per status and the age of the oldest due task.
    fn stats(&self) -> impl Future<Output = Result<Stats>> + Send;

    /// Makes task `id` pending and due at once if it is failed, keeping its
    /// attempts and last error; `false` when it is not failed (or absent).
    /// The building block of [`requeue`](Maintenance::requeue).
    fn requeue_failed(&self, id: TaskId) -> impl Future<Output = Result<bool>> + Send;

    /// Deletes up to `limit` tasks finished more than `older_than` ago, in one
    /// statement; returns how many. The building block of
    /// [`purge_finished`](Maintenance::purge_finished).
    fn purge_batch(
        &self,
        older_than: Duration,
        limit: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Gives a failed task another chance: pending and due at once, its
    /// attempts and last error kept. [`Error::NotFailed`] unless it is failed,
    /// [`Error::NotFound`] when there is no such task.
    fn requeue(&self, id: TaskId) -> impl Future<Output = Result<()>> + Send {
        async move {
            if self.requeue_failed(id).await? {
                return Ok(());
            }
            let status = self.get(id).await?.status;
            Err(Error::NotFailed { id, status })
        }
    }

    /// Deletes succeeded and failed tasks finished more than `older_than`
    /// ago, `batch` rows per statement so no statement holds locks for long;
    /// returns how many were deleted. Pending tasks are never touched.
    /// `older_than` past [`MAX_DURATION`](crate::limits::MAX_DURATION) is
    /// refused, naming it.
    fn purge_finished(
        &self,
        older_than: Duration,
        batch: usize,
    ) -> impl Future<Output = Result<u64>> + Send {
        async move {
            if older_than > crate::limits::MAX_DURATION {
                // Past what the databases' time arithmetic represents: on
                // MariaDB the cut-off would be NULL and nothing purged.
                return Err(Error::invalid(
                    "older_than",
                    format!("{older_than:?} exceeds the 100-year bound of limits::MAX_DURATION"),
                ));
            }
            let limit = u32::try_from(batch)
                .ok()
                .filter(|limit| *limit > 0)
                .ok_or_else(|| Error::invalid("batch", "must be between 1 and 4294967295"))?;
            let mut purged = 0;
            loop {
                let deleted = self.purge_batch(older_than, limit).await?;
                purged += deleted;
                if deleted < u64::from(limit) {
                    return Ok(purged);
                }
            }
        }
    }

    /// How long until the next pending task that is not due yet becomes due
    /// (a scheduled task, or a retry after its backoff); `None` when none is
    /// waiting. The relay sleeps at most this long.
    fn next_due(&self) -> impl Future<Output = Result<Option<Duration>>> + Send;

    /// A stream of wake-ups sent when tasks are committed, if the store
    /// offers one; `None` (the default) means: poll.
    fn wakeups(&self) -> impl Future<Output = Result<Option<Wakeups>>> + Send {
        async { Ok(None) }
    }
}
