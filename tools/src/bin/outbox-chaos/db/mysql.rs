//! [`ChaosDb`] on MySQL/MariaDB.

use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{Store, TaskId, Worker};
use diesel_outbox_mysql::MysqlStore;
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};

use super::{ChaosDb, Line, OrderId, task};
use crate::raw::{Prepare, Raw};

impl ChaosDb for MysqlTestDb {
    type Server = crate::servers::mariadb::MariaDbServer;

    async fn place_order(
        worker: &Worker<MysqlStore>,
        conn: &mut AsyncMysqlConnection,
        order: i64,
    ) -> anyhow::Result<TaskId> {
        let task = task(order, false)?;
        diesel_outbox_mysql::transaction(worker, conn, async |mut tx| {
            Self::insert_order(tx.conn(), order, Prepare::Once).await?;
            Ok::<_, anyhow::Error>(tx.enqueue(task).await?)
        })
        .await
    }

    async fn place_order_pooled(worker: &Worker<MysqlStore>, order: i64) -> anyhow::Result<TaskId> {
        let mut conn = worker.store().pool().get().await?;
        Self::place_order(worker, &mut conn, order).await
    }

    async fn place_keyed_order(
        worker: &Worker<MysqlStore>,
        business: &MysqlStore,
        order: i64,
        key: &str,
    ) -> anyhow::Result<TaskId> {
        let task = task(order, false)?.ordering_key(key);
        diesel_outbox_mysql::transaction_pooled(worker, business.pool(), async |mut tx| {
            Self::insert_order(tx.conn(), order, Prepare::Once).await?;
            Ok::<_, anyhow::Error>(tx.enqueue(task).await?)
        })
        .await
    }

    async fn enqueue_orders_pooled(
        store: &MysqlStore,
        orders: &[i64],
    ) -> anyhow::Result<Vec<TaskId>> {
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
            "SELECT CONCAT('session ', p.id, ' idle for ', p.time, ' s in a transaction begun ', \
             t.trx_started, ', ', t.trx_rows_locked, ' rows locked') AS line \
             FROM information_schema.innodb_trx t \
             JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id \
             WHERE p.db = DATABASE() AND p.command = 'Sleep' AND p.time >= {}",
            idle_for.as_secs()
        ))
        .load(&mut conn)
        .await?;
        Ok(rows.into_iter().map(|row| row.line).collect())
    }
}
