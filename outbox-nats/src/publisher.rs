//! [`JetStreamPublisher`]: a handler that publishes deliveries to JetStream.

use std::{collections::HashMap, fmt, sync::Arc};

use async_nats::{
    Subject,
    jetstream::{self, context::PublishAckFuture, message::PublishMessage},
};
use async_trait::async_trait;
use diesel_outbox_core::{
    BatchHandler, Delivery, Handler, HandlerError, HandlerKey, RegistryBuilder, wire,
};

use crate::{NatsError, classify, headers, subject};

pub use diesel_outbox_core::wire::MAX_MESSAGE_ID_PREFIX_BYTES;

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
/// It is a [`Handler`] and a [`BatchHandler`]; [`register`](Self::register)
/// registers it as the latter, so a relay publishes all the messages of a
/// claim before it awaits their acknowledgements, together.
///
/// `Nats-Msg-Id` is the task's [message id](Delivery::message_id),
/// `<outbox id>:<task id>`, unique to the task across every outbox, so
/// JetStream drops a replay of the same task inside the stream's duplicate
/// window (a crash between publish and the completion write costs nothing
/// downstream) and never the message of another service's task. An
/// acknowledgement that says `duplicate` is taken for success only once the
/// message stored under that id is found to be this task's own; a
/// different one fails the task for good, naming the collision. The task's
/// headers travel as NATS headers, with `Outbox-Kind`, `Outbox-Version`,
/// `Outbox-Task-Id`, `Outbox-Attempt` and `Outbox-Source` (the outbox id)
/// added.
#[derive(Clone)]
pub struct JetStreamPublisher {
    inner: Arc<Inner>,
}

struct Inner {
    jetstream: jetstream::Context,
    routes: HashMap<HandlerKey, String>,
    /// The same subjects, as messages carry them (cloned by reference count).
    subjects: HashMap<HandlerKey, Subject>,
    message_id_prefix: Option<String>,
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
            subject_prefix: None,
            message_id_prefix: None,
            expected_stream: None,
        }
    }

    /// The subject each `(kind, version)` publishes to.
    pub fn routes(&self) -> &HashMap<HandlerKey, String> {
        &self.inner.routes
    }

    /// The `Nats-Msg-Id` of a delivery: its [message id](Delivery::message_id),
    /// or `<prefix>:<task id>` with an explicit `message_id_prefix`.
    pub fn message_id(&self, delivery: &Delivery) -> String {
        delivery.message_id_with(self.inner.message_id_prefix.as_deref())
    }

    /// Registers this publisher for every routed `(kind, version)`, as
    /// their batch handler: a relay publishes each claim's messages with
    /// their acknowledgements in flight together.
    pub fn register(&self, registry: RegistryBuilder) -> RegistryBuilder {
        registry.batch_handler_for(self.inner.routes.keys(), self)
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
        let (message_id, ack) = self.start(delivery, payload).await?;
        self.acknowledged(delivery, &message_id, ack).await
    }

    /// Hands the message of `delivery` to the connection; returns its
    /// `Nats-Msg-Id` and the acknowledgement to await.
    async fn start(
        &self,
        delivery: &Delivery,
        payload: Vec<u8>,
    ) -> Result<(String, PublishAckFuture), HandlerError> {
        let key = delivery.key();
        let subject = self.inner.subjects.get(&key).ok_or_else(|| {
            HandlerError::permanent(anyhow::anyhow!("no subject is routed for {key}"))
        })?;
        let message_id = self.message_id(delivery);
        let mut message = PublishMessage::build()
            .payload(payload.into())
            .headers(headers::build(delivery)?)
            .message_id(message_id.as_str());
        if let Some(stream) = &self.inner.expected_stream {
            message = message.expected_stream(stream);
        }
        let ack = self
            .inner
            .jetstream
            .send_publish(subject.clone(), message)
            .await
            .map_err(classify::publish_error)?;
        Ok((message_id, ack))
    }

    /// Awaits JetStream's acknowledgement of `delivery`'s message and
    /// checks it.
    async fn acknowledged(
        &self,
        delivery: &Delivery,
        message_id: &str,
        ack: PublishAckFuture,
    ) -> Result<Published, HandlerError> {
        let ack = ack.await.map_err(classify::publish_error)?;
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
            self.own_replay(delivery, message_id, &ack.stream, ack.sequence)
                .await?;
            tracing::debug!(task_id = delivery.id.get(), stream = %ack.stream, "JetStream dropped a replay");
        }
        Ok(Published {
            stream: ack.stream,
            sequence: ack.sequence,
            duplicate: ack.duplicate,
        })
    }
}

impl JetStreamPublisher {
    /// Checks that the message JetStream holds under `message_id` (at
    /// `sequence` of `stream`) is this delivery's task: published by the
    /// same outbox for the same task. A different message means two
    /// publishers share ids (an explicit prefix given twice, a copied
    /// database), and this task's message was never stored: a permanent
    /// failure naming the collision. Reading the stored message failing is
    /// retryable.
    async fn own_replay(
        &self,
        delivery: &Delivery,
        message_id: &str,
        stream: &str,
        sequence: u64,
    ) -> Result<(), HandlerError> {
        let stored = self
            .inner
            .jetstream
            .get_stream_no_info(stream)
            .await
            .map_err(|e| {
                HandlerError::retryable(anyhow::anyhow!(
                    "could not check the replay in stream `{stream}`: {e}"
                ))
            })?
            .get_raw_message(sequence)
            .await
            .map_err(|e| {
                HandlerError::retryable(anyhow::anyhow!(
                    "could not read message {sequence} of stream `{stream}` to check the \
                     replay of `{message_id}`: {e}"
                ))
            })?;
        let header = |name: &str| {
            stored
                .headers
                .get(name)
                .map(|value| value.as_str().to_owned())
        };
        let (task, source) = (header(headers::TASK_ID), header(headers::SOURCE));
        let own = task.as_deref() == Some(delivery.id.get().to_string().as_str())
            && source.as_deref() == Some(delivery.outbox.as_str())
            && header(headers::KIND).as_deref() == Some(delivery.task.kind.as_str());
        if own {
            return Ok(());
        }
        Err(HandlerError::permanent(anyhow::anyhow!(
            "message id `{message_id}` is taken in stream `{stream}` (sequence {sequence}) by \
             another message (task {}, outbox {}): JetStream dropped this task's message as a \
             replay. Two publishers share message ids; give each its own message_id_prefix, or \
             none (the outbox's own id)",
            task.as_deref().unwrap_or("unknown"),
            source.as_deref().unwrap_or("unknown"),
        )))
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

/// Publishes the whole batch, then awaits every acknowledgement together:
/// the batch costs about one round trip to the server, not one per message.
/// Each delivery's answer is its own acknowledgement, checked as
/// [`publish`](JetStreamPublisher::publish) checks it.
#[async_trait]
impl BatchHandler for JetStreamPublisher {
    async fn handle_batch(&self, mut deliveries: Vec<Delivery>) -> Vec<Result<(), HandlerError>> {
        let mut started = Vec::with_capacity(deliveries.len());
        for delivery in &mut deliveries {
            let payload = std::mem::take(&mut delivery.task.payload);
            started.push(self.start(delivery, payload).await);
        }
        let acknowledged = deliveries
            .iter()
            .zip(started)
            .map(|(delivery, started)| async move {
                let (message_id, ack) = started?;
                self.acknowledged(delivery, &message_id, ack)
                    .await
                    .map(|_| ())
            });
        futures_util::future::join_all(acknowledged).await
    }
}

/// Configures a [`JetStreamPublisher`]; every route is checked by
/// [`build`](PublisherBuilder::build), so a bad subject fails at start-up,
/// never at send time.
pub struct PublisherBuilder {
    jetstream: jetstream::Context,
    routes: Vec<(HandlerKey, Option<String>)>,
    subject_prefix: Option<String>,
    message_id_prefix: Option<String>,
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
    /// `<subject prefix>.<kind>.v<version>`; the prefix has no default (see
    /// [`subject_prefix`](Self::subject_prefix)).
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

    /// The first token(s) of derived subjects ([`route`](Self::route)),
    /// for example the service's name: `orders` publishes
    /// `order.created` v1 to `orders.order.created.v1`. Required by
    /// `route` and without a default, so two services never share subjects
    /// by leaving it out.
    pub fn subject_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.subject_prefix = Some(prefix.into());
        self
    }

    /// Makes `Nats-Msg-Id` `<prefix>:<task id>` instead of the task's
    /// [message id](Delivery::message_id) (`<outbox id>:<task id>`, the
    /// default, unique to each outbox by construction). Two publishers
    /// with the same prefix collide: give each its own. Keeping the prefix
    /// of an earlier release (`outbox`) for a while lets the messages
    /// already published before an upgrade be recognised as replays (see
    /// "Message ids across services" in the operations guide). At most
    /// [`MAX_MESSAGE_ID_PREFIX_BYTES`] bytes, so an id fits an inbox.
    pub fn message_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.message_id_prefix = Some(prefix.into());
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
        if let Some(prefix) = &self.message_id_prefix {
            wire::check_message_id_prefix(prefix)
                .map_err(|reason| config("message_id_prefix", reason))?;
        }
        if self.routes.is_empty() {
            return Err(config(
                "routes",
                "route at least one (kind, version)".into(),
            ));
        }
        let mut routes = HashMap::new();
        for (key, explicit) in self.routes {
            let subject = match (explicit, &self.subject_prefix) {
                (Some(subject), _) => subject,
                (None, Some(prefix)) => format!("{prefix}.{}.v{}", key.kind, key.version),
                (None, None) => {
                    return Err(config(
                        "subject_prefix",
                        format!(
                            "{key} is routed to a derived subject, which needs a subject_prefix \
                             (the service's name, say); there is no default, so that two \
                             services never share subjects by leaving it out"
                        ),
                    ));
                }
            };
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
