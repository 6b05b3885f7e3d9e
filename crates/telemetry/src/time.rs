//! UTC timestamps and calendar dates for log lines, reports and the CLI, through `jiff` (the
//! project's one date crate): the delivery log writes `YYYY-MM-DDTHH:MM:SS.mmmZ`,
//! reports take a `YYYY-MM-DD` day.
//!
//! Place in the flow: leaves called by the delivery log (`log`), the report API and the CLI.
//!
//! Invariants: formatting never panics; an instant outside jiff's range (years -9999..=9999,
//! i.e. milliseconds beyond `i64`'s share of it) is written as the largest instant jiff knows,
//! which no real clock reaches.

use jiff::civil::Date;
use jiff::fmt::temporal::DateTimePrinter;
use jiff::tz::TimeZone;
use jiff::Timestamp;

/// Milliseconds since the Unix epoch as a jiff instant, clamped to jiff's range.
pub fn timestamp_ms(unix_ms: u64) -> Timestamp {
    i64::try_from(unix_ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .unwrap_or(Timestamp::MAX)
}

/// Formats milliseconds since the Unix epoch as an RFC 3339 UTC timestamp with exactly three
/// fraction digits (`1970-01-01T00:00:00.000Z`).
pub fn rfc3339_ms(unix_ms: u64) -> String {
    // The printer's fixed precision keeps `.000`, which jiff's default Display would drop.
    DateTimePrinter::new()
        .precision(Some(3))
        .timestamp_to_string(&timestamp_ms(unix_ms))
}

/// Unix seconds as an RFC 5322 `Date:` value in UTC (`Tue, 24 Nov 2026 22:47:33 +0000`), for the
/// field the enqueue path adds to a post that arrived without one.
pub fn rfc5322_date(unix_secs: u64) -> String {
    let ts = timestamp_ms(unix_secs.saturating_mul(1000));
    // Through a UTC zone rather than `timestamp_to_string`, which writes `-0000` ("local time
    // unknown", RFC 5322 §3.3); we do know it is UTC.
    let mut out = String::with_capacity(32);
    match jiff::fmt::rfc2822::DateTimePrinter::new()
        .print_zoned_datetime(&ts.to_zoned_datetime(TimeZone::UTC), &mut out)
    {
        Ok(()) => out,
        Err(_) => "Thu, 1 Jan 1970 00:00:00 +0000".to_string(),
    }
}

/// `YYYY-MM-DD` (UTC) → ms since the epoch at that day's midnight; `None` for anything else,
/// for an impossible day (`2001-02-29`) and for days before 1970.
pub fn parse_date_ms(s: &str) -> Option<u64> {
    // Split by hand rather than jiff's ISO 8601 parser: that one also takes `20000229`, signed
    // six-digit years and times, which the report API has never accepted.
    let mut it = s.split('-');
    let y: i16 = it.next()?.parse().ok()?;
    let m: i8 = it.next()?.parse().ok()?;
    let d: i8 = it.next()?.parse().ok()?;
    if it.next().is_some() || y < 1970 {
        return None;
    }
    let midnight = Date::new(y, m, d)
        .ok()?
        .to_zoned_datetime(TimeZone::UTC)
        .ok()?;
    u64::try_from(midnight.timestamp().as_millisecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc5322_dates_in_utc() {
        assert_eq!(rfc5322_date(0), "Thu, 1 Jan 1970 00:00:00 +0000");
        assert_eq!(
            rfc5322_date(1_000_000_000),
            "Sun, 9 Sep 2001 01:46:40 +0000"
        );
        assert!(
            rfc5322_date(u64::MAX).ends_with("+0000"),
            "clamped, no panic"
        );
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_ms(1_795_142_417_005), "2026-11-20T02:40:17.005Z");
        assert_eq!(parse_date_ms("2000-02-29"), Some(951_782_400_000));
        assert_eq!(parse_date_ms("2001-02-29"), None);
        assert_eq!(parse_date_ms("1970-01-01"), Some(0));
    }

    #[test]
    fn refuses_what_the_hand_written_parser_refused() {
        for bad in [
            "",
            "2000",
            "2000-02",
            "2000-13-01",
            "2000-00-10",
            "2000-01-32",
            "1969-12-31",
        ] {
            assert_eq!(parse_date_ms(bad), None, "{bad}");
        }
        assert_eq!(parse_date_ms("2000-02-29-01"), None);
        assert_eq!(parse_date_ms("20000229"), None);
        assert_eq!(parse_date_ms("2000-02-29T00:00"), None);
        assert_eq!(parse_date_ms("2024-12-31"), Some(1_735_603_200_000));
    }

    #[test]
    fn instants_beyond_the_calendar_do_not_panic() {
        assert_eq!(rfc3339_ms(u64::MAX), rfc3339_ms(i64::MAX as u64));
        assert!(rfc3339_ms(u64::MAX).starts_with("9999-12-"));
    }
}
