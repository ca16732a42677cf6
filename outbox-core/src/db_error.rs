//! [`DatabaseErrorKind`]: what kind of failure an [`Error::Database`](crate::Error::Database) is.

use std::fmt;

/// What went wrong in the database or the connection pool, as far as the
/// store could tell.
///
/// The kinds a caller can act on differently: the transient ones
/// ([`is_retryable`](Self::is_retryable)) pass if the same work is tried
/// again, the others need someone to change the data, the schema or the
/// configuration. A failure the store cannot place is [`Other`](Self::Other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DatabaseErrorKind {
    /// The connection was lost, refused or closed, or the server is shutting
    /// down or terminated the session, or (a cluster node not yet synced,
    /// such as a joining Galera node) accepts no statements for now.
    Connection,
    /// The pool had no connection to give in time.
    PoolTimeout,
    /// A transaction could not be serialized with a concurrent one.
    Serialization,
    /// The server broke a deadlock by aborting this transaction.
    Deadlock,
    /// A lock was not granted in time (lock wait timeout, `NOWAIT`, or a
    /// statement cancelled for its lock timeout).
    LockTimeout,
    /// A unique constraint or index was violated.
    UniqueViolation,
    /// A foreign key constraint was violated.
    ForeignKeyViolation,
    /// A check constraint was violated.
    CheckViolation,
    /// A `NOT NULL` column was given no value.
    NotNullViolation,
    /// The transaction or the server accepts no writes.
    ReadOnly,
    /// Anything else: bad SQL, a missing table, a permission, a statement
    /// timeout, a driver failure the store cannot place.
    Other,
}

impl DatabaseErrorKind {
    /// Whether trying the same work again may succeed without anyone changing
    /// anything: true for [`Connection`](Self::Connection),
    /// [`PoolTimeout`](Self::PoolTimeout), [`Serialization`](Self::Serialization),
    /// [`Deadlock`](Self::Deadlock) and [`LockTimeout`](Self::LockTimeout).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::Connection
                | Self::PoolTimeout
                | Self::Serialization
                | Self::Deadlock
                | Self::LockTimeout
        )
    }

    /// The kind's name as shown in messages, for example `lock_timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connection => "connection",
            Self::PoolTimeout => "pool_timeout",
            Self::Serialization => "serialization",
            Self::Deadlock => "deadlock",
            Self::LockTimeout => "lock_timeout",
            Self::UniqueViolation => "unique_violation",
            Self::ForeignKeyViolation => "foreign_key_violation",
            Self::CheckViolation => "check_violation",
            Self::NotNullViolation => "not_null_violation",
            Self::ReadOnly => "read_only",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for DatabaseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::DatabaseErrorKind::{self, *};

    const ALL: [DatabaseErrorKind; 11] = [
        Connection,
        PoolTimeout,
        Serialization,
        Deadlock,
        LockTimeout,
        UniqueViolation,
        ForeignKeyViolation,
        CheckViolation,
        NotNullViolation,
        ReadOnly,
        Other,
    ];

    #[test]
    fn only_transient_kinds_are_retryable() {
        let retryable: Vec<_> = ALL.into_iter().filter(|k| k.is_retryable()).collect();
        assert_eq!(
            retryable,
            [
                Connection,
                PoolTimeout,
                Serialization,
                Deadlock,
                LockTimeout
            ]
        );
    }

    #[test]
    fn names_are_distinct_snake_case_words() {
        let names: std::collections::BTreeSet<String> =
            ALL.iter().map(ToString::to_string).collect();
        assert_eq!(names.len(), ALL.len());
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        );
        assert_eq!(LockTimeout.to_string(), "lock_timeout");
    }
}
