//! Embedded migrations applied through diesel's harness, under a session
//! lock, on any runtime flavour.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use diesel::{
    backend::Backend,
    migration::{Migration, MigrationSource},
};
use diesel_async::AsyncConnection;
use diesel_migrations::MigrationHarness;
use diesel_outbox_core::{BoxError, Error, Result};

use crate::{MigrationConnection, MigrationLock};

/// Applies every pending migration of `source` and returns the versions
/// applied, oldest first.
///
/// Holds `lock` for the whole run, so runs started at once on one database
/// take turns; the one that goes second finds nothing pending. The lock is
/// released whether the migrations succeed or fail.
pub async fn run_migrations<DB, C, S, L>(conn: C, source: S, lock: L) -> Result<Vec<String>>
where
    DB: Backend,
    C: AsyncConnection<Backend = DB> + 'static,
    MigrationConnection<C>: diesel::Connection<Backend = DB> + MigrationHarness<DB>,
    S: MigrationSource<DB> + Send + 'static,
    L: MigrationLock<MigrationConnection<C>>,
{
    locked(conn, lock, move |harness| {
        let applied = harness.run_pending_migrations(source)?;
        Ok(applied.iter().map(ToString::to_string).collect())
    })
    .await
}

/// Reverts the applied migrations of `source`, newest first, and returns the
/// versions reverted.
///
/// Only versions that belong to `source` are touched: other migrations
/// recorded in `__diesel_schema_migrations` (an application's own) stay
/// applied and recorded. Holds `lock` for the whole run, like
/// [`run_migrations`].
pub async fn revert_migrations<DB, C, S, L>(conn: C, source: S, lock: L) -> Result<Vec<String>>
where
    DB: Backend,
    C: AsyncConnection<Backend = DB> + 'static,
    MigrationConnection<C>: diesel::Connection<Backend = DB> + MigrationHarness<DB>,
    S: MigrationSource<DB> + Send + 'static,
    L: MigrationLock<MigrationConnection<C>>,
{
    locked(conn, lock, move |harness| revert_own(harness, &source)).await
}

/// Reverts the migrations of `source` that `harness` records as applied,
/// newest first.
fn revert_own<DB, H, S>(harness: &mut H, source: &S) -> Result<Vec<String>, BoxError>
where
    DB: Backend,
    H: MigrationHarness<DB>,
    S: MigrationSource<DB>,
{
    let applied = harness.applied_migrations()?;
    let mut own: Vec<Box<dyn Migration<DB>>> = source
        .migrations()?
        .into_iter()
        .filter(|migration| applied.contains(&migration.name().version()))
        .collect();
    own.sort_by(|a, b| b.name().version().cmp(&a.name().version()));
    own.iter()
        .map(|migration| {
            harness
                .revert_migration(migration.as_ref())
                .map(|version| version.to_string())
        })
        .collect()
}

/// Runs `run` on `conn` with `lock` held, on tokio's blocking pool.
///
/// diesel's harness is synchronous: on a runtime worker it would need
/// `block_in_place`, which panics on a current-thread runtime, while a
/// blocking-pool thread works on both flavours. The whole run, release
/// included, happens on that thread, so a caller that stops waiting does not
/// leave the lock held on a connection that goes back to its pool.
async fn locked<C, L, F>(conn: C, mut lock: L, run: F) -> Result<Vec<String>>
where
    C: AsyncConnection + 'static,
    L: MigrationLock<MigrationConnection<C>>,
    F: FnOnce(&mut MigrationConnection<C>) -> Result<Vec<String>, BoxError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let mut conn = MigrationConnection::from(conn);
        lock.acquire(&mut conn)?;
        let outcome = catch_unwind(AssertUnwindSafe(|| run(&mut conn)));
        let released = lock.release(&mut conn);
        match outcome {
            Ok(versions) => {
                let versions = versions.map_err(Error::database)?;
                released.map(|()| versions)
            }
            // Released first: a pooled connection outlives the panic.
            Err(panic) => resume_unwind(panic),
        }
    })
    .await
    .map_err(Error::database)?
}
