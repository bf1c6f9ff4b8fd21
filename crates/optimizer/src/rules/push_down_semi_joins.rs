//! `push_down_semi_joins`: moves semi and anti joins below inner joins and filters.
//!
//! `(A ⋈ B) ⋉ C` = `(A ⋉ C) ⋈ B` when the semi join's condition reads only A's columns
//! (and C's); likewise for anti joins. Subqueries unnest into semi/anti joins on top of the
//! whole FROM clause; pushed down to the one relation they filter, they shrink it before
//! the join ordering sees it (TPC-H Q18: orders ⋉ big-orders before joining lineitem).
//!
//! Only when the subquery side is not larger than the relation it would filter: a big
//! subquery side (TPC-H Q21's lineitem) is cheaper to join after the other joins have
//! reduced the rows.

use std::collections::BTreeSet;

use apiary_common::Result;
use apiary_sql::expr::{ColumnId, Expr};
use apiary_sql::{JoinKind, LogicalPlan};

use crate::rules::unnest_subqueries::map_children;
use crate::OptimizerContext;

pub fn run(plan: LogicalPlan, _ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    push(plan)
}

fn is_filtering(kind: JoinKind) -> bool {
    matches!(kind, JoinKind::Semi | JoinKind::Anti { .. })
}

fn push(plan: LogicalPlan) -> Result<LogicalPlan> {
    let plan = map_children(plan, &mut push)?;
    let LogicalPlan::Join { kind, left, right, condition, mark } = plan else { return Ok(plan) };
    if !is_filtering(kind) {
        return Ok(LogicalPlan::Join { kind, left, right, condition, mark });
    }
    // Columns of the preserved side the condition needs.
    let right_ids = right.output_ids();
    let needed: BTreeSet<ColumnId> =
        condition.as_ref().map(|c| c.columns().into_iter().filter(|id| !right_ids.contains(id)).collect()).unwrap_or_default();
    Ok(sink(kind, *left, *right, condition, mark, &needed))
}

/// Places the semi/anti join as deep in `left` as the needed columns allow.
fn sink(
    kind: JoinKind,
    left: LogicalPlan,
    right: LogicalPlan,
    condition: Option<Expr>,
    mark: Option<apiary_sql::ColumnRef>,
    needed: &BTreeSet<ColumnId>,
) -> LogicalPlan {
    match left {
        LogicalPlan::Join { kind: JoinKind::Inner, left: a, right: b, condition: inner_condition, mark: inner_mark }
            if !needed.is_empty() =>
        {
            let right_rows = crate::cardinality::estimate(&right).rows;
            let worth = |target: &LogicalPlan| right_rows <= crate::cardinality::estimate(target).rows;
            if needed.is_subset(&a.output_ids()) && worth(&a) {
                let a = sink(kind, *a, right, condition, mark, needed);
                LogicalPlan::Join { kind: JoinKind::Inner, left: Box::new(a), right: b, condition: inner_condition, mark: inner_mark }
            } else if needed.is_subset(&b.output_ids()) && worth(&b) {
                let b = sink(kind, *b, right, condition, mark, needed);
                LogicalPlan::Join { kind: JoinKind::Inner, left: a, right: Box::new(b), condition: inner_condition, mark: inner_mark }
            } else {
                let left = LogicalPlan::Join { kind: JoinKind::Inner, left: a, right: b, condition: inner_condition, mark: inner_mark };
                LogicalPlan::Join { kind, left: Box::new(left), right: Box::new(right), condition, mark }
            }
        }
        LogicalPlan::Filter { predicate, input } => {
            let input = sink(kind, *input, right, condition, mark, needed);
            LogicalPlan::Filter { predicate, input: Box::new(input) }
        }
        other => LogicalPlan::Join { kind, left: Box::new(other), right: Box::new(right), condition, mark },
    }
}
