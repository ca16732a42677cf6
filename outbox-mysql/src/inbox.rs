//! [`Inbox`] on MySQL/MariaDB: the `outbox_inbox` table.

use std::time::Duration;

use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{
    Error, Result,
    inbox::{BodyFuture, Inbox, Receipt, check_key},
};
use diesel_outbox_sql::{
    BodyError, CloseUnlessReleased, cached, micros, mysql_error, require_transaction,
};

use crate::MysqlStore;

/// One row affected: new; none: the key is held. A concurrent insert of the
/// same key waits for the first transaction to end, then inserts nothing (it
/// committed) or inserts (it rolled back).
///
/// Not `ON DUPLICATE KEY UPDATE`: diesel-async's MySQL connection sets
/// `CLIENT_FOUND_ROWS`, under which a duplicate left unchanged counts as one
/// affected row, like an insert. `IGNORE` turns other errors into warnings
/// too, but none can happen here: both values are bound, never NULL, and
/// checked against the column widths before the insert.
const RECORD: &str = "\
INSERT IGNORE INTO outbox_inbox (consumer, message_id, applied_at)
VALUES (?, ?, UTC_TIMESTAMP(6))";

const PURGE: &str = "\
DELETE FROM outbox_inbox
WHERE applied_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY applied_at
LIMIT ?";

impl Inbox for MysqlStore {
    type Conn = AsyncMysqlConnection;

    async fn record(
        &self,
        conn: &mut AsyncMysqlConnection,
        consumer: &str,
        message_id: &str,
    ) -> Result<Receipt> {
        require_transaction(conn)?;
        check_key(consumer, message_id)?;
        let inserted = cached(RECORD)
            .bind::<Text, _>(consumer)
            .bind::<Text, _>(message_id)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(if inserted == 1 {
            Receipt::New
        } else {
            Receipt::Duplicate
        })
    }

    async fn transaction<T, E, F>(&self, body: F) -> Result<T, E>
    where
        T: Send,
        E: From<Error> + Send,
        F: for<'c> FnOnce(&'c mut AsyncMysqlConnection) -> BodyFuture<'c, Result<T, E>> + Send,
    {
        // Abandoned mid-way (a timeout, a panic), the connection closes
        // rather than waiting in the pool with the transaction's locks.
        let mut guard = CloseUnlessReleased::new(self.conn().await?);
        let Some(conn) = guard.get() else {
            return Err(E::from(Error::Config {
                field: "pool",
                reason: "a released connection was used".into(),
            }));
        };
        let result = conn
            .transaction::<T, BodyError<E>, _>(async move |conn| {
                body(conn).await.map_err(BodyError::Body)
            })
            .await
            .map_err(|error| error.into_body_error(mysql_error));
        guard.release();
        result
    }

    async fn purge_inbox_batch(&self, older_than: Duration, limit: u32) -> Result<u64> {
        let deleted = cached(PURGE)
            .bind::<BigInt, _>(micros(older_than))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(&mut *self.conn().await?)
            .await
            .map_err(mysql_error)?;
        Ok(deleted as u64)
    }
}
