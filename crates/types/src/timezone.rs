//! Time zones: the session's `TimeZone` setting, `AT TIME ZONE`, and zones written in
//! TIMESTAMPTZ input.
//!
//! A TIMESTAMPTZ value is a UTC instant (microseconds since 1970-01-01 00:00:00 UTC); a
//! zone only matters when a value is shown, read from text without a zone, split into
//! fields, truncated, or shifted by days and months. A [`TimeZone`] is a fixed offset or
//! an IANA zone (the `chrono-tz` crate's compiled copy of the tz database, so answers do
//! not depend on the machine's `/usr/share/zoneinfo`).
//!
//! ```text
//!   UTC instant ──offset_at(instant)──▶ local wall-clock time     (to_local)
//!   local time  ──PostgreSQL's rule───▶ UTC instant                (to_utc)
//!       a local time in a spring-forward gap or a fall-back overlap takes the later
//!       of the two readings (02:30 in a gap is 03:30 after it; an overlap's second)
//! ```
//!
//! Zone names are read the ways PostgreSQL reads them, which differ by place:
//!
//! * `SET TimeZone` ([`TimeZone::from_setting`]): a number is hours east of UTC (ISO
//!   sign); otherwise an IANA name (any letter case), else a POSIX zone such as `UTC+3`
//!   or `+02:00`, whose offsets count hours *west* of UTC (so `'+02:00'` is UTC-2, as in
//!   PostgreSQL).
//! * `AT TIME ZONE` / `timezone()` ([`TimeZone::for_at_time_zone`]): an abbreviation
//!   (`PST`, `CEST`: a fixed offset), else as `SET` without the number form.
//! * Inside a timestamp's text and the zone argument of `make_timestamptz` and
//!   `date_trunc` ([`TimeZone::for_input`]): `+05`, `+0530`, `-08:00`, `Z` (ISO sign),
//!   abbreviations, IANA names.
//!
//! Limits: the tz database's rules are compiled up to 2099; later instants keep the
//! offset in force then (PostgreSQL extends daylight saving time indefinitely).

use std::collections::HashMap;
use std::sync::OnceLock;

use chrono::{Offset, TimeZone as _};
use chrono_tz::{OffsetName, Tz};

use crate::datetime::{MICROS_PER_DAY, MICROS_PER_SECOND};

/// Seconds in an hour.
const SECONDS_PER_HOUR: i32 = 3600;
/// Largest offset PostgreSQL accepts for a zone (15:59:59 either way).
const MAX_OFFSET_SECONDS: i32 = 16 * SECONDS_PER_HOUR - 1;
/// Instants are clamped to this range (about ±200,000 years) before a zone lookup: the
/// calendar library stops near ±262,000 years, and no rule changes that far out.
const LOOKUP_LIMIT_SECONDS: i64 = 6_000_000_000_000;

/// A time zone: a fixed offset or an IANA zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeZone {
    /// A fixed offset, in seconds east of UTC.
    Fixed(i32),
    /// A zone of the tz database.
    Named(Tz),
}

impl Default for TimeZone {
    fn default() -> Self {
        TimeZone::UTC
    }
}

impl TimeZone {
    /// Coordinated Universal Time (the default session zone).
    pub const UTC: TimeZone = TimeZone::Fixed(0);

    /// The offset from UTC (seconds east) in force at a UTC instant.
    pub fn offset_at(&self, utc_micros: i64) -> i32 {
        match self {
            TimeZone::Fixed(offset) => *offset,
            TimeZone::Named(tz) => tz.offset_from_utc_datetime(&naive_utc(utc_micros)).fix().local_minus_utc(),
        }
    }

    /// The zone's abbreviation at a UTC instant (`CET`, `CEST`; `+03` where the tz
    /// database has none; `UTC` for UTC; the offset for fixed zones).
    pub fn abbreviation_at(&self, utc_micros: i64) -> String {
        match self {
            TimeZone::Fixed(0) => "UTC".to_string(),
            TimeZone::Fixed(offset) => format_offset(*offset),
            TimeZone::Named(tz) => {
                let offset = tz.offset_from_utc_datetime(&naive_utc(utc_micros));
                match offset.abbreviation() {
                    Some(name) => name.to_string(),
                    None => format_offset(offset.fix().local_minus_utc()),
                }
            }
        }
    }

    /// The local wall-clock time (microseconds since 1970-01-01 00:00:00 local) of a UTC
    /// instant; `None` past the representable range.
    pub fn to_local(&self, utc_micros: i64) -> Option<i64> {
        utc_micros.checked_add(self.offset_at(utc_micros) as i64 * MICROS_PER_SECOND)
    }

    /// The UTC instant of a local wall-clock time, by PostgreSQL's rule for times that a
    /// daylight-saving change skips or repeats: the later of the two readings.
    pub fn to_utc(&self, local_micros: i64) -> Option<i64> {
        let at = |offset: i32| local_micros.checked_sub(offset as i64 * MICROS_PER_SECOND);
        let tz = match self {
            TimeZone::Fixed(offset) => return at(*offset),
            TimeZone::Named(tz) => tz,
        };
        let offset_at = |utc: i64| tz.offset_from_utc_datetime(&naive_utc(utc)).fix().local_minus_utc();
        // The offsets a day before and after (no zone changes twice within two days).
        let before = offset_at(local_micros.saturating_sub(MICROS_PER_DAY));
        let after = offset_at(local_micros.saturating_add(MICROS_PER_DAY));
        let reading_before = at(before)?;
        if before == after {
            return Some(reading_before);
        }
        let reading_after = at(after)?;
        let before_valid = offset_at(reading_before) == before;
        let after_valid = offset_at(reading_after) == after;
        Some(match (before_valid, after_valid) {
            (true, false) => reading_before,
            (false, true) => reading_after,
            // An overlap (both readings exist) or a gap (neither does): the later one.
            _ => reading_before.max(reading_after),
        })
    }

    /// The zone of `SET TimeZone = value` (see the module docs), with the name `SHOW`
    /// prints; `None` if the value names no zone.
    pub fn from_setting(value: &str) -> Option<(TimeZone, String)> {
        let text = value.trim();
        if let Ok(hours) = text.parse::<f64>() {
            // A number: hours east of UTC (SQL's sign, not POSIX's).
            let seconds = (hours * SECONDS_PER_HOUR as f64).round();
            if !seconds.is_finite() || seconds.abs() > MAX_OFFSET_SECONDS as f64 {
                return None;
            }
            return Some(TimeZone::fixed_with_posix_name(seconds as i32));
        }
        if let Some(zone) = lookup_named(text) {
            return Some((zone, zone_name(zone, text)));
        }
        parse_posix(text).map(|offset| (TimeZone::Fixed(offset), text.to_string()))
    }

    /// A fixed offset (seconds east of UTC) named as PostgreSQL shows one set from a
    /// number or an interval: `<+05:30>-05:30`.
    pub fn fixed_with_posix_name(offset: i32) -> (TimeZone, String) {
        // The abbreviation in angle brackets, then the POSIX offset (hours west).
        (TimeZone::Fixed(offset), format!("<{}>{}", format_offset(offset), format_offset(-offset)))
    }

    /// The zone of `x AT TIME ZONE value` and `timezone(value, x)`.
    pub fn for_at_time_zone(value: &str) -> Option<TimeZone> {
        let text = value.trim();
        if let Some(offset) = abbreviation_offset(text) {
            return Some(TimeZone::Fixed(offset));
        }
        lookup_named(text).or_else(|| parse_posix(text).map(TimeZone::Fixed))
    }

    /// A zone written in timestamp input or given to `make_timestamptz`/`date_trunc`:
    /// an ISO offset (`+05`, `-0830`, `+05:30`, `Z`), an abbreviation or an IANA name.
    pub fn for_input(value: &str) -> Option<TimeZone> {
        let text = value.trim();
        if let Some(offset) = parse_iso_offset(text) {
            return Some(TimeZone::Fixed(offset));
        }
        if text.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        if let Some(offset) = abbreviation_offset(text) {
            return Some(TimeZone::Fixed(offset));
        }
        lookup_named(text)
    }
}

/// A chrono date-time for a UTC instant, clamped to the range the calendar library has.
fn naive_utc(utc_micros: i64) -> chrono::NaiveDateTime {
    let seconds = utc_micros.div_euclid(MICROS_PER_SECOND).clamp(-LOOKUP_LIMIT_SECONDS, LOOKUP_LIMIT_SECONDS);
    chrono::DateTime::from_timestamp(seconds, 0).map(|t| t.naive_utc()).unwrap_or_default()
}

/// The name SHOW prints for a zone found by name: the tz database's spelling.
fn zone_name(zone: TimeZone, typed: &str) -> String {
    match zone {
        TimeZone::Named(tz) => tz.name().to_string(),
        TimeZone::Fixed(_) => typed.to_string(),
    }
}

/// An IANA zone by name, in any letter case.
fn lookup_named(name: &str) -> Option<TimeZone> {
    static ZONES: OnceLock<HashMap<String, Tz>> = OnceLock::new();
    let zones = ZONES.get_or_init(|| chrono_tz::TZ_VARIANTS.iter().map(|tz| (tz.name().to_ascii_lowercase(), *tz)).collect());
    zones.get(&name.to_ascii_lowercase()).map(|tz| TimeZone::Named(*tz))
}

/// Common zone abbreviations (a fixed offset each, seconds east), from PostgreSQL's
/// `Default` abbreviation set.
const ABBREVIATIONS: &[(&str, i32)] = &[
    ("utc", 0),
    ("ut", 0),
    ("gmt", 0),
    ("z", 0),
    ("zulu", 0),
    ("wet", 0),
    ("west", 3600),
    ("bst", 3600),
    ("cet", 3600),
    ("cest", 7200),
    ("met", 3600),
    ("mest", 7200),
    ("eet", 7200),
    ("eest", 10800),
    ("msk", 10800),
    ("ist", 7200),
    ("pkt", 18000),
    ("ict", 25200),
    ("hkt", 28800),
    ("awst", 28800),
    ("jst", 32400),
    ("kst", 32400),
    ("acst", 34200),
    ("acdt", 37800),
    ("aest", 36000),
    ("aedt", 39600),
    ("nzst", 43200),
    ("nzdt", 46800),
    ("ast", -14400),
    ("adt", -10800),
    ("est", -18000),
    ("edt", -14400),
    ("cst", -21600),
    ("cdt", -18000),
    ("mst", -25200),
    ("mdt", -21600),
    ("pst", -28800),
    ("pdt", -25200),
    ("akst", -32400),
    ("akdt", -28800),
    ("hst", -36000),
    ("nst", -12600),
    ("ndt", -9000),
];

fn abbreviation_offset(text: &str) -> Option<i32> {
    let lower = text.to_ascii_lowercase();
    ABBREVIATIONS.iter().find(|(name, _)| *name == lower).map(|(_, offset)| *offset)
}

/// `hh[:mm[:ss]]` or `hh[mm]` after a sign: seconds. `None` if malformed or too large.
fn parse_offset_digits(text: &str, allow_compact: bool) -> Option<i32> {
    let parts: Vec<&str> = text.split(':').collect();
    let number = |s: &str| -> Option<i32> {
        if s.is_empty() || s.len() > 2 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (hours, minutes, seconds) = match parts.as_slice() {
        [compact] if allow_compact && compact.len() == 4 && compact.bytes().all(|b| b.is_ascii_digit()) => {
            (number(&compact[..2])?, number(&compact[2..])?, 0)
        }
        [compact] if allow_compact && compact.len() == 6 && compact.bytes().all(|b| b.is_ascii_digit()) => {
            (number(&compact[..2])?, number(&compact[2..4])?, number(&compact[4..])?)
        }
        [h] => (number(h)?, 0, 0),
        [h, m] => (number(h)?, number(m)?, 0),
        [h, m, s] => (number(h)?, number(m)?, number(s)?),
        _ => return None,
    };
    if minutes > 59 || seconds > 59 {
        return None;
    }
    let total = hours * SECONDS_PER_HOUR + minutes * 60 + seconds;
    (total <= MAX_OFFSET_SECONDS).then_some(total)
}

/// An ISO 8601 offset: `Z`, `+05`, `-0830`, `+05:30`, `+05:30:15` (seconds east).
pub fn parse_iso_offset(text: &str) -> Option<i32> {
    if text.eq_ignore_ascii_case("z") {
        return Some(0);
    }
    let (sign, digits) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    parse_offset_digits(digits, true).map(|seconds| sign * seconds)
}

/// A POSIX zone without daylight-saving rules: an optional name (three or more letters,
/// or `<...>`) and an offset counting hours west of UTC (`UTC+3` is UTC-3, `+02:00` is
/// UTC-2). Returns seconds east.
fn parse_posix(text: &str) -> Option<i32> {
    let rest = if let Some(quoted) = text.strip_prefix('<') {
        &quoted[quoted.find('>')? + 1..]
    } else {
        let letters = text.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        if letters != 0 && letters < 3 {
            return None;
        }
        &text[letters..]
    };
    let (sign, digits) = match rest.as_bytes().first()? {
        b'+' => (1, &rest[1..]),
        b'-' => (-1, &rest[1..]),
        b'0'..=b'9' => (1, rest),
        _ => return None,
    };
    parse_offset_digits(digits, false).map(|seconds| -sign * seconds)
}

/// An offset as PostgreSQL prints it after a TIMESTAMPTZ: `+01`, `-08`, `+05:30`,
/// `+01:05:21`.
pub fn format_offset(offset_seconds: i32) -> String {
    let sign = if offset_seconds < 0 { '-' } else { '+' };
    let total = offset_seconds.unsigned_abs();
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    if seconds != 0 {
        format!("{sign}{hours:02}:{minutes:02}:{seconds:02}")
    } else if minutes != 0 {
        format!("{sign}{hours:02}:{minutes:02}")
    } else {
        format!("{sign}{hours:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datetime::{format_timestamp, parse_timestamp};

    fn ts(text: &str) -> i64 {
        parse_timestamp(text).unwrap()
    }

    #[test]
    fn names_as_postgresql_reads_them() {
        let vienna = TimeZone::from_setting("europe/vienna").unwrap();
        assert_eq!(vienna.1, "Europe/Vienna");
        assert_eq!(TimeZone::from_setting("+02:00").unwrap(), (TimeZone::Fixed(-7200), "+02:00".to_string()));
        assert_eq!(TimeZone::from_setting("UTC+3").unwrap().0, TimeZone::Fixed(-3 * 3600));
        assert_eq!(TimeZone::from_setting("-8").unwrap(), (TimeZone::Fixed(-8 * 3600), "<-08>+08".to_string()));
        assert_eq!(TimeZone::from_setting("5.5").unwrap().1, "<+05:30>-05:30");
        assert!(TimeZone::from_setting("Mars/Phobos").is_none());
        assert!(TimeZone::from_setting("").is_none());
        assert_eq!(TimeZone::for_at_time_zone("PST"), Some(TimeZone::Fixed(-8 * 3600)));
        assert_eq!(TimeZone::for_at_time_zone("+02:00"), Some(TimeZone::Fixed(-7200)));
        assert_eq!(TimeZone::for_input("+05"), Some(TimeZone::Fixed(5 * 3600)));
        assert_eq!(TimeZone::for_input("-0830"), Some(TimeZone::Fixed(-(8 * 3600 + 1800))));
        assert_eq!(TimeZone::for_input("Z"), Some(TimeZone::UTC));
        assert!(TimeZone::for_input("5").is_none());
    }

    #[test]
    fn offsets_and_daylight_saving() {
        let (vienna, _) = TimeZone::from_setting("Europe/Vienna").unwrap();
        assert_eq!(vienna.offset_at(ts("2024-01-31 10:00:00")), 3600);
        assert_eq!(vienna.offset_at(ts("2024-07-31 10:00:00")), 7200);
        assert_eq!(vienna.abbreviation_at(ts("2024-07-31 10:00:00")), "CEST");
        // Spring forward: 02:30 does not exist and reads as 03:30 CEST (01:30 UTC).
        assert_eq!(format_timestamp(vienna.to_utc(ts("2024-03-31 02:30:00")).unwrap()), "2024-03-31 01:30:00");
        // Fall back: 02:30 happens twice; the second (CET, 01:30 UTC) is taken.
        assert_eq!(format_timestamp(vienna.to_utc(ts("2024-10-27 02:30:00")).unwrap()), "2024-10-27 01:30:00");
        assert_eq!(format_timestamp(vienna.to_utc(ts("2024-07-31 12:00:00")).unwrap()), "2024-07-31 10:00:00");
        // Far outside the compiled rules: no panic, some offset.
        let far = TimeZone::Named(Tz::Europe__Vienna);
        assert!(far.to_local(i64::MAX).is_none());
        let _ = far.offset_at(i64::MIN);
        assert_eq!(format_offset(3600), "+01");
        assert_eq!(format_offset(-(5 * 3600 + 1800)), "-05:30");
        assert_eq!(format_offset(3921), "+01:05:21");
    }
}
