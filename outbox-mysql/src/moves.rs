//! The periodic moves: promotion of waiting tasks once due, and rescue of
//! running tasks whose lease lapsed.
//!
//! Each move first reads the ids of at most `limit` candidates from the
//! index range of their status (a plain read: no lock, so it never waits on
//! a row a claim or a completion holds), then updates those rows by primary
//! key, the `WHERE` re-checking the rule, so a row another worker changed
//! meanwhile is left alone. Updating by primary key, in key order, is how
//! completion writes lock their rows too; a scan of the status index would
//! lock other workers' rows on the way and deadlock with them.

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Text},
};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{Result, transition};
use diesel_outbox_sql::{cached, mysql_error, uncached};

use crate::store_transaction::Isolation;

#[derive(QueryableByName)]
struct Candidate {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

const DUE: &str = "\
SELECT id FROM outbox_tasks
WHERE status = 'waiting' AND next_attempt_at <= UTC_TIMESTAMP(6)
ORDER BY next_attempt_at
LIMIT ?";

const LAPSED: &str = "\
SELECT id FROM outbox_tasks
WHERE status = 'running' AND lease_expires_at <= UTC_TIMESTAMP(6)
ORDER BY lease_expires_at
LIMIT ?";

/// [`transition::promote`] in SQL, for the ids listed.
const PROMOTE: &str = "\
UPDATE outbox_tasks FORCE INDEX (PRIMARY) SET status = 'available', updated_at = UTC_TIMESTAMP(6)
WHERE id IN ({ids}) AND status = 'waiting' AND next_attempt_at <= UTC_TIMESTAMP(6)";

/// [`transition::rescue`] in SQL, for the ids listed: failed when the runs
/// reached `max_attempts`, available otherwise. MySQL evaluates `SET` left
/// to right on the updated row; no expression reads a column assigned
/// before it.
const RESCUE: &str = "\
UPDATE outbox_tasks FORCE INDEX (PRIMARY) SET
    finished_at = IF(attempts - released >= max_attempts, UTC_TIMESTAMP(6), NULL),
    last_error = IF(attempts - released >= max_attempts,
                    CONCAT('gave up after ', attempts - released, ' attempts: ', ?), ?),
    status = IF(attempts - released >= max_attempts, 'failed', 'available'),
    lease_owner = NULL, lease_expires_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE id IN ({ids}) AND status = 'running' AND lease_expires_at <= UTC_TIMESTAMP(6)";

/// The ids `select` finds, ascending, as an SQL list; `None` when none.
async fn candidates(
    conn: &mut AsyncMysqlConnection,
    select: &str,
    limit: u32,
) -> Result<Option<String>> {
    let mut ids: Vec<i64> = cached(select)
        .bind::<BigInt, _>(i64::from(limit))
        .load::<Candidate>(conn)
        .await
        .map_err(mysql_error)?
        .into_iter()
        .map(|candidate| candidate.id)
        .collect();
    if ids.is_empty() {
        return Ok(None);
    }
    ids.sort_unstable();
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    Ok(Some(list.join(", ")))
}

/// Makes up to `limit` due waiting tasks available.
pub(crate) async fn promote(
    conn: &mut AsyncMysqlConnection,
    limit: u32,
    isolation: Isolation,
) -> Result<u64> {
    let Some(ids) = candidates(conn, DUE, limit).await? else {
        return Ok(0);
    };
    isolation.apply(conn).await?;
    let sql = PROMOTE.replace("{ids}", &ids);
    let moved = uncached(&sql).execute(conn).await.map_err(mysql_error)?;
    Ok(moved as u64)
}

/// Rescues up to `limit` running tasks whose lease lapsed.
pub(crate) async fn rescue(
    conn: &mut AsyncMysqlConnection,
    limit: u32,
    isolation: Isolation,
) -> Result<u64> {
    let Some(ids) = candidates(conn, LAPSED, limit).await? else {
        return Ok(0);
    };
    isolation.apply(conn).await?;
    let sql = RESCUE.replace("{ids}", &ids);
    let moved = uncached(&sql)
        .bind::<Text, _>(transition::LAPSED_ERROR)
        .bind::<Text, _>(transition::LAPSED_ERROR)
        .execute(conn)
        .await
        .map_err(mysql_error)?;
    Ok(moved as u64)
}
