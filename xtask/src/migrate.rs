//! `cargo xtask migrate`: the embedded outbox migrations (or, with
//! `--inbox`, the inbox's), applied, reverted, or printed as SQL.

use std::io::Write as _;

use anyhow::{Context as _, bail};
use diesel_outbox_sql::MigrationSql;

/// Arguments of `migrate`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Database to migrate: `postgres://...`, `mysql://...`, or a SQLite
    /// file as `sqlite://PATH` (or a `file:` URI). With `--print`, only its
    /// scheme is used, to pick the backend.
    #[arg(long, env = "DATABASE_URL", required_unless_present = "print")]
    database_url: Option<String>,
    /// Revert the outbox's migrations (drops `outbox_tasks`) instead of
    /// applying them; with `--print`, print the SQL that reverts them.
    #[arg(long)]
    revert: bool,
    /// Print the migrations' SQL to stdout instead of running it, for a
    /// migrations folder of your own.
    #[arg(long)]
    print: bool,
    /// The backend whose SQL `--print` prints (default: the one
    /// `--database-url` names).
    #[arg(long, value_enum, requires = "print")]
    backend: Option<Backend>,
    /// The inbox's migration set (`outbox_inbox`, for consumers) instead of
    /// the outbox's: apply it alone in a service that only consumes, or
    /// beside the outbox's in one that does both.
    #[arg(long)]
    inbox: bool,
}

/// A database backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Backend {
    /// PostgreSQL.
    Postgres,
    /// MySQL/MariaDB.
    Mysql,
    /// SQLite.
    Sqlite,
}

impl Backend {
    /// The xtask feature that builds this backend in.
    fn feature(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Mysql => "mysql",
            Self::Sqlite => "sqlite",
        }
    }

    /// The backend a database URL's scheme names.
    fn of_url(url: &str) -> anyhow::Result<Self> {
        if url.starts_with("file:") {
            return Ok(Self::Sqlite);
        }
        match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("postgres" | "postgresql") => Ok(Self::Postgres),
            Some("mysql" | "mariadb") => Ok(Self::Mysql),
            Some("sqlite") => Ok(Self::Sqlite),
            _ => bail!(
                "unsupported database URL `{url}`: expected postgres://, mysql:// or sqlite://"
            ),
        }
    }
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    if args.print {
        let backend = match (args.backend, &args.database_url) {
            (Some(backend), _) => backend,
            (None, Some(url)) => Backend::of_url(url)?,
            (None, None) => bail!("--print needs --backend or --database-url"),
        };
        return print(sql(backend, args.inbox)?, args.revert, args.inbox);
    }
    let Some(url) = args.database_url.as_deref() else {
        bail!("--database-url (or DATABASE_URL) is required");
    };
    let versions = match Backend::of_url(url)? {
        Backend::Postgres => postgres(url, args.revert, args.inbox).await?,
        Backend::Mysql => mysql(url, args.revert, args.inbox).await?,
        Backend::Sqlite => sqlite(url, args.revert, args.inbox).await?,
    };
    let verb = if args.revert { "reverted" } else { "applied" };
    if versions.is_empty() {
        eprintln!("nothing to do: no migration {verb}");
    }
    for version in versions {
        eprintln!("{verb} {version}");
    }
    Ok(())
}

/// Writes every migration's `up.sql` to stdout, oldest first, or with
/// `revert` every `down.sql`, newest first, each under a comment naming it.
fn print(migrations: &[MigrationSql], revert: bool, inbox: bool) -> anyhow::Result<()> {
    let set = if inbox { "inbox" } else { "outbox" };
    let mut out = std::io::stdout().lock();
    let ordered: Vec<&MigrationSql> = if revert {
        migrations.iter().rev().collect()
    } else {
        migrations.iter().collect()
    };
    for (i, migration) in ordered.into_iter().enumerate() {
        let (file, text) = if revert {
            ("down.sql", migration.down())
        } else {
            ("up.sql", migration.up())
        };
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(
            out,
            "-- {set} migration {} ({}), {file}",
            migration.version(),
            migration.name()
        )?;
        write!(out, "{text}")?;
        if !text.ends_with('\n') {
            writeln!(out)?;
        }
    }
    out.flush()?;
    Ok(())
}

fn sql(backend: Backend, inbox: bool) -> anyhow::Result<&'static [MigrationSql]> {
    match backend {
        #[cfg(feature = "postgres")]
        Backend::Postgres if inbox => Ok(diesel_outbox_postgres::inbox_migration_sql()),
        #[cfg(feature = "postgres")]
        Backend::Postgres => Ok(diesel_outbox_postgres::migration_sql()),
        #[cfg(feature = "mysql")]
        Backend::Mysql if inbox => Ok(diesel_outbox_mysql::inbox_migration_sql()),
        #[cfg(feature = "mysql")]
        Backend::Mysql => Ok(diesel_outbox_mysql::migration_sql()),
        #[cfg(feature = "sqlite")]
        Backend::Sqlite if inbox => Ok(diesel_outbox_sqlite::inbox_migration_sql()),
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => Ok(diesel_outbox_sqlite::migration_sql()),
        #[allow(unreachable_patterns)]
        other => bail!(
            "this xtask was built without the `{}` feature",
            other.feature()
        ),
    }
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str, revert: bool, inbox: bool) -> anyhow::Result<Vec<String>> {
    use diesel_async::{AsyncConnection, AsyncPgConnection};
    let conn = AsyncPgConnection::establish(url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    Ok(match (revert, inbox) {
        (false, false) => diesel_outbox_postgres::run_migrations(conn).await?,
        (true, false) => diesel_outbox_postgres::revert_migrations(conn).await?,
        (false, true) => diesel_outbox_postgres::run_inbox_migrations(conn).await?,
        (true, true) => diesel_outbox_postgres::revert_inbox_migrations(conn).await?,
    })
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_url: &str, _revert: bool, _inbox: bool) -> anyhow::Result<Vec<String>> {
    bail!("this xtask was built without the `postgres` feature")
}

#[cfg(feature = "mysql")]
async fn mysql(url: &str, revert: bool, inbox: bool) -> anyhow::Result<Vec<String>> {
    use diesel_async::{AsyncConnection, AsyncMysqlConnection};
    let conn = AsyncMysqlConnection::establish(url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    Ok(match (revert, inbox) {
        (false, false) => diesel_outbox_mysql::run_migrations(conn).await?,
        (true, false) => diesel_outbox_mysql::revert_migrations(conn).await?,
        (false, true) => diesel_outbox_mysql::run_inbox_migrations(conn).await?,
        (true, true) => diesel_outbox_mysql::revert_inbox_migrations(conn).await?,
    })
}

#[cfg(not(feature = "mysql"))]
async fn mysql(_url: &str, _revert: bool, _inbox: bool) -> anyhow::Result<Vec<String>> {
    bail!("this xtask was built without the `mysql` feature")
}

#[cfg(feature = "sqlite")]
async fn sqlite(url: &str, revert: bool, inbox: bool) -> anyhow::Result<Vec<String>> {
    let conn = diesel_outbox_sqlite::establish(url)
        .await
        .with_context(|| format!("opening {url}"))?;
    Ok(match (revert, inbox) {
        (false, false) => diesel_outbox_sqlite::run_migrations(conn).await?,
        (true, false) => diesel_outbox_sqlite::revert_migrations(conn).await?,
        (false, true) => diesel_outbox_sqlite::run_inbox_migrations(conn).await?,
        (true, true) => diesel_outbox_sqlite::revert_inbox_migrations(conn).await?,
    })
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite(_url: &str, _revert: bool, _inbox: bool) -> anyhow::Result<Vec<String>> {
    bail!("this xtask was built without the `sqlite` feature")
}
