//! `merge_scalar_aggregates`: aggregations without GROUP BY over the same table, each
//! with its own filter, that are cross-joined (scalar subqueries in a SELECT list, derived
//! tables listed in FROM) are computed by one scan and one aggregation, each aggregate
//! keeping only the rows of its own filter (`FILTER (WHERE ...)`).
//!
//! ```text
//!   Join (cross)                                Aggregate  count(*) FILTER (WHERE q <= 20),
//!     Aggregate  count(*)                   ─▶             avg(p) FILTER (WHERE q > 20)
//!       Scan sales filters=[q <= 20]              Scan sales filters=[(q <= 20) OR (q > 20)]
//!     Aggregate  avg(p)
//!       Scan sales filters=[q > 20]
//! ```
//!
//! TPC-DS Q09 reads `store_sales` fifteen times for counts and averages of five quantity
//! buckets, Q28 six times: merged, the table is read once. An aggregation without GROUP BY
//! has exactly one row, so a cross join with it (or a SINGLE join of the one-row VALUES
//! that a scalar subquery in a SELECT without FROM is joined to) only appends its columns,
//! wherever it sits in the join tree.
//!
//! The merged scan keeps what all the members' filters imply: their common conjuncts that
//! cannot fail and, where every member bounds a column by literals, the hull of their
//! ranges, as plain range conjuncts that zone maps test, so the blocks no member reads are
//! still skipped. Merged are only members whose aggregates read columns or literals and
//! have no FILTER of their own: an argument or
//! filter evaluated on the other members' rows must not be able to fail.

use std::collections::BTreeMap;
use std::sync::Arc;

use apiary_common::Result;
use apiary_sql::expr::{AggregateCall, BinaryOp, ColumnId, ColumnRef, Expr};
use apiary_sql::plan::Scan;
use apiary_sql::{JoinKind, LogicalPlan};
use apiary_types::ScalarValue;

use crate::rules::push_down_predicates::factor_disjunction;
use crate::rules::unnest_subqueries::map_children;
use crate::OptimizerContext;

pub fn run(plan: LogicalPlan, _ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    rewrite(plan)
}

fn rewrite(plan: LogicalPlan) -> Result<LogicalPlan> {
    if !is_cross_join(&plan) || {
        let mut leaves = Vec::new();
        flatten_ref(&plan, &mut leaves);
        groups_of(&leaves.iter().map(|l| member(l)).collect::<Vec<_>>()).is_empty()
    } {
        return map_children(plan, &mut rewrite);
    }
    let output = plan.output();
    let mut leaves = Vec::new();
    flatten(plan, &mut leaves);
    let leaves = leaves.into_iter().map(rewrite).collect::<Result<Vec<_>>>()?;
    let members: Vec<Option<Member>> = leaves.iter().map(member).collect();
    let groups = groups_of(&members);
    let merged: Vec<LogicalPlan> =
        groups.iter().map(|g| merge(g.iter().map(|&i| members[i].as_ref().expect("grouped leaves are members")).collect())).collect();
    drop(members);
    let mut slots: Vec<Option<LogicalPlan>> = leaves.into_iter().map(Some).collect();
    for (group, merged) in groups.iter().zip(merged) {
        for &i in &group[1..] {
            slots[i] = None;
        }
        slots[group[0]] = Some(merged);
    }
    let mut remaining = slots.into_iter().flatten();
    let first = remaining.next().expect("a cross join has leaves");
    let joined = remaining.fold(first, |left, right| LogicalPlan::Join {
        kind: JoinKind::Inner,
        left: Box::new(left),
        right: Box::new(right),
        condition: None,
        mark: None,
    });
    // A merged member's columns moved to the first member's place: consumers that read
    // columns by position (a UNION input) get them in the original order.
    if joined.output().iter().map(|c| c.id).eq(output.iter().map(|c| c.id)) {
        return Ok(joined);
    }
    Ok(LogicalPlan::Project { exprs: output.into_iter().map(|c| (c.expr(), c)).collect(), input: Box::new(joined) })
}

/// Members over the same table (two or more), by position, in the order they appear.
fn groups_of(members: &[Option<Member>]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let Some(m) = m else { continue };
        match groups.iter_mut().find(|g| members[g[0]].as_ref().is_some_and(|first| Arc::ptr_eq(&first.scan.table, &m.scan.table))) {
            Some(group) => group.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups.retain(|g| g.len() > 1);
    groups
}

fn is_cross_join(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Join { kind: JoinKind::Inner, condition: None, mark: None, .. })
}

/// The inputs of a tree of cross joins, left to right.
fn flatten(plan: LogicalPlan, leaves: &mut Vec<LogicalPlan>) {
    match plan {
        LogicalPlan::Join { kind: JoinKind::Inner, left, right, condition: None, mark: None } => {
            flatten(*left, leaves);
            flatten(*right, leaves);
        }
        other => leaves.push(other),
    }
}

/// [`flatten`] by reference.
fn flatten_ref<'a>(plan: &'a LogicalPlan, leaves: &mut Vec<&'a LogicalPlan>) {
    match plan {
        LogicalPlan::Join { kind: JoinKind::Inner, left, right, condition: None, mark: None } => {
            flatten_ref(left, leaves);
            flatten_ref(right, leaves);
        }
        other => leaves.push(other),
    }
}

/// A one-row aggregation over a scan that can be merged with others over its table.
struct Member<'a> {
    /// The projection over the aggregation, if any.
    project: Option<&'a [(Expr, ColumnRef)]>,
    aggregates: &'a [(AggregateCall, ColumnRef)],
    scan: &'a Scan,
}

fn member(plan: &LogicalPlan) -> Option<Member<'_>> {
    // A scalar subquery of a SELECT without FROM: the one-row, column-less VALUES joined
    // (SINGLE) to the subquery's one row is that row.
    let plan = match plan {
        LogicalPlan::Join { kind: JoinKind::Single, left, right, condition: None, mark: None } if matches!(left.as_ref(), LogicalPlan::Values { rows, output } if rows.len() == 1 && output.is_empty()) => {
            right.as_ref()
        }
        other => other,
    };
    let (project, aggregate) = match plan {
        LogicalPlan::Project { exprs, input } => (Some(exprs.as_slice()), input.as_ref()),
        other => (None, other),
    };
    let LogicalPlan::Aggregate { groups, aggregates, grouping_sets: None, input } = aggregate else { return None };
    let LogicalPlan::Scan(scan) = input.as_ref() else { return None };
    let plain = |e: &Expr| matches!(e, Expr::Column(_) | Expr::Literal(..));
    let mergeable = groups.is_empty()
        && !aggregates.is_empty()
        && aggregates.iter().all(|(call, _)| call.filter.is_none() && call.args.iter().all(plain))
        && !scan.filters.iter().any(Expr::contains_subquery);
    mergeable.then_some(Member { project, aggregates, scan })
}

/// One scan and aggregation computing every member's aggregates, under the members'
/// output columns, in their order.
fn merge(members: Vec<&Member>) -> LogicalPlan {
    let first = members[0].scan;
    let mut columns: Vec<(usize, ColumnRef)> = Vec::new();
    let mut renamed: BTreeMap<ColumnId, Expr> = BTreeMap::new();
    for m in &members {
        for (index, column) in &m.scan.columns {
            match columns.iter().find(|(i, _)| i == index) {
                Some((_, existing)) => {
                    renamed.insert(column.id, existing.expr());
                }
                None => columns.push((*index, column.clone())),
            }
        }
    }
    let rename = |e: &Expr| e.clone().replace_columns(&|c: &ColumnRef| renamed.get(&c.id).cloned());
    let filters: Vec<Option<Expr>> = members.iter().map(|m| Expr::conjunction(m.scan.filters.iter().map(rename))).collect();
    let mut aggregates = Vec::new();
    for (m, filter) in members.iter().zip(&filters) {
        for (call, column) in m.aggregates {
            let call = AggregateCall { args: call.args.iter().map(rename).collect(), filter: filter.clone().map(Box::new), ..call.clone() };
            aggregates.push((call, column.clone()));
        }
    }
    // The scan keeps what every member's filter implies: the hull of their ranges and
    // their common conjuncts, not the disjunction of the filters itself, which would
    // evaluate each filter a second time (the aggregates' FILTERs decide anyway). Without
    // a filter, a member reads every row, and so does the merged scan.
    let scan_filters = match filters.iter().cloned().collect::<Option<Vec<Expr>>>() {
        Some(filters) => {
            let mut conjuncts = range_hull(&filters);
            let either = factor_disjunction(Expr::disjunction(filters).expect("members"));
            // Its common conjuncts (factoring keeps them safe to run on every row), not
            // the disjunction of what remains of each filter.
            for conjunct in either.split_conjunction() {
                let remainders = matches!(conjunct, Expr::Binary { op: BinaryOp::Or, .. });
                if !remainders && !conjuncts.contains(&conjunct) {
                    conjuncts.push(conjunct);
                }
            }
            conjuncts
        }
        None => Vec::new(),
    };
    let scan = Scan { table: Arc::clone(&first.table), label: first.label.clone(), columns, filters: scan_filters };
    let aggregate =
        LogicalPlan::Aggregate { groups: Vec::new(), aggregates, grouping_sets: None, input: Box::new(LogicalPlan::Scan(scan)) };
    if members.iter().all(|m| m.project.is_none()) {
        return aggregate;
    }
    // The members' projections read only their aggregates' columns, which keep their ids.
    let exprs = members
        .iter()
        .flat_map(|m| match m.project {
            Some(exprs) => exprs.to_vec(),
            None => m.aggregates.iter().map(|(_, c)| (c.expr(), c.clone())).collect(),
        })
        .collect();
    LogicalPlan::Project { exprs, input: Box::new(aggregate) }
}

/// For each column that every filter bounds below (above) by a literal, the lowest lower
/// (highest upper) bound, as range conjuncts: implied by the disjunction of the filters,
/// and testable on zone maps.
fn range_hull(filters: &[Expr]) -> Vec<Expr> {
    /// A bound: its value, whether it is inclusive, and the conjunct stating it.
    type Bound = Option<(f64, bool, Expr)>;
    let bounds_of = |filter: &Expr| -> BTreeMap<ColumnId, (Bound, Bound)> {
        let mut bounds: BTreeMap<ColumnId, (Bound, Bound)> = BTreeMap::new();
        for conjunct in filter.clone().split_conjunction() {
            let Expr::Binary { op, left, right, .. } = &conjunct else { continue };
            let (column, literal, op) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), l @ Expr::Literal(..)) => (c, l, *op),
                (l @ Expr::Literal(..), Expr::Column(c)) => (c, l, op.flipped()),
                _ => continue,
            };
            let Expr::Literal(value, _) = literal else { continue };
            let Some(x) = numeric(value) else { continue };
            let stated = |op: BinaryOp| Expr::compare(op, Expr::Column(column.clone()), literal.clone());
            let entry = bounds.entry(column.id).or_insert((None, None));
            // The tightest bound of this filter: the one its rows pass.
            let tighter = |new: &(f64, bool), old: &Bound, below: bool| {
                old.as_ref()
                    .is_none_or(|(y, inclusive, _)| if below { new.0 > *y } else { new.0 < *y } || (new.0 == *y && !new.1 && *inclusive))
            };
            let (lower, upper) = match op {
                BinaryOp::Eq => (Some((x, true, stated(BinaryOp::GtEq))), Some((x, true, stated(BinaryOp::LtEq)))),
                BinaryOp::Gt | BinaryOp::GtEq => (Some((x, op == BinaryOp::GtEq, stated(op))), None),
                BinaryOp::Lt | BinaryOp::LtEq => (None, Some((x, op == BinaryOp::LtEq, stated(op)))),
                _ => continue,
            };
            if let Some(lower) = lower.filter(|l| tighter(&(l.0, l.1), &entry.0, true)) {
                entry.0 = Some(lower);
            }
            if let Some(upper) = upper.filter(|u| tighter(&(u.0, u.1), &entry.1, false)) {
                entry.1 = Some(upper);
            }
        }
        bounds
    };
    let all: Vec<BTreeMap<ColumnId, (Bound, Bound)>> = filters.iter().map(bounds_of).collect();
    let mut hull = Vec::new();
    for column in all[0].keys() {
        let per_filter: Option<Vec<&(Bound, Bound)>> = all.iter().map(|b| b.get(column)).collect();
        let Some(per_filter) = per_filter else { continue };
        // The loosest of the filters' bounds: every filter's rows pass it.
        let loosest = |pick: &dyn Fn(&(Bound, Bound)) -> &Bound, below: bool| -> Option<Expr> {
            let mut best: Option<&(f64, bool, Expr)> = None;
            for bounds in &per_filter {
                let bound = pick(bounds).as_ref()?;
                let looser = best.is_none_or(|(y, inclusive, _)| {
                    (if below { bound.0 < *y } else { bound.0 > *y }) || (bound.0 == *y && bound.1 && !*inclusive)
                });
                if looser {
                    best = Some(bound);
                }
            }
            best.map(|(_, _, e)| e.clone())
        };
        hull.extend(loosest(&|b| &b.0, true));
        hull.extend(loosest(&|b| &b.1, false));
    }
    hull
}

/// A literal's value on a number line, for comparing bounds of one column.
fn numeric(value: &ScalarValue) -> Option<f64> {
    match value {
        ScalarValue::Int16(_)
        | ScalarValue::Int32(_)
        | ScalarValue::Int64(_)
        | ScalarValue::Decimal(..)
        | ScalarValue::Float32(_)
        | ScalarValue::Float64(_)
        | ScalarValue::Date(_)
        | ScalarValue::Timestamp(_) => value.as_f64(),
        _ => None,
    }
}
