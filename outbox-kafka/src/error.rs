//! Errors of configuring the publisher and the consumer, and of decoding
//! records.

/// What went wrong outside a publish (publishes fail with a
/// [`HandlerError`](diesel_outbox_core::HandlerError), retryable or
/// permanent).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaError {
    /// A route, name or setting is unusable; names the setting.
    #[error("invalid configuration `{field}`: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// The consumer could not start reading the topic: its partitions could
    /// not be read or assigned (the broker is unreachable, say).
    #[error("cannot start reading topic `{topic}`: {source}")]
    Start {
        /// The topic.
        topic: String,
        /// What the client said.
        source: confluent_kafka::common::Error,
    },
    /// Fetching records failed with an error no retry can pass (a record
    /// compressed with a codec the client lacks, an offset reset refused by
    /// `auto.offset.reset=none`): the consumer stopped.
    #[error("cannot read topic `{topic}`: {source}")]
    Fetch {
        /// The topic.
        topic: String,
        /// What the client said.
        source: confluent_kafka::common::Error,
    },
    /// A partition's worker stopped before shutdown (it panicked): the
    /// consumer stopped rather than leave the partition unread.
    #[error("a partition's worker stopped: {0}")]
    Worker(String),
    /// Talking to the broker failed.
    #[error("Kafka request failed: {0}")]
    Kafka(#[from] confluent_kafka::common::Error),
}

/// Why a received record is not a complete outbox message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A header the outbox always sets is missing.
    #[error("header `{0}` is missing; the record was not published by the outbox")]
    MissingHeader(&'static str),
    /// A header's value is not what the outbox sets.
    #[error("header `{name}` has the unusable value `{value}`")]
    InvalidHeader {
        /// The header.
        name: &'static str,
        /// Its value, as far as it can be shown.
        value: String,
    },
}
