//! The consumer's side: [`Inbox`], which records each message a consumer
//! applies, in the consumer's own transaction, so that its effect happens
//! once however often the message arrives.
//!
//! The outbox delivers at least once; a consumer that records the message id
//! in the same transaction as its effect turns that into "applied once": a
//! second delivery finds the id and is answered [`Receipt::Duplicate`], and a
//! rolled-back effect leaves no record, so the next delivery applies it.

use std::{future::Future, pin::Pin, time::Duration};

use crate::{Error, Result};

/// The longest consumer name, in bytes.
pub const MAX_CONSUMER_BYTES: usize = 64;
/// The longest message id, in bytes.
pub const MAX_MESSAGE_ID_BYTES: usize = 255;

/// What [`Inbox::record`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Receipt {
    /// First time for this consumer: apply the effect in the same
    /// transaction; the record commits or rolls back with it.
    New,
    /// Already applied by this consumer (committed): skip the effect.
    Duplicate,
}

impl Receipt {
    /// Whether the message is new, so its effect must be applied.
    pub fn is_new(self) -> bool {
        self == Self::New
    }
}

/// Checks a consumer name and a message id before anything is written:
/// each non-empty, the name at most [`MAX_CONSUMER_BYTES`] and the id at
/// most [`MAX_MESSAGE_ID_BYTES`] bytes. [`Error::InvalidArgument`] names
/// `consumer` or `message_id` otherwise.
///
/// ```
/// use diesel_outbox_core::inbox::check_key;
///
/// assert!(check_key("shipping", "orders:42").is_ok());
/// assert_eq!(check_key("", "orders:42").unwrap_err().field(), Some("consumer"));
/// assert_eq!(check_key("shipping", &"x".repeat(256)).unwrap_err().field(), Some("message_id"));
/// ```
pub fn check_key(consumer: &str, message_id: &str) -> Result<()> {
    let check = |field: &'static str, value: &str, max: usize| {
        if value.is_empty() {
            return Err(Error::invalid(field, "must not be empty"));
        }
        if value.len() > max {
            return Err(Error::invalid(
                field,
                format!("{} bytes exceed the limit of {max}", value.len()),
            ));
        }
        Ok(())
    };
    check("consumer", consumer, MAX_CONSUMER_BYTES)?;
    check("message_id", message_id, MAX_MESSAGE_ID_BYTES)
}

/// The future of a transaction body given to [`Inbox::transaction`]: boxed,
/// so that it may borrow the connection it is handed.
pub type BodyFuture<'c, T> = Pin<Box<dyn Future<Output = T> + Send + 'c>>;

/// Where a consumer records the messages it applied: the `outbox_inbox`
/// table, keyed by `(consumer, message_id)`, with the time each was applied.
///
/// Backends implement it on their store; the inbox has a migration of its
/// own, so a service that only consumes applies just that one.
pub trait Inbox: Clone + Send + Sync + 'static {
    /// The connection the consumer's transaction runs on.
    type Conn: Send;

    /// Records that `consumer` applies `message_id`, inside the caller's open
    /// transaction, and says whether it is [`New`](Receipt::New) or a
    /// [`Duplicate`](Receipt::Duplicate).
    ///
    /// Run the effect in the same transaction only when the answer is `New`:
    /// the record then commits or rolls back with the effect. Concurrent
    /// deliveries of one id in several transactions never both get `New`:
    /// the later ones wait for the first to end and then see `Duplicate`
    /// (or `New`, if the first rolled back). Outside a transaction:
    /// [`Error::NotTransaction`]; a bad name or id:
    /// [`Error::InvalidArgument`] ([`check_key`]); nothing is written
    /// either way.
    fn record(
        &self,
        conn: &mut Self::Conn,
        consumer: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<Receipt>> + Send;

    /// Runs `body` in a transaction on a connection of the store's pool:
    /// committed when it returns `Ok`, rolled back when it returns `Err`.
    /// Failures to begin or commit come back as `E::from(Error)`.
    ///
    /// The body's future may borrow the connection but owns everything else
    /// it uses: move clones in (a store is a cheap clone of its pool).
    fn transaction<T, E, F>(&self, body: F) -> impl Future<Output = Result<T, E>> + Send
    where
        T: Send,
        E: From<Error> + Send,
        F: for<'c> FnOnce(&'c mut Self::Conn) -> BodyFuture<'c, Result<T, E>> + Send;

    /// Deletes up to `limit` records applied more than `older_than` ago, in
    /// one statement; returns how many. The building block of
    /// [`purge_inbox`](Inbox::purge_inbox).
    fn purge_inbox_batch(
        &self,
        older_than: Duration,
        limit: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes records applied more than `older_than` ago, `batch` rows per
    /// statement so that no statement holds locks for long; returns how many
    /// were deleted. Keep records longer than any copy of a message can
    /// still arrive: a delivery after its record was purged is applied
    /// again. `older_than` past [`MAX_DURATION`](crate::limits::MAX_DURATION)
    /// or a `batch` of 0 is refused, naming it.
    fn purge_inbox(
        &self,
        older_than: Duration,
        batch: usize,
    ) -> impl Future<Output = Result<u64>> + Send {
        async move {
            if older_than > crate::limits::MAX_DURATION {
                return Err(Error::invalid(
                    "older_than",
                    format!("{older_than:?} exceeds the 100-year bound of limits::MAX_DURATION"),
                ));
            }
            let limit = u32::try_from(batch)
                .ok()
                .filter(|limit| *limit > 0)
                .ok_or_else(|| Error::invalid("batch", "must be between 1 and 4294967295"))?;
            let mut purged = 0;
            loop {
                let deleted = self.purge_inbox_batch(older_than, limit).await?;
                purged += deleted;
                if deleted < u64::from(limit) {
                    return Ok(purged);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_at_their_byte_limits() {
        assert!(check_key(&"c".repeat(64), &"m".repeat(255)).is_ok());
        assert_eq!(
            check_key(&"c".repeat(65), "m").unwrap_err().field(),
            Some("consumer")
        );
        assert_eq!(
            check_key("c", &"é".repeat(128)).unwrap_err().field(),
            Some("message_id")
        );
        assert_eq!(check_key("c", "").unwrap_err().field(), Some("message_id"));
    }
}
