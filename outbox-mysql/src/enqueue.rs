//! `enqueue` and `enqueue_many`: inserts inside the caller's transaction.
//!
//! MySQL has no `RETURNING`, so ids come from `LAST_INSERT_ID()` on the same
//! connection. A held `dedup_key` is resolved in the same statement:
//! `ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)` makes `LAST_INSERT_ID()`
//! answer the existing row's id and changes nothing in that row.

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
    CachedQuery, PreparedOnce, cached, mysql_error, optional_fields, require_transaction, uncached,
};

use crate::{keys, timestamp};

/// A validated task with its values in column form.
struct Row {
    task: Task,
    headers: String,
    not_before: Option<NaiveDateTime>,
    expires_at: Option<NaiveDateTime>,
    /// Whether the task heads its ordering key (always, without a key).
    head: bool,
}

fn prepare(task: Task) -> Result<Row> {
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
        head: true,
    })
}

const COLUMNS: &str = "INSERT INTO outbox_tasks (kind, version, payload, headers, ordering_key, \
    dedup_key, max_attempts, next_attempt_at, expires_at, status, last_error, created_at, \
    updated_at) VALUES ";

/// Which optional values a row binds, and whether it heads its ordering
/// key: rows of one shape have the same `VALUES` tuple ([`values`]).
type Shape = ([bool; 6], bool);

fn shape(row: &Row) -> Shape {
    (optional_fields(&row.task), row.head)
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
fn values(sql: &mut String, row: &Row) {
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
    sql.push_str(match (row.head, row.not_before.is_some()) {
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
    cached(
        "SELECT LAST_INSERT_ID() AS first, \
         CAST(@@SESSION.auto_increment_increment AS SIGNED) AS step",
    )
    .get_result::<InsertedIds>(conn)
    .await
    .map_err(mysql_error)
}

/// The `VALUES` tuple of each row of a multi-row insert whose rows differ in
/// shape: every column bound (absent values as `NULL`), so the text depends
/// only on the length; [`bind_every`] makes its binds.
const BOUND_VALUES: &str = "(?, ?, ?, ?, ?, ?, ?, COALESCE(?, UTC_TIMESTAMP(6)), ?, \
    CASE WHEN ? THEN 'blocked' WHEN ? > UTC_TIMESTAMP(6) THEN 'waiting' ELSE 'available' END, \
    '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";

/// Binds `row` to the placeholders [`values`] wrote for it.
fn bind_shaped<'q>(mut query: CachedQuery<'q, Mysql>, row: &'q Row) -> CachedQuery<'q, Mysql> {
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
    if let (true, Some(at)) = (row.head, row.not_before) {
        query = query.bind::<Datetime, _>(at);
    }
    query
}

/// Binds `row` to the placeholders of [`BOUND_VALUES`]; the status is
/// `transition::enqueued`, with "due" on the database clock.
fn bind_every<'q>(query: CachedQuery<'q, Mysql>, row: &'q Row) -> CachedQuery<'q, Mysql> {
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
        .bind::<Bool, _>(!row.head)
        .bind::<Nullable<Datetime>, _>(row.not_before)
}

/// Inserts `rows` in one statement; returns where their ids are.
///
/// Rows of one shape repeat its `VALUES` tuple; rows of several shapes bind
/// every column ([`BOUND_VALUES`]). Either way the text depends only on the
/// length and the shared shape: a single row's statement is prepared once
/// per connection, a multi-row one when `inserts` chooses to keep it.
async fn insert(
    conn: &mut AsyncMysqlConnection,
    rows: &[Row],
    on_duplicate: bool,
    inserts: &PreparedOnce<InsertShape>,
) -> Result<InsertedIds> {
    let Some(first) = rows.first() else {
        return Err(Error::invalid("tasks", "an insert needs at least one row"));
    };
    // Only a row with a `dedup_key` resolves a duplicate, and such a row is
    // always inserted on its own: the suffix is never part of a multi-row
    // text, so the key below need not name it.
    debug_assert!(rows.len() == 1 || !on_duplicate);
    let shared = Some(shape(first)).filter(|first| rows.iter().all(|row| shape(row) == *first));
    let mut sql = String::from(COLUMNS);
    for i in 0..rows.len() {
        if i > 0 {
            sql.push_str(", ");
        }
        match shared {
            Some(_) => values(&mut sql, first),
            None => sql.push_str(BOUND_VALUES),
        }
    }
    if on_duplicate {
        sql.push_str(" ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)");
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
    let query = rows.iter().fold(query, bind);
    query.execute(conn).await.map_err(mysql_error)?;
    inserted_ids(conn).await
}

/// Inserts one task; a `dedup_key` already present returns the existing id.
pub(crate) async fn one(
    conn: &mut AsyncMysqlConnection,
    task: Task,
    inserts: &PreparedOnce<InsertShape>,
) -> Result<TaskId> {
    require_transaction(conn)?;
    let row = prepare(task)?;
    Ok(many_rows(conn, vec![row], false, inserts).await?.remove(0))
}

/// Inserts `tasks` in input order and returns their ids in that order.
///
/// Runs of tasks without a `dedup_key` go in one multi-row `INSERT` each when
/// the server hands a statement consecutive ids (`innodb_autoinc_lock_mode`
/// 0 or 1): a row's id is then the first id plus its position times the
/// session's `auto_increment_increment`. A task with a `dedup_key`, or any
/// task on a server with interleaved ids, is inserted on its own so its id
/// is known for certain.
pub(crate) async fn many(
    conn: &mut AsyncMysqlConnection,
    tasks: Vec<Task>,
    consecutive_ids: bool,
    inserts: &PreparedOnce<InsertShape>,
) -> Result<Vec<TaskId>> {
    require_transaction(conn)?;
    let rows = tasks.into_iter().map(prepare).collect::<Result<Vec<_>>>()?;
    many_rows(conn, rows, consecutive_ids, inserts).await
}

/// Inserts validated `rows` in order; see [`many`].
///
/// Tasks with an ordering key first lock their keys' counts
/// ([`keys::open`]); the first task of a key inserted while the key had no
/// open task heads it, the others are blocked. A task with both keys whose
/// `dedup_key` is already held inserts nothing, so it gives its count back
/// and leaves the head to the key's next task.
async fn many_rows(
    conn: &mut AsyncMysqlConnection,
    mut rows: Vec<Row>,
    consecutive_ids: bool,
    inserts: &PreparedOnce<InsertShape>,
) -> Result<Vec<TaskId>> {
    let counts = keys::tally(rows.iter().filter_map(|r| r.task.ordering_key.as_deref()));
    let mut open_before = keys::open(conn, &counts).await?;
    let mut ids = Vec::with_capacity(rows.len());
    let mut given_back: Vec<String> = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let end = run_end(&rows, start, consecutive_ids);
        if let [row] = &rows[start..end]
            && let (Some(key), Some(dedup)) = (&row.task.ordering_key, &row.task.dedup_key)
            && let Some(id) = held(conn, dedup).await?
        {
            given_back.push(key.clone());
            ids.push(id);
            start = end;
            continue;
        }
        for row in &mut rows[start..end] {
            if let Some(key) = &row.task.ordering_key {
                let before = open_before.entry(key.clone()).or_insert(0);
                row.head = *before == 0;
                // Every later task of the key comes after this one.
                *before += 1;
            }
        }
        let run = &rows[start..end];
        let dedup = run[0].task.dedup_key.is_some();
        let inserted = insert(conn, run, dedup, inserts).await?;
        for position in 0..run.len() {
            ids.push(inserted.at(position)?);
        }
        start = end;
    }
    keys::close(
        conn,
        &keys::tally(given_back.iter().map(String::as_str)),
        &|_| false,
    )
    .await?;
    Ok(ids)
}

#[derive(QueryableByName)]
struct Held {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// The id of the task holding `dedup_key`, read with a lock so a holder
/// committed meanwhile is seen, and one being inserted is waited for.
async fn held(conn: &mut AsyncMysqlConnection, dedup_key: &str) -> Result<Option<TaskId>> {
    let held: Option<Held> =
        diesel::sql_query("SELECT id FROM outbox_tasks WHERE dedup_key = ? LOCK IN SHARE MODE")
            .bind::<Text, _>(dedup_key)
            .get_result(conn)
            .await
            .optional()
            .map_err(mysql_error)?;
    Ok(held.map(|held| TaskId::new(held.id)))
}

/// Where the statement starting at `start` ends: one row for a keyed task,
/// or the longest run of keyless tasks within the size limits.
fn run_end(rows: &[Row], start: usize, consecutive_ids: bool) -> usize {
    if !consecutive_ids || rows[start].task.dedup_key.is_some() {
        return start + 1;
    }
    let mut end = start;
    let mut bytes = 0;
    while end < rows.len()
        && rows[end].task.dedup_key.is_none()
        && end - start < MAX_ROWS_PER_INSERT
        && (end == start || bytes + rows[end].task.payload.len() <= MAX_BYTES_PER_INSERT)
    {
        bytes += rows[end].task.payload.len();
        end += 1;
    }
    end
}
