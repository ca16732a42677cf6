//! PostgreSQL: SQLSTATEs recovered from diesel's kind or the server's message.

use diesel::result::DatabaseErrorKind as DieselKind;
use diesel_outbox_core::DatabaseErrorKind::{self, *};

use super::{Classified, by_message};

/// Primary messages of errors diesel-async reports as unknown, with their
/// kind and SQLSTATE.
const MESSAGES: &[(&str, DatabaseErrorKind, &str)] = &[
    ("deadlock detected", Deadlock, "40P01"),
    ("could not obtain lock", LockTimeout, "55P03"),
    (
        "canceling statement due to lock timeout",
        LockTimeout,
        "55P03",
    ),
    (
        "canceling statement due to statement timeout",
        Other,
        "57014",
    ),
    ("canceling statement due to user request", Other, "57014"),
    (
        "terminating connection due to administrator command",
        Connection,
        "57P01",
    ),
    (
        "terminating connection because of crash",
        Connection,
        "57P02",
    ),
    ("the database system is shutting down", Connection, "57P03"),
    ("the database system is starting up", Connection, "57P03"),
    (
        "the database system is in recovery mode",
        Connection,
        "57P03",
    ),
    (
        "terminating connection due to idle-session timeout",
        Connection,
        "57P05",
    ),
    (
        "terminating connection due to idle-in-transaction timeout",
        Connection,
        "25P03",
    ),
    ("sorry, too many clients already", Connection, "53300"),
    (
        "remaining connection slots are reserved",
        Connection,
        "53300",
    ),
];

/// Starts of the driver's texts (no SQLSTATE) that name a fault of the
/// statement, not of the connection.
const STATEMENT_FAULTS: &[&str] = &[
    "error serializing parameter",
    "error deserializing column",
    "invalid column",
    "error encoding message to server",
    "query returned an unexpected number of rows",
    "invalid connection string",
    "invalid configuration",
    "authentication error",
    "error performing TLS handshake",
];

/// diesel-async derives each of these kinds from exactly one SQLSTATE.
pub(super) fn classify(kind: DieselKind, message: &str) -> Classified {
    match kind {
        DieselKind::UniqueViolation => (UniqueViolation, Some("23505")),
        DieselKind::ForeignKeyViolation => (ForeignKeyViolation, Some("23503")),
        DieselKind::SerializationFailure => (Serialization, Some("40001")),
        DieselKind::ReadOnlyTransaction => (ReadOnly, Some("25006")),
        DieselKind::NotNullViolation => (NotNullViolation, Some("23502")),
        DieselKind::CheckViolation => (CheckViolation, Some("23514")),
        DieselKind::RestrictViolation => (Other, Some("23001")),
        DieselKind::ExclusionViolation => (Other, Some("23P01")),
        // The driver's text, not the server's: no SQLSTATE was received.
        DieselKind::UnableToSendCommand => unsent(message),
        DieselKind::ClosedConnection => (Connection, None),
        _ => by_message(MESSAGES, message),
    }
}

/// A query that got no answer: the connection failed, unless the driver
/// refused the statement itself (or its parameter count) before sending.
fn unsent(message: &str) -> Classified {
    let statement = STATEMENT_FAULTS
        .iter()
        .any(|start| message.starts_with(start))
        || (message.starts_with("expected ") && message.contains(" parameters but got "));
    (if statement { Other } else { Connection }, None)
}
