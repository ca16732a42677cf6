//! [`transaction`]: business writes and enqueues in one transaction, sent after commit.

use std::future::Future;

use diesel_async::AsyncPgConnection;
use diesel_outbox_core::{Tx, TxBody, Worker};

use crate::PgStore;

/// Runs `body` in a transaction on `conn`; after it commits, every task the
/// body enqueued through its [`Tx`] is sent with [`Worker::send_async`].
///
/// If the body fails or the commit fails, everything rolls back and nothing
/// is sent. A send that fails after commit is retried by the next round.
///
/// The future is `Send` and borrows only `worker`, `conn` and what `body`
/// captures, so it runs inside `tokio::spawn`, and so inside an axum or tonic
/// handler.
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
pub fn transaction<'a, R, E, F>(
    worker: &'a Worker<PgStore>,
    conn: &'a mut AsyncPgConnection,
    body: F,
) -> impl Future<Output = Result<R, E>> + Send + 'a
where
    for<'r> F: AsyncFnOnce(Tx<'r, PgStore>) -> Result<R, E>
        + TxBody<Tx<'r, PgStore>, Result<R, E>, Fut: Send>
        + Send
        + 'a,
    E: From<diesel::result::Error> + Send + 'a,
    R: Send + 'a,
{
    diesel_outbox_sql::transaction(worker, conn, body)
}
