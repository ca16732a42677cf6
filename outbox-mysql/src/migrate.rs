//! The embedded migrations of `outbox_tasks` and the functions that apply them.

use diesel::mysql::Mysql;
use diesel_async::AsyncConnection;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use outbox_core::Result;

/// The migrations this crate ships, embedded at compile time.
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// Applies every pending outbox migration and returns the versions applied.
/// Idempotent: an up-to-date database is left alone.
///
/// Takes the connection by value (an `AsyncMysqlConnection`, or a pooled one,
/// which goes back to its pool afterwards). Migrations are recorded in
/// diesel's `__diesel_schema_migrations` table, so they coexist with an
/// application's own diesel migrations. Works on any tokio runtime flavour.
pub async fn run_migrations<C>(conn: C) -> Result<Vec<String>>
where
    C: AsyncConnection<Backend = Mysql> + 'static,
{
    outbox_diesel::run_migrations(conn, MIGRATIONS).await
}

/// Reverts every applied outbox migration (dropping `outbox_tasks`) and
/// returns the versions reverted.
pub async fn revert_migrations<C>(conn: C) -> Result<Vec<String>>
where
    C: AsyncConnection<Backend = Mysql> + 'static,
{
    outbox_diesel::revert_migrations(conn, MIGRATIONS).await
}
