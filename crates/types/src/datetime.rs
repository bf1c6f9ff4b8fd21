//! DATE, TIMESTAMP, TIMESTAMPTZ, TIME and INTERVAL.
//!
//! A DATE is an `i32` count of days since 1970-01-01 (proleptic Gregorian calendar), a
//! TIMESTAMP an `i64` count of microseconds since 1970-01-01 00:00:00, a TIMESTAMPTZ the
//! same count since 1970-01-01 00:00:00 UTC (an instant; see `timezone.rs` for the
//! session zone it is shown in), a TIME an `i64` count of microseconds since midnight
//! (0 ..= 24:00:00). Conversions use Howard Hinnant's civil-calendar algorithms (no
//! tables, no branches on month lengths except when adding months).

use std::fmt;

use crate::timezone::{format_offset, TimeZone};

pub const MICROS_PER_SECOND: i64 = 1_000_000;
pub const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;
pub const MICROS_PER_HOUR: i64 = 3600 * MICROS_PER_SECOND;
/// The largest TIME, 24:00:00 (PostgreSQL admits it).
pub const MAX_TIME: i64 = MICROS_PER_DAY;

/// A span of time: months and days are kept apart from microseconds because their
/// length depends on the date they are added to.
///
/// Comparison, equality and hashing use PostgreSQL's normalised value (a month counts
/// 30 days, a day 24 hours), so `'1 day' = '24 hours'` and `'1 day' < '25 hours'`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

impl PartialEq for Interval {
    fn eq(&self, other: &Self) -> bool {
        self.normalized() == other.normalized()
    }
}

impl Eq for Interval {}

impl PartialOrd for Interval {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Interval {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.normalized().cmp(&other.normalized())
    }
}

impl std::hash::Hash for Interval {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.normalized().hash(state);
    }
}

impl Interval {
    /// Total microseconds with a month as 30 days (PostgreSQL's comparison value).
    pub fn normalized(&self) -> i128 {
        (self.months as i128 * 30 + self.days as i128) * MICROS_PER_DAY as i128 + self.micros as i128
    }

    pub fn new(months: i32, days: i32, micros: i64) -> Self {
        Interval { months, days, micros }
    }

    pub fn checked_neg(self) -> Option<Interval> {
        Some(Interval { months: self.months.checked_neg()?, days: self.days.checked_neg()?, micros: self.micros.checked_neg()? })
    }

    pub fn checked_add(self, other: Interval) -> Option<Interval> {
        Some(Interval {
            months: self.months.checked_add(other.months)?,
            days: self.days.checked_add(other.days)?,
            micros: self.micros.checked_add(other.micros)?,
        })
    }

    /// Parses PostgreSQL-style interval text: `'90'` with a unit given separately, or
    /// `'1 year 2 months 3 days 04:05:06'`, `'2 hours'`, `'-3 days'`.
    pub fn parse(text: &str, unit: Option<&str>) -> Option<Interval> {
        let text = text.trim();
        if let Some(unit) = unit {
            if let Ok(count) = text.parse::<i64>() {
                return Interval::from_unit(count, unit);
            }
        }
        let mut result = Interval::default();
        let tokens: Vec<&str> = text.split_whitespace().collect();
        let mut i = 0;
        while i < tokens.len() {
            let token = tokens[i];
            if token.contains(':') {
                let negative = token.starts_with('-');
                let parts: Vec<&str> = token.trim_start_matches(['-', '+']).split(':').collect();
                if parts.len() < 2 || parts.len() > 3 {
                    return None;
                }
                let hours: i64 = parts[0].parse().ok()?;
                let minutes: i64 = parts[1].parse().ok()?;
                let seconds: f64 = if parts.len() == 3 { parts[2].parse().ok()? } else { 0.0 };
                let mut micros = (hours * 3600 + minutes * 60) * MICROS_PER_SECOND + (seconds * 1e6).round() as i64;
                if negative {
                    micros = -micros;
                }
                result.micros = result.micros.checked_add(micros)?;
                i += 1;
                continue;
            }
            let count: f64 = token.parse().ok()?;
            let unit = match tokens.get(i + 1) {
                Some(unit) => {
                    i += 2;
                    *unit
                }
                None => {
                    i += 1;
                    unit.unwrap_or("second")
                }
            };
            let part = if count.fract() == 0.0 {
                Interval::from_unit(count as i64, unit)?
            } else {
                // Fractional units spill into smaller ones (e.g. 1.5 days = 1 day 12 hours).
                Interval::from_fraction(count, unit)?
            };
            result = result.checked_add(part)?;
        }
        if tokens.is_empty() {
            return None;
        }
        Some(result)
    }

    fn from_unit(count: i64, unit: &str) -> Option<Interval> {
        let count32 = || i32::try_from(count).ok();
        Some(match normalize_unit(unit)? {
            "year" => Interval::new(count32()?.checked_mul(12)?, 0, 0),
            "month" => Interval::new(count32()?, 0, 0),
            "week" => Interval::new(0, count32()?.checked_mul(7)?, 0),
            "day" => Interval::new(0, count32()?, 0),
            "hour" => Interval::new(0, 0, count.checked_mul(3600 * MICROS_PER_SECOND)?),
            "minute" => Interval::new(0, 0, count.checked_mul(60 * MICROS_PER_SECOND)?),
            "second" => Interval::new(0, 0, count.checked_mul(MICROS_PER_SECOND)?),
            "millisecond" => Interval::new(0, 0, count.checked_mul(1000)?),
            _ => Interval::new(0, 0, count),
        })
    }

    fn from_fraction(count: f64, unit: &str) -> Option<Interval> {
        let micros = |factor: f64| Some(Interval::new(0, 0, (count * factor).round() as i64));
        match normalize_unit(unit)? {
            "day" => {
                let whole = count.trunc();
                Some(Interval::new(0, whole as i32, ((count - whole) * MICROS_PER_DAY as f64).round() as i64))
            }
            "hour" => micros(3600e6),
            "minute" => micros(60e6),
            "second" => micros(1e6),
            _ => None,
        }
    }
}

impl fmt::Display for Interval {
    /// PostgreSQL's output style: `1 year 2 mons 3 days 04:05:06`, `-1 days +02:00:00`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let years = self.months / 12;
        let months = self.months % 12;
        let plural = |n: i64, unit: &str| if n == 1 { format!("{n} {unit}") } else { format!("{n} {unit}s") };
        if years != 0 {
            parts.push(plural(years as i64, "year"));
        }
        if months != 0 {
            parts.push(plural(months as i64, "mon"));
        }
        if self.days != 0 {
            parts.push(plural(self.days as i64, "day"));
        }
        if self.micros != 0 || parts.is_empty() {
            let negative_before = self.months < 0 || self.days < 0;
            let sign = if self.micros < 0 {
                "-"
            } else if negative_before {
                "+"
            } else {
                ""
            };
            let total = self.micros.unsigned_abs();
            let seconds = total / 1_000_000;
            let fraction = total % 1_000_000;
            let time = format!("{:02}:{:02}:{:02}", seconds / 3600, (seconds / 60) % 60, seconds % 60);
            if fraction != 0 {
                parts.push(format!("{sign}{time}.{fraction:06}").trim_end_matches('0').to_string());
            } else {
                parts.push(format!("{sign}{time}"));
            }
        }
        write!(f, "{}", parts.join(" "))
    }
}

/// The canonical singular name of an interval unit (`"days"`, `"d"` -> `"day"`).
fn normalize_unit(unit: &str) -> Option<&'static str> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "year" | "years" | "yr" | "yrs" | "y" => "year",
        "month" | "months" | "mon" | "mons" => "month",
        "week" | "weeks" | "w" => "week",
        "day" | "days" | "d" => "day",
        "hour" | "hours" | "hr" | "hrs" | "h" => "hour",
        "minute" | "minutes" | "min" | "mins" | "m" => "minute",
        "second" | "seconds" | "sec" | "secs" | "s" => "second",
        "millisecond" | "milliseconds" | "ms" => "millisecond",
        "microsecond" | "microseconds" | "us" => "microsecond",
        _ => return None,
    })
}

/// Days since 1970-01-01 of the civil date `year-month-day`.
pub fn days_from_civil(year: i32, month: u32, day: u32) -> i32 {
    let y = if month <= 2 { year - 1 } else { year } as i64;
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = month as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe - 719_468) as i32
}

/// The civil date (year, month, day) of a day count.
pub fn civil_from_days(days: i32) -> (i32, u32, u32) {
    let z = days as i64 + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    ((if m <= 2 { y + 1 } else { y }) as i32, m, d)
}

pub fn is_leap_year(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

pub fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            if is_leap_year(year) {
                29
            } else {
                28
            }
        }
    }
}

/// Parses `YYYY-MM-DD` (also accepts single-digit month/day).
pub fn parse_date(text: &str) -> Option<i32> {
    parse_date_bytes(text.trim().as_bytes())
}

/// Parses `YYYY-MM-DD` from bytes; the fast path of bulk loading.
#[inline]
pub fn parse_date_bytes(bytes: &[u8]) -> Option<i32> {
    if bytes.len() == 10 && bytes[4] == b'-' && bytes[7] == b'-' {
        let digit = |i: usize| -> Option<u32> {
            let d = bytes[i].wrapping_sub(b'0');
            (d <= 9).then_some(d as u32)
        };
        let year = digit(0)? * 1000 + digit(1)? * 100 + digit(2)? * 10 + digit(3)?;
        let month = digit(5)? * 10 + digit(6)?;
        let day = digit(8)? * 10 + digit(9)?;
        return make_date(year as i32, month, day);
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let mut parts = text.splitn(3, '-');
    let year: i32 = parts.next()?.parse().ok()?;
    let month: u32 = parts.next()?.parse().ok()?;
    let day: u32 = parts.next()?.parse().ok()?;
    make_date(if negative { -year } else { year }, month, day)
}

/// The day count of a valid civil date in the supported range (4713 BC to 294276 AD).
pub fn make_date(year: i32, month: u32, day: u32) -> Option<i32> {
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) || !(-4713..=294_276).contains(&year) {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

pub fn format_date(days: i32) -> String {
    let (y, m, d) = civil_from_days(days);
    if y < 0 {
        format!("{:04}-{m:02}-{d:02} BC", 1 - y)
    } else {
        format!("{y:04}-{m:02}-{d:02}")
    }
}

/// Parses `YYYY-MM-DD[ T]HH:MM[:SS[.ffffff]]` (or a bare date, meaning midnight).
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date_part, time_part) = match text.find([' ', 'T']) {
        Some(pos) => (&text[..pos], Some(text[pos + 1..].trim())),
        None => (text, None),
    };
    let days = parse_date(date_part)? as i64;
    let mut micros = 0i64;
    if let Some(time) = time_part {
        let mut parts = time.splitn(3, ':');
        let hours: i64 = parts.next()?.parse().ok()?;
        let minutes: i64 = parts.next()?.parse().ok()?;
        let seconds_text = parts.next().unwrap_or("0");
        let (whole, fraction) = match seconds_text.find('.') {
            Some(pos) => (&seconds_text[..pos], &seconds_text[pos + 1..]),
            None => (seconds_text, ""),
        };
        let seconds: i64 = whole.parse().ok()?;
        if hours > 23 || minutes > 59 || seconds > 60 || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut frac_micros = 0i64;
        for (i, b) in fraction.bytes().take(6).enumerate() {
            frac_micros += (b - b'0') as i64 * 10i64.pow(5 - i as u32);
        }
        micros = (hours * 3600 + minutes * 60 + seconds) * MICROS_PER_SECOND + frac_micros;
    }
    days.checked_mul(MICROS_PER_DAY)?.checked_add(micros)
}

pub fn format_timestamp(micros: i64) -> String {
    let days = micros.div_euclid(MICROS_PER_DAY);
    let time = micros.rem_euclid(MICROS_PER_DAY);
    let seconds = time / MICROS_PER_SECOND;
    let fraction = time % MICROS_PER_SECOND;
    let mut text = format!("{} {:02}:{:02}:{:02}", format_date(days as i32), seconds / 3600, (seconds / 60) % 60, seconds % 60);
    if fraction != 0 {
        text.push_str(format!(".{fraction:06}").trim_end_matches('0'));
    }
    text
}

/// A TIMESTAMPTZ as PostgreSQL shows it in `zone`: the local time, then the offset
/// (`2024-01-31 10:00:00+01`, `+05:30`, `+01:05:21`), then ` BC` for years before 1.
pub fn format_timestamptz(utc_micros: i64, zone: &TimeZone) -> String {
    let offset = zone.offset_at(utc_micros);
    let local = utc_micros.saturating_add(offset as i64 * MICROS_PER_SECOND);
    let mut text = format_timestamp(local);
    let offset = format_offset(offset);
    match text.strip_suffix(" BC") {
        Some(without) => {
            text = format!("{without}{offset} BC");
        }
        None => text.push_str(&offset),
    }
    text
}

/// Parses TIMESTAMPTZ input: a timestamp (as [`parse_timestamp`]) optionally followed
/// by a zone (`+01`, `-05:30`, `Z`, ` UTC`, ` CET`, ` America/New_York`); without one,
/// the time is read in `session` (the session's zone).
pub fn parse_timestamptz(text: &str, session: &TimeZone) -> Option<i64> {
    let text = text.trim();
    let (timestamp, zone) = split_zone(text);
    let local = parse_timestamp(timestamp)?;
    match zone {
        Some(zone) => {
            let zone = TimeZone::for_input(zone)?;
            zone.to_utc(local)
        }
        None => session.to_utc(local),
    }
}

/// Whether timestamp text ends in a zone (`+01`, `Z`, ` UTC`, ...).
pub fn timestamp_has_zone(text: &str) -> bool {
    split_zone(text.trim()).1.is_some()
}

/// Splits `2024-01-31 10:00:00+01` into the timestamp and its zone text, if any.
fn split_zone(text: &str) -> (&str, Option<&str>) {
    // The zone follows the clock: find where the time of day starts (after the date and
    // its separator), then the first character that cannot be part of a clock.
    let Some(separator) = text.find([' ', 'T', 't']) else {
        return (text, None);
    };
    let time = &text[separator + 1..];
    let clock = time.trim_start();
    let clock_start = text.len() - clock.len();
    let clock_len = clock.bytes().take_while(|b| b.is_ascii_digit() || *b == b':' || *b == b'.').count();
    if clock_len == 0 {
        // A date and a zone without a time (`2024-01-31 UTC`).
        return (&text[..separator], Some(time.trim()));
    }
    let rest = clock[clock_len..].trim();
    if rest.is_empty() {
        (text, None)
    } else {
        (text[..clock_start + clock_len].trim_end(), Some(rest))
    }
}

/// A TIME as PostgreSQL shows it: `HH:MM:SS` and a fraction without trailing zeros.
pub fn format_time(micros: i64) -> String {
    let seconds = micros / MICROS_PER_SECOND;
    let fraction = micros % MICROS_PER_SECOND;
    let mut text = format!("{:02}:{:02}:{:02}", seconds / 3600, (seconds / 60) % 60, seconds % 60);
    if fraction != 0 {
        text.push_str(format!(".{fraction:06}").trim_end_matches('0'));
    }
    text
}

/// Parses TIME input as PostgreSQL does: `HH:MM`, `HH:MM:SS[.ffffff]` (fractions past
/// microseconds rounded), an optional `AM`/`PM`; a date before the time and a zone after
/// it are ignored; `allballs` is midnight. 24:00:00 is the largest time.
pub fn parse_time(text: &str) -> Option<i64> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("allballs") {
        return Some(0);
    }
    // A date in front (`2024-01-31 10:00:00`) is ignored.
    let clock = match text.find([' ', 'T']) {
        Some(pos) if parse_date(&text[..pos]).is_some() => text[pos + 1..].trim_start(),
        _ => text,
    };
    let clock_len = clock.bytes().take_while(|b| b.is_ascii_digit() || *b == b':' || *b == b'.').count();
    let (digits, mut rest) = (&clock[..clock_len], clock[clock_len..].trim());
    let mut parts = digits.splitn(3, ':');
    let mut hours: i64 = parse_digits(parts.next()?)?;
    let minutes: i64 = parse_digits(parts.next()?)?;
    let (seconds, fraction) = match parts.next() {
        Some(seconds) => match seconds.split_once('.') {
            Some((whole, fraction)) => (parse_digits(whole)?, parse_fraction(fraction)?),
            None => (parse_digits(seconds)?, 0),
        },
        None => (0, 0),
    };
    let meridiem = rest.get(..2).filter(|m| m.eq_ignore_ascii_case("am") || m.eq_ignore_ascii_case("pm"));
    if let Some(meridiem) = meridiem {
        if !(1..=12).contains(&hours) {
            return None;
        }
        let pm = meridiem.eq_ignore_ascii_case("pm");
        hours = match (hours, pm) {
            (12, false) => 0,
            (12, true) => 12,
            (h, true) => h + 12,
            (h, false) => h,
        };
        rest = rest[2..].trim();
    }
    // A zone after the time (`10:00:00+02`) is accepted and ignored, as PostgreSQL does
    // for TIME WITHOUT TIME ZONE.
    if !rest.is_empty() && TimeZone::for_input(rest).is_none() {
        return None;
    }
    if hours > 24 || minutes > 59 || seconds > 60 {
        return None;
    }
    let micros = (hours * 3600 + minutes * 60 + seconds) * MICROS_PER_SECOND + fraction;
    (micros <= MAX_TIME).then_some(micros)
}

/// One to a few ASCII digits as a number.
fn parse_digits(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 9 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The digits after a decimal point as microseconds, rounded to the nearest.
fn parse_fraction(digits: &str) -> Option<i64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut micros = 0i64;
    for (i, b) in digits.bytes().take(6).enumerate() {
        micros += (b - b'0') as i64 * 10i64.pow(5 - i as u32);
    }
    if digits.len() > 6 && digits.as_bytes()[6] >= b'5' {
        micros += 1;
    }
    Some(micros)
}

/// `time + interval`: the interval's time part added around the clock (its months and
/// days are ignored), as PostgreSQL does.
pub fn add_interval_to_time(time: i64, interval: Interval) -> i64 {
    (time + interval.micros.rem_euclid(MICROS_PER_DAY)).rem_euclid(MICROS_PER_DAY)
}

/// `time - time`: an INTERVAL of microseconds.
pub fn time_difference(a: i64, b: i64) -> Interval {
    Interval::new(0, 0, a - b)
}

/// The time of day of a timestamp (local microseconds).
pub fn time_of_timestamp(micros: i64) -> i64 {
    micros.rem_euclid(MICROS_PER_DAY)
}

/// `timestamptz + interval` in `zone`: months and days move the local calendar date
/// (keeping the local time of day across a daylight-saving change), the time part is
/// added to the instant, as PostgreSQL does.
pub fn add_interval_to_timestamptz(utc_micros: i64, interval: Interval, zone: &TimeZone) -> Option<i64> {
    let mut instant = utc_micros;
    if interval.months != 0 || interval.days != 0 {
        let local = zone.to_local(instant)?;
        let calendar_part = Interval::new(interval.months, interval.days, 0);
        instant = zone.to_utc(add_interval_to_timestamp(local, calendar_part)?)?;
    }
    instant.checked_add(interval.micros)
}

/// Adds whole months to a date, clamping the day to the target month's length
/// (2024-01-31 + 1 month = 2024-02-29), as PostgreSQL does.
pub fn add_months_to_date(days: i32, months: i32) -> Option<i32> {
    if months == 0 {
        return Some(days);
    }
    let (y, m, d) = civil_from_days(days);
    let total = y as i64 * 12 + (m as i64 - 1) + months as i64;
    let year = i32::try_from(total.div_euclid(12)).ok()?;
    let month = (total.rem_euclid(12) + 1) as u32;
    let day = d.min(days_in_month(year, month));
    make_date(year, month, day)
}

/// `date + interval` when the interval has no time part.
pub fn add_interval_to_date(days: i32, interval: Interval) -> Option<i32> {
    let shifted = add_months_to_date(days, interval.months)?;
    shifted.checked_add(interval.days)
}

/// `timestamp + interval`.
pub fn add_interval_to_timestamp(micros: i64, interval: Interval) -> Option<i64> {
    let days = micros.div_euclid(MICROS_PER_DAY);
    let time = micros.rem_euclid(MICROS_PER_DAY);
    let shifted = add_months_to_date(i32::try_from(days).ok()?, interval.months)? as i64;
    let shifted = shifted.checked_add(interval.days as i64)?;
    shifted.checked_mul(MICROS_PER_DAY)?.checked_add(time)?.checked_add(interval.micros)
}

/// A field of a date or timestamp for `EXTRACT(field FROM ...)`, `date_part` and
/// `date_diff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DateField {
    Year,
    Quarter,
    Month,
    /// ISO 8601 week number (weeks start on Monday; week 1 has the year's first Thursday).
    Week,
    Day,
    /// Sunday = 0 ... Saturday = 6.
    DayOfWeek,
    DayOfYear,
    Hour,
    Minute,
    /// Whole seconds of the minute (0-59).
    Second,
    /// Seconds since 1970-01-01 00:00:00 (whole seconds, rounded down).
    Epoch,
    /// Monday = 1 ... Sunday = 7.
    IsoDayOfWeek,
    /// The year the ISO week belongs to.
    IsoYear,
    /// Milliseconds of the minute, seconds included (0-59999).
    Millisecond,
    /// Microseconds of the minute, seconds included (0-59999999).
    Microsecond,
    /// Year / 10.
    Decade,
    /// 2000 is in the 20th century, 2001 in the 21st.
    Century,
    Millennium,
    /// The zone's offset from UTC in seconds (TIMESTAMPTZ only).
    Timezone,
    /// The hours of the offset (TIMESTAMPTZ only).
    TimezoneHour,
    /// The minutes of the offset, signed like it (TIMESTAMPTZ only).
    TimezoneMinute,
}

impl DateField {
    /// Whether the field is part of a time of day (the fields TIME has).
    pub fn is_time_of_day(self) -> bool {
        matches!(
            self,
            DateField::Hour | DateField::Minute | DateField::Second | DateField::Millisecond | DateField::Microsecond | DateField::Epoch
        )
    }

    /// Whether the field is about the time zone (TIMESTAMPTZ only).
    pub fn is_zone(self) -> bool {
        matches!(self, DateField::Timezone | DateField::TimezoneHour | DateField::TimezoneMinute)
    }

    /// The field's name as PostgreSQL's error messages spell it.
    pub fn name(self) -> &'static str {
        match self {
            DateField::Year => "year",
            DateField::Quarter => "quarter",
            DateField::Month => "month",
            DateField::Week => "week",
            DateField::Day => "day",
            DateField::DayOfWeek => "dow",
            DateField::DayOfYear => "doy",
            DateField::Hour => "hour",
            DateField::Minute => "minute",
            DateField::Second => "second",
            DateField::Epoch => "epoch",
            DateField::IsoDayOfWeek => "isodow",
            DateField::IsoYear => "isoyear",
            DateField::Millisecond => "milliseconds",
            DateField::Microsecond => "microseconds",
            DateField::Decade => "decade",
            DateField::Century => "century",
            DateField::Millennium => "millennium",
            DateField::Timezone => "timezone",
            DateField::TimezoneHour => "timezone_hour",
            DateField::TimezoneMinute => "timezone_minute",
        }
    }

    pub fn parse(name: &str) -> Option<DateField> {
        Some(match name.to_ascii_lowercase().as_str() {
            "year" | "years" | "y" | "yr" | "yrs" | "yy" | "yyy" | "yyyy" => DateField::Year,
            "quarter" | "quarters" => DateField::Quarter,
            "month" | "months" | "mon" | "mons" => DateField::Month,
            "week" | "weeks" | "w" | "weekofyear" => DateField::Week,
            "day" | "days" | "d" | "dayofmonth" => DateField::Day,
            "dow" | "dayofweek" | "weekday" => DateField::DayOfWeek,
            "doy" | "dayofyear" => DateField::DayOfYear,
            "hour" | "hours" | "h" | "hr" | "hrs" => DateField::Hour,
            "minute" | "minutes" | "m" | "min" | "mins" => DateField::Minute,
            "second" | "seconds" | "s" | "sec" | "secs" => DateField::Second,
            "epoch" => DateField::Epoch,
            "isodow" => DateField::IsoDayOfWeek,
            "isoyear" => DateField::IsoYear,
            "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" => DateField::Millisecond,
            "microsecond" | "microseconds" | "us" | "usec" | "usecs" => DateField::Microsecond,
            "decade" | "decades" => DateField::Decade,
            "century" | "centuries" => DateField::Century,
            "millennium" | "millennia" | "millenium" => DateField::Millennium,
            "timezone" => DateField::Timezone,
            "timezone_h" | "timezone_hour" => DateField::TimezoneHour,
            "timezone_m" | "timezone_minute" => DateField::TimezoneMinute,
            _ => return None,
        })
    }
}

/// The year as PostgreSQL numbers it from an astronomical year: there is no year 0, the
/// year before 1 AD is 1 BC (-1).
#[inline]
pub fn year_number(astronomical: i32) -> i64 {
    if astronomical > 0 {
        astronomical as i64
    } else {
        astronomical as i64 - 1
    }
}

/// Extracts a field from a date (days since epoch).
pub fn extract_from_date(field: DateField, days: i32) -> i64 {
    let (y, m, d) = civil_from_days(days);
    match field {
        DateField::Year => year_number(y),
        DateField::Quarter => ((m - 1) / 3 + 1) as i64,
        DateField::Month => m as i64,
        DateField::Day => d as i64,
        // 1970-01-01 was a Thursday; Sunday = 0 as in PostgreSQL.
        DateField::DayOfWeek => (days as i64 + 4).rem_euclid(7),
        DateField::DayOfYear => (days - days_from_civil(y, 1, 1) + 1) as i64,
        DateField::Week => iso_week(days).1 as i64,
        DateField::Hour | DateField::Minute | DateField::Second | DateField::Millisecond | DateField::Microsecond => 0,
        DateField::Epoch => days as i64 * 86_400,
        DateField::IsoDayOfWeek => (days as i64 + 3).rem_euclid(7) + 1,
        DateField::IsoYear => year_number(iso_week(days).0),
        // PostgreSQL's definitions, including years before 1 (year 0 is 1 BC).
        DateField::Decade => (y as i64).div_euclid(10),
        DateField::Century if y > 0 => (y as i64 + 99) / 100,
        DateField::Century => -((100 - y as i64) / 100),
        DateField::Millennium if y > 0 => (y as i64 + 999) / 1000,
        DateField::Millennium => -((1000 - y as i64) / 1000),
        // Dates and timestamps have no zone (the binder refuses these fields for them).
        DateField::Timezone | DateField::TimezoneHour | DateField::TimezoneMinute => 0,
    }
}

/// Extracts a field from a time of day; `None` for fields a TIME does not have.
pub fn extract_from_time(field: DateField, micros: i64) -> Option<i64> {
    if !field.is_time_of_day() {
        return None;
    }
    // 24:00:00 is hour 24, as PostgreSQL reports it.
    Some(match field {
        DateField::Hour => micros / MICROS_PER_HOUR,
        DateField::Epoch => micros / MICROS_PER_SECOND,
        _ => extract_from_timestamp(field, micros),
    })
}

/// Extracts a field from a TIMESTAMPTZ seen in `zone`.
pub fn extract_from_timestamptz(field: DateField, utc_micros: i64, zone: &TimeZone) -> i64 {
    let offset = zone.offset_at(utc_micros) as i64;
    match field {
        DateField::Epoch => utc_micros.div_euclid(MICROS_PER_SECOND),
        DateField::Timezone => offset,
        DateField::TimezoneHour => offset / 3600,
        DateField::TimezoneMinute => offset / 60 % 60,
        _ => extract_from_timestamp(field, utc_micros.saturating_add(offset * MICROS_PER_SECOND)),
    }
}

/// Extracts a field from a timestamp (microseconds since epoch).
pub fn extract_from_timestamp(field: DateField, micros: i64) -> i64 {
    let days = micros.div_euclid(MICROS_PER_DAY) as i32;
    let time_micros = micros.rem_euclid(MICROS_PER_DAY);
    let time = time_micros / MICROS_PER_SECOND;
    match field {
        DateField::Hour => time / 3600,
        DateField::Minute => (time / 60) % 60,
        DateField::Second => time % 60,
        DateField::Millisecond => time_micros % (60 * MICROS_PER_SECOND) / 1000,
        DateField::Microsecond => time_micros % (60 * MICROS_PER_SECOND),
        DateField::Epoch => micros.div_euclid(MICROS_PER_SECOND),
        _ => extract_from_date(field, days),
    }
}

/// The ISO year and week of a day.
pub fn iso_week(days: i32) -> (i32, u32) {
    // ISO weeks start on Monday; week 1 contains the year's first Thursday.
    let weekday = (days as i64 + 3).rem_euclid(7) as i32; // Monday = 0
    let thursday = days - weekday + 3;
    let (year, _, _) = civil_from_days(thursday);
    (year, ((thursday - days_from_civil(year, 1, 1)) / 7 + 1) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        for days in [-800_000, -1, 0, 1, 10_000, 19_000, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(parse_date("1970-01-01"), Some(0));
        assert_eq!(parse_date("1998-12-01").map(format_date).as_deref(), Some("1998-12-01"));
        assert_eq!(parse_date("2023-02-29"), None);
        assert_eq!(parse_date("2024-02-29").map(format_date).as_deref(), Some("2024-02-29"));
        assert_eq!(parse_date("1995-3-5").map(format_date).as_deref(), Some("1995-03-05"));
    }

    #[test]
    fn date_arithmetic() {
        let d = parse_date("1998-12-01").unwrap();
        assert_eq!(format_date(add_interval_to_date(d, Interval::new(0, -90, 0)).unwrap()), "1998-09-02");
        let jan31 = parse_date("2024-01-31").unwrap();
        assert_eq!(format_date(add_months_to_date(jan31, 1).unwrap()), "2024-02-29");
        assert_eq!(format_date(add_months_to_date(jan31, -13).unwrap()), "2022-12-31");
    }

    #[test]
    fn extract_fields() {
        let d = parse_date("1995-03-15").unwrap();
        assert_eq!(extract_from_date(DateField::Year, d), 1995);
        assert_eq!(extract_from_date(DateField::Month, d), 3);
        assert_eq!(extract_from_date(DateField::Quarter, d), 1);
        assert_eq!(extract_from_date(DateField::DayOfWeek, d), 3); // a Wednesday
        assert_eq!(extract_from_date(DateField::DayOfYear, d), 74);
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("10:30").map(format_time).as_deref(), Some("10:30:00"));
        assert_eq!(parse_time("10:30:00.5").map(format_time).as_deref(), Some("10:30:00.5"));
        assert_eq!(parse_time("24:00:00"), Some(MAX_TIME));
        assert_eq!(parse_time("2024-01-01 10:00:00").map(format_time).as_deref(), Some("10:00:00"));
        assert_eq!(parse_time("10:00:00+02").map(format_time).as_deref(), Some("10:00:00"));
        assert_eq!(parse_time("10:30 PM").map(format_time).as_deref(), Some("22:30:00"));
        assert_eq!(parse_time("12:15 am").map(format_time).as_deref(), Some("00:15:00"));
        assert_eq!(parse_time("allballs"), Some(0));
        assert_eq!(parse_time("00:00:00.0000005"), Some(1));
        for bad in ["25:00:00", "10:61:00", "24:00:01", "10", "", "10:00 XM", "13:00 PM", "1a:00"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
        let ten = parse_time("10:00").unwrap();
        assert_eq!(format_time(add_interval_to_time(ten, Interval::new(0, 0, -25 * MICROS_PER_HOUR))), "09:00:00");
        assert_eq!(format_time(add_interval_to_time(parse_time("23:30").unwrap(), Interval::new(1, 1, MICROS_PER_HOUR))), "00:30:00");
        assert_eq!(extract_from_time(DateField::Hour, MAX_TIME), Some(24));
        assert_eq!(extract_from_time(DateField::Day, ten), None);
    }

    #[test]
    fn timestamps_with_time_zones() {
        let (vienna, _) = TimeZone::from_setting("Europe/Vienna").unwrap();
        let utc = TimeZone::UTC;
        let t = parse_timestamptz("2024-01-31 10:00:00", &vienna).unwrap();
        assert_eq!(format_timestamptz(t, &utc), "2024-01-31 09:00:00+00");
        assert_eq!(format_timestamptz(t, &vienna), "2024-01-31 10:00:00+01");
        for (text, expected) in [
            ("2024-07-31 10:00:00+05:30", "2024-07-31 04:30:00+00"),
            ("2024-07-31T10:00:00Z", "2024-07-31 10:00:00+00"),
            ("2024-07-31 10:00:00.25 -0800", "2024-07-31 18:00:00.25+00"),
            ("2024-07-31 10:00 America/New_York", "2024-07-31 14:00:00+00"),
            ("2024-07-31 10:00:00 UTC", "2024-07-31 10:00:00+00"),
            ("2024-07-31", "2024-07-30 22:00:00+00"),
        ] {
            assert_eq!(parse_timestamptz(text, &vienna).map(|t| format_timestamptz(t, &utc)).as_deref(), Some(expected), "{text}");
        }
        assert_eq!(parse_timestamptz("2024-07-31 10:00:00 Nowhere", &utc), None);
        let summer = parse_timestamptz("2024-03-30 12:00:00", &vienna).unwrap();
        let next_day = add_interval_to_timestamptz(summer, Interval::new(0, 1, 0), &vienna).unwrap();
        assert_eq!(format_timestamptz(next_day, &vienna), "2024-03-31 12:00:00+02");
        let hours = add_interval_to_timestamptz(summer, Interval::new(0, 0, 24 * MICROS_PER_HOUR), &vienna).unwrap();
        assert_eq!(format_timestamptz(hours, &vienna), "2024-03-31 13:00:00+02");
        assert_eq!(extract_from_timestamptz(DateField::Timezone, next_day, &vienna), 7200);
        assert_eq!(extract_from_timestamptz(DateField::Hour, next_day, &vienna), 12);
    }

    #[test]
    fn timestamps_and_intervals() {
        let ts = parse_timestamp("2024-05-06 07:08:09.5").unwrap();
        assert_eq!(format_timestamp(ts), "2024-05-06 07:08:09.5");
        assert_eq!(Interval::parse("90", Some("day")), Some(Interval::new(0, 90, 0)));
        assert_eq!(Interval::parse("1 year 2 months", None), Some(Interval::new(14, 0, 0)));
        assert_eq!(Interval::parse("3 days 04:00:00", None), Some(Interval::new(0, 3, 4 * 3600 * 1_000_000)));
        assert_eq!(Interval::new(14, 3, 0).to_string(), "1 year 2 mons 3 days");
        assert_eq!(Interval::new(0, -1, 2 * 3600 * 1_000_000).to_string(), "-1 days +02:00:00");
        assert_eq!(Interval::new(0, 1, 0), Interval::new(0, 0, 24 * 3600 * 1_000_000));
        assert!(Interval::new(0, 1, 0) < Interval::new(0, 0, 25 * 3600 * 1_000_000));
    }
}
