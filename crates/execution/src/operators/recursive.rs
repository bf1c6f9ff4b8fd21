//! `WITH RECURSIVE`: the sink that iterates a recursive CTE and the sources reading it.
//!
//! ```text
//!   non-recursive term ──▶ RecursiveCteSink ◀── recursive term's pipelines (a loop)
//!                            │  finish: new rows (UNION: not seen before) → result,
//!                            │          and they become the work table
//!                            ▼
//!          WorkTableSource (read by the loop's pipelines in the next iteration)
//!          RecursiveResultSource (read once the loop ended)
//! ```
//!
//! The scheduler runs the loop (`PipelineLoop` in the physical plan): after the sink's
//! `finish`, [`RecursiveCteSink::iterate`] says whether the work table has rows; if so,
//! the loop's pipelines and sinks run again with fresh state (a new
//! [`LoopState`](super::LoopState)), feeding this sink again; if not, the sink is finished
//! and its readers start. The sink's own state lives for the whole execution.
//!
//! Memory: the rows kept (the result) are charged to the query's budget as they grow, so
//! a recursion that does not end (`UNION ALL` always adding rows) fails cleanly at
//! `memory_limit`; the scheduler checks the cancel flag between iterations.

use std::sync::{Arc, Mutex};

use apiary_common::Result;
use apiary_types::{DataChunk, DataType};

use super::{local, Control, Emit, ExecContext, GlobalState, LocalState, Sink, Source, StateSlot, Stateful};
use crate::hash::group_table::GroupTable;
use crate::hash::keys::KeyPacker;

pub struct RecursiveCteSink {
    pub name: String,
    pub types: Vec<DataType>,
    /// UNION (not ALL): rows already produced, and repeats within an iteration, are dropped.
    pub distinct: bool,
    /// Iterations stop once this many rows were produced (the reader's LIMIT, see
    /// `rows_read_by_limit` in the planner).
    pub row_limit: Option<u64>,
    slot: StateSlot,
}

/// One execution's rows.
struct RecursiveGlobal {
    inner: Mutex<Inner>,
}

struct Inner {
    /// The current iteration's rows, as the workers combined them.
    incoming: Vec<DataChunk>,
    /// Every row produced so far.
    result: Arc<Vec<DataChunk>>,
    /// The rows the last iteration added: what the next one reads.
    work_table: Arc<Vec<DataChunk>>,
    /// Under UNION: every distinct row seen so far.
    seen: Option<GroupTable>,
    /// Bytes of `result` (and `seen`) reserved in the memory budget.
    reported_memory: usize,
    result_bytes: usize,
    result_rows: u64,
    iterations: u64,
}

struct RecursiveLocal {
    chunks: Vec<DataChunk>,
    bytes: usize,
}

impl RecursiveCteSink {
    pub fn new(name: String, types: Vec<DataType>, distinct: bool, row_limit: Option<u64>, slot: StateSlot) -> Self {
        RecursiveCteSink { name, types, distinct, row_limit, slot }
    }

    fn inner<'a>(&self, ctx: &'a ExecContext) -> Result<std::sync::MutexGuard<'a, Inner>> {
        Ok(ctx.global::<RecursiveGlobal>(self.slot)?.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// After `finish`: whether the recursive term must run again (the last iteration
    /// added rows). Called by the scheduler, once per finish.
    pub fn iterate(&self, ctx: &ExecContext) -> Result<bool> {
        let inner = self.inner(ctx)?;
        Ok(!inner.work_table.is_empty() && self.row_limit.is_none_or(|limit| inner.result_rows < limit))
    }

    /// Iterations run so far (the non-recursive term counts as the first).
    pub fn iterations(&self, ctx: &ExecContext) -> Result<u64> {
        Ok(self.inner(ctx)?.iterations)
    }

    fn work_table(&self, ctx: &ExecContext) -> Result<Arc<Vec<DataChunk>>> {
        Ok(Arc::clone(&self.inner(ctx)?.work_table))
    }

    fn result(&self, ctx: &ExecContext) -> Result<Arc<Vec<DataChunk>>> {
        Ok(Arc::clone(&self.inner(ctx)?.result))
    }

    /// The rows of `chunks` not seen before (each once), in order.
    fn new_rows(&self, seen: &mut GroupTable, chunks: Vec<DataChunk>) -> Vec<DataChunk> {
        let packer = KeyPacker::new(&self.types, &vec![true; self.types.len()], true);
        let mut kept = Vec::new();
        let mut groups = Vec::new();
        let mut new_groups = Vec::new();
        for chunk in chunks {
            let rows: Vec<u32> = (0..chunk.row_count() as u32).collect();
            let packed = packer.pack(&chunk.columns, &rows);
            let hashes = packed.hashes();
            groups.clear();
            new_groups.clear();
            seen.lookup(&packed, &hashes, &rows, &mut groups, &mut new_groups);
            if new_groups.len() == rows.len() {
                kept.push(chunk);
            } else if !new_groups.is_empty() {
                kept.push(chunk.with_selection(Some(new_groups.clone())).compact());
            }
        }
        kept
    }
}

impl Stateful for RecursiveCteSink {
    fn new_state(&self) -> Result<GlobalState> {
        let seen = self.distinct.then(|| {
            let packer = KeyPacker::new(&self.types, &vec![true; self.types.len()], true);
            GroupTable::new(packer.width)
        });
        Ok(Box::new(RecursiveGlobal {
            inner: Mutex::new(Inner {
                incoming: Vec::new(),
                result: Arc::new(Vec::new()),
                work_table: Arc::new(Vec::new()),
                seen,
                reported_memory: 0,
                result_bytes: 0,
                result_rows: 0,
                iterations: 0,
            }),
        }))
    }
}

impl Sink for RecursiveCteSink {
    fn name(&self) -> String {
        format!("RecursiveCte {} UNION{}", self.name, if self.distinct { "" } else { " ALL" })
    }

    fn local_state(&self) -> LocalState {
        Box::new(RecursiveLocal { chunks: Vec::new(), bytes: 0 })
    }

    fn consume(&self, chunk: DataChunk, _order: u64, state: &mut LocalState, _ctx: &ExecContext) -> Result<Control> {
        let chunk = chunk.compact();
        if chunk.row_count() == 0 {
            return Ok(Control::Continue);
        }
        let state = local::<RecursiveLocal>(state);
        state.bytes += super::estimated_bytes(&chunk);
        state.chunks.push(chunk);
        Ok(Control::Continue)
    }

    fn local_memory(&self, state: &LocalState) -> usize {
        state.downcast_ref::<RecursiveLocal>().map_or(0, |s| s.bytes)
    }

    fn combine(&self, state: LocalState, ctx: &ExecContext) -> Result<()> {
        let state = state.downcast::<RecursiveLocal>().map_err(|_| apiary_common::internal_err!("recursive CTE local state"))?;
        self.inner(ctx)?.incoming.extend(state.chunks);
        Ok(())
    }

    fn finish(&self, ctx: &ExecContext) -> Result<()> {
        let mut inner = self.inner(ctx)?;
        let incoming = std::mem::take(&mut inner.incoming);
        let added = match inner.seen.as_mut() {
            Some(seen) => self.new_rows(seen, incoming),
            None => incoming,
        };
        inner.result_bytes += added.iter().map(super::estimated_bytes).sum::<usize>();
        inner.result_rows += added.iter().map(|c| c.row_count() as u64).sum::<u64>();
        let held = inner.result_bytes + inner.seen.as_ref().map_or(0, GroupTable::memory_bytes);
        let Inner { reported_memory, result, .. } = &mut *inner;
        ctx.memory.charge(reported_memory, held)?;
        Arc::make_mut(result).extend(added.iter().cloned());
        inner.work_table = Arc::new(added);
        inner.iterations += 1;
        Ok(())
    }
}

/// The work table: the rows the recursive CTE's last iteration added (the columns at
/// `positions`), one chunk per morsel. Read by the recursive term's pipelines.
pub struct WorkTableSource {
    pub sink: Arc<RecursiveCteSink>,
    pub positions: Vec<usize>,
}

impl Source for WorkTableSource {
    fn name(&self) -> String {
        format!("WorkTableScan {}", self.sink.name)
    }

    fn morsels(&self, ctx: &ExecContext) -> Result<usize> {
        Ok(self.sink.work_table(ctx)?.len())
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        if let Some(chunk) = self.sink.work_table(ctx)?.get(morsel) {
            emit(chunk.clone().project(&self.positions))?;
        }
        Ok(())
    }
}

/// Every row of a recursive CTE, once its iterations ended, one chunk per morsel.
pub struct RecursiveResultSource(pub Arc<RecursiveCteSink>);

impl Source for RecursiveResultSource {
    fn name(&self) -> String {
        format!("RecursiveCteScan {}", self.0.name)
    }

    fn morsels(&self, ctx: &ExecContext) -> Result<usize> {
        Ok(self.0.result(ctx)?.len())
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        if let Some(chunk) = self.0.result(ctx)?.get(morsel) {
            emit(chunk.clone())?;
        }
        Ok(())
    }
}
