//! Ordering keys: the per-key count of open tasks in `outbox_ordering_keys`,
//! and the move that lets a key's next task go.
//!
//! Every statement that changes which task of a key may run locks the key's
//! row first (enqueue) or right after the task rows it finished (completion
//! writes), always in key order, so writers of one key take turns and two
//! writers of several keys cannot deadlock. A task enqueued while its key's
//! count was zero is the key's head ([`transition::enqueued`]); the others
//! are blocked until every task before them succeeded or was discarded.

use std::collections::{BTreeMap, HashMap};

use diesel::{
    QueryableByName,
    sql_types::{Array, BigInt, Text},
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_outbox_core::Result;
use diesel_outbox_sql::{cached, postgres_error};

#[derive(QueryableByName)]
struct KeyCount {
    #[diesel(sql_type = Text)]
    ordering_key: String,
    #[diesel(sql_type = BigInt)]
    open_tasks: i64,
}

/// Counts the keys of `keys` (one entry per task) in key order.
pub(crate) fn tally<'k>(keys: impl IntoIterator<Item = &'k str>) -> BTreeMap<&'k str, i64> {
    let mut counts = BTreeMap::new();
    for key in keys {
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

const OPEN: &str = "\
INSERT INTO outbox_ordering_keys (ordering_key, open_tasks)
SELECT k, n FROM unnest($1::text[], $2::int8[]) AS u(k, n) ORDER BY k
ON CONFLICT (ordering_key)
DO UPDATE SET open_tasks = outbox_ordering_keys.open_tasks + EXCLUDED.open_tasks
RETURNING ordering_key, open_tasks";

/// Adds `counts` new tasks to their keys, locking each key's row until the
/// caller's transaction ends; returns how many tasks of each key were open
/// before (zero: the first new task of that key is its head).
pub(crate) async fn open(
    conn: &mut AsyncPgConnection,
    counts: &BTreeMap<&str, i64>,
) -> Result<HashMap<String, i64>> {
    if counts.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<KeyCount> = cached(OPEN)
        .bind::<Array<Text>, _>(counts.keys().copied().collect::<Vec<_>>())
        .bind::<Array<BigInt>, _>(counts.values().copied().collect::<Vec<_>>())
        .load(conn)
        .await
        .map_err(postgres_error)?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let added = counts.get(row.ordering_key.as_str()).copied().unwrap_or(0);
            (row.ordering_key, row.open_tasks - added)
        })
        .collect())
}

const CLOSE: &str = "\
WITH locked AS (
    SELECT ordering_key FROM outbox_ordering_keys
    WHERE ordering_key = ANY($1::text[])
    ORDER BY ordering_key
    FOR UPDATE
)
UPDATE outbox_ordering_keys k SET open_tasks = GREATEST(k.open_tasks - d.n, 0)
FROM unnest($1::text[], $2::int8[]) AS d(key, n), locked
WHERE k.ordering_key = d.key AND locked.ordering_key = d.key
RETURNING k.ordering_key, k.open_tasks";

/// A fresh statement, so it sees every task committed by the enqueuers the
/// lock above waited for.
const MOVE_ON: &str = "\
WITH next AS (
    SELECT b.id FROM unnest($1::text[]) AS k(key)
    CROSS JOIN LATERAL (
        SELECT id FROM outbox_tasks
        WHERE status = 'blocked' AND ordering_key = k.key
        ORDER BY id LIMIT 1
    ) b
), unblocked AS (
    UPDATE outbox_tasks t
    SET status = CASE WHEN t.next_attempt_at <= now() THEN 'available' ELSE 'waiting' END,
        updated_at = now()
    FROM next WHERE t.id = next.id AND t.status = 'blocked'
    RETURNING t.id
), emptied AS (
    DELETE FROM outbox_ordering_keys WHERE ordering_key = ANY($2::text[]) AND open_tasks = 0
)
SELECT COUNT(*) AS open_tasks, '' AS ordering_key FROM unblocked";

/// Takes `counts` finished tasks off their keys (succeeded or discarded).
/// For the keys in `heads_done`, whose head was among them, the next blocked
/// task goes ([`transition::unblock`]); keys left with no open task lose
/// their row. Runs inside the caller's transaction, after the writes that
/// finished the tasks.
///
/// [`transition::unblock`]: diesel_outbox_core::transition::unblock
pub(crate) async fn close(
    conn: &mut AsyncPgConnection,
    counts: &BTreeMap<&str, i64>,
    heads_done: &(dyn Fn(&str) -> bool + Sync),
) -> Result<()> {
    if counts.is_empty() {
        return Ok(());
    }
    let rows: Vec<KeyCount> = cached(CLOSE)
        .bind::<Array<Text>, _>(counts.keys().copied().collect::<Vec<_>>())
        .bind::<Array<BigInt>, _>(counts.values().copied().collect::<Vec<_>>())
        .load(conn)
        .await
        .map_err(postgres_error)?;
    let (mut next, mut emptied) = (Vec::new(), Vec::new());
    for row in rows {
        if row.open_tasks == 0 {
            emptied.push(row.ordering_key);
        } else if heads_done(&row.ordering_key) {
            next.push(row.ordering_key);
        }
    }
    if next.is_empty() && emptied.is_empty() {
        return Ok(());
    }
    cached(MOVE_ON)
        .bind::<Array<Text>, _>(next)
        .bind::<Array<Text>, _>(emptied)
        .execute(conn)
        .await
        .map_err(postgres_error)?;
    Ok(())
}
