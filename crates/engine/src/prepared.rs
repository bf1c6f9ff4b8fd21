//! Prepared statements: parsed and planned once, run many times.
//!
//! A query's physical plan is immutable (each run gets a fresh
//! [`ExecutionState`](apiary_execution::ExecutionState) and scans the table snapshots of
//! the moment it starts), so a prepared query keeps its plan and every execution only
//! runs it: no parsing, binding, optimizing or physical planning. The plan is made again
//! when it may no longer fit: after a CREATE or DROP (the catalog version changed), or
//! when the session changed a setting that shapes plans (`vector_size`, `simd`,
//! `disabled_optimizers`, `threads`, ...). A query over a table function
//! (`read_csv`, `apiary_queries()`) is planned at every execution, since the function is
//! read when the query is bound. Other statements are kept parsed and run as usual.

use std::sync::Arc;

use apiary_common::{ApiaryError, Result};
use apiary_execution::{ExecutionConfig, PhysicalPlan};
use apiary_sql::parser::parse_sql;
use apiary_types::DataType;
use sqlparser::ast;

use crate::connection::Connection;
use crate::result::QueryResult;

/// A statement ready to run many times (see [`Connection::prepare`]).
pub struct PreparedStatement {
    statement: ast::Statement,
    plan: Option<PreparedPlan>,
}

/// A query's plan and what it was made under.
struct PreparedPlan {
    physical: Arc<PhysicalPlan>,
    names: Vec<String>,
    types: Vec<DataType>,
    catalog_version: u64,
    config: ExecutionConfig,
    disabled_optimizers: Vec<String>,
    threads: usize,
    /// Skips admission control (see `Connection::query_meta`).
    bypass_admission: bool,
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
}

/// Plans a session keeps for [`Connection::execute_cached`].
const PLAN_CACHE_ENTRIES: usize = 64;

/// A session's plans by statement text, oldest first out.
#[derive(Default)]
pub(crate) struct PlanCache {
    entries: Vec<(String, PreparedStatement)>,
}

impl Connection {
    /// Runs a query through this session's plan cache: a statement run before (same
    /// text) runs its plan again, planned anew only when the catalog or the plan settings
    /// changed. Queries over table functions are never cached (see the module docs).
    pub fn execute_cached(&mut self, statement: &ast::Statement) -> Result<QueryResult> {
        let key = statement.to_string();
        let position = self.plan_cache.entries.iter().position(|(text, _)| *text == key);
        let mut prepared = match position {
            Some(index) => self.plan_cache.entries.remove(index).1,
            None => {
                let mut prepared = PreparedStatement { statement: statement.clone(), plan: None };
                self.plan_prepared(&mut prepared)?;
                prepared
            }
        };
        let result = self.execute_prepared(&mut prepared);
        if prepared.is_planned() {
            if self.plan_cache.entries.len() >= PLAN_CACHE_ENTRIES {
                self.plan_cache.entries.remove(0);
            }
            self.plan_cache.entries.push((key, prepared));
        }
        result
    }

    /// Parses and plans one statement for [`Connection::execute_prepared`].
    pub fn prepare(&mut self, sql: &str) -> Result<PreparedStatement> {
        let mut statements = parse_sql(sql)?;
        if statements.len() != 1 {
            return Err(ApiaryError::Parse(format!("a prepared statement must be one statement, not {}", statements.len())));
        }
        let statement = statements.remove(0);
        let mut prepared = PreparedStatement { statement, plan: None };
        self.plan_prepared(&mut prepared)?;
        Ok(prepared)
    }

    /// Runs a prepared statement; a query runs the plan it was prepared with (made again
    /// first if the catalog or the session's plan settings changed since).
    pub fn execute_prepared(&mut self, prepared: &mut PreparedStatement) -> Result<QueryResult> {
        let current = match &prepared.plan {
            Some(plan) => self.plan_is_current(plan),
            None => true,
        };
        if !current {
            self.plan_prepared(prepared)?;
        }
        let Some(plan) = &prepared.plan else {
            return self.execute_statement(&prepared.statement);
        };
        let (physical, names, types) = (Arc::clone(&plan.physical), plan.names.clone(), plan.types.clone());
        let bypass_admission = plan.bypass_admission;
        self.begin_statement(&prepared.statement);
        let chunks = self.run_physical(physical, bypass_admission)?;
        Ok(QueryResult::rows_result(names, types, chunks))
    }

    fn plan_is_current(&self, plan: &PreparedPlan) -> bool {
        plan.catalog_version == self.db.catalog.version()
            && plan.config == self.settings.execution
            && plan.threads == self.db.scheduler.threads()
            && plan.disabled_optimizers.iter().eq(self.settings.disabled_optimizers.iter())
    }

    /// Plans a prepared query (other statements keep no plan).
    fn plan_prepared(&mut self, prepared: &mut PreparedStatement) -> Result<()> {
        let ast::Statement::Query(query) = &prepared.statement else {
            prepared.plan = None;
            return Ok(());
        };
        let catalog_version = self.db.catalog.version();
        let (bound, plan) = self.plan_query(query)?;
        // A function with an effect (apiary_cancel) runs when the statement is bound, so a
        // statement calling one is bound at every execution.
        let has_effects = query.to_string().to_ascii_lowercase().contains("apiary_cancel");
        if has_effects || !self.reads_only_catalog_tables(&plan) {
            prepared.plan = None;
            return Ok(());
        }
        let types = plan.output().iter().map(|c| c.data_type).collect();
        let threads = self.db.scheduler.threads();
        let physical = Arc::new(apiary_execution::plan_physical(&plan, &self.settings.execution, threads)?);
        prepared.plan = Some(PreparedPlan {
            physical,
            names: bound.names,
            types,
            catalog_version,
            config: self.settings.execution.clone(),
            disabled_optimizers: self.settings.disabled_optimizers.iter().cloned().collect(),
            threads,
            bypass_admission: self.query_meta(&plan).bypass_admission,
        });
        Ok(())
    }
}
