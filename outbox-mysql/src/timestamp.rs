//! MySQL/MariaDB's time mapping: `DATETIME(6)` columns holding UTC.
//!
//! Why not `TIMESTAMP(6)`: it ends on 2038-01-19, well within the life of data
//! written today, and it converts through the session's `time_zone`, which a
//! user's connection may change at any time. A `DATETIME(6)` stores what it is
//! given, so the store hands it UTC and takes every database-side time from
//! `UTC_TIMESTAMP(6)`; the session `time_zone` then never matters.
//!
//! Instants round-trip to the microsecond (finer precision is truncated, as
//! diesel encodes it). The column holds 1000-01-01 to 9999-12-31; an instant
//! outside that range is rejected with [`Error::InvalidArgument`] before
//! anything is written.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use diesel_outbox_core::{Error, Result};

fn bound(
    year: i32,
    month: u32,
    day: u32,
    h: u32,
    m: u32,
    s: u32,
    us: u32,
) -> Option<NaiveDateTime> {
    NaiveDate::from_ymd_opt(year, month, day)?.and_hms_micro_opt(h, m, s, us)
}

/// The earliest instant a `DATETIME(6)` holds: 1000-01-01 00:00:00 UTC.
pub fn min_instant() -> Option<DateTime<Utc>> {
    bound(1000, 1, 1, 0, 0, 0, 0).map(|naive| naive.and_utc())
}

/// The latest instant a `DATETIME(6)` holds: 9999-12-31 23:59:59.999999 UTC.
pub fn max_instant() -> Option<DateTime<Utc>> {
    bound(9999, 12, 31, 23, 59, 59, 999_999).map(|naive| naive.and_utc())
}

/// The column value for `value`, or `InvalidArgument` naming `field` when
/// the column cannot hold it.
pub fn to_column(field: &'static str, value: DateTime<Utc>) -> Result<NaiveDateTime> {
    let (Some(min), Some(max)) = (min_instant(), max_instant()) else {
        return Err(Error::invalid(field, "the DATETIME range is unknown"));
    };
    if value < min || value > max {
        return Err(Error::invalid(
            field,
            format!("{value} is outside {min} ..= {max}, what DATETIME(6) holds"),
        ));
    }
    Ok(value.naive_utc())
}

/// [`to_column`] for an optional instant.
pub fn to_column_opt(
    field: &'static str,
    value: Option<DateTime<Utc>>,
) -> Result<Option<NaiveDateTime>> {
    value.map(|at| to_column(field, at)).transpose()
}

/// The instant a column value (UTC) stands for.
pub fn from_column(value: NaiveDateTime) -> DateTime<Utc> {
    value.and_utc()
}

/// [`from_column`] for column `field` of a task (every value is an instant).
pub(crate) fn column(
    _id: i64,
    _field: &'static str,
    value: NaiveDateTime,
) -> Result<DateTime<Utc>> {
    Ok(from_column(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_column_range_and_rejects_beyond_it() {
        let min = min_instant().expect("valid bound");
        let max = max_instant().expect("valid bound");
        assert_eq!(
            from_column(to_column("expires_at", min).expect("min fits")),
            min
        );
        assert_eq!(
            from_column(to_column("expires_at", max).expect("max fits")),
            max
        );
        let tick = chrono::TimeDelta::microseconds(1);
        for outside in [min - tick, max + tick] {
            let err = to_column("not_before", outside).expect_err("outside the column");
            assert_eq!(err.field(), Some("not_before"));
        }
        assert!(to_column_opt("expires_at", None).expect("none").is_none());
    }

    #[test]
    fn the_2038_limit_of_timestamp_does_not_apply() {
        let later = NaiveDate::from_ymd_opt(2100, 6, 1)
            .and_then(|d| d.and_hms_micro_opt(12, 0, 0, 123_456))
            .expect("valid date")
            .and_utc();
        assert_eq!(
            from_column(to_column("expires_at", later).expect("fits")),
            later
        );
    }
}
