//! The periodic moves: promotion of waiting tasks once due, and rescue of
//! running tasks whose lease lapsed. Each is one statement (SQLite's write
//! lock from its first step to its commit) that reads a range of an index
//! holding only rows of the status it moves, at most `limit` of them.

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Bool, Text},
    sqlite::Sqlite,
};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{Rescued, Result, TaskId, transition};
use diesel_outbox_sql::{cached, sqlite_error};

use crate::{
    AsyncSqliteConnection,
    timestamp::{self, to_micros},
};

/// [`transition::promote`] in SQL: `$1` now, `$2` the limit.
pub(crate) const PROMOTE: &str = "\
UPDATE outbox_tasks SET status = 'available', updated_at = $1
WHERE status = 'waiting' AND id IN (
    SELECT id FROM outbox_tasks INDEXED BY outbox_tasks_due_idx
    WHERE status = 'waiting' AND next_attempt_at <= $1
    ORDER BY next_attempt_at
    LIMIT $2)";

/// [`transition::rescue`] in SQL: failed when the runs reached
/// `max_attempts`, available otherwise. `$1` now, `$2` the limit, `$3` the
/// error. SQLite evaluates every `SET` expression on the row as it was.
pub(crate) const RESCUE: &str = "\
UPDATE outbox_tasks SET
    status = CASE WHEN attempts - released >= max_attempts THEN 'failed' ELSE 'available' END,
    finished_at = CASE WHEN attempts - released >= max_attempts THEN $1 END,
    last_error = CASE WHEN attempts - released >= max_attempts
                      THEN 'gave up after ' || (attempts - released) || ' attempts: ' || $3
                      ELSE $3 END,
    lease_owner = NULL, lease_expires_at = NULL, updated_at = $1
WHERE status = 'running' AND id IN (
    SELECT id FROM outbox_tasks INDEXED BY outbox_tasks_lease_idx
    WHERE status = 'running' AND lease_expires_at <= $1
    ORDER BY lease_expires_at
    LIMIT $2)
RETURNING id, status = 'failed' AS failed";

/// Makes up to `limit` due waiting tasks available.
pub(crate) async fn promote(conn: &mut AsyncSqliteConnection, limit: u32) -> Result<u64> {
    let moved = cached::<Sqlite>(PROMOTE)
        .bind::<BigInt, _>(to_micros(timestamp::now()))
        .bind::<BigInt, _>(i64::from(limit))
        .execute(conn)
        .await
        .map_err(sqlite_error)?;
    Ok(moved as u64)
}

/// A task a rescue moved, and whether it failed it.
#[derive(QueryableByName)]
struct Moved {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Bool)]
    failed: bool,
}

/// Rescues up to `limit` running tasks whose lease lapsed.
pub(crate) async fn rescue(conn: &mut AsyncSqliteConnection, limit: u32) -> Result<Rescued> {
    let moved: Vec<Moved> = cached::<Sqlite>(RESCUE)
        .bind::<BigInt, _>(to_micros(timestamp::now()))
        .bind::<BigInt, _>(i64::from(limit))
        .bind::<Text, _>(transition::LAPSED_ERROR)
        .load(conn)
        .await
        .map_err(sqlite_error)?;
    Ok(Rescued {
        moved: moved.len() as u64,
        failed: moved
            .into_iter()
            .filter(|row| row.failed)
            .map(|row| TaskId::new(row.id))
            .collect(),
    })
}
