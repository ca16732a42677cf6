//! How the tasks table is stored (the migration of 2026-12-06): a
//! `dedup_key` index that holds only the rows with a key, autovacuum
//! settings for a table that churns, and an upgrade from the schema before
//! them, and back, that keeps every held key.

use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use diesel_outbox_postgres::{
    PgStore,
    outbox::{Store, Task, TaskId},
    run_migrations,
};
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb};

/// The migration this file is about.
const STORAGE: &str = "2026-12-06-000000_outbox_tasks_storage";

async fn enqueue(
    store: &PgStore,
    conn: &mut AsyncPgConnection,
    tasks: Vec<Task>,
) -> anyhow::Result<Vec<TaskId>> {
    conn.transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue_many(tx, tasks).await?))
        .await
}

fn plain(n: usize) -> Vec<Task> {
    (0..n)
        .map(|i| Task::new("order.created", 1, format!("{{\"order\":{i}}}")))
        .collect()
}

/// Pages of the `dedup_key` index: 1 is the metapage of an index with no
/// entries at all.
async fn dedup_index_pages(db: &PgTestDb) -> anyhow::Result<i64> {
    db.count("generate_series(1, pg_relation_size('outbox_tasks_dedup_key_idx') / 8192)")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_without_a_dedup_key_leave_its_index_empty() -> anyhow::Result<()> {
    let db = PgTestDb::create("storage_dedup_index").await?;
    let mut conn = db.connect().await?;
    enqueue(db.store(), &mut conn, plain(2_000)).await?;
    // One at a time too: the plain insert and the general one.
    for task in plain(10) {
        enqueue(db.store(), &mut conn, vec![task.max_attempts(3)]).await?;
    }
    assert_eq!(
        dedup_index_pages(&db).await?,
        1,
        "2,010 tasks without a dedup_key wrote entries into its index"
    );

    // A key still holds its place, and the index now has it.
    let first = enqueue(
        db.store(),
        &mut conn,
        vec![Task::new("a", 1, "x").dedup_key("k")],
    )
    .await?;
    let again = enqueue(
        db.store(),
        &mut conn,
        vec![Task::new("a", 1, "y").dedup_key("k")],
    )
    .await?;
    assert_eq!(first, again, "a held dedup_key answers its holder");
    assert!(dedup_index_pages(&db).await? > 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_table_vacuums_as_a_queue_does() -> anyhow::Result<()> {
    let db = PgTestDb::create("storage_autovacuum").await?;
    for table in ["outbox_tasks", "outbox_ordering_keys"] {
        let settings = db
            .count(&format!(
                "pg_class, unnest(reloptions) AS option WHERE oid = '{table}'::regclass \
                 AND option IN ('autovacuum_vacuum_scale_factor=0.01', \
                 'autovacuum_vacuum_threshold=1000', 'autovacuum_vacuum_cost_delay=0')"
            ))
            .await?;
        assert_eq!(settings, 3, "{table}");
    }
    Ok(())
}

/// A database migrated before 2026-12-06, with tasks in it: the store of
/// this version enqueues there before the migration runs (its `ON
/// CONFLICT` finds the old constraint), the migration keeps every held
/// key, and its revert gives the old constraint back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_upgraded_with_held_keys_keeps_them() -> anyhow::Result<()> {
    let db = PgTestDb::create("storage_upgrade").await?;
    db.revert().await?;
    let before: Vec<_> = diesel_outbox_postgres::migration_sql()
        .iter()
        .take_while(|migration| migration.name() != STORAGE)
        .collect();
    let mut conn = db.connect().await?;
    conn.batch_execute(
        "CREATE TABLE IF NOT EXISTS __diesel_schema_migrations (
             version VARCHAR(50) PRIMARY KEY NOT NULL,
             run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    )
    .await?;
    for migration in &before {
        conn.batch_execute(migration.up()).await?;
        conn.batch_execute(&format!(
            "INSERT INTO __diesel_schema_migrations (version) VALUES ('{}')",
            migration.version()
        ))
        .await?;
    }

    let held = enqueue(
        db.store(),
        &mut conn,
        vec![Task::new("a", 1, "x").dedup_key("k")],
    )
    .await?;
    let again = enqueue(
        db.store(),
        &mut conn,
        vec![Task::new("a", 1, "y").dedup_key("k")],
    )
    .await?;
    assert_eq!(held, again, "before the migration");
    enqueue(db.store(), &mut conn, plain(100)).await?;

    let applied = run_migrations(AsyncPgConnection::establish(db.url()).await?).await?;
    assert_eq!(applied.len(), 1, "{applied:?}");
    let after = enqueue(
        db.store(),
        &mut conn,
        vec![Task::new("a", 1, "z").dedup_key("k")],
    )
    .await?;
    assert_eq!(held, after, "after the migration");
    let mixed = enqueue(
        db.store(),
        &mut conn,
        vec![
            Task::new("a", 1, "w").dedup_key("k"),
            Task::new("a", 1, "v").dedup_key("l"),
        ],
    )
    .await?;
    assert_eq!(mixed[0], held[0], "a batch finds the held key");
    assert_eq!(
        db.count("outbox_tasks WHERE dedup_key IS NOT NULL").await?,
        2
    );

    // Its down gives the constraint the earlier schema had back.
    let storage = diesel_outbox_postgres::migration_sql()
        .iter()
        .find(|migration| migration.name() == STORAGE)
        .ok_or_else(|| anyhow::anyhow!("no migration {STORAGE}"))?;
    conn.batch_execute(storage.down()).await?;
    assert_eq!(
        db.count("pg_constraint WHERE conname = 'outbox_tasks_dedup_key_key' AND contype = 'u'")
            .await?,
        1
    );
    assert_eq!(
        db.count("pg_class WHERE relname = 'outbox_tasks_dedup_key_idx'")
            .await?,
        0
    );
    let back = enqueue(
        db.store(),
        &mut conn,
        vec![Task::new("a", 1, "u").dedup_key("l")],
    )
    .await?;
    assert_eq!(back, vec![mixed[1]], "after the revert");
    Ok(())
}
