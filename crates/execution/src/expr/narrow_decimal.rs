//! 38-digit decimal arithmetic on 64-bit integers where the values allow it.
//!
//! The binder types `l_extendedprice * (1 - l_discount) * (1 + l_tax)` as DECIMAL(38,6):
//! PostgreSQL's numeric has no fixed precision, so a product must not overflow just because
//! its operands' types are wide. The values themselves are usually far smaller (TPC-H's
//! charge has at most 12 digits), and computing them in `i128`, with a cast of every
//! operand to `i128` and checked 128-bit products, cost most of TPC-H Q1.
//!
//! [`NarrowDecimal`] evaluates such a tree of `+ - *`, negations and scale-raising casts
//! over 64-bit operands with overflow-checked `i64` arithmetic, then widens the result.
//! When any selected row overflows 64 bits in a chunk, that chunk is evaluated again by
//! the ordinary `i128` kernels (`wide`), which give the exact answer or the error
//! PostgreSQL would raise. Where 64 bits suffice both compute the same integers (the
//! scales are the same), so the result never depends on which one ran.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use apiary_common::Result;
use apiary_sql::expr::{BinaryOp, Expr, UnaryOp};
use apiary_types::datatype::{PhysicalType, MAX_DECIMAL64_PRECISION};
use apiary_types::decimal::POW10;
use apiary_types::{DataChunk, DataType, ScalarValue, Vector, VectorData};

use super::jit::{self, CompiledProgram, JitMode, LeafWidth};
use super::{combined_validity, rows_of, wrap, CompileOptions, ExprRef, Layout, PhysicalExpr};

/// Deepest tree compiled this way (deeper ones keep the `i128` kernels: the evaluation
/// recurses once per level).
const MAX_DEPTH: usize = 16;

/// One node of the 64-bit program.
#[derive(Debug)]
enum Node {
    /// A sub-expression with 16-, 32- or 64-bit values, computed by its own kernel.
    Leaf(ExprRef),
    Constant(i64),
    /// The child times a power of ten (a cast to more decimal places).
    ScaleUp(Box<Node>, i64),
    Negate(Box<Node>),
    Binary(BinaryOp, Box<Node>, Box<Node>),
}

/// The scale of a decimal or integer type.
fn scale_of(data_type: DataType) -> Option<u32> {
    match data_type {
        DataType::Decimal { scale, .. } => Some(scale as u32),
        DataType::SmallInt | DataType::Integer | DataType::BigInt => Some(0),
        _ => None,
    }
}

fn is_narrow(data_type: DataType) -> bool {
    scale_of(data_type).is_some() && matches!(data_type.physical(), PhysicalType::I16 | PhysicalType::I32 | PhysicalType::I64)
}

/// The 64-bit program of `expr`, a decimal expression with `i128` values, when every node
/// of it can run on 64 bits.
fn program(expr: &Expr, layout: &dyn Layout, options: &CompileOptions, depth: usize) -> Result<Option<Node>> {
    if depth > MAX_DEPTH {
        return Ok(None);
    }
    let data_type = expr.data_type();
    let Some(scale) = scale_of(data_type) else { return Ok(None) };
    let child = |e: &Expr| program(e, layout, options, depth + 1);
    if let Expr::Literal(value, _) = expr {
        return Ok(literal_i64(value).map(Node::Constant));
    }
    // Only decimal operations: integer ones check their own type's range.
    let structural = matches!(data_type, DataType::Decimal { .. })
        && match expr {
            Expr::Cast { expr: inner, to } => widening_cast(inner.data_type(), *to),
            Expr::Unary(UnaryOp::Negate, _) | Expr::Binary { op: BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul, .. } => true,
            _ => false,
        };
    let node = match expr {
        Expr::Cast { expr: inner, .. } if structural => {
            let from = scale_of(inner.data_type()).unwrap_or(scale);
            match child(inner)? {
                Some(node) if from == scale => Some(node),
                Some(node) => Some(Node::ScaleUp(Box::new(node), POW10[(scale - from) as usize] as i64)),
                None => None,
            }
        }
        Expr::Unary(UnaryOp::Negate, inner) if structural && scale_of(inner.data_type()) == Some(scale) => {
            child(inner)?.map(|node| Node::Negate(Box::new(node)))
        }
        Expr::Binary { op: op @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul), left, right, .. } if structural => {
            match (scale_of(left.data_type()), scale_of(right.data_type())) {
                // The binder aligns the scales of a sum and gives a product the sum of
                // its operands' scales; anything else rescales, which this does not do.
                (Some(ls), Some(rs)) if if *op == BinaryOp::Mul { ls + rs == scale } else { ls == scale && rs == scale } => {
                    match (child(left)?, child(right)?) {
                        (Some(l), Some(r)) => Some(Node::Binary(*op, Box::new(l), Box::new(r))),
                        _ => None,
                    }
                }
                _ => None,
            }
        }
        _ => None,
    };
    Ok(match node {
        Some(node) => Some(node),
        // Any other 64-bit expression is computed by its own kernel.
        None if is_narrow(data_type) => Some(Node::Leaf(super::compile_with(expr, layout, options)?)),
        None => None,
    })
}

/// Whether a cast from `from` to the decimal type `to` keeps every value (it may only
/// add up to 18 decimal places, checked for overflow by the program): a target with at
/// least as many integer digits as the source can hold.
fn widening_cast(from: DataType, to: DataType) -> bool {
    let (Some(from_scale), DataType::Decimal { precision, scale }) = (scale_of(from), to) else { return false };
    if scale as u32 > from_scale + 18 {
        return false;
    }
    let from_integer_digits = match from {
        DataType::Decimal { precision, scale } => precision as u32 - scale as u32,
        DataType::SmallInt => 5,
        DataType::Integer => 10,
        _ => 19,
    };
    scale as u32 >= from_scale && precision as u32 - scale as u32 >= from_integer_digits
}

fn literal_i64(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::Decimal(v, _, _) => i64::try_from(*v).ok(),
        ScalarValue::Int64(v) => Some(*v),
        ScalarValue::Int32(v) => Some(*v as i64),
        ScalarValue::Int16(v) => Some(*v as i64),
        _ => None,
    }
}

/// Compiles `expr` (a decimal `+`, `-` or `*` typed with more than 18 digits) to run on
/// 64 bits with `wide` as the fallback; `wide` itself when some node cannot.
pub(super) fn compile(expr: &Expr, wide: ExprRef, layout: &dyn Layout, options: &CompileOptions) -> Result<ExprRef> {
    if wide.data_type().physical() != PhysicalType::I128 {
        return Ok(wide);
    }
    Ok(match build(expr, &wide, layout, options)? {
        Some(narrow) => Arc::new(narrow),
        None => wide,
    })
}

fn build(expr: &Expr, wide: &ExprRef, layout: &dyn Layout, options: &CompileOptions) -> Result<Option<NarrowDecimal>> {
    Ok(match program(expr, layout, options, 0)? {
        // A bare leaf or constant is not arithmetic: nothing to gain.
        Some(node @ (Node::Binary(..) | Node::Negate(_) | Node::ScaleUp(..))) => {
            let jit = (options.jit != JitMode::Off).then(|| Jit::new(&node, options.jit)).flatten();
            Some(NarrowDecimal { program: node, wide: Arc::clone(wide), data_type: wide.data_type(), jit })
        }
        _ => None,
    })
}

#[derive(Debug)]
pub struct NarrowDecimal {
    program: Node,
    /// The same expression on 128-bit kernels, for chunks that overflow 64 bits.
    wide: ExprRef,
    data_type: DataType,
    /// The program as machine code (`SET jit`), when it can be compiled.
    jit: Option<Jit>,
}

/// The JIT tier of a program: its leaves, and its code once compiled.
#[derive(Debug)]
struct Jit {
    mode: JitMode,
    program: jit::Program,
    /// The leaf expressions, in the program's leaf numbering.
    leaves: Vec<ExprRef>,
    /// Rows evaluated before compiling (`JitMode::On` compiles once this reaches
    /// `jit::HOT_ROWS`).
    rows_seen: AtomicU64,
    /// The compiled code; `None` inside when compiling failed (the kernels then run).
    compiled: OnceLock<Option<Arc<CompiledProgram>>>,
}

impl Jit {
    fn new(node: &Node, mode: JitMode) -> Option<Jit> {
        let mut leaves = Vec::new();
        let program = jit_program(node, &mut leaves)?;
        Some(Jit { mode, program, leaves, rows_seen: AtomicU64::new(0), compiled: OnceLock::new() })
    }

    /// The code, when it is compiled or this chunk makes the expression hot enough.
    fn code(&self, rows: usize) -> Option<&Arc<CompiledProgram>> {
        if let Some(compiled) = self.compiled.get() {
            return compiled.as_ref();
        }
        if self.mode == JitMode::On && self.rows_seen.fetch_add(rows as u64, Ordering::Relaxed) + (rows as u64) < jit::HOT_ROWS {
            return None;
        }
        self.compiled.get_or_init(|| jit::compile(&self.program).ok()).as_ref()
    }
}

/// The JIT's form of a program, numbering the leaves in the order of `leaves`.
fn jit_program(node: &Node, leaves: &mut Vec<ExprRef>) -> Option<jit::Program> {
    Some(match node {
        Node::Leaf(expr) => {
            let width = match expr.data_type().physical() {
                PhysicalType::I16 => LeafWidth::I16,
                PhysicalType::I32 => LeafWidth::I32,
                PhysicalType::I64 => LeafWidth::I64,
                _ => return None,
            };
            leaves.push(Arc::clone(expr));
            jit::Program::Leaf(leaves.len() - 1, width)
        }
        Node::Constant(c) => jit::Program::Constant(*c),
        Node::ScaleUp(child, factor) => jit::Program::Scale(Box::new(jit_program(child, leaves)?), *factor),
        Node::Negate(child) => jit::Program::Negate(Box::new(jit_program(child, leaves)?)),
        Node::Binary(op, left, right) => {
            let (l, r) = (Box::new(jit_program(left, leaves)?), Box::new(jit_program(right, leaves)?));
            match op {
                BinaryOp::Add => jit::Program::Add(l, r),
                BinaryOp::Sub => jit::Program::Sub(l, r),
                BinaryOp::Mul => jit::Program::Mul(l, r),
                _ => return None,
            }
        }
    })
}

/// A node's values at the selected rows of a chunk.
enum Values {
    /// A leaf's own 64-bit vector.
    Shared(Vector),
    Owned(Vec<i64>),
}

impl Values {
    fn as_slice(&self) -> &[i64] {
        match self {
            Values::Shared(v) => v.values::<i64>(),
            Values::Owned(v) => v,
        }
    }
}

struct Evaluation<'a> {
    chunk: &'a DataChunk,
    rows: Option<&'a [u32]>,
    len: usize,
    leaves: Vec<Vector>,
    overflow: bool,
}

impl Evaluation<'_> {
    fn run(&mut self, node: &Node) -> Result<Values> {
        Ok(match node {
            Node::Leaf(expr) => {
                let vector = expr.evaluate(self.chunk)?;
                let values = match &vector.data {
                    VectorData::I64(_) => Values::Shared(vector.clone()),
                    VectorData::I32(v) => Values::Owned(super::map_rows(self.len, self.rows, |i| v[i] as i64)),
                    VectorData::I16(v) => Values::Owned(super::map_rows(self.len, self.rows, |i| v[i] as i64)),
                    _ => return Err(apiary_common::internal_err!("64-bit decimal leaf of type {}", vector.data_type)),
                };
                self.leaves.push(vector);
                values
            }
            Node::Constant(c) => Values::Owned(vec![*c; self.len]),
            Node::ScaleUp(child, factor) => {
                let (input, factor) = (self.run(child)?, *factor);
                self.apply(input, |_, v| v.overflowing_mul(factor))
            }
            Node::Negate(child) => {
                let input = self.run(child)?;
                self.apply(input, |_, v| v.overflowing_neg())
            }
            Node::Binary(op, left, right) => match op {
                // Each operation is its own function item, so the loops inline it.
                BinaryOp::Add => self.binary(left, right, add)?,
                BinaryOp::Sub => self.binary(left, right, sub)?,
                _ => {
                    // Operands whose magnitudes multiply to less than 2^62 cannot
                    // overflow: one vector multiply per lane instead of a checked one.
                    let (l, r) = (self.operand(left)?, self.operand(right)?);
                    if magnitude_bits(&l, self.len, self.rows) + magnitude_bits(&r, self.len, self.rows) <= 62 {
                        self.combine(l, r, |a, b| (a.wrapping_mul(b), false))
                    } else {
                        self.combine(l, r, i64::overflowing_mul)
                    }
                }
            },
        })
    }

    fn operand(&mut self, node: &Node) -> Result<Operand> {
        Ok(match node {
            Node::Constant(c) => Operand::Constant(*c),
            _ => Operand::Values(self.run(node)?),
        })
    }

    fn binary(&mut self, left: &Node, right: &Node, f: impl Fn(i64, i64) -> (i64, bool) + Copy) -> Result<Values> {
        let (l, r) = (self.operand(left)?, self.operand(right)?);
        Ok(self.combine(l, r, f))
    }

    fn combine(&mut self, left: Operand, right: Operand, f: impl Fn(i64, i64) -> (i64, bool) + Copy) -> Values {
        // A constant operand stays a scalar in the loop.
        match (left, right) {
            (Operand::Constant(l), Operand::Constant(r)) => {
                let (value, overflow) = f(l, r);
                self.overflow |= overflow;
                Values::Owned(vec![value; self.len])
            }
            (Operand::Values(input), Operand::Constant(c)) => self.apply(input, |_, v| f(v, c)),
            (Operand::Constant(c), Operand::Values(input)) => self.apply(input, |_, v| f(c, v)),
            (Operand::Values(l), Operand::Values(r)) => {
                let r = r.as_slice();
                let mut overflow = false;
                let out = apply_rows(l, self.len, self.rows, &mut overflow, |i, v| f(v, r[i]));
                self.overflow |= overflow;
                Values::Owned(out)
            }
        }
    }

    fn apply(&mut self, input: Values, f: impl Fn(usize, i64) -> (i64, bool)) -> Values {
        let mut overflow = false;
        let out = apply_rows(input, self.len, self.rows, &mut overflow, f);
        self.overflow |= overflow;
        Values::Owned(out)
    }
}

/// An operand of a binary node.
enum Operand {
    Constant(i64),
    Values(Values),
}

/// `a + b` and whether it overflowed, as sign tests that vectorise (the checked add's
/// flag does not).
#[inline(always)]
fn add(a: i64, b: i64) -> (i64, bool) {
    let sum = a.wrapping_add(b);
    (sum, ((a ^ sum) & (b ^ sum)) < 0)
}

#[inline(always)]
fn sub(a: i64, b: i64) -> (i64, bool) {
    let difference = a.wrapping_sub(b);
    (difference, ((a ^ b) & (a ^ difference)) < 0)
}

/// Bits that bound the operand's magnitudes at the selected rows: every value `v` has
/// `|v| <= 2^bits`.
fn magnitude_bits(operand: &Operand, len: usize, rows: Option<&[u32]>) -> u32 {
    let or = match operand {
        Operand::Constant(c) => magnitude(*c),
        Operand::Values(values) => {
            let values = &values.as_slice()[..len];
            match rows {
                None => magnitudes(values),
                Some(rows) => rows.iter().fold(0, |acc, &r| acc | magnitude(values[r as usize])),
            }
        }
    };
    // |v| <= magnitude + 1 <= 2^(bit length of the OR).
    64 - or.leading_zeros()
}

/// |v| for v >= 0, |v| - 1 below (no overflow at i64::MIN).
#[inline(always)]
fn magnitude(v: i64) -> u64 {
    (v ^ (v >> 63)) as u64
}

/// The OR of the values' magnitudes.
fn magnitudes(values: &[i64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if apiary_common::cpu::avx512() {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { magnitudes_avx512(values) };
        }
    }
    values.iter().fold(0, |acc, &v| acc | magnitude(v))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn magnitudes_avx512(values: &[i64]) -> u64 {
    values.iter().fold(0, |acc, &v| acc | magnitude(v))
}

/// `f(i, input[i])` at the selected rows, written over `input` when it is owned; `overflow`
/// is set when any call reports one.
fn apply_rows(input: Values, len: usize, rows: Option<&[u32]>, overflow: &mut bool, f: impl Fn(usize, i64) -> (i64, bool)) -> Vec<i64> {
    #[cfg(target_arch = "x86_64")]
    {
        if apiary_common::cpu::avx512() {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { apply_rows_avx512(input, len, rows, overflow, f) };
        }
    }
    apply_rows_portable(input, len, rows, overflow, f)
}

/// The loops on 512-bit lanes (`vpmullq` multiplies eight 64-bit values at once).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn apply_rows_avx512(
    input: Values,
    len: usize,
    rows: Option<&[u32]>,
    overflow: &mut bool,
    f: impl Fn(usize, i64) -> (i64, bool),
) -> Vec<i64> {
    apply_rows_portable(input, len, rows, overflow, f)
}

#[inline(always)]
fn apply_rows_portable(
    input: Values,
    len: usize,
    rows: Option<&[u32]>,
    overflow: &mut bool,
    f: impl Fn(usize, i64) -> (i64, bool),
) -> Vec<i64> {
    let mut flag = false;
    let out = match input {
        Values::Owned(mut values) => {
            match rows {
                None => {
                    for (i, v) in values.iter_mut().enumerate() {
                        let (r, o) = f(i, *v);
                        *v = r;
                        flag |= o;
                    }
                }
                Some(rows) => {
                    for &row in rows {
                        let i = row as usize;
                        let (r, o) = f(i, values[i]);
                        values[i] = r;
                        flag |= o;
                    }
                }
            }
            values
        }
        Values::Shared(vector) => {
            let values = vector.values::<i64>();
            match rows {
                // Written once, not zeroed first.
                None => values[..len]
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let (r, over) = f(i, v);
                        flag |= over;
                        r
                    })
                    .collect(),
                Some(rows) => {
                    let mut out = vec![0i64; len];
                    for &row in rows {
                        let i = row as usize;
                        let (r, over) = f(i, values[i]);
                        out[i] = r;
                        flag |= over;
                    }
                    out
                }
            }
        }
    };
    *overflow |= flag;
    out
}

/// A chunk's result: the program's values, or the wide kernels' when a value overflowed.
enum Narrow {
    Values(Vec<i64>, Option<apiary_common::Bitmap>),
    Wide(Vector),
}

impl NarrowDecimal {
    fn run(&self, chunk: &DataChunk) -> Result<Narrow> {
        let len = chunk.physical_len();
        if let Some(narrow) = self.run_compiled(chunk)? {
            return Ok(narrow);
        }
        // With most rows selected, every row is computed: loops over whole vectors
        // vectorise, indexed ones do not. A value of an unselected row that overflows
        // only sends the chunk to the wide kernels, which compute the selected rows.
        let rows = rows_of(chunk).filter(|rows| rows.len() * 4 < len * 3);
        let mut evaluation = Evaluation { chunk, rows, len, leaves: Vec::new(), overflow: false };
        let values = evaluation.run(&self.program)?;
        // Values under NULLs are unspecified and may overflow where no real value does:
        // the wide kernels then decide, which only costs time.
        if evaluation.overflow {
            return Ok(Narrow::Wide(self.wide.evaluate(chunk)?));
        }
        let validity = combined_validity(&evaluation.leaves.iter().collect::<Vec<_>>());
        let values = match values {
            Values::Owned(values) => values,
            Values::Shared(vector) => vector.values::<i64>().to_vec(),
        };
        Ok(Narrow::Values(values, validity))
    }
}

impl NarrowDecimal {
    /// The chunk computed by the compiled program, where the JIT tier takes it: over a
    /// sparse selection under `SET jit = on` (one pass per row instead of one indexed
    /// pass and temporary per operation; dense vectors stay with the vectorised
    /// kernels, which are faster there), every chunk under `always`.
    fn run_compiled(&self, chunk: &DataChunk) -> Result<Option<Narrow>> {
        let Some(jit) = &self.jit else { return Ok(None) };
        let len = chunk.physical_len();
        let rows = rows_of(chunk);
        let selected = rows.map_or(len, |rows| rows.len());
        if jit.mode == JitMode::On && selected * 4 >= len * 3 {
            return Ok(None);
        }
        let Some(code) = jit.code(selected) else { return Ok(None) };
        let leaves = jit.leaves.iter().map(|leaf| leaf.evaluate(chunk)).collect::<Result<Vec<_>>>()?;
        let leaf_refs: Vec<&Vector> = leaves.iter().collect();
        let mut values = vec![0i64; len];
        Ok(match code.run(&leaf_refs, rows, len, &mut values) {
            Some(false) => Some(Narrow::Values(values, combined_validity(&leaf_refs))),
            // As for the kernels: the wide kernels decide a chunk where a value overflowed.
            Some(true) => Some(Narrow::Wide(self.wide.evaluate(chunk)?)),
            None => None,
        })
    }
}

impl PhysicalExpr for NarrowDecimal {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        Ok(match self.run(chunk)? {
            Narrow::Values(values, validity) => {
                let wide: Vec<i128> = values.iter().map(|&v| v as i128).collect();
                Vector::new(self.data_type, wrap(wide), validity)
            }
            Narrow::Wide(vector) => vector,
        })
    }

    fn evaluate_narrow(&self, chunk: &DataChunk) -> Result<Vector> {
        Ok(match (self.run(chunk)?, self.data_type) {
            // A 64-bit decimal holds at most 18 decimal places.
            (Narrow::Values(values, validity), DataType::Decimal { scale, .. }) if scale <= MAX_DECIMAL64_PRECISION => {
                Vector::new(DataType::decimal(MAX_DECIMAL64_PRECISION, scale), wrap(values), validity)
            }
            (Narrow::Values(values, validity), _) => {
                let wide: Vec<i128> = values.iter().map(|&v| v as i128).collect();
                Vector::new(self.data_type, wrap(wide), validity)
            }
            (Narrow::Wide(vector), _) => vector,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_sql::expr::{ColumnId, ColumnRef};

    fn column(id: u32, data_type: DataType) -> Expr {
        Expr::Column(ColumnRef { id: ColumnId(id), name: format!("c{id}").into(), data_type, nullable: true })
    }

    /// `CAST(a AS DECIMAL(38,2)) * (1 - CAST(b AS DECIMAL(38,2)))` over DECIMAL(15,2)
    /// columns, as the binder types TPC-H's `l_extendedprice * (1 - l_discount)`.
    fn discounted_price() -> Expr {
        let (narrow, wide) = (DataType::decimal(15, 2), DataType::decimal(38, 2));
        let cast = |e: Expr| Expr::Cast { expr: Box::new(e), to: wide };
        let one = Expr::Literal(ScalarValue::Decimal(100, 38, 2), wide);
        let difference = Expr::Binary { op: BinaryOp::Sub, left: Box::new(one), right: Box::new(cast(column(1, narrow))), data_type: wide };
        Expr::Binary {
            op: BinaryOp::Mul,
            left: Box::new(cast(column(0, narrow))),
            right: Box::new(difference),
            data_type: DataType::decimal(38, 4),
        }
    }

    fn narrow(mode: JitMode) -> NarrowDecimal {
        let expr = discounted_price();
        let layout = vec![ColumnId(0), ColumnId(1)];
        let options = CompileOptions { jit: mode, ..CompileOptions::default() };
        let wide = super::super::compile_with(&expr, &layout, &CompileOptions { narrow_decimals: false, ..options }).unwrap();
        build(&expr, &wide, &layout, &options).unwrap().expect("a 64-bit program")
    }

    fn chunk(prices: Vec<i64>, discounts: Vec<i64>, selection: Option<Vec<u32>>) -> DataChunk {
        let len = prices.len();
        let price = Vector::new(DataType::decimal(15, 2), wrap(prices), None);
        let validity = (0..len).map(|i| i % 13 != 5);
        let discount = Vector::new(DataType::decimal(15, 2), wrap(discounts), Some(apiary_common::Bitmap::from_bools(validity)));
        DataChunk::new(vec![price, discount], len).with_selection(selection)
    }

    fn selected_values(vector: &Vector, chunk: &DataChunk) -> Vec<Option<i128>> {
        super::super::selected_rows(chunk)
            .iter()
            .map(|&r| vector.is_valid(r as usize).then(|| vector.values::<i128>()[r as usize]))
            .collect()
    }

    #[test]
    fn compiled_code_gives_the_kernels_answers() {
        let len = 2048;
        let prices: Vec<i64> = (0..len as i64).map(|i| (i * 7919) % 10_000_000 - 1_000_000).collect();
        let discounts: Vec<i64> = (0..len as i64).map(|i| i % 11).collect();
        let (off, always) = (narrow(JitMode::Off), narrow(JitMode::Always));
        for selection in [None, Some((0..len as u32).filter(|r| r % 3 == 0).collect()), Some(vec![]), Some(vec![len as u32 - 1])] {
            let chunk = chunk(prices.clone(), discounts.clone(), selection);
            let expected = off.evaluate(&chunk).unwrap();
            let compiled = always.evaluate(&chunk).unwrap();
            assert_eq!(selected_values(&compiled, &chunk), selected_values(&expected, &chunk));
        }
        assert!(matches!(always.jit.as_ref().unwrap().compiled.get(), Some(Some(_))), "the compiled code ran");
        assert!(off.jit.is_none());
    }

    #[test]
    fn a_chunk_that_overflows_64_bits_gets_the_wide_answer() {
        let prices = vec![i64::MAX / 2, 5, 7];
        let discounts = vec![-100, 1, 2];
        let (off, always) = (narrow(JitMode::Off), narrow(JitMode::Always));
        let chunk = chunk(prices, discounts, None);
        let expected = off.evaluate(&chunk).unwrap();
        assert_eq!(expected.values::<i128>()[0], (i64::MAX / 2) as i128 * 200);
        assert_eq!(selected_values(&always.evaluate(&chunk).unwrap(), &chunk), selected_values(&expected, &chunk));
    }

    #[test]
    fn on_compiles_once_hot_and_only_for_sparse_selections() {
        let len = 4096;
        let on = narrow(JitMode::On);
        let prices: Vec<i64> = (0..len as i64).collect();
        let discounts: Vec<i64> = vec![3; len];
        let dense = chunk(prices.clone(), discounts.clone(), None);
        let sparse = chunk(prices, discounts, Some((0..len as u32).step_by(2).collect()));
        let jit = on.jit.as_ref().unwrap();
        for _ in 0..(2 * jit::HOT_ROWS as usize / len) {
            on.evaluate(&dense).unwrap();
        }
        assert!(jit.compiled.get().is_none(), "dense vectors stay with the kernels");
        let mut runs = 0;
        while jit.compiled.get().is_none() {
            on.evaluate(&sparse).unwrap();
            runs += 1;
            assert!(runs <= jit::HOT_ROWS as usize / (len / 2) + 1, "compiled once hot");
        }
        assert!(runs >= jit::HOT_ROWS as usize / (len / 2), "not compiled before it is hot");
        let expected = narrow(JitMode::Off).evaluate(&sparse).unwrap();
        assert_eq!(selected_values(&on.evaluate(&sparse).unwrap(), &sparse), selected_values(&expected, &sparse));
    }
}
