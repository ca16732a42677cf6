//! Isolated MySQL/MariaDB databases for tests: [`MysqlTestDb`].

use diesel_async::{AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_core::TaskId;
use diesel_outbox_mysql::{MysqlStore, revert_migrations, run_inbox_migrations, run_migrations};

use crate::isolated::{IsolatedDb, Server};

/// A MySQL/MariaDB database of its own for one test, with a [`MysqlStore`] on it.
pub type MysqlTestDb = IsolatedDb<Mysql>;

/// The MySQL or MariaDB server tests use (`OUTBOX_MYSQL_URL`).
#[derive(Debug)]
pub struct Mysql;

impl Server for Mysql {
    type Store = MysqlStore;
    type Conn = AsyncMysqlConnection;

    const NAME: &'static str = "MySQL";
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

    fn open_store(url: &str, pool_size: usize) -> anyhow::Result<MysqlStore> {
        Ok(MysqlStore::connect(url, pool_size)?)
    }

    fn close_store(store: &MysqlStore) {
        store.pool().close();
    }

    async fn execute(store: &MysqlStore, sql: &str) -> anyhow::Result<()> {
        Ok(store.pool().get().await?.batch_execute(sql).await?)
    }

    async fn count(store: &MysqlStore, from: &str) -> anyhow::Result<i64> {
        let mut conn = store.pool().get().await?;
        Ok(
            diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {from}"))
                .get_result::<crate::Count>(&mut *conn)
                .await?
                .n,
        )
    }

    async fn task_ids(
        conn: &mut AsyncMysqlConnection,
        kind: Option<&str>,
    ) -> anyhow::Result<Vec<TaskId>> {
        let rows: Vec<crate::IdRow> = match kind {
            Some(kind) => {
                diesel::sql_query("SELECT id FROM outbox_tasks WHERE kind = ? ORDER BY id")
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

    async fn migrate(conn: AsyncMysqlConnection) -> anyhow::Result<Vec<String>> {
        Ok(run_migrations(conn).await?)
    }

    async fn migrate_inbox(conn: AsyncMysqlConnection) -> anyhow::Result<Vec<String>> {
        Ok(run_inbox_migrations(conn).await?)
    }

    async fn revert(conn: AsyncMysqlConnection) -> anyhow::Result<Vec<String>> {
        Ok(revert_migrations(conn).await?)
    }

    fn migration_sql() -> &'static [diesel_outbox_sql::MigrationSql] {
        diesel_outbox_mysql::migration_sql()
    }
}
