//! The error type every outbox operation returns.

use std::fmt;

use chrono::{DateTime, Utc};

use crate::{DatabaseErrorKind, HandlerKey, TaskId};

/// Result alias used throughout the outbox crates.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Boxed source error of a database driver, kept opaque so that no driver type
/// appears in this crate's API.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in the outbox.
///
/// Variants carry what a caller needs to act on the error: which field was
/// invalid, which task id was busy or missing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An input was rejected before anything was written.
    #[error("invalid argument `{field}`: {reason}")]
    InvalidArgument {
        /// Name of the offending field (for example `kind` or `payload`).
        field: &'static str,
        /// Why the value was rejected.
        reason: String,
    },
    /// `enqueue` (or an inbox record) was called on a connection that is not
    /// inside a transaction.
    #[error("enqueue and inbox records must run inside the caller's transaction")]
    NotTransaction,
    /// No task with this id exists (it was never committed, or was purged).
    #[error("task {0} not found")]
    NotFound(TaskId),
    /// Another worker holds a live lease on the task.
    #[error("task {id} is being sent by another worker (lease until {until})")]
    Busy {
        /// The task.
        id: TaskId,
        /// When the other worker's lease runs out.
        until: DateTime<Utc>,
    },
    /// The task is not due yet (scheduled, or waiting for its retry).
    #[error("task {id} is not due before {at}")]
    NotDue {
        /// The task.
        id: TaskId,
        /// Earliest time of the next attempt.
        at: DateTime<Utc>,
    },
    /// An older task with the same ordering key has neither succeeded nor
    /// been discarded yet.
    #[error("task {id} waits for an older task with the same ordering key")]
    Blocked {
        /// The task.
        id: TaskId,
    },
    /// The task passed its `expires_at` before it could be sent; it is now failed.
    #[error("task {0} expired before it could be sent")]
    Expired(TaskId),
    /// The task already failed for good; `requeue` it to try again.
    #[error("task {0} has failed; requeue it to send it again")]
    Failed(TaskId),
    /// An operator discarded the task; it is never sent.
    #[error("task {0} was discarded; it is never sent")]
    Discarded(TaskId),
    /// Only a failed task can be requeued.
    #[error("task {id} is {status}, not failed; only failed tasks can be requeued")]
    NotFailed {
        /// The task.
        id: TaskId,
        /// Its current status.
        status: crate::Status,
    },
    /// A running task (its handler may be under way) or a finished one cannot
    /// be discarded.
    #[error(
        "task {id} is {status}; only available, waiting, blocked or failed tasks can be discarded"
    )]
    NotDiscardable {
        /// The task.
        id: TaskId,
        /// Its current status.
        status: crate::Status,
    },
    /// No handler is registered for the task's kind and version; the task is
    /// retried after the retry policy's first delay.
    #[error("task {id}: no handler registered for {key}")]
    NoHandler {
        /// The task.
        id: TaskId,
        /// The kind and version that had no handler.
        key: HandlerKey,
    },
    /// The handler ran and failed; the failure is recorded on the task.
    #[error("task {id} attempt {attempt} failed ({}): {message}", if *.will_retry { "will retry" } else { "final" })]
    Handler {
        /// The task.
        id: TaskId,
        /// The attempt that failed (1-based).
        attempt: i64,
        /// Whether the task waits for another attempt.
        will_retry: bool,
        /// The handler's error text, as recorded in `last_error`.
        message: String,
    },
    /// `send_async` left the task to the relay (or the next `retry_pending`):
    /// the worker was already running as many sends as its `concurrency`.
    #[error("task {0} is left to the relay: the worker was at its send concurrency")]
    Deferred(TaskId),
    /// Two handlers were registered for one kind and version.
    #[error("a handler for {0} is already registered")]
    DuplicateHandler(HandlerKey),
    /// A configuration value is unusable.
    #[error("invalid configuration `{field}`: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// The database server lacks a feature the store needs.
    #[error("unsupported database server: {0}")]
    Unsupported(String),
    /// A stored row could not be decoded.
    #[error("task {id}: stored `{field}` is unreadable: {reason}")]
    Corrupt {
        /// The task.
        id: TaskId,
        /// The column.
        field: &'static str,
        /// What was wrong with it.
        reason: String,
    },
    /// The database or the connection pool failed.
    ///
    /// The message names the kind and the server's code, for example
    /// `database error (deadlock, 40P01)`; the driver's own message is the
    /// [`source`](std::error::Error::source), so printing the chain (`{:#}`
    /// with `anyhow`) shows it once.
    #[error("database error ({kind}{})", CodeSuffix(code.as_deref()))]
    Database {
        /// What kind of failure it was; decides [`Error::is_retryable`].
        kind: DatabaseErrorKind,
        /// The server's error code (a PostgreSQL SQLSTATE such as `40P01`, a
        /// MySQL/MariaDB error number such as `1213`) when it is known.
        code: Option<String>,
        /// The driver's or the pool's error.
        #[source]
        source: BoxError,
    },
}

/// `, <code>` after the kind in [`Error::Database`]'s message, when there is a code.
struct CodeSuffix<'a>(Option<&'a str>);

impl fmt::Display for CodeSuffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(code) => write!(f, ", {code}"),
            None => Ok(()),
        }
    }
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    /// Wraps a driver or pool error as [`Error::Database`] of kind
    /// [`DatabaseErrorKind::Other`] without a code: for failures nothing is
    /// known about (use [`Error::database_with`] when the kind is known).
    pub fn database(source: impl Into<BoxError>) -> Self {
        Self::database_with(DatabaseErrorKind::Other, None, source)
    }

    /// Wraps a driver or pool error as [`Error::Database`] of `kind`, with
    /// the server's error `code` if known.
    pub fn database_with(
        kind: DatabaseErrorKind,
        code: Option<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Database {
            kind,
            code,
            source: source.into(),
        }
    }

    /// This error's message followed by the message of each of its sources,
    /// separated by `: ` (what `anyhow` prints for `{:#}`): for logs and
    /// stored text, where the driver's own words must not be lost.
    ///
    /// ```
    /// use diesel_outbox_core::{DatabaseErrorKind, Error};
    ///
    /// let error = Error::database_with(DatabaseErrorKind::Deadlock, Some("40P01".into()), "deadlock detected");
    /// assert_eq!(error.to_string(), "database error (deadlock, 40P01)");
    /// assert_eq!(error.chain(), "database error (deadlock, 40P01): deadlock detected");
    /// ```
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }

    /// The kind of an [`Error::Database`]; `None` for every other variant.
    pub fn database_kind(&self) -> Option<DatabaseErrorKind> {
        match self {
            Self::Database { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// The server's error code of an [`Error::Database`], when known (a
    /// PostgreSQL SQLSTATE such as `23505`, a MySQL/MariaDB error number such
    /// as `1062`); `None` for every other variant.
    pub fn database_code(&self) -> Option<&str> {
        match self {
            Self::Database { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// The field named by an [`Error::InvalidArgument`] or [`Error::Config`].
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::InvalidArgument { field, .. } | Self::Config { field, .. } => Some(field),
            _ => None,
        }
    }

    /// Whether calling again later may succeed without anyone changing anything:
    /// true for transient database failures (see
    /// [`DatabaseErrorKind::is_retryable`]: connection, pool timeout,
    /// serialization, deadlock, lock timeout), busy, blocked or not-yet-due
    /// tasks, tasks without a handler, and handler failures that will be
    /// retried.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Database { kind, .. } => kind.is_retryable(),
            Self::Busy { .. }
            | Self::NotDue { .. }
            | Self::Blocked { .. }
            | Self::Deferred(_)
            | Self::NoHandler { .. } => true,
            Self::Handler { will_retry, .. } => *will_retry,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DatabaseErrorKind, Error};
    use crate::TaskId;

    const SERVER_SAYS: &str = "deadlock detected";

    #[test]
    fn the_chain_shows_the_driver_message_once() {
        let error = Error::database_with(
            DatabaseErrorKind::Deadlock,
            Some("40P01".to_owned()),
            SERVER_SAYS,
        );
        assert_eq!(error.to_string(), "database error (deadlock, 40P01)");
        let chain = format!("{:#}", anyhow::Error::from(error));
        assert_eq!(chain, "database error (deadlock, 40P01): deadlock detected");
        assert_eq!(chain.matches(SERVER_SAYS).count(), 1);
    }

    #[test]
    fn an_unknown_failure_is_other_without_a_code() {
        let error = Error::database(SERVER_SAYS);
        assert_eq!(error.to_string(), "database error (other)");
        assert_eq!(error.database_kind(), Some(DatabaseErrorKind::Other));
        assert_eq!(error.database_code(), None);
        let chain = format!("{:#}", anyhow::Error::from(error));
        assert_eq!(chain.matches(SERVER_SAYS).count(), 1, "{chain}");
    }

    #[test]
    fn accessors_read_the_kind_and_code() {
        let error = Error::database_with(
            DatabaseErrorKind::UniqueViolation,
            Some("23505".to_owned()),
            "duplicate key value violates unique constraint",
        );
        assert_eq!(
            error.database_kind(),
            Some(DatabaseErrorKind::UniqueViolation)
        );
        assert_eq!(error.database_code(), Some("23505"));
        let other = Error::NotFound(TaskId::new(1));
        assert_eq!(other.database_kind(), None);
        assert_eq!(other.database_code(), None);
    }

    #[test]
    fn only_transient_database_failures_are_retryable() {
        for (kind, retryable) in [
            (DatabaseErrorKind::Connection, true),
            (DatabaseErrorKind::PoolTimeout, true),
            (DatabaseErrorKind::Serialization, true),
            (DatabaseErrorKind::Deadlock, true),
            (DatabaseErrorKind::LockTimeout, true),
            (DatabaseErrorKind::UniqueViolation, false),
            (DatabaseErrorKind::ForeignKeyViolation, false),
            (DatabaseErrorKind::CheckViolation, false),
            (DatabaseErrorKind::NotNullViolation, false),
            (DatabaseErrorKind::ReadOnly, false),
            (DatabaseErrorKind::Other, false),
        ] {
            let error = Error::database_with(kind, None, "x");
            assert_eq!(error.is_retryable(), retryable, "{kind}");
        }
        assert!(!Error::database("syntax error at or near \"SELEC\"").is_retryable());
    }

    #[test]
    fn other_variants_keep_their_retryability() {
        let id = TaskId::new(7);
        let at = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
        assert!(Error::Busy { id, until: at }.is_retryable());
        assert!(Error::NotDue { id, at }.is_retryable());
        assert!(Error::Blocked { id }.is_retryable());
        assert!(!Error::NotFound(id).is_retryable());
        assert!(!Error::Failed(id).is_retryable());
        assert!(!Error::Discarded(id).is_retryable());
        assert!(!Error::NotTransaction.is_retryable());
    }
}
