//! An outbox message as the fields of a stream entry: written by the
//! Streams publisher, read back by the Streams consumer.

use diesel_outbox_core::{
    Delivery, HandlerError, Headers, TaskId,
    consume::{Incoming, Undecodable},
    wire,
};
use redis::Value;

/// The field that holds the message id (`<outbox id>:<task id>`).
pub const MESSAGE_ID: &str = "message_id";
/// The field that holds the payload, always the entry's last.
pub const PAYLOAD: &str = "payload";

/// Whether a task's own header may not use `name` as its field: the
/// outbox's names, and the two fields above.
pub(crate) fn is_reserved(name: &str) -> bool {
    wire::has_prefix(name, wire::RESERVED_PREFIX)
        || name.eq_ignore_ascii_case(MESSAGE_ID)
        || name.eq_ignore_ascii_case(PAYLOAD)
}

/// Why `delivery`'s entry cannot be written, if it cannot: a task header
/// with a reserved name (a permanent failure).
pub(crate) fn check(delivery: &Delivery) -> Result<(), HandlerError> {
    match delivery.headers().keys().find(|name| is_reserved(name)) {
        Some(name) => Err(HandlerError::permanent(anyhow::anyhow!(
            "task header `{name}` uses a name reserved for the outbox's fields"
        ))),
        None => Ok(()),
    }
}

/// How many arguments [`write`] appends for `delivery`: a name and a value
/// for each of the outbox's six fields, the task's headers and the payload.
pub(crate) fn count(delivery: &Delivery) -> usize {
    2 * (6 + delivery.headers().len() + 1)
}

/// Appends the field/value pairs of `delivery`'s entry to `command`, the
/// payload last (after [`check`]: headers with reserved names are not
/// looked for again).
pub(crate) fn write(command: &mut redis::Cmd, delivery: &Delivery, message_id: &str) {
    command
        .arg(MESSAGE_ID)
        .arg(message_id)
        .arg(wire::TASK_ID)
        .arg(delivery.id.get())
        .arg(wire::KIND)
        .arg(&delivery.task.kind)
        .arg(wire::VERSION)
        .arg(delivery.task.version)
        .arg(wire::ATTEMPT)
        .arg(delivery.attempt)
        .arg(wire::SOURCE)
        .arg(delivery.outbox.as_str());
    for (name, value) in delivery.headers() {
        command.arg(name).arg(value);
    }
    command.arg(PAYLOAD).arg(delivery.payload());
}

/// A value as bytes, whatever form Redis gave it in.
pub(crate) fn bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes.clone()),
        Value::SimpleString(text) | Value::VerbatimString { text, .. } => {
            Some(text.as_bytes().to_vec())
        }
        Value::Int(n) => Some(n.to_string().into_bytes()),
        _ => None,
    }
}

/// One entry's fields as Redis holds them: names and values as bytes, in
/// order, whatever program wrote them.
pub(crate) type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// The value of field `name`, if the entry has it.
pub(crate) fn get<'a>(fields: &'a Fields, name: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|(field, _)| field.as_slice() == name.as_bytes())
        .map(|(_, value)| value.as_slice())
}

/// The entry `entry_id` of `stream` as the consumer flow takes it: every
/// outbox field present and well formed, or why not (naming the field).
pub(crate) fn decode(
    stream: &str,
    entry_id: &str,
    fields: &Fields,
) -> Result<Incoming, Undecodable> {
    let text = |name: &str| {
        get(fields, name)
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::to_owned)
    };
    let message_id = text(MESSAGE_ID);
    let fail = |reason: String| Undecodable {
        reason,
        message_id: message_id.clone(),
    };
    let required = |name: &str| {
        text(name).ok_or_else(|| fail(format!("field `{name}` is missing or not UTF-8")))
    };
    let number = |name: &str| -> Result<i64, Undecodable> {
        required(name)?
            .parse()
            .map_err(|_| fail(format!("field `{name}` is not a whole number")))
    };
    let id = message_id
        .clone()
        .ok_or_else(|| fail(format!("field `{MESSAGE_ID}` is missing or not UTF-8")))?;
    let task = TaskId::new(number(wire::TASK_ID)?);
    let kind = required(wire::KIND)?;
    let version = i32::try_from(number(wire::VERSION)?)
        .map_err(|_| fail(format!("field `{}` is out of range", wire::VERSION)))?;
    let attempt = number(wire::ATTEMPT)?;
    let payload = get(fields, PAYLOAD)
        .ok_or_else(|| fail(format!("field `{PAYLOAD}` is missing")))?
        .to_vec();
    let mut headers = Headers::new();
    for (name, value) in fields {
        let name = std::str::from_utf8(name).map_err(|_| {
            fail(format!(
                "a field name is not UTF-8: {}",
                String::from_utf8_lossy(name)
            ))
        })?;
        if is_reserved(name) {
            continue;
        }
        let value =
            std::str::from_utf8(value).map_err(|_| fail(format!("field `{name}` is not UTF-8")))?;
        headers.insert(name.to_owned(), value.to_owned());
    }
    Ok(Incoming::new(id, task, kind, version, attempt, payload)
        .with_headers(headers)
        .with_outbox(text(wire::SOURCE))
        .with_source(format!("{stream} {entry_id}"), None))
}
