//! The order service on MySQL 8.0.4+ or MariaDB 10.6+.

use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_mysql::{MysqlStore, outbox::Worker, run_migrations, transaction};

use crate::{Order, OrderId, order_created_task, schema::orders};

/// The `orders` table.
pub const CREATE_ORDERS: &str = "\
CREATE TABLE IF NOT EXISTS orders (
    id          BIGINT NOT NULL PRIMARY KEY,
    customer    VARCHAR(255) NOT NULL,
    total_cents BIGINT NOT NULL CHECK (total_cents >= 0)
) ENGINE = InnoDB";

/// Applies the outbox migrations and creates `orders`; safe to run at every
/// start.
pub async fn migrate(database_url: &str) -> anyhow::Result<()> {
    run_migrations(AsyncMysqlConnection::establish(database_url).await?).await?;
    let mut conn = AsyncMysqlConnection::establish(database_url).await?;
    conn.batch_execute(CREATE_ORDERS).await?;
    Ok(())
}

/// Inserts `order` and enqueues its `order.created` task in one transaction;
/// after the commit the task is sent in the background.
///
/// If the insert fails (a duplicate id, say), the transaction rolls back and
/// nothing is enqueued or sent.
pub async fn place_order(
    worker: &Worker<MysqlStore>,
    conn: &mut AsyncMysqlConnection,
    order: &Order,
) -> anyhow::Result<OrderId> {
    let task = order_created_task(order)?;
    transaction(worker, conn, async |mut tx| {
        diesel::insert_into(orders::table)
            .values(order)
            .execute(tx.conn())
            .await?;
        tx.enqueue(task).await?;
        Ok(OrderId(order.id))
    })
    .await
}
