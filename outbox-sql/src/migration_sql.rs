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

use diesel_outbox_core::Result;

use crate::{BackendKind, Names};

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
/// assert_eq!(billing.name(), "2026-11-29-000000-billing._create_things");
/// assert_eq!(billing.version(), "20261129000000billing.");
/// assert_eq!(billing.up(), "CREATE TABLE billing_outbox_tasks (id INT);");
///
/// let schema = Names::default().with_schema("billing").unwrap();
/// let in_schema = sql.named(&schema);
/// assert_eq!(in_schema.version(), "20261129000000billing+");
/// assert!(in_schema.up().starts_with("DO $$ BEGIN IF NOT EXISTS"));
/// assert!(in_schema.up().ends_with("\nCREATE TABLE \"billing\".outbox_tasks (id INT);"));
/// assert_eq!(in_schema.down(), "DROP TABLE \"billing\".outbox_tasks;");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationSql {
    name: Cow<'static, str>,
    up: Cow<'static, str>,
    down: Cow<'static, str>,
}

impl MigrationSql {
    /// A migration named `name` (its folder name) with the SQL that applies
    /// it (`up`) and the SQL that reverts it (`down`).
    pub const fn new(name: &'static str, up: &'static str, down: &'static str) -> Self {
        Self {
            name: Cow::Borrowed(name),
            up: Cow::Borrowed(up),
            down: Cow::Borrowed(down),
        }
    }

    /// This migration as the outbox called `names` runs it: its SQL with
    /// every table, index and constraint renamed, under a name and version
    /// of its own, so that each outbox in a database is migrated and
    /// reverted on its own. The name is the timestamp, `-`, the schema and
    /// `+` if there is one, the table prefix, each `_` of both written `.`,
    /// then the rest of the name
    /// (`2026-11-29-000000-billing+t._create_outbox_tasks` for the schema
    /// `billing` and the prefix `t_`): a folder of that name in an
    /// application's own migrations records the same version as the
    /// store's run. A migration into a schema creates it first when it is
    /// missing; reverting leaves it. The default names give the migration
    /// unchanged. `names` should be as the backend writes them
    /// ([`Names::for_backend`], which the backends' `migration_sql_named`
    /// applies): a schema is quoted with their quote.
    pub fn named(&self, names: &Names) -> Self {
        if names.is_default() {
            return self.clone();
        }
        let (stamp, rest) = self.name.split_once('_').unwrap_or((&self.name, ""));
        let schema = names
            .schema()
            .map(|schema| format!("{}+", schema.replace('_', ".")))
            .unwrap_or_default();
        let prefix = names.table_prefix().replace('_', ".");
        let up = names.render(&self.up);
        Self {
            name: Cow::Owned(format!("{stamp}-{schema}{prefix}_{rest}")),
            up: Cow::Owned(match names.create_schema_sql() {
                Some(create) => format!("{create}{up}"),
                None => up.into_owned(),
            }),
            down: Cow::Owned(names.render(&self.down).into_owned()),
        }
    }

    /// The migration's folder name, such as `2026-11-29-000000_create_outbox_tasks`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version diesel records for it in `__diesel_schema_migrations`,
    /// read from the name as diesel reads a folder's: what comes before the
    /// first `_`, without its `-` (`20261129000000`, or
    /// `20261129000000billing.` for the prefix `billing_`,
    /// `20261129000000billing+` for the schema `billing`). A prefix starts
    /// with a letter and holds no `+`, so no two outboxes give one version.
    pub fn version(&self) -> String {
        let stamp = self.name.split('_').next().unwrap_or(&self.name);
        stamp.replace('-', "")
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
    /// `migrations` (a [`MigrationSql`] list of `backend`) with `names`,
    /// as `backend` writes them ([`Names::for_backend`], whose error this
    /// returns).
    pub fn new(migrations: &[MigrationSql], names: &Names, backend: BackendKind) -> Result<Self> {
        let names = names.clone().for_backend(backend)?;
        Ok(Self {
            migrations: migrations.iter().map(|sql| sql.named(&names)).collect(),
        })
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
        f.write_str(self.sql.name())
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
