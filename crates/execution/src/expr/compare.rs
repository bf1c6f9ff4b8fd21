//! Comparisons and IN lists.
//!
//! `Compare<T, Op>` is monomorphised per native type and operator; a constant operand is
//! captured in the node (`CompareConst`), so `l_shipdate <= DATE '1998-09-02'` runs as a
//! branch-free loop over `&[i32]` writing the positions that qualify.

use std::collections::HashSet;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

use apiary_common::{internal_err, Result};
use apiary_sql::expr::BinaryOp;
use apiary_sql::expr::Expr;
use apiary_types::datatype::PhysicalType;
use apiary_types::vector::NativeType;
use apiary_types::{DataChunk, DataType, Interval, ScalarValue, Vector};

use super::simd::{CmpKind, SimdLevel, SimdSelect};
use super::{chunk_with_rows, combined_validity, map_rows, rows_of, wrap, ExprRef, LiteralExpr, PhysicalExpr};

pub trait CmpOp: Send + Sync + Debug + Default + 'static {
    const KIND: CmpKind;
    /// For strings (byte order).
    fn apply<T: PartialOrd + ?Sized>(a: &T, b: &T) -> bool;

    /// For fixed-width values, with SQL's NaN rules.
    #[inline(always)]
    fn apply_native<T: NativeType>(a: T, b: T) -> bool {
        Self::KIND.test(a, b)
    }
}

macro_rules! cmp_op {
    ($name:ident, $op:tt) => {
        #[derive(Debug, Default)]
        pub struct $name;
        impl CmpOp for $name {
            const KIND: CmpKind = CmpKind::$name;
            #[inline(always)]
            fn apply<T: PartialOrd + ?Sized>(a: &T, b: &T) -> bool {
                a $op b
            }
        }
    };
}

cmp_op!(Eq, ==);
cmp_op!(NotEq, !=);
cmp_op!(Lt, <);
cmp_op!(LtEq, <=);
cmp_op!(Gt, >);
cmp_op!(GtEq, >=);

/// Native types that may have SIMD selection kernels.
pub(crate) trait MaybeSimd: NativeType {
    /// Positions of `values` satisfying the bounds, via a SIMD kernel when this type has
    /// one (`None` otherwise).
    fn simd_select(_values: &[Self], _first: (CmpKind, Self), _second: Option<(CmpKind, Self)>, _level: SimdLevel) -> Option<Vec<u32>> {
        None
    }
}

macro_rules! simd_type {
    ($($t:ty),*) => {$(
        impl MaybeSimd for $t {
            fn simd_select(values: &[Self], first: (CmpKind, Self), second: Option<(CmpKind, Self)>, level: SimdLevel) -> Option<Vec<u32>> {
                let mut out = vec![0u32; values.len()];
                let n = <$t as SimdSelect>::select(values, first, second, &mut out, level);
                out.truncate(n);
                Some(out)
            }
        }
    )*};
}
simd_type!(i32, i64, f64);

impl MaybeSimd for bool {}
impl MaybeSimd for i16 {}
impl MaybeSimd for i128 {}
impl MaybeSimd for f32 {}
impl MaybeSimd for Interval {}

/// Evaluates `child` for exactly `rows` of `chunk`.
pub(crate) fn evaluate_rows(child: &ExprRef, chunk: &DataChunk, rows: &[u32]) -> Result<Vector> {
    // A column does not depend on the rows: no view of the chunk (which clones every
    // column) just to read one.
    if rows.len() == chunk.row_count() || child.ignores_selection() {
        child.evaluate(chunk)
    } else {
        child.evaluate(&chunk_with_rows(chunk, rows))
    }
}

/// Positions of `rows` where `predicate(row)` holds and the row is valid; branch-free.
#[inline(always)]
pub(crate) fn filter_rows(
    rows: &[u32],
    len: usize,
    validity: Option<&apiary_common::Bitmap>,
    predicate: impl Fn(usize) -> bool,
) -> Vec<u32> {
    let mut out = vec![0u32; rows.len()];
    let mut count = 0;
    match validity {
        None if rows.len() == len => {
            for i in 0..len {
                out[count] = i as u32;
                count += predicate(i) as usize;
            }
        }
        None => {
            for &r in rows {
                out[count] = r;
                count += predicate(r as usize) as usize;
            }
        }
        Some(validity) => {
            for &r in rows {
                out[count] = r;
                count += (predicate(r as usize) && validity.get(r as usize)) as usize;
            }
        }
    }
    out.truncate(count);
    out
}

/// `expr op constant` for a fixed-width type.
#[derive(Debug)]
struct CompareConst<T, O> {
    child: ExprRef,
    constant: T,
    simd: SimdLevel,
    _op: PhantomData<O>,
}

impl<T: MaybeSimd, O: CmpOp> PhysicalExpr for CompareConst<T, O> {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let values = v.values::<T>();
        let c = self.constant;
        let out = map_rows(chunk.physical_len(), rows_of(chunk), |i| O::apply_native(values[i], c));
        Ok(Vector::new(DataType::Boolean, wrap(out), v.validity.clone()))
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let v = evaluate_rows(&self.child, chunk, rows)?;
        let values = v.values::<T>();
        let c = self.constant;
        // A whole vector without NULLs: a SIMD kernel writes the qualifying positions.
        if rows.len() == chunk.physical_len() && v.validity.is_none() {
            if let Some(selected) = T::simd_select(values, (O::KIND, c), None, self.simd) {
                return Ok(selected);
            }
        }
        Ok(filter_rows(rows, chunk.physical_len(), v.validity.as_ref(), |i| O::apply_native(values[i], c)))
    }
}

/// `lower op1 expr op2 upper`: a range on one expression (BETWEEN, and pairs of bounds),
/// evaluated in one pass.
#[derive(Debug)]
struct RangeConst<T> {
    child: ExprRef,
    lower: (CmpKind, T),
    upper: (CmpKind, T),
    simd: SimdLevel,
}

impl<T: MaybeSimd> RangeConst<T> {
    #[inline(always)]
    fn test(&self, v: T) -> bool {
        self.lower.0.test(v, self.lower.1) && self.upper.0.test(v, self.upper.1)
    }
}

impl<T: MaybeSimd> PhysicalExpr for RangeConst<T> {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let values = v.values::<T>();
        let out = map_rows(chunk.physical_len(), rows_of(chunk), |i| self.test(values[i]));
        Ok(Vector::new(DataType::Boolean, wrap(out), v.validity.clone()))
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let v = evaluate_rows(&self.child, chunk, rows)?;
        let values = v.values::<T>();
        if rows.len() == chunk.physical_len() && v.validity.is_none() {
            if let Some(selected) = T::simd_select(values, self.lower, Some(self.upper), self.simd) {
                return Ok(selected);
            }
        }
        // The bounds' kinds are matched once, not per row (a jump per row cost TPC-H Q6's
        // discount range ten times the comparisons).
        let (len, validity, (lk, l), (uk, u)) = (chunk.physical_len(), v.validity.as_ref(), self.lower, self.upper);
        Ok(match (lk, uk) {
            (CmpKind::GtEq, CmpKind::LtEq) => filter_rows(rows, len, validity, |i| !values[i].sql_lt(l) & !u.sql_lt(values[i])),
            (CmpKind::GtEq, CmpKind::Lt) => filter_rows(rows, len, validity, |i| !values[i].sql_lt(l) & values[i].sql_lt(u)),
            (CmpKind::Gt, CmpKind::LtEq) => filter_rows(rows, len, validity, |i| l.sql_lt(values[i]) & !u.sql_lt(values[i])),
            (CmpKind::Gt, CmpKind::Lt) => filter_rows(rows, len, validity, |i| l.sql_lt(values[i]) & values[i].sql_lt(u)),
            _ => filter_rows(rows, len, validity, |i| self.test(values[i])),
        })
    }
}

/// The kernel comparison of a comparison operator (not the DISTINCT FROM ones).
pub(crate) fn comparison_kind(op: BinaryOp) -> Option<CmpKind> {
    Some(match op {
        BinaryOp::Eq => CmpKind::Eq,
        BinaryOp::NotEq => CmpKind::NotEq,
        BinaryOp::Lt => CmpKind::Lt,
        BinaryOp::LtEq => CmpKind::LtEq,
        BinaryOp::Gt => CmpKind::Gt,
        BinaryOp::GtEq => CmpKind::GtEq,
        _ => return None,
    })
}

/// The kernel comparison of a range bound (`<`, `<=`, `>`, `>=`).
fn cmp_kind(op: BinaryOp) -> Option<CmpKind> {
    comparison_kind(op).filter(|k| !matches!(k, CmpKind::Eq | CmpKind::NotEq))
}

/// Splits conjuncts into (column, lower bound, upper bound) ranges on one column and the
/// rest: `x >= a AND x < b` becomes one range.
pub(crate) fn extract_ranges(parts: Vec<Expr>) -> (Vec<(Expr, (CmpKind, ScalarValue), (CmpKind, ScalarValue))>, Vec<Expr>) {
    // (column, kind, constant) of each bound; `x op c` and `c op x` both count.
    let bound = |e: &Expr| -> Option<(Expr, CmpKind, ScalarValue)> {
        let Expr::Binary { op, left, right, .. } = e else { return None };
        match (left.as_ref(), right.as_ref()) {
            (Expr::Column(_), Expr::Literal(v, _)) if !v.is_null() => Some(((**left).clone(), cmp_kind(*op)?, v.clone())),
            (Expr::Literal(v, _), Expr::Column(_)) if !v.is_null() => Some(((**right).clone(), cmp_kind(op.flipped())?, v.clone())),
            _ => None,
        }
    };
    let mut ranges = Vec::new();
    let mut used = vec![false; parts.len()];
    for i in 0..parts.len() {
        if used[i] {
            continue;
        }
        let Some((column, kind_i, value_i)) = bound(&parts[i]) else { continue };
        let is_lower = |k: CmpKind| matches!(k, CmpKind::Gt | CmpKind::GtEq);
        for j in i + 1..parts.len() {
            if used[j] {
                continue;
            }
            let Some((other, kind_j, value_j)) = bound(&parts[j]) else { continue };
            if other != column || is_lower(kind_i) == is_lower(kind_j) {
                continue;
            }
            let (lower, upper) = if is_lower(kind_i) {
                ((kind_i, value_i.clone()), (kind_j, value_j))
            } else {
                ((kind_j, value_j), (kind_i, value_i.clone()))
            };
            ranges.push((column.clone(), lower, upper));
            used[i] = true;
            used[j] = true;
            break;
        }
    }
    let rest = parts.into_iter().zip(used).filter(|(_, u)| !u).map(|(p, _)| p).collect();
    (ranges, rest)
}

/// Compiles a range predicate on `child`.
pub fn range(child: ExprRef, lower: (CmpKind, ScalarValue), upper: (CmpKind, ScalarValue), simd: SimdLevel) -> Result<ExprRef> {
    macro_rules! native {
        ($t:ty) => {{
            let l = <$t>::from_scalar(&lower.1)
                .ok_or_else(|| internal_err!("range bound {:?} does not match {:?}", lower.1, child.data_type()))?;
            let u = <$t>::from_scalar(&upper.1)
                .ok_or_else(|| internal_err!("range bound {:?} does not match {:?}", upper.1, child.data_type()))?;
            Arc::new(RangeConst::<$t> { child, lower: (lower.0, l), upper: (upper.0, u), simd }) as ExprRef
        }};
    }
    Ok(match child.data_type().physical() {
        PhysicalType::I16 => native!(i16),
        PhysicalType::I32 => native!(i32),
        PhysicalType::I64 => native!(i64),
        PhysicalType::I128 => native!(i128),
        PhysicalType::F32 => native!(f32),
        PhysicalType::F64 => native!(f64),
        _ => {
            // Other types (strings): two comparisons.
            let lo = comparison(op_of(lower.0), child.clone(), child.clone(), None, Some(&lower.1), simd)?;
            let hi = comparison(op_of(upper.0), child.clone(), child, None, Some(&upper.1), simd)?;
            super::logic::and(vec![lo, hi])
        }
    })
}

fn op_of(kind: CmpKind) -> BinaryOp {
    match kind {
        CmpKind::Eq => BinaryOp::Eq,
        CmpKind::NotEq => BinaryOp::NotEq,
        CmpKind::Lt => BinaryOp::Lt,
        CmpKind::LtEq => BinaryOp::LtEq,
        CmpKind::Gt => BinaryOp::Gt,
        CmpKind::GtEq => BinaryOp::GtEq,
    }
}

/// `expr op expr` for a fixed-width type.
#[derive(Debug)]
struct Compare<T, O> {
    left: ExprRef,
    right: ExprRef,
    _types: PhantomData<(T, O)>,
}

impl<T: NativeType, O: CmpOp> PhysicalExpr for Compare<T, O> {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let l = self.left.evaluate(chunk)?;
        let r = self.right.evaluate(chunk)?;
        let (lv, rv) = (l.values::<T>(), r.values::<T>());
        let out = map_rows(chunk.physical_len(), rows_of(chunk), |i| O::apply_native(lv[i], rv[i]));
        Ok(Vector::new(DataType::Boolean, wrap(out), combined_validity(&[&l, &r])))
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let l = evaluate_rows(&self.left, chunk, rows)?;
        let r = evaluate_rows(&self.right, chunk, rows)?;
        let (lv, rv) = (l.values::<T>(), r.values::<T>());
        let validity = combined_validity(&[&l, &r]);
        Ok(filter_rows(rows, chunk.physical_len(), validity.as_ref(), |i| O::apply_native(lv[i], rv[i])))
    }
}

/// `string_expr op 'constant'`.
#[derive(Debug)]
struct StrCompareConst<O> {
    child: ExprRef,
    constant: String,
    /// The constant's view when it is inline (at most 12 bytes): a string equals it
    /// exactly when their 16-byte views are equal (inline views are zero padded, longer
    /// strings differ in length), a branch-free test of two words.
    inline_view: Option<u128>,
    _op: PhantomData<O>,
}

impl<O: CmpOp> StrCompareConst<O> {
    fn new(child: ExprRef, constant: String) -> Self {
        let inline_view =
            (constant.len() <= apiary_types::string::INLINE_LEN).then(|| apiary_types::StrView::inline(constant.as_bytes()).to_bits());
        StrCompareConst { child, constant, inline_view, _op: PhantomData }
    }

    /// `views`: the column's views, fetched once per vector (`StrColumn::views` may
    /// decode them on first use).
    #[inline(always)]
    fn test(&self, views: &[apiary_types::StrView], strings: &apiary_types::StrColumn, i: usize) -> bool {
        if matches!(O::KIND, CmpKind::Eq | CmpKind::NotEq) {
            if let Some(constant) = &self.inline_view {
                return (views[i].to_bits() == *constant) == (O::KIND == CmpKind::Eq);
            }
            // Length and 4-byte prefix sit in the view: most rows are decided without
            // touching the string bytes.
            let view = &views[i];
            let c = self.constant.as_bytes();
            let equal = view.len() == c.len() && view.prefix()[..c.len().min(4)] == c[..c.len().min(4)] && strings.get_bytes(i) == c;
            return equal == (O::KIND == CmpKind::Eq);
        }
        O::apply(strings.get_bytes(i), self.constant.as_bytes())
    }
}

impl<O: CmpOp> PhysicalExpr for StrCompareConst<O> {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let strings = v.strings();
        let views = strings.views().as_slice();
        let out = map_rows(chunk.physical_len(), rows_of(chunk), |i| self.test(views, strings, i));
        Ok(Vector::new(DataType::Boolean, wrap(out), v.validity.clone()))
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let v = evaluate_rows(&self.child, chunk, rows)?;
        let strings = v.strings();
        let views = strings.views().as_slice();
        Ok(filter_rows(rows, chunk.physical_len(), v.validity.as_ref(), |i| self.test(views, strings, i)))
    }
}

/// `string_expr op string_expr`.
#[derive(Debug)]
struct StrCompare<O> {
    left: ExprRef,
    right: ExprRef,
    _op: PhantomData<O>,
}

impl<O: CmpOp> PhysicalExpr for StrCompare<O> {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let l = self.left.evaluate(chunk)?;
        let r = self.right.evaluate(chunk)?;
        let (ls, rs) = (l.strings(), r.strings());
        let out = map_rows(chunk.physical_len(), rows_of(chunk), |i| O::apply(ls.get_bytes(i), rs.get_bytes(i)));
        Ok(Vector::new(DataType::Boolean, wrap(out), combined_validity(&[&l, &r])))
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let l = evaluate_rows(&self.left, chunk, rows)?;
        let r = evaluate_rows(&self.right, chunk, rows)?;
        let (ls, rs) = (l.strings(), r.strings());
        let validity = combined_validity(&[&l, &r]);
        Ok(filter_rows(rows, chunk.physical_len(), validity.as_ref(), |i| O::apply(ls.get_bytes(i), rs.get_bytes(i))))
    }
}

/// Extracts a native constant from a scalar of the matching physical type.
pub(crate) trait FromScalar: Sized {
    fn from_scalar(value: &ScalarValue) -> Option<Self>;
}

macro_rules! from_scalar {
    ($t:ty, $($pat:pat => $e:expr),+) => {
        impl FromScalar for $t {
            fn from_scalar(value: &ScalarValue) -> Option<Self> {
                match value { $($pat => Some($e),)+ _ => None }
            }
        }
    };
}

from_scalar!(bool, ScalarValue::Boolean(b) => *b);
from_scalar!(i16, ScalarValue::Int16(v) => *v);
from_scalar!(i32, ScalarValue::Int32(v) => *v, ScalarValue::Date(v) => *v);
from_scalar!(
    i64,
    ScalarValue::Int64(v) => *v,
    ScalarValue::Timestamp(v) | ScalarValue::TimestampTz(v) | ScalarValue::Time(v) => *v,
    ScalarValue::Decimal(v, _, _) => *v as i64
);
from_scalar!(i128, ScalarValue::Decimal(v, _, _) => *v);
from_scalar!(f32, ScalarValue::Float32(v) => *v);
from_scalar!(f64, ScalarValue::Float64(v) => *v);
from_scalar!(Interval, ScalarValue::Interval(v) => *v);

fn make_compare<O: CmpOp>(
    physical: PhysicalType,
    left: ExprRef,
    right: ExprRef,
    constant: Option<&ScalarValue>,
    simd: SimdLevel,
) -> Result<ExprRef> {
    macro_rules! native {
        ($t:ty) => {
            match constant {
                Some(c) => {
                    let constant = <$t>::from_scalar(c).ok_or_else(|| internal_err!("constant {c:?} does not match {:?}", physical))?;
                    Arc::new(CompareConst::<$t, O> { child: left, constant, simd, _op: PhantomData }) as ExprRef
                }
                None => Arc::new(Compare::<$t, O> { left, right, _types: PhantomData }) as ExprRef,
            }
        };
    }
    Ok(match physical {
        PhysicalType::Bool => native!(bool),
        PhysicalType::I16 => native!(i16),
        PhysicalType::I32 => native!(i32),
        PhysicalType::I64 => native!(i64),
        PhysicalType::I128 => native!(i128),
        PhysicalType::F32 => native!(f32),
        PhysicalType::F64 => native!(f64),
        PhysicalType::Interval => native!(Interval),
        PhysicalType::Str => match constant {
            Some(ScalarValue::Utf8(s)) => Arc::new(StrCompareConst::<O>::new(left, s.clone())),
            Some(other) => return Err(internal_err!("string comparison with constant {other:?}")),
            None => Arc::new(StrCompare::<O> { left, right, _op: PhantomData }),
        },
    })
}

/// Compiles `left op right`; `left_literal` / `right_literal` are the constant operands.
pub fn comparison(
    op: BinaryOp,
    left: ExprRef,
    right: ExprRef,
    left_literal: Option<&ScalarValue>,
    right_literal: Option<&ScalarValue>,
    simd: SimdLevel,
) -> Result<ExprRef> {
    if matches!(op, BinaryOp::IsDistinctFrom | BinaryOp::IsNotDistinctFrom) {
        return Ok(Arc::new(DistinctFrom { left, right, negated: op == BinaryOp::IsNotDistinctFrom }));
    }
    if left_literal.is_some_and(|v| v.is_null()) || right_literal.is_some_and(|v| v.is_null()) {
        return Ok(Arc::new(LiteralExpr { value: ScalarValue::Null, data_type: DataType::Boolean }));
    }
    // Put the constant on the right.
    let (op, left, right, constant) = match (left_literal, right_literal) {
        (_, Some(c)) => (op, left, right, Some(c)),
        (Some(c), None) => (op.flipped(), right, left, Some(c)),
        (None, None) => (op, left, right, None),
    };
    let physical = left.data_type().physical();
    match op {
        BinaryOp::Eq => make_compare::<Eq>(physical, left, right, constant, simd),
        BinaryOp::NotEq => make_compare::<NotEq>(physical, left, right, constant, simd),
        BinaryOp::Lt => make_compare::<Lt>(physical, left, right, constant, simd),
        BinaryOp::LtEq => make_compare::<LtEq>(physical, left, right, constant, simd),
        BinaryOp::Gt => make_compare::<Gt>(physical, left, right, constant, simd),
        BinaryOp::GtEq => make_compare::<GtEq>(physical, left, right, constant, simd),
        other => Err(internal_err!("{other:?} is not a comparison")),
    }
}

/// `IS [NOT] DISTINCT FROM`: equality where NULL equals NULL; never NULL itself.
#[derive(Debug)]
struct DistinctFrom {
    left: ExprRef,
    right: ExprRef,
    /// `true` for IS NOT DISTINCT FROM.
    negated: bool,
}

impl PhysicalExpr for DistinctFrom {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let l = self.left.evaluate(chunk)?;
        let r = self.right.evaluate(chunk)?;
        let equal = equal_rows(&l, &r);
        let out = map_rows(chunk.physical_len(), rows_of(chunk), |i| {
            let same = match (l.is_valid(i), r.is_valid(i)) {
                (true, true) => equal(i),
                (false, false) => true,
                _ => false,
            };
            same == self.negated
        });
        Ok(Vector::new(DataType::Boolean, wrap(out), None))
    }
}

/// A row-equality test between two vectors of the same physical type.
pub(crate) fn equal_rows<'a>(l: &'a Vector, r: &'a Vector) -> Box<dyn Fn(usize) -> bool + 'a> {
    use apiary_types::VectorData as D;
    match (&l.data, &r.data) {
        (D::Bool(a), D::Bool(b)) => Box::new(move |i| a[i] == b[i]),
        (D::I16(a), D::I16(b)) => Box::new(move |i| a[i] == b[i]),
        (D::I32(a), D::I32(b)) => Box::new(move |i| a[i] == b[i]),
        (D::I64(a), D::I64(b)) => Box::new(move |i| a[i] == b[i]),
        (D::I128(a), D::I128(b)) => Box::new(move |i| a[i] == b[i]),
        (D::F32(a), D::F32(b)) => Box::new(move |i| a[i].sql_eq(b[i])),
        (D::F64(a), D::F64(b)) => Box::new(move |i| a[i].sql_eq(b[i])),
        (D::Interval(a), D::Interval(b)) => Box::new(move |i| a[i] == b[i]),
        (D::Str(a), D::Str(b)) => Box::new(move |i| a.get_bytes(i) == b.get_bytes(i)),
        _ => Box::new(|_| false),
    }
}

/// `x [NOT] IN (constants)` for a fixed-width type.
#[derive(Debug)]
struct InListNative<T> {
    child: ExprRef,
    values: Vec<T>,
    negated: bool,
    /// The list contains NULL: a non-match is NULL instead of FALSE.
    has_null: bool,
}

impl<T: NativeType> InListNative<T> {
    #[inline(always)]
    fn contains(&self, v: &T) -> bool {
        self.values.iter().any(|x| x.sql_eq(*v))
    }
}

impl<T: NativeType> PhysicalExpr for InListNative<T> {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let values = v.values::<T>();
        let found = map_rows(chunk.physical_len(), rows_of(chunk), |i| self.contains(&values[i]));
        Ok(in_list_result(found, v.validity.as_ref(), self.negated, self.has_null))
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        if self.has_null && self.negated {
            // NOT IN (..., NULL) is never TRUE.
            return Ok(Vec::new());
        }
        let v = evaluate_rows(&self.child, chunk, rows)?;
        let values = v.values::<T>();
        Ok(filter_rows(rows, chunk.physical_len(), v.validity.as_ref(), |i| self.contains(&values[i]) != self.negated))
    }
}

/// `x [NOT] IN ('a', 'b', ...)`.
#[derive(Debug)]
struct InListStr {
    child: ExprRef,
    values: StringSet,
    /// A short list of short constants as view bits (see `StrCompareConst`): each row is
    /// tested by comparing its view with every constant, without branches.
    inline_views: Option<Vec<u128>>,
    negated: bool,
    has_null: bool,
}

impl InListStr {
    fn new(child: ExprRef, values: Vec<Vec<u8>>, negated: bool, has_null: bool) -> InListStr {
        let inline_views = (values.len() <= SMALL_STRING_SET && values.iter().all(|v| v.len() <= apiary_types::string::INLINE_LEN))
            .then(|| values.iter().map(|v| apiary_types::StrView::inline(v).to_bits()).collect());
        InListStr { child, values: StringSet::new(values), inline_views, negated, has_null }
    }

    /// `column_views`: the column's views, fetched once per vector.
    #[inline(always)]
    fn contains(&self, column_views: &[apiary_types::StrView], strings: &apiary_types::StrColumn, i: usize) -> bool {
        match &self.inline_views {
            Some(views) => {
                let bits = column_views[i].to_bits();
                views.iter().fold(false, |found, &c| found | (bits == c))
            }
            None => self.values.contains(strings.get_bytes(i)),
        }
    }
}

/// A set of constant strings: a linear scan for short lists (compares lengths first),
/// a hash set with the engine's byte hash for long ones.
#[derive(Debug)]
pub(crate) struct StringSet {
    small: Vec<Vec<u8>>,
    large: Option<HashSet<Vec<u8>, BuildBytesHasher>>,
}

/// Lists up to this long are scanned linearly.
const SMALL_STRING_SET: usize = 8;

impl StringSet {
    pub fn new(values: Vec<Vec<u8>>) -> StringSet {
        if values.len() <= SMALL_STRING_SET {
            StringSet { small: values, large: None }
        } else {
            StringSet { small: Vec::new(), large: Some(values.into_iter().collect()) }
        }
    }

    #[inline(always)]
    pub fn contains(&self, value: &[u8]) -> bool {
        match &self.large {
            None => self.small.iter().any(|v| v.len() == value.len() && v.as_slice() == value),
            Some(set) => set.contains(value),
        }
    }
}

/// `Hasher` over byte strings using [`apiary_common::hash::hash_bytes`].
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct BuildBytesHasher;

pub(crate) struct BytesHasher(u64);

impl std::hash::Hasher for BytesHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = apiary_common::hash::combine_hashes(self.0, apiary_common::hash::hash_bytes(bytes));
    }
}

impl std::hash::BuildHasher for BuildBytesHasher {
    type Hasher = BytesHasher;
    fn build_hasher(&self) -> BytesHasher {
        BytesHasher(0)
    }
}

impl PhysicalExpr for InListStr {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let strings = v.strings();
        let views = strings.views().as_slice();
        let found = map_rows(chunk.physical_len(), rows_of(chunk), |i| self.contains(views, strings, i));
        Ok(in_list_result(found, v.validity.as_ref(), self.negated, self.has_null))
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        if self.has_null && self.negated {
            return Ok(Vec::new());
        }
        let v = evaluate_rows(&self.child, chunk, rows)?;
        let strings = v.strings();
        let views = strings.views().as_slice();
        Ok(filter_rows(rows, chunk.physical_len(), v.validity.as_ref(), |i| self.contains(views, strings, i) != self.negated))
    }
}

fn in_list_result(found: Vec<bool>, validity: Option<&apiary_common::Bitmap>, negated: bool, has_null: bool) -> Vector {
    let mut result_validity = validity.cloned();
    if has_null {
        // A non-match against a list with NULL is unknown.
        let mut v = result_validity.unwrap_or_else(|| apiary_common::Bitmap::new(found.len(), true));
        for (i, f) in found.iter().enumerate() {
            if !f {
                v.set(i, false);
            }
        }
        result_validity = Some(v);
    }
    let values = found.into_iter().map(|f| f != negated).collect::<Vec<bool>>();
    Vector::new(DataType::Boolean, wrap(values), result_validity)
}

pub fn in_list(child: ExprRef, constants: Vec<ScalarValue>, negated: bool) -> Result<ExprRef> {
    let has_null = constants.iter().any(|c| c.is_null());
    let non_null: Vec<ScalarValue> = constants.into_iter().filter(|c| !c.is_null()).collect();
    macro_rules! native {
        ($t:ty) => {{
            let values = non_null
                .iter()
                .map(|c| <$t>::from_scalar(c).ok_or_else(|| internal_err!("IN list constant {c:?} has the wrong type")))
                .collect::<Result<Vec<$t>>>()?;
            Arc::new(InListNative::<$t> { child, values, negated, has_null }) as ExprRef
        }};
    }
    Ok(match child.data_type().physical() {
        PhysicalType::Bool => native!(bool),
        PhysicalType::I16 => native!(i16),
        PhysicalType::I32 => native!(i32),
        PhysicalType::I64 => native!(i64),
        PhysicalType::I128 => native!(i128),
        PhysicalType::F32 => native!(f32),
        PhysicalType::F64 => native!(f64),
        PhysicalType::Interval => native!(Interval),
        PhysicalType::Str => {
            let values = non_null.iter().filter_map(|c| c.as_str().map(|s| s.as_bytes().to_vec())).collect();
            Arc::new(InListStr::new(child, values, negated, has_null))
        }
    })
}
