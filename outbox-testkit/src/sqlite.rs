//! SQLite test databases, a temporary file per test: [`SqliteTestDb`].
//!
//! No server: each test gets a database file of its own in the system's
//! temporary directory (or `OUTBOX_SQLITE_DIR`), migrated, with a
//! [`SqliteStore`] on it. Downstream crates can unit-test their enqueue
//! paths against it with the same store their services run.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_core::TaskId;
use diesel_outbox_sqlite::{
    AsyncSqliteConnection, Names, SqliteStore, establish, revert_migrations_named,
    run_inbox_migrations_named, run_migrations_named,
};

use crate::{DefaultNames, TestBackend, TestNames, url};

/// Connections in the pool of the store each test database opens.
const POOL_SIZE: usize = 8;

/// The environment variable naming the directory test databases go in
/// (default: the system's temporary directory).
pub const DIR_VAR: &str = "OUTBOX_SQLITE_DIR";

/// A SQLite database file of its own for one test, with a [`SqliteStore`]
/// on it: [`SqliteTestDbNamed`] for the default names.
pub type SqliteTestDb = SqliteTestDbNamed<DefaultNames>;

/// A SQLite database file of its own for one test, with a [`SqliteStore`]
/// on it, for the outbox called `N`.
///
/// Deleted (with its `-wal` and `-shm` files) when the value drops; kept,
/// and named on stderr, when the thread is panicking, so a failed test's
/// rows can be inspected with `sqlite3`.
///
/// ```
/// use diesel_outbox_testkit::{sqlite::SqliteTestDb, TestBackend};
///
/// # #[tokio::main]
/// # async fn main() -> anyhow::Result<()> {
/// let db = SqliteTestDb::create("my_order_test").await?;
/// assert_eq!(db.count_tasks().await?, 0);
/// # Ok(())
/// # }
/// ```
pub struct SqliteTestDbNamed<N: TestNames = DefaultNames> {
    names: Names,
    marker: std::marker::PhantomData<fn() -> N>,
    path: PathBuf,
    url: String,
    store: SqliteStore,
    /// Whether this value created the file (and deletes it).
    owned: bool,
}

impl<N: TestNames> std::fmt::Debug for SqliteTestDbNamed<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteTestDbNamed")
            .field("path", &self.path)
            .field("names", &self.names)
            .finish()
    }
}

impl<N: TestNames> SqliteTestDbNamed<N> {
    /// A store with its own pool on this file, on the outbox called `names`.
    fn open(&self, pool_size: usize, names: &Names) -> anyhow::Result<SqliteStore> {
        Ok(SqliteStore::connect(&self.url, pool_size)?.with_names(names.clone())?)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn directory() -> PathBuf {
    std::env::var_os(DIR_VAR)
        .filter(|dir| !dir.is_empty())
        .map_or_else(std::env::temp_dir, PathBuf::from)
}

impl<N: TestNames> TestBackend for SqliteTestDbNamed<N> {
    type Store = SqliteStore;
    type Dialect = diesel_outbox_sqlite::Sqlite;
    type Conn = AsyncSqliteConnection;
    type Manager =
        diesel_async::pooled_connection::AsyncDieselConnectionManager<AsyncSqliteConnection>;

    async fn create(test: &str) -> anyhow::Result<Self> {
        let dir = directory();
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating the test directory {}", dir.display()))?;
        let path = dir.join(format!("{}.db", url::database_name(test)));
        let url = path
            .to_str()
            .with_context(|| format!("{} is not UTF-8", path.display()))?
            .to_owned();
        let names = N::names();
        run_migrations_named(establish(&url).await?, &names)
            .await
            .context("migrating the test database")?;
        let store = SqliteStore::connect(&url, POOL_SIZE)?.with_names(names.clone())?;
        Ok(Self {
            names,
            marker: std::marker::PhantomData,
            path,
            url,
            store,
            owned: true,
        })
    }

    async fn attach(url: &str) -> anyhow::Result<Self> {
        let names = N::names();
        Ok(Self {
            store: SqliteStore::connect(url, POOL_SIZE)?.with_names(names.clone())?,
            names,
            marker: std::marker::PhantomData,
            path: PathBuf::from(url),
            url: url.to_owned(),
            owned: false,
        })
    }

    fn url(&self) -> &str {
        &self.url
    }

    fn store(&self) -> &SqliteStore {
        &self.store
    }

    fn store_with_pool(&self, pool_size: usize) -> anyhow::Result<SqliteStore> {
        self.open(pool_size, &self.names)
    }

    fn names() -> Names {
        N::names()
    }

    async fn another_outbox(&self, names: &Names) -> anyhow::Result<SqliteStore> {
        run_migrations_named(self.connect().await?, names).await?;
        run_inbox_migrations_named(self.connect().await?, names).await?;
        self.open(POOL_SIZE, names)
    }

    fn pool(&self) -> &deadpool::managed::Pool<Self::Manager> {
        self.store.pool()
    }

    fn pool_error(
        error: diesel_async::pooled_connection::deadpool::PoolError,
    ) -> diesel_outbox_core::Error {
        diesel_outbox_sql::sqlite_pool_error(error)
    }

    async fn abandoned_transactions(&self) -> anyhow::Result<i64> {
        // A connection of its own that does not wait: the write lock is free
        // now, or held by a transaction nobody is running.
        let mut conn = establish(&self.url).await?;
        conn.batch_execute("PRAGMA busy_timeout = 0").await?;
        match conn.batch_execute("BEGIN IMMEDIATE").await {
            Ok(()) => {
                conn.batch_execute("ROLLBACK").await?;
                Ok(0)
            }
            Err(diesel::result::Error::DatabaseError(_, info))
                if info.message().contains("locked") || info.message().contains("busy") =>
            {
                Ok(1)
            }
            Err(error) => Err(error.into()),
        }
    }

    async fn connect(&self) -> anyhow::Result<AsyncSqliteConnection> {
        Ok(establish(&self.url).await?)
    }

    async fn execute_sql(&self, sql: &str) -> anyhow::Result<()> {
        let sql = self.names.render(sql);
        Ok(self.store.pool().get().await?.batch_execute(&sql).await?)
    }

    async fn count(&self, from: &str) -> anyhow::Result<i64> {
        let mut conn = self.store.pool().get().await?;
        Ok(diesel::sql_query(format!(
            "SELECT COUNT(*) AS n FROM {}",
            self.names.render(from)
        ))
        .get_result::<crate::Count>(&mut *conn)
        .await?
        .n)
    }

    async fn task_ids(
        conn: &mut AsyncSqliteConnection,
        kind: Option<&str>,
    ) -> anyhow::Result<Vec<TaskId>> {
        let rows: Vec<crate::IdRow> = match kind {
            Some(kind) => {
                diesel::sql_query(
                    N::names().render("SELECT id FROM outbox_tasks WHERE kind = ? ORDER BY id"),
                )
                .bind::<diesel::sql_types::Text, _>(kind)
                .load(conn)
                .await?
            }
            None => {
                diesel::sql_query(N::names().render("SELECT id FROM outbox_tasks ORDER BY id"))
                    .load(conn)
                    .await?
            }
        };
        Ok(rows.into_iter().map(|row| TaskId::new(row.id)).collect())
    }

    async fn migrate(&self) -> anyhow::Result<Vec<String>> {
        Ok(run_migrations_named(self.connect().await?, &self.names).await?)
    }

    async fn migrate_inbox(&self) -> anyhow::Result<Vec<String>> {
        Ok(run_inbox_migrations_named(self.connect().await?, &self.names).await?)
    }

    async fn revert(&self) -> anyhow::Result<Vec<String>> {
        Ok(revert_migrations_named(self.connect().await?, &self.names).await?)
    }

    fn migration_sql() -> anyhow::Result<Vec<diesel_outbox_sql::MigrationSql>> {
        Ok(diesel_outbox_sqlite::migration_sql_named(&N::names())?)
    }

    fn backlog_sql(shape: crate::backlog::Backlog, rows: u64) -> String {
        shape.sqlite(rows)
    }

    fn instant_sql(at: DateTime<Utc>) -> String {
        diesel_outbox_sqlite::timestamp::to_micros(at).to_string()
    }

    fn now_sql() -> String {
        "CAST(round((julianday('now') - 2440587.5) * 86400000000.0) AS INTEGER)".to_owned()
    }
}

impl<N: TestNames> Drop for SqliteTestDbNamed<N> {
    fn drop(&mut self) {
        self.store.pool().close();
        if !self.owned {
            return;
        }
        if std::thread::panicking() {
            eprintln!("test failed: kept database file {}", self.path.display());
            return;
        }
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut file = self.path.clone().into_os_string();
            file.push(suffix);
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => eprintln!(
                    "could not delete the test database file {}: {error}",
                    PathBuf::from(file).display()
                ),
            }
        }
    }
}
