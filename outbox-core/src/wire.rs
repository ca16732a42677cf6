//! The header names an outbox message carries on every broker, beside the
//! task's own headers. Publishers set them; consumers read the task back
//! from them.

/// The task id, as a decimal number.
pub const TASK_ID: &str = "Outbox-Task-Id";
/// The task kind.
pub const KIND: &str = "Outbox-Kind";
/// The payload protocol version.
pub const VERSION: &str = "Outbox-Version";
/// The attempt that published this message (1 for the first).
pub const ATTEMPT: &str = "Outbox-Attempt";
/// The outbox the task is stored in ([`OutboxId`](crate::OutboxId)).
pub const SOURCE: &str = "Outbox-Source";
/// The prefix of every name above, which a task's own headers may not use
/// (compared without regard to ASCII case).
pub const RESERVED_PREFIX: &str = "outbox-";

/// The longest message id prefix a publisher takes, in bytes: with `:` and
/// the largest task id (19 digits), a message id `<prefix>:<task id>` still
/// fits an inbox ([`MAX_MESSAGE_ID_BYTES`](crate::inbox::MAX_MESSAGE_ID_BYTES)).
pub const MAX_MESSAGE_ID_PREFIX_BYTES: usize = crate::inbox::MAX_MESSAGE_ID_BYTES - 1 - 19;

/// Why `prefix` cannot prefix message ids (`<prefix>:<task id>`), if it
/// cannot: empty, with whitespace or control characters, or longer than
/// [`MAX_MESSAGE_ID_PREFIX_BYTES`].
pub fn check_message_id_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() || prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must be non-empty, without whitespace or control characters".into());
    }
    if prefix.len() > MAX_MESSAGE_ID_PREFIX_BYTES {
        return Err(format!(
            "{} bytes exceed {MAX_MESSAGE_ID_PREFIX_BYTES}: its message ids would not fit an \
             inbox ({} bytes)",
            prefix.len(),
            crate::inbox::MAX_MESSAGE_ID_BYTES
        ));
    }
    Ok(())
}

/// Whether `name` starts with `prefix`, without regard to ASCII case.
pub fn has_prefix(name: &str, prefix: &str) -> bool {
    name.as_bytes()
        .get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_carries_the_reserved_prefix() {
        for name in [TASK_ID, KIND, VERSION, ATTEMPT, SOURCE] {
            assert!(has_prefix(name, RESERVED_PREFIX), "{name}");
        }
        assert!(!has_prefix("outbox", RESERVED_PREFIX));
        assert!(has_prefix("OUTBOX-x", RESERVED_PREFIX));
    }
}
