//! Publish outbox tasks to NATS JetStream, with replays made harmless.
//!
//! [`JetStreamPublisher`] is a [`Handler`](diesel_outbox_core::Handler): register it
//! for the `(kind, version)` pairs it routes, and the worker or relay
//! publishes each task to its subject. It succeeds only on a valid
//! acknowledgement from the expected stream, and sets `Nats-Msg-Id` to the
//! task's message id (`<outbox id>:<task id>`, unique across services), so
//! JetStream drops a replay (after a crash, or a lost completion write) inside the stream's duplicate window: effectively once in the
//! stream. [`StreamSpec`] creates or checks the stream; [`decode`] reads a
//! message back on the consumer's side.
//!
//! On the consumer's side, [`InboxConsumer`] reads a durable pull consumer
//! and applies each message once: it records the message id in the
//! consumer's inbox table ([`Inbox`](diesel_outbox_core::Inbox)) in the same
//! database transaction as the [`ConsumeHandler`]'s effect, commits, then
//! acknowledges, so a redelivery (after a crash between commit and ack, or a
//! replay past the duplicate window) is acknowledged without a second
//! effect. [consuming.md](https://github.com/outbox-rs/outbox/blob/main/docs/consuming.md) has the whole story.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use futures_util::StreamExt;
//! use diesel_outbox_core::Registry;
//! use diesel_outbox_nats::{JetStreamPublisher, StreamSpec, decode};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let client = async_nats::connect("nats://127.0.0.1:4222").await?;
//! let jetstream = async_nats::jetstream::new(client);
//!
//! // Publishing: order.created v1 goes to `orders.created.v1`.
//! let publisher = JetStreamPublisher::builder(jetstream.clone())
//!     .route_to("order.created", 1, "orders.created.v1")
//!     .expected_stream("ORDERS")
//!     .build()?;
//! StreamSpec::for_publisher("ORDERS", &publisher)
//!     .duplicate_window(Duration::from_secs(600))
//!     .ensure(&jetstream)
//!     .await?;
//! let registry = publisher.register(Registry::builder()).build()?;
//! // Worker::new(store, registry)?, then send / retry_pending / Relay::run.
//! # let _ = registry;
//!
//! // Consuming: every message decodes back to the task.
//! let stream = jetstream.get_stream("ORDERS").await?;
//! let consumer = stream
//!     .create_consumer(async_nats::jetstream::consumer::pull::Config::default())
//!     .await?;
//! let mut messages = consumer.messages().await?;
//! while let Some(message) = messages.next().await {
//!     let message = message?;
//!     let received = decode(&message)?;
//!     println!("task {} ({} v{})", received.id, received.kind, received.version);
//!     message.ack().await.map_err(|e| anyhow::anyhow!(e))?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Replays and the duplicate window
//!
//! JetStream remembers a `Nats-Msg-Id` only for the stream's duplicate
//! window (2 minutes by default). The relay retries with exponential backoff
//! (up to 10 minutes by default), so a replay that comes later than the
//! window is stored again. Either keep retries inside the window (a
//! [`RetryPolicy`](diesel_outbox_core::RetryPolicy) whose cap is below it), widen the
//! window ([`StreamSpec::duplicate_window`]), or deduplicate downstream by
//! [`Received::id`], which never changes between attempts.
//!
//! # Failures
//!
//! Retryable (the task stays pending): no stream for the subject (no
//! responders), timeouts, broken connections, back-pressure. Permanent (the
//! task fails; requeue it after fixing the cause): a message over the
//! server's `max_payload`, a stream that refuses the message (expected stream
//! mismatch, message or header too large, sealed stream), or task headers
//! NATS cannot carry or that use the reserved `Outbox-`/`Nats-` prefixes.

mod classify;
mod consumer;
mod decode;
mod error;
pub mod headers;
mod publisher;
mod stream;
mod subject;

pub use consumer::{
    ConsumeHandler, ConsumerBuilder, ConsumerReport, DEAD_CONSUMER, DEAD_DELIVERED, DEAD_REASON,
    DEAD_SEQUENCE, DEFAULT_IDLE_HEARTBEAT, DeadLetter, InboxConsumer, Incoming,
};
pub use decode::{Received, decode, decode_parts};
pub use diesel_outbox_core::consume::metrics::{CONSUMER_METRICS, describe_consumer_metrics};
pub use error::{DecodeError, NatsError};
pub use publisher::{JetStreamPublisher, MAX_MESSAGE_ID_PREFIX_BYTES, Published, PublisherBuilder};
pub use stream::{DEFAULT_DUPLICATE_WINDOW, StreamSpec};
