use deadpool::managed::TimeoutType;
use diesel::result::{ConnectionError, DatabaseErrorKind as Kind, Error as DieselError};
use diesel_async::pooled_connection::{PoolError as ManagerError, deadpool::PoolError};
use diesel_outbox_core::{DatabaseErrorKind, Error};

use super::{
    any_backend_error, mysql_error, mysql_pool_error, postgres_error, postgres_pool_error,
    sqlite_error, sqlite_pool_error,
};

fn server(kind: Kind, message: &str) -> DieselError {
    DieselError::DatabaseError(kind, Box::new(message.to_owned()))
}

#[track_caller]
fn assert_classified(error: &Error, kind: DatabaseErrorKind, code: Option<&str>, retryable: bool) {
    assert_eq!(error.database_kind(), Some(kind), "{error:?}");
    assert_eq!(error.database_code(), code, "{error:?}");
    assert_eq!(error.is_retryable(), retryable, "{error:?}");
}

#[test]
fn postgres_codes_come_from_the_kinds_diesel_derived_from_one_sqlstate() {
    for (kind, ours, code, retryable) in [
        (
            Kind::UniqueViolation,
            DatabaseErrorKind::UniqueViolation,
            "23505",
            false,
        ),
        (
            Kind::ForeignKeyViolation,
            DatabaseErrorKind::ForeignKeyViolation,
            "23503",
            false,
        ),
        (
            Kind::CheckViolation,
            DatabaseErrorKind::CheckViolation,
            "23514",
            false,
        ),
        (
            Kind::NotNullViolation,
            DatabaseErrorKind::NotNullViolation,
            "23502",
            false,
        ),
        (
            Kind::SerializationFailure,
            DatabaseErrorKind::Serialization,
            "40001",
            true,
        ),
        (
            Kind::ReadOnlyTransaction,
            DatabaseErrorKind::ReadOnly,
            "25006",
            false,
        ),
        (
            Kind::RestrictViolation,
            DatabaseErrorKind::Other,
            "23001",
            false,
        ),
        (
            Kind::ExclusionViolation,
            DatabaseErrorKind::Other,
            "23P01",
            false,
        ),
    ] {
        let error = postgres_error(server(kind, "whatever the server said"));
        assert_classified(&error, ours, Some(code), retryable);
    }
}

#[test]
fn postgres_codes_come_from_recognised_messages() {
    for (message, kind, code, retryable) in [
        (
            "deadlock detected",
            DatabaseErrorKind::Deadlock,
            "40P01",
            true,
        ),
        (
            "could not obtain lock on row in relation \"outbox_tasks\"",
            DatabaseErrorKind::LockTimeout,
            "55P03",
            true,
        ),
        (
            "canceling statement due to lock timeout",
            DatabaseErrorKind::LockTimeout,
            "55P03",
            true,
        ),
        (
            "terminating connection due to administrator command",
            DatabaseErrorKind::Connection,
            "57P01",
            true,
        ),
        (
            "canceling statement due to statement timeout",
            DatabaseErrorKind::Other,
            "57014",
            false,
        ),
    ] {
        let error = postgres_error(server(Kind::Unknown, message));
        assert_classified(&error, kind, Some(code), retryable);
    }
    let unknown = postgres_error(server(
        Kind::Unknown,
        "relation \"outbox_tasks\" does not exist",
    ));
    assert_classified(&unknown, DatabaseErrorKind::Other, None, false);
}

#[test]
fn postgres_without_sqlstate_is_a_lost_connection_unless_the_statement_was_refused() {
    for message in [
        "connection closed",
        "error communicating with the server: Broken pipe (os error 32)",
        "error connecting to server: Connection refused (os error 111)",
        "channel closed",
    ] {
        let error = postgres_error(server(Kind::UnableToSendCommand, message));
        assert_classified(&error, DatabaseErrorKind::Connection, None, true);
    }
    for message in [
        "error serializing parameter 1: value too large to transmit",
        "expected 2 parameters but got 1",
    ] {
        let error = postgres_error(server(Kind::UnableToSendCommand, message));
        assert_classified(&error, DatabaseErrorKind::Other, None, false);
    }
    let closed = postgres_error(server(
        Kind::ClosedConnection,
        "server closed the connection",
    ));
    assert_classified(&closed, DatabaseErrorKind::Connection, None, true);
}

#[test]
fn mysql_codes_come_from_kinds_and_messages() {
    for (kind, message, ours, code, retryable) in [
        (
            Kind::UniqueViolation,
            "Duplicate entry 'a' for key 'outbox_tasks_dedup_key'",
            DatabaseErrorKind::UniqueViolation,
            Some("1062"),
            false,
        ),
        (
            Kind::CheckViolation,
            "Check constraint 'outbox_tasks_version_check' is violated.",
            DatabaseErrorKind::CheckViolation,
            Some("3819"),
            false,
        ),
        (
            Kind::Unknown,
            "CONSTRAINT `outbox_tasks_version_check` failed for `test`.`outbox_tasks`",
            DatabaseErrorKind::CheckViolation,
            Some("4025"),
            false,
        ),
        (
            Kind::NotNullViolation,
            "Column 'kind' cannot be null",
            DatabaseErrorKind::NotNullViolation,
            Some("1048"),
            false,
        ),
        (
            Kind::ForeignKeyViolation,
            "Cannot add or update a child row: a foreign key constraint fails",
            DatabaseErrorKind::ForeignKeyViolation,
            Some("1452"),
            false,
        ),
        (
            Kind::ForeignKeyViolation,
            "something else",
            DatabaseErrorKind::ForeignKeyViolation,
            None,
            false,
        ),
        (
            Kind::Unknown,
            "Deadlock found when trying to get lock; try restarting transaction",
            DatabaseErrorKind::Deadlock,
            Some("1213"),
            true,
        ),
        (
            Kind::Unknown,
            "Lock wait timeout exceeded; try restarting transaction",
            DatabaseErrorKind::LockTimeout,
            Some("1205"),
            true,
        ),
        (
            Kind::Unknown,
            "Connection was killed",
            DatabaseErrorKind::Connection,
            Some("1927"),
            true,
        ),
        (
            Kind::Unknown,
            "Query execution was interrupted (max_statement_time exceeded)",
            DatabaseErrorKind::Other,
            Some("1969"),
            false,
        ),
        (
            Kind::Unknown,
            "Input/output error: Broken pipe (os error 32)",
            DatabaseErrorKind::Connection,
            None,
            true,
        ),
        (
            Kind::Unknown,
            "Driver error: `Connection to the server is closed.'",
            DatabaseErrorKind::Connection,
            None,
            true,
        ),
        (
            Kind::Unknown,
            "You have an error in your SQL syntax",
            DatabaseErrorKind::Other,
            None,
            false,
        ),
    ] {
        let error = mysql_error(server(kind, message));
        assert_classified(&error, ours, code, retryable);
    }
}

/// Galera (MariaDB Galera Cluster, Percona XtraDB Cluster): a transaction
/// that lost certification to another node's, or was aborted by a write set
/// applied from another node, is a deadlock, tried again; a node that is
/// joining or has lost the cluster refuses every statement until it is
/// synced, which passes like a lost connection (or on another node).
#[test]
fn galera_conflicts_and_unready_nodes_are_retryable() {
    for (message, ours, code) in [
        (
            "Deadlock found when trying to get lock; try restarting transaction",
            DatabaseErrorKind::Deadlock,
            "1213",
        ),
        (
            "WSREP detected deadlock/conflict and aborted the transaction. \
             Try restarting the transaction",
            DatabaseErrorKind::Deadlock,
            "1213",
        ),
        (
            "Deadlock: wsrep aborted transaction",
            DatabaseErrorKind::Deadlock,
            "1213",
        ),
        (
            "WSREP has not yet prepared node for application use",
            DatabaseErrorKind::Connection,
            "1047",
        ),
    ] {
        let error = mysql_error(server(Kind::Unknown, message));
        assert_classified(&error, ours, Some(code), true);
    }
}

#[test]
fn sqlite_codes_come_from_kinds_and_messages() {
    for (kind, message, ours, code, retryable) in [
        (
            Kind::UniqueViolation,
            "UNIQUE constraint failed: outbox_tasks.dedup_key",
            DatabaseErrorKind::UniqueViolation,
            Some("SQLITE_CONSTRAINT_UNIQUE"),
            false,
        ),
        (
            Kind::CheckViolation,
            "CHECK constraint failed: version > 0",
            DatabaseErrorKind::CheckViolation,
            Some("SQLITE_CONSTRAINT_CHECK"),
            false,
        ),
        (
            Kind::NotNullViolation,
            "NOT NULL constraint failed: outbox_tasks.kind",
            DatabaseErrorKind::NotNullViolation,
            Some("SQLITE_CONSTRAINT_NOTNULL"),
            false,
        ),
        (
            Kind::Unknown,
            "database is locked",
            DatabaseErrorKind::LockTimeout,
            Some("SQLITE_BUSY"),
            true,
        ),
        (
            Kind::Unknown,
            "attempt to write a readonly database",
            DatabaseErrorKind::ReadOnly,
            Some("SQLITE_READONLY"),
            false,
        ),
        (
            Kind::Unknown,
            "unable to open database file",
            DatabaseErrorKind::Connection,
            Some("SQLITE_CANTOPEN"),
            true,
        ),
        (
            Kind::Unknown,
            "no such table: outbox_tasks",
            DatabaseErrorKind::Other,
            None,
            false,
        ),
        (
            Kind::UnableToSendCommand,
            "A Tokio 1.x context was found, but it is being shutdown.",
            DatabaseErrorKind::Connection,
            None,
            true,
        ),
    ] {
        assert_classified(&sqlite_error(server(kind, message)), ours, code, retryable);
    }
    let refused = sqlite_pool_error(PoolError::Backend(ManagerError::ConnectionError(
        ConnectionError::BadConnection("unable to open database file".to_owned()),
    )));
    assert_classified(&refused, DatabaseErrorKind::Connection, None, true);
}

#[test]
fn the_same_words_mean_nothing_to_the_other_backend() {
    let mysql_deadlock = "Deadlock found when trying to get lock; try restarting transaction";
    let error = postgres_error(server(Kind::Unknown, mysql_deadlock));
    assert_classified(&error, DatabaseErrorKind::Other, None, false);
    let error = mysql_error(server(Kind::Unknown, "deadlock detected"));
    assert_classified(&error, DatabaseErrorKind::Other, None, false);
    let error = sqlite_error(server(Kind::Unknown, "deadlock detected"));
    assert_classified(&error, DatabaseErrorKind::Other, None, false);
    let error = postgres_error(server(Kind::Unknown, "database is locked"));
    assert_classified(&error, DatabaseErrorKind::Other, None, false);
}

#[test]
fn the_diesel_error_is_the_source_and_its_message_appears_once() {
    let error = postgres_error(server(Kind::Unknown, "deadlock detected"));
    let chain = format!("{:#}", anyhow::Error::from(error));
    assert_eq!(chain, "database error (deadlock, 40P01): deadlock detected");

    let error = postgres_error(DieselError::NotFound);
    let Error::Database { source, .. } = &error else {
        panic!("{error:?}")
    };
    assert!(matches!(
        source.downcast_ref::<DieselError>(),
        Some(DieselError::NotFound)
    ));
}

#[test]
fn diesel_own_errors() {
    assert_classified(
        &mysql_error(DieselError::BrokenTransactionManager),
        DatabaseErrorKind::Connection,
        None,
        true,
    );
    assert_classified(
        &any_backend_error(DieselError::BrokenTransactionManager),
        DatabaseErrorKind::Connection,
        None,
        true,
    );
    assert_classified(
        &any_backend_error(server(Kind::Unknown, "deadlock detected")),
        DatabaseErrorKind::Other,
        None,
        false,
    );
    assert_classified(
        &postgres_error(DieselError::NotFound),
        DatabaseErrorKind::Other,
        None,
        false,
    );
    let commit = postgres_error(DieselError::RollbackErrorOnCommit {
        rollback_error: Box::new(server(Kind::UnableToSendCommand, "connection closed")),
        commit_error: Box::new(server(Kind::SerializationFailure, "could not serialize")),
    });
    assert_classified(
        &commit,
        DatabaseErrorKind::Serialization,
        Some("40001"),
        true,
    );
}

#[test]
fn pool_errors() {
    assert_classified(
        &postgres_pool_error(PoolError::Timeout(TimeoutType::Wait)),
        DatabaseErrorKind::PoolTimeout,
        None,
        true,
    );
    let refused = PoolError::Backend(ManagerError::ConnectionError(
        ConnectionError::BadConnection("Input/output error: Connection refused".to_owned()),
    ));
    assert_classified(
        &mysql_pool_error(refused),
        DatabaseErrorKind::Connection,
        None,
        true,
    );
    let unreachable = PoolError::Backend(ManagerError::ConnectionError(
        ConnectionError::CouldntSetupConfiguration(server(
            Kind::UnableToSendCommand,
            "error connecting to server: Connection refused (os error 111)",
        )),
    ));
    assert_classified(
        &postgres_pool_error(unreachable),
        DatabaseErrorKind::Connection,
        None,
        true,
    );
    let shutting_down = PoolError::Backend(ManagerError::ConnectionError(
        ConnectionError::CouldntSetupConfiguration(server(
            Kind::Unknown,
            "the database system is shutting down",
        )),
    ));
    assert_classified(
        &postgres_pool_error(shutting_down),
        DatabaseErrorKind::Connection,
        Some("57P03"),
        true,
    );
    let login = PoolError::Backend(ManagerError::ConnectionError(
        ConnectionError::CouldntSetupConfiguration(server(
            Kind::Unknown,
            "password authentication failed for user \"outbox\"",
        )),
    ));
    assert_classified(
        &postgres_pool_error(login),
        DatabaseErrorKind::Other,
        None,
        false,
    );
    let url = PoolError::Backend(ManagerError::ConnectionError(
        ConnectionError::InvalidConnectionUrl("no host".to_owned()),
    ));
    assert_classified(
        &mysql_pool_error(url),
        DatabaseErrorKind::Other,
        None,
        false,
    );
    assert_classified(
        &mysql_pool_error(PoolError::Closed),
        DatabaseErrorKind::Other,
        None,
        false,
    );
}
