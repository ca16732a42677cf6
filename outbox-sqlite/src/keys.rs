//! Ordering keys: the per-key count of open tasks in `outbox_ordering_keys`,
//! and the move that lets a key's next task go.
//!
//! SQLite has one writer at a time, so the per-key lock the server backends
//! take on a key's row is simply the write transaction: enqueue runs in the
//! caller's transaction after its first write, and completions that move a
//! key and discards in the store's `BEGIN IMMEDIATE` ones, so none of them
//! can interleave with another. A task enqueued while its key's count was zero is the key's head
//! ([`transition::enqueued`]); the others are blocked until every task
//! before them succeeded or was discarded.
//!
//! [`transition::enqueued`]: diesel_outbox_core::transition::enqueued

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use diesel::{
    QueryableByName,
    sql_types::{BigInt, Text},
    sqlite::Sqlite,
};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::Result;
use diesel_outbox_sql::{cached, sqlite_error, uncached};

use crate::{AsyncSqliteConnection, timestamp::to_micros};

#[derive(QueryableByName)]
struct KeyCount {
    #[diesel(sql_type = Text)]
    ordering_key: String,
    #[diesel(sql_type = BigInt)]
    open_tasks: i64,
}

type Query<'q> = diesel::query_builder::BoxedSqlQuery<'q, Sqlite, diesel::query_builder::SqlQuery>;

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

fn bind_keys<'q>(mut query: Query<'q>, keys: impl IntoIterator<Item = &'q str>) -> Query<'q> {
    for key in keys {
        query = query.bind::<Text, _>(key);
    }
    query
}

/// Adds `counts` new tasks to their keys; returns how many tasks of each key
/// were open before (zero: the first new task of that key is its head).
/// A write: as the first statement of an enqueue, it takes the write lock.
pub(crate) async fn open(
    conn: &mut AsyncSqliteConnection,
    counts: &BTreeMap<&str, i64>,
) -> Result<HashMap<String, i64>> {
    if counts.is_empty() {
        return Ok(HashMap::new());
    }
    let sql = format!(
        "INSERT INTO outbox_ordering_keys (ordering_key, open_tasks) VALUES {} \
         ON CONFLICT (ordering_key) DO UPDATE SET open_tasks = open_tasks + excluded.open_tasks \
         RETURNING ordering_key, open_tasks",
        vec!["(?, ?)"; counts.len()].join(", ")
    );
    // One key (the common case) is one shape, prepared once per connection.
    let mut query = if counts.len() == 1 {
        cached::<Sqlite>(&sql)
    } else {
        uncached::<Sqlite>(&sql)
    };
    for (key, n) in counts {
        query = query.bind::<Text, _>(*key).bind::<BigInt, _>(*n);
    }
    let rows: Vec<KeyCount> = query.load(conn).await.map_err(sqlite_error)?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let added = counts.get(row.ordering_key.as_str()).copied().unwrap_or(0);
            (row.ordering_key, row.open_tasks - added)
        })
        .collect())
}

/// Takes `counts` finished tasks off their keys (succeeded or discarded).
/// For the keys `heads_done` names, whose head was among them, the next
/// blocked task goes ([`transition::unblock`]) as of `now`; keys left with no
/// open task lose their row. Runs inside the caller's write transaction,
/// after the writes that finished the tasks.
///
/// [`transition::unblock`]: diesel_outbox_core::transition::unblock
pub(crate) async fn close(
    conn: &mut AsyncSqliteConnection,
    counts: &BTreeMap<&str, i64>,
    heads_done: &(dyn Fn(&str) -> bool + Sync),
    now: DateTime<Utc>,
) -> Result<()> {
    if counts.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "UPDATE outbox_ordering_keys SET open_tasks = max(open_tasks - CASE ordering_key {} END, 0) \
         WHERE ordering_key IN ({}) RETURNING ordering_key, open_tasks",
        "WHEN ? THEN ? ".repeat(counts.len()),
        placeholders(counts.len())
    );
    let mut query = diesel::sql_query(sql).into_boxed::<Sqlite>();
    for (key, n) in counts {
        query = query.bind::<Text, _>(*key).bind::<BigInt, _>(*n);
    }
    let rows: Vec<KeyCount> = bind_keys(query, counts.keys().copied())
        .load(conn)
        .await
        .map_err(sqlite_error)?;
    let (mut next, mut emptied) = (Vec::new(), Vec::new());
    for row in &rows {
        if row.open_tasks == 0 {
            emptied.push(row.ordering_key.as_str());
        } else if heads_done(&row.ordering_key) {
            next.push(row.ordering_key.as_str());
        }
    }
    if !emptied.is_empty() {
        let sql = format!(
            "DELETE FROM outbox_ordering_keys WHERE ordering_key IN ({}) AND open_tasks = 0",
            placeholders(emptied.len())
        );
        bind_keys(diesel::sql_query(sql).into_boxed(), emptied)
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
    }
    unblock(conn, &next, now).await
}

/// The text of the unblock for `n` keys: `?` the time (twice), then the keys.
/// MIN(id) per key reads one entry of the (status, ordering_key, id) index
/// per key.
pub(crate) fn unblock_sql(n: usize) -> String {
    format!(
        "UPDATE outbox_tasks \
         SET status = CASE WHEN next_attempt_at <= ? THEN 'available' ELSE 'waiting' END, \
             updated_at = ? \
         WHERE status = 'blocked' AND id IN ( \
             SELECT MIN(id) FROM outbox_tasks INDEXED BY outbox_tasks_ordering_idx \
             WHERE status = 'blocked' AND ordering_key IN ({}) GROUP BY ordering_key)",
        placeholders(n)
    )
}

/// Lets the oldest blocked task of each of `keys` go: available when due at
/// `now`, waiting otherwise.
async fn unblock(
    conn: &mut AsyncSqliteConnection,
    keys: &[&str],
    now: DateTime<Utc>,
) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let sql = unblock_sql(keys.len());
    let query = diesel::sql_query(sql)
        .into_boxed::<Sqlite>()
        .bind::<BigInt, _>(to_micros(now))
        .bind::<BigInt, _>(to_micros(now));
    bind_keys(query, keys.iter().copied())
        .execute(conn)
        .await
        .map_err(sqlite_error)?;
    Ok(())
}
