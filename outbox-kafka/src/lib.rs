//! Publish outbox tasks to Kafka with an idempotent producer, and apply
//! them once on the consumer's side, in pure Rust (Confluent's official
//! Rust client, no C library).
//!
//! [`KafkaPublisher`] is a [`BatchHandler`](diesel_outbox_core::BatchHandler):
//! register it for the `(kind, version)` pairs it routes, and the relay
//! produces each claim's records to their topics, then awaits every
//! acknowledgement together. A task succeeds only when every in-sync
//! replica has its record (`acks=all`); the producer is idempotent, so its
//! own retries never write a record twice. The record key is the task's
//! ordering key: a key's tasks land on one partition, in commit order.
//!
//! On the consumer's side, [`InboxConsumer`] reads a topic's partitions and
//! applies each record once: it records the `Outbox-Message-Id` in the
//! consumer's inbox table ([`Inbox`](diesel_outbox_core::Inbox)) in the same
//! database transaction as the [`ConsumeHandler`]'s effect, commits, and
//! only then lets the consumer group's offset move past the record.
//! [kafka.md](https://github.com/outbox-rs/outbox/blob/main/docs/kafka.md)
//! says what the producer's idempotence covers and what only the inbox
//! does.
//!
//! ```no_run
//! use diesel_outbox_core::Registry;
//! use diesel_outbox_kafka::KafkaPublisher;
//!
//! # fn demo() -> anyhow::Result<()> {
//! // order.created v1 goes to topic `orders`, keyed by each task's ordering key.
//! let publisher = KafkaPublisher::builder("127.0.0.1:9092")
//!     .route("order.created", 1, "orders")
//!     .build()?;
//! let registry = publisher.register(Registry::builder()).build()?;
//! // Worker::new(store, registry)?, then send / retry_pending / Relay::run.
//! # let _ = registry;
//! # Ok(())
//! # }
//! ```
//!
//! Topics are the application's to create. Turn the broker's
//! `auto.create.topics.enable` off: then a misspelt topic fails its tasks
//! loudly (permanently, naming the topic) instead of creating a topic
//! nobody reads; the consumer never asks for a topic to be created.

mod classify;
mod consumer;
mod error;
mod headers;
mod producer;
mod properties;
mod publisher;
mod topic;

pub use consumer::{
    ConsumeHandler, ConsumerBuilder, ConsumerReport, DEAD_CONSUMER, DEAD_DELIVERED, DEAD_REASON,
    DEAD_SOURCE, InboxConsumer, Incoming,
};
pub use error::{DecodeError, KafkaError};
pub use headers::{MESSAGE_ID, Received, decode};
pub use publisher::{KafkaPublisher, MAX_MESSAGE_ID_PREFIX_BYTES, PublisherBuilder};
