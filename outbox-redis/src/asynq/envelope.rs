//! The delivery envelope: the JSON an Asynq task carries by default, the
//! task's identity around its payload.

use diesel_outbox_core::{Delivery, HandlerError, Headers};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// What a Go worker decodes from `task.Payload()` when the publisher sends
/// envelopes ([`Payload::Envelope`](super::Payload::Envelope)).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Envelope {
    /// The message id, `<outbox id>:<task id>`, unique to the task.
    pub event_id: String,
    /// The task kind.
    pub event_type: String,
    /// The payload protocol version.
    pub payload_version: i32,
    /// The task id.
    pub task_id: i64,
    /// The outbox the task is stored in.
    pub outbox: String,
    /// The ordering key, if the task has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering_key: Option<String>,
    /// The task's own headers.
    #[serde(default, skip_serializing_if = "Headers::is_empty")]
    pub headers: Headers,
    /// The task's payload, as the JSON it is.
    pub payload: Box<RawValue>,
}

/// `delivery`'s envelope with `message_id`, as JSON; a payload that is not
/// JSON cannot be wrapped and fails for good.
pub(crate) fn build(delivery: &Delivery, message_id: &str) -> Result<Vec<u8>, HandlerError> {
    let payload = std::str::from_utf8(delivery.payload())
        .ok()
        .and_then(|text| RawValue::from_string(text.to_owned()).ok())
        .ok_or_else(|| {
            HandlerError::permanent(anyhow::anyhow!(
                "the payload of {} is not JSON, so it cannot travel in an envelope; publish raw \
                 payloads (Payload::Raw) for it",
                delivery.key()
            ))
        })?;
    let envelope = Envelope {
        event_id: message_id.to_owned(),
        event_type: delivery.task.kind.clone(),
        payload_version: delivery.task.version,
        task_id: delivery.id.get(),
        outbox: delivery.outbox.as_str().to_owned(),
        ordering_key: delivery.task.ordering_key.clone(),
        headers: delivery.headers().clone(),
        payload,
    };
    serde_json::to_vec(&envelope)
        .map_err(|error| HandlerError::permanent(anyhow::anyhow!("encoding the envelope: {error}")))
}
