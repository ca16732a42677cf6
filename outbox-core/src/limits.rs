//! The bounds every backend enforces on what it stores (DESIGN §3, §7).

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

#[cfg(test)]
mod tests {
    use super::*;

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
