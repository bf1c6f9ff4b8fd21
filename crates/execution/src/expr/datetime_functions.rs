//! Date and time functions: `date_diff` (DuckDB), `make_date`, `make_timestamp`,
//! `make_timestamptz`, `make_time`, `strftime`, `strptime`, `try_strptime`, `to_char`
//! (PostgreSQL), `dayname`, `monthname`, `age` (PostgreSQL) and `AT TIME ZONE`.
//!
//! DATE arguments are days (`i32`), TIMESTAMP arguments microseconds (`i64`); a kernel
//! reads either as microseconds when it needs a time of day. A TIMESTAMPTZ is formatted
//! as its local time in the session's zone (captured when the kernel is compiled), a
//! TIME as microseconds since midnight. Formats and zones that are constants are
//! compiled once per query (`datetime_format.rs`).

use std::sync::Arc;

use apiary_common::{exec_err, internal_err, Result};
use apiary_sql::expr::ScalarFunction;
use apiary_types::datetime::{self, DateField, Interval, MICROS_PER_DAY, MICROS_PER_SECOND};
use apiary_types::{DataChunk, DataType, ScalarValue, StrColumnBuilder, TimeZone, Vector, VectorData};

use super::datetime_format::{self as format, Item, Parts, Pattern};
use super::{combined_validity, map_rows, rows_of, wrap, ExprRef, PhysicalExpr};

/// Microseconds of a DATE or TIMESTAMP vector's row.
fn micros_at(v: &Vector, i: usize) -> i64 {
    match v.data_type {
        DataType::Date => v.values::<i32>()[i] as i64 * MICROS_PER_DAY,
        _ => v.values::<i64>()[i],
    }
}

/// A format compiled once when it is a constant, else per row.
#[derive(Debug)]
enum Compiled<T> {
    Constant(T),
    PerRow,
}

#[derive(Debug)]
struct DateTimeFunction {
    func: ScalarFunction,
    args: Vec<ExprRef>,
    strftime: Compiled<Vec<Item>>,
    to_char: Compiled<Vec<Pattern>>,
    /// The zone of `AT TIME ZONE` and `make_timestamptz` when given as a constant.
    zone_argument: Compiled<TimeZone>,
    /// The session's zone.
    zone: TimeZone,
    data_type: DataType,
}

pub fn datetime_function(
    func: ScalarFunction,
    args: Vec<ExprRef>,
    literals: &[Option<&ScalarValue>],
    data_type: DataType,
    zone: TimeZone,
) -> Result<ExprRef> {
    let format_literal = match literals.get(1) {
        Some(Some(ScalarValue::Utf8(text))) => Some(text.as_str()),
        _ => None,
    };
    let value_type = args.first().map(|a| a.data_type());
    let strftime = match (func, format_literal) {
        (ScalarFunction::Strftime | ScalarFunction::Strptime | ScalarFunction::TryStrptime, Some(text)) => {
            let items = format::compile_strftime(text)?;
            if func == ScalarFunction::Strftime && value_type == Some(DataType::Time) {
                format::check_strftime_for_time(&items, text)?;
            }
            Compiled::Constant(items)
        }
        _ => Compiled::PerRow,
    };
    let to_char = match (func, format_literal) {
        (ScalarFunction::ToChar, Some(text)) => {
            let patterns = format::compile_to_char(text);
            if value_type == Some(DataType::Time) {
                format::check_to_char_for_time(&patterns)?;
            }
            Compiled::Constant(patterns)
        }
        _ => Compiled::PerRow,
    };
    let zone_argument = match (func, literals.get(zone_argument_position(func))) {
        (ScalarFunction::AtTimeZone, Some(Some(value))) if !value.is_null() => Compiled::Constant(zone_for_at_time_zone(value)?),
        (ScalarFunction::MakeTimestampTz, Some(Some(value))) if !value.is_null() => Compiled::Constant(zone_for_input(value)?),
        // make_timestamptz without a zone: the session's.
        (ScalarFunction::MakeTimestampTz, None) => Compiled::Constant(zone),
        _ => Compiled::PerRow,
    };
    Ok(Arc::new(DateTimeFunction { func, args, strftime, to_char, zone_argument, zone, data_type }))
}

/// Which argument is the zone of a function that takes one.
fn zone_argument_position(func: ScalarFunction) -> usize {
    match func {
        ScalarFunction::MakeTimestampTz => 6,
        _ => 1,
    }
}

/// The zone of `AT TIME ZONE`: a name (PostgreSQL's rules: abbreviations, IANA names,
/// POSIX offsets) or an INTERVAL (hours east of UTC).
fn zone_for_at_time_zone(value: &ScalarValue) -> Result<TimeZone> {
    match value {
        ScalarValue::Utf8(name) => TimeZone::for_at_time_zone(name).ok_or_else(|| exec_err!("time zone \"{name}\" not recognized")),
        ScalarValue::Interval(interval) => {
            if interval.months != 0 || interval.days != 0 {
                return Err(exec_err!("interval time zone \"{interval}\" must not include months or days"));
            }
            let seconds = interval.micros / MICROS_PER_SECOND;
            let seconds = i32::try_from(seconds).map_err(|_| exec_err!("interval time zone \"{interval}\" is out of range"))?;
            Ok(TimeZone::Fixed(seconds))
        }
        other => Err(internal_err!("time zone of type {}", other.data_type())),
    }
}

/// The zone argument of `make_timestamptz` (and of a timestamp's text): ISO offsets,
/// abbreviations, IANA names.
fn zone_for_input(value: &ScalarValue) -> Result<TimeZone> {
    match value {
        ScalarValue::Utf8(name) => TimeZone::for_input(name).ok_or_else(|| exec_err!("time zone \"{name}\" not recognized")),
        other => Err(internal_err!("time zone of type {}", other.data_type())),
    }
}

/// A local timestamp from its fields, as `make_timestamp` checks them (24:00:00 is the
/// next midnight, as PostgreSQL accepts).
fn make_local_timestamp(year: i64, month: i64, day: i64, hour: i64, minute: i64, seconds: f64) -> Result<i64> {
    let days = make_date(year, month, day)?;
    let time = make_time(hour, minute, seconds)?;
    Ok(days as i64 * MICROS_PER_DAY + time)
}

/// PostgreSQL's `make_time`: 0:00:00 to 24:00:00.
fn make_time(hour: i64, minute: i64, seconds: f64) -> Result<i64> {
    let midnight = hour == 24 && minute == 0 && seconds == 0.0;
    if !midnight && (!(0..24).contains(&hour) || !(0..60).contains(&minute) || !(0.0..60.0).contains(&seconds)) {
        return Err(exec_err!("time field value out of range: {hour}:{minute:02}:{seconds:02}"));
    }
    let micros = (seconds * MICROS_PER_SECOND as f64).round() as i64;
    Ok((hour * 60 + minute) * 60 * MICROS_PER_SECOND + micros)
}

/// Builds a string column from `f(row, out)` at the valid selected rows.
fn strings(
    len: usize,
    rows: Option<&[u32]>,
    valid: impl Fn(usize) -> bool,
    mut f: impl FnMut(usize, &mut String) -> Result<()>,
) -> Result<VectorData> {
    let mut mask = vec![rows.is_none(); len];
    if let Some(rows) = rows {
        rows.iter().for_each(|&r| mask[r as usize] = true);
    }
    let mut builder = StrColumnBuilder::with_capacity(len);
    let mut out = String::new();
    for (i, selected) in mask.into_iter().enumerate() {
        if selected && valid(i) {
            out.clear();
            f(i, &mut out)?;
            builder.push(&out);
        } else {
            builder.push_empty();
        }
    }
    Ok(VectorData::Str(builder.finish()))
}

/// `date_diff(part, start, end)`: how many part boundaries lie between the two moments
/// (DuckDB); weeks are whole 7-day spans of the day difference.
pub fn date_diff(field: DateField, start: i64, end: i64) -> Option<i64> {
    let boundaries = |unit: i64| Some(end.div_euclid(unit) - start.div_euclid(unit));
    let (a, b) = (Parts::of_timestamp(start), Parts::of_timestamp(end));
    Some(match field {
        DateField::Year => (b.year - a.year) as i64,
        DateField::Quarter => (b.year as i64 * 4 + (b.month as i64 - 1) / 3) - (a.year as i64 * 4 + (a.month as i64 - 1) / 3),
        DateField::Month => (b.year as i64 * 12 + b.month as i64) - (a.year as i64 * 12 + a.month as i64),
        DateField::Week => (b.days as i64 - a.days as i64) / 7,
        DateField::Day => b.days as i64 - a.days as i64,
        DateField::Hour => boundaries(3600 * MICROS_PER_SECOND)?,
        DateField::Minute => boundaries(60 * MICROS_PER_SECOND)?,
        DateField::Second => boundaries(MICROS_PER_SECOND)?,
        DateField::Millisecond => boundaries(1000)?,
        DateField::Microsecond => end.checked_sub(start)?,
        // DuckDB counts these as whole divisions of the year (2000 and 2001 are one
        // century apart for date_part, none for date_diff).
        DateField::Decade => (b.year.div_euclid(10) - a.year.div_euclid(10)) as i64,
        DateField::Century => (b.year.div_euclid(100) - a.year.div_euclid(100)) as i64,
        DateField::Millennium => (b.year.div_euclid(1000) - a.year.div_euclid(1000)) as i64,
        DateField::IsoYear => (datetime::iso_week(b.days).0 - datetime::iso_week(a.days).0) as i64,
        _ => return None,
    })
}

/// PostgreSQL's `age(end, start)`: the difference field by field (years, months, days,
/// time), borrowing from the next larger field where one is negative; a month borrowed
/// has the length of the month before `end` (or `start` when the result is negative).
pub fn age(end: i64, start: i64) -> Option<Interval> {
    let (a, b) = (Parts::of_timestamp(end), Parts::of_timestamp(start));
    let negative = end < start;
    let sign = if negative { -1 } else { 1 };
    let mut micros = sign * (a.micros as i64 - b.micros as i64);
    let mut second = sign * (a.second as i64 - b.second as i64);
    let mut minute = sign * (a.minute as i64 - b.minute as i64);
    let mut hour = sign * (a.hour as i64 - b.hour as i64);
    let mut day = sign * (a.day as i64 - b.day as i64);
    let mut month = sign * (a.month as i64 - b.month as i64);
    let mut year = sign * (a.year as i64 - b.year as i64);
    let borrow = |low: &mut i64, high: &mut i64, span: i64| {
        while *low < 0 {
            *low += span;
            *high -= 1;
        }
    };
    borrow(&mut micros, &mut second, MICROS_PER_SECOND);
    borrow(&mut second, &mut minute, 60);
    borrow(&mut minute, &mut hour, 60);
    borrow(&mut hour, &mut day, 24);
    while day < 0 {
        // PostgreSQL borrows the length of the earlier moment's month.
        let earlier = if negative { &a } else { &b };
        day += datetime::days_in_month(earlier.year, earlier.month) as i64;
        month -= 1;
    }
    borrow(&mut month, &mut year, 12);
    let months = sign * (year * 12 + month);
    let time = sign * (((hour * 60 + minute) * 60 + second) * MICROS_PER_SECOND + micros);
    Some(Interval::new(i32::try_from(months).ok()?, i32::try_from(sign * day).ok()?, time))
}

/// PostgreSQL's `make_date`: a negative year is BC (there is no year 0).
fn make_date(year: i64, month: i64, day: i64) -> Result<i32> {
    let astronomical = if year < 0 { year + 1 } else { year };
    let out_of_range = || exec_err!("date field value out of range: {year}-{month:02}-{day:02}");
    if year == 0 {
        return Err(out_of_range());
    }
    let (Ok(y), Ok(m), Ok(d)) = (i32::try_from(astronomical), u32::try_from(month), u32::try_from(day)) else {
        return Err(out_of_range());
    };
    datetime::make_date(y, m, d).ok_or_else(out_of_range)
}

impl DateTimeFunction {
    /// The local time (microseconds) of row `i` of a DATE, TIMESTAMP, TIMESTAMPTZ or TIME
    /// vector, and for a TIMESTAMPTZ the zone and instant it is seen in (for the zone's
    /// offset and name).
    fn local_time(&self, v: &Vector, i: usize) -> Result<(i64, Option<(TimeZone, i64)>)> {
        Ok(match v.data_type {
            DataType::TimestampTz => {
                let instant = v.values::<i64>()[i];
                let local = self.zone.to_local(instant).ok_or_else(|| exec_err!("timestamp out of range"))?;
                (local, Some((self.zone, instant)))
            }
            _ => (micros_at(v, i), None),
        })
    }

    fn evaluate_values(&self, values: &[Vector], chunk: &DataChunk) -> Result<Vector> {
        use ScalarFunction as F;
        let len = chunk.physical_len();
        let rows = rows_of(chunk);
        let validity = combined_validity(&values.iter().collect::<Vec<_>>());
        let valid = |i: usize| validity.as_ref().is_none_or(|v| v.get(i));
        let text = |arg: usize, i: usize| values[arg].strings().get(i);
        let integer = |arg: usize, i: usize| values[arg].values::<i64>()[i];
        let mut failure = None;
        let data = match self.func {
            F::DateDiff(field) => {
                let out = map_rows(len, rows, |i| {
                    if !valid(i) {
                        return 0;
                    }
                    let (start, end) = (micros_at(&values[0], i), micros_at(&values[1], i));
                    date_diff(field, start, end).unwrap_or_else(|| {
                        failure.get_or_insert_with(|| exec_err!("date_diff out of range"));
                        0
                    })
                });
                wrap(out)
            }
            F::MakeDate => wrap(map_rows(len, rows, |i| {
                if !valid(i) {
                    return 0;
                }
                make_date(integer(0, i), integer(1, i), integer(2, i)).unwrap_or_else(|err| {
                    failure.get_or_insert(err);
                    0
                })
            })),
            F::MakeTimestamp | F::MakeTimestampTz => wrap(map_rows(len, rows, |i| {
                if !valid(i) {
                    return 0;
                }
                let seconds = values[5].values::<f64>()[i];
                let mut made = make_local_timestamp(integer(0, i), integer(1, i), integer(2, i), integer(3, i), integer(4, i), seconds);
                if self.func == F::MakeTimestampTz {
                    made = made.and_then(|local| {
                        let zone = match &self.zone_argument {
                            Compiled::Constant(zone) => *zone,
                            Compiled::PerRow => zone_for_input(&ScalarValue::Utf8(text(6, i).to_string()))?,
                        };
                        zone.to_utc(local).ok_or_else(|| exec_err!("timestamp out of range"))
                    });
                }
                made.unwrap_or_else(|err| {
                    failure.get_or_insert(err);
                    0
                })
            })),
            F::MakeTime => wrap(map_rows(len, rows, |i| {
                if !valid(i) {
                    return 0;
                }
                make_time(integer(0, i), integer(1, i), values[2].values::<f64>()[i]).unwrap_or_else(|err| {
                    failure.get_or_insert(err);
                    0
                })
            })),
            F::AtTimeZone => wrap(map_rows(len, rows, |i| {
                if !valid(i) {
                    return 0;
                }
                let zone = match &self.zone_argument {
                    Compiled::Constant(zone) => Ok(*zone),
                    Compiled::PerRow => zone_for_at_time_zone(&values[1].get_scalar(i)),
                };
                let value = values[0].values::<i64>()[i];
                let converted = zone.and_then(|zone| {
                    let converted = if values[0].data_type == DataType::Timestamp { zone.to_utc(value) } else { zone.to_local(value) };
                    converted.ok_or_else(|| exec_err!("timestamp out of range"))
                });
                converted.unwrap_or_else(|err| {
                    failure.get_or_insert(err);
                    0
                })
            })),
            F::Age => wrap(map_rows(len, rows, |i| {
                if !valid(i) {
                    return Interval::default();
                }
                age(micros_at(&values[0], i), micros_at(&values[1], i)).unwrap_or_else(|| {
                    failure.get_or_insert_with(|| exec_err!("interval out of range in age"));
                    Interval::default()
                })
            })),
            F::DayName | F::MonthName => strings(len, rows, valid, |i, out| {
                let parts = Parts::of_timestamp(micros_at(&values[0], i));
                out.push_str(if self.func == F::DayName {
                    format::DAY_NAMES[parts.weekday()]
                } else {
                    format::MONTH_NAMES[parts.month as usize - 1]
                });
                Ok(())
            })?,
            F::Strftime => strings(len, rows, valid, |i, out| {
                let (micros, zone) = self.local_time(&values[0], i)?;
                match &self.strftime {
                    Compiled::Constant(items) => format::strftime(items, micros, zone, out),
                    Compiled::PerRow => {
                        let items = format::compile_strftime(text(1, i))?;
                        if values[0].data_type == DataType::Time {
                            format::check_strftime_for_time(&items, text(1, i))?;
                        }
                        format::strftime(&items, micros, zone, out)
                    }
                }
                Ok(())
            })?,
            F::ToChar => strings(len, rows, valid, |i, out| {
                let (micros, zone) = self.local_time(&values[0], i)?;
                match &self.to_char {
                    Compiled::Constant(patterns) => format::to_char(patterns, micros, zone, out),
                    Compiled::PerRow => {
                        let patterns = format::compile_to_char(text(1, i));
                        if values[0].data_type == DataType::Time {
                            format::check_to_char_for_time(&patterns)?;
                        }
                        format::to_char(&patterns, micros, zone, out)
                    }
                }
                Ok(())
            })?,
            F::Strptime | F::TryStrptime => {
                let mut parsed_validity = vec![false; len];
                let out = map_rows(len, rows, |i| {
                    if !valid(i) {
                        return 0;
                    }
                    let items = match &self.strftime {
                        Compiled::Constant(items) => Ok(std::borrow::Cow::Borrowed(items)),
                        Compiled::PerRow => format::compile_strftime(text(1, i)).map(std::borrow::Cow::Owned),
                    };
                    let parsed = items.map(|items| format::strptime(&items, text(0, i)));
                    match parsed {
                        Ok(Some(micros)) => {
                            parsed_validity[i] = true;
                            micros
                        }
                        Ok(None) if self.func == F::TryStrptime => 0,
                        Ok(None) => {
                            failure.get_or_insert_with(|| {
                                exec_err!("could not parse '{}' as a timestamp with format '{}'", text(0, i), text(1, i))
                            });
                            0
                        }
                        Err(err) => {
                            failure.get_or_insert(err);
                            0
                        }
                    }
                });
                if let Some(err) = failure {
                    return Err(err);
                }
                let validity = apiary_common::Bitmap::from_bools(parsed_validity);
                return Ok(Vector::new(DataType::Timestamp, wrap(out), Some(validity)));
            }
            other => return Err(internal_err!("{} is not a date function", other.name())),
        };
        if let Some(err) = failure {
            return Err(err);
        }
        Ok(Vector::new(self.data_type, data, validity))
    }
}

impl PhysicalExpr for DateTimeFunction {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let values = self.args.iter().map(|a| a.evaluate(chunk)).collect::<Result<Vec<_>>>()?;
        self.evaluate_values(&values, chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> i64 {
        datetime::parse_timestamp(text).unwrap()
    }

    #[test]
    fn date_diff_counts_boundaries() {
        assert_eq!(date_diff(DateField::Month, ts("2024-01-31"), ts("2024-02-01")), Some(1));
        assert_eq!(date_diff(DateField::Year, ts("2023-12-31"), ts("2024-01-01")), Some(1));
        assert_eq!(date_diff(DateField::Hour, ts("2024-01-01 23:59"), ts("2024-01-02 00:01")), Some(1));
        assert_eq!(date_diff(DateField::Week, ts("2024-01-01"), ts("2024-01-07")), Some(0));
        assert_eq!(date_diff(DateField::Day, ts("2024-01-10"), ts("2024-01-01")), Some(-9));
    }

    #[test]
    fn age_is_symbolic() {
        let show = |a: &str, b: &str| age(ts(a), ts(b)).unwrap().to_string();
        assert_eq!(show("2001-04-10", "1957-06-13"), "43 years 9 mons 27 days");
        assert_eq!(show("1957-06-13", "2001-04-10"), "-43 years -9 mons -27 days");
        // PostgreSQL 15's answers.
        assert_eq!(show("2024-03-01 00:00", "2024-01-31 12:00"), "1 mon 12:00:00");
        assert_eq!(show("2024-01-31", "2024-03-01 12:00"), "-1 mons -1 days -12:00:00");
    }
}
