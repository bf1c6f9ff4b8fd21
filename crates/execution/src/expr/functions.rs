//! EXTRACT, DATE_TRUNC, ABS/ROUND/CEIL/FLOOR, SQRT/POWER/LN/EXP, GREATEST/LEAST.

use std::sync::Arc;

use apiary_common::{exec_err, internal_err, Result};
use apiary_sql::expr::ScalarFunction;
use apiary_types::datatype::PhysicalType;
use apiary_types::datetime::{self, DateField};
use apiary_types::decimal::{div_round, POW10};
use apiary_types::{DataChunk, DataType, ScalarValue, TimeZone, Vector};

use super::logic::Scatter;
use super::{combined_validity, map_rows, rows_of, wrap, ExprRef, PhysicalExpr};

#[derive(Debug)]
struct Extract {
    field: DateField,
    child: ExprRef,
    data_type: DataType,
    /// The session's zone, in which a TIMESTAMPTZ's fields are read.
    zone: TimeZone,
}

pub fn extract(field: DateField, child: ExprRef, data_type: DataType, zone: TimeZone) -> Result<ExprRef> {
    // The binder refuses fields a type does not have; a TIME field is checked once here.
    if child.data_type() == DataType::Time && !field.is_time_of_day() {
        return Err(internal_err!("extract {field:?} from TIME"));
    }
    Ok(Arc::new(Extract { field, child, data_type, zone }))
}

impl PhysicalExpr for Extract {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let len = chunk.physical_len();
        let field = self.field;
        let values: Vec<i64> = match v.data_type {
            DataType::Date => {
                let days = v.values::<i32>();
                if field == DateField::Year {
                    // The hot case (TPC-H Q7-Q9): a year needs only the civil-date conversion.
                    map_rows(len, rows_of(chunk), |i| datetime::year_number(datetime::civil_from_days(days[i]).0))
                } else {
                    map_rows(len, rows_of(chunk), |i| datetime::extract_from_date(field, days[i]))
                }
            }
            DataType::Timestamp => {
                let micros = v.values::<i64>();
                map_rows(len, rows_of(chunk), |i| datetime::extract_from_timestamp(field, micros[i]))
            }
            DataType::TimestampTz => {
                let micros = v.values::<i64>();
                map_rows(len, rows_of(chunk), |i| datetime::extract_from_timestamptz(field, micros[i], &self.zone))
            }
            DataType::Time => {
                let micros = v.values::<i64>();
                map_rows(len, rows_of(chunk), |i| datetime::extract_from_time(field, micros[i]).unwrap_or_default())
            }
            other => return Err(internal_err!("extract from {other}")),
        };
        if self.data_type == DataType::Integer {
            let narrowed: Vec<i32> = values.into_iter().map(|x| x as i32).collect();
            Ok(Vector::new(DataType::Integer, wrap(narrowed), v.validity.clone()))
        } else {
            Ok(Vector::new(self.data_type, wrap(values), v.validity.clone()))
        }
    }
}

#[derive(Debug)]
struct DateTrunc {
    unit: String,
    child: ExprRef,
    /// The zone a TIMESTAMPTZ is truncated in: the session's, or the third argument.
    zone: TimeZone,
}

pub fn date_trunc(args: Vec<ExprRef>, literals: &[Option<&ScalarValue>], session_zone: TimeZone) -> Result<ExprRef> {
    let unit = match literals.first() {
        Some(Some(ScalarValue::Utf8(s))) => s.to_lowercase(),
        _ => return Err(internal_err!("date_trunc unit must be a constant")),
    };
    let zone = match literals.get(2) {
        Some(Some(ScalarValue::Utf8(name))) => TimeZone::for_input(name).ok_or_else(|| exec_err!("time zone \"{name}\" not recognized"))?,
        Some(_) => return Err(internal_err!("date_trunc time zone must be a constant")),
        None => session_zone,
    };
    let child = args.into_iter().nth(1).ok_or_else(|| internal_err!("date_trunc needs two arguments"))?;
    Ok(Arc::new(DateTrunc { unit, child, zone }))
}

/// A local timestamp (microseconds) truncated to `unit`.
fn trunc_timestamp(unit: &str, t: i64) -> i64 {
    use datetime::MICROS_PER_DAY;
    let step: i64 = match unit {
        "hour" => 3_600_000_000,
        "minute" => 60_000_000,
        "second" => 1_000_000,
        "milliseconds" | "millisecond" => 1_000,
        "microseconds" | "microsecond" => 1,
        _ => 0,
    };
    if step > 0 {
        t - t.rem_euclid(step)
    } else {
        trunc_day(unit, t.div_euclid(MICROS_PER_DAY) as i32) as i64 * MICROS_PER_DAY
    }
}

/// The first day of the period `unit` (a day or longer) that contains day `d`.
fn trunc_day(unit: &str, d: i32) -> i32 {
    let (y, m, _) = datetime::civil_from_days(d);
    // PostgreSQL's centuries and millennia start at years ending in 1 (2001, 1901).
    let first_year_of = |span: i32| if y > 0 { (y - 1).div_euclid(span) * span + 1 } else { y.div_euclid(span) * span };
    match unit {
        "millennium" => datetime::days_from_civil(first_year_of(1000), 1, 1),
        "century" => datetime::days_from_civil(first_year_of(100), 1, 1),
        "decade" => datetime::days_from_civil(y.div_euclid(10) * 10, 1, 1),
        "year" => datetime::days_from_civil(y, 1, 1),
        "quarter" => datetime::days_from_civil(y, (m - 1) / 3 * 3 + 1, 1),
        "month" => datetime::days_from_civil(y, m, 1),
        "week" => d - (d as i64 + 3).rem_euclid(7) as i32,
        _ => d,
    }
}

impl PhysicalExpr for DateTrunc {
    fn data_type(&self) -> DataType {
        self.child.data_type()
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let unit = self.unit.as_str();
        let data = if v.data_type == DataType::Timestamp {
            let micros = v.values::<i64>();
            wrap(map_rows(chunk.physical_len(), rows_of(chunk), |i| trunc_timestamp(unit, micros[i])))
        } else if v.data_type == DataType::TimestampTz {
            // Truncated on the local clock, then read back as an instant in the same zone
            // (a day that starts at 01:00 after a change keeps its real start).
            let micros = v.values::<i64>();
            let zone = &self.zone;
            let mut out_of_range = false;
            let data = map_rows(chunk.physical_len(), rows_of(chunk), |i| {
                let truncated = zone.to_local(micros[i]).and_then(|local| zone.to_utc(trunc_timestamp(unit, local)));
                truncated.unwrap_or_else(|| {
                    out_of_range |= v.is_valid(i);
                    0
                })
            });
            if out_of_range {
                return Err(exec_err!("timestamp out of range in date_trunc"));
            }
            wrap(data)
        } else {
            let days = v.values::<i32>();
            wrap(map_rows(chunk.physical_len(), rows_of(chunk), |i| trunc_day(unit, days[i])))
        };
        Ok(Vector::new(v.data_type, data, v.validity.clone()))
    }
}

#[derive(Debug)]
struct Math {
    func: ScalarFunction,
    args: Vec<ExprRef>,
    /// `round(x, digits)`: the digits.
    digits: i32,
    data_type: DataType,
}

pub fn math(func: ScalarFunction, args: Vec<ExprRef>, literals: &[Option<&ScalarValue>], data_type: DataType) -> Result<ExprRef> {
    let digits = match (func, literals.get(1)) {
        (ScalarFunction::Round, Some(Some(v))) => v.as_i128().unwrap_or(0) as i32,
        _ => 0,
    };
    Ok(Arc::new(Math { func, args, digits, data_type }))
}

impl PhysicalExpr for Math {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        use ScalarFunction as F;
        let v = self.args[0].evaluate(chunk)?;
        let len = chunk.physical_len();
        let rows = rows_of(chunk);
        match (self.func, v.data_type) {
            (F::Abs, t) if t.is_integer() || t.is_decimal() => {
                let mut overflow = false;
                let out = match t.physical() {
                    PhysicalType::I16 => wrap(map_rows(len, rows, |i| {
                        v.values::<i16>()[i].checked_abs().unwrap_or_else(|| {
                            overflow = v.is_valid(i);
                            0
                        })
                    })),
                    PhysicalType::I32 => wrap(map_rows(len, rows, |i| {
                        v.values::<i32>()[i].checked_abs().unwrap_or_else(|| {
                            overflow = v.is_valid(i);
                            0
                        })
                    })),
                    PhysicalType::I64 => wrap(map_rows(len, rows, |i| {
                        v.values::<i64>()[i].checked_abs().unwrap_or_else(|| {
                            overflow = v.is_valid(i);
                            0
                        })
                    })),
                    _ => wrap(map_rows(len, rows, |i| {
                        v.values::<i128>()[i].checked_abs().unwrap_or_else(|| {
                            overflow = v.is_valid(i);
                            0
                        })
                    })),
                };
                if overflow {
                    return Err(exec_err!("{t} out of range in abs"));
                }
                Ok(Vector::new(t, out, v.validity.clone()))
            }
            (F::Sign, t) if t.is_integer() || t.is_decimal() => {
                let unit: i128 = match t {
                    DataType::Decimal { scale, .. } => POW10[scale as usize],
                    _ => 1,
                };
                let data = match t.physical() {
                    PhysicalType::I16 => wrap(map_rows(len, rows, |i| v.values::<i16>()[i].signum())),
                    PhysicalType::I32 => wrap(map_rows(len, rows, |i| v.values::<i32>()[i].signum())),
                    PhysicalType::I64 => wrap(map_rows(len, rows, |i| v.values::<i64>()[i].signum() * unit as i64)),
                    _ => wrap(map_rows(len, rows, |i| v.values::<i128>()[i].signum() * unit)),
                };
                Ok(Vector::new(t, data, v.validity.clone()))
            }
            (F::Round | F::Ceil | F::Floor, DataType::Decimal { scale, .. }) => {
                let target_scale = match self.data_type {
                    DataType::Decimal { scale, .. } => scale,
                    _ => 0,
                };
                // round(x, -n) rounds to a multiple of 10^n (and keeps scale 0).
                let tens = if self.func == F::Round && self.digits < 0 { self.digits.unsigned_abs() as usize } else { 0 };
                let shift = (scale - target_scale.min(scale)) as usize + tens;
                let func = self.func;
                let adjust = move |x: i128| -> i128 {
                    if shift >= POW10.len() {
                        return 0;
                    }
                    let divisor = POW10[shift];
                    match func {
                        F::Round => div_round(x, divisor).saturating_mul(POW10[tens]),
                        F::Floor => x.div_euclid(divisor),
                        _ => -((-x).div_euclid(divisor)),
                    }
                };
                let values: Vec<i128> = match v.data_type.physical() {
                    PhysicalType::I64 => v.values::<i64>().iter().map(|&x| x as i128).collect(),
                    _ => v.values::<i128>().to_vec(),
                };
                let out: Vec<i128> = map_rows(len, rows, |i| adjust(values[i]));
                let data = match self.data_type.physical() {
                    PhysicalType::I64 => wrap(out.into_iter().map(|x| x as i64).collect::<Vec<_>>()),
                    _ => wrap(out),
                };
                Ok(Vector::new(self.data_type, data, v.validity.clone()))
            }
            (F::Round, t) if t.is_integer() && self.digits < 0 => {
                // round(125, -1) = 130: to a multiple of 10^n, half away from zero.
                let tens = self.digits.unsigned_abs() as usize;
                let round = |x: i128| if tens >= POW10.len() { 0 } else { div_round(x, POW10[tens]) * POW10[tens] };
                let mut overflow = false;
                let mut check = |x: i128, fits: bool, i: usize| {
                    if !fits && v.is_valid(i) {
                        overflow = true;
                    }
                    x
                };
                let data = match t.physical() {
                    PhysicalType::I16 => wrap(map_rows(len, rows, |i| {
                        let r = round(v.values::<i16>()[i] as i128);
                        check(r, i16::try_from(r).is_ok(), i) as i16
                    })),
                    PhysicalType::I32 => wrap(map_rows(len, rows, |i| {
                        let r = round(v.values::<i32>()[i] as i128);
                        check(r, i32::try_from(r).is_ok(), i) as i32
                    })),
                    _ => wrap(map_rows(len, rows, |i| {
                        let r = round(v.values::<i64>()[i] as i128);
                        check(r, i64::try_from(r).is_ok(), i) as i64
                    })),
                };
                if overflow {
                    return Err(exec_err!("{t} out of range in round"));
                }
                Ok(Vector::new(t, data, v.validity.clone()))
            }
            (F::Round | F::Ceil | F::Floor | F::Abs, t) if t.is_integer() => Ok(v),
            (_, DataType::Double) | (F::Abs, DataType::Real) => {
                let factor = 10f64.powi(self.digits);
                let other = if self.func == F::Power { Some(self.args[1].evaluate(chunk)?) } else { None };
                if v.data_type == DataType::Real {
                    let x = v.values::<f32>();
                    let out = map_rows(len, rows, |i| x[i].abs());
                    return Ok(Vector::new(DataType::Real, wrap(out), v.validity.clone()));
                }
                let x = v.values::<f64>();
                let y = other.as_ref().map(|o| o.values::<f64>());
                let mut domain_error = false;
                let out = map_rows(len, rows, |i| {
                    let value = x[i];
                    match self.func {
                        F::Abs => value.abs(),
                        // -1, 0 or 1 (and NaN for NaN), like PostgreSQL.
                        F::Sign if value > 0.0 => 1.0,
                        F::Sign if value < 0.0 => -1.0,
                        F::Sign => value,
                        // Like PostgreSQL's float round (rint): ties to even.
                        F::Round => (value * factor).round_ties_even() / factor,
                        F::Ceil => value.ceil(),
                        F::Floor => value.floor(),
                        F::Sqrt => {
                            if value < 0.0 && v.is_valid(i) {
                                domain_error = true;
                            }
                            value.sqrt()
                        }
                        F::Ln => {
                            if value <= 0.0 && v.is_valid(i) {
                                domain_error = true;
                            }
                            value.ln()
                        }
                        F::Exp => value.exp(),
                        F::Power => value.powf(y.map_or(1.0, |y| y[i])),
                        _ => value,
                    }
                });
                if domain_error {
                    return Err(exec_err!("{} of a value outside its domain", self.func.name()));
                }
                let validity = match &other {
                    Some(o) => combined_validity(&[&v, o]),
                    None => v.validity.clone(),
                };
                Ok(Vector::new(DataType::Double, wrap(out), validity))
            }
            (func, t) => Err(internal_err!("{} of {t}", func.name())),
        }
    }
}

/// GREATEST / LEAST (NULLs ignored, as in PostgreSQL).
#[derive(Debug)]
struct GreatestLeast {
    greatest: bool,
    args: Vec<ExprRef>,
    data_type: DataType,
}

pub fn greatest_least(greatest: bool, args: Vec<ExprRef>, data_type: DataType) -> Result<ExprRef> {
    Ok(Arc::new(GreatestLeast { greatest, args, data_type }))
}

impl PhysicalExpr for GreatestLeast {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let values = self.args.iter().map(|a| a.evaluate(chunk)).collect::<Result<Vec<_>>>()?;
        // Row by row through scalars: GREATEST/LEAST are rare and never in a hot loop.
        let len = chunk.physical_len();
        let mut best: Vec<Option<(usize, ScalarValue)>> = vec![None; len];
        super::for_each_row(len, rows_of(chunk), |i| {
            for (arg, v) in values.iter().enumerate() {
                if v.is_null(i) {
                    continue;
                }
                let candidate = v.get_scalar(i);
                let better = match &best[i] {
                    None => true,
                    Some((_, current)) => {
                        let ord = candidate.total_cmp(current);
                        if self.greatest {
                            ord.is_gt()
                        } else {
                            ord.is_lt()
                        }
                    }
                };
                if better {
                    best[i] = Some((arg, candidate));
                }
            }
        });
        let mut per_arg: Vec<Vec<u32>> = vec![Vec::new(); values.len()];
        for (i, b) in best.iter().enumerate() {
            if let Some((arg, _)) = b {
                per_arg[*arg].push(i as u32);
            }
        }
        let mut scatter = Scatter::new(self.data_type, len);
        for (v, rows) in values.into_iter().zip(per_arg) {
            scatter.add(v, rows);
        }
        Ok(scatter.finish())
    }
}

/// `mask_and(a, b)`: the bitwise AND of two query masks (shared operators: the queries a
/// joined row qualifies for). Masks are never NULL.
#[derive(Debug)]
struct MaskAnd {
    left: ExprRef,
    right: ExprRef,
}

pub fn mask_and(args: Vec<ExprRef>) -> Result<ExprRef> {
    let [left, right]: [ExprRef; 2] = args.try_into().map_err(|_| internal_err!("mask_and takes two masks"))?;
    Ok(Arc::new(MaskAnd { left, right }))
}

impl PhysicalExpr for MaskAnd {
    fn data_type(&self) -> DataType {
        DataType::BigInt
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let left = self.left.evaluate(chunk)?;
        let right = self.right.evaluate(chunk)?;
        // Every physical row, selected or not: a branch-free loop the compiler vectorises.
        let out: Vec<i64> = left.values::<i64>().iter().zip(right.values::<i64>()).map(|(a, b)| a & b).collect();
        Ok(Vector::new(DataType::BigInt, wrap(out), None))
    }
}

/// `average_of(sum, count)`: the `avg` aggregate's result from a sum and a count
/// aggregated apart (shared operators merge per-query partial aggregates).
#[derive(Debug)]
struct AverageOf {
    sum: ExprRef,
    count: ExprRef,
    data_type: DataType,
}

pub fn average_of(args: Vec<ExprRef>, data_type: DataType) -> Result<ExprRef> {
    let [sum, count]: [ExprRef; 2] = args.try_into().map_err(|_| internal_err!("average_of takes (sum, count)"))?;
    Ok(Arc::new(AverageOf { sum, count, data_type }))
}

impl PhysicalExpr for AverageOf {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let sums = self.sum.evaluate(chunk)?;
        let counts = self.count.evaluate(chunk)?;
        let len = chunk.physical_len();
        let count_values = counts.values::<i64>();
        let mut valid = vec![false; len];
        super::for_each_row(len, rows_of(chunk), |i| {
            valid[i] = sums.is_valid(i) && counts.is_valid(i) && count_values[i] > 0;
        });
        let data = match (self.data_type, sums.data_type) {
            (DataType::Decimal { scale: out_scale, .. }, DataType::Decimal { scale: in_scale, .. }) => {
                let factor = POW10[(out_scale - in_scale.min(out_scale)) as usize];
                let sum_values = sums.values::<i128>();
                let mut out = vec![0i128; len];
                for i in (0..len).filter(|&i| valid[i]) {
                    out[i] = apiary_types::decimal::decimal_average(sum_values[i], count_values[i], factor)
                        .ok_or_else(|| exec_err!("average out of range for {}", self.data_type))?;
                }
                wrap(out)
            }
            (DataType::Double, sum_type) => {
                let sums_as_f64: Vec<f64> = match sum_type.physical() {
                    PhysicalType::I64 => sums.values::<i64>().iter().map(|&v| v as f64).collect(),
                    PhysicalType::I128 => sums.values::<i128>().iter().map(|&v| v as f64).collect(),
                    PhysicalType::F64 => sums.values::<f64>().to_vec(),
                    other => return Err(internal_err!("average_of over {other:?} sums")),
                };
                let out: Vec<f64> = (0..len).map(|i| if valid[i] { sums_as_f64[i] / count_values[i] as f64 } else { 0.0 }).collect();
                wrap(out)
            }
            (out, sum) => return Err(internal_err!("average_of: {out} from a {sum} sum")),
        };
        Ok(Vector::new(self.data_type, data, Some(apiary_common::Bitmap::from_bools(valid.iter().copied()))))
    }
}
