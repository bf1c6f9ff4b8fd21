//! CAST between types.
//!
//! The common numeric conversions (integer widening, integer/decimal/float conversions,
//! decimal rescaling) are typed loops; conversions from and to text go value by value
//! through the scalar parsers and formatters.

use std::sync::Arc;

use apiary_common::{exec_err, Result};
use apiary_types::datatype::PhysicalType;
use apiary_types::datetime::{self, Interval, MICROS_PER_DAY};
use apiary_types::decimal::{self, div_round, POW10};
use apiary_types::scalar::{format_float, format_float32};
use apiary_types::vector::NativeType;
use apiary_types::{DataChunk, DataType, StrColumnBuilder, TimeZone, Vector, VectorBuilder, VectorData};

use super::{rows_of, ExprRef, PhysicalExpr};

#[derive(Debug)]
struct Cast {
    child: ExprRef,
    to: DataType,
    /// The session's time zone (conversions between TIMESTAMPTZ and local times, text).
    zone: TimeZone,
}

pub fn cast_expr(child: ExprRef, to: DataType, zone: TimeZone) -> ExprRef {
    Arc::new(Cast { child, to, zone })
}

impl PhysicalExpr for Cast {
    fn data_type(&self) -> DataType {
        self.to
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        cast_vector_in(&v, self.to, rows_of(chunk), &self.zone)
    }
}

/// `TRY_CAST`: the cast, with NULL for the rows whose conversion fails.
#[derive(Debug)]
struct TryCast {
    child: ExprRef,
    to: DataType,
    zone: TimeZone,
}

pub fn try_cast_expr(child: ExprRef, to: DataType, zone: TimeZone) -> ExprRef {
    Arc::new(TryCast { child, to, zone })
}

impl PhysicalExpr for TryCast {
    fn data_type(&self) -> DataType {
        self.to
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let rows = rows_of(chunk);
        if let Ok(cast) = cast_vector_in(&v, self.to, rows, &self.zone) {
            return Ok(cast);
        }
        // Some value does not convert: row by row, NULL where it fails (rare: the
        // vector-wide cast above is the common path).
        let mut builder = VectorBuilder::with_capacity(self.to, v.len());
        let mut selected = vec![rows.is_none(); v.len()];
        if let Some(rows) = rows {
            rows.iter().for_each(|&r| selected[r as usize] = true);
        }
        for (i, selected) in selected.into_iter().enumerate() {
            if !selected || v.is_null(i) {
                builder.push_null();
                continue;
            }
            match cast_vector_in(&v.slice(i, 1), self.to, None, &self.zone) {
                Ok(one) => builder.push_scalar(&one.get_scalar(0)),
                Err(_) => builder.push_null(),
            }
        }
        Ok(builder.finish())
    }
}

/// Converts `f(value)` for every selected valid row; `None` from `f` is an error.
fn convert<A: NativeType, B: NativeType>(v: &Vector, to: DataType, rows: Option<&[u32]>, f: impl Fn(A) -> Option<B>) -> Result<Vector> {
    let values = v.values::<A>();
    let mut out = vec![B::default(); v.len()];
    let mut failed: Option<A> = None;
    super::for_each_row(v.len(), rows, |i| {
        if failed.is_none() && v.is_valid(i) {
            match f(values[i]) {
                Some(x) => out[i] = x,
                None => failed = Some(values[i]),
            }
        }
    });
    if let Some(value) = failed {
        return Err(exec_err!("value {value:?} of type {} is out of range for {to}", v.data_type));
    }
    Ok(Vector::new(to, B::wrap(out.into()), v.validity.clone()))
}

/// Integer-valued source as i128 (for integer and decimal targets).
fn integer_values(v: &Vector) -> Option<Vec<i128>> {
    Some(match &v.data {
        VectorData::I16(b) => b.iter().map(|&x| x as i128).collect(),
        VectorData::I32(b) => b.iter().map(|&x| x as i128).collect(),
        VectorData::I64(b) => b.iter().map(|&x| x as i128).collect(),
        VectorData::I128(b) => b.to_vec(),
        VectorData::Bool(b) => b.iter().map(|&x| x as i128).collect(),
        _ => return None,
    })
}

/// Builds a vector of type `to` from scaled integer values (integers and decimals);
/// `f` maps a source value to the target's scaled value (`None` = out of range).
fn from_i128(values: &[i128], v: &Vector, to: DataType, rows: Option<&[u32]>, f: impl Fn(i128) -> Option<i128>) -> Result<Vector> {
    let len = v.len();
    let mut failure: Option<i128> = None;
    macro_rules! narrow {
        ($t:ty) => {{
            let mut out = vec![<$t>::default(); len];
            super::for_each_row(len, rows, |i| {
                if failure.is_none() && v.is_valid(i) {
                    match f(values[i]).and_then(|y| <$t>::try_from(y).ok()) {
                        Some(x) => out[i] = x,
                        None => failure = Some(values[i]),
                    }
                }
            });
            <$t>::wrap(out.into())
        }};
    }
    let data = match to.physical() {
        PhysicalType::I16 => narrow!(i16),
        PhysicalType::I32 => narrow!(i32),
        PhysicalType::I64 => narrow!(i64),
        PhysicalType::I128 => narrow!(i128),
        PhysicalType::Bool => VectorData::Bool(values.iter().map(|&x| x != 0).collect::<Vec<_>>().into()),
        _ => return Err(exec_err!("cannot cast {} to {to}", v.data_type)),
    };
    if let Some(x) = failure {
        return Err(exec_err!("value {} is out of range for {to}", display_scaled(x, v.data_type)));
    }
    Ok(Vector::new(to, data, v.validity.clone()))
}

fn display_scaled(value: i128, data_type: DataType) -> String {
    match data_type {
        DataType::Decimal { scale, .. } => decimal::format_decimal(value, scale),
        _ => value.to_string(),
    }
}

/// Casts a vector to `to` (SQL explicit-cast semantics); conversions that need a time
/// zone use UTC.
pub fn cast_vector(v: &Vector, to: DataType, rows: Option<&[u32]>) -> Result<Vector> {
    cast_vector_in(v, to, rows, &TimeZone::UTC)
}

/// [`cast_vector`] in the session's time zone `zone`: TIMESTAMPTZ values are shown,
/// read and converted to and from local dates, times and timestamps in it.
pub fn cast_vector_in(v: &Vector, to: DataType, rows: Option<&[u32]>, zone: &TimeZone) -> Result<Vector> {
    let from = v.data_type;
    if from == to {
        return Ok(v.clone());
    }
    if from == DataType::Null {
        return Ok(Vector::nulls(to, v.len()));
    }
    use DataType as D;
    // Strings to strings: relabel, truncating to a bounded target length.
    if from.is_string() && to.is_string() {
        return cast_string_to_string(v, to, rows);
    }
    if to.is_string() {
        return cast_to_string(v, to, rows, zone);
    }
    if from.is_string() {
        return cast_from_string(v, to, rows, zone);
    }
    if let Some(vector) = lossless_decimal_widening(v, to) {
        return Ok(vector);
    }
    match (from, to) {
        (f, t) if (f.is_integer() || f == D::Boolean) && (t.is_integer() || t == D::Boolean) => {
            let values = integer_values(v).expect("integer source");
            from_i128(&values, v, to, rows, Some)
        }
        (f, D::Decimal { precision, scale }) if f.is_integer() || f.is_decimal() => {
            let from_scale = match f {
                D::Decimal { scale, .. } => scale,
                _ => 0,
            };
            let values = integer_values(v).expect("integer or decimal source");
            from_i128(&values, v, to, rows, move |x| {
                decimal::rescale(x, from_scale, scale).filter(|y| decimal::fits_precision(*y, precision))
            })
        }
        (D::Decimal { scale, .. }, t) if t.is_integer() => {
            let values = integer_values(v).expect("decimal source");
            let divisor = POW10[scale as usize];
            from_i128(&values, v, to, rows, move |x| Some(div_round(x, divisor)))
        }
        (D::Decimal { scale, .. }, D::Real | D::Double) => {
            let values = integer_values(v).expect("decimal source");
            let scratch = Vector::new(D::decimal(38, scale), VectorData::I128(values.into()), v.validity.clone());
            let divisor = POW10[scale as usize] as f64;
            if to == D::Double {
                convert::<i128, f64>(&scratch, to, rows, |x| Some(x as f64 / divisor))
            } else {
                convert::<i128, f32>(&scratch, to, rows, |x| Some((x as f64 / divisor) as f32))
            }
        }
        (f, D::Real | D::Double) if f.is_integer() || f == D::Boolean => {
            let values = integer_values(v).expect("integer source");
            let scratch = Vector::new(D::decimal(38, 0), VectorData::I128(values.into()), v.validity.clone());
            if to == D::Double {
                convert::<i128, f64>(&scratch, to, rows, |x| Some(x as f64))
            } else {
                convert::<i128, f32>(&scratch, to, rows, |x| Some(x as f32))
            }
        }
        (D::Real, D::Double) => convert::<f32, f64>(v, to, rows, |x| Some(x as f64)),
        (D::Double, D::Real) => convert::<f64, f32>(v, to, rows, |x| {
            let y = x as f32;
            (y.is_finite() || !x.is_finite()).then_some(y)
        }),
        (D::Real | D::Double, t) if t.is_integer() || t.is_decimal() => {
            let floats: Vec<f64> = match &v.data {
                VectorData::F32(b) => b.iter().map(|&x| x as f64).collect(),
                VectorData::F64(b) => b.to_vec(),
                _ => unreachable!("float source"),
            };
            let scale = match t {
                D::Decimal { scale, .. } => scale,
                _ => 0,
            };
            let precision = match t {
                D::Decimal { precision, .. } => precision,
                _ => 38,
            };
            let factor = POW10[scale as usize] as f64;
            let scratch = Vector::new(D::Double, VectorData::F64(floats.into()), v.validity.clone());
            let scaled = convert::<f64, i128>(&scratch, D::decimal(38, scale), rows, |x| {
                // Integers: ties to even (PostgreSQL's rint); decimals: half away from zero.
                let y = if t.is_integer() { (x * factor).round_ties_even() } else { (x * factor).round() };
                (y.is_finite() && y.abs() < 1e38).then_some(y as i128)
            })
            .map_err(|_| exec_err!("a {from} value is out of range for {to}"))?;
            let values = scaled.values::<i128>().to_vec();
            from_i128(&values, v, to, rows, move |x| if t.is_decimal() && !decimal::fits_precision(x, precision) { None } else { Some(x) })
        }
        (D::Date, D::Timestamp) => convert::<i32, i64>(v, to, rows, |d| (d as i64).checked_mul(MICROS_PER_DAY)),
        (D::Timestamp, D::Date) => convert::<i64, i32>(v, to, rows, |t| i32::try_from(t.div_euclid(MICROS_PER_DAY)).ok()),
        // TIMESTAMPTZ meets local dates and times in the session's zone.
        (D::Date, D::TimestampTz) => convert::<i32, i64>(v, to, rows, |d| zone.to_utc((d as i64).checked_mul(MICROS_PER_DAY)?)),
        (D::Timestamp, D::TimestampTz) => convert::<i64, i64>(v, to, rows, |t| zone.to_utc(t)),
        (D::TimestampTz, D::Timestamp) => convert::<i64, i64>(v, to, rows, |t| zone.to_local(t)),
        (D::TimestampTz, D::Date) => convert::<i64, i32>(v, to, rows, |t| i32::try_from(zone.to_local(t)?.div_euclid(MICROS_PER_DAY)).ok()),
        (D::TimestampTz, D::Time) => convert::<i64, i64>(v, to, rows, |t| Some(datetime::time_of_timestamp(zone.to_local(t)?))),
        (D::Timestamp, D::Time) => convert::<i64, i64>(v, to, rows, |t| Some(datetime::time_of_timestamp(t))),
        (D::Time, D::Interval) => convert::<i64, Interval>(v, to, rows, |t| Some(Interval::new(0, 0, t))),
        (D::Interval, D::Time) => convert::<Interval, i64>(v, to, rows, |i| Some(i.micros.rem_euclid(MICROS_PER_DAY))),
        _ => Err(exec_err!("cannot cast {from} to {to}")),
    }
}

/// Integer or decimal to a decimal that holds every source value exactly (scale not
/// smaller, enough integer digits): a plain multiply-and-widen loop, no checks needed.
fn lossless_decimal_widening(v: &Vector, to: DataType) -> Option<Vector> {
    let (from_precision, from_scale) = v.data_type.as_decimal()?;
    let DataType::Decimal { precision, scale } = to else { return None };
    if scale < from_scale || (precision as i32 - scale as i32) < (from_precision as i32 - from_scale as i32) {
        return None;
    }
    let factor = POW10[(scale - from_scale) as usize];
    fn widen<S: Copy, T: NativeType>(values: &[S], f: impl Fn(S) -> T) -> Vec<T> {
        values.iter().map(|&x| f(x)).collect()
    }
    let data = match (&v.data, to.physical()) {
        (VectorData::I16(b), PhysicalType::I64) => i64::wrap(widen(b, |x| x as i64 * factor as i64).into()),
        (VectorData::I32(b), PhysicalType::I64) => i64::wrap(widen(b, |x| x as i64 * factor as i64).into()),
        (VectorData::I64(b), PhysicalType::I64) => i64::wrap(widen(b, |x| x * factor as i64).into()),
        (VectorData::I16(b), PhysicalType::I128) => i128::wrap(widen(b, |x| x as i128 * factor).into()),
        (VectorData::I32(b), PhysicalType::I128) => i128::wrap(widen(b, |x| x as i128 * factor).into()),
        (VectorData::I64(b), PhysicalType::I128) => i128::wrap(widen(b, |x| x as i128 * factor).into()),
        (VectorData::I128(b), PhysicalType::I128) => i128::wrap(widen(b, |x| x * factor).into()),
        _ => return None,
    };
    Some(Vector::new(to, data, v.validity.clone()))
}

fn cast_string_to_string(v: &Vector, to: DataType, rows: Option<&[u32]>) -> Result<Vector> {
    let limit = to.max_length();
    let is_char = matches!(to, DataType::Char(_));
    let strings = v.strings();
    let needs_rewrite = is_char
        || limit.is_some_and(|n| {
            let mut too_long = false;
            super::for_each_row(v.len(), rows, |i| too_long |= strings.get(i).chars().count() > n as usize);
            too_long
        });
    if !needs_rewrite {
        return Ok(Vector::new(to, v.data.clone(), v.validity.clone()));
    }
    let mut builder = StrColumnBuilder::with_capacity(v.len());
    let selected = selected_mask(v.len(), rows);
    for (i, selected) in selected.iter().enumerate() {
        if !selected || v.is_null(i) {
            builder.push_empty();
            continue;
        }
        let mut text: &str = strings.get(i);
        if is_char {
            text = text.trim_end_matches(' ');
        }
        match limit {
            Some(n) => match text.char_indices().nth(n as usize) {
                Some((cut, _)) => builder.push(&text[..cut]),
                None => builder.push(text),
            },
            None => builder.push(text),
        }
    }
    Ok(Vector::new(to, VectorData::Str(builder.finish()), v.validity.clone()))
}

fn selected_mask(len: usize, rows: Option<&[u32]>) -> Vec<bool> {
    match rows {
        None => vec![true; len],
        Some(rows) => {
            let mut mask = vec![false; len];
            rows.iter().for_each(|&r| mask[r as usize] = true);
            mask
        }
    }
}

fn cast_to_string(v: &Vector, to: DataType, rows: Option<&[u32]>, zone: &TimeZone) -> Result<Vector> {
    let mut builder = StrColumnBuilder::with_capacity(v.len());
    let selected = selected_mask(v.len(), rows);
    let limit = to.max_length();
    let mut text = String::new();
    for (i, selected) in selected.iter().enumerate() {
        if !selected || v.is_null(i) {
            builder.push_empty();
            continue;
        }
        text.clear();
        format_value_in(v, i, &mut text, zone);
        match limit.and_then(|n| text.char_indices().nth(n as usize)) {
            Some((cut, _)) => builder.push(&text[..cut]),
            None => builder.push(&text),
        }
    }
    Ok(Vector::new(to, VectorData::Str(builder.finish()), v.validity.clone()))
}

/// Appends the text form of row `i` (not NULL) to `out`, as the result printers show it
/// (TIMESTAMPTZ in UTC).
pub fn format_value(v: &Vector, i: usize, out: &mut String) {
    format_value_in(v, i, out, &TimeZone::UTC)
}

/// [`format_value`] with TIMESTAMPTZ values shown in `zone`.
pub fn format_value_in(v: &Vector, i: usize, out: &mut String, zone: &TimeZone) {
    use std::fmt::Write;
    let _ = match (&v.data, v.data_type) {
        (VectorData::Bool(b), _) => write!(out, "{}", b[i]),
        (VectorData::I16(b), _) => write!(out, "{}", b[i]),
        (VectorData::I32(b), DataType::Date) => write!(out, "{}", datetime::format_date(b[i])),
        (VectorData::I32(b), _) => write!(out, "{}", b[i]),
        (VectorData::I64(b), DataType::Timestamp) => write!(out, "{}", datetime::format_timestamp(b[i])),
        (VectorData::I64(b), DataType::TimestampTz) => write!(out, "{}", datetime::format_timestamptz(b[i], zone)),
        (VectorData::I64(b), DataType::Time) => write!(out, "{}", datetime::format_time(b[i])),
        (VectorData::I64(b), DataType::Decimal { scale, .. }) => write!(out, "{}", decimal::format_decimal(b[i] as i128, scale)),
        (VectorData::I64(b), _) => write!(out, "{}", b[i]),
        (VectorData::I128(b), DataType::Decimal { scale, .. }) => write!(out, "{}", decimal::format_decimal(b[i], scale)),
        (VectorData::I128(b), _) => write!(out, "{}", b[i]),
        (VectorData::F32(b), _) => write!(out, "{}", format_float32(b[i])),
        (VectorData::F64(b), _) => write!(out, "{}", format_float(b[i])),
        (VectorData::Str(s), _) => write!(out, "{}", s.get(i)),
        (VectorData::Interval(b), _) => write!(out, "{}", b[i]),
    };
}

fn cast_from_string(v: &Vector, to: DataType, rows: Option<&[u32]>, zone: &TimeZone) -> Result<Vector> {
    let strings = v.strings();
    let mut builder = VectorBuilder::with_capacity(to, v.len());
    let selected = selected_mask(v.len(), rows);
    for (i, selected) in selected.iter().enumerate() {
        if !selected || v.is_null(i) {
            builder.push_null();
            continue;
        }
        let value = apiary_types::ScalarValue::Utf8(strings.get(i).to_string()).cast_to_in(&to, zone)?;
        builder.push_scalar(&value);
    }
    let out = builder.finish();
    // Keep the input's NULLs (unselected rows became NULL placeholders).
    Ok(out)
}
