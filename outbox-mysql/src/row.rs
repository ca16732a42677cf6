//! Reading a row of `outbox_tasks` into a [`Record`].

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_outbox_core::{Error, Record, Result, StoredRow, TaskId};

use crate::{schema::outbox_tasks, timestamp::from_column};

/// Every column of `outbox_tasks` (as `t`), in the order of [`TaskRow`]'s
/// fields and of [`outbox_tasks::SqlType`], for statements whose rows are
/// read by position.
macro_rules! task_columns {
    () => {
        "t.id, t.kind, t.version, t.payload, t.headers, t.ordering_key, t.dedup_key, \
         t.status, t.attempts, t.released, t.max_attempts, t.next_attempt_at, \
         t.lease_owner, t.lease_expires_at, t.expires_at, t.last_error, t.created_at, \
         t.updated_at, t.finished_at"
    };
}
pub(crate) use task_columns;

/// One row, as selected by the store's statements.
#[derive(Debug, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = outbox_tasks, check_for_backend(diesel::mysql::Mysql))]
pub(crate) struct TaskRow {
    pub(crate) id: i64,
    kind: String,
    version: i32,
    payload: Vec<u8>,
    headers: String,
    /// Raw bytes: the column takes any, and a key another program wrote
    /// that is not UTF-8 must fail its own row, not the whole claim.
    ordering_key: Option<Vec<u8>>,
    dedup_key: Option<Vec<u8>>,
    status: String,
    attempts: i64,
    released: i64,
    max_attempts: Option<i32>,
    next_attempt_at: NaiveDateTime,
    lease_owner: Option<String>,
    lease_expires_at: Option<NaiveDateTime>,
    expires_at: Option<NaiveDateTime>,
    last_error: String,
    created_at: NaiveDateTime,
    updated_at: NaiveDateTime,
    finished_at: Option<NaiveDateTime>,
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
        let ordering_key = key(row.id, "ordering_key", row.ordering_key)?;
        let dedup_key = key(row.id, "dedup_key", row.dedup_key)?;
        // Text that is not JSON becomes a JSON string, which the shared
        // decoding then reports as corrupt headers.
        let headers =
            serde_json::from_str(&row.headers).unwrap_or(serde_json::Value::String(row.headers));
        Ok(StoredRow {
            id: row.id,
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
            next_attempt_at: from_column(row.next_attempt_at),
            lease_owner: row.lease_owner,
            lease_expires_at: row.lease_expires_at.map(from_column),
            expires_at: row.expires_at.map(from_column),
            last_error: row.last_error,
            created_at: from_column(row.created_at),
            updated_at: from_column(row.updated_at),
            finished_at: row.finished_at.map(from_column),
        })
    }
}

#[cfg(test)]
mod tests {
    use diesel::{mysql::Mysql, prelude::*};
    use diesel_outbox_sql::{listed_columns, selected_columns};

    use super::TaskRow;
    use crate::schema::outbox_tasks;

    /// Rows read by position come back right only if the statement's column
    /// list, the table's column order and `TaskRow`'s field order agree.
    #[test]
    fn positional_columns_match_the_schema_and_the_row_fields() {
        let listed = listed_columns(task_columns!());
        let schema =
            selected_columns::<Mysql>(outbox_tasks::table.select(outbox_tasks::all_columns));
        let fields = selected_columns::<Mysql>(outbox_tasks::table.select(TaskRow::as_select()));
        assert_eq!(listed.len(), 19);
        assert_eq!(listed, schema);
        assert_eq!(listed, fields);
    }
}
