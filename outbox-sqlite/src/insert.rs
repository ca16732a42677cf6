//! Inserts into `outbox_tasks`: the SQLite dialect's `insert`.
//!
//! The first statement of every enqueue is a write (the key's count, or the
//! insert itself), so a deferred transaction that enqueues first takes
//! SQLite's write lock there, waiting under the busy timeout; from then on it
//! is the only writer until it commits.

use chrono::{DateTime, Utc};
use diesel::{
    OptionalExtension, QueryableByName,
    sql_types::{BigInt, Binary, Integer, Text},
    sqlite::Sqlite,
};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{Error, Result, Status, Task, TaskId, transition};
use diesel_outbox_sql::{
    Inserted, Names, PreparedOnce, cached, optional_fields, sqlite_error, uncached,
};

use crate::{
    AsyncSqliteConnection, statements,
    timestamp::{self, to_column_opt, to_micros},
};

/// A validated task with its headers as JSON text and its instants in
/// column form.
#[derive(Debug)]
pub struct Row {
    pub(crate) task: Task,
    headers: String,
    not_before: Option<i64>,
    expires_at: Option<i64>,
}

/// Checks `task` and puts it in column form.
pub(crate) fn prepare(task: Task) -> Result<Row> {
    task.validate()?;
    let not_before = to_column_opt("not_before", task.not_before)?;
    let expires_at = to_column_opt("expires_at", task.expires_at)?;
    let headers = serde_json::to_string(&task.headers)
        .map_err(|e| Error::invalid("headers", e.to_string()))?;
    Ok(Row {
        task,
        headers,
        not_before,
        expires_at,
    })
}

/// Rows per multi-row `INSERT`: at most 10 values each, far below SQLite's
/// limit of 32,766 parameters per statement.
const MAX_ROWS_PER_INSERT: usize = 500;

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// The status `row` is stored with: [`transition::enqueued`], with "due" on
/// the store's clock.
fn status(row: &Row, head: bool, now: DateTime<Utc>) -> Status {
    let due = row.task.not_before.is_none_or(|at| at <= now);
    transition::enqueued(head, due)
}

/// Writes the `VALUES` tuple of `row`: `$1` is the time, binds are numbered
/// from `next` on, and absent values and the status are literals, so a
/// typical row binds kind, version and payload only and a single-row
/// statement takes one of a few shapes.
fn values(sql: &mut String, row: &Row, status: Status, next: &mut usize) {
    let mut slot = |present: bool, absent: &str| {
        if present {
            *next += 1;
            format!("${}", *next - 1)
        } else {
            absent.to_owned()
        }
    };
    let task = &row.task;
    let fields = [
        slot(true, ""),
        slot(true, ""),
        slot(true, ""),
        slot(!task.headers.is_empty(), "'{}'"),
        slot(task.ordering_key.is_some(), "NULL"),
        slot(task.dedup_key.is_some(), "NULL"),
        slot(task.max_attempts.is_some(), "NULL"),
        slot(row.not_before.is_some(), "$1"),
        slot(row.expires_at.is_some(), "NULL"),
    ];
    sql.push_str("($1, $1, ");
    sql.push_str(&fields.join(", "));
    sql.push_str(&format!(", '{}', '')", status.as_str()));
}

/// Which optional values a row binds, and the status it is stored with:
/// rows of one shape have the same `VALUES` tuple ([`values`]) but for bind
/// numbers.
type Shape = ([bool; 6], Status);

/// Multi-row inserts a store prepares once: by length and shared shape.
pub(crate) type Inserts = PreparedOnce<(usize, Shape)>;

/// Inserts the first of `rows` (stored as `heads` says), in one statement:
/// a task with a `dedup_key` alone, so a held key resolves to its holder,
/// or the longest run of tasks without one.
pub(crate) async fn insert(
    conn: &mut AsyncSqliteConnection,
    names: &Names,
    rows: &[Row],
    heads: &[bool],
    inserts: &Inserts,
) -> Result<Vec<Inserted>> {
    let now = timestamp::now();
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let Some(dedup) = &first.task.dedup_key else {
        let end = rows
            .iter()
            .take(MAX_ROWS_PER_INSERT)
            .take_while(|row| row.task.dedup_key.is_none())
            .count();
        let ids = statement(
            conn,
            names,
            &rows[..end],
            &heads[..end],
            now,
            false,
            inserts,
        )
        .await?;
        if ids.len() != end {
            return Err(Error::database(format!(
                "inserted {} rows for {end} tasks",
                ids.len()
            )));
        }
        return Ok(ids.into_iter().map(Inserted::New).collect());
    };
    let inserted = statement(conn, names, &rows[..1], &heads[..1], now, true, inserts).await?;
    Ok(vec![match <[TaskId]>::first(&inserted) {
        Some(&id) => Inserted::New(id),
        None => Inserted::Existing(held(conn, names, dedup).await?),
    }])
}

/// Inserts `rows` in one statement as of `now`; returns the ids of the rows
/// inserted, in input order. With `on_duplicate`, a row whose `dedup_key` is
/// held inserts nothing (and comes back as no id).
async fn statement(
    conn: &mut AsyncSqliteConnection,
    names: &Names,
    rows: &[Row],
    heads: &[bool],
    now: DateTime<Utc>,
    on_duplicate: bool,
    inserts: &Inserts,
) -> Result<Vec<TaskId>> {
    let mut sql = String::from(&*names.sql(statements::INSERT));
    let mut next = 2;
    let shapes: Vec<Shape> = rows
        .iter()
        .zip(heads)
        .map(|(row, &head)| (optional_fields(&row.task), status(row, head, now)))
        .collect();
    for (i, (row, shape)) in rows.iter().zip(&shapes).enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        values(&mut sql, row, shape.1, &mut next);
    }
    if on_duplicate {
        sql.push_str(" ON CONFLICT (dedup_key) DO NOTHING");
    }
    sql.push_str(" RETURNING id");
    // One row takes one of a few shapes, each prepared once per connection.
    // Rows that share a shape repeat it, so that text depends only on the
    // length: prepared once for the lengths `inserts` chooses. The text of
    // rows that differ follows their every mix, so it is parsed per call.
    let shared =
        <[Shape]>::first(&shapes).filter(|first| shapes.iter().all(|shape| shape == *first));
    let query = match shared {
        Some(_) if rows.len() == 1 => cached::<Sqlite>(&sql),
        Some(&shared) if inserts.choose((rows.len(), shared)) => cached::<Sqlite>(&sql),
        _ => uncached::<Sqlite>(&sql),
    };
    let mut query = query.bind::<BigInt, _>(to_micros(now));
    for row in rows {
        let task = &row.task;
        query = query
            .bind::<Text, _>(&task.kind)
            .bind::<Integer, _>(task.version)
            .bind::<Binary, _>(&task.payload);
        if !task.headers.is_empty() {
            query = query.bind::<Text, _>(&row.headers);
        }
        if let Some(key) = &task.ordering_key {
            query = query.bind::<Text, _>(key);
        }
        if let Some(key) = &task.dedup_key {
            query = query.bind::<Text, _>(key);
        }
        if let Some(max) = task.max_attempts {
            query = query.bind::<Integer, _>(max);
        }
        if let Some(at) = row.not_before {
            query = query.bind::<BigInt, _>(at);
        }
        if let Some(at) = row.expires_at {
            query = query.bind::<BigInt, _>(at);
        }
    }
    let ids: Vec<Id> = query.load(conn).await.map_err(sqlite_error)?;
    // RETURNING comes in no particular order; the rows of one statement get
    // ascending ids in the order of the VALUES (AUTOINCREMENT, one writer).
    let mut ids: Vec<i64> = ids.into_iter().map(|row| row.id).collect();
    ids.sort_unstable();
    Ok(ids.into_iter().map(TaskId::new).collect())
}

/// The id of the task holding `dedup_key`.
async fn held(conn: &mut AsyncSqliteConnection, names: &Names, dedup_key: &str) -> Result<TaskId> {
    let held: Option<Id> = cached::<Sqlite>(&names.sql(statements::HELD))
        .bind::<Text, _>(dedup_key)
        .get_result(conn)
        .await
        .optional()
        .map_err(sqlite_error)?;
    held.map(|held| TaskId::new(held.id))
        .ok_or_else(|| Error::database("a dedup_key conflicted with no row"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(task: Task) -> Row {
        prepare(task).expect("a valid task")
    }

    #[test]
    fn a_typical_row_binds_kind_version_and_payload_only() {
        let (mut sql, mut next) = (String::new(), 2);
        values(
            &mut sql,
            &row(Task::new("k", 1, "{}")),
            Status::Available,
            &mut next,
        );
        assert_eq!(
            sql,
            "($1, $1, $2, $3, $4, '{}', NULL, NULL, NULL, $1, NULL, 'available', '')"
        );
        let full = Task::new("k", 1, "{}")
            .header("h", "v")
            .ordering_key("o")
            .dedup_key("d")
            .max_attempts(3)
            .not_before(chrono::DateTime::UNIX_EPOCH)
            .expires_at(chrono::DateTime::UNIX_EPOCH);
        sql.clear();
        values(&mut sql, &row(full), Status::Blocked, &mut next);
        assert_eq!(
            sql,
            "($1, $1, $5, $6, $7, $8, $9, $10, $11, $12, $13, 'blocked', '')"
        );
        assert_eq!(next, 14);
    }
}
