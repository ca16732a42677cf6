//! SQLite's hand-written SQL: what a careful user writes on one file.

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Binary, Text},
    sqlite::Sqlite,
};
use diesel_async::RunQueryDsl;
use diesel_outbox_sqlite::AsyncSqliteConnection;
use diesel_outbox_testkit::{TestBackend, TestNames, backlog::Backlog, sqlite::SqliteTestDbNamed};

use super::{Claimed, Prepare, Raw, named};

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// The host clock in microseconds since the epoch, as SQL (the table's
/// defaults use the same expression).
const NOW_US: &str = "CAST(round((julianday('now') - 2440587.5) * 86400000000.0) AS INTEGER)";

/// `n` rows numbered 1..=n, for bulk fills.
fn numbers(n: u64) -> String {
    format!("WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {n})")
}

/// Claims up to `limit` available rows above `after`, reading each as `R`
/// (in no set order): one statement is its own write transaction, so no
/// BEGIN is needed.
async fn claim<N: TestNames, R>(
    conn: &mut AsyncSqliteConnection,
    limit: i64,
    after: i64,
    prepare: Prepare,
) -> anyhow::Result<Vec<R>>
where
    R: QueryableByName<Sqlite> + Send + 'static,
{
    let sql = format!(
        "UPDATE outbox_tasks SET status = 'running', lease_owner = 'raw', \
             attempts = attempts + 1, lease_expires_at = {NOW_US} + 30000000 \
         WHERE id IN (SELECT id FROM outbox_tasks \
             WHERE status = 'available' AND id > ? ORDER BY id LIMIT ?) \
         RETURNING id, kind, version, payload"
    );
    Ok(prepare
        .sql::<Sqlite>(named::<N>(&sql))
        .bind::<BigInt, _>(after)
        .bind::<BigInt, _>(limit)
        .load(conn)
        .await?)
}

/// Marks the claimed `ids` succeeded.
async fn complete<N: TestNames>(
    conn: &mut AsyncSqliteConnection,
    ids: &[i64],
) -> anyhow::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    diesel::sql_query(
        N::names()
            .render(&format!(
                "UPDATE outbox_tasks SET status = 'succeeded', finished_at = {NOW_US}, \
             updated_at = {NOW_US}, lease_owner = NULL, lease_expires_at = NULL \
         WHERE id IN ({})",
                list(ids)
            ))
            .into_owned(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

fn list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

impl<N: TestNames> Raw for SqliteTestDbNamed<N> {
    const NAME: &'static str = "sqlite";
    const DELIVERIES: &'static str = "CREATE TABLE deliveries (task_id INTEGER NOT NULL, \
        attempt INTEGER NOT NULL, duplicate INTEGER NOT NULL, delivered_at INTEGER NOT NULL)";
    const NOW: &'static str = NOW_US;
    const ORDERS: &'static str = "CREATE TABLE orders (id INTEGER PRIMARY KEY, \
        customer TEXT NOT NULL, total_cents INTEGER NOT NULL, created_at INTEGER NOT NULL)";

    async fn first_delivery_latencies(&self) -> anyhow::Result<Vec<i64>> {
        let mut conn = self.connect().await?;
        Ok(diesel::sql_query(
            N::names()
                .render(
                    "SELECT MIN(d.delivered_at) - t.created_at AS id \
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

    async fn insert_order(
        conn: &mut AsyncSqliteConnection,
        id: i64,
        prepare: Prepare,
    ) -> anyhow::Result<()> {
        let insert = format!(
            "INSERT INTO orders (id, customer, total_cents, created_at) VALUES (?, ?, ?, {NOW_US})"
        );
        prepare
            .sql::<Sqlite>(named::<N>(&insert))
            .bind::<BigInt, _>(id)
            .bind::<Text, _>("customer-9")
            .bind::<BigInt, _>(4200)
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn insert_task(
        conn: &mut AsyncSqliteConnection,
        payload: &[u8],
        prepare: Prepare,
    ) -> anyhow::Result<i64> {
        // The table's defaults fill in the times and the status.
        Ok(prepare
            .sql::<Sqlite>(named::<N>(
                "INSERT INTO outbox_tasks (kind, version, payload, headers) \
                 VALUES (?, 1, ?, '{}') RETURNING id",
            ))
            .bind::<Text, _>("order.created")
            .bind::<Binary, _>(payload)
            .get_result::<Id>(conn)
            .await?
            .id)
    }

    const MINIMAL_QUEUE: &'static [&'static str] = &[
        "CREATE TABLE minimal_queue (id INTEGER PRIMARY KEY, \
         kind TEXT NOT NULL, payload BLOB NOT NULL, status TEXT NOT NULL DEFAULT 'pending', \
         created_at INTEGER NOT NULL \
         DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000000.0) AS INTEGER)))",
        "CREATE INDEX minimal_queue_pending_idx ON minimal_queue (id) WHERE status = 'pending'",
    ];

    async fn insert_queued(
        conn: &mut AsyncSqliteConnection,
        payload: &[u8],
    ) -> anyhow::Result<i64> {
        Ok(diesel_outbox_sql::cached::<Sqlite>(
            "INSERT INTO minimal_queue (kind, payload) VALUES (?, ?) RETURNING id",
        )
        .bind::<Text, _>("order.created")
        .bind::<Binary, _>(payload)
        .get_result::<Id>(conn)
        .await?
        .id)
    }

    async fn insert_tasks(
        conn: &mut AsyncSqliteConnection,
        payloads: &[Vec<u8>],
    ) -> anyhow::Result<()> {
        // The ids come back, as the caller needs them to send after commit.
        // Always 100 rows in the bench: one text, prepared once per
        // connection like every other baseline statement.
        let rows = vec!["('order.created', 1, ?, '{}')"; payloads.len()].join(", ");
        let insert = format!(
            "INSERT INTO outbox_tasks (kind, version, payload, headers) VALUES {rows} RETURNING id"
        );
        let mut query = diesel_outbox_sql::cached::<Sqlite>(named::<N>(&insert));
        for payload in payloads {
            query = query.bind::<Binary, _>(payload);
        }
        let ids: Vec<Id> = query.load(conn).await?;
        anyhow::ensure!(ids.len() == payloads.len(), "inserted {} rows", ids.len());
        Ok(())
    }

    async fn drain_batch(
        conn: &mut AsyncSqliteConnection,
        limit: i64,
        after: i64,
        prepare: Prepare,
    ) -> anyhow::Result<Vec<i64>> {
        let claimed: Vec<Id> = claim::<N, _>(conn, limit, after, prepare).await?;
        if claimed.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids: Vec<i64> = claimed.iter().map(|row| row.id).collect();
        ids.sort_unstable();
        complete::<N>(conn, &ids).await?;
        Ok(ids)
    }

    async fn claim_batch(
        conn: &mut AsyncSqliteConnection,
        limit: i64,
        after: i64,
    ) -> anyhow::Result<Vec<Claimed>> {
        let mut claimed: Vec<Claimed> = claim::<N, _>(conn, limit, after, Prepare::Once).await?;
        claimed.sort_unstable_by_key(|row| row.id);
        Ok(claimed)
    }

    async fn complete_batch(conn: &mut AsyncSqliteConnection, ids: &[i64]) -> anyhow::Result<()> {
        complete::<N>(conn, ids).await
    }

    async fn fill_pending(&self, n: u64, kind: &str) -> anyhow::Result<()> {
        self.execute_sql(&format!(
            "{} INSERT INTO outbox_tasks (kind, version, payload, headers) \
             SELECT '{kind}', 1, CAST('{{\"order\":' || n || '}}' AS BLOB), '{{}}' FROM g",
            numbers(n)
        ))
        .await
    }

    async fn fill_backlog(&self, backlog: Backlog, rows: u64) -> anyhow::Result<()> {
        self.execute_sql(&backlog.sqlite(rows)).await
    }

    async fn reset(&self) -> anyhow::Result<()> {
        self.execute_sql(
            "DELETE FROM outbox_tasks; DELETE FROM outbox_ordering_keys; DELETE FROM orders;",
        )
        .await?;
        self.analyze().await
    }

    async fn analyze(&self) -> anyhow::Result<()> {
        self.execute_sql("ANALYZE outbox_tasks").await
    }
}
