//! [`IsolatedDb`]: a database of its own for one test, on any [`Server`].

use std::{fmt, future::Future, marker::PhantomData};

use anyhow::Context as _;
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use diesel_outbox_core::{Inbox, Maintenance, TaskId};

use crate::{DefaultNames, TestBackend, TestNames, url};

/// Connections in the pool of the store each test database opens.
const POOL_SIZE: usize = 8;

/// What differs between database servers for [`IsolatedDb`]: where the
/// server is, how to create and drop a database, and the few statements the
/// testkit runs. Implemented by [`Postgres`](crate::postgres::Postgres) and
/// [`Mysql`](crate::mysql::Mysql).
pub trait Server: Send + Sync + 'static {
    /// The store under test.
    type Store: Maintenance<Conn = Self::Conn>
        + Inbox<Conn = Self::Conn>
        + diesel_outbox_sql::SqlBacked<Dialect = Self::Dialect>;
    /// The store's backend.
    type Dialect: diesel_outbox_sql::Dialect<Conn = Self::Conn, Manager = Self::Manager>;
    /// The backend's diesel-async connection.
    type Conn: AsyncConnection
        + SimpleAsyncConnection
        + diesel_async::pooled_connection::PoolableConnection
        + Send
        + 'static;

    /// The server's name in messages.
    const NAME: &'static str;
    /// Its backend, whose identifier quote the outbox's names take.
    const KIND: diesel_outbox_sql::BackendKind;
    /// Environment variable naming the server.
    const URL_VAR: &'static str;
    /// The server used when [`Server::URL_VAR`] is unset.
    const DEFAULT_URL: &'static str;
    /// URL prefixes of this kind of server: `DATABASE_URL` is used when
    /// [`Server::URL_VAR`] is unset and it starts with one of them.
    const SCHEMES: &'static [&'static str];
    /// How to start the local server.
    const START_HINT: &'static str;

    /// `CREATE DATABASE` for `name`.
    fn create_database(name: &str) -> String;
    /// What to set on the new database `name` before its first connection,
    /// if anything (a statement of its own: PostgreSQL runs no `CREATE
    /// DATABASE` beside another).
    fn configure_database(_name: &str) -> Option<String> {
        None
    }
    /// `DROP DATABASE` for `name`, closing other sessions if the server can.
    fn drop_database(name: &str) -> String;
    /// See [`TestBackend::another_schema`]: the schema for the test
    /// database `database`.
    fn another_schema(database: &str) -> String;
    /// What drops [`Server::another_schema`] where dropping the test's
    /// database leaves it (a MySQL database).
    fn drop_another_schema(_schema: &str) -> Option<String> {
        None
    }
    /// A store with its own pool of `pool_size` connections on `url`, on
    /// the outbox called `names`.
    fn open_store(
        url: &str,
        pool_size: usize,
        names: &diesel_outbox_sql::Names,
    ) -> anyhow::Result<Self::Store>;
    /// Closes the store's pool.
    fn close_store(store: &Self::Store);
    /// The manager of the store's pool.
    type Manager: deadpool::managed::Manager<
            Type = Self::Conn,
            Error = diesel_async::pooled_connection::PoolError,
        >;
    /// The store's pool.
    fn pool(store: &Self::Store) -> &deadpool::managed::Pool<Self::Manager>;
    /// See [`TestBackend::pool_error`].
    fn pool_error(
        error: diesel_async::pooled_connection::deadpool::PoolError,
    ) -> diesel_outbox_core::Error;
    /// The `FROM` clause (after `SELECT COUNT(*) FROM`) that finds the
    /// sessions of [`TestBackend::abandoned_transactions`] on the
    /// connection's own database.
    const ABANDONED_TRANSACTIONS: &'static str;
    /// Runs SQL statements on a pooled connection of `store`.
    fn execute(store: &Self::Store, sql: &str) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// `SELECT COUNT(*) FROM <from>` on `conn`.
    fn count_on(
        conn: &mut Self::Conn,
        from: &str,
    ) -> impl Future<Output = anyhow::Result<i64>> + Send;
    /// See [`TestBackend::task_ids`].
    fn task_ids(
        conn: &mut Self::Conn,
        kind: Option<&str>,
        names: &diesel_outbox_sql::Names,
    ) -> impl Future<Output = anyhow::Result<Vec<TaskId>>> + Send;
    /// Applies the migrations of the outbox called `names`.
    fn migrate(
        conn: Self::Conn,
        names: &diesel_outbox_sql::Names,
    ) -> impl Future<Output = anyhow::Result<Vec<String>>> + Send;
    /// Applies the inbox migrations of the outbox called `names`.
    fn migrate_inbox(
        conn: Self::Conn,
        names: &diesel_outbox_sql::Names,
    ) -> impl Future<Output = anyhow::Result<Vec<String>>> + Send;
    /// Reverts the migrations of the outbox called `names`.
    fn revert(
        conn: Self::Conn,
        names: &diesel_outbox_sql::Names,
    ) -> impl Future<Output = anyhow::Result<Vec<String>>> + Send;
    /// See [`TestBackend::migration_sql`].
    fn migration_sql(
        names: &diesel_outbox_sql::Names,
    ) -> diesel_outbox_core::Result<Vec<diesel_outbox_sql::MigrationSql>>;
    /// See [`TestBackend::backlog_sql`].
    fn backlog_sql(shape: crate::backlog::Backlog, rows: u64) -> String;
    /// See [`TestBackend::instant_sql`]: a UTC date and time by default.
    fn instant_sql(at: chrono::DateTime<chrono::Utc>) -> String {
        format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.6f"))
    }

    // The server's own failures, for the conformance suite's database-error
    // scenarios (`constraint_violations_are_permanent_and_carry_their_code`
    // and its siblings): the codes the server answers with, and how a test
    // makes it fail.

    /// The code of a `CHECK` constraint's violation on the server `conn` is
    /// connected to (which may depend on its version or fork).
    fn check_violation_code(
        conn: &mut Self::Conn,
    ) -> impl Future<Output = anyhow::Result<&'static str>> + Send;
    /// Text that the message of a violation of the `CHECK` constraint
    /// `no_forbidden` holds exactly once.
    const CHECK_VIOLATION_TEXT: &'static str;
    /// The code of a unique index's violation.
    const UNIQUE_VIOLATION_CODE: &'static str;
    /// The code of the transaction the server chose as a deadlock's victim.
    const DEADLOCK_CODE: &'static str;
    /// The code of a lock wait that timed out.
    const LOCK_TIMEOUT_CODE: &'static str;
    /// A statement that, run first in a transaction, makes that
    /// transaction's lock waits give up within a second.
    const SHORT_LOCK_WAIT: &'static str;
    /// The server's id of the session on `conn`.
    fn session_id(conn: &mut Self::Conn) -> impl Future<Output = anyhow::Result<i64>> + Send;
    /// A statement that ends the server's session `id`.
    fn kill_session(id: i64) -> String;
}

/// A database of its own for one test, migrated, with a store on it, for
/// the outbox called `N` ([`DefaultNames`] unless a test chooses others).
///
/// Dropped when the value drops; kept (and named on stderr) when the thread
/// is panicking, so a failed test's rows can be inspected. A test that
/// returns an error instead of panicking drops it.
///
/// ```no_run
/// use diesel_outbox_testkit::{postgres::PgTestDb, TestBackend};
///
/// # async fn demo() -> anyhow::Result<()> {
/// let db = PgTestDb::create("my_order_test").await?;
/// let conn = db.connect().await?; // talks to this test's database only
/// # drop(conn);
/// # Ok(())
/// # }
/// ```
pub struct IsolatedDb<S: Server, N: TestNames = DefaultNames> {
    names: diesel_outbox_sql::Names,
    marker: PhantomData<fn() -> N>,
    name: String,
    admin_url: String,
    url: String,
    store: S::Store,
    /// Whether this value created the database (and drops it).
    owned: bool,
}

impl<S: Server, N: TestNames> fmt::Debug for IsolatedDb<S, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IsolatedDb")
            .field("server", &S::NAME)
            .field("name", &self.name)
            .field("url", &self.url)
            .field("names", &self.names)
            .finish()
    }
}

impl<S: Server, N: TestNames> IsolatedDb<S, N> {
    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The names `N` as the server `S` writes them (its identifier quote).
///
/// # Panics
///
/// When `S` cannot take them: neither PostgreSQL nor MySQL refuses any
/// names that pass their checks.
fn names_for<S: Server, N: TestNames>() -> diesel_outbox_sql::Names {
    N::names()
        .for_backend(S::KIND)
        .unwrap_or_else(|error| panic!("{}: {error}", S::NAME))
}

/// A connection to `url`, or an error that says what is missing: the
/// database (by name, on which server) or the server itself.
async fn establish<S: Server>(url: &str) -> anyhow::Result<S::Conn> {
    let error = match S::Conn::establish(url).await {
        Ok(conn) => return Ok(conn),
        Err(error) => error,
    };
    let (server, database) = url::server_and_database(url);
    let message = error.to_string();
    let advice = if url::is_missing_database(&message) {
        format!(
            "database {database} does not exist on {server}; create it (CREATE DATABASE {database}) \
             or set {} or DATABASE_URL to a database that exists",
            S::URL_VAR
        )
    } else {
        format!(
            "could not connect to {} at {server} (database {database}); check that it runs, \
             or set {} or DATABASE_URL to choose another server; {}",
            S::NAME,
            S::URL_VAR,
            S::START_HINT
        )
    };
    Err(anyhow::Error::new(error).context(advice))
}

impl<S: Server, N: TestNames> TestBackend for IsolatedDb<S, N> {
    type Store = S::Store;
    type Dialect = S::Dialect;
    type Conn = S::Conn;
    type Manager = S::Manager;

    async fn create(test: &str) -> anyhow::Result<Self> {
        let admin_url = url::server_from_env(S::URL_VAR, S::SCHEMES, S::DEFAULT_URL);
        let name = url::database_name(test);
        let mut admin = establish::<S>(&admin_url).await?;
        admin
            .batch_execute(&S::create_database(&name))
            .await
            .with_context(|| format!("creating test database {name}"))?;
        if let Some(configure) = S::configure_database(&name) {
            admin
                .batch_execute(&configure)
                .await
                .with_context(|| format!("configuring test database {name}"))?;
        }
        drop(admin);
        let url = url::with_database(&admin_url, &name);
        let names = names_for::<S, N>();
        S::migrate(establish::<S>(&url).await?, &names)
            .await
            .context("migrating the test database")?;
        let store = S::open_store(&url, POOL_SIZE, &names)?;
        Ok(Self {
            names,
            marker: PhantomData,
            name,
            admin_url,
            url,
            store,
            owned: true,
        })
    }

    async fn attach(url: &str) -> anyhow::Result<Self> {
        let name = url
            .rsplit('/')
            .next()
            .and_then(|tail| tail.split('?').next())
            .unwrap_or_default()
            .to_owned();
        let names = names_for::<S, N>();
        Ok(Self {
            store: S::open_store(url, POOL_SIZE, &names)?,
            names,
            marker: PhantomData,
            name,
            admin_url: url.to_owned(),
            url: url.to_owned(),
            owned: false,
        })
    }

    fn url(&self) -> &str {
        &self.url
    }

    fn store(&self) -> &S::Store {
        &self.store
    }

    fn store_with_pool(&self, pool_size: usize) -> anyhow::Result<S::Store> {
        S::open_store(&self.url, pool_size, &self.names)
    }

    fn names() -> diesel_outbox_sql::Names {
        names_for::<S, N>()
    }

    fn another_schema(&self) -> Option<String> {
        Some(S::another_schema(&self.name))
    }

    async fn another_outbox(&self, names: &diesel_outbox_sql::Names) -> anyhow::Result<S::Store> {
        S::migrate(self.connect().await?, names).await?;
        S::migrate_inbox(self.connect().await?, names).await?;
        S::open_store(&self.url, POOL_SIZE, names)
    }

    fn pool(&self) -> &deadpool::managed::Pool<S::Manager> {
        S::pool(&self.store)
    }

    fn pool_error(
        error: diesel_async::pooled_connection::deadpool::PoolError,
    ) -> diesel_outbox_core::Error {
        S::pool_error(error)
    }

    async fn abandoned_transactions(&self) -> anyhow::Result<i64> {
        // On a connection of its own: a checkout from the store's pool
        // would discard an abandoned connection waiting there, and so hide
        // it.
        S::count_on(&mut self.connect().await?, S::ABANDONED_TRANSACTIONS).await
    }

    async fn connect(&self) -> anyhow::Result<S::Conn> {
        establish::<S>(&self.url).await
    }

    async fn execute_sql(&self, sql: &str) -> anyhow::Result<()> {
        S::execute(&self.store, &self.names.render(sql)).await
    }

    async fn count(&self, from: &str) -> anyhow::Result<i64> {
        let from = self.names.render(from);
        S::count_on(&mut *S::pool(&self.store).get().await?, &from).await
    }

    async fn task_ids(conn: &mut S::Conn, kind: Option<&str>) -> anyhow::Result<Vec<TaskId>> {
        S::task_ids(conn, kind, &names_for::<S, N>()).await
    }

    async fn migrate(&self) -> anyhow::Result<Vec<String>> {
        S::migrate(self.connect().await?, &self.names).await
    }

    async fn migrate_inbox(&self) -> anyhow::Result<Vec<String>> {
        S::migrate_inbox(self.connect().await?, &self.names).await
    }

    async fn revert(&self) -> anyhow::Result<Vec<String>> {
        S::revert(self.connect().await?, &self.names).await
    }

    fn migration_sql() -> anyhow::Result<Vec<diesel_outbox_sql::MigrationSql>> {
        Ok(S::migration_sql(&N::names())?)
    }

    fn backlog_sql(shape: crate::backlog::Backlog, rows: u64) -> String {
        S::backlog_sql(shape, rows)
    }

    fn instant_sql(at: chrono::DateTime<chrono::Utc>) -> String {
        S::instant_sql(at)
    }
}

impl<S: Server, N: TestNames> Drop for IsolatedDb<S, N> {
    fn drop(&mut self) {
        S::close_store(&self.store);
        if !self.owned {
            return;
        }
        if std::thread::panicking() {
            eprintln!("test failed: kept database {} ({})", self.name, self.url);
            return;
        }
        let admin_url = self.admin_url.clone();
        let mut statement = S::drop_database(&self.name);
        if let Some(schema) = S::drop_another_schema(&S::another_schema(&self.name)) {
            statement = format!("{schema}; {statement}");
        }
        crate::drop_database::run(async move {
            establish::<S>(&admin_url)
                .await?
                .batch_execute(&statement)
                .await?;
            Ok(())
        });
    }
}

#[cfg(test)]
mod missing_database {
    use super::{Server, establish};
    use crate::url;

    /// Connecting to a database that does not exist names it and its server.
    async fn names_the_missing_database<S: Server>() {
        let server_url = url::server_from_env(S::URL_VAR, S::SCHEMES, S::DEFAULT_URL);
        let missing = url::database_name("no_such_database");
        let Err(error) = establish::<S>(&url::with_database(&server_url, &missing)).await else {
            panic!("connected to a database that does not exist");
        };
        let (server, _) = url::server_and_database(&server_url);
        let expected = format!("database {missing} does not exist on {server}");
        assert!(format!("{error:#}").contains(&expected), "{error:#}");
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn postgres() {
        names_the_missing_database::<crate::postgres::Postgres>().await;
    }

    #[cfg(feature = "mysql")]
    #[tokio::test]
    async fn mysql() {
        names_the_missing_database::<crate::mysql::Mysql>().await;
    }
}
