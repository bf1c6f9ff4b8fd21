//! `approx_count_distinct(x)`: a HyperLogLog sketch per group (the storage layer's, the
//! one table statistics use: 2,048 registers, about 2.3% standard error, exact-ish for
//! small counts through linear counting). Sketches merge by taking register maxima, so
//! parallel partial states combine exactly. A group's sketch is allocated on its first
//! value.

use std::any::Any;

use apiary_common::{internal_err, Result};
use apiary_storage::stats::HyperLogLog;
use apiary_types::{DataType, Vector};

use super::{downcast, AggregateState};

#[derive(Default)]
pub(super) struct ApproxDistinctState {
    sketches: Vec<Option<Box<HyperLogLog>>>,
    /// Sketches allocated.
    allocated: usize,
}

/// Bytes of one sketch (its registers).
const SKETCH_BYTES: usize = 2048 + 64;

impl AggregateState for ApproxDistinctState {
    fn resize(&mut self, groups: usize) {
        self.sketches.resize_with(groups, || None);
    }

    fn update(&mut self, inputs: &[Vector], rows: &[u32], groups: &[u32]) -> Result<()> {
        let input = inputs.first().ok_or_else(|| internal_err!("approx_count_distinct without input"))?;
        for (&r, &g) in rows.iter().zip(groups) {
            if input.is_valid(r as usize) {
                let slot = &mut self.sketches[g as usize];
                if slot.is_none() {
                    self.allocated += 1;
                }
                slot.get_or_insert_with(Default::default).add_row(input, r as usize);
            }
        }
        Ok(())
    }

    fn merge(&mut self, other: &mut dyn AggregateState, mapping: &[u32]) -> Result<()> {
        let other = downcast::<ApproxDistinctState>(other)?;
        for (g, sketch) in other.sketches.iter_mut().enumerate() {
            let Some(sketch) = sketch.take() else { continue };
            match &mut self.sketches[mapping[g] as usize] {
                Some(target) => target.merge(&sketch),
                slot @ None => {
                    *slot = Some(sketch);
                    self.allocated += 1;
                }
            }
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<Vector> {
        let counts: Vec<i64> = self.sketches.iter().map(|s| s.as_ref().map_or(0, |s| s.estimate().round() as i64)).collect();
        Ok(Vector::from_native(DataType::BigInt, counts))
    }

    fn memory_bytes(&self) -> usize {
        self.allocated * SKETCH_BYTES
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
