//! Turning diesel and pool errors into [`Error::Database`] with a
//! [`DatabaseErrorKind`] and, where it can be known, the server's error code.
//!
//! diesel-async does not pass the server's code through. On PostgreSQL it
//! folds the SQLSTATE into diesel's own [`DatabaseErrorKind`](diesel::result::DatabaseErrorKind)
//! (unique, foreign key, check and not-null violations, serialization
//! failure, read-only transaction; everything else is unknown) and keeps the
//! server's message; an error that carries no SQLSTATE at all (the connection
//! broke, the query could not be sent) becomes `UnableToSendCommand` with the
//! driver's text. On MySQL/MariaDB it folds the error number the same way and
//! keeps only the message; failures that are not the server's (I/O, driver)
//! become unknown with the driver's text.
//!
//! So the code is recovered, not read: from diesel's kind where that kind
//! stands for one code (`23505` for a unique violation on PostgreSQL), and
//! from the message where the server's wording is recognisable (`deadlock
//! detected` is `40P01`). Messages are matched as the servers word them in
//! English; under another `lc_messages` the kind diesel derived still holds,
//! but failures diesel calls unknown are [`DatabaseErrorKind::Other`] without
//! a code. On SQLite, diesel maps the constraint codes to its kinds and keeps
//! the library's message, from which the rest is recognised (`database is
//! locked` is `SQLITE_BUSY`).

mod mysql;
mod postgres;
mod sqlite;

use deadpool::managed::TimeoutType;
use diesel::result::{ConnectionError, Error as DieselError};
use diesel_async::pooled_connection::{PoolError as ManagerError, deadpool::PoolError};
use diesel_outbox_core::{DatabaseErrorKind, Error};

use crate::ConnectFailed;

/// A kind and the code recovered for it, if any.
type Classified = (DatabaseErrorKind, Option<&'static str>);

/// Whose error codes and messages a diesel error carries.
#[derive(Debug, Clone, Copy)]
enum Dialect {
    Postgres,
    Mysql,
    Sqlite,
}

/// Classifies an error of a diesel-async PostgreSQL connection as
/// [`Error::Database`]: its kind, its SQLSTATE when diesel's kind or the
/// server's message identifies it, and `error` itself as the source.
///
/// ```
/// use diesel::result::{DatabaseErrorKind as Kind, Error as DieselError};
/// use diesel_outbox_core::DatabaseErrorKind;
///
/// let error = diesel_outbox_sql::postgres_error(DieselError::DatabaseError(
///     Kind::Unknown,
///     Box::new("deadlock detected".to_owned()),
/// ));
/// assert_eq!(error.database_kind(), Some(DatabaseErrorKind::Deadlock));
/// assert_eq!(error.database_code(), Some("40P01"));
/// assert!(error.is_retryable());
/// ```
pub fn postgres_error(error: DieselError) -> Error {
    classify(Dialect::Postgres, error)
}

/// Classifies an error of a diesel-async MySQL/MariaDB connection as
/// [`Error::Database`]: its kind, its error number when diesel's kind or the
/// server's message identifies it, and `error` itself as the source.
///
/// ```
/// use diesel::result::{DatabaseErrorKind as Kind, Error as DieselError};
/// use diesel_outbox_core::DatabaseErrorKind;
///
/// let error = diesel_outbox_sql::mysql_error(DieselError::DatabaseError(
///     Kind::Unknown,
///     Box::new("Lock wait timeout exceeded; try restarting transaction".to_owned()),
/// ));
/// assert_eq!(error.database_kind(), Some(DatabaseErrorKind::LockTimeout));
/// assert_eq!(error.database_code(), Some("1205"));
/// ```
pub fn mysql_error(error: DieselError) -> Error {
    classify(Dialect::Mysql, error)
}

/// Classifies an error of a diesel-async SQLite connection
/// (`SyncConnectionWrapper<SqliteConnection>`) as [`Error::Database`]: its
/// kind, the name of SQLite's result code when diesel's kind or the
/// library's message identifies it, and `error` itself as the source.
///
/// ```
/// use diesel::result::{DatabaseErrorKind as Kind, Error as DieselError};
/// use diesel_outbox_core::DatabaseErrorKind;
///
/// let error = diesel_outbox_sql::sqlite_error(DieselError::DatabaseError(
///     Kind::Unknown,
///     Box::new("database is locked".to_owned()),
/// ));
/// assert_eq!(error.database_kind(), Some(DatabaseErrorKind::LockTimeout));
/// assert_eq!(error.database_code(), Some("SQLITE_BUSY"));
/// assert!(error.is_retryable());
/// ```
pub fn sqlite_error(error: DieselError) -> Error {
    classify(Dialect::Sqlite, error)
}

/// Classifies a failure to get a connection from a PostgreSQL pool: a
/// timeout is [`DatabaseErrorKind::PoolTimeout`], a connection that could not
/// be opened is classified like [`postgres_error`] (refused or unreachable is
/// [`DatabaseErrorKind::Connection`]; a rejected login is
/// [`DatabaseErrorKind::Other`]).
pub fn postgres_pool_error(error: PoolError) -> Error {
    classify_pool(Dialect::Postgres, error)
}

/// Classifies a failure to get a connection from a MySQL/MariaDB pool, as
/// [`postgres_pool_error`] does for PostgreSQL.
pub fn mysql_pool_error(error: PoolError) -> Error {
    classify_pool(Dialect::Mysql, error)
}

/// Classifies a failure to get a connection from a SQLite pool, as
/// [`postgres_pool_error`] does for PostgreSQL (a file that cannot be opened
/// is [`DatabaseErrorKind::Connection`]).
pub fn sqlite_pool_error(error: PoolError) -> Error {
    classify_pool(Dialect::Sqlite, error)
}

/// Classifies a failure to open a SQLite connection or to apply its
/// settings: a file that cannot be opened is [`DatabaseErrorKind::Connection`],
/// a failed setting is classified like [`sqlite_error`]. The source is a
/// [`ConnectFailed`] giving the reason once.
pub fn sqlite_connection_error(error: ConnectionError) -> Error {
    connection_error(Dialect::Sqlite, error)
}

/// Classifies a failure to open a PostgreSQL connection (the server could
/// not be reached: [`DatabaseErrorKind::Connection`]; it refused the login
/// or has no such database: as [`postgres_error`] classifies its words),
/// with a [`ConnectFailed`] giving the reason once as its source.
pub fn postgres_connection_error(error: ConnectionError) -> Error {
    connection_error(Dialect::Postgres, error)
}

/// Classifies a failure to open a MySQL/MariaDB connection, as
/// [`postgres_connection_error`] does for PostgreSQL.
pub fn mysql_connection_error(error: ConnectionError) -> Error {
    connection_error(Dialect::Mysql, error)
}

/// Whether `error` says that a table it used does not exist, in the words
/// of PostgreSQL (`relation "..." does not exist`), MySQL/MariaDB (`Table
/// '...' doesn't exist`) or SQLite (`no such table: ...`): a database
/// whose outbox migrations have not run (or ran under other names).
///
/// ```
/// use diesel::result::{DatabaseErrorKind as Kind, Error as DieselError};
///
/// let missing = diesel_outbox_sql::postgres_error(DieselError::DatabaseError(
///     Kind::Unknown,
///     Box::new(r#"relation "outbox_tasks" does not exist"#.to_owned()),
/// ));
/// assert!(diesel_outbox_sql::is_missing_table(&missing));
/// ```
pub fn is_missing_table(error: &Error) -> bool {
    let Error::Database { source, .. } = error else {
        return false;
    };
    let said = source.to_string();
    (said.starts_with("relation \"") && said.ends_with("\" does not exist"))
        || (said.starts_with("Table '") && said.ends_with("' doesn't exist"))
        || said.starts_with("no such table: ")
}

fn connection_error(dialect: Dialect, error: ConnectionError) -> Error {
    let (kind, code) = classify_connect(dialect, &error);
    database(kind, code, ConnectFailed::new(error.to_string()))
}

/// Classifies an error of a connection whose backend is not known here:
/// only what diesel itself says (a broken transaction manager is a broken
/// connection); anything the server said is [`DatabaseErrorKind::Other`].
pub(crate) fn any_backend_error(error: DieselError) -> Error {
    let (kind, code) = match &error {
        DieselError::DatabaseError(..) => (DatabaseErrorKind::Other, None),
        other => without_server(other),
    };
    database(kind, code, error)
}

fn classify(dialect: Dialect, error: DieselError) -> Error {
    let (kind, code) = classify_ref(dialect, &error);
    database(kind, code, error)
}

/// A pool's error, with the driver's own error as its source where there is
/// one: a connection that could not be opened is a [`ConnectFailed`] giving
/// the driver's reason once, not the pool's message wrapping it.
fn classify_pool(dialect: Dialect, error: PoolError) -> Error {
    match error {
        PoolError::Timeout(TimeoutType::Create) => database(
            DatabaseErrorKind::PoolTimeout,
            None,
            ConnectFailed::new("the server did not answer before the pool's create timeout"),
        ),
        PoolError::Backend(ManagerError::ConnectionError(e)) => {
            let (kind, code) = classify_connect(dialect, &e);
            database(kind, code, ConnectFailed::new(e.to_string()))
        }
        PoolError::Backend(ManagerError::QueryError(e)) => {
            let (kind, code) = classify_ref(dialect, &e);
            database(kind, code, e)
        }
        PoolError::Timeout(_) => database(DatabaseErrorKind::PoolTimeout, None, error),
        // Closed, no runtime, a failed hook: the pool's own state or setup.
        other => database(DatabaseErrorKind::Other, None, other),
    }
}

fn database(
    kind: DatabaseErrorKind,
    code: Option<&'static str>,
    source: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::database_with(kind, code.map(str::to_owned), source)
}

fn classify_ref(dialect: Dialect, error: &DieselError) -> Classified {
    match error {
        DieselError::DatabaseError(kind, info) => match dialect {
            Dialect::Postgres => postgres::classify(*kind, info.message()),
            Dialect::Mysql => mysql::classify(*kind, info.message()),
            Dialect::Sqlite => sqlite::classify(*kind, info.message()),
        },
        DieselError::RollbackErrorOnCommit {
            rollback_error,
            commit_error,
        } => match classify_ref(dialect, commit_error) {
            (DatabaseErrorKind::Other, _) => classify_ref(dialect, rollback_error),
            classified => classified,
        },
        other => without_server(other),
    }
}

/// Errors diesel raises itself, without the server.
fn without_server(error: &DieselError) -> Classified {
    match error {
        // diesel-async marks a connection's transaction manager broken when a
        // commit or rollback fails midway, which in practice is a lost
        // connection; the pool discards such a connection.
        DieselError::BrokenTransactionManager => (DatabaseErrorKind::Connection, None),
        _ => (DatabaseErrorKind::Other, None),
    }
}

fn classify_connect(dialect: Dialect, error: &ConnectionError) -> Classified {
    match error {
        // MySQL's I/O and driver failures while connecting; SQLite's file
        // that cannot be opened.
        ConnectionError::BadConnection(_) => (DatabaseErrorKind::Connection, None),
        // PostgreSQL's every failure while connecting, MySQL's server refusals.
        ConnectionError::CouldntSetupConfiguration(e) => classify_ref(dialect, e),
        _ => (DatabaseErrorKind::Other, None),
    }
}

/// The first entry of `table` whose message `message` starts with.
fn by_message(table: &[(&str, DatabaseErrorKind, &'static str)], message: &str) -> Classified {
    table
        .iter()
        .find(|(start, _, _)| message.starts_with(start))
        .map_or((DatabaseErrorKind::Other, None), |&(_, kind, code)| {
            (kind, Some(code))
        })
}

#[cfg(test)]
mod tests;
