//! Physical operators and the contracts between them and the scheduler.
//!
//! A pipeline is `Source -> Operator* -> Sink`. Work is pushed: a worker runs one
//! *work order* (a morsel of the source, normally one storage block) by asking the source
//! to produce chunks for it and pushing each chunk through the operators into the sink.
//!
//! ```text
//!   Source::produce(morsel) ──chunk──▶ Operator::execute ──chunk──▶ ... ──▶ Sink::consume
//!        (scan a block,                 (filter, project,                   (hash build,
//!         read a partition)              hash probe)                         aggregate, sort,
//!                                                                            collect)
//! ```
//!
//! Plan and state (DuckDB's operator / global state / local state split):
//! * Operator objects are immutable and shared by all workers (`Send + Sync`), and by all
//!   executions of the plan: a prepared statement's plan runs many times, and (issue 12)
//!   several queries may attach to one operator.
//! * State that lives for one execution and is shared by its workers (a sink's tables, the
//!   built hash table, a scan's snapshot of its table) is a [`GlobalState`] in the
//!   execution's [`ExecutionState`], in the [`StateSlot`] the planner gave the operator;
//!   the operator creates it with [`Stateful::new_state`] when the execution starts and
//!   reaches it through [`ExecContext::global`].
//! * Per-worker mutable state lives in the `LocalState` each worker creates with
//!   `local_state()`, for one execution too.
//!
//! Concurrency contract (who calls what, on how many threads):
//! * `Source::produce`, `Operator::execute` and `Sink::consume` are called concurrently by
//!   all workers, each with its own local state. After a work order's last chunk,
//!   `Operator::flush` runs on each operator in order, so buffering operators (stage
//!   boundaries) hand on what they hold before the work order completes.
//! * `Source::morsels` is called once, when the pipeline becomes ready (all pipelines it
//!   depends on have finished), so a source may depend on a finished breaker's output.
//! * `Sink::combine` is called once per worker-local state after every morsel of the
//!   feeding pipeline ran; calls are serialised.
//! * `Sink::prepare_finalize` is called once after all pipelines feeding the sink combined;
//!   it returns how many `finalize_task`s to run, which run concurrently; `finish` runs
//!   once afterwards, single-threaded.

pub mod aggregate;
pub mod aggregate_functions;
pub mod collect;
pub mod filter;
pub mod hash_join;
pub mod project;
pub mod recursive;
pub mod scan;
pub mod sort;
pub mod stage;
pub mod values;
pub mod window;

use std::any::Any;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use apiary_common::{internal_err, Result};
use apiary_types::DataChunk;

use crate::config::ExecutionConfig;
use crate::pipeline::{PipelineStats, SinkStats};

/// Per-worker mutable state of an operator.
pub type LocalState = Box<dyn Any + Send>;

/// State of one execution shared by its workers (behind locks where it changes).
pub type GlobalState = Box<dyn Any + Send + Sync>;

/// Where an operator's [`GlobalState`] is in an [`ExecutionState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSlot(pub usize);

/// A part of a plan with state per execution.
pub trait Stateful: Send + Sync {
    /// The state of a new execution (empty tables, a fresh snapshot of a table).
    fn new_state(&self) -> Result<GlobalState>;
}

/// Everything one execution of a physical plan changes: the operators' global states and
/// the counters EXPLAIN ANALYZE and progress reports read. The plan itself stays untouched.
pub struct ExecutionState {
    states: Vec<GlobalState>,
    pub pipeline_stats: Vec<PipelineStats>,
    pub sink_stats: Vec<SinkStats>,
    /// The ids (`apiary_queries().id`) of the queries whose scans read blocks together
    /// with this execution's (shared scans).
    pub shared_with: std::sync::Mutex<std::collections::BTreeSet<u64>>,
}

impl ExecutionState {
    pub fn new(plan: &crate::pipeline::PhysicalPlan) -> Result<ExecutionState> {
        Ok(ExecutionState {
            states: plan.stateful.iter().map(|s| s.new_state()).collect::<Result<_>>()?,
            pipeline_stats: plan.pipelines.iter().map(|p| PipelineStats::new(p.operators.len())).collect(),
            sink_stats: (0..plan.sink_count).map(|_| SinkStats::default()).collect(),
            shared_with: Default::default(),
        })
    }

    /// The queries this execution's scans read blocks together with, in id order.
    pub fn shared_with(&self) -> Vec<u64> {
        self.shared_with.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect()
    }

    /// Work orders of this execution read together with other queries' scans.
    pub fn shared_work_orders(&self) -> u64 {
        self.pipeline_stats.iter().map(|s| s.shared_morsels.load(std::sync::atomic::Ordering::Relaxed)).sum()
    }

    /// The global state in `slot`, created by the operator that reads it.
    pub fn get<T: 'static>(&self, slot: StateSlot) -> Result<&T> {
        self.states
            .get(slot.0)
            .and_then(|s| s.downcast_ref::<T>())
            .ok_or_else(|| internal_err!("execution state slot {} missing or of another operator", slot.0))
    }
}

/// The states of a loop's parts (the pipelines of a recursive CTE's recursive term) for
/// one iteration: created afresh before each iteration, so the loop's operators start
/// empty every time without knowing they run in a loop. [`ExecContext::global`] looks a
/// slot up here first.
pub struct LoopState {
    /// By slot, ascending.
    states: Vec<(usize, GlobalState)>,
}

impl LoopState {
    /// Fresh states for `slots` (ascending) of `parts`.
    pub fn new(parts: &StatefulParts, slots: &[usize]) -> Result<LoopState> {
        let mut states = Vec::with_capacity(slots.len());
        for &slot in slots {
            let part = parts.get(slot).ok_or_else(|| internal_err!("loop state slot {slot} missing"))?;
            states.push((slot, part.new_state()?));
        }
        Ok(LoopState { states })
    }

    fn get(&self, slot: StateSlot) -> Option<&GlobalState> {
        self.states.binary_search_by_key(&slot.0, |(s, _)| *s).ok().map(|i| &self.states[i].1)
    }
}

/// The parts of a plan with state per execution, in slot order (the planner's registry).
pub type StatefulParts = Vec<Arc<dyn Stateful>>;

/// Whether the producer should keep going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Continue,
    /// The consumer needs no more input (a LIMIT was reached): stop this pipeline.
    Finished,
}

/// What a worker knows while it runs a work order.
pub struct ExecContext<'a> {
    pub config: &'a ExecutionConfig,
    /// Set when the user cancels the query; long loops check [`Self::stopped`].
    pub interrupted: &'a AtomicBool,
    /// Set when the execution failed (another worker's error): stop as well.
    pub halted: &'a AtomicBool,
    /// The query's share of the memory budget.
    pub memory: &'a crate::memory::QueryMemory,
    /// This execution's operator states and counters.
    pub state: &'a ExecutionState,
    /// Most rows per table-scan work order for pipelines starting now: the whole block
    /// when the query runs alone, `SET morsel_size` when others run too (so that a
    /// newcomer waits for short work orders only).
    pub morsel_rows: usize,
    /// For work of a loop's pipelines: the current iteration's states of the loop's parts.
    pub loop_state: Option<&'a LoopState>,
}

impl ExecContext<'_> {
    /// Whether the work should stop: the query was cancelled or failed.
    pub fn stopped(&self) -> bool {
        self.interrupted.load(std::sync::atomic::Ordering::Relaxed) || self.halted.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The global state of the operator with `slot` in this execution.
    pub fn global<T: 'static>(&self, slot: StateSlot) -> Result<&T> {
        match self.loop_state.and_then(|l| l.get(slot)) {
            Some(state) => state.downcast_ref::<T>().ok_or_else(|| internal_err!("loop state slot {} of another operator", slot.0)),
            None => self.state.get(slot),
        }
    }
}

/// What a shared scan's work order reads: rows `first_row..first_row + rows` (cut at the
/// block's end) of block `block` of one table snapshot (`snapshot`: its address, equal
/// only for scans of the same snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRange {
    pub snapshot: usize,
    pub block: u32,
    pub first_row: u32,
    pub rows: usize,
}

/// The callback a producer pushes chunks into.
pub type Emit<'a> = dyn FnMut(DataChunk) -> Result<Control> + 'a;

pub trait Source: Send + Sync {
    fn name(&self) -> String;
    /// Number of work orders (morsels). Called once, when the pipeline starts.
    fn morsels(&self, ctx: &ExecContext) -> Result<usize>;
    /// The number of morsels before the pipeline starts, where the source knows it
    /// (a scan's blocks), for progress reports.
    fn morsels_ahead(&self, _ctx: &ExecContext) -> Option<usize> {
        None
    }
    fn local_state(&self) -> LocalState {
        Box::new(())
    }
    /// Produces the chunks of morsel `morsel`.
    fn produce(&self, morsel: usize, local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()>;
    /// Produces the chunks of morsels `first..first + count` in order (one work order that
    /// batches short morsels); stops when `emit` answers [`Control::Finished`]. Sources
    /// whose consecutive morsels are one range of data produce them as one.
    fn produce_run(&self, first: usize, count: usize, local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        let mut finished = false;
        for morsel in first..first + count {
            self.produce(morsel, local, ctx, &mut |chunk| {
                let control = emit(chunk)?;
                finished |= control == Control::Finished;
                Ok(control)
            })?;
            if finished {
                break;
            }
        }
        Ok(())
    }
    /// The data morsel `morsel` reads, for a source whose reads other queries' scans can
    /// share (`SET shared_scans`): the scheduler runs work orders that read the same
    /// range together. `None` when not shared or not started.
    fn shared_range(&self, _morsel: usize, _ctx: &ExecContext) -> Option<SharedRange> {
        None
    }
    /// The scheduler handed out the work orders up to morsel `last`: a shared scan
    /// tells the table where its scans are, so that a scan starting now lines up.
    fn handed_out(&self, _last: usize, _ctx: &ExecContext) {}
    /// Whether a stage boundary follows the source (ROF §4) under `staging`.
    fn ends_stage(&self, _staging: bool) -> bool {
        false
    }
    /// What EXPLAIN ANALYZE reports about the source after a run, if anything.
    fn analyze_details(&self, _state: &ExecutionState) -> Option<String> {
        None
    }
}

pub trait Operator: Send + Sync {
    fn name(&self) -> String;
    fn local_state(&self) -> LocalState {
        Box::new(())
    }
    /// Transforms one chunk, emitting zero or more chunks.
    fn execute(&self, chunk: DataChunk, local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<Control>;
    /// Emits whatever the operator still buffers; called at the end of every work order.
    fn flush(&self, _local: &mut LocalState, _ctx: &ExecContext, _emit: &mut Emit) -> Result<Control> {
        Ok(Control::Continue)
    }
    /// Whether this operator begins a new stage of its pipeline (ROF §4).
    fn starts_stage(&self) -> bool {
        false
    }
}

pub trait Sink: Send + Sync {
    fn name(&self) -> String;
    fn local_state(&self) -> LocalState;
    /// Consumes one chunk. `order` identifies where the chunk came from (feeding
    /// pipeline and morsel) for sinks that preserve input order.
    fn consume(&self, chunk: DataChunk, order: u64, local: &mut LocalState, ctx: &ExecContext) -> Result<Control>;
    /// Merges a worker's local state into the shared state.
    fn combine(&self, local: LocalState, ctx: &ExecContext) -> Result<()>;
    /// Morsel `order` (see [`order_key`]) has been completely pushed into the sink.
    fn morsel_done(&self, _order: u64, _ctx: &ExecContext) -> Result<()> {
        Ok(())
    }
    /// Approximate bytes a worker's local state holds (for the memory budget; must be
    /// cheap: it is asked after every work order).
    fn local_memory(&self, _local: &LocalState) -> usize {
        0
    }
    /// Number of parallel finalize tasks to run.
    fn prepare_finalize(&self, _ctx: &ExecContext) -> Result<usize> {
        Ok(0)
    }
    fn finalize_task(&self, _task: usize, _ctx: &ExecContext) -> Result<()> {
        Ok(())
    }
    fn finish(&self, _ctx: &ExecContext) -> Result<()> {
        Ok(())
    }
}

/// Approximate bytes of a chunk's live rows: fixed-width values at their width, strings
/// at their view size plus their length beyond what fits in the view.
/// The positions `rows` cover when they are a run `start..start + rows.len()` (a chunk
/// without a selection, the survivors of a filter the scan gathered): their values can
/// be read in place. Branch-free, so it vectorises inside the kernels that inline it.
#[inline(always)]
pub(crate) fn run_of(rows: &[u32]) -> Option<std::ops::Range<usize>> {
    let start = rows.first().map_or(0, |&r| r as usize);
    rows.iter().enumerate().fold(true, |run, (k, &r)| run & (r as usize == start + k)).then_some(start..start + rows.len())
}

pub(crate) fn estimated_bytes(chunk: &DataChunk) -> usize {
    let rows = chunk.row_count();
    chunk.columns.iter().map(|c| rows * c.data_type.physical().width()).sum()
}

/// Downcasts a local state created by the same operator.
pub(crate) fn local<T: 'static>(state: &mut LocalState) -> &mut T {
    state.downcast_mut::<T>().expect("local state was created by this operator")
}

/// The order key of a chunk: which feeding pipeline, which morsel, which chunk.
pub fn order_key(feeder: usize, morsel: usize) -> u64 {
    ((feeder as u64) << 40) | morsel as u64
}
