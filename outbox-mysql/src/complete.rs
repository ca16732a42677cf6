//! Fenced completion writes: one statement for up to 2,000 results, and,
//! when a result lets an ordering key move on, the key's next task in the
//! same transaction.

use std::collections::HashSet;

use diesel::{
    QueryableByName,
    mysql::Mysql,
    sql_types::{BigInt, Bool, Text},
};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{
    Result, Status, TaskId,
    transition::{self, Completion},
};
use diesel_outbox_sql::{micros, mysql_error};

use crate::{
    keys,
    store_transaction::{Isolation, read_committed},
};

/// Writes `completions`; returns how many rows were still current and applied.
///
/// One `UPDATE` per [`MAX_PER_STATEMENT`] results, whose `WHERE` applies a
/// result only while `id`, `lease_owner` and `attempts` still match its claim
/// ([`diesel_outbox_core::transition::complete`] in SQL); `id IN (...)` with the
/// primary key forced keeps it there: left to itself, the optimizer may walk
/// the `(status, ...)` index's range of running rows instead, locking other
/// workers' rows on the way, and two concurrent writes then deadlock. Each value is picked by a searched `CASE` arm matching
/// `(id, attempts)`: `attempts` grows with every claim, so it tells the
/// claims of one task apart, and a batch holding a stale and a current result
/// for the same task applies the current one, whichever comes first. The `SET`
/// list evaluates left to right on the updated row, so no expression in it
/// reads a column assigned before it. diesel-async reports rows matched,
/// which here is exactly the rows whose fence held.
pub(crate) async fn write(
    conn: &mut AsyncMysqlConnection,
    completions: &[Completion],
    isolation: Isolation,
) -> Result<u64> {
    if !completions.iter().any(transition::moves_key_on) {
        return write_all(conn, completions).await;
    }
    read_committed(conn, isolation, async |conn| {
        // Lock the rows whose results will apply, so the keys moved on are
        // exactly those of results that applied (MySQL has no RETURNING).
        let finishing: Vec<&Completion> = completions
            .iter()
            .filter(|c| transition::moves_key_on(c))
            .collect();
        let current = current_fences(conn, &finishing).await?;
        let applied = write_all(conn, completions).await?;
        let finished = finishing
            .iter()
            .filter(|c| current.contains(&(c.fence.id.get(), c.fence.attempt)))
            .filter_map(|c| c.fence.ordering_key.as_deref());
        // A running task is always its key's head.
        keys::close(conn, &keys::tally(finished), &|_| true).await?;
        Ok(applied)
    })
    .await
}

/// Writes `completions` like [`write`]; returns the `(id, attempt)` of the
/// claims whose result was still current and applied. MySQL has no
/// `RETURNING`: the current claims are read and locked first, in the same
/// transaction, so they are exactly the ones the update applies.
pub(crate) async fn write_applied(
    conn: &mut AsyncMysqlConnection,
    completions: &[Completion],
    isolation: Isolation,
) -> Result<Vec<(TaskId, i64)>> {
    read_committed(conn, isolation, async |conn| {
        let all: Vec<&Completion> = completions.iter().collect();
        let current = current_fences(conn, &all).await?;
        write_all(conn, completions).await?;
        let finished = completions
            .iter()
            .filter(|c| transition::moves_key_on(c))
            .filter(|c| current.contains(&(c.fence.id.get(), c.fence.attempt)))
            .filter_map(|c| c.fence.ordering_key.as_deref());
        // A running task is always its key's head.
        keys::close(conn, &keys::tally(finished), &|_| true).await?;
        Ok(current
            .into_iter()
            .map(|(id, attempt)| (TaskId::new(id), attempt))
            .collect())
    })
    .await
}

async fn write_all(conn: &mut AsyncMysqlConnection, completions: &[Completion]) -> Result<u64> {
    let mut applied = 0;
    for chunk in completions.chunks(MAX_PER_STATEMENT) {
        applied += write_chunk(conn, chunk).await?;
    }
    Ok(applied)
}

#[derive(QueryableByName)]
struct Fenced {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
}

/// The `(id, attempts)` of `completions` whose claim is still current,
/// locked until the transaction ends.
async fn current_fences(
    conn: &mut AsyncMysqlConnection,
    completions: &[&Completion],
) -> Result<HashSet<(i64, i64)>> {
    let mut current = HashSet::new();
    for chunk in completions.chunks(MAX_PER_STATEMENT) {
        let sql = format!(
            "SELECT id, attempts FROM outbox_tasks FORCE INDEX (PRIMARY) \
             WHERE id IN ({ids}) AND status = 'running' \
               AND (id, attempts, lease_owner) IN ({fences}) FOR UPDATE",
            ids = placeholders("?", chunk.len()),
            fences = placeholders("(?, ?, ?)", chunk.len()),
        );
        let mut query = diesel::sql_query(sql).into_boxed::<Mysql>();
        for c in chunk {
            query = query.bind::<BigInt, _>(c.fence.id.get());
        }
        for c in chunk {
            query = bind_claim(query, c).bind::<Text, _>(&c.fence.owner);
        }
        let rows: Vec<Fenced> = query.load(conn).await.map_err(mysql_error)?;
        current.extend(rows.into_iter().map(|row| (row.id, row.attempts)));
    }
    Ok(current)
}

/// Completions per statement. A prepared statement takes at most 65,535
/// placeholders and a completion needs up to 18. A stale and a current result
/// for one task may land in different statements: the stale one matches no
/// row in either, so splitting changes nothing but the statement count.
const MAX_PER_STATEMENT: usize = 2_000;

async fn write_chunk(conn: &mut AsyncMysqlConnection, completions: &[Completion]) -> Result<u64> {
    let Some(first) = completions.first() else {
        return Ok(0);
    };
    let owner = &first.fence.owner;
    if completions
        .iter()
        .all(|c| c.status == Status::Succeeded && &c.fence.owner == owner)
    {
        return succeed(conn, owner, completions).await;
    }
    let retrying: Vec<&Completion> = completions
        .iter()
        .filter(|c| c.retry_in.is_some())
        .collect();
    let with_error: Vec<&Completion> = completions
        .iter()
        .filter(|c| c.last_error.is_some())
        .collect();
    let released: Vec<&Completion> = completions.iter().filter(|c| c.released).collect();
    let arms = |n: usize| "WHEN id = ? AND attempts = ? THEN ? ".repeat(n);
    let sql = format!(
        "UPDATE outbox_tasks FORCE INDEX (PRIMARY) SET \
           status = CASE {status} END, \
           next_attempt_at = {retry}, \
           last_error = {error}, \
           released = {released}, \
           finished_at = CASE {finished} END, \
           lease_owner = NULL, lease_expires_at = NULL, updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({ids}) AND status = 'running' \
           AND (id, attempts, lease_owner) IN ({fences})",
        status = arms(completions.len()),
        retry = case_or(
            "next_attempt_at",
            "WHEN id = ? AND attempts = ? THEN UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND ",
            retrying.len()
        ),
        error = case_or("last_error", &arms(1), with_error.len()),
        released = case_or(
            "released",
            "WHEN id = ? AND attempts = ? THEN released + 1 ",
            released.len()
        ),
        finished = "WHEN id = ? AND attempts = ? THEN IF(?, UTC_TIMESTAMP(6), NULL) "
            .repeat(completions.len()),
        ids = placeholders("?", completions.len()),
        fences = placeholders("(?, ?, ?)", completions.len()),
    );
    let mut query = diesel::sql_query(sql).into_boxed::<Mysql>();
    for c in completions {
        query = bind_claim(query, c).bind::<Text, _>(c.status.as_str());
    }
    for c in &retrying {
        query = bind_claim(query, c).bind::<BigInt, _>(c.retry_in.map_or(0, micros));
    }
    for c in &with_error {
        query = bind_claim(query, c).bind::<Text, _>(c.last_error.as_deref().unwrap_or_default());
    }
    for c in &released {
        query = bind_claim(query, c);
    }
    for c in completions {
        query = bind_claim(query, c).bind::<Bool, _>(c.status.is_finished());
    }
    for c in completions {
        query = query.bind::<BigInt, _>(c.fence.id.get());
    }
    for c in completions {
        query = bind_claim(query, c).bind::<Text, _>(&c.fence.owner);
    }
    let applied = query.execute(conn).await.map_err(mysql_error)?;
    Ok(applied as u64)
}

type Query<'q> = diesel::query_builder::BoxedSqlQuery<'q, Mysql, diesel::query_builder::SqlQuery>;

/// Binds the `id = ? AND attempts = ?` of `c`'s claim.
fn bind_claim<'q>(query: Query<'q>, c: &Completion) -> Query<'q> {
    query
        .bind::<BigInt, _>(c.fence.id.get())
        .bind::<BigInt, _>(c.fence.attempt)
}

/// `CASE <arm × n> ELSE column END`, or just `column` when there is no arm.
fn case_or(column: &str, arm: &str, n: usize) -> String {
    if n == 0 {
        column.to_owned()
    } else {
        format!("CASE {} ELSE {column} END", arm.repeat(n))
    }
}

/// `one` `n` times, comma-separated.
fn placeholders(one: &str, n: usize) -> String {
    vec![one; n].join(", ")
}

/// The common case, all succeeded for one owner: only the fence varies by row.
async fn succeed(
    conn: &mut AsyncMysqlConnection,
    owner: &str,
    completions: &[Completion],
) -> Result<u64> {
    let sql = format!(
        "UPDATE outbox_tasks FORCE INDEX (PRIMARY) SET status = 'succeeded', last_error = '', \
           finished_at = UTC_TIMESTAMP(6), lease_owner = NULL, lease_expires_at = NULL, \
           updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({ids}) AND status = 'running' AND lease_owner = ? \
           AND (id, attempts) IN ({fences})",
        ids = placeholders("?", completions.len()),
        fences = placeholders("(?, ?)", completions.len()),
    );
    let mut query = diesel::sql_query(sql).into_boxed::<Mysql>();
    for c in completions {
        query = query.bind::<BigInt, _>(c.fence.id.get());
    }
    query = query.bind::<Text, _>(owner);
    for c in completions {
        query = bind_claim(query, c);
    }
    let applied = query.execute(conn).await.map_err(mysql_error)?;
    Ok(applied as u64)
}
