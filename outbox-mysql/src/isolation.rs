//! READ COMMITTED for the store's own connections.

use diesel_async::{AsyncMysqlConnection, SimpleAsyncConnection};
use diesel_outbox_core::Result;
use diesel_outbox_sql::mysql_error;

/// How the store's own connections run at READ COMMITTED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isolation {
    /// The pool set it for each session when it connected
    /// (`MysqlStore::connect`): nothing to do
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
