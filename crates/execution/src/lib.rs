//! # apiary-execution
//!
//! Runs optimized logical plans: physical planning into pipelines, compiled expression
//! kernels, hash tables, operators, and the work-order scheduler.
//!
//! ```text
//! LogicalPlan ──planner──▶ PhysicalPlan = DAG of pipelines (source → operators → sink)
//!                               │
//!                 scheduler: worker pool runs work orders (one morsel = one storage
//!                 block, or one finalize task) of all running queries
//!                               │
//!                 operators push DataChunks (vectors + selection vector) downstream
//! ```
//!
//! * [`expr`]: expressions compiled to typed kernels once per query.
//! * [`hash`]: key packing, the join hash table, the aggregation group table.
//! * [`operators`]: scan, filter, project, hash join, hash aggregate, sort/top-k, collect.
//! * [`pipeline`] / [`scheduler`]: pipelines, work orders, worker threads.
//! * [`planner`]: logical plan → pipelines (build sides, aggregation partitioning).

pub mod config;
pub mod expr;
pub mod hash;
pub mod memory;
pub mod operators;
pub mod pipeline;
pub mod planner;
pub mod scheduler;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use apiary_common::Result;
use apiary_sql::LogicalPlan;
use apiary_types::DataChunk;

pub use config::ExecutionConfig;
pub use expr::KernelEvaluator;
pub use operators::ExecutionState;
pub use pipeline::PhysicalPlan;
pub use scheduler::{QueryMeta, QueryProgress, Scheduler, SchedulingPolicy};

/// Plans and runs `plan` on `scheduler`; returns the result chunks and the executed plan
/// (with its statistics).
pub fn execute(
    scheduler: &Scheduler,
    plan: &LogicalPlan,
    config: &ExecutionConfig,
    interrupted: Arc<AtomicBool>,
    meta: QueryMeta,
) -> Result<(Vec<DataChunk>, Arc<PhysicalPlan>, Arc<ExecutionState>)> {
    let physical = Arc::new(planner::PhysicalPlanner::new(config, scheduler.threads()).plan(plan)?);
    let executed = scheduler.run(Arc::clone(&physical), config.clone(), interrupted, meta)?;
    let chunks = physical.result.result(&executed)?.as_ref().clone();
    Ok((chunks, physical, executed))
}

/// Plans without running (for EXPLAIN).
pub fn plan_physical(plan: &LogicalPlan, config: &ExecutionConfig, threads: usize) -> Result<PhysicalPlan> {
    planner::PhysicalPlanner::new(config, threads).plan(plan)
}
