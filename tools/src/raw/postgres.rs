use diesel::{
    QueryableByName,
    pg::Pg,
    sql_types::{Array, BigInt, Bytea, Text},
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_outbox_testkit::{TestBackend, TestNames, backlog::Backlog, postgres::PgTestDbNamed};

use super::{Claimed, Prepare, Raw, named};

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// Claims up to `$1` available rows above `$2`. The locked ids reach
/// the update as an array built by a subquery, as in the library's
/// claim: written `id IN (SELECT ...)`, PostgreSQL hashed them against
/// a full scan of any table of fewer than some tens of thousands of
/// rows.
const CLAIM: &str = "UPDATE outbox_tasks SET status = 'running', lease_owner = 'raw', \
    attempts = attempts + 1, lease_expires_at = now() + interval '30 seconds' \
    WHERE id = ANY(ARRAY(SELECT id FROM outbox_tasks \
        WHERE status = 'available' AND id > $2 \
        ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)) \
    RETURNING id, kind, version, payload";

/// Marks the claimed ids in `$1` succeeded.
const COMPLETE: &str = "UPDATE outbox_tasks SET status = 'succeeded', finished_at = now(), \
    updated_at = now(), lease_owner = NULL, lease_expires_at = NULL \
    WHERE id = ANY($1)";

/// Runs [`CLAIM`], reading each claimed row as `R` (in no set order).
async fn claim<N: TestNames, R>(
    conn: &mut AsyncPgConnection,
    limit: i64,
    after: i64,
    prepare: Prepare,
) -> anyhow::Result<Vec<R>>
where
    R: QueryableByName<Pg> + Send + 'static,
{
    Ok(prepare
        .sql::<Pg>(named::<N>(CLAIM))
        .bind::<BigInt, _>(limit)
        .bind::<BigInt, _>(after)
        .load(conn)
        .await?)
}

/// Runs [`COMPLETE`] for `ids`.
async fn complete<N: TestNames>(
    conn: &mut AsyncPgConnection,
    ids: &[i64],
    prepare: Prepare,
) -> anyhow::Result<()> {
    prepare
        .sql::<Pg>(named::<N>(COMPLETE))
        .bind::<Array<BigInt>, _>(ids)
        .execute(conn)
        .await?;
    Ok(())
}

impl<N: TestNames> Raw for PgTestDbNamed<N> {
    const NAME: &'static str = "postgres";
    const DELIVERIES: &'static str = "CREATE TABLE deliveries (task_id BIGINT NOT NULL, \
        attempt BIGINT NOT NULL, duplicate INT NOT NULL, delivered_at TIMESTAMPTZ NOT NULL)";
    const NOW: &'static str = "clock_timestamp()";

    async fn first_delivery_latencies(&self) -> anyhow::Result<Vec<i64>> {
        let mut conn = self.connect().await?;
        Ok(diesel::sql_query(N::names().render(
                    "SELECT (EXTRACT(EPOCH FROM MIN(d.delivered_at) - t.created_at) * 1000000)::bigint \
                 AS id \
             FROM deliveries d JOIN outbox_tasks t ON t.id = d.task_id \
             GROUP BY t.id, t.created_at",
        ).into_owned())
        .load::<Id>(&mut conn)
        .await?
        .into_iter()
        .map(|row| row.id)
        .collect())
    }
    const ORDERS: &'static str = "CREATE TABLE orders (id BIGINT PRIMARY KEY, \
        customer TEXT NOT NULL, total_cents BIGINT NOT NULL, \
        created_at TIMESTAMPTZ NOT NULL DEFAULT now())";

    async fn insert_order(
        conn: &mut AsyncPgConnection,
        id: i64,
        prepare: Prepare,
    ) -> anyhow::Result<()> {
        prepare
            .sql::<Pg>(named::<N>(
                "INSERT INTO orders (id, customer, total_cents) VALUES ($1, $2, $3)",
            ))
            .bind::<BigInt, _>(id)
            .bind::<Text, _>("customer-9")
            .bind::<BigInt, _>(4200)
            .execute(conn)
            .await?;
        Ok(())
    }

    async fn insert_task(
        conn: &mut AsyncPgConnection,
        payload: &[u8],
        prepare: Prepare,
    ) -> anyhow::Result<i64> {
        Ok(prepare
            .sql::<Pg>(named::<N>(
                "INSERT INTO outbox_tasks (kind, version, payload, headers) \
                 VALUES ($1, 1, $2, '{}') RETURNING id",
            ))
            .bind::<Text, _>("order.created")
            .bind::<Bytea, _>(payload)
            .get_result::<Id>(conn)
            .await?
            .id)
    }

    const MINIMAL_QUEUE: &'static [&'static str] = &[
        "CREATE TABLE minimal_queue (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
         kind TEXT NOT NULL, payload BYTEA NOT NULL, status TEXT NOT NULL DEFAULT 'pending', \
         created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        "CREATE INDEX minimal_queue_pending_idx ON minimal_queue (id) WHERE status = 'pending'",
    ];

    async fn insert_queued(conn: &mut AsyncPgConnection, payload: &[u8]) -> anyhow::Result<i64> {
        Ok(diesel_outbox_sql::cached::<Pg>(
            "INSERT INTO minimal_queue (kind, payload) VALUES ($1, $2) RETURNING id",
        )
        .bind::<Text, _>("order.created")
        .bind::<Bytea, _>(payload)
        .get_result::<Id>(conn)
        .await?
        .id)
    }

    async fn insert_tasks(
        conn: &mut AsyncPgConnection,
        payloads: &[Vec<u8>],
    ) -> anyhow::Result<()> {
        // The ids come back, as from the single insert: to send after commit.
        let ids: Vec<Id> = diesel_outbox_sql::cached::<Pg>(named::<N>(
            "INSERT INTO outbox_tasks (kind, version, payload, headers) \
             SELECT 'order.created', 1, p, '{}' FROM unnest($1::bytea[]) AS p RETURNING id",
        ))
        .bind::<Array<Bytea>, _>(payloads)
        .load(conn)
        .await?;
        anyhow::ensure!(
            ids.len() == payloads.len(),
            "inserted {} of {}",
            ids.len(),
            payloads.len()
        );
        Ok(())
    }

    async fn drain_batch(
        conn: &mut AsyncPgConnection,
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
        complete::<N>(conn, &ids, prepare).await?;
        Ok(ids)
    }

    async fn claim_batch(
        conn: &mut AsyncPgConnection,
        limit: i64,
        after: i64,
    ) -> anyhow::Result<Vec<Claimed>> {
        let mut claimed: Vec<Claimed> = claim::<N, _>(conn, limit, after, Prepare::Once).await?;
        claimed.sort_unstable_by_key(|row| row.id);
        Ok(claimed)
    }

    async fn complete_batch(conn: &mut AsyncPgConnection, ids: &[i64]) -> anyhow::Result<()> {
        complete::<N>(conn, ids, Prepare::Once).await
    }

    async fn fill_pending(&self, n: u64, kind: &str) -> anyhow::Result<()> {
        self.execute_sql(&format!(
            "INSERT INTO outbox_tasks (kind, version, payload, headers) \
             SELECT '{kind}', 1, convert_to('{{\"order\":' || g || '}}', 'UTF8'), '{{}}' \
             FROM generate_series(1, {n}) AS g"
        ))
        .await
    }

    async fn fill_backlog(&self, backlog: Backlog, rows: u64) -> anyhow::Result<()> {
        self.execute_sql(&backlog.postgres(rows)).await
    }

    async fn reset(&self) -> anyhow::Result<()> {
        self.execute_sql("TRUNCATE outbox_tasks, outbox_ordering_keys, orders")
            .await?;
        self.analyze().await
    }

    async fn analyze(&self) -> anyhow::Result<()> {
        self.execute_sql("ANALYZE outbox_tasks").await
    }

    fn notifying_store(&self) -> Option<diesel_outbox_postgres::PgStore> {
        Some(self.store().clone().with_notify())
    }
}
