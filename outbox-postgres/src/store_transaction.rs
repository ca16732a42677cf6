//! Transactions the store opens on its own connections.

use diesel_async::{AsyncConnection, AsyncPgConnection};
use diesel_outbox_core::{Result, TxBody};
use diesel_outbox_sql::{TxError, postgres_error};

/// Runs `body` in a transaction on `conn`, a connection of the store's pool
/// (never the caller's); it rolls back when the body fails.
pub(crate) async fn store_transaction<T, F>(conn: &mut AsyncPgConnection, body: F) -> Result<T>
where
    F: for<'r> AsyncFnOnce(&'r mut AsyncPgConnection) -> Result<T> + Send,
    for<'r> F: TxBody<&'r mut AsyncPgConnection, Result<T>, Fut: Send>,
    T: Send,
{
    conn.transaction::<T, TxError, _>(async |conn| body(conn).await.map_err(TxError::Outbox))
        .await
        .map_err(|error| error.into_error(postgres_error))
}
