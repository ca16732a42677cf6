//! Reading a row of `outbox_tasks` into a [`Record`].

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_outbox_core::{Error, Record, Result, StoredRow};

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
    released: i64,
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
        Record::try_from(StoredRow::from(row))
    }
}

impl From<TaskRow> for StoredRow {
    fn from(row: TaskRow) -> Self {
        StoredRow {
            id: row.id,
            kind: row.kind,
            version: row.version,
            payload: row.payload,
            headers: row.headers,
            ordering_key: row.ordering_key,
            dedup_key: row.dedup_key,
            status: row.status,
            attempts: row.attempts,
            released: row.released,
            max_attempts: row.max_attempts,
            next_attempt_at: row.next_attempt_at,
            lease_owner: row.lease_owner,
            lease_expires_at: row.lease_expires_at,
            expires_at: row.expires_at,
            last_error: row.last_error,
            created_at: row.created_at,
            updated_at: row.updated_at,
            finished_at: row.finished_at,
        }
    }
}
