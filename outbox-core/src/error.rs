//! The error type every outbox operation returns.

use chrono::{DateTime, Utc};

use crate::{HandlerKey, TaskId};

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
    /// `enqueue` was called on a connection that is not inside a transaction.
    #[error("enqueue must run inside the caller's transaction")]
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
    /// An older task with the same ordering key has not succeeded yet.
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
    /// Only a failed task can be requeued.
    #[error("task {id} is {status}, not failed; only failed tasks can be requeued")]
    NotFailed {
        /// The task.
        id: TaskId,
        /// Its current status.
        status: crate::Status,
    },
    /// No handler is registered for the task's kind and version; the task stays pending.
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
        /// Whether the task stays pending for another attempt.
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
    #[error("database error: {0}")]
    Database(#[source] BoxError),
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    /// Wraps a driver or pool error as [`Error::Database`].
    pub fn database(source: impl Into<BoxError>) -> Self {
        Self::Database(source.into())
    }

    /// The field named by an [`Error::InvalidArgument`] or [`Error::Config`].
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::InvalidArgument { field, .. } | Self::Config { field, .. } => Some(field),
            _ => None,
        }
    }

    /// Whether calling again later may succeed without anyone changing anything:
    /// true for database faults, busy, blocked or not-yet-due tasks, tasks
    /// without a handler, and handler failures that will be retried.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Database(_)
            | Self::Busy { .. }
            | Self::NotDue { .. }
            | Self::Blocked { .. }
            | Self::Deferred(_)
            | Self::NoHandler { .. } => true,
            Self::Handler { will_retry, .. } => *will_retry,
            _ => false,
        }
    }
}
