//! Type coercion rules: the common type of two operands and the result type of arithmetic.
//!
//! The rules follow PostgreSQL where it has one: integers widen, integers meet decimals
//! as `DECIMAL(p, 0)`, anything meeting a float becomes DOUBLE, decimal precision and
//! scale grow exactly as the operation needs (capped at 38 digits).

use apiary_common::{type_err, Result};
use apiary_types::datatype::{MAX_DECIMAL64_PRECISION, MAX_DECIMAL_PRECISION};
use apiary_types::DataType;

use crate::expr::BinaryOp;

/// Fractional digits of a decimal quotient, at least.
pub const DIVISION_MIN_SCALE: u8 = 16;

/// Integer rank for widening.
fn integer_rank(t: &DataType) -> Option<u8> {
    match t {
        DataType::SmallInt => Some(1),
        DataType::Integer => Some(2),
        DataType::BigInt => Some(3),
        _ => None,
    }
}

/// The type both operands of a comparison, CASE branch, UNION column or IN list convert to.
pub fn common_type(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    if a == b {
        return Some(*a);
    }
    match (a, b) {
        (Null, other) | (other, Null) => Some(*other),
        (x, y) if x.is_string() && y.is_string() => match (x, y) {
            (Varchar(Some(n)), Varchar(Some(m))) | (Char(n), Varchar(Some(m))) | (Varchar(Some(n)), Char(m)) => {
                Some(Varchar(Some((*n).max(*m))))
            }
            _ => Some(Varchar(None)),
        },
        (x, y) if x.is_integer() && y.is_integer() => {
            if integer_rank(x) >= integer_rank(y) {
                Some(*x)
            } else {
                Some(*y)
            }
        }
        (Real, Real) => Some(Real),
        (x, y) if (x.is_float() && y.is_numeric()) || (y.is_float() && x.is_numeric()) => Some(Double),
        (x, y) if x.is_numeric() && y.is_numeric() => {
            let (p1, s1) = x.as_decimal()?;
            let (p2, s2) = y.as_decimal()?;
            let scale = s1.max(s2);
            let integer_digits = (p1 - s1).max(p2 - s2);
            let precision = (integer_digits + scale).min(MAX_DECIMAL_PRECISION);
            Some(DataType::decimal(precision, scale))
        }
        (Date, Timestamp) | (Timestamp, Date) => Some(Timestamp),
        // TIMESTAMPTZ is the preferred date-time type (PostgreSQL): DATE and TIMESTAMP
        // meet it as instants in the session's zone.
        (Date | Timestamp, TimestampTz) | (TimestampTz, Date | Timestamp) => Some(TimestampTz),
        (Time, Interval) | (Interval, Time) => Some(Interval),
        _ => None,
    }
}

/// Result type of `left op right` for arithmetic operators and the types each operand is
/// converted to first.
pub struct ArithmeticTypes {
    pub result: DataType,
    pub left: DataType,
    pub right: DataType,
}

/// `date ± interval` is a TIMESTAMP, as in PostgreSQL (the optimizer turns comparisons of a
/// DATE column with a midnight TIMESTAMP constant back into DATE comparisons).
pub fn arithmetic_types(op: BinaryOp, left: &DataType, right: &DataType) -> Result<ArithmeticTypes> {
    use DataType::*;
    let same = |t: DataType| ArithmeticTypes { result: t, left: t, right: t };
    let mismatch = || type_err!("operator {} is not defined for {left} and {right}", op.symbol());
    let l = if *left == Null { *right } else { *left };
    let r = if *right == Null { *left } else { *right };
    if l == Null && r == Null {
        return Ok(same(Integer));
    }
    // Dates, timestamps and intervals.
    match (op, &l, &r) {
        (BinaryOp::Add, Date, t) | (BinaryOp::Sub, Date, t) if t.is_integer() => {
            return Ok(ArithmeticTypes { result: Date, left: Date, right: Integer })
        }
        (BinaryOp::Add, t, Date) if t.is_integer() => return Ok(ArithmeticTypes { result: Date, left: Integer, right: Date }),
        (BinaryOp::Sub, Date, Date) => return Ok(ArithmeticTypes { result: Integer, left: Date, right: Date }),
        (BinaryOp::Add | BinaryOp::Sub, Date, Interval) => return Ok(ArithmeticTypes { result: Timestamp, left: Date, right: Interval }),
        (BinaryOp::Add, Interval, Date) => return Ok(ArithmeticTypes { result: Timestamp, left: Interval, right: Date }),
        (BinaryOp::Add | BinaryOp::Sub, Timestamp, Interval) => {
            return Ok(ArithmeticTypes { result: Timestamp, left: Timestamp, right: Interval })
        }
        (BinaryOp::Add, Interval, Timestamp) => return Ok(ArithmeticTypes { result: Timestamp, left: Interval, right: Timestamp }),
        (BinaryOp::Sub, Timestamp, Timestamp) => return Ok(ArithmeticTypes { result: Interval, left: Timestamp, right: Timestamp }),
        (BinaryOp::Add | BinaryOp::Sub, TimestampTz, Interval) => {
            return Ok(ArithmeticTypes { result: TimestampTz, left: TimestampTz, right: Interval })
        }
        (BinaryOp::Add, Interval, TimestampTz) => return Ok(ArithmeticTypes { result: TimestampTz, left: Interval, right: TimestampTz }),
        (BinaryOp::Sub, TimestampTz, Date | Timestamp | TimestampTz) | (BinaryOp::Sub, Date | Timestamp, TimestampTz) => {
            return Ok(ArithmeticTypes { result: Interval, left: TimestampTz, right: TimestampTz })
        }
        // TIME: around the clock with an interval; two times differ by an interval; a
        // date and a time make a timestamp.
        (BinaryOp::Add | BinaryOp::Sub, Time, Interval) => return Ok(ArithmeticTypes { result: Time, left: Time, right: Interval }),
        (BinaryOp::Add, Interval, Time) => return Ok(ArithmeticTypes { result: Time, left: Interval, right: Time }),
        (BinaryOp::Sub, Time, Time) => return Ok(ArithmeticTypes { result: Interval, left: Time, right: Time }),
        (BinaryOp::Add | BinaryOp::Sub, Date, Time) => return Ok(ArithmeticTypes { result: Timestamp, left: Date, right: Time }),
        (BinaryOp::Add, Time, Date) => return Ok(ArithmeticTypes { result: Timestamp, left: Time, right: Date }),
        (BinaryOp::Add | BinaryOp::Sub, Interval, Interval) => return Ok(same(Interval)),
        (BinaryOp::Mul, Interval, t) if t.is_integer() => return Ok(ArithmeticTypes { result: Interval, left: Interval, right: BigInt }),
        (BinaryOp::Mul, t, Interval) if t.is_integer() => return Ok(ArithmeticTypes { result: Interval, left: BigInt, right: Interval }),
        _ => {}
    }
    if !l.is_numeric() || !r.is_numeric() {
        return Err(mismatch());
    }
    if l.is_integer() && r.is_integer() {
        return Ok(same(common_type(&l, &r).ok_or_else(mismatch)?));
    }
    if l.is_float() || r.is_float() {
        return Ok(same(if l == Real && r == Real { Real } else { Double }));
    }
    // Decimal arithmetic (integers act as DECIMAL(p, 0)).
    let (p1, s1) = l.as_decimal().ok_or_else(mismatch)?;
    let (p2, s2) = r.as_decimal().ok_or_else(mismatch)?;
    let wide = |scale: u8| DataType::decimal(MAX_DECIMAL_PRECISION, scale);
    Ok(match op {
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mod => {
            let scale = s1.max(s2);
            let integer_digits = (p1 - s1).max(p2 - s2) + u8::from(op != BinaryOp::Mod);
            let precision = (integer_digits + scale).min(MAX_DECIMAL_PRECISION);
            same(DataType::decimal(precision, scale))
        }
        BinaryOp::Mul => {
            let scale = s1 + s2;
            if scale > MAX_DECIMAL_PRECISION {
                return Err(type_err!("the product of {left} and {right} needs scale {scale}, more than {MAX_DECIMAL_PRECISION}"));
            }
            let precision = (p1 + p2).min(MAX_DECIMAL_PRECISION).max(scale);
            if precision <= MAX_DECIMAL64_PRECISION {
                ArithmeticTypes {
                    result: DataType::decimal(precision, scale),
                    left: DataType::decimal(p1, s1),
                    right: DataType::decimal(p2, s2),
                }
            } else {
                ArithmeticTypes { result: DataType::decimal(precision, scale), left: wide(s1), right: wide(s2) }
            }
        }
        BinaryOp::Div => {
            // At least 16 fractional digits, like PostgreSQL's minimum of 16 significant
            // digits for numeric division (1.0 / 3 = 0.3333333333333333).
            let scale = s1.max(s2).max(DIVISION_MIN_SCALE);
            ArithmeticTypes { result: wide(scale), left: wide(s1), right: wide(s2) }
        }
        _ => return Err(mismatch()),
    })
}

/// Whether a value of type `from` may be implicitly converted (assigned) to `to`, as in
/// INSERT: numeric to numeric, string to string, between dates and timestamps (with and
/// without zone), timestamps to times, times and intervals, NULL to anything.
pub fn can_assign(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    from == to
        || *from == Null
        || (from.is_numeric() && to.is_numeric())
        || to.is_string()
        || (from.is_string() && !to.is_string())
        || (from.is_datetime() && to.is_datetime())
        || matches!((from, to), (Timestamp | TimestampTz, Time) | (Time, Interval) | (Interval, Time))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_rules() {
        let d152 = DataType::decimal(15, 2);
        let t = arithmetic_types(BinaryOp::Sub, &DataType::Integer, &d152).unwrap();
        assert_eq!(t.result, DataType::decimal(16, 2));
        let t = arithmetic_types(BinaryOp::Mul, &d152, &DataType::decimal(16, 2)).unwrap();
        assert_eq!(t.result, DataType::decimal(31, 4));
        assert_eq!(t.left, DataType::decimal(38, 2));
        let t = arithmetic_types(BinaryOp::Mul, &DataType::decimal(5, 2), &DataType::decimal(5, 2)).unwrap();
        assert_eq!(t.result, DataType::decimal(10, 4));
        assert_eq!(common_type(&d152, &DataType::Integer), Some(DataType::decimal(15, 2)));
        assert_eq!(common_type(&d152, &DataType::decimal(3, 3)), Some(DataType::decimal(16, 3)));
    }

    #[test]
    fn date_rules() {
        let t = arithmetic_types(BinaryOp::Sub, &DataType::Date, &DataType::Interval).unwrap();
        assert_eq!(t.result, DataType::Timestamp);
        let t = arithmetic_types(BinaryOp::Sub, &DataType::Date, &DataType::Date).unwrap();
        assert_eq!(t.result, DataType::Integer);
        assert!(arithmetic_types(BinaryOp::Add, &DataType::Date, &DataType::Date).is_err());
        let t = arithmetic_types(BinaryOp::Sub, &DataType::Timestamp, &DataType::TimestampTz).unwrap();
        assert_eq!((t.result, t.left, t.right), (DataType::Interval, DataType::TimestampTz, DataType::TimestampTz));
        let t = arithmetic_types(BinaryOp::Add, &DataType::Date, &DataType::Time).unwrap();
        assert_eq!(t.result, DataType::Timestamp);
        assert_eq!(arithmetic_types(BinaryOp::Sub, &DataType::Time, &DataType::Interval).unwrap().result, DataType::Time);
        assert!(arithmetic_types(BinaryOp::Add, &DataType::Time, &DataType::Time).is_err());
        assert_eq!(common_type(&DataType::Timestamp, &DataType::TimestampTz), Some(DataType::TimestampTz));
    }
}
