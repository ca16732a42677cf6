//! Isolated MySQL/MariaDB databases for tests: [`MysqlTestDb`].

use diesel_async::{AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_core::TaskId;
use diesel_outbox_mysql::{
    MysqlStore, Names, revert_migrations_named, run_inbox_migrations_named, run_migrations_named,
};

use crate::isolated::{IsolatedDb, Server};

/// A MySQL/MariaDB database of its own for one test, with a [`MysqlStore`] on it.
pub type MysqlTestDb = IsolatedDb<Mysql>;

/// [`MysqlTestDb`] for the outbox called `N` (a table prefix: [`TenantNames`](crate::TenantNames)).
pub type MysqlTestDbNamed<N> = IsolatedDb<Mysql, N>;

/// The MySQL or MariaDB server tests use (`OUTBOX_MYSQL_URL`).
#[derive(Debug)]
pub struct Mysql;

impl Server for Mysql {
    type Store = MysqlStore;
    type Dialect = diesel_outbox_mysql::Mysql;
    type Conn = AsyncMysqlConnection;

    const NAME: &'static str = "MySQL";
    const KIND: diesel_outbox_sql::BackendKind = diesel_outbox_sql::BackendKind::Mysql;
    const URL_VAR: &'static str = "OUTBOX_MYSQL_URL";
    const DEFAULT_URL: &'static str = "mysql://root@127.0.0.1:3306/test";
    const SCHEMES: &'static [&'static str] = &["mysql://"];
    const START_HINT: &'static str =
        "start it with: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd";

    fn create_database(name: &str) -> String {
        format!("CREATE DATABASE `{name}`")
    }

    fn drop_database(name: &str) -> String {
        format!("DROP DATABASE IF EXISTS `{name}`")
    }

    /// A database named after the test's (its random suffix), so that
    /// tests running at once never share one.
    fn another_schema(database: &str) -> String {
        let suffix = database.rsplit('_').next().unwrap_or(database);
        format!("outbox_billing_{suffix}")
    }

    fn drop_another_schema(schema: &str) -> Option<String> {
        Some(format!("DROP DATABASE IF EXISTS `{schema}`"))
    }

    fn open_store(url: &str, pool_size: usize, names: &Names) -> anyhow::Result<MysqlStore> {
        Ok(MysqlStore::connect(url, pool_size)?.with_names(names.clone())?)
    }

    fn close_store(store: &MysqlStore) {
        store.pool().close();
    }

    type Manager =
        diesel_async::pooled_connection::AsyncDieselConnectionManager<AsyncMysqlConnection>;

    fn pool(store: &MysqlStore) -> &deadpool::managed::Pool<Self::Manager> {
        store.pool()
    }

    fn pool_error(
        error: diesel_async::pooled_connection::deadpool::PoolError,
    ) -> diesel_outbox_core::Error {
        diesel_outbox_sql::mysql_pool_error(error)
    }

    const ABANDONED_TRANSACTIONS: &'static str = "information_schema.innodb_trx t JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id WHERE p.db = DATABASE() AND p.command = 'Sleep'";

    async fn execute(store: &MysqlStore, sql: &str) -> anyhow::Result<()> {
        Ok(store.pool().get().await?.batch_execute(sql).await?)
    }

    async fn count_on(conn: &mut AsyncMysqlConnection, from: &str) -> anyhow::Result<i64> {
        Ok(
            diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {from}"))
                .get_result::<crate::Count>(conn)
                .await?
                .n,
        )
    }

    async fn task_ids(
        conn: &mut AsyncMysqlConnection,
        kind: Option<&str>,
        names: &Names,
    ) -> anyhow::Result<Vec<TaskId>> {
        let rows: Vec<crate::IdRow> = match kind {
            Some(kind) => {
                diesel::sql_query(
                    names.render("SELECT id FROM outbox_tasks WHERE kind = ? ORDER BY id"),
                )
                .bind::<diesel::sql_types::Text, _>(kind)
                .load(conn)
                .await?
            }
            None => {
                diesel::sql_query(names.render("SELECT id FROM outbox_tasks ORDER BY id"))
                    .load(conn)
                    .await?
            }
        };
        Ok(rows.into_iter().map(|row| TaskId::new(row.id)).collect())
    }

    async fn migrate(conn: AsyncMysqlConnection, names: &Names) -> anyhow::Result<Vec<String>> {
        Ok(run_migrations_named(conn, names).await?)
    }

    async fn migrate_inbox(
        conn: AsyncMysqlConnection,
        names: &Names,
    ) -> anyhow::Result<Vec<String>> {
        Ok(run_inbox_migrations_named(conn, names).await?)
    }

    async fn revert(conn: AsyncMysqlConnection, names: &Names) -> anyhow::Result<Vec<String>> {
        Ok(revert_migrations_named(conn, names).await?)
    }

    fn backlog_sql(shape: crate::backlog::Backlog, rows: u64) -> String {
        shape.mysql(rows)
    }

    fn migration_sql(
        names: &Names,
    ) -> diesel_outbox_core::Result<Vec<diesel_outbox_sql::MigrationSql>> {
        diesel_outbox_mysql::migration_sql_named(names)
    }

    /// MariaDB's number; MySQL reports the same failure as 3819.
    async fn check_violation_code(conn: &mut AsyncMysqlConnection) -> anyhow::Result<&'static str> {
        let Version { version } = diesel::sql_query("SELECT VERSION() AS version")
            .get_result(conn)
            .await?;
        Ok(if version.contains("MariaDB") {
            "4025"
        } else {
            "3819"
        })
    }

    /// The constraint's name: MySQL's and MariaDB's messages differ around it.
    const CHECK_VIOLATION_TEXT: &'static str = "no_forbidden";
    const UNIQUE_VIOLATION_CODE: &'static str = "1062";
    const DEADLOCK_CODE: &'static str = "1213";
    const LOCK_TIMEOUT_CODE: &'static str = "1205";
    /// Read at each lock wait, so it applies to the transaction it runs in.
    const SHORT_LOCK_WAIT: &'static str = "SET SESSION innodb_lock_wait_timeout = 1";

    async fn session_id(conn: &mut AsyncMysqlConnection) -> anyhow::Result<i64> {
        let ConnectionId { id } = diesel::sql_query("SELECT CONNECTION_ID() AS id")
            .get_result(conn)
            .await?;
        Ok(i64::try_from(id)?)
    }

    fn kill_session(id: i64) -> String {
        format!("KILL {id}")
    }
}

/// The server's `VERSION()`.
#[derive(diesel::QueryableByName)]
struct Version {
    #[diesel(sql_type = diesel::sql_types::Text)]
    version: String,
}

/// A session's `CONNECTION_ID()`.
#[derive(diesel::QueryableByName)]
struct ConnectionId {
    #[diesel(sql_type = diesel::sql_types::Unsigned<diesel::sql_types::BigInt>)]
    id: u64,
}
