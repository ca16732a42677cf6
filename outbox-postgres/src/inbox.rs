//! [`Inbox`] on PostgreSQL: the `outbox_inbox` table.

use std::time::Duration;

use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use diesel_outbox_core::{
    Error, Result,
    inbox::{BodyFuture, Inbox, Receipt, check_key},
};
use diesel_outbox_sql::{
    BodyError, CloseUnlessReleased, cached, micros, postgres_error, require_transaction,
};

use crate::PgStore;

/// A concurrent insert of the same key waits for the first transaction to
/// end, then inserts nothing (it committed) or inserts (it rolled back).
/// Only the key's conflict is absorbed: any other failure is an error.
const RECORD: &str = "\
INSERT INTO outbox_inbox (consumer, message_id) VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO NOTHING";

/// The oldest records first, at most `$2`, passing over those another purge
/// holds. The locked rows reach the `DELETE` by their address (`ctid`),
/// which PostgreSQL reads with a TID scan on all but the smallest tables
/// (about a thousand records, where reading them all costs less): matched
/// by key instead, a table of a few thousand was planned as a scan of all
/// of them. The library never updates a record; one that another program
/// updates while the purge runs is locked at an address the statement's
/// snapshot does not see, so it stays for a later purge.
const PURGE: &str = "\
DELETE FROM outbox_inbox WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM outbox_inbox
    WHERE applied_at < now() - $1 * interval '1 microsecond'
    ORDER BY applied_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED))";

impl Inbox for PgStore {
    type Conn = AsyncPgConnection;

    async fn record(
        &self,
        conn: &mut AsyncPgConnection,
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
            .map_err(postgres_error)?;
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
        F: for<'c> FnOnce(&'c mut AsyncPgConnection) -> BodyFuture<'c, Result<T, E>> + Send,
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
            .map_err(|error| error.into_body_error(postgres_error));
        guard.release();
        result
    }

    async fn purge_inbox_batch(&self, older_than: Duration, limit: u32) -> Result<u64> {
        let deleted = cached(PURGE)
            .bind::<BigInt, _>(micros(older_than))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(&mut *self.conn().await?)
            .await
            .map_err(postgres_error)?;
        Ok(deleted as u64)
    }
}

#[cfg(test)]
mod plans;
