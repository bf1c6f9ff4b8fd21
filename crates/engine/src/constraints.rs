//! DEFAULT values and CHECK constraints.
//!
//! Both are kept with the table as SQL text (`Table::defaults`, `Table::checks`; the
//! database file stores them from format 6). A DEFAULT is bound where an INSERT (or COPY)
//! leaves its column out, in the statement's own plan, so it is computed as the statement
//! runs, never frozen at CREATE TABLE (`DEFAULT now()`; see `Binder::column_default`). CHECK
//! constraints are tested on the rows a statement is about to store (INSERT, UPDATE's new
//! versions, upserts, MERGE, COPY) before anything is published: the rows become a table
//! of the target's name, and one query finds the first row for which a constraint is
//! false (NULL passes, as in PostgreSQL).

use std::sync::Arc;

use apiary_common::{bind_err, not_impl_err, ApiaryError, Result};
use apiary_sql::parser::{expression_text, parse_expression};
use apiary_storage::{CheckConstraint, Table};
use apiary_types::{DataChunk, Vector};
use sqlparser::ast;

use crate::connection::Connection;
use crate::dml::{select_query, table_factor};

/// A CHECK constraint named in CREATE TABLE: its name (if given), the column it was
/// declared on (if any), and its condition.
pub(crate) struct DeclaredCheck<'a> {
    pub name: Option<&'a ast::Ident>,
    pub column: Option<String>,
    pub expr: &'a ast::Expr,
}

/// The CHECK constraints of a new table `table`, named as PostgreSQL names them:
/// `t_c_check` for one declared on column `c`, `t_check` for a table constraint (then
/// `t_check1`, ... when taken).
pub(crate) fn name_checks(table: &str, declared: &[DeclaredCheck<'_>]) -> Result<Vec<CheckConstraint>> {
    let mut checks: Vec<CheckConstraint> = Vec::with_capacity(declared.len());
    for check in declared {
        if has_subquery(check.expr) {
            return Err(not_impl_err!("cannot use subquery in check constraint"));
        }
        let name = match check.name {
            Some(name) => {
                let name = apiary_sql::binder::normalize_ident(name);
                if checks.iter().any(|c| c.name == name) {
                    return Err(ApiaryError::Duplicate(format!("constraint \"{name}\" for relation \"{table}\" already exists")));
                }
                name
            }
            None => {
                let base = match &check.column {
                    Some(column) => format!("{table}_{column}_check"),
                    None => format!("{table}_check"),
                };
                let mut name = base.clone();
                let mut n = 0;
                while checks.iter().any(|c| c.name == name) {
                    n += 1;
                    name = format!("{base}{n}");
                }
                name
            }
        };
        checks.push(CheckConstraint { name, sql: expression_text(check.expr)? });
    }
    Ok(checks)
}

/// A DEFAULT expression as kept with the table (PostgreSQL allows no subquery in it).
pub(crate) fn default_text(expr: &ast::Expr) -> Result<String> {
    if has_subquery(expr) {
        return Err(not_impl_err!("cannot use subquery in DEFAULT expression"));
    }
    expression_text(expr)
}

fn has_subquery(expr: &ast::Expr) -> bool {
    let mut found = false;
    let _ = ast::visit_expressions(expr, |e| {
        found |= matches!(e, ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. });
        std::ops::ControlFlow::<()>::Continue(())
    });
    found
}

impl Connection {
    /// Checks that a new table's DEFAULT expressions and CHECK constraints bind: a default
    /// reads no column and converts to its column's type, a check is a condition on the
    /// table's columns.
    pub(crate) fn validate_defaults_and_checks(&self, table: &Arc<Table>) -> Result<()> {
        let functions = self.table_functions();
        let with_default: Vec<usize> = (0..table.schema.len()).filter(|&c| table.default_of(c).is_some()).collect();
        if !with_default.is_empty() {
            self.binder(&functions).bind_default_values(table, &with_default, 1).map_err(|e| match e {
                ApiaryError::Bind(message) if message.starts_with("column \"") => {
                    ApiaryError::NotImplemented(format!("cannot use column reference in DEFAULT expression ({message})"))
                }
                other => other,
            })?;
        }
        if !table.checks.is_empty() {
            self.binder(&functions).bind_dml_query(&check_query(table)?, &table.name, Arc::clone(table), None)?;
        }
        Ok(())
    }

    /// Fails with 23514 if a CHECK constraint of `table` is false for one of `chunks`' rows
    /// (rows about to be stored; each chunk has the table's columns).
    pub(crate) fn check_constraints(&self, table: &Table, chunks: &[DataChunk]) -> Result<()> {
        if table.checks.is_empty() || chunks.iter().all(|c| c.row_count() == 0) {
            return Ok(());
        }
        let rows = Table::new(table.name.clone(), table.schema.clone(), self.settings.block_rows).scan_only();
        let mut appender = rows.appender()?;
        for chunk in chunks {
            appender.append(chunk)?;
        }
        appender.commit()?;
        let functions = self.table_functions();
        let mut binder = self.binder(&functions);
        let bound = binder.bind_dml_query(&check_query(table)?, &table.name, Arc::new(rows), None)?;
        let plan = self.optimize_plan(bound.plan, bound.next_column_id)?;
        for chunk in self.run_plan(&plan)? {
            let chunk = chunk.compact();
            if chunk.physical_len() == 0 {
                continue;
            }
            let failed = match chunk.columns[0].get_scalar(0) {
                apiary_types::ScalarValue::Int32(n) => n as usize,
                _ => 0,
            };
            let values: Vec<String> =
                chunk.columns[1..].iter().map(|c| if c.is_null(0) { "null".to_string() } else { c.get_scalar(0).to_string() }).collect();
            return Err(ApiaryError::CheckViolation(format!(
                "new row for relation \"{}\" violates check constraint \"{}\" (failing row contains ({}))",
                table.name,
                table.checks.get(failed).map_or("?", |c| c.name.as_str()),
                values.join(", ")
            )));
        }
        Ok(())
    }

    /// `rows` rows of the DEFAULT values of `columns` of `table` (COPY's columns the file
    /// leaves out), one vector per column.
    pub(crate) fn default_vectors(&self, table: &Table, columns: &[usize], rows: usize) -> Result<Vec<Vector>> {
        let functions = self.table_functions();
        let bound = self.binder(&functions).bind_default_values(table, columns, rows)?;
        let plan = self.optimize_plan(bound.plan, bound.next_column_id)?;
        let chunks = self.run_plan(&plan)?;
        let mut builders: Vec<apiary_types::VectorBuilder> =
            columns.iter().map(|&c| apiary_types::VectorBuilder::with_capacity(table.schema.fields[c].data_type, rows)).collect();
        for chunk in chunks {
            let chunk = chunk.compact();
            for (builder, column) in builders.iter_mut().zip(&chunk.columns) {
                builder.append(column, None);
            }
        }
        let vectors: Vec<Vector> = builders.into_iter().map(|b| b.finish()).collect();
        if vectors.iter().any(|v| v.len() != rows) {
            return Err(bind_err!("the DEFAULT values of table \"{}\" did not make {rows} rows", table.name));
        }
        Ok(vectors)
    }
}

/// `SELECT CASE WHEN NOT (c0) THEN 0 WHEN NOT (c1) THEN 1 ... END, * FROM t WHERE NOT (c0)
/// OR NOT (c1) ... LIMIT 1`: the first row some CHECK constraint of `table` is false for,
/// and which.
fn check_query(table: &Table) -> Result<ast::Query> {
    let mut conditions = Vec::with_capacity(table.checks.len());
    for check in &table.checks {
        let expr = parse_expression(&check.sql)?;
        conditions.push(ast::Expr::UnaryOp { op: ast::UnaryOperator::Not, expr: Box::new(ast::Expr::Nested(Box::new(expr))) });
    }
    let which = ast::Expr::Case {
        case_token: ast::helpers::attached_token::AttachedToken::empty(),
        end_token: ast::helpers::attached_token::AttachedToken::empty(),
        operand: None,
        conditions: conditions
            .iter()
            .enumerate()
            .map(|(n, condition)| ast::CaseWhen {
                condition: condition.clone(),
                result: ast::Expr::value(ast::Value::Number(n.to_string(), false)),
            })
            .collect(),
        else_result: None,
    };
    let any =
        conditions.into_iter().reduce(|a, b| ast::Expr::BinaryOp { left: Box::new(a), op: ast::BinaryOperator::Or, right: Box::new(b) });
    let projection = vec![ast::SelectItem::UnnamedExpr(which), ast::SelectItem::Wildcard(Default::default())];
    let mut query = select_query(projection, vec![table_factor(&table.name)?], any)?;
    query.limit_clause = Some(ast::LimitClause::LimitOffset {
        limit: Some(ast::Expr::value(ast::Value::Number("1".to_string(), false))),
        offset: None,
        limit_by: Vec::new(),
    });
    Ok(query)
}
