//! The periodic moves: promotion of waiting tasks once due, and rescue of
//! running tasks whose lease lapsed. Each statement reads only rows of the
//! status it moves, through that status's index, at most `limit` of them,
//! and skips rows other workers hold; the rows it locked are then updated
//! through the primary key, handed over as an array (`= ANY(ARRAY(...))`)
//! so that no plan joins them to a scan of the whole table.

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Bool, Text},
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_outbox_core::{Rescued, Result, TaskId, transition};
use diesel_outbox_sql::{cached, postgres_error};

/// [`transition::promote`] in SQL.
const PROMOTE: &str = "\
UPDATE outbox_tasks t SET status = 'available', updated_at = now()
WHERE t.id = ANY(ARRAY(
    SELECT id FROM outbox_tasks
    WHERE status = 'waiting' AND next_attempt_at <= now()
    ORDER BY next_attempt_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED))
  AND t.status = 'waiting'";

/// [`transition::rescue`] in SQL: failed when the runs reached
/// `max_attempts`, available otherwise.
const RESCUE: &str = "\
UPDATE outbox_tasks t SET
    status = CASE WHEN t.attempts - t.released >= t.max_attempts THEN 'failed'
                  ELSE 'available' END,
    finished_at = CASE WHEN t.attempts - t.released >= t.max_attempts THEN now() END,
    last_error = CASE WHEN t.attempts - t.released >= t.max_attempts
                      THEN 'gave up after ' || (t.attempts - t.released) || ' attempts: ' || $2
                      ELSE $2 END,
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE t.id = ANY(ARRAY(
    SELECT id FROM outbox_tasks
    WHERE status = 'running' AND lease_expires_at <= now()
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED))
  AND t.status = 'running' AND t.lease_expires_at <= now()
RETURNING t.id, t.status = 'failed' AS failed";

/// Makes up to `limit` due waiting tasks available.
pub(crate) async fn promote(conn: &mut AsyncPgConnection, limit: u32) -> Result<u64> {
    let moved = cached(PROMOTE)
        .bind::<BigInt, _>(i64::from(limit))
        .execute(conn)
        .await
        .map_err(postgres_error)?;
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
pub(crate) async fn rescue(conn: &mut AsyncPgConnection, limit: u32) -> Result<Rescued> {
    let moved: Vec<Moved> = cached(RESCUE)
        .bind::<BigInt, _>(i64::from(limit))
        .bind::<Text, _>(transition::LAPSED_ERROR)
        .load(conn)
        .await
        .map_err(postgres_error)?;
    Ok(Rescued {
        moved: moved.len() as u64,
        failed: moved
            .into_iter()
            .filter(|row| row.failed)
            .map(|row| TaskId::new(row.id))
            .collect(),
    })
}
