//! Arithmetic: `+ - * / %` on integers, floats and decimals, and date/time arithmetic.
//!
//! Operands arrive with one physical type (the binder inserted casts). Decimals are
//! scaled integers throughout: `DECIMAL(15,2) * DECIMAL(16,2)` multiplies `i128`s and the
//! product has scale 4 without any rescaling; division rescales the dividend first.
//! Where overflow is impossible (decimal results of at most 18 digits, floats) the loop
//! is unchecked and vectorisable; otherwise every result is checked and an overflow is an
//! error, never a wrapped value.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

use apiary_common::{exec_err, internal_err, ApiaryError, Result};
use apiary_sql::expr::BinaryOp;
use apiary_types::datatype::{PhysicalType, MAX_DECIMAL64_PRECISION, MAX_DECIMAL_PRECISION};
use apiary_types::datetime::{self, Interval, MICROS_PER_DAY};
use apiary_types::decimal::{scaled_div_round, POW10};
use apiary_types::vector::NativeType;
use apiary_types::{DataChunk, DataType, ScalarValue, TimeZone, Vector};

use super::compare::FromScalar;
use super::{combined_validity, rows_of, wrap, ExprRef, PhysicalExpr};

/// A numeric type arithmetic kernels run on.
pub trait ArithNative: NativeType + FromScalar {
    fn add_checked(a: Self, b: Self) -> Option<Self>;
    fn sub_checked(a: Self, b: Self) -> Option<Self>;
    fn mul_checked(a: Self, b: Self) -> Option<Self>;
    fn div_checked(a: Self, b: Self) -> Option<Self>;
    fn rem_checked(a: Self, b: Self) -> Option<Self>;
    fn add_fast(a: Self, b: Self) -> Self;
    fn sub_fast(a: Self, b: Self) -> Self;
    fn mul_fast(a: Self, b: Self) -> Self;
    fn is_zero(self) -> bool;
}

macro_rules! arith_int {
    ($t:ty) => {
        arith_int!($t, |a: $t, b: $t| a.checked_mul(b));
    };
    ($t:ty, $checked_mul:expr) => {
        impl ArithNative for $t {
            #[inline(always)]
            fn add_checked(a: Self, b: Self) -> Option<Self> {
                a.checked_add(b)
            }
            #[inline(always)]
            fn sub_checked(a: Self, b: Self) -> Option<Self> {
                a.checked_sub(b)
            }
            #[inline(always)]
            fn mul_checked(a: Self, b: Self) -> Option<Self> {
                ($checked_mul)(a, b)
            }
            #[inline(always)]
            fn div_checked(a: Self, b: Self) -> Option<Self> {
                a.checked_div(b)
            }
            #[inline(always)]
            fn rem_checked(a: Self, b: Self) -> Option<Self> {
                if b == -1 {
                    return if b == 0 { None } else { Some(0) };
                }
                a.checked_rem(b)
            }
            #[inline(always)]
            fn add_fast(a: Self, b: Self) -> Self {
                a.wrapping_add(b)
            }
            #[inline(always)]
            fn sub_fast(a: Self, b: Self) -> Self {
                a.wrapping_sub(b)
            }
            #[inline(always)]
            fn mul_fast(a: Self, b: Self) -> Self {
                a.wrapping_mul(b)
            }
            #[inline(always)]
            fn is_zero(self) -> bool {
                self == 0
            }
        }
    };
}

arith_int!(i16);
arith_int!(i32);
arith_int!(i64);
// Most 128-bit decimal products have operands that fit 64 bits: their product (at most
// 2^126) cannot overflow, and one widening multiply computes it. Only larger operands
// take the costly checked 128-bit multiply.
arith_int!(i128, |a: i128, b: i128| {
    if a as i64 as i128 == a && b as i64 as i128 == b {
        Some(a * b)
    } else {
        a.checked_mul(b)
    }
});

macro_rules! arith_float {
    ($t:ty) => {
        impl ArithNative for $t {
            // Like PostgreSQL: a finite computation that overflows to infinity, or
            // underflows to zero, is an error.
            #[inline(always)]
            fn add_checked(a: Self, b: Self) -> Option<Self> {
                let r = a + b;
                (r.is_finite() || !a.is_finite() || !b.is_finite()).then_some(r)
            }
            #[inline(always)]
            fn sub_checked(a: Self, b: Self) -> Option<Self> {
                let r = a - b;
                (r.is_finite() || !a.is_finite() || !b.is_finite()).then_some(r)
            }
            #[inline(always)]
            fn mul_checked(a: Self, b: Self) -> Option<Self> {
                let r = a * b;
                let overflow = r.is_infinite() && a.is_finite() && b.is_finite();
                let underflow = r == 0.0 && a != 0.0 && b != 0.0;
                (!overflow && !underflow).then_some(r)
            }
            #[inline(always)]
            fn div_checked(a: Self, b: Self) -> Option<Self> {
                if b == 0.0 {
                    return None;
                }
                let r = a / b;
                let overflow = r.is_infinite() && a.is_finite();
                let underflow = r == 0.0 && a != 0.0 && b.is_finite();
                (!overflow && !underflow).then_some(r)
            }
            #[inline(always)]
            fn rem_checked(a: Self, b: Self) -> Option<Self> {
                if b == 0.0 {
                    None
                } else {
                    Some(a % b)
                }
            }
            #[inline(always)]
            fn add_fast(a: Self, b: Self) -> Self {
                a + b
            }
            #[inline(always)]
            fn sub_fast(a: Self, b: Self) -> Self {
                a - b
            }
            #[inline(always)]
            fn mul_fast(a: Self, b: Self) -> Self {
                a * b
            }
            #[inline(always)]
            fn is_zero(self) -> bool {
                self == 0.0
            }
        }
    };
}

arith_float!(f32);
arith_float!(f64);

pub trait ArithOp: Send + Sync + Debug + Default + 'static {
    const SYMBOL: &'static str;
    /// Whether the operation can fail for a zero right operand.
    const DIVIDES: bool;
    fn checked<T: ArithNative>(a: T, b: T) -> Option<T>;
    fn fast<T: ArithNative>(a: T, b: T) -> T;
}

macro_rules! arith_op {
    ($name:ident, $symbol:expr, $divides:expr, $checked:ident, $fast:ident) => {
        #[derive(Debug, Default)]
        pub struct $name;
        impl ArithOp for $name {
            const SYMBOL: &'static str = $symbol;
            const DIVIDES: bool = $divides;
            #[inline(always)]
            fn checked<T: ArithNative>(a: T, b: T) -> Option<T> {
                T::$checked(a, b)
            }
            #[inline(always)]
            fn fast<T: ArithNative>(a: T, b: T) -> T {
                T::$fast(a, b)
            }
        }
    };
}

arith_op!(Add, "+", false, add_checked, add_fast);
arith_op!(Sub, "-", false, sub_checked, sub_fast);
arith_op!(Mul, "*", false, mul_checked, mul_fast);
arith_op!(Div, "/", true, div_checked, div_checked_fast_placeholder);
arith_op!(Rem, "%", true, rem_checked, rem_checked_fast_placeholder);

// Division never takes the unchecked path; these keep the macro uniform.
trait DivPlaceholder: Sized {
    fn div_checked_fast_placeholder(a: Self, b: Self) -> Self;
    fn rem_checked_fast_placeholder(a: Self, b: Self) -> Self;
}

impl<T: ArithNative> DivPlaceholder for T {
    fn div_checked_fast_placeholder(a: Self, b: Self) -> Self {
        T::div_checked(a, b).unwrap_or_default()
    }
    fn rem_checked_fast_placeholder(a: Self, b: Self) -> Self {
        T::rem_checked(a, b).unwrap_or_default()
    }
}

/// Where an operand comes from.
#[derive(Debug)]
enum Operand<T> {
    Expr(ExprRef),
    Constant(T),
}

/// `left op right` on one native type (at most one side constant). `CHECKED = false`
/// when overflow is impossible.
#[derive(Debug)]
struct Arithmetic<T, O, const CHECKED: bool> {
    left: Operand<T>,
    right: Operand<T>,
    data_type: DataType,
    _op: PhantomData<O>,
}

fn arithmetic_error<O: ArithOp>(divisor_zero: bool, data_type: DataType) -> ApiaryError {
    if divisor_zero {
        exec_err!("division by zero")
    } else {
        exec_err!("{data_type} out of range in operator {}", O::SYMBOL)
    }
}

impl<T: ArithNative> Operand<T> {
    fn evaluate(&self, chunk: &DataChunk) -> Result<(Option<Vector>, Option<T>)> {
        Ok(match self {
            Operand::Expr(e) => (Some(e.evaluate(chunk)?), None),
            Operand::Constant(c) => (None, Some(*c)),
        })
    }
}

impl<T: ArithNative, O: ArithOp, const CHECKED: bool> PhysicalExpr for Arithmetic<T, O, CHECKED> {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let len = chunk.physical_len();
        let (l, left_constant) = self.left.evaluate(chunk)?;
        let (r, right_constant) = self.right.evaluate(chunk)?;
        let present: Vec<&Vector> = l.iter().chain(r.iter()).collect();
        let validity = combined_validity(&present);
        let lv: &[T] = l.as_ref().map_or(&[], |v| v.values::<T>());
        let rv: &[T] = r.as_ref().map_or(&[], |v| v.values::<T>());
        let mut out = vec![T::default(); len];
        if !CHECKED && !O::DIVIDES {
            // Overflow impossible: compute every row, branch-free.
            match (left_constant, right_constant) {
                (None, Some(c)) => out.iter_mut().zip(lv).for_each(|(o, &a)| *o = O::fast(a, c)),
                (Some(c), None) => out.iter_mut().zip(rv).for_each(|(o, &b)| *o = O::fast(c, b)),
                _ => out.iter_mut().zip(lv.iter().zip(rv)).for_each(|(o, (&a, &b))| *o = O::fast(a, b)),
            }
        } else {
            let left_at = |i: usize| -> T { left_constant.unwrap_or_else(|| lv[i]) };
            let right_at = |i: usize| -> T { right_constant.unwrap_or_else(|| rv[i]) };
            let mut failure: Option<ApiaryError> = None;
            let mut compute = |i: usize| {
                if failure.is_some() || validity.as_ref().is_some_and(|v| !v.get(i)) {
                    return;
                }
                let b = right_at(i);
                match O::checked(left_at(i), b) {
                    Some(v) => out[i] = v,
                    None => failure = Some(arithmetic_error::<O>(b.is_zero(), self.data_type)),
                }
            };
            match rows_of(chunk) {
                Some(rows) => rows.iter().for_each(|&r| compute(r as usize)),
                None => (0..len).for_each(compute),
            }
            if let Some(err) = failure {
                return Err(err);
            }
        }
        Ok(Vector::new(self.data_type, wrap(out), validity))
    }
}

/// Decimal division: `(a * 10^shift) / b`, rounded half away from zero, in `i128`.
#[derive(Debug)]
struct DecimalDivide {
    left: ExprRef,
    right: ExprRef,
    shift: u32,
    data_type: DataType,
}

impl PhysicalExpr for DecimalDivide {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let l = self.left.evaluate(chunk)?;
        let r = self.right.evaluate(chunk)?;
        let (lv, rv) = (l.values::<i128>(), r.values::<i128>());
        let validity = combined_validity(&[&l, &r]);
        let factor = POW10[self.shift as usize];
        let mut out = vec![0i128; chunk.physical_len()];
        let mut failure = None;
        super::for_each_row(chunk.physical_len(), rows_of(chunk), |i| {
            if failure.is_some() || validity.as_ref().is_some_and(|v| !v.get(i)) {
                return;
            }
            if rv[i] == 0 {
                failure = Some(exec_err!("division by zero"));
                return;
            }
            match scaled_div_round(lv[i], factor, rv[i]) {
                Some(quotient) => out[i] = quotient,
                None => failure = Some(exec_err!("numeric overflow in decimal division")),
            }
        });
        if let Some(err) = failure {
            return Err(err);
        }
        Ok(Vector::new(self.data_type, wrap(out), validity))
    }
}

/// Checks that 38-digit decimal results fit their precision ("numeric field overflow").
#[derive(Debug)]
struct DecimalBound {
    child: ExprRef,
    data_type: DataType,
}

impl PhysicalExpr for DecimalBound {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let values = v.values::<i128>();
        let bound = POW10[MAX_DECIMAL_PRECISION as usize];
        let mut overflow = false;
        super::for_each_row(chunk.physical_len(), rows_of(chunk), |i| {
            overflow |= v.is_valid(i) && values[i].unsigned_abs() >= bound as u128
        });
        if overflow {
            return Err(exec_err!("numeric field overflow: a {} result needs more than 38 digits", self.data_type));
        }
        Ok(v)
    }
}

/// Element-wise binary function over two typed inputs (date/interval arithmetic).
struct Binary<A, B, R> {
    left: ExprRef,
    right: ExprRef,
    data_type: DataType,
    name: &'static str,
    f: Box<dyn Fn(A, B) -> Option<R> + Send + Sync>,
}

impl<A, B, R> Debug for Binary<A, B, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({:?}, {:?})", self.name, self.left, self.right)
    }
}

impl<A: NativeType, B: NativeType, R: NativeType> PhysicalExpr for Binary<A, B, R> {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let l = self.left.evaluate(chunk)?;
        let r = self.right.evaluate(chunk)?;
        let (lv, rv) = (l.values::<A>(), r.values::<B>());
        let validity = combined_validity(&[&l, &r]);
        let mut out = vec![R::default(); chunk.physical_len()];
        let mut failed = false;
        super::for_each_row(chunk.physical_len(), rows_of(chunk), |i| {
            if failed || validity.as_ref().is_some_and(|v| !v.get(i)) {
                return;
            }
            match (self.f)(lv[i], rv[i]) {
                Some(v) => out[i] = v,
                None => failed = true,
            }
        });
        if failed {
            return Err(exec_err!("{} out of range in {}", self.data_type, self.name));
        }
        Ok(Vector::new(self.data_type, wrap(out), validity))
    }
}

fn binary<A: NativeType, B: NativeType, R: NativeType>(
    left: ExprRef,
    right: ExprRef,
    data_type: DataType,
    name: &'static str,
    f: impl Fn(A, B) -> Option<R> + Send + Sync + 'static,
) -> ExprRef {
    Arc::new(Binary { left, right, data_type, name, f: Box::new(f) })
}

fn numeric<O: ArithOp>(
    left: ExprRef,
    right: ExprRef,
    data_type: DataType,
    constants: (Option<&ScalarValue>, Option<&ScalarValue>),
    checked: bool,
) -> Result<ExprRef> {
    macro_rules! build {
        ($t:ty) => {{
            let (left, right) = match (constants.0.and_then(|c| <$t>::from_scalar(c)), constants.1.and_then(|c| <$t>::from_scalar(c))) {
                (_, Some(c)) => (Operand::Expr(left), Operand::Constant(c)),
                (Some(c), None) => (Operand::Constant(c), Operand::Expr(right)),
                (None, None) => (Operand::Expr(left), Operand::Expr(right)),
            };
            if checked {
                Arc::new(Arithmetic::<$t, O, true> { left, right, data_type, _op: PhantomData }) as ExprRef
            } else {
                Arc::new(Arithmetic::<$t, O, false> { left, right, data_type, _op: PhantomData }) as ExprRef
            }
        }};
    }
    Ok(match data_type.physical() {
        PhysicalType::I16 => build!(i16),
        PhysicalType::I32 => build!(i32),
        PhysicalType::I64 => build!(i64),
        PhysicalType::I128 => build!(i128),
        PhysicalType::F32 => build!(f32),
        PhysicalType::F64 => build!(f64),
        other => return Err(internal_err!("arithmetic on {other:?}")),
    })
}

/// Compiles `left op right` with the result type chosen by the binder.
pub fn arithmetic(
    op: BinaryOp,
    left: ExprRef,
    right: ExprRef,
    data_type: DataType,
    literals: (Option<&ScalarValue>, Option<&ScalarValue>),
    result_digits: Option<u32>,
    zone: TimeZone,
) -> Result<ExprRef> {
    let (lt, rt) = (left.data_type(), right.data_type());
    use DataType as D;
    if let Some(compiled) = time_arithmetic(op, left.clone(), right.clone(), zone) {
        return Ok(compiled);
    }
    // Date and time arithmetic.
    match (op, lt, rt, data_type) {
        (BinaryOp::Add, D::Date, D::Integer, _) => {
            return Ok(binary::<i32, i32, i32>(left, right, D::Date, "date + integer", |a, b| a.checked_add(b)))
        }
        (BinaryOp::Sub, D::Date, D::Integer, _) => {
            return Ok(binary::<i32, i32, i32>(left, right, D::Date, "date - integer", |a, b| a.checked_sub(b)))
        }
        (BinaryOp::Add, D::Integer, D::Date, _) => {
            return Ok(binary::<i32, i32, i32>(left, right, D::Date, "integer + date", |a, b| a.checked_add(b)))
        }
        (BinaryOp::Sub, D::Date, D::Date, _) => {
            return Ok(binary::<i32, i32, i32>(left, right, D::Integer, "date - date", |a, b| a.checked_sub(b)))
        }
        (BinaryOp::Add | BinaryOp::Sub, D::Date, D::Interval, D::Date) => {
            let sign = if op == BinaryOp::Sub { -1 } else { 1 };
            return Ok(binary::<i32, Interval, i32>(left, right, D::Date, "date + interval", move |d, i| {
                let i = if sign < 0 { i.checked_neg()? } else { i };
                datetime::add_interval_to_date(d, i)
            }));
        }
        (BinaryOp::Add, D::Interval, D::Date, D::Date) => {
            return Ok(binary::<Interval, i32, i32>(left, right, D::Date, "interval + date", datetime_add_interval_date_swapped))
        }
        (BinaryOp::Add | BinaryOp::Sub, D::Date, D::Interval, D::Timestamp) => {
            let sign = if op == BinaryOp::Sub { -1 } else { 1 };
            return Ok(binary::<i32, Interval, i64>(left, right, D::Timestamp, "date + interval", move |d, i| {
                let i = if sign < 0 { i.checked_neg()? } else { i };
                datetime::add_interval_to_timestamp(d as i64 * MICROS_PER_DAY, i)
            }));
        }
        (BinaryOp::Add, D::Interval, D::Date, D::Timestamp) => {
            return Ok(binary::<Interval, i32, i64>(left, right, D::Timestamp, "interval + date", |i, d| {
                datetime::add_interval_to_timestamp(d as i64 * MICROS_PER_DAY, i)
            }))
        }
        (BinaryOp::Add | BinaryOp::Sub, D::Timestamp, D::Interval, _) => {
            let sign = if op == BinaryOp::Sub { -1 } else { 1 };
            return Ok(binary::<i64, Interval, i64>(left, right, D::Timestamp, "timestamp + interval", move |t, i| {
                let i = if sign < 0 { i.checked_neg()? } else { i };
                datetime::add_interval_to_timestamp(t, i)
            }));
        }
        (BinaryOp::Add, D::Interval, D::Timestamp, _) => {
            return Ok(binary::<Interval, i64, i64>(left, right, D::Timestamp, "interval + timestamp", |i, t| {
                datetime::add_interval_to_timestamp(t, i)
            }))
        }
        (BinaryOp::Sub, D::Timestamp, D::Timestamp, _) => {
            return Ok(binary::<i64, i64, Interval>(left, right, D::Interval, "timestamp - timestamp", |a, b| {
                let micros = a.checked_sub(b)?;
                Some(Interval::new(0, (micros / MICROS_PER_DAY) as i32, micros % MICROS_PER_DAY))
            }))
        }
        (BinaryOp::Add, D::Interval, D::Interval, _) => {
            return Ok(binary::<Interval, Interval, Interval>(left, right, D::Interval, "interval + interval", |a, b| a.checked_add(b)))
        }
        (BinaryOp::Sub, D::Interval, D::Interval, _) => {
            return Ok(binary::<Interval, Interval, Interval>(left, right, D::Interval, "interval - interval", |a, b| {
                a.checked_add(b.checked_neg()?)
            }))
        }
        (BinaryOp::Mul, D::Interval, D::BigInt, _) => {
            return Ok(binary::<Interval, i64, Interval>(left, right, D::Interval, "interval * integer", scale_interval))
        }
        (BinaryOp::Mul, D::BigInt, D::Interval, _) => {
            return Ok(binary::<i64, Interval, Interval>(left, right, D::Interval, "integer * interval", |n, i| scale_interval(i, n)))
        }
        _ => {}
    }
    if let DataType::Decimal { scale: result_scale, precision } = data_type {
        let (ls, rs) = match (lt, rt) {
            (D::Decimal { scale: a, .. }, D::Decimal { scale: b, .. }) => (a, b),
            _ => return Err(internal_err!("decimal arithmetic on {lt} and {rt}")),
        };
        // Overflow is impossible when the result's digits fit the physical integer: always
        // for `i64` results (precision <= 18), and for `i128` ones when the operands'
        // digits (see `decimal_digits`) give at most 38.
        let fits = precision <= MAX_DECIMAL64_PRECISION || result_digits.is_some_and(|d| d <= MAX_DECIMAL_PRECISION as u32);
        let computed = match op {
            BinaryOp::Div => {
                let shift = (result_scale as i32 - ls as i32 + rs as i32).max(0) as u32;
                Ok(Arc::new(DecimalDivide { left, right, shift, data_type }) as ExprRef)
            }
            BinaryOp::Add => numeric::<Add>(left, right, data_type, literals, !fits),
            BinaryOp::Sub => numeric::<Sub>(left, right, data_type, literals, !fits),
            BinaryOp::Mul if ls + rs == result_scale => numeric::<Mul>(left, right, data_type, literals, !fits),
            BinaryOp::Mul => numeric::<Mul>(left, right, data_type, literals, true),
            BinaryOp::Mod => numeric::<Rem>(left, right, data_type, literals, true),
            other => Err(internal_err!("{other:?} on decimals")),
        }?;
        // At the 38-digit cap a result can exceed its precision without overflowing i128.
        let bounded = precision < MAX_DECIMAL_PRECISION || (fits && op != BinaryOp::Mod);
        return Ok(if bounded { computed } else { Arc::new(DecimalBound { child: computed, data_type }) });
    }
    // Integers and floats are checked (overflow is an error, never a wrapped value or an
    // infinity); only decimals of at most 18 digits run unchecked.
    match op {
        BinaryOp::Add => numeric::<Add>(left, right, data_type, literals, true),
        BinaryOp::Sub => numeric::<Sub>(left, right, data_type, literals, true),
        BinaryOp::Mul => numeric::<Mul>(left, right, data_type, literals, true),
        BinaryOp::Div => numeric::<Div>(left, right, data_type, literals, true),
        BinaryOp::Mod => numeric::<Rem>(left, right, data_type, literals, true),
        other => Err(internal_err!("{other:?} is not arithmetic")),
    }
}

/// TIMESTAMPTZ and TIME arithmetic: `timestamptz ± interval` (days and months on the
/// local calendar of the session's zone), `timestamptz - timestamptz`, `time ± interval`
/// (around the clock), `time - time`, `date ± time`. `None` for other operands.
fn time_arithmetic(op: BinaryOp, left: ExprRef, right: ExprRef, zone: TimeZone) -> Option<ExprRef> {
    use DataType as D;
    let (lt, rt) = (left.data_type(), right.data_type());
    let negate_if = |sub: bool, i: Interval| if sub { i.checked_neg() } else { Some(i) };
    let sub = op == BinaryOp::Sub;
    Some(match (op, lt, rt) {
        (BinaryOp::Add | BinaryOp::Sub, D::TimestampTz, D::Interval) => {
            binary::<i64, Interval, i64>(left, right, D::TimestampTz, "timestamptz + interval", move |t, i| {
                datetime::add_interval_to_timestamptz(t, negate_if(sub, i)?, &zone)
            })
        }
        (BinaryOp::Add, D::Interval, D::TimestampTz) => {
            binary::<Interval, i64, i64>(left, right, D::TimestampTz, "interval + timestamptz", move |i, t| {
                datetime::add_interval_to_timestamptz(t, i, &zone)
            })
        }
        (BinaryOp::Sub, D::TimestampTz, D::TimestampTz) => {
            binary::<i64, i64, Interval>(left, right, D::Interval, "timestamptz - timestamptz", |a, b| {
                let micros = a.checked_sub(b)?;
                Some(Interval::new(0, (micros / MICROS_PER_DAY) as i32, micros % MICROS_PER_DAY))
            })
        }
        (BinaryOp::Add | BinaryOp::Sub, D::Time, D::Interval) => {
            binary::<i64, Interval, i64>(left, right, D::Time, "time + interval", move |t, i| {
                Some(datetime::add_interval_to_time(t, negate_if(sub, Interval::new(0, 0, i.micros))?))
            })
        }
        (BinaryOp::Add, D::Interval, D::Time) => {
            binary::<Interval, i64, i64>(left, right, D::Time, "interval + time", |i, t| Some(datetime::add_interval_to_time(t, i)))
        }
        (BinaryOp::Sub, D::Time, D::Time) => {
            binary::<i64, i64, Interval>(left, right, D::Interval, "time - time", |a, b| Some(datetime::time_difference(a, b)))
        }
        (BinaryOp::Add | BinaryOp::Sub, D::Date, D::Time) => {
            binary::<i32, i64, i64>(left, right, D::Timestamp, "date + time", move |d, t| {
                let midnight = (d as i64).checked_mul(MICROS_PER_DAY)?;
                if sub {
                    midnight.checked_sub(t)
                } else {
                    midnight.checked_add(t)
                }
            })
        }
        (BinaryOp::Add, D::Time, D::Date) => {
            binary::<i64, i32, i64>(left, right, D::Timestamp, "time + date", |t, d| (d as i64).checked_mul(MICROS_PER_DAY)?.checked_add(t))
        }
        _ => return None,
    })
}

fn datetime_add_interval_date_swapped(i: Interval, d: i32) -> Option<i32> {
    datetime::add_interval_to_date(d, i)
}

fn scale_interval(i: Interval, n: i64) -> Option<Interval> {
    let n32 = i32::try_from(n).ok()?;
    Some(Interval::new(i.months.checked_mul(n32)?, i.days.checked_mul(n32)?, i.micros.checked_mul(n)?))
}

/// Unary minus.
#[derive(Debug)]
struct Negate<T> {
    child: ExprRef,
    _t: PhantomData<T>,
}

trait Negatable: NativeType {
    fn negate(self) -> Option<Self>;
}

macro_rules! negatable {
    ($($t:ty),*) => { $(impl Negatable for $t { fn negate(self) -> Option<Self> { self.checked_neg() } })* };
}
negatable!(i16, i32, i64, i128);

impl Negatable for f32 {
    fn negate(self) -> Option<Self> {
        Some(-self)
    }
}

impl Negatable for f64 {
    fn negate(self) -> Option<Self> {
        Some(-self)
    }
}

impl Negatable for Interval {
    fn negate(self) -> Option<Self> {
        self.checked_neg()
    }
}

impl<T: Negatable> PhysicalExpr for Negate<T> {
    fn data_type(&self) -> DataType {
        self.child.data_type()
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let values = v.values::<T>();
        let mut out = vec![T::default(); chunk.physical_len()];
        let mut failed = false;
        super::for_each_row(chunk.physical_len(), rows_of(chunk), |i| {
            if v.is_valid(i) {
                match values[i].negate() {
                    Some(x) => out[i] = x,
                    None => failed = true,
                }
            }
        });
        if failed {
            return Err(exec_err!("{} out of range in unary minus", v.data_type));
        }
        Ok(Vector::new(v.data_type, wrap(out), v.validity.clone()))
    }
}

pub fn negate(child: ExprRef) -> Result<ExprRef> {
    Ok(match child.data_type().physical() {
        PhysicalType::I16 => Arc::new(Negate::<i16> { child, _t: PhantomData }),
        PhysicalType::I32 => Arc::new(Negate::<i32> { child, _t: PhantomData }),
        PhysicalType::I64 => Arc::new(Negate::<i64> { child, _t: PhantomData }),
        PhysicalType::I128 => Arc::new(Negate::<i128> { child, _t: PhantomData }),
        PhysicalType::F32 => Arc::new(Negate::<f32> { child, _t: PhantomData }),
        PhysicalType::F64 => Arc::new(Negate::<f64> { child, _t: PhantomData }),
        PhysicalType::Interval => Arc::new(Negate::<Interval> { child, _t: PhantomData }),
        other => return Err(internal_err!("negation of {other:?}")),
    })
}
