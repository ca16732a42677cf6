//! [`Maintenance`] on PostgreSQL: stats, requeue, discard, listings, purge,
//! next due time, wake-ups.

use std::time::Duration;

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Nullable, Text},
};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_core::{
    Maintenance, Page, PageRequest, Result, Stats, Status, TaskFilter, TaskId, Wakeups,
};
use diesel_outbox_sql::{cached, micros, postgres_error};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::{PgStore, discard, listing};

/// The channel `enqueue` notifies on when the store opted in to `NOTIFY`.
pub const CHANNEL: &str = "outbox_tasks";
/// The notification itself, on [`CHANNEL`].
pub(crate) const NOTIFY: &str = "SELECT pg_notify('outbox_tasks', '')";

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

/// Exact counts, each through the index holding only its status; the
/// planner's row estimate of the table, from which the succeeded rows are
/// estimated on a large table; and the age of the available task first in
/// claim order.
const STATS: &str = "\
SELECT 'available' AS status, COUNT(*) AS n FROM outbox_tasks WHERE status = 'available'
UNION ALL SELECT 'waiting', COUNT(*) FROM outbox_tasks WHERE status = 'waiting'
UNION ALL SELECT 'running', COUNT(*) FROM outbox_tasks WHERE status = 'running'
UNION ALL SELECT 'blocked', COUNT(*) FROM outbox_tasks WHERE status = 'blocked'
UNION ALL SELECT 'failed', COUNT(*) FROM outbox_tasks WHERE status = 'failed'
UNION ALL SELECT 'discarded', COUNT(*) FROM outbox_tasks WHERE status = 'discarded'
UNION ALL SELECT 'table', reltuples::bigint FROM pg_class WHERE oid = 'outbox_tasks'::regclass
UNION ALL SELECT 'oldest_due_us', COALESCE((
    SELECT (EXTRACT(EPOCH FROM now() - next_attempt_at) * 1000000)::bigint
    FROM outbox_tasks WHERE status = 'available' ORDER BY id LIMIT 1), -1)";

/// Below this many rows by the planner's estimate (`-1` before the table was
/// first analysed), succeeded rows are counted exactly: an index read of
/// that size takes milliseconds.
const EXACT_BELOW: i64 = 100_000;

/// The exact count of succeeded rows, on a small table.
const COUNT_SUCCEEDED: &str =
    "SELECT 'succeeded' AS status, COUNT(*) AS n FROM outbox_tasks WHERE status = 'succeeded'";

/// [`transition::requeue`](diesel_outbox_core::transition::requeue) in SQL.
const REQUEUE: &str = "\
UPDATE outbox_tasks
SET status = 'available', next_attempt_at = now(), expires_at = NULL, finished_at = NULL,
    updated_at = now()
WHERE id = $1 AND status = 'failed'";

/// Unfinished rows are never purged, nor a failed row that holds its key.
/// The rows it locked are deleted through the primary key, handed over as
/// an array as in the moves.
const PURGE: &str = "\
DELETE FROM outbox_tasks WHERE id = ANY(ARRAY(
    SELECT id FROM outbox_tasks
    WHERE finished_at < now() - $1 * interval '1 microsecond'
      AND NOT (status = 'failed' AND ordering_key IS NOT NULL)
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED))";

const NEXT_DUE: &str = "\
SELECT (EXTRACT(EPOCH FROM MIN(next_attempt_at) - now()) * 1000000)::bigint AS us
FROM outbox_tasks WHERE status = 'waiting'";

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn duration_us(us: i64) -> Duration {
    Duration::from_micros(to_u64(us))
}

impl Maintenance for PgStore {
    async fn stats(&self) -> Result<Stats> {
        let mut conn = self.conn().await?;
        let counts: Vec<Count> = diesel::sql_query(STATS)
            .load(&mut *conn)
            .await
            .map_err(postgres_error)?;
        let mut stats = Stats::default();
        let (mut table, mut exact) = (-1, 0);
        for count in counts {
            match count.status.as_str() {
                "table" => table = count.n,
                "oldest_due_us" => {
                    stats.oldest_due_age = (count.n >= 0).then(|| duration_us(count.n));
                }
                status => {
                    if let Ok(status) = status.parse::<Status>() {
                        stats.set(status, to_u64(count.n));
                        exact += count.n;
                    }
                }
            }
        }
        stats.succeeded = if table < EXACT_BELOW {
            let succeeded: Count = diesel::sql_query(COUNT_SUCCEEDED)
                .get_result(&mut *conn)
                .await
                .map_err(postgres_error)?;
            to_u64(succeeded.n)
        } else {
            to_u64(table - exact)
        };
        Ok(stats)
    }

    async fn discard_task(&self, id: TaskId) -> Result<bool> {
        discard::one(&mut *self.conn().await?, id).await
    }

    async fn requeue_failed(&self, id: TaskId) -> Result<bool> {
        let changed = cached(REQUEUE)
            .bind::<BigInt, _>(id.get())
            .execute(&mut *self.conn().await?)
            .await
            .map_err(postgres_error)?;
        Ok(changed == 1)
    }

    async fn discard_many(&self, ids: &[TaskId]) -> Result<u64> {
        discard::many(&mut *self.conn().await?, ids).await
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
        let deleted = diesel::sql_query(PURGE)
            .bind::<BigInt, _>(micros(older_than))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(&mut *self.conn().await?)
            .await
            .map_err(postgres_error)?;
        Ok(deleted as u64)
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        let next: Micros = cached(NEXT_DUE)
            .get_result(&mut *self.conn().await?)
            .await
            .map_err(postgres_error)?;
        Ok(next.us.map(duration_us))
    }

    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        if !self.notifies() {
            return Ok(None);
        }
        // A connection of its own for as long as the stream lives.
        let mut conn = diesel_async::pooled_connection::deadpool::Object::take(self.conn().await?);
        conn.batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(postgres_error)?;
        let (sender, receiver) = mpsc::channel::<()>(1);
        tokio::spawn(async move {
            let notifications = conn.notifications_stream();
            tokio::pin!(notifications);
            loop {
                tokio::select! {
                    notification = notifications.next() => match notification {
                        // A full channel already holds a wake-up: coalesce.
                        Some(Ok(_)) => { let _ = sender.try_send(()); }
                        Some(Err(error)) => {
                            tracing::warn!(%error, "LISTEN connection failed");
                            break;
                        }
                        None => break,
                    },
                    () = sender.closed() => break,
                }
            }
        });
        let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|()| ((), receiver))
        });
        Ok(Some(Box::pin(stream)))
    }
}
