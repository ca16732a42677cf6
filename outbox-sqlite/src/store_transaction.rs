//! Write transactions the store opens on its own connections.

use diesel_outbox_core::{Result, TxBody};
use diesel_outbox_sql::{TxError, sqlite_error};

use crate::AsyncSqliteConnection;

/// Runs `body` in a `BEGIN IMMEDIATE` transaction on `conn`, a connection of
/// the store's pool (never the caller's); it rolls back when the body fails.
///
/// The transaction holds SQLite's write lock from its first statement, so no
/// other writer, in this process or another, runs until it ends: every
/// statement in it sees the database as it is, and every move it makes is
/// decided and written with nothing in between. Bodies read the clock
/// ([`timestamp::now`](crate::timestamp::now)) first, once the lock is
/// held, so times written by successive transactions never go back.
pub(crate) async fn write<T, F>(conn: &mut AsyncSqliteConnection, body: F) -> Result<T>
where
    F: for<'r> AsyncFnOnce(&'r mut AsyncSqliteConnection) -> Result<T> + Send,
    for<'r> F: TxBody<&'r mut AsyncSqliteConnection, Result<T>, Fut: Send>,
    T: Send,
{
    conn.immediate_transaction::<T, TxError, _>(async |conn| {
        body(conn).await.map_err(TxError::Outbox)
    })
    .await
    .map_err(|error| error.into_error(sqlite_error))
}
