//! An outbox message's AMQP properties: built from a delivery by the
//! publisher, read back by the consumer.

use diesel_outbox_core::{Delivery, HandlerError, Headers, TaskId, wire};
use lapin::{
    BasicProperties,
    types::{AMQPValue, FieldTable, LongString, ShortString},
};

use crate::DecodeError;

/// AMQP's delivery mode of a message the broker writes to disk.
pub(crate) const PERSISTENT: u8 = 2;

/// The header the consumer counts a message's deliveries in, on the copy
/// it hands back (the broker counts none on a classic queue).
pub const DELIVERED: &str = "Outbox-Delivered";

/// Whether a task's own header may not use `name`: the outbox's names, and
/// RabbitMQ's own (`x-`).
pub(crate) fn is_reserved(name: &str) -> bool {
    [wire::RESERVED_PREFIX, "x-"]
        .iter()
        .any(|prefix| wire::has_prefix(name, prefix))
}

fn short(what: &str, text: &str) -> Result<ShortString, HandlerError> {
    ShortString::try_new(text).map_err(|_| {
        HandlerError::permanent(anyhow::anyhow!(
            "{what} `{text}` is longer than the 255 bytes AMQP carries"
        ))
    })
}

/// The properties of `delivery`'s message: persistent, with `message_id`,
/// its kind as the `type`, and its headers plus the outbox's. A task header
/// with a reserved name or a name AMQP cannot carry is a permanent failure.
pub(crate) fn build(
    delivery: &Delivery,
    message_id: &str,
) -> Result<BasicProperties, HandlerError> {
    let mut headers = FieldTable::default();
    for (name, value) in delivery.headers() {
        if is_reserved(name) {
            return Err(HandlerError::permanent(anyhow::anyhow!(
                "task header `{name}` uses a name reserved for the outbox or RabbitMQ"
            )));
        }
        headers.insert(
            short("header name", name)?,
            AMQPValue::LongString(LongString::from(value.as_str())),
        );
    }
    let number = |n: i64| AMQPValue::LongLongInt(n);
    headers.insert(wire::TASK_ID.into(), number(delivery.id.get()));
    headers.insert(
        wire::KIND.into(),
        AMQPValue::LongString(LongString::from(delivery.task.kind.as_str())),
    );
    headers.insert(
        wire::VERSION.into(),
        AMQPValue::LongInt(delivery.task.version),
    );
    headers.insert(wire::ATTEMPT.into(), number(delivery.attempt));
    headers.insert(
        wire::SOURCE.into(),
        AMQPValue::LongString(LongString::from(delivery.outbox.as_str())),
    );
    Ok(BasicProperties::default()
        .with_message_id(short("message id", message_id)?)
        .with_type(short("kind", &delivery.task.kind)?)
        .with_delivery_mode(PERSISTENT)
        .with_headers(headers))
}

/// An outbox message as a consumer reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Received {
    /// The message id the publisher set (`<outbox id>:<task id>`).
    pub message_id: String,
    /// The task id.
    pub id: TaskId,
    /// The task kind.
    pub kind: String,
    /// The payload protocol version.
    pub version: i32,
    /// The attempt that published this copy.
    pub attempt: i64,
    /// The outbox the task is stored in.
    pub outbox: Option<String>,
    /// The task's own headers (the outbox's and RabbitMQ's removed).
    pub headers: Headers,
    /// Deliveries counted on copies the consumer handed back (0 for the
    /// message as published).
    pub handed_back: i64,
}

/// A header's value as text, when it is text.
fn text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(text) => String::from_utf8(text.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(text) => Some(text.as_str().to_owned()),
        _ => None,
    }
}

/// A header's value as a whole number, whether sent as one or as text.
fn whole(value: &AMQPValue) -> Option<i64> {
    match value {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortShortInt(n) => Some(i64::from(*n)),
        other => text(other)?.parse().ok(),
    }
}

/// The deliveries counted on a copy the consumer handed back ([`DELIVERED`]);
/// 0 for a message as published, or one whose count does not parse.
pub(crate) fn handed_back(properties: &BasicProperties) -> i64 {
    properties
        .headers()
        .as_ref()
        .and_then(|headers| headers.inner().get(DELIVERED))
        .and_then(whole)
        .unwrap_or(0)
        .max(0)
}

/// Decodes a message the publisher sent, from its properties; a message
/// missing any outbox header or its message id is rejected with what it
/// lacks.
pub fn decode(properties: &BasicProperties) -> Result<Received, DecodeError> {
    let message_id = properties
        .message_id()
        .as_ref()
        .map(|id| id.as_str().to_owned())
        .ok_or(DecodeError::NoMessageId)?;
    let empty = FieldTable::default();
    let table = properties.headers().as_ref().unwrap_or(&empty).inner();
    let get = |name: &'static str| table.get(name).ok_or(DecodeError::MissingHeader(name));
    let invalid = |name: &'static str, value: &AMQPValue| DecodeError::InvalidHeader {
        name,
        value: format!("{value:?}"),
    };
    let number = |name: &'static str| -> Result<i64, DecodeError> {
        let value = get(name)?;
        whole(value).ok_or_else(|| invalid(name, value))
    };
    let id = TaskId::new(number(wire::TASK_ID)?);
    let kind_value = get(wire::KIND)?;
    let kind = text(kind_value)
        .filter(|kind| !kind.is_empty())
        .ok_or_else(|| invalid(wire::KIND, kind_value))?;
    let version_value = get(wire::VERSION)?;
    let version =
        i32::try_from(number(wire::VERSION)?).map_err(|_| invalid(wire::VERSION, version_value))?;
    let attempt = number(wire::ATTEMPT)?;
    let outbox = table.get(wire::SOURCE).and_then(text);
    let handed_back = handed_back(properties);
    let mut headers = Headers::new();
    for (name, value) in table {
        if is_reserved(name.as_str()) {
            continue;
        }
        if let Some(value) = text(value) {
            headers.insert(name.as_str().to_owned(), value);
        }
    }
    Ok(Received {
        message_id,
        id,
        kind,
        version,
        attempt,
        outbox,
        headers,
        handed_back,
    })
}

#[cfg(test)]
mod tests {
    use diesel_outbox_core::{OutboxId, Task};

    use super::*;

    fn delivery() -> Delivery {
        Delivery::new(
            TaskId::new(42),
            3,
            Task::new("order.created", 2, "{}").header("traceparent", "00-abc-01"),
        )
        .in_outbox(OutboxId::new("0123456789abcdef0123456789abcdef"))
    }

    #[test]
    fn a_built_message_decodes_back_to_its_task() {
        let properties = build(&delivery(), "0123456789abcdef0123456789abcdef:42").expect("build");
        assert_eq!(properties.delivery_mode(), &Some(PERSISTENT));
        let received = decode(&properties).expect("decode");
        assert_eq!(received.message_id, "0123456789abcdef0123456789abcdef:42");
        assert_eq!(
            (
                received.id,
                received.kind.as_str(),
                received.version,
                received.attempt
            ),
            (TaskId::new(42), "order.created", 2, 3)
        );
        assert_eq!(
            received.outbox.as_deref(),
            Some("0123456789abcdef0123456789abcdef")
        );
        assert_eq!(received.headers.len(), 1);
        assert_eq!(received.handed_back, 0);
    }

    #[test]
    fn reserved_or_oversized_header_names_fail_for_good() {
        for name in ["Outbox-Kind", "x-death", "X-Match", &"n".repeat(256)] {
            let delivery = Delivery::new(
                TaskId::new(1),
                1,
                Task::new("k", 1, "{}").header(name.to_owned(), "v"),
            );
            let error = build(&delivery, "id").expect_err(name);
            assert!(error.is_permanent(), "{name}");
        }
    }

    #[test]
    fn incomplete_messages_are_rejected_naming_what_is_missing() {
        assert_eq!(
            decode(&BasicProperties::default()),
            Err(DecodeError::NoMessageId)
        );
        let properties = BasicProperties::default().with_message_id("m".into());
        assert_eq!(
            decode(&properties),
            Err(DecodeError::MissingHeader(wire::TASK_ID))
        );
        let mut headers = FieldTable::default();
        headers.insert(wire::TASK_ID.into(), AMQPValue::LongString("forty".into()));
        let properties = properties.with_headers(headers);
        assert!(matches!(
            decode(&properties),
            Err(DecodeError::InvalidHeader {
                name: wire::TASK_ID,
                ..
            })
        ));
    }
}
