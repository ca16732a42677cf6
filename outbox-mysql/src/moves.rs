//! The periodic moves: promotion of waiting tasks once due, and rescue of
//! running tasks whose lease lapsed. Each statement reads a range of an
//! index that holds only rows of the status it moves, at most `limit` of
//! them, under READ COMMITTED so it takes no gap locks.

use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use outbox_core::{Result, transition};
use outbox_diesel::{cached, mysql_error};

use crate::store_transaction::Isolation;

/// [`transition::promote`] in SQL.
const PROMOTE: &str = "\
UPDATE outbox_tasks SET status = 'available', updated_at = UTC_TIMESTAMP(6)
WHERE status = 'waiting' AND next_attempt_at <= UTC_TIMESTAMP(6)
ORDER BY next_attempt_at
LIMIT ?";

/// [`transition::rescue`] in SQL: failed when the runs reached
/// `max_attempts`, available otherwise. MySQL evaluates `SET` left to right
/// on the updated row; no expression reads a column assigned before it.
const RESCUE: &str = "\
UPDATE outbox_tasks SET
    finished_at = IF(attempts - released >= max_attempts, UTC_TIMESTAMP(6), NULL),
    last_error = IF(attempts - released >= max_attempts,
                    CONCAT('gave up after ', attempts - released, ' attempts: ', ?), ?),
    status = IF(attempts - released >= max_attempts, 'failed', 'available'),
    lease_owner = NULL, lease_expires_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE status = 'running' AND lease_expires_at <= UTC_TIMESTAMP(6)
ORDER BY lease_expires_at
LIMIT ?";

/// Makes up to `limit` due waiting tasks available.
pub(crate) async fn promote(
    conn: &mut AsyncMysqlConnection,
    limit: u32,
    isolation: Isolation,
) -> Result<u64> {
    isolation.apply(conn).await?;
    let moved = cached(PROMOTE)
        .bind::<BigInt, _>(i64::from(limit))
        .execute(conn)
        .await
        .map_err(mysql_error)?;
    Ok(moved as u64)
}

/// Rescues up to `limit` running tasks whose lease lapsed.
pub(crate) async fn rescue(
    conn: &mut AsyncMysqlConnection,
    limit: u32,
    isolation: Isolation,
) -> Result<u64> {
    isolation.apply(conn).await?;
    let moved = cached(RESCUE)
        .bind::<Text, _>(transition::LAPSED_ERROR)
        .bind::<Text, _>(transition::LAPSED_ERROR)
        .bind::<BigInt, _>(i64::from(limit))
        .execute(conn)
        .await
        .map_err(mysql_error)?;
    Ok(moved as u64)
}
