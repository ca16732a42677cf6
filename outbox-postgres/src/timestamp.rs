//! PostgreSQL's time mapping: `TIMESTAMPTZ(6)` as `DateTime<Utc>`.
//!
//! Instants are stored as microseconds on the database clock's time line, so
//! the session `TimeZone` never changes what is stored. Sub-microsecond
//! precision is truncated, the way diesel encodes the value. The column holds
//! 4713 BC to 294276 AD; an instant outside that range is rejected before it
//! reaches the database, where it would abort the caller's transaction.

use chrono::{DateTime, NaiveDate, Utc};
use diesel_outbox_core::{Error, Result};

/// The earliest instant `TIMESTAMPTZ` holds: 4714-11-24 BC (year -4713) 00:00 UTC.
pub fn min_instant() -> Option<DateTime<Utc>> {
    NaiveDate::from_ymd_opt(-4713, 11, 24)
        .and_then(|date| date.and_hms_opt(0, 0, 0))
        .map(|naive| naive.and_utc())
}

/// Checks that `value` fits a `TIMESTAMPTZ` column; the error names `field`.
pub fn check(field: &'static str, value: Option<DateTime<Utc>>) -> Result<()> {
    match (value, min_instant()) {
        (Some(at), Some(min)) if at < min => Err(Error::invalid(
            field,
            format!("{at} is before {min}, the earliest instant PostgreSQL stores"),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_instants_before_the_column_range() {
        let min = min_instant().expect("the minimum is a valid date");
        assert!(check("expires_at", Some(min)).is_ok());
        let before = min - chrono::TimeDelta::microseconds(1);
        let err = check("expires_at", Some(before)).expect_err("out of range");
        assert_eq!(err.field(), Some("expires_at"));
        assert!(check("not_before", Some(DateTime::<Utc>::MAX_UTC)).is_ok());
    }
}
