//! The persisted status of a task.

use std::{fmt, str::FromStr};

/// Where a task is in its life (see docs/semantics.md).
///
/// "In flight" is not a status of its own: it is `Pending` with a live lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Waiting for (or in) an attempt.
    Pending,
    /// A handler returned `Ok`; never sent again.
    Succeeded,
    /// Failed for good: a permanent error, `max_attempts` reached, or expired.
    Failed,
}

impl Status {
    /// Every status, in the order of the diagram.
    pub const ALL: [Status; 3] = [Status::Pending, Status::Succeeded, Status::Failed];

    /// The text stored in the `status` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
        }
    }

    /// Whether the task reached an end state (kept only for retention).
    pub const fn is_finished(self) -> bool {
        !matches!(self, Status::Pending)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `status` column value that is none of the known statuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown task status `{0}`")]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_text() {
        for status in Status::ALL {
            assert_eq!(status.as_str().parse::<Status>(), Ok(status));
        }
        assert_eq!(
            "done".parse::<Status>(),
            Err(UnknownStatus("done".to_owned()))
        );
    }
}
