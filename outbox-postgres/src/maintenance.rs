//! [`Maintenance`] on PostgreSQL: stats, requeue, purge, next due time, wake-ups.

use std::time::Duration;

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Nullable},
};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use futures_util::StreamExt;
use outbox_core::{Maintenance, Result, Stats, TaskId, Wakeups};
use outbox_diesel::{micros, postgres_error};
use tokio::sync::mpsc;

use crate::PgStore;

/// The channel `enqueue` notifies on when the store opted in to `NOTIFY`.
pub const CHANNEL: &str = "outbox_tasks";
/// The notification itself, on [`CHANNEL`].
pub(crate) const NOTIFY: &str = "SELECT pg_notify('outbox_tasks', '')";

#[derive(QueryableByName)]
struct Counts {
    #[diesel(sql_type = BigInt)]
    pending: i64,
    #[diesel(sql_type = BigInt)]
    succeeded: i64,
    #[diesel(sql_type = BigInt)]
    failed: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    oldest_due_us: Option<i64>,
}

#[derive(QueryableByName)]
struct Micros {
    #[diesel(sql_type = Nullable<BigInt>)]
    us: Option<i64>,
}

const STATS: &str = "\
SELECT COUNT(*) FILTER (WHERE status = 'pending') AS pending,
       COUNT(*) FILTER (WHERE status = 'succeeded') AS succeeded,
       COUNT(*) FILTER (WHERE status = 'failed') AS failed,
       (EXTRACT(EPOCH FROM now() - MIN(next_attempt_at)
            FILTER (WHERE status = 'pending' AND next_attempt_at <= now())) * 1000000)::bigint
           AS oldest_due_us
FROM outbox_tasks";

const REQUEUE: &str = "\
UPDATE outbox_tasks
SET status = 'pending', next_attempt_at = now(), finished_at = NULL, updated_at = now()
WHERE id = $1 AND status = 'failed'";

const PURGE: &str = "\
DELETE FROM outbox_tasks WHERE id IN (
    SELECT id FROM outbox_tasks
    WHERE finished_at < now() - $1 * interval '1 microsecond'
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED)";

const NEXT_DUE: &str = "\
SELECT (EXTRACT(EPOCH FROM MIN(next_attempt_at) - now()) * 1000000)::bigint AS us
FROM outbox_tasks WHERE status = 'pending' AND next_attempt_at > now()";

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn duration_us(us: i64) -> Duration {
    Duration::from_micros(to_u64(us))
}

impl Maintenance for PgStore {
    async fn stats(&self) -> Result<Stats> {
        let counts: Counts = diesel::sql_query(STATS)
            .get_result(&mut *self.conn().await?)
            .await
            .map_err(postgres_error)?;
        let mut stats = Stats::default();
        stats.pending = to_u64(counts.pending);
        stats.succeeded = to_u64(counts.succeeded);
        stats.failed = to_u64(counts.failed);
        stats.oldest_due_age = counts.oldest_due_us.map(duration_us);
        Ok(stats)
    }

    async fn requeue_failed(&self, id: TaskId) -> Result<bool> {
        let changed = diesel::sql_query(REQUEUE)
            .bind::<BigInt, _>(id.get())
            .execute(&mut *self.conn().await?)
            .await
            .map_err(postgres_error)?;
        Ok(changed == 1)
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
        let next: Micros = diesel::sql_query(NEXT_DUE)
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
