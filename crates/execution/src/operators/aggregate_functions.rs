//! Aggregate function states, columnar per group.
//!
//! ```text
//! aggregate_functions.rs   the AggregateState contract, count/sum/avg/min/max/bool/
//!                          variance, DISTINCT wrappers, the factory (AggregateSpec)
//!   held.rs                typed per-group values (native or string) and slots
//!   holistic.rs            string_agg (ORDER BY), quantile_cont/disc, median, mode
//!   arg_extreme.rs         arg_min / arg_max
//!   statistics.rs          corr, covar_pop/samp, regr_*
//!   approximate.rs         approx_count_distinct (HyperLogLog)
//! ```
//!
//! Each state holds one accumulator per group in a typed vector (`Vec<i128>` of sums,
//! `Vec<i64>` of counts, ...) indexed by the dense group id from the group table, and is
//! monomorphised over the input type: the update loop is `sums[group[k]] += values[row[k]]`
//! with no per-row type dispatch. Decimal sums and averages stay scaled integers.

use std::any::Any;
use std::collections::HashSet;
use std::marker::PhantomData;

use apiary_common::Bitmap;
use apiary_common::{exec_err, internal_err, Result};
use apiary_sql::expr::{AggregateFunction, AggregateOrder};
use apiary_types::datatype::PhysicalType;
use apiary_types::decimal::{decimal_average, POW10};
use apiary_types::vector::NativeType;
use apiary_types::{DataType, ScalarValue, StrColumnBuilder, Vector, VectorData};

pub use few_groups::{DenseGroups, MAX_GROUPS as FEW_GROUPS, SKIP};

mod approximate;
mod arg_extreme;
mod few_groups;
mod held;
mod holistic;
mod statistics;

/// What an aggregate computes, fixed at planning time.
#[derive(Debug, Clone)]
pub struct AggregateSpec {
    pub func: AggregateFunction,
    /// `None` for COUNT(*).
    pub input_type: Option<DataType>,
    /// The types of all arguments (then of the ORDER BY keys).
    pub argument_types: Vec<DataType>,
    pub output_type: DataType,
    pub distinct: bool,
    /// The value of each argument that is a constant (a quantile's fraction, a
    /// separator), `None` for the others.
    pub constants: Vec<Option<ScalarValue>>,
    /// The directions of the ORDER BY keys that follow the arguments.
    pub order_by: Vec<AggregateOrder>,
}

/// One aggregate's per-group accumulators.
///
/// Concurrency: each worker owns the states of its own partition tables; `resize` and
/// `update`/`update_single` run on that worker only. `merge` runs in the finalize task
/// of one partition (one thread), taking `other` from another worker's table of the same
/// partition; `finalize` follows on that thread. No method is called concurrently on one
/// state, so states need `Send` but not `Sync`.
pub trait AggregateState: Send {
    /// Makes room for `groups` groups (new groups start empty).
    fn resize(&mut self, groups: usize);
    /// Adds row `rows[k]` of the argument vectors `inputs` (one per argument of the call,
    /// then one per ORDER BY key; none for COUNT(*)) to group `groups[k]`; NULL inputs
    /// are ignored except by COUNT(*).
    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()>;
    /// Adds every row `i` of the chunk's `inputs` to group `groups[i]`, leaving out rows
    /// of group [`SKIP`] (a chunk's unselected rows); called for tables of at most
    /// [`FEW_GROUPS`] groups. `false`, with nothing added, when the state has no such
    /// path for these inputs: the caller then calls `update`.
    fn update_dense(&mut self, _inputs: &[Vector], _dense: &DenseGroups) -> Result<bool> {
        Ok(false)
    }
    /// Adds the rows `rows` of `inputs` to group 0 (aggregates without GROUP BY).
    fn update_single(&mut self, inputs: &[Vector], rows: &[u32]) -> Result<()> {
        let groups = vec![0u32; rows.len()];
        self.update(inputs, rows, &groups)
    }
    /// Adds `other`'s group `g` into group `mapping[g]` (same state type).
    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()>;
    /// One output value per group.
    fn finalize(&mut self) -> Result<Vector>;
    /// Bytes held beyond the ~16 per group the sink counts for every state: the value
    /// lists of holistic aggregates, sketches. Called after every chunk: must be cheap.
    fn memory_bytes(&self) -> usize {
        0
    }
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

fn downcast<T: 'static>(other: &mut dyn AggregateState) -> Result<&mut T> {
    other.as_any_mut().downcast_mut::<T>().ok_or_else(|| internal_err!("merging different aggregate states"))
}

fn validity_from(seen: &[bool]) -> Option<Bitmap> {
    if seen.iter().all(|s| *s) {
        None
    } else {
        Some(Bitmap::from_bools(seen.iter().copied()))
    }
}

// ------------------------------------------------------------------------------- COUNT

struct CountState {
    counts: Vec<i64>,
    star: bool,
}

impl AggregateState for CountState {
    fn resize(&mut self, groups: usize) {
        self.counts.resize(groups, 0);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        match inputs.first().and_then(|v| v.validity.as_ref()).filter(|_| !self.star) {
            None if self.counts.len() <= few_groups::MAX_GROUPS => {
                let counts = few_groups::group_counts(groups, self.counts.len());
                self.counts.iter_mut().zip(counts).for_each(|(total, c)| *total += c);
            }
            None => groups.iter().for_each(|&g| self.counts[g as usize] += 1),
            Some(validity) => {
                for (&r, &g) in rows.iter().zip(groups) {
                    self.counts[g as usize] += validity.get(r as usize) as i64;
                }
            }
        }
        Ok(())
    }

    fn update_dense(&mut self, inputs: &[Vector], dense: &DenseGroups) -> Result<bool> {
        if self.counts.len() != dense.group_count() || (!self.star && inputs.first().is_some_and(|v| v.validity.is_some())) {
            return Ok(false);
        }
        for block in dense.block_counts() {
            self.counts.iter_mut().zip(block).for_each(|(total, c)| *total += c);
        }
        Ok(true)
    }

    fn update_single(&mut self, inputs: &[Vector], rows: &[u32]) -> Result<()> {
        let valid = match inputs.first().and_then(|v| v.validity.as_ref()).filter(|_| !self.star) {
            None => rows.len(),
            Some(validity) => rows.iter().filter(|&&r| validity.get(r as usize)).count(),
        };
        self.counts[0] += valid as i64;
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<CountState>(other)?;
        for (g, &c) in other.counts.iter().enumerate() {
            self.counts[mapping[g] as usize] += c;
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        Ok(Vector::from_native(DataType::BigInt, std::mem::take(&mut self.counts)))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

// --------------------------------------------------------------------------- SUM / AVG

/// An accumulator for sums.
pub trait Accumulator: NativeType {
    fn checked_add(self, other: Self) -> Option<Self>;
    fn to_f64(self) -> f64;
}

impl Accumulator for i64 {
    #[inline(always)]
    fn checked_add(self, other: Self) -> Option<Self> {
        i64::checked_add(self, other)
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Accumulator for i128 {
    #[inline(always)]
    fn checked_add(self, other: Self) -> Option<Self> {
        i128::checked_add(self, other)
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Accumulator for f64 {
    #[inline(always)]
    fn checked_add(self, other: Self) -> Option<Self> {
        Some(self + other)
    }
    fn to_f64(self) -> f64 {
        self
    }
}

/// An input type summed into accumulator `A`.
pub trait SumInput<A>: NativeType {
    fn widen(self) -> A;
}

macro_rules! sum_input {
    ($($from:ty => $to:ty),*) => { $(impl SumInput<$to> for $from { #[inline(always)] fn widen(self) -> $to { self as $to } })* };
}
sum_input!(i16 => i64, i32 => i64, i64 => i128, i128 => i128, f32 => f64, f64 => f64, i64 => i64);

/// Sums with 128-bit totals over 64-bit or 128-bit values (BIGINT and decimals; the
/// 38-digit decimals the 64-bit programs of `expr/narrow_decimal.rs` computed arrive as
/// 64-bit values, see [`AggregateSpec::accepts_narrow_input`]). A 64-bit value adds into
/// its group's 64-bit partial sum with one checked add; a partial sum that would
/// overflow moves into the group's 128-bit total. TPC-H Q1's eight aggregates are all
/// such sums, and a checked 128-bit add per row and aggregate was a third of its time.
struct WideSumState {
    partial: Vec<i64>,
    totals: Vec<i128>,
    counts: Vec<i64>,
    output: SumOutput,
    output_type: DataType,
}

impl WideSumState {
    fn overflow(&self) -> apiary_common::ApiaryError {
        exec_err!("sum out of range for type {}", self.output_type)
    }

    /// Adds `value` to group `g`; `false` when the 128-bit total overflows.
    #[inline(always)]
    fn add_narrow(partial: &mut i64, total: &mut i128, value: i64) -> bool {
        match partial.checked_add(value) {
            Some(sum) => {
                *partial = sum;
                true
            }
            None => match total.checked_add(*partial as i128 + value as i128) {
                Some(t) => {
                    *total = t;
                    *partial = 0;
                    true
                }
                None => false,
            },
        }
    }

    /// Adds a block's per-group sums and counts (`few_groups`) to the groups, one per
    /// accumulator; `false` when a 128-bit total overflows.
    fn add_block_sums(partial: &mut [i64], totals: &mut [i128], counts: &mut [i64], sums: &[(i64, i64)]) -> bool {
        let mut ok = true;
        for (g, &(sum, count)) in sums.iter().enumerate().take(partial.len()) {
            ok &= Self::add_narrow(&mut partial[g], &mut totals[g], sum);
            counts[g] += count;
        }
        ok
    }

    /// The groups' sums (partial sums folded into the totals).
    fn fold(&mut self) -> Result<()> {
        for (total, partial) in self.totals.iter_mut().zip(self.partial.iter_mut()) {
            *total = total.checked_add(*partial as i128).ok_or_else(|| exec_err!("sum out of range for type {}", self.output_type))?;
            *partial = 0;
        }
        Ok(())
    }
}

impl AggregateState for WideSumState {
    fn resize(&mut self, groups: usize) {
        self.partial.resize(groups, 0);
        self.totals.resize(groups, 0);
        self.counts.resize(groups, 0);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("sum without input"))?;
        // Slices, not the vectors: stores through them then cannot change the vectors'
        // own pointers and lengths, which the loops would otherwise reload per row.
        let (partial, totals, counts) = (&mut self.partial[..], &mut self.totals[..], &mut self.counts[..]);
        let mut ok = true;
        match (&input.data, input.validity.as_ref()) {
            (VectorData::I64(values), None) if partial.len() <= few_groups::MAX_GROUPS => {
                let values = values.as_slice();
                for (rows, groups) in rows.chunks(few_groups::BLOCK).zip(groups.chunks(few_groups::BLOCK)) {
                    match few_groups::block_sums(values, rows, groups, partial.len()) {
                        Some(sums) => ok &= Self::add_block_sums(partial, totals, counts, &sums),
                        None => {
                            for (&r, &g) in rows.iter().zip(groups) {
                                let g = g as usize;
                                ok &= Self::add_narrow(&mut partial[g], &mut totals[g], values[r as usize]);
                                counts[g] += 1;
                            }
                        }
                    }
                }
            }
            (VectorData::I64(values), None) => {
                let values = values.as_slice();
                for (&r, &g) in rows.iter().zip(groups) {
                    let g = g as usize;
                    ok &= Self::add_narrow(&mut partial[g], &mut totals[g], values[r as usize]);
                    counts[g] += 1;
                }
            }
            (VectorData::I64(values), Some(validity)) => {
                let values = values.as_slice();
                for (&r, &g) in rows.iter().zip(groups) {
                    if validity.get(r as usize) {
                        let g = g as usize;
                        ok &= Self::add_narrow(&mut partial[g], &mut totals[g], values[r as usize]);
                        counts[g] += 1;
                    }
                }
            }
            (VectorData::I128(values), validity) => {
                let values = values.as_slice();
                for (&r, &g) in rows.iter().zip(groups) {
                    if validity.is_none_or(|v| v.get(r as usize)) {
                        let g = g as usize;
                        match totals[g].checked_add(values[r as usize]) {
                            Some(t) => totals[g] = t,
                            None => ok = false,
                        }
                        counts[g] += 1;
                    }
                }
            }
            _ => return Err(internal_err!("128-bit sum over {}", input.data_type)),
        }
        if ok {
            Ok(())
        } else {
            Err(self.overflow())
        }
    }

    fn update_dense(&mut self, inputs: &[Vector], dense: &DenseGroups) -> Result<bool> {
        let input = inputs.first().ok_or_else(|| internal_err!("sum without input"))?;
        let (VectorData::I64(values), None) = (&input.data, &input.validity) else { return Ok(false) };
        let group_count = self.partial.len();
        if group_count != dense.group_count() {
            return Ok(false);
        }
        let (partial, totals, counts) = (&mut self.partial[..], &mut self.totals[..], &mut self.counts[..]);
        let mut ok = true;
        let blocks = values.as_slice().chunks(few_groups::BLOCK).zip(dense.groups().chunks(few_groups::BLOCK));
        for ((values, groups), block_counts) in blocks.zip(dense.block_counts()) {
            match few_groups::dense_sums(values, groups, group_count) {
                Some(sums) => {
                    for g in 0..group_count {
                        ok &= Self::add_narrow(&mut partial[g], &mut totals[g], sums[g]);
                        counts[g] += block_counts[g];
                    }
                }
                None => {
                    for (&v, &g) in values.iter().zip(groups).filter(|(_, &g)| g != SKIP) {
                        let g = g as usize;
                        ok &= Self::add_narrow(&mut partial[g], &mut totals[g], v);
                        counts[g] += 1;
                    }
                }
            }
        }
        if ok {
            Ok(true)
        } else {
            Err(self.overflow())
        }
    }

    fn update_single(&mut self, inputs: &[Vector], rows: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("sum without input"))?;
        let validity = input.validity.as_ref();
        // The group's sums in registers for the whole chunk.
        let (mut partial, mut total, mut count, mut ok) = (self.partial[0], self.totals[0], 0i64, true);
        match &input.data {
            VectorData::I64(values) => {
                let values = values.as_slice();
                for &r in rows {
                    if validity.is_none_or(|v| v.get(r as usize)) {
                        ok &= Self::add_narrow(&mut partial, &mut total, values[r as usize]);
                        count += 1;
                    }
                }
            }
            VectorData::I128(values) => {
                let values = values.as_slice();
                for &r in rows {
                    if validity.is_none_or(|v| v.get(r as usize)) {
                        match total.checked_add(values[r as usize]) {
                            Some(t) => total = t,
                            None => ok = false,
                        }
                        count += 1;
                    }
                }
            }
            _ => return Err(internal_err!("128-bit sum over {}", input.data_type)),
        }
        if !ok {
            return Err(self.overflow());
        }
        (self.partial[0], self.totals[0]) = (partial, total);
        self.counts[0] += count;
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<WideSumState>(other)?;
        other.fold()?;
        for g in 0..other.totals.len() {
            let target = mapping[g] as usize;
            self.totals[target] = self.totals[target].checked_add(other.totals[g]).ok_or_else(|| self.overflow())?;
            self.counts[target] += other.counts[g];
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        self.fold()?;
        let mut sums = SumState::<i128, i128> {
            sums: std::mem::take(&mut self.totals),
            counts: std::mem::take(&mut self.counts),
            output: self.output,
            output_type: self.output_type,
            _input: PhantomData,
        };
        sums.finalize()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// What the sum state produces at the end.
#[derive(Clone, Copy, Debug)]
enum SumOutput {
    Sum,
    /// Average as a decimal: rescale the sum by `10^shift` before dividing.
    DecimalAverage {
        shift: u32,
    },
    FloatAverage,
}

struct SumState<I, A> {
    sums: Vec<A>,
    counts: Vec<i64>,
    output: SumOutput,
    output_type: DataType,
    _input: PhantomData<I>,
}

impl<I: SumInput<A>, A: Accumulator> SumState<I, A> {
    fn overflow(&self) -> apiary_common::ApiaryError {
        exec_err!("sum out of range for type {}", self.output_type)
    }
}

impl<I: SumInput<A>, A: Accumulator> AggregateState for SumState<I, A> {
    fn resize(&mut self, groups: usize) {
        self.sums.resize(groups, A::default());
        self.counts.resize(groups, 0);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("sum without input"))?;
        let values = input.values::<I>();
        let mut ok = true;
        match &input.validity {
            None => {
                for (&r, &g) in rows.iter().zip(groups) {
                    let g = g as usize;
                    match self.sums[g].checked_add(values[r as usize].widen()) {
                        Some(s) => self.sums[g] = s,
                        None => ok = false,
                    }
                    self.counts[g] += 1;
                }
            }
            Some(validity) => {
                for (&r, &g) in rows.iter().zip(groups) {
                    if !validity.get(r as usize) {
                        continue;
                    }
                    let g = g as usize;
                    match self.sums[g].checked_add(values[r as usize].widen()) {
                        Some(s) => self.sums[g] = s,
                        None => ok = false,
                    }
                    self.counts[g] += 1;
                }
            }
        }
        if ok {
            Ok(())
        } else {
            Err(self.overflow())
        }
    }

    fn update_single(&mut self, inputs: &[Vector], rows: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("sum without input"))?;
        let values = input.values::<I>();
        let mut sum = self.sums[0];
        let mut count = 0i64;
        let mut ok = true;
        for &r in rows {
            if input.is_valid(r as usize) {
                match sum.checked_add(values[r as usize].widen()) {
                    Some(s) => sum = s,
                    None => ok = false,
                }
                count += 1;
            }
        }
        if !ok {
            return Err(self.overflow());
        }
        self.sums[0] = sum;
        self.counts[0] += count;
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<SumState<I, A>>(other)?;
        for g in 0..other.sums.len() {
            let target = mapping[g] as usize;
            self.sums[target] = self.sums[target].checked_add(other.sums[g]).ok_or_else(|| self.overflow())?;
            self.counts[target] += other.counts[g];
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let seen: Vec<bool> = self.counts.iter().map(|&c| c > 0).collect();
        let validity = validity_from(&seen);
        if let (SumOutput::Sum, DataType::Decimal { precision, .. }) = (self.output, self.output_type) {
            // i128 holds more than 38 digits; the type does not. Compared as integers: as
            // f64, a sum of 38 nines rounds up to 10^38 and would be refused.
            let bound = POW10[precision as usize].unsigned_abs();
            let too_large = match (&self.sums as &dyn Any).downcast_ref::<Vec<i128>>() {
                Some(sums) => sums.iter().any(|s| s.unsigned_abs() >= bound),
                None => self.sums.iter().any(|s| s.to_f64().abs() >= bound as f64),
            };
            if too_large {
                return Err(exec_err!("numeric field overflow: sum exceeds {}", self.output_type));
            }
        }
        let data = match self.output {
            SumOutput::Sum => A::wrap(std::mem::take(&mut self.sums).into()),
            SumOutput::FloatAverage => {
                let averages: Vec<f64> =
                    self.sums.iter().zip(&self.counts).map(|(s, &c)| if c > 0 { s.to_f64() / c as f64 } else { 0.0 }).collect();
                VectorData::F64(averages.into())
            }
            SumOutput::DecimalAverage { shift } => {
                let sums = (&self.sums as &dyn Any)
                    .downcast_ref::<Vec<i128>>()
                    .ok_or_else(|| internal_err!("decimal average over non-decimal sums"))?;
                let factor = POW10[shift as usize];
                let mut averages = Vec::with_capacity(sums.len());
                for (&s, &c) in sums.iter().zip(&self.counts) {
                    if c == 0 {
                        averages.push(0);
                        continue;
                    }
                    let average =
                        decimal_average(s, c, factor).ok_or_else(|| exec_err!("average out of range for {}", self.output_type))?;
                    averages.push(average);
                }
                VectorData::I128(averages.into())
            }
        };
        Ok(Vector::new(self.output_type, data, validity))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

// --------------------------------------------------------------------------- MIN / MAX

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pick {
    Min,
    Max,
    /// The first value seen.
    Any,
}

struct MinMaxState<T> {
    values: Vec<T>,
    seen: Vec<bool>,
    pick: Pick,
    output_type: DataType,
}

impl<T: NativeType> MinMaxState<T> {
    #[inline(always)]
    fn offer(&mut self, g: usize, v: T) {
        let replace = !self.seen[g]
            || match self.pick {
                Pick::Min => v.sql_lt(self.values[g]),
                Pick::Max => self.values[g].sql_lt(v),
                Pick::Any => false,
            };
        if replace {
            self.values[g] = v;
            self.seen[g] = true;
        }
    }
}

impl<T: NativeType> AggregateState for MinMaxState<T> {
    fn resize(&mut self, groups: usize) {
        self.values.resize(groups, T::default());
        self.seen.resize(groups, false);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("min/max without input"))?;
        let values = input.values::<T>();
        for (&r, &g) in rows.iter().zip(groups) {
            if input.is_valid(r as usize) {
                self.offer(g as usize, values[r as usize]);
            }
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<MinMaxState<T>>(other)?;
        for g in 0..other.values.len() {
            if other.seen[g] {
                self.offer(mapping[g] as usize, other.values[g]);
            }
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let validity = validity_from(&self.seen);
        Ok(Vector::new(self.output_type, T::wrap(std::mem::take(&mut self.values).into()), validity))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

struct StringPickState {
    values: Vec<Option<String>>,
    pick: Pick,
    output_type: DataType,
}

impl StringPickState {
    fn offer(&mut self, g: usize, v: &str) {
        let replace = match (&self.values[g], self.pick) {
            (None, _) => true,
            (Some(current), Pick::Min) => v < current.as_str(),
            (Some(current), Pick::Max) => v > current.as_str(),
            (Some(_), Pick::Any) => false,
        };
        if replace {
            self.values[g] = Some(v.to_string());
        }
    }
}

impl AggregateState for StringPickState {
    fn resize(&mut self, groups: usize) {
        self.values.resize(groups, None);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("min/max without input"))?;
        let strings = input.strings();
        for (&r, &g) in rows.iter().zip(groups) {
            if input.is_valid(r as usize) {
                self.offer(g as usize, strings.get(r as usize));
            }
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<StringPickState>(other)?;
        for (g, value) in other.values.iter().enumerate() {
            if let Some(v) = value {
                self.offer(mapping[g] as usize, v);
            }
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let mut builder = StrColumnBuilder::with_capacity(self.values.len());
        let seen: Vec<bool> = self.values.iter().map(|v| v.is_some()).collect();
        for v in &self.values {
            match v {
                Some(s) => builder.push(s),
                None => builder.push_empty(),
            }
        }
        Ok(Vector::new(self.output_type, VectorData::Str(builder.finish()), validity_from(&seen)))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

// ------------------------------------------------------------------- BOOL_AND / BOOL_OR

struct BoolState {
    values: Vec<bool>,
    seen: Vec<bool>,
    and: bool,
}

impl AggregateState for BoolState {
    fn resize(&mut self, groups: usize) {
        self.values.resize(groups, self.and);
        self.seen.resize(groups, false);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("bool_and without input"))?;
        let values = input.values::<bool>();
        for (&r, &g) in rows.iter().zip(groups) {
            if input.is_valid(r as usize) {
                let g = g as usize;
                self.values[g] = if self.and { self.values[g] && values[r as usize] } else { self.values[g] || values[r as usize] };
                self.seen[g] = true;
            }
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<BoolState>(other)?;
        for g in 0..other.values.len() {
            if other.seen[g] {
                let t = mapping[g] as usize;
                self.values[t] = if self.and { self.values[t] && other.values[g] } else { self.values[t] || other.values[g] };
                self.seen[t] = true;
            }
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let validity = validity_from(&self.seen);
        Ok(Vector::new(DataType::Boolean, VectorData::Bool(std::mem::take(&mut self.values).into()), validity))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

// ---------------------------------------------------------------- VARIANCE / STDDEV

struct VarianceState {
    count: Vec<f64>,
    mean: Vec<f64>,
    m2: Vec<f64>,
    func: AggregateFunction,
}

impl AggregateState for VarianceState {
    fn resize(&mut self, groups: usize) {
        self.count.resize(groups, 0.0);
        self.mean.resize(groups, 0.0);
        self.m2.resize(groups, 0.0);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("variance without input"))?;
        let values = input.values::<f64>();
        for (&r, &g) in rows.iter().zip(groups) {
            if input.is_valid(r as usize) {
                // Welford's online update.
                let g = g as usize;
                let x = values[r as usize];
                self.count[g] += 1.0;
                let delta = x - self.mean[g];
                self.mean[g] += delta / self.count[g];
                self.m2[g] += delta * (x - self.mean[g]);
            }
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<VarianceState>(other)?;
        for g in 0..other.count.len() {
            if other.count[g] == 0.0 {
                continue;
            }
            // Chan et al.'s parallel combination.
            let t = mapping[g] as usize;
            let n = self.count[t] + other.count[g];
            let delta = other.mean[g] - self.mean[t];
            self.m2[t] += other.m2[g] + delta * delta * self.count[t] * other.count[g] / n;
            self.mean[t] += delta * other.count[g] / n;
            self.count[t] = n;
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let sample = matches!(self.func, AggregateFunction::StddevSamp | AggregateFunction::VarSamp);
        let root = matches!(self.func, AggregateFunction::StddevSamp | AggregateFunction::StddevPop);
        let mut seen = Vec::with_capacity(self.count.len());
        let mut out = Vec::with_capacity(self.count.len());
        for g in 0..self.count.len() {
            let n = self.count[g];
            let denominator = if sample { n - 1.0 } else { n };
            if denominator <= 0.0 {
                seen.push(false);
                out.push(0.0);
                continue;
            }
            let variance = self.m2[g] / denominator;
            seen.push(true);
            out.push(if root { variance.sqrt() } else { variance });
        }
        Ok(Vector::new(DataType::Double, VectorData::F64(out.into()), validity_from(&seen)))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

// ----------------------------------------------------------------------------- DISTINCT

/// `agg(DISTINCT x)`: per group the set of distinct values; the wrapped aggregate runs
/// over the sets at the end.
struct DistinctState {
    spec: AggregateSpec,
    input_type: DataType,
    sets: Vec<HashSet<Vec<u8>>>,
}

fn encode_value(v: &Vector, r: usize, out: &mut Vec<u8>) {
    out.clear();
    match &v.data {
        VectorData::Bool(b) => out.push(b[r] as u8),
        VectorData::I16(b) => out.extend_from_slice(&b[r].to_le_bytes()),
        VectorData::I32(b) => out.extend_from_slice(&b[r].to_le_bytes()),
        VectorData::I64(b) => out.extend_from_slice(&b[r].to_le_bytes()),
        VectorData::I128(b) => out.extend_from_slice(&b[r].to_le_bytes()),
        VectorData::F32(b) => out.extend_from_slice(&(if b[r] == 0.0 { 0.0f32 } else { b[r] }).to_le_bytes()),
        VectorData::F64(b) => out.extend_from_slice(&(if b[r] == 0.0 { 0.0f64 } else { b[r] }).to_le_bytes()),
        VectorData::Str(s) => out.extend_from_slice(s.get_bytes(r)),
        // Equal intervals ('1 day', '24 hours') are one distinct value.
        VectorData::Interval(b) => out.extend_from_slice(&b[r].normalized().to_le_bytes()),
    }
}

fn decode_values(data_type: DataType, values: &[&Vec<u8>]) -> Vector {
    fn fixed<T: NativeType, const N: usize>(values: &[&Vec<u8>], f: fn([u8; N]) -> T) -> VectorData {
        T::wrap(values.iter().map(|v| f(v[..N].try_into().expect("encoded width"))).collect::<Vec<T>>().into())
    }
    let data = match data_type.physical() {
        PhysicalType::Bool => VectorData::Bool(values.iter().map(|v| v[0] != 0).collect::<Vec<_>>().into()),
        PhysicalType::I16 => fixed::<i16, 2>(values, i16::from_le_bytes),
        PhysicalType::I32 => fixed::<i32, 4>(values, i32::from_le_bytes),
        PhysicalType::I64 => fixed::<i64, 8>(values, i64::from_le_bytes),
        PhysicalType::I128 => fixed::<i128, 16>(values, i128::from_le_bytes),
        PhysicalType::F32 => fixed::<f32, 4>(values, f32::from_le_bytes),
        PhysicalType::F64 => fixed::<f64, 8>(values, f64::from_le_bytes),
        PhysicalType::Str => {
            let mut builder = StrColumnBuilder::with_capacity(values.len());
            for v in values {
                builder.push(std::str::from_utf8(v).unwrap_or_default());
            }
            VectorData::Str(builder.finish())
        }
        PhysicalType::Interval => apiary_types::Interval::wrap(
            values
                .iter()
                .map(|v| {
                    let total = i128::from_le_bytes(v[0..16].try_into().expect("width"));
                    let day = apiary_types::datetime::MICROS_PER_DAY as i128;
                    apiary_types::Interval::new(0, (total / day) as i32, (total % day) as i64)
                })
                .collect::<Vec<_>>()
                .into(),
        ),
    };
    Vector::new(data_type, data, None)
}

impl AggregateState for DistinctState {
    fn resize(&mut self, groups: usize) {
        self.sets.resize_with(groups, HashSet::new);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("distinct aggregate without input"))?;
        let mut buffer = Vec::new();
        for (&r, &g) in rows.iter().zip(groups) {
            if input.is_valid(r as usize) {
                encode_value(input, r as usize, &mut buffer);
                let set = &mut self.sets[g as usize];
                if !set.contains(&buffer) {
                    set.insert(buffer.clone());
                }
            }
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<DistinctState>(other)?;
        for (g, set) in other.sets.iter_mut().enumerate() {
            self.sets[mapping[g] as usize].extend(set.drain());
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let mut inner = AggregateSpec { distinct: false, ..self.spec.clone() }.new_state()?;
        inner.resize(self.sets.len());
        let mut values: Vec<&Vec<u8>> = Vec::new();
        let mut groups: Vec<u32> = Vec::new();
        for (g, set) in self.sets.iter().enumerate() {
            for v in set {
                values.push(v);
                groups.push(g as u32);
            }
        }
        let vector = decode_values(self.input_type, &values);
        let rows: Vec<u32> = (0..values.len() as u32).collect();
        inner.update(std::slice::from_ref(&vector), &rows, &groups)?;
        inner.finalize()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// `agg(DISTINCT x)` for integer-like `x` (BOOLEAN, SMALLINT, INTEGER, BIGINT, DATE,
/// DECIMAL(<=18)): one hash set of (group, value) pairs packed into a `u128`, instead of
/// a set per group with an allocation per value.
struct DistinctPairsState {
    spec: AggregateSpec,
    input_type: DataType,
    pairs: HashSet<u128, std::hash::BuildHasherDefault<PairHasher>>,
    groups: usize,
}

/// Hashes a packed (group, value) pair with the engine's 128-bit mixer.
#[derive(Default)]
struct PairHasher(u64);

impl std::hash::Hasher for PairHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = apiary_common::hash::combine_hashes(self.0, apiary_common::hash::hash_bytes(bytes));
    }
    fn write_u128(&mut self, value: u128) {
        self.0 = apiary_common::hash::hash_u128(value);
    }
}

impl AggregateState for DistinctPairsState {
    fn resize(&mut self, groups: usize) {
        self.groups = groups;
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("distinct aggregate without input"))?;
        let pack = |g: u32, v: u64| ((g as u128) << 64) | v as u128;
        macro_rules! insert_all {
            ($values:expr, $to_bits:expr) => {{
                let values = $values;
                for (&r, &g) in rows.iter().zip(groups) {
                    if input.is_valid(r as usize) {
                        self.pairs.insert(pack(g, $to_bits(values[r as usize])));
                    }
                }
            }};
        }
        match &input.data {
            VectorData::Bool(b) => insert_all!(b, |v: bool| v as u64),
            VectorData::I16(b) => insert_all!(b, |v: i16| v as i64 as u64),
            VectorData::I32(b) => insert_all!(b, |v: i32| v as i64 as u64),
            VectorData::I64(b) => insert_all!(b, |v: i64| v as u64),
            _ => return Err(internal_err!("distinct pairs over {}", input.data_type)),
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<DistinctPairsState>(other)?;
        self.pairs.reserve(other.pairs.len());
        for pair in other.pairs.drain() {
            let group = mapping[(pair >> 64) as usize] as u128;
            self.pairs.insert((group << 64) | (pair as u64 as u128));
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let mut inner = AggregateSpec { distinct: false, ..self.spec.clone() }.new_state()?;
        inner.resize(self.groups);
        let groups: Vec<u32> = self.pairs.iter().map(|&p| (p >> 64) as u32).collect();
        let bits = self.pairs.iter().map(|&p| p as u64);
        let data = match self.input_type.physical() {
            PhysicalType::Bool => VectorData::Bool(bits.map(|b| b != 0).collect::<Vec<_>>().into()),
            PhysicalType::I16 => VectorData::I16(bits.map(|b| b as i64 as i16).collect::<Vec<_>>().into()),
            PhysicalType::I32 => VectorData::I32(bits.map(|b| b as i64 as i32).collect::<Vec<_>>().into()),
            PhysicalType::I64 => VectorData::I64(bits.map(|b| b as i64).collect::<Vec<_>>().into()),
            other => return Err(internal_err!("distinct pairs over {other:?}")),
        };
        let vector = Vector::new(self.input_type, data, None);
        let rows: Vec<u32> = (0..groups.len() as u32).collect();
        inner.update(std::slice::from_ref(&vector), &rows, &groups)?;
        inner.finalize()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

// ------------------------------------------------------------------------------ factory

impl AggregateSpec {
    /// Whether the state takes its argument's values as 64-bit integers where the
    /// argument is a 38-digit decimal computed on 64 bits
    /// ([`crate::expr::PhysicalExpr::evaluate_narrow`]): sums and averages of decimals
    /// ([`WideSumState`]).
    pub fn accepts_narrow_input(&self) -> bool {
        matches!(self.func, AggregateFunction::Sum | AggregateFunction::Avg)
            && !self.distinct
            && self.input_type.is_some_and(|t| t.physical() == PhysicalType::I128)
    }

    /// A fresh state for this aggregate.
    pub fn new_state(&self) -> Result<Box<dyn AggregateState>> {
        use AggregateFunction as F;
        let output_type = self.output_type;
        // string_agg removes duplicates itself (its separator is a second input); a
        // sketch counts each value once anyway.
        if self.distinct && !matches!(self.func, F::CountStar | F::StringAgg | F::ApproxCountDistinct) {
            let input_type = self.input_type.ok_or_else(|| internal_err!("distinct aggregate without input type"))?;
            if matches!(input_type.physical(), PhysicalType::Bool | PhysicalType::I16 | PhysicalType::I32 | PhysicalType::I64) {
                return Ok(Box::new(DistinctPairsState { spec: self.clone(), input_type, pairs: HashSet::default(), groups: 0 }));
            }
            return Ok(Box::new(DistinctState { spec: self.clone(), input_type, sets: Vec::new() }));
        }
        let input = self.input_type.map(|t| t.physical());
        let pick = match self.func {
            F::Min => Pick::Min,
            F::Max => Pick::Max,
            _ => Pick::Any,
        };
        Ok(match (self.func, input) {
            (F::CountStar, _) => Box::new(CountState { counts: Vec::new(), star: true }),
            (F::Count, _) => Box::new(CountState { counts: Vec::new(), star: false }),
            (F::Sum | F::Avg, Some(physical)) => self.sum_state(physical)?,
            (F::Min | F::Max | F::AnyValue, Some(physical)) => {
                macro_rules! pick {
                    ($t:ty) => {
                        Box::new(MinMaxState::<$t> { values: Vec::new(), seen: Vec::new(), pick, output_type }) as Box<dyn AggregateState>
                    };
                }
                match physical {
                    PhysicalType::Bool => pick!(bool),
                    PhysicalType::I16 => pick!(i16),
                    PhysicalType::I32 => pick!(i32),
                    PhysicalType::I64 => pick!(i64),
                    PhysicalType::I128 => pick!(i128),
                    PhysicalType::F32 => pick!(f32),
                    PhysicalType::F64 => pick!(f64),
                    PhysicalType::Interval => pick!(apiary_types::Interval),
                    PhysicalType::Str => Box::new(StringPickState { values: Vec::new(), pick, output_type }),
                }
            }
            (F::BoolAnd | F::BoolOr, _) => Box::new(BoolState { values: Vec::new(), seen: Vec::new(), and: self.func == F::BoolAnd }),
            (F::StddevSamp | F::StddevPop | F::VarSamp | F::VarPop, _) => {
                Box::new(VarianceState { count: Vec::new(), mean: Vec::new(), m2: Vec::new(), func: self.func })
            }
            (F::StringAgg, _) => Box::new(holistic::StringAggState::new(self)),
            (F::QuantileCont | F::QuantileDisc | F::Mode, Some(physical)) => {
                let result = holistic::list_result(self)?;
                macro_rules! list {
                    ($held:ty) => {
                        Box::new(holistic::ListState::<$held>::new(self, result)) as Box<dyn AggregateState>
                    };
                }
                held::with_held!(physical, list)
            }
            (F::ApproxCountDistinct, _) => Box::new(approximate::ApproxDistinctState::default()),
            (F::ArgMin | F::ArgMax, _) => {
                let key = self.argument_types.get(1).ok_or_else(|| internal_err!("arg_min/arg_max without a value type"))?;
                let minimum = self.func == F::ArgMin;
                macro_rules! extreme {
                    ($held:ty) => {
                        Box::new(arg_extreme::ArgExtremeState::<$held>::new(output_type, minimum)) as Box<dyn AggregateState>
                    };
                }
                held::with_held!(key.physical(), extreme)
            }
            (
                F::Corr
                | F::CovarPop
                | F::CovarSamp
                | F::RegrSlope
                | F::RegrIntercept
                | F::RegrCount
                | F::RegrR2
                | F::RegrAvgX
                | F::RegrAvgY
                | F::RegrSxx
                | F::RegrSyy
                | F::RegrSxy,
                _,
            ) => Box::new(statistics::TwoVariableState::new(self.func)),
            (func, input) => return Err(internal_err!("no state for {func:?} over {input:?}")),
        })
    }

    fn sum_state(&self, physical: PhysicalType) -> Result<Box<dyn AggregateState>> {
        let output_type = self.output_type;
        let output = match (self.func, output_type) {
            (AggregateFunction::Sum, _) => SumOutput::Sum,
            (_, DataType::Decimal { scale: out_scale, .. }) => {
                let in_scale = match self.input_type {
                    Some(DataType::Decimal { scale, .. }) => scale,
                    _ => 0,
                };
                SumOutput::DecimalAverage { shift: (out_scale - in_scale.min(out_scale)) as u32 }
            }
            _ => SumOutput::FloatAverage,
        };
        macro_rules! sum {
            ($i:ty, $a:ty) => {
                Box::new(SumState::<$i, $a> { sums: Vec::new(), counts: Vec::new(), output, output_type, _input: PhantomData })
                    as Box<dyn AggregateState>
            };
        }
        // Decimal averages need i128 sums; integer sums accumulate in i64 (SMALLINT,
        // INTEGER) or i128 (BIGINT, decimals); floats in f64.
        Ok(match (physical, output) {
            (PhysicalType::I16, SumOutput::DecimalAverage { .. }) => return Err(internal_err!("decimal average of SMALLINT")),
            (PhysicalType::I16, _) => sum!(i16, i64),
            (PhysicalType::I32, _) => sum!(i32, i64),
            (PhysicalType::I64, SumOutput::Sum) if output_type == DataType::BigInt => sum!(i64, i64),
            (PhysicalType::I64 | PhysicalType::I128, _) => {
                Box::new(WideSumState { partial: Vec::new(), totals: Vec::new(), counts: Vec::new(), output, output_type })
            }
            (PhysicalType::F32, _) => sum!(f32, f64),
            (PhysicalType::F64, _) => sum!(f64, f64),
            (other, _) => return Err(internal_err!("sum over {other:?}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(func: AggregateFunction, input: DataType, output: DataType, distinct: bool) -> AggregateSpec {
        AggregateSpec {
            func,
            input_type: Some(input),
            argument_types: vec![input],
            output_type: output,
            distinct,
            constants: Vec::new(),
            order_by: Vec::new(),
        }
    }

    #[test]
    fn decimal_average_is_exact() {
        let s = spec(AggregateFunction::Avg, DataType::decimal(15, 2), DataType::decimal(38, 6), false);
        let mut state = s.new_state().unwrap();
        state.resize(1);
        let v = Vector::from_native(DataType::decimal(15, 2), vec![100i64, 200, 201]);
        state.update_single(std::slice::from_ref(&v), &[0, 1, 2]).unwrap();
        let out = state.finalize().unwrap();
        assert_eq!(out.get_scalar(0).to_string(), "1.670000");
    }

    #[test]
    fn merge_and_distinct() {
        let s = spec(AggregateFunction::Count, DataType::Integer, DataType::BigInt, true);
        let mut a = s.new_state().unwrap();
        let mut b = s.new_state().unwrap();
        a.resize(2);
        b.resize(1);
        let v = Vector::from_native(DataType::Integer, vec![1, 1, 2, 3]);
        a.update(std::slice::from_ref(&v), &[0, 1, 2, 3], &[0, 0, 0, 1]).unwrap();
        b.update(std::slice::from_ref(&v), &[2, 3], &[0, 0]).unwrap();
        a.merge(b.as_mut(), &[1]).unwrap();
        let out = a.finalize().unwrap();
        assert_eq!(out.values::<i64>(), &[2, 2]);
    }

    #[test]
    fn sum_overflow_is_an_error() {
        let s = spec(AggregateFunction::Sum, DataType::decimal(38, 0), DataType::decimal(38, 0), false);
        let mut state = s.new_state().unwrap();
        state.resize(1);
        let v = Vector::from_native(DataType::decimal(38, 0), vec![i128::MAX, 1]);
        assert!(state.update_single(std::slice::from_ref(&v), &[0, 1]).is_err());
    }
}
