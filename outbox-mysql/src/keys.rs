//! Ordering keys: the per-key count of open tasks in `outbox_ordering_keys`,
//! and the move that lets a key's next task go.
//!
//! Every transaction that changes which task of a key may run locks the
//! key's row first (enqueue, discard) or right after the task rows it
//! finished (completion writes), always in key order, so writers of one key
//! take turns and two writers of several keys cannot deadlock. A task
//! enqueued while its key's count was zero is the key's head
//! ([`transition::enqueued`]); the others are blocked until every task before
//! them succeeded or was discarded.
//!
//! [`transition::enqueued`]: diesel_outbox_core::transition::enqueued

use std::collections::{BTreeMap, HashMap};

use diesel::{
    QueryableByName,
    mysql::Mysql,
    sql_types::{BigInt, Binary, Text},
};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{Error, Result};
use diesel_outbox_sql::mysql_error;

#[derive(QueryableByName)]
struct KeyCount {
    #[diesel(sql_type = Binary)]
    ordering_key: Vec<u8>,
    #[diesel(sql_type = BigInt)]
    open_tasks: i64,
}

#[derive(QueryableByName)]
struct NextId {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// Counts the keys of `keys` (one entry per task) in key order.
pub(crate) fn tally<'k>(keys: impl IntoIterator<Item = &'k str>) -> BTreeMap<&'k str, i64> {
    let mut counts = BTreeMap::new();
    for key in keys {
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

/// `?, ?, ...`: one placeholder per key.
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

type Query<'q> = diesel::query_builder::BoxedSqlQuery<'q, Mysql, diesel::query_builder::SqlQuery>;

fn bind_keys<'q>(mut query: Query<'q>, counts: &BTreeMap<&'q str, i64>) -> Query<'q> {
    for key in counts.keys() {
        query = query.bind::<Text, _>(*key);
    }
    query
}

/// Reads the counts of `counts`' keys, locking their rows in key order.
async fn lock(
    conn: &mut AsyncMysqlConnection,
    counts: &BTreeMap<&str, i64>,
) -> Result<HashMap<String, i64>> {
    let sql = format!(
        "SELECT ordering_key, open_tasks FROM outbox_ordering_keys \
         WHERE ordering_key IN ({}) ORDER BY ordering_key FOR UPDATE",
        placeholders(counts.len())
    );
    let rows: Vec<KeyCount> = bind_keys(diesel::sql_query(sql).into_boxed(), counts)
        .load(conn)
        .await
        .map_err(mysql_error)?;
    rows.into_iter()
        .map(|row| {
            let key = String::from_utf8(row.ordering_key)
                .map_err(|_| Error::database("an ordering key's count row is not UTF-8"))?;
            Ok((key, row.open_tasks))
        })
        .collect()
}

/// Adds `counts` new tasks to their keys, locking each key's row until the
/// caller's transaction ends; returns how many tasks of each key were open
/// before (zero: the first new task of that key is its head).
pub(crate) async fn open(
    conn: &mut AsyncMysqlConnection,
    counts: &BTreeMap<&str, i64>,
) -> Result<HashMap<String, i64>> {
    if counts.is_empty() {
        return Ok(HashMap::new());
    }
    // Rows in key order, so the locks are taken in key order.
    let sql = format!(
        "INSERT INTO outbox_ordering_keys (ordering_key, open_tasks) VALUES {} \
         ON DUPLICATE KEY UPDATE open_tasks = open_tasks + VALUES(open_tasks)",
        vec!["(?, ?)"; counts.len()].join(", ")
    );
    let mut query = diesel::sql_query(sql).into_boxed::<Mysql>();
    for (key, n) in counts {
        query = query.bind::<Text, _>(*key).bind::<BigInt, _>(*n);
    }
    query.execute(conn).await.map_err(mysql_error)?;
    // The rows this transaction just changed: it reads its own versions,
    // which were written over the latest committed ones.
    let after = lock(conn, counts).await?;
    Ok(after
        .into_iter()
        .map(|(key, open)| {
            let added = counts.get(key.as_str()).copied().unwrap_or(0);
            (key, open - added)
        })
        .collect())
}

/// Takes `counts` finished tasks off their keys (succeeded or discarded).
/// For the keys `heads_done` names, whose head was among them, the next
/// blocked task goes ([`transition::unblock`]); keys left with no open task
/// lose their row. Runs inside the caller's READ COMMITTED transaction, after
/// the writes that finished the tasks, so its reads after the lock see every
/// task committed by the enqueuers the lock waited for.
///
/// [`transition::unblock`]: diesel_outbox_core::transition::unblock
pub(crate) async fn close(
    conn: &mut AsyncMysqlConnection,
    counts: &BTreeMap<&str, i64>,
    heads_done: &(dyn Fn(&str) -> bool + Sync),
) -> Result<()> {
    if counts.is_empty() {
        return Ok(());
    }
    let before = lock(conn, counts).await?;
    let (mut next, mut emptied, mut left) = (Vec::new(), Vec::new(), Vec::new());
    for (key, open) in &before {
        let n = counts.get(key.as_str()).copied().unwrap_or(0);
        let remaining = (open - n).max(0);
        if remaining == 0 {
            emptied.push(key.as_str());
        } else {
            left.push((key.as_str(), remaining));
            if heads_done(key) {
                next.push(key.as_str());
            }
        }
    }
    if !left.is_empty() {
        let sql = format!(
            "UPDATE outbox_ordering_keys SET open_tasks = CASE {} END WHERE ordering_key IN ({})",
            "WHEN ordering_key = ? THEN ? ".repeat(left.len()),
            placeholders(left.len())
        );
        let mut query = diesel::sql_query(sql).into_boxed::<Mysql>();
        for (key, remaining) in &left {
            query = query.bind::<Text, _>(*key).bind::<BigInt, _>(*remaining);
        }
        for (key, _) in &left {
            query = query.bind::<Text, _>(*key);
        }
        query.execute(conn).await.map_err(mysql_error)?;
    }
    if !emptied.is_empty() {
        let sql = format!(
            "DELETE FROM outbox_ordering_keys WHERE ordering_key IN ({})",
            placeholders(emptied.len())
        );
        let mut query = diesel::sql_query(sql).into_boxed::<Mysql>();
        for key in &emptied {
            query = query.bind::<Text, _>(*key);
        }
        query.execute(conn).await.map_err(mysql_error)?;
    }
    unblock(conn, &next).await
}

/// Lets the oldest blocked task of each of `keys` go: available when due,
/// waiting otherwise.
async fn unblock(conn: &mut AsyncMysqlConnection, keys: &[&str]) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    // MIN(id) per key reads one entry of the (status, ordering_key, id) index per key.
    let sql = format!(
        "SELECT MIN(id) AS id FROM outbox_tasks \
         WHERE status = 'blocked' AND ordering_key IN ({}) GROUP BY ordering_key",
        placeholders(keys.len())
    );
    let mut query = diesel::sql_query(sql).into_boxed::<Mysql>();
    for key in keys {
        query = query.bind::<Text, _>(*key);
    }
    let next: Vec<NextId> = query.load(conn).await.map_err(mysql_error)?;
    if next.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = next.iter().map(|n| n.id.to_string()).collect();
    diesel::sql_query(format!(
        "UPDATE outbox_tasks FORCE INDEX (PRIMARY) \
         SET status = IF(next_attempt_at <= UTC_TIMESTAMP(6), 'available', 'waiting'), \
             updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({}) AND status = 'blocked'",
        ids.join(", ")
    ))
    .execute(conn)
    .await
    .map_err(mysql_error)?;
    Ok(())
}
