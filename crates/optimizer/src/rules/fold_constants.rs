//! `fold_constants`: evaluates constant sub-expressions once at planning time and
//! simplifies boolean logic (`x AND TRUE` -> `x`, `x OR TRUE` -> `TRUE`, ...).
//!
//! Folding lets later rules see literals: zone maps and selectivity estimates need
//! `l_shipdate < DATE '1998-09-02'`, not `... < DATE '1998-12-01' - INTERVAL '90' DAY`.

use apiary_common::Result;
use apiary_sql::expr::ColumnRef;
use apiary_sql::expr::{BinaryOp, Expr, UnaryOp};
use apiary_sql::{JoinKind, LogicalPlan};
use apiary_types::ScalarValue;

use crate::OptimizerContext;

pub fn run(plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    let plan = plan.map_expressions(&mut |expr| fold(expr, ctx));
    Ok(remove_trivial_filters(plan, ctx))
}

/// Folds one expression tree bottom-up. A constant sub-expression whose evaluation fails
/// (`1/0`, a bad cast) stays as it is: SQL evaluates it only for rows that reach it, and
/// `COALESCE(-56, 1/0)` or `CASE WHEN FALSE THEN 1/0 ELSE 0 END` never does.
pub fn fold(expr: Expr, ctx: &OptimizerContext) -> Expr {
    expr.transform_up(&mut |e| {
        let e = simplify(e);
        if !e.is_literal() && e.is_constant() {
            let data_type = e.data_type();
            if let Ok(value) = ctx.evaluator.evaluate(&e) {
                return Expr::Literal(value, data_type);
            }
        }
        e
    })
}

fn as_bool(e: &Expr) -> Option<Option<bool>> {
    match e {
        Expr::Literal(ScalarValue::Boolean(b), _) => Some(Some(*b)),
        Expr::Literal(ScalarValue::Null, _) => Some(None),
        _ => None,
    }
}

/// `CAST(date AS TIMESTAMP) op TIMESTAMP 't'` as a DATE comparison, so DATE columns are
/// compared natively (and zone maps apply): TPC-H writes `l_shipdate <= DATE '...' -
/// INTERVAL '90' DAY`, which is a TIMESTAMP.
fn date_comparison(op: BinaryOp, left: Expr, right: Expr, data_type: apiary_types::DataType) -> Expr {
    use apiary_types::datetime::MICROS_PER_DAY;
    use apiary_types::DataType as D;
    let rebuild = |op, l, r| Expr::Binary { op, left: Box::new(l), right: Box::new(r), data_type };
    let (column, micros, op, flipped) = match (&left, &right) {
        (Expr::Cast { expr, to: D::Timestamp }, Expr::Literal(ScalarValue::Timestamp(t), _)) if expr.data_type() == D::Date => {
            ((**expr).clone(), *t, op, false)
        }
        (Expr::Literal(ScalarValue::Timestamp(t), _), Expr::Cast { expr, to: D::Timestamp }) if expr.data_type() == D::Date => {
            ((**expr).clone(), *t, op.flipped(), true)
        }
        _ => return rebuild(op, left, right),
    };
    let day = micros.div_euclid(MICROS_PER_DAY);
    let midnight = micros.rem_euclid(MICROS_PER_DAY) == 0;
    let Ok(day) = i32::try_from(day) else { return rebuild(op, left, right) };
    let date = |d: i32| Expr::Literal(ScalarValue::Date(d), D::Date);
    // A date d (at midnight) compared with time t on day `day`:
    let rewritten = match (op, midnight) {
        (_, true) => Some((op, day)),
        (BinaryOp::Lt | BinaryOp::LtEq, false) => Some((BinaryOp::LtEq, day)),
        (BinaryOp::Gt | BinaryOp::GtEq, false) => Some((BinaryOp::Gt, day)),
        _ => None,
    };
    match rewritten {
        Some((new_op, d)) => rebuild(new_op, column, date(d)),
        None if flipped => rebuild(op.flipped(), right, left),
        None => rebuild(op, left, right),
    }
}

fn is_null_literal(e: &Expr) -> bool {
    matches!(e, Expr::Literal(ScalarValue::Null, _))
}

fn simplify(expr: Expr) -> Expr {
    match expr {
        // A strict operator with a NULL operand is NULL, whatever the other operand
        // would give (also an error: `a/0 * NULL` is NULL in PostgreSQL).
        Expr::Binary { op, left, right, data_type }
            if (op.is_arithmetic()
                || op == BinaryOp::Concat
                || (op.is_comparison() && !matches!(op, BinaryOp::IsDistinctFrom | BinaryOp::IsNotDistinctFrom)))
                && (is_null_literal(&left) || is_null_literal(&right)) =>
        {
            Expr::Literal(ScalarValue::Null, data_type)
        }
        Expr::InList { expr, .. } if is_null_literal(&expr) => Expr::Literal(ScalarValue::Null, apiary_types::DataType::Boolean),
        // Arms whose condition is a constant other than TRUE are never taken; a leading
        // TRUE arm is always taken (what it skips is never evaluated).
        Expr::Case { whens, otherwise, data_type } if whens.iter().any(|(w, _)| as_bool(w).is_some()) => {
            let mut kept = Vec::new();
            for (when, then) in whens {
                match as_bool(&when) {
                    Some(Some(true)) if kept.is_empty() => return then,
                    Some(Some(true)) => {
                        return Expr::Case { whens: kept, otherwise: Some(Box::new(then)), data_type };
                    }
                    Some(_) => {}
                    None => kept.push((when, then)),
                }
            }
            if kept.is_empty() {
                return otherwise.map(|e| *e).unwrap_or(Expr::Literal(ScalarValue::Null, data_type));
            }
            Expr::Case { whens: kept, otherwise, data_type }
        }
        Expr::Binary { op, left, right, data_type }
            if op.is_comparison() && !matches!(op, BinaryOp::IsDistinctFrom | BinaryOp::IsNotDistinctFrom) =>
        {
            date_comparison(op, *left, *right, data_type)
        }
        Expr::Binary { op: BinaryOp::And, left, right, data_type } => match (as_bool(&left), as_bool(&right)) {
            (Some(Some(true)), _) => *right,
            (_, Some(Some(true))) => *left,
            (Some(Some(false)), _) | (_, Some(Some(false))) => Expr::boolean(false),
            _ => Expr::Binary { op: BinaryOp::And, left, right, data_type },
        },
        Expr::Binary { op: BinaryOp::Or, left, right, data_type } => match (as_bool(&left), as_bool(&right)) {
            (Some(Some(false)), _) => *right,
            (_, Some(Some(false))) => *left,
            (Some(Some(true)), _) | (_, Some(Some(true))) => Expr::boolean(true),
            _ => Expr::Binary { op: BinaryOp::Or, left, right, data_type },
        },
        Expr::Unary(UnaryOp::Not, inner) => match *inner {
            Expr::Unary(UnaryOp::Not, x) if x.data_type() == apiary_types::DataType::Boolean => *x,
            other => Expr::Unary(UnaryOp::Not, Box::new(other)),
        },
        other => other,
    }
}

fn remove_trivial_filters(plan: LogicalPlan, ctx: &mut OptimizerContext) -> LogicalPlan {
    let plan = crate::rules::unnest_subqueries::map_children(plan, &mut |child| Ok(remove_trivial_filters(child, ctx)))
        .expect("infallible rewrite");
    match plan {
        LogicalPlan::Filter { predicate: Expr::Literal(ScalarValue::Boolean(true), _), input } => *input,
        // A filter that is never TRUE keeps no row.
        LogicalPlan::Filter { predicate: Expr::Literal(ScalarValue::Boolean(false) | ScalarValue::Null, _), input } => {
            LogicalPlan::Values { rows: Vec::new(), output: input.output() }
        }
        LogicalPlan::Join { kind, left, right, condition: Some(Expr::Literal(ScalarValue::Boolean(true), _)), mark } => {
            LogicalPlan::Join { kind, left, right, condition: None, mark }
        }
        LogicalPlan::Join {
            kind,
            left,
            right,
            condition: Some(Expr::Literal(ScalarValue::Boolean(false) | ScalarValue::Null, _)),
            mark,
        } => never_matching_join(kind, *left, *right, mark, ctx),
        other => remove_empty_inputs(other),
    }
}

fn is_empty(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Values { rows, .. } if rows.is_empty())
}

/// An operator over an input that is known to produce no rows (a filter that is never
/// TRUE, often a UNION branch whose constant column a pushed-down predicate rejects)
/// produces none either, so it is not run at all; UNION drops such inputs.
fn remove_empty_inputs(plan: LogicalPlan) -> LogicalPlan {
    let empty = |plan: &LogicalPlan| LogicalPlan::Values { rows: Vec::new(), output: plan.output() };
    let never_true = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Boolean(false) | ScalarValue::Null, _));
    match &plan {
        LogicalPlan::Scan(scan) if scan.filters.iter().any(never_true) => empty(&plan),
        LogicalPlan::Filter { input, .. }
        | LogicalPlan::Project { input, .. }
        | LogicalPlan::Sort { input, .. }
        | LogicalPlan::Limit { input, .. }
        | LogicalPlan::Window { input, .. }
            if is_empty(input) =>
        {
            empty(&plan)
        }
        // A global aggregate (or an empty grouping set) still has its row.
        LogicalPlan::Aggregate { groups, grouping_sets: None, input, .. } if !groups.is_empty() && is_empty(input) => empty(&plan),
        LogicalPlan::Join { kind, left, right, .. } => {
            let no_rows = match kind {
                JoinKind::Inner => is_empty(left) || is_empty(right),
                JoinKind::Right => is_empty(right),
                JoinKind::Full => is_empty(left) && is_empty(right),
                JoinKind::Left | JoinKind::Semi | JoinKind::Anti { .. } | JoinKind::Mark { .. } | JoinKind::Single => is_empty(left),
            };
            let no_rows = no_rows || (*kind == JoinKind::Semi && is_empty(right));
            if no_rows {
                empty(&plan)
            } else {
                plan
            }
        }
        LogicalPlan::Union { inputs, .. } if inputs.iter().any(is_empty) => {
            let LogicalPlan::Union { inputs, output } = plan else { unreachable!("matched above") };
            let mut kept: Vec<LogicalPlan> = inputs.into_iter().filter(|i| !is_empty(i)).collect();
            match kept.len() {
                0 => LogicalPlan::Values { rows: Vec::new(), output },
                1 => {
                    // The one input left, under the union's column ids.
                    let input = kept.pop().expect("one input");
                    let exprs = input.output().into_iter().zip(output).map(|(c, o)| (c.expr(), o)).collect();
                    LogicalPlan::Project { exprs, input: Box::new(input) }
                }
                _ => LogicalPlan::Union { inputs: kept, output },
            }
        }
        _ => plan,
    }
}

/// A join whose condition is never TRUE, without comparing any pair of rows (`LEFT JOIN
/// ... ON a = b AND 1 = 0` compared every pair before): inner and semi joins produce
/// nothing, outer joins NULL-extend their preserved side(s).
fn never_matching_join(
    kind: JoinKind,
    left: LogicalPlan,
    right: LogicalPlan,
    mark: Option<ColumnRef>,
    ctx: &mut OptimizerContext,
) -> LogicalPlan {
    // The kept side's columns, and NULLs for the other side's (under the join's column
    // ids, or fresh ones for the branches of a FULL join's union).
    let null_extended = |kept: LogicalPlan, missing: &LogicalPlan, kept_first: bool, ctx: &mut Option<&mut OptimizerContext>| {
        let mut fresh = |c: ColumnRef| match ctx {
            Some(ctx) => ctx.new_column(&c.name, c.data_type, true),
            None => ColumnRef { nullable: true, ..c },
        };
        let nulls: Vec<(Expr, ColumnRef)> =
            missing.output().into_iter().map(|c| (Expr::Literal(ScalarValue::Null, c.data_type), fresh(c))).collect();
        let kept_exprs: Vec<(Expr, ColumnRef)> = kept.output().into_iter().map(|c| (c.expr(), fresh(c))).collect();
        let exprs = if kept_first { kept_exprs.into_iter().chain(nulls).collect() } else { nulls.into_iter().chain(kept_exprs).collect() };
        LogicalPlan::Project { exprs, input: Box::new(kept) }
    };
    match kind {
        JoinKind::Left | JoinKind::Single => null_extended(left, &right, true, &mut None),
        JoinKind::Right => null_extended(right, &left, false, &mut None),
        JoinKind::Full => {
            let output =
                LogicalPlan::Join { kind, left: Box::new(left.clone()), right: Box::new(right.clone()), condition: None, mark: None }
                    .output();
            let left_rows = null_extended(left.clone(), &right, true, &mut Some(&mut *ctx));
            let right_rows = null_extended(right, &left, false, &mut Some(&mut *ctx));
            LogicalPlan::Union { inputs: vec![left_rows, right_rows], output }
        }
        JoinKind::Anti { null_aware: false } => left,
        JoinKind::Mark { null_aware: false } => {
            let mut exprs: Vec<(Expr, ColumnRef)> = left.output().into_iter().map(|c| (c.expr(), c)).collect();
            exprs.extend(mark.map(|m| (Expr::boolean(false), m)));
            LogicalPlan::Project { exprs, input: Box::new(left) }
        }
        // NULL-aware joins decide on the whole right side; keep them as they are.
        JoinKind::Anti { null_aware: true } | JoinKind::Mark { null_aware: true } => {
            LogicalPlan::Join { kind, left: Box::new(left), right: Box::new(right), condition: Some(Expr::boolean(false)), mark }
        }
        JoinKind::Inner | JoinKind::Semi => {
            let output = LogicalPlan::Join { kind, left: Box::new(left), right: Box::new(right), condition: None, mark: None }.output();
            LogicalPlan::Values { rows: Vec::new(), output }
        }
    }
}
