//! What a consumer's handler gets: [`Incoming`], and the [`ConsumeHandler`] trait.

use async_trait::async_trait;
use diesel_outbox_core::{Error, HandlerError, HandlerKey, Headers};
use serde::de::DeserializeOwned;

use crate::Received;

/// One delivery of an outbox message to an [`InboxConsumer`](crate::InboxConsumer).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Incoming {
    /// The `Nats-Msg-Id` the publisher set (`<prefix>:<task id>`): the key
    /// the inbox records, stable across replays.
    pub message_id: String,
    /// The subject it was published to.
    pub subject: String,
    /// Its sequence in the stream.
    pub stream_sequence: u64,
    /// How many times JetStream has delivered it to this consumer, this one
    /// included (1 for the first).
    pub delivered: i64,
    /// The decoded outbox message: task id, kind, version, headers, payload.
    pub message: Received,
}

impl Incoming {
    /// The kind and version the message was published as.
    pub fn key(&self) -> HandlerKey {
        HandlerKey::new(self.message.kind.clone(), self.message.version)
    }

    /// The task's own headers.
    pub fn headers(&self) -> &Headers {
        &self.message.headers
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.message.payload
    }

    /// Decodes a JSON payload; a payload that does not decode is a permanent
    /// failure (no redelivery can change it), so `incoming.json()?` in a
    /// handler dead-letters the message.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        serde_json::from_slice(&self.message.payload).map_err(|e| {
            HandlerError::permanent(Error::Corrupt {
                id: self.message.id,
                field: "payload",
                reason: e.to_string(),
            })
        })
    }
}

/// Applies one message inside the consumer's transaction on `conn`, the
/// connection type of the [`Inbox`](diesel_outbox_core::Inbox) (for example
/// `AsyncPgConnection`).
///
/// The transaction already holds the message's inbox record: write the
/// effect on `conn` (and enqueue outbox tasks on it, to publish the next
/// event atomically). `Ok` commits and acknowledges; an error rolls back.
/// A [retryable](HandlerError::retryable) error redelivers the message after
/// the consumer's backoff; a [permanent](HandlerError::permanent) one, or
/// the last allowed delivery failing, dead-letters it.
#[async_trait]
pub trait ConsumeHandler<C: Send>: Send + Sync + 'static {
    /// Applies `incoming` on `conn`, inside the consumer's transaction.
    async fn handle(&self, conn: &mut C, incoming: &Incoming) -> Result<(), HandlerError>;
}
