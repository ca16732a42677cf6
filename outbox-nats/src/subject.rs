//! NATS subjects: validation and wildcard matching.

/// Checks that `subject` can be published to: dot-separated, non-empty
/// tokens, no whitespace, no wildcards.
pub(crate) fn check_publishable(subject: &str) -> Result<(), String> {
    if subject.is_empty() {
        return Err("a subject must not be empty".into());
    }
    for token in subject.split('.') {
        if token.is_empty() {
            return Err(format!("`{subject}` has an empty token"));
        }
        if token.chars().any(char::is_whitespace) {
            return Err(format!("`{subject}` contains whitespace"));
        }
        if token == "*" || token == ">" {
            return Err(format!(
                "`{subject}` contains a wildcard; publish subjects must be literal"
            ));
        }
    }
    Ok(())
}

/// Whether the subject filter `pattern` (with `*` and `>`) matches `subject`.
pub(crate) fn matches(pattern: &str, subject: &str) -> bool {
    let mut tokens = subject.split('.');
    for expected in pattern.split('.') {
        match (expected, tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (literal, Some(token)) if literal == token => {}
            _ => return false,
        }
    }
    tokens.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_like_nats() {
        assert!(matches("orders.>", "orders.created.v1"));
        assert!(!matches("orders.>", "orders"));
        assert!(matches("orders.*.v1", "orders.created.v1"));
        assert!(!matches("orders.*", "orders.created.v1"));
        assert!(matches("orders.created.v1", "orders.created.v1"));
        assert!(!matches("orders.created", "orders.created.v1"));
    }

    #[test]
    fn publish_subjects_are_literal_tokens() {
        assert!(check_publishable("outbox.order.created.v1").is_ok());
        for bad in ["", "a..b", "a.*.b", "a.>", "has space", ".a"] {
            assert!(check_publishable(bad).is_err(), "{bad}");
        }
    }
}
