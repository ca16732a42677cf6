//! Migration runs hold SQLite's write lock from a `BEGIN IMMEDIATE` to their
//! commit: a run waits for another writer, and a connection opened without a
//! busy timeout waits too, its own setting kept.

use std::time::Duration;

use diesel::{QueryableByName, sql_types::BigInt};
use diesel_async::{
    AsyncConnection, RunQueryDsl, SimpleAsyncConnection,
    pooled_connection::{AsyncDieselConnectionManager, deadpool::Pool},
};
use diesel_outbox_sqlite::{AsyncSqliteConnection, establish, migration_sql, run_migrations};
use diesel_outbox_testkit::url::database_name;

/// A database file of its own that is never migrated, deleted on drop.
struct File(std::path::PathBuf);

impl File {
    fn new(test: &str) -> Self {
        Self(std::env::temp_dir().join(format!("{}.db", database_name(test))))
    }

    fn url(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary directory")
    }
}

impl Drop for File {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

#[derive(QueryableByName)]
struct Timeout {
    #[diesel(sql_type = BigInt)]
    timeout: i64,
}

fn versions() -> Vec<String> {
    migration_sql().iter().map(|m| m.version()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waits_for_another_writer_then_applies() {
    let file = File::new("migration_waits");
    let mut locker = establish(file.url()).await.expect("connect");
    locker.batch_execute("BEGIN IMMEDIATE").await.expect("lock");

    let url = file.url().to_owned();
    let mut run = tokio::spawn(async move { run_migrations(establish(&url).await?).await });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut run)
            .await
            .is_err(),
        "the migrations ran while another connection held the write lock"
    );
    locker.batch_execute("COMMIT").await.expect("unlock");
    assert_eq!(run.await.expect("join").expect("migrations"), versions());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_without_busy_timeout_waits_and_keeps_its_setting() {
    let file = File::new("migration_busy_timeout");
    // Plain connections: no busy timeout, as diesel opens them.
    let manager = AsyncDieselConnectionManager::<AsyncSqliteConnection>::new(file.url());
    let pool = Pool::builder(manager).max_size(1).build().expect("pool");
    let mut locker = establish(file.url()).await.expect("connect");
    locker.batch_execute("BEGIN IMMEDIATE").await.expect("lock");

    let conn = pool.get().await.expect("pooled connection");
    let mut run = tokio::spawn(async move { run_migrations(conn).await });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut run)
            .await
            .is_err(),
        "the run did not wait for the write lock"
    );
    locker.batch_execute("COMMIT").await.expect("unlock");
    assert_eq!(run.await.expect("join").expect("migrations"), versions());

    let mut conn = pool.get().await.expect("the same connection, back");
    let Timeout { timeout } = diesel::sql_query("PRAGMA busy_timeout")
        .get_result(&mut *conn)
        .await
        .expect("busy_timeout");
    assert_eq!(
        timeout, 0,
        "the run left its busy timeout on the connection"
    );
    // Nothing is left open: the connection can begin a transaction.
    conn.transaction::<_, diesel::result::Error, _>(async |_| Ok(()))
        .await
        .expect("a transaction after the run");
}
