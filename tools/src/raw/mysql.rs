use diesel::{
    QueryableByName,
    mysql::Mysql,
    sql_types::{BigInt, Blob, Text},
};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_core::DatabaseErrorKind;
use diesel_outbox_testkit::{TestBackend, TestNames, backlog::Backlog, mysql::MysqlTestDbNamed};

use super::{Claimed, Prepare, Raw, named};

/// Claims up to `limit` available rows above `after` in one
/// transaction (a locking read, then the update of what it took), and
/// returns them in id order as `R`. `conn` is a
/// [`Raw::drain_connection`], at READ COMMITTED.
async fn claim<N: TestNames, R>(
    conn: &mut AsyncMysqlConnection,
    limit: i64,
    after: i64,
    prepare: Prepare,
) -> anyhow::Result<Vec<R>>
where
    R: QueryableByName<Mysql> + HasId + Send + 'static,
{
    let mut restarts = 0;
    loop {
        let result = conn
            .transaction::<_, diesel::result::Error, _>(async |tx| {
                let claimed: Vec<R> = prepare
                    .sql::<Mysql>(named::<N>(
                        "SELECT id, kind, version, payload FROM outbox_tasks \
                         WHERE status = 'available' AND id > ? \
                         ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
                    ))
                    .bind::<BigInt, _>(after)
                    .bind::<BigInt, _>(limit)
                    .load(tx)
                    .await?;
                if !claimed.is_empty() {
                    let ids: Vec<i64> = claimed.iter().map(HasId::id).collect();
                    tx.batch_execute(&N::names().render(&format!(
                        "UPDATE outbox_tasks SET status = 'running', lease_owner = 'raw', \
                         attempts = attempts + 1, \
                         lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND \
                         WHERE id IN ({})",
                        list(&ids)
                    )))
                    .await?;
                }
                Ok(claimed)
            })
            .await;
        if let Some(settled) = settle(result, &mut restarts) {
            return settled;
        }
    }
}

/// Marks the claimed `ids` succeeded (none: nothing to do), restarting a
/// statement picked as a deadlock's victim.
async fn complete<N: TestNames>(
    conn: &mut AsyncMysqlConnection,
    ids: &[i64],
) -> anyhow::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let update = format!(
        "UPDATE outbox_tasks SET status = 'succeeded', finished_at = UTC_TIMESTAMP(6), \
         updated_at = UTC_TIMESTAMP(6), lease_owner = NULL, lease_expires_at = NULL \
         WHERE id IN ({})",
        list(ids)
    );
    let mut restarts = 0;
    loop {
        let result = conn.batch_execute(&N::names().render(&update)).await;
        if let Some(settled) = settle(result, &mut restarts) {
            return settled;
        }
    }
}

/// Restarts of one transaction before its deadlock is an error.
const MAX_RESTARTS: u32 = 10;

/// What a transaction that ended in `result` comes to, or `None` to run
/// it again: up to [`MAX_RESTARTS`] times when InnoDB picked it as a
/// deadlock's victim, as the server's message asks ("try restarting
/// transaction") and as a user's loop on MySQL must be ready to. Each
/// restart is reported, so a run that needed them says so.
fn settle<T>(result: diesel::QueryResult<T>, restarts: &mut u32) -> Option<anyhow::Result<T>> {
    let error = match result {
        Ok(value) => return Some(Ok(value)),
        Err(error) => diesel_outbox_sql::mysql_error(error),
    };
    if error.database_kind() != Some(DatabaseErrorKind::Deadlock) || *restarts == MAX_RESTARTS {
        return Some(Err(error.into()));
    }
    *restarts += 1;
    eprintln!("bench: mysql raw loop: {error}; transaction restarted");
    None
}

/// A claimed row's id, whatever else was read of it.
trait HasId {
    fn id(&self) -> i64;
}

impl HasId for Id {
    fn id(&self) -> i64 {
        self.id
    }
}

impl HasId for Claimed {
    fn id(&self) -> i64 {
        self.id
    }
}

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

const INSERT: &str = "INSERT INTO outbox_tasks (kind, version, payload, headers, \
    next_attempt_at, last_error, created_at, updated_at) VALUES ";
const ROW: &str = "('order.created', 1, ?, '{}', UTC_TIMESTAMP(6), '', UTC_TIMESTAMP(6), \
    UTC_TIMESTAMP(6))";

/// Ten digits, cross-joined for bulk fills (no generate_series here).
const DIGITS: &str = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
    UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
    UNION ALL SELECT 8 UNION ALL SELECT 9)";

fn list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

fn numbers(n: u64) -> String {
    let tables = n.max(1).to_string().len().max(1);
    let joined: Vec<String> = (0..tables).map(|i| format!("{DIGITS} t{i}")).collect();
    format!("{} LIMIT {n}", joined.join(" CROSS JOIN "))
}

impl<N: TestNames> Raw for MysqlTestDbNamed<N> {
    const NAME: &'static str = "mysql";
    const DELIVERIES: &'static str = "CREATE TABLE deliveries (task_id BIGINT NOT NULL, \
        attempt BIGINT NOT NULL, duplicate INT NOT NULL, delivered_at DATETIME(6) NOT NULL)";
    const NOW: &'static str = "UTC_TIMESTAMP(6)";

    async fn drain_connection(&self) -> anyhow::Result<AsyncMysqlConnection> {
        let mut conn = self.connect().await?;
        conn.batch_execute(
            &N::names().render("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"),
        )
        .await?;
        Ok(conn)
    }

    async fn first_delivery_latencies(&self) -> anyhow::Result<Vec<i64>> {
        let mut conn = self.connect().await?;
        Ok(diesel::sql_query(
            N::names()
                .render(
                    "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, t.created_at, MIN(d.delivered_at)) \
                 AS SIGNED) AS id \
             FROM deliveries d JOIN outbox_tasks t ON t.id = d.task_id \
             GROUP BY t.id, t.created_at",
                )
                .into_owned(),
        )
        .load::<Id>(&mut conn)
        .await?
        .into_iter()
        .map(|row| row.id)
        .collect())
    }
    const ORDERS: &'static str = "CREATE TABLE orders (id BIGINT PRIMARY KEY, \
        customer VARCHAR(64) NOT NULL, total_cents BIGINT NOT NULL, \
        created_at DATETIME(6) NOT NULL)";

    async fn insert_order(
        conn: &mut AsyncMysqlConnection,
        id: i64,
        prepare: Prepare,
    ) -> anyhow::Result<()> {
        prepare
            .sql::<Mysql>(named::<N>(
                "INSERT INTO orders (id, customer, total_cents, created_at) \
                 VALUES (?, ?, ?, UTC_TIMESTAMP(6))",
            ))
            .bind::<BigInt, _>(id)
            .bind::<Text, _>("customer-9")
            .bind::<BigInt, _>(4200)
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn insert_task(
        conn: &mut AsyncMysqlConnection,
        payload: &[u8],
        prepare: Prepare,
    ) -> anyhow::Result<i64> {
        let insert = format!("{INSERT}{ROW}");
        prepare
            .sql::<Mysql>(named::<N>(&insert))
            .bind::<Blob, _>(payload)
            .execute(conn)
            .await?;
        Ok(prepare
            .sql::<Mysql>(named::<N>("SELECT LAST_INSERT_ID() AS id"))
            .get_result::<Id>(conn)
            .await?
            .id)
    }

    /// MySQL has no partial index: the pending rows' index leads with the
    /// status, as the outbox's own does.
    const MINIMAL_QUEUE: &'static [&'static str] = &[
        "CREATE TABLE minimal_queue (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, \
         kind VARCHAR(64) NOT NULL, payload LONGBLOB NOT NULL, \
         status VARCHAR(16) NOT NULL DEFAULT 'pending', \
         created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
         KEY minimal_queue_pending_idx (status, id))",
    ];

    async fn insert_queued(conn: &mut AsyncMysqlConnection, payload: &[u8]) -> anyhow::Result<i64> {
        diesel_outbox_sql::cached::<Mysql>(
            "INSERT INTO minimal_queue (kind, payload) VALUES (?, ?)",
        )
        .bind::<diesel::sql_types::Text, _>("order.created")
        .bind::<Blob, _>(payload)
        .execute(&mut *conn)
        .await?;
        Ok(
            diesel_outbox_sql::cached::<Mysql>("SELECT LAST_INSERT_ID() AS id")
                .get_result::<Id>(conn)
                .await?
                .id,
        )
    }

    async fn insert_tasks(
        conn: &mut AsyncMysqlConnection,
        payloads: &[Vec<u8>],
    ) -> anyhow::Result<()> {
        // Always 100 rows in the bench: one text, prepared once per
        // connection like every other baseline statement.
        let insert = format!("{INSERT}{}", vec![ROW; payloads.len()].join(", "));
        let mut query = diesel_outbox_sql::cached::<Mysql>(named::<N>(&insert));
        for payload in payloads {
            query = query.bind::<Blob, _>(payload);
        }
        query.execute(conn).await?;
        diesel_outbox_sql::cached::<Mysql>(named::<N>("SELECT LAST_INSERT_ID() AS id"))
            .get_result::<Id>(conn)
            .await?;
        Ok(())
    }

    async fn drain_batch(
        conn: &mut AsyncMysqlConnection,
        limit: i64,
        after: i64,
        prepare: Prepare,
    ) -> anyhow::Result<Vec<i64>> {
        let claimed: Vec<Id> = claim::<N, _>(conn, limit, after, prepare).await?;
        let ids: Vec<i64> = claimed.iter().map(|row| row.id).collect();
        if !ids.is_empty() {
            complete::<N>(conn, &ids).await?;
        }
        Ok(ids)
    }

    async fn claim_batch(
        conn: &mut AsyncMysqlConnection,
        limit: i64,
        after: i64,
    ) -> anyhow::Result<Vec<Claimed>> {
        claim::<N, _>(conn, limit, after, Prepare::Once).await
    }

    async fn complete_batch(conn: &mut AsyncMysqlConnection, ids: &[i64]) -> anyhow::Result<()> {
        complete::<N>(conn, ids).await
    }

    async fn fill_pending(&self, n: u64, kind: &str) -> anyhow::Result<()> {
        self.execute_sql(&format!(
            "INSERT INTO outbox_tasks (kind, version, payload, headers, next_attempt_at, \
                 last_error, created_at, updated_at) \
             SELECT '{kind}', 1, '{{}}', '{{}}', UTC_TIMESTAMP(6), '', UTC_TIMESTAMP(6), \
                 UTC_TIMESTAMP(6) FROM {}",
            numbers(n)
        ))
        .await
    }

    async fn fill_backlog(&self, backlog: Backlog, rows: u64) -> anyhow::Result<()> {
        self.execute_sql(&backlog.mysql(rows)).await
    }

    async fn reset(&self) -> anyhow::Result<()> {
        self.execute_sql("TRUNCATE TABLE outbox_tasks").await?;
        self.execute_sql("TRUNCATE TABLE outbox_ordering_keys")
            .await?;
        self.execute_sql("TRUNCATE TABLE orders").await?;
        self.analyze().await
    }

    async fn analyze(&self) -> anyhow::Result<()> {
        self.execute_sql("ANALYZE TABLE outbox_tasks").await
    }
}

#[cfg(test)]
mod tests {
    use diesel::result::{DatabaseErrorKind as Kind, Error as DieselError};

    use super::{MAX_RESTARTS, settle};

    fn failed(message: &str) -> diesel::QueryResult<()> {
        Err(DieselError::DatabaseError(
            Kind::Unknown,
            Box::new(message.to_owned()),
        ))
    }

    #[test]
    fn deadlock_victims_run_again_up_to_the_bound_and_other_errors_do_not() {
        let deadlock = "Deadlock found when trying to get lock; try restarting transaction";
        let mut restarts = 0;
        for _ in 0..MAX_RESTARTS {
            assert!(settle(failed(deadlock), &mut restarts).is_none());
        }
        assert!(matches!(
            settle(failed(deadlock), &mut restarts),
            Some(Err(_))
        ));
        let mut restarts = 0;
        let other = settle(failed("Table 'outbox_tasks' doesn't exist"), &mut restarts);
        assert!(matches!(other, Some(Err(_))));
        assert!(matches!(settle(Ok(()), &mut restarts), Some(Ok(()))));
    }
}
