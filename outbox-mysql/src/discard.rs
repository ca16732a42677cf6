//! `discard`: an operator gives a task up ([`transition::discard`] in SQL).
//!
//! [`transition::discard`]: diesel_outbox_core::transition::discard

use std::collections::{BTreeSet, HashSet};

use diesel::{
    OptionalExtension, QueryableByName,
    sql_types::{BigInt, Binary, Nullable, Text},
};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{Result, TaskId};
use diesel_outbox_sql::mysql_error;

use crate::{
    keys,
    store_transaction::{Isolation, read_committed},
};

#[derive(QueryableByName)]
struct Key {
    #[diesel(sql_type = Nullable<Binary>)]
    ordering_key: Option<Vec<u8>>,
}

#[derive(QueryableByName)]
struct Before {
    #[diesel(sql_type = Text)]
    status: String,
}

/// Discards task `id` if it may be; `false` when it is absent, running,
/// finished (but failed) or held by another transaction this instant.
pub(crate) async fn one(
    conn: &mut AsyncMysqlConnection,
    id: TaskId,
    isolation: Isolation,
) -> Result<bool> {
    // The key never changes, so it can be read before the transaction.
    let key: Option<Key> = diesel::sql_query("SELECT ordering_key FROM outbox_tasks WHERE id = ?")
        .bind::<BigInt, _>(id.get())
        .get_result(conn)
        .await
        .optional()
        .map_err(mysql_error)?;
    let Some(Key { ordering_key }) = key else {
        return Ok(false);
    };
    // A key that is not UTF-8 was written by another program; no count
    // of ours holds it.
    let ordering_key = ordering_key.and_then(|key| String::from_utf8(key).ok());
    read_committed(conn, isolation, async |conn| {
        // The key first, as enqueue takes it: a completion that holds the
        // key may be about to unblock this very task.
        if let Some(key) = &ordering_key {
            diesel::sql_query(
                "SELECT ordering_key FROM outbox_ordering_keys WHERE ordering_key = ? FOR UPDATE",
            )
            .bind::<Text, _>(key)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        }
        // A row another transaction holds is being claimed, completed or
        // moved right now: skipped, and nothing changes.
        let before: Option<Before> = diesel::sql_query(
            "SELECT status FROM outbox_tasks WHERE id = ? \
             AND status IN ('available', 'waiting', 'blocked', 'failed') FOR UPDATE SKIP LOCKED",
        )
        .bind::<BigInt, _>(id.get())
        .get_result(conn)
        .await
        .optional()
        .map_err(mysql_error)?;
        let Some(before) = before else {
            return Ok(false);
        };
        diesel::sql_query(
            "UPDATE outbox_tasks FORCE INDEX (PRIMARY) \
             SET status = 'discarded', finished_at = UTC_TIMESTAMP(6), \
             updated_at = UTC_TIMESTAMP(6), lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = ?",
        )
        .bind::<BigInt, _>(id.get())
        .execute(conn)
        .await
        .map_err(mysql_error)?;
        if let Some(key) = &ordering_key {
            // Only a task that held the key's head lets the next one go.
            let was_head = before.status != "blocked";
            keys::close(conn, &keys::tally([key.as_str()]), &|_| was_head).await?;
        }
        Ok(true)
    })
    .await
}

#[derive(QueryableByName)]
struct Target {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Nullable<Binary>)]
    ordering_key: Option<Vec<u8>>,
}

/// `ids` as an SQL list of integers.
fn id_list(ids: impl IntoIterator<Item = i64>) -> String {
    ids.into_iter()
        .map(|id| id.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Discards those of `ids` that may be, in one transaction that takes
/// their keys first, in key order, as [`one`] takes its one key; returns
/// how many. Each key loses its discarded tasks, and moves on if one of
/// them was its head.
pub(crate) async fn many(
    conn: &mut AsyncMysqlConnection,
    ids: &[TaskId],
    isolation: Isolation,
) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let list = id_list(ids.iter().map(|id| id.get()));
    // The keys never change, so they can be read before the transaction.
    let keys: Vec<Key> = diesel::sql_query(format!(
        "SELECT DISTINCT ordering_key FROM outbox_tasks \
         WHERE id IN ({list}) AND ordering_key IS NOT NULL"
    ))
    .load(conn)
    .await
    .map_err(mysql_error)?;
    // Keys that are not UTF-8 were written by another program; no count of
    // ours holds them. Byte order is the column's order.
    let keys: BTreeSet<String> = keys
        .into_iter()
        .filter_map(|key| key.ordering_key.and_then(|key| String::from_utf8(key).ok()))
        .collect();
    read_committed(conn, isolation, async |conn| {
        for key in &keys {
            diesel::sql_query(
                "SELECT ordering_key FROM outbox_ordering_keys WHERE ordering_key = ? FOR UPDATE",
            )
            .bind::<Text, _>(key)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        }
        // Rows another transaction holds are skipped, as in `one`.
        let targets: Vec<Target> = diesel::sql_query(format!(
            "SELECT id, status, ordering_key FROM outbox_tasks WHERE id IN ({list}) \
             AND status IN ('available', 'waiting', 'blocked', 'failed') FOR UPDATE SKIP LOCKED"
        ))
        .load(conn)
        .await
        .map_err(mysql_error)?;
        if targets.is_empty() {
            return Ok(0);
        }
        diesel::sql_query(format!(
            "UPDATE outbox_tasks FORCE INDEX (PRIMARY) \
             SET status = 'discarded', finished_at = UTC_TIMESTAMP(6), \
             updated_at = UTC_TIMESTAMP(6), lease_owner = NULL, lease_expires_at = NULL \
             WHERE id IN ({})",
            id_list(targets.iter().map(|target| target.id))
        ))
        .execute(conn)
        .await
        .map_err(mysql_error)?;
        let keyed: Vec<(&str, &Target)> = targets
            .iter()
            .filter_map(|target| {
                let key = std::str::from_utf8(target.ordering_key.as_deref()?).ok()?;
                Some((key, target))
            })
            .collect();
        let counts = keys::tally(keyed.iter().map(|(key, _)| *key));
        // Only a key whose head was among them lets its next task go.
        let heads: HashSet<&str> = keyed
            .iter()
            .filter(|(_, target)| target.status != "blocked")
            .map(|(key, _)| *key)
            .collect();
        keys::close(conn, &counts, &|key| heads.contains(key)).await?;
        Ok(targets.len() as u64)
    })
    .await
}
