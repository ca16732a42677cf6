//! What each backend runs on, for the header of `--write-docs`: the
//! server's name and version as the server reports them.

use std::future::Future;

use diesel::{QueryableByName, query_builder::SqlQuery, sql_types::Text};
use diesel_async::{RunQueryDsl, methods::LoadQuery};

use super::raw::Raw;

#[derive(QueryableByName)]
struct Version {
    #[diesel(sql_type = Text)]
    version: String,
}

/// A backend's server, named for the docs.
pub(crate) trait Server: Raw {
    /// Its name and version, such as `PostgreSQL 15.10` or `MariaDB 10.11.6`.
    fn server(&self) -> impl Future<Output = anyhow::Result<String>> + Send;
}

/// The one text `sql` selects (as `version`), on a connection of its own.
async fn version<B>(db: &B, sql: &'static str) -> anyhow::Result<String>
where
    B: Raw,
    SqlQuery: LoadQuery<'static, B::Conn, Version>,
{
    let mut conn = db.connect().await?;
    let row: Version = diesel::sql_query(sql).get_result(&mut conn).await?;
    Ok(row.version)
}

/// The version number at the start of `text` (`15.10 (Debian 15.10-1)`
/// gives `15.10`).
fn leading_version(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    &text[..end]
}

/// `MariaDB 10.11.6` or `MySQL 8.0.36`, from what `VERSION()` returns.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn mysql_name(version: &str) -> String {
    let product = if version.to_ascii_lowercase().contains("mariadb") {
        "MariaDB"
    } else {
        "MySQL"
    };
    format!("{product} {}", leading_version(version))
}

#[cfg(feature = "postgres")]
impl<N: diesel_outbox_testkit::TestNames> Server
    for diesel_outbox_testkit::postgres::PgTestDbNamed<N>
{
    async fn server(&self) -> anyhow::Result<String> {
        let version = version(self, "SELECT current_setting('server_version') AS version").await?;
        Ok(format!("PostgreSQL {}", leading_version(&version)))
    }
}

#[cfg(feature = "mysql")]
impl<N: diesel_outbox_testkit::TestNames> Server
    for diesel_outbox_testkit::mysql::MysqlTestDbNamed<N>
{
    async fn server(&self) -> anyhow::Result<String> {
        Ok(mysql_name(
            &version(self, "SELECT VERSION() AS version").await?,
        ))
    }
}

#[cfg(feature = "sqlite")]
impl<N: diesel_outbox_testkit::TestNames> Server
    for diesel_outbox_testkit::sqlite::SqliteTestDbNamed<N>
{
    async fn server(&self) -> anyhow::Result<String> {
        let version = version(self, "SELECT sqlite_version() AS version").await?;
        Ok(format!("SQLite {version}"))
    }
}

/// The NATS server's name and version, from the client's handshake.
#[cfg(feature = "nats")]
pub(crate) async fn nats() -> anyhow::Result<String> {
    let jetstream = diesel_outbox_testkit::nats::jetstream().await?;
    Ok(format!(
        "nats-server {}",
        jetstream.client().server_info().version
    ))
}

/// The Redis server's name and version, from `INFO server`.
#[cfg(feature = "redis")]
pub(crate) async fn redis() -> anyhow::Result<String> {
    use diesel_outbox_testkit::redis::{connect_to, server_url};
    let mut conn = connect_to(&server_url()).await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    redis_name(&info)
}

/// `Redis 7.0.15`, from what `INFO server` returns.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
fn redis_name(info: &str) -> anyhow::Result<String> {
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(|version| format!("Redis {}", version.trim()))
        .ok_or_else(|| anyhow::anyhow!("INFO server names no redis_version"))
}

/// The Kafka broker the scenario publishes to: the cluster
/// `OUTBOX_KAFKA_BOOTSTRAP` names, or the `tansu` the bench starts, with
/// the version it reports.
#[cfg(feature = "kafka")]
pub(crate) fn kafka() -> anyhow::Result<String> {
    use diesel_outbox_testkit::kafka::{BOOTSTRAP_VAR, tansu_program};
    // As the scenario decides: a blank value names no cluster.
    let named = std::env::var(BOOTSTRAP_VAR).is_ok_and(|bootstrap| !bootstrap.trim().is_empty());
    if named {
        return Ok(format!("the Kafka cluster {BOOTSTRAP_VAR} names"));
    }
    let output = std::process::Command::new(tansu_program())
        .arg("--version")
        .output()?;
    let version = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success() && !version.trim().is_empty(),
        "tansu --version: {}",
        output.status
    );
    Ok(format!(
        "{} (memory storage, started by the bench)",
        version.trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::{leading_version, mysql_name, redis_name};

    #[test]
    fn versions_are_read_from_what_servers_say() {
        assert_eq!(leading_version("15.10 (Debian 15.10-1.pgdg120+1)"), "15.10");
        assert_eq!(mysql_name("10.11.6-MariaDB-0+deb12u1"), "MariaDB 10.11.6");
        assert_eq!(mysql_name("8.0.36"), "MySQL 8.0.36");
        assert_eq!(
            redis_name("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n").unwrap(),
            "Redis 7.0.15"
        );
    }
}
