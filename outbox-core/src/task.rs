//! What a caller enqueues: [`Task`] and its validation.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::{
    Error, Result,
    limits::{
        MAX_HEADER_NAME_BYTES, MAX_HEADERS, MAX_HEADERS_BYTES, MAX_KEY_BYTES, MAX_KIND_BYTES,
        MAX_PAYLOAD_BYTES,
    },
};

/// String headers that travel with a task: trace context, correlation id, ...
pub type Headers = BTreeMap<String, String>;

/// A message to deliver if and only if the enqueuing transaction commits.
///
/// Built with [`Task::new`] (raw bytes) or [`Task::json`] (a serde value), then
/// refined with the builder methods. Nothing is checked until it is enqueued,
/// where every bound in [`limits`](crate::limits) is enforced (see [`Task::validate`]).
///
/// ```
/// use diesel_outbox_core::Task;
/// use chrono::{Duration, Utc};
///
/// let task = Task::json("order.created", 1, &serde_json::json!({ "order": 42 }))?
///     .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
///     .ordering_key("order-42")
///     .expires_at(Utc::now() + Duration::hours(24));
/// assert_eq!(task.kind, "order.created");
/// # Ok::<(), diesel_outbox_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Task {
    /// Handler selector: non-empty, at most 64 bytes, compared as bytes.
    pub kind: String,
    /// Payload protocol version, positive.
    pub version: i32,
    /// Immutable payload, at most 1 MiB.
    pub payload: Vec<u8>,
    /// String headers (trace context, correlation id, ...).
    pub headers: Headers,
    /// Tasks with one ordering key are delivered in id order.
    pub ordering_key: Option<String>,
    /// Idempotency key for enqueue.
    pub dedup_key: Option<String>,
    /// Deadline; `None` never expires.
    pub expires_at: Option<DateTime<Utc>>,
    /// Attempt limit; `None` retries until expiry.
    pub max_attempts: Option<i32>,
    /// Not claimable before this instant; `None` is due at once.
    pub not_before: Option<DateTime<Utc>>,
}

impl Task {
    /// A task of `kind` and payload protocol `version` carrying `payload`.
    pub fn new(kind: impl Into<String>, version: i32, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            kind: kind.into(),
            version,
            payload: payload.into(),
            headers: Headers::new(),
            ordering_key: None,
            dedup_key: None,
            expires_at: None,
            max_attempts: None,
            not_before: None,
        }
    }

    /// A task whose payload is `value` serialised as JSON.
    pub fn json<T: Serialize + ?Sized>(
        kind: impl Into<String>,
        version: i32,
        value: &T,
    ) -> Result<Self> {
        let payload =
            serde_json::to_vec(value).map_err(|e| Error::invalid("payload", e.to_string()))?;
        Ok(Self::new(kind, version, payload))
    }

    /// Adds (or replaces) one header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Replaces all headers.
    pub fn headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }

    /// Tasks with one ordering key are delivered in id order.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// An idempotency key: enqueueing a second task with a key still in the table
    /// returns the first task's id and writes nothing.
    pub fn dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }

    /// The deadline after which the task is never handed to a handler.
    pub fn expires_at(mut self, at: DateTime<Utc>) -> Self {
        self.expires_at = Some(at);
        self
    }

    /// Stops retrying after this many attempts (default: until expiry).
    pub fn max_attempts(mut self, attempts: i32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// Not claimable before this instant (a scheduled send).
    pub fn not_before(mut self, at: DateTime<Utc>) -> Self {
        self.not_before = Some(at);
        self
    }

    /// Checks every bound in [`limits`](crate::limits); the error names the first bad field.
    ///
    /// Backends call this before writing, and add their own range checks for
    /// timestamps.
    pub fn validate(&self) -> Result<()> {
        if self.kind.is_empty() {
            return Err(Error::invalid("kind", "must not be empty"));
        }
        if self.kind.len() > MAX_KIND_BYTES {
            return Err(Error::invalid(
                "kind",
                format!("{} bytes, at most {MAX_KIND_BYTES}", self.kind.len()),
            ));
        }
        reject_nul("kind", &self.kind)?;
        if self.version <= 0 {
            return Err(Error::invalid(
                "version",
                format!("{} is not positive", self.version),
            ));
        }
        if self.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(Error::invalid(
                "payload",
                format!("{} bytes, at most {MAX_PAYLOAD_BYTES}", self.payload.len()),
            ));
        }
        validate_headers(&self.headers)?;
        validate_key("ordering_key", self.ordering_key.as_deref())?;
        validate_key("dedup_key", self.dedup_key.as_deref())?;
        if let Some(max) = self.max_attempts
            && max <= 0
        {
            return Err(Error::invalid(
                "max_attempts",
                format!("{max} is not positive"),
            ));
        }
        Ok(())
    }
}

fn validate_key(field: &'static str, key: Option<&str>) -> Result<()> {
    match key {
        Some("") => Err(Error::invalid(field, "must not be empty when set")),
        Some(key) if key.len() > MAX_KEY_BYTES => Err(Error::invalid(
            field,
            format!("{} bytes, at most {MAX_KEY_BYTES}", key.len()),
        )),
        Some(key) => reject_nul(field, key),
        None => Ok(()),
    }
}

/// PostgreSQL cannot store a NUL character in a text column (MySQL can), so
/// no backend accepts one: the same task is valid everywhere.
fn reject_nul(field: &'static str, text: &str) -> Result<()> {
    match text.find('\0') {
        Some(at) => Err(Error::invalid(
            field,
            format!("contains a NUL character at byte {at}"),
        )),
        None => Ok(()),
    }
}

fn validate_headers(headers: &Headers) -> Result<()> {
    if headers.len() > MAX_HEADERS {
        return Err(Error::invalid(
            "headers",
            format!("{} headers, at most {MAX_HEADERS}", headers.len()),
        ));
    }
    let mut total = 0;
    for (name, value) in headers {
        if name.is_empty() || name.len() > MAX_HEADER_NAME_BYTES {
            return Err(Error::invalid(
                "headers",
                format!("header names must be 1 to {MAX_HEADER_NAME_BYTES} bytes"),
            ));
        }
        if name.contains('\0') || value.contains('\0') {
            return Err(Error::invalid(
                "headers",
                format!("header {name:?} contains a NUL character in its name or value"),
            ));
        }
        total += name.len() + value.len();
    }
    if total > MAX_HEADERS_BYTES {
        return Err(Error::invalid(
            "headers",
            format!("{total} bytes of names and values, at most {MAX_HEADERS_BYTES}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(task: &Task) -> Option<&'static str> {
        task.validate().err().and_then(|e| e.field())
    }

    #[test]
    fn accepts_a_plain_task_and_the_exact_limits() {
        let task = Task::new("k".repeat(MAX_KIND_BYTES), 1, vec![0; MAX_PAYLOAD_BYTES])
            .ordering_key("o".repeat(MAX_KEY_BYTES))
            .dedup_key("d".repeat(MAX_KEY_BYTES))
            .max_attempts(1);
        assert!(task.validate().is_ok());
    }

    #[test]
    fn names_each_bad_field() {
        let ok = Task::new("k", 1, b"{}".to_vec());
        assert_eq!(field_of(&Task::new("", 1, vec![])), Some("kind"));
        assert_eq!(
            field_of(&Task::new("k".repeat(65), 1, vec![])),
            Some("kind")
        );
        assert_eq!(field_of(&Task::new("k", 0, vec![])), Some("version"));
        assert_eq!(field_of(&Task::new("k", -3, vec![])), Some("version"));
        assert_eq!(
            field_of(&Task::new("k", 1, vec![0; MAX_PAYLOAD_BYTES + 1])),
            Some("payload")
        );
        assert_eq!(field_of(&ok.clone().ordering_key("")), Some("ordering_key"));
        assert_eq!(
            field_of(&ok.clone().dedup_key("d".repeat(256))),
            Some("dedup_key")
        );
        assert_eq!(field_of(&ok.clone().max_attempts(0)), Some("max_attempts"));
        assert_eq!(field_of(&ok.clone().header("", "v")), Some("headers"));
        let many: Headers = (0..=MAX_HEADERS)
            .map(|i| (i.to_string(), String::new()))
            .collect();
        assert_eq!(field_of(&ok.clone().headers(many)), Some("headers"));
        assert_eq!(
            field_of(&ok.header("big", "v".repeat(MAX_HEADERS_BYTES))),
            Some("headers")
        );
    }
}
