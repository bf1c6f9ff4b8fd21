//! Collects a pipeline's output in input order, optionally applying LIMIT/OFFSET.
//!
//! Used for the final result of a query and for LIMIT inside a query. Chunks are tagged
//! with their order key (feeding pipeline, morsel, sequence) and sorted at the end, so the
//! result does not depend on which worker ran which morsel. Once enough rows have been
//! collected for the LIMIT, `consume` answers `Finished` and the scheduler hands out no
//! further morsels: morsels are handed out in order, so the rows needed are all in
//! morsels already started.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use apiary_common::Result;
use apiary_types::{DataChunk, DataType};

use super::{local, Control, ExecContext, LocalState, Sink};

type Tagged = (u64, u64, DataChunk);

pub struct CollectSink {
    pub types: Vec<DataType>,
    limit: Option<u64>,
    offset: u64,
    rows_seen: AtomicU64,
    collected: Mutex<Vec<Tagged>>,
    result: Mutex<Option<Arc<Vec<DataChunk>>>>,
}

struct CollectLocal {
    chunks: Vec<Tagged>,
    sequence: u64,
    bytes: usize,
}

impl CollectSink {
    pub fn new(types: Vec<DataType>, limit: Option<u64>, offset: u64) -> Self {
        CollectSink { types, limit, offset, rows_seen: AtomicU64::new(0), collected: Mutex::new(Vec::new()), result: Mutex::new(None) }
    }

    /// The collected chunks (after `finish`).
    pub fn result(&self) -> Arc<Vec<DataChunk>> {
        self.result.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default()
    }
}

impl Sink for CollectSink {
    fn name(&self) -> String {
        match self.limit {
            Some(limit) => format!("Limit {limit} offset {}", self.offset),
            None => "Collect".to_string(),
        }
    }

    fn local_state(&self) -> LocalState {
        Box::new(CollectLocal { chunks: Vec::new(), sequence: 0, bytes: 0 })
    }

    fn consume(&self, chunk: DataChunk, order: u64, state: &mut LocalState, _ctx: &ExecContext) -> Result<Control> {
        let chunk = chunk.compact();
        let rows = chunk.row_count() as u64;
        if rows == 0 {
            return Ok(Control::Continue);
        }
        let state = local::<CollectLocal>(state);
        state.bytes += super::estimated_bytes(&chunk);
        state.chunks.push((order, state.sequence, chunk));
        state.sequence += 1;
        let seen = self.rows_seen.fetch_add(rows, Ordering::Relaxed) + rows;
        match self.limit {
            Some(limit) if seen >= limit.saturating_add(self.offset) => Ok(Control::Finished),
            _ => Ok(Control::Continue),
        }
    }

    fn local_memory(&self, state: &LocalState) -> usize {
        state.downcast_ref::<CollectLocal>().map_or(0, |s| s.bytes)
    }

    fn combine(&self, state: LocalState) -> Result<()> {
        let state = state.downcast::<CollectLocal>().expect("collect local state");
        self.collected.lock().unwrap_or_else(|e| e.into_inner()).extend(state.chunks);
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        let mut tagged = std::mem::take(&mut *self.collected.lock().unwrap_or_else(|e| e.into_inner()));
        tagged.sort_by_key(|(order, sequence, _)| (*order, *sequence));
        let mut skip = self.offset;
        let mut remaining = self.limit.unwrap_or(u64::MAX);
        let mut chunks = Vec::new();
        for (_, _, chunk) in tagged {
            if remaining == 0 {
                break;
            }
            let rows = chunk.row_count() as u64;
            if skip >= rows {
                skip -= rows;
                continue;
            }
            let take = (rows - skip).min(remaining);
            let chunk = if skip == 0 && take == rows {
                chunk
            } else {
                let selection: Vec<u32> = (skip as u32..(skip + take) as u32).collect();
                chunk.with_selection(Some(selection)).compact()
            };
            skip = 0;
            remaining -= take;
            chunks.push(chunk);
        }
        *self.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(chunks));
        Ok(())
    }
}

/// Reads what a [`CollectSink`] collected (after it finished), one chunk per morsel.
pub struct CollectedSource(pub Arc<CollectSink>);

impl super::Source for CollectedSource {
    fn name(&self) -> String {
        "CollectedScan".to_string()
    }

    fn morsels(&self) -> usize {
        self.0.result().len()
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, _ctx: &ExecContext, emit: &mut super::Emit) -> Result<()> {
        let chunks = self.0.result();
        if let Some(chunk) = chunks.get(morsel) {
            emit(chunk.clone())?;
        }
        Ok(())
    }
}

/// A sink that keeps nothing: ends pipelines whose effect is a side effect (the probe of
/// a build-side semi/anti join, which only marks build rows).
pub struct DiscardSink;

impl Sink for DiscardSink {
    fn name(&self) -> String {
        "Discard".to_string()
    }

    fn local_state(&self) -> LocalState {
        Box::new(())
    }

    fn consume(&self, _chunk: DataChunk, _order: u64, _state: &mut LocalState, _ctx: &ExecContext) -> Result<Control> {
        Ok(Control::Continue)
    }

    fn combine(&self, _state: LocalState) -> Result<()> {
        Ok(())
    }
}
