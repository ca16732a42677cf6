//! Publish outbox tasks to Redis, as Streams entries or as Asynq tasks,
//! and apply Streams entries once on the consumer's side.
//!
//! - [`StreamPublisher`] adds each message to a stream chosen by its kind,
//!   once inside a dedup window that Redis lacks of its own: one script
//!   remembers the message id and adds the entry atomically, so a relay
//!   that crashed after the add and before its completion write adds
//!   nothing the second time. Built without a window, for consumers that
//!   apply each message id once, it sends a plain `XADD` instead.
//! - [`StreamConsumer`] reads a stream as a member of a consumer group and
//!   applies each entry once through the consumer's inbox
//!   ([`Inbox`](diesel_outbox_core::Inbox)), acking after the commit,
//!   claiming entries a dead member left behind, and copying given-up
//!   entries to a dead-letter stream.
//! - [`AsynqPublisher`] writes each task in the layout of
//!   [Asynq](https://github.com/hibiken/asynq), so unmodified Go workers
//!   run them.
//!
//! The publishers are [`BatchHandler`](diesel_outbox_core::BatchHandler)s
//! on one multiplexed connection each; the consumer is a loop on the shared
//! consumer flow ([`diesel_outbox_core::consume`]) on two (one for its
//! blocking reads). Every connection reopens by itself after Redis comes
//! back. A command whose reply never came fails its task retryably; one
//! Redis refused for good (a key of the wrong type) fails it for good. [redis.md](https://github.com/outbox-rs/outbox/blob/main/docs/redis.md)
//! has the whole story.
//!
//! ```no_run
//! use diesel_outbox_core::Registry;
//! use diesel_outbox_redis::StreamPublisher;
//!
//! # fn demo() -> anyhow::Result<()> {
//! // order.created v1 goes to the stream `orders`.
//! let publisher = StreamPublisher::builder("redis://127.0.0.1:6379")
//!     .route("order.created", 1, "orders")
//!     .build()?;
//! let registry = publisher.register(Registry::builder()).build()?;
//! // Worker::new(store, registry)?, then send / retry_pending / Relay::run.
//! # let _ = registry;
//! # Ok(())
//! # }
//! ```

pub mod asynq;
mod connection;
mod error;
mod fields;
mod streams;

pub use asynq::{AsynqPublisher, AsynqPublisherBuilder, Payload};
pub use diesel_outbox_core::consume::{ConsumeHandler, ConsumerReport, Incoming};
pub use error::RedisError;
pub use fields::{MESSAGE_ID, PAYLOAD};
pub use streams::{
    Added, DEAD_CONSUMER, DEAD_DELIVERED, DEAD_FIELDS_LEFT_OUT, DEAD_REASON, DEFAULT_DEDUP_WINDOW,
    MAX_DEDUP_WINDOW, StreamConsumer, StreamConsumerBuilder, StreamPublisher,
    StreamPublisherBuilder, dedup_key,
};
