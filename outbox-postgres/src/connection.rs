//! Opening a connection ([`establish`], and each of a store's pooled ones)
//! through tokio-postgres directly, so that a failure keeps the operating
//! system's reason: diesel-async's own `establish` reports a refused or
//! unreachable server only as "error connecting to server".

use diesel::{
    ConnectionError,
    result::{DatabaseErrorKind, Error as DieselError},
};
use diesel_async::{
    AsyncPgConnection,
    pooled_connection::{ManagerConfig, RecyclingMethod},
};
use diesel_outbox_core::Result;

/// Opens one connection to `database_url`, as a store's pool opens each of
/// its own: when it cannot, the error names the server (host and port,
/// database) without credentials, and the reason once, the operating
/// system's included (`Connection refused (os error 111)`).
///
/// ```no_run
/// # async fn demo() -> diesel_outbox_postgres::outbox::Result<()> {
/// let conn = diesel_outbox_postgres::establish("postgres://app@db/orders").await?;
/// diesel_outbox_postgres::run_migrations(conn).await?;
/// # Ok(())
/// # }
/// ```
pub async fn establish(database_url: &str) -> Result<AsyncPgConnection> {
    open(database_url).await.map_err(|error| {
        diesel_outbox_sql::connecting_to(
            diesel_outbox_sql::postgres_connection_error(error),
            diesel_outbox_sql::target_of(database_url).as_deref(),
        )
    })
}

/// The pool's setup: each connection opened by [`open`], recycled without a
/// round trip (see the dialect's `connect`).
pub(crate) fn manager_config() -> ManagerConfig<AsyncPgConnection> {
    let mut config = ManagerConfig::default();
    config.custom_setup = Box::new(|url| Box::pin(open(url)));
    config.recycling_method = RecyclingMethod::Fast;
    config
}

/// Connects as diesel-async does (no TLS), keeping the driver's error whole.
async fn open(database_url: &str) -> diesel::ConnectionResult<AsyncPgConnection> {
    let (client, connection) = tokio_postgres::connect(database_url, tokio_postgres::NoTls)
        .await
        .map_err(connect_error)?;
    AsyncPgConnection::try_from_client_and_connection(client, connection).await
}

/// A failed connect: the server's own words when it refused (a login, a
/// database it does not have), classified as any statement's error; else
/// the driver's message followed by each of its causes, the operating
/// system's among them, each once, classified as diesel-async's own
/// connect classifies it (an unreachable server is a connection failure,
/// worth retrying; a configuration, authentication or TLS failure is not).
fn connect_error(error: tokio_postgres::Error) -> ConnectionError {
    let (kind, message) = match error.as_db_error() {
        Some(refused) => (DatabaseErrorKind::Unknown, refused.message().to_owned()),
        None => (DatabaseErrorKind::UnableToSendCommand, causes(&error)),
    };
    ConnectionError::CouldntSetupConfiguration(DieselError::DatabaseError(kind, Box::new(message)))
}

/// `error`'s message and its sources', separated by `: `, leaving out any
/// that repeats the one before it.
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut last = text.clone();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if said != last && !last.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        last = said;
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_names_the_server_and_the_systems_reason() {
        // Port 1 on loopback: nothing listens there, the kernel refuses.
        let error = establish("postgres://app:secret@127.0.0.1:1/orders")
            .await
            .err()
            .map(|error| error.chain())
            .unwrap_or_default();
        assert_eq!(
            error,
            "database error (connection): could not connect to 127.0.0.1:1, database orders: \
             error connecting to server: Connection refused (os error 111)"
        );
        assert!(!error.contains("secret"));
    }

    /// A server asked for TLS the store does not speak: a setting to fix,
    /// never retried as a connection that might come back.
    #[tokio::test]
    async fn a_tls_requirement_is_not_a_retryable_connection_failure() {
        let server = std::env::var("OUTBOX_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let separator = if server.contains('?') { '&' } else { '?' };
        let error = establish(&format!("{server}{separator}sslmode=require"))
            .await
            .err()
            .expect("no TLS here");
        assert_eq!(
            error.database_kind(),
            Some(diesel_outbox_core::DatabaseErrorKind::Other),
            "{}",
            error.chain()
        );
        assert!(!error.is_retryable(), "{}", error.chain());
    }

    #[test]
    fn a_cause_that_repeats_its_parent_is_left_out() {
        #[derive(Debug)]
        struct Said(&'static str, Option<Box<Said>>);
        impl std::fmt::Display for Said {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Said {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|s| s as _)
            }
        }
        let chain = Said(
            "a: b",
            Some(Box::new(Said("b", Some(Box::new(Said("c", None)))))),
        );
        assert_eq!(causes(&chain), "a: b: c");
    }
}
