//! Embedded migrations applied through diesel-async on any runtime flavour.

use diesel::{backend::Backend, migration::MigrationSource};
use diesel_async::{
    AsyncConnection, AsyncMigrationHarness, async_connection_wrapper::AsyncConnectionWrapper,
};
use diesel_migrations::MigrationHarness;
use outbox_core::{BoxError, Error, Result};

/// Applies every pending migration of `source` and returns the versions applied.
///
/// diesel's harness blocks its thread (`block_in_place`), which panics on a
/// current-thread runtime; running it on tokio's blocking pool works on both.
pub async fn run_migrations<DB, C, S>(conn: C, source: S) -> Result<Vec<String>>
where
    DB: Backend,
    C: AsyncConnection<Backend = DB> + 'static,
    AsyncConnectionWrapper<C>: diesel::Connection<Backend = DB> + MigrationHarness<DB>,
    S: MigrationSource<DB> + Send + 'static,
{
    with_harness(conn, move |harness| {
        versions(harness.run_pending_migrations(source))
    })
    .await
}

/// Reverts every applied migration of `source` and returns the versions reverted.
pub async fn revert_migrations<DB, C, S>(conn: C, source: S) -> Result<Vec<String>>
where
    DB: Backend,
    C: AsyncConnection<Backend = DB> + 'static,
    AsyncConnectionWrapper<C>: diesel::Connection<Backend = DB> + MigrationHarness<DB>,
    S: MigrationSource<DB> + Send + 'static,
{
    with_harness(conn, move |harness| {
        versions(harness.revert_all_migrations(source))
    })
    .await
}

fn versions<V: ToString>(applied: Result<Vec<V>, BoxError>) -> Result<Vec<String>, BoxError> {
    applied.map(|versions| versions.iter().map(ToString::to_string).collect())
}

async fn with_harness<C, F>(conn: C, run: F) -> Result<Vec<String>>
where
    C: AsyncConnection + 'static,
    F: FnOnce(&mut AsyncMigrationHarness<C>) -> Result<Vec<String>, BoxError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || run(&mut AsyncMigrationHarness::new(conn)))
        .await
        .map_err(Error::database)?
        .map_err(Error::database)
}
