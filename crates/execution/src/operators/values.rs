//! A source of literal rows (VALUES, SELECT without FROM) or of prepared chunks.

use std::sync::Arc;

use apiary_common::Result;
use apiary_types::{DataChunk, DataType, ScalarValue, VectorBuilder};

use super::{Emit, ExecContext, LocalState, Source};

pub struct ValuesSource {
    rows: Vec<Vec<ScalarValue>>,
    types: Vec<DataType>,
}

impl ValuesSource {
    pub fn new(rows: Vec<Vec<ScalarValue>>, types: Vec<DataType>) -> Self {
        ValuesSource { rows, types }
    }
}

impl Source for ValuesSource {
    fn name(&self) -> String {
        format!("Values ({} rows)", self.rows.len())
    }

    fn morsels(&self, _ctx: &ExecContext) -> Result<usize> {
        Ok(1)
    }

    fn produce(&self, _morsel: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        for rows in self.rows.chunks(ctx.config.vector_size.max(1)) {
            let mut builders: Vec<VectorBuilder> = self.types.iter().map(|t| VectorBuilder::with_capacity(*t, rows.len())).collect();
            for row in rows {
                for (builder, value) in builders.iter_mut().zip(row) {
                    builder.push_scalar(value);
                }
            }
            let columns = builders.into_iter().map(|b| b.finish()).collect();
            emit(DataChunk::new(columns, rows.len()))?;
        }
        Ok(())
    }
}

/// Emits chunks that already exist (one per morsel).
pub struct ChunksSource {
    pub label: String,
    pub chunks: Arc<Vec<DataChunk>>,
}

impl Source for ChunksSource {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn morsels(&self, _ctx: &ExecContext) -> Result<usize> {
        Ok(self.chunks.len())
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, _ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        emit(self.chunks[morsel].clone())?;
        Ok(())
    }
}
