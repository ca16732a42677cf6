//! [`Inbox`] on SQLite: the `outbox_inbox` table.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use diesel::{
    sql_types::{BigInt, Text},
    sqlite::Sqlite,
};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{
    Error, Result,
    inbox::{BodyFuture, Inbox, Receipt, check_key},
};
use diesel_outbox_sql::{
    BodyError, CloseUnlessReleased, cached, require_transaction, sqlite_error,
};

use crate::{
    AsyncSqliteConnection, SqliteStore,
    timestamp::{self, to_micros},
};

/// Only the key's conflict is absorbed (not `INSERT OR IGNORE`, which would
/// also skip a row that breaks a `CHECK`). Writers take turns on SQLite, so
/// a second delivery of one id finds the first one's committed record.
const RECORD: &str = "\
INSERT INTO outbox_inbox (consumer, message_id, applied_at) VALUES ($1, $2, $3)
ON CONFLICT (consumer, message_id) DO NOTHING";

const PURGE: &str = "\
DELETE FROM outbox_inbox WHERE rowid IN (
    SELECT rowid FROM outbox_inbox INDEXED BY outbox_inbox_applied_idx
    WHERE applied_at < $1
    ORDER BY applied_at
    LIMIT $2)";

impl Inbox for SqliteStore {
    type Conn = AsyncSqliteConnection;

    async fn record(
        &self,
        conn: &mut AsyncSqliteConnection,
        consumer: &str,
        message_id: &str,
    ) -> Result<Receipt> {
        require_transaction(conn)?;
        check_key(consumer, message_id)?;
        let inserted = cached::<Sqlite>(RECORD)
            .bind::<Text, _>(consumer)
            .bind::<Text, _>(message_id)
            .bind::<BigInt, _>(to_micros(timestamp::now()))
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(if inserted == 1 {
            Receipt::New
        } else {
            Receipt::Duplicate
        })
    }

    /// A `BEGIN IMMEDIATE` transaction, taken in this process's turn to
    /// write (see [`SqliteStore`]).
    async fn transaction<T, E, F>(&self, body: F) -> Result<T, E>
    where
        T: Send,
        E: From<Error> + Send,
        F: for<'c> FnOnce(&'c mut AsyncSqliteConnection) -> BodyFuture<'c, Result<T, E>> + Send,
    {
        let (_turn, conn) = self.writer().await?;
        // Abandoned mid-way (a timeout, a panic), the connection closes
        // rather than waiting in the pool holding the write lock.
        let mut guard = CloseUnlessReleased::new(conn);
        let Some(conn) = guard.get() else {
            return Err(E::from(Error::Config {
                field: "pool",
                reason: "a released connection was used".into(),
            }));
        };
        let result = conn
            .immediate_transaction::<T, BodyError<E>, _>(async move |conn| {
                body(conn).await.map_err(BodyError::Body)
            })
            .await
            .map_err(|error| error.into_body_error(sqlite_error));
        guard.release();
        result
    }

    async fn purge_inbox_batch(&self, older_than: Duration, limit: u32) -> Result<u64> {
        let (_turn, mut conn) = self.writer().await?;
        let now = timestamp::now();
        let cutoff = TimeDelta::from_std(older_than)
            .ok()
            .and_then(|age| now.checked_sub_signed(age))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let deleted = cached::<Sqlite>(PURGE)
            .bind::<BigInt, _>(to_micros(cutoff))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(&mut *conn)
            .await
            .map_err(sqlite_error)?;
        Ok(deleted as u64)
    }
}
