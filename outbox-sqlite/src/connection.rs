//! Connections: their type, the settings each one gets, and opening one.
//!
//! Several connections (a pool's, the application's, other processes')
//! share one database file safely with these settings:
//!
//! - `journal_mode = WAL`: readers never wait for the writer nor the writer
//!   for readers, so stats and reads go on while a claim writes. The mode is
//!   stored in the file; WAL needs every process on one host (its
//!   shared-memory index does not work over a network file system).
//! - `busy_timeout` ([`BUSY_TIMEOUT`]): a writer that finds the write lock
//!   taken waits for it instead of failing at once; only a wait longer than
//!   this fails, as [`DatabaseErrorKind::LockTimeout`], which is retryable.
//! - `synchronous = FULL`: a commit that returned is on disk, so a message
//!   sent after commit never outlives its business rows in a power cut.
//!   (`NORMAL` would lose the last commits on power loss, after their
//!   messages may have gone out.)
//! - `mmap_size` ([`MMAP_SIZE`]): a statement reads pages whose newest
//!   copy is in the database file (not in the WAL) through a memory map of
//!   the file's first [`MMAP_SIZE`] bytes, instead of a system call and a
//!   copy per page. In WAL mode a connection empties its page cache, and
//!   drops its map, whenever another connection committed since its last
//!   transaction; among a pool's connections taking turns to write, under
//!   load, that is before most statements. Each then reads every page it
//!   touches again: without the map by a read each, which slows the
//!   statements as the file grows; with it by a page fault each, which
//!   does not. The setting is for speed, not for safety: a connection
//!   without it is as safe (a pool of one's own whose setup runs
//!   `PRAGMA mmap_size = 0`). The map is read-only, so writes go through
//!   the WAL as they do without it. Its pages are the system's file cache,
//!   shared by every connection, though each connection's map counts them
//!   in the process's resident memory. The price: an I/O error reading the
//!   file, or another program truncating or overwriting the live file,
//!   ends the process with `SIGBUS` instead of failing the statement (copy
//!   a live database with SQLite's backup or `VACUUM INTO`, never over it).
//!
//! Every write of the store is one statement, which takes the write lock at
//! its first step, or a `BEGIN IMMEDIATE` transaction, which takes it first:
//! either way it waits under the busy timeout and never has to upgrade a
//! read to a write, the upgrade SQLite refuses at once with `SQLITE_BUSY`
//! when another connection wrote in between.
//!
//! [`DatabaseErrorKind::LockTimeout`]: diesel_outbox_core::DatabaseErrorKind::LockTimeout

use std::time::Duration;

use diesel::{ConnectionError, ConnectionResult, SqliteConnection};
use diesel_async::{
    AsyncConnection, SimpleAsyncConnection,
    pooled_connection::{ManagerConfig, RecyclingMethod},
    sync_connection_wrapper::SyncConnectionWrapper,
};
use diesel_outbox_core::{Error, Result};

/// diesel-async's connection over diesel's `SqliteConnection`: each
/// statement runs on tokio's blocking pool.
pub type AsyncSqliteConnection = SyncConnectionWrapper<SqliteConnection>;

/// How long a statement waits for another connection's lock before it fails
/// with `SQLITE_BUSY`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of the database file a connection reads through a memory map
/// (`mmap_size`): the bundled SQLite's own limit on Linux, macOS, Windows,
/// FreeBSD and Solaris (2 GiB less 64 KiB), which any larger request is cut
/// to. Elsewhere SQLite's limit is 0, and no file is mapped.
pub const MMAP_SIZE: u64 = 0x7fff_0000;

/// The settings every connection the crate opens gets (see the module
/// documentation for why).
pub fn settings_sql() -> String {
    format!(
        "PRAGMA busy_timeout = {}; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
         PRAGMA mmap_size = {MMAP_SIZE};",
        BUSY_TIMEOUT.as_millis()
    )
}

/// Opens a connection to the database file `database_url` (a path, a
/// `file:` URI or `sqlite://path`; the file is created if missing) with
/// [`settings_sql`] applied. Use it for the connections the application
/// enqueues on, too.
///
/// In-memory databases are refused: every connection would see a database
/// of its own.
///
/// ```no_run
/// # async fn demo() -> diesel_outbox_sqlite::outbox::Result<()> {
/// let conn = diesel_outbox_sqlite::establish("orders.db").await?;
/// # drop(conn);
/// # Ok(())
/// # }
/// ```
pub async fn establish(database_url: &str) -> Result<AsyncSqliteConnection> {
    check_url(database_url)?;
    open(database_url)
        .await
        .map_err(diesel_outbox_sql::sqlite_connection_error)
}

/// Refuses URLs that name an in-memory database, naming the field.
pub(crate) fn check_url(database_url: &str) -> Result<()> {
    let memory = database_url == ":memory:"
        || database_url.starts_with("file::memory:")
        || database_url.contains("mode=memory");
    if memory {
        return Err(Error::Config {
            field: "database_url",
            reason: format!(
                "`{database_url}` is an in-memory database, which each connection would see \
                 a copy of; name a file"
            ),
        });
    }
    Ok(())
}

/// The settings of a deadpool pool whose every connection is opened as
/// [`establish`] opens one: for the application's own pool beside the
/// store's (or share the store's, [`SqliteStore::pool`](crate::SqliteStore::pool)).
/// Connections are recycled without a test query: a file connection does
/// not drop like a network one.
///
/// ```no_run
/// use diesel_async::pooled_connection::{AsyncDieselConnectionManager, deadpool::Pool};
/// use diesel_outbox_sqlite::{AsyncSqliteConnection, manager_config};
///
/// # fn demo() -> anyhow::Result<()> {
/// let manager = AsyncDieselConnectionManager::<AsyncSqliteConnection>::new_with_config(
///     "shop.db",
///     manager_config(),
/// );
/// let pool = Pool::builder(manager).max_size(4).build()?;
/// # let _ = pool;
/// # Ok(())
/// # }
/// ```
pub fn manager_config() -> ManagerConfig<AsyncSqliteConnection> {
    let mut config = ManagerConfig::<AsyncSqliteConnection>::default();
    config.custom_setup = Box::new(|url| {
        let url = url.to_owned();
        Box::pin(async move {
            check_url(&url).map_err(|error| ConnectionError::BadConnection(error.to_string()))?;
            open(&url).await
        })
    });
    config.recycling_method = RecyclingMethod::Fast;
    config
}

/// Opens and configures one connection (also the pool's setup).
pub(crate) async fn open(database_url: &str) -> ConnectionResult<AsyncSqliteConnection> {
    let mut conn = AsyncSqliteConnection::establish(database_url).await?;
    conn.batch_execute(&settings_sql())
        .await
        .map_err(ConnectionError::CouldntSetupConfiguration)?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_memory_databases_are_refused() {
        for url in [
            ":memory:",
            "file::memory:?cache=shared",
            "file:x?mode=memory",
        ] {
            let error = check_url(url).expect_err(url);
            assert!(matches!(
                error,
                Error::Config {
                    field: "database_url",
                    ..
                }
            ));
        }
        assert!(check_url("orders.db").is_ok());
        assert!(check_url("sqlite:///var/lib/shop/orders.db").is_ok());
    }

    #[test]
    fn the_settings_name_the_busy_timeout_in_milliseconds() {
        assert!(settings_sql().contains("busy_timeout = 5000;"));
        assert!(settings_sql().contains("journal_mode = WAL"));
    }
}
