//! Stream entries read from Redis's replies as raw bytes: an entry another
//! program wrote, with field names that are not UTF-8, is still an entry
//! (to dead-letter), never a reply that cannot be read.

use redis::Value;

use crate::fields::{self, Fields};

/// One entry of a reply.
#[derive(Debug)]
pub(crate) struct RawEntry {
    pub(crate) id: String,
    pub(crate) fields: Fields,
}

fn parse_error(what: &str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected stream reply",
        what.to_owned(),
    ))
}

/// The items of an array (RESP2) or the pairs of a map (RESP3), flattened.
fn items(value: &Value) -> Option<Vec<&Value>> {
    match value {
        Value::Array(items) => Some(items.iter().collect()),
        Value::Map(pairs) => Some(pairs.iter().flat_map(|(k, v)| [k, v]).collect()),
        _ => None,
    }
}

/// A list of entries, each `[id, [name, value, ...]]` (a deleted entry's
/// fields are nil: it is skipped).
pub(crate) fn entries(value: &Value) -> Result<Vec<RawEntry>, redis::RedisError> {
    let mut found = Vec::new();
    for entry in items(value).ok_or_else(|| parse_error("entries"))? {
        let parts = items(entry).ok_or_else(|| parse_error("entry"))?;
        let [id, body] = parts.as_slice() else {
            return Err(parse_error("entry of two parts"));
        };
        let id = fields::bytes(id)
            .and_then(|id| String::from_utf8(id).ok())
            .ok_or_else(|| parse_error("entry id"))?;
        if matches!(body, Value::Nil) {
            continue;
        }
        let body = items(body).ok_or_else(|| parse_error("entry fields"))?;
        let mut pairs = Vec::with_capacity(body.len() / 2);
        for pair in body.chunks(2) {
            let [name, value] = pair else {
                return Err(parse_error("field without a value"));
            };
            pairs.push((
                fields::bytes(name).ok_or_else(|| parse_error("field name"))?,
                fields::bytes(value).ok_or_else(|| parse_error("field value"))?,
            ));
        }
        found.push(RawEntry { id, fields: pairs });
    }
    Ok(found)
}

/// The entries of an `XREADGROUP` reply for one stream: `[[stream,
/// entries]]`, or nil when the read timed out empty.
pub(crate) fn read(value: &Value) -> Result<Vec<RawEntry>, redis::RedisError> {
    if matches!(value, Value::Nil) {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    let streams = items(value).ok_or_else(|| parse_error("streams"))?;
    match value {
        Value::Map(_) => {
            for pair in streams.chunks(2) {
                if let [_, list] = pair {
                    found.extend(entries(list)?);
                }
            }
        }
        _ => {
            for stream in streams {
                let parts = items(stream).ok_or_else(|| parse_error("stream"))?;
                let [_, list] = parts.as_slice() else {
                    return Err(parse_error("stream of two parts"));
                };
                found.extend(entries(list)?);
            }
        }
    }
    Ok(found)
}
