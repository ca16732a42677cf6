//! What the table holds about one task: [`Record`] and [`Lease`].

use chrono::{DateTime, Utc};

use crate::{Status, Task, TaskId, transition::TaskState};

/// A worker's claim on a pending task: who is sending it and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The claiming worker's owner name.
    pub owner: String,
    /// When the claim lapses and another worker may take the task over.
    pub expires_at: DateTime<Utc>,
}

/// A snapshot of one row of `outbox_tasks`, as [`get`](crate::Store::get) returns it.
///
/// `task.not_before` is folded into `next_attempt_at` when the task is stored,
/// so it reads back as `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The task's id.
    pub id: TaskId,
    /// What was enqueued.
    pub task: Task,
    /// Where the task is in its life.
    pub status: Status,
    /// Attempts started, including one in flight.
    pub attempts: i64,
    /// Not claimable before this instant (backoff or schedule).
    pub next_attempt_at: DateTime<Utc>,
    /// The live or lapsed claim, if any.
    pub lease: Option<Lease>,
    /// The latest failure, empty after success; at most 4 KiB.
    pub last_error: String,
    /// When the row was inserted (database clock).
    pub created_at: DateTime<Utc>,
    /// When the row last changed (database clock).
    pub updated_at: DateTime<Utc>,
    /// When the task succeeded or failed.
    pub finished_at: Option<DateTime<Utc>>,
}

impl Record {
    /// The part of the record the transition rules look at.
    pub fn state(&self) -> TaskState {
        TaskState {
            status: self.status,
            attempts: self.attempts,
            max_attempts: self.task.max_attempts,
            next_attempt_at: self.next_attempt_at,
            expires_at: self.task.expires_at,
            lease: self.lease.clone(),
            finished_at: self.finished_at,
        }
    }
}
