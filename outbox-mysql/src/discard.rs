//! `discard`: an operator gives a task up ([`transition::discard`] in SQL).
//!
//! [`transition::discard`]: diesel_outbox_core::transition::discard

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
