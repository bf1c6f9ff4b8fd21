//! Keeps the `nullable` flag of column references in step with the plan.
//!
//! A column reference carries a copy of its column's `nullable` flag, taken where it was
//! bound. Rewrites can put a column below an outer join (unnesting joins subqueries in as
//! single/left joins, decorrelation adds left joins), where it may be NULL although the
//! reference says it cannot be — and GROUP BY, DISTINCT and NOT IN specialise on NOT
//! NULL. This pass marks every reference nullable whose input column is, and widens the
//! columns projections and aggregations produce accordingly.

use std::collections::HashMap;

use apiary_sql::expr::{ColumnId, ColumnRef, Expr};
use apiary_sql::LogicalPlan;

use crate::rules::unnest_subqueries::map_children;

/// Returns `plan` with consistent nullability.
pub fn refresh(plan: LogicalPlan) -> LogicalPlan {
    let plan = map_children(plan, &mut |child| Ok(refresh(child))).expect("infallible rewrite");
    let nullable: HashMap<ColumnId, bool> = plan.children().iter().flat_map(|c| c.output()).map(|c| (c.id, c.nullable)).collect();
    let fix = |e: Expr| -> Expr {
        e.transform_up(&mut |e| match e {
            Expr::Column(c) if !c.nullable && nullable.get(&c.id) == Some(&true) => Expr::Column(ColumnRef { nullable: true, ..c }),
            other => other,
        })
    };
    let widen =
        |column: ColumnRef, e: &Expr| if e.nullable() && !column.nullable { ColumnRef { nullable: true, ..column } } else { column };
    match plan {
        LogicalPlan::Filter { predicate, input } => LogicalPlan::Filter { predicate: fix(predicate), input },
        LogicalPlan::Project { exprs, input } => LogicalPlan::Project {
            exprs: exprs
                .into_iter()
                .map(|(e, c)| {
                    let e = fix(e);
                    let c = widen(c, &e);
                    (e, c)
                })
                .collect(),
            input,
        },
        LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input } => LogicalPlan::Aggregate {
            groups: groups
                .into_iter()
                .map(|(e, c)| {
                    let e = fix(e);
                    let c = widen(c, &e);
                    (e, c)
                })
                .collect(),
            aggregates: aggregates
                .into_iter()
                .map(|(mut call, c)| {
                    call.args = call.args.into_iter().map(fix).collect();
                    call.filter = call.filter.map(|f| Box::new(fix(*f)));
                    (call, c)
                })
                .collect(),
            grouping_sets,
            input,
        },
        LogicalPlan::Join { kind, left, right, condition, mark } => {
            LogicalPlan::Join { kind, left, right, condition: condition.map(fix), mark }
        }
        LogicalPlan::Window { windows, input } => {
            LogicalPlan::Window { windows: windows.into_iter().map(|(w, c)| (w.map_expressions(&mut |e| fix(e)), c)).collect(), input }
        }
        LogicalPlan::Sort { keys, input } => LogicalPlan::Sort {
            keys: keys
                .into_iter()
                .map(|mut k| {
                    k.expr = fix(k.expr);
                    k
                })
                .collect(),
            input,
        },
        LogicalPlan::Union { inputs, output } => {
            // A union column may be NULL when any input's column at that position may.
            let output = output
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    let any = inputs.iter().any(|input| input.output().get(i).is_some_and(|o| o.nullable));
                    if any && !c.nullable {
                        ColumnRef { nullable: true, ..c }
                    } else {
                        c
                    }
                })
                .collect();
            LogicalPlan::Union { inputs, output }
        }
        LogicalPlan::Scan(mut scan) => {
            scan.filters = scan.filters.into_iter().map(fix).collect();
            LogicalPlan::Scan(scan)
        }
        other @ (LogicalPlan::Values { .. }
        | LogicalPlan::Limit { .. }
        | LogicalPlan::CteScan(_)
        | LogicalPlan::RecursiveCte { .. }
        | LogicalPlan::WorkTableScan(_)) => other,
        LogicalPlan::Cte { id, name, definition, body } => {
            // The references read the definition's columns: where one became nullable,
            // so do the references' columns (and, refreshed again, what reads them).
            let nullable: Vec<ColumnId> = definition.output().iter().filter(|c| c.nullable).map(|c| c.id).collect();
            let mut widened = false;
            let body = widen_cte_scans(*body, id, &nullable, &mut widened);
            let body = if widened { refresh(body) } else { body };
            LogicalPlan::Cte { id, name, definition, body: Box::new(body) }
        }
    }
}

/// Marks nullable the columns of the scans of CTE `id` whose source is in `nullable`.
fn widen_cte_scans(plan: LogicalPlan, id: usize, nullable: &[ColumnId], widened: &mut bool) -> LogicalPlan {
    match plan {
        LogicalPlan::CteScan(mut scan) if scan.id == id => {
            for (source, column) in scan.columns.iter_mut() {
                if !column.nullable && nullable.contains(source) {
                    column.nullable = true;
                    *widened = true;
                }
            }
            LogicalPlan::CteScan(scan)
        }
        // Runs after unnesting: no subquery in an expression is left to read the CTE.
        other => map_children(other, &mut |child| Ok(widen_cte_scans(child, id, nullable, widened))).expect("infallible rewrite"),
    }
}
