//! The embedded migrations of `outbox_tasks`, the functions that apply and
//! revert them, and their SQL as text.

use diesel::pg::Pg;
use diesel_async::AsyncConnection;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use diesel_outbox_core::Result;
use diesel_outbox_sql::MigrationSql;

use crate::migration_lock::AdvisoryLock;

/// The migrations this crate ships, embedded at compile time.
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// The SQL of [`MIGRATIONS`], one entry per migration folder, oldest first.
const SQL: &[MigrationSql] = &[MigrationSql::new(
    "2026-11-29-000000_create_outbox_tasks",
    include_str!("../migrations/2026-11-29-000000_create_outbox_tasks/up.sql"),
    include_str!("../migrations/2026-11-29-000000_create_outbox_tasks/down.sql"),
)];

/// Applies every pending outbox migration and returns the versions applied.
/// Idempotent: an up-to-date database is left alone.
///
/// Takes the connection by value (an `AsyncPgConnection`, or a pooled one,
/// which goes back to its pool afterwards). Migrations are recorded in
/// diesel's `__diesel_schema_migrations` table, so they coexist with an
/// application's own diesel migrations. Works on any tokio runtime flavour.
///
/// Safe to call from many instances at once: the run holds a session
/// advisory lock (`pg_advisory_lock`, with a fixed key derived from the name
/// `outbox migrations`), so concurrent runs on one database take turns and
/// the later ones find nothing pending. The wait is bounded only by the
/// session's `lock_timeout`.
pub async fn run_migrations<C>(conn: C) -> Result<Vec<String>>
where
    C: AsyncConnection<Backend = Pg> + 'static,
{
    diesel_outbox_sql::run_migrations(conn, MIGRATIONS, AdvisoryLock).await
}

/// Reverts the applied outbox migrations, newest first (dropping
/// `outbox_tasks` with every task in it), and returns the versions reverted.
///
/// Versions in `__diesel_schema_migrations` that are not the outbox's (an
/// application's own diesel migrations) are left applied and recorded.
/// Holds the same lock as [`run_migrations`].
pub async fn revert_migrations<C>(conn: C) -> Result<Vec<String>>
where
    C: AsyncConnection<Backend = Pg> + 'static,
{
    diesel_outbox_sql::revert_migrations(conn, MIGRATIONS, AdvisoryLock).await
}

/// The SQL of every outbox migration, oldest first, with its version: the
/// same text [`run_migrations`] applies, for applications that keep the
/// outbox's migrations in their own migrations folder or tool.
///
/// Apply each [`up`](MigrationSql::up) in order; revert with each
/// [`down`](MigrationSql::down) newest first. Use one way or the other for a
/// database: [`run_migrations`] only knows what it recorded itself in
/// `__diesel_schema_migrations`, under [`version`](MigrationSql::version).
///
/// ```
/// let sql = diesel_outbox_postgres::migration_sql();
/// assert!(sql[0].up().contains("CREATE TABLE outbox_tasks"));
/// assert!(sql[0].down().contains("DROP TABLE outbox_tasks"));
/// ```
pub fn migration_sql() -> &'static [MigrationSql] {
    SQL
}

#[cfg(test)]
mod tests {
    use diesel::{migration::MigrationSource, pg::Pg};

    use super::{MIGRATIONS, migration_sql};

    #[test]
    fn the_sql_lists_every_embedded_migration_in_order() {
        let embedded: Vec<String> = MigrationSource::<Pg>::migrations(&MIGRATIONS)
            .expect("embedded migrations")
            .iter()
            .map(|migration| migration.name().to_string())
            .collect();
        let mut sorted = embedded.clone();
        sorted.sort();
        let listed: Vec<&str> = migration_sql().iter().map(|sql| sql.name()).collect();
        assert_eq!(listed, sorted);
    }

    #[test]
    fn the_sql_is_the_text_of_the_migration_files() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut names: Vec<String> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(migration_sql().len(), names.len());
        for (sql, name) in migration_sql().iter().zip(&names) {
            assert_eq!(sql.name(), name);
            let read = |file: &str| std::fs::read_to_string(folder.join(name).join(file)).unwrap();
            assert_eq!(sql.up(), read("up.sql"), "{name}/up.sql");
            assert_eq!(sql.down(), read("down.sql"), "{name}/down.sql");
        }
        assert_eq!(migration_sql()[0].version(), "20261129000000");
    }
}
