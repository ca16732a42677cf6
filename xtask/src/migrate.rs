//! `cargo xtask migrate`: the embedded outbox migrations, applied or reverted.

use anyhow::{Context as _, bail};

/// Arguments of `migrate`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Database to migrate: `postgres://...` or `mysql://...`.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// Revert every outbox migration (drops `outbox_tasks`) instead of applying.
    #[arg(long)]
    revert: bool,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let url = args.database_url.as_str();
    let versions = match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("postgres" | "postgresql") => postgres(url, args.revert).await?,
        Some("mysql" | "mariadb") => mysql(url, args.revert).await?,
        _ => bail!("unsupported database URL `{url}`: expected postgres:// or mysql://"),
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

#[cfg(feature = "postgres")]
async fn postgres(url: &str, revert: bool) -> anyhow::Result<Vec<String>> {
    use diesel_async::{AsyncConnection, AsyncPgConnection};
    let conn = AsyncPgConnection::establish(url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    Ok(if revert {
        outbox_postgres::revert_migrations(conn).await?
    } else {
        outbox_postgres::run_migrations(conn).await?
    })
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_url: &str, _revert: bool) -> anyhow::Result<Vec<String>> {
    bail!("this xtask was built without the `postgres` feature")
}

#[cfg(feature = "mysql")]
async fn mysql(url: &str, revert: bool) -> anyhow::Result<Vec<String>> {
    use diesel_async::{AsyncConnection, AsyncMysqlConnection};
    let conn = AsyncMysqlConnection::establish(url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    Ok(if revert {
        outbox_mysql::revert_migrations(conn).await?
    } else {
        outbox_mysql::run_migrations(conn).await?
    })
}

#[cfg(not(feature = "mysql"))]
async fn mysql(_url: &str, _revert: bool) -> anyhow::Result<Vec<String>> {
    bail!("this xtask was built without the `mysql` feature")
}
