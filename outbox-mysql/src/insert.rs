//! Inserts into `outbox_tasks`: the MySQL dialect's `insert`.
//!
//! MySQL has no `RETURNING`, so ids come from `LAST_INSERT_ID()` on the same
//! connection. A held `dedup_key` is resolved in the same statement
//! (`ON_DUPLICATE`).

use chrono::NaiveDateTime;
use diesel::OptionalExtension;
use diesel::{
    QueryableByName,
    mysql::Mysql,
    sql_types::{BigInt, Blob, Bool, Datetime, Integer, Nullable, Text},
};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{Error, Result, Task, TaskId};
use diesel_outbox_sql::{
    CachedQuery, Inserted, Names, PreparedOnce, cached, mysql_error, optional_fields, rows::Id,
    uncached,
};

use crate::{statements, timestamp};

/// A validated task with its values in column form.
#[derive(Debug)]
pub struct Row {
    pub(crate) task: Task,
    headers: String,
    not_before: Option<NaiveDateTime>,
    expires_at: Option<NaiveDateTime>,
}

/// Checks `task` and puts it in column form.
pub(crate) fn prepare(task: Task) -> Result<Row> {
    task.validate()?;
    let expires_at = timestamp::to_column_opt("expires_at", task.expires_at)?;
    let not_before = timestamp::to_column_opt("not_before", task.not_before)?;
    let headers = serde_json::to_string(&task.headers)
        .map_err(|e| Error::invalid("headers", e.to_string()))?;
    Ok(Row {
        task,
        headers,
        not_before,
        expires_at,
    })
}

/// Which optional values a row binds, and whether it heads its ordering
/// key: rows of one shape have the same `VALUES` tuple ([`values`]).
type Shape = ([bool; 6], bool);

fn shape((row, head): (&Row, bool)) -> Shape {
    (optional_fields(&row.task), head)
}

/// What a multi-row insert's text depends on: its length, and the shape its
/// rows share (`None` for rows of several shapes, which bind every column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InsertShape {
    rows: usize,
    shared: Option<Shape>,
}

/// `?` for a value to bind, `absent` when there is none: absent values are
/// written as literals so a typical row binds 3 values, not 9.
fn slot(present: bool, absent: &'static str) -> &'static str {
    if present { "?" } else { absent }
}

/// The `VALUES` tuple of `row`, in one of a few shapes: the whole text of a
/// one-row insert, repeated for rows that share the shape; [`bind_shaped`]
/// makes its binds.
fn values(sql: &mut String, row: &Row, head: bool) {
    let task = &row.task;
    sql.push_str("(?, ?, ?, ");
    sql.push_str(slot(!task.headers.is_empty(), "'{}'"));
    for (present, absent) in [
        (task.ordering_key.is_some(), "NULL"),
        (task.dedup_key.is_some(), "NULL"),
        (task.max_attempts.is_some(), "NULL"),
        (row.not_before.is_some(), "UTC_TIMESTAMP(6)"),
        (row.expires_at.is_some(), "NULL"),
    ] {
        sql.push_str(", ");
        sql.push_str(slot(present, absent));
    }
    // transition::enqueued, with "due" on the database clock.
    sql.push_str(match (head, row.not_before.is_some()) {
        (false, _) => ", 'blocked'",
        (true, false) => ", 'available'",
        (true, true) => ", IF(? > UTC_TIMESTAMP(6), 'waiting', 'available')",
    });
    sql.push_str(", '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))");
}

/// Rows per multi-row `INSERT`, and payload bytes per statement, so a batch
/// stays well inside the server's `max_allowed_packet` (16 MiB by default).
const MAX_ROWS_PER_INSERT: usize = 500;
const MAX_BYTES_PER_INSERT: usize = 4 * 1024 * 1024;

/// Where the ids of the last `INSERT` on this connection start, and how far
/// apart they are.
#[derive(QueryableByName)]
struct InsertedIds {
    /// `LAST_INSERT_ID()`: the first row's id.
    #[diesel(sql_type = BigInt)]
    first: i64,
    /// The session's `auto_increment_increment`: the gap between the ids of
    /// one statement's rows (more than 1 on Galera and other multi-primary
    /// setups, and wherever a session sets it).
    #[diesel(sql_type = BigInt)]
    step: i64,
}

impl InsertedIds {
    /// The id of the row at `position` in the statement.
    fn at(&self, position: usize) -> Result<TaskId> {
        i64::try_from(position)
            .ok()
            .and_then(|position| position.checked_mul(self.step))
            .and_then(|offset| self.first.checked_add(offset))
            .map(TaskId::new)
            .ok_or_else(|| Error::database("inserted ids past the largest BIGINT"))
    }
}

/// Reads both in one round trip, right after the `INSERT` on its connection.
async fn inserted_ids(conn: &mut AsyncMysqlConnection) -> Result<InsertedIds> {
    cached(statements::INSERTED_IDS)
        .get_result::<InsertedIds>(conn)
        .await
        .map_err(mysql_error)
}

/// Binds `row` to the placeholders [`values`] wrote for it.
fn bind_shaped<'q>(
    mut query: CachedQuery<'q, Mysql>,
    (row, head): (&'q Row, bool),
) -> CachedQuery<'q, Mysql> {
    let task = &row.task;
    query = query
        .bind::<Text, _>(&task.kind)
        .bind::<Integer, _>(task.version)
        .bind::<Blob, _>(&task.payload);
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
        query = query.bind::<Datetime, _>(at);
    }
    if let Some(at) = row.expires_at {
        query = query.bind::<Datetime, _>(at);
    }
    if let (true, Some(at)) = (head, row.not_before) {
        query = query.bind::<Datetime, _>(at);
    }
    query
}

/// Binds `row` to the placeholders of `BOUND_VALUES`.
fn bind_every<'q>(
    query: CachedQuery<'q, Mysql>,
    (row, head): (&'q Row, bool),
) -> CachedQuery<'q, Mysql> {
    let task = &row.task;
    query
        .bind::<Text, _>(&task.kind)
        .bind::<Integer, _>(task.version)
        .bind::<Blob, _>(&task.payload)
        .bind::<Text, _>(&row.headers)
        .bind::<Nullable<Text>, _>(task.ordering_key.as_deref())
        .bind::<Nullable<Text>, _>(task.dedup_key.as_deref())
        .bind::<Nullable<Integer>, _>(task.max_attempts)
        .bind::<Nullable<Datetime>, _>(row.not_before)
        .bind::<Nullable<Datetime>, _>(row.expires_at)
        .bind::<Bool, _>(!head)
        .bind::<Nullable<Datetime>, _>(row.not_before)
}

/// Inserts `rows` in one statement; returns where their ids are.
///
/// Rows of one shape repeat its `VALUES` tuple; rows of several shapes bind
/// every column (`BOUND_VALUES`). Either way the
/// text depends only on the length and the shared shape: a single row's
/// statement is prepared once per connection, a multi-row one when
/// `inserts` chooses to keep it.
async fn statement(
    conn: &mut AsyncMysqlConnection,
    names: &Names,
    rows: &[Row],
    heads: &[bool],
    on_duplicate: bool,
    inserts: &PreparedOnce<InsertShape>,
) -> Result<InsertedIds> {
    let pairs = || rows.iter().zip(heads.iter().copied());
    let Some(first) = pairs().next() else {
        return Err(Error::invalid("tasks", "an insert needs at least one row"));
    };
    // Only a row with a `dedup_key` resolves a duplicate, and such a row is
    // always inserted on its own: the suffix is never part of a multi-row
    // text, so the key below need not name it.
    debug_assert!(rows.len() == 1 || !on_duplicate);
    let shared = Some(shape(first)).filter(|first| pairs().all(|pair| shape(pair) == *first));
    let mut sql = String::from(&*names.sql(statements::INSERT));
    for i in 0..rows.len() {
        if i > 0 {
            sql.push_str(", ");
        }
        match shared {
            Some(_) => values(&mut sql, first.0, first.1),
            None => sql.push_str(statements::BOUND_VALUES),
        }
    }
    if on_duplicate {
        sql.push_str(statements::ON_DUPLICATE);
    }
    let key = InsertShape {
        rows: rows.len(),
        shared,
    };
    let query = if rows.len() == 1 || inserts.choose(key) {
        cached(&sql)
    } else {
        uncached(&sql)
    };
    let bind = match shared {
        Some(_) => bind_shaped,
        None => bind_every,
    };
    let query = pairs().fold(query, bind);
    query.execute(conn).await.map_err(mysql_error)?;
    inserted_ids(conn).await
}

/// Inserts the first of `rows`, stored as `heads` says: runs of tasks
/// without a `dedup_key` in one multi-row `INSERT` each when the server
/// hands a statement consecutive ids (`consecutive_ids`:
/// `innodb_autoinc_lock_mode` 0 or 1), a row's id being the first id plus
/// its position times the session's `auto_increment_increment`. A task with
/// a `dedup_key`, or any task on a server with interleaved ids, goes on its
/// own so its id is known for certain; one that also has an ordering key
/// looks for the key's holder first, so a held key inserts nothing and
/// answers `Existing`. (Without an ordering key, a held `dedup_key` answers
/// the holder's id as `New`: the insert cannot tell, and such a task has no
/// count to give back.)
pub(crate) async fn insert(
    conn: &mut AsyncMysqlConnection,
    names: &Names,
    rows: &[Row],
    heads: &[bool],
    consecutive_ids: bool,
    inserts: &PreparedOnce<InsertShape>,
) -> Result<Vec<Inserted>> {
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    if let (Some(_), Some(dedup)) = (&first.task.ordering_key, &first.task.dedup_key)
        && let Some(id) = held(conn, names, dedup).await?
    {
        return Ok(vec![Inserted::Existing(id)]);
    }
    let end = run_end(rows, consecutive_ids);
    let dedup = first.task.dedup_key.is_some();
    let inserted = statement(conn, names, &rows[..end], &heads[..end], dedup, inserts).await?;
    (0..end)
        .map(|position| inserted.at(position).map(Inserted::New))
        .collect()
}

/// The id of the task holding `dedup_key`, read with a lock so a holder
/// committed meanwhile is seen, and one being inserted is waited for.
async fn held(
    conn: &mut AsyncMysqlConnection,
    names: &Names,
    dedup_key: &str,
) -> Result<Option<TaskId>> {
    let held: Option<Id> = cached(&names.sql(statements::HELD))
        .bind::<Text, _>(dedup_key)
        .get_result(conn)
        .await
        .optional()
        .map_err(mysql_error)?;
    Ok(held.map(|held| TaskId::new(held.id)))
}

/// Where the first statement of `rows` ends: one row for a task with a
/// `dedup_key`, or the longest run of tasks without one within the size
/// limits.
fn run_end(rows: &[Row], consecutive_ids: bool) -> usize {
    if !consecutive_ids || rows.first().is_some_and(|row| row.task.dedup_key.is_some()) {
        return 1;
    }
    let mut end = 0;
    let mut bytes = 0;
    while end < rows.len()
        && rows[end].task.dedup_key.is_none()
        && end < MAX_ROWS_PER_INSERT
        && (end == 0 || bytes + rows[end].task.payload.len() <= MAX_BYTES_PER_INSERT)
    {
        bytes += rows[end].task.payload.len();
        end += 1;
    }
    end
}
