//! Cardinality estimation: rows and per-column statistics of every plan node, derived
//! from table statistics (row counts, min/max, HyperLogLog distinct counts).
//!
//! Classic System-R style assumptions: predicates are independent (except ranges on one
//! column, which are intersected), values are uniform between min and max, an equi-join
//! matches `1 / max(ndv(left key), ndv(right key))` of the pairs.

use std::collections::{BTreeMap, HashMap};

use apiary_sql::expr::{BinaryOp, ColumnId, ColumnRef, Expr, ScalarFunction, UnaryOp};
use apiary_sql::{JoinKind, LogicalPlan};
use apiary_types::datetime::DateField;
use apiary_types::{DataType, ScalarValue};

/// Selectivity used when nothing better is known.
pub const DEFAULT_SELECTIVITY: f64 = 0.25;
const LIKE_SELECTIVITY: f64 = 0.1;
const MIN_SELECTIVITY: f64 = 1e-4;

#[derive(Clone, Debug)]
pub struct ColumnEstimate {
    /// Distinct non-NULL values.
    pub ndv: f64,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub null_fraction: f64,
    /// The relation the values come from (a scan or CTE reference, named by its first
    /// column), while they are still its column's values; `None` once computed.
    pub origin: Option<ColumnId>,
}

#[derive(Clone, Debug, Default)]
pub struct Estimate {
    pub rows: f64,
    pub columns: HashMap<ColumnId, ColumnEstimate>,
}

impl Estimate {
    /// The estimate after keeping `selectivity` of the rows: distinct counts shrink as
    /// they would when sampling rows uniformly (Cardenas' formula).
    pub fn scaled(mut self, selectivity: f64) -> Estimate {
        let selectivity = selectivity.clamp(0.0, 1.0);
        let old_rows = self.rows.max(1.0);
        self.rows *= selectivity;
        for column in self.columns.values_mut() {
            let rows_per_value = old_rows / column.ndv.max(1.0);
            column.ndv = (column.ndv * (1.0 - (1.0 - selectivity).powf(rows_per_value))).max(1.0).min(self.rows.max(1.0));
        }
        self
    }

    /// A column that a conjunct restricts to a list of values (`c = 1`, `c IN (1, 2)`,
    /// `c = 1 OR c = 2`) has at most that many distinct values left: sampling rows
    /// ([`Estimate::scaled`]) would keep nearly all of a column's values when each value
    /// has many rows (two years of `date_dim` still look like 195 years).
    fn restricted_to_values(mut self, conjuncts: &[Expr]) -> Estimate {
        for conjunct in conjuncts {
            if let Some((column, values)) = value_count(conjunct) {
                if let Some(stat) = self.columns.get_mut(&column) {
                    stat.ndv = stat.ndv.min(values).max(1.0);
                }
            }
        }
        self
    }

    pub fn ndv(&self, expr: &Expr) -> f64 {
        self.column(expr).map_or(self.rows, |s| s.ndv).max(1.0)
    }

    /// The statistics of the column `expr` reads, through casts.
    fn column(&self, expr: &Expr) -> Option<&ColumnEstimate> {
        match expr {
            Expr::Column(c) => self.columns.get(&c.id),
            Expr::Cast { expr, .. } => self.column(expr),
            _ => None,
        }
    }
}

/// A recursive CTE's rows per row of its non-recursive term (the depth is unknown).
const RECURSION_GROWTH: f64 = 10.0;

/// Estimates rows and column statistics of `plan`.
pub fn estimate(plan: &LogicalPlan) -> Estimate {
    match plan {
        LogicalPlan::Scan(scan) => {
            let data = scan.table.snapshot();
            let rows = scan.table.row_estimate() as f64;
            let mut columns = HashMap::new();
            let origin = scan.columns.first().map(|(_, c)| c.id);
            // A deferred table (read_parquet) is not read yet: its source's statistics.
            if let Some(deferred) = scan.table.deferred_rows() {
                let stats = deferred.column_statistics();
                for (idx, column) in &scan.columns {
                    let Some(Some(stats)) = stats.get(*idx) else { continue };
                    let non_null = (rows - stats.null_count as f64).max(0.0);
                    let (min, max) = (stats.min.as_f64(), stats.max.as_f64());
                    // Integers and dates have at most as many values as their range.
                    let range = match (min, max) {
                        (Some(lo), Some(hi)) if column.data_type.is_integer() || column.data_type == DataType::Date => Some(hi - lo + 1.0),
                        _ => None,
                    };
                    let ndv = stats.distinct.or(range).map_or(non_null, |n| n.min(non_null));
                    columns.insert(
                        column.id,
                        ColumnEstimate {
                            ndv: ndv.max(1.0),
                            min,
                            max,
                            null_fraction: if rows > 0.0 { stats.null_count as f64 / rows } else { 0.0 },
                            origin,
                        },
                    );
                }
            }
            let stats = if scan.table.deferred_rows().is_some() { &[][..] } else { &data.stats.columns[..] };
            for (idx, column) in &scan.columns {
                let Some(stats) = stats.get(*idx) else { continue };
                columns.insert(
                    column.id,
                    ColumnEstimate {
                        ndv: stats.distinct_count(data.row_count()).max(1.0),
                        min: stats.min.as_f64(),
                        max: stats.max.as_f64(),
                        null_fraction: if rows > 0.0 { stats.null_count as f64 / rows } else { 0.0 },
                        origin,
                    },
                );
            }
            let base = Estimate { rows, columns };
            let selectivity = conjunction_selectivity(&scan.filters, &base);
            base.scaled(selectivity).restricted_to_values(&scan.filters)
        }
        LogicalPlan::Cte { body, .. } => estimate(body),
        // Unknown depth: a few iterations of the non-recursive term's size.
        LogicalPlan::RecursiveCte { anchor, output, .. } => {
            let anchor = estimate(anchor);
            let rows = (anchor.rows * RECURSION_GROWTH).max(1.0);
            let columns = output
                .iter()
                .map(|c| (c.id, ColumnEstimate { ndv: rows, min: None, max: None, null_fraction: 0.0, origin: None }))
                .collect();
            Estimate { rows, columns }
        }
        LogicalPlan::WorkTableScan(scan) => {
            let anchor = estimate(&scan.anchor);
            let rows = anchor.rows.max(1.0);
            let columns = scan
                .columns
                .iter()
                .map(|c| (c.id, ColumnEstimate { ndv: rows, min: None, max: None, null_fraction: 0.0, origin: None }))
                .collect();
            Estimate { rows, columns }
        }
        // The definition's estimate under this reference's column ids; each reference is a
        // relation of its own.
        LogicalPlan::CteScan(scan) => {
            let definition = estimate(&scan.definition);
            let origin = scan.columns.first().map(|(_, c)| c.id);
            let columns = scan
                .columns
                .iter()
                .filter_map(|(source, column)| definition.columns.get(source).map(|s| (column.id, ColumnEstimate { origin, ..s.clone() })))
                .collect();
            Estimate { rows: definition.rows, columns }
        }
        LogicalPlan::Values { rows, output } => {
            let n = rows.len() as f64;
            let columns = output
                .iter()
                .map(|c| (c.id, ColumnEstimate { ndv: n.max(1.0), min: None, max: None, null_fraction: 0.0, origin: None }))
                .collect();
            Estimate { rows: n, columns }
        }
        LogicalPlan::Filter { predicate, input } => {
            let input = estimate(input);
            let conjuncts = predicate.clone().split_conjunction();
            let selectivity = conjunction_selectivity(&conjuncts, &input);
            input.scaled(selectivity).restricted_to_values(&conjuncts)
        }
        LogicalPlan::Project { exprs, input } => {
            let input = estimate(input);
            let mut columns = HashMap::new();
            for (expr, column) in exprs {
                let stat = match expr {
                    Expr::Column(c) => input.columns.get(&c.id).cloned(),
                    Expr::Cast { expr, .. } => match expr.as_ref() {
                        Expr::Column(c) => input.columns.get(&c.id).cloned(),
                        _ => None,
                    },
                    // Shared operators' query masks: at most one value per set of queries.
                    Expr::Function { func: ScalarFunction::QueryMask, args, .. } => Some(ColumnEstimate {
                        ndv: 2f64.powi(args.len() as i32).min(input.rows).max(1.0),
                        min: None,
                        max: None,
                        null_fraction: 0.0,
                        origin: None,
                    }),
                    // A date part has few values: a year per 365 days of the column's
                    // range, twelve months, ... (so that a GROUP BY year is not taken for a
                    // GROUP BY of every row).
                    Expr::Function { func: ScalarFunction::Extract(field), args, .. } => match args.as_slice() {
                        [Expr::Column(c)] if c.data_type == DataType::Date => input.columns.get(&c.id).map(|s| {
                            let span_years = match (s.min, s.max) {
                                (Some(min), Some(max)) if max >= min => ((max - min) / 365.0).floor() + 2.0,
                                _ => s.ndv,
                            };
                            let parts = match field {
                                DateField::Year => span_years,
                                DateField::Quarter => 4.0,
                                DateField::Month => 12.0,
                                DateField::Week => 53.0,
                                DateField::Day => 31.0,
                                DateField::DayOfWeek => 7.0,
                                DateField::DayOfYear => 366.0,
                                _ => s.ndv,
                            };
                            ColumnEstimate {
                                ndv: parts.min(s.ndv).max(1.0),
                                min: None,
                                max: None,
                                null_fraction: s.null_fraction,
                                origin: None,
                            }
                        }),
                        _ => None,
                    },
                    // Their intersections (joined rows): at most one value per pair.
                    Expr::Function { func: ScalarFunction::MaskAnd, args, .. } => {
                        let ndv = |e: &Expr| match e {
                            Expr::Column(c) => input.columns.get(&c.id).map_or(input.rows, |s| s.ndv),
                            _ => input.rows,
                        };
                        Some(ColumnEstimate {
                            ndv: args.iter().map(ndv).product::<f64>().min(input.rows).max(1.0),
                            min: None,
                            max: None,
                            null_fraction: 0.0,
                            origin: None,
                        })
                    }
                    _ => None,
                };
                let stat =
                    stat.unwrap_or(ColumnEstimate { ndv: input.rows.max(1.0), min: None, max: None, null_fraction: 0.0, origin: None });
                columns.insert(column.id, stat);
            }
            Estimate { rows: input.rows, columns }
        }
        LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input } => {
            let input = estimate(input);
            let rows = match grouping_sets {
                None if groups.is_empty() => 1.0,
                None => group_count(groups.iter().map(|(e, _)| e), &input),
                Some(g) => {
                    g.sets.iter().map(|set| if set.is_empty() { 1.0 } else { group_count(set.iter().map(|&k| &groups[k].0), &input) }).sum()
                }
            };
            let mut columns = HashMap::new();
            for (expr, column) in groups {
                let mut stat = match expr {
                    Expr::Column(c) => input.columns.get(&c.id).cloned(),
                    _ => None,
                }
                .unwrap_or(ColumnEstimate { ndv: rows, min: None, max: None, null_fraction: 0.0, origin: None });
                stat.ndv = stat.ndv.min(rows).max(1.0);
                columns.insert(column.id, stat);
            }
            for (_, column) in aggregates {
                columns.insert(column.id, ColumnEstimate { ndv: rows.max(1.0), min: None, max: None, null_fraction: 0.0, origin: None });
            }
            if let Some(g) = grouping_sets {
                columns
                    .insert(g.id.id, ColumnEstimate { ndv: g.sets.len() as f64, min: None, max: None, null_fraction: 0.0, origin: None });
            }
            Estimate { rows, columns }
        }
        LogicalPlan::Join { kind, left, right, condition, mark } => {
            let l = estimate(left);
            let r = estimate(right);
            join_estimate(*kind, &l, &r, condition.as_ref(), mark.as_ref().map(|m| m.id))
        }
        LogicalPlan::Sort { input, .. } => estimate(input),
        LogicalPlan::Window { windows, input } => {
            let mut e = estimate(input);
            for (_, column) in windows {
                e.columns
                    .insert(column.id, ColumnEstimate { ndv: e.rows.max(1.0), min: None, max: None, null_fraction: 0.0, origin: None });
            }
            e
        }
        LogicalPlan::Limit { limit, offset, input } => {
            let mut e = estimate(input);
            if let Some(limit) = limit {
                e.rows = e.rows.min(*limit as f64 + *offset as f64);
            }
            e
        }
        LogicalPlan::Union { inputs, output } => {
            let estimates: Vec<Estimate> = inputs.iter().map(estimate).collect();
            let rows: f64 = estimates.iter().map(|e| e.rows).sum();
            // A column's distinct values are at most the sum of its inputs' (TPC-DS Q05: the
            // store keys of a union of sales and returns are a dozen, not millions, so the
            // union joined with `store` is not estimated at a dozen rows).
            let input_outputs: Vec<Vec<ColumnRef>> = inputs.iter().map(|i| i.output()).collect();
            let columns = output
                .iter()
                .enumerate()
                .map(|(position, c)| {
                    let ndv: f64 = estimates
                        .iter()
                        .zip(&input_outputs)
                        .map(|(e, out)| out.get(position).map_or(e.rows, |column| e.ndv(&column.expr())))
                        .sum();
                    (c.id, ColumnEstimate { ndv: ndv.min(rows).max(1.0), min: None, max: None, null_fraction: 0.0, origin: None })
                })
                .collect();
            Estimate { rows, columns }
        }
    }
}

/// Number of groups of a GROUP BY over `keys`: the product of the keys' distinct counts,
/// capped by the input rows.
pub fn group_count<'a>(keys: impl Iterator<Item = &'a Expr>, input: &Estimate) -> f64 {
    let mut product = 1.0f64;
    for key in keys {
        product *= input.ndv(key);
    }
    product.min(input.rows).max(1.0)
}

/// Rows of a join of estimates `l` and `r`.
pub fn join_estimate(kind: JoinKind, l: &Estimate, r: &Estimate, condition: Option<&Expr>, mark: Option<ColumnId>) -> Estimate {
    let mut merged = Estimate { rows: l.rows * r.rows, columns: l.columns.clone() };
    merged.columns.extend(r.columns.iter().map(|(k, v)| (*k, v.clone())));
    let conjuncts = condition.map(|c| c.clone().split_conjunction()).unwrap_or_default();
    let selectivity = conjunction_selectivity(&conjuncts, &merged);
    let inner_rows = l.rows * r.rows * selectivity;
    let semi_fraction = || {
        // Fraction of left rows with a partner: by key distinct counts when equi-joined.
        for c in &conjuncts {
            if let Expr::Binary { op: BinaryOp::Eq, left, right, .. } = c {
                let (lk, rk) = if l.columns.keys().any(|id| left.columns().contains(id)) { (left, right) } else { (right, left) };
                let ndv_l = l.ndv(lk);
                let ndv_r = r.ndv(rk);
                return (ndv_r / ndv_l).min(1.0);
            }
        }
        0.5
    };
    let rows = match kind {
        JoinKind::Inner => inner_rows,
        JoinKind::Left => inner_rows.max(l.rows),
        JoinKind::Right => inner_rows.max(r.rows),
        JoinKind::Full => inner_rows.max(l.rows + r.rows),
        JoinKind::Semi => l.rows * semi_fraction(),
        JoinKind::Anti { .. } => l.rows * (1.0 - semi_fraction()).max(0.05),
        JoinKind::Mark { .. } | JoinKind::Single => l.rows,
    };
    let rows = rows.max(if l.rows > 0.0 && r.rows > 0.0 { 1.0 } else { 0.0 });
    let keep_right = kind.outputs_right();
    // The NULL-extended side of an outer join is NULL in the rows of the other side
    // that found no partner: `LEFT JOIN r ... WHERE r.key IS NULL` (TPC-DS Q78's "not
    // returned" sales) keeps those rows, not none.
    let null_extended = |side: &Estimate, unmatched: f64| -> HashMap<ColumnId, ColumnEstimate> {
        let added = if rows > 0.0 { (unmatched / rows).clamp(0.0, 1.0) } else { 0.0 };
        side.columns
            .iter()
            .map(|(k, v)| (*k, ColumnEstimate { null_fraction: added + (1.0 - added) * v.null_fraction, ..v.clone() }))
            .collect()
    };
    let (left_columns, right_columns) = match kind {
        JoinKind::Left => (l.columns.clone(), null_extended(r, l.rows * (1.0 - semi_fraction()))),
        JoinKind::Right => (null_extended(l, (r.rows - inner_rows).max(0.0)), r.columns.clone()),
        JoinKind::Full => (null_extended(l, (r.rows - inner_rows).max(0.0)), null_extended(r, l.rows * (1.0 - semi_fraction()))),
        _ => (l.columns.clone(), r.columns.clone()),
    };
    let mut columns = left_columns;
    if keep_right {
        columns.extend(right_columns);
    }
    for stat in columns.values_mut() {
        stat.ndv = stat.ndv.min(rows.max(1.0));
    }
    if let Some(mark) = mark {
        columns.insert(mark, ColumnEstimate { ndv: 2.0, min: None, max: None, null_fraction: 0.0, origin: None });
    }
    Estimate { rows, columns }
}

/// Selectivity of a conjunction; range predicates on the same column are combined
/// into one interval instead of being multiplied.
pub fn conjunction_selectivity(conjuncts: &[Expr], input: &Estimate) -> f64 {
    // Ordered by column, so the factors multiply in the same order in every process (a
    // hash map's order varies, and with it the last bits of the product): pinned plans
    // print these estimates.
    let mut ranges: BTreeMap<ColumnId, (Option<f64>, Option<f64>)> = BTreeMap::new();
    let mut values: BTreeMap<ColumnId, f64> = BTreeMap::new();
    let mut selectivity = 1.0;
    // Equalities between columns (join keys) of the same two relations are assumed
    // correlated: a composite key (l_partkey, l_suppkey) = (ps_partkey, ps_suppkey) is
    // about as selective as its most selective part, not the product of the parts (which
    // would badly underestimate). Equalities between different pairs of relations (a
    // cycle in the join graph: TPC-DS Q72's d1.d_week_seq = d2.d_week_seq beside
    // inv_date_sk = d2.d_date_sk) are independent, and multiply. Keys of unknown origin
    // count as one pair.
    let mut column_equality: BTreeMap<(Option<ColumnId>, Option<ColumnId>), f64> = BTreeMap::new();
    let origin = |e: &Expr| input.column(e).and_then(|s| s.origin);
    for conjunct in conjuncts {
        if let Expr::Binary { op: BinaryOp::Eq, left, right, .. } = conjunct {
            if !matches!(left.as_ref(), Expr::Literal(..)) && !matches!(right.as_ref(), Expr::Literal(..)) {
                let s = predicate_selectivity(conjunct, input);
                let pair = match (origin(left), origin(right)) {
                    (Some(a), Some(b)) => (Some(a.min(b)), Some(a.max(b))),
                    _ => (None, None),
                };
                let entry = column_equality.entry(pair).or_insert(s);
                *entry = entry.min(s);
                continue;
            }
        }
        // Lists of values on one column (`d_year IN (2001, 2002)`, and the same list again
        // as `d_year = 2001 OR d_year = 2002` from a CTE's pushed filter) are intersected:
        // the smallest list counts once.
        if let Some((column, count)) = value_count(conjunct) {
            let entry = values.entry(column).or_insert(count);
            *entry = entry.min(count);
            continue;
        }
        if let Some((column, lower, upper)) = range_bound(conjunct) {
            if input.columns.get(&column).is_some_and(|s| s.min.is_some() && s.max.is_some()) {
                let entry = ranges.entry(column).or_insert((None, None));
                if let Some(l) = lower {
                    entry.0 = Some(entry.0.map_or(l, |e: f64| e.max(l)));
                }
                if let Some(u) = upper {
                    entry.1 = Some(entry.1.map_or(u, |e: f64| e.min(u)));
                }
                continue;
            }
        }
        selectivity *= predicate_selectivity(conjunct, input);
    }
    for (column, (lower, upper)) in ranges {
        let stat = &input.columns[&column];
        let (min, max) = (stat.min.unwrap_or(0.0), stat.max.unwrap_or(0.0));
        let width = (max - min).max(1e-9);
        let lo = lower.unwrap_or(min).max(min);
        let hi = upper.unwrap_or(max).min(max);
        let fraction = ((hi - lo) / width).clamp(0.0, 1.0);
        // Point ranges on discrete values still keep about one value's worth of rows.
        let fraction = fraction.max(1.0 / stat.ndv.max(1.0)).max(MIN_SELECTIVITY);
        selectivity *= fraction * (1.0 - stat.null_fraction);
    }
    for (column, count) in values {
        let stat = input.columns.get(&column);
        let ndv = stat.map_or(input.rows, |s| s.ndv).max(1.0);
        selectivity *= (count / ndv).min(1.0) * (1.0 - stat.map_or(0.0, |s| s.null_fraction));
    }
    selectivity *= column_equality.values().product::<f64>();
    // No lower clamp: an equi-join's selectivity is legitimately tiny (1 / distinct keys).
    selectivity.clamp(0.0, 1.0)
}

/// The column a predicate restricts to a list of values, and how many values.
fn value_count(expr: &Expr) -> Option<(ColumnId, f64)> {
    match expr {
        Expr::Binary { op: BinaryOp::Eq, left, right, .. } => match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), Expr::Literal(..)) | (Expr::Literal(..), Expr::Column(c)) => Some((c.id, 1.0)),
            _ => None,
        },
        Expr::InList { expr, list, negated: false } => match expr.as_ref() {
            Expr::Column(c) if list.iter().all(|v| matches!(v, Expr::Literal(..))) => Some((c.id, list.len() as f64)),
            _ => None,
        },
        Expr::Binary { op: BinaryOp::Or, left, right, .. } => {
            let (a, n) = value_count(left)?;
            let (b, m) = value_count(right)?;
            (a == b).then_some((a, n + m))
        }
        _ => None,
    }
}

/// `column op literal` as a range: (column, lower bound, upper bound).
fn range_bound(expr: &Expr) -> Option<(ColumnId, Option<f64>, Option<f64>)> {
    let Expr::Binary { op, left, right, .. } = expr else { return None };
    let (column, value, op) = match (left.as_ref(), right.as_ref()) {
        (Expr::Column(c), Expr::Literal(v, _)) => (c.id, v, *op),
        (Expr::Literal(v, _), Expr::Column(c)) => (c.id, v, op.flipped()),
        _ => return None,
    };
    let value = literal_f64(value)?;
    match op {
        BinaryOp::Lt | BinaryOp::LtEq => Some((column, None, Some(value))),
        BinaryOp::Gt | BinaryOp::GtEq => Some((column, Some(value), None)),
        _ => None,
    }
}

fn literal_f64(value: &ScalarValue) -> Option<f64> {
    match value {
        ScalarValue::Utf8(_) | ScalarValue::Null | ScalarValue::Boolean(_) | ScalarValue::Interval(_) => None,
        other => other.as_f64(),
    }
}

/// Selectivity of one predicate.
pub fn predicate_selectivity(expr: &Expr, input: &Estimate) -> f64 {
    match expr {
        Expr::Literal(ScalarValue::Boolean(true), _) => 1.0,
        Expr::Literal(_, _) => 0.0,
        Expr::Binary { op: BinaryOp::And, left, right, .. } => conjunction_selectivity(&[(**left).clone(), (**right).clone()], input),
        Expr::Binary { op: BinaryOp::Or, left, right, .. } => {
            let a = predicate_selectivity(left, input);
            let b = predicate_selectivity(right, input);
            (a + b - a * b).min(1.0)
        }
        Expr::Unary(UnaryOp::Not, inner) => 1.0 - predicate_selectivity(inner, input),
        Expr::Binary { op: BinaryOp::Eq | BinaryOp::IsNotDistinctFrom, left, right, .. } => match (left.as_ref(), right.as_ref()) {
            (Expr::Literal(..), other) | (other, Expr::Literal(..)) => 1.0 / input.ndv(other),
            (a, b) => 1.0 / input.ndv(a).max(input.ndv(b)),
        },
        Expr::Binary { op: BinaryOp::NotEq | BinaryOp::IsDistinctFrom, left, right, .. } => match (left.as_ref(), right.as_ref()) {
            (Expr::Literal(..), other) | (other, Expr::Literal(..)) => 1.0 - 1.0 / input.ndv(other),
            _ => 0.9,
        },
        Expr::Binary { op, .. } if op.is_comparison() => match range_bound(expr) {
            Some((column, _, _)) if input.columns.get(&column).is_some_and(|s| s.min.is_some() && s.max.is_some()) => {
                conjunction_selectivity(std::slice::from_ref(expr), input)
            }
            _ => 1.0 / 3.0,
        },
        Expr::InList { expr, list, negated } => {
            let s = (list.len() as f64 / input.ndv(expr)).min(1.0);
            if *negated {
                1.0 - s
            } else {
                s
            }
        }
        Expr::Like { negated, .. } => {
            if *negated {
                1.0 - LIKE_SELECTIVITY
            } else {
                LIKE_SELECTIVITY
            }
        }
        Expr::IsNull { expr, negated } => {
            let fraction = match expr.as_ref() {
                Expr::Column(c) => input.columns.get(&c.id).map_or(0.1, |s| s.null_fraction),
                _ => 0.1,
            };
            if *negated {
                1.0 - fraction
            } else {
                fraction
            }
        }
        _ => DEFAULT_SELECTIVITY,
    }
}
