//! `unnest_subqueries`: rewrites subquery expressions into joins (decorrelation).
//!
//! Nothing re-executes a subquery per outer row. The rewrites:
//!
//! ```text
//! Filter [NOT] EXISTS (sub WHERE corr)      ─▶ Semi/Anti Join ON corr
//! Filter x IN (SELECT c ... WHERE corr)     ─▶ Semi Join ON x = c AND corr
//! Filter x NOT IN (SELECT c ...)            ─▶ Anti Join ON x = c (null-aware when x or c may
//!                                              be NULL; correlated: NOT EXISTS with
//!                                              c = x OR c IS NULL OR x IS NULL)
//! (SELECT agg(..) FROM t WHERE t.k = o.k)  ─▶ Left Join (SELECT t.k, agg(..) GROUP BY t.k)
//!                                              ON t.k = o.k   (+ CASE for COUNT-like
//!                                              aggregates over no rows)
//! (SELECT x FROM t WHERE corr)              ─▶ Single Join ON corr (error on >1 match)
//! (SELECT ...) uncorrelated                 ─▶ Single Join without condition
//! EXISTS / IN elsewhere (OR, SELECT list)   ─▶ Mark Join producing a BOOLEAN column
//! t [LEFT] JOIN LATERAL (sub reading t)     ─▶ [Left] Join ON the correlated predicates
//!                                              pulled out of sub, or ON t.c IS NOT
//!                                              DISTINCT FROM d over sub computed per
//!                                              distinct value d of t.c
//! ```
//!
//! Correlated predicates are pulled out of the subquery through filters, projections
//! and inner joins. Correlation in other places (under an aggregation, a LIMIT, a
//! union, in a select list, ...) goes through the general decorrelation of
//! [`decorrelate`]; what that cannot do either is reported as not implemented.

use std::collections::{BTreeSet, HashMap};

use apiary_common::{not_impl_err, ApiaryError, Result};
use apiary_sql::expr::{AggregateCall, BinaryOp, ColumnId, ColumnRef, Expr, Subquery, SubqueryKind, UnaryOp};
use apiary_sql::{JoinKind, LogicalPlan};
use apiary_types::DataType;

use crate::rules::decorrelate;
use crate::OptimizerContext;

pub fn run(plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    unnest(plan, ctx)
}

fn unnest(plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    // Children first, so inner subqueries are gone before outer ones are rewritten.
    let plan = map_children(plan, &mut |child| unnest(child, ctx))?;
    match plan {
        LogicalPlan::Filter { predicate, input } if predicate.contains_subquery() => {
            let mut input = *input;
            let mut remaining = Vec::new();
            for conjunct in predicate.split_conjunction() {
                if !conjunct.contains_subquery() {
                    remaining.push(conjunct);
                    continue;
                }
                match conjunct_as_filtering_subquery(conjunct) {
                    Ok((subquery, negated)) => {
                        input = filtering_join(input, *subquery, negated, ctx)?;
                    }
                    Err(conjunct) => {
                        let (new_input, rewritten) = rewrite_expression(input, conjunct, ctx)?;
                        input = new_input;
                        remaining.push(rewritten);
                    }
                }
            }
            Ok(match Expr::conjunction(remaining) {
                Some(predicate) => LogicalPlan::Filter { predicate, input: Box::new(input) },
                None => input,
            })
        }
        LogicalPlan::Project { exprs, input } if exprs.iter().any(|(e, _)| e.contains_subquery()) => {
            let mut input = *input;
            let mut rewritten = Vec::with_capacity(exprs.len());
            for (expr, column) in exprs {
                if expr.contains_subquery() {
                    let (new_input, expr) = rewrite_expression(input, expr, ctx)?;
                    input = new_input;
                    rewritten.push((expr, column));
                } else {
                    rewritten.push((expr, column));
                }
            }
            Ok(LogicalPlan::Project { exprs: rewritten, input: Box::new(input) })
        }
        LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input }
            if groups.iter().any(|(e, _)| e.contains_subquery())
                || aggregates.iter().any(|(a, _)| a.args.iter().any(|e| e.contains_subquery())) =>
        {
            // Compute the subquery values in a projection below the aggregate.
            let mut input = *input;
            let mut exprs: Vec<(Expr, ColumnRef)> = input.output().into_iter().map(|c| (c.expr(), c)).collect();
            let lift =
                |expr: Expr, input: &mut LogicalPlan, exprs: &mut Vec<(Expr, ColumnRef)>, ctx: &mut OptimizerContext| -> Result<Expr> {
                    if !expr.contains_subquery() {
                        return Ok(expr);
                    }
                    let placeholder = std::mem::replace(input, LogicalPlan::Values { rows: vec![], output: vec![] });
                    let (new_input, rewritten) = rewrite_expression(placeholder, expr, ctx)?;
                    *input = new_input;
                    let column = ctx.new_column("subquery_value", rewritten.data_type(), rewritten.nullable());
                    exprs.push((rewritten, column.clone()));
                    Ok(column.expr())
                };
            let mut new_groups = Vec::new();
            for (e, c) in groups {
                new_groups.push((lift(e, &mut input, &mut exprs, ctx)?, c));
            }
            let mut new_aggregates = Vec::new();
            for (mut call, c) in aggregates {
                let mut args = Vec::new();
                for a in call.args {
                    args.push(lift(a, &mut input, &mut exprs, ctx)?);
                }
                call.args = args;
                new_aggregates.push((call, c));
            }
            // The projection must also pass through the columns the subquery joins added.
            let mut projected: Vec<(Expr, ColumnRef)> = input.output().into_iter().map(|c| (c.expr(), c)).collect();
            for (e, c) in exprs {
                if !projected.iter().any(|(_, p)| p.id == c.id) {
                    projected.push((e, c));
                }
            }
            let input = LogicalPlan::Project { exprs: projected, input: Box::new(input) };
            Ok(LogicalPlan::Aggregate { groups: new_groups, aggregates: new_aggregates, grouping_sets, input: Box::new(input) })
        }
        LogicalPlan::Join { kind, left, right, condition, mark } if is_lateral(&left, &right) => {
            if condition.as_ref().is_some_and(Expr::contains_subquery) {
                return Err(not_impl_err!("subqueries in the ON condition of a LATERAL join"));
            }
            lateral_join(kind, *left, *right, condition, mark, ctx)
        }
        other => {
            if other.expressions().iter().any(|e| e.contains_subquery()) {
                return Err(not_impl_err!("subqueries in this position (join conditions, ORDER BY, VALUES)"));
            }
            Ok(other)
        }
    }
}

/// Whether `right` reads columns of `left`: a LATERAL subquery (`FROM t, LATERAL (SELECT
/// ... WHERE u.x = t.x)`), bound as a join whose right side refers to its left side.
fn is_lateral(left: &LogicalPlan, right: &LogicalPlan) -> bool {
    let free = right.free_columns();
    !free.is_empty() && !free.is_disjoint(&left.output_ids())
}

/// A join with a LATERAL right side as a plain join. Correlated predicates that can be
/// pulled out of the right side join the sides directly (`t ⋈_{x = t.x} u`); otherwise
/// the right side is computed for each distinct value of the left columns it reads and
/// joined on them ([`decorrelate`]). A LEFT join keeps the left rows for which the right
/// side has no rows. The join's output columns stay as they were.
fn lateral_join(
    kind: JoinKind,
    left: LogicalPlan,
    right: LogicalPlan,
    condition: Option<Expr>,
    mark: Option<ColumnRef>,
    ctx: &mut OptimizerContext,
) -> Result<LogicalPlan> {
    if !matches!(kind, JoinKind::Inner | JoinKind::Left) {
        return Err(not_impl_err!("LATERAL references in a {} join", kind.name()));
    }
    let mut output = left.output();
    output.extend(right.output().into_iter().map(|mut column| {
        column.nullable |= kind == JoinKind::Left;
        column
    }));
    let left_ids = left.output_ids();
    let mut conditions: Vec<Expr> = condition.map(Expr::split_conjunction).unwrap_or_default();
    let join = match pull_up_correlated(right.clone(), &left_ids) {
        Ok((pulled, correlated)) => {
            conditions.extend(correlated);
            LogicalPlan::Join { kind, left: Box::new(left), right: Box::new(pulled), condition: Expr::conjunction(conditions), mark }
        }
        Err(ApiaryError::NotImplemented(_)) => decorrelate::dependent_join(left, right, kind, conditions, mark, ctx)?,
        Err(other) => return Err(other),
    };
    Ok(LogicalPlan::Project { exprs: output.into_iter().map(|c| (c.expr(), c)).collect(), input: Box::new(join) })
}

/// Applies `f` to each child plan.
pub(crate) fn map_children(plan: LogicalPlan, f: &mut dyn FnMut(LogicalPlan) -> Result<LogicalPlan>) -> Result<LogicalPlan> {
    Ok(match plan {
        LogicalPlan::Scan(_) | LogicalPlan::Values { .. } | LogicalPlan::CteScan(_) | LogicalPlan::WorkTableScan(_) => plan,
        LogicalPlan::Cte { id, name, definition, body } => {
            let definition = Box::new(f(*definition)?);
            LogicalPlan::Cte { id, name, definition, body: Box::new(f(*body)?) }
        }
        LogicalPlan::RecursiveCte { id, name, distinct, anchor, recursive, output } => {
            let anchor = Box::new(f(*anchor)?);
            LogicalPlan::RecursiveCte { id, name, distinct, anchor, recursive: Box::new(f(*recursive)?), output }
        }
        LogicalPlan::Filter { predicate, input } => LogicalPlan::Filter { predicate, input: Box::new(f(*input)?) },
        LogicalPlan::Project { exprs, input } => LogicalPlan::Project { exprs, input: Box::new(f(*input)?) },
        LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input } => {
            LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input: Box::new(f(*input)?) }
        }
        LogicalPlan::Join { kind, left, right, condition, mark } => {
            let left = Box::new(f(*left)?);
            let right = Box::new(f(*right)?);
            LogicalPlan::Join { kind, left, right, condition, mark }
        }
        LogicalPlan::Sort { keys, input } => LogicalPlan::Sort { keys, input: Box::new(f(*input)?) },
        LogicalPlan::Window { windows, input } => LogicalPlan::Window { windows, input: Box::new(f(*input)?) },
        LogicalPlan::Limit { limit, offset, input } => LogicalPlan::Limit { limit, offset, input: Box::new(f(*input)?) },
        LogicalPlan::Union { inputs, output } => LogicalPlan::Union { inputs: inputs.into_iter().map(f).collect::<Result<_>>()?, output },
    })
}

/// `EXISTS`, `NOT EXISTS`, `IN`, `NOT IN` as a whole conjunct: (subquery, negated).
fn conjunct_as_filtering_subquery(conjunct: Expr) -> Result<(Box<Subquery>, bool), Expr> {
    match conjunct {
        Expr::Subquery(s) => match &s.kind {
            SubqueryKind::Exists { negated } => {
                let negated = *negated;
                Ok((s, negated))
            }
            SubqueryKind::In { negated, .. } => {
                let negated = *negated;
                Ok((s, negated))
            }
            SubqueryKind::Scalar => Err(Expr::Subquery(s)),
        },
        Expr::Unary(UnaryOp::Not, inner) => match *inner {
            Expr::Subquery(s) if matches!(s.kind, SubqueryKind::Exists { .. }) => {
                let SubqueryKind::Exists { negated } = s.kind else { unreachable!("matched above") };
                Ok((s, !negated))
            }
            other => Err(Expr::Unary(UnaryOp::Not, Box::new(other))),
        },
        other => Err(other),
    }
}

/// A semi/anti join that keeps the input rows for which the (NOT) EXISTS / (NOT) IN holds.
fn filtering_join(input: LogicalPlan, mut subquery: Subquery, negated: bool, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    subquery.plan = Box::new(unnest(*subquery.plan, ctx)?);
    match filtering_join_by_pulling_up(input.clone(), subquery.clone(), negated, ctx) {
        Err(ApiaryError::NotImplemented(_)) => filtering_join_in_general(input, subquery, negated, ctx),
        other => other,
    }
}

/// The general decorrelation of a filtering subquery.
fn filtering_join_in_general(input: LogicalPlan, subquery: Subquery, negated: bool, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    let kind = if negated { JoinKind::Anti { null_aware: false } } else { JoinKind::Semi };
    match subquery.kind {
        SubqueryKind::Exists { .. } => dependent_join(input, without_limit_for_exists(*subquery.plan), kind, Vec::new(), None, ctx),
        SubqueryKind::In { ref expr, .. } if !negated || (!expr.nullable() && subquery.output.as_ref().is_some_and(|c| !c.nullable)) => {
            // IN keeps the rows with a match (NULL filters like FALSE); NOT IN over
            // non-NULL values keeps those without one.
            let inner = subquery.output.clone().expect("IN subquery has an output column");
            let equality = Expr::compare(BinaryOp::Eq, (**expr).clone(), inner.expr());
            dependent_join(input, *subquery.plan, kind, vec![equality], None, ctx)
        }
        SubqueryKind::In { .. } => {
            // NOT IN over nullable values: filter on the three-valued result.
            let output = input.output();
            let (joined, value) = join_subquery_in_general(input, subquery, ctx)?;
            let filtered = LogicalPlan::Filter { predicate: value, input: Box::new(joined) };
            Ok(LogicalPlan::Project { exprs: output.into_iter().map(|c| (c.expr(), c)).collect(), input: Box::new(filtered) })
        }
        SubqueryKind::Scalar => unreachable!("scalar subqueries are not filtering"),
    }
}

fn filtering_join_by_pulling_up(input: LogicalPlan, subquery: Subquery, negated: bool, ctx: &mut OptimizerContext) -> Result<LogicalPlan> {
    let outer = input.output_ids();
    let (sub_plan, correlated) = pull_up_correlated(*subquery.plan, &outer)?;
    let mut conditions = correlated;
    let kind = match subquery.kind {
        SubqueryKind::Exists { .. } => {
            if negated {
                JoinKind::Anti { null_aware: false }
            } else {
                JoinKind::Semi
            }
        }
        SubqueryKind::In { expr, .. } => {
            let inner = subquery.output.expect("IN subquery has an output column");
            let equality = Expr::compare(BinaryOp::Eq, (*expr).clone(), inner.expr());
            if !negated {
                conditions.insert(0, equality);
                JoinKind::Semi
            } else if !expr.nullable() && !inner.nullable {
                conditions.insert(0, equality);
                JoinKind::Anti { null_aware: false }
            } else if conditions.is_empty() {
                let output = input.output();
                let (keyed_input, key) = constant_operand_as_column(input, *expr, ctx);
                let join = LogicalPlan::Join {
                    kind: JoinKind::Anti { null_aware: true },
                    left: Box::new(keyed_input),
                    right: Box::new(sub_plan),
                    condition: Some(Expr::compare(BinaryOp::Eq, key, inner.expr())),
                    mark: None,
                };
                return Ok(LogicalPlan::Project { exprs: output.into_iter().map(|c| (c.expr(), c)).collect(), input: Box::new(join) });
            } else {
                // x NOT IN (correlated S) == NOT EXISTS (s in S: s = x OR s IS NULL OR x IS NULL)
                let null_match = Expr::disjunction([equality, Expr::is_null(inner.expr()), Expr::is_null(*expr)]).expect("three parts");
                conditions.insert(0, null_match);
                JoinKind::Anti { null_aware: false }
            }
        }
        SubqueryKind::Scalar => unreachable!("scalar subqueries are not filtering"),
    };
    Ok(LogicalPlan::Join { kind, left: Box::new(input), right: Box::new(sub_plan), condition: Expr::conjunction(conditions), mark: None })
}

/// `5 IN (SELECT b ...)`: the join key on the outer side must be a column, or the
/// equality `5 = b` reads only the subquery's side and is pushed into it as a filter,
/// losing what a NULL-aware join needs (whether the subquery has NULLs or any rows).
fn constant_operand_as_column(input: LogicalPlan, expr: Expr, ctx: &mut OptimizerContext) -> (LogicalPlan, Expr) {
    if !expr.columns().is_empty() {
        return (input, expr);
    }
    let column = ctx.new_column("in_operand", expr.data_type(), expr.nullable());
    let mut exprs: Vec<(Expr, ColumnRef)> = input.output().into_iter().map(|c| (c.expr(), c)).collect();
    exprs.push((expr, column.clone()));
    (LogicalPlan::Project { exprs, input: Box::new(input) }, column.expr())
}

/// Replaces every subquery inside `expr` by a column computed by a join added to `input`.
fn rewrite_expression(mut input: LogicalPlan, expr: Expr, ctx: &mut OptimizerContext) -> Result<(LogicalPlan, Expr)> {
    let mut error = None;
    let rewritten = expr.transform_down(&mut |e| match e {
        Expr::Subquery(subquery) => {
            if error.is_some() {
                return Ok(Expr::boolean(false));
            }
            let placeholder = std::mem::replace(&mut input, LogicalPlan::Values { rows: vec![], output: vec![] });
            match join_subquery(placeholder, *subquery, ctx) {
                Ok((new_input, replacement)) => {
                    input = new_input;
                    Ok(replacement)
                }
                Err(err) => {
                    error = Some(err);
                    Ok(Expr::boolean(false))
                }
            }
        }
        other => Err(other),
    });
    match error {
        Some(err) => Err(err),
        None => Ok((input, rewritten)),
    }
}

/// Joins the subquery onto `input`; returns the new input and the expression that
/// replaces the subquery. The rewrites below come first; what they cannot express is
/// decorrelated in general ([`decorrelate`]).
fn join_subquery(input: LogicalPlan, mut subquery: Subquery, ctx: &mut OptimizerContext) -> Result<(LogicalPlan, Expr)> {
    subquery.plan = Box::new(unnest(*subquery.plan, ctx)?);
    if let Some(value) = select_without_from(&subquery) {
        return Ok((input, value));
    }
    match join_subquery_by_pulling_up(input.clone(), subquery.clone(), ctx) {
        Err(ApiaryError::NotImplemented(_)) => join_subquery_in_general(input, subquery, ctx),
        other => other,
    }
}

/// `(SELECT expr)` without FROM: the expression itself (it may read outer columns).
fn select_without_from(subquery: &Subquery) -> Option<Expr> {
    let (SubqueryKind::Scalar, Some(output)) = (&subquery.kind, &subquery.output) else { return None };
    let LogicalPlan::Project { exprs, input } = subquery.plan.as_ref() else { return None };
    let LogicalPlan::Values { rows, output: values_output } = input.as_ref() else { return None };
    if rows.len() != 1 || !values_output.is_empty() || exprs.len() != 1 || exprs[0].1.id != output.id || exprs[0].0.contains_subquery() {
        return None;
    }
    Some(exprs[0].0.clone())
}

/// The general decorrelation of a subquery used as a value.
fn join_subquery_in_general(input: LogicalPlan, subquery: Subquery, ctx: &mut OptimizerContext) -> Result<(LogicalPlan, Expr)> {
    let plan = *subquery.plan;
    match subquery.kind {
        SubqueryKind::Scalar => {
            let output = subquery.output.expect("scalar subquery has an output column");
            let join = dependent_join(input, plan, JoinKind::Single, Vec::new(), None, ctx)?;
            Ok((join, output.expr()))
        }
        SubqueryKind::Exists { negated } => {
            let mark = ctx.new_column("exists", DataType::Boolean, false);
            let join = dependent_join(
                input,
                without_limit_for_exists(plan),
                JoinKind::Mark { null_aware: false },
                Vec::new(),
                Some(mark.clone()),
                ctx,
            )?;
            Ok((join, if negated { Expr::negation(mark.expr()) } else { mark.expr() }))
        }
        SubqueryKind::In { expr, negated } => {
            let inner = subquery.output.expect("IN subquery has an output column");
            if !expr.nullable() && !inner.nullable {
                // No NULLs: IN is EXISTS with the equality.
                let mark = ctx.new_column("in", DataType::Boolean, false);
                let equality = Expr::compare(BinaryOp::Eq, *expr, inner.expr());
                let join = dependent_join(input, plan, JoinKind::Mark { null_aware: false }, vec![equality], Some(mark.clone()), ctx)?;
                return Ok((join, if negated { Expr::negation(mark.expr()) } else { mark.expr() }));
            }
            let (plan, output) = decorrelate::in_as_aggregate(*expr, plan, &inner, negated, ctx);
            let join = dependent_join(input, plan, JoinKind::Single, Vec::new(), None, ctx)?;
            Ok((join, output.expr()))
        }
    }
}

/// `input ⋈ subquery` for the subquery computed per distinct value of the outer columns
/// it reads (an uncorrelated subquery is joined as it is).
fn dependent_join(
    input: LogicalPlan,
    plan: LogicalPlan,
    kind: JoinKind,
    extra: Vec<Expr>,
    mark: Option<ColumnRef>,
    ctx: &mut OptimizerContext,
) -> Result<LogicalPlan> {
    decorrelate::dependent_join(input, plan, kind, extra, mark, ctx)
}

/// EXISTS does not depend on how many rows there are: a LIMIT (of at least one row)
/// and an ORDER BY under it can go.
fn without_limit_for_exists(plan: LogicalPlan) -> LogicalPlan {
    match plan {
        LogicalPlan::Limit { limit, offset: 0, input } if limit.is_none_or(|l| l > 0) => without_limit_for_exists(*input),
        LogicalPlan::Sort { input, .. } => without_limit_for_exists(*input),
        LogicalPlan::Project { exprs, input } => LogicalPlan::Project { exprs, input: Box::new(without_limit_for_exists(*input)) },
        other => other,
    }
}

fn join_subquery_by_pulling_up(input: LogicalPlan, subquery: Subquery, ctx: &mut OptimizerContext) -> Result<(LogicalPlan, Expr)> {
    let outer = input.output_ids();
    match subquery.kind {
        SubqueryKind::Exists { negated } => {
            let (sub_plan, correlated) = pull_up_correlated(*subquery.plan, &outer)?;
            let mark = ctx.new_column("exists", DataType::Boolean, false);
            let join = LogicalPlan::Join {
                kind: JoinKind::Mark { null_aware: false },
                left: Box::new(input),
                right: Box::new(sub_plan),
                condition: Expr::conjunction(correlated),
                mark: Some(mark.clone()),
            };
            let value = if negated { Expr::negation(mark.expr()) } else { mark.expr() };
            Ok((join, value))
        }
        SubqueryKind::In { expr, negated } => {
            let (sub_plan, correlated) = pull_up_correlated(*subquery.plan, &outer)?;
            let inner = subquery.output.expect("IN subquery has an output column");
            let (input, expr) = constant_operand_as_column(input, *expr, ctx);
            let mut conditions = vec![Expr::compare(BinaryOp::Eq, expr.clone(), inner.expr())];
            let null_aware = expr.nullable() || inner.nullable;
            if null_aware && !correlated.is_empty() {
                return Err(not_impl_err!("correlated IN over nullable values outside of WHERE conjunctions"));
            }
            conditions.extend(correlated);
            let mark = ctx.new_column("in", DataType::Boolean, null_aware);
            let join = LogicalPlan::Join {
                kind: JoinKind::Mark { null_aware },
                left: Box::new(input),
                right: Box::new(sub_plan),
                condition: Expr::conjunction(conditions),
                mark: Some(mark.clone()),
            };
            let value = if negated { Expr::negation(mark.expr()) } else { mark.expr() };
            Ok((join, value))
        }
        SubqueryKind::Scalar => scalar_subquery_join(input, subquery, &outer, ctx),
    }
}

fn scalar_subquery_join(
    input: LogicalPlan,
    subquery: Subquery,
    outer: &BTreeSet<ColumnId>,
    ctx: &mut OptimizerContext,
) -> Result<(LogicalPlan, Expr)> {
    let output = subquery.output.expect("scalar subquery has an output column");
    let plan = *subquery.plan;
    if plan.free_columns().is_empty() {
        // Uncorrelated: one row holding the value (NULL without rows; more than one row
        // is an error), cross-joined to the input. As one more relation of the input's
        // inner joins, it can be joined where its comparisons make it selective:
        // `d_month_seq = (SELECT ...)` then filters date_dim before date_dim meets the
        // fact table, instead of the value being attached above all joins.
        let one_row = LogicalPlan::Values { rows: vec![Vec::new()], output: Vec::new() };
        let value =
            LogicalPlan::Join { kind: JoinKind::Single, left: Box::new(one_row), right: Box::new(plan), condition: None, mark: None };
        let join = LogicalPlan::Join { kind: JoinKind::Inner, left: Box::new(input), right: Box::new(value), condition: None, mark: None };
        return Ok((join, output.expr()));
    }
    if plan.free_columns().is_disjoint(outer) {
        let join = LogicalPlan::Join { kind: JoinKind::Single, left: Box::new(input), right: Box::new(plan), condition: None, mark: None };
        return Ok((join, output.expr()));
    }
    // Split into [Project] over Aggregate over the rest, when aggregated.
    let (projection, below_projection) = match plan {
        LogicalPlan::Project { exprs, input } => (Some(exprs), *input),
        other => (None, other),
    };
    if matches!(below_projection, LogicalPlan::Aggregate { grouping_sets: Some(_), .. }) {
        return Err(not_impl_err!("GROUPING SETS, ROLLUP or CUBE in a correlated subquery"));
    }
    let LogicalPlan::Aggregate { groups, aggregates, input: agg_input, .. } = below_projection else {
        // Not aggregated: a Single join on the correlated predicates (errors on >1 match).
        let plan = match projection {
            Some(exprs) => LogicalPlan::Project { exprs, input: Box::new(below_projection) },
            None => below_projection,
        };
        let (sub_plan, correlated) = pull_up_correlated(plan, outer)?;
        let join = LogicalPlan::Join {
            kind: JoinKind::Single,
            left: Box::new(input),
            right: Box::new(sub_plan),
            condition: Expr::conjunction(correlated),
            mark: None,
        };
        return Ok((join, output.expr()));
    };
    // Outer columns read above the aggregation's input (in the projection, the group
    // keys or the aggregates' arguments) need the general rewrite.
    let reads_outer = |e: &Expr| e.columns().iter().any(|c| outer.contains(c));
    if projection.iter().flatten().any(|(e, _)| reads_outer(e))
        || groups.iter().any(|(e, _)| reads_outer(e))
        || aggregates.iter().any(|(call, _)| call.args.iter().chain(call.filter.as_deref()).any(reads_outer))
    {
        return Err(not_impl_err!("outer columns read by a correlated aggregation"));
    }
    let (rest, correlated) = pull_up_correlated(*agg_input, outer)?;
    // Each correlated predicate must be `inner_expr = outer_expr`.
    let mut keys = Vec::new();
    for predicate in correlated {
        match split_correlated_equality(&predicate, outer) {
            Some((inner, outer_expr)) => keys.push((inner, outer_expr)),
            None => return Err(not_impl_err!("correlated scalar subquery with aggregation and a non-equality correlation ({predicate})")),
        }
    }
    let had_groups = !groups.is_empty();
    let mut new_groups = groups;
    let mut key_columns = Vec::new();
    for (inner, _) in &keys {
        let column = ctx.new_column("correlation_key", inner.data_type(), inner.nullable());
        new_groups.push((inner.clone(), column.clone()));
        key_columns.push(column);
    }
    let empty_values: HashMap<ColumnId, Expr> = aggregates
        .iter()
        .map(|(call, column): &(AggregateCall, ColumnRef)| (column.id, Expr::Literal(call.empty_value(), column.data_type)))
        .collect();
    let aggregate = LogicalPlan::Aggregate { groups: new_groups, aggregates, grouping_sets: None, input: Box::new(rest) };
    // The value expression: the projected output (or the aggregate column itself).
    let (sub_plan, value_expr) = match projection {
        Some(mut exprs) => {
            let value = exprs.iter().find(|(_, c)| c.id == output.id).map(|(e, _)| e.clone()).unwrap_or_else(|| output.expr());
            for column in &key_columns {
                exprs.push((column.expr(), column.clone()));
            }
            (LogicalPlan::Project { exprs, input: Box::new(aggregate) }, value)
        }
        None => (aggregate, output.expr()),
    };
    let condition = Expr::conjunction(
        keys.iter().zip(&key_columns).map(|((_, outer_expr), column)| Expr::compare(BinaryOp::Eq, column.expr(), outer_expr.clone())),
    );
    let kind = if had_groups { JoinKind::Single } else { JoinKind::Left };
    let join = LogicalPlan::Join { kind, left: Box::new(input), right: Box::new(sub_plan), condition, mark: None };
    let mut replacement = output.expr();
    let empty = value_expr.replace_columns(&|c| empty_values.get(&c.id).cloned());
    let empty_is_null = matches!(empty, Expr::Literal(ref v, _) if v.is_null());
    if !empty_is_null && !key_columns.is_empty() && !had_groups {
        // No matching group means the subquery aggregated no rows: its value is the
        // expression over the aggregates' empty values (count 0, others NULL), e.g.
        // coalesce(sum(x), 0) = 0, not NULL.
        let data_type = output.data_type;
        replacement = Expr::Case {
            whens: vec![(Expr::is_null(key_columns[0].expr()), coerce_literal(empty, data_type))],
            otherwise: Some(Box::new(output.expr())),
            data_type,
        };
    }
    Ok((join, replacement))
}

fn coerce_literal(expr: Expr, data_type: DataType) -> Expr {
    match expr {
        Expr::Literal(value, t) if t != data_type => match value.cast_to(&data_type) {
            Ok(v) => Expr::Literal(v, data_type),
            Err(_) => Expr::Cast { expr: Box::new(Expr::Literal(value, t)), to: data_type },
        },
        Expr::Literal(..) => expr,
        other if other.data_type() != data_type => Expr::Cast { expr: Box::new(other), to: data_type },
        other => other,
    }
}

/// `inner = outer` (either order): (inner side, outer side).
fn split_correlated_equality(predicate: &Expr, outer: &BTreeSet<ColumnId>) -> Option<(Expr, Expr)> {
    let Expr::Binary { op: BinaryOp::Eq, left, right, .. } = predicate else { return None };
    let refs_outer = |e: &Expr| e.columns().iter().any(|c| outer.contains(c));
    let only_outer = |e: &Expr| {
        let cols = e.columns();
        !cols.is_empty() && cols.iter().all(|c| outer.contains(c))
    };
    if only_outer(right) && !refs_outer(left) && !left.columns().is_empty() {
        Some(((**left).clone(), (**right).clone()))
    } else if only_outer(left) && !refs_outer(right) && !right.columns().is_empty() {
        Some(((**right).clone(), (**left).clone()))
    } else {
        None
    }
}

/// Removes the predicates that refer to outer columns from `plan` and returns them.
/// Projections on the way up are widened so the predicates' inner columns stay visible.
pub(crate) fn pull_up_correlated(plan: LogicalPlan, outer: &BTreeSet<ColumnId>) -> Result<(LogicalPlan, Vec<Expr>)> {
    if plan.free_columns().is_disjoint(outer) {
        return Ok((plan, Vec::new()));
    }
    let refs_outer = |e: &Expr| e.columns().iter().any(|c| outer.contains(c));
    match plan {
        LogicalPlan::Filter { predicate, input } => {
            let (input, mut pulled) = pull_up_correlated(*input, outer)?;
            let mut local = Vec::new();
            for conjunct in predicate.split_conjunction() {
                if refs_outer(&conjunct) {
                    pulled.push(conjunct);
                } else {
                    local.push(conjunct);
                }
            }
            let plan = match Expr::conjunction(local) {
                Some(predicate) => LogicalPlan::Filter { predicate, input: Box::new(input) },
                None => input,
            };
            Ok((plan, pulled))
        }
        LogicalPlan::Project { mut exprs, input } => {
            if exprs.iter().any(|(e, _)| refs_outer(e)) {
                return Err(not_impl_err!("outer column references in a subquery's select list"));
            }
            let (input, pulled) = pull_up_correlated(*input, outer)?;
            let available = input.output();
            for predicate in &pulled {
                for id in predicate.columns() {
                    if outer.contains(&id) || exprs.iter().any(|(_, c)| c.id == id) {
                        continue;
                    }
                    if let Some(column) = available.iter().find(|c| c.id == id) {
                        exprs.push((column.expr(), column.clone()));
                    }
                }
            }
            Ok((LogicalPlan::Project { exprs, input: Box::new(input) }, pulled))
        }
        LogicalPlan::Join { kind: JoinKind::Inner, left, right, condition, mark } => {
            let (left, mut pulled) = pull_up_correlated(*left, outer)?;
            let (right, right_pulled) = pull_up_correlated(*right, outer)?;
            pulled.extend(right_pulled);
            let mut local = Vec::new();
            for conjunct in condition.map(|c| c.split_conjunction()).unwrap_or_default() {
                if refs_outer(&conjunct) {
                    pulled.push(conjunct);
                } else {
                    local.push(conjunct);
                }
            }
            let plan = LogicalPlan::Join {
                kind: JoinKind::Inner,
                left: Box::new(left),
                right: Box::new(right),
                condition: Expr::conjunction(local),
                mark,
            };
            Ok((plan, pulled))
        }
        LogicalPlan::Join { kind, left, right, condition, mark }
            if matches!(kind, JoinKind::Semi | JoinKind::Anti { .. } | JoinKind::Left | JoinKind::Mark { .. } | JoinKind::Single)
                && right.free_columns().is_disjoint(outer)
                && condition.as_ref().is_none_or(|c| !refs_outer(c)) =>
        {
            let (left, pulled) = pull_up_correlated(*left, outer)?;
            Ok((LogicalPlan::Join { kind, left: Box::new(left), right, condition, mark }, pulled))
        }
        LogicalPlan::Sort { input, .. } => pull_up_correlated(*input, outer),
        LogicalPlan::Aggregate { .. } => Err(not_impl_err!("correlated subquery with a correlation below an aggregation")),
        LogicalPlan::Limit { .. } => Err(not_impl_err!("correlated subquery with LIMIT")),
        other => {
            Err(not_impl_err!("correlated reference in this part of a subquery: {}", other.display_indent().lines().next().unwrap_or("")))
        }
    }
}
