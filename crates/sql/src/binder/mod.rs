//! The binder: resolves names and types in a parsed statement and builds a logical plan.
//!
//! ```text
//! Binder
//!  ├─ query.rs   WITH, SELECT, set operations, VALUES, ORDER BY / LIMIT, FROM and joins
//!  ├─ expr.rs    expressions: columns, literals, operators with type coercion, CASE,
//!  │             IN / LIKE / BETWEEN, subqueries, casts
//!  ├─ function.rs scalar and aggregate functions by name
//!  ├─ aggregate_functions.rs  string_agg, quantiles, mode, arg_min/max, corr, regr_*
//!  ├─ scalar_functions.rs  strings, regular expressions, dates and times, TRY_CAST
//!  ├─ system_function.rs  PostgreSQL's session and catalog functions (version(), ...)
//!  ├─ view.rs    views in FROM: their stored query bound where they are used
//!  └─ parameter.rs  `$n` parameters: types declared or inferred from their context
//! ```
//!
//! Name resolution uses a [`Scope`] per FROM clause: a list of visible columns with their
//! qualifier (table name or alias). While a subquery is bound, the enclosing scopes stay
//! reachable as *outer scopes*: a name found there becomes an outer reference (the column
//! id of the enclosing query), which is what makes a subquery correlated.

mod aggregate_functions;
mod cte;
mod expr;
mod function;
mod grouping;
pub mod parameter;
mod query;
mod scalar_functions;
mod system_function;
mod view;
mod window;

use std::collections::HashMap;
use std::sync::Arc;

use apiary_common::error::closest_name;
use apiary_common::{bind_err, internal_err, not_impl_err, ApiaryError, Result};
use apiary_storage::{Catalog, Table};
use apiary_types::{DataType, ScalarValue, TimeZone};
use sqlparser::ast;

use crate::expr::{AggregateCall, ColumnId, ColumnRef, Expr};
use crate::plan::LogicalPlan;

pub use function::{is_aggregate_function, sum_type};

/// How deeply expressions may nest (DuckDB's default `max_expression_depth`). Chains of
/// AND / OR do not count: they are rebuilt as balanced trees.
pub const MAX_EXPRESSION_DEPTH: usize = 1000;

/// Resolves table functions (`read_csv('f')`, `read_parquet('f')`, system views) to a
/// table the binder can scan. Implemented by the engine, which owns the file readers.
pub trait TableFunctionProvider {
    /// Whether `name` is a scalar function the engine evaluates at bind time, with
    /// constant arguments (functions with an effect, such as `apiary_cancel(id)`).
    fn has_engine_function(&self, _name: &str) -> bool {
        false
    }

    /// Evaluates an engine function (see [`Self::has_engine_function`]).
    fn call_engine_function(&self, name: &str, _args: &[ScalarValue]) -> Result<ScalarValue> {
        Err(apiary_common::bind_err!("function {name} does not exist"))
    }

    /// `Ok(None)` when no function has that name.
    fn call(&self, name: &str, args: &[TableArg], named_args: &[(String, TableArg)]) -> Result<Option<Arc<Table>>>;

    /// A system table such as `pg_catalog.pg_class` or `information_schema.columns`;
    /// `schema` is `None` for an unqualified name. `Ok(None)` when there is none.
    fn system_table(&self, _schema: Option<&str>, _name: &str) -> Result<Option<Arc<Table>>> {
        Ok(None)
    }

    /// The value of a session function (`current_user`, `current_database`,
    /// `version`, ...); `None` when unknown.
    fn session_value(&self, _name: &str) -> Option<ScalarValue> {
        None
    }
}

/// A provider that knows no table functions.
pub struct NoTableFunctions;

impl TableFunctionProvider for NoTableFunctions {
    fn call(&self, _: &str, _: &[TableArg], _: &[(String, TableArg)]) -> Result<Option<Arc<Table>>> {
        Ok(None)
    }
}

/// An argument of a table function: a constant, a list of constants
/// (`read_csv(['a.csv', 'b.csv'])`) or named constants (`columns = {'id': 'INTEGER'}`,
/// DuckDB's struct literal).
#[derive(Debug, Clone, PartialEq)]
pub enum TableArg {
    Value(ScalarValue),
    List(Vec<ScalarValue>),
    Struct(Vec<(String, ScalarValue)>),
}

impl TableArg {
    /// The constant, when the argument is one.
    pub fn value(&self) -> Option<&ScalarValue> {
        match self {
            TableArg::Value(value) => Some(value),
            _ => None,
        }
    }
}

impl std::fmt::Display for TableArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableArg::Value(value) => write!(f, "{value}"),
            TableArg::List(values) => {
                write!(f, "[")?;
                for (i, value) in values.iter().enumerate() {
                    write!(f, "{}{value}", if i > 0 { ", " } else { "" })?;
                }
                write!(f, "]")
            }
            TableArg::Struct(fields) => {
                write!(f, "{{")?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    write!(f, "{}'{name}': {value}", if i > 0 { ", " } else { "" })?;
                }
                write!(f, "}}")
            }
        }
    }
}

/// The rows a DML statement's query reads by name besides its target (see
/// [`Binder::with_dml_source`]).
pub(crate) struct DmlSource {
    name: String,
    pub rows: Arc<Table>,
    pub qualified_only: bool,
}

/// `VALUES` rows with each `DEFAULT` replaced by its column's DEFAULT expression (or NULL).
/// Whether `expr` is the keyword DEFAULT (a VALUES cell, a SET value), which the parser
/// reads as an unquoted identifier.
pub fn is_default_keyword(expr: &ast::Expr) -> bool {
    matches!(expr, ast::Expr::Identifier(ident) if ident.quote_style.is_none() && ident.value.eq_ignore_ascii_case("default"))
}

fn with_defaults_in_values(table: &Table, positions: &[usize], values: &ast::Values) -> Result<ast::Values> {
    let mut values = values.clone();
    for row in &mut values.rows {
        for (cell, &position) in row.content.iter_mut().zip(positions) {
            if is_default_keyword(cell) {
                *cell = match table.default_of(position) {
                    Some(sql) => crate::parser::parse_expression(sql)?,
                    None => ast::Expr::Value(ast::Value::Null.into()),
                };
            }
        }
    }
    Ok(values)
}

/// A bound query: its plan, the user-visible output column names, and the next unused
/// column id (the optimizer keeps numbering from there).
#[derive(Debug, Clone)]
pub struct BoundStatement {
    pub plan: LogicalPlan,
    pub names: Vec<String>,
    pub next_column_id: u32,
}

/// A column visible in a scope.
#[derive(Clone, Debug)]
pub(crate) struct ScopeColumn {
    /// The table name or alias that qualifies this column (`t` in `t.a`).
    pub qualifier: Option<String>,
    pub name: String,
    pub column: ColumnRef,
    /// Hidden from unqualified lookup (the right-hand copy of a `USING` column).
    pub hidden: bool,
}

/// The columns visible to expressions of one query level.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scope {
    pub columns: Vec<ScopeColumn>,
}

impl Scope {
    pub fn from_columns(qualifier: Option<&str>, columns: &[(String, ColumnRef)]) -> Scope {
        Scope {
            columns: columns
                .iter()
                .map(|(name, column)| ScopeColumn {
                    qualifier: qualifier.map(str::to_string),
                    name: name.clone(),
                    column: column.clone(),
                    hidden: false,
                })
                .collect(),
        }
    }

    pub fn merge(mut self, other: Scope) -> Scope {
        self.columns.extend(other.columns);
        self
    }

    /// Finds `qualifier.name` or an unqualified `name`. `Ok(None)` when absent,
    /// an error when ambiguous.
    fn lookup(&self, qualifier: Option<&str>, name: &str) -> Result<Option<&ScopeColumn>> {
        let mut found: Option<&ScopeColumn> = None;
        for column in &self.columns {
            let qualifier_matches = match qualifier {
                Some(q) => column.qualifier.as_deref() == Some(q),
                None => !column.hidden,
            };
            if qualifier_matches && column.name == name {
                if let Some(previous) = found {
                    if previous.column.id != column.column.id {
                        return Err(bind_err!("column reference \"{name}\" is ambiguous"));
                    }
                }
                found = Some(column);
            }
        }
        Ok(found)
    }

    fn has_qualifier(&self, qualifier: &str) -> bool {
        self.columns.iter().any(|c| c.qualifier.as_deref() == Some(qualifier))
    }
}

/// A `WITH` definition: re-bound at each reference (inlined), or bound once and
/// materialized (see `cte.rs`).
#[derive(Clone)]
pub(crate) struct CteDefinition {
    query: ast::Query,
    column_aliases: Vec<String>,
    materialized: Option<cte::MaterializedCte>,
    /// While a recursive CTE's recursive term is bound: its self-reference reads the
    /// work table.
    work_table: Option<cte::WorkTable>,
}

/// Collects aggregate calls while the SELECT list / HAVING / ORDER BY of a grouped query
/// are bound.
#[derive(Default)]
pub(crate) struct AggregateCollector {
    pub calls: Vec<(AggregateCall, ColumnRef)>,
    /// Window function calls of the same query (computed after the aggregation).
    pub windows: Vec<(crate::window::WindowCall, ColumnRef)>,
    /// The query's GROUP BY, for `GROUPING(...)` (`None` without GROUP BY).
    pub grouping: Option<grouping::GroupingContext>,
}

pub struct Binder<'a> {
    catalog: &'a Catalog,
    /// While a column's DEFAULT is bound: the sequences its table owns (see
    /// `column_default`).
    default_sequences: Vec<Arc<apiary_storage::Sequence>>,
    table_functions: &'a dyn TableFunctionProvider,
    next_column_id: u32,
    /// CTE frames, innermost last.
    ctes: Vec<HashMap<String, CteDefinition>>,
    /// Scopes of the enclosing queries while binding a subquery, innermost last.
    outer_scopes: Vec<Scope>,
    /// For each outer scope, where in `aggregate_stack` the collector of that query was
    /// when the subquery started (`None`: aggregates were not allowed there). An aggregate
    /// over outer columns only belongs to that outer query (PostgreSQL).
    outer_aggregates: Vec<Option<usize>>,
    /// The FROM items to the left of the (not LATERAL) subqueries in FROM being bound:
    /// invisible to them, named only to say so when a column reference fails.
    unreachable_scopes: Vec<Scope>,
    /// GROUP BY keys containing a subquery, with their group column, while the select
    /// list, HAVING and ORDER BY of that query are bound.
    grouped_subquery_keys: Vec<(ast::Expr, ColumnRef)>,
    /// How deep the expression being bound is nested (see [`MAX_EXPRESSION_DEPTH`]).
    expression_depth: usize,
    /// Aggregate collectors; `None` marks a subquery boundary (aggregates inside a
    /// subquery belong to the subquery).
    aggregate_stack: Vec<Option<AggregateCollector>>,
    /// While the arguments and window of a window call are bound (calls do not nest).
    binding_window: bool,
    /// The WINDOW clauses of the queries being bound (name, specification), innermost last.
    named_windows: Vec<(String, ast::WindowSpec)>,
    /// Block size for temporary tables created by table functions.
    pub block_rows: usize,
    /// The session the statement runs in (`SessionValues`), which `nextval`, `setval`,
    /// `currval` and `lastval` name.
    pub session: u64,
    /// The types of `$n` parameters while a statement is described (`None`: the
    /// statement may not contain parameters). See `parameter.rs`.
    parameters: Option<Vec<Option<DataType>>>,
    /// The values of `$n` parameters while a statement is executed with them: each
    /// binds as a literal (`None`: no values given). See `parameter.rs`.
    parameter_values: Option<Vec<ScalarValue>>,
    /// Whether a described `$n` binds as [`Expr::Parameter`] (a plan made once for many
    /// executions) rather than as a NULL of its type (describing only).
    parameter_slots: bool,
    /// How many views deep the binder is (see `view.rs`).
    view_depth: usize,
    /// The catalog tables and views the statement names outside views (see `view.rs`).
    referenced_relations: Vec<String>,
    /// The id of the next materialized CTE.
    next_cte_id: usize,
    /// `now()` / `current_date` of the statement (microseconds since 1970, UTC): read
    /// once, so every call in a statement sees the same moment.
    statement_time: Option<i64>,
    /// The session's time zone (`SET TimeZone`): constants converted here between
    /// TIMESTAMPTZ and text or local times use it, and so do `current_date`,
    /// `localtimestamp` and `localtime`.
    pub time_zone: TimeZone,
    /// The table a DELETE or UPDATE changes (its name, and the table read in its place:
    /// its rows with their ids), taken by the first FROM item naming it.
    dml_target: Option<(String, Arc<Table>)>,
    /// The other rows a DML statement's query reads by name (with row ids): the rows an
    /// INSERT ... ON CONFLICT proposes, read as `excluded` (whose columns are then
    /// reached qualified only: an unqualified name is the target's), or a MERGE's source.
    dml_source: Option<DmlSource>,
    /// Tables read in place of the catalog's of the same name: a transaction's view of
    /// them (its snapshot, or its own changes).
    tables: HashMap<String, Arc<Table>>,
}

impl<'a> Binder<'a> {
    pub fn new(catalog: &'a Catalog, table_functions: &'a dyn TableFunctionProvider) -> Self {
        Binder {
            catalog,
            default_sequences: Vec::new(),
            table_functions,
            next_column_id: 0,
            ctes: Vec::new(),
            outer_scopes: Vec::new(),
            outer_aggregates: Vec::new(),
            unreachable_scopes: Vec::new(),
            grouped_subquery_keys: Vec::new(),
            expression_depth: 0,
            aggregate_stack: Vec::new(),
            binding_window: false,
            named_windows: Vec::new(),
            block_rows: apiary_storage::BLOCK_ROWS,
            session: 0,
            parameters: None,
            parameter_values: None,
            parameter_slots: false,
            view_depth: 0,
            referenced_relations: Vec::new(),
            next_cte_id: 0,
            statement_time: None,
            time_zone: TimeZone::UTC,
            dml_target: None,
            dml_source: None,
            tables: HashMap::new(),
        }
    }

    /// Reads `tables` in place of the catalog's tables of the same names.
    pub fn with_tables(mut self, tables: HashMap<String, Arc<Table>>) -> Self {
        self.tables = tables;
        self
    }

    /// The catalog table `name`, as this statement reads it.
    pub(crate) fn catalog_table(&self, name: &str) -> Result<Arc<Table>> {
        match self.tables.get(name) {
            Some(table) => Ok(Arc::clone(table)),
            None => self.catalog.table(name),
        }
    }

    /// Binds the query a DELETE or UPDATE finds its rows with: the first FROM item naming
    /// `target` reads `rows` instead (the target's rows with a column of row ids, see
    /// `Table::with_row_ids`). With `cast_to`, the query's columns after the first (the
    /// row id) are converted to that table's column types as an assignment converts them.
    pub fn bind_dml_query(
        &mut self,
        query: &ast::Query,
        target: &str,
        rows: Arc<Table>,
        cast_to: Option<&Table>,
    ) -> Result<BoundStatement> {
        self.dml_target = Some((target.to_string(), rows));
        let bound = self.bind_query_body(query);
        let unused = self.dml_target.take().is_some();
        self.dml_source = None;
        let (plan, columns) = bound?;
        if unused {
            return Err(internal_err!("the query of a DELETE or UPDATE does not read its target {target}"));
        }
        let Some(table) = cast_to else {
            let names = columns.iter().map(|(name, _)| name.clone()).collect();
            return Ok(BoundStatement { plan, names, next_column_id: self.next_column_id });
        };
        // Row ids first (one per table read with them), then the new values.
        let Some(leading) = columns.len().checked_sub(table.schema.len()).filter(|&n| n > 0) else {
            return Err(internal_err!("an UPDATE's query has {} columns for {} table columns", columns.len(), table.schema.len()));
        };
        let mut exprs = Vec::with_capacity(columns.len());
        for (_, row_id) in &columns[..leading] {
            exprs.push((row_id.expr(), self.new_column(&row_id.name, row_id.data_type, row_id.nullable)));
        }
        for (field, (_, column)) in table.schema.fields.iter().zip(&columns[leading..]) {
            let expr = self.assignment_cast(column.expr(), &field.data_type, &field.name)?;
            exprs.push((expr, self.new_column(&field.name, field.data_type, true)));
        }
        let plan = LogicalPlan::Project { exprs, input: Box::new(plan) };
        let names = columns.iter().map(|(name, _)| name.clone()).collect();
        Ok(BoundStatement { plan, names, next_column_id: self.next_column_id })
    }

    /// Makes the next [`Binder::bind_dml_query`] read `rows` for the FROM item `name`:
    /// `excluded`, the rows an INSERT ... ON CONFLICT proposes (`qualified_only`: its
    /// columns are reached only as `excluded.c`), or a MERGE's source.
    pub fn with_dml_source(&mut self, name: &str, rows: Arc<Table>, qualified_only: bool) {
        self.dml_source = Some(DmlSource { name: name.to_string(), rows, qualified_only });
    }

    /// The rows read in place of `name`, if it names a DML statement's other rows not yet read.
    pub(crate) fn take_dml_source(&mut self, name: &str) -> Option<DmlSource> {
        match &self.dml_source {
            Some(source) if source.name == name => self.dml_source.take(),
            _ => None,
        }
    }

    /// The table read in place of `name` in a DELETE's or UPDATE's query, if it is the
    /// target and not yet read.
    pub(crate) fn take_dml_target(&mut self, name: &str) -> Option<Arc<Table>> {
        match &self.dml_target {
            Some((target, _)) if target == name => self.dml_target.take().map(|(_, rows)| rows),
            _ => None,
        }
    }

    /// Binds a query (`SELECT ...`, `VALUES ...`, set operations, `WITH`).
    pub fn bind_query(&mut self, query: &ast::Query) -> Result<BoundStatement> {
        let (plan, columns) = self.bind_query_body(query)?;
        let names = columns.iter().map(|(name, _)| name.clone()).collect();
        // The plan's output order is the visible column order.
        Ok(BoundStatement { plan, names, next_column_id: self.next_column_id })
    }

    /// Binds the source of `INSERT INTO table [(columns)] source`: a plan producing one
    /// column per table column, in table order, cast to the table's types (columns not
    /// listed get NULL).
    pub fn bind_insert_source(&mut self, table: &Table, target_columns: &[ast::Ident], source: &ast::Query) -> Result<BoundStatement> {
        let positions = self.insert_positions(table, target_columns)?;
        // Plain VALUES lists convert each value straight to its column's type.
        let plain_values = match source.body.as_ref() {
            ast::SetExpr::Values(values) if source.with.is_none() && source.order_by.is_none() && source.limit_clause.is_none() => {
                Some(values)
            }
            _ => None,
        };
        let (plan, columns) = match plain_values {
            Some(values) => {
                let targets: Vec<(String, DataType)> =
                    positions.iter().map(|&p| (table.schema.fields[p].name.clone(), table.schema.fields[p].data_type)).collect();
                let values = with_defaults_in_values(table, &positions, values)?;
                self.bind_values_typed(&values, Some(&targets))?
            }
            None => self.bind_query_body(source)?,
        };
        self.finish_insert(table, &positions, plan, columns)
    }

    fn insert_positions(&self, table: &Table, target_columns: &[ast::Ident]) -> Result<Vec<usize>> {
        let positions: Vec<usize> = if target_columns.is_empty() {
            (0..table.schema.len()).collect()
        } else {
            let mut positions = Vec::new();
            for ident in target_columns {
                let name = normalize_ident(ident);
                let position = table.schema.index_of(&name).ok_or_else(|| {
                    let hint = closest_name(&name, table.schema.fields.iter().map(|f| f.name.as_str()))
                        .map(|c| format!(" (did you mean \"{c}\"?)"))
                        .unwrap_or_default();
                    bind_err!("column \"{name}\" of table \"{}\" does not exist{hint}", table.name)
                })?;
                if positions.contains(&position) {
                    return Err(bind_err!("column \"{name}\" specified more than once"));
                }
                positions.push(position);
            }
            positions
        };
        Ok(positions)
    }

    fn finish_insert(
        &mut self,
        table: &Table,
        positions: &[usize],
        plan: LogicalPlan,
        columns: Vec<(String, ColumnRef)>,
    ) -> Result<BoundStatement> {
        if columns.len() != positions.len() {
            return Err(bind_err!("INSERT has {} target columns but the source produces {} columns", positions.len(), columns.len()));
        }
        let mut exprs = Vec::with_capacity(table.schema.len());
        for (field_idx, field) in table.schema.fields.iter().enumerate() {
            let expr = match positions.iter().position(|&p| p == field_idx) {
                Some(source_idx) => {
                    let source = columns[source_idx].1.expr();
                    self.assignment_cast(source, &field.data_type, &field.name)?
                }
                None => self.column_default(table, field_idx)?,
            };
            let output = self.new_column(&field.name, field.data_type, true);
            exprs.push((expr, output));
        }
        let plan = LogicalPlan::Project { exprs, input: Box::new(plan) };
        let names = table.schema.fields.iter().map(|f| f.name.clone()).collect();
        Ok(BoundStatement { plan, names, next_column_id: self.next_column_id })
    }

    /// The value an INSERT gives a column it leaves out: its DEFAULT expression converted
    /// to the column's type, bound into the statement's plan (so computed as it runs), or
    /// NULL.
    fn column_default(&mut self, table: &Table, column: usize) -> Result<Expr> {
        let field = &table.schema.fields[column];
        let Some(sql) = table.default_of(column) else {
            return Ok(Expr::Literal(ScalarValue::Null, field.data_type));
        };
        let expr = crate::parser::parse_expression(sql)?;
        // A new table's own sequences (SERIAL) are not in the catalog yet.
        self.default_sequences = table.sequences.iter().map(|owned| Arc::clone(&owned.sequence)).collect();
        let bound = self.bind_expr(&expr, &Scope::default());
        self.default_sequences.clear();
        self.assignment_cast(bound?, &field.data_type, &field.name)
    }

    /// Binds `rows` rows of the defaults of `columns` of `table` (`INSERT INTO table
    /// DEFAULT VALUES`: one row of every column's; COPY: the columns the file leaves out).
    pub fn bind_default_values(&mut self, table: &Table, columns: &[usize], rows: usize) -> Result<BoundStatement> {
        // Rows (of a column nobody reads) to compute the defaults on.
        let source = if rows == 1 { "SELECT 1".to_string() } else { format!("SELECT 1 FROM generate_series(1, {rows})") };
        let source = match crate::parser::parse_sql(&source)?.pop() {
            Some(ast::Statement::Query(query)) => *query,
            _ => return Err(internal_err!("{source} does not parse as a query")),
        };
        let (plan, _) = self.bind_query_body(&source)?;
        let mut exprs = Vec::with_capacity(columns.len());
        for &column in columns {
            let field = &table.schema.fields[column];
            let expr = self.column_default(table, column)?;
            exprs.push((expr, self.new_column(&field.name, field.data_type, true)));
        }
        let plan = LogicalPlan::Project { exprs, input: Box::new(plan) };
        let names = columns.iter().map(|&c| table.schema.fields[c].name.clone()).collect();
        Ok(BoundStatement { plan, names, next_column_id: self.next_column_id })
    }

    /// A fresh column id.
    pub(crate) fn new_column(&mut self, name: &str, data_type: DataType, nullable: bool) -> ColumnRef {
        let id = ColumnId(self.next_column_id);
        self.next_column_id += 1;
        ColumnRef { id, name: Arc::from(name), data_type, nullable }
    }

    fn lookup_cte(&self, name: &str) -> Option<CteDefinition> {
        self.ctes.iter().rev().find_map(|frame| frame.get(name).cloned())
    }

    /// Resolves a possibly qualified column name in `scope`, then in the outer scopes.
    pub(crate) fn resolve_column(&self, parts: &[ast::Ident], scope: &Scope) -> Result<ColumnRef> {
        let names: Vec<String> = parts.iter().map(normalize_ident).collect();
        let (qualifier, name) = match names.as_slice() {
            [name] => (None, name.as_str()),
            [.., qualifier, name] => (Some(qualifier.as_str()), name.as_str()),
            [] => return Err(bind_err!("empty column name")),
        };
        if let Some(found) = scope.lookup(qualifier, name)? {
            return Ok(found.column.clone());
        }
        for outer in self.outer_scopes.iter().rev() {
            if let Some(found) = outer.lookup(qualifier, name)? {
                return Ok(found.column.clone());
            }
        }
        let display = names.join(".");
        if let Some(q) = qualifier {
            if !scope.has_qualifier(q) && !self.outer_scopes.iter().any(|s| s.has_qualifier(q)) {
                if self.unreachable_scopes.iter().any(|s| s.has_qualifier(q)) {
                    return Err(ApiaryError::Catalog(format!(
                        "invalid reference to FROM-clause entry for table \"{q}\" in column reference \"{display}\": a subquery in FROM sees the FROM items to its left only with LATERAL"
                    )));
                }
                return Err(bind_err!("missing FROM-clause entry for table \"{q}\" in column reference \"{display}\""));
            }
        }
        let candidates: Vec<&str> =
            scope.columns.iter().filter(|c| qualifier.is_none() || c.qualifier.as_deref() == qualifier).map(|c| c.name.as_str()).collect();
        let hint = closest_name(name, candidates).map(|c| format!(" (did you mean \"{c}\"?)")).unwrap_or_default();
        Err(bind_err!("column \"{display}\" does not exist{hint}"))
    }
}

/// Unquoted identifiers are case-insensitive (folded to lower case); quoted ones are kept.
pub fn normalize_ident(ident: &ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The table name of an object name (`schema.table` -> `table`; schemas are not
/// supported beyond `main`/`public`).
pub fn object_name_to_table(name: &ast::ObjectName) -> Result<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|part| match part.as_ident() {
            Some(ident) => Ok(normalize_ident(ident)),
            None => Err(not_impl_err!("object name {name}")),
        })
        .collect::<Result<_>>()?;
    match parts.as_slice() {
        [table] => Ok(table.clone()),
        [schema, table] if schema == "main" || schema == "public" => Ok(table.clone()),
        _ => Err(ApiaryError::Catalog(format!("schema in \"{name}\" does not exist (only main/public)"))),
    }
}

/// Parses a type name written as text (`'DECIMAL(10,2)'`, `'varchar'`), as options such
/// as `read_csv(..., columns = {'id': 'INTEGER'})` give them.
pub fn parse_type_name(text: &str) -> Result<DataType> {
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let mut parser = sqlparser::parser::Parser::new(&dialect).try_with_sql(text).map_err(|_| bind_err!("\"{text}\" is not a type name"))?;
    let parsed = parser.parse_data_type().map_err(|_| bind_err!("\"{text}\" is not a type name"))?;
    if parser.peek_token().token != sqlparser::tokenizer::Token::EOF {
        return Err(bind_err!("\"{text}\" is not a type name"));
    }
    convert_data_type(&parsed)
}

/// Converts a SQL type name to a [`DataType`].
pub fn convert_data_type(data_type: &ast::DataType) -> Result<DataType> {
    use ast::DataType as T;
    let length = |len: &Option<ast::CharacterLength>| -> Result<Option<u32>> {
        match len {
            None => Ok(None),
            Some(ast::CharacterLength::IntegerLength { length, .. }) => {
                if *length == 0 || *length > u32::MAX as u64 {
                    Err(bind_err!("length for type {data_type} must be between 1 and {}", u32::MAX))
                } else {
                    Ok(Some(*length as u32))
                }
            }
            Some(ast::CharacterLength::Max) => Ok(None),
        }
    };
    let decimal = |info: &ast::ExactNumberInfo| -> Result<DataType> {
        let (precision, scale) = match info {
            ast::ExactNumberInfo::None => (18, 3),
            ast::ExactNumberInfo::Precision(p) => (*p, 0),
            ast::ExactNumberInfo::PrecisionAndScale(p, s) => {
                if *s < 0 {
                    return Err(bind_err!("DECIMAL scale must not be negative"));
                }
                (*p, *s as u64)
            }
        };
        if precision == 0 || precision > 38 {
            return Err(bind_err!("DECIMAL precision {precision} must be between 1 and 38"));
        }
        if scale > precision {
            return Err(bind_err!("DECIMAL scale {scale} must not exceed precision {precision}"));
        }
        Ok(DataType::decimal(precision as u8, scale as u8))
    };
    Ok(match data_type {
        T::Boolean | T::Bool => DataType::Boolean,
        T::SmallInt(_) | T::Int2(_) | T::TinyInt(_) => DataType::SmallInt,
        T::Int(_) | T::Integer(_) | T::Int4(_) | T::MediumInt(_) => DataType::Integer,
        T::BigInt(_) | T::Int8(_) | T::Int64 => DataType::BigInt,
        T::Real | T::Float4 | T::Float32 => DataType::Real,
        T::Double(_) | T::DoublePrecision | T::Float8 | T::Float64 => DataType::Double,
        T::Float(info) => match info {
            ast::ExactNumberInfo::Precision(p) if *p <= 24 => DataType::Real,
            _ => DataType::Double,
        },
        T::Decimal(info) | T::Numeric(info) | T::Dec(info) => decimal(info)?,
        T::Char(len) | T::Character(len) => DataType::Char(length(len)?.unwrap_or(1)),
        T::Varchar(len) | T::CharacterVarying(len) | T::CharVarying(len) | T::Nvarchar(len) => DataType::Varchar(length(len)?),
        T::Text | T::String(_) => DataType::Varchar(None),
        T::Date => DataType::Date,
        T::Timestamp(_, tz) if *tz == ast::TimezoneInfo::None || *tz == ast::TimezoneInfo::WithoutTimeZone => DataType::Timestamp,
        T::Timestamp(_, ast::TimezoneInfo::WithTimeZone | ast::TimezoneInfo::Tz) => DataType::TimestampTz,
        T::TimestampNtz(_) | T::Datetime(_) => DataType::Timestamp,
        T::Time(_, ast::TimezoneInfo::None | ast::TimezoneInfo::WithoutTimeZone) => DataType::Time,
        T::Time(_, ast::TimezoneInfo::WithTimeZone | ast::TimezoneInfo::Tz) => {
            return Err(not_impl_err!("TIME WITH TIME ZONE (use TIMESTAMP WITH TIME ZONE or TIME)"))
        }
        T::Interval { .. } => DataType::Interval,
        T::Regclass => DataType::Integer,
        T::Custom(name, _) => {
            // PostgreSQL clients qualify built-in types (`pg_catalog.text`); the
            // object-identifier types (`regclass`, ...) are OIDs, integers here.
            let parts: Vec<String> = name.0.iter().filter_map(|p| p.as_ident()).map(normalize_ident).collect();
            let type_name = match parts.as_slice() {
                [name] => name.as_str(),
                [schema, name] if schema == "pg_catalog" || schema == "main" || schema == "public" => name.as_str(),
                _ => return Err(bind_err!("type \"{name}\" does not exist")),
            };
            match type_name {
                "varchar" | "string" | "text" | "name" | "bpchar" | "char" => DataType::Varchar(None),
                "int" | "int4" | "integer" | "oid" | "regclass" | "regtype" | "regproc" | "regnamespace" | "xid" => DataType::Integer,
                "int2" | "smallint" => DataType::SmallInt,
                "long" | "int8" | "bigint" => DataType::BigInt,
                "float4" | "real" => DataType::Real,
                "double" | "float8" => DataType::Double,
                "bool" | "boolean" => DataType::Boolean,
                "numeric" | "decimal" => decimal(&ast::ExactNumberInfo::None)?,
                "date" => DataType::Date,
                "timestamp" => DataType::Timestamp,
                "timestamptz" => DataType::TimestampTz,
                "time" => DataType::Time,
                "timetz" => return Err(not_impl_err!("TIME WITH TIME ZONE (use TIMESTAMP WITH TIME ZONE or TIME)")),
                "interval" => DataType::Interval,
                other => return Err(bind_err!("type \"{other}\" does not exist")),
            }
        }
        other => return Err(not_impl_err!("data type {other}")),
    })
}
