//! The inbox's own embedded migrations (`outbox_inbox`), apart from the
//! outbox's so that a service that only consumes applies just these.

use diesel::pg::Pg;
use diesel_async::AsyncConnection;
use diesel_migrations::{EmbeddedMigrations, embed_migrations};
use diesel_outbox_core::Result;
use diesel_outbox_sql::MigrationSql;

use crate::migration_lock::AdvisoryLock;

/// The inbox migrations this crate ships, embedded at compile time: a set of
/// their own, recorded in the same `__diesel_schema_migrations` table as
/// [`MIGRATIONS`](crate::MIGRATIONS) under versions of their own.
pub const INBOX_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations_inbox");

const SQL: &[MigrationSql] = &[MigrationSql::new(
    "2026-11-30-000000_create_outbox_inbox",
    include_str!("../migrations_inbox/2026-11-30-000000_create_outbox_inbox/up.sql"),
    include_str!("../migrations_inbox/2026-11-30-000000_create_outbox_inbox/down.sql"),
)];

/// Applies every pending inbox migration and returns the versions applied;
/// idempotent, and safe from many instances at once under the same lock as
/// [`run_migrations`](crate::run_migrations). A service that both publishes
/// and consumes runs both; one that only consumes runs just this.
pub async fn run_inbox_migrations<C>(conn: C) -> Result<Vec<String>>
where
    C: AsyncConnection<Backend = Pg> + 'static,
{
    diesel_outbox_sql::run_migrations(conn, INBOX_MIGRATIONS, AdvisoryLock).await
}

/// Reverts the applied inbox migrations, newest first (dropping
/// `outbox_inbox` with every record in it, so messages delivered again
/// would be applied again), and returns the versions reverted. Other
/// migrations, the outbox's included, stay applied.
pub async fn revert_inbox_migrations<C>(conn: C) -> Result<Vec<String>>
where
    C: AsyncConnection<Backend = Pg> + 'static,
{
    diesel_outbox_sql::revert_migrations(conn, INBOX_MIGRATIONS, AdvisoryLock).await
}

/// The SQL of every inbox migration, oldest first, with its version, for
/// applications that keep migrations in their own folder or tool (see
/// [`migration_sql`](crate::migration_sql)).
///
/// ```
/// let sql = diesel_outbox_postgres::inbox_migration_sql();
/// assert!(sql[0].up().contains("CREATE TABLE outbox_inbox"));
/// assert!(sql[0].down().contains("DROP TABLE outbox_inbox"));
/// ```
pub fn inbox_migration_sql() -> &'static [MigrationSql] {
    SQL
}

#[cfg(test)]
mod tests {
    use diesel::{migration::MigrationSource, pg::Pg};

    use super::{INBOX_MIGRATIONS, inbox_migration_sql};

    #[test]
    fn the_sql_is_every_embedded_inbox_migration_as_in_its_files() {
        let mut embedded: Vec<String> = MigrationSource::<Pg>::migrations(&INBOX_MIGRATIONS)
            .expect("embedded migrations")
            .iter()
            .map(|migration| migration.name().to_string())
            .collect();
        embedded.sort();
        let listed: Vec<&str> = inbox_migration_sql().iter().map(|sql| sql.name()).collect();
        assert_eq!(listed, embedded);
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations_inbox");
        for sql in inbox_migration_sql() {
            let read =
                |file: &str| std::fs::read_to_string(folder.join(sql.name()).join(file)).unwrap();
            assert_eq!(sql.up(), read("up.sql"), "{}/up.sql", sql.name());
            assert_eq!(sql.down(), read("down.sql"), "{}/down.sql", sql.name());
        }
        assert_eq!(inbox_migration_sql()[0].version(), "20261130000000");
    }
}
