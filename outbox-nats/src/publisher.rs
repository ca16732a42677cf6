//! [`JetStreamPublisher`]: a handler that publishes deliveries to JetStream.

use std::{collections::HashMap, fmt, sync::Arc};

use async_nats::{
    Subject,
    jetstream::{self, message::PublishMessage},
};
use async_trait::async_trait;
use diesel_outbox_core::{Delivery, Handler, HandlerError, HandlerKey, RegistryBuilder};

use crate::{NatsError, classify, headers, subject};

/// The default `Nats-Msg-Id` prefix.
pub const DEFAULT_MESSAGE_ID_PREFIX: &str = "outbox";
/// The default first token of derived subjects.
pub const DEFAULT_SUBJECT_PREFIX: &str = "outbox";

/// What JetStream answered for one published delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Published {
    /// The stream that stored the message.
    pub stream: String,
    /// Its sequence in the stream (the original one for a duplicate).
    pub sequence: u64,
    /// Whether JetStream recognised the `Nats-Msg-Id` and dropped this copy.
    pub duplicate: bool,
}

/// Publishes each delivery to a JetStream subject chosen by its kind and
/// version, and succeeds only on a valid acknowledgement.
///
/// `Nats-Msg-Id` is `<prefix>:<task id>`, so JetStream drops a replay of the
/// same task inside the stream's duplicate window: a crash between publish
/// and the completion write costs nothing downstream. The task's headers
/// travel as NATS headers, with `Outbox-Kind`, `Outbox-Version`,
/// `Outbox-Task-Id` and `Outbox-Attempt` added.
#[derive(Clone)]
pub struct JetStreamPublisher {
    inner: Arc<Inner>,
}

struct Inner {
    jetstream: jetstream::Context,
    routes: HashMap<HandlerKey, String>,
    /// The same subjects, as messages carry them (cloned by reference count).
    subjects: HashMap<HandlerKey, Subject>,
    message_id_prefix: String,
    expected_stream: Option<String>,
}

impl fmt::Debug for JetStreamPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JetStreamPublisher")
            .field("routes", &self.inner.routes)
            .field("message_id_prefix", &self.inner.message_id_prefix)
            .field("expected_stream", &self.inner.expected_stream)
            .finish()
    }
}

impl JetStreamPublisher {
    /// Starts configuring a publisher on `jetstream`.
    pub fn builder(jetstream: jetstream::Context) -> PublisherBuilder {
        PublisherBuilder {
            jetstream,
            routes: Vec::new(),
            subject_prefix: DEFAULT_SUBJECT_PREFIX.to_owned(),
            message_id_prefix: DEFAULT_MESSAGE_ID_PREFIX.to_owned(),
            expected_stream: None,
        }
    }

    /// The subject each `(kind, version)` publishes to.
    pub fn routes(&self) -> &HashMap<HandlerKey, String> {
        &self.inner.routes
    }

    /// The `Nats-Msg-Id` of a task.
    pub fn message_id(&self, id: diesel_outbox_core::TaskId) -> String {
        format!("{}:{id}", self.inner.message_id_prefix)
    }

    /// Registers this publisher for every routed `(kind, version)`.
    pub fn register(&self, registry: RegistryBuilder) -> RegistryBuilder {
        self.inner.routes.keys().fold(registry, |registry, key| {
            registry.handler(key.kind.clone(), key.version, self.clone())
        })
    }

    /// Publishes `delivery` and waits for JetStream's acknowledgement.
    ///
    /// The error is classified: retryable for no stream (no responders),
    /// timeouts and broken connections; permanent for a message over the
    /// server's `max_payload`, a stream that refuses the message, a route
    /// that does not exist, or headers NATS cannot carry.
    pub async fn publish(&self, delivery: &Delivery) -> Result<Published, HandlerError> {
        self.send(delivery, delivery.payload().to_vec()).await
    }

    /// Publishes `delivery` with `payload`, its payload (taken out of a
    /// delivery the publisher owns, or copied from one it borrows).
    async fn send(&self, delivery: &Delivery, payload: Vec<u8>) -> Result<Published, HandlerError> {
        let key = delivery.key();
        let subject = self.inner.subjects.get(&key).ok_or_else(|| {
            HandlerError::permanent(anyhow::anyhow!("no subject is routed for {key}"))
        })?;
        let mut message = PublishMessage::build()
            .payload(payload.into())
            .headers(headers::build(delivery)?)
            .message_id(self.message_id(delivery.id));
        if let Some(stream) = &self.inner.expected_stream {
            message = message.expected_stream(stream);
        }
        let ack = self
            .inner
            .jetstream
            .send_publish(subject.clone(), message)
            .await
            .map_err(classify::publish_error)?
            .await
            .map_err(classify::publish_error)?;
        if ack.sequence == 0 {
            return Err(HandlerError::retryable(anyhow::anyhow!(
                "JetStream acknowledged with sequence 0"
            )));
        }
        if let Some(expected) = &self.inner.expected_stream
            && &ack.stream != expected
        {
            return Err(HandlerError::permanent(anyhow::anyhow!(
                "stored in stream `{}`, expected `{expected}`",
                ack.stream
            )));
        }
        if ack.duplicate {
            tracing::debug!(task_id = delivery.id.get(), stream = %ack.stream, "JetStream dropped a replay");
        }
        Ok(Published {
            stream: ack.stream,
            sequence: ack.sequence,
            duplicate: ack.duplicate,
        })
    }
}

#[async_trait]
impl Handler for JetStreamPublisher {
    async fn handle(&self, mut delivery: Delivery) -> Result<(), HandlerError> {
        // Owned: the payload moves into the message instead of being copied.
        let payload = std::mem::take(&mut delivery.task.payload);
        self.send(&delivery, payload).await.map(|_| ())
    }
}

/// Configures a [`JetStreamPublisher`]; every route is checked by
/// [`build`](PublisherBuilder::build), so a bad subject fails at start-up,
/// never at send time.
pub struct PublisherBuilder {
    jetstream: jetstream::Context,
    routes: Vec<(HandlerKey, Option<String>)>,
    subject_prefix: String,
    message_id_prefix: String,
    expected_stream: Option<String>,
}

impl fmt::Debug for PublisherBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublisherBuilder")
            .field("routes", &self.routes)
            .field("subject_prefix", &self.subject_prefix)
            .finish()
    }
}

impl PublisherBuilder {
    /// Publishes `(kind, version)` to the derived subject
    /// `<subject prefix>.<kind>.v<version>` (by default `outbox.<kind>.v<version>`).
    pub fn route(mut self, kind: impl Into<String>, version: i32) -> Self {
        self.routes.push((HandlerKey::new(kind, version), None));
        self
    }

    /// Publishes `(kind, version)` to `subject`.
    pub fn route_to(
        mut self,
        kind: impl Into<String>,
        version: i32,
        subject: impl Into<String>,
    ) -> Self {
        self.routes
            .push((HandlerKey::new(kind, version), Some(subject.into())));
        self
    }

    /// The first token(s) of derived subjects (default `outbox`).
    pub fn subject_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.subject_prefix = prefix.into();
        self
    }

    /// The `Nats-Msg-Id` prefix (default `outbox`): give each outbox table or
    /// service its own when several publish into one stream, so their task
    /// ids never collide.
    pub fn message_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.message_id_prefix = prefix.into();
        self
    }

    /// Require every message to land in `stream` (`Nats-Expected-Stream`).
    pub fn expected_stream(mut self, stream: impl Into<String>) -> Self {
        self.expected_stream = Some(stream.into());
        self
    }

    /// Checks every route and builds the publisher.
    pub fn build(self) -> Result<JetStreamPublisher, NatsError> {
        let config = |field: &'static str, reason: String| NatsError::Config { field, reason };
        if self.message_id_prefix.is_empty()
            || self.message_id_prefix.chars().any(char::is_whitespace)
        {
            return Err(config(
                "message_id_prefix",
                "must be non-empty without whitespace".into(),
            ));
        }
        if self.routes.is_empty() {
            return Err(config(
                "routes",
                "route at least one (kind, version)".into(),
            ));
        }
        let mut routes = HashMap::new();
        for (key, explicit) in self.routes {
            let subject = explicit.unwrap_or_else(|| {
                format!("{}.{}.v{}", self.subject_prefix, key.kind, key.version)
            });
            subject::check_publishable(&subject)
                .map_err(|reason| config("routes", format!("{key}: {reason}")))?;
            if routes.insert(key.clone(), subject).is_some() {
                return Err(config("routes", format!("{key} is routed twice")));
            }
        }
        Ok(JetStreamPublisher {
            inner: Arc::new(Inner {
                jetstream: self.jetstream,
                subjects: routes
                    .iter()
                    .map(|(key, subject)| (key.clone(), Subject::from(subject.as_str())))
                    .collect(),
                routes,
                message_id_prefix: self.message_id_prefix,
                expected_stream: self.expected_stream,
            }),
        })
    }
}
