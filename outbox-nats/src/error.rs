//! Errors of configuring the publisher, checking streams and decoding messages.

use std::time::Duration;

/// What went wrong outside a publish (publishes fail with a
/// [`HandlerError`](diesel_outbox_core::HandlerError), classified retryable or permanent).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsError {
    /// A subject, prefix or route is unusable; names the setting.
    #[error("invalid configuration `{field}`: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// The stream exists but does not fit what the publisher needs.
    #[error("stream `{stream}` does not fit: {reason}")]
    StreamMismatch {
        /// The stream.
        stream: String,
        /// What differs.
        reason: String,
    },
    /// The stream's duplicate window is shorter than required.
    #[error(
        "stream `{stream}` keeps duplicates for {actual:?}, less than the {required:?} required"
    )]
    DuplicateWindow {
        /// The stream.
        stream: String,
        /// Its window.
        actual: Duration,
        /// The window asked for.
        required: Duration,
    },
    /// Talking to JetStream failed.
    #[error("JetStream request failed: {0}")]
    JetStream(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Why a received message is not a complete outbox message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The message carries no headers at all.
    #[error("the message has no headers; it was not published by the outbox")]
    NoHeaders,
    /// A header the outbox always sets is missing.
    #[error("header `{0}` is missing")]
    MissingHeader(&'static str),
    /// A header's value does not parse.
    #[error("header `{name}` has the unusable value `{value}`")]
    InvalidHeader {
        /// The header.
        name: &'static str,
        /// Its value.
        value: String,
    },
}
