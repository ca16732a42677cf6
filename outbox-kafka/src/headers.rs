//! An outbox message's record headers: built from a delivery by the
//! publisher, read back by the consumer.

use confluent_kafka::common::header::{Header as _, Headers as _, RecordHeader, RecordHeaders};
use diesel_outbox_core::{Delivery, HandlerError, Headers, TaskId, wire};

use crate::DecodeError;

/// The header that holds the message id (`<outbox id>:<task id>`), the key
/// a consumer's inbox records.
pub const MESSAGE_ID: &str = "Outbox-Message-Id";

/// Whether a task's own header may not use `name`: every name starting
/// with `Outbox-` (any case) is the outbox's.
pub(crate) fn is_reserved(name: &str) -> bool {
    wire::has_prefix(name, wire::RESERVED_PREFIX)
}

/// The headers of `delivery`'s record: the task's own, then the message id,
/// task id, kind, version, attempt and outbox, all as UTF-8 text. A task
/// header with a reserved name is a permanent failure.
pub(crate) fn build(
    delivery: &Delivery,
    message_id: String,
) -> Result<RecordHeaders, HandlerError> {
    if let Some(name) = delivery.headers().keys().find(|name| is_reserved(name)) {
        return Err(HandlerError::permanent(anyhow::anyhow!(
            "task header `{name}` uses a name reserved for the outbox"
        )));
    }
    let text = |name: &str, value: &str| {
        RecordHeader::new(name.to_owned(), Some(value.as_bytes().to_vec()))
    };
    // Text made for the record becomes its header's value as it is.
    let made =
        |name: &str, value: String| RecordHeader::new(name.to_owned(), Some(value.into_bytes()));
    let own = delivery
        .headers()
        .iter()
        .map(|(name, value)| text(name, value));
    let outbox = [
        made(MESSAGE_ID, message_id),
        made(wire::TASK_ID, delivery.id.get().to_string()),
        text(wire::KIND, &delivery.task.kind),
        made(wire::VERSION, delivery.task.version.to_string()),
        made(wire::ATTEMPT, delivery.attempt.to_string()),
        text(wire::SOURCE, delivery.outbox.as_str()),
    ];
    Ok(RecordHeaders::with_header_iter(own.chain(outbox)))
}

/// An outbox message as a consumer reads it back from its record's headers.
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
    /// The task's own headers (the outbox's removed; a header whose value
    /// is not UTF-8 text is left out).
    pub headers: Headers,
}

/// The message id of a record, when it carries one as text.
pub(crate) fn message_id(headers: &RecordHeaders) -> Option<String> {
    last_text(headers, MESSAGE_ID).ok()
}

/// The last header `name`'s value as text, or why it has none.
fn last_text(headers: &RecordHeaders, name: &'static str) -> Result<String, DecodeError> {
    let header = headers
        .last_header(name)
        .ok_or(DecodeError::MissingHeader(name))?;
    let bytes = header.value().unwrap_or_default();
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::InvalidHeader {
        name,
        value: String::from_utf8_lossy(bytes).into_owned(),
    })
}

/// Decodes a record the publisher wrote, from its headers; a record
/// missing any of the outbox's headers is rejected with what it lacks.
pub fn decode(headers: &RecordHeaders) -> Result<Received, DecodeError> {
    let message_id = last_text(headers, MESSAGE_ID)?;
    let number = |name: &'static str| -> Result<i64, DecodeError> {
        let text = last_text(headers, name)?;
        text.parse()
            .map_err(|_| DecodeError::InvalidHeader { name, value: text })
    };
    let id = TaskId::new(number(wire::TASK_ID)?);
    let kind = last_text(headers, wire::KIND)?;
    if kind.is_empty() {
        return Err(DecodeError::InvalidHeader {
            name: wire::KIND,
            value: kind,
        });
    }
    let version = number(wire::VERSION)?;
    let version = i32::try_from(version).map_err(|_| DecodeError::InvalidHeader {
        name: wire::VERSION,
        value: version.to_string(),
    })?;
    let attempt = number(wire::ATTEMPT)?;
    let outbox = last_text(headers, wire::SOURCE).ok();
    let mut own = Headers::new();
    for header in headers.iter() {
        if is_reserved(header.key()) {
            continue;
        }
        if let Ok(value) = std::str::from_utf8(header.value().unwrap_or_default()) {
            own.insert(header.key().to_owned(), value.to_owned());
        }
    }
    Ok(Received {
        message_id,
        id,
        kind,
        version,
        attempt,
        outbox,
        headers: own,
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
    fn built_headers_decode_back_to_the_task() {
        let headers = build(
            &delivery(),
            "0123456789abcdef0123456789abcdef:42".to_owned(),
        )
        .expect("build");
        let received = decode(&headers).expect("decode");
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
        assert_eq!(
            received.headers.get("traceparent").map(String::as_str),
            Some("00-abc-01")
        );
        assert_eq!(received.headers.len(), 1);
    }

    #[test]
    fn reserved_header_names_fail_for_good() {
        for name in ["Outbox-Kind", "outbox-message-id", "OUTBOX-anything"] {
            let delivery = Delivery::new(
                TaskId::new(1),
                1,
                Task::new("k", 1, "{}").header(name.to_owned(), "v"),
            );
            assert!(
                build(&delivery, "id".to_owned())
                    .expect_err(name)
                    .is_permanent(),
                "{name}"
            );
        }
    }

    #[test]
    fn incomplete_or_garbled_records_are_rejected_naming_the_header() {
        assert_eq!(
            decode(&RecordHeaders::new()),
            Err(DecodeError::MissingHeader(MESSAGE_ID))
        );
        let header =
            |name: &str, value: &[u8]| RecordHeader::new(name.to_owned(), Some(value.to_vec()));
        let garbled = RecordHeaders::with_header_iter([
            header(MESSAGE_ID, b"m:1"),
            header(wire::TASK_ID, b"\xff\xfe"),
        ]);
        assert!(matches!(
            decode(&garbled),
            Err(DecodeError::InvalidHeader {
                name: wire::TASK_ID,
                ..
            })
        ));
        let nul = RecordHeaders::with_header_iter([
            header(MESSAGE_ID, b"m:1"),
            header(wire::TASK_ID, b"1\0"),
        ]);
        assert!(matches!(
            decode(&nul),
            Err(DecodeError::InvalidHeader {
                name: wire::TASK_ID,
                ..
            })
        ));
    }
}
