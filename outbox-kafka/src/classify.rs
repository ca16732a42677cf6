//! What a failed send means for its task: retry it later, or never.

use confluent_kafka::common::Error;
use diesel_outbox_core::HandlerError;

/// Whether no later try can pass where `error` failed: the record is too
/// large for the broker, or invalid for its topic (a compacted topic's
/// record without a key), the topic's name or a setting is invalid, the
/// broker lacks a feature the producer needs. Everything else may pass and
/// is retried: the broker unreachable, a leader moved, a timeout, a replica
/// short, and credentials or ACLs refused (an operator can fix those while
/// the task waits out its backoff).
pub(crate) fn is_permanent(error: &Error) -> bool {
    error.is_record_too_large_error()
        || error.is_record_batch_too_large_error()
        || error.is_invalid_record_error()
        || error.is_invalid_topic_error()
        || error.is_config_error()
        || error.is_invalid_configuration_error()
        || error.is_unsupported_version_error()
        || error.is_unsupported_for_message_format_error()
        || error.is_policy_violation_error()
}

/// Whether `error` is the producer waiting in vain for a topic's metadata:
/// the broker is unreachable, or the topic does not exist.
pub(crate) fn is_missing_metadata(error: &Error) -> bool {
    error.is_unknown_topic_or_partition_error()
        || (error.is_timeout_error() && error.to_string().contains("not present in metadata"))
}

/// The task's failure for a send to `topic` that failed with `error`.
pub(crate) fn failure(topic: &str, error: &Error) -> HandlerError {
    let error = anyhow::anyhow!("producing to topic `{topic}` failed: {error}");
    HandlerError::retryable(error)
}

/// The task's failure for a send to `topic` that failed for good.
pub(crate) fn permanent(topic: &str, error: &Error) -> HandlerError {
    HandlerError::permanent(anyhow::anyhow!(
        "producing to topic `{topic}` cannot succeed: {error}"
    ))
}

/// The failure of a send to a topic the broker says does not exist (and
/// does not create).
pub(crate) fn no_such_topic(topic: &str) -> HandlerError {
    HandlerError::permanent(anyhow::anyhow!(
        "topic `{topic}` does not exist and the broker does not create it: create it, or \
         route the kind to a topic that exists"
    ))
}
