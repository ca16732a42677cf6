//! Transactions the store opens on its own connections.

use diesel_async::{AsyncConnection, AsyncMysqlConnection, SimpleAsyncConnection};
use outbox_core::{Result, TxBody};
use outbox_diesel::{TxError, mysql_error};

/// Runs `body` in a READ COMMITTED transaction on `conn`, a connection of
/// the store's pool (never the caller's); it rolls back when the body fails.
///
/// READ COMMITTED takes no gap locks, so the store's transactions never
/// block the application's inserts, and each statement reads what was
/// committed before it started: a statement after a lock wait sees what the
/// lock holder committed.
pub(crate) async fn read_committed<T, F>(conn: &mut AsyncMysqlConnection, body: F) -> Result<T>
where
    F: for<'r> AsyncFnOnce(&'r mut AsyncMysqlConnection) -> Result<T> + Send,
    for<'r> F: TxBody<&'r mut AsyncMysqlConnection, Result<T>, Fut: Send>,
    T: Send,
{
    conn.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await
        .map_err(mysql_error)?;
    conn.transaction::<T, TxError, _>(async |conn| body(conn).await.map_err(TxError::Outbox))
        .await
        .map_err(|error| error.into_error(mysql_error))
}
