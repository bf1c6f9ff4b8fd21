//! `fold_constants`: evaluates constant sub-expressions once at planning time and
//! simplifies boolean logic (`x AND TRUE` -> `x`, `x OR TRUE` -> `TRUE`, ...).
//!
//! Folding lets later rules see literals: zone maps and selectivity estimates need
//! `l_shipdate < DATE '1998-09-02'`, not `... < DATE '1998-12-01' - INTERVAL '90' DAY`.

use apiary_common::Result;
use apiary_sql::expr::{BinaryOp, Expr, UnaryOp};
use apiary_sql::LogicalPlan;
use apiary_types::ScalarValue;

use crate::OptimizerContext;

pub fn run(plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    let plan = plan.map_expressions(&mut |expr| fold(expr, ctx));
    Ok(remove_trivial_filters(plan))
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

fn simplify(expr: Expr) -> Expr {
    match expr {
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

fn remove_trivial_filters(plan: LogicalPlan) -> LogicalPlan {
    let plan =
        crate::rules::unnest_subqueries::map_children(plan, &mut |child| Ok(remove_trivial_filters(child))).expect("infallible rewrite");
    match plan {
        LogicalPlan::Filter { predicate: Expr::Literal(ScalarValue::Boolean(true), _), input } => *input,
        LogicalPlan::Join { kind, left, right, condition: Some(Expr::Literal(ScalarValue::Boolean(true), _)), mark } => {
            LogicalPlan::Join { kind, left, right, condition: None, mark }
        }
        other => other,
    }
}
