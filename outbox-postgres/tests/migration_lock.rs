//! The migration lock: the advisory lock every run takes, waited for under
//! the session's `lock_timeout`, and released when a migration fails.

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Bool},
};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_postgres::{PgStore, run_migrations};
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb};

/// The key the docs name: FNV-1a of `outbox migrations`.
const LOCK_KEY: i64 = 6_958_026_779_691_657_285;

#[derive(QueryableByName)]
struct Taken {
    #[diesel(sql_type = Bool)]
    taken: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waits_for_the_lock_within_the_sessions_lock_timeout() -> anyhow::Result<()> {
    let db = PgTestDb::create("migration_lock_timeout").await?;
    let mut holder = db.connect().await?;
    diesel::sql_query("SELECT pg_advisory_lock($1)")
        .bind::<BigInt, _>(LOCK_KEY)
        .execute(&mut holder)
        .await?;

    let mut waiting = db.connect().await?;
    waiting.batch_execute("SET lock_timeout = '200ms'").await?;
    let error = run_migrations(waiting)
        .await
        .expect_err("a run went ahead while another session held the lock");
    assert!(error.chain().contains("lock timeout"), "{}", error.chain());

    diesel::sql_query("SELECT pg_advisory_unlock($1)")
        .bind::<BigInt, _>(LOCK_KEY)
        .execute(&mut holder)
        .await?;
    assert!(run_migrations(db.connect().await?).await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_releases_the_lock_of_a_pooled_connection() -> anyhow::Result<()> {
    let db = PgTestDb::create("migration_lock_failed_run").await?;
    db.revert().await?;
    // A table of that name that is not the outbox's makes the migration fail.
    db.execute_sql("DROP TABLE __diesel_schema_migrations; CREATE TABLE outbox_tasks (id INT)")
        .await?;

    let store = PgStore::connect(db.url(), 1)?;
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
    let Taken { taken } = diesel::sql_query("SELECT pg_try_advisory_lock($1) AS taken")
        .bind::<BigInt, _>(LOCK_KEY)
        .get_result(&mut other)
        .await?;
    assert!(
        taken,
        "the failed run left the lock held by its pooled session"
    );
    Ok(())
}
