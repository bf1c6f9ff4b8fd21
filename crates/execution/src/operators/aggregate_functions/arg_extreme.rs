//! `arg_min(arg, value)` / `arg_max(arg, value)` (DuckDB; also `min_by` / `max_by`): the
//! `arg` of the row with the smallest (largest) `value`. Rows where either is NULL are
//! skipped, as DuckDB does; between equal values the first one seen wins (which one
//! that is depends on how rows reach the workers).

use std::any::Any;
use std::cmp::Ordering;

use apiary_common::{internal_err, Result};
use apiary_types::{DataType, Vector};

use super::held::{Held, Slots};
use super::{downcast, validity_from, AggregateState};

pub(super) struct ArgExtremeState<H: Held> {
    keys: Vec<H::Value>,
    args: Slots,
    seen: Vec<bool>,
    /// `Less` for arg_min: a row replaces the kept one when its value orders so.
    wanted: Ordering,
    output_type: DataType,
}

impl<H: Held> ArgExtremeState<H> {
    pub(super) fn new(output_type: DataType, minimum: bool) -> ArgExtremeState<H> {
        ArgExtremeState {
            keys: Vec::new(),
            args: Slots::new(output_type),
            seen: Vec::new(),
            wanted: if minimum { Ordering::Less } else { Ordering::Greater },
            output_type,
        }
    }
}

impl<H: Held> AggregateState for ArgExtremeState<H> {
    fn resize(&mut self, groups: usize) {
        self.keys.resize(groups, H::Value::default());
        self.args.resize(groups);
        self.seen.resize(groups, false);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let [arg, key, ..] = inputs else { return Err(internal_err!("arg_min/arg_max needs two arguments")) };
        for (&r, &g) in rows.iter().zip(groups) {
            let (r, g) = (r as usize, g as usize);
            if !arg.is_valid(r) || !key.is_valid(r) {
                continue;
            }
            if !self.seen[g] || H::compare_row(key, r, &self.keys[g]) == self.wanted {
                self.keys[g] = H::read(key, r);
                self.args.set(g, arg, r);
                self.seen[g] = true;
            }
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<ArgExtremeState<H>>(other)?;
        for g in 0..other.seen.len() {
            if !other.seen[g] {
                continue;
            }
            let t = mapping[g] as usize;
            if !self.seen[t] || H::compare(&other.keys[g], &self.keys[t]) == self.wanted {
                self.keys[t] = std::mem::take(&mut other.keys[g]);
                self.args.take_from(t, &mut other.args, g);
                self.seen[t] = true;
            }
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let validity = validity_from(&self.seen);
        Ok(self.args.finish(self.output_type, validity))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
