//! [`Maintenance`] on SQLite: stats, requeue, discard, listings, purge,
//! next due time.
//! There is no `NOTIFY`: relays poll, and their maintenance task wakes them
//! when it makes tasks available.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use diesel::{
    OptionalExtension, QueryableByName,
    sql_types::{BigInt, Nullable, Text},
    sqlite::Sqlite,
};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{
    Maintenance, Page, PageRequest, Result, Stats, Status, TaskFilter, TaskId,
};
use diesel_outbox_sql::{cached, sqlite_error};

use crate::{
    SqliteStore, discard, listing,
    timestamp::{self, to_micros},
};

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Micros {
    #[diesel(sql_type = Nullable<BigInt>)]
    us: Option<i64>,
}

/// Exact counts of every status, succeeded included: one pass over the
/// `(status, id)` index (about 35 ms for a million rows, release build), so
/// even a long retained history costs a fraction of a second. It runs as a
/// read, which in WAL mode never waits for writers nor holds them up.
pub(crate) const COUNTS: &str = "\
SELECT status, COUNT(*) AS n FROM outbox_tasks INDEXED BY outbox_tasks_claim_idx
GROUP BY status";

/// The available task first in claim order: when it became due.
pub(crate) const OLDEST_DUE: &str = "\
SELECT next_attempt_at AS us FROM outbox_tasks INDEXED BY outbox_tasks_claim_idx
WHERE status = 'available' ORDER BY id LIMIT 1";

/// [`transition::requeue`](diesel_outbox_core::transition::requeue) in SQL.
const REQUEUE: &str = "\
UPDATE outbox_tasks
SET status = 'available', next_attempt_at = $1, expires_at = NULL, finished_at = NULL,
    updated_at = $1
WHERE id = $2 AND status = 'failed'";

/// Unfinished rows are never purged, nor a failed row that holds its key.
/// `$1` the cut-off, `$2` the limit.
pub(crate) const PURGE: &str = "\
DELETE FROM outbox_tasks WHERE id IN (
    SELECT id FROM outbox_tasks INDEXED BY outbox_tasks_finished_idx
    WHERE finished_at IS NOT NULL AND finished_at < $1
      AND NOT (status = 'failed' AND ordering_key IS NOT NULL)
    ORDER BY finished_at
    LIMIT $2)";

pub(crate) const NEXT_DUE: &str = "\
SELECT MIN(next_attempt_at) AS us FROM outbox_tasks INDEXED BY outbox_tasks_due_idx
WHERE status = 'waiting'";

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// How long from `from` to `to`, zero when `to` is not later.
fn between(from: DateTime<Utc>, to: DateTime<Utc>) -> Duration {
    (to - from).to_std().unwrap_or_default()
}

impl Maintenance for SqliteStore {
    async fn stats(&self) -> Result<Stats> {
        let mut conn = self.conn().await?;
        let counts: Vec<Count> = cached::<Sqlite>(COUNTS)
            .load(&mut *conn)
            .await
            .map_err(sqlite_error)?;
        let oldest: Option<Micros> = cached::<Sqlite>(OLDEST_DUE)
            .get_result(&mut *conn)
            .await
            .optional()
            .map_err(sqlite_error)?;
        let now = timestamp::now();
        let mut stats = Stats::default();
        for count in counts {
            match count.status.parse::<Status>() {
                Ok(status) => stats.set(status, to_u64(count.n)),
                Err(error) => tracing::warn!(%error, rows = count.n, "rows with an unknown status"),
            }
        }
        stats.oldest_due_age = oldest
            .and_then(|oldest| oldest.us)
            .and_then(timestamp::from_micros)
            .map(|due| between(due, now));
        Ok(stats)
    }

    async fn discard_task(&self, id: TaskId) -> Result<bool> {
        let (_turn, mut conn) = self.writer().await?;
        discard::one(&mut conn, id).await
    }

    async fn requeue_failed(&self, id: TaskId) -> Result<bool> {
        let (_turn, mut conn) = self.writer().await?;
        let changed = cached::<Sqlite>(REQUEUE)
            .bind::<BigInt, _>(to_micros(timestamp::now()))
            .bind::<BigInt, _>(id.get())
            .execute(&mut *conn)
            .await
            .map_err(sqlite_error)?;
        Ok(changed == 1)
    }

    async fn requeue_failed_many(&self, ids: &[TaskId]) -> Result<u64> {
        let (_turn, mut conn) = self.writer().await?;
        listing::requeue(&mut conn, ids).await
    }

    async fn list(&self, filter: &TaskFilter, page: &PageRequest) -> Result<Page> {
        listing::page(&mut *self.conn().await?, filter, page).await
    }

    async fn matching_ids(
        &self,
        filter: &TaskFilter,
        after: Option<TaskId>,
        limit: u32,
    ) -> Result<Vec<TaskId>> {
        listing::ids(&mut *self.conn().await?, filter, after, limit).await
    }

    async fn purge_batch(&self, older_than: Duration, limit: u32) -> Result<u64> {
        let (_turn, mut conn) = self.writer().await?;
        let now = timestamp::now();
        let cutoff = TimeDelta::from_std(older_than)
            .ok()
            .and_then(|age| now.checked_sub_signed(age))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let deleted = cached::<Sqlite>(PURGE)
            .bind::<BigInt, _>(to_micros(cutoff))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(&mut *conn)
            .await
            .map_err(sqlite_error)?;
        Ok(deleted as u64)
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        let next: Micros = cached::<Sqlite>(NEXT_DUE)
            .get_result(&mut *self.conn().await?)
            .await
            .map_err(sqlite_error)?;
        let now = timestamp::now();
        Ok(next.us.map(|us| match timestamp::from_micros(us) {
            Some(due) => between(now, due),
            // Beyond what chrono holds: ages away, or long past.
            None if us > 0 => Duration::MAX,
            None => Duration::ZERO,
        }))
    }
}
