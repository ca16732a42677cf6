//! The persisted status of a task.

use std::{fmt, str::FromStr};

/// Where a task is in its life (see [semantics.md](https://github.com/outbox-rs/outbox/blob/main/docs/semantics.md) and [architecture.md](https://github.com/outbox-rs/outbox/blob/main/docs/architecture.md)).
///
/// Claims read only [`Available`](Status::Available) rows, so tasks that wait
/// for their time or for an older task of their ordering key cost a claim
/// nothing, however many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Due, and first in line for its ordering key: a relay may claim it now.
    Available,
    /// Not due yet: scheduled for later, or backing off before a retry. A
    /// small periodic step makes it available once due.
    Waiting,
    /// Claimed: a worker holds a lease on it. A lapsed lease is rescued back
    /// to available by a periodic step (or taken over by `send`).
    Running,
    /// Behind an older unfinished task with the same ordering key; it moves
    /// on when every older task of its key has succeeded or been discarded.
    Blocked,
    /// A handler returned `Ok`; never sent again.
    Succeeded,
    /// Failed for good: a permanent error, `max_attempts` reached, or expired.
    /// A failed task still holds its ordering key until it is requeued or
    /// discarded.
    Failed,
    /// Given up by an operator: never sent, and no longer holds its ordering key.
    Discarded,
}

impl Status {
    /// Every status, in the order of the diagram in [architecture.md](https://github.com/outbox-rs/outbox/blob/main/docs/architecture.md).
    pub const ALL: [Status; 7] = [
        Status::Blocked,
        Status::Waiting,
        Status::Available,
        Status::Running,
        Status::Succeeded,
        Status::Failed,
        Status::Discarded,
    ];

    /// The text stored in the `status` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Available => "available",
            Status::Waiting => "waiting",
            Status::Running => "running",
            Status::Blocked => "blocked",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Discarded => "discarded",
        }
    }

    /// Whether the task reached an end state (kept only for retention).
    pub const fn is_finished(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed | Status::Discarded)
    }

    /// Whether a task in this status keeps the later tasks of its ordering
    /// key waiting: every status but succeeded and discarded.
    pub const fn holds_key(self) -> bool {
        !matches!(self, Status::Succeeded | Status::Discarded)
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
            "pending".parse::<Status>(),
            Err(UnknownStatus("pending".to_owned()))
        );
    }

    #[test]
    fn only_succeeded_and_discarded_let_a_key_move_on() {
        let moving: Vec<Status> = Status::ALL
            .into_iter()
            .filter(|status| !status.holds_key())
            .collect();
        assert_eq!(moving, [Status::Succeeded, Status::Discarded]);
    }
}
