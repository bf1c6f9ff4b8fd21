//! Collects a pipeline's output in input order, optionally applying LIMIT/OFFSET.
//!
//! Used for the final result of a query and for LIMIT inside a query. Chunks are tagged
//! with their order key (feeding pipeline, morsel, sequence) and sorted at the end, so the
//! result does not depend on which worker ran which morsel. Under a LIMIT the sink counts
//! the rows of the completed morsels at the front of the input order (of the first
//! feeding pipeline); once they hold LIMIT + OFFSET rows, `consume` answers `Finished` and
//! the scheduler hands out no further morsels. Morsels still running are then all later
//! in the order, so cutting them short loses none of the rows the result needs (the
//! result is the first rows in input order, as a user reading `LIMIT 10` expects).

use std::sync::{Arc, Mutex};

use apiary_common::Result;
use apiary_types::{DataChunk, DataType};

use super::{local, Control, ExecContext, GlobalState, LocalState, Sink, StateSlot, Stateful};

type Tagged = (u64, u64, DataChunk);

pub struct CollectSink {
    pub types: Vec<DataType>,
    limit: Option<u64>,
    offset: u64,
    slot: StateSlot,
}

/// One execution's rows.
#[derive(Default)]
struct CollectGlobal {
    /// Under a LIMIT: rows of the completed morsels at the front of the order.
    prefix: Mutex<Prefix>,
    collected: Mutex<Vec<Tagged>>,
    result: Mutex<Option<Arc<Vec<DataChunk>>>>,
}

/// The completed front of the input order.
#[derive(Default)]
struct Prefix {
    /// The first order key not yet in the front.
    next: u64,
    /// Rows in the front.
    rows: u64,
    /// Rows consumed per order key beyond the front.
    pending: std::collections::BTreeMap<u64, u64>,
    /// Completed order keys beyond the front.
    done: std::collections::BTreeSet<u64>,
}

struct CollectLocal {
    chunks: Vec<Tagged>,
    sequence: u64,
    bytes: usize,
}

impl CollectSink {
    pub fn new(types: Vec<DataType>, limit: Option<u64>, offset: u64, slot: StateSlot) -> Self {
        CollectSink { types, limit, offset, slot }
    }

    /// The chunks collected (after `finish`), for a reader in the plan.
    fn collected(&self, ctx: &ExecContext) -> Result<Arc<Vec<DataChunk>>> {
        let global = ctx.global::<CollectGlobal>(self.slot)?;
        Ok(global.result.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default())
    }

    /// The chunks an execution collected (after `finish`).
    pub fn result(&self, state: &super::ExecutionState) -> Result<Arc<Vec<DataChunk>>> {
        let global = state.get::<CollectGlobal>(self.slot)?;
        Ok(global.result.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default())
    }
}

impl Stateful for CollectSink {
    fn new_state(&self) -> Result<GlobalState> {
        Ok(Box::new(CollectGlobal::default()))
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

    fn consume(&self, chunk: DataChunk, order: u64, state: &mut LocalState, ctx: &ExecContext) -> Result<Control> {
        let chunk = chunk.compact();
        let rows = chunk.row_count() as u64;
        if rows == 0 {
            return Ok(Control::Continue);
        }
        let state = local::<CollectLocal>(state);
        state.bytes += super::estimated_bytes(&chunk);
        state.chunks.push((order, state.sequence, chunk));
        state.sequence += 1;
        let Some(limit) = self.limit else { return Ok(Control::Continue) };
        let mut prefix = ctx.global::<CollectGlobal>(self.slot)?.prefix.lock().unwrap_or_else(|e| e.into_inner());
        if order >= prefix.next {
            *prefix.pending.entry(order).or_default() += rows;
        }
        Ok(if prefix.rows >= limit.saturating_add(self.offset) { Control::Finished } else { Control::Continue })
    }

    fn morsel_done(&self, order: u64, ctx: &ExecContext) -> Result<()> {
        if self.limit.is_none() {
            return Ok(());
        }
        let mut prefix = ctx.global::<CollectGlobal>(self.slot)?.prefix.lock().unwrap_or_else(|e| e.into_inner());
        prefix.done.insert(order);
        loop {
            let next = prefix.next;
            if !prefix.done.remove(&next) {
                break;
            }
            let rows = prefix.pending.remove(&next).unwrap_or(0);
            prefix.rows += rows;
            prefix.next += 1;
        }
        Ok(())
    }

    fn local_memory(&self, state: &LocalState) -> usize {
        state.downcast_ref::<CollectLocal>().map_or(0, |s| s.bytes)
    }

    fn combine(&self, state: LocalState, ctx: &ExecContext) -> Result<()> {
        let state = state.downcast::<CollectLocal>().expect("collect local state");
        ctx.global::<CollectGlobal>(self.slot)?.collected.lock().unwrap_or_else(|e| e.into_inner()).extend(state.chunks);
        Ok(())
    }

    fn finish(&self, ctx: &ExecContext) -> Result<()> {
        let global = ctx.global::<CollectGlobal>(self.slot)?;
        let mut tagged = std::mem::take(&mut *global.collected.lock().unwrap_or_else(|e| e.into_inner()));
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
        *global.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(chunks));
        Ok(())
    }
}

/// Reads what a [`CollectSink`] collected (after it finished), one chunk per morsel.
pub struct CollectedSource(pub Arc<CollectSink>);

impl super::Source for CollectedSource {
    fn name(&self) -> String {
        "CollectedScan".to_string()
    }

    fn morsels(&self, ctx: &ExecContext) -> Result<usize> {
        Ok(self.0.collected(ctx)?.len())
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut super::Emit) -> Result<()> {
        let chunks = self.0.collected(ctx)?;
        if let Some(chunk) = chunks.get(morsel) {
            emit(chunk.clone())?;
        }
        Ok(())
    }
}

/// Reads a materialized CTE's rows (what a [`CollectSink`] collected) for one reference:
/// the columns at `positions`, one chunk per morsel.
pub struct CteScanSource {
    pub sink: Arc<CollectSink>,
    pub positions: Vec<usize>,
}

impl super::Source for CteScanSource {
    fn name(&self) -> String {
        "CteScan".to_string()
    }

    fn morsels(&self, ctx: &ExecContext) -> Result<usize> {
        Ok(self.sink.collected(ctx)?.len())
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut super::Emit) -> Result<()> {
        let chunks = self.sink.collected(ctx)?;
        if let Some(chunk) = chunks.get(morsel) {
            emit(chunk.clone().project(&self.positions))?;
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

    fn combine(&self, _state: LocalState, _ctx: &ExecContext) -> Result<()> {
        Ok(())
    }
}
