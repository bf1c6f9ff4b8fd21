//! `query_mask(p0, p1, ...)`: the BIGINT whose bit `i` is set where predicate `p_i` is
//! TRUE — which of the queries sharing a scan each row qualifies for (DataPath's query
//! bitmaps; the engine's `shared_operators.rs` builds the predicates).
//!
//! Shared selection: conjuncts over one integer-like column (dates, integers, decimals up
//! to 18 digits) compared with constants are not evaluated per query. For each such
//! column, the kernel evaluates every query's conjuncts once per *value* of the column's
//! range and keeps the result as a lookup table of masks; a row's mask is then the AND of
//! one table entry per column, whatever the number of queries. The eight Q6 queries of
//! a TPC-H throughput run (a date range, a discount range and a quantity bound each) cost
//! three lookups per row instead of 40 comparisons. Other conjuncts are evaluated per
//! query, only on the rows whose bit is still set.

use std::sync::{Arc, RwLock};

use apiary_common::{internal_err, Result};
use apiary_sql::expr::{BinaryOp, ColumnId, Expr, UnaryOp};
use apiary_types::datatype::PhysicalType;
use apiary_types::{DataChunk, DataType, Vector, VectorData};

use super::simd::{SimdLevel, SimdLookup};
use super::{compile_with, selected_rows, CompileOptions, ExprRef, Layout, PhysicalExpr};

/// The widest value range a lookup table covers (entries, one `i64` each).
const MAX_TABLE_VALUES: i64 = 1 << 16;

pub(super) fn compile(members: &[Expr], layout: &dyn Layout, options: &CompileOptions) -> Result<ExprRef> {
    if members.len() > 64 {
        return Err(internal_err!("query_mask over {} predicates (at most 64)", members.len()));
    }
    let mut columns: Vec<LookupColumn> = Vec::new();
    let mut per_column: Vec<Vec<Vec<Expr>>> = Vec::new();
    let mut residuals = Vec::with_capacity(members.len());
    for (member, predicate) in members.iter().enumerate() {
        let mut rest = Vec::new();
        for conjunct in predicate.clone().split_conjunction() {
            match lookup_column(&conjunct, layout) {
                Some((id, data_type, position)) => {
                    let slot = match columns.iter().position(|c| c.id == id) {
                        Some(slot) => slot,
                        None => {
                            columns.push(LookupColumn {
                                id,
                                data_type,
                                position,
                                conjuncts: Vec::new(),
                                table: RwLock::new(None),
                                simd: options.simd,
                            });
                            per_column.push(vec![Vec::new(); members.len()]);
                            columns.len() - 1
                        }
                    };
                    per_column[slot][member].push(conjunct);
                }
                None => rest.push(conjunct),
            }
        }
        residuals.push(match Expr::conjunction(rest) {
            Some(residual) => Some(compile_with(&residual, layout, options)?),
            None => None,
        });
    }
    for (column, conjuncts) in columns.iter_mut().zip(per_column) {
        let single = vec![column.id];
        for member_conjuncts in conjuncts {
            column.conjuncts.push(match Expr::conjunction(member_conjuncts) {
                Some(conjunction) => Some(compile_with(&conjunction, &single, options)?),
                None => None,
            });
        }
    }
    let all = if members.len() == 64 { -1i64 } else { (1i64 << members.len()) - 1 };
    Ok(Arc::new(QueryMask { all, columns, residuals }))
}

/// The column a conjunct can be answered from by table lookup: it reads one column of
/// an integer-like type, and only compares it with constants (nothing that could raise an
/// error on a value no row has).
fn lookup_column(conjunct: &Expr, layout: &dyn Layout) -> Option<(ColumnId, DataType, usize)> {
    let mut column = None;
    let mut safe = true;
    conjunct.visit(&mut |e| match e {
        Expr::Column(c) => match column {
            None => column = Some((c.id, c.data_type)),
            Some((id, _)) if id == c.id => {}
            Some(_) => safe = false,
        },
        Expr::Literal(..) | Expr::IsNull { .. } | Expr::Unary(UnaryOp::Not, _) => {}
        Expr::Binary { op, .. } if op.is_comparison() || matches!(op, BinaryOp::And | BinaryOp::Or) => {}
        Expr::InList { list, .. } if list.iter().all(|item| item.is_literal()) => {}
        _ => safe = false,
    });
    let (id, data_type) = column?;
    let integer_like = matches!(data_type.physical(), PhysicalType::I16 | PhysicalType::I32 | PhysicalType::I64);
    (safe && integer_like).then_some(())?;
    Some((id, data_type, layout.position(id)?))
}

#[derive(Debug)]
struct QueryMask {
    /// Every query's bit.
    all: i64,
    columns: Vec<LookupColumn>,
    /// Per query, its conjuncts not answered by a lookup table.
    residuals: Vec<Option<ExprRef>>,
}

#[derive(Debug)]
struct LookupColumn {
    id: ColumnId,
    data_type: DataType,
    /// Position in the input chunk.
    position: usize,
    /// Per query, its conjuncts over this column, compiled over the column alone.
    conjuncts: Vec<Option<ExprRef>>,
    /// The masks of the value range seen so far (grown when a vector has values outside).
    table: RwLock<Option<Arc<LookupTable>>>,
    simd: SimdLevel,
}

#[derive(Debug)]
struct LookupTable {
    low: i64,
    /// `masks[v - low]`: the queries whose conjuncts value `v` passes.
    masks: Vec<i64>,
    /// The queries whose conjuncts a NULL passes.
    null_mask: i64,
}

impl LookupTable {
    fn covers(&self, low: i64, high: i64) -> bool {
        low >= self.low && high < self.low + self.masks.len() as i64
    }
}

impl LookupColumn {
    /// The table for values in `low..=high`, built (or widened) if needed; `None` when
    /// the range is too wide for a table.
    fn table(&self, all: i64, low: i64, high: i64) -> Result<Option<Arc<LookupTable>>> {
        if let Some(table) = self.table.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            if table.covers(low, high) {
                return Ok(Some(Arc::clone(table)));
            }
        }
        let mut slot = self.table.write().unwrap_or_else(|e| e.into_inner());
        let (low, high) = match slot.as_ref() {
            Some(table) if table.covers(low, high) => return Ok(Some(Arc::clone(table))),
            Some(table) => (low.min(table.low), high.max(table.low + table.masks.len() as i64 - 1)),
            None => (low, high),
        };
        if high - low >= MAX_TABLE_VALUES {
            return Ok(None);
        }
        let len = (high - low + 1) as usize;
        let values = match self.data_type.physical() {
            PhysicalType::I16 => VectorData::I16((low..=high).map(|v| v as i16).collect::<Vec<_>>().into()),
            PhysicalType::I32 => VectorData::I32((low..=high).map(|v| v as i32).collect::<Vec<_>>().into()),
            PhysicalType::I64 => VectorData::I64((low..=high).collect::<Vec<_>>().into()),
            other => return Err(internal_err!("query_mask lookup over {other:?}")),
        };
        let chunk = DataChunk::new(vec![Vector::new(self.data_type, values, None)], len);
        let null_chunk = DataChunk::new(vec![Vector::nulls(self.data_type, 1)], 1);
        let rows: Vec<u32> = (0..len as u32).collect();
        let mut masks = vec![all; len];
        let mut null_mask = all;
        for (member, conjunct) in self.conjuncts.iter().enumerate() {
            let Some(conjunct) = conjunct else { continue };
            let bit = 1i64 << member;
            let mut passes = vec![false; len];
            for row in conjunct.select(&chunk, &rows)? {
                passes[row as usize] = true;
            }
            for (mask, passes) in masks.iter_mut().zip(passes) {
                if !passes {
                    *mask &= !bit;
                }
            }
            if conjunct.select(&null_chunk, &[0])?.is_empty() {
                null_mask &= !bit;
            }
        }
        let table = Arc::new(LookupTable { low, masks, null_mask });
        *slot = Some(Arc::clone(&table));
        Ok(Some(table))
    }

    /// ANDs each selected row's mask with the queries its value passes.
    fn apply(&self, all: i64, chunk: &DataChunk, rows: &[u32], masks: &mut [i64]) -> Result<()> {
        let vector = &chunk.columns[self.position];
        if rows.is_empty() {
            return Ok(());
        }
        match vector.data {
            VectorData::I16(_) => self.apply_values::<i16>(all, chunk, rows, masks),
            VectorData::I32(_) => self.apply_values::<i32>(all, chunk, rows, masks),
            VectorData::I64(_) => self.apply_values::<i64>(all, chunk, rows, masks),
            _ => Err(internal_err!("query_mask lookup over {}", vector.data_type)),
        }
    }

    fn apply_values<T>(&self, all: i64, chunk: &DataChunk, rows: &[u32], masks: &mut [i64]) -> Result<()>
    where
        T: apiary_types::vector::NativeType + SimdLookup,
    {
        let vector = &chunk.columns[self.position];
        let values = vector.values::<T>();
        let dense = rows.len() == vector.len() && vector.validity.is_none();
        let current = self.table.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut table = match current {
            Some(table) => table,
            None => match self.table_for_rows(all, values, rows)? {
                Some(table) => table,
                None => return self.apply_per_query(chunk, rows, masks),
            },
        };
        // One pass: look each value up; a value outside the table's range (seen for the
        // first time) widens the table and the pass runs again (ANDing a mask twice
        // changes nothing).
        loop {
            let entries = &table.masks[..];
            let base = table.low;
            let mut missed = false;
            if dense {
                missed = !T::lookup_and(values, base, entries, masks, self.simd);
            } else {
                for &r in rows {
                    let entry = if vector.is_valid(r as usize) {
                        entries.get((values[r as usize].into() - base) as usize).copied()
                    } else {
                        Some(table.null_mask)
                    };
                    match entry {
                        Some(entry) => masks[r as usize] &= entry,
                        None => missed = true,
                    }
                }
            }
            if !missed {
                return Ok(());
            }
            table = match self.table_for_rows(all, values, rows)? {
                Some(table) => table,
                None => return self.apply_per_query(chunk, rows, masks),
            };
        }
    }

    /// The table covering the values at `rows` (and the values of the current table).
    fn table_for_rows<T: Copy + Into<i64>>(&self, all: i64, values: &[T], rows: &[u32]) -> Result<Option<Arc<LookupTable>>> {
        let (low, high) = rows.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &r| {
            let v: i64 = values[r as usize].into();
            (lo.min(v), hi.max(v))
        });
        self.table(all, low, high)
    }

    /// Without a table (values too far apart): each query's conjuncts on the column alone.
    fn apply_per_query(&self, chunk: &DataChunk, rows: &[u32], masks: &mut [i64]) -> Result<()> {
        let single = DataChunk::new(vec![chunk.columns[self.position].clone()], chunk.physical_len());
        for (member, conjunct) in self.conjuncts.iter().enumerate() {
            if let Some(conjunct) = conjunct {
                clear_failing(conjunct, &single, rows, 1i64 << member, masks)?;
            }
        }
        Ok(())
    }
}

/// Clears `bit` on the rows among `rows` where `predicate` is not TRUE.
fn clear_failing(predicate: &ExprRef, chunk: &DataChunk, rows: &[u32], bit: i64, masks: &mut [i64]) -> Result<()> {
    let passing = predicate.select(chunk, rows)?;
    let mut passing = passing.iter().peekable();
    for &row in rows {
        if passing.peek() == Some(&&row) {
            passing.next();
        } else {
            masks[row as usize] &= !bit;
        }
    }
    Ok(())
}

impl PhysicalExpr for QueryMask {
    fn data_type(&self) -> DataType {
        DataType::BigInt
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let len = chunk.physical_len();
        let rows = selected_rows(chunk);
        let mut masks = match chunk.selection() {
            None => vec![self.all; len],
            Some(selection) => {
                let mut masks = vec![0i64; len];
                for &r in selection {
                    masks[r as usize] = self.all;
                }
                masks
            }
        };
        for column in &self.columns {
            column.apply(self.all, chunk, &rows, &mut masks)?;
        }
        for (member, residual) in self.residuals.iter().enumerate() {
            let Some(residual) = residual else { continue };
            let bit = 1i64 << member;
            let candidates: Vec<u32> = rows.iter().copied().filter(|&r| masks[r as usize] & bit != 0).collect();
            if !candidates.is_empty() {
                clear_failing(residual, chunk, &candidates, bit, &mut masks)?;
            }
        }
        Ok(Vector::new(DataType::BigInt, VectorData::I64(masks.into()), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_common::Bitmap;
    use apiary_sql::expr::ColumnRef;
    use apiary_types::ScalarValue;

    fn column(id: u32, data_type: DataType) -> ColumnRef {
        ColumnRef { id: ColumnId(id), name: format!("c{id}").into(), data_type, nullable: true }
    }

    fn int(v: i32) -> Expr {
        Expr::Literal(ScalarValue::Int32(v), DataType::Integer)
    }

    /// `a` INTEGER (a lookup column, NULL at every seventh row) and `b` DOUBLE (evaluated
    /// per query).
    fn chunk(len: usize) -> DataChunk {
        let a: Vec<i32> = (0..len as i32).map(|i| (i * 37) % 1000 - 100).collect();
        let validity = Bitmap::from_bools((0..len).map(|i| i % 7 != 0));
        let b: Vec<f64> = (0..len).map(|i| (i % 10) as f64).collect();
        DataChunk::new(
            vec![
                Vector::new(DataType::Integer, VectorData::I32(a.into()), Some(validity)),
                Vector::new(DataType::Double, VectorData::F64(b.into()), None),
            ],
            len,
        )
    }

    fn members() -> Vec<Expr> {
        let a = column(0, DataType::Integer).expr();
        let b = column(1, DataType::Double).expr();
        let lt = |e: &Expr, v: i32| Expr::compare(BinaryOp::Lt, e.clone(), int(v));
        let ge = |e: &Expr, v: i32| Expr::compare(BinaryOp::GtEq, e.clone(), int(v));
        let b_gt = |v: f64| Expr::compare(BinaryOp::Gt, b.clone(), Expr::Literal(ScalarValue::Float64(v), DataType::Double));
        vec![
            Expr::conjunction([ge(&a, 0), lt(&a, 500)]).unwrap(),
            Expr::conjunction([ge(&a, 200), lt(&a, 900), b_gt(4.0)]).unwrap(),
            b_gt(8.0),
            Expr::is_null(a.clone()),
            Expr::conjunction([
                Expr::InList { expr: Box::new(a.clone()), list: vec![int(3), int(40), int(-100)], negated: false },
                b_gt(0.5),
            ])
            .unwrap(),
        ]
    }

    /// The masks as each predicate evaluated on its own gives them.
    fn expected(chunk: &DataChunk, members: &[Expr], rows: &[u32]) -> Vec<i64> {
        let layout = vec![ColumnId(0), ColumnId(1)];
        let mut masks = vec![0i64; chunk.physical_len()];
        for (i, member) in members.iter().enumerate() {
            let compiled = super::super::compile(member, &layout).unwrap();
            for r in compiled.select(chunk, rows).unwrap() {
                masks[r as usize] |= 1 << i;
            }
        }
        masks
    }

    #[test]
    fn lookup_tables_give_the_masks_of_the_predicates() {
        let layout = vec![ColumnId(0), ColumnId(1)];
        let mask = compile(&members(), &layout, &CompileOptions::default()).unwrap();
        // A first chunk builds the table; a second with a wider range widens it.
        let small = chunk(300);
        let rows: Vec<u32> = (0..300).collect();
        assert_eq!(mask.evaluate(&small).unwrap().values::<i64>(), expected(&small, &members(), &rows).as_slice());
        let large = chunk(4096);
        let selected: Vec<u32> = (0..4096).filter(|r| r % 3 != 1).collect();
        let view = DataChunk::new(large.columns.clone(), 4096).with_selection(Some(selected.clone()));
        let got = mask.evaluate(&view).unwrap();
        let want = expected(&large, &members(), &selected);
        for &r in &selected {
            assert_eq!(got.values::<i64>()[r as usize], want[r as usize], "row {r}");
        }
    }

    #[test]
    fn dense_vectors_look_up_with_and_without_simd() {
        let a = column(0, DataType::Date).expr();
        let b = column(1, DataType::decimal(15, 2)).expr();
        let date = |d: i32| Expr::Literal(ScalarValue::Date(d), DataType::Date);
        let decimal = |v: i128| Expr::Literal(ScalarValue::Decimal(v, 15, 2), DataType::decimal(15, 2));
        let members: Vec<Expr> = (0..9)
            .map(|i| {
                Expr::conjunction([
                    Expr::compare(BinaryOp::GtEq, a.clone(), date(8000 + i * 150)),
                    Expr::compare(BinaryOp::Lt, a.clone(), date(8365 + i * 150)),
                    Expr::compare(BinaryOp::LtEq, b.clone(), decimal(i as i128 * 3)),
                ])
                .unwrap()
            })
            .collect();
        let layout = vec![ColumnId(0), ColumnId(1)];
        for simd in [SimdLevel::Scalar, super::super::simd::detected_level()] {
            let mask = compile(&members, &layout, &CompileOptions { simd, ..CompileOptions::default() }).unwrap();
            // The second chunk reaches outside the first one's values: the tables widen.
            for (len, spread) in [(1001usize, 900i32), (777, 3000)] {
                let dates: Vec<i32> = (0..len as i32).map(|i| 8000 + (i * 7919) % spread - 100).collect();
                let discounts: Vec<i64> = (0..len as i64).map(|i| (i * 13) % (spread as i64 / 30)).collect();
                let chunk = DataChunk::new(
                    vec![
                        Vector::new(DataType::Date, VectorData::I32(dates.into()), None),
                        Vector::new(DataType::decimal(15, 2), VectorData::I64(discounts.into()), None),
                    ],
                    len,
                );
                let rows: Vec<u32> = (0..len as u32).collect();
                assert_eq!(mask.evaluate(&chunk).unwrap().values::<i64>(), expected(&chunk, &members, &rows).as_slice(), "{simd:?}");
            }
        }
    }

    #[test]
    fn values_too_far_apart_for_a_table_are_compared_per_query() {
        let layout = vec![ColumnId(0), ColumnId(1)];
        let mask = compile(&members(), &layout, &CompileOptions::default()).unwrap();
        let wide: Vec<i32> = (0..100).map(|i| if i % 2 == 0 { i } else { i * 1_000_000 }).collect();
        let chunk = DataChunk::new(
            vec![
                Vector::new(DataType::Integer, VectorData::I32(wide.into()), None),
                Vector::new(DataType::Double, VectorData::F64(vec![9.0; 100].into()), None),
            ],
            100,
        );
        let rows: Vec<u32> = (0..100).collect();
        assert_eq!(mask.evaluate(&chunk).unwrap().values::<i64>(), expected(&chunk, &members(), &rows).as_slice());
    }
}

#[cfg(test)]
mod timing {
    use super::*;
    use apiary_sql::expr::ColumnRef;
    use apiary_types::ScalarValue;

    #[test]
    #[ignore]
    fn time_lookup() {
        let len = 2048;
        let a: Vec<i32> = (0..len as i32).map(|i| 8000 + (i * 7919) % 2500).collect();
        let b: Vec<i64> = (0..len as i64).map(|i| i % 11).collect();
        let chunk = DataChunk::new(
            vec![
                Vector::new(DataType::Date, VectorData::I32(a.into()), None),
                Vector::new(DataType::decimal(15, 2), VectorData::I64(b.into()), None),
            ],
            len,
        );
        let ca = ColumnRef { id: ColumnId(0), name: "a".into(), data_type: DataType::Date, nullable: false }.expr();
        let cb = ColumnRef { id: ColumnId(1), name: "b".into(), data_type: DataType::decimal(15, 2), nullable: false }.expr();
        let members: Vec<Expr> = (0..8)
            .map(|i| {
                Expr::conjunction([
                    Expr::compare(BinaryOp::GtEq, ca.clone(), Expr::Literal(ScalarValue::Date(8000 + i * 300), DataType::Date)),
                    Expr::compare(BinaryOp::Lt, ca.clone(), Expr::Literal(ScalarValue::Date(8365 + i * 300), DataType::Date)),
                    Expr::compare(
                        BinaryOp::GtEq,
                        cb.clone(),
                        Expr::Literal(ScalarValue::Decimal(i as i128, 15, 2), DataType::decimal(15, 2)),
                    ),
                ])
                .unwrap()
            })
            .collect();
        let layout = vec![ColumnId(0), ColumnId(1)];
        let mask = compile(&members, &layout, &CompileOptions::default()).unwrap();
        let started = std::time::Instant::now();
        for _ in 0..3000 {
            mask.evaluate(&chunk).unwrap();
        }
        eprintln!("{:.2} ns per row", started.elapsed().as_nanos() as f64 / (3000.0 * len as f64));
        let filter = Expr::compare(
            BinaryOp::NotEq,
            Expr::Function { func: apiary_sql::ScalarFunction::QueryMask, args: members, data_type: DataType::BigInt },
            Expr::literal(ScalarValue::Int64(0)),
        );
        let compiled = super::super::compile(&filter, &layout).unwrap();
        let rows: Vec<u32> = (0..len as u32).collect();
        let started = std::time::Instant::now();
        for _ in 0..3000 {
            compiled.select(&chunk, &rows).unwrap();
        }
        eprintln!("{:.2} ns per row as a filter", started.elapsed().as_nanos() as f64 / (3000.0 * len as f64));
    }
}
