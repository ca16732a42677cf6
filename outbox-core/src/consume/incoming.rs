//! What a consumer's handler gets: [`Incoming`], and the [`ConsumeHandler`] trait.

use async_trait::async_trait;
use serde::de::DeserializeOwned;

use crate::{Error, HandlerError, HandlerKey, Headers, TaskId};

/// One delivery of an outbox message to a consumer, whatever the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Incoming {
    /// The message id the publisher set (the task's
    /// [message id](crate::Delivery::message_id), `<outbox id>:<task id>`):
    /// the key the inbox records, stable across replays.
    pub message_id: String,
    /// The task's id in its outbox.
    pub task: TaskId,
    /// The task kind.
    pub kind: String,
    /// The payload protocol version.
    pub version: i32,
    /// The attempt that published this copy.
    pub attempt: i64,
    /// The outbox the task is stored in, when the publisher said
    /// (JetStream's `Outbox-Source`, say).
    pub outbox: Option<String>,
    /// The task's own headers (the outbox's and the broker's removed).
    pub headers: Headers,
    /// The payload.
    pub payload: Vec<u8>,
    /// Where the broker delivered it from: the subject (JetStream), the
    /// queue (RabbitMQ), the stream (Redis).
    pub source: String,
    /// Its position in its stream, where the broker keeps one (JetStream's
    /// stream sequence, say).
    pub sequence: Option<u64>,
    /// How many times the broker has delivered it to this consumer, this
    /// one included (1 for the first).
    pub delivered: i64,
}

impl Incoming {
    /// A first delivery of the message `message_id` carrying `task` (its
    /// id, kind, version, attempt and payload), with no headers and from no
    /// named source; a broker's adapter fills in the rest with the methods
    /// below.
    pub fn new(
        message_id: impl Into<String>,
        task: TaskId,
        kind: impl Into<String>,
        version: i32,
        attempt: i64,
        payload: Vec<u8>,
    ) -> Self {
        Self {
            message_id: message_id.into(),
            task,
            kind: kind.into(),
            version,
            attempt,
            outbox: None,
            headers: Headers::new(),
            payload,
            source: String::new(),
            sequence: None,
            delivered: 1,
        }
    }

    /// The task's own headers.
    pub fn with_headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }

    /// The outbox the task is stored in.
    pub fn with_outbox(mut self, outbox: Option<String>) -> Self {
        self.outbox = outbox;
        self
    }

    /// Where the broker delivered it from, and its position there.
    pub fn with_source(mut self, source: impl Into<String>, sequence: Option<u64>) -> Self {
        self.source = source.into();
        self.sequence = sequence;
        self
    }

    /// How many times the broker has delivered it, this one included.
    pub fn with_delivered(mut self, delivered: i64) -> Self {
        self.delivered = delivered;
        self
    }

    /// The kind and version the message was published as.
    pub fn key(&self) -> HandlerKey {
        HandlerKey::new(self.kind.clone(), self.version)
    }

    /// The task's own headers.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Decodes a JSON payload; a payload that does not decode is a permanent
    /// failure (no redelivery can change it), so `incoming.json()?` in a
    /// handler dead-letters the message.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        serde_json::from_slice(&self.payload).map_err(|e| {
            HandlerError::permanent(Error::Corrupt {
                id: self.task,
                field: "payload",
                reason: e.to_string(),
            })
        })
    }
}

/// Applies one message inside the consumer's transaction on `conn`, the
/// connection type of the [`Inbox`](crate::Inbox) (for example
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
