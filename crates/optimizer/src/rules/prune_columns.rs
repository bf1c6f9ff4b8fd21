//! `prune_columns`: removes columns nobody reads (projection push-down).
//!
//! Walks the plan top-down with the set of column ids the parent needs: scans read only
//! those columns (plus what their filters need), projections and aggregations drop unused
//! outputs, unions drop unused positions from every input. The root keeps all outputs.

use std::collections::BTreeSet;

use apiary_common::Result;
use apiary_sql::expr::{ColumnId, Expr};
use apiary_sql::LogicalPlan;

use crate::OptimizerContext;

pub fn run(plan: LogicalPlan, _ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    let required = plan.output_ids();
    Ok(prune(plan, &required))
}

fn columns_of<'a>(exprs: impl IntoIterator<Item = &'a Expr>) -> BTreeSet<ColumnId> {
    let mut ids = BTreeSet::new();
    for e in exprs {
        e.collect_columns(&mut ids);
    }
    ids
}

/// The definition columns that the scans of CTE `id` in `plan` read.
fn collect_cte_reads(plan: &LogicalPlan, id: usize, reads: &mut BTreeSet<ColumnId>) {
    if let LogicalPlan::CteScan(scan) = plan {
        if scan.id == id {
            reads.extend(scan.columns.iter().map(|(source, _)| *source));
        }
    }
    for child in plan.children() {
        collect_cte_reads(child, id, reads);
    }
}

fn prune(plan: LogicalPlan, required: &BTreeSet<ColumnId>) -> LogicalPlan {
    match plan {
        LogicalPlan::Scan(mut scan) => {
            let filter_columns = columns_of(&scan.filters);
            scan.columns.retain(|(_, c)| required.contains(&c.id) || filter_columns.contains(&c.id));
            LogicalPlan::Scan(scan)
        }
        LogicalPlan::CteScan(mut scan) => {
            scan.columns.retain(|(_, c)| required.contains(&c.id));
            LogicalPlan::CteScan(scan)
        }
        // The recursive term reads every column of the work table, positionally: both
        // terms keep all their columns (pruned inside only).
        LogicalPlan::RecursiveCte { id, name, distinct, anchor, recursive, output } => {
            let anchor_ids = anchor.output_ids();
            let recursive_ids = recursive.output_ids();
            let anchor = Box::new(prune(*anchor, &anchor_ids));
            let recursive = Box::new(prune(*recursive, &recursive_ids));
            LogicalPlan::RecursiveCte { id, name, distinct, anchor, recursive, output }
        }
        scan @ LogicalPlan::WorkTableScan(_) => scan,
        LogicalPlan::Cte { id, name, definition, body } => {
            // The body first: the definition keeps what its references still read (at
            // least one column, so that rows can be counted).
            let body = prune(*body, required);
            let mut needed = BTreeSet::new();
            collect_cte_reads(&body, id, &mut needed);
            if needed.is_empty() {
                needed.extend(definition.output().first().map(|c| c.id));
            }
            let definition = prune(*definition, &needed);
            LogicalPlan::Cte { id, name, definition: Box::new(definition), body: Box::new(body) }
        }
        LogicalPlan::Values { rows, output } => {
            let keep: Vec<bool> = output.iter().map(|c| required.contains(&c.id)).collect();
            let rows = rows.into_iter().map(|r| r.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(e, _)| e).collect()).collect();
            let output = output.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(c, _)| c).collect();
            LogicalPlan::Values { rows, output }
        }
        LogicalPlan::Filter { predicate, input } => {
            let mut needed = required.clone();
            predicate.collect_columns(&mut needed);
            LogicalPlan::Filter { predicate, input: Box::new(prune(*input, &needed)) }
        }
        LogicalPlan::Project { mut exprs, input } => {
            exprs.retain(|(_, c)| required.contains(&c.id));
            let needed = columns_of(exprs.iter().map(|(e, _)| e));
            LogicalPlan::Project { exprs, input: Box::new(prune(*input, &needed)) }
        }
        LogicalPlan::Aggregate { groups, mut aggregates, grouping_sets, input } => {
            aggregates.retain(|(_, c)| required.contains(&c.id));
            let mut needed = columns_of(groups.iter().map(|(e, _)| e));
            for (call, _) in &aggregates {
                needed.extend(columns_of(&call.args));
                if let Some(f) = &call.filter {
                    f.collect_columns(&mut needed);
                }
            }
            LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input: Box::new(prune(*input, &needed)) }
        }
        LogicalPlan::Join { kind, left, right, condition, mark } => {
            let mut needed = required.clone();
            if let Some(c) = &condition {
                c.collect_columns(&mut needed);
            }
            let left = prune(*left, &needed);
            let right = prune(*right, &needed);
            LogicalPlan::Join { kind, left: Box::new(left), right: Box::new(right), condition, mark }
        }
        LogicalPlan::Sort { keys, input } => {
            let mut needed = required.clone();
            needed.extend(columns_of(keys.iter().map(|k| &k.expr)));
            LogicalPlan::Sort { keys, input: Box::new(prune(*input, &needed)) }
        }
        LogicalPlan::Limit { limit, offset, input } => LogicalPlan::Limit { limit, offset, input: Box::new(prune(*input, required)) },
        LogicalPlan::Window { mut windows, input } => {
            windows.retain(|(_, c)| required.contains(&c.id));
            let mut needed = required.clone();
            for (call, _) in &windows {
                needed.extend(columns_of(call.expressions()));
            }
            let input = prune(*input, &needed);
            if windows.is_empty() {
                input
            } else {
                LogicalPlan::Window { windows, input: Box::new(input) }
            }
        }
        LogicalPlan::Union { inputs, output } => {
            let keep: Vec<bool> = output.iter().map(|c| required.contains(&c.id)).collect();
            let inputs = inputs
                .into_iter()
                .map(|input| {
                    let columns = input.output();
                    let exprs: Vec<_> = columns.iter().zip(&keep).filter(|(_, k)| **k).map(|(c, _)| (c.expr(), c.clone())).collect();
                    let needed: BTreeSet<ColumnId> = exprs.iter().map(|(_, c)| c.id).collect();
                    // A projection pins the positional order of the kept columns.
                    LogicalPlan::Project { exprs, input: Box::new(prune(input, &needed)) }
                })
                .collect();
            let output = output.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(c, _)| c).collect();
            LogicalPlan::Union { inputs, output }
        }
    }
}
