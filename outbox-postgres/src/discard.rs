//! `discard`: an operator gives a task up ([`transition::discard`] in SQL).
//!
//! [`transition::discard`]: diesel_outbox_core::transition::discard

use std::collections::HashSet;

use diesel::{
    OptionalExtension, QueryableByName,
    sql_types::{Array, BigInt, Nullable, Text},
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_outbox_core::{Result, TaskId};
use diesel_outbox_sql::{cached, postgres_error};

use crate::{keys, store_transaction::store_transaction};

#[derive(QueryableByName)]
struct Key {
    #[diesel(sql_type = Nullable<Text>)]
    ordering_key: Option<String>,
}

#[derive(QueryableByName)]
struct Before {
    #[diesel(sql_type = Text)]
    status: String,
}

const KEY: &str = "SELECT ordering_key FROM outbox_tasks WHERE id = $1";

const LOCK_KEY: &str =
    "SELECT ordering_key FROM outbox_ordering_keys WHERE ordering_key = $1 FOR UPDATE";

/// A row another transaction holds is being claimed, completed or moved
/// right now: it is skipped, and the discard reports that nothing changed.
const DISCARD: &str = "\
WITH target AS (
    SELECT id, status FROM outbox_tasks
    WHERE id = $1 AND status IN ('available', 'waiting', 'blocked', 'failed')
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_tasks t SET status = 'discarded', finished_at = now(), updated_at = now(),
    lease_owner = NULL, lease_expires_at = NULL
FROM target WHERE t.id = target.id
RETURNING target.status";

/// Discards task `id` if it may be; `false` when it is absent, running,
/// finished (but failed) or held by another transaction this instant.
pub(crate) async fn one(conn: &mut AsyncPgConnection, id: TaskId) -> Result<bool> {
    // The key never changes, so it can be read before the transaction.
    let key: Option<Key> = cached(KEY)
        .bind::<BigInt, _>(id.get())
        .get_result(conn)
        .await
        .optional()
        .map_err(postgres_error)?;
    let Some(Key { ordering_key }) = key else {
        return Ok(false);
    };
    store_transaction(conn, async |conn| {
        // The key first, as enqueue takes it: a completion that holds the
        // key may be about to unblock this very task.
        if let Some(key) = &ordering_key {
            cached(LOCK_KEY)
                .bind::<Text, _>(key)
                .execute(conn)
                .await
                .map_err(postgres_error)?;
        }
        let before: Option<Before> = cached(DISCARD)
            .bind::<BigInt, _>(id.get())
            .get_result(conn)
            .await
            .optional()
            .map_err(postgres_error)?;
        let Some(before) = before else {
            return Ok(false);
        };
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
struct Discarded {
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Nullable<Text>)]
    ordering_key: Option<String>,
}

/// The keys of a batch, to lock before its rows.
const KEYS_OF: &str = "\
SELECT DISTINCT ordering_key FROM outbox_tasks
WHERE id = ANY($1) AND ordering_key IS NOT NULL
ORDER BY ordering_key";

const LOCK_KEYS: &str = "\
SELECT ordering_key FROM outbox_ordering_keys WHERE ordering_key = ANY($1)
ORDER BY ordering_key FOR UPDATE";

/// [`DISCARD`] for a batch of ids.
const DISCARD_MANY: &str = "\
WITH target AS (
    SELECT id, status, ordering_key FROM outbox_tasks
    WHERE id = ANY($1) AND status IN ('available', 'waiting', 'blocked', 'failed')
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_tasks t SET status = 'discarded', finished_at = now(), updated_at = now(),
    lease_owner = NULL, lease_expires_at = NULL
FROM target WHERE t.id = target.id
RETURNING target.status, target.ordering_key";

/// Discards those of `ids` that may be, in one transaction that takes
/// their keys first, in key order, as [`one`] takes its one key; returns
/// how many. Each key loses its discarded tasks, and moves on if one of
/// them was its head.
pub(crate) async fn many(conn: &mut AsyncPgConnection, ids: &[TaskId]) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
    // The keys never change, so they can be read before the transaction.
    let keys: Vec<Key> = cached(KEYS_OF)
        .bind::<Array<BigInt>, _>(&ids)
        .load(conn)
        .await
        .map_err(postgres_error)?;
    let keys: Vec<String> = keys
        .into_iter()
        .filter_map(|key| key.ordering_key)
        .collect();
    store_transaction(conn, async |conn| {
        if !keys.is_empty() {
            cached(LOCK_KEYS)
                .bind::<Array<Text>, _>(&keys)
                .execute(conn)
                .await
                .map_err(postgres_error)?;
        }
        let discarded: Vec<Discarded> = cached(DISCARD_MANY)
            .bind::<Array<BigInt>, _>(&ids)
            .load(conn)
            .await
            .map_err(postgres_error)?;
        let keyed = || {
            discarded
                .iter()
                .filter_map(|row| row.ordering_key.as_deref().map(|key| (key, row)))
        };
        let counts = keys::tally(keyed().map(|(key, _)| key));
        // Only a key whose head was among them lets its next task go.
        let heads: HashSet<&str> = keyed()
            .filter(|(_, row)| row.status != "blocked")
            .map(|(key, _)| key)
            .collect();
        keys::close(conn, &counts, &|key| heads.contains(key)).await?;
        Ok(discarded.len() as u64)
    })
    .await
}
