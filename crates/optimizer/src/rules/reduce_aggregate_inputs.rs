//! `reduce_aggregate_inputs`: semi-join reduction of aggregations that are joined on their
//! group keys (a "magic set" for decorrelated subqueries).
//!
//! ```text
//!   X ⋈ (Aggregate GROUP BY k over I)  ON x.a = k        (inner, or left with X preserved)
//!     ─▶ X ⋈ (Aggregate GROUP BY k over (I ⋉ R' ON k = r.a))
//! ```
//! where `R` is the smallest relation inside `X` that provides the join key columns
//! (a filtered scan, or a scan with semi joins), and `R'` a copy of it. Groups whose key
//! no row of `X` has could never join, so computing them is wasted work. TPC-H Q17 and
//! Q2 aggregate a whole table per key but need only the keys of a few hundred parts; Q20
//! only the part-supplier pairs of "forest" parts.
//!
//! Applied when the estimated rows of `R` are well below the aggregation's input.

use std::collections::{BTreeSet, HashMap};

use apiary_common::Result;
use apiary_sql::expr::{BinaryOp, ColumnId, ColumnRef, Expr};
use apiary_sql::plan::Scan;
use apiary_sql::{JoinKind, LogicalPlan};

use crate::cardinality::estimate;
use crate::rules::unnest_subqueries::map_children;
use crate::OptimizerContext;

/// The reducer must be at least this many times smaller than the aggregation input.
const MIN_REDUCTION: f64 = 4.0;

pub fn run(plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    reduce(plan, ctx)
}

fn reduce(plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    let plan = map_children(plan, &mut |child| reduce(child, ctx))?;
    let LogicalPlan::Join { kind, left, right, condition, mark } = plan else { return Ok(plan) };
    let Some(cond) = condition.clone() else {
        return Ok(LogicalPlan::Join { kind, left, right, condition, mark });
    };
    // The aggregation may be on the right (inner/left/single joins) or left (inner).
    let (left, right) = match kind {
        JoinKind::Inner | JoinKind::Left | JoinKind::Single => {
            let right = match try_reduce(*right, &left, &cond, ctx)? {
                Ok(reduced) => Box::new(reduced),
                Err(unchanged) => Box::new(unchanged),
            };
            let left = if kind == JoinKind::Inner {
                match try_reduce(*left, &right, &cond, ctx)? {
                    Ok(reduced) => Box::new(reduced),
                    Err(unchanged) => Box::new(unchanged),
                }
            } else {
                left
            };
            (left, right)
        }
        _ => (left, right),
    };
    Ok(LogicalPlan::Join { kind, left, right, condition, mark })
}

/// If `side` is `[Project] Aggregate` joined with `other` on group keys, adds the semi
/// join to its input. `Err(side)` when not applicable.
fn try_reduce(
    side: LogicalPlan,
    other: &LogicalPlan,
    condition: &Expr,
    ctx: &mut OptimizerContext,
) -> Result<Result<LogicalPlan, LogicalPlan>> {
    // Where each output column of `side` comes from, as an expression over the aggregate
    // input (group keys only).
    let (projection, aggregate) = match side {
        // With grouping sets a key's NULL may stand for every value: no reduction.
        LogicalPlan::Project { exprs, input } if matches!(*input, LogicalPlan::Aggregate { grouping_sets: None, .. }) => {
            (Some(exprs), *input)
        }
        agg @ LogicalPlan::Aggregate { grouping_sets: None, .. } => (None, agg),
        other => return Ok(Err(other)),
    };
    let LogicalPlan::Aggregate { groups, aggregates, input, .. } = aggregate else { unreachable!("matched above") };
    let rebuild = |groups, aggregates, input, projection: Option<Vec<(Expr, ColumnRef)>>| {
        let aggregate = LogicalPlan::Aggregate { groups, aggregates, grouping_sets: None, input };
        match projection {
            Some(exprs) => LogicalPlan::Project { exprs, input: Box::new(aggregate) },
            None => aggregate,
        }
    };
    let group_source: HashMap<ColumnId, Expr> = groups.iter().map(|(e, c)| (c.id, e.clone())).collect();
    let mut source = group_source.clone();
    if let Some(exprs) = &projection {
        for (e, c) in exprs {
            if let Expr::Column(inner) = e {
                if let Some(g) = group_source.get(&inner.id) {
                    source.insert(c.id, g.clone());
                }
            }
        }
    }
    let other_ids = other.output_ids();
    // Equalities `other_expr = side_column` whose side column is a group key.
    let mut pairs: Vec<(Expr, Expr)> = Vec::new();
    for conjunct in condition.clone().split_conjunction() {
        if let Expr::Binary { op: BinaryOp::Eq, left: a, right: b, .. } = &conjunct {
            for (x, y) in [(a, b), (b, a)] {
                if let Expr::Column(c) = y.as_ref() {
                    let x_cols = x.columns();
                    if let Some(group_expr) = source.get(&c.id) {
                        if !x_cols.is_empty() && x_cols.iter().all(|id| other_ids.contains(id)) {
                            pairs.push(((**x).clone(), group_expr.clone()));
                        }
                    }
                }
            }
        }
    }
    if pairs.is_empty() || matches!(*input, LogicalPlan::Join { kind: JoinKind::Semi, .. }) {
        return Ok(Err(rebuild(groups, aggregates, input, projection)));
    }
    let needed: BTreeSet<ColumnId> = pairs.iter().flat_map(|(x, _)| x.columns()).collect();
    let Some(relation) = smallest_provider(other, &needed) else {
        return Ok(Err(rebuild(groups, aggregates, input, projection)));
    };
    let relation_rows = estimate(relation).rows;
    let input_rows = estimate(&input).rows;
    if relation_rows * MIN_REDUCTION > input_rows || !cheap_to_repeat(relation) {
        return Ok(Err(rebuild(groups, aggregates, input, projection)));
    }
    let mut map = HashMap::new();
    let copy = clone_fresh(relation, ctx, &mut map);
    let as_exprs: HashMap<ColumnId, Expr> = map.iter().map(|(k, v): (&ColumnId, &ColumnRef)| (*k, v.expr())).collect();
    let semi_condition =
        Expr::conjunction(pairs.into_iter().map(|(x, g)| Expr::compare(BinaryOp::Eq, g, x.replace_columns_deep(&as_exprs))));
    let reduced_input =
        LogicalPlan::Join { kind: JoinKind::Semi, left: input, right: Box::new(copy), condition: semi_condition, mark: None };
    Ok(Ok(rebuild(groups, aggregates, Box::new(reduced_input), projection)))
}

/// The smallest subtree of `plan` (through inner joins, filters and projections) whose
/// output has all of `needed`.
fn smallest_provider<'a>(plan: &'a LogicalPlan, needed: &BTreeSet<ColumnId>) -> Option<&'a LogicalPlan> {
    if !needed.is_subset(&plan.output_ids()) {
        return None;
    }
    let deeper = match plan {
        LogicalPlan::Join { kind: JoinKind::Inner, left, right, .. } => {
            smallest_provider(left, needed).or_else(|| smallest_provider(right, needed))
        }
        LogicalPlan::Filter { input, .. } | LogicalPlan::Project { input, .. } => smallest_provider(input, needed),
        _ => None,
    };
    deeper.or(Some(plan))
}

/// Scans with filters, optionally semi-joined with other such relations: cheap to
/// evaluate a second time.
fn cheap_to_repeat(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Scan(_) => true,
        LogicalPlan::Filter { input, .. } | LogicalPlan::Project { input, .. } => cheap_to_repeat(input),
        LogicalPlan::Join { kind: JoinKind::Semi, left, right, .. } => cheap_to_repeat(left) && cheap_to_repeat(right),
        _ => false,
    }
}

fn plan_outputs(plan: &LogicalPlan) -> Vec<ColumnRef> {
    match plan {
        LogicalPlan::Project { exprs, .. } => exprs.iter().map(|(_, c)| c.clone()).collect(),
        other => other.output(),
    }
}

/// A copy of `plan` whose every produced column has a fresh id; `map` records old -> new.
pub(crate) fn clone_fresh(plan: &LogicalPlan, ctx: &mut OptimizerContext, map: &mut HashMap<ColumnId, ColumnRef>) -> LogicalPlan {
    let fresh = |c: &ColumnRef, ctx: &mut OptimizerContext, map: &mut HashMap<ColumnId, ColumnRef>| {
        let new = ctx.new_column(&c.name, c.data_type, c.nullable);
        map.insert(c.id, new.clone());
        new
    };
    let remap = |e: &Expr, map: &HashMap<ColumnId, ColumnRef>| {
        let exprs: HashMap<ColumnId, Expr> = map.iter().map(|(k, v)| (*k, v.expr())).collect();
        e.clone().replace_columns_deep(&exprs)
    };
    match plan {
        LogicalPlan::Scan(scan) => {
            let columns = scan.columns.iter().map(|(i, c)| (*i, fresh(c, ctx, map))).collect();
            let filters = scan.filters.iter().map(|f| remap(f, map)).collect();
            LogicalPlan::Scan(Scan { table: scan.table.clone(), label: scan.label.clone(), columns, filters })
        }
        LogicalPlan::Filter { predicate, input } => {
            let input = clone_fresh(input, ctx, map);
            LogicalPlan::Filter { predicate: remap(predicate, map), input: Box::new(input) }
        }
        LogicalPlan::Project { exprs, input } => {
            let input = clone_fresh(input, ctx, map);
            // All expressions first: an output passed through under its input's id must
            // not be renamed before the later expressions read that input.
            let exprs: Vec<Expr> = exprs.iter().map(|(e, _)| remap(e, map)).collect();
            let exprs = exprs.into_iter().zip(plan_outputs(plan)).map(|(e, c)| (e, fresh(&c, ctx, map))).collect();
            LogicalPlan::Project { exprs, input: Box::new(input) }
        }
        LogicalPlan::Join { kind, left, right, condition, mark } => {
            let left = clone_fresh(left, ctx, map);
            let right = clone_fresh(right, ctx, map);
            let condition = condition.as_ref().map(|c| remap(c, map));
            let mark = mark.as_ref().map(|m| fresh(m, ctx, map));
            LogicalPlan::Join { kind: *kind, left: Box::new(left), right: Box::new(right), condition, mark }
        }
        // Only the shapes accepted by `cheap_to_repeat` are cloned.
        other => other.clone(),
    }
}
