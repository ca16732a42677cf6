//! Operations beside sending: [`Maintenance`] (stats, listing, requeue,
//! discard, one task or in bulk, purge, wake-ups).

use std::{future::Future, pin::Pin, time::Duration};

use futures_util::Stream;

use crate::{
    Error, Heartbeat, Listed, Page, PageRequest, RelaySeen, Result, Status, Store, TaskFilter,
    TaskId, transition,
};

/// Counts per status and how far behind the outbox is.
///
/// Every count is exact but `succeeded`, which on a table the database
/// estimates at 100,000 rows or more is that estimate less the exact counts:
/// counting the rows kept for retention would read them all. The exact counts read indexes that hold
/// only the rows of their status, so their cost grows with the backlog, never
/// with the retained history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Tasks due and first in line for their key: claimable now.
    pub available: u64,
    /// Tasks scheduled for later or backing off before a retry.
    pub waiting: u64,
    /// Tasks claimed by a worker (leases live or lapsed and not yet rescued).
    pub running: u64,
    /// Tasks behind an older unfinished task of their ordering key.
    pub blocked: u64,
    /// Tasks delivered and kept for retention: an estimate on a large table.
    pub succeeded: u64,
    /// Tasks that failed for good and wait for an operator.
    pub failed: u64,
    /// Tasks an operator gave up, kept for retention.
    pub discarded: u64,
    /// How long the task due longest has waited to be sent: the available
    /// task first in claim order, or a waiting task past its due time that
    /// no relay has made available yet, whichever has waited longer; `None`
    /// when nothing is due. A growing value means the relays fall behind,
    /// or none runs: the value to alert on.
    pub oldest_due_age: Option<Duration>,
    /// How long the running task whose lease ends first has been claimed
    /// (with one lease duration for every relay, the oldest claim); `None`
    /// when nothing runs. Beyond the lease it means a relay died or hangs
    /// with the task, and no maintenance step has rescued it.
    pub oldest_running_age: Option<Duration>,
    /// Relays whose heartbeats still count ([`Maintenance::relays`]).
    pub live_relays: u64,
    /// Ordering keys stopped by a failed head: keys whose oldest open task
    /// failed for good while later tasks of the key wait behind it. They
    /// stay stopped until an operator requeues or discards the head; any
    /// value above zero for long is worth a look (unlike `blocked`, which
    /// healthy ordered traffic keeps above zero).
    pub stopped_keys: u64,
}

impl Stats {
    /// Tasks not finished yet: available, waiting, running and blocked.
    pub fn backlog(&self) -> u64 {
        self.available + self.waiting + self.running + self.blocked
    }

    /// Each status with its count, in the order of [`Status::ALL`].
    pub fn by_status(&self) -> [(Status, u64); 7] {
        Status::ALL.map(|status| (status, self.count(status)))
    }

    /// The count of one status.
    pub fn count(&self, status: Status) -> u64 {
        match status {
            Status::Available => self.available,
            Status::Waiting => self.waiting,
            Status::Running => self.running,
            Status::Blocked => self.blocked,
            Status::Succeeded => self.succeeded,
            Status::Failed => self.failed,
            Status::Discarded => self.discarded,
        }
    }

    /// Sets [`oldest_due_age`](Self::oldest_due_age) and
    /// [`oldest_running_age`](Self::oldest_running_age).
    pub fn set_ages(&mut self, ages: Ages) {
        self.oldest_due_age = ages.oldest_due;
        self.oldest_running_age = ages.oldest_running;
    }

    /// Sets the count of one status; for backends building a `Stats`.
    pub fn set(&mut self, status: Status, count: u64) {
        let slot = match status {
            Status::Available => &mut self.available,
            Status::Waiting => &mut self.waiting,
            Status::Running => &mut self.running,
            Status::Blocked => &mut self.blocked,
            Status::Succeeded => &mut self.succeeded,
            Status::Failed => &mut self.failed,
            Status::Discarded => &mut self.discarded,
        };
        *slot = count;
    }
}

/// How far behind the outbox is, read without counting anything
/// ([`Maintenance::ages`]): each age is one read of the first index entry
/// of its status, as cheap beside millions of rows as beside ten.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ages {
    /// As [`Stats::oldest_due_age`]: how long the task due longest has
    /// waited to be sent.
    pub oldest_due: Option<Duration>,
    /// As [`Stats::oldest_running_age`]: how long the running task whose
    /// lease ends first has been claimed.
    pub oldest_running: Option<Duration>,
}

impl Ages {
    /// The ages from those a backend read, in microseconds: of the
    /// available task first in claim order, of the waiting task due first
    /// (negative while it is not due yet, then left out), and of the
    /// running task whose lease ends first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use diesel_outbox_core::Ages;
    ///
    /// let ages = Ages::from_us(Some(2_000_000), Some(5_000_000), None);
    /// assert_eq!(ages.oldest_due, Some(Duration::from_secs(5)));
    /// let ages = Ages::from_us(None, Some(-1), Some(750_000));
    /// assert_eq!(ages.oldest_due, None);
    /// assert_eq!(ages.oldest_running, Some(Duration::from_millis(750)));
    /// ```
    pub fn from_us(available: Option<i64>, waiting: Option<i64>, running: Option<i64>) -> Self {
        let age = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
        let overdue = waiting.filter(|us| *us >= 0);
        Self {
            oldest_due: available.max(overdue).map(age),
            oldest_running: running.map(age),
        }
    }
}

/// `filter` for a bulk requeue: the failed tasks it matches; refused,
/// naming `status`, when it asks for another status.
fn requeue_filter(filter: &TaskFilter) -> Result<TaskFilter> {
    match filter.status {
        None => Ok(filter.clone().status(Status::Failed)),
        Some(status) if transition::requeueable(status) => Ok(filter.clone()),
        Some(status) => Err(Error::invalid(
            "status",
            format!("only failed tasks can be requeued, not {status} ones"),
        )),
    }
}

/// `batch` as a statement's row limit: between 1 and `u32::MAX`.
fn batch_limit(batch: usize) -> Result<u32> {
    u32::try_from(batch)
        .ok()
        .filter(|limit| *limit > 0)
        .ok_or_else(|| Error::invalid("batch", "must be between 1 and 4294967295"))
}

/// Signals that new tasks may be due (PostgreSQL `NOTIFY`); the stream ends
/// when its connection is lost.
pub type Wakeups = Pin<Box<dyn Stream<Item = ()> + Send>>;

/// What operators and the [`Relay`](crate::Relay) need beyond sending.
pub trait Maintenance: Store {
    /// Counts per status and the [`Ages`]; see [`Stats`] for which counts
    /// are exact.
    fn stats(&self) -> impl Future<Output = Result<Stats>> + Send;

    /// The ages of [`stats`](Self::stats) alone, without its counts: a few
    /// index reads whatever the backlog, cheap enough for a health check
    /// every second.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use diesel_outbox_core::Maintenance;
    /// # async fn health(store: impl Maintenance) -> diesel_outbox_core::Result<bool> {
    /// let ages = store.ages().await?;
    /// Ok(ages.oldest_due.is_none_or(|age| age < Duration::from_secs(60)))
    /// # }
    /// ```
    fn ages(&self) -> impl Future<Output = Result<Ages>> + Send;

    /// Records `beat` in `outbox_relays` (a relay's row, written anew), and
    /// deletes the rows of relays whose heartbeats stopped a day ago. The
    /// [`Relay`](crate::Relay) calls it every
    /// [`BEAT_INTERVAL`](crate::BEAT_INTERVAL).
    fn beat(&self, beat: &Heartbeat) -> impl Future<Output = Result<()>> + Send;

    /// Deletes the row of the relay whose worker is `owner`: the relay
    /// stopped. The [`Relay`](crate::Relay) calls it when its run ends.
    fn forget_relay(&self, owner: &str) -> impl Future<Output = Result<()>> + Send;

    /// The relays the outbox heard of: live ones, and those whose
    /// heartbeats stopped within the last day (died, or hung), ordered by
    /// owner.
    fn relays(&self) -> impl Future<Output = Result<Vec<RelaySeen>>> + Send;

    /// Makes task `id` available at once if it is failed, clearing its
    /// `expires_at` and keeping its attempts and last error
    /// ([`transition::requeue`](crate::transition::requeue)); `false` when it
    /// is not failed (or absent). The building block of
    /// [`requeue`](Maintenance::requeue).
    fn requeue_failed(&self, id: TaskId) -> impl Future<Output = Result<bool>> + Send;
    /// Discards task `id` if it is available, waiting, blocked or failed
    /// ([`transition::discard`](crate::transition::discard)), letting its
    /// ordering key move on in the same transaction; `false` when it is not
    /// (or absent). The building block of [`discard`](Maintenance::discard).
    fn discard_task(&self, id: TaskId) -> impl Future<Output = Result<bool>> + Send;

    /// Requeues those of `ids` that are failed, in one statement, exactly as
    /// [`requeue_failed`](Maintenance::requeue_failed) does each; returns how
    /// many changed. The building block of
    /// [`requeue_matching`](Maintenance::requeue_matching).
    fn requeue_failed_many(&self, ids: &[TaskId]) -> impl Future<Output = Result<u64>> + Send;

    /// Discards those of `ids` that may be discarded, as
    /// [`discard_task`](Maintenance::discard_task) does each, ordering keys
    /// moving on alike; returns how many were discarded. The building block
    /// of [`discard_matching`](Maintenance::discard_matching): by default one
    /// `discard_task` after the other; a backend may do a batch in one
    /// transaction.
    fn discard_many(&self, ids: &[TaskId]) -> impl Future<Output = Result<u64>> + Send {
        async move {
            let mut discarded = 0;
            for id in ids {
                if self.discard_task(*id).await? {
                    discarded += 1;
                }
            }
            Ok(discarded)
        }
    }

    /// Task `id` as an operator sees it: the task, or, when its row cannot
    /// be read as one (written by another program, say), what can be told
    /// of it, so it can still be shown and discarded. [`Error::NotFound`]
    /// when there is no such row.
    fn inspect(&self, id: TaskId) -> impl Future<Output = Result<Listed>> + Send;

    /// One page of the tasks `filter` matches, with their payloads unless
    /// `page` asks [without](PageRequest::without_payloads), ordered
    /// by id as `page` asks (newest first unless told otherwise); see
    /// [`PageRequest`] for how pages follow each other. A row that cannot
    /// be read as a task is shown as such ([`Page::unreadable`]), beside
    /// the others.
    fn list(
        &self,
        filter: &TaskFilter,
        page: &PageRequest,
    ) -> impl Future<Output = Result<Page>> + Send;

    /// The ids of up to `limit` tasks `filter` matches, above `after` (all
    /// when `None`), lowest first: the batches of
    /// [`requeue_matching`](Maintenance::requeue_matching) and
    /// [`discard_matching`](Maintenance::discard_matching).
    fn matching_ids(
        &self,
        filter: &TaskFilter,
        after: Option<TaskId>,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<TaskId>>> + Send;

    /// Requeues every failed task `filter` matches, as
    /// [`requeue`](Maintenance::requeue) does one, in batches of at most
    /// `batch` tasks (one statement each, so no statement holds locks on
    /// more rows); returns how many were requeued. A filter without a
    /// status means the failed tasks; one with a status other than failed
    /// is refused, naming `status`, as is a `batch` of zero.
    ///
    /// Tasks are taken lowest id first, each batch after the last id of the
    /// one before, so the walk ends even if requeued tasks fail again
    /// meanwhile; a task that fails after the walk passed it stays failed.
    fn requeue_matching(
        &self,
        filter: &TaskFilter,
        batch: usize,
    ) -> impl Future<Output = Result<u64>> + Send {
        async move {
            let filter = requeue_filter(filter)?;
            let limit = batch_limit(batch)?;
            let (mut after, mut requeued) = (None, 0);
            loop {
                let ids = self.matching_ids(&filter, after, limit).await?;
                let Some(last) = ids.last().copied() else {
                    return Ok(requeued);
                };
                requeued += self.requeue_failed_many(&ids).await?;
                if ids.len() < batch {
                    return Ok(requeued);
                }
                after = Some(last);
            }
        }
    }

    /// Discards every task `filter` matches that may be discarded
    /// (available, waiting, blocked or failed), each as
    /// [`discard`](Maintenance::discard) does it, so ordering keys move on
    /// as they would one by one; the ids are read `batch` at a time, lowest
    /// first, and each batch goes to
    /// [`discard_many`](Maintenance::discard_many). Returns how many were
    /// discarded; tasks that are running or finished are left alone and not
    /// counted. A filter whose status may not be discarded is refused,
    /// naming `status`, as is a `batch` of zero.
    fn discard_matching(
        &self,
        filter: &TaskFilter,
        batch: usize,
    ) -> impl Future<Output = Result<u64>> + Send {
        async move {
            let limit = batch_limit(batch)?;
            if let Some(status) = filter.status
                && !transition::discardable(status)
            {
                return Err(Error::invalid(
                    "status",
                    format!("a {status} task cannot be discarded"),
                ));
            }
            let (mut after, mut discarded) = (None, 0);
            loop {
                let ids = self.matching_ids(filter, after, limit).await?;
                let Some(last) = ids.last().copied() else {
                    return Ok(discarded);
                };
                discarded += self.discard_many(&ids).await?;
                if ids.len() < batch {
                    return Ok(discarded);
                }
                after = Some(last);
            }
        }
    }

    /// Deletes up to `limit` tasks finished more than `older_than` ago, in one
    /// statement; returns how many. The building block of
    /// [`purge_finished`](Maintenance::purge_finished).
    fn purge_batch(
        &self,
        older_than: Duration,
        limit: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Gives a failed task another chance: available at once, its deadline
    /// cleared so an expired task really runs again, its attempts and last
    /// error kept. It keeps its place at the head of its ordering key, so the
    /// key's later tasks still wait for it. [`Error::NotFailed`] unless it is
    /// failed, [`Error::NotFound`] when there is no such task.
    fn requeue(&self, id: TaskId) -> impl Future<Output = Result<()>> + Send {
        async move {
            if self.requeue_failed(id).await? {
                return Ok(());
            }
            let status = self.get(id).await?.status;
            Err(Error::NotFailed { id, status })
        }
    }

    /// Gives a task up without sending it: it becomes discarded, and if it
    /// held its ordering key (a failed head, say), the key's next task goes.
    /// [`Error::NotDiscardable`] for a running or finished task (a failed one
    /// excepted), [`Error::NotFound`] when there is no such task.
    fn discard(&self, id: TaskId) -> impl Future<Output = Result<()>> + Send {
        async move {
            if self.discard_task(id).await? {
                return Ok(());
            }
            let status = self.get(id).await?.status;
            Err(Error::NotDiscardable { id, status })
        }
    }

    /// Deletes succeeded, discarded and failed tasks finished more than
    /// `older_than` ago, `batch` rows per statement so no statement holds
    /// locks for long; returns how many were deleted. Unfinished tasks are
    /// never touched, nor a failed task that still holds its ordering key:
    /// deleting it would let the key's later tasks overtake it unnoticed.
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
            let limit = batch_limit(batch)?;
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

    /// How long until the next waiting task becomes due (a scheduled task,
    /// or a retry after its backoff); `None` when none is waiting. The
    /// relay's promotion step sleeps at most this long.
    fn next_due(&self) -> impl Future<Output = Result<Option<Duration>>> + Send;

    /// A stream of wake-ups sent when tasks are committed, if the store
    /// offers one; `None` (the default) means: poll.
    fn wakeups(&self) -> impl Future<Output = Result<Option<Wakeups>>> + Send {
        async { Ok(None) }
    }
}
