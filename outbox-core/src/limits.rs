//! The bounds every backend enforces: on what a task stores, and on the
//! settings of workers and relays.

use std::time::Duration;

use crate::{Error, Result};

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

/// Longest duration a setting may have: 100 years (36,525 days).
///
/// Applies to every duration of [`WorkerConfig`](crate::WorkerConfig),
/// [`RelayConfig`](crate::RelayConfig) and [`RetryPolicy`](crate::RetryPolicy).
/// Leases and retry delays are added to the database clock and retention is
/// subtracted from it, so a longer setting would be accepted at start-up and
/// then fail every write. Within 100 years the arithmetic stays inside what
/// both backends represent:
///
/// - MySQL/MariaDB `DATETIME(6)` holds 1000-01-01 to 9999-12-31; the current
///   time plus or minus 100 years stays inside for any clock before 9899
///   (past the end, MariaDB's date arithmetic gives `NULL`).
/// - PostgreSQL receives a duration as a micro-second count times
///   `interval '1 microsecond'`, a `float8` product: 100 years is about
///   3.2 × 10¹⁵ µs, below 2⁵³ (about 285 years), so the product is exact and
///   far inside `interval` (about 178 million years) and `timestamptz` (to
///   the year 294276).
/// - The micro-second count fits an `i64`, and a timer deadline of now plus
///   the duration does not overflow.
///
/// No lease, backoff, retention or interval needs longer; `None` retention
/// keeps finished tasks for ever.
pub const MAX_DURATION: Duration = Duration::from_secs(36_525 * 24 * 60 * 60);

/// Largest batch: most tasks one claim takes
/// ([`RelayConfig::batch_size`](crate::RelayConfig::batch_size)) and most rows
/// one purge statement deletes
/// ([`RelayConfig::purge_batch`](crate::RelayConfig::purge_batch)): 5,000.
///
/// The results of a full batch are written back together. On MySQL/MariaDB a
/// result binds up to 18 parameters and a prepared statement takes at most
/// 65,535, so the backend writes at most 2,000 results per statement and a
/// full batch takes at most three. A purge binds nothing per row, but a
/// larger purge statement only holds its locks longer.
pub const MAX_BATCH_SIZE: usize = 5_000;

/// Most handlers one worker runs at once
/// ([`WorkerConfig::concurrency`](crate::WorkerConfig::concurrency)): 10,000.
///
/// Far above what one connection pool and one lease serve well (the default
/// is 32). The bound refuses a value meant as "unlimited", such as
/// `usize::MAX`, with which a relay would keep claiming and start a handler
/// for every due task at once.
pub const MAX_CONCURRENCY: usize = 10_000;

/// Longest worker name ([`WorkerConfig::owner`](crate::WorkerConfig::owner)),
/// in bytes: MySQL/MariaDB's `lease_owner` column is `VARCHAR(255)`, so a
/// longer name would fail every claim.
pub const MAX_OWNER_BYTES: usize = 255;

/// Refuses, naming `field`, a duration longer than [`MAX_DURATION`].
pub(crate) fn check_duration(field: &'static str, value: Duration) -> Result<()> {
    if value > MAX_DURATION {
        return Err(Error::Config {
            field,
            reason: format!(
                "{value:?} exceeds {MAX_DURATION:?} (100 years), the longest duration \
                 the databases' time arithmetic represents"
            ),
        });
    }
    Ok(())
}

/// Refuses, naming `field`, a zero duration or one longer than [`MAX_DURATION`].
pub(crate) fn check_positive_duration(field: &'static str, value: Duration) -> Result<()> {
    if value.is_zero() {
        return Err(Error::Config {
            field,
            reason: "must be positive".into(),
        });
    }
    check_duration(field, value)
}

/// Refuses, naming `field`, a count outside `1..=max`.
pub(crate) fn check_count(field: &'static str, value: usize, max: usize) -> Result<()> {
    if value == 0 || value > max {
        return Err(Error::Config {
            field,
            reason: format!("{value} is not within 1 ..= {max}"),
        });
    }
    Ok(())
}

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
