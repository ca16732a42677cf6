//! [`transaction`]: business writes and enqueues in one `BEGIN IMMEDIATE`
//! transaction, sent after commit.

use std::future::Future;

use diesel_outbox_core::{Tx, TxBody, Worker};

use crate::{AsyncSqliteConnection, SqliteStore};

/// Runs `body` in a `BEGIN IMMEDIATE` transaction on `conn`; after it
/// commits, every task the body enqueued through its [`Tx`] is sent with
/// [`Worker::send_async`].
///
/// If the body fails or the commit fails, everything rolls back and nothing
/// is sent. A send that fails after commit is retried by the next round.
///
/// The future is `Send` and borrows only `worker`, `conn` and what `body`
/// captures, so it runs inside `tokio::spawn`, and so inside an axum or tonic
/// handler.
///
/// Why `IMMEDIATE`: SQLite has one writer at a time. A plain (deferred)
/// transaction starts as a reader and becomes a writer at its first write;
/// if another connection wrote in between, SQLite refuses the upgrade at once
/// with `SQLITE_BUSY` (waiting could deadlock), and the whole transaction must
/// be run again. A body that reads before it writes (a stock check, say)
/// would meet that under load. `BEGIN IMMEDIATE` takes the write lock first,
/// waiting for it under the connection's busy timeout, so the body never has
/// to upgrade. Open your own transactions the same way: this helper, or
/// `conn.immediate_transaction(...)`.
///
/// ```no_run
/// use diesel_outbox_sqlite::{transaction, AsyncSqliteConnection, SqliteStore};
/// use diesel_outbox_sqlite::outbox::{Task, Worker};
///
/// # async fn demo(worker: Worker<SqliteStore>, conn: &mut AsyncSqliteConnection) -> anyhow::Result<()> {
/// transaction(&worker, conn, async |mut tx| {
///     // diesel::insert_into(orders::table)...execute(tx.conn()).await?;
///     tx.enqueue(Task::json("order.created", 1, &serde_json::json!({ "order": 42 }))?)
///         .await?;
///     anyhow::Ok(())
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would leave its future's Send to inference at each caller (rust-lang/rust#100013)"
)]
pub fn transaction<'a, R, E, F>(
    worker: &'a Worker<SqliteStore>,
    conn: &'a mut AsyncSqliteConnection,
    body: F,
) -> impl Future<Output = Result<R, E>> + Send + 'a
where
    for<'r> F: AsyncFnOnce(Tx<'r, SqliteStore>) -> Result<R, E>
        + TxBody<Tx<'r, SqliteStore>, Result<R, E>, Fut: Send>
        + Send
        + 'a,
    E: From<diesel::result::Error> + Send + 'a,
    R: Send + 'a,
{
    async move {
        let mut enqueued = Vec::new();
        let store = worker.store();
        let value = conn
            .immediate_transaction::<R, E, _>(async |conn| {
                body(Tx::new(conn, store, &mut enqueued)).await
            })
            .await?;
        for id in enqueued {
            worker.send_async(id);
        }
        Ok(value)
    }
}
