//! [`Maintenance`] on MySQL/MariaDB: stats, requeue, purge, next due time.
//! There is no `NOTIFY`: relays poll (and sleep until the next due time).

use std::time::Duration;

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Nullable, Text},
};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use outbox_core::{Maintenance, Result, Stats, Status, TaskId};
use outbox_diesel::{micros, mysql_error};

use crate::MysqlStore;

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

const COUNTS: &str = "SELECT status, COUNT(*) AS n FROM outbox_tasks GROUP BY status";

const OLDEST_DUE: &str = "\
SELECT TIMESTAMPDIFF(MICROSECOND, MIN(next_attempt_at), UTC_TIMESTAMP(6)) AS us
FROM outbox_tasks WHERE status = 'pending' AND next_attempt_at <= UTC_TIMESTAMP(6)";

const REQUEUE: &str = "\
UPDATE outbox_tasks
SET status = 'pending', next_attempt_at = UTC_TIMESTAMP(6), finished_at = NULL,
    updated_at = UTC_TIMESTAMP(6)
WHERE id = ? AND status = 'failed'";

const PURGE: &str = "\
DELETE FROM outbox_tasks
WHERE finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY finished_at
LIMIT ?";

const NEXT_DUE: &str = "\
SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(next_attempt_at)) AS us
FROM outbox_tasks WHERE status = 'pending' AND next_attempt_at > UTC_TIMESTAMP(6)";

fn duration_us(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

impl Maintenance for MysqlStore {
    async fn stats(&self) -> Result<Stats> {
        let mut conn = self.conn().await?;
        let counts: Vec<Count> = diesel::sql_query(COUNTS)
            .load(&mut *conn)
            .await
            .map_err(mysql_error)?;
        let oldest: Micros = diesel::sql_query(OLDEST_DUE)
            .get_result(&mut *conn)
            .await
            .map_err(mysql_error)?;
        let mut stats = Stats::default();
        for count in counts {
            let n = u64::try_from(count.n).unwrap_or(0);
            match count.status.parse::<Status>() {
                Ok(Status::Pending) => stats.pending = n,
                Ok(Status::Succeeded) => stats.succeeded = n,
                Ok(Status::Failed) => stats.failed = n,
                Err(error) => tracing::warn!(%error, rows = n, "rows with an unknown status"),
            }
        }
        stats.oldest_due_age = oldest.us.map(duration_us);
        Ok(stats)
    }

    async fn requeue_failed(&self, id: TaskId) -> Result<bool> {
        let changed = diesel::sql_query(REQUEUE)
            .bind::<BigInt, _>(id.get())
            .execute(&mut *self.conn().await?)
            .await
            .map_err(mysql_error)?;
        Ok(changed == 1)
    }

    async fn purge_batch(&self, older_than: Duration, limit: u32) -> Result<u64> {
        let mut conn = self.conn().await?;
        // READ COMMITTED: no gap locks on the finished_at index, so a purge
        // never blocks the application's inserts.
        conn.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .await
            .map_err(mysql_error)?;
        let deleted = diesel::sql_query(PURGE)
            .bind::<BigInt, _>(micros(older_than))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(&mut *conn)
            .await
            .map_err(mysql_error)?;
        Ok(deleted as u64)
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        let next: Micros = diesel::sql_query(NEXT_DUE)
            .get_result(&mut *self.conn().await?)
            .await
            .map_err(mysql_error)?;
        Ok(next.us.map(duration_us))
    }
}
