//! Binding queries: WITH, SELECT, set operations, VALUES, ORDER BY, LIMIT, FROM, joins.

use std::collections::HashMap;
use std::sync::Arc;

use apiary_common::{bind_err, not_impl_err, type_err, ApiaryError, Result};
use apiary_types::{DataType, ScalarValue};
use sqlparser::ast;

use super::grouping::{expand_grouping_sets, GroupingContext};
use super::{normalize_ident, object_name_to_table, AggregateCollector, Binder, Scope, ScopeColumn, TableArg};
use crate::coercion::common_type;
use crate::expr::{BinaryOp, ColumnId, ColumnRef, Expr, ScalarFunction, SortKey};
use crate::plan::{GroupingSets, JoinKind, LogicalPlan, Scan};

/// Output columns of a bound query: (visible name, column).
pub(crate) type OutputColumns = Vec<(String, ColumnRef)>;

impl Binder<'_> {
    pub(crate) fn bind_query_body(&mut self, query: &ast::Query) -> Result<(LogicalPlan, OutputColumns)> {
        match &query.with {
            None => self.bind_query_without_with(query),
            Some(with) => self.bind_with(with, query),
        }
    }

    pub(crate) fn bind_query_without_with(&mut self, query: &ast::Query) -> Result<(LogicalPlan, OutputColumns)> {
        if query.fetch.as_ref().is_some_and(|f| f.with_ties || f.percent) {
            return Err(not_impl_err!("FETCH ... WITH TIES / PERCENT"));
        }
        let order_by = match &query.order_by {
            None => OrderByClause::Exprs(&[]),
            Some(ast::OrderBy { interpolate: Some(_), .. }) => return Err(not_impl_err!("ORDER BY ... INTERPOLATE")),
            Some(ast::OrderBy { kind: ast::OrderByKind::Expressions(exprs), .. }) => OrderByClause::Exprs(exprs),
            Some(ast::OrderBy { kind: ast::OrderByKind::All(options), .. }) => OrderByClause::All(options),
        };
        let (limit, offset) = self.bind_limit(query)?;
        match query.body.as_ref() {
            ast::SetExpr::Select(select) => self.bind_select(select, order_by, limit, offset),
            other => {
                let (plan, columns) = self.bind_set_expr(other)?;
                let plan = self.order_by_outputs(plan, &columns, order_by)?;
                Ok((apply_limit(plan, limit, offset), columns))
            }
        }
    }

    fn bind_limit(&mut self, query: &ast::Query) -> Result<(Option<u64>, u64)> {
        let (limit, offset) = match &query.limit_clause {
            None => (None, None),
            Some(ast::LimitClause::LimitOffset { limit, offset, limit_by }) => {
                if !limit_by.is_empty() {
                    return Err(not_impl_err!("LIMIT BY"));
                }
                (limit.as_ref(), offset.as_ref().map(|o| &o.value))
            }
            Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => (Some(limit), Some(offset)),
        };
        let fetch = query.fetch.as_ref().and_then(|f| f.quantity.as_ref());
        let mut evaluate = |expr: Option<&ast::Expr>, what: &str| -> Result<Option<u64>> {
            let Some(expr) = expr else { return Ok(None) };
            let bound = self.bind_expr_hinted(expr, &Scope::default(), Some(DataType::BigInt))?;
            match bound {
                Expr::Literal(ScalarValue::Null, _) => Ok(None),
                // Like PostgreSQL, a numeric count is cast to BIGINT (1.25 -> 1, 1.5 -> 2).
                Expr::Literal(value, _) => match value.cast_to(&DataType::BigInt).ok().and_then(|v| v.as_i128()) {
                    Some(v) if v >= 0 => Ok(Some(v as u64)),
                    Some(_) => Err(bind_err!("{what} must not be negative, got {value}")),
                    None => Err(bind_err!("{what} must be an integer, got {value}")),
                },
                other => Err(bind_err!("{what} must be a constant integer, got {other}")),
            }
        };
        let limit = match (limit, fetch) {
            (Some(l), None) => evaluate(Some(l), "LIMIT")?,
            (None, Some(f)) => evaluate(Some(f), "FETCH FIRST")?,
            (None, None) => None,
            (Some(_), Some(_)) => return Err(bind_err!("cannot use both LIMIT and FETCH")),
        };
        let offset = evaluate(offset, "OFFSET")?.unwrap_or(0);
        Ok((limit, offset))
    }

    pub(crate) fn bind_set_expr(&mut self, body: &ast::SetExpr) -> Result<(LogicalPlan, OutputColumns)> {
        match body {
            ast::SetExpr::Select(select) => self.bind_select(select, OrderByClause::Exprs(&[]), None, 0),
            ast::SetExpr::Query(query) => self.bind_query_body(query),
            ast::SetExpr::Values(values) => self.bind_values(values),
            ast::SetExpr::SetOperation { op, set_quantifier, left, right } => {
                // A chain `a UNION b UNION c ...` is a left-deep tree: walk its spine
                // without recursion (generated SQL has thousands of branches).
                let mut rights = vec![right.as_ref()];
                let mut leftmost = left.as_ref();
                while let ast::SetExpr::SetOperation { op: o, set_quantifier: q, left: l, right: r } = leftmost {
                    if o != op || q != set_quantifier {
                        break;
                    }
                    rights.push(r.as_ref());
                    leftmost = l.as_ref();
                }
                rights.reverse();
                let first = self.bind_set_expr(leftmost)?;
                if *op == ast::SetOperator::Union {
                    // One n-ary union (UNION is associative, also with DISTINCT).
                    let mut inputs = vec![first];
                    for right in rights {
                        inputs.push(self.bind_set_expr(right)?);
                    }
                    return self.bind_union(inputs, *set_quantifier);
                }
                let mut result = first;
                for right in rights {
                    let right = self.bind_set_expr(right)?;
                    result = self.bind_set_operation(*op, *set_quantifier, result, right)?;
                }
                Ok(result)
            }
            ast::SetExpr::Table(table) => {
                let name = table.table_name.clone().ok_or_else(|| bind_err!("TABLE needs a table name"))?.to_lowercase();
                let (plan, scope) = match self.catalog.get_view(&name) {
                    Some(view) => self.bind_view_reference(view, None)?,
                    None => {
                        let table = self.catalog_table(&name)?;
                        self.note_reference(&name);
                        self.scan_table(table, &name, None)?
                    }
                };
                let columns = scope.columns.into_iter().map(|c| (c.name, c.column)).collect();
                Ok((plan, columns))
            }
            other => Err(not_impl_err!("query body {other}")),
        }
    }

    /// `input1 UNION [ALL] input2 UNION [ALL] ...` as one union of all inputs.
    fn bind_union(
        &mut self,
        inputs: Vec<(LogicalPlan, OutputColumns)>,
        quantifier: ast::SetQuantifier,
    ) -> Result<(LogicalPlan, OutputColumns)> {
        let all = match quantifier {
            ast::SetQuantifier::All => true,
            ast::SetQuantifier::Distinct | ast::SetQuantifier::None => false,
            _ => return Err(not_impl_err!("UNION BY NAME")),
        };
        let width = inputs[0].1.len();
        let mut types: Vec<DataType> = inputs[0].1.iter().map(|(_, c)| c.data_type).collect();
        let mut nullable = vec![false; width];
        for (_, columns) in &inputs {
            if columns.len() != width {
                return Err(bind_err!("each UNION query must have the same number of columns ({width} vs {})", columns.len()));
            }
            for (i, (name, column)) in columns.iter().enumerate() {
                types[i] = common_type(&types[i], &column.data_type)
                    .ok_or_else(|| type_err!("UNION types {} and {} cannot be matched (column \"{name}\")", types[i], column.data_type))?;
                nullable[i] |= column.nullable;
            }
        }
        let names: Vec<String> = inputs[0].1.iter().map(|(n, _)| n.clone()).collect();
        let mut plans = Vec::with_capacity(inputs.len());
        for (plan, columns) in inputs {
            plans.push(self.cast_outputs(plan, &columns, &types)?);
        }
        let output: Vec<ColumnRef> =
            names.iter().zip(&types).zip(&nullable).map(|((n, t), nullable)| self.new_column(n, *t, *nullable)).collect();
        let union = LogicalPlan::Union { inputs: plans, output: output.clone() };
        let columns: OutputColumns = names.into_iter().zip(output).collect();
        Ok(if all { (union, columns) } else { self.distinct(union, columns) })
    }

    fn bind_set_operation(
        &mut self,
        op: ast::SetOperator,
        quantifier: ast::SetQuantifier,
        left: (LogicalPlan, OutputColumns),
        right: (LogicalPlan, OutputColumns),
    ) -> Result<(LogicalPlan, OutputColumns)> {
        if op == ast::SetOperator::Union {
            return self.bind_union(vec![left, right], quantifier);
        }
        let op_name = match op {
            ast::SetOperator::Union => "UNION",
            ast::SetOperator::Intersect => "INTERSECT",
            ast::SetOperator::Except | ast::SetOperator::Minus => "EXCEPT",
        };
        if left.1.len() != right.1.len() {
            return Err(bind_err!("each {op_name} query must have the same number of columns ({} vs {})", left.1.len(), right.1.len()));
        }
        let all = match quantifier {
            ast::SetQuantifier::All => true,
            ast::SetQuantifier::Distinct | ast::SetQuantifier::None => false,
            _ => return Err(not_impl_err!("{op_name} BY NAME")),
        };
        let mut types = Vec::new();
        for ((name, l), (_, r)) in left.1.iter().zip(&right.1) {
            let t = common_type(&l.data_type, &r.data_type)
                .ok_or_else(|| type_err!("{op_name} types {} and {} cannot be matched (column \"{name}\")", l.data_type, r.data_type))?;
            types.push(t);
        }
        let left_plan = self.cast_outputs(left.0, &left.1, &types)?;
        let right_plan = self.cast_outputs(right.0, &right.1, &types)?;
        let names: Vec<String> = left.1.iter().map(|(n, _)| n.clone()).collect();
        match op {
            ast::SetOperator::Union => unreachable!("handled above"),
            ast::SetOperator::Intersect | ast::SetOperator::Except | ast::SetOperator::Minus => {
                let kind = if op == ast::SetOperator::Intersect { JoinKind::Semi } else { JoinKind::Anti { null_aware: false } };
                if all {
                    return Ok(self.set_operation_all(kind, left_plan, right_plan, names));
                }
                // Distinct left rows with (INTERSECT) / without (EXCEPT) a NULL-safe match.
                // Both inputs are made distinct before the join: the right side only
                // answers whether a match exists, so one row per value will do (TPC-DS
                // Q14 built its semi join on 860K catalog rows of a few thousand values),
                // and the left rows are then distinct already. An input that is a
                // SELECT DISTINCT already is left as it is.
                let (left_plan, left_columns) = self.distinct_unless_distinct(left_plan, &names);
                let (right_plan, right_columns) = self.distinct_unless_distinct(right_plan, &names);
                let condition = Expr::conjunction(
                    left_columns
                        .iter()
                        .zip(&right_columns)
                        .map(|((_, l), (_, r))| Expr::compare(BinaryOp::IsNotDistinctFrom, l.expr(), r.expr())),
                );
                let joined = LogicalPlan::Join { kind, left: Box::new(left_plan), right: Box::new(right_plan), condition, mark: None };
                Ok((joined, left_columns))
            }
        }
    }

    /// `INTERSECT ALL` (`kind` semi) and `EXCEPT ALL` (anti) as multisets: a row that the
    /// left input has m times and the right input n times appears min(m, n) or
    /// max(m - n, 0) times (NULLs equal). The left rows are numbered within their group
    /// of equal rows (`row_number() OVER (PARTITION BY every column)`), the right rows
    /// are counted per group, and the k-th copy of a left row is kept when the right side
    /// has at least k copies (semi join) or fewer (anti join):
    ///
    /// ```text
    /// Window row_number() OVER (PARTITION BY l1..ln) AS k      Aggregate count(*) AS n
    ///   left                                              ⋉/▷    GROUP BY r1..rn: right
    ///                   ON l1 IS NOT DISTINCT FROM r1 AND ... AND k <= n
    /// ```
    fn set_operation_all(
        &mut self,
        kind: JoinKind,
        left: LogicalPlan,
        right: LogicalPlan,
        names: Vec<String>,
    ) -> (LogicalPlan, OutputColumns) {
        use crate::expr::{AggregateCall, AggregateFunction, BinaryOp};
        let left_columns = left.output();
        let copy = self.new_column("copy", DataType::BigInt, false);
        let numbering = crate::window::WindowCall::row_number(left_columns.iter().map(ColumnRef::expr).collect(), Vec::new());
        let numbered = LogicalPlan::Window { windows: vec![(numbering, copy.clone())], input: Box::new(left) };
        let mut groups = Vec::new();
        for column in right.output() {
            let grouped = self.new_column(&column.name, column.data_type, column.nullable);
            groups.push((column.expr(), grouped));
        }
        let copies = self.new_column("copies", DataType::BigInt, false);
        let count = AggregateCall::new(AggregateFunction::CountStar, Vec::new(), false, None, DataType::BigInt);
        let keys: Vec<ColumnRef> = groups.iter().map(|(_, c)| c.clone()).collect();
        let counted =
            LogicalPlan::Aggregate { groups, aggregates: vec![(count, copies.clone())], grouping_sets: None, input: Box::new(right) };
        let mut conjuncts: Vec<Expr> =
            left_columns.iter().zip(&keys).map(|(l, r)| Expr::compare(BinaryOp::IsNotDistinctFrom, l.expr(), r.expr())).collect();
        conjuncts.push(Expr::compare(BinaryOp::LtEq, copy.expr(), copies.expr()));
        let joined = LogicalPlan::Join {
            kind,
            left: Box::new(numbered),
            right: Box::new(counted),
            condition: Expr::conjunction(conjuncts),
            mark: None,
        };
        let exprs = left_columns.iter().map(|c| (c.expr(), c.clone())).collect();
        let plan = LogicalPlan::Project { exprs, input: Box::new(joined) };
        (plan, names.into_iter().zip(left_columns).collect())
    }

    /// Projects `columns` cast to `types` (a no-op projection is skipped).
    pub(crate) fn cast_outputs(&mut self, plan: LogicalPlan, columns: &OutputColumns, types: &[DataType]) -> Result<LogicalPlan> {
        let needs_cast = columns.iter().zip(types).any(|((_, c), t)| c.data_type != *t);
        let in_order = plan.output().iter().map(|c| c.id).eq(columns.iter().map(|(_, c)| c.id));
        if !needs_cast && in_order {
            return Ok(plan);
        }
        let mut exprs = Vec::new();
        for ((name, column), t) in columns.iter().zip(types) {
            let expr = self.coerce(column.expr(), t)?;
            let output = self.new_column(name, *t, column.nullable);
            exprs.push((expr, output));
        }
        Ok(LogicalPlan::Project { exprs, input: Box::new(plan) })
    }

    /// `SELECT DISTINCT` over `columns` of `plan`: an aggregation with only group keys.
    /// `plan` with its output columns named `names`, grouped by all of them unless its
    /// rows are distinct already (a grouping without aggregates whose groups are the
    /// output, possibly renamed or reordered by a projection of plain columns).
    fn distinct_unless_distinct(&mut self, plan: LogicalPlan, names: &[String]) -> (LogicalPlan, OutputColumns) {
        let columns: OutputColumns = names.iter().cloned().zip(plan.output()).collect();
        fn is_distinct(plan: &LogicalPlan) -> bool {
            match plan {
                LogicalPlan::Aggregate { aggregates, grouping_sets: None, .. } => aggregates.is_empty(),
                LogicalPlan::Project { exprs, input } => {
                    let inner = input.output();
                    // Every input column, each once, as a plain column: the same rows.
                    let mut seen: Vec<_> =
                        exprs.iter().filter_map(|(e, _)| if let Expr::Column(c) = e { Some(c.id) } else { None }).collect();
                    seen.sort();
                    seen.dedup();
                    seen.len() == exprs.len()
                        && seen.len() == inner.len()
                        && inner.iter().all(|c| seen.contains(&c.id))
                        && is_distinct(input)
                }
                _ => false,
            }
        }
        if is_distinct(&plan) {
            return (plan, columns);
        }
        self.distinct(plan, columns)
    }

    fn distinct(&mut self, plan: LogicalPlan, columns: OutputColumns) -> (LogicalPlan, OutputColumns) {
        let mut groups = Vec::new();
        let mut output = Vec::new();
        for (name, column) in columns {
            let grouped = self.new_column(&name, column.data_type, column.nullable);
            groups.push((column.expr(), grouped.clone()));
            output.push((name, grouped));
        }
        (LogicalPlan::Aggregate { groups, aggregates: Vec::new(), grouping_sets: None, input: Box::new(plan) }, output)
    }

    fn bind_values(&mut self, values: &ast::Values) -> Result<(LogicalPlan, OutputColumns)> {
        self.bind_values_typed(values, None)
    }

    /// Binds VALUES; with `targets` (INSERT), each column converts to the target type the
    /// way an assignment does, so `'2024-01-01'` and NULL fit a DATE column.
    pub(crate) fn bind_values_typed(
        &mut self,
        values: &ast::Values,
        targets: Option<&[(String, DataType)]>,
    ) -> Result<(LogicalPlan, OutputColumns)> {
        let width = values.rows.first().map_or(0, |r| r.content.len());
        if let Some(targets) = targets {
            if targets.len() != width {
                return Err(bind_err!("INSERT has {} target columns but VALUES has {} expressions", targets.len(), width));
            }
        }
        let mut rows: Vec<Vec<Expr>> = Vec::with_capacity(values.rows.len());
        for row in &values.rows {
            if row.content.len() != width {
                return Err(bind_err!("VALUES lists must all be the same length"));
            }
            let bound: Vec<Expr> = row
                .content
                .iter()
                .enumerate()
                .map(|(column, e)| self.bind_expr_hinted(e, &Scope::default(), targets.map(|t| t[column].1)))
                .collect::<Result<_>>()?;
            if let Some(e) = bound.iter().find(|e| !e.reads_no_row()) {
                return Err(not_impl_err!("non-constant expression in VALUES: {e}"));
            }
            rows.push(bound);
        }
        let is_text_literal = |e: &Expr| matches!(e, Expr::Literal(ScalarValue::Utf8(_), _));
        let mut types = vec![DataType::Null; width];
        match targets {
            Some(targets) => {
                for (t, (_, target)) in types.iter_mut().zip(targets) {
                    *t = if target.is_string() { DataType::Varchar(None) } else { *target };
                }
            }
            None => {
                // String literals adopt the column's other type (like PostgreSQL's unknown
                // literals), so ('x', DATE '2024-01-02'), ('2024-01-01', ...) unify to DATE.
                for column in 0..width {
                    let mut t = DataType::Null;
                    for row in &rows {
                        let e = &row[column];
                        if is_text_literal(e) {
                            continue;
                        }
                        t = common_type(&t, &e.data_type())
                            .ok_or_else(|| type_err!("VALUES types {} and {} cannot be matched", t, e.data_type()))?;
                    }
                    if rows.iter().any(|r| is_text_literal(&r[column])) {
                        t = if t == DataType::Null { DataType::Varchar(None) } else { t };
                    }
                    types[column] = t;
                }
            }
        }
        let mut converted = Vec::with_capacity(rows.len());
        for row in rows {
            let mut out = Vec::with_capacity(width);
            for (column, (e, t)) in row.into_iter().zip(&types).enumerate() {
                let e = match targets {
                    Some(targets) => self.assignment_cast(e, &targets[column].1, &targets[column].0)?,
                    None if is_text_literal(&e) && !t.is_string() => self.cast(e, *t)?,
                    None => self.coerce(e, t)?,
                };
                out.push(e);
            }
            converted.push(out);
        }
        let mut rows = converted;
        // Cells with an effect (`nextval(...)`, a SERIAL's DEFAULT) run once per row: the
        // VALUES rows hold a NULL there and which expression the row has, and a
        // projection computes it.
        let effect_columns: Vec<usize> = (0..width).filter(|&c| rows.iter().any(|r| !r[c].is_constant())).collect();
        let mut variants: Vec<Vec<Expr>> = vec![Vec::new(); effect_columns.len()];
        for row in &mut rows {
            for (k, &column) in effect_columns.iter().enumerate() {
                let mut selector = 0;
                if !row[column].is_constant() {
                    let expr = std::mem::replace(&mut row[column], Expr::Literal(ScalarValue::Null, types[column]));
                    let expr = if expr.data_type() == types[column] { expr } else { self.cast(expr, types[column])? };
                    selector = match variants[k].iter().position(|v| *v == expr) {
                        Some(i) => i + 1,
                        None => {
                            variants[k].push(expr);
                            variants[k].len()
                        }
                    };
                }
                row.push(Expr::Literal(ScalarValue::Int32(selector as i32), DataType::Integer));
            }
        }
        let mut output = Vec::new();
        for (i, t) in types.iter().enumerate() {
            let nullable = rows.iter().any(|r| r[i].nullable());
            output.push((format!("column{}", i + 1), self.new_column(&format!("column{}", i + 1), *t, nullable)));
        }
        let selectors: Vec<ColumnRef> =
            (0..effect_columns.len()).map(|k| self.new_column(&format!("effect{k}"), DataType::Integer, false)).collect();
        let columns = output.iter().map(|(_, c)| c.clone()).chain(selectors.iter().cloned()).collect();
        let plan = LogicalPlan::Values { rows, output: columns };
        if effect_columns.is_empty() {
            return Ok((plan, output));
        }
        let mut exprs = Vec::with_capacity(width);
        let mut projected = Vec::with_capacity(width);
        for (column, (name, value)) in output.into_iter().enumerate() {
            let expr = match effect_columns.iter().position(|&c| c == column) {
                Some(k) => {
                    let whens = variants[k]
                        .iter()
                        .enumerate()
                        .map(|(i, variant)| {
                            let chosen = Expr::Literal(ScalarValue::Int32(i as i32 + 1), DataType::Integer);
                            (Expr::compare(BinaryOp::Eq, selectors[k].expr(), chosen), variant.clone())
                        })
                        .collect();
                    Expr::Case { whens, otherwise: Some(Box::new(value.expr())), data_type: value.data_type }
                }
                None => value.expr(),
            };
            let out = self.new_column(&name, value.data_type, true);
            exprs.push((expr, out.clone()));
            projected.push((name, out));
        }
        Ok((LogicalPlan::Project { exprs, input: Box::new(plan) }, projected))
    }

    /// ORDER BY for set operations and VALUES: keys must name output columns.
    fn order_by_outputs(&mut self, plan: LogicalPlan, columns: &OutputColumns, order_by: OrderByClause<'_>) -> Result<LogicalPlan> {
        let order_by = match order_by {
            OrderByClause::Exprs([]) => return Ok(plan),
            OrderByClause::Exprs(exprs) => exprs,
            OrderByClause::All(options) => {
                let keys = columns.iter().map(|(_, c)| sort_key(c.expr(), options)).collect::<Result<_>>()?;
                return Ok(LogicalPlan::Sort { keys, input: Box::new(plan) });
            }
        };
        let scope = Scope::from_columns(None, columns);
        let mut keys = Vec::new();
        for item in order_by {
            let expr = match ordinal(&item.expr, columns.len(), "ORDER BY")? {
                Some(idx) => columns[idx].1.expr(),
                None => self.bind_expr(&item.expr, &scope)?,
            };
            keys.push(sort_key(expr, &item.options)?);
        }
        Ok(LogicalPlan::Sort { keys, input: Box::new(plan) })
    }

    /// Binds one SELECT block with the ORDER BY / LIMIT of its query.
    pub(crate) fn bind_select(
        &mut self,
        select: &ast::Select,
        order_by: OrderByClause<'_>,
        limit: Option<u64>,
        offset: u64,
    ) -> Result<(LogicalPlan, OutputColumns)> {
        // The WINDOW clause's names, visible to this query's window calls.
        let saved = self.named_windows.len();
        let mut result = Ok(());
        for ast::NamedWindowDefinition(name, definition) in &select.named_window {
            let spec = match definition {
                ast::NamedWindowExpr::WindowSpec(spec) => Ok(spec.clone()),
                ast::NamedWindowExpr::NamedWindow(other) => {
                    let other = normalize_ident(other);
                    self.named_windows
                        .iter()
                        .rev()
                        .find(|(n, _)| *n == other)
                        .map(|(_, spec)| spec.clone())
                        .ok_or_else(|| bind_err!("window \"{other}\" does not exist"))
                }
            };
            match spec {
                Ok(spec) => self.named_windows.push((normalize_ident(name), spec)),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let bound = result.and_then(|()| self.bind_select_with_windows(select, order_by, limit, offset));
        self.named_windows.truncate(saved);
        bound
    }

    fn bind_select_with_windows(
        &mut self,
        select: &ast::Select,
        order_by: OrderByClause<'_>,
        limit: Option<u64>,
        offset: u64,
    ) -> Result<(LogicalPlan, OutputColumns)> {
        reject_unsupported_select_clauses(select)?;
        let (mut plan, scope) = self.bind_from(&select.from)?;

        if let Some(selection) = &select.selection {
            self.aggregate_stack.push(None);
            let predicate = self.bind_expr(selection, &scope);
            self.aggregate_stack.pop();
            let predicate = self.boolean_condition(predicate?, "WHERE")?;
            plan = LogicalPlan::Filter { predicate, input: Box::new(plan) };
        }

        // DuckDB's `FROM t` without SELECT selects every column.
        let from_only = [ast::SelectItem::Wildcard(ast::WildcardAdditionalOptions::default())];
        let projection: &[ast::SelectItem] = if select.flavor == ast::SelectFlavor::FromFirstNoSelect && select.projection.is_empty() {
            &from_only
        } else {
            &select.projection
        };

        // GROUP BY keys (may name select-list aliases or ordinals), as grouping sets.
        let (group_items, modifiers, explicit_group_by) = match &select.group_by {
            ast::GroupByExpr::Expressions(exprs, modifiers) => (exprs.clone(), modifiers, !exprs.is_empty()),
            ast::GroupByExpr::All(modifiers) => (group_by_all_keys(projection, &scope)?, modifiers, true),
        };
        let set_asts = expand_grouping_sets(&group_items, modifiers)?;
        // The distinct key expressions, and each set as indices into them.
        let mut key_asts: Vec<ast::Expr> = Vec::new();
        let mut ast_sets: Vec<Vec<usize>> = Vec::new();
        for set in &set_asts {
            let mut indices = Vec::new();
            for key in set {
                let index = key_asts.iter().position(|k| k == key).unwrap_or_else(|| {
                    key_asts.push(key.clone());
                    key_asts.len() - 1
                });
                indices.push(index);
            }
            ast_sets.push(indices);
        }
        let mut bound_keys: Vec<(Expr, ast::Expr)> = Vec::new();
        let mut key_of_ast: Vec<usize> = Vec::new();
        for key_ast in &key_asts {
            let resolved = self.resolve_group_key(key_ast, select, &scope)?;
            self.aggregate_stack.push(None);
            let bound = self.bind_expr(&resolved, &scope);
            self.aggregate_stack.pop();
            let bound = bound?;
            let index = bound_keys.iter().position(|(g, _)| *g == bound).unwrap_or_else(|| {
                bound_keys.push((bound, resolved));
                bound_keys.len() - 1
            });
            key_of_ast.push(index);
        }
        let sets: Vec<Vec<usize>> = ast_sets
            .iter()
            .map(|set| {
                let mut keys: Vec<usize> = set.iter().map(|&i| key_of_ast[i]).collect();
                keys.sort_unstable();
                keys.dedup();
                keys
            })
            .collect();
        let grouping_sets = (sets.len() > 1).then(|| GroupingSets { sets, id: self.new_column("grouping_set", DataType::Integer, false) });
        let mut groups: Vec<(Expr, ColumnRef)> = Vec::new();
        let mut subquery_keys: Vec<(ast::Expr, ColumnRef)> = Vec::new();
        for (i, (bound, resolved)) in bound_keys.into_iter().enumerate() {
            let name = match &bound {
                Expr::Column(c) => c.name.to_string(),
                _ => resolved.to_string(),
            };
            let nullable = bound.nullable() || grouping_sets.as_ref().is_some_and(|g| g.omits(i));
            let column = self.new_column(&name, bound.data_type(), nullable);
            if bound.contains_subquery() {
                subquery_keys.push((resolved, column.clone()));
            }
            groups.push((bound, column));
        }
        let grouping = explicit_group_by.then(|| GroupingContext {
            keys: groups.iter().map(|(g, _)| g.clone()).collect(),
            sets: grouping_sets.as_ref().map(|g| (g.sets.clone(), g.id.clone())),
        });

        // SELECT list, HAVING and ORDER BY, collecting aggregates.
        self.aggregate_stack.push(Some(AggregateCollector { grouping, ..Default::default() }));
        let enclosing_keys = std::mem::replace(&mut self.grouped_subquery_keys, subquery_keys);
        let bound_items = self.bind_select_items(projection, &scope);
        let windows_before_having = self.window_count();
        let having = match (&bound_items, &select.having) {
            (Ok(_), Some(having)) => Some(self.bind_expr(having, &scope)),
            _ => None,
        };
        let window_in_having = self.window_count() > windows_before_having;
        let order_keys = match &bound_items {
            Ok(items) => Some(self.bind_order_keys(order_by, items, &scope, "ORDER BY")),
            Err(_) => None,
        };
        // DISTINCT ON keys name select items or expressions, as ORDER BY keys do.
        let distinct_on_keys = match (&bound_items, &select.distinct) {
            (Ok(items), Some(ast::Distinct::On(exprs))) => {
                let as_keys: Vec<ast::OrderByExpr> = exprs
                    .iter()
                    .map(|expr| ast::OrderByExpr { expr: expr.clone(), options: ast::OrderByOptions::default(), with_fill: None })
                    .collect();
                Some(self.bind_order_keys(OrderByClause::Exprs(&as_keys), items, &scope, "DISTINCT ON"))
            }
            _ => None,
        };
        let qualify = match (&bound_items, &select.qualify) {
            (Ok(_), Some(qualify)) => Some(self.bind_expr(qualify, &scope)),
            _ => None,
        };
        self.grouped_subquery_keys = enclosing_keys;
        let collector = self.aggregate_stack.pop().flatten().unwrap_or_default();
        let mut items = bound_items?;
        let mut having = having.transpose()?;
        let mut order_keys = order_keys.transpose()?.unwrap_or_default();
        let mut distinct_on_keys = distinct_on_keys.transpose()?;
        let mut qualify = qualify.transpose()?;
        if window_in_having {
            return Err(bind_err!("window functions are not allowed in HAVING"));
        }
        let mut windows = collector.windows;

        let aggregated = explicit_group_by || !collector.calls.is_empty() || having.is_some();
        if aggregated {
            let input_columns: Vec<ColumnId> = scope.columns.iter().map(|c| c.column.id).collect();
            let rewrite = |expr: Expr, clause: &str| resolve_grouped(expr, &groups, &input_columns, clause);
            for (_, expr) in items.iter_mut() {
                *expr = rewrite(std::mem::replace(expr, Expr::boolean(true)), "SELECT list")?;
            }
            if let Some(h) = having.take() {
                having = Some(rewrite(h, "HAVING clause")?);
            }
            for key in order_keys.iter_mut() {
                if let OrderTarget::Expr(e) = &mut key.0 {
                    *e = rewrite(std::mem::replace(e, Expr::boolean(true)), "ORDER BY clause")?;
                }
            }
            for key in distinct_on_keys.iter_mut().flatten() {
                if let OrderTarget::Expr(e) = &mut key.0 {
                    *e = rewrite(std::mem::replace(e, Expr::boolean(true)), "DISTINCT ON clause")?;
                }
            }
            if let Some(q) = qualify.take() {
                qualify = Some(rewrite(q, "QUALIFY clause")?);
            }
            let mut error = None;
            for (call, _) in windows.iter_mut() {
                *call = call.map_expressions(&mut |e| {
                    rewrite(e, "window function").unwrap_or_else(|err| {
                        error.get_or_insert(err);
                        Expr::boolean(true)
                    })
                });
            }
            if let Some(err) = error {
                return Err(err);
            }
            // Outer references from subqueries in the SELECT list to group keys now read
            // the aggregate's key columns.
            let key_map: HashMap<ColumnId, Expr> = groups
                .iter()
                .filter_map(|(g, out)| match g {
                    Expr::Column(c) => Some((c.id, out.expr())),
                    _ => None,
                })
                .collect();
            let aggregates = collector.calls;
            plan = LogicalPlan::Aggregate { groups: groups.clone(), aggregates, grouping_sets, input: Box::new(plan) };
            if !key_map.is_empty() {
                let rewrite =
                    |e: &mut Expr| *e = crate::plan::rewrite_subquery_columns(std::mem::replace(e, Expr::boolean(true)), &key_map);
                items.iter_mut().for_each(|(_, e)| rewrite(e));
                having.iter_mut().for_each(rewrite);
                for key in order_keys.iter_mut().chain(distinct_on_keys.iter_mut().flatten()) {
                    if let OrderTarget::Expr(e) = &mut key.0 {
                        rewrite(e);
                    }
                }
            }
            if let Some(h) = having.take() {
                let predicate = self.boolean_condition(h, "HAVING")?;
                plan = LogicalPlan::Filter { predicate, input: Box::new(plan) };
            }
        }
        if !windows.is_empty() {
            plan = LogicalPlan::Window { windows, input: Box::new(plan) };
        }
        if let Some(q) = qualify {
            if !matches!(plan, LogicalPlan::Window { .. }) {
                return Err(bind_err!("QUALIFY needs a window function in the query"));
            }
            let predicate = self.boolean_condition(q, "QUALIFY")?;
            plan = LogicalPlan::Filter { predicate, input: Box::new(plan) };
        }

        // Projection: visible items, then hidden ORDER BY expressions.
        let mut exprs: Vec<(Expr, ColumnRef)> = Vec::new();
        let mut columns: OutputColumns = Vec::new();
        let available = plan.output_ids();
        for (name, expr) in items {
            let column = match &expr {
                // Pass columns through under their own id when possible — only this
                // query's own columns: a subquery passing an outer column through would
                // seem not to read it at all.
                Expr::Column(c) if available.contains(&c.id) && !exprs.iter().any(|(_, o): &(Expr, ColumnRef)| o.id == c.id) => c.clone(),
                _ => self.new_column(&name, expr.data_type(), expr.nullable()),
            };
            exprs.push((expr, column.clone()));
            columns.push((name, column));
        }
        let visible = exprs.len();

        let distinct = matches!(select.distinct, Some(ast::Distinct::Distinct));

        let mut sort_keys = Vec::new();
        for (target, options) in order_keys {
            let expr = match target {
                OrderTarget::Output(idx) => columns[idx].1.expr(),
                OrderTarget::Expr(expr) => match exprs.iter().position(|(e, _)| *e == expr) {
                    Some(idx) => exprs[idx].1.expr(),
                    None => {
                        if distinct {
                            return Err(ApiaryError::InvalidColumnReference(
                                "for SELECT DISTINCT, ORDER BY expressions must appear in the select list".to_string(),
                            ));
                        }
                        let column = self.new_column(&expr.to_string(), expr.data_type(), expr.nullable());
                        exprs.push((expr, column.clone()));
                        column.expr()
                    }
                },
            };
            sort_keys.push(sort_key(expr, &options)?);
        }

        // DISTINCT ON keys as projected columns (hidden ones for expressions not selected).
        let mut distinct_on = Vec::new();
        for (target, _) in distinct_on_keys.unwrap_or_default() {
            let column = match target {
                OrderTarget::Output(idx) => columns[idx].1.clone(),
                OrderTarget::Expr(expr) => match exprs.iter().position(|(e, _)| *e == expr) {
                    Some(idx) => exprs[idx].1.clone(),
                    None => {
                        let column = self.new_column(&expr.to_string(), expr.data_type(), expr.nullable());
                        exprs.push((expr, column.clone()));
                        column
                    }
                },
            };
            if !distinct_on.iter().any(|c: &ColumnRef| c.id == column.id) {
                distinct_on.push(column);
            }
        }

        plan = LogicalPlan::Project { exprs: exprs.clone(), input: Box::new(plan) };
        if !distinct_on.is_empty() {
            plan = self.distinct_on(plan, &distinct_on, &sort_keys)?;
        }
        if distinct {
            let (distinct_plan, distinct_columns) = self.distinct(plan, columns.clone());
            // Sort keys referred to the pre-distinct outputs; map them to the group keys.
            let map: HashMap<ColumnId, Expr> =
                columns.iter().zip(&distinct_columns).map(|((_, before), (_, after))| (before.id, after.expr())).collect();
            for key in sort_keys.iter_mut() {
                key.expr = std::mem::replace(&mut key.expr, Expr::boolean(true)).replace_columns(&|c| map.get(&c.id).cloned());
            }
            plan = distinct_plan;
            columns = distinct_columns;
        }
        if !sort_keys.is_empty() {
            plan = LogicalPlan::Sort { keys: sort_keys, input: Box::new(plan) };
        }
        plan = apply_limit(plan, limit, offset);
        if !distinct && plan.output().len() > visible {
            // Drop the hidden ORDER BY columns.
            let visible_exprs = columns.iter().map(|(_, c)| (c.expr(), c.clone())).collect();
            plan = LogicalPlan::Project { exprs: visible_exprs, input: Box::new(plan) };
        }
        Ok((plan, columns))
    }

    /// `SELECT DISTINCT ON (keys)` over the projected `plan`: the first row of each group of
    /// equal keys in the order of `sort_keys` (PostgreSQL), which must start with the keys.
    /// Computed as `row_number() OVER (PARTITION BY keys ORDER BY sort_keys) = 1`.
    fn distinct_on(&mut self, plan: LogicalPlan, keys: &[ColumnRef], sort_keys: &[SortKey]) -> Result<LogicalPlan> {
        // A key repeating an earlier one orders nothing (PostgreSQL drops it).
        let mut ordered: Vec<SortKey> = Vec::with_capacity(sort_keys.len());
        for key in sort_keys {
            if !ordered.iter().any(|earlier| earlier.expr == key.expr) {
                ordered.push(key.clone());
            }
        }
        // PostgreSQL: ORDER BY keys that are DISTINCT ON keys come first, and every
        // DISTINCT ON key not in ORDER BY must be addable at the end of that prefix.
        let is_key = |key: &SortKey| matches!(&key.expr, Expr::Column(c) if keys.iter().any(|k| k.id == c.id));
        let prefix = ordered.iter().take_while(|k| is_key(k)).count();
        let every_key_ordered = keys.iter().all(|k| ordered[..prefix].iter().any(|s| matches!(&s.expr, Expr::Column(c) if c.id == k.id)));
        if ordered[prefix..].iter().any(is_key) || (prefix < ordered.len() && !every_key_ordered) {
            return Err(ApiaryError::InvalidColumnReference(
                "SELECT DISTINCT ON expressions must match initial ORDER BY expressions".to_string(),
            ));
        }
        let sort_keys = &ordered;
        let row_number = self.new_column("row_number", DataType::BigInt, false);
        let call = crate::window::WindowCall::row_number(keys.iter().map(ColumnRef::expr).collect(), sort_keys[prefix..].to_vec());
        let windowed = LogicalPlan::Window { windows: vec![(call, row_number.clone())], input: Box::new(plan) };
        let first = Expr::compare(BinaryOp::Eq, row_number.expr(), Expr::literal(ScalarValue::Int64(1)));
        Ok(LogicalPlan::Filter { predicate: first, input: Box::new(windowed) })
    }

    /// How many window calls the current query has collected so far.
    fn window_count(&self) -> usize {
        match self.aggregate_stack.last() {
            Some(Some(collector)) => collector.windows.len(),
            _ => 0,
        }
    }

    /// A GROUP BY item may be an ordinal (`GROUP BY 1`) or a select-list alias.
    fn resolve_group_key(&self, group: &ast::Expr, select: &ast::Select, scope: &Scope) -> Result<ast::Expr> {
        let item_expr = |item: &ast::SelectItem| -> Option<ast::Expr> {
            match item {
                ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => Some(e.clone()),
                _ => None,
            }
        };
        if let Some(idx) = ordinal(group, select.projection.len(), "GROUP BY")? {
            return item_expr(&select.projection[idx]).ok_or_else(|| bind_err!("GROUP BY position {} is not an expression", idx + 1));
        }
        if let ast::Expr::Identifier(ident) = group {
            let name = normalize_ident(ident);
            if scope.lookup(None, &name)?.is_none() {
                for item in &select.projection {
                    if let ast::SelectItem::ExprWithAlias { expr, alias } = item {
                        if normalize_ident(alias) == name {
                            return Ok(expr.clone());
                        }
                    }
                }
            }
        }
        Ok(group.clone())
    }

    fn bind_select_items(&mut self, projection: &[ast::SelectItem], scope: &Scope) -> Result<Vec<(String, Expr)>> {
        let mut items = Vec::new();
        for item in projection {
            match item {
                ast::SelectItem::UnnamedExpr(expr) => {
                    let bound = self.bind_expr(expr, scope)?;
                    items.push((output_name(expr, &bound), bound));
                }
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    let bound = self.bind_expr(expr, scope)?;
                    items.push((normalize_ident(alias), bound));
                }
                ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => {
                    for (column, replacement) in star_columns(item, scope)? {
                        let expr = match replacement {
                            Some(replacement) => self.bind_expr(replacement, scope)?,
                            None => column.column.expr(),
                        };
                        items.push((column.name.clone(), expr));
                    }
                }
                ast::SelectItem::ExprWithAliases { .. } => return Err(not_impl_err!("multiple aliases for one expression")),
            }
        }
        Ok(items)
    }

    fn bind_order_keys(
        &mut self,
        order_by: OrderByClause<'_>,
        items: &[(String, Expr)],
        scope: &Scope,
        clause: &str,
    ) -> Result<Vec<(OrderTarget, ast::OrderByOptions)>> {
        let order_by = match order_by {
            OrderByClause::Exprs(exprs) => exprs,
            // DuckDB's ORDER BY ALL: every select-list column, left to right.
            OrderByClause::All(options) => return Ok((0..items.len()).map(|idx| (OrderTarget::Output(idx), options.clone())).collect()),
        };
        let mut keys = Vec::new();
        for item in order_by {
            if item.with_fill.is_some() {
                return Err(not_impl_err!("ORDER BY ... WITH FILL"));
            }
            if let Some(idx) = ordinal(&item.expr, items.len(), clause)? {
                keys.push((OrderTarget::Output(idx), item.options.clone()));
                continue;
            }
            if let ast::Expr::Identifier(ident) = &item.expr {
                let name = normalize_ident(ident);
                let matches: Vec<usize> = items.iter().enumerate().filter(|(_, (n, _))| *n == name).map(|(i, _)| i).collect();
                if matches.len() == 1 {
                    keys.push((OrderTarget::Output(matches[0]), item.options.clone()));
                    continue;
                }
                if matches.len() > 1 && scope.lookup(None, &name)?.is_none() {
                    return Err(bind_err!("{clause} \"{name}\" is ambiguous"));
                }
            }
            let bound = self.bind_expr(&item.expr, scope)?;
            keys.push((OrderTarget::Expr(bound), item.options.clone()));
        }
        Ok(keys)
    }

    // ---------------------------------------------------------------- FROM and joins

    /// Binds a FROM list. A `LATERAL` subquery sees the columns of the items to its left
    /// (as outer references: the plan is a join whose right side reads columns of its left
    /// side, which the optimizer's `unnest_subqueries` decorrelates).
    pub(crate) fn bind_from(&mut self, from: &[ast::TableWithJoins]) -> Result<(LogicalPlan, Scope)> {
        let mut result: Option<(LogicalPlan, Scope)> = None;
        for item in from {
            let left = result.as_ref().map(|(_, scope)| scope.clone()).unwrap_or_default();
            let (plan, scope) = self.bind_table_with_joins(item, &left)?;
            result = Some(match result {
                None => (plan, scope),
                Some((left_plan, left_scope)) => {
                    check_duplicate_qualifiers(&left_scope, &scope)?;
                    let joined = LogicalPlan::Join {
                        kind: JoinKind::Inner,
                        left: Box::new(left_plan),
                        right: Box::new(plan),
                        condition: None,
                        mark: None,
                    };
                    (joined, left_scope.merge(scope))
                }
            });
        }
        Ok(result.unwrap_or_else(|| (LogicalPlan::Values { rows: vec![vec![]], output: vec![] }, Scope::default())))
    }

    /// `lateral`: the columns of the FROM items to the left of `item` (for LATERAL).
    fn bind_table_with_joins(&mut self, item: &ast::TableWithJoins, lateral: &Scope) -> Result<(LogicalPlan, Scope)> {
        let (mut plan, mut scope) = self.bind_table_factor(&item.relation, lateral)?;
        for join in &item.joins {
            let left_of_join = lateral.clone().merge(scope.clone());
            let (right_plan, right_scope) = self.bind_table_factor(&join.relation, &left_of_join)?;
            check_duplicate_qualifiers(&scope, &right_scope)?;
            use ast::JoinOperator as J;
            let (kind, constraint) = match &join.join_operator {
                J::Join(c) | J::Inner(c) => (JoinKind::Inner, c),
                J::Left(c) | J::LeftOuter(c) => (JoinKind::Left, c),
                J::Right(c) | J::RightOuter(c) => (JoinKind::Right, c),
                J::FullOuter(c) => (JoinKind::Full, c),
                J::CrossJoin(c) => (JoinKind::Inner, c),
                J::Semi(c) | J::LeftSemi(c) => (JoinKind::Semi, c),
                J::Anti(c) | J::LeftAnti(c) => (JoinKind::Anti { null_aware: false }, c),
                J::CrossApply | J::OuterApply => return Err(not_impl_err!("CROSS/OUTER APPLY (use LATERAL)")),
                other => return Err(not_impl_err!("join type {other:?}")),
            };
            if !matches!(kind, JoinKind::Inner | JoinKind::Left) {
                // PostgreSQL: the NULL-supplying side of a RIGHT/FULL join cannot be
                // referenced laterally (nor can the right side of SEMI/ANTI joins here).
                let left_ids: std::collections::BTreeSet<ColumnId> = scope.columns.iter().map(|c| c.column.id).collect();
                if let Some(id) = right_plan.free_columns().into_iter().find(|id| left_ids.contains(id)) {
                    let column = scope.columns.iter().find(|c| c.column.id == id);
                    let name = column.map(|c| match &c.qualifier {
                        Some(qualifier) => format!("{qualifier}.{}", c.name),
                        None => c.name.clone(),
                    });
                    return Err(ApiaryError::InvalidColumnReference(format!(
                        "invalid reference to \"{}\" on the left of a {} JOIN: the combining JOIN type must be INNER or LEFT for a LATERAL reference",
                        name.unwrap_or_default(),
                        kind.name()
                    )));
                }
            }
            let using: Option<Vec<String>> = match constraint {
                ast::JoinConstraint::Using(names) => Some(names.iter().map(object_name_to_table).collect::<Result<Vec<_>>>()?),
                ast::JoinConstraint::Natural => {
                    let left_names: Vec<&str> = scope.columns.iter().filter(|c| !c.hidden).map(|c| c.name.as_str()).collect();
                    Some(
                        right_scope
                            .columns
                            .iter()
                            .filter(|c| !c.hidden && left_names.contains(&c.name.as_str()))
                            .map(|c| c.name.clone())
                            .collect(),
                    )
                }
                _ => None,
            };
            let merged = scope.clone().merge(right_scope.clone());
            let (condition, new_scope, coalesced) = match (constraint, using) {
                (_, Some(names)) => self.bind_using(&scope, &right_scope, &names, kind)?,
                (ast::JoinConstraint::On(expr), None) => {
                    let bound = self.bind_expr(expr, &merged)?;
                    (Some(self.boolean_condition(bound, "JOIN ... ON")?), merged, Vec::new())
                }
                (_, None) => (None, merged, Vec::new()),
            };
            let mut new_scope = match kind {
                JoinKind::Semi | JoinKind::Anti { .. } => scope.clone(),
                _ => new_scope,
            };
            // Above an outer join, the NULL-supplying side's columns may be NULL whatever
            // their table says (GROUP BY, DISTINCT and NOT IN specialise on NOT NULL).
            let left_ids: std::collections::BTreeSet<ColumnId> = scope.columns.iter().map(|c| c.column.id).collect();
            let right_ids: std::collections::BTreeSet<ColumnId> = right_scope.columns.iter().map(|c| c.column.id).collect();
            let supplies_nulls = |id: &ColumnId| match kind {
                JoinKind::Left => right_ids.contains(id),
                JoinKind::Right => left_ids.contains(id),
                JoinKind::Full => left_ids.contains(id) || right_ids.contains(id),
                _ => false,
            };
            for column in new_scope.columns.iter_mut() {
                if supplies_nulls(&column.column.id) {
                    column.column.nullable = true;
                }
            }
            plan = LogicalPlan::Join { kind, left: Box::new(plan), right: Box::new(right_plan), condition, mark: None };
            if !coalesced.is_empty() {
                // FULL JOIN USING: the shared columns are COALESCE(left, right).
                let mut exprs: Vec<(Expr, ColumnRef)> = plan.output().into_iter().map(|c| (c.expr(), c)).collect();
                exprs.extend(coalesced.iter().map(|(e, c)| (e.clone(), c.clone())));
                plan = LogicalPlan::Project { exprs, input: Box::new(plan) };
            }
            scope = new_scope;
        }
        Ok((plan, scope))
    }

    /// `USING (a, b)`: equality conditions, and a scope where each shared column appears
    /// once for unqualified references.
    fn bind_using(
        &mut self,
        left: &Scope,
        right: &Scope,
        names: &[String],
        kind: JoinKind,
    ) -> Result<(Option<Expr>, Scope, Vec<(Expr, ColumnRef)>)> {
        let mut conditions = Vec::new();
        let mut scope = left.clone().merge(right.clone());
        let mut coalesced = Vec::new();
        for (position, name) in names.iter().enumerate() {
            let l = left
                .lookup(None, name)?
                .ok_or_else(|| bind_err!("column \"{name}\" specified in USING clause does not exist in left table"))?;
            let r = right
                .lookup(None, name)?
                .ok_or_else(|| bind_err!("column \"{name}\" specified in USING clause does not exist in right table"))?;
            let (l, r) = (l.column.clone(), r.column.clone());
            let condition = self.bind_comparison(BinaryOp::Eq, l.expr(), r.expr())?;
            conditions.push(condition);
            let (hide, keep) = match kind {
                JoinKind::Right => (l.id, r.id),
                _ => (r.id, l.id),
            };
            // Both sides' columns stay reachable qualified (and in `t.*`); unqualified,
            // the shared column is one new entry, and `*` shows the USING columns first,
            // in their order, as PostgreSQL does.
            for column in scope.columns.iter_mut() {
                if column.column.id == hide || column.column.id == keep {
                    column.hidden = true;
                }
            }
            let shared = if kind == JoinKind::Full {
                let t = common_type(&l.data_type, &r.data_type).unwrap_or(l.data_type);
                let args = vec![self.coerce(l.expr(), &t)?, self.coerce(r.expr(), &t)?];
                let output = self.new_column(name, t, l.nullable && r.nullable);
                coalesced.push((Expr::Function { func: ScalarFunction::Coalesce, args, data_type: t }, output.clone()));
                output
            } else if keep == l.id {
                l.clone()
            } else {
                r.clone()
            };
            scope.columns.insert(position, ScopeColumn { qualifier: None, name: name.clone(), column: shared, hidden: false });
        }
        Ok((Expr::conjunction(conditions), scope, coalesced))
    }

    /// `lateral`: the columns a LATERAL subquery here may refer to.
    fn bind_table_factor(&mut self, factor: &ast::TableFactor, lateral: &Scope) -> Result<(LogicalPlan, Scope)> {
        match factor {
            ast::TableFactor::Table { name, alias, args, .. } => {
                if args.is_none() {
                    if let Some((table, label)) = self.system_table(name)? {
                        return self.scan_table(table, &label, alias.as_ref());
                    }
                }
                let table_name = object_name_to_table(name)?;
                if args.is_none() {
                    if let Some(rows) = self.take_dml_target(&table_name) {
                        self.note_reference(&table_name);
                        let (plan, mut scope) = self.scan_table(rows, &table_name, alias.as_ref())?;
                        // The row ids are read qualified only, and not by `*`.
                        if let Some(row_id) = scope.columns.iter_mut().find(|c| c.name == apiary_storage::table::ROW_ID_COLUMN) {
                            row_id.hidden = true;
                        }
                        return Ok((plan, scope));
                    }
                    if let Some(source) = self.take_dml_source(&table_name) {
                        let (plan, mut scope) = self.scan_table(source.rows, &table_name, alias.as_ref())?;
                        for column in scope.columns.iter_mut() {
                            column.hidden |= source.qualified_only || column.name == apiary_storage::table::ROW_ID_COLUMN;
                        }
                        return Ok((plan, scope));
                    }
                }
                if let Some(args) = args {
                    let table = self.call_table_function(&table_name, &args.args, lateral)?;
                    return self.scan_table(table, &table_name, alias.as_ref());
                }
                if let Some(cte) = self.lookup_cte(&table_name) {
                    return self.bind_cte_reference(&table_name, cte, alias.as_ref());
                }
                if let Some(view) = self.catalog.get_view(&table_name) {
                    return self.bind_view_reference(view, alias.as_ref());
                }
                let table = self.catalog_table(&table_name)?;
                self.note_reference(&table_name);
                self.scan_table(table, &table_name, alias.as_ref())
            }
            ast::TableFactor::Derived { lateral: is_lateral, subquery, alias, .. } => {
                // A derived table cannot see sibling FROM items (unless LATERAL, then those
                // to its left are its nearest outer scope), but can see outer queries.
                if *is_lateral {
                    self.outer_scopes.push(lateral.clone());
                    // Aggregates over the left items' columns are not allowed (PostgreSQL:
                    // not in FROM of their own query level).
                    self.outer_aggregates.push(None);
                } else {
                    // Only for the error when the subquery names them.
                    self.unreachable_scopes.push(lateral.clone());
                }
                self.aggregate_stack.push(None);
                let bound = self.bind_query_body(subquery);
                self.aggregate_stack.pop();
                if *is_lateral {
                    self.outer_aggregates.pop();
                    self.outer_scopes.pop();
                } else {
                    self.unreachable_scopes.pop();
                }
                let (plan, columns) = bound?;
                let qualifier = alias.as_ref().map(|a| normalize_ident(&a.name));
                let columns = rename_columns(columns, alias.as_ref())?;
                Ok((plan, Scope::from_columns(qualifier.as_deref(), &columns)))
            }
            ast::TableFactor::NestedJoin { table_with_joins, alias } => {
                let (plan, mut scope) = self.bind_table_with_joins(table_with_joins, lateral)?;
                if let Some(alias) = alias {
                    let qualifier = normalize_ident(&alias.name);
                    for column in scope.columns.iter_mut() {
                        column.qualifier = Some(qualifier.clone());
                    }
                }
                Ok((plan, scope))
            }
            ast::TableFactor::Function { name, args, alias, .. } => {
                let table_name = object_name_to_table(name)?;
                let table = self.call_table_function(&table_name, args, lateral)?;
                self.scan_table(table, &table_name, alias.as_ref())
            }
            other => Err(not_impl_err!("FROM item {other}")),
        }
    }

    pub(crate) fn scan_table(
        &mut self,
        table: Arc<apiary_storage::Table>,
        table_name: &str,
        alias: Option<&ast::TableAlias>,
    ) -> Result<(LogicalPlan, Scope)> {
        let mut columns = Vec::new();
        let mut named = Vec::new();
        for (idx, field) in table.schema.fields.iter().enumerate() {
            let column = self.new_column(&field.name, field.data_type, field.nullable);
            named.push((field.name.clone(), column.clone()));
            columns.push((idx, column));
        }
        let named = rename_columns(named, alias)?;
        let qualifier = alias.map(|a| normalize_ident(&a.name)).unwrap_or_else(|| table_name.to_string());
        let label = if qualifier == table_name { table_name.to_string() } else { format!("{table_name} AS {qualifier}") };
        let plan = LogicalPlan::Scan(Scan { table, label, columns, filters: Vec::new() });
        Ok((plan, Scope::from_columns(Some(&qualifier), &named)))
    }

    /// A constant argument of table function `name`. `lateral`: the columns of the FROM
    /// items to its left, which PostgreSQL lets a function's arguments read (not yet here).
    fn table_function_constant(&mut self, name: &str, value: &ast::Expr, lateral: &Scope) -> Result<ScalarValue> {
        let bound = match self.bind_expr(value, &Scope::default()) {
            Ok(bound) => bound,
            Err(_) if !lateral.columns.is_empty() && self.bind_expr(value, lateral).is_ok() => {
                return Err(not_impl_err!(
                    "arguments of table function {name} that read columns of other FROM items (a LATERAL function call)"
                ));
            }
            Err(error) => return Err(error),
        };
        match bound {
            Expr::Literal(value, _) => Ok(value),
            _ => Err(bind_err!("arguments of table function {name} must be constants")),
        }
    }

    fn call_table_function(&mut self, name: &str, args: &[ast::FunctionArg], lateral: &Scope) -> Result<Arc<apiary_storage::Table>> {
        let mut positional = Vec::new();
        let mut named = Vec::new();
        for arg in args {
            let (arg_name, value) = match arg {
                // DuckDB's `read_csv('f', header = true)`: an equality with a bare name on
                // the left is a named argument (table function arguments are constants,
                // so it cannot mean a comparison).
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::BinaryOp { left, op: ast::BinaryOperator::Eq, right }))
                    if matches!(left.as_ref(), ast::Expr::Identifier(_)) =>
                {
                    let ast::Expr::Identifier(ident) = left.as_ref() else { unreachable!("matched above") };
                    (Some(normalize_ident(ident)), right.as_ref())
                }
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => (None, e),
                ast::FunctionArg::Named { name, arg: ast::FunctionArgExpr::Expr(e), .. } => (Some(normalize_ident(name)), e),
                ast::FunctionArg::ExprNamed { name: ast::Expr::Identifier(name), arg: ast::FunctionArgExpr::Expr(e), .. } => {
                    (Some(normalize_ident(name)), e)
                }
                other => return Err(bind_err!("unsupported argument {other} to table function {name}")),
            };
            let value = match value {
                ast::Expr::Array(ast::Array { elem, .. }) => {
                    TableArg::List(elem.iter().map(|e| self.table_function_constant(name, e, lateral)).collect::<Result<_>>()?)
                }
                ast::Expr::Dictionary(fields) => TableArg::Struct(
                    fields
                        .iter()
                        .map(|field| Ok((field.key.value.clone(), self.table_function_constant(name, &field.value, lateral)?)))
                        .collect::<Result<_>>()?,
                ),
                e => TableArg::Value(self.table_function_constant(name, e, lateral)?),
            };
            match arg_name {
                Some(n) => named.push((n, value)),
                None => positional.push(value),
            }
        }
        match self.table_functions.call(name, &positional, &named)? {
            Some(table) => Ok(table),
            None => Err(ApiaryError::Catalog(format!("table function \"{name}\" does not exist"))),
        }
    }
}

/// A query's ORDER BY: a list of keys, or DuckDB's `ORDER BY ALL [ASC|DESC] [NULLS ...]`
/// (every output column, left to right).
#[derive(Clone, Copy)]
pub(crate) enum OrderByClause<'a> {
    Exprs(&'a [ast::OrderByExpr]),
    All(&'a ast::OrderByOptions),
}

/// What an ORDER BY key refers to before the projection is built.
enum OrderTarget {
    /// A select-list item (by alias or ordinal).
    Output(usize),
    Expr(Expr),
}

pub(crate) fn sort_key(expr: Expr, options: &ast::OrderByOptions) -> Result<SortKey> {
    let ascending = match &options.sort {
        None | Some(ast::OrderBySort::Asc) => true,
        Some(ast::OrderBySort::Desc) => false,
        Some(ast::OrderBySort::Using(_)) => return Err(not_impl_err!("ORDER BY ... USING")),
    };
    // PostgreSQL: NULLs sort as larger than every value.
    let nulls_first = options.nulls_first.unwrap_or(!ascending);
    Ok(SortKey { expr, ascending, nulls_first })
}

/// `Some(index)` when `expr` is an integer literal used as a 1-based position.
fn ordinal(expr: &ast::Expr, count: usize, clause: &str) -> Result<Option<usize>> {
    if let ast::Expr::Value(ast::ValueWithSpan { value: ast::Value::Number(text, _), .. }) = expr {
        let position: usize = text.parse().map_err(|_| bind_err!("position {text} is not a valid integer"))?;
        if position == 0 || position > count {
            return Err(ApiaryError::InvalidColumnReference(format!("{clause} position {position} is not in select list")));
        }
        return Ok(Some(position - 1));
    }
    Ok(None)
}

fn apply_limit(plan: LogicalPlan, limit: Option<u64>, offset: u64) -> LogicalPlan {
    if limit.is_none() && offset == 0 {
        plan
    } else {
        LogicalPlan::Limit { limit, offset, input: Box::new(plan) }
    }
}

/// Replaces grouped expressions by the aggregate's key columns and rejects leftover
/// references to ungrouped input columns.
fn resolve_grouped(expr: Expr, groups: &[(Expr, ColumnRef)], input_columns: &[ColumnId], clause: &str) -> Result<Expr> {
    let mut error: Option<ApiaryError> = None;
    let rewritten = expr.transform_down(&mut |e| {
        if let Some((_, column)) = groups.iter().find(|(g, _)| *g == e) {
            return Ok(column.expr());
        }
        if let Expr::Column(c) = &e {
            if input_columns.contains(&c.id) && error.is_none() {
                error = Some(bind_err!(
                    "column \"{}\" must appear in the GROUP BY clause or be used in an aggregate function ({clause})",
                    c.name
                ));
            }
        }
        if let Expr::Subquery(subquery) = &e {
            // A subquery may read the group keys of the grouped query, nothing else of it.
            let grouped = |id: &ColumnId| groups.iter().any(|(g, _)| matches!(g, Expr::Column(k) if k.id == *id));
            if let Some(id) = subquery.plan.free_columns().iter().find(|id| input_columns.contains(id) && !grouped(id)) {
                if error.is_none() {
                    let name = column_name_in(&subquery.plan, *id).unwrap_or_else(|| id.to_string());
                    error = Some(bind_err!(
                        "subquery uses ungrouped column \"{name}\" from outer query ({clause}); group by it or aggregate it"
                    ));
                }
            }
        }
        Err(e)
    });
    match error {
        Some(e) => Err(e),
        None => Ok(rewritten),
    }
}

/// The name of column `id` as some expression in `plan` refers to it.
fn column_name_in(plan: &LogicalPlan, id: ColumnId) -> Option<String> {
    let mut found = None;
    for expr in plan.expressions() {
        expr.visit(&mut |e| {
            if let Expr::Column(c) = e {
                if c.id == id && found.is_none() {
                    found = Some(c.name.to_string());
                }
            }
        });
    }
    found.or_else(|| plan.children().into_iter().find_map(|child| column_name_in(child, id)))
}

/// The output name of an unaliased select item: the column name for a column, else the
/// expression's SQL text.
fn output_name(ast_expr: &ast::Expr, bound: &Expr) -> String {
    match ast_expr {
        ast::Expr::Identifier(ident) => normalize_ident(ident),
        ast::Expr::CompoundIdentifier(parts) => parts.last().map(normalize_ident).unwrap_or_default(),
        _ => match bound {
            Expr::Column(c) if matches!(ast_expr, ast::Expr::Nested(_)) => c.name.to_string(),
            _ => ast_expr.to_string(),
        },
    }
}

/// Applies `AS alias(c1, c2, ...)` column renames.
pub(crate) fn rename_columns(mut columns: Vec<(String, ColumnRef)>, alias: Option<&ast::TableAlias>) -> Result<Vec<(String, ColumnRef)>> {
    if let Some(alias) = alias {
        if alias.columns.len() > columns.len() {
            return Err(bind_err!(
                "table \"{}\" has {} columns available but {} columns specified",
                alias.name,
                columns.len(),
                alias.columns.len()
            ));
        }
        for (column, new_name) in columns.iter_mut().zip(&alias.columns) {
            column.0 = normalize_ident(&new_name.name);
        }
    }
    Ok(columns)
}

fn check_duplicate_qualifiers(left: &Scope, right: &Scope) -> Result<()> {
    for column in &right.columns {
        if let Some(q) = &column.qualifier {
            if left.has_qualifier(q) {
                return Err(bind_err!("table name \"{q}\" specified more than once (use an alias)"));
            }
        }
    }
    Ok(())
}

fn reject_unsupported_select_clauses(select: &ast::Select) -> Result<()> {
    if select.top.is_some() {
        return Err(not_impl_err!("TOP"));
    }
    if select.into.is_some() {
        return Err(not_impl_err!("SELECT INTO (use CREATE TABLE ... AS)"));
    }
    if !select.lateral_views.is_empty() || select.prewhere.is_some() || !select.sort_by.is_empty() {
        return Err(not_impl_err!("non-standard SELECT clauses"));
    }
    if !select.cluster_by.is_empty() || !select.distribute_by.is_empty() || !select.connect_by.is_empty() {
        return Err(not_impl_err!("CLUSTER BY / DISTRIBUTE BY / CONNECT BY"));
    }
    Ok(())
}

/// The columns a select item `*` or `t.*` stands for, each with its replacement: DuckDB's
/// `EXCLUDE (a, t.b)` leaves columns out (an unqualified name every column of that name, a
/// qualified one only that table's), `REPLACE (expr AS a)` computes column `a` by `expr`
/// in its place and under its name (`a` must name one column of the star; with two,
/// `t.* REPLACE` says which).
fn star_columns<'s>(item: &'s ast::SelectItem, scope: &'s Scope) -> Result<Vec<(&'s ScopeColumn, Option<&'s ast::Expr>)>> {
    let (columns, options): (Vec<&ScopeColumn>, _) = match item {
        ast::SelectItem::Wildcard(options) => {
            let visible: Vec<&ScopeColumn> = scope.columns.iter().filter(|c| !c.hidden).collect();
            if visible.is_empty() {
                return Err(bind_err!("SELECT * with no tables specified is not valid"));
            }
            (visible, options)
        }
        ast::SelectItem::QualifiedWildcard(kind, options) => {
            let qualifier = match kind {
                ast::SelectItemQualifiedWildcardKind::ObjectName(name) => object_name_to_table(name)?,
                _ => return Err(not_impl_err!("wildcard on an expression")),
            };
            let matching: Vec<&ScopeColumn> = scope
                .columns
                .iter()
                .filter(|c| c.qualifier.as_deref() == Some(qualifier.as_str()))
                .filter(|c| !(c.hidden && c.name == apiary_storage::table::ROW_ID_COLUMN))
                .collect();
            if matching.is_empty() {
                return Err(bind_err!("missing FROM-clause entry for table \"{qualifier}\""));
            }
            (matching, options)
        }
        _ => return Err(apiary_common::internal_err!("star_columns of a select item that is not a wildcard")),
    };
    if options.opt_except.is_some() || options.opt_rename.is_some() || options.opt_ilike.is_some() || options.opt_alias.is_some() {
        return Err(not_impl_err!("wildcard options other than EXCLUDE and REPLACE"));
    }
    let excluded_names: &[ast::ObjectName] = match &options.opt_exclude {
        None => &[],
        Some(ast::ExcludeSelectItem::Single(name)) => std::slice::from_ref(name),
        Some(ast::ExcludeSelectItem::Multiple(names)) => names,
    };
    let mut excluded: Vec<(Option<String>, String)> = Vec::new();
    for name in excluded_names {
        let parts: Vec<String> = name.0.iter().filter_map(|p| p.as_ident()).map(normalize_ident).collect();
        let display = parts.join(".");
        let (qualifier, column) = match parts.as_slice() {
            [column] => (None, column.clone()),
            [.., qualifier, column] => (Some(qualifier.clone()), column.clone()),
            [] => return Err(bind_err!("invalid column name {name} in EXCLUDE list")),
        };
        if excluded.contains(&(qualifier.clone(), column.clone())) {
            return Err(bind_err!("duplicate entry \"{display}\" in EXCLUDE list"));
        }
        let matches = |c: &ScopeColumn| c.name == column && (qualifier.is_none() || c.qualifier == qualifier);
        // `u.a` of `t JOIN u USING (a)` exists, though `*` shows the column once (as
        // `t.a`): excluding it leaves `*` as it is (DuckDB).
        let hidden_copy = qualifier.is_some() && scope.columns.iter().any(|c| c.hidden && matches(c));
        if !columns.iter().any(|c| matches(c)) && !hidden_copy {
            return Err(bind_err!("column \"{display}\" in EXCLUDE list not found in FROM clause"));
        }
        excluded.push((qualifier, column));
    }
    // A qualified name excludes that column wherever `*` shows it: `t.a` of `t JOIN u
    // USING (a)` is the shared column (which `*` lists unqualified).
    let excluded_ids: Vec<ColumnId> = excluded
        .iter()
        .filter(|(qualifier, _)| qualifier.is_some())
        .flat_map(|(qualifier, name)| scope.columns.iter().filter(move |c| c.name == *name && c.qualifier == *qualifier))
        .map(|c| c.column.id)
        .collect();
    let is_excluded = |c: &ScopeColumn| {
        excluded.iter().any(|(qualifier, name)| qualifier.is_none() && c.name == *name) || excluded_ids.contains(&c.column.id)
    };
    let mut replacements: Vec<(String, &ast::Expr)> = Vec::new();
    for element in options.opt_replace.iter().flat_map(|r| &r.items) {
        let name = normalize_ident(&element.column_name);
        if replacements.iter().any(|(n, _)| *n == name) {
            return Err(bind_err!("duplicate entry \"{name}\" in REPLACE list"));
        }
        if excluded.iter().any(|(qualifier, n)| qualifier.is_none() && *n == name) {
            return Err(bind_err!("column \"{name}\" cannot occur in both EXCLUDE and REPLACE list"));
        }
        match columns.iter().filter(|c| c.name == name && !is_excluded(c)).count() {
            0 => return Err(bind_err!("column \"{name}\" in REPLACE list not found in FROM clause")),
            1 => {}
            _ => return Err(bind_err!("column reference \"{name}\" in REPLACE list is ambiguous (use t.* REPLACE (...))")),
        }
        replacements.push((name, &element.expr));
    }
    let kept: Vec<_> = columns
        .into_iter()
        .filter(|c| !is_excluded(c))
        .map(|c| (c, replacements.iter().find(|(name, _)| *name == c.name).map(|(_, e)| *e)))
        .collect();
    if kept.is_empty() {
        return Err(bind_err!("SELECT list is empty after EXCLUDE: it leaves out every column"));
    }
    Ok(kept)
}

/// DuckDB's `GROUP BY ALL`: the keys are the select-list expressions that contain no
/// aggregate of this query (aggregates inside subqueries belong to those); `*` stands for
/// its columns (after EXCLUDE; a REPLACE expression in place of its column).
fn group_by_all_keys(projection: &[ast::SelectItem], scope: &Scope) -> Result<Vec<ast::Expr>> {
    let mut keys = Vec::new();
    for item in projection {
        let expr = match item {
            ast::SelectItem::UnnamedExpr(expr)
            | ast::SelectItem::ExprWithAlias { expr, .. }
            | ast::SelectItem::ExprWithAliases { expr, .. } => expr,
            ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => {
                for (column, replacement) in star_columns(item, scope)? {
                    match replacement {
                        Some(replacement) if has_own_aggregate(replacement) => {}
                        Some(replacement) => keys.push(replacement.clone()),
                        None => keys.push(column_reference(column)),
                    }
                }
                continue;
            }
        };
        if !has_own_aggregate(expr) {
            keys.push(expr.clone());
        }
    }
    Ok(keys)
}

/// An expression naming `column` of a scope: quoted, qualified when it has a qualifier.
fn column_reference(column: &ScopeColumn) -> ast::Expr {
    let name = ast::Ident::with_quote('"', column.name.as_str());
    match &column.qualifier {
        Some(qualifier) => ast::Expr::CompoundIdentifier(vec![ast::Ident::with_quote('"', qualifier.as_str()), name]),
        None => ast::Expr::Identifier(name),
    }
}

/// Whether `expr` calls an aggregate function outside any subquery.
fn has_own_aggregate(expr: &ast::Expr) -> bool {
    use sqlparser::ast::{Visit, Visitor};
    use std::ops::ControlFlow;

    struct FindAggregate {
        subquery_depth: usize,
    }
    impl Visitor for FindAggregate {
        type Break = ();
        fn pre_visit_query(&mut self, _query: &ast::Query) -> ControlFlow<()> {
            self.subquery_depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _query: &ast::Query) -> ControlFlow<()> {
            self.subquery_depth -= 1;
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, expr: &ast::Expr) -> ControlFlow<()> {
            if let ast::Expr::Function(function) = expr {
                let name = function.name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase()).unwrap_or_default();
                if self.subquery_depth == 0 && super::function::is_aggregate_function(&name) {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    expr.visit(&mut FindAggregate { subquery_depth: 0 }).is_break()
}
