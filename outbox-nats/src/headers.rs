//! The NATS headers an outbox message carries.

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use diesel_outbox_core::{Delivery, HandlerError};
use std::str::FromStr;

/// The task id, as a decimal number.
pub const TASK_ID: &str = "Outbox-Task-Id";
/// The task kind.
pub const KIND: &str = "Outbox-Kind";
/// The payload protocol version.
pub const VERSION: &str = "Outbox-Version";
/// The attempt that published this message (1 for the first).
pub const ATTEMPT: &str = "Outbox-Attempt";

/// Whether `name` is reserved for the outbox or for NATS itself, so a task's
/// own headers may not use it.
pub(crate) fn is_reserved(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.starts_with("outbox-") || lower.starts_with("nats-")
}

fn insert(map: &mut HeaderMap, name: &str, value: &str) -> Result<(), HandlerError> {
    let header = HeaderName::from_str(name).map_err(|e| {
        HandlerError::permanent(anyhow::anyhow!(
            "header name `{name}` is not valid for NATS: {e}"
        ))
    })?;
    let value = HeaderValue::from_str(value).map_err(|e| {
        HandlerError::permanent(anyhow::anyhow!(
            "header `{name}` has a value NATS cannot carry: {e}"
        ))
    })?;
    map.insert(header, value);
    Ok(())
}

/// The task's own headers plus kind, version, id and attempt. A task header
/// with a reserved name, or one NATS cannot carry, is a permanent failure.
pub(crate) fn build(delivery: &Delivery) -> Result<HeaderMap, HandlerError> {
    let mut map = HeaderMap::new();
    for (name, value) in delivery.headers() {
        if is_reserved(name) {
            return Err(HandlerError::permanent(anyhow::anyhow!(
                "task header `{name}` uses a name reserved for the outbox or NATS"
            )));
        }
        insert(&mut map, name, value)?;
    }
    insert(&mut map, TASK_ID, &delivery.id.to_string())?;
    insert(&mut map, KIND, &delivery.task.kind)?;
    insert(&mut map, VERSION, &delivery.task.version.to_string())?;
    insert(&mut map, ATTEMPT, &delivery.attempt.to_string())?;
    Ok(map)
}
