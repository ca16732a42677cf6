//! Reading a row of `outbox_tasks` into a [`Record`].

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use outbox_core::{Error, Headers, Lease, Record, Result, Status, Task, TaskId};

use crate::schema::outbox_tasks;

/// One row, as selected or returned by the store's statements.
#[derive(Debug, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = outbox_tasks, check_for_backend(diesel::pg::Pg))]
pub(crate) struct TaskRow {
    id: i64,
    kind: String,
    version: i32,
    payload: Vec<u8>,
    headers: serde_json::Value,
    ordering_key: Option<String>,
    dedup_key: Option<String>,
    status: String,
    attempts: i64,
    max_attempts: Option<i32>,
    next_attempt_at: DateTime<Utc>,
    lease_owner: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
    expires_at: Option<DateTime<Utc>>,
    last_error: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
}

impl TryFrom<TaskRow> for Record {
    type Error = Error;

    fn try_from(row: TaskRow) -> Result<Self> {
        let id = TaskId::new(row.id);
        let corrupt = |field, reason: String| Error::Corrupt { id, field, reason };
        let headers: Headers =
            serde_json::from_value(row.headers).map_err(|e| corrupt("headers", e.to_string()))?;
        let status: Status = row
            .status
            .parse()
            .map_err(|e: outbox_core::UnknownStatus| corrupt("status", e.to_string()))?;
        let mut task = Task::new(row.kind, row.version, row.payload).headers(headers);
        task.ordering_key = row.ordering_key;
        task.dedup_key = row.dedup_key;
        task.expires_at = row.expires_at;
        task.max_attempts = row.max_attempts;
        let lease = match (row.lease_owner, row.lease_expires_at) {
            (Some(owner), Some(expires_at)) => Some(Lease { owner, expires_at }),
            _ => None,
        };
        Ok(Record {
            id,
            task,
            status,
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at,
            lease,
            last_error: row.last_error,
            created_at: row.created_at,
            updated_at: row.updated_at,
            finished_at: row.finished_at,
        })
    }
}
