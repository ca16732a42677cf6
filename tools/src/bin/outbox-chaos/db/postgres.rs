//! [`ChaosDb`] on PostgreSQL.

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use diesel_outbox_core::{Store, TaskId, Worker};
use diesel_outbox_postgres::PgStore;
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb};

use super::{ChaosDb, Line, OrderId, task};
use crate::raw::{Prepare, Raw};

impl ChaosDb for PgTestDb {
    type Server = crate::servers::postgres::PgServer;

    async fn place_order(
        worker: &Worker<PgStore>,
        conn: &mut AsyncPgConnection,
        order: i64,
    ) -> anyhow::Result<TaskId> {
        let task = task(order, false)?;
        diesel_outbox_postgres::transaction(worker, conn, async |mut tx| {
            Self::insert_order(tx.conn(), order, Prepare::Once).await?;
            Ok::<_, anyhow::Error>(tx.enqueue(task).await?)
        })
        .await
    }

    async fn place_order_pooled(worker: &Worker<PgStore>, order: i64) -> anyhow::Result<TaskId> {
        let mut conn = worker.store().pool().get().await?;
        Self::place_order(worker, &mut conn, order).await
    }

    async fn place_keyed_order(
        worker: &Worker<PgStore>,
        business: &PgStore,
        order: i64,
        key: &str,
    ) -> anyhow::Result<TaskId> {
        let task = task(order, false)?.ordering_key(key);
        diesel_outbox_postgres::transaction_pooled(worker, business.pool(), async |mut tx| {
            Self::insert_order(tx.conn(), order, Prepare::Once).await?;
            Ok::<_, anyhow::Error>(tx.enqueue(task).await?)
        })
        .await
    }

    async fn enqueue_orders_pooled(store: &PgStore, orders: &[i64]) -> anyhow::Result<Vec<TaskId>> {
        let tasks = orders
            .iter()
            .map(|order| task(*order, false))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut conn = store.pool().get().await?;
        conn.transaction::<_, anyhow::Error, _>(async |tx| {
            for order in orders {
                Self::insert_order(tx, *order, Prepare::Once).await?;
            }
            Ok(store.enqueue_many(tx, tasks).await?)
        })
        .await
    }

    async fn order_ids(&self) -> anyhow::Result<Vec<i64>> {
        let mut conn = self.connect().await?;
        let rows: Vec<OrderId> = diesel::sql_query("SELECT id FROM orders ORDER BY id")
            .load(&mut conn)
            .await?;
        Ok(rows.into_iter().map(|row| row.id).collect())
    }

    async fn idle_in_transaction(
        &self,
        idle_for: std::time::Duration,
    ) -> anyhow::Result<Vec<String>> {
        let mut conn = self.connect().await?;
        let rows: Vec<Line> = diesel::sql_query(format!(
            "SELECT format('session %s idle for %s s in a transaction begun %s, last statement: %s', \
             pid, floor(extract(epoch FROM clock_timestamp() - state_change)), xact_start, \
             left(query, 120)) AS line \
             FROM pg_stat_activity \
             WHERE datname = current_database() AND state LIKE 'idle in transaction%' \
             AND state_change <= clock_timestamp() - make_interval(secs => {})",
            idle_for.as_secs()
        ))
        .load(&mut conn)
        .await?;
        Ok(rows.into_iter().map(|row| row.line).collect())
    }
}
