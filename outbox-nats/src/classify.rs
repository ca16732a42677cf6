//! Which publish failures another attempt can fix.

use async_nats::jetstream::{
    self, ErrorCode,
    context::{PublishError, PublishErrorKind},
};
use diesel_outbox_core::HandlerError;

/// JetStream error codes no retry can fix: the message is too large for the
/// stream, or the subject is captured by a stream other than the expected one.
const PERMANENT_CODES: [ErrorCode; 4] = [
    ErrorCode::STREAM_NOT_MATCH,
    ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
    ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM,
    ErrorCode::STREAM_SEALED,
];

/// Classifies a publish failure: no stream (no responders), timeouts, broken
/// connections and back-pressure are retryable; a message over the server's
/// `max_payload` and a stream that refuses the message are permanent.
pub(crate) fn publish_error(error: PublishError) -> HandlerError {
    let permanent = match error.kind() {
        PublishErrorKind::MaxPayloadExceeded => true,
        PublishErrorKind::Other => {
            jetstream_code(&error).is_some_and(|code| PERMANENT_CODES.contains(&code))
        }
        _ => false,
    };
    let error = anyhow::Error::new(error).context("publishing to JetStream");
    if permanent {
        HandlerError::permanent(error)
    } else {
        HandlerError::retryable(error)
    }
}

fn jetstream_code(error: &PublishError) -> Option<ErrorCode> {
    std::error::Error::source(error)?
        .downcast_ref::<jetstream::Error>()
        .map(jetstream::Error::error_code)
}
