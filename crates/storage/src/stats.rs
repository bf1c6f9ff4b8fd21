//! Table statistics for the optimizer: row counts, min/max, NULL counts and distinct-value
//! estimates from a HyperLogLog sketch per column.

use apiary_common::hash::{hash_bytes, hash_u128, hash_u64};
use apiary_types::{ScalarValue, Vector, VectorData};

use crate::block::{Block, ZoneMap};

/// log2 of the number of HyperLogLog registers (2^11 = 2048: about 2.3% standard error).
const HLL_BITS: u32 = 11;
const HLL_REGISTERS: usize = 1 << HLL_BITS;

/// A HyperLogLog distinct-count sketch.
#[derive(Clone, Debug)]
pub struct HyperLogLog {
    registers: Vec<u8>,
    /// [`HyperLogLog::estimate`], computed once: the optimizer asks for it many times
    /// while planning a query. Every change to the registers clears it.
    estimate_cache: std::sync::OnceLock<f64>,
}

impl Default for HyperLogLog {
    fn default() -> Self {
        HyperLogLog { registers: vec![0; HLL_REGISTERS], estimate_cache: std::sync::OnceLock::new() }
    }
}

impl HyperLogLog {
    #[inline]
    pub fn add_hash(&mut self, hash: u64) {
        self.estimate_cache = std::sync::OnceLock::new();
        self.add_hash_raw(hash);
    }

    #[inline]
    fn add_hash_raw(&mut self, hash: u64) {
        let index = (hash >> (64 - HLL_BITS)) as usize;
        let rank = ((hash << HLL_BITS) | (1 << (HLL_BITS - 1))).leading_zeros() as u8 + 1;
        if rank > self.registers[index] {
            self.registers[index] = rank;
        }
    }

    /// Adds every non-NULL value of a vector.
    pub fn add_vector(&mut self, vector: &Vector) {
        self.estimate_cache = std::sync::OnceLock::new();
        let valid = |i: usize| vector.is_valid(i);
        match &vector.data {
            VectorData::Bool(v) => {
                v.iter().enumerate().filter(|(i, _)| valid(*i)).for_each(|(_, &x)| self.add_hash_raw(hash_u64(x as u64)))
            }
            VectorData::I16(v) => v.iter().enumerate().filter(|(i, _)| valid(*i)).for_each(|(_, &x)| self.add_hash_raw(hash_u64(x as u64))),
            VectorData::I32(v) => v.iter().enumerate().filter(|(i, _)| valid(*i)).for_each(|(_, &x)| self.add_hash_raw(hash_u64(x as u64))),
            VectorData::I64(v) => v.iter().enumerate().filter(|(i, _)| valid(*i)).for_each(|(_, &x)| self.add_hash_raw(hash_u64(x as u64))),
            VectorData::I128(v) => {
                v.iter().enumerate().filter(|(i, _)| valid(*i)).for_each(|(_, &x)| self.add_hash_raw(hash_u128(x as u128)))
            }
            VectorData::F32(v) => {
                v.iter().enumerate().filter(|(i, _)| valid(*i)).for_each(|(_, &x)| self.add_hash_raw(hash_u64(x.to_bits() as u64)))
            }
            VectorData::F64(v) => {
                v.iter().enumerate().filter(|(i, _)| valid(*i)).for_each(|(_, &x)| self.add_hash_raw(hash_u64(x.to_bits())))
            }
            VectorData::Interval(v) => v.iter().enumerate().filter(|(i, _)| valid(*i)).for_each(|(_, x)| {
                self.add_hash_raw(hash_u128(((x.months as u128) << 96) | ((x.days as u32 as u128) << 64) | x.micros as u64 as u128))
            }),
            VectorData::Str(s) => (0..s.len()).filter(|&i| valid(i)).for_each(|i| self.add_hash_raw(hash_bytes(s.get_bytes(i)))),
        }
    }

    /// Adds one row of a vector (NULLs are skipped), hashed as [`Self::add_vector`]
    /// hashes it: the `approx_count_distinct` aggregate's per-group update.
    #[inline]
    pub fn add_row(&mut self, vector: &Vector, row: usize) {
        if !vector.is_valid(row) {
            return;
        }
        let hash = match &vector.data {
            VectorData::Bool(v) => hash_u64(v[row] as u64),
            VectorData::I16(v) => hash_u64(v[row] as u64),
            VectorData::I32(v) => hash_u64(v[row] as u64),
            VectorData::I64(v) => hash_u64(v[row] as u64),
            VectorData::I128(v) => hash_u128(v[row] as u128),
            VectorData::F32(v) => hash_u64(v[row].to_bits() as u64),
            VectorData::F64(v) => hash_u64(v[row].to_bits()),
            VectorData::Interval(v) => {
                let x = v[row];
                hash_u128(((x.months as u128) << 96) | ((x.days as u32 as u128) << 64) | x.micros as u64 as u128)
            }
            VectorData::Str(s) => hash_bytes(s.get_bytes(row)),
        };
        self.add_hash(hash);
    }

    /// The registers, for storing the sketch.
    pub fn registers(&self) -> &[u8] {
        &self.registers
    }

    /// A sketch from stored registers (`None` when the count is wrong).
    pub fn from_registers(registers: &[u8]) -> Option<HyperLogLog> {
        (registers.len() == HLL_REGISTERS)
            .then(|| HyperLogLog { registers: registers.to_vec(), estimate_cache: std::sync::OnceLock::new() })
    }

    pub fn merge(&mut self, other: &HyperLogLog) {
        self.estimate_cache = std::sync::OnceLock::new();
        for (a, b) in self.registers.iter_mut().zip(&other.registers) {
            *a = (*a).max(*b);
        }
    }

    /// The estimated number of distinct values added.
    pub fn estimate(&self) -> f64 {
        *self.estimate_cache.get_or_init(|| self.compute_estimate())
    }

    fn compute_estimate(&self) -> f64 {
        let m = HLL_REGISTERS as f64;
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let sum: f64 = self.registers.iter().map(|&r| 2f64.powi(-(r as i32))).sum();
        let raw = alpha * m * m / sum;
        let zeros = self.registers.iter().filter(|&&r| r == 0).count();
        if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln() // linear counting for small cardinalities
        } else {
            raw
        }
    }
}

/// Statistics of one column over the whole table.
#[derive(Clone, Debug)]
pub struct ColumnStats {
    pub min: ScalarValue,
    pub max: ScalarValue,
    pub null_count: usize,
    pub sketch: HyperLogLog,
}

impl Default for ColumnStats {
    fn default() -> Self {
        ColumnStats { min: ScalarValue::Null, max: ScalarValue::Null, null_count: 0, sketch: HyperLogLog::default() }
    }
}

impl ColumnStats {
    /// Estimated number of distinct non-NULL values (at least 1 when any exist).
    pub fn distinct_count(&self, row_count: usize) -> f64 {
        let non_null = row_count.saturating_sub(self.null_count) as f64;
        self.sketch.estimate().min(non_null).max(if non_null > 0.0 { 1.0 } else { 0.0 })
    }

    fn merge_zone(&mut self, zone: &ZoneMap) {
        if !zone.min.is_null() && (self.min.is_null() || zone.min.total_cmp(&self.min).is_lt()) {
            self.min = zone.min.clone();
        }
        if !zone.max.is_null() && (self.max.is_null() || zone.max.total_cmp(&self.max).is_gt()) {
            self.max = zone.max.clone();
        }
    }
}

/// Statistics of a table.
#[derive(Clone, Debug, Default)]
pub struct TableStats {
    pub row_count: usize,
    pub columns: Vec<ColumnStats>,
}

impl TableStats {
    pub fn empty(column_count: usize) -> Self {
        TableStats { row_count: 0, columns: vec![ColumnStats::default(); column_count] }
    }

    /// Counts a new block whose values are `columns`: its rows and NULLs, and when
    /// `summaries` is set (the optimizer will read them) its min/max and distinct values.
    pub fn add_block(&mut self, block: &Block, columns: &[Vector], summaries: bool) {
        self.add_block_after(block, columns, summaries, 0);
    }

    /// As [`Self::add_block`] for a block whose first `counted` rows the sketches hold
    /// already (a trailing partial block an append copied into the new block): only the
    /// rows after them are hashed.
    pub fn add_block_after(&mut self, block: &Block, columns: &[Vector], summaries: bool, counted: usize) {
        self.row_count += block.row_count;
        for ((column, stripe), values) in self.columns.iter_mut().zip(&block.columns).zip(columns) {
            if summaries {
                column.null_count += stripe.zone_map().null_count;
                column.merge_zone(stripe.zone_map());
                match counted {
                    0 => column.sketch.add_vector(values),
                    _ => column.sketch.add_vector(&values.slice(counted.min(values.len()), values.len() - counted.min(values.len()))),
                }
            } else {
                column.null_count += values.null_count();
            }
        }
    }

    /// Stops counting a block's rows: a trailing partial block an append rewrites into a
    /// new block. Its values stay in the sketches and min/max, which is harmless: the new
    /// block holds them again (HyperLogLog is idempotent).
    pub fn remove_block(&mut self, block: &Block) {
        self.row_count -= block.row_count;
        for (column, stripe) in self.columns.iter_mut().zip(&block.columns) {
            column.null_count -= stripe.zone_map().null_count;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_estimates_follow_changes() {
        let mut sketch = HyperLogLog::default();
        (0..1000u64).for_each(|v| sketch.add_hash(hash_u64(v)));
        let first = sketch.estimate();
        assert_eq!(sketch.estimate(), first, "cached");
        (1000..50_000u64).for_each(|v| sketch.add_hash(hash_u64(v)));
        assert!(sketch.estimate() > first * 10.0);
        let mut other = HyperLogLog::default();
        (0..200_000u64).for_each(|v| other.add_hash(hash_u64(v)));
        let before_merge = sketch.estimate();
        sketch.merge(&other);
        assert!(sketch.estimate() > before_merge * 2.0);
    }
    use apiary_types::DataType;

    #[test]
    fn hll_estimates_within_a_few_percent() {
        for n in [10usize, 1000, 100_000] {
            let vector = Vector::from_native(DataType::BigInt, (0..n as i64).collect());
            let mut hll = HyperLogLog::default();
            hll.add_vector(&vector);
            hll.add_vector(&vector); // duplicates do not count
            let estimate = hll.estimate();
            let error = (estimate - n as f64).abs() / n as f64;
            assert!(error < 0.08, "n={n} estimate={estimate}");
        }
    }
}
