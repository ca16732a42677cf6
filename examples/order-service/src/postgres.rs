//! The order service on PostgreSQL.

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_postgres::{PgStore, outbox::Worker, run_migrations, transaction};

use crate::{Order, OrderId, order_created_task, schema::orders};

/// The `orders` table. `placed_at` defaults to `now()`, the start of the
/// placing transaction.
pub const CREATE_ORDERS: &str = "\
CREATE TABLE IF NOT EXISTS orders (
    id          BIGINT PRIMARY KEY,
    customer    TEXT NOT NULL,
    total_cents BIGINT NOT NULL CHECK (total_cents >= 0),
    placed_at   TIMESTAMPTZ(6) NOT NULL DEFAULT now()
)";

/// Applies the outbox migrations and creates `orders`; safe to run at every
/// start.
pub async fn migrate(database_url: &str) -> anyhow::Result<()> {
    run_migrations(AsyncPgConnection::establish(database_url).await?).await?;
    let mut conn = AsyncPgConnection::establish(database_url).await?;
    conn.batch_execute(CREATE_ORDERS).await?;
    Ok(())
}

/// Inserts `order` and enqueues its `order.created` task in one transaction;
/// after the commit the task is sent in the background.
///
/// If the insert fails (a duplicate id, say), the transaction rolls back and
/// nothing is enqueued or sent.
pub async fn place_order(
    worker: &Worker<PgStore>,
    conn: &mut AsyncPgConnection,
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
