//! SQLite's time mapping: `INTEGER` microseconds since the Unix epoch, UTC.
//!
//! SQLite has no timestamp type: a date is whatever text, real or integer
//! the application writes. The store writes integers, because they
//!
//! - sort as numbers, so `next_attempt_at <= ?` and `ORDER BY` are plain
//!   integer comparisons through the indexes (text dates sort correctly only
//!   while every writer uses one format to the same number of digits);
//! - keep microseconds, the precision of the other backends (SQLite's own
//!   `'now'` has milliseconds, and its Julian-day reals lose microseconds);
//! - are an instant on the time line, not a wall-clock reading: nothing in
//!   the conversion consults the process time zone (`TZ`), so processes in
//!   different zones on one file agree;
//! - stay readable with SQLite's own date functions, for an operator at the
//!   `sqlite3` prompt: `datetime(next_attempt_at / 1000000, 'unixepoch')`.
//!
//! The store writes instants from 0000-01-01 to 9999-12-31 UTC
//! ([`min_instant`] ..= [`max_instant`]), the range SQLite's date functions
//! work in; an instant outside it is rejected with
//! [`Error::InvalidArgument`] naming the field before anything is written
//! (a 64-bit count of microseconds would reach much further, but nothing
//! could read it back as a date). Sub-microsecond precision is truncated.
//!
//! The database clock is the host's
//! clock, read by the store ([`now`]): SQLite runs inside the process, so the
//! processes sharing a file share the host's clock, as the sessions of a
//! database server share the server's. A transaction reads it once it holds
//! the write lock; a single statement reads it just before, so one that
//! waited for the lock writes the time it began waiting (a lease shorter, a
//! retry due earlier, by the wait).

use chrono::{DateTime, NaiveDate, Utc};
use diesel_outbox_core::{Error, Result, TaskId};

fn bound(
    year: i32,
    month: u32,
    day: u32,
    h: u32,
    m: u32,
    s: u32,
    us: u32,
) -> Option<DateTime<Utc>> {
    NaiveDate::from_ymd_opt(year, month, day)?
        .and_hms_micro_opt(h, m, s, us)
        .map(|naive| naive.and_utc())
}

/// The earliest instant the store writes: 0000-01-01 00:00:00 UTC.
pub fn min_instant() -> Option<DateTime<Utc>> {
    bound(0, 1, 1, 0, 0, 0, 0)
}

/// The latest instant the store writes: 9999-12-31 23:59:59.999999 UTC.
pub fn max_instant() -> Option<DateTime<Utc>> {
    bound(9999, 12, 31, 23, 59, 59, 999_999)
}

/// Microseconds since 1970-01-01 00:00:00 UTC (negative before),
/// sub-microsecond digits truncated, for any instant.
pub fn to_micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// The column value for `at`, or `InvalidArgument` naming `field` when it is
/// outside [`min_instant`] ..= [`max_instant`].
pub fn to_column(field: &'static str, at: DateTime<Utc>) -> Result<i64> {
    let (Some(min), Some(max)) = (min_instant(), max_instant()) else {
        return Err(Error::invalid(field, "the column range is unknown"));
    };
    if at < min || at > max {
        return Err(Error::invalid(
            field,
            format!("{at} is outside {min} ..= {max}, the range SQLite's date functions read"),
        ));
    }
    Ok(to_micros(at))
}

/// [`to_column`] for an optional instant.
pub fn to_column_opt(field: &'static str, at: Option<DateTime<Utc>>) -> Result<Option<i64>> {
    at.map(|at| to_column(field, at)).transpose()
}

/// The instant a column value stands for; `None` beyond what
/// [`DateTime<Utc>`] holds (a value no store wrote).
pub fn from_micros(micros: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(micros)
}

/// [`from_micros`] for column `field` of task `id`: a value out of range is
/// [`Error::Corrupt`] naming the column.
pub(crate) fn column(id: i64, field: &'static str, micros: i64) -> Result<DateTime<Utc>> {
    from_micros(micros).ok_or_else(|| Error::Corrupt {
        id: TaskId::new(id),
        field,
        reason: format!("{micros} microseconds since the epoch is past the representable range"),
    })
}

/// The database clock: the host's clock, in whole microseconds.
pub fn now() -> DateTime<Utc> {
    let now = Utc::now();
    from_micros(to_micros(now)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use chrono::{NaiveDate, TimeDelta};

    use super::*;

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, us: u32) -> DateTime<Utc> {
        NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|date| date.and_hms_micro_opt(h, mi, s, us))
            .expect("a valid instant")
            .and_utc()
    }

    #[test]
    fn microseconds_since_the_epoch_in_utc() {
        assert_eq!(to_micros(at(1970, 1, 1, 0, 0, 0, 0)), 0);
        assert_eq!(to_micros(at(1970, 1, 1, 0, 0, 1, 1)), 1_000_001);
        assert_eq!(to_micros(at(1969, 12, 31, 23, 59, 59, 999_999)), -1);
        // 2038 and 9999 are no limit.
        let later = at(2100, 6, 1, 12, 0, 0, 123_456);
        assert_eq!(from_micros(to_micros(later)), Some(later));
    }

    #[test]
    fn accepts_years_0_to_9999_and_rejects_beyond_them() {
        let min = min_instant().expect("valid bound");
        let max = max_instant().expect("valid bound");
        for inside in [min, max] {
            let value = to_column("expires_at", inside).expect("inside the range");
            assert_eq!(from_micros(value), Some(inside));
        }
        let tick = TimeDelta::microseconds(1);
        for outside in [min - tick, max + tick, DateTime::<Utc>::MAX_UTC] {
            let error = to_column("not_before", outside).expect_err("outside the range");
            assert_eq!(error.field(), Some("not_before"));
        }
        assert_eq!(to_column_opt("expires_at", None).expect("none"), None);
        // Values no store wrote are reported, not wrapped.
        assert_eq!(from_micros(i64::MAX), None);
        assert!(column(7, "expires_at", i64::MIN).is_err());
    }

    #[test]
    fn order_of_instants_is_order_of_values() {
        let instants = [
            at(1900, 1, 1, 0, 0, 0, 0),
            at(1969, 12, 31, 23, 59, 59, 999_999),
            at(1970, 1, 1, 0, 0, 0, 0),
            at(2026, 11, 30, 5, 50, 19, 1),
            at(2026, 11, 30, 5, 50, 19, 2),
        ];
        let values: Vec<i64> = instants.iter().copied().map(to_micros).collect();
        assert!(
            values.windows(2).all(|pair| pair[0] < pair[1]),
            "{values:?}"
        );
    }

    #[test]
    fn sub_microsecond_digits_are_truncated() {
        let fine = at(2026, 1, 1, 0, 0, 0, 0) + TimeDelta::nanoseconds(1_999);
        assert_eq!(
            from_micros(to_micros(fine)),
            Some(at(2026, 1, 1, 0, 0, 0, 1))
        );
        assert_eq!(now().timestamp_subsec_nanos() % 1_000, 0);
    }
}
