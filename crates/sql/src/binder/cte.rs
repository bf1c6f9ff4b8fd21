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

use std::collections::HashMap;
use std::sync::Arc;

use apiary_common::{bind_err, not_impl_err, Result};
use sqlparser::ast;
use sqlparser::ast::{Visit, Visitor};

use super::query::{rename_columns, OutputColumns};
use super::{normalize_ident, Binder, CteDefinition, Scope};
use crate::plan::{CteScan, LogicalPlan};

/// Guards against runaway CTE expansion (a CTE referring to itself without RECURSIVE).
const MAX_CTE_DEPTH: usize = 64;

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
        if with.recursive {
            return Err(not_impl_err!("WITH RECURSIVE"));
        }
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
            frame.insert(name, CteDefinition { query: (*cte.query).clone(), column_aliases, materialized: None });
        }
        // Bind the definitions to compute once, in order (a later one may read an earlier).
        let mut materialized: Vec<(usize, String, LogicalPlan)> = Vec::new();
        for cte in &with.cte_tables {
            let name = normalize_ident(&cte.alias.name);
            let references = count_references(query, &name);
            let materialize = match cte.materialized {
                Some(ast::CteAsMaterialized::NotMaterialized) => false,
                Some(ast::CteAsMaterialized::Materialized) => references > 0,
                None => references > 1 && aggregates(&cte.query),
            };
            if !materialize {
                continue;
            }
            let definition = self.lookup_cte(&name).expect("inserted above");
            let (plan, columns) = self.bind_cte_definition(&name, &definition)?;
            let id = self.next_cte_id;
            self.next_cte_id += 1;
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
    /// CTE's column list. The definition sees the CTE frames visible where it is used,
    /// minus itself, and no enclosing query's columns.
    fn bind_cte_definition(&mut self, name: &str, cte: &CteDefinition) -> Result<(LogicalPlan, OutputColumns)> {
        let depth = self.ctes.len();
        let mut hidden_frames = Vec::new();
        while let Some(frame) = self.ctes.last() {
            if frame.contains_key(name) {
                break;
            }
            hidden_frames.push(self.ctes.pop().expect("checked above"));
        }
        let shadowed = self.ctes.last_mut().and_then(|frame| frame.remove(name));
        self.aggregate_stack.push(None);
        let outer = std::mem::take(&mut self.outer_scopes);
        let outer_aggregates = std::mem::take(&mut self.outer_aggregates);
        let unreachable = std::mem::take(&mut self.unreachable_scopes);
        let bound = self.bind_query_body(&cte.query);
        self.outer_scopes = outer;
        self.outer_aggregates = outer_aggregates;
        self.unreachable_scopes = unreachable;
        self.aggregate_stack.pop();
        if let (Some(frame), Some(definition)) = (self.ctes.last_mut(), shadowed) {
            frame.insert(name.to_string(), definition);
        }
        while let Some(frame) = hidden_frames.pop() {
            self.ctes.push(frame);
        }
        debug_assert_eq!(self.ctes.len(), depth);
        let (plan, mut columns) = bound?;
        if !cte.column_aliases.is_empty() {
            if cte.column_aliases.len() > columns.len() {
                return Err(bind_err!(
                    "WITH query \"{name}\" has {} columns available but {} columns specified",
                    columns.len(),
                    cte.column_aliases.len()
                ));
            }
            for (column, alias) in columns.iter_mut().zip(&cte.column_aliases) {
                column.0 = alias.clone();
            }
        }
        Ok((plan, columns))
    }
}

/// How many FROM items in `query` (its WITH definitions included) name `name` without a
/// schema. A nested WITH defining the same name is counted too: at worst the CTE is
/// materialized when inlining would have done.
fn count_references(query: &ast::Query, name: &str) -> usize {
    struct Counter<'a> {
        name: &'a str,
        count: usize,
    }
    impl Visitor for Counter<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &ast::TableFactor) -> std::ops::ControlFlow<()> {
            if let ast::TableFactor::Table { name, args: None, .. } = factor {
                if let [ast::ObjectNamePart::Identifier(ident)] = name.0.as_slice() {
                    if normalize_ident(ident) == self.name {
                        self.count += 1;
                    }
                }
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
                    ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => has_aggregate_or_window(e),
                    _ => false,
                });
                grouped || computes || select.distinct.is_some() || select.having.is_some() || !select.named_window.is_empty()
            }
            ast::SetExpr::Query(query) => aggregates(query),
            // UNION (not ALL), INTERSECT and EXCEPT remove duplicates.
            ast::SetExpr::SetOperation { set_quantifier, left, right, .. } => {
                !matches!(set_quantifier, ast::SetQuantifier::All) || body(left) || body(right)
            }
            _ => false,
        }
    }
    body(&query.body)
}

/// Whether `expr` calls an aggregate or window function outside its subqueries.
fn has_aggregate_or_window(expr: &ast::Expr) -> bool {
    struct Finder {
        depth: usize,
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
                if self.depth == 0 && (function.over.is_some() || super::is_aggregate_function(&name)) {
                    return std::ops::ControlFlow::Break(());
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    expr.visit(&mut Finder { depth: 0 }).is_break()
}
