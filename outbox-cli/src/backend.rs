//! The database a URL names: which backend, its store, its migrations.

use diesel_outbox_sql::MigrationSql;

use crate::{
    args::Command,
    commands::{self, Output},
    failure::Failure,
};

/// A database backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    Mysql,
    /// SQLite.
    Sqlite,
}

/// Connections the store's pool may open: the commands run a query or a
/// few at a time, the dashboard a few requests at once.
const POOL_SIZE: usize = 4;

impl Backend {
    /// The backend a database URL's scheme names.
    pub(crate) fn of_url(url: &str) -> Result<Self, Failure> {
        if url.starts_with("file:") {
            return Ok(Self::Sqlite);
        }
        match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("postgres" | "postgresql") => Ok(Self::Postgres),
            Some("mysql" | "mariadb") => Ok(Self::Mysql),
            Some("sqlite") => Ok(Self::Sqlite),
            _ => Err(Failure::Usage(format!(
                "unsupported database URL: expected postgres://, mysql:// or sqlite://, got `{}`",
                url.split_once("://")
                    .map_or("no scheme", |(scheme, _)| scheme)
            ))),
        }
    }

    fn missing(self) -> Failure {
        let feature = match self {
            Self::Postgres => "postgres",
            Self::Mysql => "mysql",
            Self::Sqlite => "sqlite",
        };
        Failure::Usage(format!(
            "this `outbox` was built without the `{feature}` feature"
        ))
    }

    /// The SQL of the backend's migrations, oldest first.
    pub(crate) fn migration_sql(self) -> Result<&'static [MigrationSql], Failure> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres => Ok(diesel_outbox_postgres::migration_sql()),
            #[cfg(feature = "mysql")]
            Self::Mysql => Ok(diesel_outbox_mysql::migration_sql()),
            #[cfg(feature = "sqlite")]
            Self::Sqlite => Ok(diesel_outbox_sqlite::migration_sql()),
            #[allow(unreachable_patterns)]
            other => Err(other.missing()),
        }
    }

    /// Applies (or reverts) the migrations on `url`; returns the versions.
    pub(crate) async fn migrate(self, url: &str, revert: bool) -> Result<Vec<String>, Failure> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres => {
                use diesel_async::{AsyncConnection as _, AsyncPgConnection};
                let conn = AsyncPgConnection::establish(url)
                    .await
                    .map_err(|error| connecting(self, &error))?;
                Ok(if revert {
                    diesel_outbox_postgres::revert_migrations(conn).await?
                } else {
                    diesel_outbox_postgres::run_migrations(conn).await?
                })
            }
            #[cfg(feature = "mysql")]
            Self::Mysql => {
                use diesel_async::{AsyncConnection as _, AsyncMysqlConnection};
                let conn = AsyncMysqlConnection::establish(url)
                    .await
                    .map_err(|error| connecting(self, &error))?;
                Ok(if revert {
                    diesel_outbox_mysql::revert_migrations(conn).await?
                } else {
                    diesel_outbox_mysql::run_migrations(conn).await?
                })
            }
            #[cfg(feature = "sqlite")]
            Self::Sqlite => {
                let conn = diesel_outbox_sqlite::establish(url).await?;
                Ok(if revert {
                    diesel_outbox_sqlite::revert_migrations(conn).await?
                } else {
                    diesel_outbox_sqlite::run_migrations(conn).await?
                })
            }
            #[allow(unreachable_patterns)]
            other => {
                let _ = (url, revert);
                Err(other.missing())
            }
        }
    }

    /// Opens the backend's store on `url` and runs `command` on it.
    pub(crate) async fn run(self, url: &str, command: Command, out: Output) -> Result<(), Failure> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres => {
                let store = diesel_outbox_postgres::PgStore::connect(url, POOL_SIZE)?;
                commands::run(store, command, out).await
            }
            #[cfg(feature = "mysql")]
            Self::Mysql => {
                let store = diesel_outbox_mysql::MysqlStore::connect(url, POOL_SIZE)?;
                commands::run(store, command, out).await
            }
            #[cfg(feature = "sqlite")]
            Self::Sqlite => {
                let store = diesel_outbox_sqlite::SqliteStore::connect(url, POOL_SIZE)?;
                commands::run(store, command, out).await
            }
            #[allow(unreachable_patterns)]
            other => {
                let _ = (url, command, out);
                Err(other.missing())
            }
        }
    }
}

/// A failed connection, without the URL (it may hold a password).
#[allow(dead_code)] // unused when built with only the SQLite backend
fn connecting(backend: Backend, error: &dyn std::fmt::Display) -> Failure {
    Failure::Error(anyhow::anyhow!(
        "could not connect to the {backend:?} database: {error}"
    ))
}
