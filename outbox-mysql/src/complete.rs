//! Fenced completion writes: one statement for up to 2,000 results, and,
//! when a result lets an ordering key move on, the key's next task in the
//! same transaction.

use std::collections::HashSet;

use diesel::{
    QueryableByName,
    mysql::Mysql,
    sql_types::{BigInt, Text},
};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{
    Result, TaskId,
    transition::{self, Completion},
};
use diesel_outbox_sql::{cached, mysql_error};

use crate::{
    json_rows, keys,
    store_transaction::{Isolation, read_committed},
};

/// Writes `completions`; returns how many rows were still current and applied.
///
/// One [`COMPLETE_SQL`] per [`MAX_PER_STATEMENT`] results, the results sent
/// as one JSON document, so the statement is prepared once per connection.
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
    for document in json_rows::completions(completions, MAX_PER_STATEMENT) {
        let rows = cached::<Mysql>(COMPLETE_SQL)
            .bind::<Text, _>(document)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        applied += rows as u64;
    }
    Ok(applied)
}

/// Completions per statement: a bound on the statement's work and its JSON
/// (also bounded in bytes, see [`json_rows::completions`]). A stale and a
/// current result for one task may land in different statements: the stale
/// one matches no row in either, so splitting changes nothing but the
/// statement count.
const MAX_PER_STATEMENT: usize = 2_000;

/// The completions as `JSON_TABLE` rows (see [`json_rows::completions`]).
/// Listed first and joined outright, each reaches its row by primary key.
macro_rules! completions_table {
    () => {
        "JSON_TABLE(?, '$[*]' COLUMNS (\
           id BIGINT PATH '$.id', \
           attempts BIGINT PATH '$.attempts', \
           owner VARCHAR(255) CHARACTER SET utf8mb4 PATH '$.owner', \
           status VARCHAR(16) PATH '$.status', \
           finished INT PATH '$.finished', \
           released INT PATH '$.released', \
           retry_us BIGINT PATH '$.retry_us', \
           error LONGTEXT CHARACTER SET utf8mb4 PATH '$.error')) AS j \
         STRAIGHT_JOIN outbox_tasks t FORCE INDEX (PRIMARY) ON t.id = j.id "
    };
}

/// Applies each result only while `id`, `lease_owner` and `attempts` still
/// match its claim ([`diesel_outbox_core::transition::complete`] in SQL).
/// The rows are reached through the primary key from the JSON rows, in their
/// order: left to itself, the optimizer may walk the `(status, ...)` index's
/// range of running rows instead, locking other workers' rows on the way, and
/// two concurrent writes then deadlock. A batch holding a stale and a current
/// result for one task applies the current one, whichever comes first: the
/// stale row's `attempts` no longer matches. No `SET` expression reads a
/// column assigned before it. diesel-async reports rows matched, which here
/// is exactly the rows whose fence held (a row matched twice counts once).
const COMPLETE_SQL: &str = concat!(
    "UPDATE ",
    completions_table!(),
    "SET t.status = j.status, \
       t.next_attempt_at = IF(j.retry_us IS NULL, t.next_attempt_at, \
                              UTC_TIMESTAMP(6) + INTERVAL j.retry_us MICROSECOND), \
       t.last_error = IF(j.error IS NULL, t.last_error, j.error), \
       t.released = t.released + j.released, \
       t.finished_at = IF(j.finished = 1, UTC_TIMESTAMP(6), NULL), \
       t.lease_owner = NULL, t.lease_expires_at = NULL, t.updated_at = UTC_TIMESTAMP(6) \
     WHERE t.status = 'running' AND t.attempts = j.attempts AND t.lease_owner = j.owner"
);

/// The `(id, attempts)` of the results whose claim is still current, locked.
const CURRENT_FENCES_SQL: &str = concat!(
    "SELECT t.id, t.attempts FROM ",
    completions_table!(),
    "WHERE t.status = 'running' AND t.attempts = j.attempts AND t.lease_owner = j.owner \
     FOR UPDATE"
);

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
    for document in json_rows::completions(completions.iter().copied(), MAX_PER_STATEMENT) {
        let rows: Vec<Fenced> = cached::<Mysql>(CURRENT_FENCES_SQL)
            .bind::<Text, _>(document)
            .load(conn)
            .await
            .map_err(mysql_error)?;
        current.extend(rows.into_iter().map(|row| (row.id, row.attempts)));
    }
    Ok(current)
}

#[cfg(test)]
mod plans;
