//! The caller's transaction: checking for one, and running one that sends after commit.

use std::future::Future;

use diesel_async::{AsyncConnection, TransactionManager};
use diesel_outbox_core::{Error, Result, Store, Tx, TxBody, Worker};

/// Fails with [`Error::NotTransaction`] unless `conn` is inside a transaction
/// opened through diesel-async (`conn.transaction(...)`).
pub fn require_transaction<C: AsyncConnection>(conn: &mut C) -> Result<()> {
    match C::TransactionManager::transaction_manager_status_mut(conn).transaction_depth() {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Error::NotTransaction),
        Err(e) => Err(crate::error::any_backend_error(e)),
    }
}

/// Runs `body` in a transaction on `conn`; after it commits, every task the
/// body enqueued through its [`Tx`] is sent with [`Worker::send_async`].
///
/// If the body fails or the commit fails, everything rolls back and nothing
/// is sent. A send that fails after commit is retried by the next round.
///
/// The future is `Send` and borrows only `worker`, `conn` and what `body`
/// captures, so it runs inside `tokio::spawn`, and so inside an axum or tonic
/// handler.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would leave its future's Send to inference at each caller (rust-lang/rust#100013)"
)]
pub fn transaction<'a, S, R, E, F>(
    worker: &'a Worker<S>,
    conn: &'a mut S::Conn,
    body: F,
) -> impl Future<Output = Result<R, E>> + Send + 'a
where
    S: Store,
    S::Conn: AsyncConnection,
    for<'r> F: AsyncFnOnce(Tx<'r, S>) -> Result<R, E>
        + TxBody<Tx<'r, S>, Result<R, E>, Fut: Send>
        + Send
        + 'a,
    E: From<diesel::result::Error> + Send + 'a,
    R: Send + 'a,
{
    async move {
        let mut enqueued = Vec::new();
        let store = worker.store();
        let value = conn
            .transaction::<R, E, _>(async |conn| body(Tx::new(conn, store, &mut enqueued)).await)
            .await?;
        for id in enqueued {
            worker.send_async(id);
        }
        Ok(value)
    }
}
