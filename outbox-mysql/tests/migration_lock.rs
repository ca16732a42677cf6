//! The migration lock: the `GET_LOCK` every run takes, waited for under the
//! session's `lock_wait_timeout`, and released when a migration fails.

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Nullable, Text},
};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_mysql::{MysqlStore, run_migrations};
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};

#[derive(QueryableByName)]
struct Lock {
    #[diesel(sql_type = Nullable<BigInt>)]
    outcome: Option<i64>,
}

/// `GET_LOCK(name, 0)` on `conn`: whether it was free.
async fn try_lock(conn: &mut AsyncMysqlConnection, name: &str) -> anyhow::Result<bool> {
    let Lock { outcome } = diesel::sql_query("SELECT GET_LOCK(?, 0) AS outcome")
        .bind::<Text, _>(name)
        .get_result(conn)
        .await?;
    Ok(outcome == Some(1))
}

/// The lock's name the docs give: `outbox_migrations:` and the database.
fn lock_name(db: &MysqlTestDb) -> String {
    format!("outbox_migrations:{}", db.name())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waits_for_the_lock_within_the_sessions_lock_wait_timeout() -> anyhow::Result<()> {
    let db = MysqlTestDb::create("migration_lock_timeout").await?;
    let mut holder = db.connect().await?;
    assert!(try_lock(&mut holder, &lock_name(&db)).await?);

    let mut waiting = db.connect().await?;
    waiting
        .batch_execute("SET SESSION lock_wait_timeout = 1")
        .await?;
    let error = run_migrations(waiting)
        .await
        .expect_err("a run went ahead while another session held the lock");
    let message = error.chain();
    assert!(message.contains("timed out after 1 s"), "{message}");
    assert!(message.contains(&lock_name(&db)), "{message}");

    holder
        .batch_execute("DO RELEASE_LOCK(CONCAT('outbox_migrations:', DATABASE()))")
        .await?;
    assert!(run_migrations(db.connect().await?).await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_releases_the_lock_of_a_pooled_connection() -> anyhow::Result<()> {
    let db = MysqlTestDb::create("migration_lock_failed_run").await?;
    db.revert().await?;
    // A table of that name that is not the outbox's makes the migration fail.
    db.execute_sql("DROP TABLE __diesel_schema_migrations; CREATE TABLE outbox_tasks (id INT)")
        .await?;

    let store = MysqlStore::connect(db.url(), 1)?;
    let error = run_migrations(store.pool().get().await?)
        .await
        .expect_err("the migration ran over an existing table");
    assert!(
        error.chain().contains("already exists"),
        "{}",
        error.chain()
    );
    assert_eq!(
        store.pool().status().size,
        1,
        "the pooled session is gone, so it proves nothing"
    );

    let mut other = db.connect().await?;
    assert!(
        try_lock(&mut other, &lock_name(&db)).await?,
        "the failed run left the lock held by its pooled session"
    );
    Ok(())
}
