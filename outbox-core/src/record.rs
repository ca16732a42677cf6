//! What the table holds about one task: [`Record`] and [`Lease`].

use chrono::{DateTime, Utc};

use crate::{Error, Headers, Result, Status, Task, TaskId, transition::TaskState};

/// A worker's claim on a running task: who is sending it and until when.
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
    /// Claims taken, including one in flight and claims given back before
    /// their handler started; the fence of every completion write.
    pub attempts: i64,
    /// Claims given back before their handler started, because too little
    /// of the lease was left for the handler timeout. [`Record::runs`]
    /// leaves them out.
    pub released: i64,
    /// Not claimable before this instant (backoff or schedule).
    pub next_attempt_at: DateTime<Utc>,
    /// The claim while the task is running (live, or lapsed and not yet
    /// rescued).
    pub lease: Option<Lease>,
    /// The latest failure, empty after success; at most 4 KiB.
    pub last_error: String,
    /// When the row was inserted (database clock).
    pub created_at: DateTime<Utc>,
    /// When the row last changed (database clock).
    pub updated_at: DateTime<Utc>,
    /// When the task succeeded, failed or was discarded.
    pub finished_at: Option<DateTime<Utc>>,
}

impl Record {
    /// How many times a handler was started for this task, including one in
    /// flight: `attempts - released`. This is what `max_attempts` limits and
    /// what a handler sees as [`Delivery::attempt`](crate::Delivery::attempt).
    pub fn runs(&self) -> i64 {
        self.attempts - self.released
    }

    /// The part of the record the transition rules look at.
    pub fn state(&self) -> TaskState {
        TaskState {
            status: self.status,
            attempts: self.attempts,
            released: self.released,
            max_attempts: self.task.max_attempts,
            next_attempt_at: self.next_attempt_at,
            expires_at: self.task.expires_at,
            lease: self.lease.clone(),
            finished_at: self.finished_at,
            ordering_key: self.task.ordering_key.clone(),
            last_error: self.last_error.clone(),
        }
    }
}

/// A row as a backend reads it, with its times already in UTC; decoding the
/// headers and the status into a [`Record`] is shared by every backend.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // the fields are the table's columns, documented on `Record`
pub struct StoredRow {
    pub id: i64,
    pub kind: String,
    pub version: i32,
    pub payload: Vec<u8>,
    pub headers: serde_json::Value,
    pub ordering_key: Option<String>,
    pub dedup_key: Option<String>,
    pub status: String,
    pub attempts: i64,
    pub released: i64,
    pub max_attempts: Option<i32>,
    pub next_attempt_at: DateTime<Utc>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_error: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl StoredRow {
    /// The task this row holds, or, when it cannot be read as one, what a
    /// listing shows of it instead ([`UnreadableRow`]).
    pub fn decode(self) -> std::result::Result<Record, UnreadableRow> {
        let id = TaskId::new(self.id);
        self.into_record()
            .map_err(|(error, status)| UnreadableRow::new(id, status, &error))
    }

    /// The record this row holds; or why not, with the status as stored
    /// (moved out, not copied, for a listing to show).
    fn into_record(mut self) -> std::result::Result<Record, (Error, String)> {
        let id = TaskId::new(self.id);
        let stored = std::mem::take(&mut self.status);
        let (headers, status) =
            match checked_row(id, self.headers, &stored, self.attempts, self.released) {
                Ok(checked) => checked,
                Err(error) => return Err((error, stored)),
            };
        let mut task = Task::new(self.kind, self.version, self.payload).headers(headers);
        task.ordering_key = self.ordering_key;
        task.dedup_key = self.dedup_key;
        task.expires_at = self.expires_at;
        task.max_attempts = self.max_attempts;
        let lease = match (self.lease_owner, self.lease_expires_at) {
            (Some(owner), Some(expires_at)) => Some(Lease { owner, expires_at }),
            _ => None,
        };
        Ok(Record {
            id,
            task,
            status,
            attempts: self.attempts,
            released: self.released,
            next_attempt_at: self.next_attempt_at,
            lease,
            last_error: self.last_error,
            created_at: self.created_at,
            updated_at: self.updated_at,
            finished_at: self.finished_at,
        })
    }
}

/// The columns of a stored task that need more than a copy to be read,
/// checked in the order a listing reports them: the headers (a string
/// map), the status (a known one) and `released` (within `0..=attempts`).
pub(crate) fn checked_row(
    id: TaskId,
    headers: serde_json::Value,
    status: &str,
    attempts: i64,
    released: i64,
) -> Result<(Headers, Status)> {
    let corrupt = |field, reason: String| Error::Corrupt { id, field, reason };
    let headers: Headers =
        serde_json::from_value(headers).map_err(|e| corrupt("headers", e.to_string()))?;
    let status = status
        .parse::<Status>()
        .map_err(|e| corrupt("status", e.to_string()))?;
    if !(0..=attempts).contains(&released) {
        // The table's CHECK says so, but not every server enforces CHECKs.
        let reason = format!("{released} is not within 0..={attempts} (attempts)");
        return Err(corrupt("released", reason));
    }
    Ok((headers, status))
}

/// A row of the tasks table that cannot be read as a task: written by
/// another program or by hand (headers that are not a string map, an
/// unknown status, a key that is not UTF-8, a time out of range). Listings
/// and [`Maintenance::inspect`](crate::Maintenance::inspect) show it as
/// such, beside the tasks they can read; an operator can still discard it
/// by id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnreadableRow {
    /// The row's id.
    pub id: TaskId,
    /// Its `status` column as stored, which may be no known status.
    pub status: String,
    /// The column that cannot be read.
    pub field: &'static str,
    /// Why it cannot be read.
    pub reason: String,
}

impl UnreadableRow {
    /// Row `id`, stored with `status`, that decoding refused with `error`
    /// (an [`Error::Corrupt`] names the column; any other error is about
    /// the `row`).
    pub fn new(id: TaskId, status: impl Into<String>, error: &Error) -> Self {
        let (field, reason) = match error {
            Error::Corrupt { field, reason, .. } => (*field, reason.clone()),
            other => ("row", other.chain()),
        };
        Self {
            id,
            status: status.into(),
            field,
            reason,
        }
    }
}

impl From<UnreadableRow> for Error {
    /// The row as [`Error::Corrupt`], naming its column: what
    /// [`Store::get`](crate::Store::get) answers for it.
    fn from(row: UnreadableRow) -> Self {
        Error::Corrupt {
            id: row.id,
            field: row.field,
            reason: row.reason,
        }
    }
}

impl std::fmt::Display for UnreadableRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "task {} ({}) cannot be read: {}: {}",
            self.id, self.status, self.field, self.reason
        )
    }
}

/// One row of a listing: a task, or a row that cannot be read as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    /// A task.
    Task(Box<Record>),
    /// A row that cannot be read as a task.
    Unreadable(UnreadableRow),
}

impl Listed {
    /// The row's id.
    pub fn id(&self) -> TaskId {
        match self {
            Self::Task(record) => record.id,
            Self::Unreadable(row) => row.id,
        }
    }
}

impl From<std::result::Result<Record, UnreadableRow>> for Listed {
    fn from(row: std::result::Result<Record, UnreadableRow>) -> Self {
        match row {
            Ok(record) => Self::Task(Box::new(record)),
            Err(row) => Self::Unreadable(row),
        }
    }
}

impl TryFrom<StoredRow> for Record {
    type Error = Error;

    /// Fails with [`Error::Corrupt`] when the headers are not a string map,
    /// the status is unknown, or `released` is not within `0..=attempts`.
    fn try_from(row: StoredRow) -> Result<Self> {
        row.into_record().map_err(|(error, _)| error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(status: &str, headers: serde_json::Value) -> StoredRow {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        StoredRow {
            id: 7,
            kind: "k".into(),
            version: 1,
            payload: b"{}".to_vec(),
            headers,
            ordering_key: None,
            dedup_key: None,
            status: status.into(),
            attempts: 1,
            released: 0,
            max_attempts: None,
            next_attempt_at: at,
            lease_owner: Some("w".into()),
            lease_expires_at: Some(at),
            expires_at: None,
            last_error: String::new(),
            created_at: at,
            updated_at: at,
            finished_at: None,
        }
    }

    #[test]
    fn a_row_that_cannot_be_read_shows_its_status_as_stored() {
        let unknown = stored("Running ", serde_json::json!({}))
            .decode()
            .expect_err("unknown status");
        assert_eq!(
            (unknown.id, unknown.status.as_str(), unknown.field),
            (TaskId::new(7), "Running ", "status")
        );
        let bad_headers = stored("running", serde_json::json!({"a": 1}))
            .decode()
            .expect_err("headers that are not a string map");
        assert_eq!(
            (bad_headers.status.as_str(), bad_headers.field),
            ("running", "headers")
        );
        let both = stored("Running ", serde_json::json!({"a": 1}))
            .decode()
            .expect_err("bad headers and an unknown status");
        assert_eq!(
            (both.status.as_str(), both.field),
            ("Running ", "headers"),
            "the headers are read first"
        );
        let record = stored("running", serde_json::json!({"a": "b"}))
            .decode()
            .expect("a readable row");
        assert_eq!(record.status, Status::Running);
        assert_eq!(record.lease.map(|lease| lease.owner).as_deref(), Some("w"));
    }
}
