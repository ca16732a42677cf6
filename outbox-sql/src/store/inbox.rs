//! [`Inbox`] for [`SqlStore`]: the `outbox_inbox` table.

use std::time::Duration;

use diesel_outbox_core::{
    Error, Result,
    inbox::{BodyFuture, Inbox, Receipt, check_key},
};

use super::SqlStore;
use crate::{BodyError, Dialect, Transact, require_transaction};

impl<D: Dialect> Inbox for SqlStore<D> {
    type Conn = D::Conn;

    async fn record(
        &self,
        conn: &mut D::Conn,
        consumer: &str,
        message_id: &str,
    ) -> Result<Receipt> {
        require_transaction(conn)?;
        check_key(consumer, message_id)?;
        let inserted = self.dialect().record(conn, consumer, message_id).await?;
        Ok(if inserted == 1 {
            Receipt::New
        } else {
            Receipt::Duplicate
        })
    }

    /// A transaction of the kind the backend's `transaction` helper opens
    /// (`BEGIN IMMEDIATE` on SQLite), on a connection of the pool taken in
    /// the store's turn to write. Abandoned mid-way (a timeout, a panic, a
    /// dropped future), the connection closes rather than waiting in the
    /// pool with the transaction's locks.
    async fn transaction<T, E, F>(&self, body: F) -> Result<T, E>
    where
        T: Send,
        E: From<Error> + Send,
        F: for<'c> FnOnce(&'c mut D::Conn) -> BodyFuture<'c, Result<T, E>> + Send,
    {
        let outcome = self
            .write(async move |conn| {
                Ok(Transact::<D>::write_transaction::<T, BodyError<E>, _>(
                    conn,
                    async move |conn| body(conn).await.map_err(BodyError::Body),
                )
                .await
                .map_err(|error| error.into_body_error(D::error)))
            })
            .await;
        outcome.unwrap_or_else(|error| Err(E::from(error)))
    }

    async fn purge_inbox_batch(&self, older_than: Duration, limit: u32) -> Result<u64> {
        self.write(async |conn| self.dialect().purge_inbox(conn, older_than, limit).await)
            .await
    }
}
