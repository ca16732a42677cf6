//! Fenced completion writes: one statement for up to 2,000 results, and,
//! when a result lets an ordering key move on, the key's next task in the
//! same transaction.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use diesel::{
    QueryableByName,
    sql_types::{BigInt, Nullable, Text},
    sqlite::Sqlite,
};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{
    Result, Status, TaskId,
    transition::{self, Completion},
};
use diesel_outbox_sql::sqlite_error;

use crate::{
    AsyncSqliteConnection, keys,
    store_transaction::write as write_transaction,
    timestamp::{self, to_column, to_micros},
};

/// Writes `completions`; returns how many were still current and applied.
///
/// Without a result that lets an ordering key move on, each statement
/// stands alone (no transaction around it). With one, the statements and the
/// key's move run in one `BEGIN IMMEDIATE` transaction, so a key's next task
/// goes exactly when its head's success commits.
pub(crate) async fn write(
    conn: &mut AsyncSqliteConnection,
    completions: &[Completion],
) -> Result<u64> {
    Ok(write_applied(conn, completions).await?.len() as u64)
}

/// Writes `completions` like [`write`]; returns the `(id, attempt)` of the
/// claims whose result was still current and applied.
pub(crate) async fn write_applied(
    conn: &mut AsyncSqliteConnection,
    completions: &[Completion],
) -> Result<Vec<(TaskId, i64)>> {
    if !completions.iter().any(transition::moves_key_on) {
        return apply(conn, completions, timestamp::now()).await;
    }
    write_transaction(conn, async |conn| {
        apply(conn, completions, timestamp::now()).await
    })
    .await
}

/// Applies `completions` as of `now` ([`transition::complete`] in SQL), then
/// moves the keys of the results that applied and let their key move on;
/// inside a write transaction when any may.
async fn apply(
    conn: &mut AsyncSqliteConnection,
    completions: &[Completion],
    now: DateTime<Utc>,
) -> Result<Vec<(TaskId, i64)>> {
    let mut applied = HashSet::new();
    for chunk in completions.chunks(MAX_PER_STATEMENT) {
        applied.extend(update(conn, chunk, now).await?);
    }
    let finished = completions
        .iter()
        .filter(|c| transition::moves_key_on(c))
        .filter(|c| applied.contains(&(c.fence.id.get(), c.fence.attempt)))
        .filter_map(|c| c.fence.ordering_key.as_deref());
    // A running task is always its key's head.
    keys::close(conn, &keys::tally(finished), &|_| true, now).await?;
    Ok(applied
        .into_iter()
        .map(|(id, attempt)| (TaskId::new(id), attempt))
        .collect())
}

/// Completions per statement: 8 values each, well inside SQLite's limit of
/// 32,766 parameters. A stale and a current result for one task may land in
/// different statements: the stale one matches no row in either.
const MAX_PER_STATEMENT: usize = 2_000;

#[derive(QueryableByName)]
struct Applied {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
}

/// The results as a table `c`, joined to their rows on the primary key;
/// each applies only while `id`, `lease_owner` and `attempts` still match
/// its claim and the task is running. SQLite evaluates every `SET`
/// expression on the row as it was. `?NOW` becomes the number of the last
/// parameter, bound after the results' values.
const UPDATE: &str = "\
UPDATE outbox_tasks SET
    status = c.status,
    next_attempt_at = COALESCE(c.next_attempt_at, outbox_tasks.next_attempt_at),
    last_error = COALESCE(c.last_error, outbox_tasks.last_error),
    released = outbox_tasks.released + c.released,
    finished_at = c.finished_at,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = ?NOW
FROM c
WHERE outbox_tasks.id = c.id AND outbox_tasks.lease_owner = c.owner
  AND outbox_tasks.attempts = c.attempt AND outbox_tasks.status = 'running'
RETURNING outbox_tasks.id, outbox_tasks.attempts";

/// The common case, all succeeded for one owner: only the fence varies by
/// row, `?1` the time, then `(id, attempts)` pairs, then the owner.
pub(crate) fn succeed_sql(n: usize) -> String {
    format!(
        "UPDATE outbox_tasks SET status = 'succeeded', last_error = '', finished_at = ?1, \
         updated_at = ?1, lease_owner = NULL, lease_expires_at = NULL \
         WHERE (id, attempts) IN (VALUES {}) AND lease_owner = ?{} AND status = 'running' \
         RETURNING id, attempts",
        vec!["(?, ?)"; n].join(", "),
        2 * n + 2
    )
}

async fn succeed(
    conn: &mut AsyncSqliteConnection,
    owner: &str,
    completions: &[Completion],
    now: DateTime<Utc>,
) -> Result<Vec<(i64, i64)>> {
    let mut query = diesel::sql_query(succeed_sql(completions.len()))
        .into_boxed::<Sqlite>()
        .bind::<BigInt, _>(to_micros(now));
    for c in completions {
        query = query
            .bind::<BigInt, _>(c.fence.id.get())
            .bind::<BigInt, _>(c.fence.attempt);
    }
    let rows: Vec<Applied> = query
        .bind::<Text, _>(owner)
        .load(conn)
        .await
        .map_err(sqlite_error)?;
    Ok(rows.into_iter().map(|row| (row.id, row.attempts)).collect())
}

/// Values bound per result.
const VALUES_PER_ROW: usize = 8;

/// The text of [`UPDATE`] for `n` results: their values first, `?` each,
/// then the time, numbered after them.
pub(crate) fn update_sql(n: usize) -> String {
    let now_param = format!("?{}", n * VALUES_PER_ROW + 1);
    format!(
        "WITH c (id, owner, attempt, status, next_attempt_at, last_error, released, \
         finished_at) AS (VALUES {}) {}",
        vec!["(?, ?, ?, ?, ?, ?, ?, ?)"; n].join(", "),
        UPDATE.replace("?NOW", &now_param)
    )
}

/// The fenced update of one chunk; returns the `(id, attempts)` of the
/// claims whose result applied.
async fn update(
    conn: &mut AsyncSqliteConnection,
    completions: &[Completion],
    now: DateTime<Utc>,
) -> Result<Vec<(i64, i64)>> {
    let Some(first) = completions.first() else {
        return Ok(Vec::new());
    };
    let owner = &first.fence.owner;
    if completions
        .iter()
        .all(|c| c.status == Status::Succeeded && &c.fence.owner == owner)
    {
        return succeed(conn, owner, completions, now).await;
    }
    let sql = update_sql(completions.len());
    let mut query = diesel::sql_query(sql).into_boxed::<Sqlite>();
    for c in completions {
        // A retry past the column's range is refused here, naming the
        // field, before anything is written; the worker then records the
        // task failed with the reason.
        let next_attempt_at = c
            .retry_in
            .map(|delay| to_column("next_attempt_at", transition::after(now, delay)))
            .transpose()?;
        let finished_at = c.status.is_finished().then(|| to_micros(now));
        query = query
            .bind::<BigInt, _>(c.fence.id.get())
            .bind::<Text, _>(&c.fence.owner)
            .bind::<BigInt, _>(c.fence.attempt)
            .bind::<Text, _>(c.status.as_str())
            .bind::<Nullable<BigInt>, _>(next_attempt_at)
            .bind::<Nullable<Text>, _>(c.last_error.as_deref())
            .bind::<BigInt, _>(i64::from(c.released))
            .bind::<Nullable<BigInt>, _>(finished_at);
    }
    let rows: Vec<Applied> = query
        .bind::<BigInt, _>(to_micros(now))
        .load(conn)
        .await
        .map_err(sqlite_error)?;
    Ok(rows.into_iter().map(|row| (row.id, row.attempts)).collect())
}
