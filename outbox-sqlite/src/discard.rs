//! `discard`: an operator gives a task up ([`transition::discard`] in SQL).
//!
//! [`transition::discard`]: diesel_outbox_core::transition::discard

use diesel::{
    OptionalExtension, QueryableByName,
    sql_types::{BigInt, Binary, Nullable, Text},
    sqlite::Sqlite,
};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{Result, TaskId};
use diesel_outbox_sql::{cached, sqlite_error};

use crate::{
    AsyncSqliteConnection, keys,
    store_transaction::write,
    timestamp::{self, to_micros},
};

#[derive(QueryableByName)]
struct Before {
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Nullable<Binary>)]
    ordering_key: Option<Vec<u8>>,
}

/// Discards task `id` if it may be; `false` when it is absent, running, or
/// finished (but failed).
///
/// One write transaction: no other writer can claim, complete or move the
/// task between the read of its status and the update, so nothing needs
/// skipping.
pub(crate) async fn one(conn: &mut AsyncSqliteConnection, id: TaskId) -> Result<bool> {
    write(conn, async |conn| {
        let now = timestamp::now();
        let before: Option<Before> = cached::<Sqlite>(
            "SELECT status, ordering_key FROM outbox_tasks WHERE id = $1 \
             AND status IN ('available', 'waiting', 'blocked', 'failed')",
        )
        .bind::<BigInt, _>(id.get())
        .get_result(conn)
        .await
        .optional()
        .map_err(sqlite_error)?;
        let Some(before) = before else {
            return Ok(false);
        };
        cached::<Sqlite>(
            "UPDATE outbox_tasks SET status = 'discarded', finished_at = $1, updated_at = $1, \
             lease_owner = NULL, lease_expires_at = NULL WHERE id = $2",
        )
        .bind::<BigInt, _>(to_micros(now))
        .bind::<BigInt, _>(id.get())
        .execute(conn)
        .await
        .map_err(sqlite_error)?;
        // A key that is not UTF-8 was written by another program; no count
        // of ours holds it.
        if let Some(key) = before
            .ordering_key
            .and_then(|key| String::from_utf8(key).ok())
        {
            // Only a task that held the key's head lets the next one go.
            let was_head = before.status != "blocked";
            keys::close(conn, &keys::tally([key.as_str()]), &|_| was_head, now).await?;
        }
        Ok(true)
    })
    .await
}
