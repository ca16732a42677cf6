//! Opening one connection for work outside a store's pool (migrations):
//! [`establish`].

use diesel_async::{AsyncConnection as _, AsyncMysqlConnection};
use diesel_outbox_core::Result;

/// Opens one connection to `database_url`: when it cannot, the error names
/// the server (host and port, database) without credentials, and the
/// reason once, the operating system's included.
///
/// ```no_run
/// # async fn demo() -> diesel_outbox_mysql::outbox::Result<()> {
/// let conn = diesel_outbox_mysql::establish("mysql://app@db/orders").await?;
/// diesel_outbox_mysql::run_migrations(conn).await?;
/// # Ok(())
/// # }
/// ```
pub async fn establish(database_url: &str) -> Result<AsyncMysqlConnection> {
    AsyncMysqlConnection::establish(database_url)
        .await
        .map_err(|error| {
            diesel_outbox_sql::connecting_to(
                diesel_outbox_sql::mysql_connection_error(error),
                diesel_outbox_sql::target_of(database_url).as_deref(),
            )
        })
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_refused_connection_names_the_server_and_the_systems_reason() {
        // Port 1 on loopback: nothing listens there, the kernel refuses.
        let error = super::establish("mysql://app:secret@127.0.0.1:1/orders")
            .await
            .err()
            .map(|error| error.chain())
            .unwrap_or_default();
        assert_eq!(
            error,
            "database error (connection): could not connect to 127.0.0.1:1, database orders: \
             Input/output error: Connection refused (os error 111)"
        );
    }
}
