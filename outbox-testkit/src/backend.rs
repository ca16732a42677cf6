//! [`TestBackend`]: what the conformance suite needs from a backend's test database.

use std::future::Future;

use chrono::{DateTime, Utc};
use deadpool::managed::{Manager, Pool};
use diesel_async::{
    AsyncConnection,
    pooled_connection::{PoolableConnection, deadpool::PoolError},
};
use diesel_outbox_core::{Error, Inbox, Maintenance};

/// An isolated, migrated database of one backend, created per test.
///
/// Implemented by [`PgTestDb`](crate::postgres::PgTestDb) (feature `postgres`),
/// [`MysqlTestDb`](crate::mysql::MysqlTestDb) (feature `mysql`) and
/// [`SqliteTestDb`](crate::sqlite::SqliteTestDb) (feature `sqlite`).
/// Dropping it drops the database, unless the test is panicking: then the
/// database is kept for inspection and its name is printed.
pub trait TestBackend: Sized + Send + Sync + 'static {
    /// The store under test.
    type Store: Maintenance<Conn = Self::Conn>
        + Inbox<Conn = Self::Conn>
        + diesel_outbox_sql::SqlBacked<Dialect = Self::Dialect>;
    /// The store's backend.
    type Dialect: diesel_outbox_sql::Dialect<Conn = Self::Conn, Manager = Self::Manager>;
    /// The backend's diesel-async connection.
    type Conn: AsyncConnection + PoolableConnection + Send + 'static;
    /// The manager of the store's pool (diesel-async's, for [`Self::Conn`]).
    type Manager: Manager<Type = Self::Conn, Error = diesel_async::pooled_connection::PoolError>;

    /// Creates a fresh database named after `test`, applies the outbox
    /// migrations and opens a store on it.
    fn create(test: &str) -> impl Future<Output = anyhow::Result<Self>> + Send;

    /// Opens a database another process created (for example a child
    /// process of a crash test); dropping it leaves the database alone.
    fn attach(url: &str) -> impl Future<Output = anyhow::Result<Self>> + Send;

    /// The URL of this database.
    fn url(&self) -> &str;

    /// The store over this database.
    fn store(&self) -> &Self::Store;

    /// The pool of [`store`](TestBackend::store).
    fn pool(&self) -> &Pool<Self::Manager>;

    /// The backend's classification of a pool's error (for the generic
    /// helpers of `diesel-outbox-sql` that take one).
    fn pool_error(error: PoolError) -> Error;

    /// How many sessions hold a transaction open on this database while
    /// doing nothing, transactions a caller abandoned: PostgreSQL's `idle in
    /// transaction` sessions, MySQL's sleeping sessions with an open InnoDB
    /// transaction. SQLite has no sessions to count: 1 when another
    /// connection cannot take the write lock at once, 0 when it can.
    fn abandoned_transactions(&self) -> impl Future<Output = anyhow::Result<i64>> + Send;

    /// Another store over this database, with a pool of its own of
    /// `pool_size` connections.
    fn store_with_pool(&self, pool_size: usize) -> anyhow::Result<Self::Store>;

    /// A new connection of its own to this database.
    fn connect(&self) -> impl Future<Output = anyhow::Result<Self::Conn>> + Send;

    /// Runs SQL statements (for example a test's own business table),
    /// written with the outbox's default names, on this database's outbox
    /// ([`names`](TestBackend::names)).
    fn execute_sql(&self, sql: &str) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// How many rows `table` holds.
    fn count(&self, table: &str) -> impl Future<Output = anyhow::Result<i64>> + Send;

    /// How many rows `outbox_tasks` holds, whatever their status.
    fn count_tasks(&self) -> impl Future<Output = anyhow::Result<i64>> + Send {
        self.count("outbox_tasks")
    }

    /// The ids of the tasks visible on `conn` (of `kind`, if given), in id
    /// order. Inside an open transaction this includes its own uncommitted
    /// rows.
    fn task_ids(
        conn: &mut Self::Conn,
        kind: Option<&str>,
    ) -> impl Future<Output = anyhow::Result<Vec<diesel_outbox_core::TaskId>>> + Send;

    /// Applies the backend's outbox migrations on a new connection, as
    /// users do; returns the versions applied.
    fn migrate(&self) -> impl Future<Output = anyhow::Result<Vec<String>>> + Send;

    /// Applies the backend's inbox migrations (`outbox_inbox`), which
    /// [`create`](TestBackend::create) leaves out; returns the versions applied.
    fn migrate_inbox(&self) -> impl Future<Output = anyhow::Result<Vec<String>>> + Send;

    /// Reverts the backend's outbox migrations; returns the versions reverted.
    fn revert(&self) -> impl Future<Output = anyhow::Result<Vec<String>>> + Send;

    /// Statements that insert `rows` rows of the `shape` in bulk on this
    /// backend ([`Backlog::postgres`](crate::backlog::Backlog::postgres)
    /// and its siblings).
    fn backlog_sql(shape: crate::backlog::Backlog, rows: u64) -> String;

    /// The SQL of the backend's outbox migrations, oldest first, as this
    /// database's outbox applies them (for the default names,
    /// `diesel_outbox_postgres::migration_sql()` and its siblings).
    fn migration_sql() -> anyhow::Result<Vec<diesel_outbox_sql::MigrationSql>>;

    /// The names of this database's outbox. The SQL a test hands
    /// [`execute_sql`](TestBackend::execute_sql) and
    /// [`count`](TestBackend::count), written with the default names, runs
    /// with these.
    fn names() -> diesel_outbox_sql::Names;

    /// Migrates a second outbox, called `names`, into this database (its
    /// tasks and its inbox) and opens a store on it.
    fn another_outbox(
        &self,
        names: &diesel_outbox_sql::Names,
    ) -> impl Future<Output = anyhow::Result<Self::Store>> + Send;

    /// A schema of this test's own for a second outbox
    /// ([`Names::with_schema`](diesel_outbox_sql::Names::with_schema)):
    /// on PostgreSQL a schema of the test's database, on MySQL a database
    /// of its own, dropped with the test's. `None` where the backend has
    /// no schemas (SQLite).
    fn another_schema(&self) -> Option<String> {
        None
    }

    /// A literal for the instant `at` in the outbox's time columns, for
    /// statements a test writes by hand: a UTC date and time by default
    /// (SQLite stores microseconds since the epoch).
    fn instant_sql(at: DateTime<Utc>) -> String {
        format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f"))
    }

    /// An SQL expression for the database's current time in the outbox's
    /// time columns: `CURRENT_TIMESTAMP` by default.
    fn now_sql() -> String {
        "CURRENT_TIMESTAMP".to_owned()
    }
}
