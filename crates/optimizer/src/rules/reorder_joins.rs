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

use apiary_common::{not_impl_err, Result};
use apiary_sql::expr::{BinaryOp, ColumnId, ColumnRef, Expr};
use apiary_sql::{JoinKind, LogicalPlan};

use crate::cardinality::{estimate, join_estimate, Estimate};
use crate::rules::unnest_subqueries::map_children;
use crate::OptimizerContext;

/// Above this many relations, a greedy heuristic replaces exhaustive search.
pub const MAX_DP_RELATIONS: usize = 12;

/// The most relations one tree of inner joins may have.
pub const MAX_JOIN_RELATIONS: usize = RelSet::CAPACITY;

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
    if relations.len() > MAX_JOIN_RELATIONS {
        return Err(not_impl_err!("a join of {} tables (at most {MAX_JOIN_RELATIONS} are supported)", relations.len()));
    }
    Ok(JoinGraph::new(relations, predicates).best_plan())
}

/// A set of relations (by index): a fixed-size bitset, so joins of more than 64 tables
/// plan too.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
struct RelSet([u64; 4]);

impl RelSet {
    const CAPACITY: usize = 256;

    fn single(index: usize) -> RelSet {
        let mut words = [0u64; 4];
        words[index / 64] = 1 << (index % 64);
        RelSet(words)
    }

    /// The set whose members are the bits of `bits` (the first 64 relations).
    fn from_bits(bits: u64) -> RelSet {
        RelSet([bits, 0, 0, 0])
    }

    fn all(n: usize) -> RelSet {
        (0..n).fold(RelSet::default(), |set, i| set | RelSet::single(i))
    }

    fn is_empty(self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    fn count(self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    fn intersects(self, other: RelSet) -> bool {
        !(self & other).is_empty()
    }

    fn is_subset(self, other: RelSet) -> bool {
        (self & other) == self
    }

    /// The lowest member.
    fn first(self) -> Option<usize> {
        self.0.iter().enumerate().find(|(_, &w)| w != 0).map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }
}

impl std::ops::BitOr for RelSet {
    type Output = RelSet;
    fn bitor(self, other: RelSet) -> RelSet {
        RelSet(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }
}

impl std::ops::BitAnd for RelSet {
    type Output = RelSet;
    fn bitand(self, other: RelSet) -> RelSet {
        RelSet(std::array::from_fn(|i| self.0[i] & other.0[i]))
    }
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
    /// The relations it references.
    relations: RelSet,
}

/// Columns known equal (through join equalities), with the relation each belongs to.
struct EquivalenceClass {
    members: Vec<(ColumnRef, usize)>,
    /// The relations with a member.
    relations: RelSet,
}

impl EquivalenceClass {
    fn new(members: Vec<(ColumnRef, usize)>) -> EquivalenceClass {
        let relations = members.iter().fold(RelSet::default(), |set, (_, r)| set | RelSet::single(*r));
        EquivalenceClass { members, relations }
    }

    fn add(&mut self, member: (ColumnRef, usize)) {
        self.relations = self.relations | RelSet::single(member.1);
        self.members.push(member);
    }
}

/// One equality per class with members in both `a` and `b`. On each side, members are
/// taken from the relation with members in the most of these classes: TPC-H Q9's
/// partsupp joined with lineitem, part and supplier then gets the composite key
/// `(ps_partkey, ps_suppkey) = (l_partkey, l_suppkey)`, which the cardinality estimate
/// reads as one key of one pair of relations, not as independent keys of two pairs.
fn class_equalities(classes: &[EquivalenceClass], a: RelSet, b: RelSet) -> Vec<Expr> {
    let spanning: Vec<&EquivalenceClass> = classes.iter().filter(|c| c.relations.intersects(a) && c.relations.intersects(b)).collect();
    let classes_with = |relation: usize| spanning.iter().filter(|c| c.relations.intersects(RelSet::single(relation))).count();
    let member_in = |class: &EquivalenceClass, side: RelSet| {
        // The first member among those of the best-covering relations (min_by_key keeps
        // the first of equal keys, so the choice is stable).
        class
            .members
            .iter()
            .filter(|(_, r)| side.intersects(RelSet::single(*r)))
            .min_by_key(|(_, r)| std::cmp::Reverse(classes_with(*r)))
            .map(|(column, _)| Expr::Column(column.clone()))
            .expect("a spanning class has a member on each side")
    };
    spanning.iter().map(|c| Expr::compare(BinaryOp::Eq, member_in(c, a), member_in(c, b))).collect()
}

/// `a = b` between columns of the same type in two different relations.
fn column_equality(expr: &Expr, relations: RelSet) -> Option<(&ColumnRef, &ColumnRef)> {
    match expr {
        Expr::Binary { op: BinaryOp::Eq, left, right, .. } if relations.count() == 2 => match (left.as_ref(), right.as_ref()) {
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
    split: Option<(RelSet, RelSet)>,
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
            let mut set = RelSet::default();
            for (idx, ids) in outputs.iter().enumerate() {
                if columns.iter().any(|c| ids.contains(c)) {
                    set = set | RelSet::single(idx);
                }
            }
            if set.count() == 1 {
                filters.push((set.first().expect("one member"), expr));
            } else if let Some((a, b)) = column_equality(&expr, set) {
                let (Some(ra), Some(rb)) = (relation_of(&a.id), relation_of(&b.id)) else {
                    predicates.push(Predicate { expr, relations: set });
                    continue;
                };
                let class_of =
                    |classes: &[EquivalenceClass], id: ColumnId| classes.iter().position(|c| c.members.iter().any(|(m, _)| m.id == id));
                match (class_of(&classes, a.id), class_of(&classes, b.id)) {
                    (Some(x), Some(y)) if x == y => {}
                    (Some(x), Some(y)) => {
                        let merged = classes.remove(x.max(y));
                        for member in merged.members {
                            classes[x.min(y)].add(member);
                        }
                    }
                    (Some(x), None) => classes[x].add((b.clone(), rb)),
                    (None, Some(y)) => classes[y].add((a.clone(), ra)),
                    (None, None) => classes.push(EquivalenceClass::new(vec![(a.clone(), ra), (b.clone(), rb)])),
                }
            } else {
                predicates.push(Predicate { expr, relations: set });
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
    fn joins(p: &Predicate, a: RelSet, b: RelSet) -> bool {
        p.relations.is_subset(a | b) && p.relations.intersects(a) && p.relations.intersects(b)
    }

    /// The conditions joining subsets `a` and `b`: predicates referencing both (and
    /// nothing else), and one equality per equivalence class spanning them.
    fn predicates_between(&self, a: RelSet, b: RelSet) -> Vec<Expr> {
        let mut conditions: Vec<Expr> = self.predicates.iter().filter(|p| Self::joins(p, a, b)).map(|p| p.expr.clone()).collect();
        conditions.extend(class_equalities(&self.classes, a, b));
        conditions
    }

    /// Whether some condition joins `a` and `b`: [`JoinGraph::predicates_between`] is not
    /// empty, decided on bitsets alone (the search asks for every pair of subsets).
    fn connected(&self, a: RelSet, b: RelSet) -> bool {
        self.predicates.iter().any(|p| Self::joins(p, a, b))
            || self.classes.iter().any(|c| c.relations.intersects(a) && c.relations.intersects(b))
    }

    fn combine(&self, a: &Entry, b: &Entry, set_a: RelSet, set_b: RelSet) -> Entry {
        let condition = Expr::conjunction(self.predicates_between(set_a, set_b));
        let estimate = join_estimate(JoinKind::Inner, &a.estimate, &b.estimate, condition.as_ref(), None);
        // Cost: everything produced so far plus this join's output and its hash build.
        let cost = a.cost + b.cost + estimate.rows + a.estimate.rows.min(b.estimate.rows);
        Entry { cost, estimate, split: Some((set_a, set_b)) }
    }

    fn best_plan(self) -> LogicalPlan {
        let n = self.relations.len();
        let best = if n <= MAX_DP_RELATIONS { self.dynamic_programming(false).or_else(|| self.dynamic_programming(true)) } else { None };
        let best = best.unwrap_or_else(|| self.greedy());
        let mut relations: Vec<Option<LogicalPlan>> = self.relations.into_iter().map(Some).collect();
        let mut used = vec![false; self.predicates.len()];
        build(RelSet::all(n), &best, &mut relations, &self.predicates, &self.classes, &mut used)
    }

    /// Exhaustive search over subsets (at most [`MAX_DP_RELATIONS`], so one `u64` holds
    /// a subset); `allow_cross` permits joining unconnected subsets.
    fn dynamic_programming(&self, allow_cross: bool) -> Option<HashMap<RelSet, Entry>> {
        let n = self.relations.len();
        let mut best: HashMap<RelSet, Entry> = HashMap::new();
        for (idx, estimate) in self.estimates.iter().enumerate() {
            best.insert(RelSet::single(idx), Entry { cost: 0.0, estimate: estimate.clone(), split: None });
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
                        let (a, b) = (RelSet::from_bits(sub), RelSet::from_bits(set & !sub));
                        if let (Some(left), Some(right)) = (best.get(&a), best.get(&b)) {
                            if allow_cross || self.connected(a, b) {
                                let candidate = self.combine(left, right, a, b);
                                if winner.as_ref().is_none_or(|w| candidate.cost < w.cost) {
                                    winner = Some(candidate);
                                }
                            }
                        }
                    }
                    sub = (sub - 1) & set;
                }
                if let Some(w) = winner {
                    best.insert(RelSet::from_bits(set), w);
                }
            }
        }
        best.contains_key(&RelSet::from_bits(full)).then_some(best)
    }

    /// Greedy: repeatedly join the pair with the smallest result, preferring connected
    /// pairs. Candidate joins are kept between rounds, so each round only evaluates the
    /// pairs with the newly joined set: O(n^2) candidates in all.
    fn greedy(&self) -> HashMap<RelSet, Entry> {
        let mut best: HashMap<RelSet, Entry> = HashMap::new();
        let mut live: Vec<RelSet> = Vec::new();
        for (idx, estimate) in self.estimates.iter().enumerate() {
            best.insert(RelSet::single(idx), Entry { cost: 0.0, estimate: estimate.clone(), split: None });
            live.push(RelSet::single(idx));
        }
        // (a, b) -> (candidate, connected) for live sets a, b.
        let mut candidates: HashMap<(RelSet, RelSet), (Entry, bool)> = HashMap::new();
        let evaluate = |best: &HashMap<RelSet, Entry>, a: RelSet, b: RelSet| -> (Entry, bool) {
            let connected = self.connected(a, b);
            // Unconnected pairs are cross products: only their size matters, and the
            // condition search is skipped.
            (self.combine(&best[&a], &best[&b], a, b), connected)
        };
        for i in 0..live.len() {
            for j in i + 1..live.len() {
                candidates.insert((live[i], live[j]), evaluate(&best, live[i], live[j]));
            }
        }
        while live.len() > 1 {
            let mut choice: Option<(RelSet, RelSet)> = None;
            for i in 0..live.len() {
                for j in i + 1..live.len() {
                    let key = (live[i], live[j]);
                    let (candidate, connected) = &candidates[&key];
                    let better = match choice {
                        None => true,
                        Some(c) => {
                            let (chosen, chosen_connected) = &candidates[&c];
                            (*connected && !chosen_connected)
                                || (connected == chosen_connected && candidate.estimate.rows < chosen.estimate.rows)
                        }
                    };
                    if better {
                        choice = Some(key);
                    }
                }
            }
            let (a, b) = choice.expect("at least two live sets");
            let (entry, _) = candidates.remove(&(a, b)).expect("candidate of a live pair");
            let merged = a | b;
            best.insert(merged, entry);
            live.retain(|&s| s != a && s != b);
            candidates.retain(|(x, y), _| *x != a && *x != b && *y != a && *y != b);
            for &other in &live {
                candidates.insert((other, merged), evaluate(&best, other, merged));
            }
            live.push(merged);
        }
        best
    }
}

/// Builds the join tree for `set` from the DP table; larger input on the left (probe),
/// smaller on the right (build).
fn build(
    set: RelSet,
    best: &HashMap<RelSet, Entry>,
    relations: &mut [Option<LogicalPlan>],
    predicates: &[Predicate],
    classes: &[EquivalenceClass],
    used: &mut [bool],
) -> LogicalPlan {
    let entry = &best[&set];
    match entry.split {
        None => relations[set.first().expect("a relation")].take().expect("each relation is used once"),
        Some((a, b)) => {
            let (probe, build_side) = if best[&a].estimate.rows >= best[&b].estimate.rows { (a, b) } else { (b, a) };
            let left = build(probe, best, relations, predicates, classes, used);
            let right = build(build_side, best, relations, predicates, classes, used);
            let mut conditions = Vec::new();
            for (idx, p) in predicates.iter().enumerate() {
                if !used[idx] && p.relations.is_subset(set) {
                    used[idx] = true;
                    conditions.push(p.expr.clone());
                }
            }
            conditions.extend(class_equalities(classes, probe, build_side));
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
