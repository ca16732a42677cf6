//! What a batch claim hands the worker: [`ClaimedTask`], and the row a
//! backend's claim reads it from, [`StoredClaim`].

use chrono::{DateTime, Utc};

use crate::{Error, Record, Status, Task, TaskId, UnreadableRow, record::checked_row};

/// A task as a batch claim ([`Store::claim_due`](crate::Store::claim_due))
/// took it: what its delivery, its fence and its outcome need, and nothing
/// of the row's bookkeeping (lease, last error, schedule), which a claim
/// does not read.
///
/// Its fields hold what the row holds after the claim:
/// [`ClaimedTask::from`] a [`Record`] read then gives the same value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimedTask {
    /// The task's id.
    pub id: TaskId,
    /// What was enqueued (`not_before` folded into the schedule, so `None`).
    pub task: Task,
    /// [`Status::Running`], or [`Status::Failed`] for a task the claim found
    /// past its `expires_at` and failed instead.
    pub status: Status,
    /// Claims taken, this one included: the fence of its completion write.
    pub attempts: i64,
    /// Claims given back before their handler started.
    pub released: i64,
    /// When the row was inserted (database clock).
    pub created_at: DateTime<Utc>,
    /// When the claim took it (database clock).
    pub claimed_at: DateTime<Utc>,
}

impl ClaimedTask {
    /// How many times a handler was started for this task, this claim's
    /// included: `attempts - released`, what `max_attempts` limits and a
    /// handler sees as [`Delivery::attempt`](crate::Delivery::attempt).
    pub fn runs(&self) -> i64 {
        self.attempts - self.released
    }
}

impl From<Record> for ClaimedTask {
    /// The claimed task a record read right after its claim holds.
    fn from(record: Record) -> Self {
        Self {
            id: record.id,
            task: record.task,
            status: record.status,
            attempts: record.attempts,
            released: record.released,
            created_at: record.created_at,
            claimed_at: record.updated_at,
        }
    }
}

/// The columns a backend's batch claim returns, with its times already in
/// UTC; decoding them into a [`ClaimedTask`] is shared by every backend,
/// with the same checks as [`StoredRow`](crate::StoredRow)'s.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // the fields are the table's columns, documented on `Record`
pub struct StoredClaim {
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
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl StoredClaim {
    /// The claimed task this row holds, or, when it cannot be read as one,
    /// what a listing shows of it instead ([`UnreadableRow`]).
    pub fn decode(mut self) -> Result<ClaimedTask, UnreadableRow> {
        let id = TaskId::new(self.id);
        let stored = std::mem::take(&mut self.status);
        let checked = checked_row(id, self.headers, &stored, self.attempts, self.released);
        let (headers, status) = match checked {
            Ok(checked) => checked,
            Err(error) => return Err(UnreadableRow::new(id, stored, &error)),
        };
        let mut task = Task::new(self.kind, self.version, self.payload).headers(headers);
        task.ordering_key = self.ordering_key;
        task.dedup_key = self.dedup_key;
        task.expires_at = self.expires_at;
        task.max_attempts = self.max_attempts;
        Ok(ClaimedTask {
            id,
            task,
            status,
            attempts: self.attempts,
            released: self.released,
            created_at: self.created_at,
            claimed_at: self.updated_at,
        })
    }
}

impl TryFrom<StoredClaim> for ClaimedTask {
    type Error = Error;

    /// Fails with [`Error::Corrupt`] where [`StoredClaim::decode`] finds
    /// the row unreadable.
    fn try_from(row: StoredClaim) -> Result<Self, Error> {
        row.decode().map_err(Error::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Lease, StoredRow};

    fn claim(status: &str, headers: serde_json::Value) -> StoredClaim {
        let at = DateTime::<Utc>::UNIX_EPOCH;
        StoredClaim {
            id: 7,
            kind: "k".into(),
            version: 2,
            payload: b"{}".to_vec(),
            headers,
            ordering_key: Some("key".into()),
            dedup_key: Some("dedup".into()),
            status: status.into(),
            attempts: 3,
            released: 1,
            max_attempts: Some(5),
            expires_at: Some(at + chrono::Duration::days(1)),
            created_at: at,
            updated_at: at + chrono::Duration::seconds(1),
        }
    }

    #[test]
    fn a_claim_reads_as_the_record_read_after_it() {
        let claimed = claim("running", serde_json::json!({"traceparent": "00-a-b-01"}))
            .decode()
            .expect("a readable claim");
        let stored = StoredRow {
            id: 7,
            kind: "k".into(),
            version: 2,
            payload: b"{}".to_vec(),
            headers: serde_json::json!({"traceparent": "00-a-b-01"}),
            ordering_key: Some("key".into()),
            dedup_key: Some("dedup".into()),
            status: "running".into(),
            attempts: 3,
            released: 1,
            max_attempts: Some(5),
            next_attempt_at: DateTime::<Utc>::UNIX_EPOCH,
            lease_owner: Some("w".into()),
            lease_expires_at: Some(DateTime::<Utc>::UNIX_EPOCH),
            expires_at: claimed.task.expires_at,
            last_error: "earlier".into(),
            created_at: claimed.created_at,
            updated_at: claimed.claimed_at,
            finished_at: None,
        };
        let record = stored.decode().expect("a readable row");
        assert_eq!(
            record.lease,
            Some(Lease {
                owner: "w".into(),
                expires_at: DateTime::<Utc>::UNIX_EPOCH
            })
        );
        assert_eq!(ClaimedTask::from(record), claimed);
        assert_eq!(claimed.runs(), 2);
    }

    #[test]
    fn a_claim_that_cannot_be_read_names_its_column_as_a_row_does() {
        let unknown = claim("Running ", serde_json::json!({}))
            .decode()
            .expect_err("unknown status");
        assert_eq!(
            (unknown.id, unknown.status.as_str(), unknown.field),
            (TaskId::new(7), "Running ", "status")
        );
        let both = claim("Running ", serde_json::json!({"a": 1}))
            .decode()
            .expect_err("bad headers and an unknown status");
        assert_eq!((both.status.as_str(), both.field), ("Running ", "headers"));
        let mut released = claim("running", serde_json::json!({}));
        released.released = 4;
        let error = ClaimedTask::try_from(released).expect_err("released above attempts");
        assert!(
            matches!(
                error,
                Error::Corrupt {
                    field: "released",
                    ..
                }
            ),
            "{error:?}"
        );
    }
}
