//! Compiled expressions ("query bees").
//!
//! A bound [`Expr`] is compiled once per query into a tree of [`PhysicalExpr`] objects.
//! Each node is a struct generic over the native type and operator it implements
//! (`Compare<i32, Lt>`, `Arithmetic<i64, Add>`, ...), with constants captured, so the
//! per-row loop inside it has no type dispatch. Dispatch happens once per vector, when a
//! node calls its children.
//!
//! Evaluation contract: `evaluate(chunk)` returns a vector with `chunk.physical_len()`
//! rows; only the rows in `chunk.selection()` (all rows when `None`) are guaranteed to be
//! computed — the others hold unspecified values. Errors (overflow, division by zero,
//! failed casts) are raised only for selected rows. `select(chunk, rows)` narrows a list
//! of row positions to those where a boolean expression is TRUE.
//!
//! ```text
//! compare.rs     =, <>, <, <=, >, >=, IS [NOT] DISTINCT FROM, IN lists
//! arithmetic.rs  + - * / % on integers, floats, decimals; date and interval arithmetic
//! cast.rs        CAST between all supported types
//! logic.rs       AND / OR / NOT / IS NULL / CASE / COALESCE (three-valued logic)
//! string.rs      LIKE, SUBSTRING, UPPER/LOWER, TRIM, LENGTH, ||, ...
//! text.rs        split_part, left/right, lpad/rpad, concat_ws, md5, initcap, chr, ...
//! regex.rs       regexp_matches, regexp_replace, regexp_extract (`regex` crate)
//! functions.rs   EXTRACT, ROUND, ABS, math and date functions
//! datetime_functions.rs  date_diff, make_date, strftime/strptime, to_char, age, ...
//! datetime_format.rs     strftime codes and to_char patterns, compiled once
//! query_mask.rs  which of the queries sharing a scan each row qualifies for
//! ```

mod arithmetic;
mod cast;
mod compare;
pub mod datetime_format;
mod datetime_functions;
mod functions;
pub mod jit;
mod logic;
mod narrow_decimal;
mod query_mask;
mod regex;
mod sequence;
pub mod simd;
mod string;
mod text;

use std::fmt::Debug;
use std::sync::Arc;

use apiary_common::{internal_err, Result};
use apiary_sql::expr::{BinaryOp, ColumnId, Expr, ScalarFunction, UnaryOp};
use apiary_types::{DataChunk, DataType, ScalarValue, TimeZone, Vector, VectorData};

pub use cast::{cast_vector, cast_vector_in, format_value as cast_vector_value_to_string, format_value_in};
pub(crate) use compare::{comparison_kind, BuildBytesHasher};
pub use string::LikePattern;

pub type ExprRef = Arc<dyn PhysicalExpr>;

pub trait PhysicalExpr: Send + Sync + Debug {
    fn data_type(&self) -> DataType;

    /// Computes the expression for the selected rows of `chunk` (see module docs).
    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector>;

    /// [`Self::evaluate`], or where the expression can, its values in a narrower
    /// physical type: a 38-digit decimal whose values fit 64 bits as `i64`, typed
    /// DECIMAL(18,s) with the same scale. Only for consumers that take either (decimal
    /// sums, see `AggregateSpec::accepts_narrow_input`).
    fn evaluate_narrow(&self, chunk: &DataChunk) -> Result<Vector> {
        self.evaluate(chunk)
    }

    /// For BOOLEAN expressions: the subset of `rows` (positions in `chunk`, ascending)
    /// where the expression is TRUE. `rows` must be a subset of the chunk's selection.
    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let restricted = chunk_with_rows(chunk, rows);
        let result = self.evaluate(&restricted)?;
        Ok(true_rows(&result, rows))
    }

    /// Whether evaluating ignores the chunk's selection (a column, a constant): callers
    /// then evaluate on the chunk as it is instead of building a view with their rows.
    fn ignores_selection(&self) -> bool {
        false
    }
}

/// A view of `chunk` whose selection is `rows` (cheap: vectors are shared).
pub fn chunk_with_rows(chunk: &DataChunk, rows: &[u32]) -> DataChunk {
    let selection = if rows.len() == chunk.physical_len() { None } else { Some(rows.to_vec()) };
    DataChunk::new(chunk.columns.clone(), chunk.physical_len()).with_selection(selection)
}

/// Positions among `rows` where a boolean vector is TRUE (not NULL).
pub fn true_rows(vector: &Vector, rows: &[u32]) -> Vec<u32> {
    let values = vector.values::<bool>();
    match &vector.validity {
        None => rows.iter().copied().filter(|&r| values[r as usize]).collect(),
        Some(validity) => rows.iter().copied().filter(|&r| values[r as usize] && validity.get(r as usize)).collect(),
    }
}

/// All row positions of a chunk's selection.
pub fn selected_rows(chunk: &DataChunk) -> Vec<u32> {
    match chunk.selection() {
        Some(rows) => rows.to_vec(),
        None => (0..chunk.physical_len() as u32).collect(),
    }
}

/// Reads column `index` of the input chunk.
#[derive(Debug)]
pub struct ColumnExpr {
    pub index: usize,
    pub data_type: DataType,
}

impl PhysicalExpr for ColumnExpr {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        Ok(chunk.columns[self.index].clone())
    }

    fn ignores_selection(&self) -> bool {
        true
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        Ok(true_rows(&chunk.columns[self.index], rows))
    }
}

/// A constant.
#[derive(Debug)]
pub struct LiteralExpr {
    pub value: ScalarValue,
    pub data_type: DataType,
}

impl PhysicalExpr for LiteralExpr {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        Ok(Vector::from_scalar(&self.value, self.data_type, chunk.physical_len()))
    }

    fn ignores_selection(&self) -> bool {
        true
    }

    fn select(&self, _chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        Ok(if self.value == ScalarValue::Boolean(true) { rows.to_vec() } else { Vec::new() })
    }
}

/// Where each input column lives in the chunks an expression will see.
pub trait Layout {
    fn position(&self, id: ColumnId) -> Option<usize>;
}

impl Layout for [ColumnId] {
    fn position(&self, id: ColumnId) -> Option<usize> {
        self.iter().position(|c| *c == id)
    }
}

impl Layout for Vec<ColumnId> {
    fn position(&self, id: ColumnId) -> Option<usize> {
        self.iter().position(|c| *c == id)
    }
}

/// Choices made when compiling expressions (from the session settings).
#[derive(Debug, Clone, Copy)]
pub struct CompileOptions {
    /// Instruction set for selection kernels (`Scalar` when `SET simd = off`).
    pub simd: simd::SimdLevel,
    /// The session's time zone, captured by the kernels that need one (TIMESTAMPTZ
    /// casts, fields, truncation, interval arithmetic).
    pub time_zone: TimeZone,
    /// Run 38-digit decimal `+ - *` on 64 bits where the values fit, falling back to the
    /// 128-bit kernels per chunk (`narrow_decimal`); off only to compare the two.
    pub narrow_decimals: bool,
    /// When expression programs are compiled to machine code (`jit`).
    pub jit: jit::JitMode,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions { simd: simd::detected_level(), time_zone: TimeZone::UTC, narrow_decimals: true, jit: jit::JitMode::On }
    }
}

/// Compiles a bound expression against the column layout of its input chunks.
pub fn compile(expr: &Expr, layout: &dyn Layout) -> Result<ExprRef> {
    compile_with(expr, layout, &CompileOptions::default())
}

/// [`compile`] with explicit options.
pub fn compile_with(expr: &Expr, layout: &dyn Layout, options: &CompileOptions) -> Result<ExprRef> {
    let compile = |e: &Expr, layout: &dyn Layout| compile_with(e, layout, options);
    Ok(match expr {
        Expr::Column(c) => {
            let index = layout.position(c.id).ok_or_else(|| internal_err!("column {} ({}) is not in the input", c.name, c.id))?;
            Arc::new(ColumnExpr { index, data_type: c.data_type })
        }
        Expr::Literal(value, data_type) => Arc::new(LiteralExpr { value: value.clone(), data_type: *data_type }),
        Expr::Unary(UnaryOp::Not, inner) => logic::not(compile(inner, layout)?),
        Expr::Unary(UnaryOp::Negate, inner) => arithmetic::negate(compile(inner, layout)?)?,
        Expr::Binary { op: BinaryOp::And, .. } => {
            // Flatten chains of AND into one node so selections narrow step by step;
            // a lower and an upper bound on one column become one range kernel.
            let parts = expr.clone().split_conjunction();
            let (ranges, rest) = compare::extract_ranges(parts);
            let mut children = Vec::new();
            for (column, lower, upper) in ranges {
                children.push(compare::range(compile(&column, layout)?, lower, upper, options.simd)?);
            }
            for part in &rest {
                children.push(compile(part, layout)?);
            }
            if children.len() == 1 {
                children.pop().expect("one child")
            } else {
                logic::and(children)
            }
        }
        Expr::Binary { op: BinaryOp::Or, .. } => {
            let parts: Vec<&Expr> = expr.split_disjunction();
            let children = parts.iter().map(|p| compile(p, layout)).collect::<Result<Vec<_>>>()?;
            logic::or(children)
        }
        Expr::Binary { op, left, right, data_type } => {
            let l = compile(left, layout)?;
            let r = compile(right, layout)?;
            if op.is_comparison() {
                compare::comparison(*op, l, r, literal_of(left), literal_of(right), options.simd)?
            } else if *op == BinaryOp::Concat {
                string::concat(vec![l, r], true)
            } else {
                let wide = arithmetic::arithmetic(
                    *op,
                    l,
                    r,
                    *data_type,
                    (literal_of(left), literal_of(right)),
                    decimal_digits(expr),
                    options.time_zone,
                )?;
                match (op, data_type) {
                    (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul, DataType::Decimal { .. }) if options.narrow_decimals => {
                        narrow_decimal::compile(expr, wide, layout, options)?
                    }
                    _ => wide,
                }
            }
        }
        Expr::IsNull { expr, negated } => logic::is_null(compile(expr, layout)?, *negated),
        Expr::Cast { expr, to } => cast::cast_expr(compile(expr, layout)?, *to, options.time_zone),
        Expr::Case { whens, otherwise, data_type } => {
            let compiled_whens = whens.iter().map(|(w, t)| Ok((compile(w, layout)?, compile(t, layout)?))).collect::<Result<Vec<_>>>()?;
            let compiled_otherwise = otherwise.as_ref().map(|e| compile(e, layout)).transpose()?;
            let infallible = |e: &Expr| matches!(e, Expr::Column(_) | Expr::Literal(..));
            let blendable = whens.iter().all(|(_, t)| infallible(t)) && otherwise.as_ref().is_none_or(|e| infallible(e));
            let otherwise_is_null = otherwise.as_ref().is_none_or(|e| matches!(e.as_ref(), Expr::Literal(v, _) if v.is_null()));
            logic::case_of(compiled_whens, compiled_otherwise, *data_type, blendable, otherwise_is_null)
        }
        Expr::InList { expr, list, negated } => {
            let value = compile(expr, layout)?;
            if list.iter().all(|e| e.is_literal()) {
                let constants: Vec<ScalarValue> = list.iter().filter_map(|e| literal_of(e).cloned()).collect();
                compare::in_list(value, constants, *negated)?
            } else {
                // Non-constant lists: x IN (a, b) == x = a OR x = b.
                let mut parts = Vec::new();
                for item in list {
                    let item_expr = compile(item, layout)?;
                    parts.push(compare::comparison(BinaryOp::Eq, value.clone(), item_expr, None, literal_of(item), options.simd)?);
                }
                let any = logic::or(parts);
                if *negated {
                    logic::not(any)
                } else {
                    any
                }
            }
        }
        Expr::Like { expr, pattern, negated, case_insensitive, escape } => {
            let value = compile(expr, layout)?;
            match literal_of(pattern) {
                Some(ScalarValue::Utf8(p)) => string::like_constant(value, p, *negated, *case_insensitive, *escape),
                Some(ScalarValue::Null) => Arc::new(LiteralExpr { value: ScalarValue::Null, data_type: DataType::Boolean }),
                _ => string::like_dynamic(value, compile(pattern, layout)?, *negated, *case_insensitive, *escape),
            }
        }
        Expr::Function { func: ScalarFunction::QueryMask, args, .. } => query_mask::compile(args, layout, options)?,
        Expr::Function { func: func @ (ScalarFunction::NextVal | ScalarFunction::CurrVal), args, .. } => match args.as_slice() {
            [handle, session] => sequence::compile_value(*func == ScalarFunction::NextVal, literal_of(handle), literal_of(session))?,
            _ => return Err(internal_err!("{} with {} arguments", func.name(), args.len())),
        },
        Expr::Function { func: ScalarFunction::LastVal, args, .. } => sequence::compile_last_value(args.first().and_then(literal_of))?,
        Expr::Function { func: ScalarFunction::SetVal, args, .. } => match args.as_slice() {
            [handle, value, called, session] => {
                sequence::compile_set_value(literal_of(handle), compile(value, layout)?, compile(called, layout)?, literal_of(session))?
            }
            _ => return Err(internal_err!("setval with {} arguments", args.len())),
        },
        Expr::Function { func, args, data_type } => {
            let compiled = args.iter().map(|a| compile(a, layout)).collect::<Result<Vec<_>>>()?;
            let literals: Vec<Option<&ScalarValue>> = args.iter().map(literal_of).collect();
            compile_function(*func, compiled, &literals, *data_type, options.time_zone)?
        }
        Expr::Subquery(_) => return Err(internal_err!("subquery reached execution (it should have been unnested)")),
        Expr::Parameter { index, .. } => return Err(internal_err!("parameter ${} reached execution without a value", index + 1)),
    })
}

/// At most how many digits the unscaled values of a decimal (or integer) expression
/// have, from its operands' types and literals: `CAST(l_extendedprice AS DECIMAL(38,2))
/// * CAST(1 - l_discount AS DECIMAL(38,2))` is typed DECIMAL(38,4) but has at most 15 +
/// 16 = 31 digits, so its `i128` product cannot overflow and needs no checks.
fn decimal_digits(expr: &Expr) -> Option<u32> {
    let scale_of = |e: &Expr| match e.data_type() {
        DataType::Decimal { scale, .. } => Some(scale as u32),
        DataType::SmallInt | DataType::Integer | DataType::BigInt => Some(0),
        _ => None,
    };
    let digits = match expr {
        Expr::Literal(ScalarValue::Decimal(v, _, _), _) => v.unsigned_abs().checked_ilog10().map_or(1, |d| d + 1),
        Expr::Literal(ScalarValue::Int64(v), _) => v.unsigned_abs().checked_ilog10().map_or(1, |d| d + 1),
        Expr::Literal(ScalarValue::Int32(v), _) => v.unsigned_abs().checked_ilog10().map_or(1, |d| d + 1),
        Expr::Cast { expr: inner, to: to_type @ DataType::Decimal { precision, scale } } => {
            let (from_digits, from_scale) = (decimal_digits(inner)?, scale_of(inner)?);
            let to = *scale as u32;
            // Rounding to fewer decimals can carry into one more digit (9.99 -> 10.0).
            let digits = if to >= from_scale { from_digits + (to - from_scale) } else { (from_digits + 1).saturating_sub(from_scale - to) };
            // A cast that changes the type checks the target precision; one to the same
            // type does nothing and bounds nothing.
            if inner.data_type() == *to_type {
                digits
            } else {
                digits.min(*precision as u32)
            }
        }
        Expr::Binary { op: BinaryOp::Add | BinaryOp::Sub, left, right, .. } => {
            let (ls, rs) = (scale_of(left)?, scale_of(right)?);
            let scale = ls.max(rs);
            (decimal_digits(left)? + (scale - ls)).max(decimal_digits(right)? + (scale - rs)) + 1
        }
        Expr::Binary { op: BinaryOp::Mul, left, right, .. } => decimal_digits(left)? + decimal_digits(right)?,
        // The dividend's unscaled value times 10^shift, divided by a divisor of at least 1
        // in its last digit (zero is an error): no more digits than the scaled dividend.
        Expr::Binary { op: BinaryOp::Div, left, right, .. } if matches!(expr.data_type(), DataType::Decimal { .. }) => {
            let shift = (scale_of(expr)? + scale_of(right)?).saturating_sub(scale_of(left)?);
            decimal_digits(left)? + shift
        }
        // Other leaves (columns, functions, aggregates): what their type allows. Stored
        // values were checked against it on the way in; computed ones are bounded by the
        // operation that made them.
        _ => match expr.data_type() {
            DataType::Decimal { precision, .. } => precision as u32,
            DataType::SmallInt => 5,
            DataType::Integer => 10,
            DataType::BigInt => 19,
            _ => return None,
        },
    };
    Some(digits)
}

fn literal_of(expr: &Expr) -> Option<&ScalarValue> {
    match expr {
        Expr::Literal(v, _) => Some(v),
        _ => None,
    }
}

fn compile_function(
    func: ScalarFunction,
    args: Vec<ExprRef>,
    literals: &[Option<&ScalarValue>],
    data_type: DataType,
    zone: TimeZone,
) -> Result<ExprRef> {
    use ScalarFunction as F;
    Ok(match func {
        F::Substring | F::Upper | F::Lower | F::Length | F::Trim(_) | F::Replace | F::Position | F::StartsWith => {
            string::string_function(func, args, literals, data_type)?
        }
        F::Concat => string::concat(args, false),
        F::Coalesce => logic::coalesce(args, data_type),
        F::NullIf => logic::null_if(args, data_type)?,
        F::Greatest | F::Least => functions::greatest_least(func == F::Greatest, args, data_type)?,
        F::Extract(field) => {
            functions::extract(field, args.into_iter().next().ok_or_else(|| internal_err!("extract without argument"))?, data_type, zone)?
        }
        F::Abs | F::Sign | F::Round | F::Ceil | F::Floor | F::Sqrt | F::Power | F::Ln | F::Exp => {
            functions::math(func, args, literals, data_type)?
        }
        F::DateTrunc => functions::date_trunc(args, literals, zone)?,
        F::QueryMask => return Err(internal_err!("query_mask is compiled from its expressions")),
        F::NextVal | F::SetVal | F::CurrVal | F::LastVal => return Err(internal_err!("{} is compiled with its sequence", func.name())),
        F::AverageOf => functions::average_of(args, data_type)?,
        F::MaskAnd => functions::mask_and(args)?,
        F::TryCast => {
            cast::try_cast_expr(args.into_iter().next().ok_or_else(|| internal_err!("try_cast without argument"))?, data_type, zone)
        }
        F::SplitPart
        | F::Left
        | F::Right
        | F::Lpad
        | F::Rpad
        | F::ConcatWs
        | F::Contains
        | F::EndsWith
        | F::Repeat
        | F::Reverse
        | F::Md5
        | F::Initcap
        | F::Ascii
        | F::Chr => text::text_function(func, args, literals, data_type)?,
        F::RegexpMatches | F::RegexpReplace | F::RegexpExtract => regex::regex_function(func, args, literals)?,
        F::DateDiff(_)
        | F::MakeDate
        | F::MakeTimestamp
        | F::Strftime
        | F::Strptime
        | F::TryStrptime
        | F::ToChar
        | F::DayName
        | F::MonthName
        | F::Age
        | F::MakeTime
        | F::MakeTimestampTz
        | F::AtTimeZone => datetime_functions::datetime_function(func, args, literals, data_type, zone)?,
    })
}

/// Evaluates a constant expression (no column references) to a value (TIMESTAMPTZ
/// conversions in UTC).
pub fn evaluate_constant(expr: &Expr) -> Result<ScalarValue> {
    evaluate_constant_in(expr, TimeZone::UTC)
}

/// [`evaluate_constant`] in the session's time zone.
pub fn evaluate_constant_in(expr: &Expr, time_zone: TimeZone) -> Result<ScalarValue> {
    let options = CompileOptions { time_zone, ..CompileOptions::default() };
    let compiled = compile_with(expr, &Vec::new(), &options)?;
    let chunk = DataChunk::empty_columns(1);
    let vector = compiled.evaluate(&chunk)?;
    Ok(vector.get_scalar(0))
}

/// The [`apiary_optimizer::ConstantEvaluator`] backed by the execution kernels, in the
/// session's time zone.
#[derive(Default)]
pub struct KernelEvaluator {
    pub time_zone: TimeZone,
}

impl apiary_optimizer::ConstantEvaluator for KernelEvaluator {
    fn evaluate(&self, expr: &Expr) -> Result<ScalarValue> {
        evaluate_constant_in(expr, self.time_zone)
    }
}

/// Output validity for an element-wise operation: valid where all inputs are valid.
pub(crate) fn combined_validity(vectors: &[&Vector]) -> Option<apiary_common::Bitmap> {
    let mut result: Option<apiary_common::Bitmap> = None;
    for v in vectors {
        if let Some(validity) = &v.validity {
            match &mut result {
                None => result = Some(validity.clone()),
                Some(r) => r.and_inplace(validity),
            }
        }
    }
    result
}

/// Rows to compute: the chunk's selection, or `None` meaning all physical rows.
pub(crate) fn rows_of(chunk: &DataChunk) -> Option<&[u32]> {
    chunk.selection()
}

/// Calls `f(i)` for every selected row.
#[inline(always)]
pub(crate) fn for_each_row(len: usize, rows: Option<&[u32]>, mut f: impl FnMut(usize)) {
    match rows {
        Some(rows) => rows.iter().for_each(|&r| f(r as usize)),
        None => (0..len).for_each(f),
    }
}

/// Builds a vector of `len` values computing `f(i)` at the selected rows.
pub(crate) fn map_rows<T: apiary_types::vector::NativeType>(len: usize, rows: Option<&[u32]>, mut f: impl FnMut(usize) -> T) -> Vec<T> {
    match rows {
        None => (0..len).map(f).collect(),
        Some(rows) => {
            let mut out = vec![T::default(); len];
            for &r in rows {
                out[r as usize] = f(r as usize);
            }
            out
        }
    }
}

/// A `VectorData` from any native vector.
pub(crate) fn wrap<T: apiary_types::vector::NativeType>(values: Vec<T>) -> VectorData {
    T::wrap(values.into())
}
