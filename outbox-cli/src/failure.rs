//! Why a command failed, and the exit code scripts see for it.

use std::{fmt, process::ExitCode};

use diesel_outbox_core::Error;

/// A failed command. Each kind has its own exit code, documented in
/// `outbox --help` and [operations.md](https://github.com/outbox-rs/outbox/blob/main/docs/operations.md).
#[derive(Debug)]
pub(crate) enum Failure {
    /// Anything else: the database is unreachable, a query failed. Exit 1.
    Error(anyhow::Error),
    /// A bad option or value. Exit 2, as for clap's own usage errors.
    Usage(String),
    /// No task (or failure group) with the given id. Exit 3.
    NotFound(String),
    /// The task's status does not allow the change. Exit 4.
    Refused(String),
    /// A bulk change was declined, or could not be confirmed. Exit 5.
    NotConfirmed(String),
}

impl Failure {
    /// The process exit code.
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            Self::Error(_) => 1,
            Self::Usage(_) => 2,
            Self::NotFound(_) => 3,
            Self::Refused(_) => 4,
            Self::NotConfirmed(_) => 5,
        })
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Error(error) => write!(f, "{error:#}"),
            Self::Usage(message)
            | Self::NotFound(message)
            | Self::Refused(message)
            | Self::NotConfirmed(message) => f.write_str(message),
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        match error {
            Error::NotFound(_) => Self::NotFound(error.to_string()),
            Error::NotFailed { .. } | Error::NotDiscardable { .. } => {
                Self::Refused(error.to_string())
            }
            Error::InvalidArgument { .. }
            | Error::Config {
                field: "schema" | "table_prefix",
                ..
            } => Self::Usage(error.to_string()),
            other => Self::Error(anyhow::anyhow!(explain(&other))),
        }
    }
}

/// What an operator reads for `error`: its message and causes, each once,
/// and for a database whose outbox tables are missing, what to run.
pub(crate) fn explain(error: &Error) -> String {
    let mut text = error.chain();
    if diesel_outbox_sql::is_missing_table(error) {
        text.push_str(
            "\nhint: the outbox's tables are not in this database: run `outbox migrate` \
             with the same --database-url (and --schema, --table-prefix) to create them",
        );
    }
    text
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Self::Error(error)
    }
}

impl From<std::io::Error> for Failure {
    fn from(error: std::io::Error) -> Self {
        Self::Error(error.into())
    }
}

impl From<serde_json::Error> for Failure {
    fn from(error: serde_json::Error) -> Self {
        Self::Error(error.into())
    }
}
