//! `WITH`: common table expressions, inlined or materialized.
//!
//! A CTE referenced once is inlined: the reference binds the definition afresh, so the
//! optimizer treats it like a derived table (predicates pushed into it, columns pruned).
//! One referenced more than once that groups, aggregates, removes duplicates or computes
//! window functions (or one declared `AS MATERIALIZED`) is bound once and computed once:
//! the query becomes a [`LogicalPlan::Cte`] whose body reads the rows with a
//! [`LogicalPlan::CteScan`] per reference (DuckDB's rule). Other definitions (scans,
//! filters, joins) stay inlined even when referenced more often: each reference then gets
//! its own predicates pushed into it and filters passed sideways from its joins, which
//! usually costs less than computing all rows once. `AS NOT MATERIALIZED` always inlines.
//!
//! `WITH RECURSIVE`: a definition that names itself must be `non-recursive term UNION
//! [ALL] recursive term`, the recursive term naming it exactly once (PostgreSQL's rules,
//! checked on the syntax tree: SQLSTATE 42P19). It is always materialized: the `Cte`
//! node's definition is a [`LogicalPlan::RecursiveCte`], and the self-reference binds to
//! a [`LogicalPlan::WorkTableScan`]. Column types are the non-recursive term's; the
//! recursive term's columns are cast to them, and one whose type would widen the column
//! is an error (42804), as in PostgreSQL.

use std::collections::HashMap;
use std::sync::Arc;

use apiary_common::{bind_err, not_impl_err, type_err, ApiaryError, Result};
use sqlparser::ast;
use sqlparser::ast::{Visit, Visitor};

use super::query::{rename_columns, OutputColumns};
use super::{normalize_ident, Binder, CteDefinition, Scope};
use crate::coercion::common_type;
use crate::plan::{CteScan, LogicalPlan, WorkTableScan};

/// Guards against runaway CTE expansion (a CTE referring to itself without RECURSIVE).
const MAX_CTE_DEPTH: usize = 64;

/// What the self-reference of a recursive CTE reads while its recursive term is bound.
#[derive(Clone)]
pub(crate) struct WorkTable {
    id: usize,
    /// The CTE's columns (names, types).
    columns: OutputColumns,
    anchor: Arc<LogicalPlan>,
}

/// A CTE bound once, whose rows a `Cte` node computes.
#[derive(Clone)]
pub(crate) struct MaterializedCte {
    id: usize,
    /// The definition's output columns, under the CTE's column names.
    columns: OutputColumns,
    /// The bound definition (for the references' cardinality estimates).
    plan: Arc<LogicalPlan>,
}

impl Binder<'_> {
    /// `WITH ... query`: the definitions are visible in `query` (and to each other);
    /// those worth computing once are bound here and wrap the plan in `Cte` nodes.
    pub(crate) fn bind_with(&mut self, with: &ast::With, query: &ast::Query) -> Result<(LogicalPlan, OutputColumns)> {
        if self.ctes.len() >= MAX_CTE_DEPTH {
            return Err(bind_err!("common table expressions are nested too deeply (or refer to themselves)"));
        }
        self.ctes.push(HashMap::new());
        let result = self.bind_with_frame(with, query);
        self.ctes.pop();
        result
    }

    fn bind_with_frame(&mut self, with: &ast::With, query: &ast::Query) -> Result<(LogicalPlan, OutputColumns)> {
        for cte in &with.cte_tables {
            let name = normalize_ident(&cte.alias.name);
            let frame = self.ctes.last_mut().expect("frame pushed by bind_with");
            if frame.contains_key(&name) {
                return Err(bind_err!("WITH query name \"{name}\" specified more than once"));
            }
            let column_aliases = cte.alias.columns.iter().map(|c| normalize_ident(&c.name)).collect();
            frame.insert(name, CteDefinition { query: (*cte.query).clone(), column_aliases, materialized: None, work_table: None });
        }
        if with.recursive {
            check_mutual_recursion(with)?;
        }
        // Bind the definitions to compute once, in order (a later one may read an earlier).
        let mut materialized: Vec<(usize, String, LogicalPlan)> = Vec::new();
        for cte in &with.cte_tables {
            let name = normalize_ident(&cte.alias.name);
            let references = count_references(query, &name);
            let recursive = with.recursive && count_references(cte.query.as_ref(), &name) > 0;
            let materialize = match cte.materialized {
                // A recursive CTE is computed once, where it is defined.
                _ if recursive => references > count_references(cte.query.as_ref(), &name),
                Some(ast::CteAsMaterialized::NotMaterialized) => false,
                Some(ast::CteAsMaterialized::Materialized) => references > 0,
                None => references > 1 && aggregates(&cte.query),
            };
            if !materialize {
                continue;
            }
            let definition = self.lookup_cte(&name).expect("inserted above");
            let id = self.next_cte_id;
            self.next_cte_id += 1;
            let (plan, columns) =
                if recursive { self.bind_recursive_cte(&name, &definition, id)? } else { self.bind_cte_definition(&name, &definition)? };
            let entry = MaterializedCte { id, columns, plan: Arc::new(plan.clone()) };
            let frame = self.ctes.last_mut().expect("frame pushed by bind_with");
            frame.get_mut(&name).expect("inserted above").materialized = Some(entry);
            materialized.push((id, name, plan));
        }
        let (mut plan, columns) = self.bind_query_without_with(query)?;
        // The first CTE outermost: a later definition may read an earlier one.
        for (id, name, definition) in materialized.into_iter().rev() {
            plan = LogicalPlan::Cte { id, name, definition: Box::new(definition), body: Box::new(plan) };
        }
        Ok((plan, columns))
    }

    /// A reference to CTE `name` in FROM.
    pub(crate) fn bind_cte_reference(
        &mut self,
        name: &str,
        cte: CteDefinition,
        alias: Option<&ast::TableAlias>,
    ) -> Result<(LogicalPlan, Scope)> {
        let qualifier = alias.map(|a| normalize_ident(&a.name)).unwrap_or_else(|| name.to_string());
        if let Some(work_table) = &cte.work_table {
            let mut columns = Vec::with_capacity(work_table.columns.len());
            let mut output = Vec::with_capacity(work_table.columns.len());
            for (column_name, source) in &work_table.columns {
                let column = self.new_column(column_name, source.data_type, true);
                columns.push(column.clone());
                output.push((column_name.clone(), column));
            }
            let output = rename_columns(output, alias)?;
            let scan = WorkTableScan { id: work_table.id, label: qualifier.clone(), columns, anchor: Arc::clone(&work_table.anchor) };
            return Ok((LogicalPlan::WorkTableScan(scan), Scope::from_columns(Some(&qualifier), &output)));
        }
        if let Some(materialized) = &cte.materialized {
            // Each reference reads the rows under column ids of its own.
            let mut columns = Vec::with_capacity(materialized.columns.len());
            let mut output = Vec::with_capacity(materialized.columns.len());
            for (column_name, source) in &materialized.columns {
                let column = self.new_column(column_name, source.data_type, source.nullable);
                columns.push((source.id, column.clone()));
                output.push((column_name.clone(), column));
            }
            let output = rename_columns(output, alias)?;
            let scan = CteScan { id: materialized.id, label: qualifier.clone(), columns, definition: Arc::clone(&materialized.plan) };
            return Ok((LogicalPlan::CteScan(scan), Scope::from_columns(Some(&qualifier), &output)));
        }
        let (plan, columns) = self.bind_cte_definition(name, &cte)?;
        let columns = rename_columns(columns, alias)?;
        Ok((plan, Scope::from_columns(Some(&qualifier), &columns)))
    }

    /// Binds CTE `name`'s definition (new column ids each time), its columns named by the
    /// CTE's column list.
    fn bind_cte_definition(&mut self, name: &str, cte: &CteDefinition) -> Result<(LogicalPlan, OutputColumns)> {
        let (plan, columns) = self.in_cte_environment(name, None, |binder| binder.bind_query_body(&cte.query))?;
        let columns = apply_column_aliases(name, columns, &cte.column_aliases)?;
        Ok((plan, columns))
    }

    /// Runs `bind` as a definition of CTE `name` is bound: it sees the CTE frames visible
    /// where it is used, minus `name` itself (or, with `work_table`, `name` as the work
    /// table of a recursive CTE), and no enclosing query's columns.
    fn in_cte_environment<T>(&mut self, name: &str, work_table: Option<WorkTable>, bind: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let depth = self.ctes.len();
        let mut hidden_frames = Vec::new();
        while let Some(frame) = self.ctes.last() {
            if frame.contains_key(name) {
                break;
            }
            hidden_frames.push(self.ctes.pop().expect("checked above"));
        }
        let shadowed = self.ctes.last_mut().and_then(|frame| frame.remove(name));
        if let (Some(work_table), Some(frame), Some(definition)) = (work_table, self.ctes.last_mut(), shadowed.as_ref()) {
            frame.insert(name.to_string(), CteDefinition { work_table: Some(work_table), materialized: None, ..definition.clone() });
        }
        self.aggregate_stack.push(None);
        let outer = std::mem::take(&mut self.outer_scopes);
        let outer_aggregates = std::mem::take(&mut self.outer_aggregates);
        let unreachable = std::mem::take(&mut self.unreachable_scopes);
        let bound = bind(self);
        self.outer_scopes = outer;
        self.outer_aggregates = outer_aggregates;
        self.unreachable_scopes = unreachable;
        self.aggregate_stack.pop();
        if let Some(frame) = self.ctes.last_mut() {
            frame.remove(name);
            if let Some(definition) = shadowed {
                frame.insert(name.to_string(), definition);
            }
        }
        while let Some(frame) = hidden_frames.pop() {
            self.ctes.push(frame);
        }
        debug_assert_eq!(self.ctes.len(), depth);
        bound
    }

    /// Binds recursive CTE `name` (`anchor UNION [ALL] recursive`) as a
    /// [`LogicalPlan::RecursiveCte`] with id `id`.
    fn bind_recursive_cte(&mut self, name: &str, cte: &CteDefinition, id: usize) -> Result<(LogicalPlan, OutputColumns)> {
        let query = &cte.query;
        let not_implemented = |clause: &str| ApiaryError::NotImplemented(format!("{clause} in a recursive query is not implemented"));
        if query.order_by.is_some() {
            return Err(not_implemented("ORDER BY"));
        }
        match &query.limit_clause {
            Some(ast::LimitClause::LimitOffset { offset: Some(_), .. } | ast::LimitClause::OffsetCommaLimit { .. }) => {
                return Err(not_implemented("OFFSET"))
            }
            Some(_) => return Err(not_implemented("LIMIT")),
            None if query.fetch.is_some() => return Err(not_implemented("LIMIT")),
            None => {}
        }
        if query.with.is_some() {
            return Err(not_impl_err!("WITH inside the definition of recursive query \"{name}\""));
        }
        let ast::SetExpr::SetOperation { op: ast::SetOperator::Union, set_quantifier, left, right } = query.body.as_ref() else {
            return Err(ApiaryError::InvalidRecursion(format!(
                "recursive query \"{name}\" does not have the form non-recursive-term UNION [ALL] recursive-term"
            )));
        };
        let distinct = match set_quantifier {
            ast::SetQuantifier::All => false,
            ast::SetQuantifier::Distinct | ast::SetQuantifier::None => true,
            _ => return Err(not_impl_err!("UNION BY NAME")),
        };
        let invalid = |what: &str| ApiaryError::InvalidRecursion(format!("recursive reference to query \"{name}\" must not appear {what}"));
        if count_references(left.as_ref(), name) > 0 {
            return Err(invalid("within its non-recursive term"));
        }
        if count_references(right.as_ref(), name) > 1 {
            return Err(invalid("more than once"));
        }
        if referenced_in_expression_subquery(right.as_ref(), name) {
            return Err(invalid("within a subquery"));
        }
        if referenced_on_null_supplying_side(right, name) {
            return Err(invalid("within an outer join"));
        }
        if top_level_aggregates(right) {
            return Err(ApiaryError::InvalidRecursion("aggregate functions are not allowed in a recursive query's recursive term".into()));
        }
        let (anchor, anchor_columns) = self.in_cte_environment(name, None, |binder| binder.bind_set_expr(left))?;
        let anchor_columns = apply_column_aliases(name, anchor_columns, &cte.column_aliases)?;
        let types: Vec<apiary_types::DataType> = anchor_columns.iter().map(|(_, c)| c.data_type).collect();
        // The anchor's columns in order, under the CTE's names.
        let anchor = self.cast_outputs(anchor, &anchor_columns, &types)?;
        let anchor = Arc::new(anchor);
        let work_table = WorkTable { id, columns: anchor_columns.clone(), anchor: Arc::clone(&anchor) };
        let (recursive, recursive_columns) = self.in_cte_environment(name, Some(work_table), |binder| binder.bind_set_expr(right))?;
        if recursive_columns.len() != anchor_columns.len() {
            return Err(bind_err!(
                "each UNION query must have the same number of columns ({} vs {})",
                anchor_columns.len(),
                recursive_columns.len()
            ));
        }
        for (position, ((column_name, anchor_column), (_, recursive_column))) in anchor_columns.iter().zip(&recursive_columns).enumerate() {
            let (anchor_type, recursive_type) = (anchor_column.data_type, recursive_column.data_type);
            let common = common_type(&anchor_type, &recursive_type)
                .ok_or_else(|| type_err!("UNION types {anchor_type} and {recursive_type} cannot be matched (column \"{column_name}\")"))?;
            // PostgreSQL: the column's type is the non-recursive term's; a recursive term
            // that would widen it is an error (decimals keep the anchor's precision here,
            // as PostgreSQL's NUMERIC has none).
            if common != anchor_type && !(anchor_type.is_decimal() && recursive_type.is_decimal()) {
                return Err(ApiaryError::Type(format!(
                    "recursive query \"{name}\" column {} has type {anchor_type} in non-recursive term but type {common} overall \
                     (cast the output of the non-recursive term to the correct type)",
                    position + 1
                )));
            }
        }
        let recursive = self.cast_outputs(recursive, &recursive_columns, &types)?;
        let output: Vec<crate::expr::ColumnRef> =
            anchor_columns.iter().map(|(column_name, c)| self.new_column(column_name, c.data_type, true)).collect();
        let columns: OutputColumns = anchor_columns.iter().map(|(n, _)| n.clone()).zip(output.iter().cloned()).collect();
        let anchor = Arc::try_unwrap(anchor).unwrap_or_else(|shared| (*shared).clone());
        let plan = LogicalPlan::RecursiveCte {
            id,
            name: name.to_string(),
            distinct,
            anchor: Box::new(anchor),
            recursive: Box::new(recursive),
            output,
        };
        Ok((plan, columns))
    }
}

/// The CTE's column list applied to a definition's columns.
fn apply_column_aliases(name: &str, mut columns: OutputColumns, aliases: &[String]) -> Result<OutputColumns> {
    if !aliases.is_empty() {
        if aliases.len() > columns.len() {
            return Err(bind_err!("WITH query \"{name}\" has {} columns available but {} columns specified", columns.len(), aliases.len()));
        }
        for (column, alias) in columns.iter_mut().zip(aliases) {
            column.0 = alias.clone();
        }
    }
    Ok(columns)
}

/// PostgreSQL refuses mutual recursion: a CTE naming a later one of the list that
/// names it back.
fn check_mutual_recursion(with: &ast::With) -> Result<()> {
    let names: Vec<String> = with.cte_tables.iter().map(|c| normalize_ident(&c.alias.name)).collect();
    for (i, cte) in with.cte_tables.iter().enumerate() {
        for (j, later) in with.cte_tables.iter().enumerate().skip(i + 1) {
            if count_references(cte.query.as_ref(), &names[j]) > 0 && count_references(later.query.as_ref(), &names[i]) > 0 {
                return Err(not_impl_err!("mutual recursion between WITH items is not implemented"));
            }
        }
    }
    Ok(())
}

/// Whether `name` is read inside a subquery in an expression (EXISTS, IN, a scalar
/// subquery) of `node`.
fn referenced_in_expression_subquery<V: Visit>(node: &V, name: &str) -> bool {
    struct Finder<'a> {
        name: &'a str,
        depth: usize,
        found: bool,
    }
    impl Visitor for Finder<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &ast::Expr) -> std::ops::ControlFlow<()> {
            if matches!(expr, ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. }) {
                self.depth += 1;
            }
            std::ops::ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, expr: &ast::Expr) -> std::ops::ControlFlow<()> {
            if matches!(expr, ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. }) {
                self.depth -= 1;
            }
            std::ops::ControlFlow::Continue(())
        }
        fn pre_visit_table_factor(&mut self, factor: &ast::TableFactor) -> std::ops::ControlFlow<()> {
            if self.depth > 0 && names(factor, self.name) {
                self.found = true;
                return std::ops::ControlFlow::Break(());
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut finder = Finder { name, depth: 0, found: false };
    let _ = node.visit(&mut finder);
    finder.found
}

/// Whether `name` is read on the NULL-supplying side of an outer join in `set`.
fn referenced_on_null_supplying_side(set: &ast::SetExpr, name: &str) -> bool {
    fn factor(factor: &ast::TableFactor, name: &str) -> bool {
        match factor {
            ast::TableFactor::Derived { subquery, .. } => referenced_on_null_supplying_side(&subquery.body, name),
            ast::TableFactor::NestedJoin { table_with_joins, .. } => joins(table_with_joins, name),
            _ => false,
        }
    }
    fn joins(item: &ast::TableWithJoins, name: &str) -> bool {
        use ast::JoinOperator as J;
        let mut left = count_references(&item.relation, name) > 0;
        if factor(&item.relation, name) {
            return true;
        }
        for join in &item.joins {
            let right = count_references(&join.relation, name) > 0;
            if factor(&join.relation, name) {
                return true;
            }
            let outer = match &join.join_operator {
                J::Left(_) | J::LeftOuter(_) => right,
                J::Right(_) | J::RightOuter(_) => left,
                J::FullOuter(_) => left || right,
                _ => false,
            };
            if outer {
                return true;
            }
            left |= right;
        }
        false
    }
    match set {
        ast::SetExpr::Select(select) => select.from.iter().any(|item| joins(item, name)),
        ast::SetExpr::Query(query) => referenced_on_null_supplying_side(&query.body, name),
        ast::SetExpr::SetOperation { left, right, .. } => {
            referenced_on_null_supplying_side(left, name) || referenced_on_null_supplying_side(right, name)
        }
        _ => false,
    }
}

/// Whether a SELECT at the top level of `set` calls an aggregate function.
fn top_level_aggregates(set: &ast::SetExpr) -> bool {
    match set {
        ast::SetExpr::Select(select) => {
            let item_aggregates = select.projection.iter().any(|item| match item {
                ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => has_aggregate(e, false),
                _ => false,
            });
            item_aggregates || select.having.as_ref().is_some_and(|h| has_aggregate(h, false))
        }
        ast::SetExpr::Query(query) => top_level_aggregates(&query.body),
        ast::SetExpr::SetOperation { left, right, .. } => top_level_aggregates(left) || top_level_aggregates(right),
        _ => false,
    }
}

/// Whether a table factor is the plain name `name`.
fn names(factor: &ast::TableFactor, name: &str) -> bool {
    if let ast::TableFactor::Table { name: object, args: None, .. } = factor {
        if let [ast::ObjectNamePart::Identifier(ident)] = object.0.as_slice() {
            return normalize_ident(ident) == name;
        }
    }
    false
}

/// How many FROM items in `query` (its WITH definitions included) name `name` without a
/// schema. A nested WITH defining the same name is counted too: at worst the CTE is
/// materialized when inlining would have done.
fn count_references<V: Visit>(query: &V, name: &str) -> usize {
    struct Counter<'a> {
        name: &'a str,
        count: usize,
    }
    impl Visitor for Counter<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &ast::TableFactor) -> std::ops::ControlFlow<()> {
            if names(factor, self.name) {
                self.count += 1;
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut counter = Counter { name, count: 0 };
    let _ = query.visit(&mut counter);
    counter.count
}

/// Whether a definition groups, aggregates, removes duplicates or computes window
/// functions at its top level (in any branch of a set operation; subqueries in FROM or in
/// expressions do not count).
fn aggregates(query: &ast::Query) -> bool {
    fn body(set: &ast::SetExpr) -> bool {
        match set {
            ast::SetExpr::Select(select) => {
                let grouped = !matches!(&select.group_by, ast::GroupByExpr::Expressions(exprs, modifiers) if exprs.is_empty() && modifiers.is_empty());
                let computes = select.projection.iter().any(|item| match item {
                    ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => has_aggregate(e, true),
                    _ => false,
                });
                grouped
                    || computes
                    || select.distinct.is_some()
                    || select.having.is_some()
                    || !select.named_window.is_empty()
                    || select.from.iter().any(joins_aggregate)
            }
            ast::SetExpr::Query(query) => aggregates(query),
            // UNION (not ALL), INTERSECT and EXCEPT remove duplicates.
            ast::SetExpr::SetOperation { set_quantifier, left, right, .. } => {
                !matches!(set_quantifier, ast::SetQuantifier::All) || body(left) || body(right)
            }
            _ => false,
        }
    }
    // A join with a derived table that aggregates is as dear to compute twice (TPC-DS
    // Q14's `cross_items`: items joined with an INTERSECT of three sales channels).
    fn joins_aggregate(from: &ast::TableWithJoins) -> bool {
        std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation)).any(|factor| match factor {
            ast::TableFactor::Derived { subquery, .. } => aggregates(subquery),
            ast::TableFactor::NestedJoin { table_with_joins, .. } => joins_aggregate(table_with_joins),
            _ => false,
        })
    }
    body(&query.body)
}

/// Whether `expr` calls an aggregate (or with `windows`, a window) function outside its
/// subqueries.
fn has_aggregate(expr: &ast::Expr, windows: bool) -> bool {
    struct Finder {
        depth: usize,
        windows: bool,
    }
    impl Visitor for Finder {
        type Break = ();
        fn pre_visit_query(&mut self, _query: &ast::Query) -> std::ops::ControlFlow<()> {
            self.depth += 1;
            std::ops::ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _query: &ast::Query) -> std::ops::ControlFlow<()> {
            self.depth -= 1;
            std::ops::ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, expr: &ast::Expr) -> std::ops::ControlFlow<()> {
            if let ast::Expr::Function(function) = expr {
                let name = function.name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase()).unwrap_or_default();
                let window = function.over.is_some();
                if self.depth == 0 && ((window && self.windows) || (!window && super::is_aggregate_function(&name))) {
                    return std::ops::ControlFlow::Break(());
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    expr.visit(&mut Finder { depth: 0, windows }).is_break()
}
