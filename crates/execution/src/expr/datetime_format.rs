//! Date and time formats: DuckDB's `strftime`/`strptime` codes (`%Y-%m-%d %H:%M:%S`) and
//! PostgreSQL's `to_char` template patterns (`YYYY-MM-DD HH24:MI:SS`, `FMMonth DDth`).
//!
//! A format is compiled once into a list of [`Item`]s (literal text or a field), so
//! formatting a row walks the list without parsing the format again.

use std::fmt::Write;

use apiary_common::{exec_err, Result};
use apiary_types::datetime::{self, MICROS_PER_DAY, MICROS_PER_SECOND};
use apiary_types::timezone::{format_offset, TimeZone};

/// The zone a TIMESTAMPTZ is formatted in and the instant (for `%z`, `TZ`, `OF`):
/// `None` for values without a zone.
pub type ZoneAt = Option<(TimeZone, i64)>;

pub const DAY_NAMES: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
pub const MONTH_NAMES: [&str; 12] =
    ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];

/// A timestamp broken into its calendar fields.
#[derive(Debug, Clone, Copy)]
pub struct Parts {
    /// Days since 1970-01-01.
    pub days: i32,
    /// Astronomical year (0 is 1 BC).
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub micros: u32,
}

impl Parts {
    pub fn of_timestamp(micros: i64) -> Parts {
        let days = micros.div_euclid(MICROS_PER_DAY) as i32;
        let time = micros.rem_euclid(MICROS_PER_DAY);
        let (year, month, day) = datetime::civil_from_days(days);
        let seconds = (time / MICROS_PER_SECOND) as u32;
        Parts {
            days,
            year,
            month,
            day,
            hour: seconds / 3600,
            minute: seconds / 60 % 60,
            second: seconds % 60,
            micros: (time % MICROS_PER_SECOND) as u32,
        }
    }

    /// Sunday = 0.
    pub fn weekday(&self) -> usize {
        (self.days as i64 + 4).rem_euclid(7) as usize
    }

    /// Day of the year, 1-based.
    pub fn day_of_year(&self) -> u32 {
        (self.days - datetime::days_from_civil(self.year, 1, 1) + 1) as u32
    }

    fn hour12(&self) -> u32 {
        match self.hour % 12 {
            0 => 12,
            h => h,
        }
    }
}

// ----------------------------------------------------------------------- strftime codes

/// One piece of a compiled format.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Literal(String),
    /// A `strftime` code (`'Y'` for `%Y`); `no_pad` for `%-d`.
    Code {
        code: char,
        no_pad: bool,
    },
}

/// Compiles a `strftime`/`strptime` format.
pub fn compile_strftime(format: &str) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut literal = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            literal.push(c);
            continue;
        }
        let mut code = chars.next().ok_or_else(|| exec_err!("format '{format}' ends with a lone %"))?;
        if code == '%' {
            literal.push('%');
            continue;
        }
        let no_pad = code == '-';
        if no_pad {
            code = chars.next().ok_or_else(|| exec_err!("format '{format}' ends with %-"))?;
        }
        if !"aAwudbhBmyYGHIpMSfgnzZjUWVcxX".contains(code) || (no_pad && !"dmyHIMSj".contains(code)) {
            return Err(exec_err!("unknown format code %{}{code} in '{format}'", if no_pad { "-" } else { "" }));
        }
        if !literal.is_empty() {
            items.push(Item::Literal(std::mem::take(&mut literal)));
        }
        // The locale formats are ISO 8601 here.
        let expansion: &[char] = match code {
            'c' => &['Y', '-', 'm', '-', 'd', ' ', 'H', ':', 'M', ':', 'S'],
            'x' => &['Y', '-', 'm', '-', 'd'],
            'X' => &['H', ':', 'M', ':', 'S'],
            _ => {
                items.push(Item::Code { code, no_pad });
                continue;
            }
        };
        for &part in expansion {
            if part.is_ascii_alphabetic() {
                items.push(Item::Code { code: part, no_pad: false });
            } else {
                items.push(Item::Literal(part.to_string()));
            }
        }
    }
    if !literal.is_empty() {
        items.push(Item::Literal(literal));
    }
    Ok(items)
}

fn number(out: &mut String, value: i64, width: usize, no_pad: bool) {
    if no_pad {
        let _ = write!(out, "{value}");
    } else {
        let _ = write!(out, "{value:0width$}");
    }
}

/// Week of the year with weeks starting on `first_weekday` (0 Sunday, 1 Monday); days
/// before the first such weekday are in week 0 (C's `%U` / `%W`).
fn week_of_year(parts: &Parts, first_weekday: usize) -> u32 {
    let doy = parts.day_of_year() as i64 - 1;
    let weekday = (parts.weekday() as i64 - first_weekday as i64).rem_euclid(7);
    ((doy + 7 - weekday) / 7) as u32
}

/// The `strftime` codes a TIME has (its time of day).
const TIME_CODES: &str = "HIpMSfgn";

/// Refuses a format with date codes for a TIME value.
pub fn check_strftime_for_time(items: &[Item], format: &str) -> Result<()> {
    for item in items {
        if let Item::Code { code, .. } = item {
            if !TIME_CODES.contains(*code) {
                return Err(exec_err!("format code %{code} in '{format}' needs a date, and a TIME has none"));
            }
        }
    }
    Ok(())
}

/// Formats a local timestamp with compiled `strftime` items (`zone`: see [`ZoneAt`]).
pub fn strftime(items: &[Item], micros: i64, zone: ZoneAt, out: &mut String) {
    let parts = Parts::of_timestamp(micros);
    for item in items {
        match item {
            Item::Literal(text) => out.push_str(text),
            Item::Code { code: 'z', .. } => {
                // A TIMESTAMPTZ's offset in its zone; other values have none (UTC).
                out.push_str(&format_offset(zone.map_or(0, |(zone, instant)| zone.offset_at(instant))));
            }
            Item::Code { code: 'Z', .. } => {
                if let Some((zone, instant)) = zone {
                    out.push_str(&zone_name(&zone, instant));
                }
            }
            Item::Code { code, no_pad } => strftime_code(*code, *no_pad, &parts, out),
        }
    }
}

/// `%Z`: the IANA name of a named zone (as DuckDB prints it), else the abbreviation.
fn zone_name(zone: &TimeZone, instant: i64) -> String {
    match zone {
        TimeZone::Named(tz) => tz.name().to_string(),
        TimeZone::Fixed(_) => zone.abbreviation_at(instant),
    }
}

fn strftime_code(code: char, no_pad: bool, p: &Parts, out: &mut String) {
    match code {
        'a' => out.push_str(&DAY_NAMES[p.weekday()][..3]),
        'A' => out.push_str(DAY_NAMES[p.weekday()]),
        'w' => number(out, p.weekday() as i64, 1, true),
        'u' => number(out, ((p.weekday() + 6) % 7 + 1) as i64, 1, true),
        'd' => number(out, p.day as i64, 2, no_pad),
        'b' | 'h' => out.push_str(&MONTH_NAMES[p.month as usize - 1][..3]),
        'B' => out.push_str(MONTH_NAMES[p.month as usize - 1]),
        'm' => number(out, p.month as i64, 2, no_pad),
        'y' => number(out, p.year.rem_euclid(100) as i64, 2, no_pad),
        'Y' => number(out, p.year as i64, 4, false),
        'G' => number(out, datetime::iso_week(p.days).0 as i64, 4, false),
        'H' => number(out, p.hour as i64, 2, no_pad),
        'I' => number(out, p.hour12() as i64, 2, no_pad),
        'p' => out.push_str(if p.hour < 12 { "AM" } else { "PM" }),
        'M' => number(out, p.minute as i64, 2, no_pad),
        'S' => number(out, p.second as i64, 2, no_pad),
        'f' => number(out, p.micros as i64, 6, false),
        'g' => number(out, (p.micros / 1000) as i64, 3, false),
        'n' => number(out, p.micros as i64 * 1000, 9, false),
        'j' => number(out, p.day_of_year() as i64, 3, no_pad),
        'U' => number(out, week_of_year(p, 0) as i64, 2, false),
        'W' => number(out, week_of_year(p, 1) as i64, 2, false),
        'V' => number(out, datetime::iso_week(p.days).1 as i64, 2, false),
        _ => {}
    }
}

// ----------------------------------------------------------------------------- strptime

struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    /// Up to `max` digits (at least one), with an optional sign when `signed`.
    fn digits(&mut self, max: usize, signed: bool) -> Option<i64> {
        let mut negative = false;
        if signed && self.at < self.text.len() && matches!(self.text[self.at], b'-' | b'+') {
            negative = self.text[self.at] == b'-';
            self.at += 1;
        }
        let start = self.at;
        let mut value = 0i64;
        while self.at < self.text.len() && self.at - start < max && self.text[self.at].is_ascii_digit() {
            value = value * 10 + (self.text[self.at] - b'0') as i64;
            self.at += 1;
        }
        (self.at > start).then_some(if negative { -value } else { value })
    }

    /// A fraction of up to `max` digits scaled to `scale_digits` digits.
    fn fraction(&mut self, max: usize, scale_digits: u32) -> Option<i64> {
        let start = self.at;
        let value = self.digits(max, false)?;
        let read = (self.at - start) as u32;
        Some(if read <= scale_digits { value * 10i64.pow(scale_digits - read) } else { value / 10i64.pow(read - scale_digits) })
    }

    /// One of `names` (case-insensitive; full names before their 3-letter abbreviations).
    fn name(&mut self, names: &[&str], abbreviated: bool) -> Option<usize> {
        let rest = &self.text[self.at..];
        let matches = |candidate: &str| rest.len() >= candidate.len() && rest[..candidate.len()].eq_ignore_ascii_case(candidate.as_bytes());
        for (i, name) in names.iter().enumerate() {
            if !abbreviated && matches(name) {
                self.at += name.len();
                return Some(i);
            }
        }
        for (i, name) in names.iter().enumerate() {
            if matches(&name[..3]) {
                self.at += 3;
                return Some(i);
            }
        }
        None
    }
}

/// Parses `text` with compiled `strptime` items into a timestamp; `None` when it does
/// not match (the whole text must be used).
pub fn strptime(items: &[Item], text: &str) -> Option<i64> {
    let mut cursor = Cursor { text: text.as_bytes(), at: 0 };
    let (mut year, mut month, mut day) = (1900i64, 1i64, 1i64);
    let (mut hour, mut minute, mut second, mut micros) = (0i64, 0i64, 0i64, 0i64);
    let mut day_of_year = None;
    let mut pm = None;
    let mut offset_minutes = 0i64;
    for item in items {
        match item {
            Item::Literal(literal) => {
                for expected in literal.bytes() {
                    if expected.is_ascii_whitespace() {
                        // A blank in the format matches any run of blanks.
                        while cursor.at < cursor.text.len() && cursor.text[cursor.at].is_ascii_whitespace() {
                            cursor.at += 1;
                        }
                    } else if cursor.text.get(cursor.at) == Some(&expected) {
                        cursor.at += 1;
                    } else {
                        return None;
                    }
                }
            }
            Item::Code { code, .. } => match code {
                'Y' | 'G' => year = cursor.digits(6, true)?,
                'y' => {
                    let short = cursor.digits(2, false)?;
                    year = if short < 69 { 2000 + short } else { 1900 + short };
                }
                'm' => month = cursor.digits(2, false)?,
                'd' => day = cursor.digits(2, false)?,
                'b' | 'h' => month = cursor.name(&MONTH_NAMES, true)? as i64 + 1,
                'B' => month = cursor.name(&MONTH_NAMES, false)? as i64 + 1,
                'a' => {
                    cursor.name(&DAY_NAMES, true)?;
                }
                'A' => {
                    cursor.name(&DAY_NAMES, false)?;
                }
                'w' | 'u' => {
                    cursor.digits(1, false)?;
                }
                'H' | 'I' => hour = cursor.digits(2, false)?,
                'M' => minute = cursor.digits(2, false)?,
                'S' => second = cursor.digits(2, false)?,
                'f' => micros = cursor.fraction(6, 6)?,
                'g' => micros = cursor.fraction(3, 6)?,
                'n' => micros = cursor.fraction(9, 6)?,
                'j' => day_of_year = Some(cursor.digits(3, false)?),
                'p' => {
                    let rest = &cursor.text[cursor.at..];
                    let word = rest.get(..2)?;
                    pm = Some(if word.eq_ignore_ascii_case(b"PM") {
                        true
                    } else if word.eq_ignore_ascii_case(b"AM") {
                        false
                    } else {
                        return None;
                    });
                    cursor.at += 2;
                }
                'z' => {
                    let sign = match cursor.text.get(cursor.at)? {
                        b'+' => 1,
                        b'-' => -1,
                        b'Z' => {
                            cursor.at += 1;
                            continue;
                        }
                        _ => return None,
                    };
                    cursor.at += 1;
                    let hours = cursor.digits(2, false)?;
                    if cursor.text.get(cursor.at) == Some(&b':') {
                        cursor.at += 1;
                    }
                    let minutes = cursor.digits(2, false).unwrap_or(0);
                    offset_minutes = sign * (hours * 60 + minutes);
                }
                'Z' => {
                    while cursor.at < cursor.text.len() && cursor.text[cursor.at].is_ascii_alphabetic() {
                        cursor.at += 1;
                    }
                }
                'U' | 'W' | 'V' => {
                    cursor.digits(2, false)?;
                }
                _ => return None,
            },
        }
    }
    if cursor.at != cursor.text.len() {
        return None;
    }
    assemble(year, month, day, day_of_year, (hour, minute, second, micros), pm, offset_minutes)
}

fn assemble(
    year: i64,
    month: i64,
    day: i64,
    day_of_year: Option<i64>,
    (hour, minute, second, micros): (i64, i64, i64, i64),
    pm: Option<bool>,
    offset_minutes: i64,
) -> Option<i64> {
    let year = i32::try_from(year).ok()?;
    let days = match day_of_year {
        Some(doy) if (1..=366).contains(&doy) => {
            let first = datetime::days_from_civil(year, 1, 1);
            let days = first + doy as i32 - 1;
            (datetime::civil_from_days(days).0 == year).then_some(days)?
        }
        Some(_) => return None,
        None => datetime::make_date(year, u32::try_from(month).ok()?, u32::try_from(day).ok()?)?,
    };
    let hour = match pm {
        Some(_) if !(1..=12).contains(&hour) => return None,
        Some(true) => hour % 12 + 12,
        Some(false) => hour % 12,
        None => hour,
    };
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let time = ((hour * 60 + minute) * 60 + second) * MICROS_PER_SECOND + micros - offset_minutes * 60 * MICROS_PER_SECOND;
    (days as i64).checked_mul(MICROS_PER_DAY)?.checked_add(time)
}

// ------------------------------------------------------------------ to_char (PostgreSQL)

/// One piece of a compiled `to_char` template.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    Literal(String),
    Field {
        keyword: &'static str,
        /// `FM`: no padding.
        fill_mode: bool,
        /// `TH` / `th`: an ordinal suffix (upper or lower case).
        ordinal: Option<bool>,
    },
}

/// PostgreSQL's template keywords, longest first where one is a prefix of another.
const KEYWORDS: &[&str] = &[
    "A.D.", "A.M.", "AD", "AM", "B.C.", "BC", "CC", "DAY", "DDD", "DD", "DY", "Day", "Dy", "D", "HH24", "HH12", "HH", "IDDD", "ID", "IW",
    "IYYY", "IYY", "IY", "I", "J", "MI", "MM", "MONTH", "MON", "MS", "Month", "Mon", "P.M.", "PM", "Q", "RM", "SSSSS", "SSSS", "SS", "US",
    "WW", "W", "Y,YYY", "YYYY", "YYY", "YY", "Y", "a.d.", "a.m.", "ad", "am", "b.c.", "bc", "cc", "day", "ddd", "dd", "dy", "d", "hh24",
    "hh12", "hh", "iddd", "id", "iw", "iyyy", "iyy", "iy", "i", "j", "mi", "mm", "month", "mon", "ms", "p.m.", "pm", "q", "rm", "sssss",
    "ssss", "ss", "us", "ww", "w", "y,yyy", "yyyy", "yyy", "yy", "y", "TZH", "TZM", "TZ", "tz", "OF",
];

/// The `to_char` keywords a TIME has (its time of day).
const TIME_KEYWORDS: &[&str] = &["HH", "HH12", "HH24", "MI", "SS", "MS", "US", "SSSS", "SSSSS", "AM", "PM", "A.M.", "P.M."];

/// Refuses a template with date (or zone) patterns for a TIME value (PostgreSQL formats a
/// TIME as an interval and refuses most of them too).
pub fn check_to_char_for_time(patterns: &[Pattern]) -> Result<()> {
    for pattern in patterns {
        if let Pattern::Field { keyword, .. } = pattern {
            if !TIME_KEYWORDS.contains(&keyword.to_ascii_uppercase().as_str()) {
                return Err(exec_err!("invalid format specification for a TIME value: {keyword} needs a date"));
            }
        }
    }
    Ok(())
}

/// Compiles a `to_char` template.
pub fn compile_to_char(template: &str) -> Vec<Pattern> {
    let mut patterns = Vec::new();
    let mut literal = String::new();
    let mut rest = template;
    let flush = |literal: &mut String, patterns: &mut Vec<Pattern>| {
        if !literal.is_empty() {
            patterns.push(Pattern::Literal(std::mem::take(literal)));
        }
    };
    while !rest.is_empty() {
        let mut fill_mode = false;
        let mut after_prefix = rest;
        loop {
            if let Some(r) = after_prefix.strip_prefix("FM").or_else(|| after_prefix.strip_prefix("fm")) {
                fill_mode = true;
                after_prefix = r;
            } else if let Some(r) = after_prefix.strip_prefix("FX").or_else(|| after_prefix.strip_prefix("fx")) {
                after_prefix = r;
            } else {
                break;
            }
        }
        if let Some(keyword) = KEYWORDS.iter().find(|k| after_prefix.starts_with(**k)) {
            let mut after = &after_prefix[keyword.len()..];
            let ordinal = if let Some(r) = after.strip_prefix("TH") {
                after = r;
                Some(true)
            } else if let Some(r) = after.strip_prefix("th") {
                after = r;
                Some(false)
            } else {
                None
            };
            flush(&mut literal, &mut patterns);
            patterns.push(Pattern::Field { keyword, fill_mode, ordinal });
            rest = after;
            continue;
        }
        if after_prefix.len() != rest.len() {
            // A lone FM/FX modifies nothing.
            rest = after_prefix;
            continue;
        }
        let mut chars = rest.chars();
        let c = chars.next().expect("not empty");
        match c {
            '"' => {
                // Quoted text is copied; `\"` inside it is a quote.
                let mut inner = chars.as_str();
                loop {
                    let mut it = inner.chars();
                    match it.next() {
                        None => break,
                        Some('"') => {
                            inner = it.as_str();
                            break;
                        }
                        Some('\\') if it.as_str().starts_with('"') => {
                            literal.push('"');
                            inner = &it.as_str()[1..];
                        }
                        Some(other) => {
                            literal.push(other);
                            inner = it.as_str();
                        }
                    }
                }
                rest = inner;
            }
            '\\' if chars.as_str().starts_with('"') => {
                literal.push('"');
                rest = &chars.as_str()[1..];
            }
            other => {
                literal.push(other);
                rest = chars.as_str();
            }
        }
    }
    flush(&mut literal, &mut patterns);
    patterns
}

fn ordinal_suffix(value: i64, upper: bool) -> &'static str {
    let suffix = match (value % 100, value % 10) {
        (11..=13, _) => "th",
        (_, 1) => "st",
        (_, 2) => "nd",
        (_, 3) => "rd",
        _ => "th",
    };
    if upper {
        match suffix {
            "st" => "ST",
            "nd" => "ND",
            "rd" => "RD",
            _ => "TH",
        }
    } else {
        suffix
    }
}

/// A name in the case the keyword is written in (`MONTH`, `Month`, `month`), padded to
/// nine characters unless `fill_mode` (PostgreSQL pads full month and day names).
fn cased_name(out: &mut String, name: &str, keyword: &str, pad: bool) {
    let text = if keyword.chars().all(|c| c.is_ascii_uppercase()) {
        name.to_uppercase()
    } else if keyword.chars().all(|c| !c.is_ascii_uppercase()) {
        name.to_lowercase()
    } else {
        name.to_string()
    };
    if pad {
        let _ = write!(out, "{text:<9}");
    } else {
        out.push_str(&text);
    }
}

const ROMAN_MONTHS: [&str; 12] = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII"];

/// Formats a local timestamp with a compiled `to_char` template (`zone`: see [`ZoneAt`];
/// `TZ` is empty and `OF` `+00` without one, as PostgreSQL prints a TIMESTAMP).
pub fn to_char(patterns: &[Pattern], micros: i64, zone: ZoneAt, out: &mut String) {
    let p = Parts::of_timestamp(micros);
    // PostgreSQL shows BC years as positive numbers (year 0 is 1 BC).
    let year = if p.year > 0 { p.year as i64 } else { 1 - p.year as i64 };
    let (iso_year, iso_week) = datetime::iso_week(p.days);
    for pattern in patterns {
        let (keyword, fill_mode, ordinal) = match pattern {
            Pattern::Literal(text) => {
                out.push_str(text);
                continue;
            }
            Pattern::Field { keyword, fill_mode, ordinal } => (*keyword, *fill_mode, *ordinal),
        };
        let upper_keyword = keyword.to_ascii_uppercase();
        if matches!(upper_keyword.as_str(), "TZ" | "OF" | "TZH" | "TZM") {
            let offset = zone.map_or(0, |(zone, instant)| zone.offset_at(instant));
            match upper_keyword.as_str() {
                "TZ" => {
                    if let Some((zone, instant)) = zone {
                        let name = zone.abbreviation_at(instant);
                        out.push_str(&if keyword == "tz" { name.to_lowercase() } else { name });
                    }
                }
                "OF" => out.push_str(&format_offset(offset)),
                "TZH" => {
                    let _ = write!(out, "{}{:02}", if offset < 0 { '-' } else { '+' }, offset.unsigned_abs() / 3600);
                }
                _ => {
                    let _ = write!(out, "{:02}", offset.unsigned_abs() / 60 % 60);
                }
            }
            continue;
        }
        let numeric: Option<(i64, usize)> = match upper_keyword.as_str() {
            "HH" | "HH12" => Some((p.hour12() as i64, 2)),
            "HH24" => Some((p.hour as i64, 2)),
            "MI" => Some((p.minute as i64, 2)),
            "SS" => Some((p.second as i64, 2)),
            "MS" => Some((p.micros as i64 / 1000, 3)),
            "US" => Some((p.micros as i64, 6)),
            "SSSS" | "SSSSS" => Some(((p.hour * 3600 + p.minute * 60 + p.second) as i64, 1)),
            "YYYY" => Some((year, 4)),
            "YYY" => Some((year % 1000, 3)),
            "YY" => Some((year % 100, 2)),
            "Y" => Some((year % 10, 1)),
            "IYYY" => Some((iso_year as i64, 4)),
            "IYY" => Some((iso_year as i64 % 1000, 3)),
            "IY" => Some((iso_year as i64 % 100, 2)),
            "I" => Some((iso_year as i64 % 10, 1)),
            "MM" => Some((p.month as i64, 2)),
            "DDD" => Some((p.day_of_year() as i64, 3)),
            "DD" => Some((p.day as i64, 2)),
            "D" => Some((p.weekday() as i64 + 1, 1)),
            "ID" => Some(((p.weekday() as i64 + 6) % 7 + 1, 1)),
            "IDDD" => {
                // Day of the ISO year: from the Monday of the week holding January 4th.
                let jan4 = datetime::days_from_civil(iso_year, 1, 4);
                let week1_monday = jan4 - (jan4 as i64 + 3).rem_euclid(7) as i32;
                Some(((p.days - week1_monday + 1) as i64, 3))
            }
            "WW" => Some(((p.day_of_year() as i64 - 1) / 7 + 1, 2)),
            "IW" => Some((iso_week as i64, 2)),
            "W" => Some(((p.day as i64 - 1) / 7 + 1, 1)),
            "CC" => Some((if p.year > 0 { (p.year as i64 + 99) / 100 } else { -((100 - p.year as i64) / 100) }, 2)),
            "J" => Some((p.days as i64 + 2_440_588, 1)),
            "Q" => Some(((p.month as i64 - 1) / 3 + 1, 1)),
            _ => None,
        };
        if let Some((value, width)) = numeric {
            if fill_mode {
                let _ = write!(out, "{value}");
            } else if value < 0 {
                let _ = write!(out, "-{:0width$}", -value);
            } else {
                let _ = write!(out, "{value:0width$}");
            }
            if let Some(upper) = ordinal {
                out.push_str(ordinal_suffix(value, upper));
            }
            continue;
        }
        match upper_keyword.as_str() {
            "Y,YYY" => {
                let _ = write!(out, "{},{:03}", year / 1000, year % 1000);
            }
            "MONTH" => cased_name(out, MONTH_NAMES[p.month as usize - 1], keyword, !fill_mode),
            "MON" => cased_name(out, &MONTH_NAMES[p.month as usize - 1][..3], keyword, false),
            "DAY" => cased_name(out, DAY_NAMES[p.weekday()], keyword, !fill_mode),
            "DY" => cased_name(out, &DAY_NAMES[p.weekday()][..3], keyword, false),
            "RM" => {
                let roman = ROMAN_MONTHS[p.month as usize - 1];
                let roman = if keyword == "rm" { roman.to_lowercase() } else { roman.to_string() };
                if fill_mode {
                    out.push_str(&roman);
                } else {
                    let _ = write!(out, "{roman:<4}");
                }
            }
            "AM" | "PM" => cased_name(out, if p.hour < 12 { "AM" } else { "PM" }, keyword, false),
            "A.M." | "P.M." => cased_name(out, if p.hour < 12 { "A.M." } else { "P.M." }, keyword, false),
            "AD" | "BC" => cased_name(out, if p.year > 0 { "AD" } else { "BC" }, keyword, false),
            "A.D." | "B.C." => cased_name(out, if p.year > 0 { "A.D." } else { "B.C." }, keyword, false),
            _ => out.push_str(keyword),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> i64 {
        datetime::parse_timestamp(text).unwrap()
    }

    #[test]
    fn strftime_codes() {
        let items = compile_strftime("%Y-%m-%d %H:%M:%S.%f %a %A %b %B %j %p %I %y %-d %-m %w %U %W %g %%").unwrap();
        let mut out = String::new();
        strftime(&items, ts("2024-05-06 07:08:09.5"), None, &mut out);
        assert_eq!(out, "2024-05-06 07:08:09.500000 Mon Monday May May 127 AM 07 24 6 5 1 18 19 500 %");
        assert!(compile_strftime("%Q").is_err());
    }

    #[test]
    fn strptime_round_trip() {
        let items = compile_strftime("%d/%m/%Y %H:%M").unwrap();
        assert_eq!(strptime(&items, "06/05/2024 07:08"), Some(ts("2024-05-06 07:08")));
        assert_eq!(strptime(&items, "06/05/2024 07:08x"), None);
        assert_eq!(strptime(&items, "31/02/2024 07:08"), None);
        let items = compile_strftime("%B %-d, %Y %I:%M %p").unwrap();
        assert_eq!(strptime(&items, "may 6, 2024 07:08 PM"), Some(ts("2024-05-06 19:08")));
        let items = compile_strftime("%c").unwrap();
        assert_eq!(strptime(&items, "2024-05-06 07:08:09"), Some(ts("2024-05-06 07:08:09")));
    }

    #[test]
    fn to_char_patterns() {
        let mut out = String::new();
        to_char(
            &compile_to_char("YYYY-MM-DD HH24:MI:SS Mon Month| Dy Day| FMMonth FMDDth \"at\" HH12 AM Q"),
            ts("2024-05-06 19:08:09"),
            None,
            &mut out,
        );
        assert_eq!(out, "2024-05-06 19:08:09 May May      | Mon Monday   | May 6th at 07 PM 2");
        // A TIMESTAMPTZ in Kolkata: its local time and zone (PostgreSQL 15's output).
        let (kolkata, _) = TimeZone::from_setting("Asia/Kolkata").unwrap();
        let instant = ts("2024-07-31 10:00:00");
        out.clear();
        to_char(&compile_to_char("HH24:MI [TZ][tz][OF][TZH][TZM]"), kolkata.to_local(instant).unwrap(), Some((kolkata, instant)), &mut out);
        assert_eq!(out, "15:30 [IST][ist][+05:30][+05][30]");
        out.clear();
        to_char(&compile_to_char("[TZ][OF]"), instant, None, &mut out);
        assert_eq!(out, "[][+00]");
        assert!(check_to_char_for_time(&compile_to_char("HH24:MI:SS.US AM")).is_ok());
        assert!(check_to_char_for_time(&compile_to_char("YYYY")).is_err());
    }
}
