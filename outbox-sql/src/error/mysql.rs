//! MySQL/MariaDB: error numbers recovered from diesel's kind or the message.

use diesel::result::DatabaseErrorKind as DieselKind;
use diesel_outbox_core::DatabaseErrorKind::{self, *};

use super::{Classified, by_message};

/// Starts of server messages diesel-async reports as unknown, with their kind
/// and error number; longer starts before shorter ones they begin with.
const MESSAGES: &[(&str, DatabaseErrorKind, &str)] = &[
    ("Deadlock found when trying to get lock", Deadlock, "1213"),
    // Galera's other words for a transaction that lost certification to
    // another node's, or was aborted by a write set applied from one (the
    // first Percona XtraDB Cluster's, the second some MariaDB Galera
    // builds'; MariaDB 10.11 says "Deadlock found").
    ("WSREP detected deadlock/conflict", Deadlock, "1213"),
    ("Deadlock: wsrep aborted transaction", Deadlock, "1213"),
    // A Galera node that is joining, or cut off from the cluster's primary
    // component, refuses statements until it is synced: it passes, or
    // another node serves, like a lost connection.
    (
        "WSREP has not yet prepared node for application use",
        Connection,
        "1047",
    ),
    ("Lock wait timeout exceeded", LockTimeout, "1205"),
    (
        "Statement aborted because lock(s) could not be acquired immediately",
        LockTimeout,
        "3572",
    ),
    ("Record has changed since last read", Serialization, "1020"),
    ("Connection was killed", Connection, "1927"),
    ("Server shutdown in progress", Connection, "1053"),
    (
        "The client was disconnected by the server because of inactivity",
        Connection,
        "4031",
    ),
    ("Too many connections", Connection, "1040"),
    (
        "The MySQL server is running with the --read-only option",
        ReadOnly,
        "1290",
    ),
    (
        "The MariaDB server is running with the --read-only option",
        ReadOnly,
        "1290",
    ),
    (
        "Query execution was interrupted, maximum statement execution time exceeded",
        Other,
        "3024",
    ),
    (
        "Query execution was interrupted (max_statement_time exceeded)",
        Other,
        "1969",
    ),
    ("Query execution was interrupted", Other, "1317"),
];

/// Starts of mysql_async's texts for failures that are not the server's
/// and mean the connection is gone.
const CONNECTION_LOST: &[&str] = &[
    "Input/output error:",
    "Driver error: `Connection to the server is closed.",
];

pub(super) fn classify(kind: DieselKind, message: &str) -> Classified {
    match kind {
        // Also 1586 and 1859, which say the same and are rare.
        DieselKind::UniqueViolation => (UniqueViolation, Some("1062")),
        DieselKind::ForeignKeyViolation => (ForeignKeyViolation, foreign_key_code(message)),
        DieselKind::ReadOnlyTransaction => (ReadOnly, Some("1792")),
        DieselKind::NotNullViolation => (NotNullViolation, not_null_code(message)),
        // MySQL's number; MariaDB's check failures arrive as unknown (4025).
        DieselKind::CheckViolation => (CheckViolation, Some("3819")),
        DieselKind::SerializationFailure => (Serialization, None),
        DieselKind::UnableToSendCommand | DieselKind::ClosedConnection => (Connection, None),
        _ => unknown(message),
    }
}

fn unknown(message: &str) -> Classified {
    if message.starts_with("CONSTRAINT `") && message.contains("` failed for `") {
        return (CheckViolation, Some("4025"));
    }
    if CONNECTION_LOST
        .iter()
        .any(|start| message.starts_with(start))
    {
        return (Connection, None);
    }
    by_message(MESSAGES, message)
}

fn foreign_key_code(message: &str) -> Option<&'static str> {
    if message.starts_with("Cannot add or update a child row") {
        Some("1452")
    } else if message.starts_with("Cannot delete or update a parent row") {
        Some("1451")
    } else {
        None
    }
}

fn not_null_code(message: &str) -> Option<&'static str> {
    if message.ends_with("cannot be null") {
        Some("1048")
    } else if message.ends_with("doesn't have a default value") {
        Some("1364")
    } else {
        None
    }
}
