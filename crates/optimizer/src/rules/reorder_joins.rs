//! `reorder_joins`: chooses the order of inner joins by estimated cost.
//!
//! A maximal tree of inner joins is flattened into relations (its non-inner-join
//! subtrees) and predicates. Dynamic programming over connected subsets (up to
//! [`MAX_DP_RELATIONS`]; greedy beyond) finds the bushy tree minimising the sum of
//! intermediate result sizes, with cross products only where the join graph is
//! disconnected. In each join the smaller (estimated) input is put on the right, which
//! the physical planner uses as the hash-table build side.
//!
//! Equalities between columns form equivalence classes: `s_nationkey = n_nationkey AND
//! c_nationkey = s_nationkey` also joins customer to nation directly (TPC-H Q5), so the
//! search may reduce customer by the region filter before it meets orders. Each join of
//! two subsets gets one equality per class with members on both sides; by induction all
//! members of a class are equal in the final result, as the query demands.

use std::collections::{BTreeSet, HashMap};

use apiary_common::Result;
use apiary_sql::expr::{BinaryOp, ColumnId, ColumnRef, Expr};
use apiary_sql::{JoinKind, LogicalPlan};

use crate::cardinality::{estimate, join_estimate, Estimate};
use crate::rules::unnest_subqueries::map_children;
use crate::OptimizerContext;

/// Above this many relations, a greedy heuristic replaces exhaustive search.
pub const MAX_DP_RELATIONS: usize = 12;

pub fn run(plan: LogicalPlan, _ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    reorder(plan)
}

fn reorder(plan: LogicalPlan) -> Result<LogicalPlan> {
    if !matches!(plan, LogicalPlan::Join { kind: JoinKind::Inner, .. }) {
        return map_children(plan, &mut reorder);
    }
    let mut relations = Vec::new();
    let mut predicates = Vec::new();
    flatten(plan, &mut relations, &mut predicates)?;
    Ok(JoinGraph::new(relations, predicates).best_plan())
}

/// Collects the leaves and conditions of a tree of inner joins.
fn flatten(plan: LogicalPlan, relations: &mut Vec<LogicalPlan>, predicates: &mut Vec<Expr>) -> Result<()> {
    match plan {
        LogicalPlan::Join { kind: JoinKind::Inner, left, right, condition, .. } => {
            flatten(*left, relations, predicates)?;
            flatten(*right, relations, predicates)?;
            predicates.extend(condition.map(|c| c.split_conjunction()).unwrap_or_default());
        }
        other => relations.push(reorder(other)?),
    }
    Ok(())
}

struct Predicate {
    expr: Expr,
    /// Bitmask of the relations it references.
    relations: u64,
}

/// Columns known equal (through join equalities), with the relation each belongs to.
struct EquivalenceClass {
    members: Vec<(ColumnRef, usize)>,
}

impl EquivalenceClass {
    /// Bitmask of the relations with a member.
    fn relations(&self) -> u64 {
        self.members.iter().fold(0, |mask, (_, r)| mask | 1 << r)
    }

    /// One equality between a member in `a` and one in `b`, if both have one.
    fn equality_between(&self, a: u64, b: u64) -> Option<Expr> {
        let left = self.members.iter().find(|(_, r)| a & (1 << r) != 0)?;
        let right = self.members.iter().find(|(_, r)| b & (1 << r) != 0)?;
        Some(Expr::compare(BinaryOp::Eq, Expr::Column(left.0.clone()), Expr::Column(right.0.clone())))
    }
}

/// `a = b` between columns of the same type in two different relations.
fn column_equality(expr: &Expr, mask: u64) -> Option<(&ColumnRef, &ColumnRef)> {
    match expr {
        Expr::Binary { op: BinaryOp::Eq, left, right, .. } if mask.count_ones() == 2 => match (left.as_ref(), right.as_ref()) {
            (Expr::Column(a), Expr::Column(b)) if a.data_type == b.data_type => Some((a, b)),
            _ => None,
        },
        _ => None,
    }
}

struct JoinGraph {
    relations: Vec<LogicalPlan>,
    estimates: Vec<Estimate>,
    predicates: Vec<Predicate>,
    classes: Vec<EquivalenceClass>,
}

#[derive(Clone)]
struct Entry {
    cost: f64,
    estimate: Estimate,
    /// How this subset was formed: `None` for a single relation.
    split: Option<(u64, u64)>,
}

impl JoinGraph {
    fn new(relations: Vec<LogicalPlan>, exprs: Vec<Expr>) -> JoinGraph {
        let outputs: Vec<BTreeSet<ColumnId>> = relations.iter().map(|r| r.output_ids()).collect();
        let mut relations = relations;
        let mut predicates = Vec::new();
        let mut classes: Vec<EquivalenceClass> = Vec::new();
        let relation_of = |id: &ColumnId| outputs.iter().position(|ids| ids.contains(id));
        let mut filters: Vec<(usize, Expr)> = Vec::new();
        for expr in exprs {
            let columns = expr.columns();
            let mut mask = 0u64;
            for (idx, ids) in outputs.iter().enumerate() {
                if columns.iter().any(|c| ids.contains(c)) {
                    mask |= 1 << idx;
                }
            }
            if mask.count_ones() == 1 {
                filters.push((mask.trailing_zeros() as usize, expr));
            } else if let Some((a, b)) = column_equality(&expr, mask) {
                let (Some(ra), Some(rb)) = (relation_of(&a.id), relation_of(&b.id)) else {
                    predicates.push(Predicate { expr, relations: mask });
                    continue;
                };
                let class_of =
                    |classes: &[EquivalenceClass], id: ColumnId| classes.iter().position(|c| c.members.iter().any(|(m, _)| m.id == id));
                match (class_of(&classes, a.id), class_of(&classes, b.id)) {
                    (Some(x), Some(y)) if x == y => {}
                    (Some(x), Some(y)) => {
                        let merged = classes.remove(x.max(y));
                        classes[x.min(y)].members.extend(merged.members);
                    }
                    (Some(x), None) => classes[x].members.push((b.clone(), rb)),
                    (None, Some(y)) => classes[y].members.push((a.clone(), ra)),
                    (None, None) => classes.push(EquivalenceClass { members: vec![(a.clone(), ra), (b.clone(), rb)] }),
                }
            } else {
                predicates.push(Predicate { expr, relations: mask });
            }
        }
        // Two members of a class in one relation must be equal within it: a filter there.
        for class in &classes {
            for (i, (column, relation)) in class.members.iter().enumerate() {
                if let Some((first, _)) = class.members[..i].iter().find(|(_, r)| r == relation) {
                    filters.push((*relation, Expr::compare(BinaryOp::Eq, Expr::Column(first.clone()), Expr::Column(column.clone()))));
                }
            }
        }
        for (idx, expr) in filters {
            // A one-relation predicate left over: filter that relation directly.
            let input = std::mem::replace(&mut relations[idx], LogicalPlan::Values { rows: vec![], output: vec![] });
            relations[idx] = LogicalPlan::Filter { predicate: expr, input: Box::new(input) };
        }
        let estimates = relations.iter().map(estimate).collect();
        JoinGraph { relations, estimates, predicates, classes }
    }

    /// Whether a predicate references `a` and `b` (and nothing else).
    fn joins(p: &Predicate, a: u64, b: u64) -> bool {
        p.relations & !(a | b) == 0 && p.relations & a != 0 && p.relations & b != 0
    }

    /// The conditions joining subsets `a` and `b`: predicates referencing both (and
    /// nothing else), and one equality per equivalence class spanning them.
    fn predicates_between(&self, a: u64, b: u64) -> Vec<Expr> {
        let mut conditions: Vec<Expr> = self.predicates.iter().filter(|p| Self::joins(p, a, b)).map(|p| p.expr.clone()).collect();
        conditions.extend(self.classes.iter().filter_map(|c| c.equality_between(a, b)));
        conditions
    }

    /// Whether some condition joins `a` and `b`: [`JoinGraph::predicates_between`] is not
    /// empty, decided on bitmasks alone (the search asks for every pair of subsets).
    fn connected(&self, a: u64, b: u64) -> bool {
        self.predicates.iter().any(|p| Self::joins(p, a, b))
            || self.classes.iter().any(|c| c.relations() & a != 0 && c.relations() & b != 0)
    }

    fn combine(&self, a: &Entry, b: &Entry, mask_a: u64, mask_b: u64) -> Entry {
        let condition = Expr::conjunction(self.predicates_between(mask_a, mask_b));
        let estimate = join_estimate(JoinKind::Inner, &a.estimate, &b.estimate, condition.as_ref(), None);
        // Cost: everything produced so far plus this join's output and its hash build.
        let cost = a.cost + b.cost + estimate.rows + a.estimate.rows.min(b.estimate.rows);
        Entry { cost, estimate, split: Some((mask_a, mask_b)) }
    }

    fn best_plan(self) -> LogicalPlan {
        let n = self.relations.len();
        let best = if n <= MAX_DP_RELATIONS { self.dynamic_programming(false).or_else(|| self.dynamic_programming(true)) } else { None };
        let best = best.unwrap_or_else(|| self.greedy());
        let full = (1u64 << n) - 1;
        let mut relations: Vec<Option<LogicalPlan>> = self.relations.into_iter().map(Some).collect();
        let mut used = vec![false; self.predicates.len()];
        build(full, &best, &mut relations, &self.predicates, &self.classes, &mut used)
    }

    /// Exhaustive search over subsets; `allow_cross` permits joining unconnected subsets.
    fn dynamic_programming(&self, allow_cross: bool) -> Option<HashMap<u64, Entry>> {
        let n = self.relations.len();
        let mut best: HashMap<u64, Entry> = HashMap::new();
        for (idx, estimate) in self.estimates.iter().enumerate() {
            best.insert(1 << idx, Entry { cost: 0.0, estimate: estimate.clone(), split: None });
        }
        let full = (1u64 << n) - 1;
        for size in 2..=n {
            for set in 1..=full {
                if set.count_ones() as usize != size {
                    continue;
                }
                let mut winner: Option<Entry> = None;
                // Enumerate proper non-empty subsets containing the lowest relation
                // (each unordered pair once).
                let lowest = set & set.wrapping_neg();
                let mut sub = (set - 1) & set;
                while sub > 0 {
                    if sub & lowest != 0 {
                        let other = set & !sub;
                        if let (Some(a), Some(b)) = (best.get(&sub), best.get(&other)) {
                            if allow_cross || self.connected(sub, other) {
                                let candidate = self.combine(a, b, sub, other);
                                if winner.as_ref().is_none_or(|w| candidate.cost < w.cost) {
                                    winner = Some(candidate);
                                }
                            }
                        }
                    }
                    sub = (sub - 1) & set;
                }
                if let Some(w) = winner {
                    best.insert(set, w);
                }
            }
        }
        best.contains_key(&full).then_some(best)
    }

    /// Greedy: repeatedly join the pair with the smallest result, preferring connected pairs.
    fn greedy(&self) -> HashMap<u64, Entry> {
        let mut best: HashMap<u64, Entry> = HashMap::new();
        let mut live: Vec<u64> = Vec::new();
        for (idx, estimate) in self.estimates.iter().enumerate() {
            best.insert(1 << idx, Entry { cost: 0.0, estimate: estimate.clone(), split: None });
            live.push(1 << idx);
        }
        while live.len() > 1 {
            let mut choice: Option<(usize, usize, Entry, bool)> = None;
            for i in 0..live.len() {
                for j in i + 1..live.len() {
                    let connected = self.connected(live[i], live[j]);
                    let candidate = self.combine(&best[&live[i]], &best[&live[j]], live[i], live[j]);
                    let better = match &choice {
                        None => true,
                        Some((_, _, c, c_connected)) => {
                            (connected && !c_connected) || (connected == *c_connected && candidate.estimate.rows < c.estimate.rows)
                        }
                    };
                    if better {
                        choice = Some((i, j, candidate, connected));
                    }
                }
            }
            let (i, j, entry, _) = choice.expect("at least two live sets");
            let merged = live[i] | live[j];
            best.insert(merged, entry);
            live.remove(j);
            live.remove(i);
            live.push(merged);
        }
        best
    }
}

/// Builds the join tree for `set` from the DP table; larger input on the left (probe),
/// smaller on the right (build).
fn build(
    set: u64,
    best: &HashMap<u64, Entry>,
    relations: &mut [Option<LogicalPlan>],
    predicates: &[Predicate],
    classes: &[EquivalenceClass],
    used: &mut [bool],
) -> LogicalPlan {
    let entry = &best[&set];
    match entry.split {
        None => relations[set.trailing_zeros() as usize].take().expect("each relation is used once"),
        Some((a, b)) => {
            let (probe, build_side) = if best[&a].estimate.rows >= best[&b].estimate.rows { (a, b) } else { (b, a) };
            let left = build(probe, best, relations, predicates, classes, used);
            let right = build(build_side, best, relations, predicates, classes, used);
            let mut conditions = Vec::new();
            for (idx, p) in predicates.iter().enumerate() {
                if !used[idx] && p.relations & !set == 0 {
                    used[idx] = true;
                    conditions.push(p.expr.clone());
                }
            }
            conditions.extend(classes.iter().filter_map(|c| c.equality_between(probe, build_side)));
            LogicalPlan::Join {
                kind: JoinKind::Inner,
                left: Box::new(left),
                right: Box::new(right),
                condition: Expr::conjunction(conditions),
                mark: None,
            }
        }
    }
}
