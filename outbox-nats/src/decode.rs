//! The consumer's side: [`Received`] and [`decode`].

use std::str::FromStr;

use async_nats::HeaderMap;
use diesel_outbox_core::{Headers, TaskId};

use crate::{DecodeError, headers};

/// An outbox message as a consumer reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Received {
    /// The task id: deduplicate on it, it is stable across replays.
    pub id: TaskId,
    /// The task kind.
    pub kind: String,
    /// The payload protocol version.
    pub version: i32,
    /// The attempt that published this copy.
    pub attempt: i64,
    /// The outbox the task is stored in (`Outbox-Source`); `None` for a
    /// message published by a release before the header existed.
    pub outbox: Option<String>,
    /// The task's own headers (outbox and `Nats-` headers removed).
    pub headers: Headers,
    /// The payload.
    pub payload: Vec<u8>,
}

fn required<'m>(headers: &'m HeaderMap, name: &'static str) -> Result<&'m str, DecodeError> {
    headers
        .get(name)
        .map(|value| value.as_str())
        .ok_or(DecodeError::MissingHeader(name))
}

fn parsed<T: FromStr>(headers: &HeaderMap, name: &'static str) -> Result<T, DecodeError> {
    let value = required(headers, name)?;
    value.parse().map_err(|_| DecodeError::InvalidHeader {
        name,
        value: value.to_owned(),
    })
}

/// Decodes a message the publisher sent; a message missing any outbox header
/// is rejected with the header it lacks.
pub fn decode(message: &async_nats::Message) -> Result<Received, DecodeError> {
    decode_parts(message.headers.as_ref(), &message.payload)
}

/// [`decode`] for a message given as headers and payload (for example a
/// message read from a stream by sequence).
pub fn decode_parts(headers: Option<&HeaderMap>, payload: &[u8]) -> Result<Received, DecodeError> {
    let map = headers.ok_or(DecodeError::NoHeaders)?;
    let id = TaskId::new(parsed(map, headers::TASK_ID)?);
    let kind = required(map, headers::KIND)?.to_owned();
    if kind.is_empty() {
        return Err(DecodeError::InvalidHeader {
            name: headers::KIND,
            value: kind,
        });
    }
    let version = parsed(map, headers::VERSION)?;
    let attempt = parsed(map, headers::ATTEMPT)?;
    let outbox = map
        .get(headers::SOURCE)
        .map(|value| value.as_str().to_owned());
    let mut own = Headers::new();
    for (name, values) in map.iter() {
        let name: &str = name.as_ref();
        if headers::is_reserved(name) {
            continue;
        }
        if let Some(value) = values.first() {
            own.insert(name.to_owned(), value.as_str().to_owned());
        }
    }
    Ok(Received {
        id,
        kind,
        version,
        attempt,
        outbox,
        headers: own,
        payload: payload.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete() -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(headers::TASK_ID, "42");
        map.insert(headers::KIND, "order.created");
        map.insert(headers::VERSION, "2");
        map.insert(headers::ATTEMPT, "3");
        map.insert("Nats-Msg-Id", "outbox:42");
        map.insert("traceparent", "00-abc-01");
        map
    }

    #[test]
    fn decodes_a_complete_message_and_keeps_only_the_task_headers() {
        let received = decode_parts(Some(&complete()), b"{}").expect("complete");
        assert_eq!(received.id, TaskId::new(42));
        assert_eq!(
            (received.kind.as_str(), received.version, received.attempt),
            ("order.created", 2, 3)
        );
        assert_eq!(received.headers.len(), 1);
        assert_eq!(
            received.headers.get("traceparent").map(String::as_str),
            Some("00-abc-01")
        );
        assert_eq!(received.payload, b"{}");
    }

    #[test]
    fn rejects_incomplete_messages_naming_what_is_wrong() {
        assert_eq!(decode_parts(None, b"{}"), Err(DecodeError::NoHeaders));
        for name in [
            headers::TASK_ID,
            headers::KIND,
            headers::VERSION,
            headers::ATTEMPT,
        ] {
            let mut map = HeaderMap::new();
            for (key, values) in complete().iter() {
                let key: &str = key.as_ref();
                if key != name {
                    map.insert(key, values[0].as_str());
                }
            }
            assert_eq!(
                decode_parts(Some(&map), b""),
                Err(DecodeError::MissingHeader(name))
            );
        }
        let mut map = complete();
        map.insert(headers::VERSION, "two");
        assert_eq!(
            decode_parts(Some(&map), b""),
            Err(DecodeError::InvalidHeader {
                name: headers::VERSION,
                value: "two".into()
            })
        );
    }
}
