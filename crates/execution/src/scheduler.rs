//! The work-order scheduler (Quickstep §4): one pool of worker threads runs the work
//! orders of every running query.
//!
//! ```text
//!  query ──submit──▶ Scheduler ──(pick query round-robin, then its next ready
//!                      │          work order)──▶ worker 0..N
//!                      ▼
//!               QueryRun: per pipeline  Waiting ─▶ Running(morsels) ─▶ Complete
//!                         per sink      Open ─▶ Finalizing(tasks) ─▶ Finished
//! ```
//!
//! Which query's work order a free worker takes next is the scheduling policy:
//! * **fair share** (default): stride scheduling on worker time. Each query has a virtual
//!   time (its `pass`) that grows by the worker time its work orders take divided by its
//!   weight (`SET priority = 1..10`, each level doubling the weight); a worker serves
//!   the query with the smallest pass that has ready work. A query that arrives starts at
//!   the smallest pass of those running, so it gets its share at once (not a backlog of
//!   credit); a query of priority p gets worker time in proportion to 2^(p-1).
//! * **FIFO** (`SET scheduler_policy = 'fifo'`): the oldest query with ready work, the
//!   baseline the fair-share benchmark compares with.
//!
//! Admission control: at most `max_concurrent_queries` run at once; the others wait in a
//! queue (up to their `queue_timeout`). A query that fails for memory while other
//! queries held memory does not fail: it releases what it had, waits until it can run
//! alone, and runs again from the start (the plan is immutable, so a rerun is a new
//! [`ExecutionState`]); only if it does not fit alone is the memory error the answer.
//!
//! `SET threads` changes the pool while queries run: worker states are created per
//! worker on demand, so new workers join running queries at their next work order.
//!
//! A work order is either one morsel of a running pipeline or one finalize task of a
//! sink. The worker that completes a pipeline's last morsel combines the workers' local
//! states into the sink; the worker completing a sink's last feeder prepares its finalize
//! tasks, which then run on all workers. All of this happens outside the scheduler lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use apiary_common::{internal_err, ApiaryError, Result};

use crate::config::ExecutionConfig;
use crate::memory::QueryMemory;
use crate::operators::{Control, ExecContext, ExecutionState, LoopState};
use crate::pipeline::{PhysicalPlan, PipelineLocal};
use apiary_storage::BufferPool;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PipelinePhase {
    /// A pipeline of a recursive CTE's recursive term before an iteration starts it
    /// (see [`crate::pipeline::PipelineLoop`]).
    Dormant,
    Waiting,
    Running {
        next: usize,
        total: usize,
        completed: usize,
        stopped: bool,
    },
    /// Last morsel done; a worker is combining local states.
    Combining,
    Complete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SinkPhase {
    Open {
        feeders_left: usize,
    },
    /// A worker is preparing the finalize tasks.
    Preparing,
    Finalizing {
        next: usize,
        total: usize,
        completed: usize,
    },
    /// A worker is running `finish`.
    Finishing,
    Finished,
}

struct RunState {
    pipelines: Vec<PipelinePhase>,
    /// Work orders of each pipeline, known once it started.
    totals: Vec<Option<usize>>,
    /// Per pipeline: the measured worker time of one morsel (a moving average; 0 until
    /// its first work order completes), from which work orders are batched.
    morsel_nanos: Vec<f64>,
    sinks: Vec<SinkPhase>,
    error: Option<ApiaryError>,
    /// The error was the memory budget while other queries held memory.
    memory_contended: bool,
    in_flight: usize,
}

impl RunState {
    /// The work order [`QueryRun::next_work`] hands out next, without handing it out:
    /// the next morsel of the first running pipeline that has one, else the next task of
    /// the first finalizing sink.
    fn ready_work(&self) -> Option<WorkOrder> {
        if self.error.is_some() {
            return None;
        }
        let morsel = self.pipelines.iter().enumerate().find_map(|(pipeline, phase)| match *phase {
            PipelinePhase::Running { next, total, stopped, .. } if next < total && !stopped => {
                Some(WorkOrder::Morsel { pipeline, first: next, count: batch_size(self.morsel_nanos[pipeline], total - next) })
            }
            _ => None,
        });
        morsel.or_else(|| {
            self.sinks.iter().enumerate().find_map(|(sink, phase)| match *phase {
                SinkPhase::Finalizing { next, total, .. } if next < total => Some(WorkOrder::FinalizeTask { sink, task: next }),
                _ => None,
            })
        })
    }

    /// Whether [`QueryRun::next_work`] would hand out a work order now.
    fn has_ready_work(&self) -> bool {
        self.ready_work().is_some()
    }

    fn done(&self) -> bool {
        self.in_flight == 0
            && (self.error.is_some()
                || (self.pipelines.iter().all(|p| *p == PipelinePhase::Complete) && self.sinks.iter().all(|s| *s == SinkPhase::Finished)))
    }
}

enum WorkOrder {
    /// Morsels `first..first + count` of a running pipeline.
    Morsel {
        pipeline: usize,
        first: usize,
        count: usize,
    },
    FinalizeTask {
        sink: usize,
        task: usize,
    },
}

/// One query being executed.
struct QueryRun {
    /// The query's id in the registry (`apiary_queries().id`).
    id: u64,
    plan: Arc<PhysicalPlan>,
    config: ExecutionConfig,
    state: Mutex<RunState>,
    finished: Condvar,
    interrupted: Arc<AtomicBool>,
    /// Set when this execution failed, so the other workers stop (not the user's flag:
    /// an execution crowded out of memory runs again).
    halted: AtomicBool,
    /// `locals[pipeline][worker]`, grown when a worker joins (`SET threads`).
    locals: Vec<Mutex<Vec<Option<PipelineLocal>>>>,
    memory: QueryMemory,
    /// Scheduling weight (1..=10).
    priority: u32,
    /// Queries running on the pool (this one included).
    running: Arc<RunningQueries>,
    /// The operators' state and the counters of this execution.
    execution: Arc<ExecutionState>,
    /// Per pipeline and per sink: the loop (index into the plan's `loops`) it belongs to.
    pipeline_loops: Vec<Option<usize>>,
    sink_loops: Vec<Option<usize>>,
    /// Per loop: the states of its parts for the current iteration (replaced per
    /// iteration; a work order holds the one it started with).
    loop_states: Vec<Mutex<Arc<LoopState>>>,
    /// Per loop: what the current iteration's worker states reserved of the budget,
    /// returned when the iteration's states are dropped.
    loop_memory: Vec<AtomicUsize>,
}

impl QueryRun {
    fn lock(&self) -> std::sync::MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shared range morsel `morsel` of pipeline `pipeline` reads, if any.
    fn shared_range(&self, pipeline: usize, morsel: usize) -> Option<crate::operators::SharedRange> {
        if self.pipeline_loops[pipeline].is_some() {
            return None;
        }
        self.plan.pipelines[pipeline].source.shared_range(morsel, &self.context())
    }

    fn context(&self) -> ExecContext<'_> {
        self.context_in(None)
    }

    /// The states of loop `index`'s current iteration, if any.
    fn loop_state(&self, index: Option<usize>) -> Option<Arc<LoopState>> {
        index.map(|l| Arc::clone(&self.loop_states[l].lock().unwrap_or_else(|e| e.into_inner())))
    }

    /// A context whose state lookups see `loop_state` first (work of a loop's pipelines).
    fn context_in<'a>(&'a self, loop_state: Option<&'a LoopState>) -> ExecContext<'a> {
        ExecContext {
            loop_state,
            config: &self.config,
            interrupted: &self.interrupted,
            halted: &self.halted,
            memory: &self.memory,
            state: &self.execution,
            // Short scan work orders bound how long a query of at least this one's
            // priority waits for a worker; with none running, whole blocks scan faster.
            morsel_rows: if self.running.any_other_at_or_above(self.priority) { self.config.morsel_size } else { usize::MAX },
        }
    }

    /// Starts every waiting pipeline whose dependencies are met (caller holds the lock).
    fn start_ready(&self, state: &mut RunState) {
        loop {
            let mut started = false;
            for (idx, pipeline) in self.plan.pipelines.iter().enumerate() {
                if state.pipelines[idx] != PipelinePhase::Waiting {
                    continue;
                }
                let ready = pipeline.after_pipelines.iter().all(|&p| state.pipelines[p] == PipelinePhase::Complete)
                    && pipeline.after_sinks.iter().all(|&s| state.sinks[s] == SinkPhase::Finished);
                if ready {
                    let loop_state = self.loop_state(self.pipeline_loops[idx]);
                    let total = match pipeline.source.morsels(&self.context_in(loop_state.as_deref())) {
                        Ok(total) => total,
                        Err(error) => {
                            self.fail(state, error);
                            return;
                        }
                    };
                    state.pipelines[idx] = PipelinePhase::Running { next: 0, total, completed: 0, stopped: false };
                    state.totals[idx] = Some(total);
                    started = true;
                }
            }
            // Pipelines with no morsels complete at once; that may unblock others, but
            // completing them needs the combine step, which a worker performs.
            if !started {
                break;
            }
        }
    }

    /// The next work order, if any is ready (caller holds the lock).
    fn next_work(&self, state: &mut RunState) -> Option<WorkOrder> {
        let work = state.ready_work()?;
        match work {
            WorkOrder::Morsel { pipeline, count, .. } => {
                if let PipelinePhase::Running { next, .. } = &mut state.pipelines[pipeline] {
                    *next += count;
                }
            }
            WorkOrder::FinalizeTask { sink, .. } => {
                if let SinkPhase::Finalizing { next, .. } = &mut state.sinks[sink] {
                    *next += 1;
                }
            }
        }
        Some(work)
    }

    /// Pipelines whose morsels are all done but that were not combined yet (including
    /// pipelines with zero morsels). Caller holds the lock; returns ids to combine.
    fn claim_completed(&self, state: &mut RunState) -> Vec<usize> {
        let mut claimed = Vec::new();
        for (idx, phase) in state.pipelines.iter_mut().enumerate() {
            if let PipelinePhase::Running { next, total, completed, stopped } = *phase {
                if completed == next && (next == total || stopped) {
                    *phase = PipelinePhase::Combining;
                    claimed.push(idx);
                }
            }
        }
        claimed
    }

    fn fail(&self, state: &mut RunState, error: ApiaryError) {
        if state.error.is_none() {
            // Measured now, while the others still hold what crowded this query out.
            state.memory_contended = matches!(error, ApiaryError::Resource(_)) && self.memory.pool().query_bytes() > self.memory.reserved();
            state.error = Some(error);
        }
        self.halted.store(true, Ordering::Relaxed);
    }

    /// Runs one work order and everything its completion triggers.
    fn execute(&self, work: WorkOrder, worker: usize) {
        // A bug that panics must fail the query, not kill the worker and hang the caller.
        let result = catch_panic(|| match work {
            WorkOrder::Morsel { pipeline, first, count } => self.run_morsels(pipeline, first, count, worker),
            WorkOrder::FinalizeTask { sink, task } => self.run_finalize_task(sink, task),
        });
        if let Err(error) = result {
            let mut state = self.lock();
            self.fail(&mut state, error);
        }
        // The work order stays counted in `in_flight` until the completions it triggers
        // are processed, so the query cannot be seen as done half-way.
        if let Err(error) = catch_panic(|| {
            self.progress();
            Ok(())
        }) {
            let mut state = self.lock();
            self.fail(&mut state, error);
        }
        let mut state = self.lock();
        state.in_flight -= 1;
        if state.done() {
            self.finished.notify_all();
        }
    }

    fn run_morsels(&self, pipeline: usize, first: usize, count: usize, worker: usize) -> Result<()> {
        let plan_pipeline = &self.plan.pipelines[pipeline];
        let started = Instant::now();
        let mut local = self.take_local(pipeline, worker).unwrap_or_else(|| plan_pipeline.local_state());
        let loop_state = self.loop_state(self.pipeline_loops[pipeline]);
        let ctx = self.context_in(loop_state.as_deref());
        let outcome = if ctx.stopped() { Err(ApiaryError::Interrupted) } else { plan_pipeline.run_morsels(first, count, &mut local, &ctx) };
        let now = plan_pipeline.sink.local_memory(&local.sink);
        let charged = self.memory.charge(&mut local.reported_memory, now);
        self.put_local(pipeline, worker, local);
        let control = outcome?;
        charged?;
        let per_morsel = nanos_since(started) as f64 / count as f64;
        let mut state = self.lock();
        let measured = &mut state.morsel_nanos[pipeline];
        *measured = if *measured == 0.0 { per_morsel } else { 0.8 * *measured + 0.2 * per_morsel };
        if let PipelinePhase::Running { completed, next, total, stopped } = &mut state.pipelines[pipeline] {
            *completed += count;
            if control == Control::Finished {
                *stopped = true;
                *next = (*next).min(*total);
            }
        }
        Ok(())
    }

    /// A worker's state of a pipeline, if it ran one of its work orders before.
    fn take_local(&self, pipeline: usize, worker: usize) -> Option<PipelineLocal> {
        self.locals[pipeline].lock().unwrap_or_else(|e| e.into_inner()).get_mut(worker).and_then(Option::take)
    }

    fn put_local(&self, pipeline: usize, worker: usize, local: PipelineLocal) {
        let mut locals = self.locals[pipeline].lock().unwrap_or_else(|e| e.into_inner());
        if locals.len() <= worker {
            locals.resize_with(worker + 1, || None);
        }
        locals[worker] = Some(local);
    }

    fn run_finalize_task(&self, sink: usize, task: usize) -> Result<()> {
        let sink_ref = self.plan.sink(sink).ok_or_else(|| internal_err!("unknown sink {sink}"))?;
        let started = Instant::now();
        let loop_state = self.loop_state(self.sink_loops[sink]);
        sink_ref.finalize_task(task, &self.context_in(loop_state.as_deref()))?;
        let stats = &self.execution.sink_stats[sink];
        stats.tasks.fetch_add(1, Ordering::Relaxed);
        stats.task_nanos.fetch_add(nanos_since(started), Ordering::Relaxed);
        let mut state = self.lock();
        if let SinkPhase::Finalizing { completed, .. } = &mut state.sinks[sink] {
            *completed += 1;
        }
        Ok(())
    }

    /// Advances the state machine as far as possible: combines completed pipelines,
    /// prepares and finishes sinks, starts ready pipelines.
    fn progress(&self) {
        loop {
            let mut state = self.lock();
            if state.error.is_some() {
                return;
            }
            self.start_ready(&mut state);
            let claimed = self.claim_completed(&mut state);
            // Sinks whose finalize tasks all completed.
            let mut to_finish = Vec::new();
            for (sink, phase) in state.sinks.iter_mut().enumerate() {
                if let SinkPhase::Finalizing { next, total, completed } = *phase {
                    if next == total && completed == total {
                        *phase = SinkPhase::Finishing;
                        to_finish.push(sink);
                    }
                }
            }
            if claimed.is_empty() && to_finish.is_empty() {
                return;
            }
            drop(state);
            for pipeline in claimed {
                if let Err(e) = self.complete_pipeline(pipeline) {
                    let mut state = self.lock();
                    self.fail(&mut state, e);
                    return;
                }
            }
            for sink in to_finish {
                let started = Instant::now();
                let loop_state = self.loop_state(self.sink_loops[sink]);
                let result = self
                    .plan
                    .sink(sink)
                    .ok_or_else(|| internal_err!("unknown sink {sink}"))
                    .and_then(|s| s.finish(&self.context_in(loop_state.as_deref())));
                self.execution.sink_stats[sink].finish_nanos.fetch_add(nanos_since(started), Ordering::Relaxed);
                let mut state = self.lock();
                let result = result.and_then(|()| match self.plan.loops.iter().position(|l| l.sink_id == sink) {
                    Some(index) => self.end_iteration(index, &mut state),
                    None => {
                        state.sinks[sink] = SinkPhase::Finished;
                        Ok(())
                    }
                });
                if let Err(e) = result {
                    self.fail(&mut state, e);
                    return;
                }
            }
        }
    }

    /// After a recursive CTE's sink finished an iteration (caller holds the lock): if
    /// the iteration added rows, the loop's pipelines and sinks run again with fresh
    /// states; else the loop is over and the sink finished.
    fn end_iteration(&self, index: usize, state: &mut RunState) -> Result<()> {
        let lp = &self.plan.loops[index];
        if !lp.sink.iterate(&self.context())? {
            for &p in &lp.pipelines {
                state.pipelines[p] = PipelinePhase::Complete;
            }
            for &s in &lp.sinks {
                state.sinks[s] = SinkPhase::Finished;
            }
            state.sinks[lp.sink_id] = SinkPhase::Finished;
            return Ok(());
        }
        if self.interrupted.load(Ordering::Relaxed) {
            return Err(ApiaryError::Interrupted);
        }
        let fresh = Arc::new(LoopState::new(&self.plan.stateful, &lp.slots)?);
        // The last iteration's states go: so does what their worker states reserved.
        *self.loop_states[index].lock().unwrap_or_else(|e| e.into_inner()) = fresh;
        self.memory.shrink(self.loop_memory[index].swap(0, Ordering::Relaxed));
        let feeders = self.plan.feeders();
        for &p in &lp.pipelines {
            state.pipelines[p] = PipelinePhase::Waiting;
            state.totals[p] = None;
        }
        for &s in &lp.sinks {
            state.sinks[s] = SinkPhase::Open { feeders_left: feeders[s] };
        }
        state.sinks[lp.sink_id] = SinkPhase::Open { feeders_left: lp.feeders };
        Ok(())
    }

    /// Combines a completed pipeline's local states into its sink.
    fn complete_pipeline(&self, pipeline: usize) -> Result<()> {
        let plan_pipeline = &self.plan.pipelines[pipeline];
        let started = Instant::now();
        // (The sink charged each worker state's growth; combining moves it, so what the
        // query holds stays reserved until the query ends, or for a loop's pipeline until
        // its iteration's states are dropped.)
        let locals = std::mem::take(&mut *self.locals[pipeline].lock().unwrap_or_else(|e| e.into_inner()));
        let loop_index = self.pipeline_loops[pipeline];
        let loop_state = self.loop_state(loop_index);
        let ctx = self.context_in(loop_state.as_deref());
        for local in locals.into_iter().flatten() {
            if let Some(l) = loop_index {
                self.loop_memory[l].fetch_add(local.reported_memory, Ordering::Relaxed);
            }
            plan_pipeline.sink.combine(local.sink, &ctx)?;
        }
        self.execution.pipeline_stats[pipeline].combine_nanos.fetch_add(nanos_since(started), Ordering::Relaxed);
        let sink_id = plan_pipeline.sink_id;
        let prepare = {
            let mut state = self.lock();
            state.pipelines[pipeline] = PipelinePhase::Complete;
            match &mut state.sinks[sink_id] {
                SinkPhase::Open { feeders_left } => {
                    *feeders_left -= 1;
                    if *feeders_left == 0 {
                        state.sinks[sink_id] = SinkPhase::Preparing;
                        true
                    } else {
                        false
                    }
                }
                _ => return Err(internal_err!("sink {sink_id} fed after it closed")),
            }
        };
        if prepare {
            let started = Instant::now();
            let tasks = plan_pipeline.sink.prepare_finalize(&ctx)?;
            self.execution.sink_stats[sink_id].prepare_nanos.fetch_add(nanos_since(started), Ordering::Relaxed);
            let mut state = self.lock();
            state.sinks[sink_id] = SinkPhase::Finalizing { next: 0, total: tasks, completed: 0 };
        }
        Ok(())
    }
}

fn nanos_since(started: Instant) -> u64 {
    started.elapsed().as_nanos() as u64
}

/// Runs `f`, turning a panic into an internal error.
fn catch_panic(f: impl FnOnce() -> Result<()>) -> Result<()> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(internal_err!("a worker panicked: {}", apiary_common::error::panic_message(payload.as_ref()))),
    }
}

/// What the scheduler knows about a query besides its plan: who sent it and how to treat it.
#[derive(Debug, Clone)]
pub struct QueryMeta {
    /// The connection (session) that runs it.
    pub connection: u64,
    pub user: String,
    /// The statement's text, as shown by `apiary_queries()`.
    pub sql: String,
    /// 1..=10: its share of the workers relative to other queries (fair share).
    pub priority: u32,
    /// How long it may wait for admission.
    pub queue_timeout: Duration,
    /// Runs without admission control: a query over nothing but the engine's own small
    /// tables (`apiary_queries()`, `pg_catalog`, `SELECT 1`), so monitoring and health
    /// checks answer while the queue is full.
    pub bypass_admission: bool,
}

impl Default for QueryMeta {
    fn default() -> Self {
        QueryMeta {
            connection: 0,
            user: String::new(),
            sql: String::new(),
            priority: DEFAULT_PRIORITY,
            queue_timeout: DEFAULT_QUEUE_TIMEOUT,
            bypass_admission: false,
        }
    }
}

pub const DEFAULT_PRIORITY: u32 = 5;
pub const MAX_PRIORITY: u32 = 10;
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(60);

/// How free workers choose between running queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulingPolicy {
    /// Worker time in proportion to priority (stride scheduling).
    FairShare,
    /// The oldest query with ready work first.
    Fifo,
}

impl SchedulingPolicy {
    pub fn name(self) -> &'static str {
        match self {
            SchedulingPolicy::FairShare => "fair",
            SchedulingPolicy::Fifo => "fifo",
        }
    }
}

/// A running or queued query as `apiary_queries()` reports it.
#[derive(Debug, Clone)]
pub struct QueryProgress {
    pub id: u64,
    pub connection: u64,
    pub user: String,
    /// `queued`, `running`, or `waiting for memory`.
    pub state: &'static str,
    pub sql: String,
    pub priority: u32,
    pub elapsed: Duration,
    /// Per pipeline: work orders done and (once known, else estimated) in total.
    pub pipelines: Vec<(usize, usize)>,
    pub work_orders_done: usize,
    pub work_orders_total: usize,
    /// Rows that reached the query's result so far.
    pub rows: u64,
    pub memory_bytes: usize,
    /// Time left, extrapolated from the work orders done (none before the first).
    pub estimated_left: Option<Duration>,
    /// Work orders whose block was read together with other queries' scans, and the ids
    /// of those queries (shared scans).
    pub shared_work_orders: u64,
    pub shared_with: Vec<u64>,
}

impl QueryProgress {
    /// Done fraction in 0..=1.
    pub fn fraction(&self) -> f64 {
        if self.work_orders_total == 0 {
            0.0
        } else {
            (self.work_orders_done as f64 / self.work_orders_total as f64).min(1.0)
        }
    }

    /// One line for a progress bar (the shell's, the Python package's): the bar, the
    /// share done, elapsed and estimated time left.
    ///
    /// ```text
    /// [##########..........................]  27%  12.3 s elapsed, ~33 s left
    /// ```
    pub fn bar_line(&self) -> String {
        const BAR_WIDTH: usize = 36;
        let fraction = self.fraction();
        let filled = ((fraction * BAR_WIDTH as f64).round() as usize).min(BAR_WIDTH);
        let mut line = format!(
            "[{}{}] {:>3.0}%  {:.1} s elapsed",
            "#".repeat(filled),
            ".".repeat(BAR_WIDTH - filled),
            fraction * 100.0,
            self.elapsed.as_secs_f64()
        );
        let seconds = |duration: Duration| {
            let s = duration.as_secs_f64();
            if s < 10.0 {
                format!("{s:.1} s")
            } else {
                format!("{s:.0} s")
            }
        };
        match (self.state, self.estimated_left) {
            ("running", Some(left)) => line.push_str(&format!(", ~{} left", seconds(left))),
            ("running", None) => {}
            (state, _) => line.push_str(&format!(" ({state})")),
        }
        line
    }
}

impl QueryRun {
    /// Work orders done and total per pipeline. A pipeline that has not started counts
    /// what its source can tell ahead (a scan's blocks), else one.
    fn progress_counts(&self) -> Vec<(usize, usize)> {
        let state = self.lock();
        let ctx = self.context();
        state
            .pipelines
            .iter()
            .enumerate()
            .map(|(idx, phase)| match *phase {
                PipelinePhase::Waiting => (0, self.plan.pipelines[idx].source.morsels_ahead(&ctx).unwrap_or(1).max(1)),
                PipelinePhase::Dormant => (0, 1),
                PipelinePhase::Running { completed, total, .. } => (completed, total.max(completed)),
                PipelinePhase::Combining | PipelinePhase::Complete => {
                    let total = state.totals[idx].unwrap_or(0);
                    (total, total)
                }
            })
            .collect()
    }

    /// Rows that reached the result sink (the last sink the planner closed).
    fn result_rows(&self) -> u64 {
        let result_sink = self.plan.sink_count.saturating_sub(1);
        self.plan
            .pipelines
            .iter()
            .filter(|p| p.sink_id == result_sink)
            .map(|p| self.execution.pipeline_stats[p.index].sink_rows.load(Ordering::Relaxed))
            .sum()
    }
}

/// A query known to the scheduler (queued or running), for `apiary_queries()` and
/// `apiary_cancel()`.
struct Registered {
    meta: QueryMeta,
    submitted: Instant,
    interrupted: Arc<AtomicBool>,
    phase: &'static str,
    run: Option<Arc<QueryRun>>,
}

struct Shared {
    queue: Mutex<Queue>,
    work_available: Condvar,
    /// Bumped whenever work may have become available: idle workers spin on it briefly
    /// before sleeping on the condvar (see [`IDLE_SPIN`]).
    epoch: AtomicU64,
    /// Workers waiting on `work_available` (changed under the queue lock): waking the
    /// condvar is a system call, made only when someone sleeps.
    sleepers: AtomicUsize,
}

/// How long a worker that ran out of work watches for new work before it sleeps. Between
/// the pipelines of one query (a build finishes, its probe starts) new work follows within
/// microseconds; waking a sleeping thread costs tens to hundreds of microseconds on a VM.
const IDLE_SPIN: Duration = Duration::from_micros(50);

impl Shared {
    /// Tells idle workers that work may be available.
    fn signal(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.work_available.notify_all();
        }
    }

    /// Spins (without the queue lock) until work may have become available or `limit`
    /// passed.
    fn spin_for_signal(&self, limit: Duration) {
        let epoch = self.epoch.load(Ordering::Acquire);
        let started = Instant::now();
        while self.epoch.load(Ordering::Acquire) == epoch && started.elapsed() < limit {
            std::hint::spin_loop();
        }
    }
}

/// A running query as the workers see it.
struct Scheduled {
    run: Arc<QueryRun>,
    /// Virtual time: worker nanoseconds used, divided by the priority's share weight.
    pass: f64,
    /// Running average of its work orders' worker time (the charge made when one is
    /// handed out; corrected when it completes).
    average_nanos: f64,
    /// Admission order (FIFO).
    sequence: u64,
}

struct Queue {
    queries: Vec<Scheduled>,
    policy: SchedulingPolicy,
    /// Workers with an id at or above this exit.
    threads: usize,
    shutdown: bool,
}

impl Queue {
    /// The next work order for a free worker under the policy.
    fn pick(&mut self) -> Option<(usize, Arc<QueryRun>, WorkOrder)> {
        // Queries are tried in policy order until one has a ready work order. Runs here
        // once per work order under the queue lock, so no allocation: the next candidate
        // is found by selection among those not tried yet (a handful of queries).
        let mut tried = Tried::new(self.queries.len());
        while let Some(index) = self.next_candidate(&tried) {
            tried.insert(index);
            let scheduled = &mut self.queries[index];
            let mut state = scheduled.run.lock();
            if let Some(work) = scheduled.run.next_work(&mut state) {
                state.in_flight += 1;
                drop(state);
                // Only shared scans track where they are (this runs once per work order).
                if scheduled.run.config.shared_scans {
                    if let WorkOrder::Morsel { pipeline, first, count } = work {
                        scheduled.run.plan.pipelines[pipeline].source.handed_out(first + count - 1, &scheduled.run.context());
                    }
                }
                scheduled.pass += scheduled.average_nanos / share_weight(scheduled.run.priority);
                return Some((index, Arc::clone(&scheduled.run), work));
            }
        }
        None
    }

    /// The untried query that comes first under the policy.
    fn next_candidate(&self, tried: &Tried) -> Option<usize> {
        let untried = (0..self.queries.len()).filter(|&i| !tried.contains(i));
        match self.policy {
            SchedulingPolicy::FairShare => untried.min_by(|&a, &b| self.queries[a].pass.total_cmp(&self.queries[b].pass)),
            SchedulingPolicy::Fifo => untried.min_by_key(|&i| self.queries[i].sequence),
        }
    }

    /// The work orders of other queries that read the same range as `work` of `run` (a
    /// shared scan's block, see [`crate::operators::Source::shared_range`]), handed out
    /// with it so that one worker runs them back to back on the block it just read.
    /// Each query still sees every block once: a query's next work order is taken only
    /// when it is the one reading that range. A query's work order joins only while the
    /// group's estimated time stays within [`SHARED_WORK_ORDER_NANOS`], so that a cheap
    /// scan does not take on an expensive one's block (which would then wait behind it).
    fn share_work(&mut self, run: &Arc<QueryRun>, work: &WorkOrder) -> Vec<(Arc<QueryRun>, WorkOrder)> {
        let WorkOrder::Morsel { pipeline, first, count } = *work else { return Vec::new() };
        if !run.config.shared_scans || self.queries.len() < 2 {
            return Vec::new();
        }
        let Some(range) = run.shared_range(pipeline, first) else { return Vec::new() };
        let mut estimate = run.lock().morsel_nanos[pipeline] * count as f64;
        let mut shared = Vec::new();
        for scheduled in &mut self.queries {
            if Arc::ptr_eq(&scheduled.run, run) || !scheduled.run.config.shared_scans {
                continue;
            }
            let mut state = scheduled.run.lock();
            if state.error.is_some() {
                continue;
            }
            let reading = (0..state.pipelines.len()).find_map(|p| match state.pipelines[p] {
                PipelinePhase::Running { next, total, stopped: false, .. }
                    if next < total && scheduled.run.shared_range(p, next) == Some(range) =>
                {
                    Some((p, next, count.min(total - next)))
                }
                _ => None,
            });
            let Some((p, next, take)) = reading else { continue };
            let cost = state.morsel_nanos[p] * take as f64;
            if estimate + cost > SHARED_WORK_ORDER_NANOS {
                continue;
            }
            estimate += cost;
            if let PipelinePhase::Running { next, .. } = &mut state.pipelines[p] {
                *next += take;
            }
            state.in_flight += 1;
            drop(state);
            scheduled.pass += scheduled.average_nanos / share_weight(scheduled.run.priority);
            scheduled.run.execution.pipeline_stats[p].shared_morsels.fetch_add(take as u64, Ordering::Relaxed);
            shared.push((Arc::clone(&scheduled.run), WorkOrder::Morsel { pipeline: p, first: next, count: take }));
        }
        if !shared.is_empty() {
            run.execution.pipeline_stats[pipeline].shared_morsels.fetch_add(count as u64, Ordering::Relaxed);
            let group: Vec<&Arc<QueryRun>> = std::iter::once(run).chain(shared.iter().map(|(other, _)| other)).collect();
            for member in &group {
                let mut with = member.execution.shared_with.lock().unwrap_or_else(|e| e.into_inner());
                with.extend(group.iter().filter(|other| !Arc::ptr_eq(other, member)).map(|other| other.id));
            }
        }
        shared
    }

    /// Whether a worker about to take a work order of `candidate` should wait briefly
    /// instead: a query at least three priority levels above it (8 times its share) is
    /// running but has no ready work
    /// right now (between its pipelines, or finishing its last work orders). Without the
    /// wait both workers end up in long work orders of the low-priority query just when
    /// the high-priority one's next pipeline becomes ready.
    fn should_linger(&self, candidate: &Arc<QueryRun>) -> bool {
        self.queries.iter().any(|s| {
            s.run.priority >= candidate.priority + LINGER_PRIORITY_GAP && {
                let state = s.run.lock();
                worth_waiting_for(&state)
            }
        })
    }

    /// A work order of `run` took `nanos`: corrects the charge made when it was handed out.
    fn charge(&mut self, run: &Arc<QueryRun>, nanos: f64) {
        if let Some(scheduled) = self.queries.iter_mut().find(|s| Arc::ptr_eq(&s.run, run)) {
            scheduled.pass += (nanos - scheduled.average_nanos) / share_weight(scheduled.run.priority);
            scheduled.average_nanos = 0.8 * scheduled.average_nanos + 0.2 * nanos;
        }
    }

    /// Returns a work order [`Queue::pick`] handed out and not started.
    fn unpick(&mut self, index: usize, run: &Arc<QueryRun>, work: WorkOrder) {
        let mut state = run.lock();
        state.in_flight -= 1;
        match work {
            WorkOrder::Morsel { pipeline, first, count } => {
                if let PipelinePhase::Running { next, .. } = &mut state.pipelines[pipeline] {
                    if *next == first + count {
                        *next = first;
                    }
                }
            }
            WorkOrder::FinalizeTask { sink, task } => {
                if let SinkPhase::Finalizing { next, .. } = &mut state.sinks[sink] {
                    if *next == task + 1 {
                        *next = task;
                    }
                }
            }
        }
        if state.done() {
            run.finished.notify_all();
        }
        drop(state);
        let scheduled = &mut self.queries[index];
        scheduled.pass -= scheduled.average_nanos / share_weight(scheduled.run.priority);
    }

    /// The pass a new query starts at: that of the least served running query.
    fn entry_pass(&self) -> f64 {
        self.queries.iter().map(|s| s.pass).min_by(f64::total_cmp).unwrap_or(0.0)
    }
}

/// How many priority levels above a work order's query another query must be for a
/// worker to wait for the latter between its pipelines (see [`Queue::should_linger`]).
const LINGER_PRIORITY_GAP: u32 = 3;

/// A query's weight in fair share: each priority level doubles it (1 at priority 1, 512
/// at 10), as SQL Server weighs its importance levels 1:3:9. Linear weights gave a query
/// at priority 10 only 71% of the workers beside four at priority 1 (10 / 14), so it
/// could not get through quickly; with doubling it gets 99%, while neighbouring levels
/// still share 2:1 and nobody starves.
fn share_weight(priority: u32) -> f64 {
    f64::from(1u32 << (priority.clamp(1, MAX_PRIORITY) - 1))
}

/// Whether a worker should wait for a query of much higher priority in `state` instead of
/// serving a lower one: only while that query has work orders in flight that may make
/// more ready soon. With ready work it was passed over by proportional share, so the
/// lower query is owed the work order; waiting then only idles the worker.
fn worth_waiting_for(state: &RunState) -> bool {
    state.in_flight > 0 && state.error.is_none() && !state.has_ready_work()
}

/// The most worker time (estimated) that the work orders of several queries reading one
/// shared block are handed out together for: more would keep other queries waiting.
const SHARED_WORK_ORDER_NANOS: f64 = 8_000_000.0;

/// How much worker time one work order should take when a pipeline's morsels are short:
/// consecutive morsels are batched up to it. Scans are cut into `morsel_size` rows while
/// other queries run so that none waits long for a worker, but a cheap scan's cut
/// morsels (Q6: 50 µs) cost it 12-16% in per-work-order overhead; batched, it runs about
/// as whole blocks do, while an expensive pipeline's morsels (Q13: 1.5 ms) stay single.
const WORK_ORDER_TARGET_NANOS: f64 = 250_000.0;

/// The morsels the next work order of a pipeline takes: as many as fit in
/// [`WORK_ORDER_TARGET_NANOS`] at the measured `morsel_nanos` (one until measured), and
/// at most a quarter of the `remaining` ones, so that the last work orders still spread
/// over the workers.
fn batch_size(morsel_nanos: f64, remaining: usize) -> usize {
    if morsel_nanos <= 0.0 {
        return 1;
    }
    let fit = (WORK_ORDER_TARGET_NANOS / morsel_nanos) as usize;
    fit.clamp(1, (remaining / 4).max(1))
}

/// The queries [`Queue::pick`] already tried: bits for up to 128 queries, a vector
/// beyond (allocated only then).
struct Tried {
    bits: u128,
    more: Vec<bool>,
}

impl Tried {
    fn new(queries: usize) -> Tried {
        Tried { bits: 0, more: if queries > 128 { vec![false; queries] } else { Vec::new() } }
    }

    fn insert(&mut self, index: usize) {
        if self.more.is_empty() {
            self.bits |= 1 << index;
        } else {
            self.more[index] = true;
        }
    }

    fn contains(&self, index: usize) -> bool {
        if self.more.is_empty() {
            self.bits & (1 << index) != 0
        } else {
            self.more[index]
        }
    }
}

/// Admission control state.
struct Admission {
    /// Queries admitted and not finished.
    running: usize,
    max_concurrent: usize,
    /// Queries waiting to rerun alone after a memory failure; while any waits, no new
    /// query is admitted (or they could wait forever).
    exclusive_waiting: usize,
    /// A query runs alone.
    exclusive: bool,
}

impl Admission {
    fn can_admit(&self) -> bool {
        !self.exclusive && self.exclusive_waiting == 0 && self.running < self.max_concurrent
    }
}

/// How long a worker waits for a higher-priority query's next work order (see
/// [`Queue::should_linger`]), and how many times per work order it may.
const LINGER: Duration = Duration::from_micros(200);
const LINGER_ROUNDS: usize = 10;

/// `60 s`, `250 ms`.
fn describe_duration(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// Initial work-order cost estimate of a new query (1 ms).
const INITIAL_WORK_ORDER_NANOS: f64 = 1e6;
/// How often a queued query checks for cancellation.
const QUEUE_POLL: Duration = Duration::from_millis(20);

/// The pool of workers shared by all queries of a database.
/// Stack reserved for each worker thread.
const WORKER_STACK_BYTES: usize = 64 << 20;

pub struct Scheduler {
    shared: Arc<Shared>,
    handles: Mutex<Vec<JoinHandle<()>>>,
    /// The memory budget queries reserve their hash tables and intermediate results in.
    memory: Arc<BufferPool>,
    admission: Mutex<Admission>,
    admission_changed: Condvar,
    registry: Mutex<BTreeMap<u64, Registered>>,
    next_id: AtomicU64,
    next_sequence: AtomicU64,
    /// Queries executing now (their work orders are shortened, see `ExecContext::morsel_rows`).
    running: Arc<RunningQueries>,
    /// Read while an execution's scans take their tables' snapshots, written while a
    /// transaction publishes changes of several tables (see [`Scheduler::publish_lock`]).
    publish_lock: Arc<std::sync::RwLock<()>>,
}

/// How many queries of each priority are executing (monitoring queries not counted).
struct RunningQueries {
    by_priority: [AtomicUsize; MAX_PRIORITY as usize + 1],
}

impl RunningQueries {
    fn new() -> RunningQueries {
        RunningQueries { by_priority: std::array::from_fn(|_| AtomicUsize::new(0)) }
    }

    fn enter(&self, priority: u32) {
        self.by_priority[priority as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn leave(&self, priority: u32) {
        self.by_priority[priority as usize].fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether a query other than one running at `priority` has at least that priority.
    fn any_other_at_or_above(&self, priority: u32) -> bool {
        let own = self.by_priority[priority as usize].load(Ordering::Relaxed);
        own > 1 || self.by_priority[priority as usize + 1..].iter().any(|c| c.load(Ordering::Relaxed) > 0)
    }
}

impl Scheduler {
    pub fn new(threads: usize, memory: Arc<BufferPool>) -> Scheduler {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { queries: Vec::new(), policy: SchedulingPolicy::FairShare, threads: 0, shutdown: false }),
            work_available: Condvar::new(),
            epoch: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
        });
        let scheduler = Scheduler {
            shared,
            handles: Mutex::new(Vec::new()),
            memory,
            admission: Mutex::new(Admission { running: 0, max_concurrent: 0, exclusive_waiting: 0, exclusive: false }),
            admission_changed: Condvar::new(),
            registry: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            next_sequence: AtomicU64::new(0),
            running: Arc::new(RunningQueries::new()),
            publish_lock: Default::default(),
        };
        scheduler.set_threads(threads);
        scheduler.set_max_concurrent_queries(None);
        scheduler
    }

    /// The lock that makes a statement's snapshot consistent across tables: every
    /// execution takes its scans' snapshots holding it for reading, and a commit that
    /// changes several tables publishes them holding it for writing, so a query sees such a
    /// commit whole or not at all (shared scans still read the tables' published versions).
    pub fn publish_lock(&self) -> &Arc<std::sync::RwLock<()>> {
        &self.publish_lock
    }

    pub fn threads(&self) -> usize {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()).threads
    }

    /// Grows or shrinks the pool (at least one worker). Running queries keep running: new
    /// workers join them, surplus workers leave after their current work order.
    pub fn set_threads(&self, threads: usize) {
        let threads = threads.max(1);
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        let current = {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            let current = queue.threads;
            queue.threads = threads;
            current
        };
        self.shared.signal();
        if threads < current {
            // Surplus workers exit when they see the new count.
            let surplus: Vec<JoinHandle<()>> = handles.drain(threads..).collect();
            for handle in surplus {
                let _ = handle.join();
            }
        }
        for id in handles.len()..threads {
            let shared = Arc::clone(&self.shared);
            let handle = std::thread::Builder::new()
                .name(format!("apiary-worker-{id}"))
                // Operators call down their pipeline and expressions evaluate their
                // children recursively: room for deep (but bounded) plans. Only the
                // pages a worker touches are committed.
                .stack_size(WORKER_STACK_BYTES)
                .spawn(move || worker_loop(shared, id))
                .expect("spawning a worker thread");
            handles.push(handle);
        }
        drop(handles);
        // The default concurrency follows the pool.
        let mut admission = self.admission.lock().unwrap_or_else(|e| e.into_inner());
        if admission.max_concurrent == 0 || admission.max_concurrent == current * 2 {
            admission.max_concurrent = threads * 2;
        }
        self.admission_changed.notify_all();
    }

    pub fn policy(&self) -> SchedulingPolicy {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()).policy
    }

    pub fn set_policy(&self, policy: SchedulingPolicy) {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()).policy = policy;
    }

    pub fn max_concurrent_queries(&self) -> usize {
        self.admission.lock().unwrap_or_else(|e| e.into_inner()).max_concurrent
    }

    /// At most `limit` queries run at once (`None`: twice the threads).
    pub fn set_max_concurrent_queries(&self, limit: Option<usize>) {
        let threads = self.threads();
        let mut admission = self.admission.lock().unwrap_or_else(|e| e.into_inner());
        admission.max_concurrent = limit.unwrap_or(threads * 2).max(1);
        self.admission_changed.notify_all();
    }

    /// How many queries are running or queued.
    pub fn query_count(&self) -> usize {
        self.registry.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Running and queued queries, oldest first.
    pub fn queries(&self) -> Vec<QueryProgress> {
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        registry
            .iter()
            .map(|(&id, entry)| {
                let elapsed = entry.submitted.elapsed();
                let (pipelines, rows, memory_bytes) = match &entry.run {
                    Some(run) => (run.progress_counts(), run.result_rows(), run.memory.reserved()),
                    None => (Vec::new(), 0, 0),
                };
                let (shared_work_orders, shared_with) = match &entry.run {
                    Some(run) => (run.execution.shared_work_orders(), run.execution.shared_with()),
                    None => (0, Vec::new()),
                };
                let done: usize = pipelines.iter().map(|p| p.0).sum();
                let total: usize = pipelines.iter().map(|p| p.1).sum();
                let estimated_left = (done > 0 && entry.run.is_some()).then(|| {
                    let fraction = done as f64 / total.max(done) as f64;
                    Duration::from_secs_f64(elapsed.as_secs_f64() * (1.0 - fraction) / fraction)
                });
                QueryProgress {
                    id,
                    connection: entry.meta.connection,
                    user: entry.meta.user.clone(),
                    state: entry.phase,
                    sql: entry.meta.sql.clone(),
                    priority: entry.meta.priority,
                    elapsed,
                    pipelines,
                    work_orders_done: done,
                    work_orders_total: total,
                    rows,
                    memory_bytes,
                    estimated_left,
                    shared_work_orders,
                    shared_with,
                }
            })
            .collect()
    }

    /// Cancels a running or queued query; false if there is none with this id.
    pub fn cancel(&self, id: u64) -> bool {
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = registry.get(&id) else { return false };
        entry.interrupted.store(true, Ordering::Relaxed);
        drop(registry);
        // A queued query notices at once.
        self.admission_changed.notify_all();
        true
    }

    fn set_phase(&self, id: u64, phase: &'static str, run: Option<Arc<QueryRun>>) {
        if let Some(entry) = self.registry.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&id) {
            entry.phase = phase;
            entry.run = run;
        }
    }

    /// Waits until `ready` allows the query in (then takes its place), it is cancelled, or
    /// its queue time-out passes.
    fn admit(
        &self,
        interrupted: &AtomicBool,
        deadline: Instant,
        ready: impl Fn(&Admission) -> bool,
        enter: impl Fn(&mut Admission),
        timeout_error: impl Fn(&Admission) -> ApiaryError,
    ) -> Result<()> {
        let mut admission = self.admission.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if interrupted.load(Ordering::Relaxed) {
                return Err(ApiaryError::Interrupted);
            }
            if ready(&admission) {
                enter(&mut admission);
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(timeout_error(&admission));
            }
            let wait = (deadline - now).min(QUEUE_POLL);
            admission = self.admission_changed.wait_timeout(admission, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    fn leave(&self, exclusive: bool) {
        let mut admission = self.admission.lock().unwrap_or_else(|e| e.into_inner());
        admission.running = admission.running.saturating_sub(1);
        if exclusive {
            admission.exclusive = false;
        }
        self.admission_changed.notify_all();
    }

    /// Runs a plan to completion on the pool; blocks the caller. Returns the execution's
    /// state (its result, its counters); the plan is left as it was and may run again.
    pub fn run(
        &self,
        plan: Arc<PhysicalPlan>,
        config: ExecutionConfig,
        interrupted: Arc<AtomicBool>,
        meta: QueryMeta,
    ) -> Result<Arc<ExecutionState>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let submitted = Instant::now();
        let deadline = submitted + meta.queue_timeout;
        self.registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Registered { meta: meta.clone(), submitted, interrupted: Arc::clone(&interrupted), phase: "queued", run: None });
        let outcome = self.admit_and_run(id, &plan, &config, &interrupted, &meta, deadline);
        self.registry.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        outcome
    }

    fn admit_and_run(
        &self,
        id: u64,
        plan: &Arc<PhysicalPlan>,
        config: &ExecutionConfig,
        interrupted: &Arc<AtomicBool>,
        meta: &QueryMeta,
        deadline: Instant,
    ) -> Result<Arc<ExecutionState>> {
        let bypass = meta.bypass_admission;
        self.admit(
            interrupted,
            deadline,
            |a| bypass || a.can_admit(),
            |a| a.running += 1,
            |a| {
                ApiaryError::Admission(format!(
                    "the query waited {} (queue_timeout) for one of the max_concurrent_queries = {} running queries to end; \
                     raise SET queue_timeout or SET max_concurrent_queries",
                    describe_duration(meta.queue_timeout),
                    a.max_concurrent
                ))
            },
        )?;
        let mut exclusive = false;
        loop {
            self.set_phase(id, "running", None);
            let outcome = self.execute_admitted(id, plan, config, interrupted, meta);
            match outcome {
                Err((error, true)) if !exclusive => {
                    // Crowded out of memory by other queries: wait to run alone, then again.
                    {
                        let mut admission = self.admission.lock().unwrap_or_else(|e| e.into_inner());
                        admission.running = admission.running.saturating_sub(1);
                        admission.exclusive_waiting += 1;
                        self.admission_changed.notify_all();
                    }
                    self.set_phase(id, "waiting for memory", None);
                    let admitted = self.admit(
                        interrupted,
                        deadline.max(Instant::now() + meta.queue_timeout),
                        |a| a.running == 0 && !a.exclusive,
                        |a| {
                            a.exclusive_waiting -= 1;
                            a.exclusive = true;
                            a.running += 1;
                        },
                        |_| {
                            ApiaryError::Admission(format!(
                                "the query waited {} (queue_timeout) for memory other queries held: {error}",
                                describe_duration(meta.queue_timeout)
                            ))
                        },
                    );
                    if let Err(e) = admitted {
                        let mut admission = self.admission.lock().unwrap_or_else(|e| e.into_inner());
                        admission.exclusive_waiting -= 1;
                        self.admission_changed.notify_all();
                        return Err(e);
                    }
                    exclusive = true;
                }
                Err((error, _)) => {
                    self.leave(exclusive);
                    return Err(error);
                }
                Ok(state) => {
                    self.leave(exclusive);
                    return Ok(state);
                }
            }
        }
    }

    /// One execution of an admitted query. On error, also whether the error was the
    /// memory budget while other queries held memory.
    fn execute_admitted(
        &self,
        id: u64,
        plan: &Arc<PhysicalPlan>,
        config: &ExecutionConfig,
        interrupted: &Arc<AtomicBool>,
        meta: &QueryMeta,
    ) -> std::result::Result<Arc<ExecutionState>, (ApiaryError, bool)> {
        let feeders = plan.feeders();
        let pipelines = plan.pipelines.len();
        let execution = {
            let _snapshot = self.publish_lock.read().unwrap_or_else(|e| e.into_inner());
            Arc::new(ExecutionState::new(plan).map_err(|e| (e, false))?)
        };
        let mut phases = vec![PipelinePhase::Waiting; pipelines];
        let mut sinks: Vec<SinkPhase> = feeders.iter().map(|&f| SinkPhase::Open { feeders_left: f }).collect();
        let mut pipeline_loops = vec![None; pipelines];
        let mut sink_loops = vec![None; plan.sink_count];
        let mut loop_states = Vec::with_capacity(plan.loops.len());
        for (index, lp) in plan.loops.iter().enumerate() {
            for &p in &lp.pipelines {
                phases[p] = PipelinePhase::Dormant;
                pipeline_loops[p] = Some(index);
            }
            for &s in &lp.sinks {
                sink_loops[s] = Some(index);
            }
            // The sink waits for the non-recursive term's pipelines first.
            sinks[lp.sink_id] = SinkPhase::Open { feeders_left: feeders[lp.sink_id] - lp.feeders };
            loop_states.push(Mutex::new(Arc::new(LoopState::new(&plan.stateful, &lp.slots).map_err(|e| (e, false))?)));
        }
        let run = Arc::new(QueryRun {
            id,
            state: Mutex::new(RunState {
                pipelines: phases,
                totals: vec![None; pipelines],
                morsel_nanos: vec![0.0; pipelines],
                sinks,
                error: None,
                memory_contended: false,
                in_flight: 0,
            }),
            plan: Arc::clone(plan),
            config: config.clone(),
            finished: Condvar::new(),
            interrupted: Arc::clone(interrupted),
            halted: AtomicBool::new(false),
            locals: (0..pipelines).map(|_| Mutex::new(Vec::new())).collect(),
            memory: QueryMemory::new(Arc::clone(&self.memory)),
            priority: meta.priority.clamp(1, MAX_PRIORITY),
            running: Arc::clone(&self.running),
            execution,
            pipeline_loops,
            sink_loops,
            loop_memory: (0..plan.loops.len()).map(|_| AtomicUsize::new(0)).collect(),
            loop_states,
        });
        // Monitoring queries (admission bypassed) are too small to slice others' work for.
        let counted = !meta.bypass_admission;
        if counted {
            self.running.enter(run.priority);
        }
        run.progress();
        self.set_phase(id, "running", Some(Arc::clone(&run)));
        {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            let pass = queue.entry_pass();
            let sequence = self.next_sequence.fetch_add(1, Ordering::Relaxed);
            queue.queries.push(Scheduled { run: Arc::clone(&run), pass, average_nanos: INITIAL_WORK_ORDER_NANOS, sequence });
        }
        self.shared.signal();
        let outcome = {
            let mut state = run.lock();
            while !state.done() {
                state = run.finished.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            state.error.take().map(|e| (e, state.memory_contended))
        };
        {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.queries.retain(|q| !Arc::ptr_eq(&q.run, &run));
        }
        if counted {
            self.running.leave(run.priority);
        }
        self.set_phase(id, "running", None);
        run.memory.release();
        match outcome {
            Some(failure) => Err(failure),
            None => Ok(Arc::clone(&run.execution)),
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()).shutdown = true;
        self.shared.signal();
        for handle in self.handles.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = handle.join();
        }
    }
}

fn worker_loop(shared: Arc<Shared>, id: usize) {
    // Whether this worker may spin before sleeping: after it ran work (not again after
    // waking up with nothing to do, so an idle pool sleeps).
    let mut may_spin = false;
    // The work orders this worker just ran, charged when it next takes the queue lock.
    let mut ran: Vec<(Arc<QueryRun>, f64)> = Vec::new();
    loop {
        let mut lingered = 0;
        let (run, work, shared_work) = {
            let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            if !ran.is_empty() {
                for (run, nanos) in ran.drain(..) {
                    queue.charge(&run, nanos);
                }
                // Completing work may have made more work available. Notifying under the
                // queue lock orders this with a worker that is about to wait.
                shared.signal();
            }
            loop {
                if queue.shutdown || id >= queue.threads {
                    return;
                }
                if let Some((index, run, work)) = queue.pick() {
                    if lingered < LINGER_ROUNDS && queue.should_linger(&run) {
                        // Give the work order back and wait for the higher-priority query.
                        queue.unpick(index, &run, work);
                        lingered += 1;
                        drop(queue);
                        shared.spin_for_signal(LINGER);
                        queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
                        continue;
                    }
                    let shared_work = queue.share_work(&run, &work);
                    break (run, work, shared_work);
                }
                if may_spin {
                    may_spin = false;
                    drop(queue);
                    shared.spin_for_signal(IDLE_SPIN);
                    queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
                    continue;
                }
                shared.sleepers.fetch_add(1, Ordering::SeqCst);
                queue = shared.work_available.wait(queue).unwrap_or_else(|e| e.into_inner());
                shared.sleepers.fetch_sub(1, Ordering::SeqCst);
            }
        };
        may_spin = true;
        for (run, work) in std::iter::once((run, work)).chain(shared_work) {
            let started = Instant::now();
            run.execute(work, id);
            ran.push((run, started.elapsed().as_nanos() as f64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn progress(done: usize, total: usize, left: Option<f64>, state: &'static str) -> QueryProgress {
        QueryProgress {
            id: 1,
            connection: 1,
            user: String::new(),
            state,
            sql: String::new(),
            priority: 5,
            elapsed: Duration::from_secs(3),
            pipelines: vec![(done, total)],
            work_orders_done: done,
            work_orders_total: total,
            rows: 0,
            memory_bytes: 0,
            estimated_left: left.map(Duration::from_secs_f64),
            shared_work_orders: 0,
            shared_with: Vec::new(),
        }
    }

    #[test]
    fn the_bar_shows_share_done_and_time_left() {
        assert_eq!(
            progress(1, 4, Some(9.0), "running").bar_line(),
            format!("[{}{}]  25%  3.0 s elapsed, ~9.0 s left", "#".repeat(9), ".".repeat(27))
        );
        assert_eq!(progress(0, 0, None, "queued").bar_line(), format!("[{}]   0%  3.0 s elapsed (queued)", ".".repeat(36)));
        assert!(progress(10, 10, Some(0.0), "running").bar_line().starts_with(&format!("[{}] 100%", "#".repeat(36))));
    }

    /// A query with one pipeline of 10 work orders, `handed_out` of them handed out and
    /// `in_flight` of those still running.
    fn running(handed_out: usize, in_flight: usize) -> RunState {
        RunState {
            pipelines: vec![PipelinePhase::Running { next: handed_out, total: 10, completed: handed_out - in_flight, stopped: false }],
            totals: vec![Some(10)],
            morsel_nanos: vec![0.0],
            sinks: vec![SinkPhase::Open { feeders_left: 1 }],
            error: None,
            memory_contended: false,
            in_flight,
        }
    }

    /// Regression: workers idled beside a high-priority query that had ready work (the
    /// lower query was owed the work order by proportional share, and waiting only kept
    /// the worker from it), 1-3 ms of two workers' time per 15 ms query.
    #[test]
    fn workers_wait_for_a_high_priority_query_only_when_it_has_no_ready_work() {
        assert!(!worth_waiting_for(&running(3, 2)), "ready work: the passed-over query is served");
        assert!(worth_waiting_for(&running(10, 2)), "last work orders in flight: its next work is near");
        assert!(!worth_waiting_for(&running(10, 0)), "nothing in flight: nothing to wait for");
        let failed = RunState { error: Some(ApiaryError::Interrupted), ..running(10, 2) };
        assert!(!worth_waiting_for(&failed), "a failed query gets no more work");
    }

    /// Regression: with weights linear in priority a query at 10 got 71% of the workers
    /// beside four at 1 and ran at 1.5x its time alone; each level now doubles the share.
    #[test]
    fn each_priority_level_doubles_the_share() {
        assert_eq!(share_weight(1), 1.0);
        assert_eq!(share_weight(6) / share_weight(5), 2.0);
        let high = share_weight(10);
        assert!(high / (high + 4.0 * share_weight(1)) > 0.99, "priority 10 beside four at 1");
        assert_eq!(share_weight(0), share_weight(1), "out-of-range priorities are clamped");
        assert_eq!(share_weight(99), share_weight(MAX_PRIORITY));
    }

    #[test]
    fn short_morsels_are_batched_up_to_the_target_time() {
        assert_eq!(batch_size(0.0, 100), 1, "unmeasured: one at a time");
        assert_eq!(batch_size(50_000.0, 100), 5, "50 µs morsels: five per work order");
        assert_eq!(batch_size(1_500_000.0, 100), 1, "long morsels stay single");
        assert_eq!(batch_size(1_000.0, 12), 3, "the last work orders spread over the workers");
        assert_eq!(batch_size(1_000.0, 2), 1);
    }

    #[test]
    fn tried_queries_are_remembered_below_and_beyond_128() {
        let mut tried = Tried::new(3);
        tried.insert(1);
        assert!(tried.contains(1) && !tried.contains(0) && !tried.contains(2));
        let mut many = Tried::new(200);
        many.insert(150);
        assert!(many.contains(150) && !many.contains(149));
    }
}
