//! Aggregates that keep every value of a group until the end: `string_agg` (with ORDER
//! BY), `quantile_cont`/`quantile_disc` (and `median`, `percentile_*`), `mode`.
//!
//! Each worker appends its rows' values to its groups' lists; merging appends lists;
//! finalize sorts each group's list once. Memory grows with the input, as in every
//! engine (these aggregates cannot be computed in constant space).

use std::any::Any;
use std::cmp::Ordering;
use std::collections::HashSet;

use apiary_common::{internal_err, Result};
use apiary_types::{DataType, ScalarValue, StrColumnBuilder, Vector, VectorData};

use super::held::Held;
use super::{downcast, validity_from, AggregateSpec, AggregateState};
use crate::operators::sort::{encode_sort_keys, SortOrder};

// ------------------------------------------------------------------------- STRING_AGG

/// One value of a `string_agg` group: its ORDER BY key (encoded to compare as bytes),
/// the separator before it, and the value.
struct Piece {
    key: Vec<u8>,
    separator: Option<String>,
    value: String,
}

pub(super) struct StringAggState {
    groups: Vec<Vec<Piece>>,
    /// The separator when it is a constant (else each piece keeps its row's).
    separator: Option<String>,
    orders: Vec<SortOrder>,
    distinct: bool,
    /// Bytes the pieces hold (see [`AggregateState::memory_bytes`]).
    bytes: usize,
}

impl StringAggState {
    pub(super) fn new(spec: &AggregateSpec) -> StringAggState {
        let separator = match spec.constants.get(1) {
            Some(Some(ScalarValue::Utf8(s))) => Some(s.clone()),
            Some(Some(ScalarValue::Null)) => Some(String::new()),
            _ => None,
        };
        let orders = spec.order_by.iter().map(|o| SortOrder { ascending: o.ascending, nulls_first: o.nulls_first }).collect();
        StringAggState { groups: Vec::new(), separator, orders, distinct: spec.distinct, bytes: 0 }
    }
}

impl AggregateState for StringAggState {
    fn resize(&mut self, groups: usize) {
        self.groups.resize_with(groups, Vec::new);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let [values, separators, keys @ ..] = inputs else { return Err(internal_err!("string_agg without its arguments")) };
        let kept: Vec<u32> = rows.iter().copied().filter(|&r| values.is_valid(r as usize)).collect();
        let (flat, offsets) = if keys.is_empty() {
            (Vec::new(), vec![0; kept.len() + 1])
        } else {
            let gathered: Vec<Vector> = keys.iter().map(|k| k.gather(&kept)).collect();
            encode_sort_keys(&gathered, &self.orders, kept.len())
        };
        let strings = values.strings();
        let mut k = 0;
        for (&r, &g) in rows.iter().zip(groups) {
            let r = r as usize;
            if !values.is_valid(r) {
                continue;
            }
            let separator = match &self.separator {
                Some(_) => None,
                None => Some(if separators.is_valid(r) { separators.strings().get(r).to_string() } else { String::new() }),
            };
            let key = flat[offsets[k] as usize..offsets[k + 1] as usize].to_vec();
            k += 1;
            let value = strings.get(r).to_string();
            self.bytes += size_of::<Piece>() + key.len() + value.len() + separator.as_ref().map_or(0, String::len);
            self.groups[g as usize].push(Piece { key, separator, value });
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<StringAggState>(other)?;
        self.bytes += std::mem::take(&mut other.bytes);
        for (g, pieces) in other.groups.iter_mut().enumerate() {
            self.groups[mapping[g] as usize].append(pieces);
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let mut builder = StrColumnBuilder::with_capacity(self.groups.len());
        let mut seen = Vec::with_capacity(self.groups.len());
        let mut text = String::new();
        for pieces in &mut self.groups {
            if !self.orders.is_empty() {
                // Stable: rows with equal keys keep the order they arrived in.
                pieces.sort_by(|a, b| a.key.cmp(&b.key));
            }
            if self.distinct {
                let mut values = HashSet::new();
                pieces.retain(|p| values.insert(p.value.clone()));
            }
            seen.push(!pieces.is_empty());
            text.clear();
            for (i, piece) in pieces.iter().enumerate() {
                if i > 0 {
                    text.push_str(piece.separator.as_deref().or(self.separator.as_deref()).unwrap_or(""));
                }
                text.push_str(&piece.value);
            }
            builder.push(&text);
        }
        Ok(Vector::new(DataType::Varchar(None), VectorData::Str(builder.finish()), validity_from(&seen)))
    }

    fn memory_bytes(&self) -> usize {
        self.bytes
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

// --------------------------------------------------------------------------- QUANTILES

/// What a list state computes from a group's sorted values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum ListResult {
    /// Interpolated between the two values around `fraction * (n - 1)` (DOUBLE input).
    Continuous(f64),
    /// The first value whose position reaches `fraction * n` (PostgreSQL's
    /// `percentile_disc`).
    Discrete(f64),
    /// The most frequent value, the first in the order among equally frequent ones.
    Mode,
}

/// `quantile_cont`, `quantile_disc` and `mode`: the group's values, sorted at the end.
pub(super) struct ListState<H: Held> {
    lists: Vec<Vec<H::Value>>,
    result: ListResult,
    descending: bool,
    output_type: DataType,
    /// Values held (strings count their bytes too).
    bytes: usize,
}

impl<H: Held> ListState<H> {
    pub(super) fn new(spec: &AggregateSpec, result: ListResult) -> ListState<H> {
        let descending = spec.order_by.first().is_some_and(|o| !o.ascending);
        ListState { lists: Vec::new(), result, descending, output_type: spec.output_type, bytes: 0 }
    }
}

/// A list aggregate's result kind from its spec (the fraction is the constant second
/// argument).
pub(super) fn list_result(spec: &AggregateSpec) -> Result<ListResult> {
    use apiary_sql::expr::AggregateFunction as F;
    let fraction = || match spec.constants.get(1) {
        Some(Some(v)) => v.as_f64().ok_or_else(|| internal_err!("quantile fraction {v}")),
        _ => Err(internal_err!("quantile without a constant fraction")),
    };
    Ok(match spec.func {
        F::QuantileCont => ListResult::Continuous(fraction()?),
        F::QuantileDisc => ListResult::Discrete(fraction()?),
        _ => ListResult::Mode,
    })
}

impl<H: Held> AggregateState for ListState<H> {
    fn resize(&mut self, groups: usize) {
        self.lists.resize_with(groups, Vec::new);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("quantile without input"))?;
        for (&r, &g) in rows.iter().zip(groups) {
            if input.is_valid(r as usize) {
                let value = H::read(input, r as usize);
                self.bytes += H::size(&value);
                self.lists[g as usize].push(value);
            }
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<ListState<H>>(other)?;
        self.bytes += std::mem::take(&mut other.bytes);
        for (g, list) in other.lists.iter_mut().enumerate() {
            self.lists[mapping[g] as usize].append(list);
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let groups = self.lists.len();
        let mut seen = Vec::with_capacity(groups);
        let mut out: Vec<H::Value> = Vec::with_capacity(groups);
        let mut interpolated: Vec<f64> = Vec::new();
        let descending = self.descending;
        let order = |a: &H::Value, b: &H::Value| if descending { H::compare(b, a) } else { H::compare(a, b) };
        for list in &mut self.lists {
            seen.push(!list.is_empty());
            if list.is_empty() {
                out.push(H::Value::default());
                interpolated.push(0.0);
                continue;
            }
            list.sort_unstable_by(order);
            let n = list.len();
            match self.result {
                ListResult::Discrete(fraction) => {
                    let position = (fraction * n as f64).ceil() as usize;
                    out.push(list[position.clamp(1, n) - 1].clone());
                }
                ListResult::Continuous(fraction) => {
                    let position = fraction * (n - 1) as f64;
                    let (low, high) = (position.floor() as usize, position.ceil() as usize);
                    let as_f64 = |v: &H::Value| (v as &dyn Any).downcast_ref::<f64>().copied();
                    let (Some(a), Some(b)) = (as_f64(&list[low]), as_f64(&list[high])) else {
                        return Err(internal_err!("quantile_cont over non-DOUBLE values"));
                    };
                    interpolated.push(a + (position - low as f64) * (b - a));
                }
                ListResult::Mode => {
                    let (mut best, mut best_count) = (0, 0);
                    let mut start = 0;
                    while start < n {
                        let mut end = start + 1;
                        while end < n && order(&list[start], &list[end]) == Ordering::Equal {
                            end += 1;
                        }
                        if end - start > best_count {
                            (best, best_count) = (start, end - start);
                        }
                        start = end;
                    }
                    out.push(list[best].clone());
                }
            }
            // The values are not needed any more.
            *list = Vec::new();
        }
        let validity = validity_from(&seen);
        Ok(match self.result {
            ListResult::Continuous(_) => Vector::new(DataType::Double, VectorData::F64(interpolated.into()), validity),
            _ => H::finish(out, self.output_type, validity),
        })
    }

    fn memory_bytes(&self) -> usize {
        self.bytes
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
