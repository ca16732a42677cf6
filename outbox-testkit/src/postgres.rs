//! Isolated PostgreSQL databases for tests: [`PgTestDb`].

use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_core::TaskId;
use diesel_outbox_postgres::{PgStore, revert_migrations, run_inbox_migrations, run_migrations};

use crate::isolated::{IsolatedDb, Server};

/// A PostgreSQL database of its own for one test, with a [`PgStore`] on it.
pub type PgTestDb = IsolatedDb<Postgres>;

/// The PostgreSQL server tests use (`OUTBOX_PG_URL`).
#[derive(Debug)]
pub struct Postgres;

impl Server for Postgres {
    type Store = PgStore;
    type Conn = AsyncPgConnection;

    const NAME: &'static str = "PostgreSQL";
    const URL_VAR: &'static str = "OUTBOX_PG_URL";
    const DEFAULT_URL: &'static str = "postgres://postgres@127.0.0.1:5432/test";
    const SCHEMES: &'static [&'static str] = &["postgres://", "postgresql://"];
    const START_HINT: &'static str =
        "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start";

    fn create_database(name: &str) -> String {
        format!("CREATE DATABASE \"{name}\"")
    }

    fn drop_database(name: &str) -> String {
        format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")
    }

    fn open_store(url: &str, pool_size: usize) -> anyhow::Result<PgStore> {
        Ok(PgStore::connect(url, pool_size)?)
    }

    fn close_store(store: &PgStore) {
        store.pool().close();
    }

    async fn execute(store: &PgStore, sql: &str) -> anyhow::Result<()> {
        Ok(store.pool().get().await?.batch_execute(sql).await?)
    }

    async fn count(store: &PgStore, from: &str) -> anyhow::Result<i64> {
        let mut conn = store.pool().get().await?;
        Ok(
            diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {from}"))
                .get_result::<crate::Count>(&mut *conn)
                .await?
                .n,
        )
    }

    async fn task_ids(
        conn: &mut AsyncPgConnection,
        kind: Option<&str>,
    ) -> anyhow::Result<Vec<TaskId>> {
        let rows: Vec<crate::IdRow> = match kind {
            Some(kind) => {
                diesel::sql_query("SELECT id FROM outbox_tasks WHERE kind = $1 ORDER BY id")
                    .bind::<diesel::sql_types::Text, _>(kind)
                    .load(conn)
                    .await?
            }
            None => {
                diesel::sql_query("SELECT id FROM outbox_tasks ORDER BY id")
                    .load(conn)
                    .await?
            }
        };
        Ok(rows.into_iter().map(|row| TaskId::new(row.id)).collect())
    }

    async fn migrate(conn: AsyncPgConnection) -> anyhow::Result<Vec<String>> {
        Ok(run_migrations(conn).await?)
    }

    async fn migrate_inbox(conn: AsyncPgConnection) -> anyhow::Result<Vec<String>> {
        Ok(run_inbox_migrations(conn).await?)
    }

    async fn revert(conn: AsyncPgConnection) -> anyhow::Result<Vec<String>> {
        Ok(revert_migrations(conn).await?)
    }

    fn migration_sql() -> &'static [diesel_outbox_sql::MigrationSql] {
        diesel_outbox_postgres::migration_sql()
    }
}
