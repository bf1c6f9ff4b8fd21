//! Values on the wire: result columns in PostgreSQL's text and binary formats, and
//! parameter values (text or binary) decoded into `ScalarValue`s.
//!
//! Text follows what PostgreSQL 15 prints with its default settings (`DateStyle` ISO,
//! `IntervalStyle` postgres, `extra_float_digits` 1): `t`/`f`, shortest round-trip
//! floats with an exponent outside 1e-4 .. 1e15 (1e6 for REAL), `1.50` for NUMERIC(p,2),
//! `0001-12-31 BC`. Binary follows PostgreSQL's `*send` functions: big-endian integers
//! and IEEE floats, NUMERIC as base-10000 digits, DATE as days and TIMESTAMP as
//! microseconds since 2000-01-01 (TIMESTAMPTZ: since 2000-01-01 UTC), TIME as
//! microseconds since midnight, INTERVAL as (microseconds, days, months). TIMESTAMPTZ
//! text is in the session's time zone (`2024-01-31 10:00:00+01`), and text parameters
//! without a zone are read in it.
//!
//! Encoding works from the typed vectors straight into the output buffer (no
//! `ScalarValue` per cell): streaming millions of rows is this module's hot path.

use apiary::{DataType, ScalarValue};
use apiary_types::datetime::{
    civil_from_days, days_from_civil, format_time, format_timestamptz, parse_time, parse_timestamptz, Interval, MAX_TIME, MICROS_PER_DAY,
    MICROS_PER_SECOND,
};
use apiary_types::decimal::{format_decimal, parse_decimal_literal};
use apiary_types::TimeZone;
use apiary_types::Vector;
use bytes::{BufMut, BytesMut};

/// Days from 1970-01-01 (Apiary's epoch) to 2000-01-01 (PostgreSQL's).
const PG_EPOCH_DAYS: i32 = 10_957;
const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS as i64 * MICROS_PER_DAY;

/// A column's wire format (PostgreSQL's format codes 0 and 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Binary,
}

impl Format {
    pub fn code(self) -> i16 {
        match self {
            Format::Text => 0,
            Format::Binary => 1,
        }
    }

    /// The format of column `idx` from a Bind message's format codes: none means all
    /// text, one applies to every column, otherwise one per column.
    pub fn for_column(codes: &[i16], idx: usize) -> Result<Format, String> {
        let code = match codes {
            [] => 0,
            [one] => *one,
            many => *many.get(idx).ok_or_else(|| format!("no format code for column {}", idx + 1))?,
        };
        match code {
            0 => Ok(Format::Text),
            1 => Ok(Format::Binary),
            other => Err(format!("unsupported format code: {other}")),
        }
    }
}

/// An error in a parameter value: SQLSTATE and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueError {
    pub code: &'static str,
    pub message: String,
}

const INVALID_TEXT_REPRESENTATION: &str = "22P02";
const INVALID_BINARY_REPRESENTATION: &str = "22P03";
const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
const DATETIME_FIELD_OVERFLOW: &str = "22008";

/// Appends a DataRow field (length word and bytes, or -1 for NULL); TIMESTAMPTZ text is
/// shown in `zone`.
pub fn put_field(out: &mut BytesMut, vector: &Vector, row: usize, format: Format, zone: &TimeZone) {
    if vector.is_null(row) {
        out.put_i32(-1);
        return;
    }
    let len_at = out.len();
    out.put_i32(0);
    match format {
        Format::Text => put_text(out, vector, row, zone),
        Format::Binary => put_binary(out, vector, row),
    }
    let len = (out.len() - len_at - 4) as i32;
    out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
}

/// Appends the text form of a non-NULL value (no length word: COPY uses it too).
pub fn put_text(out: &mut BytesMut, vector: &Vector, row: usize, zone: &TimeZone) {
    match vector.data_type {
        DataType::Null => {}
        DataType::Boolean => out.put_u8(if vector.values::<bool>()[row] { b't' } else { b'f' }),
        DataType::SmallInt => put_integer(out, vector.values::<i16>()[row]),
        DataType::Integer => put_integer(out, vector.values::<i32>()[row]),
        DataType::BigInt => put_integer(out, vector.values::<i64>()[row]),
        DataType::Real => put_float(out, vector.values::<f32>()[row] as f64, ryu::Buffer::new().format(vector.values::<f32>()[row]), 6),
        DataType::Double => put_float(out, vector.values::<f64>()[row], ryu::Buffer::new().format(vector.values::<f64>()[row]), 15),
        DataType::Decimal { scale, .. } => {
            let value = decimal_value(vector, row);
            if scale == 0 {
                put_integer(out, value);
            } else {
                out.put_slice(format_decimal(value, scale).as_bytes());
            }
        }
        DataType::Char(_) | DataType::Varchar(_) => out.put_slice(vector.strings().get_bytes(row)),
        DataType::Date => put_date(out, vector.values::<i32>()[row]),
        DataType::Timestamp => put_timestamp(out, vector.values::<i64>()[row]),
        DataType::TimestampTz => out.put_slice(format_timestamptz(vector.values::<i64>()[row], zone).as_bytes()),
        DataType::Time => out.put_slice(format_time(vector.values::<i64>()[row]).as_bytes()),
        DataType::Interval => out.put_slice(vector.values::<Interval>()[row].to_string().as_bytes()),
    }
}

fn decimal_value(vector: &Vector, row: usize) -> i128 {
    match vector.data_type.physical() {
        apiary_types::PhysicalType::I64 => vector.values::<i64>()[row] as i128,
        _ => vector.values::<i128>()[row],
    }
}

fn put_integer<I: itoa::Integer>(out: &mut BytesMut, value: I) {
    out.put_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// PostgreSQL's float output: the shortest digits that read back as the same value
/// (what `shortest` holds, from ryu), laid out like `%g` with `exponent_limit`
/// significant digits (15 for DOUBLE, 6 for REAL).
fn put_float(out: &mut BytesMut, value: f64, shortest: &str, exponent_limit: i32) {
    if value.is_nan() {
        out.put_slice(b"NaN");
        return;
    }
    if value.is_infinite() {
        out.put_slice(if value > 0.0 { b"Infinity" } else { b"-Infinity" });
        return;
    }
    let (negative, unsigned) = match shortest.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, shortest),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (unsigned, 0),
    };
    let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: Vec<u8> = integer.bytes().chain(fraction.bytes()).collect();
    // The decimal point sits after `point` digits.
    let mut point = integer.len() as i32 + exponent;
    let leading = digits.iter().take_while(|&&d| d == b'0').count();
    digits.drain(..leading);
    point -= leading as i32;
    while digits.last() == Some(&b'0') {
        digits.pop();
    }
    if negative {
        out.put_u8(b'-');
    }
    if digits.is_empty() {
        out.put_u8(b'0');
        return;
    }
    let scientific = point - 1;
    if scientific < -4 || scientific >= exponent_limit {
        out.put_u8(digits[0]);
        if digits.len() > 1 {
            out.put_u8(b'.');
            out.put_slice(&digits[1..]);
        }
        out.put_slice(format!("e{}{:02}", if scientific < 0 { '-' } else { '+' }, scientific.unsigned_abs()).as_bytes());
    } else if point <= 0 {
        out.put_slice(b"0.");
        out.put_bytes(b'0', (-point) as usize);
        out.put_slice(&digits);
    } else if point as usize >= digits.len() {
        out.put_slice(&digits);
        out.put_bytes(b'0', point as usize - digits.len());
    } else {
        out.put_slice(&digits[..point as usize]);
        out.put_u8(b'.');
        out.put_slice(&digits[point as usize..]);
    }
}

/// `YYYY-MM-DD`, with ` BC` for years before 1 (astronomical year 0 is 1 BC).
fn put_date(out: &mut BytesMut, days: i32) {
    let (year, month, day) = civil_from_days(days);
    let (shown, bc) = if year <= 0 { (1 - year, true) } else { (year, false) };
    out.put_slice(format!("{shown:04}-{month:02}-{day:02}").as_bytes());
    if bc {
        out.put_slice(b" BC");
    }
}

fn put_timestamp(out: &mut BytesMut, micros: i64) {
    let days = micros.div_euclid(MICROS_PER_DAY);
    let time = micros.rem_euclid(MICROS_PER_DAY);
    let (year, month, day) = civil_from_days(days as i32);
    let (shown, bc) = if year <= 0 { (1 - year, true) } else { (year, false) };
    let seconds = time / MICROS_PER_SECOND;
    let fraction = time % MICROS_PER_SECOND;
    out.put_slice(
        format!("{shown:04}-{month:02}-{day:02} {:02}:{:02}:{:02}", seconds / 3600, (seconds / 60) % 60, seconds % 60).as_bytes(),
    );
    if fraction != 0 {
        out.put_slice(format!(".{fraction:06}").trim_end_matches('0').as_bytes());
    }
    if bc {
        out.put_slice(b" BC");
    }
}

/// Appends the binary form of a non-NULL value.
fn put_binary(out: &mut BytesMut, vector: &Vector, row: usize) {
    match vector.data_type {
        DataType::Null => {}
        DataType::Boolean => out.put_u8(vector.values::<bool>()[row] as u8),
        DataType::SmallInt => out.put_i16(vector.values::<i16>()[row]),
        DataType::Integer => out.put_i32(vector.values::<i32>()[row]),
        DataType::BigInt => out.put_i64(vector.values::<i64>()[row]),
        DataType::Real => out.put_f32(vector.values::<f32>()[row]),
        DataType::Double => out.put_f64(vector.values::<f64>()[row]),
        DataType::Decimal { scale, .. } => put_numeric_binary(out, decimal_value(vector, row), scale),
        DataType::Char(_) | DataType::Varchar(_) => out.put_slice(vector.strings().get_bytes(row)),
        DataType::Date => out.put_i32(vector.values::<i32>()[row].wrapping_sub(PG_EPOCH_DAYS)),
        DataType::Timestamp | DataType::TimestampTz => out.put_i64(vector.values::<i64>()[row].wrapping_sub(PG_EPOCH_MICROS)),
        DataType::Time => out.put_i64(vector.values::<i64>()[row]),
        DataType::Interval => {
            let interval = vector.values::<Interval>()[row];
            out.put_i64(interval.micros);
            out.put_i32(interval.days);
            out.put_i32(interval.months);
        }
    }
}

const NUMERIC_POSITIVE: u16 = 0x0000;
const NUMERIC_NEGATIVE: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;

/// PostgreSQL's binary NUMERIC: digit count, weight (power of 10000 of the first
/// digit), sign, display scale, then base-10000 digits without leading or trailing
/// zero digits.
fn put_numeric_binary(out: &mut BytesMut, value: i128, scale: u8) {
    let magnitude = value.unsigned_abs();
    let text = magnitude.to_string();
    let scale = scale as usize;
    let (integer, fraction) = if text.len() > scale {
        (text[..text.len() - scale].to_string(), text[text.len() - scale..].to_string())
    } else {
        (String::new(), format!("{}{text}", "0".repeat(scale - text.len())))
    };
    // Pad the integer part on the left and the fraction on the right to whole groups.
    let integer = format!("{}{integer}", "0".repeat((4 - integer.len() % 4) % 4));
    let fraction = format!("{fraction}{}", "0".repeat((4 - fraction.len() % 4) % 4));
    let group =
        |s: &str| -> Vec<u16> { s.as_bytes().chunks(4).map(|c| c.iter().fold(0u16, |acc, d| acc * 10 + (d - b'0') as u16)).collect() };
    let mut digits = group(&integer);
    let mut weight = digits.len() as i16 - 1;
    digits.extend(group(&fraction));
    let leading = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..leading);
    weight -= leading as i16;
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    out.put_i16(digits.len() as i16);
    out.put_i16(weight);
    out.put_u16(if value < 0 { NUMERIC_NEGATIVE } else { NUMERIC_POSITIVE });
    out.put_u16(scale as u16);
    for digit in digits {
        out.put_u16(digit);
    }
}

/// Decodes binary NUMERIC into its decimal text (`-12.50`).
fn numeric_binary_to_text(bytes: &[u8]) -> Result<String, ValueError> {
    let invalid = |why: &str| ValueError { code: INVALID_BINARY_REPRESENTATION, message: format!("invalid binary numeric: {why}") };
    if bytes.len() < 8 {
        return Err(invalid("shorter than its header"));
    }
    let word = |i: usize| u16::from_be_bytes([bytes[i], bytes[i + 1]]);
    let count = word(0) as usize;
    let weight = word(2) as i16 as i32;
    let sign = word(4);
    let scale = word(6) as usize;
    if bytes.len() != 8 + 2 * count {
        return Err(invalid("digit count does not match the length"));
    }
    if sign == NUMERIC_NAN {
        return Err(ValueError { code: "0A000", message: "NaN is not a valid NUMERIC value in Apiary".to_string() });
    }
    if sign != NUMERIC_POSITIVE && sign != NUMERIC_NEGATIVE {
        return Err(invalid("invalid sign"));
    }
    if scale > 1000 || weight.unsigned_abs() > 1000 {
        return Err(ValueError { code: NUMERIC_VALUE_OUT_OF_RANGE, message: "numeric parameter out of range".to_string() });
    }
    let mut digits = Vec::with_capacity(count);
    for i in 0..count {
        let digit = word(8 + 2 * i);
        if digit >= 10_000 {
            return Err(invalid("a digit is 10000 or more"));
        }
        digits.push(digit);
    }
    // Base-10000 digit `i` has weight `weight - i`.
    let mut integer = String::new();
    for power in (0..=weight.max(-1)).rev() {
        let idx = weight - power;
        let digit = if idx >= 0 && (idx as usize) < digits.len() { digits[idx as usize] } else { 0 };
        if integer.is_empty() {
            if digit != 0 {
                integer.push_str(&digit.to_string());
            }
        } else {
            integer.push_str(&format!("{digit:04}"));
        }
    }
    if integer.is_empty() {
        integer.push('0');
    }
    let mut fraction = String::new();
    let mut power = -1;
    while (fraction.len()) < scale {
        let idx = weight - power;
        let digit = if idx >= 0 && (idx as usize) < digits.len() { digits[idx as usize] } else { 0 };
        fraction.push_str(&format!("{digit:04}"));
        power -= 1;
    }
    fraction.truncate(scale);
    let sign = if sign == NUMERIC_NEGATIVE { "-" } else { "" };
    Ok(if scale > 0 { format!("{sign}{integer}.{fraction}") } else { format!("{sign}{integer}") })
}

/// A parameter value from Bind, decoded for the type the statement's description gave
/// `$n` (declared by the client or inferred; TEXT when nothing fixed it). TIMESTAMPTZ
/// text without a zone is read in `zone`, the session's.
pub fn parameter_value(value: Option<&[u8]>, format: Format, data_type: DataType, zone: &TimeZone) -> Result<ScalarValue, ValueError> {
    let Some(bytes) = value else {
        return Ok(ScalarValue::Null);
    };
    match format {
        Format::Text => text_parameter(utf8(bytes)?, data_type, zone),
        Format::Binary => binary_parameter(bytes, data_type),
    }
}

fn utf8(bytes: &[u8]) -> Result<&str, ValueError> {
    std::str::from_utf8(bytes)
        .map_err(|_| ValueError { code: "22021", message: "invalid byte sequence for encoding \"UTF8\" in a parameter".to_string() })
}

fn invalid_text(data_type: DataType, text: &str) -> ValueError {
    ValueError {
        code: INVALID_TEXT_REPRESENTATION,
        message: format!("invalid input syntax for type {}: \"{}\"", apiary_types::pg::pg_type(data_type).sql_name, truncate(text, 200)),
    }
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

fn nan_numeric() -> ValueError {
    ValueError { code: "0A000", message: "NaN is not a valid NUMERIC value in Apiary".to_string() }
}

fn text_parameter(text: &str, data_type: DataType, zone: &TimeZone) -> Result<ScalarValue, ValueError> {
    let trimmed = text.trim();
    let out_of_range = || ValueError {
        code: NUMERIC_VALUE_OUT_OF_RANGE,
        message: format!("value \"{}\" is out of range for type {}", truncate(trimmed, 200), apiary_types::pg::pg_type(data_type).sql_name),
    };
    let integer = |min: i128, max: i128| -> Result<i128, ValueError> {
        let value: i128 = trimmed.parse().map_err(|_| {
            if trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'-' || b == b'+') && !trimmed.is_empty() {
                out_of_range()
            } else {
                invalid_text(data_type, text)
            }
        })?;
        if value < min || value > max {
            return Err(out_of_range());
        }
        Ok(value)
    };
    match data_type {
        DataType::Boolean => match trimmed.to_ascii_lowercase().as_str() {
            "t" | "true" | "y" | "yes" | "on" | "1" => Ok(ScalarValue::Boolean(true)),
            "f" | "false" | "n" | "no" | "off" | "0" => Ok(ScalarValue::Boolean(false)),
            _ => Err(invalid_text(data_type, text)),
        },
        DataType::SmallInt => Ok(ScalarValue::Int16(integer(i16::MIN as i128, i16::MAX as i128)? as i16)),
        DataType::Integer => Ok(ScalarValue::Int32(integer(i32::MIN as i128, i32::MAX as i128)? as i32)),
        DataType::BigInt => Ok(ScalarValue::Int64(integer(i64::MIN as i128, i64::MAX as i128)? as i64)),
        DataType::Real | DataType::Double => {
            let value: f64 = match trimmed.to_ascii_lowercase().as_str() {
                "infinity" | "inf" | "+infinity" | "+inf" => f64::INFINITY,
                "-infinity" | "-inf" => f64::NEG_INFINITY,
                "nan" => f64::NAN,
                other => other.parse().map_err(|_| invalid_text(data_type, text))?,
            };
            Ok(if data_type == DataType::Real { ScalarValue::Float32(value as f32) } else { ScalarValue::Float64(value) })
        }
        DataType::Decimal { .. } => {
            // The value keeps its own precision and scale (the statement's context
            // converts it), so '1.234' compared with a NUMERIC(15,2) column is not
            // rounded first.
            if trimmed.eq_ignore_ascii_case("nan") {
                return Err(nan_numeric());
            }
            let (value, precision, scale) = parse_decimal_literal(trimmed).ok_or_else(|| invalid_text(data_type, text))?;
            if precision > 38 {
                return Err(out_of_range());
            }
            Ok(ScalarValue::Decimal(value, precision.max(1), scale))
        }
        DataType::Char(_) | DataType::Varchar(_) | DataType::Null => Ok(ScalarValue::Utf8(text.to_string())),
        DataType::Date => Ok(ScalarValue::Date(parse_date_text(trimmed).ok_or_else(|| invalid_text(data_type, text))?)),
        DataType::Timestamp => Ok(ScalarValue::Timestamp(parse_timestamp_text(trimmed).ok_or_else(|| invalid_text(data_type, text))?)),
        DataType::TimestampTz => {
            Ok(ScalarValue::TimestampTz(parse_timestamptz(trimmed, zone).ok_or_else(|| invalid_text(data_type, text))?))
        }
        DataType::Time => Ok(ScalarValue::Time(parse_time(trimmed).ok_or_else(|| invalid_text(data_type, text))?)),
        DataType::Interval => Ok(ScalarValue::Interval(Interval::parse(trimmed, None).ok_or_else(|| invalid_text(data_type, text))?)),
    }
}

/// Dates as clients send them: ISO `YYYY-MM-DD`, optionally with ` BC`.
fn parse_date_text(text: &str) -> Option<i32> {
    match text.strip_suffix(" BC").or_else(|| text.strip_suffix(" bc")) {
        Some(date) => {
            let (year, rest) = date.split_once('-')?;
            let year: i32 = year.parse().ok()?;
            let (_, month, day) = parse_month_day(rest)?;
            Some(days_from_civil(1 - year, month, day))
        }
        None => apiary_types::datetime::parse_date(text),
    }
}

/// `MM-DD` of a date, checked against the calendar of year 2000 (a leap year, so that
/// 02-29 passes; a BC year's own leap rule is not checked).
fn parse_month_day(text: &str) -> Option<(i32, u32, u32)> {
    let (month, day) = text.split_once('-')?;
    let (month, day): (u32, u32) = (month.parse().ok()?, day.parse().ok()?);
    apiary_types::datetime::parse_date(&format!("2000-{month:02}-{day:02}"))?;
    Some((2000, month, day))
}

fn parse_timestamp_text(text: &str) -> Option<i64> {
    // psycopg and JDBC may add a zone offset to a timestamp without time zone
    // (`2024-01-02 03:04:05+00`); PostgreSQL ignores it for this type.
    let without_zone = match text.rfind(['+', '-']) {
        Some(pos) if pos > 10 && text[pos + 1..].bytes().all(|b| b.is_ascii_digit() || b == b':') => &text[..pos],
        _ => text,
    };
    apiary_types::datetime::parse_timestamp(without_zone.trim_end_matches('Z'))
}

fn binary_parameter(bytes: &[u8], data_type: DataType) -> Result<ScalarValue, ValueError> {
    let wrong_length = |expected: usize| ValueError {
        code: INVALID_BINARY_REPRESENTATION,
        message: format!(
            "incorrect binary data format: a {} value takes {expected} bytes, not {}",
            apiary_types::pg::pg_type(data_type).sql_name,
            bytes.len()
        ),
    };
    // Fixed-size values as arrays: the length is checked once, no indexing can fail.
    fn array<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
        bytes.try_into().ok()
    }
    match data_type {
        DataType::Boolean => Ok(ScalarValue::Boolean(array::<1>(bytes).ok_or_else(|| wrong_length(1))?[0] != 0)),
        DataType::SmallInt => Ok(ScalarValue::Int16(i16::from_be_bytes(array(bytes).ok_or_else(|| wrong_length(2))?))),
        DataType::Integer => Ok(ScalarValue::Int32(i32::from_be_bytes(array(bytes).ok_or_else(|| wrong_length(4))?))),
        DataType::BigInt => Ok(ScalarValue::Int64(i64::from_be_bytes(array(bytes).ok_or_else(|| wrong_length(8))?))),
        DataType::Real => Ok(ScalarValue::Float32(f32::from_be_bytes(array(bytes).ok_or_else(|| wrong_length(4))?))),
        DataType::Double => Ok(ScalarValue::Float64(f64::from_be_bytes(array(bytes).ok_or_else(|| wrong_length(8))?))),
        DataType::Decimal { .. } => {
            let text = numeric_binary_to_text(bytes)?;
            match parse_decimal_literal(&text) {
                Some((value, precision, scale)) if precision <= 38 => Ok(ScalarValue::Decimal(value, precision.max(1), scale)),
                _ => Err(ValueError {
                    code: NUMERIC_VALUE_OUT_OF_RANGE,
                    message: format!("numeric value {} has more than 38 digits", truncate(&text, 60)),
                }),
            }
        }
        DataType::Char(_) | DataType::Varchar(_) | DataType::Null => Ok(ScalarValue::Utf8(utf8(bytes)?.to_string())),
        DataType::Date => {
            let days = i32::from_be_bytes(array(bytes).ok_or_else(|| wrong_length(4))?);
            Ok(ScalarValue::Date(days.checked_add(PG_EPOCH_DAYS).ok_or_else(date_out_of_range)?))
        }
        DataType::Timestamp => {
            let micros = i64::from_be_bytes(array(bytes).ok_or_else(|| wrong_length(8))?);
            Ok(ScalarValue::Timestamp(micros.checked_add(PG_EPOCH_MICROS).ok_or_else(date_out_of_range)?))
        }
        DataType::TimestampTz => {
            let micros = i64::from_be_bytes(array(bytes).ok_or_else(|| wrong_length(8))?);
            Ok(ScalarValue::TimestampTz(micros.checked_add(PG_EPOCH_MICROS).ok_or_else(date_out_of_range)?))
        }
        DataType::Time => {
            let micros = i64::from_be_bytes(array(bytes).ok_or_else(|| wrong_length(8))?);
            if !(0..=MAX_TIME).contains(&micros) {
                return Err(date_out_of_range());
            }
            Ok(ScalarValue::Time(micros))
        }
        DataType::Interval => {
            let b: [u8; 16] = array(bytes).ok_or_else(|| wrong_length(16))?;
            let [m0, m1, m2, m3, m4, m5, m6, m7, d0, d1, d2, d3, n0, n1, n2, n3] = b;
            let micros = i64::from_be_bytes([m0, m1, m2, m3, m4, m5, m6, m7]);
            let days = i32::from_be_bytes([d0, d1, d2, d3]);
            let months = i32::from_be_bytes([n0, n1, n2, n3]);
            Ok(ScalarValue::Interval(Interval::new(months, days, micros)))
        }
    }
}

fn date_out_of_range() -> ValueError {
    ValueError { code: DATETIME_FIELD_OVERFLOW, message: "date/time parameter out of range".to_string() }
}

/// A value as text the way [`put_text`] writes it (for results built row by row;
/// TIMESTAMPTZ in UTC).
pub fn scalar_text(value: &ScalarValue) -> Option<String> {
    if value.is_null() {
        return None;
    }
    let vector = Vector::from_scalar(value, value.data_type(), 1);
    let mut out = BytesMut::new();
    put_text(&mut out, &vector, 0, &TimeZone::UTC);
    Some(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(value: ScalarValue) -> String {
        scalar_text(&value).unwrap()
    }

    #[test]
    fn floats_print_like_postgres() {
        let cases: [(f64, &str); 12] = [
            (1e15, "1e+15"),
            (1e14, "100000000000000"),
            (123456789012345.0, "123456789012345"),
            (1234567890123456.0, "1.234567890123456e+15"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e300, "1e+300"),
            (0.1, "0.1"),
            (-2.0, "-2"),
            (100.0, "100"),
            (1.0 / 3.0, "0.3333333333333333"),
            (0.0, "0"),
        ];
        for (value, expected) in cases {
            assert_eq!(text_of(ScalarValue::Float64(value)), expected, "{value}");
        }
        assert_eq!(text_of(ScalarValue::Float64(f64::NAN)), "NaN");
        assert_eq!(text_of(ScalarValue::Float64(f64::NEG_INFINITY)), "-Infinity");
        assert_eq!(text_of(ScalarValue::Float32(1.5)), "1.5");
        assert_eq!(text_of(ScalarValue::Float32(1e16)), "1e+16");
        assert_eq!(text_of(ScalarValue::Float32(1.0e-7)), "1e-07");
        assert_eq!(text_of(ScalarValue::Float32(12345678.0)), "1.2345678e+07");
    }

    #[test]
    fn dates_and_times_print_like_postgres() {
        assert_eq!(text_of(ScalarValue::Date(0)), "1970-01-01");
        assert_eq!(text_of(ScalarValue::Date(days_from_civil(1, 1, 1) - 1)), "0001-12-31 BC");
        let micros = apiary_types::datetime::parse_timestamp("2020-01-01 10:00:00.12").unwrap();
        assert_eq!(text_of(ScalarValue::Timestamp(micros)), "2020-01-01 10:00:00.12");
        assert_eq!(text_of(ScalarValue::Interval(Interval::new(0, 1, -3_600_000_000))), "1 day -01:00:00");
        assert_eq!(text_of(ScalarValue::Decimal(150, 10, 2)), "1.50");
        assert_eq!(text_of(ScalarValue::Boolean(true)), "t");
        assert_eq!(text_of(ScalarValue::Time(parse_time("10:30:00.5").unwrap())), "10:30:00.5");
        let instant = ScalarValue::TimestampTz(micros);
        assert_eq!(text_of(instant.clone()), "2020-01-01 10:00:00.12+00");
        let (vienna, _) = TimeZone::from_setting("Europe/Vienna").unwrap();
        let vector = Vector::from_scalar(&instant, DataType::TimestampTz, 1);
        let mut out = BytesMut::new();
        put_text(&mut out, &vector, 0, &vienna);
        assert_eq!(&out[..], b"2020-01-01 11:00:00.12+01");
        // Binary: microseconds since 2000-01-01 UTC, whatever the session's zone.
        out.clear();
        put_binary(&mut out, &vector, 0);
        assert_eq!(&out[..], &(micros - PG_EPOCH_MICROS).to_be_bytes());
    }

    fn numeric_round_trip(value: i128, scale: u8) -> String {
        let mut out = BytesMut::new();
        put_numeric_binary(&mut out, value, scale);
        numeric_binary_to_text(&out).unwrap()
    }

    #[test]
    fn binary_numeric_round_trips() {
        assert_eq!(numeric_round_trip(0, 2), "0.00");
        assert_eq!(numeric_round_trip(150, 2), "1.50");
        assert_eq!(numeric_round_trip(-123456789, 3), "-123456.789");
        assert_eq!(numeric_round_trip(1, 6), "0.000001");
        assert_eq!(numeric_round_trip(100000000, 0), "100000000");
        assert_eq!(numeric_round_trip(i128::from(i64::MAX), 0), i64::MAX.to_string());
        // PostgreSQL's encoding of 1.50: one digit (1), weight 0, scale 2, then 5000.
        let mut out = BytesMut::new();
        put_numeric_binary(&mut out, 150, 2);
        assert_eq!(&out[..], &[0, 2, 0, 0, 0, 0, 0, 2, 0, 1, 0x13, 0x88]);
        assert!(numeric_binary_to_text(&[0, 5, 0, 0]).is_err());
        assert!(numeric_binary_to_text(&[0, 1, 0, 0, 0, 0, 0, 0, 0xff, 0xff]).is_err());
    }

    #[test]
    fn parameters_decode_to_values() {
        let value = |bytes: Option<&[u8]>, format, t| parameter_value(bytes, format, t, &TimeZone::UTC);
        assert_eq!(value(Some(b" 42 "), Format::Text, DataType::Integer).unwrap(), ScalarValue::Int32(42));
        assert_eq!(value(Some(b"it's"), Format::Text, DataType::Varchar(None)).unwrap(), ScalarValue::Utf8("it's".into()));
        assert_eq!(value(Some(&7i64.to_be_bytes()), Format::Binary, DataType::BigInt).unwrap(), ScalarValue::Int64(7));
        assert_eq!(value(None, Format::Text, DataType::Date).unwrap(), ScalarValue::Null);
        assert_eq!(value(Some(b"-1.50"), Format::Text, DataType::decimal(10, 2)).unwrap(), ScalarValue::Decimal(-150, 3, 2));
        assert_eq!(value(Some(b"99999"), Format::Text, DataType::SmallInt).unwrap_err().code, "22003");
        assert_eq!(value(Some(b"abc"), Format::Text, DataType::Integer).unwrap_err().code, "22P02");
        assert_eq!(value(Some(&[1, 2, 3]), Format::Binary, DataType::Integer).unwrap_err().code, "22P03");
        let leap = apiary_types::datetime::parse_date("2024-02-29").unwrap();
        assert_eq!(value(Some(b"2024-02-29"), Format::Text, DataType::Date).unwrap(), ScalarValue::Date(leap));
        assert_eq!(value(Some(&0i32.to_be_bytes()), Format::Binary, DataType::Date).unwrap(), ScalarValue::Date(PG_EPOCH_DAYS));
        assert_eq!(value(Some(b"0001-01-01 BC"), Format::Text, DataType::Date).unwrap(), ScalarValue::Date(days_from_civil(0, 1, 1)));
        assert!(value(Some(b"0001-02-30 BC"), Format::Text, DataType::Date).is_err());
        assert_eq!(value(Some(&[0xff; 3]), Format::Text, DataType::Varchar(None)).unwrap_err().code, "22021");
        assert_eq!(value(Some(b"NaN"), Format::Text, DataType::decimal(10, 2)).unwrap_err().code, "0A000");
        // TIMESTAMPTZ text without a zone is read in the session's zone.
        let (vienna, _) = TimeZone::from_setting("Europe/Vienna").unwrap();
        let utc_ten = apiary_types::datetime::parse_timestamp("2024-01-31 10:00:00").unwrap();
        let local = parameter_value(Some(b"2024-01-31 11:00:00"), Format::Text, DataType::TimestampTz, &vienna).unwrap();
        assert_eq!(local, ScalarValue::TimestampTz(utc_ten));
        assert_eq!(value(Some(b"2024-01-31 10:00:00+00"), Format::Text, DataType::TimestampTz).unwrap(), ScalarValue::TimestampTz(utc_ten));
        assert_eq!(
            value(Some(&(utc_ten - PG_EPOCH_MICROS).to_be_bytes()), Format::Binary, DataType::TimestampTz).unwrap(),
            ScalarValue::TimestampTz(utc_ten)
        );
        assert_eq!(value(Some(b"25:00"), Format::Text, DataType::Time).unwrap_err().code, "22P02");
        assert_eq!(value(Some(&3_600_000_000i64.to_be_bytes()), Format::Binary, DataType::Time).unwrap(), ScalarValue::Time(3_600_000_000));
        assert_eq!(value(Some(&(-1i64).to_be_bytes()), Format::Binary, DataType::Time).unwrap_err().code, "22008");
    }
}
