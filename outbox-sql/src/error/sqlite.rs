//! SQLite: result codes recovered from diesel's kind or the library's message.
//!
//! diesel maps SQLite's extended constraint codes to its own kinds and keeps
//! `sqlite3_errmsg` as the message; every other failure is unknown. The code
//! given back is the name of SQLite's result code, such as `SQLITE_BUSY`.

use diesel::result::DatabaseErrorKind as DieselKind;
use diesel_outbox_core::DatabaseErrorKind::{self, *};

use super::{Classified, by_message};

/// Starts of `sqlite3_errmsg` texts diesel reports as unknown, with their
/// kind and result code.
const MESSAGES: &[(&str, DatabaseErrorKind, &str)] = &[
    // Another connection held the lock past this connection's busy_timeout.
    ("database is locked", LockTimeout, "SQLITE_BUSY"),
    ("database table is locked", LockTimeout, "SQLITE_LOCKED"),
    ("database schema is locked", LockTimeout, "SQLITE_LOCKED"),
    (
        "attempt to write a readonly database",
        ReadOnly,
        "SQLITE_READONLY",
    ),
    (
        "unable to open database file",
        Connection,
        "SQLITE_CANTOPEN",
    ),
    ("disk I/O error", Other, "SQLITE_IOERR"),
    ("database or disk is full", Other, "SQLITE_FULL"),
    ("database disk image is malformed", Other, "SQLITE_CORRUPT"),
    ("interrupted", Other, "SQLITE_INTERRUPT"),
];

pub(super) fn classify(kind: DieselKind, message: &str) -> Classified {
    match kind {
        DieselKind::UniqueViolation if message.starts_with("UNIQUE") => {
            (UniqueViolation, Some("SQLITE_CONSTRAINT_UNIQUE"))
        }
        DieselKind::UniqueViolation => (UniqueViolation, Some("SQLITE_CONSTRAINT_PRIMARYKEY")),
        DieselKind::ForeignKeyViolation => {
            (ForeignKeyViolation, Some("SQLITE_CONSTRAINT_FOREIGNKEY"))
        }
        DieselKind::NotNullViolation => (NotNullViolation, Some("SQLITE_CONSTRAINT_NOTNULL")),
        DieselKind::CheckViolation => (CheckViolation, Some("SQLITE_CONSTRAINT_CHECK")),
        // The blocking task running the statement could not be started or
        // joined: the runtime is shutting down.
        DieselKind::UnableToSendCommand | DieselKind::ClosedConnection => (Connection, None),
        _ => by_message(MESSAGES, message),
    }
}
