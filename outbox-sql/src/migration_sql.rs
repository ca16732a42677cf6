//! [`MigrationSql`]: the text of one embedded migration, for users who apply
//! migrations with their own tool.

/// One migration a backend crate ships: its name and the SQL of its
/// `up.sql` and `down.sql`, exactly as in the crate's `migrations/` folder.
///
/// ```
/// use diesel_outbox_sql::MigrationSql;
///
/// let sql = MigrationSql::new("2026-11-29-000000_create_things", "CREATE TABLE things (id INT);", "DROP TABLE things;");
/// assert_eq!(sql.version(), "20261129000000");
/// assert_eq!(sql.name(), "2026-11-29-000000_create_things");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationSql {
    name: &'static str,
    up: &'static str,
    down: &'static str,
}

impl MigrationSql {
    /// A migration named `name` (its folder name) with the SQL that applies
    /// it (`up`) and the SQL that reverts it (`down`).
    pub const fn new(name: &'static str, up: &'static str, down: &'static str) -> Self {
        Self { name, up, down }
    }

    /// The migration's folder name, such as `2026-11-29-000000_create_outbox_tasks`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The version diesel records for it in `__diesel_schema_migrations`:
    /// the digits of the name's timestamp, such as `20261129000000`.
    pub fn version(&self) -> String {
        let stamp = self.name.split('_').next().unwrap_or(self.name);
        stamp.replace('-', "")
    }

    /// The SQL that applies the migration (`up.sql`).
    pub fn up(&self) -> &'static str {
        self.up
    }

    /// The SQL that reverts the migration (`down.sql`).
    pub fn down(&self) -> &'static str {
        self.down
    }
}
