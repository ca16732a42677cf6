//! Durations and instants as operators type them: `90s`, `15m`, `2h`, `7d`,
//! or an RFC 3339 time.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// A whole number followed by `ms`, `s`, `m`, `h` or `d`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit: write e.g. 90s, 15m, 2h or 7d"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number"))?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(number)),
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{text}`: use ms, s, m, h or d"
            ));
        }
    };
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// An RFC 3339 instant, or an age meaning that long before now.
pub(crate) fn parse_since(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let age = parse_duration(text).map_err(|error| {
        format!("{error}; or give an RFC 3339 time such as 2026-11-30T03:00:00Z")
    })?;
    TimeDelta::from_std(age)
        .ok()
        .and_then(|age| Utc::now().checked_sub_signed(age))
        .ok_or_else(|| format!("`{text}` reaches before the earliest representable time"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_number_and_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "10", "h", "5w", "-3s", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn since_takes_a_time_or_an_age() {
        let at = parse_since("2026-11-30T03:00:00+01:00");
        assert_eq!(
            at.map(|at| at.to_rfc3339()),
            Ok("2026-11-30T02:00:00+00:00".to_owned())
        );
        let hour_ago = parse_since("1h").unwrap_or_default();
        let age = Utc::now() - hour_ago;
        assert!(age >= TimeDelta::hours(1) && age < TimeDelta::hours(1) + TimeDelta::minutes(1));
        assert!(parse_since("yesterday").is_err());
    }
}
