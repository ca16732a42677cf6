//! The bounds every backend enforces on what it stores.

/// Longest `kind`, in bytes.
pub const MAX_KIND_BYTES: usize = 64;
/// Largest payload, in bytes (1 MiB).
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// Longest `ordering_key` or `dedup_key`, in bytes.
pub const MAX_KEY_BYTES: usize = 255;
/// Most headers one task may carry.
pub const MAX_HEADERS: usize = 64;
/// Longest header name, in bytes.
pub const MAX_HEADER_NAME_BYTES: usize = 256;
/// Largest sum of header name and value lengths, in bytes.
pub const MAX_HEADERS_BYTES: usize = 16 * 1024;
/// Longest `last_error`, in bytes; longer texts are cut on a UTF-8 boundary.
pub const MAX_ERROR_BYTES: usize = 4 * 1024;

/// Cuts `text` to at most `max` bytes without splitting a UTF-8 character.
pub fn truncate_utf8(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` made storable as a `last_error` on every backend: each NUL
/// character (which PostgreSQL cannot store in text) is written as the two
/// characters `\0`, then the text is cut to [`MAX_ERROR_BYTES`] on a
/// character boundary. A Rust `String` is always valid UTF-8, so text built
/// from foreign bytes (for example with `String::from_utf8_lossy`) already
/// carries U+FFFD where those bytes were invalid.
pub fn storable_error(text: &str) -> String {
    if text.contains('\0') {
        truncate_utf8(&text.replace('\0', "\\0"), MAX_ERROR_BYTES).to_owned()
    } else {
        truncate_utf8(text, MAX_ERROR_BYTES).to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storable_errors_escape_nul_and_stay_within_the_limit() {
        assert_eq!(storable_error("bad\0byte"), "bad\\0byte");
        assert_eq!(storable_error("plain"), "plain");
        let lossy = String::from_utf8_lossy(b"bytes \xff\xfe end");
        assert_eq!(storable_error(&lossy), "bytes \u{fffd}\u{fffd} end");
        let long = "\0".repeat(MAX_ERROR_BYTES);
        let stored = storable_error(&long);
        assert_eq!(stored.len(), MAX_ERROR_BYTES);
        assert!(!stored.contains('\0'));
    }

    #[test]
    fn truncation_never_splits_a_character() {
        let text = "é".repeat(3000); // 2 bytes each
        let cut = truncate_utf8(&text, MAX_ERROR_BYTES);
        assert_eq!(cut.len(), MAX_ERROR_BYTES);
        let text = "€".repeat(2000); // 3 bytes each: 4096 is not a boundary
        let cut = truncate_utf8(&text, MAX_ERROR_BYTES);
        assert_eq!(cut.len(), 4095);
        assert!(cut.chars().all(|c| c == '€'));
        assert_eq!(truncate_utf8("short", MAX_ERROR_BYTES), "short");
    }
}
