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
//! A work order is either one morsel of a running pipeline or one finalize task of a
//! sink. The worker that completes a pipeline's last morsel combines the workers' local
//! states into the sink; the worker completing a sink's last feeder prepares its finalize
//! tasks, which then run on all workers. All of this happens outside the scheduler lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use apiary_common::{internal_err, ApiaryError, Result};

use crate::config::ExecutionConfig;
use crate::memory::QueryMemory;
use crate::operators::{Control, ExecContext};
use crate::pipeline::{PhysicalPlan, PipelineLocal};
use apiary_storage::BufferPool;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PipelinePhase {
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
    sinks: Vec<SinkPhase>,
    error: Option<ApiaryError>,
    in_flight: usize,
}

impl RunState {
    fn done(&self) -> bool {
        self.in_flight == 0
            && (self.error.is_some()
                || (self.pipelines.iter().all(|p| *p == PipelinePhase::Complete) && self.sinks.iter().all(|s| *s == SinkPhase::Finished)))
    }
}

enum WorkOrder {
    Morsel { pipeline: usize, morsel: usize },
    FinalizeTask { sink: usize, task: usize },
}

/// One query being executed.
struct QueryRun {
    plan: Arc<PhysicalPlan>,
    config: ExecutionConfig,
    state: Mutex<RunState>,
    finished: Condvar,
    interrupted: Arc<AtomicBool>,
    /// `locals[pipeline][worker]`.
    locals: Vec<Vec<Mutex<Option<PipelineLocal>>>>,
    memory: QueryMemory,
}

impl QueryRun {
    fn lock(&self) -> std::sync::MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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
                    let total = pipeline.source.morsels();
                    state.pipelines[idx] = PipelinePhase::Running { next: 0, total, completed: 0, stopped: false };
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
    fn next_work(&self, state: &mut RunState, worker: usize) -> Option<WorkOrder> {
        if state.error.is_some() || worker >= self.locals.first().map_or(usize::MAX, |l| l.len()) {
            return None;
        }
        for (idx, phase) in state.pipelines.iter_mut().enumerate() {
            if let PipelinePhase::Running { next, total, stopped, .. } = phase {
                if *next < *total && !*stopped {
                    let morsel = *next;
                    *next += 1;
                    return Some(WorkOrder::Morsel { pipeline: idx, morsel });
                }
            }
        }
        for (sink, phase) in state.sinks.iter_mut().enumerate() {
            if let SinkPhase::Finalizing { next, total, .. } = phase {
                if *next < *total {
                    let task = *next;
                    *next += 1;
                    return Some(WorkOrder::FinalizeTask { sink, task });
                }
            }
        }
        None
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
            state.error = Some(error);
        }
        self.interrupted.store(true, Ordering::Relaxed);
    }

    /// Runs one work order and everything its completion triggers.
    fn execute(&self, work: WorkOrder, worker: usize) {
        // A bug that panics must fail the query, not kill the worker and hang the caller.
        let result = catch_panic(|| match work {
            WorkOrder::Morsel { pipeline, morsel } => self.run_morsel(pipeline, morsel, worker),
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

    fn run_morsel(&self, pipeline: usize, morsel: usize, worker: usize) -> Result<()> {
        let plan_pipeline = &self.plan.pipelines[pipeline];
        let slot = &self.locals[pipeline][worker];
        let mut local = slot.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_else(|| plan_pipeline.local_state());
        let ctx = ExecContext { config: &self.config, interrupted: &self.interrupted, memory: &self.memory };
        let outcome = if self.interrupted.load(Ordering::Relaxed) {
            Err(ApiaryError::Interrupted)
        } else {
            plan_pipeline.run_morsel(morsel, &mut local, &ctx)
        };
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(local);
        let control = outcome?;
        self.account_memory(pipeline, worker)?;
        let mut state = self.lock();
        if let PipelinePhase::Running { completed, next, total, stopped } = &mut state.pipelines[pipeline] {
            *completed += 1;
            if control == Control::Finished {
                *stopped = true;
                *next = (*next).min(*total);
            }
        }
        Ok(())
    }

    /// Reserves what a worker's sink state grew by since its last report (the pipeline
    /// also does after every chunk; this catches growth in `flush`).
    fn account_memory(&self, pipeline: usize, worker: usize) -> Result<()> {
        let plan_pipeline = &self.plan.pipelines[pipeline];
        let mut slot = self.locals[pipeline][worker].lock().unwrap_or_else(|e| e.into_inner());
        let Some(local) = slot.as_mut() else { return Ok(()) };
        let now = plan_pipeline.sink.local_memory(&local.sink);
        self.memory.charge(&mut local.reported_memory, now)
    }

    fn run_finalize_task(&self, sink: usize, task: usize) -> Result<()> {
        let sink_ref = self.plan.sink(sink).ok_or_else(|| internal_err!("unknown sink {sink}"))?;
        let started = Instant::now();
        sink_ref.finalize_task(task)?;
        let stats = &self.plan.sink_stats[sink];
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
                let result = self.plan.sink(sink).ok_or_else(|| internal_err!("unknown sink {sink}")).and_then(|s| s.finish());
                self.plan.sink_stats[sink].finish_nanos.fetch_add(nanos_since(started), Ordering::Relaxed);
                let mut state = self.lock();
                match result {
                    Ok(()) => state.sinks[sink] = SinkPhase::Finished,
                    Err(e) => {
                        self.fail(&mut state, e);
                        return;
                    }
                }
            }
        }
    }

    /// Combines a completed pipeline's local states into its sink.
    fn complete_pipeline(&self, pipeline: usize) -> Result<()> {
        let plan_pipeline = &self.plan.pipelines[pipeline];
        let started = Instant::now();
        for slot in &self.locals[pipeline] {
            let local = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(local) = local {
                plan_pipeline.sink.combine(local.sink)?;
            }
        }
        plan_pipeline.stats.combine_nanos.fetch_add(nanos_since(started), Ordering::Relaxed);
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
            let tasks = plan_pipeline.sink.prepare_finalize()?;
            self.plan.sink_stats[sink_id].prepare_nanos.fetch_add(nanos_since(started), Ordering::Relaxed);
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

struct Shared {
    queue: Mutex<Queue>,
    work_available: Condvar,
    /// Bumped whenever work may have become available: idle workers spin on it briefly
    /// before sleeping on the condvar (see [`IDLE_SPIN`]).
    epoch: std::sync::atomic::AtomicU64,
}

/// How long a worker that ran out of work watches for new work before it sleeps. Between
/// the pipelines of one query (a build finishes, its probe starts) new work follows within
/// microseconds; waking a sleeping thread costs tens to hundreds of microseconds on a VM.
const IDLE_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

impl Shared {
    /// Tells idle workers that work may be available.
    fn signal(&self) {
        self.epoch.fetch_add(1, Ordering::Release);
        self.work_available.notify_all();
    }
}

struct Queue {
    queries: Vec<Arc<QueryRun>>,
    round_robin: usize,
    /// Workers with an id at or above this exit.
    threads: usize,
    shutdown: bool,
}

/// The pool of workers shared by all queries of a database.
/// Stack reserved for each worker thread.
const WORKER_STACK_BYTES: usize = 64 << 20;

pub struct Scheduler {
    shared: Arc<Shared>,
    handles: Mutex<Vec<JoinHandle<()>>>,
    /// The memory budget queries reserve their hash tables and intermediate results in.
    memory: Arc<BufferPool>,
}

impl Scheduler {
    pub fn new(threads: usize, memory: Arc<BufferPool>) -> Scheduler {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { queries: Vec::new(), round_robin: 0, threads: 0, shutdown: false }),
            work_available: Condvar::new(),
            epoch: std::sync::atomic::AtomicU64::new(0),
        });
        let scheduler = Scheduler { shared, handles: Mutex::new(Vec::new()), memory };
        scheduler.set_threads(threads);
        scheduler
    }

    pub fn threads(&self) -> usize {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner()).threads
    }

    /// Grows or shrinks the pool (at least one worker).
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
    }

    /// Runs a plan to completion on the pool; blocks the caller.
    pub fn run(&self, plan: PhysicalPlan, config: ExecutionConfig, interrupted: Arc<AtomicBool>) -> Result<Arc<PhysicalPlan>> {
        let workers = self.threads();
        let feeders = plan.feeders();
        let pipelines = plan.pipelines.len();
        let locals = (0..pipelines).map(|_| (0..workers).map(|_| Mutex::new(None)).collect()).collect();
        let run = Arc::new(QueryRun {
            state: Mutex::new(RunState {
                pipelines: vec![PipelinePhase::Waiting; pipelines],
                sinks: feeders.iter().map(|&f| SinkPhase::Open { feeders_left: f }).collect(),
                error: None,
                in_flight: 0,
            }),
            plan: Arc::new(plan),
            config,
            finished: Condvar::new(),
            interrupted,
            locals,
            memory: QueryMemory::new(Arc::clone(&self.memory)),
        });
        run.progress();
        {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.queries.push(Arc::clone(&run));
        }
        self.shared.signal();
        let outcome = {
            let mut state = run.lock();
            while !state.done() {
                state = run.finished.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            state.error.take()
        };
        {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.queries.retain(|q| !Arc::ptr_eq(q, &run));
        }
        run.memory.release();
        if let Some(error) = outcome {
            return Err(error);
        }
        Ok(Arc::clone(&run.plan))
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
    loop {
        let (run, work) = {
            let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if queue.shutdown || id >= queue.threads {
                    return;
                }
                let mut found = None;
                let count = queue.queries.len();
                for offset in 0..count {
                    let index = (queue.round_robin + offset) % count;
                    let run = Arc::clone(&queue.queries[index]);
                    let mut state = run.lock();
                    if let Some(work) = run.next_work(&mut state, id) {
                        state.in_flight += 1;
                        drop(state);
                        found = Some((run, work, index));
                        break;
                    }
                }
                if let Some((run, work, index)) = found {
                    queue.round_robin = index + 1;
                    break (run, work);
                }
                if may_spin {
                    may_spin = false;
                    let epoch = shared.epoch.load(Ordering::Acquire);
                    drop(queue);
                    let started = Instant::now();
                    while shared.epoch.load(Ordering::Acquire) == epoch && started.elapsed() < IDLE_SPIN {
                        std::hint::spin_loop();
                    }
                    queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
                    continue;
                }
                queue = shared.work_available.wait(queue).unwrap_or_else(|e| e.into_inner());
            }
        };
        may_spin = true;
        run.execute(work, id);
        // Completing work may have made more work available. Taking the queue lock
        // before notifying orders this with a worker that is about to wait.
        drop(shared.queue.lock().unwrap_or_else(|e| e.into_inner()));
        shared.signal();
    }
}
