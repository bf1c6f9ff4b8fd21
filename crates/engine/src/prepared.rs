//! Prepared statements: parsed and planned once, run many times.
//!
//! A query's physical plan is immutable (each run gets a fresh
//! [`ExecutionState`](apiary_execution::ExecutionState) and scans the table snapshots of
//! the moment it starts), so a prepared query keeps its plan and every execution only
//! runs it: no parsing, binding, optimizing or physical planning.
//!
//! A query with `$n` parameters is bound and optimized once with each parameter as an
//! `Expr::Parameter` slot (a generic plan, as PostgreSQL calls it). Each execution puts
//! its values into the optimized plan as literals, folds what became constant, and makes
//! the physical plan from it: the compiled kernels ("bees") are specialised to the
//! execution's constants and the scans prune blocks with them, while parsing, binding
//! and optimizing are not repeated. A statement that needs a value to be bound
//! (`LIMIT $1`, a function argument that must be constant) is bound with each
//! execution's values instead, as are statements other than queries.
//!
//! The plan is made again when it may no longer fit: after a CREATE or DROP (the catalog
//! version changed), or when the session changed a setting that shapes plans
//! (`vector_size`, `simd`, `disabled_optimizers`, `threads`, ...). A query over a table
//! function (`read_csv`, `apiary_queries()`) is planned at every execution, since the
//! function is read when the query is bound, and so is a query that reads the clock
//! (`now()`, `current_date`: one value per statement, taken when it is bound).

use std::sync::Arc;

use apiary_common::{ApiaryError, Result};
use apiary_execution::{ExecutionConfig, KernelEvaluator, PhysicalPlan};
use apiary_optimizer::OptimizerContext;
use apiary_sql::parser::parse_sql;
use apiary_sql::LogicalPlan;
use apiary_types::{DataType, ScalarValue};
use sqlparser::ast;

use crate::connection::Connection;
use crate::result::QueryResult;

/// A statement ready to run many times (see [`Connection::prepare`]).
pub struct PreparedStatement {
    statement: ast::Statement,
    /// The parameter types the caller declared (`None`: inferred from the statement).
    declared: Vec<Option<DataType>>,
    /// The type of each `$n` (empty: the statement has no parameters).
    parameter_types: Vec<DataType>,
    plan: Option<PreparedPlan>,
}

/// A query's plan and what it was made under.
struct PreparedPlan {
    form: PlanForm,
    names: Vec<String>,
    types: Vec<DataType>,
    catalog_version: u64,
    config: ExecutionConfig,
    disabled_optimizers: Vec<String>,
    threads: usize,
    /// Skips admission control (see `Connection::query_meta`).
    bypass_admission: bool,
}

/// What a prepared query keeps between executions.
enum PlanForm {
    /// A query without parameters: the physical plan, run as it is (and the optimized
    /// plan, for shared operators).
    Physical(Arc<PhysicalPlan>, LogicalPlan),
    /// A query with parameters: the optimized plan with `Expr::Parameter` slots, made
    /// physical at each execution once its values are in.
    Generic(LogicalPlan),
}

impl PreparedStatement {
    /// The statement as parsed.
    pub fn statement(&self) -> &ast::Statement {
        &self.statement
    }

    /// Whether the statement keeps a plan between executions (a query).
    pub fn is_planned(&self) -> bool {
        self.plan.is_some()
    }

    /// The types of the statement's `$n` parameters, in order.
    pub fn parameter_types(&self) -> &[DataType] {
        &self.parameter_types
    }
}

/// Names of the functions that read the clock when a statement is bound (`age(x)` with
/// one argument counts from today; a statement merely containing `age(` is bound each
/// time, which costs only its planning).
const CLOCK_FUNCTIONS: &[&str] = &[
    "now(",
    "current_date",
    "current_timestamp",
    "localtimestamp",
    "today(",
    "transaction_timestamp",
    "statement_timestamp",
    "get_current_timestamp",
    "current_time",
    "localtime",
    "age(",
];

/// Plans a session keeps for [`Connection::execute_cached`].
const PLAN_CACHE_ENTRIES: usize = 64;

/// A session's plans by statement text (and parameter types), oldest first out.
#[derive(Default)]
pub(crate) struct PlanCache {
    entries: Vec<(String, PreparedStatement)>,
}

impl Connection {
    /// Runs a query through this session's plan cache: a statement run before (same
    /// text) runs its plan again, planned anew only when the catalog or the plan settings
    /// changed. Queries over table functions are never cached (see the module docs).
    pub fn execute_cached(&mut self, statement: &ast::Statement) -> Result<QueryResult> {
        self.execute_cached_with(statement, &[])
    }

    /// [`Connection::execute_cached`] for a statement with `$n` parameters: the plan is
    /// kept for the statement's text and the types of the values given.
    pub(crate) fn execute_cached_with(&mut self, statement: &ast::Statement, values: &[ScalarValue]) -> Result<QueryResult> {
        // Plans read the catalog's tables; a transaction's statements read its own view.
        if self.in_transaction() {
            return self.execute_unplanned(statement, values);
        }
        // A value's own type is the parameter's (as when a statement is bound with its
        // values); a NULL leaves it to the statement.
        let declared: Vec<Option<DataType>> = values.iter().map(|v| if v.is_null() { None } else { Some(v.data_type()) }).collect();
        let mut key = statement.to_string();
        if !declared.is_empty() {
            key.push_str(&format!("\u{0}{declared:?}"));
        }
        let position = self.plan_cache.entries.iter().position(|(text, _)| *text == key);
        let mut prepared = match position {
            Some(index) => self.plan_cache.entries.remove(index).1,
            None => {
                let mut prepared = PreparedStatement { statement: statement.clone(), declared, parameter_types: Vec::new(), plan: None };
                self.plan_prepared(&mut prepared)?;
                prepared
            }
        };
        let result = self.execute_prepared_with(&mut prepared, values);
        // Kept even without a plan: a statement that must be bound at every execution
        // (see the module docs) is not described and tried again each time.
        {
            if self.plan_cache.entries.len() >= PLAN_CACHE_ENTRIES {
                self.plan_cache.entries.remove(0);
            }
            self.plan_cache.entries.push((key, prepared));
        }
        result
    }

    /// Parses and plans one statement for [`Connection::execute_prepared`] (or, with
    /// `$n` parameters, [`Connection::execute_prepared_with`]); parameter types are
    /// inferred from the statement.
    pub fn prepare(&mut self, sql: &str) -> Result<PreparedStatement> {
        self.prepare_with_types(sql, &[])
    }

    /// [`Connection::prepare`] with the types of the first parameters given
    /// (`declared[i]` for `$i+1`; `None`: infer it).
    pub fn prepare_with_types(&mut self, sql: &str, declared: &[Option<DataType>]) -> Result<PreparedStatement> {
        let mut statements = parse_sql(sql)?;
        if statements.len() != 1 {
            return Err(ApiaryError::Parse(format!("a prepared statement must be one statement, not {}", statements.len())));
        }
        let statement = statements.remove(0);
        let mut prepared = PreparedStatement { statement, declared: declared.to_vec(), parameter_types: Vec::new(), plan: None };
        self.plan_prepared(&mut prepared)?;
        Ok(prepared)
    }

    /// Runs a prepared statement without parameter values (see
    /// [`Connection::execute_prepared_with`]).
    pub fn execute_prepared(&mut self, prepared: &mut PreparedStatement) -> Result<QueryResult> {
        self.execute_prepared_with(prepared, &[])
    }

    /// Runs a prepared statement whose `$n` takes `values[n-1]` (converted to the
    /// parameter's type). A query runs the plan it was prepared with, made again first
    /// if the catalog or the session's plan settings changed since.
    pub fn execute_prepared_with(&mut self, prepared: &mut PreparedStatement, values: &[ScalarValue]) -> Result<QueryResult> {
        if self.in_transaction() {
            return self.execute_unplanned(&prepared.statement, values);
        }
        if values.len() < prepared.parameter_types.len() {
            return Err(apiary_common::bind_err!(
                "the statement has {} parameters but was given {} values",
                prepared.parameter_types.len(),
                values.len()
            ));
        }
        let current = match &prepared.plan {
            Some(plan) => self.plan_is_current(plan),
            None => true,
        };
        if !current {
            self.plan_prepared(prepared)?;
        }
        let Some(plan) = &prepared.plan else {
            return self.execute_unplanned(&prepared.statement, values);
        };
        let (physical, logical) = match &plan.form {
            PlanForm::Physical(physical, logical) => (Some(Arc::clone(physical)), std::borrow::Cow::Borrowed(logical)),
            PlanForm::Generic(generic) => {
                (None, std::borrow::Cow::Owned(with_parameter_values(generic, values, self.settings.execution.time_zone)?))
            }
        };
        let (names, types) = (plan.names.clone(), plan.types.clone());
        let bypass_admission = plan.bypass_admission;
        self.begin_statement(&prepared.statement);
        if self.settings.shared_operators {
            if let Some(chunks) = crate::shared_operators::run_shared(self, &logical)? {
                return Ok(QueryResult::rows_result(names, types, chunks).in_time_zone(self.settings.execution.time_zone));
            }
        }
        let physical = match physical {
            Some(physical) => physical,
            None => {
                let threads = self.db.scheduler.threads();
                Arc::new(apiary_execution::plan_physical(&logical, &self.settings.execution, threads)?)
            }
        };
        let chunks = self.run_physical(physical, bypass_admission)?;
        // The sequence values the query took (`nextval`), as `execute_statement` does.
        self.db.log_sequences()?;
        Ok(QueryResult::rows_result(names, types, chunks).in_time_zone(self.settings.execution.time_zone))
    }

    /// Runs a statement that keeps no plan: bound (with its values) and run as usual.
    pub(crate) fn execute_unplanned(&mut self, statement: &ast::Statement, values: &[ScalarValue]) -> Result<QueryResult> {
        if values.is_empty() {
            return self.execute_statement(statement);
        }
        self.parameter_values = Some(values.to_vec());
        let result = self.execute_statement(statement);
        self.parameter_values = None;
        result
    }

    fn plan_is_current(&self, plan: &PreparedPlan) -> bool {
        plan.catalog_version == self.db.catalog.version()
            && plan.config == self.settings.execution
            && plan.threads == self.db.scheduler.threads()
            && plan.disabled_optimizers.iter().eq(self.settings.disabled_optimizers.iter())
    }

    /// Plans a prepared query (other statements keep no plan).
    fn plan_prepared(&mut self, prepared: &mut PreparedStatement) -> Result<()> {
        prepared.plan = None;
        // Only a statement with a `$` can have parameters; the others skip describing.
        let text = prepared.statement.to_string();
        prepared.parameter_types = if text.contains('$') || !prepared.declared.is_empty() {
            self.describe_statement(&prepared.statement, &prepared.declared)?.parameter_types
        } else {
            Vec::new()
        };
        let ast::Statement::Query(query) = &prepared.statement else {
            return Ok(());
        };
        // A function with an effect (apiary_cancel) runs when the statement is bound, so a
        // statement calling one is bound at every execution.
        let lowercase = text.to_ascii_lowercase();
        if lowercase.contains("apiary_cancel") {
            return Ok(());
        }
        // `now()`, `current_date`, ... are read when the statement is bound (one value per
        // statement), so a statement that reads the clock is bound at every execution.
        if CLOCK_FUNCTIONS.iter().any(|name| lowercase.contains(name)) {
            return Ok(());
        }
        let catalog_version = self.db.catalog.version();
        let (bound, plan) = if prepared.parameter_types.is_empty() {
            self.plan_query(query)?
        } else {
            match self.plan_query_with_parameter_slots(query, &prepared.parameter_types) {
                Ok(planned) => planned,
                // The statement needs its values to be bound (see the module docs); an
                // error in it shows when it is bound with them.
                Err(_) => return Ok(()),
            }
        };
        if !self.reads_only_catalog_tables(&plan) {
            return Ok(());
        }
        let types = plan.output().iter().map(|c| c.data_type).collect();
        let threads = self.db.scheduler.threads();
        let bypass_admission = self.query_meta(&plan).bypass_admission;
        let form = if prepared.parameter_types.is_empty() {
            PlanForm::Physical(Arc::new(apiary_execution::plan_physical(&plan, &self.settings.execution, threads)?), plan)
        } else {
            PlanForm::Generic(plan)
        };
        prepared.plan = Some(PreparedPlan {
            form,
            names: bound.names,
            types,
            catalog_version,
            config: self.settings.execution.clone(),
            disabled_optimizers: self.settings.disabled_optimizers.iter().cloned().collect(),
            threads,
            bypass_admission,
        });
        Ok(())
    }
}

/// `generic` with each `$n` replaced by the literal of `values[n-1]` and the expressions
/// that became constant folded, so the physical planner sees literals (block pruning and
/// specialised comparison kernels work as for a query written with the values).
fn with_parameter_values(generic: &LogicalPlan, values: &[ScalarValue], time_zone: apiary_types::TimeZone) -> Result<LogicalPlan> {
    let evaluator = KernelEvaluator { time_zone };
    let ctx = OptimizerContext::new(0, &evaluator);
    let mut failure = None;
    let plan = generic.clone().map_expressions(&mut |expr| {
        if !expr.contains_parameter() {
            return expr;
        }
        match expr.clone().bind_parameters(values, &time_zone) {
            Ok(bound) => apiary_optimizer::rules::fold_constants::fold(bound, &ctx),
            Err(err) => {
                failure.get_or_insert(err);
                expr
            }
        }
    });
    match failure {
        Some(err) => Err(err),
        None => Ok(plan),
    }
}
