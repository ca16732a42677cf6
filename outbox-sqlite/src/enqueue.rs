//! `enqueue` and `enqueue_many`: inserts inside the caller's transaction.
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
    PreparedOnce, cached, optional_fields, require_transaction, sqlite_error, uncached,
};

use crate::{
    AsyncSqliteConnection, keys,
    timestamp::{self, to_column_opt, to_micros},
};

/// A validated task with its headers as JSON text and its instants in
/// column form.
struct Row {
    task: Task,
    headers: String,
    not_before: Option<i64>,
    expires_at: Option<i64>,
    /// Whether the task heads its ordering key (always, without a key).
    head: bool,
}

fn prepare(task: Task) -> Result<Row> {
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
        head: true,
    })
}

const COLUMNS: &str = "INSERT INTO outbox_tasks (created_at, updated_at, kind, version, \
    payload, headers, ordering_key, dedup_key, max_attempts, next_attempt_at, expires_at, \
    status, last_error) VALUES ";

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
fn status(row: &Row, now: DateTime<Utc>) -> Status {
    let due = row.task.not_before.is_none_or(|at| at <= now);
    transition::enqueued(row.head, due)
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
pub(crate) type Shape = ([bool; 6], Status);

fn shape(row: &Row, now: DateTime<Utc>) -> Shape {
    (optional_fields(&row.task), status(row, now))
}

/// Multi-row inserts a store prepares once: by length and shared shape.
pub(crate) type Inserts = PreparedOnce<(usize, Shape)>;

/// Inserts `rows` in one statement as of `now`; returns the ids of the rows
/// inserted, in input order. With `on_duplicate`, a row whose `dedup_key` is
/// held inserts nothing (and comes back as no id).
async fn insert(
    conn: &mut AsyncSqliteConnection,
    rows: &[Row],
    now: DateTime<Utc>,
    on_duplicate: bool,
    inserts: &Inserts,
) -> Result<Vec<TaskId>> {
    let mut sql = String::from(COLUMNS);
    let mut next = 2;
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        values(&mut sql, row, status(row, now), &mut next);
    }
    if on_duplicate {
        sql.push_str(" ON CONFLICT (dedup_key) DO NOTHING");
    }
    sql.push_str(" RETURNING id");
    // One row takes one of a few shapes, each prepared once per connection.
    // Rows that share a shape repeat it, so that text depends only on the
    // length: prepared once for the lengths `inserts` chooses. The text of
    // rows that differ follows their every mix, so it is parsed per call.
    let shared = rows
        .first()
        .map(|first| shape(first, now))
        .filter(|first| rows.iter().all(|row| shape(row, now) == *first));
    let query = match shared {
        Some(_) if rows.len() == 1 => cached::<Sqlite>(&sql),
        Some(shared) if inserts.choose((rows.len(), shared)) => cached::<Sqlite>(&sql),
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

/// Inserts one task; a `dedup_key` already present returns the existing id.
pub(crate) async fn one(
    conn: &mut AsyncSqliteConnection,
    task: Task,
    inserts: &Inserts,
) -> Result<TaskId> {
    require_transaction(conn)?;
    let row = prepare(task)?;
    many_rows(conn, vec![row], inserts)
        .await?
        .pop()
        .ok_or_else(|| Error::database("enqueue returned no id"))
}

/// Inserts `tasks` in input order and returns their ids in that order.
pub(crate) async fn many(
    conn: &mut AsyncSqliteConnection,
    tasks: Vec<Task>,
    inserts: &Inserts,
) -> Result<Vec<TaskId>> {
    require_transaction(conn)?;
    let rows = tasks.into_iter().map(prepare).collect::<Result<Vec<_>>>()?;
    many_rows(conn, rows, inserts).await
}

/// Inserts validated `rows` in order: runs of tasks without a `dedup_key` in
/// one statement each, a task with one on its own so a held key resolves to
/// the holder's id.
///
/// Tasks with an ordering key first add to their keys' counts
/// ([`keys::open`]); the first task of a key inserted while the key had no
/// open task heads it, the others are blocked. A task whose `dedup_key` is
/// already held inserts nothing, so it gives its count back and leaves the
/// head to the key's next task.
async fn many_rows(
    conn: &mut AsyncSqliteConnection,
    mut rows: Vec<Row>,
    inserts: &Inserts,
) -> Result<Vec<TaskId>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let counts = keys::tally(rows.iter().filter_map(|r| r.task.ordering_key.as_deref()));
    let mut open_before = keys::open(conn, &counts).await?;
    let now = timestamp::now();
    let mut ids = Vec::with_capacity(rows.len());
    let mut given_back: Vec<String> = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let end = run_end(&rows, start);
        let mut heads_taken = Vec::new();
        for row in &mut rows[start..end] {
            if let Some(key) = &row.task.ordering_key {
                let before = open_before.entry(key.clone()).or_insert(0);
                row.head = *before == 0;
                // Every later task of the key comes after this one.
                *before += 1;
                heads_taken.push(key.clone());
            }
        }
        let run = &rows[start..end];
        match &run[0].task.dedup_key {
            None => {
                let inserted = insert(conn, run, now, false, inserts).await?;
                if inserted.len() != run.len() {
                    return Err(Error::database(format!(
                        "inserted {} rows for {} tasks",
                        inserted.len(),
                        run.len()
                    )));
                }
                ids.extend(inserted);
            }
            Some(dedup) => match insert(conn, run, now, true, inserts).await?.pop() {
                Some(id) => ids.push(id),
                None => {
                    // Held: nothing inserted, so its place in the key goes
                    // back to the key's next task.
                    for key in heads_taken {
                        if let Some(before) = open_before.get_mut(&key) {
                            *before -= 1;
                        }
                        given_back.push(key);
                    }
                    ids.push(held(conn, dedup).await?);
                }
            },
        }
        start = end;
    }
    keys::close(
        conn,
        &keys::tally(given_back.iter().map(String::as_str)),
        &|_| false,
        now,
    )
    .await?;
    Ok(ids)
}

/// The id of the task holding `dedup_key`: it is committed, since this
/// transaction holds the write lock and its own insert just met it.
async fn held(conn: &mut AsyncSqliteConnection, dedup_key: &str) -> Result<TaskId> {
    let held: Option<Id> = cached::<Sqlite>("SELECT id FROM outbox_tasks WHERE dedup_key = $1")
        .bind::<Text, _>(dedup_key)
        .get_result(conn)
        .await
        .optional()
        .map_err(sqlite_error)?;
    held.map(|held| TaskId::new(held.id))
        .ok_or_else(|| Error::database("a dedup_key conflicted with no row"))
}

/// Where the statement starting at `start` ends: one row for a task with a
/// `dedup_key`, or the longest run of tasks without one.
fn run_end(rows: &[Row], start: usize) -> usize {
    if rows[start].task.dedup_key.is_some() {
        return start + 1;
    }
    let mut end = start;
    while end < rows.len()
        && rows[end].task.dedup_key.is_none()
        && end - start < MAX_ROWS_PER_INSERT
    {
        end += 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use diesel_outbox_core::Status;

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
