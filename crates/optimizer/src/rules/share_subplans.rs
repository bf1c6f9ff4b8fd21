//! `share_subplans`: a subplan that aggregates and appears more than once (the same
//! tables, predicates, joins and aggregates, under other column ids) is computed once, as
//! a materialized CTE that every occurrence reads.
//!
//! ```text
//!   Join ON sb.store = sc.store              Cte subplan (#n): definition
//!     Aggregate GROUP BY store  avg(rev)        Aggregate GROUP BY store, item  sum(price)
//!       Aggregate GROUP BY store, item  ─▶         Join sales ⋈ dates
//!         Join sales ⋈ dates                  body: Join ON sb.store = sc.store
//!     Aggregate GROUP BY store, item                  Aggregate GROUP BY store  avg(rev)
//!       Join sales ⋈ dates                              CteScan subplan
//!                                                      CteScan subplan
//! ```
//!
//! TPC-DS Q65 writes the same (store, item) revenue subquery twice, once for each
//! store's average and once for the items to compare with it: shared, store sales are
//! joined and aggregated once. The equality of two subplans is checked on copies whose
//! columns are renumbered in the order the plan defines them, so it is exact: the same
//! expressions over the same tables, only the ids differ.
//!
//! Only subplans that aggregate are shared: their output is small next to their input,
//! while a scan or join read twice costs about what writing and reading its rows would.
//! Subplans reading columns from outside (correlated), CTEs or work tables are left
//! alone. The largest repeated subplan is shared first, which shares everything inside it.

use std::sync::Arc;

use apiary_common::Result;
use apiary_sql::{CteScan, LogicalPlan};

use crate::rules::decorrelate::fresh_copy;
use crate::rules::unnest_subqueries::map_children;
use crate::OptimizerContext;

/// Canonical copies number their columns from here (any base gives the same comparison;
/// the copies are thrown away).
const CANONICAL_FIRST_COLUMN_ID: u32 = 0;

/// Plans with more nodes are left alone: finding repeats compares subtrees of equal size,
/// quadratic in the worst case (a chain of 1,500 INTERSECTs is 10,000 nodes).
const MAX_PLAN_NODES: usize = 1000;

/// Most subplans shared in one plan.
const MAX_SHARED: usize = 16;

pub fn run(mut plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    if size(&plan) > MAX_PLAN_NODES {
        return Ok(plan);
    }
    for _ in 0..MAX_SHARED {
        let Some(target) = largest_repeated(&plan, ctx) else { break };
        let (definition, _) = fresh_copy(&target.original, ctx)?;
        let id = ctx.new_cte_id();
        let name = format!("subplan{}", id - crate::FIRST_OPTIMIZER_CTE_ID + 1);
        let estimates = Arc::new(definition.clone());
        let mut replacer = Replacer { target: &target.canonical, size: target.size, id, name: &name, definition: &estimates, ctx };
        let body = replacer.replace(plan)?;
        plan = LogicalPlan::Cte { id, name, definition: Box::new(definition), body: Box::new(body) };
    }
    Ok(plan)
}

/// A subplan found more than once: one occurrence, its canonical copy and its size.
struct Repeated {
    original: LogicalPlan,
    canonical: LogicalPlan,
    size: usize,
}

/// The largest subplan that can be shared and occurs at least twice.
fn largest_repeated(plan: &LogicalPlan, ctx: &OptimizerContext) -> Option<Repeated> {
    let mut nodes: Vec<(usize, &LogicalPlan)> = Vec::new();
    collect(plan, &mut nodes);
    // Largest first; among equal sizes, the first found. Only subtrees of equal size can
    // be equal: each is copied (canonically) only when another has its size.
    nodes.sort_by_key(|n| std::cmp::Reverse(n.0));
    for same_size in nodes.chunk_by(|a, b| a.0 == b.0).filter(|group| group.len() > 1) {
        let canonicals: Vec<(LogicalPlan, &LogicalPlan)> =
            same_size.iter().filter_map(|(_, node)| canonical(node, ctx).map(|c| (c, *node))).collect();
        for (i, (canonical, original)) in canonicals.iter().enumerate() {
            if canonicals[i + 1..].iter().any(|(other, _)| other == canonical) {
                return Some(Repeated { original: (*original).clone(), canonical: canonical.clone(), size: same_size[0].0 });
            }
        }
    }
    None
}

/// Every node of `plan` except leaves, with its size.
fn collect<'p>(plan: &'p LogicalPlan, out: &mut Vec<(usize, &'p LogicalPlan)>) -> usize {
    // The recursive term of a recursive CTE runs once per iteration: nothing in it can be
    // computed once for all of them.
    if matches!(plan, LogicalPlan::RecursiveCte { .. }) {
        return size(plan);
    }
    let size = 1 + plan.children().into_iter().map(|child| collect(child, out)).sum::<usize>();
    if size > 1 {
        out.push((size, plan));
    }
    size
}

/// `plan` with its columns renumbered in the order it defines them, when it can be shared.
fn canonical(plan: &LogicalPlan, ctx: &OptimizerContext) -> Option<LogicalPlan> {
    if !shareable(plan) || !aggregates(plan) || !plan.free_columns().is_empty() {
        return None;
    }
    let mut scratch = OptimizerContext::new(CANONICAL_FIRST_COLUMN_ID, ctx.evaluator);
    fresh_copy(plan, &mut scratch).ok().map(|(copy, _)| copy)
}

/// Whether nothing in `plan` reads or defines a CTE or work table (a definition moved to
/// the top of the plan could not see them) or holds a subquery.
fn shareable(plan: &LogicalPlan) -> bool {
    !matches!(plan, LogicalPlan::Cte { .. } | LogicalPlan::CteScan(_) | LogicalPlan::RecursiveCte { .. } | LogicalPlan::WorkTableScan(_))
        && !plan.contains_subquery()
        && plan.children().into_iter().all(shareable)
}

fn aggregates(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Aggregate { .. }) || plan.children().into_iter().any(aggregates)
}

fn size(plan: &LogicalPlan) -> usize {
    1 + plan.children().into_iter().map(size).sum::<usize>()
}

/// Replaces every occurrence of `target` with a scan of CTE `id`.
struct Replacer<'r, 'c> {
    target: &'r LogicalPlan,
    size: usize,
    id: usize,
    name: &'r str,
    definition: &'r Arc<LogicalPlan>,
    ctx: &'r OptimizerContext<'c>,
}

impl Replacer<'_, '_> {
    fn replace(&mut self, plan: LogicalPlan) -> Result<LogicalPlan> {
        if matches!(plan, LogicalPlan::RecursiveCte { .. }) {
            return Ok(plan);
        }
        if size(&plan) == self.size && canonical(&plan, self.ctx).as_ref() == Some(self.target) {
            // Equal canonical copies produce their columns in the same order.
            let columns = self.definition.output().into_iter().zip(plan.output()).map(|(source, here)| (source.id, here)).collect();
            return Ok(LogicalPlan::CteScan(CteScan {
                id: self.id,
                label: self.name.to_string(),
                columns,
                definition: Arc::clone(self.definition),
            }));
        }
        map_children(plan, &mut |child| self.replace(child))
    }
}
