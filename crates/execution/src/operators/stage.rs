//! Stage boundary (ROF §4): where a pipeline is cut into stages.
//!
//! ```text
//!  ... ─▶ HashJoinProbe ─▶ (sparse vectors) ─▶ StageBoundary ─▶ HashJoinProbe (large table)
//!                                              buffers survivors until a full vector
//! ```
//!
//! Operators upstream of a selective join hand on vectors with few surviving rows. The
//! next operator that randomly accesses a structure larger than the cache (a hash-table
//! directory) gains from full vectors: group prefetching (ROF §4.3) overlaps the misses of
//! many keys instead of a handful. The boundary copies the survivors of sparse vectors
//! into a buffer and emits it once it holds a full vector (and at the end of the work
//! order); dense vectors pass through untouched, after whatever is buffered, so rows keep
//! their order within a work order.
//!
//! Whether it is active is decided per query at run time, from the real table size: a
//! boundary before a probe of a cache-resident table would only copy.

use std::sync::Arc;

use apiary_common::Result;
use apiary_types::{ChunkBuilder, DataChunk};

use super::hash_join::HashJoin;
use super::{local, Control, Emit, ExecContext, LocalState, Operator};

/// Directories at least this large are "larger than the cache": the size from which
/// probes also prefetch.
pub const STAGE_MIN_TABLE_BYTES: usize = crate::hash::join_table::PREFETCH_MIN_DIRECTORY_BYTES;

/// A stage boundary in front of the probe of `join`.
pub struct StageBoundary {
    join: Arc<HashJoin>,
}

impl StageBoundary {
    pub fn before_probe(join: Arc<HashJoin>) -> StageBoundary {
        StageBoundary { join }
    }
}

struct StageLocal {
    /// Decided on the first chunk (the build side has finished by then).
    active: Option<bool>,
    buffered: ChunkBuilder,
}

impl StageLocal {
    fn flush(&mut self, emit: &mut Emit) -> Result<Control> {
        if self.buffered.rows() == 0 {
            return Ok(Control::Continue);
        }
        emit(std::mem::take(&mut self.buffered).finish())
    }
}

impl Operator for StageBoundary {
    fn name(&self) -> String {
        format!("StageBoundary (full vectors for HashJoinProbe {})", self.join.description)
    }

    fn starts_stage(&self) -> bool {
        true
    }

    fn local_state(&self) -> LocalState {
        Box::new(StageLocal { active: None, buffered: ChunkBuilder::default() })
    }

    fn execute(&self, chunk: DataChunk, state: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<Control> {
        let state = local::<StageLocal>(state);
        let active = *state.active.get_or_insert_with(|| ctx.config.staging && self.join.table_bytes(ctx) >= STAGE_MIN_TABLE_BYTES);
        let vector_size = ctx.config.vector_size.max(1);
        let rows = chunk.row_count();
        if !active || chunk.column_count() == 0 || rows * 2 >= vector_size {
            if state.flush(emit)? == Control::Finished {
                return Ok(Control::Finished);
            }
            return emit(chunk);
        }
        if state.buffered.rows() == 0 {
            state.buffered = ChunkBuilder::with_capacity(vector_size);
        }
        state.buffered.append_chunk(&chunk);
        if state.buffered.rows() >= vector_size {
            return state.flush(emit);
        }
        Ok(Control::Continue)
    }

    fn flush(&self, state: &mut LocalState, _ctx: &ExecContext, emit: &mut Emit) -> Result<Control> {
        local::<StageLocal>(state).flush(emit)
    }
}
