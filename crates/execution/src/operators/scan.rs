//! Table scan: the source of most pipelines. One work order = one storage block.
//!
//! For each block the scan first consults the zone maps of the pushed-down predicates
//! and skips the block if no row can qualify; otherwise it slices the needed column
//! stripes into vectors (zero-copy), evaluates the pushed-down filter into a selection
//! vector and emits the chunk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use apiary_common::Result;
use apiary_storage::TableData;
use apiary_types::{DataChunk, ScalarValue, Vector};

use super::{Control, Emit, ExecContext, LocalState, Source};
use crate::expr::ExprRef;

/// A range condition on one column that zone maps can check.
#[derive(Debug, Clone)]
pub struct ZonePredicate {
    /// Table column index.
    pub column: usize,
    pub lower: Option<(ScalarValue, bool)>,
    pub upper: Option<(ScalarValue, bool)>,
}

pub struct TableScan {
    pub label: String,
    data: Arc<TableData>,
    /// Table column index of each column read; chunks have them in this order.
    read_columns: Vec<usize>,
    filter: Option<ExprRef>,
    zone_predicates: Vec<ZonePredicate>,
    /// Positions (in `read_columns`) of the columns passed on.
    output: Vec<usize>,
    pub blocks_skipped: AtomicU64,
}

impl TableScan {
    pub fn new(
        label: String,
        data: Arc<TableData>,
        read_columns: Vec<usize>,
        filter: Option<ExprRef>,
        zone_predicates: Vec<ZonePredicate>,
        output: Vec<usize>,
    ) -> Self {
        TableScan { label, data, read_columns, filter, zone_predicates, output, blocks_skipped: AtomicU64::new(0) }
    }

    pub fn has_filter(&self) -> bool {
        self.filter.is_some()
    }

    pub fn row_count(&self) -> usize {
        self.data.row_count()
    }
}

/// A vector whose survivors are fewer than 1/this of its rows goes through the stage buffer.
const STAGE_DENSITY_DIVISOR: usize = 2;

impl TableScan {
    /// Emits the staged row ids of the block (whose read columns are `vectors`) as one
    /// dense chunk of the output columns.
    fn flush_stage(&self, vectors: &[Vector], stage: &mut Vec<u32>, emit: &mut Emit) -> Result<Control> {
        if stage.is_empty() {
            return Ok(Control::Continue);
        }
        let columns: Vec<_> = self.output.iter().map(|&i| vectors[i].gather(stage)).collect();
        let len = stage.len();
        stage.clear();
        let chunk = if columns.is_empty() { DataChunk::empty_columns(len) } else { DataChunk::new(columns, len) };
        emit(chunk)
    }
}

impl Source for TableScan {
    fn name(&self) -> String {
        format!("Scan {}", self.label)
    }

    fn morsels(&self) -> usize {
        self.data.blocks.len()
    }

    fn ends_stage(&self, staging: bool) -> bool {
        staging && self.filter.is_some()
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        let block = &self.data.blocks[morsel];
        for p in &self.zone_predicates {
            let zone = &block.column(p.column).zone_map;
            let lower = p.lower.as_ref().map(|(v, inclusive)| (v, *inclusive));
            let upper = p.upper.as_ref().map(|(v, inclusive)| (v, *inclusive));
            if !zone.may_contain_range(lower, upper) {
                self.blocks_skipped.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        let vector_size = ctx.config.vector_size;
        // Stage boundary (ROF): survivors of a selective filter are collected as block row
        // ids until a full vector is ready, then gathered densely; downstream operators
        // get full vectors instead of many sparse ones.
        let staging = ctx.config.staging && self.filter.is_some();
        // Whole stripes (loaded from the database file if not resident), sliced per vector.
        let vectors: Vec<Vector> = self.read_columns.iter().map(|&c| block.column(c).vector()).collect::<Result<_>>()?;
        let mut stage: Vec<u32> = Vec::new();
        let mut offset = 0;
        while offset < block.row_count {
            let len = vector_size.min(block.row_count - offset);
            let columns = vectors.iter().map(|v| if len == v.len() { v.clone() } else { v.slice(offset, len) }).collect();
            let mut chunk = DataChunk::new(columns, len);
            if let Some(filter) = &self.filter {
                let all: Vec<u32> = (0..len as u32).collect();
                let selected = filter.select(&chunk, &all)?;
                if staging && selected.len() * STAGE_DENSITY_DIVISOR < len {
                    stage.extend(selected.iter().map(|&r| r + offset as u32));
                    offset += len;
                    if stage.len() >= vector_size && self.flush_stage(&vectors, &mut stage, emit)? == Control::Finished {
                        return Ok(());
                    }
                    continue;
                }
                offset += len;
                if selected.is_empty() {
                    continue;
                }
                // Dense survivors pass through with a selection vector (no copy), after
                // whatever the stage holds, so rows stay in order.
                if self.flush_stage(&vectors, &mut stage, emit)? == Control::Finished {
                    return Ok(());
                }
                if selected.len() < len {
                    chunk.set_selection(Some(selected));
                }
            } else {
                offset += len;
            }
            let chunk = if self.output.len() == self.read_columns.len() { chunk } else { chunk.project(&self.output) };
            if emit(chunk)? == Control::Finished {
                return Ok(());
            }
        }
        self.flush_stage(&vectors, &mut stage, emit)?;
        Ok(())
    }
}
