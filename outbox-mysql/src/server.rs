//! What the store needs to know about the server, read once.

use diesel::{QueryableByName, sql_types::Text};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{Error, Result};
use diesel_outbox_sql::mysql_error;

/// Facts about the server that change how the store works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerInfo {
    /// `VERSION()`, for messages.
    pub(crate) version: String,
    /// Whether a multi-row `INSERT` gets consecutive ids, one
    /// `auto_increment_increment` apart (`innodb_autoinc_lock_mode` 0 or 1),
    /// so one statement can insert a batch and still know every row's id.
    pub(crate) consecutive_ids: bool,
}

#[derive(QueryableByName)]
struct Facts {
    #[diesel(sql_type = Text)]
    version: String,
    #[diesel(sql_type = Text)]
    autoinc_lock_mode: String,
}

/// Reads the server's facts and checks it supports `SKIP LOCKED` and
/// `JSON_TABLE` (MariaDB 10.6+, MySQL 8.0.4+).
pub(crate) async fn inspect(conn: &mut AsyncMysqlConnection) -> Result<ServerInfo> {
    let facts: Facts = diesel::sql_query(crate::statements::SERVER)
        .get_result(conn)
        .await
        .map_err(mysql_error)?;
    if !supported(&facts.version) {
        return Err(Error::Unsupported(format!(
            "server {} lacks FOR UPDATE SKIP LOCKED or JSON_TABLE; MariaDB 10.6 or MySQL 8.0.4 or later is needed",
            facts.version
        )));
    }
    Ok(ServerInfo {
        consecutive_ids: matches!(facts.autoinc_lock_mode.trim(), "0" | "1"),
        version: facts.version,
    })
}

/// Whether a `VERSION()` string names a server with `SKIP LOCKED` (claims)
/// and `JSON_TABLE` (lists of rows in one fixed statement).
pub(crate) fn supported(version: &str) -> bool {
    let numbers: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|part| part.parse().unwrap_or(0))
        .collect();
    let at_least = |min: [u32; 3]| numbers.as_slice() >= min.as_slice();
    if version.to_ascii_lowercase().contains("mariadb") {
        at_least([10, 6, 0])
    } else {
        at_least([8, 0, 4])
    }
}

#[cfg(test)]
mod tests {
    use super::supported;

    #[test]
    fn knows_which_servers_are_supported() {
        assert!(supported("10.11.19-MariaDB-0+deb12u1"));
        assert!(supported("10.6.0-MariaDB"));
        assert!(!supported("10.5.23-MariaDB-log"));
        assert!(supported("8.0.36"));
        assert!(supported("8.0.4"));
        assert!(!supported("8.0.3-rc"));
        assert!(!supported("8.0.1"));
        assert!(!supported("8.0.0-dmr"));
        assert!(!supported("5.7.44-log"));
        assert!(supported("9.1.0"));
    }
}
