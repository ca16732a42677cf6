//! Transactions the store opens on its own connections.

use diesel_async::{AsyncConnection, AsyncMysqlConnection, SimpleAsyncConnection};
use diesel_outbox_core::{Result, TxBody};
use diesel_outbox_sql::{TxError, mysql_error};

/// How the store's own connections run at READ COMMITTED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isolation {
    /// The pool set it for each session when it connected
    /// ([`MysqlStore::connect`](crate::MysqlStore::connect)): nothing to do
    /// per transaction.
    Session,
    /// A pool the store did not build: each transaction (and each statement
    /// that needs it) sets it first, one more round trip.
    EachTransaction,
}

/// The statement a session runs once to make READ COMMITTED its default.
pub(crate) const SESSION_READ_COMMITTED: &str =
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

impl Isolation {
    /// Makes the next transaction (or autocommit statement) on `conn` run
    /// at READ COMMITTED.
    pub(crate) async fn apply(self, conn: &mut AsyncMysqlConnection) -> Result<()> {
        if self == Isolation::EachTransaction {
            conn.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                .await
                .map_err(mysql_error)?;
        }
        Ok(())
    }
}

/// Runs `body` in a READ COMMITTED transaction on `conn`, a connection of
/// the store's pool (never the caller's); it rolls back when the body fails.
///
/// READ COMMITTED takes no gap locks, so the store's transactions never
/// block the application's inserts, and each statement reads what was
/// committed before it started: a statement after a lock wait sees what the
/// lock holder committed.
pub(crate) async fn read_committed<T, F>(
    conn: &mut AsyncMysqlConnection,
    isolation: Isolation,
    body: F,
) -> Result<T>
where
    F: for<'r> AsyncFnOnce(&'r mut AsyncMysqlConnection) -> Result<T> + Send,
    for<'r> F: TxBody<&'r mut AsyncMysqlConnection, Result<T>, Fut: Send>,
    T: Send,
{
    isolation.apply(conn).await?;
    conn.transaction::<T, TxError, _>(async |conn| body(conn).await.map_err(TxError::Outbox))
        .await
        .map_err(|error| error.into_error(mysql_error))
}
