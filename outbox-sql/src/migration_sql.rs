//! [`MigrationSql`]: the text of one embedded migration, for users who apply
//! migrations with their own tool, and the migrations of an outbox with
//! names of its own ([`NamedMigrations`]).

use std::borrow::Cow;

use diesel::{
    backend::Backend,
    connection::BoxableConnection,
    migration::{
        self, Migration, MigrationMetadata, MigrationName, MigrationSource, MigrationVersion,
    },
};

use crate::Names;

/// One migration a backend crate ships: its name and the SQL of its
/// `up.sql` and `down.sql`, exactly as in the crate's `migrations/` folder,
/// or as an outbox with other names runs them ([`named`](Self::named)).
///
/// ```
/// use diesel_outbox_sql::{MigrationSql, Names};
///
/// let sql = MigrationSql::new("2026-11-29-000000_create_things", "CREATE TABLE outbox_tasks (id INT);", "DROP TABLE outbox_tasks;");
/// assert_eq!(sql.version(), "20261129000000");
/// assert_eq!(sql.name(), "2026-11-29-000000_create_things");
///
/// let billing = sql.named(&Names::default().with_table_prefix("billing_").unwrap());
/// assert_eq!(billing.version(), "20261129000000_billing_");
/// assert_eq!(billing.up(), "CREATE TABLE billing_outbox_tasks (id INT);");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationSql {
    name: &'static str,
    up: Cow<'static, str>,
    down: Cow<'static, str>,
    /// The table prefix, which ends the version of a named outbox's
    /// migration ("" for the default names).
    prefix: Cow<'static, str>,
}

impl MigrationSql {
    /// A migration named `name` (its folder name) with the SQL that applies
    /// it (`up`) and the SQL that reverts it (`down`).
    pub const fn new(name: &'static str, up: &'static str, down: &'static str) -> Self {
        Self {
            name,
            up: Cow::Borrowed(up),
            down: Cow::Borrowed(down),
            prefix: Cow::Borrowed(""),
        }
    }

    /// This migration as the outbox called `names` runs it: its SQL with
    /// every table, index and constraint renamed, recorded under a version
    /// of its own (the version, `_` and the table prefix), so that each
    /// outbox in a database is migrated and reverted on its own. The default
    /// names give the migration unchanged.
    pub fn named(&self, names: &Names) -> Self {
        Self {
            name: self.name,
            up: Cow::Owned(names.render(&self.up).into_owned()),
            down: Cow::Owned(names.render(&self.down).into_owned()),
            prefix: Cow::Owned(names.table_prefix().to_owned()),
        }
    }

    /// The migration's folder name, such as `2026-11-29-000000_create_outbox_tasks`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The version diesel records for it in `__diesel_schema_migrations`:
    /// the digits of the name's timestamp, such as `20261129000000`, and
    /// for an outbox with a table prefix, `_` and the prefix
    /// (`20261129000000_billing_`).
    pub fn version(&self) -> String {
        let stamp = self.name.split('_').next().unwrap_or(self.name);
        let digits = stamp.replace('-', "");
        match self.prefix.as_ref() {
            "" => digits,
            prefix => format!("{digits}_{prefix}"),
        }
    }

    /// The SQL that applies the migration (`up.sql`).
    pub fn up(&self) -> &str {
        &self.up
    }

    /// The SQL that reverts the migration (`down.sql`).
    pub fn down(&self) -> &str {
        &self.down
    }
}

/// The migrations of one outbox, with its names, as a diesel
/// [`MigrationSource`]: what `run_migrations_named` applies. Each runs in a
/// transaction of its own, as diesel runs a migrations folder.
#[derive(Debug, Clone)]
pub struct NamedMigrations {
    migrations: Vec<MigrationSql>,
}

impl NamedMigrations {
    /// `migrations` (a backend's [`MigrationSql`] list) with `names`.
    pub fn new(migrations: &[MigrationSql], names: &Names) -> Self {
        Self {
            migrations: migrations.iter().map(|sql| sql.named(names)).collect(),
        }
    }

    /// The migrations, oldest first.
    pub fn sql(&self) -> &[MigrationSql] {
        &self.migrations
    }
}

/// One migration of [`NamedMigrations`].
struct Named {
    sql: MigrationSql,
    version: String,
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.sql.prefix.as_ref() {
            "" => f.write_str(self.sql.name),
            prefix => write!(f, "{} ({prefix})", self.sql.name),
        }
    }
}

impl MigrationName for Named {
    fn version(&self) -> MigrationVersion<'_> {
        MigrationVersion::from(self.version.as_str())
    }
}

/// Each migration runs in a transaction, diesel's default.
struct InTransaction;

impl MigrationMetadata for InTransaction {}

impl<DB: Backend> Migration<DB> for Named {
    fn run(&self, conn: &mut dyn BoxableConnection<DB>) -> migration::Result<()> {
        conn.batch_execute(self.sql.up())?;
        Ok(())
    }

    fn revert(&self, conn: &mut dyn BoxableConnection<DB>) -> migration::Result<()> {
        conn.batch_execute(self.sql.down())?;
        Ok(())
    }

    fn metadata(&self) -> &dyn MigrationMetadata {
        &InTransaction
    }

    fn name(&self) -> &dyn MigrationName {
        self
    }
}

impl<DB: Backend> MigrationSource<DB> for NamedMigrations {
    fn migrations(&self) -> migration::Result<Vec<Box<dyn Migration<DB>>>> {
        Ok(self
            .migrations
            .iter()
            .map(|sql| {
                Box::new(Named {
                    version: sql.version(),
                    sql: sql.clone(),
                }) as Box<dyn Migration<DB>>
            })
            .collect())
    }
}
