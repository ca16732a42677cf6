//! Kafka's rule for topic names, checked when a publisher or a consumer is
//! built.

/// The longest topic name Kafka accepts.
pub(crate) const MAX_TOPIC_CHARS: usize = 249;

/// Why `topic` is not a name Kafka accepts, if it is not: 1 to 249 ASCII
/// letters, digits, `.`, `_` and `-`, and not `.` or `..`.
pub(crate) fn check(topic: &str) -> Result<(), String> {
    if topic.is_empty() || topic.len() > MAX_TOPIC_CHARS {
        return Err(format!(
            "`{topic}`: a topic name is 1 to {MAX_TOPIC_CHARS} characters"
        ));
    }
    if topic == "." || topic == ".." {
        return Err(format!("`{topic}` is not a topic name"));
    }
    if let Some(bad) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "`{}`: {bad:?} is not allowed in a topic name (ASCII letters, digits, `.`, `_` and `-` are)",
            topic.escape_debug()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn kafka_topic_names_are_checked() {
        for good in ["orders", "orders.created-v1", "a_b", &"t".repeat(249)] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "with space",
            "ünïcode",
            "nul\0",
            &"t".repeat(250),
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
    }
}
