//! The database a URL names: which backend, its store, its migrations.

use diesel_outbox_sql::{BackendKind, MigrationSql, Names};

use crate::{
    args::Command,
    commands::{self, Output},
    failure::Failure,
};

/// A database backend: [`BackendKind`], which this command dispatches on,
/// with the values `--backend` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backend(BackendKind);

impl clap::ValueEnum for Backend {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [Backend; 3] = [
            Backend(BackendKind::ALL[0]),
            Backend(BackendKind::ALL[1]),
            Backend(BackendKind::ALL[2]),
        ];
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()).help(self.0.product()))
    }
}

/// Connections the store's pool may open: the commands run a query or a
/// few at a time, the dashboard a few requests at once.
const POOL_SIZE: usize = 4;

impl Backend {
    /// The backend a database URL's scheme names.
    pub(crate) fn of_url(url: &str) -> Result<Self, Failure> {
        BackendKind::of_url(url)
            .map(Self)
            .map_err(|unsupported| Failure::Usage(unsupported.to_string()))
    }

    fn missing(self) -> Failure {
        // Each backend's cargo feature is named like the backend.
        Failure::Usage(format!(
            "this `outbox` was built without the `{}` feature",
            self.0.name()
        ))
    }

    /// The SQL of the backend's migrations (the inbox's with `inbox`),
    /// oldest first.
    pub(crate) fn migration_sql(
        self,
        inbox: bool,
        names: &Names,
    ) -> Result<Vec<MigrationSql>, Failure> {
        match self.0 {
            #[cfg(feature = "postgres")]
            BackendKind::Postgres if inbox => {
                Ok(diesel_outbox_postgres::inbox_migration_sql_named(names)?)
            }
            #[cfg(feature = "postgres")]
            BackendKind::Postgres => Ok(diesel_outbox_postgres::migration_sql_named(names)?),
            #[cfg(feature = "mysql")]
            BackendKind::Mysql if inbox => {
                Ok(diesel_outbox_mysql::inbox_migration_sql_named(names)?)
            }
            #[cfg(feature = "mysql")]
            BackendKind::Mysql => Ok(diesel_outbox_mysql::migration_sql_named(names)?),
            #[cfg(feature = "sqlite")]
            BackendKind::Sqlite if inbox => {
                Ok(diesel_outbox_sqlite::inbox_migration_sql_named(names)?)
            }
            #[cfg(feature = "sqlite")]
            BackendKind::Sqlite => Ok(diesel_outbox_sqlite::migration_sql_named(names)?),
            #[allow(unreachable_patterns)]
            _ => Err(self.missing()),
        }
    }

    /// Applies (or reverts) the migrations on `url` (the inbox's with
    /// `inbox`); returns the versions.
    pub(crate) async fn migrate(
        self,
        url: &str,
        names: &Names,
        revert: bool,
        inbox: bool,
    ) -> Result<Vec<String>, Failure> {
        match self.0 {
            #[cfg(feature = "postgres")]
            BackendKind::Postgres => {
                let conn = diesel_outbox_postgres::establish(url).await?;
                Ok(match (revert, inbox) {
                    (false, false) => {
                        diesel_outbox_postgres::run_migrations_named(conn, names).await?
                    }
                    (true, false) => {
                        diesel_outbox_postgres::revert_migrations_named(conn, names).await?
                    }
                    (false, true) => {
                        diesel_outbox_postgres::run_inbox_migrations_named(conn, names).await?
                    }
                    (true, true) => {
                        diesel_outbox_postgres::revert_inbox_migrations_named(conn, names).await?
                    }
                })
            }
            #[cfg(feature = "mysql")]
            BackendKind::Mysql => {
                let conn = diesel_outbox_mysql::establish(url).await?;
                Ok(match (revert, inbox) {
                    (false, false) => {
                        diesel_outbox_mysql::run_migrations_named(conn, names).await?
                    }
                    (true, false) => {
                        diesel_outbox_mysql::revert_migrations_named(conn, names).await?
                    }
                    (false, true) => {
                        diesel_outbox_mysql::run_inbox_migrations_named(conn, names).await?
                    }
                    (true, true) => {
                        diesel_outbox_mysql::revert_inbox_migrations_named(conn, names).await?
                    }
                })
            }
            #[cfg(feature = "sqlite")]
            BackendKind::Sqlite => {
                let conn = diesel_outbox_sqlite::establish(url).await?;
                Ok(match (revert, inbox) {
                    (false, false) => {
                        diesel_outbox_sqlite::run_migrations_named(conn, names).await?
                    }
                    (true, false) => {
                        diesel_outbox_sqlite::revert_migrations_named(conn, names).await?
                    }
                    (false, true) => {
                        diesel_outbox_sqlite::run_inbox_migrations_named(conn, names).await?
                    }
                    (true, true) => {
                        diesel_outbox_sqlite::revert_inbox_migrations_named(conn, names).await?
                    }
                })
            }
            #[allow(unreachable_patterns)]
            _ => {
                let _ = (url, names, revert, inbox);
                Err(self.missing())
            }
        }
    }

    /// Opens the backend's store on `url` and runs `command` on it.
    pub(crate) async fn run(
        self,
        url: &str,
        names: Names,
        command: Command,
        out: Output,
    ) -> Result<(), Failure> {
        // The outbox the dashboard names.
        let outbox = commands::Shown {
            table: names.display_table("outbox_tasks"),
            database: diesel_outbox_sql::target_of(url),
        };
        match self.0 {
            #[cfg(feature = "postgres")]
            BackendKind::Postgres => {
                let store =
                    diesel_outbox_postgres::PgStore::connect(url, POOL_SIZE)?.with_names(names)?;
                commands::run(store, outbox, command, out).await
            }
            #[cfg(feature = "mysql")]
            BackendKind::Mysql => {
                let store =
                    diesel_outbox_mysql::MysqlStore::connect(url, POOL_SIZE)?.with_names(names)?;
                commands::run(store, outbox, command, out).await
            }
            #[cfg(feature = "sqlite")]
            BackendKind::Sqlite => {
                sqlite_file_exists(url)?;
                let store = diesel_outbox_sqlite::SqliteStore::connect(url, POOL_SIZE)?
                    .with_names(names)?;
                commands::run(store, outbox, command, out).await
            }
            #[allow(unreachable_patterns)]
            _ => {
                let _ = (url, names, outbox, command, out);
                Err(self.missing())
            }
        }
    }
}

/// The file a SQLite URL names, without its query: `sqlite://PATH` (which
/// diesel reads as the URI `file:PATH`), or a `file:` URI (`file:PATH`,
/// `file:///PATH`, `file://localhost/PATH`), its `%XX` escapes decoded.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
fn sqlite_file(url: &str) -> std::path::PathBuf {
    let rest = match url.strip_prefix("sqlite://") {
        Some(path) => path,
        None => {
            let uri = url.strip_prefix("file:").unwrap_or(url);
            // An authority, when there is one, is empty or `localhost`.
            uri.strip_prefix("//localhost")
                .or_else(|| uri.strip_prefix("//"))
                .unwrap_or(uri)
        }
    };
    let path = rest.split(['?', '#']).next().unwrap_or(rest);
    // Decoded as a form value would be, `+` kept as it is.
    let field = format!("p={}", path.replace('+', "%2B"));
    let decoded = form_urlencoded::parse(field.as_bytes())
        .next()
        .map_or_else(|| path.to_owned(), |(_, value)| value.into_owned());
    std::path::PathBuf::from(decoded)
}

/// Refuses a SQLite database file that does not exist: opening it would
/// create an empty one, and every command but `migrate` would then report
/// missing tables of a database the operator never meant to make.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
fn sqlite_file_exists(url: &str) -> Result<(), Failure> {
    let path = sqlite_file(url);
    if path.exists() {
        return Ok(());
    }
    Err(Failure::Error(anyhow::anyhow!(
        "no SQLite database at {}: check the path, or create it with `outbox migrate`",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum as _;
    use diesel_outbox_sql::BackendKind;

    use super::Backend;

    #[test]
    fn backend_takes_every_kind_by_its_name() {
        let kinds: Vec<BackendKind> = Backend::value_variants().iter().map(|b| b.0).collect();
        assert_eq!(kinds, BackendKind::ALL);
        for kind in BackendKind::ALL {
            assert_eq!(Backend::from_str(kind.name(), false), Ok(Backend(kind)));
        }
    }

    #[test]
    fn a_sqlite_url_names_its_file_without_the_query() {
        for (url, file) in [
            (
                "sqlite:///var/lib/shop/orders.db",
                "/var/lib/shop/orders.db",
            ),
            ("sqlite://orders.db?mode=rw", "orders.db"),
            (
                "file:/var/lib/shop/orders.db?mode=rwc",
                "/var/lib/shop/orders.db",
            ),
            ("file:///var/lib/shop/orders.db", "/var/lib/shop/orders.db"),
            (
                "file://localhost/var/lib/my%20shop/orders.db",
                "/var/lib/my shop/orders.db",
            ),
            ("file:orders+1.db", "orders+1.db"),
        ] {
            assert_eq!(super::sqlite_file(url), std::path::Path::new(file), "{url}");
        }
    }

    #[test]
    fn an_unsupported_url_is_a_usage_error_naming_its_scheme() {
        let Err(crate::failure::Failure::Usage(message)) = Backend::of_url("redis://127.0.0.1/0")
        else {
            panic!("redis:// is not a usage error");
        };
        assert_eq!(
            message,
            "unsupported database URL: expected postgres://, mysql:// or sqlite://, got `redis`"
        );
    }
}
