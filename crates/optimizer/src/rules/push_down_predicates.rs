//! `push_down_predicates`: moves filter conjuncts as close to the scans as semantics allow.
//!
//! * Through projections (substituting the projected expressions) and sorts.
//! * Through aggregations when they only read group keys.
//! * Into joins: one-sided conjuncts go to that side (respecting outer-join semantics),
//!   two-sided conjuncts become join conditions, which turns `FROM a, b WHERE a.x = b.y`
//!   into an equi-join.
//! * An outer join whose NULL-extended side is filtered by a NULL-rejecting predicate is
//!   turned into an inner (or one-sided outer) join first.
//! * What reaches a scan becomes a scan filter, evaluated right after each block is read
//!   (and used by zone maps to skip blocks).
//! * Disjunctions are factored (`(a AND b) OR (a AND c)` -> `a AND (b OR c)`), and a
//!   disjunction spanning both sides of a join also yields, for each side, the implied
//!   disjunction of that side's parts, which is pushed down too (Quickstep's partial
//!   predicate push-down; TPC-H Q7 and Q19).
//! * A materialized CTE whose every reference is filtered computes only the rows some
//!   reference keeps: the disjunction of the references' filters is pushed into the
//!   definition (each reference keeps its own filter). TPC-DS Q04/Q11/Q31/Q39/Q75 read
//!   one or two years or months of a CTE over all of them.

use std::collections::{BTreeSet, HashMap};

use apiary_common::Result;
use apiary_sql::expr::{BinaryOp, ColumnId, Expr, ScalarFunction, UnaryOp};
use apiary_sql::{JoinKind, LogicalPlan};
use apiary_types::{DataType, ScalarValue};

use crate::OptimizerContext;

pub fn run(plan: LogicalPlan, _ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    Ok(push(plan, Vec::new()))
}

fn wrap(plan: LogicalPlan, mut predicates: Vec<Expr>) -> LogicalPlan {
    // A predicate pushed again (a second pass, a CTE's shared filter) is kept once.
    let mut seen = Vec::with_capacity(predicates.len());
    predicates.retain(|p| {
        let new = !seen.contains(p);
        if new {
            seen.push(p.clone());
        }
        new
    });
    match Expr::conjunction(predicates) {
        Some(predicate) => LogicalPlan::Filter { predicate, input: Box::new(plan) },
        None => plan,
    }
}

fn subset(expr: &Expr, ids: &BTreeSet<ColumnId>) -> bool {
    expr.columns().iter().all(|c| ids.contains(c))
}

/// Collects, for every scan of CTE `id` in `plan`, the conjunction of the filter right
/// above it, over the definition's columns. `false` when some scan has no such filter (or
/// one using a subquery): then the definition must produce every row.
fn references_filters(plan: &LogicalPlan, id: usize, filters: &mut Vec<Expr>) -> bool {
    match plan {
        LogicalPlan::Filter { predicate, input } => match input.as_ref() {
            LogicalPlan::CteScan(scan) if scan.id == id => {
                if predicate.contains_subquery() {
                    return false;
                }
                let map: HashMap<ColumnId, Expr> = scan
                    .columns
                    .iter()
                    .map(|(source, column)| (column.id, apiary_sql::expr::ColumnRef { id: *source, ..column.clone() }.expr()))
                    .collect();
                filters.push(predicate.clone().replace_columns(&|c| map.get(&c.id).cloned()));
                true
            }
            _ => references_filters(input, id, filters),
        },
        LogicalPlan::CteScan(scan) => scan.id != id,
        other => other.children().into_iter().all(|child| references_filters(child, id, filters)),
    }
}

fn push(plan: LogicalPlan, mut predicates: Vec<Expr>) -> LogicalPlan {
    match plan {
        LogicalPlan::Filter { predicate, input } => {
            predicates.extend(predicate.split_conjunction().into_iter().flat_map(|p| factor_disjunction(p).split_conjunction()));
            push(*input, predicates)
        }
        LogicalPlan::Project { exprs, input } => {
            let map: HashMap<ColumnId, Expr> = exprs.iter().map(|(e, c)| (c.id, e.clone())).collect();
            let (down, keep): (Vec<Expr>, Vec<Expr>) =
                predicates.into_iter().partition(|p| p.columns().iter().all(|c| map.contains_key(c)));
            let down = down.into_iter().map(|p| p.replace_columns(&|c| map.get(&c.id).cloned())).collect();
            let input = push(*input, down);
            wrap(LogicalPlan::Project { exprs, input: Box::new(input) }, keep)
        }
        LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input } => {
            // Only keys every grouping set groups by have their input values in every row;
            // a predicate on others (or on none: a constant) must see the aggregated rows.
            let map: HashMap<ColumnId, Expr> = groups
                .iter()
                .enumerate()
                .filter(|(i, _)| !grouping_sets.as_ref().is_some_and(|g| g.omits(*i)))
                .map(|(_, (e, c))| (c.id, e.clone()))
                .collect();
            let (down, keep): (Vec<Expr>, Vec<Expr>) = if groups.is_empty() {
                (Vec::new(), predicates)
            } else {
                predicates.into_iter().partition(|p| {
                    let columns = p.columns();
                    (grouping_sets.is_none() || !columns.is_empty()) && columns.iter().all(|c| map.contains_key(c))
                })
            };
            // A disjunction mixing keys and aggregates still implies the disjunction of
            // its key conjuncts (TPC-DS Q4/Q11: a CTE read once per year and channel keeps
            // `(year = 2001 AND total > 0) OR year = 2002`, so only those years are
            // aggregated).
            let keys: BTreeSet<ColumnId> = map.keys().copied().collect();
            let mut down = down;
            for p in &keep {
                push_new(&mut down, implied_for_side(p, &keys));
            }
            let down = down.into_iter().map(|p| p.replace_columns(&|c| map.get(&c.id).cloned())).collect();
            let input = push(*input, down);
            wrap(LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input: Box::new(input) }, keep)
        }
        LogicalPlan::Sort { keys, input } => LogicalPlan::Sort { keys, input: Box::new(push(*input, predicates)) },
        // The definition is shared by every reference: predicates stay above each
        // reference, and what all references' filters together let through is pushed
        // into the definition.
        LogicalPlan::Cte { id, name, definition, body } => {
            let body = push(*body, predicates);
            let mut filters = Vec::new();
            let shared = if references_filters(&body, id, &mut filters) {
                // Over the definition's columns as it names them.
                let columns: HashMap<ColumnId, Expr> = definition.output().into_iter().map(|c| (c.id, c.expr())).collect();
                Expr::disjunction(filters.into_iter().map(|f| f.replace_columns(&|c| columns.get(&c.id).cloned())))
            } else {
                None
            };
            LogicalPlan::Cte { id, name, definition: Box::new(push(*definition, shared.into_iter().collect())), body: Box::new(body) }
        }
        scan @ (LogicalPlan::CteScan(_) | LogicalPlan::WorkTableScan(_)) => wrap(scan, predicates),
        // Nothing crosses the recursion: a predicate on the result is not one on each
        // iteration's rows (they feed the next iteration), nor on the work table's.
        LogicalPlan::RecursiveCte { id, name, distinct, anchor, recursive, output } => {
            let anchor = Box::new(push(*anchor, Vec::new()));
            let recursive = Box::new(push(*recursive, Vec::new()));
            wrap(LogicalPlan::RecursiveCte { id, name, distinct, anchor, recursive, output }, predicates)
        }
        // A predicate on columns every window partitions by keeps or drops whole
        // partitions: it may run first. Others see the window's results.
        LogicalPlan::Window { windows, input } => {
            let partition_columns: BTreeSet<ColumnId> = windows
                .iter()
                .map(|(w, _)| {
                    w.partition_by.iter().filter_map(|e| if let Expr::Column(c) = e { Some(c.id) } else { None }).collect::<BTreeSet<_>>()
                })
                .reduce(|a, b| a.intersection(&b).copied().collect())
                .unwrap_or_default();
            let (down, keep): (Vec<Expr>, Vec<Expr>) =
                predicates.into_iter().partition(|p| !p.contains_subquery() && !p.columns().is_empty() && subset(p, &partition_columns));
            wrap(LogicalPlan::Window { windows, input: Box::new(push(*input, down)) }, keep)
        }
        LogicalPlan::Limit { limit, offset, input } => {
            wrap(LogicalPlan::Limit { limit, offset, input: Box::new(push(*input, Vec::new())) }, predicates)
        }
        LogicalPlan::Union { inputs, output } => {
            let inputs = inputs
                .into_iter()
                .map(|input| {
                    let map: HashMap<ColumnId, Expr> = output.iter().zip(input.output()).map(|(o, i)| (o.id, i.expr())).collect();
                    let mapped = predicates.iter().map(|p| p.clone().replace_columns(&|c| map.get(&c.id).cloned())).collect();
                    push(input, mapped)
                })
                .collect();
            LogicalPlan::Union { inputs, output }
        }
        LogicalPlan::Scan(mut scan) => {
            for p in predicates {
                if !scan.filters.contains(&p) {
                    scan.filters.push(p);
                }
            }
            LogicalPlan::Scan(scan)
        }
        LogicalPlan::Values { .. } => wrap(plan, predicates),
        LogicalPlan::Join { kind, left, right, condition, mark } => push_join(kind, *left, *right, condition, mark, predicates),
    }
}

fn push_join(
    mut kind: JoinKind,
    left: LogicalPlan,
    right: LogicalPlan,
    condition: Option<Expr>,
    mark: Option<apiary_sql::ColumnRef>,
    predicates: Vec<Expr>,
) -> LogicalPlan {
    let left_ids = left.output_ids();
    let right_ids = right.output_ids();
    // Outer joins whose NULL-extended rows a predicate above would reject anyway.
    let rejects_left = predicates.iter().any(|p| rejects_nulls(p, &left_ids));
    let rejects_right = predicates.iter().any(|p| rejects_nulls(p, &right_ids));
    kind = match kind {
        JoinKind::Left if rejects_right => JoinKind::Inner,
        JoinKind::Right if rejects_left => JoinKind::Inner,
        JoinKind::Full if rejects_left && rejects_right => JoinKind::Inner,
        // Rejecting the right side's NULLs removes the rows that only the left side
        // produced (right columns NULL): what remains is a RIGHT join, and vice versa.
        JoinKind::Full if rejects_right => JoinKind::Right,
        JoinKind::Full if rejects_left => JoinKind::Left,
        other => other,
    };
    let conjuncts = condition.map(|c| c.split_conjunction()).unwrap_or_default();
    let mut to_left = Vec::new();
    let mut to_right = Vec::new();
    let mut join_conditions = Vec::new();
    let mut above = Vec::new();
    match kind {
        JoinKind::Inner => {
            for p in predicates.into_iter().chain(conjuncts) {
                let columns = p.columns();
                if !columns.is_empty() && subset(&p, &left_ids) {
                    to_left.push(p);
                } else if !columns.is_empty() && subset(&p, &right_ids) {
                    to_right.push(p);
                } else {
                    // A disjunction over both sides implies one per side.
                    push_new(&mut to_left, implied_for_side(&p, &left_ids));
                    push_new(&mut to_right, implied_for_side(&p, &right_ids));
                    join_conditions.push(p);
                }
            }
            to_left.extend(rejected_nulls_below(&left, &join_conditions));
            to_right.extend(rejected_nulls_below(&right, &join_conditions));
        }
        JoinKind::Left | JoinKind::Single | JoinKind::Mark { .. } | JoinKind::Semi | JoinKind::Anti { .. } => {
            for p in predicates {
                if subset(&p, &left_ids) {
                    to_left.push(p);
                } else {
                    above.push(p);
                }
            }
            // A NULL-aware join's key equality must stay in the join: it decides from the
            // whole right side (any NULL key? any row?), not from the matching rows.
            let null_aware = matches!(kind, JoinKind::Anti { null_aware: true } | JoinKind::Mark { null_aware: true });
            if !null_aware {
                to_right.extend(transferred_to_right(&to_left, &conjuncts, &left_ids, &right_ids));
            }
            for p in conjuncts {
                let columns = p.columns();
                if null_aware {
                    join_conditions.push(p);
                } else if !columns.is_empty() && subset(&p, &right_ids) {
                    to_right.push(p);
                } else if kind == JoinKind::Semi && !columns.is_empty() && subset(&p, &left_ids) {
                    to_left.push(p);
                } else {
                    join_conditions.push(p);
                }
            }
        }
        JoinKind::Right => {
            for p in predicates {
                if subset(&p, &right_ids) {
                    to_right.push(p);
                } else {
                    above.push(p);
                }
            }
            for p in conjuncts {
                let columns = p.columns();
                if !columns.is_empty() && subset(&p, &left_ids) {
                    to_left.push(p);
                } else {
                    join_conditions.push(p);
                }
            }
        }
        JoinKind::Full => {
            above = predicates;
            join_conditions = conjuncts;
        }
    }
    let join = LogicalPlan::Join {
        kind,
        left: Box::new(push(left, to_left)),
        right: Box::new(push(right, to_right)),
        condition: Expr::conjunction(join_conditions),
        mark,
    };
    wrap(join, above)
}

/// `c IS NOT NULL` for each column `c` of an outer join's NULL-extended side (`side`) that
/// an inner join's condition above it cannot be true without: the outer join's
/// NULL-extended rows could never pass that condition, and pushed into it the predicate
/// turns it into an inner join (TPC-DS Q93: `store_sales LEFT JOIN store_returns ...,
/// reason WHERE sr_reason_sk = r_reason_sk` joins only returned sales, so reason's filter
/// can shrink store_returns first).
fn rejected_nulls_below(side: &LogicalPlan, conditions: &[Expr]) -> Vec<Expr> {
    let LogicalPlan::Join { kind, left, right, .. } = side else { return Vec::new() };
    let null_extended: Vec<apiary_sql::ColumnRef> = match kind {
        JoinKind::Left => right.output(),
        JoinKind::Right => left.output(),
        JoinKind::Full => left.output().into_iter().chain(right.output()).collect(),
        _ => return Vec::new(),
    };
    let mut rejected: Vec<Expr> = Vec::new();
    for condition in conditions {
        let columns = condition.columns();
        for column in null_extended.iter().filter(|c| columns.contains(&c.id)) {
            let not_null = Expr::IsNull { expr: Box::new(column.expr()), negated: true };
            if rejects_nulls(condition, &BTreeSet::from([column.id])) && !rejected.contains(&not_null) {
                rejected.push(not_null);
            }
        }
    }
    rejected
}

/// The predicates on the left side of a join that is not inner, restated on the right
/// side's columns that the join condition equates with theirs (`l.c = r.c`): a right row
/// failing the restated predicate could only match left rows failing the original, which
/// never reach the output (TPC-DS Q78: `ss_sold_year = 2000` with `ws_sold_year =
/// ss_sold_year` in a LEFT join's condition aggregates one year of web sales, not five).
fn transferred_to_right(
    left_predicates: &[Expr],
    conjuncts: &[Expr],
    left_ids: &BTreeSet<ColumnId>,
    right_ids: &BTreeSet<ColumnId>,
) -> Vec<Expr> {
    let mut equal: Vec<(ColumnId, Expr)> = Vec::new();
    for conjunct in conjuncts {
        let Expr::Binary { op: BinaryOp::Eq, left, right, .. } = conjunct else { continue };
        let (Expr::Column(a), Expr::Column(b)) = (left.as_ref(), right.as_ref()) else { continue };
        if a.data_type != b.data_type {
            continue;
        }
        if left_ids.contains(&a.id) && right_ids.contains(&b.id) {
            equal.push((a.id, right.as_ref().clone()));
        } else if left_ids.contains(&b.id) && right_ids.contains(&a.id) {
            equal.push((b.id, left.as_ref().clone()));
        }
    }
    left_predicates
        .iter()
        .filter(|p| !p.columns().is_empty() && p.columns().iter().all(|c| equal.iter().any(|(l, _)| l == c)) && !p.contains_subquery())
        .map(|p| p.clone().replace_columns(&|c: &apiary_sql::ColumnRef| equal.iter().find(|(l, _)| *l == c.id).map(|(_, r)| r.clone())))
        .collect()
}

/// `(a AND b) OR (a AND c)` -> `a AND (b OR c)`: conjuncts common to every disjunct
/// are factored out (which turns TPC-H Q19's join key into a plain equi-join), unless
/// that would run one that can fail on rows the original never ran it on.
pub(crate) fn factor_disjunction(predicate: Expr) -> Expr {
    if !matches!(predicate, Expr::Binary { op: BinaryOp::Or, .. }) {
        return predicate;
    }
    let disjuncts: Vec<Vec<Expr>> = predicate.split_disjunction().into_iter().map(|d| d.clone().split_conjunction()).collect();
    // Factored out, a conjunct runs on every row; in the first disjunct it ran only on
    // rows its predecessors there passed. So it is taken if those predecessors are all
    // taken before it, or if it cannot fail.
    let mut common: Vec<Expr> = Vec::new();
    let mut only_taken_before = true;
    for c in &disjuncts[0] {
        let in_all = disjuncts[1..].iter().all(|d| d.contains(c));
        if in_all && (only_taken_before || c.cannot_fail()) {
            common.push(c.clone());
        } else {
            only_taken_before = false;
        }
    }
    if common.is_empty() {
        return predicate;
    }
    let remainders: Vec<Vec<Expr>> = disjuncts.into_iter().map(|d| d.into_iter().filter(|c| !common.contains(c)).collect()).collect();
    let mut parts = common;
    // If some disjunct is entirely common, the disjunction is implied by the common part.
    if remainders.iter().all(|r| !r.is_empty()) {
        let rest = Expr::disjunction(remainders.into_iter().map(|r| Expr::conjunction(r).expect("non-empty")));
        parts.extend(rest);
    }
    Expr::conjunction(parts).expect("non-empty")
}

/// For a disjunction spanning several relations (or keys and aggregates): the
/// disjunction of, per disjunct, the conjuncts that only read `ids` — implied by the
/// original. `None` when some disjunct has no such conjunct (nothing is implied).
/// Disjuncts that compare two different literals for equality are never true and are
/// left out (a CTE's pushed filter `('s' = 'w' AND ...) OR ...`); equal parts appear once,
/// in the order they first appear (a later part may only be safe to evaluate where an
/// earlier one is not true).
fn implied_for_side(predicate: &Expr, ids: &BTreeSet<ColumnId>) -> Option<Expr> {
    if !matches!(predicate, Expr::Binary { op: BinaryOp::Or, .. }) {
        return None;
    }
    // Only where the values' equality is SQL's: CHAR pads, decimals differ in scale.
    let never_true = |c: &Expr| {
        let Expr::Binary { op: BinaryOp::Eq, left, right, .. } = c else { return false };
        let (Expr::Literal(a, at), Expr::Literal(b, bt)) = (left.as_ref(), right.as_ref()) else { return false };
        at == bt
            && !matches!(at, DataType::Char(_))
            && matches!(
                (a, b),
                (ScalarValue::Utf8(_), ScalarValue::Utf8(_))
                    | (ScalarValue::Int32(_), ScalarValue::Int32(_))
                    | (ScalarValue::Int64(_), ScalarValue::Int64(_))
                    | (ScalarValue::Boolean(_), ScalarValue::Boolean(_))
            )
            && a != b
    };
    let mut parts: Vec<Expr> = Vec::new();
    for disjunct in predicate.split_disjunction() {
        let conjuncts = disjunct.clone().split_conjunction();
        if conjuncts.iter().any(never_true) {
            continue;
        }
        // A conjunct after one of another side runs only on rows that one passed: taken
        // out of the disjunct it would also run on the others, so only if it cannot fail.
        let mut after_other_side = false;
        let mut local: Vec<Expr> = Vec::new();
        for c in conjuncts {
            if c.columns().is_empty() || !subset(&c, ids) {
                after_other_side = true;
            } else if !after_other_side || c.cannot_fail() {
                local.push(c);
            }
        }
        let part = Expr::conjunction(local)?;
        for p in part.split_disjunction() {
            if !parts.contains(p) {
                parts.push(p.clone());
            }
        }
    }
    Expr::disjunction(parts)
}

/// Adds `predicate` to `list` unless one with the same disjuncts (in any order) is there:
/// the same implication reached from different predicates is pushed once.
fn push_new(list: &mut Vec<Expr>, predicate: Option<Expr>) {
    let Some(p) = predicate else { return };
    let parts = p.split_disjunction();
    let same = |q: &Expr| {
        let other = q.split_disjunction();
        other.len() == parts.len() && parts.iter().all(|x| other.contains(x))
    };
    if !list.iter().any(same) {
        list.push(p);
    }
}

/// Whether `predicate` is never TRUE when all of `columns` are NULL.
pub(crate) fn rejects_nulls(predicate: &Expr, columns: &BTreeSet<ColumnId>) -> bool {
    match predicate {
        Expr::Binary { op: BinaryOp::And, left, right, .. } => rejects_nulls(left, columns) || rejects_nulls(right, columns),
        Expr::Binary { op: BinaryOp::Or, left, right, .. } => rejects_nulls(left, columns) && rejects_nulls(right, columns),
        Expr::Binary { op: BinaryOp::IsDistinctFrom | BinaryOp::IsNotDistinctFrom, .. } => false,
        Expr::Binary { op, left, right, .. } if op.is_comparison() => strict(left, columns) || strict(right, columns),
        Expr::Like { expr, pattern, .. } => strict(expr, columns) || strict(pattern, columns),
        Expr::InList { expr, .. } => strict(expr, columns),
        Expr::IsNull { expr, negated: true } => strict(expr, columns),
        Expr::Unary(UnaryOp::Not, inner) => strict(inner, columns),
        Expr::Column(c) => columns.contains(&c.id),
        _ => false,
    }
}

/// Whether `expr` is NULL whenever all of `columns` are NULL.
fn strict(expr: &Expr, columns: &BTreeSet<ColumnId>) -> bool {
    match expr {
        Expr::Column(c) => columns.contains(&c.id),
        Expr::Binary { op: BinaryOp::And | BinaryOp::Or | BinaryOp::IsDistinctFrom | BinaryOp::IsNotDistinctFrom, .. } => false,
        Expr::Binary { left, right, .. } => strict(left, columns) || strict(right, columns),
        Expr::Unary(_, inner) | Expr::Cast { expr: inner, .. } => strict(inner, columns),
        Expr::Like { expr, pattern, .. } => strict(expr, columns) || strict(pattern, columns),
        Expr::Function { func, args, .. } => {
            // These are not NULL merely because one argument is (greatest(NULL, 5) = 5).
            !matches!(
                func,
                ScalarFunction::Coalesce
                    | ScalarFunction::NullIf
                    | ScalarFunction::Concat
                    | ScalarFunction::Greatest
                    | ScalarFunction::Least
                    | ScalarFunction::QueryMask
                    | ScalarFunction::MaskAnd
            ) && args.iter().any(|a| strict(a, columns))
        }
        _ => false,
    }
}
