//! `pre_aggregate_grouping_sets`: a grouping-sets aggregation first groups its input by
//! all of its keys, then computes the sets from those groups.
//!
//! ```text
//!   Aggregate sets=[(a, b), (a), ()] aggs=[sum(x), avg(y), count(*)] over I
//!     ─▶ Project [sum, average_of(s, c), coalesce(n, 0)]
//!          Aggregate sets=[(a, b), (a), ()] aggs=[sum(sx), sum(sy), sum(cy), sum(n)]
//!            Aggregate GROUP BY a, b aggs=[sum(x) sx, sum(y) sy, count(y) cy, count(*) n] over I
//! ```
//!
//! The grouping-sets operator groups every input row once per set; after the
//! pre-aggregation it does so for one row per group of the finest set instead. TPC-DS
//! Q22 rolls up 11.7M inventory rows over five sets (four key prefixes and the total):
//! five hash lookups per row become one, and the sets are computed from ~10K groups.
//!
//! Applied when every aggregate can be merged from partial results (count, sum, avg of
//! numbers, min, max, any_value, bool_and/or; not DISTINCT except in min/max, not ORDER
//! BY inside the call) and no key is estimated to be nearly unique: when nearly every row
//! is its own group the pre-aggregation is one more pass that saves nothing.

use apiary_common::Result;
use apiary_sql::expr::{AggregateCall, ColumnRef, Expr};
use apiary_sql::LogicalPlan;

use crate::cardinality::estimate;
use crate::rules::partial_aggregates::{mergeable, split, SplitAggregates};
use crate::rules::unnest_subqueries::map_children;
use crate::OptimizerContext;

/// A pre-aggregation that keeps more than this share of the input rows saves less than it
/// costs.
const MAX_GROUP_SHARE: f64 = 0.5;

pub fn run(plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    rewrite(plan, ctx)
}

fn rewrite(plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    let plan = map_children(plan, &mut |child| rewrite(child, ctx))?;
    match plan {
        LogicalPlan::Aggregate { groups, aggregates, grouping_sets: Some(sets), input }
            if worth_pre_aggregating(&groups, &aggregates, &input) =>
        {
            Ok(pre_aggregate(groups, aggregates, sets, *input, ctx))
        }
        other => Ok(other),
    }
}

fn worth_pre_aggregating(groups: &[(Expr, ColumnRef)], aggregates: &[(AggregateCall, ColumnRef)], input: &LogicalPlan) -> bool {
    if groups.is_empty() || !aggregates.iter().all(|(call, _)| mergeable(call)) {
        return false;
    }
    // The finest set has at least as many groups as its most distinct key. The product of
    // the keys' distinct counts would be an upper bound that hierarchies of keys (product,
    // brand, class, category) overshoot by orders of magnitude, so only a key known to be
    // nearly unique on its own rules the pre-aggregation out.
    let input = estimate(input);
    let fewest_groups = groups
        .iter()
        .filter(|(expr, _)| matches!(expr, Expr::Column(_) | Expr::Cast { .. }))
        .map(|(expr, _)| input.ndv(expr))
        .fold(1.0, f64::max);
    fewest_groups <= input.rows * MAX_GROUP_SHARE
}

fn pre_aggregate(
    groups: Vec<(Expr, ColumnRef)>,
    aggregates: Vec<(AggregateCall, ColumnRef)>,
    sets: apiary_sql::GroupingSets,
    input: LogicalPlan,
    ctx: &mut OptimizerContext,
) -> LogicalPlan {
    // The pre-aggregation's keys are the original key expressions; the grouping-sets
    // aggregation groups its output columns into the original key columns.
    let mut fine_groups = Vec::with_capacity(groups.len());
    let mut set_groups = Vec::with_capacity(groups.len());
    let mut outputs = Vec::with_capacity(groups.len() + 1 + aggregates.len());
    for (expr, column) in groups {
        let fine = ctx.new_column(&column.name, expr.data_type(), expr.nullable());
        set_groups.push((fine.expr(), column.clone()));
        outputs.push((column.expr(), column));
        fine_groups.push((expr, fine));
    }
    outputs.push((sets.id.expr(), sets.id.clone()));
    let SplitAggregates { partials, merges, results } = split(aggregates, true, ctx);
    outputs.extend(results);
    let fine = LogicalPlan::Aggregate { groups: fine_groups, aggregates: partials, grouping_sets: None, input: Box::new(input) };
    let coarse = LogicalPlan::Aggregate { groups: set_groups, aggregates: merges, grouping_sets: Some(sets), input: Box::new(fine) };
    LogicalPlan::Project { exprs: outputs, input: Box::new(coarse) }
}
