//! Reading a row of `outbox_tasks` into a [`Record`].

use diesel::prelude::*;
use diesel_outbox_core::{Error, Record, Result, StoredRow, TaskId};

use crate::{
    schema::outbox_tasks,
    timestamp::{column, column_opt},
};

/// One row, as selected or returned by the store's statements.
#[derive(Debug, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = outbox_tasks, check_for_backend(diesel::sqlite::Sqlite))]
pub(crate) struct TaskRow {
    pub(crate) id: i64,
    kind: String,
    version: i32,
    payload: Vec<u8>,
    headers: String,
    /// Raw bytes: a key another program wrote that is not UTF-8 must fail
    /// its own row, not the whole claim.
    ordering_key: Option<Vec<u8>>,
    dedup_key: Option<Vec<u8>>,
    status: String,
    pub(crate) attempts: i64,
    released: i64,
    max_attempts: Option<i32>,
    next_attempt_at: i64,
    lease_owner: Option<String>,
    lease_expires_at: Option<i64>,
    expires_at: Option<i64>,
    last_error: String,
    created_at: i64,
    updated_at: i64,
    finished_at: Option<i64>,
}

impl TaskRow {
    /// The row's ordering key, if it is UTF-8.
    pub(crate) fn ordering_key(&self) -> Option<String> {
        self.ordering_key
            .as_ref()
            .and_then(|key| String::from_utf8(key.clone()).ok())
    }
}

impl TryFrom<TaskRow> for Record {
    type Error = Error;

    fn try_from(row: TaskRow) -> Result<Self> {
        Record::try_from(StoredRow::try_from(row)?)
    }
}

/// A key column's bytes as text; [`Error::Corrupt`] naming it when they are
/// not UTF-8.
fn key(id: i64, field: &'static str, bytes: Option<Vec<u8>>) -> Result<Option<String>> {
    bytes
        .map(String::from_utf8)
        .transpose()
        .map_err(|e| Error::Corrupt {
            id: TaskId::new(id),
            field,
            reason: e.to_string(),
        })
}

impl TryFrom<TaskRow> for StoredRow {
    type Error = Error;

    fn try_from(row: TaskRow) -> Result<Self> {
        let id = row.id;
        let ordering_key = key(id, "ordering_key", row.ordering_key)?;
        let dedup_key = key(id, "dedup_key", row.dedup_key)?;
        // Text that is not JSON becomes a JSON string, which the shared
        // decoding then reports as corrupt headers.
        let headers =
            serde_json::from_str(&row.headers).unwrap_or(serde_json::Value::String(row.headers));
        Ok(StoredRow {
            id,
            kind: row.kind,
            version: row.version,
            payload: row.payload,
            headers,
            ordering_key,
            dedup_key,
            status: row.status,
            attempts: row.attempts,
            released: row.released,
            max_attempts: row.max_attempts,
            next_attempt_at: column(id, "next_attempt_at", row.next_attempt_at)?,
            lease_owner: row.lease_owner,
            lease_expires_at: column_opt(id, "lease_expires_at", row.lease_expires_at)?,
            expires_at: column_opt(id, "expires_at", row.expires_at)?,
            last_error: row.last_error,
            created_at: column(id, "created_at", row.created_at)?,
            updated_at: column(id, "updated_at", row.updated_at)?,
            finished_at: column_opt(id, "finished_at", row.finished_at)?,
        })
    }
}
