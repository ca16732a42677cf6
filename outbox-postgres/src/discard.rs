//! `discard`: an operator gives a task up ([`transition::discard`] in SQL).
//!
//! [`transition::discard`]: diesel_outbox_core::transition::discard

use diesel::{
    OptionalExtension, QueryableByName,
    sql_types::{BigInt, Nullable, Text},
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
