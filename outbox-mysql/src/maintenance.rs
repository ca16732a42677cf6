//! [`Maintenance`] on MySQL/MariaDB: stats, requeue, discard, listings,
//! purge, next due time. There is no `NOTIFY`: relays poll, and their maintenance task
//! wakes them when it makes tasks available.

use std::time::Duration;

use diesel::{
    OptionalExtension, QueryableByName,
    sql_types::{BigInt, Nullable, Text},
};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{
    Maintenance, Page, PageRequest, Result, Stats, Status, TaskFilter, TaskId,
};
use diesel_outbox_sql::{cached, micros, mysql_error};

use crate::{MysqlStore, discard, listing};

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

/// Exact counts of every status but succeeded, each a range of the
/// `(status, id)` index holding only rows of that status.
const COUNTS: &str = "\
SELECT status, COUNT(*) AS n FROM outbox_tasks
WHERE status IN ('available', 'waiting', 'running', 'blocked', 'failed', 'discarded')
GROUP BY status";

/// The server's estimate of the table's rows.
const TABLE_ROWS: &str = "\
SELECT 'table' AS status, CAST(COALESCE(TABLE_ROWS, 0) AS SIGNED) AS n
FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox_tasks'";

const COUNT_SUCCEEDED: &str =
    "SELECT 'succeeded' AS status, COUNT(*) AS n FROM outbox_tasks WHERE status = 'succeeded'";

/// The available task first in claim order: how long it has been due.
const OLDEST_DUE: &str = "\
SELECT TIMESTAMPDIFF(MICROSECOND, next_attempt_at, UTC_TIMESTAMP(6)) AS us
FROM outbox_tasks WHERE status = 'available' ORDER BY id LIMIT 1";

/// [`transition::requeue`](diesel_outbox_core::transition::requeue) in SQL.
const REQUEUE: &str = "\
UPDATE outbox_tasks
SET status = 'available', next_attempt_at = UTC_TIMESTAMP(6), expires_at = NULL,
    finished_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE id = ? AND status = 'failed'";

/// Unfinished rows are never purged, nor a failed row that holds its key.
const PURGE: &str = "\
DELETE FROM outbox_tasks
WHERE finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
  AND NOT (status = 'failed' AND ordering_key IS NOT NULL)
ORDER BY finished_at
LIMIT ?";

const NEXT_DUE: &str = "\
SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(next_attempt_at)) AS us
FROM outbox_tasks WHERE status = 'waiting'";

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn duration_us(us: i64) -> Duration {
    Duration::from_micros(to_u64(us))
}

/// Below this many rows by the server's estimate, succeeded rows are
/// counted exactly (an index range read of that size takes milliseconds).
const EXACT_BELOW: i64 = 100_000;

impl Maintenance for MysqlStore {
    async fn stats(&self) -> Result<Stats> {
        let mut conn = self.conn().await?;
        let counts: Vec<Count> = diesel::sql_query(COUNTS)
            .load(&mut *conn)
            .await
            .map_err(mysql_error)?;
        let table: Option<Count> = diesel::sql_query(TABLE_ROWS)
            .get_result(&mut *conn)
            .await
            .optional()
            .map_err(mysql_error)?;
        let oldest: Option<Micros> = diesel::sql_query(OLDEST_DUE)
            .get_result(&mut *conn)
            .await
            .optional()
            .map_err(mysql_error)?;
        let mut stats = Stats::default();
        let mut exact = 0;
        for count in counts {
            match count.status.parse::<Status>() {
                Ok(status) => {
                    stats.set(status, to_u64(count.n));
                    exact += count.n;
                }
                Err(error) => tracing::warn!(%error, rows = count.n, "rows with an unknown status"),
            }
        }
        let estimate = table.map_or(0, |table| table.n);
        stats.succeeded = if estimate < EXACT_BELOW {
            let succeeded: Count = diesel::sql_query(COUNT_SUCCEEDED)
                .get_result(&mut *conn)
                .await
                .map_err(mysql_error)?;
            to_u64(succeeded.n)
        } else {
            to_u64(estimate - exact)
        };
        stats.oldest_due_age = oldest.and_then(|oldest| oldest.us).map(duration_us);
        Ok(stats)
    }

    async fn discard_task(&self, id: TaskId) -> Result<bool> {
        discard::one(&mut *self.conn().await?, id, self.isolation()).await
    }

    async fn requeue_failed(&self, id: TaskId) -> Result<bool> {
        let changed = cached(REQUEUE)
            .bind::<BigInt, _>(id.get())
            .execute(&mut *self.conn().await?)
            .await
            .map_err(mysql_error)?;
        Ok(changed == 1)
    }

    async fn discard_many(&self, ids: &[TaskId]) -> Result<u64> {
        discard::many(&mut *self.conn().await?, ids, self.isolation()).await
    }

    async fn requeue_failed_many(&self, ids: &[TaskId]) -> Result<u64> {
        listing::requeue(&mut *self.conn().await?, ids).await
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
        let mut conn = self.conn().await?;
        // READ COMMITTED: no gap locks on the finished_at index, so a purge
        // never blocks the application's inserts.
        self.isolation().apply(&mut conn).await?;
        let deleted = diesel::sql_query(PURGE)
            .bind::<BigInt, _>(micros(older_than))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(&mut *conn)
            .await
            .map_err(mysql_error)?;
        Ok(deleted as u64)
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        let next: Micros = cached(NEXT_DUE)
            .get_result(&mut *self.conn().await?)
            .await
            .map_err(mysql_error)?;
        Ok(next.us.map(duration_us))
    }
}
