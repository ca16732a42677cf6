//! The NATS headers an outbox message carries.

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use diesel_outbox_core::{Delivery, HandlerError, wire};
use std::str::FromStr;

pub use diesel_outbox_core::wire::{ATTEMPT, KIND, SOURCE, TASK_ID, VERSION};

// The outbox's own names, built once: a name from a static string is
// neither checked nor copied again for every message.
const TASK_ID_NAME: HeaderName = HeaderName::from_static(TASK_ID);
const KIND_NAME: HeaderName = HeaderName::from_static(KIND);
const VERSION_NAME: HeaderName = HeaderName::from_static(VERSION);
const ATTEMPT_NAME: HeaderName = HeaderName::from_static(ATTEMPT);
const SOURCE_NAME: HeaderName = HeaderName::from_static(SOURCE);

/// Whether `name` is reserved for the outbox or for NATS itself, so a task's
/// own headers may not use it.
pub(crate) fn is_reserved(name: &str) -> bool {
    [wire::RESERVED_PREFIX, "nats-"]
        .iter()
        .any(|prefix| wire::has_prefix(name, prefix))
}

/// `value` as the value of header `name`, which it came with.
fn value(name: &str, value: &str) -> Result<HeaderValue, HandlerError> {
    HeaderValue::from_str(value).map_err(|e| {
        HandlerError::permanent(anyhow::anyhow!(
            "header `{name}` has a value NATS cannot carry: {e}"
        ))
    })
}

/// The task's own headers plus kind, version, id, attempt and outbox. A task header
/// with a reserved name, or one NATS cannot carry, is a permanent failure.
pub(crate) fn build(delivery: &Delivery) -> Result<HeaderMap, HandlerError> {
    let mut map = HeaderMap::new();
    for (name, text) in delivery.headers() {
        if is_reserved(name) {
            return Err(HandlerError::permanent(anyhow::anyhow!(
                "task header `{name}` uses a name reserved for the outbox or NATS"
            )));
        }
        let header = HeaderName::from_str(name).map_err(|e| {
            HandlerError::permanent(anyhow::anyhow!(
                "header name `{name}` is not valid for NATS: {e}"
            ))
        })?;
        map.insert(header, value(name, text)?);
    }
    map.insert(TASK_ID_NAME, HeaderValue::from(delivery.id.get()));
    map.insert(KIND_NAME, value(KIND, &delivery.task.kind)?);
    map.insert(VERSION_NAME, HeaderValue::from(delivery.task.version));
    map.insert(ATTEMPT_NAME, HeaderValue::from(delivery.attempt));
    map.insert(SOURCE_NAME, value(SOURCE, delivery.outbox.as_str())?);
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_names_are_matched_without_regard_to_case() {
        for name in [
            "Outbox-Kind",
            "OUTBOX-anything",
            "outbox-",
            "Nats-Msg-Id",
            "nats-x",
        ] {
            assert!(is_reserved(name), "{name}");
        }
        for name in [
            "outbox",
            "nats",
            "my-outbox-id",
            "natsy",
            "traceparent",
            "",
            "é-x",
        ] {
            assert!(!is_reserved(name), "{name}");
        }
    }

    #[test]
    fn the_outbox_names_are_what_a_parsed_name_would_be() {
        for (built, text) in [
            (TASK_ID_NAME, TASK_ID),
            (KIND_NAME, KIND),
            (VERSION_NAME, VERSION),
            (ATTEMPT_NAME, ATTEMPT),
            (SOURCE_NAME, SOURCE),
        ] {
            assert_eq!(built, HeaderName::from_str(text).expect("a valid name"));
        }
    }
}
