//! Isolated PostgreSQL databases for tests: [`PgTestDb`].

use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_core::TaskId;
use diesel_outbox_postgres::{
    Names, PgStore, revert_migrations_named, run_inbox_migrations_named, run_migrations_named,
};

use crate::isolated::{IsolatedDb, Server};

/// A PostgreSQL database of its own for one test, with a [`PgStore`] on it.
pub type PgTestDb = IsolatedDb<Postgres>;

/// [`PgTestDb`] for the outbox called `N` (a table prefix:
/// [`TenantNames`](crate::TenantNames); a schema and a prefix:
/// [`SchemaTenantNames`](crate::SchemaTenantNames)).
pub type PgTestDbNamed<N> = IsolatedDb<Postgres, N>;

/// The PostgreSQL server tests use (`OUTBOX_PG_URL`).
#[derive(Debug)]
pub struct Postgres;

impl Server for Postgres {
    type Store = PgStore;
    type Dialect = diesel_outbox_postgres::Postgres;
    type Conn = AsyncPgConnection;

    const NAME: &'static str = "PostgreSQL";
    const KIND: diesel_outbox_sql::BackendKind = diesel_outbox_sql::BackendKind::Postgres;
    const URL_VAR: &'static str = "OUTBOX_PG_URL";
    const DEFAULT_URL: &'static str = "postgres://postgres@127.0.0.1:5432/test";
    const SCHEMES: &'static [&'static str] = &["postgres://", "postgresql://"];
    const START_HINT: &'static str =
        "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start";

    fn create_database(name: &str) -> String {
        format!("CREATE DATABASE \"{name}\"")
    }

    /// Commits of a test database do not wait for their WAL to reach the
    /// disk: a test checks what the statements do, never what survives a
    /// crash of the shared server (the chaos harness crashes servers of its
    /// own), and a suite of thousands of commits then does not slow to the
    /// disk's flush rate on a loaded machine.
    fn configure_database(name: &str) -> Option<String> {
        Some(format!(
            "ALTER DATABASE \"{name}\" SET synchronous_commit = off"
        ))
    }

    fn drop_database(name: &str) -> String {
        format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")
    }

    /// A schema of the test's database, dropped with it.
    fn another_schema(_database: &str) -> String {
        "billing".to_owned()
    }

    fn open_store(url: &str, pool_size: usize, names: &Names) -> anyhow::Result<PgStore> {
        Ok(PgStore::connect(url, pool_size)?.with_names(names.clone())?)
    }

    fn close_store(store: &PgStore) {
        store.pool().close();
    }

    type Manager = diesel_async::pooled_connection::AsyncDieselConnectionManager<AsyncPgConnection>;

    fn pool(store: &PgStore) -> &deadpool::managed::Pool<Self::Manager> {
        store.pool()
    }

    fn pool_error(
        error: diesel_async::pooled_connection::deadpool::PoolError,
    ) -> diesel_outbox_core::Error {
        diesel_outbox_sql::postgres_pool_error(error)
    }

    const ABANDONED_TRANSACTIONS: &'static str =
        "pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'";

    async fn execute(store: &PgStore, sql: &str) -> anyhow::Result<()> {
        Ok(store.pool().get().await?.batch_execute(sql).await?)
    }

    async fn count_on(conn: &mut AsyncPgConnection, from: &str) -> anyhow::Result<i64> {
        Ok(
            diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {from}"))
                .get_result::<crate::Count>(conn)
                .await?
                .n,
        )
    }

    async fn task_ids(
        conn: &mut AsyncPgConnection,
        kind: Option<&str>,
        names: &Names,
    ) -> anyhow::Result<Vec<TaskId>> {
        let rows: Vec<crate::IdRow> = match kind {
            Some(kind) => {
                diesel::sql_query(
                    names.render("SELECT id FROM outbox_tasks WHERE kind = $1 ORDER BY id"),
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

    async fn migrate(conn: AsyncPgConnection, names: &Names) -> anyhow::Result<Vec<String>> {
        Ok(run_migrations_named(conn, names).await?)
    }

    async fn migrate_inbox(conn: AsyncPgConnection, names: &Names) -> anyhow::Result<Vec<String>> {
        Ok(run_inbox_migrations_named(conn, names).await?)
    }

    async fn revert(conn: AsyncPgConnection, names: &Names) -> anyhow::Result<Vec<String>> {
        Ok(revert_migrations_named(conn, names).await?)
    }

    fn backlog_sql(shape: crate::backlog::Backlog, rows: u64) -> String {
        shape.postgres(rows)
    }

    fn migration_sql(
        names: &Names,
    ) -> diesel_outbox_core::Result<Vec<diesel_outbox_sql::MigrationSql>> {
        diesel_outbox_postgres::migration_sql_named(names)
    }

    /// In UTC whatever the session's `TimeZone`.
    fn instant_sql(at: chrono::DateTime<chrono::Utc>) -> String {
        format!("'{}+00'::timestamptz", at.format("%Y-%m-%d %H:%M:%S%.6f"))
    }

    async fn check_violation_code(_: &mut AsyncPgConnection) -> anyhow::Result<&'static str> {
        Ok("23514")
    }

    const CHECK_VIOLATION_TEXT: &'static str = "violates check constraint";
    const UNIQUE_VIOLATION_CODE: &'static str = "23505";
    const DEADLOCK_CODE: &'static str = "40P01";
    const LOCK_TIMEOUT_CODE: &'static str = "55P03";
    const SHORT_LOCK_WAIT: &'static str = "SET LOCAL lock_timeout = '50ms'";

    async fn session_id(conn: &mut AsyncPgConnection) -> anyhow::Result<i64> {
        let Pid { pid } = diesel::sql_query("SELECT pg_backend_pid() AS pid")
            .get_result(conn)
            .await?;
        Ok(pid.into())
    }

    /// Waits up to 5 s for the backend to have exited.
    fn kill_session(id: i64) -> String {
        format!("SELECT pg_terminate_backend({id}, 5000)")
    }
}

/// A session's `pg_backend_pid()`.
#[derive(diesel::QueryableByName)]
struct Pid {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pid: i32,
}
