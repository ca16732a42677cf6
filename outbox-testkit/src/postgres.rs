//! Isolated PostgreSQL databases for tests: [`PgTestDb`].

use anyhow::Context as _;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use outbox_postgres::{PgStore, revert_migrations, run_migrations};

use crate::{TestBackend, url};

/// Environment variable naming the PostgreSQL server tests use.
pub const URL_VAR: &str = "OUTBOX_PG_URL";
/// The server used when [`URL_VAR`] is unset.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// How to start the local server when it is not running.
pub const START_HINT: &str =
    "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start";

/// A database of its own for one test, migrated, with a [`PgStore`] on it.
///
/// Dropped when the value drops; kept (and named on stderr) when the thread
/// is panicking, so a failed test's rows can be inspected.
///
/// ```no_run
/// use outbox_testkit::{postgres::PgTestDb, TestBackend};
///
/// # async fn demo() -> anyhow::Result<()> {
/// let db = PgTestDb::create("my_order_test").await?;
/// let conn = db.connect().await?; // talks to this test's database only
/// # drop(conn);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct PgTestDb {
    name: String,
    admin_url: String,
    url: String,
    store: PgStore,
    /// Whether this value created the database (and drops it).
    owned: bool,
}

impl PgTestDb {
    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

async fn admin_connection(admin_url: &str) -> anyhow::Result<AsyncPgConnection> {
    AsyncPgConnection::establish(admin_url)
        .await
        .with_context(|| {
            format!("PostgreSQL at {admin_url} ({URL_VAR}) is unreachable; {START_HINT}")
        })
}

impl TestBackend for PgTestDb {
    type Store = PgStore;
    type Conn = AsyncPgConnection;

    async fn create(test: &str) -> anyhow::Result<Self> {
        let admin_url = url::from_env(URL_VAR, DEFAULT_URL);
        let name = url::database_name(test);
        let mut admin = admin_connection(&admin_url).await?;
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .with_context(|| format!("creating test database {name}"))?;
        let url = url::with_database(&admin_url, &name);
        let conn = AsyncPgConnection::establish(&url)
            .await
            .with_context(|| format!("connecting to {url}"))?;
        run_migrations(conn)
            .await
            .context("migrating the test database")?;
        let store = PgStore::connect(&url, 8)?;
        Ok(Self {
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
        Ok(Self {
            name,
            admin_url: url.to_owned(),
            url: url.to_owned(),
            store: PgStore::connect(url, 8)?,
            owned: false,
        })
    }

    fn url(&self) -> &str {
        &self.url
    }

    fn store(&self) -> &PgStore {
        &self.store
    }

    async fn connect(&self) -> anyhow::Result<AsyncPgConnection> {
        AsyncPgConnection::establish(&self.url)
            .await
            .with_context(|| format!("connecting to {}", self.url))
    }

    async fn execute_sql(&self, sql: &str) -> anyhow::Result<()> {
        let mut conn = self.store.pool().get().await?;
        Ok(conn.batch_execute(sql).await?)
    }

    async fn count(&self, table: &str) -> anyhow::Result<i64> {
        let mut conn = self.store.pool().get().await?;
        Ok(
            diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {table}"))
                .get_result::<crate::Count>(&mut *conn)
                .await?
                .n,
        )
    }

    async fn task_ids(
        conn: &mut AsyncPgConnection,
        kind: Option<&str>,
    ) -> anyhow::Result<Vec<outbox_core::TaskId>> {
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
        Ok(rows
            .into_iter()
            .map(|row| outbox_core::TaskId::new(row.id))
            .collect())
    }

    async fn migrate(&self) -> anyhow::Result<Vec<String>> {
        Ok(run_migrations(self.connect().await?).await?)
    }

    async fn revert(&self) -> anyhow::Result<Vec<String>> {
        Ok(revert_migrations(self.connect().await?).await?)
    }
}

impl Drop for PgTestDb {
    fn drop(&mut self) {
        self.store.pool().close();
        if !self.owned {
            return;
        }
        if std::thread::panicking() {
            eprintln!("test failed: kept database {} ({})", self.name, self.url);
            return;
        }
        let admin_url = self.admin_url.clone();
        let statement = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        crate::drop_database::run(async move {
            admin_connection(&admin_url)
                .await?
                .batch_execute(&statement)
                .await?;
            Ok(())
        });
    }
}
