//! `ScalarValue`: a single SQL value.
//!
//! Used for literals, constant folding, zone-map bounds and the row-at-a-time result API;
//! never on a per-row hot path.

use std::cmp::Ordering;
use std::fmt;

use apiary_common::{exec_err, Result};

use crate::datatype::DataType;
use crate::datetime::{self, Interval};
use crate::decimal::{self, format_decimal};
use crate::timezone::TimeZone;

#[derive(Debug, Clone, PartialEq)]
pub enum ScalarValue {
    Null,
    Boolean(bool),
    Int16(i16),
    Int32(i32),
    Int64(i64),
    Float32(f32),
    Float64(f64),
    /// A scaled integer and its type's precision and scale.
    Decimal(i128, u8, u8),
    Utf8(String),
    Date(i32),
    Timestamp(i64),
    /// An instant: microseconds since 1970-01-01 00:00:00 UTC.
    TimestampTz(i64),
    /// Microseconds since midnight.
    Time(i64),
    Interval(Interval),
}

impl ScalarValue {
    pub fn is_null(&self) -> bool {
        matches!(self, ScalarValue::Null)
    }

    /// The natural type of this value (`Utf8` is `VARCHAR`).
    pub fn data_type(&self) -> DataType {
        match self {
            ScalarValue::Null => DataType::Null,
            ScalarValue::Boolean(_) => DataType::Boolean,
            ScalarValue::Int16(_) => DataType::SmallInt,
            ScalarValue::Int32(_) => DataType::Integer,
            ScalarValue::Int64(_) => DataType::BigInt,
            ScalarValue::Float32(_) => DataType::Real,
            ScalarValue::Float64(_) => DataType::Double,
            ScalarValue::Decimal(_, p, s) => DataType::Decimal { precision: *p, scale: *s },
            ScalarValue::Utf8(_) => DataType::Varchar(None),
            ScalarValue::Date(_) => DataType::Date,
            ScalarValue::Timestamp(_) => DataType::Timestamp,
            ScalarValue::TimestampTz(_) => DataType::TimestampTz,
            ScalarValue::Time(_) => DataType::Time,
            ScalarValue::Interval(_) => DataType::Interval,
        }
    }

    /// The value as an `i128` if it is an integer, decimal (scaled), date, timestamp or
    /// time.
    pub fn as_i128(&self) -> Option<i128> {
        match self {
            ScalarValue::Boolean(b) => Some(*b as i128),
            ScalarValue::Int16(v) => Some(*v as i128),
            ScalarValue::Int32(v) | ScalarValue::Date(v) => Some(*v as i128),
            ScalarValue::Int64(v) | ScalarValue::Timestamp(v) | ScalarValue::TimestampTz(v) | ScalarValue::Time(v) => Some(*v as i128),
            ScalarValue::Decimal(v, _, _) => Some(*v),
            _ => None,
        }
    }

    /// The value as a float, for numeric types.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            ScalarValue::Int16(v) => Some(*v as f64),
            ScalarValue::Int32(v) => Some(*v as f64),
            ScalarValue::Int64(v) => Some(*v as f64),
            ScalarValue::Float32(v) => Some(*v as f64),
            ScalarValue::Float64(v) => Some(*v),
            ScalarValue::Decimal(v, _, s) => Some(decimal::decimal_to_f64(*v, *s)),
            ScalarValue::Date(v) => Some(*v as f64),
            ScalarValue::Timestamp(v) | ScalarValue::TimestampTz(v) | ScalarValue::Time(v) => Some(*v as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            ScalarValue::Utf8(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            ScalarValue::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// Compares two non-null values of the same type. NULLs sort last.
    pub fn total_cmp(&self, other: &ScalarValue) -> Ordering {
        use ScalarValue::*;
        match (self, other) {
            (Null, Null) => Ordering::Equal,
            (Null, _) => Ordering::Greater,
            (_, Null) => Ordering::Less,
            (Boolean(a), Boolean(b)) => a.cmp(b),
            (Utf8(a), Utf8(b)) => a.cmp(b),
            (Float32(_) | Float64(_), _) | (_, Float32(_) | Float64(_)) => {
                // SQL's order: -0 equals 0, every NaN equals NaN and sorts last.
                let sql_order = |v: Option<f64>| match v {
                    Some(x) if x.is_nan() => f64::NAN,
                    // -0.0 == 0.0, but total_cmp orders them: compare the positive zero.
                    Some(x) => x + 0.0,
                    None => f64::NAN,
                };
                sql_order(self.as_f64()).total_cmp(&sql_order(other.as_f64()))
            }
            (Decimal(a, _, sa), Decimal(b, _, sb)) => {
                let scale = (*sa).max(*sb);
                match (decimal::rescale(*a, *sa, scale), decimal::rescale(*b, *sb, scale)) {
                    (Some(a), Some(b)) => a.cmp(&b),
                    _ => decimal::decimal_to_f64(*a, *sa).total_cmp(&decimal::decimal_to_f64(*b, *sb)),
                }
            }
            (Decimal(a, _, s), _) => match other.as_i128().and_then(|b| decimal::rescale(b, 0, *s)) {
                Some(b) => a.cmp(&b),
                None => Ordering::Less,
            },
            (_, Decimal(..)) => other.total_cmp(self).reverse(),
            (Interval(a), Interval(b)) => a.cmp(b),
            _ => match (self.as_i128(), other.as_i128()) {
                (Some(a), Some(b)) => a.cmp(&b),
                _ => format!("{self}").cmp(&format!("{other}")),
            },
        }
    }

    /// Converts this value to `target`, with SQL cast semantics (errors on overflow or
    /// unparsable text); conversions that need a time zone use UTC.
    pub fn cast_to(&self, target: &DataType) -> Result<ScalarValue> {
        self.cast_to_in(target, &TimeZone::UTC)
    }

    /// [`ScalarValue::cast_to`] with the session's time zone, which conversions between
    /// TIMESTAMPTZ and text, DATE, TIMESTAMP and TIME use.
    pub fn cast_to_in(&self, target: &DataType, zone: &TimeZone) -> Result<ScalarValue> {
        use ScalarValue as S;
        if self.is_null() {
            return Ok(S::Null);
        }
        if &self.data_type() == target {
            return Ok(self.clone());
        }
        let out_of_range = || exec_err!("value {self} is out of range for type {target}");
        Ok(match target {
            DataType::Null => S::Null,
            DataType::Boolean => match self {
                S::Utf8(s) => match s.trim().to_ascii_lowercase().as_str() {
                    "true" | "t" | "yes" | "y" | "on" | "1" => S::Boolean(true),
                    "false" | "f" | "no" | "n" | "off" | "0" => S::Boolean(false),
                    _ => return Err(exec_err!("invalid input for BOOLEAN: '{s}'")),
                },
                _ => S::Boolean(self.as_i128().ok_or_else(|| self.cannot_cast(target))? != 0),
            },
            DataType::SmallInt | DataType::Integer | DataType::BigInt => {
                let value: i128 = match self {
                    S::Utf8(s) => s.trim().parse::<i128>().map_err(|_| exec_err!("invalid input for {target}: '{s}'"))?,
                    S::Float32(_) | S::Float64(_) => {
                        let f = self.as_f64().unwrap_or(f64::NAN).round_ties_even();
                        if !f.is_finite() || f.abs() > 1e38 {
                            return Err(out_of_range());
                        }
                        f as i128
                    }
                    S::Decimal(v, _, s) => decimal::rescale(*v, *s, 0).ok_or_else(out_of_range)?,
                    S::Boolean(b) => *b as i128,
                    S::Int16(_) | S::Int32(_) | S::Int64(_) => self.as_i128().unwrap_or_default(),
                    _ => return Err(self.cannot_cast(target)),
                };
                match target {
                    DataType::SmallInt => S::Int16(i16::try_from(value).map_err(|_| out_of_range())?),
                    DataType::Integer => S::Int32(i32::try_from(value).map_err(|_| out_of_range())?),
                    _ => S::Int64(i64::try_from(value).map_err(|_| out_of_range())?),
                }
            }
            DataType::Real | DataType::Double => {
                let value = match self {
                    S::Utf8(s) => s.trim().parse::<f64>().map_err(|_| exec_err!("invalid input for {target}: '{s}'"))?,
                    S::Boolean(b) => *b as i32 as f64,
                    _ if self.data_type().is_numeric() => self.as_f64().unwrap_or_default(),
                    _ => return Err(self.cannot_cast(target)),
                };
                let from_text_infinity =
                    matches!(self, S::Utf8(s) if s.trim().to_ascii_lowercase().trim_start_matches(['+', '-']).starts_with("inf"));
                if *target == DataType::Real {
                    let narrowed = value as f32;
                    if narrowed.is_infinite() && !value.is_infinite()
                        || (value.is_infinite() && !from_text_infinity && !matches!(self, S::Float32(_) | S::Float64(_)))
                    {
                        return Err(out_of_range());
                    }
                    S::Float32(narrowed)
                } else {
                    if value.is_infinite() && !from_text_infinity && !matches!(self, S::Float32(_) | S::Float64(_)) {
                        return Err(out_of_range());
                    }
                    S::Float64(value)
                }
            }
            DataType::Decimal { precision, scale } => {
                let value = match self {
                    S::Utf8(s) => decimal::parse_decimal(s, *precision, *scale)?,
                    S::Float32(_) | S::Float64(_) => {
                        let f = (self.as_f64().unwrap_or(f64::NAN) * decimal::POW10[*scale as usize] as f64).round();
                        if !f.is_finite() || f.abs() >= 1e38 {
                            return Err(out_of_range());
                        }
                        f.round() as i128
                    }
                    S::Decimal(v, _, s) => decimal::rescale(*v, *s, *scale).ok_or_else(out_of_range)?,
                    S::Int16(_) | S::Int32(_) | S::Int64(_) => {
                        decimal::rescale(self.as_i128().unwrap_or_default(), 0, *scale).ok_or_else(out_of_range)?
                    }
                    _ => return Err(self.cannot_cast(target)),
                };
                if !decimal::fits_precision(value, *precision) {
                    return Err(out_of_range());
                }
                S::Decimal(value, *precision, *scale)
            }
            DataType::Char(n) | DataType::Varchar(Some(n)) => {
                let mut text = self.to_text(zone);
                if let DataType::Char(_) = target {
                    text.truncate(text.trim_end_matches(' ').len());
                }
                if text.chars().count() > *n as usize {
                    // PostgreSQL: an explicit cast truncates; only assignment checks length.
                    text = text.chars().take(*n as usize).collect();
                }
                S::Utf8(text)
            }
            DataType::Varchar(None) => S::Utf8(self.to_text(zone)),
            DataType::Date => match self {
                S::Utf8(s) => S::Date(datetime::parse_date(s).ok_or_else(|| exec_err!("invalid input for DATE: '{s}'"))?),
                S::Timestamp(t) => S::Date(t.div_euclid(datetime::MICROS_PER_DAY) as i32),
                S::TimestampTz(t) => {
                    let local = zone.to_local(*t).ok_or_else(out_of_range)?;
                    S::Date(local.div_euclid(datetime::MICROS_PER_DAY) as i32)
                }
                _ => return Err(self.cannot_cast(target)),
            },
            DataType::Timestamp => match self {
                S::Utf8(s) => S::Timestamp(datetime::parse_timestamp(s).ok_or_else(|| exec_err!("invalid input for TIMESTAMP: '{s}'"))?),
                S::Date(d) => S::Timestamp(*d as i64 * datetime::MICROS_PER_DAY),
                S::TimestampTz(t) => S::Timestamp(zone.to_local(*t).ok_or_else(out_of_range)?),
                _ => return Err(self.cannot_cast(target)),
            },
            DataType::TimestampTz => match self {
                S::Utf8(s) => S::TimestampTz(
                    datetime::parse_timestamptz(s, zone).ok_or_else(|| exec_err!("invalid input for TIMESTAMP WITH TIME ZONE: '{s}'"))?,
                ),
                S::Date(d) => S::TimestampTz(zone.to_utc(*d as i64 * datetime::MICROS_PER_DAY).ok_or_else(out_of_range)?),
                S::Timestamp(t) => S::TimestampTz(zone.to_utc(*t).ok_or_else(out_of_range)?),
                _ => return Err(self.cannot_cast(target)),
            },
            DataType::Time => match self {
                S::Utf8(s) => S::Time(datetime::parse_time(s).ok_or_else(|| exec_err!("invalid input for TIME: '{s}'"))?),
                S::Timestamp(t) => S::Time(datetime::time_of_timestamp(*t)),
                S::TimestampTz(t) => S::Time(datetime::time_of_timestamp(zone.to_local(*t).ok_or_else(out_of_range)?)),
                S::Interval(i) => S::Time(i.micros.rem_euclid(datetime::MICROS_PER_DAY)),
                _ => return Err(self.cannot_cast(target)),
            },
            DataType::Interval => match self {
                S::Utf8(s) => S::Interval(Interval::parse(s, None).ok_or_else(|| exec_err!("invalid input for INTERVAL: '{s}'"))?),
                S::Time(t) => S::Interval(Interval::new(0, 0, *t)),
                _ => return Err(self.cannot_cast(target)),
            },
        })
    }

    /// The value as text, TIMESTAMPTZ shown in `zone` (`Display` shows it in UTC).
    pub fn to_text(&self, zone: &TimeZone) -> String {
        match self {
            ScalarValue::TimestampTz(t) => datetime::format_timestamptz(*t, zone),
            other => other.to_string(),
        }
    }

    fn cannot_cast(&self, target: &DataType) -> apiary_common::ApiaryError {
        apiary_common::ApiaryError::Type(format!("cannot cast {} to {target}", self.data_type()))
    }
}

impl fmt::Display for ScalarValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarValue::Null => write!(f, "NULL"),
            ScalarValue::Boolean(b) => write!(f, "{b}"),
            ScalarValue::Int16(v) => write!(f, "{v}"),
            ScalarValue::Int32(v) => write!(f, "{v}"),
            ScalarValue::Int64(v) => write!(f, "{v}"),
            ScalarValue::Float32(v) => write!(f, "{}", format_float32(*v)),
            ScalarValue::Float64(v) => write!(f, "{}", format_float(*v)),
            ScalarValue::Decimal(v, _, s) => write!(f, "{}", format_decimal(*v, *s)),
            ScalarValue::Utf8(s) => write!(f, "{s}"),
            ScalarValue::Date(d) => write!(f, "{}", datetime::format_date(*d)),
            ScalarValue::Timestamp(t) => write!(f, "{}", datetime::format_timestamp(*t)),
            ScalarValue::TimestampTz(t) => write!(f, "{}", datetime::format_timestamptz(*t, &TimeZone::UTC)),
            ScalarValue::Time(t) => write!(f, "{}", datetime::format_time(*t)),
            ScalarValue::Interval(i) => write!(f, "{i}"),
        }
    }
}

/// Formats a REAL with its own shortest round-trip digits (not those of the DOUBLE it
/// converts to).
pub fn format_float32(value: f32) -> String {
    if value.is_finite() {
        let text = format!("{value}");
        if value.fract() == 0.0 && value.abs() < 1e16 && !text.contains(['e', 'E']) {
            return format!("{text}.0");
        }
        text
    } else {
        format_float(value as f64)
    }
}

/// Formats a float the way users expect: shortest round-trip representation,
/// `inf`/`-inf`/`nan` spelled out.
pub fn format_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else {
        let text = format!("{value}");
        // Show integral floats as floats ("2.0", not "2"), as users of other engines expect.
        if value.fract() == 0.0 && value.abs() < 1e16 && !text.contains(['e', 'E']) {
            format!("{text}.0")
        } else {
            text
        }
    }
}
