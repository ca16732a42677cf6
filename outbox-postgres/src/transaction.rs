//! [`transaction`]: business writes and enqueues in one transaction, sent after commit.

use diesel_async::AsyncPgConnection;
use diesel_outbox_core::{Tx, TxBody, Worker};

use crate::PgStore;

/// Runs `body` in a transaction on `conn`; after it commits, every task the
/// body enqueued through its [`Tx`] is sent with [`Worker::send_async`].
///
/// If the body fails or the commit fails, everything rolls back and nothing
/// is sent. A send that fails after commit is retried by the next round.
///
/// ```no_run
/// use diesel_async::AsyncPgConnection;
/// use diesel_outbox_postgres::{transaction, PgStore};
/// use diesel_outbox_postgres::outbox::{Task, Worker};
///
/// # async fn demo(worker: Worker<PgStore>, conn: &mut AsyncPgConnection) -> anyhow::Result<()> {
/// let order_id = transaction(&worker, conn, async |mut tx| {
///     // diesel::insert_into(orders::table)...execute(tx.conn()).await?;
///     tx.enqueue(Task::json("order.created", 1, &serde_json::json!({ "order": 42 }))?)
///         .await?;
///     Ok::<_, anyhow::Error>(42)
/// })
/// .await?;
/// # let _ = order_id;
/// # Ok(())
/// # }
/// ```
pub async fn transaction<R, E, F>(
    worker: &Worker<PgStore>,
    conn: &mut AsyncPgConnection,
    body: F,
) -> Result<R, E>
where
    for<'r> F: AsyncFnOnce(Tx<'r, PgStore>) -> Result<R, E>
        + TxBody<Tx<'r, PgStore>, Result<R, E>, Fut: Send>
        + Send,
    E: From<diesel::result::Error> + Send,
    R: Send,
{
    diesel_outbox_sql::transaction(worker, conn, body).await
}
