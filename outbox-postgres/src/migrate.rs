//! The embedded migrations of `outbox_tasks` and the functions that apply them.

use diesel::pg::Pg;
use diesel_async::{AsyncConnection, AsyncMigrationHarness};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use outbox_core::{BoxError, Error, Result};

/// The migrations this crate ships, embedded at compile time.
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// Applies every pending outbox migration and returns the versions applied.
/// Idempotent: an up-to-date database is left alone.
///
/// Takes the connection by value (an `AsyncPgConnection`, or a pooled one,
/// which goes back to its pool afterwards). Migrations are recorded in
/// diesel's `__diesel_schema_migrations` table, so they coexist with an
/// application's own diesel migrations. Runs on tokio's blocking pool, so any
/// runtime flavour works.
pub async fn run_migrations<C>(conn: C) -> Result<Vec<String>>
where
    C: AsyncConnection<Backend = Pg> + 'static,
{
    with_harness(conn, |harness| {
        versions(harness.run_pending_migrations(MIGRATIONS))
    })
    .await
}

/// Reverts every applied outbox migration (dropping `outbox_tasks`) and
/// returns the versions reverted.
pub async fn revert_migrations<C>(conn: C) -> Result<Vec<String>>
where
    C: AsyncConnection<Backend = Pg> + 'static,
{
    with_harness(conn, |harness| {
        versions(harness.revert_all_migrations(MIGRATIONS))
    })
    .await
}

fn versions<V: ToString>(applied: Result<Vec<V>, BoxError>) -> Result<Vec<String>, BoxError> {
    applied.map(|versions| versions.iter().map(ToString::to_string).collect())
}

async fn with_harness<C, F>(conn: C, run: F) -> Result<Vec<String>>
where
    C: AsyncConnection<Backend = Pg> + 'static,
    F: FnOnce(&mut AsyncMigrationHarness<C>) -> Result<Vec<String>, BoxError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || run(&mut AsyncMigrationHarness::new(conn)))
        .await
        .map_err(Error::database)?
        .map_err(Error::Database)
}
