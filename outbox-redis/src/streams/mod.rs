//! Redis Streams: a publisher that adds each message once inside a dedup
//! window, and a consumer group reader that applies each once through an
//! inbox.

mod consumer;
mod entry;
mod publisher;
mod reply;

pub use consumer::{
    DEAD_CONSUMER, DEAD_DELIVERED, DEAD_FIELDS_LEFT_OUT, DEAD_REASON, StreamConsumer,
    StreamConsumerBuilder,
};
pub use publisher::{
    Added, DEFAULT_DEDUP_WINDOW, MAX_DEDUP_WINDOW, StreamPublisher, StreamPublisherBuilder,
    dedup_key,
};
