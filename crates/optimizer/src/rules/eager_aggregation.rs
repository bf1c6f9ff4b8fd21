//! `eager_aggregation`: an aggregation over a star of inner joins aggregates the fact side
//! before joining the tables that only provide group keys ("eager group-by", Yan and
//! Larson).
//!
//! ```text
//!   Aggregate GROUP BY i.name, i.brand  aggs=[sum(f.q)]
//!     (fact f ⋈ date d ON f.d = d.k  [d filtered]) ⋈ item i ON f.item = i.k
//!   ─▶ Aggregate GROUP BY i.name, i.brand  aggs=[sum(s)]
//!        (Aggregate GROUP BY f.item  aggs=[sum(f.q) s]  over (fact f ⋈ date d)) ⋈ item i ON f.item = i.k
//! ```
//!
//! The relations joined below the pre-aggregation (the *core*) are those whose columns the
//! aggregates read, and those that only filter (no column of theirs is needed above the
//! joins); the relations that provide group keys are joined after it, on the fact side's
//! key columns, which the pre-aggregation groups by together with the core's own group
//! keys. A pre-aggregated row stands for rows that agree on every column needed above it,
//! so every join and filter above treats them alike, and merging the partial aggregates
//! (sum of sums, sum of counts, min of mins, ...) gives the original results, also when a
//! key matches several rows (each match merges the partials once, as each row would have).
//!
//! TPC-DS Q22 groups 2.3M inventory rows by four strings of `item`: the strings are
//! gathered for every row by the join and hashed by the aggregation. Grouped first by the
//! integer `inv_item_sk` (18,000 groups), only 18,000 rows reach the join and the strings.
//!
//! Applied when every aggregate can be merged, the input is a tree of inner equi-joins
//! with at least one relation outside the core, and the pre-aggregation's estimated
//! groups (the distinct combinations of its keys' distinct counts that the core's rows
//! are expected to hit) are at most a quarter of the core's rows (0.6 when a final key
//! is a string, which makes every row left for the joins and the final aggregation
//! dearer), and the joins with the rest are not estimated to drop more than half of the
//! core's rows (those would better be dropped before aggregating).

use std::collections::{BTreeSet, HashMap};

use apiary_common::Result;
use apiary_sql::expr::{AggregateCall, BinaryOp, ColumnId, ColumnRef, Expr};
use apiary_sql::{JoinKind, LogicalPlan};

use crate::cardinality::{estimate, Estimate};
use crate::rules::partial_aggregates::{mergeable, split, SplitAggregates};
use crate::rules::unnest_subqueries::map_children;
use crate::OptimizerContext;

/// The pre-aggregation must keep at most this share of the core's rows.
const MAX_GROUP_SHARE: f64 = 0.25;

/// The share allowed when a final group key is a string. Every row removed by the
/// pre-aggregation then saves gathering the strings in the joins and hashing and comparing
/// them in the final aggregation: measured on TPC-DS Q04 (seven customer strings), about
/// 340 ns per row against 40 ns for pre-aggregating by two integers, so even a share of
/// 0.8 would pay; 0.6 leaves room for the estimate's error.
const MAX_GROUP_SHARE_STRING_KEYS: f64 = 0.6;

/// The joins with the rest must keep at least this share of the core's rows.
const MIN_KEPT_BY_REST: f64 = 0.5;

pub fn run(plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    rewrite(plan, ctx)
}

fn rewrite(plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    let plan = map_children(plan, &mut |child| rewrite(child, ctx))?;
    match plan {
        LogicalPlan::Aggregate { groups, aggregates, grouping_sets: None, input }
            if !groups.is_empty() && !aggregates.is_empty() && aggregates.iter().all(|(call, _)| mergeable(call)) =>
        {
            match eager(&groups, &aggregates, &input, ctx) {
                Some(plan) => Ok(plan),
                None => Ok(LogicalPlan::Aggregate { groups, aggregates, grouping_sets: None, input }),
            }
        }
        other => Ok(other),
    }
}

/// The relations of a tree of inner joins and the conjuncts of their conditions.
struct JoinGraph {
    /// The tree the relations were taken from.
    tree: LogicalPlan,
    relations: Vec<LogicalPlan>,
    outputs: Vec<BTreeSet<ColumnId>>,
    conjuncts: Vec<Expr>,
}

impl JoinGraph {
    fn of(plan: &LogicalPlan) -> JoinGraph {
        let mut graph = JoinGraph { tree: plan.clone(), relations: Vec::new(), outputs: Vec::new(), conjuncts: Vec::new() };
        graph.add(plan);
        graph
    }

    fn add(&mut self, plan: &LogicalPlan) {
        match plan {
            LogicalPlan::Join { kind: JoinKind::Inner, left, right, condition, mark: None } => {
                self.add(left);
                self.add(right);
                self.conjuncts.extend(condition.clone().map(Expr::split_conjunction).unwrap_or_default());
            }
            other => {
                self.outputs.push(other.output_ids());
                self.relations.push(other.clone());
            }
        }
    }

    /// The join tree with the relations outside `core` taken out, in the order the join
    /// ordering chose, each join keeping its conjuncts between core relations. `None`
    /// when a join would be left without a condition (core relations joined only through
    /// others).
    fn core_of(&self, core: &BTreeSet<usize>) -> Option<LogicalPlan> {
        let mut next = 0;
        self.prune(&self.tree, core, &mut next)?
    }

    fn prune(&self, plan: &LogicalPlan, core: &BTreeSet<usize>, next: &mut usize) -> Option<Option<LogicalPlan>> {
        match plan {
            LogicalPlan::Join { kind: JoinKind::Inner, left, right, condition, mark: None } => {
                let left = self.prune(left, core, next)?;
                let right = self.prune(right, core, next)?;
                let kept: Vec<Expr> = condition
                    .clone()
                    .map(Expr::split_conjunction)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|c| self.relations_of(&c.columns()).is_some_and(|rels| rels.is_subset(core)))
                    .collect();
                let condition = Expr::conjunction(kept);
                match (left, right) {
                    (Some(left), Some(right)) => {
                        condition.as_ref()?;
                        Some(Some(LogicalPlan::Join {
                            kind: JoinKind::Inner,
                            left: Box::new(left),
                            right: Box::new(right),
                            condition,
                            mark: None,
                        }))
                    }
                    // A conjunct between core relations left at a join with a relation
                    // taken out still filters the core.
                    (Some(side), None) | (None, Some(side)) => Some(Some(match condition {
                        Some(predicate) => LogicalPlan::Filter { predicate, input: Box::new(side) },
                        None => side,
                    })),
                    (None, None) => Some(None),
                }
            }
            _ => {
                let relation = *next;
                *next += 1;
                Some(core.contains(&relation).then(|| self.relations[relation].clone()))
            }
        }
    }

    /// The relations providing `columns`, or `None` when one is no relation's.
    fn relations_of(&self, columns: &BTreeSet<ColumnId>) -> Option<BTreeSet<usize>> {
        columns.iter().map(|c| self.outputs.iter().position(|o| o.contains(c))).collect()
    }

    /// Joins the relations `members` (an order in which each joins the ones before it by
    /// some conjunct), with the conjuncts `usable` (rewritten by `map`) as soon as their
    /// relations are joined. `None` when the members are not connected.
    fn join(
        &self,
        start: LogicalPlan,
        mut joined: BTreeSet<usize>,
        members: &[usize],
        usable: &[(Expr, BTreeSet<usize>)],
    ) -> Option<LogicalPlan> {
        let mut plan = start;
        let mut pending: Vec<usize> = members.iter().copied().filter(|m| !joined.contains(m)).collect();
        let mut used = vec![false; usable.len()];
        while !pending.is_empty() {
            let connects =
                |m: usize| usable.iter().any(|(_, rels)| rels.contains(&m) && rels.iter().all(|r| *r == m || joined.contains(r)));
            let next = pending.iter().position(|&m| connects(m))?;
            let member = pending.remove(next);
            joined.insert(member);
            let mut condition = Vec::new();
            for (i, (conjunct, rels)) in usable.iter().enumerate() {
                if !used[i] && rels.is_subset(&joined) {
                    used[i] = true;
                    condition.push(conjunct.clone());
                }
            }
            plan = LogicalPlan::Join {
                kind: JoinKind::Inner,
                left: Box::new(plan),
                right: Box::new(self.relations[member].clone()),
                condition: Expr::conjunction(condition),
                mark: None,
            };
        }
        // Every conjunct found its place (none reads relations outside `members`).
        used.iter().all(|u| *u).then_some(plan)
    }
}

fn eager(
    groups: &[(Expr, ColumnRef)],
    aggregates: &[(AggregateCall, ColumnRef)],
    input: &LogicalPlan,
    ctx: &mut OptimizerContext,
) -> Option<LogicalPlan> {
    // A projection right above the joins is inlined into the keys and arguments.
    let (mut groups, mut aggregates, joins) = match input {
        LogicalPlan::Project { exprs, input } => {
            let map: HashMap<ColumnId, Expr> = exprs.iter().map(|(e, c)| (c.id, e.clone())).collect();
            let groups: Vec<(Expr, ColumnRef)> = groups.iter().map(|(e, c)| (e.clone().replace_columns_deep(&map), c.clone())).collect();
            let aggregates = aggregates.iter().map(|(call, c)| (inline_call(call, &map), c.clone())).collect();
            (groups, aggregates, input.as_ref())
        }
        _ => (groups.to_vec(), aggregates.to_vec(), input),
    };
    let graph = JoinGraph::of(joins);
    if graph.relations.len() < 2 {
        return None;
    }
    let mut argument_columns = BTreeSet::new();
    for (call, _) in &aggregates {
        for arg in &call.args {
            arg.collect_columns(&mut argument_columns);
        }
        if let Some(filter) = &call.filter {
            filter.collect_columns(&mut argument_columns);
        }
    }
    let mut key_columns = BTreeSet::new();
    for (expr, _) in &groups {
        expr.collect_columns(&mut key_columns);
    }
    let conjuncts: Vec<(Expr, BTreeSet<usize>)> =
        graph.conjuncts.iter().map(|c| Some((c.clone(), graph.relations_of(&c.columns())?))).collect::<Option<_>>()?;
    let argument_relations = graph.relations_of(&argument_columns)?;
    let key_relations = graph.relations_of(&key_columns)?;

    // The core: the relations the arguments read, then those that only filter it.
    let mut core: BTreeSet<usize> = argument_relations.clone();
    if core.is_empty() {
        return None;
    }
    loop {
        let joins_core = |r: usize| conjuncts.iter().any(|(_, rels)| rels.contains(&r) && rels.iter().all(|x| *x == r || core.contains(x)));
        let Some(filter) = (0..graph.relations.len()).find(|r| !core.contains(r) && !key_relations.contains(r) && joins_core(*r)) else {
            break;
        };
        core.insert(filter);
    }
    // Then relations that provide group keys, while the groups are too many and that makes
    // fewer: joined below the aggregation, `date_dim` turns a key of 1,800 dates into one
    // of 5 years (TPC-DS Q04 groups sales by customer and year).
    let relation_estimates: Vec<Estimate> = graph.relations.iter().map(estimate).collect();
    let context = CoreContext {
        graph: &graph,
        conjuncts: &conjuncts,
        key_columns: &key_columns,
        argument_relations: &argument_relations,
        relation_estimates,
    };
    let max_share = if groups.iter().any(|(_, c)| c.data_type.is_string()) { MAX_GROUP_SHARE_STRING_KEYS } else { MAX_GROUP_SHARE };
    let mut best = context.evaluate(&core);
    // Only until the groups are few enough: every relation joined below the aggregation
    // is probed by every core row, and its keys (often strings) are hashed for each.
    while best.as_ref().is_none_or(|b| b.share() > max_share) {
        let adjacent = (0..graph.relations.len())
            .filter(|r| !core.contains(r) && conjuncts.iter().any(|(_, rels)| rels.contains(r) && rels.iter().any(|x| core.contains(x))));
        let wider = adjacent
            .filter_map(|r| {
                let mut wider = core.clone();
                wider.insert(r);
                context.evaluate(&wider).map(|choice| (wider, choice))
            })
            .min_by(|a, b| a.1.share().total_cmp(&b.1.share()));
        match (wider, &best) {
            (Some((wider, choice)), Some(current)) if choice.share() < current.share() => {
                core = wider;
                best = Some(choice);
            }
            (Some((wider, choice)), None) => {
                core = wider;
                best = Some(choice);
            }
            _ => break,
        }
    }
    let Core { plan: core_plan, rows: core_rows, groups: pre_groups, needed, upper_conjuncts } = best?;
    if pre_groups > core_rows * max_share {
        return None;
    }
    // Joins with the rest that drop most of the core's rows (TPC-H Q18: a few hundred
    // orders) are cheaper before the aggregation than an aggregation of every row.
    if estimate(joins).rows < core_rows * MIN_KEPT_BY_REST {
        return None;
    }
    let rest: Vec<usize> = (0..graph.relations.len()).filter(|r| !core.contains(r)).collect();
    let all_core_columns: Vec<ColumnRef> = core_plan.output().into_iter().filter(|c| needed.contains(&c.id)).collect();

    // Pre-aggregation: the needed columns, renamed, and the partial aggregates.
    let mut renamed: HashMap<ColumnId, Expr> = HashMap::new();
    let mut pre_keys = Vec::with_capacity(all_core_columns.len());
    for column in all_core_columns {
        let key = ctx.new_column(&column.name, column.data_type, column.nullable);
        renamed.insert(column.id, key.expr());
        pre_keys.push((column.expr(), key));
    }
    let SplitAggregates { partials, merges, results } = split(std::mem::take(&mut aggregates), false, ctx);
    let pre_aggregate = LogicalPlan::Aggregate { groups: pre_keys, aggregates: partials, grouping_sets: None, input: Box::new(core_plan) };

    // The rest joined to it, with the core's columns renamed in the conditions; a
    // conjunct's relations are now those of the rest it reads (the pre-aggregation is
    // joined from the start).
    let upper: Vec<(Expr, BTreeSet<usize>)> = upper_conjuncts
        .into_iter()
        .map(|(c, rels)| (c.replace_columns_deep(&renamed), rels.difference(&core).copied().collect()))
        .collect();
    let joined = graph.join(pre_aggregate, BTreeSet::new(), &rest, &upper)?;

    let mut outputs: Vec<(Expr, ColumnRef)> = groups.iter().map(|(_, c)| (c.expr(), c.clone())).collect();
    outputs.extend(results);
    let final_groups = std::mem::take(&mut groups).into_iter().map(|(e, c)| (e.replace_columns_deep(&renamed), c)).collect();
    let merged = LogicalPlan::Aggregate { groups: final_groups, aggregates: merges, grouping_sets: None, input: Box::new(joined) };
    Some(LogicalPlan::Project { exprs: outputs, input: Box::new(merged) })
}

/// A choice of core: its joins, estimated rows and pre-aggregated groups, the columns
/// the pre-aggregation groups by and the conjuncts joining it to the rest.
struct Core {
    plan: LogicalPlan,
    rows: f64,
    groups: f64,
    needed: BTreeSet<ColumnId>,
    upper_conjuncts: Vec<(Expr, BTreeSet<usize>)>,
}

impl Core {
    /// The pre-aggregation's groups per core row.
    fn share(&self) -> f64 {
        self.groups / self.rows.max(1.0)
    }
}

struct CoreContext<'a> {
    graph: &'a JoinGraph,
    conjuncts: &'a [(Expr, BTreeSet<usize>)],
    key_columns: &'a BTreeSet<ColumnId>,
    argument_relations: &'a BTreeSet<usize>,
    relation_estimates: Vec<Estimate>,
}

impl CoreContext<'_> {
    /// The core `core`, if some relation is left to join after it and its relations are
    /// connected.
    fn evaluate(&self, core: &BTreeSet<usize>) -> Option<Core> {
        let graph = self.graph;
        if core.len() == graph.relations.len() {
            return None;
        }
        // The core's columns needed above the pre-aggregation: its group keys and the
        // keys of the joins with the rest.
        let core_columns: BTreeSet<ColumnId> = core.iter().flat_map(|&r| graph.outputs[r].iter().copied()).collect();
        let (core_conjuncts, upper_conjuncts): (Vec<_>, Vec<_>) =
            self.conjuncts.iter().cloned().partition(|(_, rels)| rels.is_subset(core));
        let mut needed: BTreeSet<ColumnId> = self.key_columns.intersection(&core_columns).copied().collect();
        for (conjunct, _) in &upper_conjuncts {
            needed.extend(conjunct.columns().intersection(&core_columns));
        }
        // Without keys the pre-aggregation would be a global aggregate, which gives a row
        // (of NULLs and zeros) over no input, and the join above would turn it into groups.
        if needed.is_empty() {
            return None;
        }
        let plan = graph.core_of(core)?;
        let rows = estimate(&plan).rows;
        let mut combinations = 1.0f64;
        for &column in &needed {
            let relation = graph.outputs.iter().position(|o| o.contains(&column))?;
            combinations *= self.distinct_in_core(column, relation, core, &core_conjuncts);
        }
        Some(Core { plan, rows, groups: expected_distinct(combinations, rows), needed, upper_conjuncts })
    }

    /// Distinct values of `column` (of `relation`) among the core's rows: a relation joined
    /// on its key keeps the share of its keys that the other side's key has (the years of
    /// the dates a fact table refers to, not of the whole date table).
    fn distinct_in_core(
        &self,
        column: ColumnId,
        relation: usize,
        core: &BTreeSet<usize>,
        core_conjuncts: &[(Expr, BTreeSet<usize>)],
    ) -> f64 {
        let estimates = &self.relation_estimates;
        let column_ref = |id: ColumnId| self.graph.relations[relation].output().into_iter().find(|c| c.id == id);
        let Some(column) = column_ref(column) else { return 1.0 };
        let mut distinct = estimates[relation].ndv(&column.expr());
        if self.argument_relations.contains(&relation) {
            return distinct;
        }
        for (conjunct, _) in core_conjuncts {
            let Expr::Binary { op: BinaryOp::Eq, left, right, .. } = conjunct else { continue };
            let (Expr::Column(a), Expr::Column(b)) = (left.as_ref(), right.as_ref()) else { continue };
            let (own, other) = if self.graph.outputs[relation].contains(&a.id) { (a, b) } else { (b, a) };
            if !self.graph.outputs[relation].contains(&own.id) {
                continue;
            }
            let Some(other_relation) = self.graph.outputs.iter().position(|o| o.contains(&other.id)) else { continue };
            if other_relation == relation || !core.contains(&other_relation) {
                continue;
            }
            let share = (estimates[other_relation].ndv(&other.expr()) / estimates[relation].ndv(&own.expr())).min(1.0);
            distinct = distinct.min((estimates[relation].ndv(&column.expr()) * share).max(1.0));
        }
        distinct
    }
}

/// The expected number of distinct values among `rows` drawn uniformly from `combinations`
/// possible ones: `D (1 - (1 - 1/D)^n)`, about `D (1 - e^(-n/D))`. Close to `rows` when
/// the combinations are many more than the rows and to `combinations` when they are many
/// fewer; in between it is below both (2.75M store sales over 500K (customer, year) pairs
/// fill 498K of them, 719K web sales 381K).
fn expected_distinct(combinations: f64, rows: f64) -> f64 {
    let (d, n) = (combinations.max(1.0), rows.max(1.0));
    (d * -(-n / d).exp_m1()).clamp(1.0, n)
}

fn inline_call(call: &AggregateCall, map: &HashMap<ColumnId, Expr>) -> AggregateCall {
    AggregateCall {
        args: call.args.iter().map(|a| a.clone().replace_columns_deep(map)).collect(),
        filter: call.filter.as_ref().map(|f| Box::new(f.as_ref().clone().replace_columns_deep(map))),
        ..call.clone()
    }
}
