//! General decorrelation: the dependent join pushed down to where the outer values are
//! used (Neumann and Kemper, "Unnesting Arbitrary Queries", BTW 2015).
//!
//! `unnest_subqueries` first tries its cheap rewrites (correlated equalities pulled up
//! into a join condition). What those cannot express — a correlation under an
//! aggregation that is not an equality, one inside a select list, a join or a union, or
//! a correlated `IN` over nullable values used as a value — goes through this module:
//!
//! ```text
//! D  = SELECT DISTINCT <outer columns the subquery uses> FROM <copy of the outer plan>
//! S' = the subquery computed once per row of D, with D's columns in its output
//!      (D is joined in where the outer columns are read, and carried upwards)
//! outer ⟕ S' ON outer.c IS NOT DISTINCT FROM S'.d   (single / mark / semi / anti join)
//! ```
//!
//! Pushing D down follows the operators: filters and projections substitute D's columns
//! for the outer ones; a join pushes D into the side(s) that use it (both sides: their
//! D columns are equated); a union into every input; an aggregation groups by D's
//! columns as well, and a scalar aggregation (no GROUP BY) is computed over
//! `D ⟕ input` so every D row gets its one result row (COUNT over no rows is 0), with
//! each aggregate filtered to the rows that came from the input; a `[ORDER BY ...] LIMIT n
//! OFFSET m` keeps the rows numbered `m + 1 ..= m + n` by `row_number() OVER (PARTITION
//! BY d ORDER BY ...)` (top-N per D row). A subtree that does not use the outer columns
//! is cross-joined with D. Nothing runs once per outer row. A LATERAL join (a join whose
//! right side reads its left side) uses the same push-down, with the left side as outer.
//! An outer plan with a LIMIT is computed once, as a materialized CTE the join and D both
//! read ([`dependent_join`]): a second evaluation could keep other rows.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use apiary_common::{internal_err, not_impl_err, Result};
use apiary_sql::expr::{AggregateCall, AggregateFunction, BinaryOp, ColumnId, ColumnRef, Expr};
use apiary_sql::{CteScan, JoinKind, LogicalPlan, WindowCall};
use apiary_types::{DataType, ScalarValue};

use crate::OptimizerContext;

/// The outer side of a dependent join: the plan whose values the subquery reads, and
/// which of its columns the subquery uses.
pub(crate) struct Dependent<'a> {
    outer: &'a LogicalPlan,
    correlated: Vec<ColumnRef>,
    /// Set when the outer plan is computed once, as a materialized CTE: D reads its rows.
    shared: Option<SharedOuter>,
}

/// An outer plan computed once (a materialized CTE the join and D both read).
struct SharedOuter {
    id: usize,
    definition: Arc<LogicalPlan>,
    /// The definition's column for each of the outer plan's output columns.
    sources: HashMap<ColumnId, ColumnId>,
}

impl<'a> Dependent<'a> {
    /// `None` when `subquery` does not use any of `outer`'s columns.
    pub(crate) fn new(outer: &'a LogicalPlan, subquery: &LogicalPlan) -> Option<Dependent<'a>> {
        let free = subquery.free_columns();
        let correlated: Vec<ColumnRef> = outer.output().into_iter().filter(|c| free.contains(&c.id)).collect();
        (!correlated.is_empty()).then_some(Dependent { outer, correlated, shared: None })
    }

    fn ids(&self) -> BTreeSet<ColumnId> {
        self.correlated.iter().map(|c| c.id).collect()
    }

    /// A fresh copy of D: the distinct values of the correlated columns.
    fn domain(&self, ctx: &mut OptimizerContext) -> Result<(LogicalPlan, Vec<ColumnRef>)> {
        if let Some(shared) = &self.shared {
            return self.shared_domain(shared, ctx);
        }
        // D comes from a second evaluation of the outer plan: a LIMIT may keep other rows
        // there (ties in its ORDER BY, a hash aggregation's order), and an outer value
        // missing from D would get no subquery result ([`dependent_join`] computes such an
        // outer plan once instead).
        if contains_limit(self.outer) {
            return Err(not_impl_err!("a correlated or LATERAL subquery of this form over an outer query or FROM item with LIMIT"));
        }
        let (copy, map) = fresh_copy(self.outer, ctx)?;
        let mut groups = Vec::with_capacity(self.correlated.len());
        let mut columns = Vec::with_capacity(self.correlated.len());
        for column in &self.correlated {
            let source = map.get(&column.id).cloned().unwrap_or_else(|| column.clone());
            let out = ctx.new_column(&column.name, column.data_type, column.nullable);
            groups.push((source.expr(), out.clone()));
            columns.push(out);
        }
        Ok((LogicalPlan::Aggregate { groups, aggregates: Vec::new(), grouping_sets: None, input: Box::new(copy) }, columns))
    }

    /// D read from the outer plan computed once.
    fn shared_domain(&self, shared: &SharedOuter, ctx: &mut OptimizerContext) -> Result<(LogicalPlan, Vec<ColumnRef>)> {
        let mut scanned = Vec::with_capacity(self.correlated.len());
        let mut groups = Vec::with_capacity(self.correlated.len());
        let mut columns = Vec::with_capacity(self.correlated.len());
        for column in &self.correlated {
            let source = shared.sources.get(&column.id).ok_or_else(|| internal_err!("outer column {} is not in its CTE", column.name))?;
            let read = ctx.new_column(&column.name, column.data_type, column.nullable);
            let out = ctx.new_column(&column.name, column.data_type, column.nullable);
            scanned.push((*source, read.clone()));
            groups.push((read.expr(), out.clone()));
            columns.push(out);
        }
        let scan = CteScan { id: shared.id, label: "outer".to_string(), columns: scanned, definition: Arc::clone(&shared.definition) };
        let input = Box::new(LogicalPlan::CteScan(scan));
        Ok((LogicalPlan::Aggregate { groups, aggregates: Vec::new(), grouping_sets: None, input }, columns))
    }

    /// `outer.c IS NOT DISTINCT FROM d` for every correlated column: the condition that
    /// joins the outer plan with the decorrelated subquery.
    pub(crate) fn join_condition(&self, d: &[ColumnRef]) -> Expr {
        Expr::conjunction(self.correlated.iter().zip(d).map(|(c, d)| Expr::compare(BinaryOp::IsNotDistinctFrom, c.expr(), d.expr())))
            .expect("at least one correlated column")
    }

    /// Rewrites `plan` (which uses the correlated columns) into a plan computing it for
    /// every row of D; returns it with the columns holding D's values.
    pub(crate) fn push_down(&self, plan: LogicalPlan, ctx: &mut OptimizerContext) -> Result<(LogicalPlan, Vec<ColumnRef>)> {
        let ids = self.ids();
        if plan.free_columns().is_disjoint(&ids) {
            let (domain, d) = self.domain(ctx)?;
            let join =
                LogicalPlan::Join { kind: JoinKind::Inner, left: Box::new(plan), right: Box::new(domain), condition: None, mark: None };
            return Ok((join, d));
        }
        let uses = |p: &LogicalPlan| !p.free_columns().is_disjoint(&ids);
        let expr_uses = |e: &Expr| e.columns().iter().any(|c| ids.contains(c));
        match plan {
            LogicalPlan::Filter { predicate, input } => {
                let (input, d) = self.push_down(*input, ctx)?;
                Ok((LogicalPlan::Filter { predicate: self.substitute(predicate, &d), input: Box::new(input) }, d))
            }
            LogicalPlan::Project { exprs, input } => {
                let (input, d) = self.push_down(*input, ctx)?;
                let mut exprs: Vec<(Expr, ColumnRef)> = exprs.into_iter().map(|(e, c)| (self.substitute(e, &d), c)).collect();
                exprs.extend(d.iter().map(|c| (c.expr(), c.clone())));
                Ok((LogicalPlan::Project { exprs, input: Box::new(input) }, d))
            }
            LogicalPlan::Sort { input, .. } => self.push_down(*input, ctx),
            // A definition cannot read enclosing queries' columns: only the body can.
            LogicalPlan::Cte { id, name, definition, body } => {
                let (body, d) = self.push_down(*body, ctx)?;
                Ok((LogicalPlan::Cte { id, name, definition, body: Box::new(body) }, d))
            }
            LogicalPlan::RecursiveCte { .. } | LogicalPlan::WorkTableScan(_) => {
                Err(apiary_common::not_impl_err!("a recursive CTE that reads columns of an enclosing query"))
            }
            // Each outer row's rows form their own partitions: the domain columns join
            // every window's PARTITION BY.
            LogicalPlan::Window { windows, input } => {
                let (input, d) = self.push_down(*input, ctx)?;
                let windows = windows
                    .into_iter()
                    .map(|(w, c)| {
                        let mut w = w.map_expressions(&mut |e| self.substitute(e, &d));
                        w.partition_by.extend(d.iter().map(|c| c.expr()));
                        (w, c)
                    })
                    .collect();
                Ok((LogicalPlan::Window { windows, input: Box::new(input) }, d))
            }
            LogicalPlan::Aggregate { grouping_sets: Some(_), .. } => {
                Err(not_impl_err!("GROUPING SETS, ROLLUP or CUBE in a correlated subquery"))
            }
            LogicalPlan::Aggregate { groups, aggregates, input, .. } => self.push_into_aggregate(groups, aggregates, *input, ctx),
            LogicalPlan::Join { kind, left, right, condition, mark } => {
                let (left_uses, right_uses) = (uses(&left), uses(&right));
                let both = match kind {
                    JoinKind::Inner => left_uses && right_uses,
                    JoinKind::Left
                    | JoinKind::Semi
                    | JoinKind::Anti { null_aware: false }
                    | JoinKind::Mark { null_aware: false }
                    | JoinKind::Single => right_uses,
                    JoinKind::Right => left_uses,
                    JoinKind::Full | JoinKind::Anti { null_aware: true } | JoinKind::Mark { null_aware: true } => {
                        return Err(not_impl_err!("a correlated subquery whose correlation is inside a {} join", kind.name()));
                    }
                };
                // The side D goes into when only one side needs it: the one using it, else
                // (only the condition uses it) the preserved side.
                let into_left = match kind {
                    JoinKind::Inner => left_uses || !right_uses,
                    JoinKind::Right => false,
                    _ => true,
                };
                let (left, right, d, extra) = if both {
                    let (left, dl) = self.push_down(*left, ctx)?;
                    let (right, dr) = self.push_down(*right, ctx)?;
                    let equal: Vec<Expr> =
                        dl.iter().zip(&dr).map(|(l, r)| Expr::compare(BinaryOp::IsNotDistinctFrom, l.expr(), r.expr())).collect();
                    let d = if kind == JoinKind::Right { dr } else { dl };
                    (left, right, d, equal)
                } else if into_left {
                    let (left, d) = self.push_down(*left, ctx)?;
                    (left, *right, d, Vec::new())
                } else {
                    let (right, d) = self.push_down(*right, ctx)?;
                    (*left, right, d, Vec::new())
                };
                let mut conditions: Vec<Expr> = condition.map(|c| self.substitute(c, &d).split_conjunction()).unwrap_or_default();
                conditions.extend(extra);
                let join = LogicalPlan::Join {
                    kind,
                    left: Box::new(left),
                    right: Box::new(right),
                    condition: Expr::conjunction(conditions),
                    mark,
                };
                Ok((join, d))
            }
            LogicalPlan::Union { inputs, output } => {
                let mut pushed = Vec::with_capacity(inputs.len());
                for input in inputs {
                    let (input, d) = self.push_down(input, ctx)?;
                    // Union maps columns by position: D's columns go last in every input.
                    let mut exprs: Vec<(Expr, ColumnRef)> =
                        input.output().into_iter().filter(|c| !d.contains(c)).map(|c| (c.expr(), c)).collect();
                    exprs.extend(d.iter().map(|c| (c.expr(), c.clone())));
                    pushed.push(LogicalPlan::Project { exprs, input: Box::new(input) });
                }
                let d: Vec<ColumnRef> = self.correlated.iter().map(|c| ctx.new_column(&c.name, c.data_type, c.nullable)).collect();
                let mut output = output;
                output.extend(d.iter().cloned());
                Ok((LogicalPlan::Union { inputs: pushed, output }, d))
            }
            LogicalPlan::Scan(mut scan) => {
                // Filters reading outer columns become a filter above the scan.
                let (outer_filters, local): (Vec<Expr>, Vec<Expr>) = scan.filters.drain(..).partition(|f| expr_uses(f));
                scan.filters = local;
                let filter = LogicalPlan::Filter {
                    predicate: Expr::conjunction(outer_filters).expect("a correlated filter"),
                    input: Box::new(LogicalPlan::Scan(scan)),
                };
                self.push_down(filter, ctx)
            }
            LogicalPlan::Limit { limit, offset, input } => self.push_into_limit(limit, offset, *input, ctx),
            LogicalPlan::Values { .. } => Err(not_impl_err!("outer column references in VALUES")),
            // A scan reads no outer column (handled at the top).
            LogicalPlan::CteScan(_) => Err(apiary_common::internal_err!("a CTE scan reads outer columns")),
        }
    }

    fn push_into_aggregate(
        &self,
        groups: Vec<(Expr, ColumnRef)>,
        aggregates: Vec<(AggregateCall, ColumnRef)>,
        input: LogicalPlan,
        ctx: &mut OptimizerContext,
    ) -> Result<(LogicalPlan, Vec<ColumnRef>)> {
        let (input, d) = self.push_down(input, ctx)?;
        let substitute_call = |mut call: AggregateCall, this: &Self| {
            call.args = call.args.into_iter().map(|a| this.substitute(a, &d)).collect();
            call.filter = call.filter.map(|f| Box::new(this.substitute(*f, &d)));
            call
        };
        let aggregates: Vec<(AggregateCall, ColumnRef)> =
            aggregates.into_iter().map(|(call, c)| (substitute_call(call, self), c)).collect();
        let mut groups: Vec<(Expr, ColumnRef)> = groups.into_iter().map(|(e, c)| (self.substitute(e, &d), c)).collect();
        if !groups.is_empty() {
            // GROUP BY: one more key per D column.
            let out: Vec<ColumnRef> = d.iter().map(|c| ctx.new_column(&c.name, c.data_type, c.nullable)).collect();
            groups.extend(d.iter().zip(&out).map(|(c, o)| (c.expr(), o.clone())));
            return Ok((LogicalPlan::Aggregate { groups, aggregates, grouping_sets: None, input: Box::new(input) }, out));
        }
        // A scalar aggregate has one row for every D value, also when no input row has
        // it: aggregate over D ⟕ input, counting only the rows that came from the input.
        let present = ctx.new_column("present", DataType::Boolean, false);
        let mut exprs: Vec<(Expr, ColumnRef)> = input.output().into_iter().map(|c| (c.expr(), c)).collect();
        exprs.push((Expr::boolean(true), present.clone()));
        let marked = LogicalPlan::Project { exprs, input: Box::new(input) };
        let (domain, all) = self.domain(ctx)?;
        let condition = Expr::conjunction(all.iter().zip(&d).map(|(a, b)| Expr::compare(BinaryOp::IsNotDistinctFrom, a.expr(), b.expr())));
        let joined = LogicalPlan::Join { kind: JoinKind::Left, left: Box::new(domain), right: Box::new(marked), condition, mark: None };
        let from_input = Expr::IsNull { expr: Box::new(present.expr()), negated: false };
        let from_input = Expr::negation(from_input);
        let aggregates = aggregates
            .into_iter()
            .map(|(mut call, column)| {
                if call.func == AggregateFunction::CountStar {
                    call.func = AggregateFunction::Count;
                    call.args = vec![present.expr()];
                }
                call.filter = Some(Box::new(match call.filter.take() {
                    Some(filter) => Expr::binary(BinaryOp::And, from_input.clone(), *filter, DataType::Boolean),
                    None => from_input.clone(),
                }));
                (call, column)
            })
            .collect();
        let out: Vec<ColumnRef> = all.iter().map(|c| ctx.new_column(&c.name, c.data_type, c.nullable)).collect();
        let groups = all.iter().zip(&out).map(|(c, o)| (c.expr(), o.clone())).collect();
        Ok((LogicalPlan::Aggregate { groups, aggregates, grouping_sets: None, input: Box::new(joined) }, out))
    }

    /// `LIMIT n OFFSET m` (over an optional ORDER BY) for every D value: the rows
    /// numbered `m + 1 ..= m + n` by `row_number() OVER (PARTITION BY d ORDER BY ...)`
    /// (top-N per group; without ORDER BY, which rows is unspecified, as for LIMIT).
    fn push_into_limit(
        &self,
        limit: Option<u64>,
        offset: u64,
        input: LogicalPlan,
        ctx: &mut OptimizerContext,
    ) -> Result<(LogicalPlan, Vec<ColumnRef>)> {
        let (keys, below) = match input {
            LogicalPlan::Sort { keys, input } => (keys, *input),
            other => (Vec::new(), other),
        };
        let (below, d) = self.push_down(below, ctx)?;
        let output = below.output();
        let order_by = keys
            .into_iter()
            .map(|mut key| {
                key.expr = self.substitute(key.expr, &d);
                key
            })
            .collect();
        let row_number = ctx.new_column("row_number", DataType::BigInt, false);
        let call = WindowCall::row_number(d.iter().map(ColumnRef::expr).collect(), order_by);
        let numbered = LogicalPlan::Window { windows: vec![(call, row_number.clone())], input: Box::new(below) };
        let bound =
            |op, value: u64| Expr::compare(op, row_number.expr(), Expr::literal(ScalarValue::Int64(value.min(i64::MAX as u64) as i64)));
        let mut kept = vec![bound(BinaryOp::Gt, offset)];
        if let Some(limit) = limit {
            kept.push(bound(BinaryOp::LtEq, offset.saturating_add(limit)));
        }
        let filtered = LogicalPlan::Filter { predicate: Expr::conjunction(kept).expect("at least one bound"), input: Box::new(numbered) };
        let exprs = output.into_iter().map(|c| (c.expr(), c)).collect();
        Ok((LogicalPlan::Project { exprs, input: Box::new(filtered) }, d))
    }

    /// Replaces the correlated columns by D's columns `d`.
    fn substitute(&self, expr: Expr, d: &[ColumnRef]) -> Expr {
        let map: HashMap<ColumnId, Expr> = self.correlated.iter().zip(d).map(|(c, d)| (c.id, d.expr())).collect();
        expr.replace_columns_deep(&map)
    }
}

/// `outer ⋈ subquery` (a join of `kind`, also on `extra`) with the subquery computed once
/// per distinct value D of the outer columns it reads and joined on them (`IS NOT DISTINCT
/// FROM`); an uncorrelated subquery is joined as it is. An outer plan with a LIMIT is
/// computed once, as a materialized CTE that both the join and D read: evaluated twice
/// it could keep other rows, and an outer row whose value D missed would get no result.
pub(crate) fn dependent_join(
    outer: LogicalPlan,
    subquery: LogicalPlan,
    kind: JoinKind,
    extra: Vec<Expr>,
    mark: Option<ColumnRef>,
    ctx: &mut OptimizerContext,
) -> Result<LogicalPlan> {
    let join = |left: LogicalPlan, right: LogicalPlan, conditions: Vec<Expr>| LogicalPlan::Join {
        kind,
        left: Box::new(left),
        right: Box::new(right),
        condition: Expr::conjunction(conditions),
        mark: mark.clone(),
    };
    let Some(mut dependent) = Dependent::new(&outer, &subquery) else {
        return Ok(join(outer, subquery, extra));
    };
    // A CTE's definition cannot read enclosing queries' columns: such an outer plan is
    // copied (and refused if it has a LIMIT).
    if !contains_limit(&outer) || !outer.free_columns().is_empty() {
        let (right, d) = dependent.push_down(subquery, ctx)?;
        let mut conditions = vec![dependent.join_condition(&d)];
        conditions.extend(extra);
        return Ok(join(outer, right, conditions));
    }
    let (definition, map) = fresh_copy(&outer, ctx)?;
    let id = ctx.new_cte_id();
    let output = outer.output();
    let mut sources = HashMap::with_capacity(output.len());
    for column in &output {
        let source = map.get(&column.id).ok_or_else(|| internal_err!("the copy of the outer plan has no column {}", column.name))?;
        sources.insert(column.id, source.id);
    }
    let definition_for_estimates = Arc::new(definition.clone());
    let columns = output.iter().map(|c| (sources[&c.id], c.clone())).collect();
    let read = LogicalPlan::CteScan(CteScan { id, label: "outer".to_string(), columns, definition: Arc::clone(&definition_for_estimates) });
    dependent.shared = Some(SharedOuter { id, definition: definition_for_estimates, sources });
    let (right, d) = dependent.push_down(subquery, ctx)?;
    let mut conditions = vec![dependent.join_condition(&d)];
    conditions.extend(extra);
    let body = join(read, right, conditions);
    Ok(LogicalPlan::Cte { id, name: "outer".to_string(), definition: Box::new(definition), body: Box::new(body) })
}

fn contains_limit(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Limit { .. }) || plan.children().into_iter().any(contains_limit)
}

/// A copy of `plan` in which every column it produces has a new id (so the copy can be
/// joined with the original); returns the mapping from old ids to the new columns.
pub(crate) fn fresh_copy(plan: &LogicalPlan, ctx: &mut OptimizerContext) -> Result<(LogicalPlan, HashMap<ColumnId, ColumnRef>)> {
    if plan.contains_subquery() {
        return Err(not_impl_err!("copying a plan that still holds subqueries"));
    }
    let mut map = HashMap::new();
    let copy = copy_node(plan.clone(), &mut map, ctx);
    Ok((copy, map))
}

fn copy_node(plan: LogicalPlan, map: &mut HashMap<ColumnId, ColumnRef>, ctx: &mut OptimizerContext) -> LogicalPlan {
    let rename = |e: Expr, map: &HashMap<ColumnId, ColumnRef>| e.replace_columns(&|c| map.get(&c.id).map(|n| n.expr()));
    let fresh = |c: &ColumnRef, map: &mut HashMap<ColumnId, ColumnRef>, ctx: &mut OptimizerContext| {
        let new = ctx.new_column(&c.name, c.data_type, c.nullable);
        map.insert(c.id, new.clone());
        new
    };
    match plan {
        LogicalPlan::Scan(mut scan) => {
            scan.columns = scan.columns.iter().map(|(i, c)| (*i, fresh(c, map, ctx))).collect();
            scan.filters = scan.filters.into_iter().map(|f| rename(f, map)).collect();
            LogicalPlan::Scan(scan)
        }
        LogicalPlan::Values { rows, output } => {
            let output = output.iter().map(|c| fresh(c, map, ctx)).collect();
            LogicalPlan::Values { rows, output }
        }
        LogicalPlan::CteScan(mut scan) => {
            // The copy's definition (copied first, when the copy includes the Cte node)
            // has columns of its own.
            scan.columns = scan.columns.iter().map(|(source, c)| (map.get(source).map_or(*source, |n| n.id), fresh(c, map, ctx))).collect();
            LogicalPlan::CteScan(scan)
        }
        LogicalPlan::Cte { id, name, definition, body } => {
            let definition = copy_node(*definition, map, ctx);
            let body = copy_node(*body, map, ctx);
            LogicalPlan::Cte { id, name, definition: Box::new(definition), body: Box::new(body) }
        }
        LogicalPlan::RecursiveCte { id, name, distinct, anchor, recursive, output } => {
            let anchor = copy_node(*anchor, map, ctx);
            let recursive = copy_node(*recursive, map, ctx);
            let output = output.iter().map(|c| fresh(c, map, ctx)).collect();
            LogicalPlan::RecursiveCte { id, name, distinct, anchor: Box::new(anchor), recursive: Box::new(recursive), output }
        }
        LogicalPlan::WorkTableScan(mut scan) => {
            scan.columns = scan.columns.iter().map(|c| fresh(c, map, ctx)).collect();
            LogicalPlan::WorkTableScan(scan)
        }
        LogicalPlan::Filter { predicate, input } => {
            let input = copy_node(*input, map, ctx);
            LogicalPlan::Filter { predicate: rename(predicate, map), input: Box::new(input) }
        }
        LogicalPlan::Project { exprs, input } => {
            let input = copy_node(*input, map, ctx);
            let exprs: Vec<(Expr, ColumnRef)> = exprs.into_iter().map(|(e, c)| (rename(e, map), c)).collect();
            let exprs = exprs.into_iter().map(|(e, c)| (e, fresh(&c, map, ctx))).collect();
            LogicalPlan::Project { exprs, input: Box::new(input) }
        }
        LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input } => {
            let input = copy_node(*input, map, ctx);
            let groups: Vec<(Expr, ColumnRef)> = groups.into_iter().map(|(e, c)| (rename(e, map), c)).collect();
            let aggregates: Vec<(AggregateCall, ColumnRef)> = aggregates
                .into_iter()
                .map(|(mut call, c)| {
                    call.args = call.args.into_iter().map(|a| rename(a, map)).collect();
                    call.filter = call.filter.map(|f| Box::new(rename(*f, map)));
                    (call, c)
                })
                .collect();
            let groups = groups.into_iter().map(|(e, c)| (e, fresh(&c, map, ctx))).collect();
            let aggregates = aggregates.into_iter().map(|(a, c)| (a, fresh(&c, map, ctx))).collect();
            let grouping_sets = grouping_sets.map(|g| apiary_sql::GroupingSets { id: fresh(&g.id, map, ctx), sets: g.sets });
            LogicalPlan::Aggregate { groups, aggregates, grouping_sets, input: Box::new(input) }
        }
        LogicalPlan::Join { kind, left, right, condition, mark } => {
            let left = copy_node(*left, map, ctx);
            let right = copy_node(*right, map, ctx);
            let condition = condition.map(|c| rename(c, map));
            let mark = mark.map(|m| fresh(&m, map, ctx));
            LogicalPlan::Join { kind, left: Box::new(left), right: Box::new(right), condition, mark }
        }
        LogicalPlan::Sort { keys, input } => {
            let input = copy_node(*input, map, ctx);
            let keys = keys
                .into_iter()
                .map(|mut k| {
                    k.expr = rename(k.expr, map);
                    k
                })
                .collect();
            LogicalPlan::Sort { keys, input: Box::new(input) }
        }
        LogicalPlan::Limit { limit, offset, input } => LogicalPlan::Limit { limit, offset, input: Box::new(copy_node(*input, map, ctx)) },
        LogicalPlan::Window { windows, input } => {
            let input = copy_node(*input, map, ctx);
            let windows: Vec<_> = windows.into_iter().map(|(w, c)| (w.map_expressions(&mut |e| rename(e, map)), c)).collect();
            let windows = windows.into_iter().map(|(w, c)| (w, fresh(&c, map, ctx))).collect();
            LogicalPlan::Window { windows, input: Box::new(input) }
        }
        LogicalPlan::Union { inputs, output } => {
            let inputs = inputs.into_iter().map(|i| copy_node(i, map, ctx)).collect();
            let output = output.iter().map(|c| fresh(c, map, ctx)).collect();
            LogicalPlan::Union { inputs, output }
        }
    }
}

/// `x [NOT] IN (SELECT s ...)` as a value, with three-valued logic, as a scalar
/// aggregate over the subquery: TRUE when some `s = x`; else FALSE when the subquery is
/// empty; else NULL when `x` is NULL or some `s` is; else FALSE.
pub(crate) fn in_as_aggregate(
    value: Expr,
    plan: LogicalPlan,
    inner: &ColumnRef,
    negated: bool,
    ctx: &mut OptimizerContext,
) -> (LogicalPlan, ColumnRef) {
    let equal = Expr::compare(BinaryOp::Eq, inner.expr(), value.clone());
    let matched = ctx.new_column("in_matched", DataType::Boolean, true);
    let rows = ctx.new_column("in_rows", DataType::BigInt, false);
    let has_null = ctx.new_column("in_has_null", DataType::Boolean, true);
    let call = |func, args: Vec<Expr>, data_type| AggregateCall::new(func, args, false, None, data_type);
    let aggregates = vec![
        (call(AggregateFunction::BoolOr, vec![equal], DataType::Boolean), matched.clone()),
        (call(AggregateFunction::CountStar, vec![], DataType::BigInt), rows.clone()),
        (call(AggregateFunction::BoolOr, vec![Expr::is_null(inner.expr())], DataType::Boolean), has_null.clone()),
    ];
    let aggregate = LogicalPlan::Aggregate { groups: Vec::new(), aggregates, grouping_sets: None, input: Box::new(plan) };
    let null = Expr::Literal(ScalarValue::Null, DataType::Boolean);
    let result = Expr::Case {
        whens: vec![
            (Expr::compare(BinaryOp::Eq, matched.expr(), Expr::boolean(true)), Expr::boolean(!negated)),
            (Expr::compare(BinaryOp::Eq, rows.expr(), Expr::literal(ScalarValue::Int64(0))), Expr::boolean(negated)),
            (
                Expr::disjunction([Expr::is_null(value), Expr::compare(BinaryOp::Eq, has_null.expr(), Expr::boolean(true))])
                    .expect("two parts"),
                null,
            ),
        ],
        otherwise: Some(Box::new(Expr::boolean(negated))),
        data_type: DataType::Boolean,
    };
    let output = ctx.new_column("in", DataType::Boolean, true);
    (LogicalPlan::Project { exprs: vec![(result, output.clone())], input: Box::new(aggregate) }, output)
}
