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
use diesel_outbox_core::{Rescued, Result, TaskId, transition};
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
SELECT id, CAST(COALESCE(attempts - released >= max_attempts, 0) AS SIGNED) AS exhausted
FROM outbox_tasks
WHERE status = 'running' AND lease_expires_at <= UTC_TIMESTAMP(6)
ORDER BY lease_expires_at
LIMIT ?";

/// [`transition::promote`] in SQL, for the ids listed.
const PROMOTE: &str = "\
UPDATE outbox_tasks FORCE INDEX (PRIMARY) SET status = 'available', updated_at = UTC_TIMESTAMP(6)
WHERE id IN ({ids}) AND status = 'waiting' AND next_attempt_at <= UTC_TIMESTAMP(6)";

/// [`transition::rescue`] in SQL for the ids listed whose runs are below
/// `max_attempts`: available again.
const RESCUE: &str = "\
UPDATE outbox_tasks FORCE INDEX (PRIMARY) SET
    last_error = ?, status = 'available',
    lease_owner = NULL, lease_expires_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE id IN ({ids}) AND status = 'running' AND lease_expires_at <= UTC_TIMESTAMP(6)
  AND (max_attempts IS NULL OR attempts - released < max_attempts)";

/// [`transition::rescue`] in SQL for one task whose runs reached
/// `max_attempts`: failed. One statement per task, so its count says whether
/// this task was failed (MySQL has no `RETURNING`). MySQL evaluates `SET`
/// left to right on the updated row; no expression reads a column assigned
/// before it.
const RESCUE_EXHAUSTED: &str = "\
UPDATE outbox_tasks FORCE INDEX (PRIMARY) SET
    finished_at = UTC_TIMESTAMP(6),
    last_error = CONCAT('gave up after ', attempts - released, ' attempts: ', ?),
    status = 'failed',
    lease_owner = NULL, lease_expires_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE id = ? AND status = 'running' AND lease_expires_at <= UTC_TIMESTAMP(6)
  AND attempts - released >= max_attempts";

/// A running task whose lease lapsed, and whether its runs reached
/// `max_attempts` when it was read.
#[derive(QueryableByName)]
struct Lapsed {
    #[diesel(sql_type = BigInt)]
    id: i64,
    /// 1 or 0.
    #[diesel(sql_type = BigInt)]
    exhausted: i64,
}

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

/// Rescues up to `limit` running tasks whose lease lapsed: those below
/// their attempt limit in one statement, each of the others in one of its
/// own. A row whose runs changed between the read and the update (a `send`
/// took it over) is left for the next rescue.
pub(crate) async fn rescue(
    conn: &mut AsyncMysqlConnection,
    limit: u32,
    isolation: Isolation,
) -> Result<Rescued> {
    let mut lapsed: Vec<Lapsed> = cached(LAPSED)
        .bind::<BigInt, _>(i64::from(limit))
        .load(conn)
        .await
        .map_err(mysql_error)?;
    if lapsed.is_empty() {
        return Ok(Rescued::default());
    }
    lapsed.sort_unstable_by_key(|row| row.id);
    isolation.apply(conn).await?;
    let mut rescued = Rescued::default();
    let again: Vec<String> = lapsed
        .iter()
        .filter(|row| row.exhausted == 0)
        .map(|row| row.id.to_string())
        .collect();
    if !again.is_empty() {
        let sql = RESCUE.replace("{ids}", &again.join(", "));
        let moved = uncached(&sql)
            .bind::<Text, _>(transition::LAPSED_ERROR)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        rescued.moved += moved as u64;
    }
    for row in lapsed.iter().filter(|row| row.exhausted != 0) {
        let failed = cached(RESCUE_EXHAUSTED)
            .bind::<Text, _>(transition::LAPSED_ERROR)
            .bind::<BigInt, _>(row.id)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        if failed > 0 {
            rescued.moved += 1;
            rescued.failed.push(TaskId::new(row.id));
        }
    }
    Ok(rescued)
}
