//! Views in FROM: the stored query text is parsed and bound where the view is used (a
//! view is inlined like a CTE, with new column ids at each use), as if it were bound
//! where it was created: no CTE or outer query of the statement that uses it is
//! visible to it. Its columns keep the names and types fixed by CREATE VIEW.
//!
//! While a statement is bound, the binder notes the tables and views it names (outside
//! views it expands): CREATE VIEW stores them as the view's dependencies.

use std::sync::Arc;

use apiary_common::{bind_err, ApiaryError, Result};
use apiary_storage::View;
use sqlparser::ast;

use super::query::rename_columns;
use super::{normalize_ident, Binder, Scope};
use crate::expr::{ColumnRef, Expr};
use crate::plan::LogicalPlan;

/// How deeply views may read views (guards against a view that reads itself, which
/// CREATE VIEW refuses, in a damaged catalog).
const MAX_VIEW_DEPTH: usize = 64;

impl Binder<'_> {
    /// The tables and views the bound statements named (not those inside views), sorted.
    pub fn referenced_relations(&self) -> Vec<String> {
        let mut names = self.referenced_relations.clone();
        names.sort();
        names.dedup();
        names
    }

    /// Notes that the statement names catalog relation `name`.
    pub(crate) fn note_reference(&mut self, name: &str) {
        if self.view_depth == 0 {
            self.referenced_relations.push(name.to_string());
        }
    }

    pub(crate) fn bind_view_reference(&mut self, view: Arc<View>, alias: Option<&ast::TableAlias>) -> Result<(LogicalPlan, Scope)> {
        self.note_reference(&view.name);
        if self.view_depth >= MAX_VIEW_DEPTH {
            return Err(ApiaryError::TooComplex(format!("views are nested more than {MAX_VIEW_DEPTH} deep (at view \"{}\")", view.name)));
        }
        let statements = crate::parser::parse_sql(&view.sql).map_err(|e| in_view(e, &view.name))?;
        let [ast::Statement::Query(query)] = statements.as_slice() else {
            return Err(ApiaryError::Corruption(format!("view \"{}\": the stored definition is not one query", view.name)));
        };
        // Bound as where it was defined: none of the using statement's CTEs, outer
        // queries, aggregates or named windows are visible.
        let ctes = std::mem::take(&mut self.ctes);
        let outer_scopes = std::mem::take(&mut self.outer_scopes);
        let outer_aggregates = std::mem::take(&mut self.outer_aggregates);
        let unreachable = std::mem::take(&mut self.unreachable_scopes);
        let grouped_keys = std::mem::take(&mut self.grouped_subquery_keys);
        let named_windows = std::mem::take(&mut self.named_windows);
        self.aggregate_stack.push(None);
        self.view_depth += 1;
        let bound = self.bind_query_body(query);
        self.view_depth -= 1;
        self.aggregate_stack.pop();
        self.ctes = ctes;
        self.outer_scopes = outer_scopes;
        self.outer_aggregates = outer_aggregates;
        self.unreachable_scopes = unreachable;
        self.grouped_subquery_keys = grouped_keys;
        self.named_windows = named_windows;
        let (plan, columns) = bound.map_err(|e| in_view(e, &view.name))?;
        if columns.len() != view.columns.len() {
            return Err(bind_err!(
                "view \"{}\" now has {} columns instead of the {} it was created with; create it again",
                view.name,
                columns.len(),
                view.columns.len()
            ));
        }
        // The view's own names and types: a NULL column was made TEXT at CREATE VIEW.
        let mut exprs: Vec<(Expr, ColumnRef)> = Vec::with_capacity(columns.len());
        let mut renamed = Vec::with_capacity(columns.len());
        let mut cast = false;
        for ((_, column), field) in columns.into_iter().zip(&view.columns) {
            let same = column.data_type == field.data_type || (column.data_type.is_string() && field.data_type.is_string());
            let (expr, output) = if same {
                (column.expr(), column)
            } else if column.data_type == apiary_types::DataType::Null {
                cast = true;
                let output = self.new_column(&field.name, field.data_type, true);
                (self.cast(column.expr(), field.data_type)?, output)
            } else {
                return Err(bind_err!(
                    "column \"{}\" of view \"{}\" is now {} instead of the {} it was created with; create the view again",
                    field.name,
                    view.name,
                    column.data_type,
                    field.data_type
                ));
            };
            exprs.push((expr, output.clone()));
            renamed.push((field.name.clone(), output));
        }
        let plan = if cast { LogicalPlan::Project { exprs, input: Box::new(plan) } } else { plan };
        let columns = rename_columns(renamed, alias)?;
        let qualifier = alias.map(|a| normalize_ident(&a.name)).unwrap_or_else(|| view.name.clone());
        Ok((plan, Scope::from_columns(Some(&qualifier), &columns)))
    }
}

/// An error binding view `name`'s query, saying it came from the view.
fn in_view(error: ApiaryError, name: &str) -> ApiaryError {
    let prefix = |message: String| format!("view \"{name}\": {message}");
    match error {
        ApiaryError::Parse(m) => ApiaryError::Corruption(prefix(format!("its stored definition does not parse: {m}"))),
        ApiaryError::Bind(m) => ApiaryError::Bind(prefix(m)),
        ApiaryError::Type(m) => ApiaryError::Type(prefix(m)),
        ApiaryError::Catalog(m) => ApiaryError::Catalog(prefix(m)),
        ApiaryError::WrongObjectType(m) => ApiaryError::WrongObjectType(prefix(m)),
        ApiaryError::NotImplemented(m) => ApiaryError::NotImplemented(prefix(m)),
        other => other,
    }
}
