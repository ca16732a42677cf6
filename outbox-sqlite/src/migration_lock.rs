//! The lock that serialises outbox migration runs on one SQLite database:
//! the write lock of a `BEGIN IMMEDIATE` transaction held for the whole run.

use diesel::{
    Connection, QueryableByName, RunQueryDsl,
    connection::{
        SimpleConnection, TransactionDepthChange, TransactionManager, TransactionManagerStatus,
    },
    sql_types::BigInt,
    sqlite::Sqlite,
};
use diesel_async::AsyncConnection;
use diesel_outbox_core::{Error, Result};
use diesel_outbox_sql::{MigrationConnection, MigrationLock};

use crate::connection::BUSY_TIMEOUT;

/// SQLite has one writer per database file: a run that holds the write lock
/// from its start keeps every other run (and every other writer) out until
/// it commits. That is all the locking migrations need, no lock table or
/// named lock: a second run waits at its `BEGIN IMMEDIATE`, under the
/// connection's busy timeout, then finds nothing pending.
///
/// DDL is transactional in SQLite, so the run's migrations commit together
/// at release. diesel's harness runs each migration in a transaction of its
/// own, which inside this one becomes a savepoint. A connection opened
/// without a busy timeout waits [`BUSY_TIMEOUT`] for the run; its setting is
/// restored afterwards.
#[derive(Debug, Default)]
pub(crate) struct ImmediateTransaction {
    /// The busy timeout to restore, when the run set one.
    restore_busy_timeout: Option<i64>,
}

#[derive(QueryableByName)]
struct Timeout {
    #[diesel(sql_type = BigInt)]
    timeout: i64,
}

fn depth<C>(conn: &mut MigrationConnection<C>, change: TransactionDepthChange) -> Result<()>
where
    C: AsyncConnection<Backend = Sqlite> + 'static,
{
    match <MigrationConnection<C> as Connection>::TransactionManager::transaction_manager_status_mut(
        conn,
    ) {
        TransactionManagerStatus::Valid(status) => status
            .change_transaction_depth(change)
            .map_err(Error::database),
        TransactionManagerStatus::InError => Err(Error::database(
            "the connection's transaction manager is broken",
        )),
    }
}

impl<C> MigrationLock<MigrationConnection<C>> for ImmediateTransaction
where
    C: AsyncConnection<Backend = Sqlite> + 'static,
{
    fn acquire(&mut self, conn: &mut MigrationConnection<C>) -> Result<()> {
        let Timeout { timeout } = diesel::sql_query("PRAGMA busy_timeout")
            .get_result(conn)
            .map_err(Error::database)?;
        if timeout == 0 {
            conn.batch_execute(&format!(
                "PRAGMA busy_timeout = {}",
                BUSY_TIMEOUT.as_millis()
            ))
            .map_err(Error::database)?;
            self.restore_busy_timeout = Some(0);
        }
        conn.batch_execute("BEGIN IMMEDIATE").map_err(|error| {
            Error::database(format!(
                "could not take the write lock for the migrations (another connection held it \
                 past the busy timeout): {error}"
            ))
        })?;
        // diesel's own transactions (one per migration) now nest inside.
        depth(conn, TransactionDepthChange::IncreaseDepth)
    }

    fn release(&mut self, conn: &mut MigrationConnection<C>) -> Result<()> {
        let committed = conn.batch_execute("COMMIT").or_else(|error| {
            conn.batch_execute("ROLLBACK")?;
            Err(error)
        });
        depth(conn, TransactionDepthChange::DecreaseDepth)?;
        if let Some(timeout) = self.restore_busy_timeout.take() {
            conn.batch_execute(&format!("PRAGMA busy_timeout = {timeout}"))
                .map_err(Error::database)?;
        }
        committed.map_err(Error::database)
    }
}
