//! Boolean logic with SQL's three-valued semantics, IS NULL, CASE, COALESCE, NULLIF.

use std::sync::Arc;

use apiary_common::{Bitmap, Result};
use apiary_types::datatype::PhysicalType;
use apiary_types::vector::NativeType;
use apiary_types::{DataChunk, DataType, Interval, StrColumnBuilder, Vector, VectorData};

use super::compare::{equal_rows, evaluate_rows};
use super::{chunk_with_rows, map_rows, rows_of, selected_rows, wrap, ExprRef, PhysicalExpr};

/// `a AND b AND ...`: `select` narrows the rows child by child.
#[derive(Debug)]
struct And {
    children: Vec<ExprRef>,
}

pub fn and(children: Vec<ExprRef>) -> ExprRef {
    Arc::new(And { children })
}

impl PhysicalExpr for And {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        // false wins over NULL, NULL over true; a child is evaluated only for the rows
        // no earlier child made FALSE (so `x <> 0 AND y / x > 1` never divides by zero).
        combine_lazily(chunk, &self.children, false)
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let mut current = rows.to_vec();
        for child in &self.children {
            if current.is_empty() {
                break;
            }
            current = child.select(chunk, &current)?;
        }
        Ok(current)
    }
}

/// `a OR b OR ...`: `select` tests each child only on the rows not yet accepted.
#[derive(Debug)]
struct Or {
    children: Vec<ExprRef>,
}

pub fn or(children: Vec<ExprRef>) -> ExprRef {
    Arc::new(Or { children })
}

impl PhysicalExpr for Or {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        // true wins over NULL, NULL over false; a child is evaluated only for the rows no
        // earlier child made TRUE.
        combine_lazily(chunk, &self.children, true)
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let mut accepted: Vec<u32> = Vec::new();
        let mut remaining = rows.to_vec();
        for child in &self.children {
            if remaining.is_empty() {
                break;
            }
            let hits = child.select(chunk, &remaining)?;
            if hits.is_empty() {
                continue;
            }
            remaining = difference(&remaining, &hits);
            accepted = union(&accepted, &hits);
        }
        Ok(accepted)
    }
}

/// AND (`decisive` = false) or OR (`decisive` = true) of `children`: a row is decided
/// by the first child giving it the decisive value; later children see only the rows
/// still open (NULL so far counts as open), as SQL's short-circuit evaluation does.
fn combine_lazily(chunk: &DataChunk, children: &[ExprRef], decisive: bool) -> Result<Vector> {
    let len = chunk.physical_len();
    let mut value = vec![!decisive; len];
    let mut valid = Bitmap::new(len, true);
    let mut open = selected_rows(chunk);
    for child in children {
        if open.is_empty() {
            break;
        }
        let v = evaluate_rows(child, chunk, &open)?;
        let b = v.values::<bool>();
        open.retain(|&r| {
            let i = r as usize;
            if !v.is_valid(i) {
                valid.set(i, false);
                true
            } else if b[i] == decisive {
                value[i] = decisive;
                valid.set(i, true);
                false
            } else {
                true
            }
        });
    }
    Ok(Vector::new(DataType::Boolean, wrap(value), Some(valid)).with_validity_cleanup())
}

/// Sorted `a \ b` for sorted `b ⊆ a`.
pub(crate) fn difference(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len() - b.len().min(a.len()));
    let mut j = 0;
    for &x in a {
        while j < b.len() && b[j] < x {
            j += 1;
        }
        if j < b.len() && b[j] == x {
            continue;
        }
        out.push(x);
    }
    out
}

/// Sorted union of two sorted, disjoint lists.
fn union(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] < b[j] {
            out.push(a[i]);
            i += 1;
        } else {
            out.push(b[j]);
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

#[derive(Debug)]
struct Not {
    child: ExprRef,
}

pub fn not(child: ExprRef) -> ExprRef {
    Arc::new(Not { child })
}

impl PhysicalExpr for Not {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let b = v.values::<bool>();
        let out = map_rows(chunk.physical_len(), rows_of(chunk), |i| !b[i]);
        Ok(Vector::new(DataType::Boolean, wrap(out), v.validity.clone()))
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let v = evaluate_rows(&self.child, chunk, rows)?;
        let b = v.values::<bool>();
        Ok(rows.iter().copied().filter(|&r| v.is_valid(r as usize) && !b[r as usize]).collect())
    }
}

#[derive(Debug)]
struct IsNull {
    child: ExprRef,
    negated: bool,
}

pub fn is_null(child: ExprRef, negated: bool) -> ExprRef {
    Arc::new(IsNull { child, negated })
}

impl PhysicalExpr for IsNull {
    fn data_type(&self) -> DataType {
        DataType::Boolean
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let v = self.child.evaluate(chunk)?;
        let out = map_rows(chunk.physical_len(), rows_of(chunk), |i| v.is_null(i) != self.negated);
        Ok(Vector::new(DataType::Boolean, wrap(out), None))
    }

    fn select(&self, chunk: &DataChunk, rows: &[u32]) -> Result<Vec<u32>> {
        let v = evaluate_rows(&self.child, chunk, rows)?;
        Ok(rows.iter().copied().filter(|&r| v.is_null(r as usize) != self.negated).collect())
    }
}

/// Assembles one vector from pieces computed for disjoint row sets (CASE branches,
/// COALESCE arguments). Rows no piece covers are NULL.
pub(crate) struct Scatter {
    data_type: DataType,
    len: usize,
    parts: Vec<(Vector, Vec<u32>)>,
}

impl Scatter {
    pub fn new(data_type: DataType, len: usize) -> Self {
        Scatter { data_type, len, parts: Vec::new() }
    }

    /// Rows `rows` of the result come from the same rows of `vector` (a full-length vector).
    pub fn add(&mut self, vector: Vector, rows: Vec<u32>) {
        if !rows.is_empty() {
            self.parts.push((vector, rows));
        }
    }

    pub fn finish(self) -> Vector {
        let len = self.len;
        let mut validity = Bitmap::new(len, false);
        for (v, rows) in &self.parts {
            for &r in rows {
                validity.set(r as usize, v.is_valid(r as usize));
            }
        }
        fn native<T: NativeType>(len: usize, parts: &[(Vector, Vec<u32>)]) -> VectorData {
            let mut out = vec![T::default(); len];
            for (v, rows) in parts {
                let values = v.values::<T>();
                for &r in rows {
                    out[r as usize] = values[r as usize];
                }
            }
            wrap(out)
        }
        let data = match self.data_type.physical() {
            PhysicalType::Bool => native::<bool>(len, &self.parts),
            PhysicalType::I16 => native::<i16>(len, &self.parts),
            PhysicalType::I32 => native::<i32>(len, &self.parts),
            PhysicalType::I64 => native::<i64>(len, &self.parts),
            PhysicalType::I128 => native::<i128>(len, &self.parts),
            PhysicalType::F32 => native::<f32>(len, &self.parts),
            PhysicalType::F64 => native::<f64>(len, &self.parts),
            PhysicalType::Interval => native::<Interval>(len, &self.parts),
            PhysicalType::Str => {
                let mut source: Vec<Option<(usize, u32)>> = vec![None; len];
                for (part, (_, rows)) in self.parts.iter().enumerate() {
                    for &r in rows {
                        source[r as usize] = Some((part, r));
                    }
                }
                let mut builder = StrColumnBuilder::with_capacity(len);
                let mappings: Vec<Vec<u32>> = self.parts.iter().map(|(v, _)| builder.adopt_heaps(&v.strings().heaps)).collect();
                for entry in source {
                    match entry {
                        Some((part, r)) => {
                            let column = self.parts[part].0.strings();
                            builder.push_view(column.views()[r as usize], &mappings[part]);
                        }
                        None => builder.push_empty(),
                    }
                }
                VectorData::Str(builder.finish())
            }
        };
        Vector::new(self.data_type, data, Some(validity)).with_validity_cleanup()
    }
}

/// Searched CASE.
#[derive(Debug)]
struct Case {
    whens: Vec<(ExprRef, ExprRef)>,
    otherwise: Option<ExprRef>,
    data_type: DataType,
}

pub fn case(whens: Vec<(ExprRef, ExprRef)>, otherwise: Option<ExprRef>, data_type: DataType) -> ExprRef {
    Arc::new(Case { whens, otherwise, data_type })
}

impl PhysicalExpr for Case {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let mut remaining = selected_rows(chunk);
        let mut scatter = Scatter::new(self.data_type, chunk.physical_len());
        for (when, then) in &self.whens {
            if remaining.is_empty() {
                break;
            }
            let matched = when.select(chunk, &remaining)?;
            if matched.is_empty() {
                continue;
            }
            let value = then.evaluate(&chunk_with_rows(chunk, &matched))?;
            remaining = difference(&remaining, &matched);
            scatter.add(value, matched);
        }
        if let (Some(otherwise), false) = (&self.otherwise, remaining.is_empty()) {
            let value = otherwise.evaluate(&chunk_with_rows(chunk, &remaining))?;
            scatter.add(value, remaining);
        }
        Ok(scatter.finish())
    }
}

/// `CASE WHEN c THEN a [ELSE b] END` whose results are columns or constants: they
/// cannot fail, so both are read for every row and blended by the condition's bits,
/// with no row lists. `sum(CASE WHEN d_day_name = 'Sunday' THEN price END)` (TPC-DS Q02,
/// Q43, Q59) costs one comparison and a validity AND per row instead of a selection,
/// a row-list difference and a scatter.
#[derive(Debug)]
struct Blend {
    when: ExprRef,
    then: ExprRef,
    /// None: ELSE NULL.
    otherwise: Option<ExprRef>,
    data_type: DataType,
}

/// The CASE for `whens` and `otherwise`: a [`Blend`] when `blendable` says every result
/// is a column or a constant and there is one WHEN (whose condition sees every row in
/// either form), else the lazy [`Case`].
pub fn case_of(
    whens: Vec<(ExprRef, ExprRef)>,
    otherwise: Option<ExprRef>,
    data_type: DataType,
    blendable: bool,
    otherwise_is_null: bool,
) -> ExprRef {
    let same_types = whens.iter().all(|(_, then)| then.data_type() == data_type)
        && (otherwise_is_null || otherwise.as_ref().is_none_or(|o| o.data_type() == data_type));
    if blendable && whens.len() == 1 && same_types {
        let (when, then) = whens.into_iter().next().expect("one WHEN");
        let otherwise = otherwise.filter(|_| !otherwise_is_null);
        return Arc::new(Blend { when, then, otherwise, data_type });
    }
    case(whens, otherwise, data_type)
}

impl PhysicalExpr for Blend {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let len = chunk.physical_len();
        let condition = self.when.evaluate(chunk)?;
        // Rows where the condition is true (not false, not NULL).
        let mut taken = Bitmap::from_bool_slice(&condition.values::<bool>()[..len]);
        if let Some(valid) = &condition.validity {
            taken.and_inplace(valid);
        }
        let then = self.then.evaluate(chunk)?;
        let Some(otherwise) = &self.otherwise else {
            let mut validity = taken;
            if let Some(valid) = &then.validity {
                validity.and_inplace(valid);
            }
            return Ok(then.with_validity(Some(validity)));
        };
        let other = otherwise.evaluate(chunk)?;
        let validity = match (&then.validity, &other.validity) {
            (None, None) => None,
            _ => Some(Bitmap::from_bools((0..len).map(|i| if taken.get(i) { then.is_valid(i) } else { other.is_valid(i) }))),
        };
        fn native<T: NativeType>(len: usize, taken: &Bitmap, then: &Vector, other: &Vector) -> VectorData {
            let (a, b) = (then.values::<T>(), other.values::<T>());
            wrap((0..len).map(|i| if taken.get(i) { a[i] } else { b[i] }).collect())
        }
        let data = match self.data_type.physical() {
            PhysicalType::Bool => native::<bool>(len, &taken, &then, &other),
            PhysicalType::I16 => native::<i16>(len, &taken, &then, &other),
            PhysicalType::I32 => native::<i32>(len, &taken, &then, &other),
            PhysicalType::I64 => native::<i64>(len, &taken, &then, &other),
            PhysicalType::I128 => native::<i128>(len, &taken, &then, &other),
            PhysicalType::F32 => native::<f32>(len, &taken, &then, &other),
            PhysicalType::F64 => native::<f64>(len, &taken, &then, &other),
            PhysicalType::Interval => native::<Interval>(len, &taken, &then, &other),
            PhysicalType::Str => {
                let rows = selected_rows(chunk);
                let (matched, rest): (Vec<u32>, Vec<u32>) = rows.iter().partition(|&&r| taken.get(r as usize));
                let mut scatter = Scatter::new(self.data_type, len);
                scatter.add(then, matched);
                scatter.add(other, rest);
                return Ok(scatter.finish());
            }
        };
        Ok(Vector::new(self.data_type, data, validity))
    }
}

/// COALESCE(a, b, ...): the first non-NULL argument, evaluated lazily.
#[derive(Debug)]
struct Coalesce {
    args: Vec<ExprRef>,
    data_type: DataType,
}

pub fn coalesce(args: Vec<ExprRef>, data_type: DataType) -> ExprRef {
    Arc::new(Coalesce { args, data_type })
}

impl PhysicalExpr for Coalesce {
    fn data_type(&self) -> DataType {
        self.data_type
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let mut remaining = selected_rows(chunk);
        let mut scatter = Scatter::new(self.data_type, chunk.physical_len());
        for arg in &self.args {
            if remaining.is_empty() {
                break;
            }
            let value = arg.evaluate(&chunk_with_rows(chunk, &remaining))?;
            let (present, missing): (Vec<u32>, Vec<u32>) = remaining.iter().partition(|&&r| value.is_valid(r as usize));
            scatter.add(value, present);
            remaining = missing;
        }
        Ok(scatter.finish())
    }
}

/// NULLIF(a, b): NULL when a = b, else a.
#[derive(Debug)]
struct NullIf {
    a: ExprRef,
    b: ExprRef,
}

pub fn null_if(args: Vec<ExprRef>, _data_type: DataType) -> Result<ExprRef> {
    let mut it = args.into_iter();
    let (Some(a), Some(b)) = (it.next(), it.next()) else {
        return Err(apiary_common::internal_err!("nullif needs two arguments"));
    };
    Ok(Arc::new(NullIf { a, b }))
}

impl PhysicalExpr for NullIf {
    fn data_type(&self) -> DataType {
        self.a.data_type()
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let a = self.a.evaluate(chunk)?;
        let b = self.b.evaluate(chunk)?;
        let equal = equal_rows(&a, &b);
        let mut validity = a.validity.clone().unwrap_or_else(|| Bitmap::new(a.len(), true));
        super::for_each_row(chunk.physical_len(), rows_of(chunk), |i| {
            if a.is_valid(i) && b.is_valid(i) && equal(i) {
                validity.set(i, false);
            }
        });
        drop(equal);
        Ok(a.clone().with_validity(Some(validity)))
    }
}

/// Drops an all-valid validity bitmap.
trait ValidityCleanup {
    fn with_validity_cleanup(self) -> Self;
}

impl ValidityCleanup for Vector {
    fn with_validity_cleanup(self) -> Self {
        let validity = self.validity.clone();
        self.with_validity(validity)
    }
}
