//! The embedded migrations: idempotent, reversible, safe to run from many
//! instances at once, blind to the application's own migrations, and
//! printable as SQL that works on its own.
//!
//! Run on a current-thread runtime by
//! [`conformance_tests!`](crate::conformance_tests): diesel's harness alone
//! would panic there (`block_in_place`), so these scenarios also prove the
//! migrations run on either runtime flavour.

use anyhow::Context as _;
use diesel_outbox_sql::{MigrationConnection, MigrationLock};

use super::support::{config, enqueue_one, get, registry, task, worker};
use crate::{TestBackend, handler};

/// Versions an application of its own recorded in diesel's table, one older
/// and one newer than the outbox's.
const APP_VERSIONS: [&str; 2] = ["20000101000000", "20990101000000"];

/// Applying twice changes nothing; reverting drops the table; applying
/// again restores it.
pub async fn migrations_are_idempotent_and_reversible<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    assert!(
        db.migrate().await?.is_empty(),
        "a second run applied something"
    );
    assert_eq!(db.count_tasks().await?, 0);
    let reverted = db.revert().await?;
    assert_eq!(reverted, versions::<B>(true));
    assert!(
        db.count_tasks().await.is_err(),
        "outbox_tasks survived the revert"
    );
    assert_eq!(db.migrate().await?, versions::<B>(false));
    assert_eq!(db.count_tasks().await?, 0);
    Ok(())
}

/// Two runs started at once on a database that was never migrated both
/// succeed: one applies every migration, the other finds nothing left, and
/// each version is recorded once. Without the migration lock both create
/// diesel's table and the outbox table at once, and one of them fails.
pub async fn concurrent_migration_runs_both_succeed<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    never_migrated(db).await?;
    let (first, second) = tokio::join!(db.migrate(), db.migrate());
    let (first, second) = (
        first.context("the first run")?,
        second.context("the second run")?,
    );
    let mut applied = [first, second];
    applied.sort();
    assert_eq!(applied, [Vec::new(), versions::<B>(false)]);
    for version in versions::<B>(false) {
        let rows = db
            .count(&format!(
                "__diesel_schema_migrations WHERE version = '{version}'"
            ))
            .await?;
        assert_eq!(rows, 1, "version {version} recorded {rows} times");
    }
    assert_eq!(db.count_tasks().await?, 0);
    Ok(())
}

/// With an application's own migrations recorded next to the outbox's,
/// revert reverts the outbox's versions only, newest first, succeeds, and
/// leaves the application's table and version rows alone.
pub async fn revert_leaves_the_applications_migrations<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    db.execute_sql(&format!(
        "CREATE TABLE app_orders (id BIGINT PRIMARY KEY); \
         INSERT INTO __diesel_schema_migrations (version) VALUES ('{}'), ('{}')",
        APP_VERSIONS[0], APP_VERSIONS[1]
    ))
    .await?;
    db.execute_sql("INSERT INTO app_orders (id) VALUES (1)")
        .await?;

    assert_eq!(db.revert().await?, versions::<B>(true));
    assert!(
        db.count_tasks().await.is_err(),
        "outbox_tasks survived the revert"
    );
    assert_eq!(db.count("app_orders").await?, 1);
    assert_eq!(db.count("__diesel_schema_migrations").await?, 2);
    for version in APP_VERSIONS {
        let rows = db
            .count(&format!(
                "__diesel_schema_migrations WHERE version = '{version}'"
            ))
            .await?;
        assert_eq!(rows, 1, "the application's version {version} is gone");
    }

    assert!(
        db.revert().await?.is_empty(),
        "a second revert reverted something"
    );
    assert_eq!(db.migrate().await?, versions::<B>(false));
    let recorded = APP_VERSIONS.len() + versions::<B>(false).len();
    assert_eq!(
        db.count("__diesel_schema_migrations").await?,
        i64::try_from(recorded)?
    );
    Ok(())
}

/// The printed SQL, applied by hand to a database that was never migrated,
/// creates a table the store works with; the printed down SQL drops it.
pub async fn printed_migration_sql_makes_a_working_table<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    never_migrated(db).await?;
    for migration in B::migration_sql()? {
        db.execute_sql(migration.up())
            .await
            .with_context(|| format!("{}/up.sql", migration.name()))?;
    }

    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = enqueue_one(db, task(1)).await?;
    worker.send(id).await?;
    assert_eq!(handle.succeeded_ids(), [id]);
    assert_eq!(get(db, id).await?.attempts, 1);

    for migration in B::migration_sql()?.iter().rev() {
        db.execute_sql(migration.down())
            .await
            .with_context(|| format!("{}/down.sql", migration.name()))?;
    }
    assert!(
        db.count_tasks().await.is_err(),
        "outbox_tasks survived the down SQL"
    );
    Ok(())
}

/// The outbox's migrations written into an application's own migrations
/// folder (each under its `name()`, as `up.sql` and `down.sql`) and applied
/// by diesel's harness from there are recorded under the same versions:
/// `run_migrations` then finds nothing to apply, and the table works.
pub async fn copied_migrations_count_as_applied<B>(db: &B) -> anyhow::Result<()>
where
    B: TestBackend,
    MigrationConnection<B::Conn>: diesel::Connection<Backend = <B::Conn as diesel_async::AsyncConnectionCore>::Backend>
        + diesel_migrations::MigrationHarness<<B::Conn as diesel_async::AsyncConnectionCore>::Backend>,
    diesel_migrations::FileBasedMigrations:
        diesel::migration::MigrationSource<<B::Conn as diesel_async::AsyncConnectionCore>::Backend>,
{
    never_migrated(db).await?;
    let folder = std::env::temp_dir().join(format!("outbox-migrations-{:016x}", fastrand::u64(..)));
    for migration in B::migration_sql()? {
        let dir = folder.join(migration.name());
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("up.sql"), migration.up())?;
        std::fs::write(dir.join("down.sql"), migration.down())?;
    }
    let source = diesel_migrations::FileBasedMigrations::from_path(&folder)
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    let applied = diesel_outbox_sql::run_migrations(db.connect().await?, source, NoLock).await;
    std::fs::remove_dir_all(&folder)?;
    assert_eq!(
        applied?,
        versions::<B>(false),
        "diesel applied other versions"
    );

    assert!(
        db.migrate().await?.is_empty(),
        "run_migrations applied what the copied migrations did"
    );
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = enqueue_one(db, task(1)).await?;
    worker.send(id).await?;
    assert_eq!(handle.succeeded_ids(), [id]);
    Ok(())
}

/// No lock: one run at a time in this scenario.
struct NoLock;

impl<C> MigrationLock<C> for NoLock {
    fn acquire(&mut self, _conn: &mut C) -> diesel_outbox_core::Result<()> {
        Ok(())
    }

    fn release(&mut self, _conn: &mut C) -> diesel_outbox_core::Result<()> {
        Ok(())
    }
}

/// The outbox's versions, oldest first (or newest first, `newest_first`).
///
/// # Panics
///
/// When the test database's names have no migrations (a schema on SQLite):
/// no test database is built with such names.
fn versions<B: TestBackend>(newest_first: bool) -> Vec<String> {
    let mut versions: Vec<String> = B::migration_sql()
        .unwrap_or_else(|error| panic!("the outbox's migrations: {error}"))
        .iter()
        .map(|m| m.version())
        .collect();
    if newest_first {
        versions.reverse();
    }
    versions
}

/// Turns the test's migrated database into one that was never migrated:
/// no outbox table, and no diesel migrations table either.
async fn never_migrated<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    db.revert().await?;
    db.execute_sql("DROP TABLE __diesel_schema_migrations")
        .await?;
    Ok(())
}
