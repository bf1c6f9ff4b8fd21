//! Pipelines and the physical plan.
//!
//! A [`PhysicalPlan`] is a DAG of pipelines. Each pipeline pushes the chunks of its
//! source through its operators into its sink. Several pipelines may feed one sink
//! (UNION ALL branches, the unmatched-rows scan of an outer join): the sink finalises
//! after the last of them completes. A pipeline starts when the pipelines it depends on
//! have completed and the sinks it reads from have finished.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use apiary_common::Result;
use apiary_types::DataChunk;

use crate::operators::collect::CollectSink;
use crate::operators::recursive::RecursiveCteSink;
use crate::operators::{order_key, Control, ExecContext, ExecutionState, LocalState, Operator, Sink, Source, StatefulParts};

/// Counters of one execution of a pipeline, for EXPLAIN ANALYZE and progress reports.
#[derive(Default, Debug)]
pub struct PipelineStats {
    pub morsels: AtomicU64,
    /// Morsels whose block was read once for this and other queries' scans (shared scans).
    pub shared_morsels: AtomicU64,
    pub source_rows: AtomicU64,
    /// Rows emitted by each operator.
    pub operator_rows: Vec<AtomicU64>,
    /// Time spent in each operator and everything downstream of it (inclusive).
    pub operator_nanos: Vec<AtomicU64>,
    pub sink_rows: AtomicU64,
    /// Time spent in the sink's `consume`.
    pub sink_nanos: AtomicU64,
    /// Wall time spent in this pipeline's work orders, summed over workers.
    pub busy_nanos: AtomicU64,
    /// Time spent combining the workers' local states into the sink (one worker).
    pub combine_nanos: AtomicU64,
}

impl PipelineStats {
    pub fn new(operators: usize) -> PipelineStats {
        PipelineStats {
            operator_rows: (0..operators).map(|_| AtomicU64::new(0)).collect(),
            operator_nanos: (0..operators).map(|_| AtomicU64::new(0)).collect(),
            ..PipelineStats::default()
        }
    }
}

/// Counters for EXPLAIN ANALYZE of a sink's finalize phase (after its last feeder).
#[derive(Default, Debug)]
pub struct SinkStats {
    /// `prepare_finalize`, on the worker that completed the last feeder.
    pub prepare_nanos: AtomicU64,
    pub tasks: AtomicU64,
    /// Finalize tasks, summed over workers.
    pub task_nanos: AtomicU64,
    /// `finish`, on one worker.
    pub finish_nanos: AtomicU64,
}

impl SinkStats {
    /// One EXPLAIN ANALYZE line, or none for a sink with nothing to report.
    pub fn analyze(&self) -> Option<String> {
        let ms = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e6;
        let tasks = self.tasks.load(Ordering::Relaxed);
        let (prepare, task, finish) = (ms(&self.prepare_nanos), ms(&self.task_nanos), ms(&self.finish_nanos));
        if tasks == 0 && prepare + finish < 0.005 {
            return None;
        }
        Some(format!("  Finalize: prepare {prepare:.2} ms, {tasks} tasks {task:.2} ms (sum over workers), finish {finish:.2} ms"))
    }
}

pub struct Pipeline {
    pub source: Arc<dyn Source>,
    pub operators: Vec<Arc<dyn Operator>>,
    pub sink: Arc<dyn Sink>,
    /// Identifies the sink (pipelines sharing a sink have the same id).
    pub sink_id: usize,
    /// Position among the pipelines feeding the same sink (orders their chunks).
    pub feeder: usize,
    /// Pipelines that must have completed before this one starts.
    pub after_pipelines: Vec<usize>,
    /// Sinks that must have finished before this one starts.
    pub after_sinks: Vec<usize>,
    /// Position in the plan (indexes the execution's [`PipelineStats`]).
    pub index: usize,
}

/// A worker's state for one pipeline.
pub struct PipelineLocal {
    pub source: LocalState,
    pub operators: Vec<LocalState>,
    pub sink: LocalState,
    /// Bytes of `sink` last reserved in the memory budget.
    pub reported_memory: usize,
}

impl Pipeline {
    pub fn local_state(&self) -> PipelineLocal {
        PipelineLocal {
            source: self.source.local_state(),
            operators: self.operators.iter().map(|o| o.local_state()).collect(),
            sink: self.sink.local_state(),
            reported_memory: 0,
        }
    }

    /// Runs one work order: produces morsels `first..first + count` and pushes them to
    /// the sink.
    pub fn run_morsels(&self, first: usize, count: usize, local: &mut PipelineLocal, ctx: &ExecContext) -> Result<Control> {
        let started = std::time::Instant::now();
        // The batch's rows go under its first morsel's order key; the later morsels are
        // reported done (empty) after it, so order-keeping sinks see the same sequence.
        let order = order_key(self.feeder, first);
        let mut finished = false;
        let PipelineLocal { source, operators, sink, reported_memory } = local;
        let stats = &ctx.state.pipeline_stats[self.index];
        self.source.produce_run(first, count, source, ctx, &mut |chunk| {
            stats.source_rows.fetch_add(chunk.row_count() as u64, Ordering::Relaxed);
            let control = push(chunk, &self.operators, operators, (&self.sink, sink, reported_memory), order, ctx, stats, 0)?;
            if control == Control::Finished {
                finished = true;
            }
            Ok(control)
        })?;
        // End of the work order: buffering operators hand on what they hold, in order.
        for i in 0..self.operators.len() {
            if finished {
                break;
            }
            let (head, tail) = operators.split_at_mut(i + 1);
            let started = std::time::Instant::now();
            let control = self.operators[i].flush(&mut head[i], ctx, &mut |out| {
                if let Some(counter) = stats.operator_rows.get(i) {
                    counter.fetch_add(out.row_count() as u64, Ordering::Relaxed);
                }
                push(out, &self.operators[i + 1..], tail, (&self.sink, sink, reported_memory), order, ctx, stats, i + 1)
            })?;
            if let Some(counter) = stats.operator_nanos.get(i) {
                counter.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            finished = control == Control::Finished;
        }
        for morsel in first..first + count {
            self.sink.morsel_done(order_key(self.feeder, morsel), ctx)?;
        }
        stats.morsels.fetch_add(count as u64, Ordering::Relaxed);
        stats.busy_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(if finished { Control::Finished } else { Control::Continue })
    }
}

/// The sink end of a pipeline: the sink, this worker's state of it, and what that state
/// has reserved of the memory budget.
type SinkEnd<'a> = (&'a Arc<dyn Sink>, &'a mut LocalState, &'a mut usize);

fn push(
    chunk: DataChunk,
    operators: &[Arc<dyn Operator>],
    locals: &mut [LocalState],
    (sink, sink_local, reported_memory): SinkEnd,
    order: u64,
    ctx: &ExecContext,
    stats: &PipelineStats,
    depth: usize,
) -> Result<Control> {
    match (operators.split_first(), locals.split_first_mut()) {
        (Some((operator, rest)), Some((local, rest_locals))) => {
            let started = std::time::Instant::now();
            let control = operator.execute(chunk, local, ctx, &mut |out| {
                if let Some(counter) = stats.operator_rows.get(depth) {
                    counter.fetch_add(out.row_count() as u64, Ordering::Relaxed);
                }
                push(out, rest, rest_locals, (sink, &mut *sink_local, &mut *reported_memory), order, ctx, stats, depth + 1)
            });
            if let Some(counter) = stats.operator_nanos.get(depth) {
                counter.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            control
        }
        _ => {
            let started = std::time::Instant::now();
            stats.sink_rows.fetch_add(chunk.row_count() as u64, Ordering::Relaxed);
            let control = sink.consume(chunk, order, sink_local, ctx);
            stats.sink_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            // Charge the sink's growth as it happens: one work order can produce without
            // bound (a cross join into a result or a group-by).
            ctx.memory.charge(reported_memory, sink.local_memory(sink_local))?;
            control
        }
    }
}

impl Pipeline {
    /// EXPLAIN ANALYZE text: work orders, then the pipeline's stages (ROF §4: a new stage
    /// after a scan whose survivors are staged, and at each stage boundary operator), each
    /// operator with its rows, its own time (summed over workers) and that time per row
    /// (the source's per row it produced, the others' per row they were given).
    pub fn analyze(&self, index: usize, staging: bool, state: &ExecutionState) -> Vec<String> {
        let stats = &state.pipeline_stats[self.index];
        let ms = |nanos: u64| nanos as f64 / 1e6;
        let per_row = |nanos: u64, rows: u64| if rows == 0 { String::new() } else { format!(", {:.1} ns/row", nanos as f64 / rows as f64) };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let busy = load(&stats.busy_nanos);
        let inclusive: Vec<u64> = stats.operator_nanos.iter().map(load).collect();
        let sink = load(&stats.sink_nanos);
        let downstream = |i: usize| inclusive.get(i).copied().unwrap_or(sink);
        let shared = load(&stats.shared_morsels);
        let shared = if shared > 0 { format!(", {shared} read together with other queries' scans") } else { String::new() };
        let mut lines = vec![format!(
            "Pipeline {index}: {} work orders{shared}, busy {:.2} ms (sum over workers), combine {:.2} ms",
            load(&stats.morsels),
            ms(busy),
            ms(load(&stats.combine_nanos))
        )];
        let mut stage = 0;
        lines.push(format!("  Stage {stage}:"));
        let source_nanos = busy.saturating_sub(downstream(0));
        let mut rows_in = load(&stats.source_rows);
        lines.push(format!("    {} -- {rows_in} rows, {:.2} ms{}", self.source.name(), ms(source_nanos), per_row(source_nanos, rows_in)));
        if let Some(details) = self.source.analyze_details(state) {
            lines.push(format!("       ({details})"));
        }
        if self.source.ends_stage(staging) {
            stage += 1;
            lines.push(format!("  Stage {stage}: (survivors of the scan's filter gathered into full vectors)"));
        }
        for (i, operator) in self.operators.iter().enumerate() {
            if operator.starts_stage() {
                stage += 1;
                lines.push(format!("  Stage {stage}:"));
            }
            let nanos = inclusive[i].saturating_sub(downstream(i + 1));
            let rows_out = load(&stats.operator_rows[i]);
            lines.push(format!("    -> {} -- {rows_out} rows, {:.2} ms{}", operator.name(), ms(nanos), per_row(nanos, rows_in)));
            rows_in = rows_out;
        }
        let sink_rows = load(&stats.sink_rows);
        lines.push(format!("    -> {} -- {sink_rows} rows in, {:.2} ms{}", self.sink.name(), ms(sink), per_row(sink, sink_rows)));
        lines
    }
}

/// An executable plan: pipelines plus the sink that collects the query result.
pub struct PhysicalPlan {
    pub pipelines: Vec<Pipeline>,
    /// Number of sinks (sink ids are `0..sink_count`).
    pub sink_count: usize,
    pub result: Arc<CollectSink>,
    /// The parts with state per execution, by [`crate::operators::StateSlot`].
    pub stateful: StatefulParts,
    /// Indented plan description for EXPLAIN.
    pub explain: String,
    /// The recursive CTEs' recursive terms: pipelines the scheduler runs again and
    /// again (see [`PipelineLoop`]).
    pub loops: Vec<PipelineLoop>,
}

/// The pipelines of a recursive CTE's recursive term, which run once per iteration.
///
/// ```text
///  anchor pipelines ──▶ sink (RecursiveCteSink) ── finish: rows added? ──yes──┐
///                        ▲                              │no                  │
///                        └── loop pipelines (Dormant, ◀─┼── reset to Waiting,  │
///                            then once per iteration)   │   loop sinks Open,  ◀┘
///                                                       ▼   fresh LoopState
///                                              sink Finished: readers start
/// ```
///
/// The loop's pipelines start `Dormant` (they read the work table the sink fills) and
/// the sink waits for the anchor's pipelines only. Every state slot the loop's parts own
/// gets a fresh state per iteration; the sink's own state lives on.
pub struct PipelineLoop {
    pub sink: Arc<RecursiveCteSink>,
    pub sink_id: usize,
    /// The loop's pipelines (indices into `pipelines`).
    pub pipelines: Vec<usize>,
    /// How many of them feed `sink`.
    pub feeders: usize,
    /// Sinks only the loop's pipelines feed.
    pub sinks: Vec<usize>,
    /// State slots of the loop's parts, ascending.
    pub slots: Vec<usize>,
}

impl PhysicalPlan {
    /// One sink per id (from any pipeline feeding it).
    pub fn sink(&self, sink_id: usize) -> Option<&Arc<dyn Sink>> {
        self.pipelines.iter().find(|p| p.sink_id == sink_id).map(|p| &p.sink)
    }

    /// Pipelines feeding each sink.
    pub fn feeders(&self) -> Vec<usize> {
        let mut counts = vec![0; self.sink_count];
        for p in &self.pipelines {
            counts[p.sink_id] += 1;
        }
        counts
    }
}
