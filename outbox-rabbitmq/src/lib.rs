//! Publish outbox tasks to RabbitMQ with publisher confirms, and apply them
//! once on the consumer's side.
//!
//! [`RabbitPublisher`] is a [`BatchHandler`](diesel_outbox_core::BatchHandler):
//! register it for the `(kind, version)` pairs it routes, and the relay
//! publishes each claim's messages to their exchanges, every one
//! persistent and `mandatory`, then awaits the broker's confirms together.
//! A task succeeds only when the broker confirmed its message into a
//! queue: a `nack`, a message no queue is bound for, or a connection lost
//! before the confirm retries the task, never counts it as sent. The
//! message id is the task's (`<outbox id>:<task id>`), unique across
//! services, so a consumer's inbox drops a replay.
//!
//! On the consumer's side, [`InboxConsumer`] reads a queue with manual
//! acknowledgements and applies each message once: it records the message
//! id in the consumer's inbox table ([`Inbox`](diesel_outbox_core::Inbox))
//! in the same database transaction as the [`ConsumeHandler`]'s effect,
//! commits, then acknowledges. [consuming.md](https://github.com/outbox-rs/outbox/blob/main/docs/consuming.md) has the whole story.
//!
//! ```no_run
//! use diesel_outbox_core::Registry;
//! use diesel_outbox_rabbitmq::RabbitPublisher;
//!
//! # fn demo() -> anyhow::Result<()> {
//! // order.created v1 goes to exchange `orders` with routing key `created`.
//! let publisher = RabbitPublisher::builder("amqp://guest:guest@127.0.0.1:5672/%2f")
//!     .route("order.created", 1, "orders", "created")
//!     .build()?;
//! let registry = publisher.register(Registry::builder()).build()?;
//! // Worker::new(store, registry)?, then send / retry_pending / Relay::run.
//! # let _ = registry;
//! # Ok(())
//! # }
//! ```
//!
//! The exchanges, queues and bindings are the application's to declare:
//! the publisher never declares them, so a typo fails loudly (an
//! unroutable message retries its task, naming the exchange and the
//! routing key) instead of creating an exchange nobody reads.

mod connector;
mod consumer;
mod error;
mod properties;
mod publisher;
mod route;

pub use consumer::{
    ConsumeHandler, ConsumerBuilder, ConsumerReport, DEAD_CONSUMER, DEAD_DELIVERED, DEAD_QUEUE,
    DEAD_REASON, DeadLetter, InboxConsumer, Incoming,
};
pub use error::{DecodeError, RabbitError};
pub use properties::{DELIVERED, Received, decode};
pub use publisher::{MAX_MESSAGE_ID_PREFIX_BYTES, PublisherBuilder, RabbitPublisher};
pub use route::{Route, RoutingKey};
