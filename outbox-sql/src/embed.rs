//! [`embed_outbox_migrations!`](crate::embed_outbox_migrations): a backend
//! crate's migrations and the functions that apply, revert and print them,
//! written once for every backend.

/// Embeds a backend crate's migrations (`migrations/` for the outbox,
/// `migrations_inbox/` for the inbox) and defines its public migration API:
/// `MIGRATIONS`, `run_migrations`, `revert_migrations`, `migration_sql`,
/// and the same for the inbox (`INBOX_MIGRATIONS`, `run_inbox_migrations`,
/// `revert_inbox_migrations`, `inbox_migration_sql`), and each of those
/// for an outbox with names of its own (`run_migrations_named`,
/// `revert_migrations_named`, `migration_sql_named`, and the inbox's),
/// each run under the backend's migration lock (the named ones return
/// [`Error::Config`](diesel_outbox_core::Error::Config) for names the
/// backend cannot take, such as a schema on SQLite), with tests that the
/// SQL listed is the text of the migration files. For backend crates; invoke it once, at the crate
/// root.
///
/// - `crate`: the crate's name, for the examples;
/// - `backend`: its diesel backend, and `kind`: its [`BackendKind`](crate::BackendKind);
/// - `lock`: an expression for the [`MigrationLock`](crate::MigrationLock)
///   a run holds, and `lock_doc`: what that lock is, for the docs.
///
/// Every backend ships the same migrations, each in its own dialect, under
/// the same folder names (listed here, oldest first).
#[macro_export]
macro_rules! embed_outbox_migrations {
    (
        crate = $krate:literal,
        backend = $backend:ty,
        kind = $kind:expr,
        lock = $lock:expr,
        lock_doc = $lock_doc:literal $(,)?
    ) => {
        $crate::embed_outbox_migrations! {
            @embed $krate, $backend, $kind, $lock, $lock_doc,
            tasks = [
                "2026-11-29-000000_create_outbox_tasks",
                "2026-12-01-000000_outbox_identity",
                "2026-12-05-000000_outbox_relays",
                "2026-12-06-000000_outbox_tasks_storage",
            ],
            inbox = ["2026-11-30-000000_create_outbox_inbox"],
        }
    };
    (
        @embed $krate:literal, $backend:ty, $kind:expr, $lock:expr, $lock_doc:literal,
        tasks = [$($task:literal),+ $(,)?],
        inbox = [$($inbox:literal),+ $(,)?] $(,)?
    ) => {
        /// The migrations this crate ships, embedded at compile time.
        pub const MIGRATIONS: ::diesel_migrations::EmbeddedMigrations =
            ::diesel_migrations::embed_migrations!("migrations");

        /// The inbox migrations this crate ships, embedded at compile time:
        /// a set of their own, recorded in the same
        /// `__diesel_schema_migrations` table as [`MIGRATIONS`] under
        /// versions of their own, so a service that only consumes applies
        /// just these.
        pub const INBOX_MIGRATIONS: ::diesel_migrations::EmbeddedMigrations =
            ::diesel_migrations::embed_migrations!("migrations_inbox");

        const TASKS_SQL: &[$crate::MigrationSql] = &[$(
            $crate::MigrationSql::new(
                $task,
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/", $task, "/up.sql")),
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/", $task, "/down.sql")),
            ),
        )+];

        const INBOX_SQL: &[$crate::MigrationSql] = &[$(
            $crate::MigrationSql::new(
                $inbox,
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations_inbox/", $inbox, "/up.sql")),
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations_inbox/", $inbox, "/down.sql")),
            ),
        )+];

        /// Applies every pending outbox migration and returns the versions
        /// applied. Idempotent: an up-to-date database is left alone.
        ///
        /// Takes the connection by value (a connection of its own, or a
        /// pooled one, which goes back to its pool afterwards). Migrations are
        /// recorded in diesel's `__diesel_schema_migrations` table, so they
        /// coexist with an application's own diesel migrations. Works on any
        /// tokio runtime flavour.
        ///
        #[doc = $lock_doc]
        pub async fn run_migrations<C>(conn: C) -> ::diesel_outbox_core::Result<Vec<String>>
        where
            C: ::diesel_async::AsyncConnection<Backend = $backend> + 'static,
        {
            $crate::run_migrations(conn, MIGRATIONS, $lock).await
        }

        /// Reverts the applied outbox migrations, newest first (dropping
        /// `outbox_tasks` with every task in it), and returns the versions
        /// reverted. Versions in `__diesel_schema_migrations` that are not
        /// the outbox's (an application's own diesel migrations) are left
        /// applied and recorded. Holds the same lock as [`run_migrations`].
        pub async fn revert_migrations<C>(conn: C) -> ::diesel_outbox_core::Result<Vec<String>>
        where
            C: ::diesel_async::AsyncConnection<Backend = $backend> + 'static,
        {
            $crate::revert_migrations(conn, MIGRATIONS, $lock).await
        }

        /// The SQL of every outbox migration, oldest first, with its
        /// version: the same text [`run_migrations`] applies, for
        /// applications that keep the outbox's migrations in their own
        /// migrations folder or tool.
        ///
        /// Apply each `up` in order; revert with each `down` newest first.
        /// Use one way or the other for a database: [`run_migrations`] only
        /// knows what it recorded itself in `__diesel_schema_migrations`,
        /// under each migration's `version`.
        ///
        /// ```
        #[doc = concat!("let sql = ", $krate, "::migration_sql();")]
        /// assert!(sql[0].up().contains("CREATE TABLE outbox_tasks"));
        /// assert!(sql[0].down().contains("DROP TABLE outbox_tasks"));
        /// ```
        pub fn migration_sql() -> &'static [$crate::MigrationSql] {
            TASKS_SQL
        }

        /// [`run_migrations`] for the outbox called `names` (a schema or a
        /// table prefix of the user's; see `SqlStore::with_names`): its
        /// tables, indexes and constraints placed and renamed, recorded under versions of its own, so
        /// that several outboxes in one database, and the application's own
        /// migrations, are applied and reverted apart. The default names
        /// apply exactly what [`run_migrations`] does.
        pub async fn run_migrations_named<C>(
            conn: C,
            names: &$crate::Names,
        ) -> ::diesel_outbox_core::Result<Vec<String>>
        where
            C: ::diesel_async::AsyncConnection<Backend = $backend> + 'static,
        {
            $crate::run_migrations(conn, $crate::NamedMigrations::new(TASKS_SQL, names, $kind)?, $lock).await
        }

        /// [`revert_migrations`] for the outbox called `names`: only its own
        /// versions are reverted.
        pub async fn revert_migrations_named<C>(
            conn: C,
            names: &$crate::Names,
        ) -> ::diesel_outbox_core::Result<Vec<String>>
        where
            C: ::diesel_async::AsyncConnection<Backend = $backend> + 'static,
        {
            $crate::revert_migrations(conn, $crate::NamedMigrations::new(TASKS_SQL, names, $kind)?, $lock).await
        }

        /// [`migration_sql`] for the outbox called `names`: the text
        /// [`run_migrations_named`] applies, under the versions it records.
        ///
        /// ```
        #[doc = concat!("use ", $krate, "::Names;")]
        ///
        /// let names = Names::default().with_table_prefix("billing_").unwrap();
        #[doc = concat!("let sql = ", $krate, "::migration_sql_named(&names)?;")]
        /// assert!(sql[0].up().contains("CREATE TABLE billing_outbox_tasks"));
        /// assert!(sql[0].version().ends_with("billing."));
        /// # Ok::<(), diesel_outbox_core::Error>(())
        /// ```
        pub fn migration_sql_named(
            names: &$crate::Names,
        ) -> ::diesel_outbox_core::Result<Vec<$crate::MigrationSql>> {
            Ok($crate::NamedMigrations::new(TASKS_SQL, names, $kind)?.sql().to_vec())
        }

        /// [`run_inbox_migrations`] for the inbox of the outbox called
        /// `names` (see [`run_migrations_named`]).
        pub async fn run_inbox_migrations_named<C>(
            conn: C,
            names: &$crate::Names,
        ) -> ::diesel_outbox_core::Result<Vec<String>>
        where
            C: ::diesel_async::AsyncConnection<Backend = $backend> + 'static,
        {
            $crate::run_migrations(conn, $crate::NamedMigrations::new(INBOX_SQL, names, $kind)?, $lock).await
        }

        /// [`revert_inbox_migrations`] for the inbox of the outbox called
        /// `names`.
        pub async fn revert_inbox_migrations_named<C>(
            conn: C,
            names: &$crate::Names,
        ) -> ::diesel_outbox_core::Result<Vec<String>>
        where
            C: ::diesel_async::AsyncConnection<Backend = $backend> + 'static,
        {
            $crate::revert_migrations(conn, $crate::NamedMigrations::new(INBOX_SQL, names, $kind)?, $lock).await
        }

        /// [`inbox_migration_sql`] for the inbox of the outbox called `names`.
        pub fn inbox_migration_sql_named(
            names: &$crate::Names,
        ) -> ::diesel_outbox_core::Result<Vec<$crate::MigrationSql>> {
            Ok($crate::NamedMigrations::new(INBOX_SQL, names, $kind)?.sql().to_vec())
        }

        /// Applies every pending inbox migration and returns the versions
        /// applied; idempotent, and safe from many instances at once under
        /// the same lock as [`run_migrations`]. A service that both
        /// publishes and consumes runs both; one that only consumes runs
        /// just this.
        pub async fn run_inbox_migrations<C>(conn: C) -> ::diesel_outbox_core::Result<Vec<String>>
        where
            C: ::diesel_async::AsyncConnection<Backend = $backend> + 'static,
        {
            $crate::run_migrations(conn, INBOX_MIGRATIONS, $lock).await
        }

        /// Reverts the applied inbox migrations, newest first (dropping
        /// `outbox_inbox` with every record in it, so messages delivered
        /// again would be applied again), and returns the versions
        /// reverted. Other migrations, the outbox's included, stay applied.
        pub async fn revert_inbox_migrations<C>(conn: C) -> ::diesel_outbox_core::Result<Vec<String>>
        where
            C: ::diesel_async::AsyncConnection<Backend = $backend> + 'static,
        {
            $crate::revert_migrations(conn, INBOX_MIGRATIONS, $lock).await
        }

        /// The SQL of every inbox migration, oldest first, with its
        /// version, for applications that keep migrations in their own
        /// folder or tool (see [`migration_sql`]).
        ///
        /// ```
        #[doc = concat!("let sql = ", $krate, "::inbox_migration_sql();")]
        /// assert!(sql[0].up().contains("CREATE TABLE outbox_inbox"));
        /// assert!(sql[0].down().contains("DROP TABLE outbox_inbox"));
        /// ```
        pub fn inbox_migration_sql() -> &'static [$crate::MigrationSql] {
            INBOX_SQL
        }

        #[cfg(test)]
        mod embedded_migrations {
            #[test]
            fn the_sql_listed_is_every_embedded_migration_as_in_its_files() {
                for (embedded, listed, folder) in [
                    (&super::MIGRATIONS, super::migration_sql(), "migrations"),
                    (&super::INBOX_MIGRATIONS, super::inbox_migration_sql(), "migrations_inbox"),
                ] {
                    $crate::check_migration_sql::<$backend>(
                        embedded,
                        listed,
                        &::std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(folder),
                    );
                }
            }

            /// The named migrations for the default names are the embedded
            /// ones: the same versions, so `run_migrations` and
            /// `run_migrations_named` with the default names agree.
            #[test]
            fn the_default_names_record_the_embedded_versions() {
                use ::diesel::migration::MigrationSource as _;
                let versions = |source: &dyn ::diesel::migration::MigrationSource<$backend>| {
                    let mut versions: Vec<String> = source
                        .migrations()
                        .unwrap_or_default()
                        .iter()
                        .map(|migration| migration.name().version().to_string())
                        .collect();
                    versions.sort();
                    versions
                };
                for (embedded, listed) in [
                    (&super::MIGRATIONS, super::TASKS_SQL),
                    (&super::INBOX_MIGRATIONS, super::INBOX_SQL),
                ] {
                    let named = $crate::NamedMigrations::new(listed, &$crate::Names::default(), $kind)
                        .unwrap_or_else(|error| panic!("{error}"));
                    assert_eq!(versions(&named), versions(embedded));
                    assert!(!versions(&named).is_empty());
                }
            }

            /// Every object a migration creates is named after one of the
            /// outbox's tables, so a table prefix renames all of them.
            #[test]
            fn every_name_a_migration_creates_takes_a_table_prefix() {
                for sql in super::migration_sql().iter().chain(super::inbox_migration_sql()) {
                    for text in [sql.up(), sql.down()] {
                        let left = $crate::unrenamed_names(text);
                        assert!(left.is_empty(), "{}: {left:?} would keep their names", sql.name());
                    }
                }
            }
        }
    };
}

/// Checks that `listed` names every migration of `embedded` in order and
/// holds the text of each `up.sql` and `down.sql` under `folder`: the test
/// [`embed_outbox_migrations!`](crate::embed_outbox_migrations) defines.
///
/// # Panics
///
/// When they differ, naming the migration (it is a test).
pub fn check_migration_sql<DB: diesel::backend::Backend>(
    embedded: &diesel_migrations::EmbeddedMigrations,
    listed: &[crate::MigrationSql],
    folder: &std::path::Path,
) {
    use diesel::migration::MigrationSource;

    let mut names: Vec<String> = MigrationSource::<DB>::migrations(embedded)
        .unwrap_or_default()
        .iter()
        .map(|migration| migration.name().to_string())
        .collect();
    names.sort();
    let listed_names: Vec<&str> = listed.iter().map(|sql| sql.name()).collect();
    assert_eq!(listed_names, names, "migrations listed under {folder:?}");
    for sql in listed {
        let read = |file: &str| {
            std::fs::read_to_string(folder.join(sql.name()).join(file)).unwrap_or_default()
        };
        assert_eq!(sql.up(), read("up.sql"), "{}/up.sql", sql.name());
        assert_eq!(sql.down(), read("down.sql"), "{}/down.sql", sql.name());
    }
}
