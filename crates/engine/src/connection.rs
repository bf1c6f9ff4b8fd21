//! Connections: run SQL statements.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use apiary_common::{bind_err, internal_err, not_impl_err, ApiaryError, Result};
use apiary_execution::{execute, plan_physical, KernelEvaluator, QueryMeta, SchedulingPolicy};
use apiary_optimizer::{optimize, OptimizerContext, RuleReport};
use apiary_sql::binder::{convert_data_type, normalize_ident, object_name_to_table};
use apiary_sql::parser::parse_sql;
use apiary_sql::{Binder, BoundStatement, LogicalPlan};
use apiary_storage::{PreparedAppend, Table, View};
use apiary_types::{DataChunk, DataType, Field, ScalarValue, Schema, StrColumnBuilder, Vector, VectorData};
use sqlparser::ast;

use crate::database::{Change, DatabaseInner};
use crate::result::QueryResult;
use crate::settings::Settings;
use crate::table_functions::EngineTableFunctions;

/// Largest accepted `SET threads`.
const MAX_THREADS: usize = 1024;

/// A session: runs statements with its own settings against the shared database.
pub struct Connection {
    pub(crate) db: Arc<DatabaseInner>,
    pub(crate) settings: Settings,
    interrupted: Arc<AtomicBool>,
    /// Identifies the session in `apiary_queries()`.
    id: u64,
    /// The statement being run, as `apiary_queries()` shows it.
    current_sql: String,
    /// How many queries the last query shared its operators with, itself included (0: it
    /// ran alone).
    pub(crate) last_shared_with: std::sync::atomic::AtomicUsize,
    /// Plans of queries this session ran through `execute_cached`.
    pub(crate) plan_cache: crate::prepared::PlanCache,
    /// Who is connected (`current_user`, `pg_catalog`); set by the wire server.
    pub(crate) session: crate::pg_catalog::SessionInfo,
    /// The `$n` values of the statement running under [`Connection::execute_with_parameters`].
    pub(crate) parameter_values: Option<Vec<ScalarValue>>,
    /// What the last `read_csv(..., store_rejects = true)` skipped.
    pub(crate) rejects: std::sync::Mutex<crate::read_files::RejectLog>,
    /// Tables the embedding program provides (see `external.rs`).
    external_tables: Option<Arc<dyn crate::ExternalTables>>,
    /// The open transaction block, if any (see `transaction.rs`).
    pub(crate) transaction: Option<crate::transaction::Transaction>,
    /// FOREIGN KEY actions the running statement's writes call for (see
    /// `foreign_keys.rs`).
    pub(crate) referential_actions: std::collections::VecDeque<crate::foreign_keys::PendingAction>,
    /// This session's id for `currval` / `lastval` (see `apiary_storage::SessionValues`).
    sequence_session: u64,
    /// While a COMMIT checks FOREIGN KEYs again: the committing tables as they will be,
    /// read in place of the catalog's (see `recheck_foreign_keys`).
    pub(crate) commit_overlay: Option<std::collections::HashMap<String, Arc<Table>>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        apiary_storage::SessionValues::end_session(self.sequence_session);
    }
}

/// Statements longer than this are compiled on a thread with [`LARGE_STATEMENT_STACK`]:
/// a shorter one cannot nest deeper than the binder's expression limit (an operator
/// chain takes at least two bytes a level), so the caller's stack suffices.
const LARGE_STATEMENT_BYTES: usize = 2 * 1024;
const LARGE_STATEMENT_STACK: usize = 1 << 30;

impl Connection {
    pub(crate) fn new(db: Arc<DatabaseInner>) -> Self {
        let id = db.next_connection_id.fetch_add(1, Ordering::Relaxed);
        Connection {
            db,
            settings: Settings::default(),
            interrupted: Arc::new(AtomicBool::new(false)),
            session: crate::pg_catalog::SessionInfo::default(),
            parameter_values: None,
            rejects: Default::default(),
            external_tables: None,
            id,
            current_sql: String::new(),
            last_shared_with: Default::default(),
            plan_cache: Default::default(),
            transaction: None,
            referential_actions: Default::default(),
            sequence_session: apiary_storage::SessionValues::new_session(),
            commit_overlay: None,
        }
    }

    /// Sets what names in `FROM` that the catalog does not know are looked up in last:
    /// tables the embedding program provides (see [`crate::ExternalTables`]).
    pub fn set_external_tables(&mut self, tables: Option<Arc<dyn crate::ExternalTables>>) {
        self.external_tables = tables;
    }

    /// This session's id (the `connection` column of `apiary_queries()`).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Sets the user name `apiary_queries()` shows for this session's queries.
    pub fn set_user(&mut self, user: impl Into<String>) {
        self.session.user = user.into();
    }

    /// A handle that reports the progress of this session's running query from another
    /// thread (the shell's progress bar).
    pub fn progress_handle(&self) -> crate::ProgressHandle {
        crate::ProgressHandle { db: Arc::clone(&self.db), connection: self.id }
    }

    /// A new statement starts: a Ctrl-C from before does not cancel it.
    pub(crate) fn begin_statement(&mut self, statement: &ast::Statement) {
        self.interrupted.store(false, Ordering::Relaxed);
        self.current_sql = statement.to_string();
        self.last_shared_with.store(0, Ordering::Relaxed);
    }

    /// Runs a physical plan (a prepared query's) and returns its result chunks.
    pub(crate) fn run_physical(&self, physical: Arc<apiary_execution::PhysicalPlan>, bypass_admission: bool) -> Result<Vec<DataChunk>> {
        let meta = QueryMeta { bypass_admission, ..self.query_meta_base() };
        let state = self.db.scheduler.run(Arc::clone(&physical), self.settings.execution.clone(), Arc::clone(&self.interrupted), meta)?;
        Ok(physical.result.result(&state)?.as_ref().clone())
    }

    fn query_meta_base(&self) -> QueryMeta {
        QueryMeta {
            connection: self.id,
            user: self.session.user.clone(),
            sql: self.current_sql.clone(),
            priority: self.settings.priority,
            queue_timeout: self.settings.queue_timeout,
            bypass_admission: false,
        }
    }

    /// What the scheduler is told about `plan`, which this session runs now.
    pub(crate) fn query_meta(&self, plan: &LogicalPlan) -> QueryMeta {
        QueryMeta { bypass_admission: self.reads_only_small_engine_tables(plan), ..self.query_meta_base() }
    }

    /// Whether every table `plan` scans is in the catalog (none is the result of a table
    /// function, which is read when the statement is bound).
    pub(crate) fn reads_only_catalog_tables(&self, plan: &LogicalPlan) -> bool {
        self.scanned_tables(plan).iter().all(|(_, in_catalog)| *in_catalog)
    }

    /// Whether `plan` reads no catalog table and only small temporary ones (the engine's
    /// own tables such as `apiary_queries()`): such a query skips the admission queue.
    fn reads_only_small_engine_tables(&self, plan: &LogicalPlan) -> bool {
        const SMALL_ROWS: usize = 100_000;
        self.scanned_tables(plan).iter().all(|(table, in_catalog)| !in_catalog && table.row_estimate() <= SMALL_ROWS)
    }

    /// The tables `plan` scans, each with whether it is the catalog's table of that name
    /// (else the result of a table function, read when the statement was bound).
    fn scanned_tables(&self, plan: &LogicalPlan) -> Vec<(Arc<Table>, bool)> {
        let mut tables = Vec::new();
        let mut pending = vec![plan];
        while let Some(node) = pending.pop() {
            if let LogicalPlan::Scan(scan) = node {
                let in_catalog = self.db.catalog.holds(&scan.table);
                tables.push((Arc::clone(&scan.table), in_catalog));
            }
            pending.extend(node.children());
        }
        tables
    }

    pub(crate) fn db(&self) -> &Arc<DatabaseInner> {
        &self.db
    }

    /// How many queries the last statement shared a scan, its selection and its
    /// aggregation with (`SET shared_operators`), itself included; 0 when it ran alone.
    pub fn last_statement_shared_with(&self) -> usize {
        self.last_shared_with.load(Ordering::Relaxed)
    }

    /// The text of the statement running now.
    pub(crate) fn current_sql(&self) -> &str {
        &self.current_sql
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The database's number of worker threads (`SET threads`).
    pub fn threads(&self) -> usize {
        self.db.scheduler.threads()
    }

    /// Sets the session's time zone by name, as `SET TimeZone = name` (the wire server
    /// applies a client's start-up `TimeZone` so).
    pub fn set_time_zone(&mut self, name: &str) -> Result<()> {
        self.settings.set("timezone", name)
    }

    /// A flag that cancels the running statement when set (e.g. from a Ctrl-C handler).
    pub fn interrupt_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.interrupted)
    }

    /// Runs every statement in `sql`, stopping at the first error.
    pub fn execute(&mut self, sql: &str) -> Result<Vec<QueryResult>> {
        // Parsing, binding and planning recurse over the statement's syntax tree, and so
        // does dropping it: a long statement (generated SQL: thousands of operators or
        // UNION branches) runs on a thread with a large stack (reserved address space,
        // touched only as deep as needed), whatever thread called us.
        if sql.len() > LARGE_STATEMENT_BYTES {
            return std::thread::scope(|scope| {
                std::thread::Builder::new()
                    .name("apiary-large-statement".to_string())
                    .stack_size(LARGE_STATEMENT_STACK)
                    .spawn_scoped(scope, || self.execute_here(sql))
                    .map_err(|e| ApiaryError::Resource(format!("cannot start a thread for a large statement: {e}")))?
                    .join()
                    .map_err(|panic| {
                        internal_err!("planning a large statement panicked: {}", apiary_common::error::panic_message(panic.as_ref()))
                    })?
            });
        }
        self.execute_here(sql)
    }

    fn execute_here(&mut self, sql: &str) -> Result<Vec<QueryResult>> {
        let statements = parse_sql(sql)?;
        let mut results = Vec::with_capacity(statements.len());
        for statement in &statements {
            results.push(self.execute_statement(statement)?);
        }
        Ok(results)
    }

    /// Runs `sql` and returns the result of its last statement.
    pub fn query(&mut self, sql: &str) -> Result<QueryResult> {
        self.execute(sql)?.pop().ok_or_else(|| ApiaryError::Parse("empty statement".to_string()))
    }

    /// Runs one parsed statement.
    pub fn execute_statement(&mut self, statement: &ast::Statement) -> Result<QueryResult> {
        self.begin_statement(statement);
        // A panic is a bug; report it as an error instead of taking the caller down.
        let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let result = self.transaction_control(statement).unwrap_or_else(|| self.dispatch(statement))?;
            // The sequence values the statement took (a write logged them with its rows).
            self.db.log_sequences()?;
            Ok(result)
        })) {
            // The result shows TIMESTAMPTZ values in the zone in force after the
            // statement (a `SET TimeZone` applies to what follows it).
            Ok(result) => result.map(|r| r.in_time_zone(self.settings.execution.time_zone)),
            Err(payload) => Err(internal_err!("{}", apiary_common::error::panic_message(payload.as_ref()))),
        };
        // An error inside a transaction block aborts the block (PostgreSQL).
        if result.is_err() {
            self.statement_failed();
        }
        result
    }

    fn dispatch(&mut self, statement: &ast::Statement) -> Result<QueryResult> {
        use ast::Statement as S;
        match statement {
            S::Query(query) => self.run_query(query),
            // DuckDB's DESCRIBE SELECT ...: the query's columns, not its plan.
            S::Explain { describe_alias: ast::DescribeAlias::Describe | ast::DescribeAlias::Desc, analyze: false, statement, .. }
                if matches!(statement.as_ref(), S::Query(_)) =>
            {
                self.describe_query(statement)
            }
            S::Explain { analyze, verbose, statement, .. } => self.explain(statement, *analyze, *verbose),
            S::CreateTable(create) => self.create_table(create),
            S::Insert(insert) => self.write_statement(statement, |c| c.insert(insert)),
            S::Delete(delete) => self.write_statement(statement, |c| c.delete(delete)),
            S::Update(update) => self.write_statement(statement, |c| c.update(update)),
            S::Merge(merge) => self.write_statement(statement, |c| c.merge(merge)),
            S::AlterTable(alter) => self.alter_table(alter),
            S::Truncate(truncate) => self.truncate(truncate),
            S::Copy { source, to, target, options, legacy_options, values } => {
                if !values.is_empty() || !legacy_options.is_empty() {
                    return Err(not_impl_err!("COPY with inline data or legacy options"));
                }
                crate::copy::copy(self, source, *to, target, options)
            }
            S::Drop { object_type, if_exists, names, cascade, temporary: false, purge: false, table: None, .. } => {
                self.drop(*object_type, *if_exists, names, *cascade)
            }
            S::CreateView(create) => self.create_view(create),
            S::CreateSequence { .. } => self.create_sequence(statement),
            S::CreateIndex(create) => self.create_index(create),
            S::Set(set) => self.set(set),
            S::Reset(reset) => self.reset(reset),
            S::ShowTables { .. } => self.show_tables(),
            S::ExplainTable { table_name, .. } => self.describe(table_name),
            S::ShowVariable { variable } => self.show_variable(variable),
            S::Call(function) if function.name.to_string().eq_ignore_ascii_case(apiary_sql::parser::ALTER_SEQUENCE_CALL) => {
                self.alter_sequence(function)
            }
            S::Call(function) if apiary_sql::parser::is_checkpoint(function) => {
                self.db.checkpoint()?;
                Ok(QueryResult::statement(None))
            }
            S::Call(function) if function.name.to_string().eq_ignore_ascii_case("dbgen") => {
                let sf = dbgen_scale_factor(function)?;
                // Loading replaces the TPC-H tables; a CALL must not drop a user's data.
                if let Some(existing) = crate::tpch::TABLES.iter().find(|t| self.catalog().get_table(t).is_some()) {
                    return Err(ApiaryError::Duplicate(format!(
                        "dbgen: table \"{existing}\" already exists (drop the TPC-H tables first)"
                    )));
                }
                crate::tpch::load(self, sf)?;
                Ok(QueryResult::statement(None))
            }
            other => Err(not_impl_err!("statement {}", other.to_string().split_whitespace().take(3).collect::<Vec<_>>().join(" "))),
        }
    }

    pub(crate) fn table_functions(&self) -> EngineTableFunctions<'_> {
        EngineTableFunctions {
            threads: self.db.scheduler.threads(),
            pool: &self.db.pool,
            block_rows: self.settings.block_rows,
            catalog: self.catalog(),
            scheduler: &self.db.scheduler,
            effects: true,
            session: &self.session,
            rejects: &self.rejects,
            time_zone: self.settings.execution.time_zone,
            external: self.external_tables.as_deref(),
        }
    }

    /// Binds, optimizes: the plan ready for execution.
    pub(crate) fn plan_query(&self, query: &ast::Query) -> Result<(BoundStatement, LogicalPlan)> {
        let (bound, plan, _) = self.plan_query_with_reports(query)?;
        Ok((bound, plan))
    }

    /// The optimizer rules not to run: those of `SET disabled_optimizers`, and with `SET
    /// shared_operators = on` eager aggregation, whose split aggregation over the joins
    /// would no longer match the join-and-aggregate templates that queries share by.
    fn disabled_rules(&self) -> std::collections::HashSet<String> {
        let mut disabled: std::collections::HashSet<String> = self.settings.disabled_optimizers.iter().cloned().collect();
        if self.settings.shared_operators {
            disabled.insert("eager_aggregation".to_string());
        }
        disabled
    }

    pub(crate) fn optimize_plan(&self, plan: LogicalPlan, next_column_id: u32) -> Result<LogicalPlan> {
        let evaluator = KernelEvaluator { time_zone: self.settings.execution.time_zone };
        let mut ctx = OptimizerContext::new(next_column_id, &evaluator);
        ctx.disabled = self.disabled_rules();
        Ok(optimize(plan, &mut ctx)?.0)
    }

    /// A binder for this connection's statement (with its `$n` values, if any).
    pub(crate) fn binder<'a>(&'a self, functions: &'a EngineTableFunctions<'a>) -> Binder<'a> {
        let mut binder = Binder::new(self.catalog(), functions);
        if let Some(values) = &self.parameter_values {
            binder = binder.with_parameter_values(values.clone());
        }
        binder.block_rows = self.settings.block_rows;
        binder.session = self.sequence_session;
        binder.time_zone = self.settings.execution.time_zone;
        if let Some(transaction) = &self.transaction {
            binder = binder.with_tables(transaction.tables());
        }
        if let Some(overlay) = &self.commit_overlay {
            binder = binder.with_tables(overlay.clone());
        }
        binder
    }

    /// Binds and optimizes a query whose `$n` are slots of the given types (a plan made
    /// once for many executions; see `prepared.rs`).
    pub(crate) fn plan_query_with_parameter_slots(
        &self,
        query: &ast::Query,
        parameter_types: &[DataType],
    ) -> Result<(BoundStatement, LogicalPlan)> {
        let functions = self.table_functions();
        let mut binder = Binder::new(self.catalog(), &functions).with_parameter_slots(parameter_types.to_vec());
        binder.block_rows = self.settings.block_rows;
        binder.session = self.sequence_session;
        binder.time_zone = self.settings.execution.time_zone;
        let bound = binder.bind_query(query)?;
        let plan = self.optimize_plan(bound.plan.clone(), bound.next_column_id)?;
        Ok((bound, plan))
    }

    /// Binds and optimizes a query; also returns what each optimizer rule did.
    fn plan_query_with_reports(&self, query: &ast::Query) -> Result<(BoundStatement, LogicalPlan, Vec<RuleReport>)> {
        let functions = self.table_functions();
        let mut binder = self.binder(&functions);
        binder.block_rows = self.settings.block_rows;
        let bound = binder.bind_query(query)?;
        let evaluator = KernelEvaluator { time_zone: self.settings.execution.time_zone };
        let mut ctx = OptimizerContext::new(bound.next_column_id, &evaluator);
        ctx.disabled = self.disabled_rules();
        let (plan, reports) = optimize(bound.plan.clone(), &mut ctx)?;
        Ok((bound, plan, reports))
    }

    /// Runs an optimized plan; returns its result chunks.
    pub(crate) fn run_plan(&self, plan: &LogicalPlan) -> Result<Vec<DataChunk>> {
        let (chunks, _, _) =
            execute(&self.db.scheduler, plan, &self.settings.execution, Arc::clone(&self.interrupted), self.query_meta(plan))?;
        Ok(chunks)
    }

    fn run_query(&mut self, query: &ast::Query) -> Result<QueryResult> {
        let planning = crate::shared_operators::Planning::start(&self.db.shared_groups);
        let planned = self.plan_query(query);
        drop(planning);
        let (bound, plan) = planned?;
        let types = plan.output().iter().map(|c| c.data_type).collect();
        // A transaction's statements read their own versions of the tables, which no other
        // query shares.
        let shared =
            if self.settings.shared_operators && !self.in_transaction() { crate::shared_operators::run_shared(self, &plan)? } else { None };
        let chunks = match shared {
            Some(chunks) => chunks,
            None => self.run_plan(&plan)?,
        };
        Ok(QueryResult::rows_result(bound.names, types, chunks))
    }

    fn explain(&mut self, statement: &ast::Statement, analyze: bool, verbose: bool) -> Result<QueryResult> {
        let ast::Statement::Query(query) = statement else {
            return Err(not_impl_err!("EXPLAIN of statements other than queries"));
        };
        let (bound, plan, reports) = self.plan_query_with_reports(query)?;
        let mut lines: Vec<String> = Vec::new();
        // Which rules changed the plan, so an optimizer change shows in EXPLAIN output.
        let changed: Vec<&str> = reports.iter().filter(|r| r.changed).map(|r| r.rule).collect();
        lines.push(format!(
            "Optimizer rules that changed the plan: {}",
            if changed.is_empty() { "none".to_string() } else { changed.join(", ") }
        ));
        if verbose {
            lines.push("Bound logical plan:".to_string());
            lines.extend(bound.plan.display_indent().lines().map(|l| format!("    {l}")));
            lines.push("Optimized logical plan:".to_string());
            lines.extend(plan.display_indent().lines().map(|l| format!("    {l}")));
            lines.push("Physical plan:".to_string());
        }
        if analyze {
            let started = std::time::Instant::now();
            let (_, executed, state) =
                execute(&self.db.scheduler, &plan, &self.settings.execution, Arc::clone(&self.interrupted), self.query_meta(&plan))?;
            let elapsed = started.elapsed();
            lines.push(format!("Total time: {:.3} ms, threads: {}", elapsed.as_secs_f64() * 1e3, self.db.scheduler.threads()));
            let shared_with = state.shared_with();
            if !shared_with.is_empty() {
                let ids: Vec<String> = shared_with.iter().map(u64::to_string).collect();
                lines.push(format!("Scans read blocks together with queries {} (apiary_queries ids)", ids.join(", ")));
            }
            let last_feeder = |sink: usize| executed.pipelines.iter().rposition(|p| p.sink_id == sink);
            for (idx, pipeline) in executed.pipelines.iter().enumerate() {
                lines.extend(pipeline.analyze(idx, self.settings.execution.staging, &state));
                if last_feeder(pipeline.sink_id) == Some(idx) {
                    lines.extend(state.sink_stats[pipeline.sink_id].analyze());
                }
            }
        } else {
            match plan_physical(&plan, &self.settings.execution, self.db.scheduler.threads()) {
                Ok(physical) => lines.extend(physical.explain.lines().map(str::to_string)),
                // VERBOSE still shows the logical plans of a query that cannot be planned.
                Err(e) if verbose => lines.push(format!("    error: {e}")),
                Err(e) => return Err(e),
            }
        }
        Ok(text_result("explain", lines))
    }

    fn create_table(&mut self, create: &ast::CreateTable) -> Result<QueryResult> {
        let name = object_name_to_table(&create.name)?;
        if self.catalog().get_table(&name).is_some() || self.catalog().get_view(&name).is_some() {
            if create.if_not_exists {
                return Ok(QueryResult::statement(None));
            }
            if self.catalog().get_view(&name).is_some() {
                return Err(ApiaryError::Duplicate(format!("relation \"{name}\" already exists (a view)")));
            }
            return Err(ApiaryError::Duplicate(format!("table \"{name}\" already exists")));
        }
        if let Some(query) = &create.query {
            if !create.columns.is_empty() {
                return Err(not_impl_err!("CREATE TABLE with both columns and AS query"));
            }
            let (bound, plan) = self.plan_query(query)?;
            let output = plan.output();
            let mut fields = Vec::new();
            for (name, column) in bound.names.iter().zip(&output) {
                if fields.iter().any(|f: &Field| f.name == *name) {
                    return Err(bind_err!("column \"{name}\" specified more than once in CREATE TABLE AS"));
                }
                let data_type = if column.data_type == DataType::Null { DataType::Integer } else { column.data_type };
                fields.push(Field::new(name.clone(), data_type, true));
            }
            let chunks = self.run_plan(&plan)?;
            let table = Arc::new(Table::new(name, Schema::new(fields), self.settings.block_rows).packed(self.settings.packed_blocks));
            let prepared = prepare_append(&table, chunks)?;
            let rows = self.commit_change(Change::Create(Arc::clone(&table), Some(prepared)))?;
            return Ok(QueryResult::statement(Some(rows)));
        }
        if create.columns.is_empty() {
            return Err(bind_err!("CREATE TABLE needs at least one column"));
        }
        let key_names = |columns: &[ast::IndexColumn], what: &str| -> Result<Vec<String>> {
            columns
                .iter()
                .map(|column| match &column.column.expr {
                    ast::Expr::Identifier(ident) => Ok(normalize_ident(ident)),
                    other => Err(not_impl_err!("{what} on expression {other}")),
                })
                .collect()
        };
        let mut primary_key: Vec<String> = Vec::new();
        let mut unique_names: Vec<Vec<String>> = Vec::new();
        let mut declared_checks = Vec::new();
        let mut declared_keys = Vec::new();
        for constraint in &create.constraints {
            match constraint {
                ast::TableConstraint::PrimaryKey(pk) => primary_key.extend(key_names(&pk.columns, "PRIMARY KEY")?),
                ast::TableConstraint::Unique(unique) => unique_names.push(key_names(&unique.columns, "UNIQUE")?),
                ast::TableConstraint::Check(check) if check.enforced != Some(false) => {
                    declared_checks.push(crate::constraints::DeclaredCheck { name: check.name.as_ref(), column: None, expr: &check.expr })
                }
                ast::TableConstraint::ForeignKey(key) => declared_keys.push(crate::foreign_keys::declared(key, None, None)?),
                other => return Err(not_impl_err!("table constraint {other}")),
            }
        }
        let mut defaults: Vec<Option<String>> = Vec::with_capacity(create.columns.len());
        let mut fields: Vec<Field> = Vec::new();
        let mut sequences: Vec<apiary_storage::OwnedSequence> = Vec::new();
        for column in &create.columns {
            let column_name = normalize_ident(&column.name);
            if fields.iter().any(|f| f.name == column_name) {
                return Err(bind_err!("column \"{column_name}\" specified more than once"));
            }
            let serial = crate::sequences::serial_type(&column.data_type);
            let data_type = match serial {
                Some(data_type) => data_type,
                None => convert_data_type(&column.data_type)?,
            };
            let mut nullable = true;
            let mut default = None;
            // SERIAL, or GENERATED ... AS IDENTITY [(options)]: a sequence the column owns.
            let mut identity: Option<(bool, &[ast::SequenceOptions])> = serial.map(|_| (false, &[][..]));
            for option in &column.options {
                match &option.option {
                    ast::ColumnOption::Generated {
                        generated_as: generated_as @ (ast::GeneratedAs::Always | ast::GeneratedAs::ByDefault),
                        sequence_options,
                        generation_expr: None,
                        ..
                    } => {
                        if identity.is_some() {
                            return Err(bind_err!(
                                "both a SERIAL type and identity, or two identities, specified for column \"{column_name}\""
                            ));
                        }
                        identity = Some((*generated_as == ast::GeneratedAs::Always, sequence_options.as_deref().unwrap_or_default()));
                    }
                    ast::ColumnOption::Generated { .. } => {
                        return Err(not_impl_err!("generated columns (GENERATED ALWAYS AS (expression))"))
                    }
                    ast::ColumnOption::ForeignKey(key) => {
                        declared_keys.push(crate::foreign_keys::declared(key, Some(&column_name), option.name.as_ref())?)
                    }
                    ast::ColumnOption::NotNull | ast::ColumnOption::PrimaryKey(_) => nullable = false,
                    ast::ColumnOption::Unique(_) => unique_names.push(vec![column_name.clone()]),
                    ast::ColumnOption::Null => {}
                    ast::ColumnOption::Default(expr) => {
                        if default.is_some() {
                            return Err(bind_err!("multiple default values specified for column \"{column_name}\" of table \"{name}\""));
                        }
                        default = Some(crate::constraints::default_text(expr)?);
                    }
                    ast::ColumnOption::Check(check) if check.enforced != Some(false) => {
                        declared_checks.push(crate::constraints::DeclaredCheck {
                            name: option.name.as_ref().or(check.name.as_ref()),
                            column: Some(column_name.clone()),
                            expr: &check.expr,
                        })
                    }
                    other => return Err(not_impl_err!("column option {other}")),
                }
            }
            if let Some((always, options)) = identity {
                if default.is_some() {
                    return Err(bind_err!("both default and identity specified for column \"{column_name}\" of table \"{name}\""));
                }
                let chosen: Vec<String> = sequences.iter().map(|o| o.sequence.name.clone()).collect();
                let sequence_name = crate::sequences::owned_sequence_name(self.catalog(), &name, &column_name, &chosen);
                let sequence = crate::sequences::column_sequence(sequence_name, options, data_type)?;
                default = Some(crate::sequences::nextval_default(&sequence.name));
                sequences.push(apiary_storage::OwnedSequence { column: fields.len(), sequence, always });
                nullable = false;
            }
            defaults.push(default);
            if primary_key.contains(&column_name) {
                nullable = false;
            }
            fields.push(Field::new(column_name, data_type, nullable));
        }
        let mut key_columns = Vec::new();
        for key in &primary_key {
            match fields.iter().position(|f| &f.name == key) {
                Some(position) => key_columns.push(position),
                None => return Err(bind_err!("column \"{key}\" named in key does not exist")),
            }
        }
        for (position, column) in create.columns.iter().enumerate() {
            if column.options.iter().any(|o| matches!(o.option, ast::ColumnOption::PrimaryKey(_))) {
                if !key_columns.is_empty() && !key_columns.contains(&position) {
                    return Err(bind_err!("multiple primary keys for table \"{name}\" are not allowed"));
                }
                if !key_columns.contains(&position) {
                    key_columns.push(position);
                }
            }
        }
        let mut unique = Vec::new();
        for names in &unique_names {
            let mut columns = Vec::new();
            for key in names {
                match fields.iter().position(|f| &f.name == key) {
                    Some(position) => columns.push(position),
                    None => return Err(bind_err!("column \"{key}\" named in key does not exist")),
                }
            }
            // A constraint the primary key (or an earlier UNIQUE) already enforces adds nothing.
            if columns != key_columns && !unique.contains(&columns) {
                unique.push(columns);
            }
        }
        let checks = crate::constraints::name_checks(&name, &declared_checks)?;
        let mut table = Table::new(name, Schema::new(fields), self.settings.block_rows)
            .packed(self.settings.packed_blocks)
            .with_primary_key(key_columns)
            .with_unique(unique)
            .with_defaults(defaults)
            .with_checks(checks)
            .with_sequences(sequences);
        table.foreign_keys = crate::foreign_keys::resolve(self.catalog(), &table, declared_keys)?;
        let table = Arc::new(table);
        self.validate_defaults_and_checks(&table)?;
        self.commit_change(Change::Create(table, None))?;
        Ok(QueryResult::statement(None))
    }

    /// `DROP TABLE` / `DROP VIEW` / `DROP SEQUENCE [IF EXISTS] names [CASCADE]`: all or
    /// none of them. A view that reads one of them makes it fail, unless CASCADE drops
    /// the view too.
    fn drop(&mut self, object_type: ast::ObjectType, if_exists: bool, names: &[ast::ObjectName], cascade: bool) -> Result<QueryResult> {
        let kind = match object_type {
            ast::ObjectType::Table => "table",
            ast::ObjectType::View => "view",
            ast::ObjectType::Sequence => "sequence",
            ast::ObjectType::Index if !cascade => return self.drop_index(names, if_exists),
            other => return Err(not_impl_err!("DROP {other}{}", if cascade { " ... CASCADE" } else { "" })),
        };
        // Check all first so a failing DROP of several drops none.
        let mut dropped = Vec::new();
        for name in names {
            let name = object_name_to_table(name)?;
            let catalog = self.catalog();
            let found = match (catalog.get_table(&name), catalog.get_view(&name), catalog.get_sequence(&name)) {
                (Some(_), ..) => "table",
                (_, Some(_), _) => "view",
                (.., Some(_)) if catalog.sequences().iter().any(|s| s.name == name) => "sequence",
                (.., Some(_)) => {
                    let owner = catalog.tables().into_iter().find(|t| t.sequences.iter().any(|o| o.sequence.name == name));
                    let owner = owner.map(|t| format!("table {}", t.name)).unwrap_or_default();
                    return Err(ApiaryError::Dependency(format!(
                        "cannot drop sequence {name} because a column of {owner} requires it (drop the column or the table)"
                    )));
                }
                _ if if_exists => continue,
                _ => return Err(ApiaryError::Catalog(format!("{kind} \"{name}\" does not exist"))),
            };
            if found != kind {
                let hint = format!("use DROP {} to remove a {found}", found.to_ascii_uppercase());
                return Err(ApiaryError::WrongObjectType(format!("\"{name}\" is not a {kind}: {hint}")));
            }
            dropped.push(name);
        }
        if !dropped.is_empty() {
            let (mut tables, mut views, mut sequences) = (Vec::new(), Vec::new(), Vec::new());
            match object_type {
                ast::ObjectType::Table => tables = dropped,
                ast::ObjectType::View => views = dropped,
                _ => sequences = dropped,
            }
            self.commit_change(Change::Drop { tables, views, sequences, cascade })?;
        }
        Ok(QueryResult::statement(None))
    }

    /// `CREATE [OR REPLACE] VIEW name [(columns)] AS query`: the query is bound now, as
    /// PostgreSQL checks it, which fixes the view's column names and types and the
    /// relations it reads; the catalog keeps its SQL text (see `apiary_storage::view`).
    fn create_view(&mut self, create: &ast::CreateView) -> Result<QueryResult> {
        let unsupported = if create.materialized {
            Some("CREATE MATERIALIZED VIEW")
        } else if create.temporary {
            Some("CREATE TEMPORARY VIEW")
        } else if create.or_alter || create.secure || create.to.is_some() || create.params.is_some() || !create.cluster_by.is_empty() {
            Some("this form of CREATE VIEW")
        } else if create.options != ast::CreateTableOptions::None || create.comment.is_some() || create.with_no_schema_binding {
            Some("options of CREATE VIEW")
        } else if create.columns.iter().any(|c| c.data_type.is_some() || c.options.is_some()) {
            Some("column types or options in CREATE VIEW's column list")
        } else {
            None
        };
        if let Some(what) = unsupported {
            return Err(not_impl_err!("{what}"));
        }
        let name = object_name_to_table(&create.name)?;
        if create.if_not_exists && (self.catalog().get_view(&name).is_some() || self.catalog().get_table(&name).is_some()) {
            return Ok(QueryResult::statement(None));
        }
        let query = apiary_sql::parser::printable_query(&create.query);
        let sql = query.to_string();
        // The text must read back as this query (it is parsed again at every use).
        let reparsed = parse_sql(&sql).ok();
        if !matches!(reparsed.as_deref(), Some([ast::Statement::Query(q)]) if **q == query) {
            return Err(internal_err!("the query of view \"{name}\" does not print as SQL that reads back as it: {sql}"));
        }
        // Bound without `$n` values: a view has no parameters.
        let functions = self.table_functions();
        let mut binder = Binder::new(self.catalog(), &functions);
        binder.block_rows = self.settings.block_rows;
        let bound = binder.bind_query(&create.query)?;
        let dependencies = binder.referenced_relations();
        if dependencies.contains(&name) {
            return Err(bind_err!("view \"{name}\" cannot read itself (directly or through other views)"));
        }
        let output = bound.plan.output();
        let aliases: Vec<String> = create.columns.iter().map(|c| normalize_ident(&c.name)).collect();
        if aliases.len() > output.len() {
            return Err(bind_err!(
                "CREATE VIEW specifies more column names ({}) than the query has columns ({})",
                aliases.len(),
                output.len()
            ));
        }
        let mut columns: Vec<Field> = Vec::with_capacity(output.len());
        for (position, (column, bound_name)) in output.iter().zip(&bound.names).enumerate() {
            let column_name = aliases.get(position).unwrap_or(bound_name).clone();
            if columns.iter().any(|f| f.name == column_name) {
                return Err(bind_err!("column \"{column_name}\" specified more than once in view \"{name}\" (name the columns apart)"));
            }
            // A NULL column is TEXT, as PostgreSQL's `unknown` becomes.
            let data_type = if column.data_type == DataType::Null { DataType::Varchar(None) } else { column.data_type };
            columns.push(Field::new(column_name, data_type, true));
        }
        let view = Arc::new(View::new(name, sql, columns, dependencies));
        self.commit_change(Change::CreateView { view, replace: create.or_replace })?;
        Ok(QueryResult::statement(None))
    }

    fn set(&mut self, set: &ast::Set) -> Result<QueryResult> {
        // `SET TIME ZONE value` (PostgreSQL's form without `=`).
        if let ast::Set::SetTimeZone { value, .. } = set {
            return self.set_time_zone_statement(value);
        }
        let ast::Set::SingleAssignment { variable, values, .. } = set else {
            return Err(not_impl_err!("this form of SET"));
        };
        let name = object_name_to_table(variable)?;
        if name == "timezone" {
            return match values.as_slice() {
                [value] => self.set_time_zone_statement(value),
                _ => Err(bind_err!("SET TimeZone needs exactly one value")),
            };
        }
        let value = match values.as_slice() {
            [ast::Expr::Value(v)] => match &v.value {
                ast::Value::Number(n, _) => n.clone(),
                ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => s.clone(),
                ast::Value::Boolean(b) => b.to_string(),
                other => return Err(bind_err!("unsupported value {other} for {name}")),
            },
            [ast::Expr::Identifier(ident)] if ident.value.eq_ignore_ascii_case("default") && ident.quote_style.is_none() => {
                return self.reset_setting(&name);
            }
            [ast::Expr::Identifier(ident)] => ident.value.clone(),
            _ => return Err(bind_err!("SET {name} needs exactly one value")),
        };
        if name == "threads" {
            let threads: usize = value.parse().map_err(|_| bind_err!("threads must be an integer, not '{value}'"))?;
            if threads == 0 || threads > MAX_THREADS {
                return Err(bind_err!("threads must be between 1 and {MAX_THREADS}"));
            }
            self.db.scheduler.set_threads(threads);
        } else if name == "max_concurrent_queries" {
            let limit: usize = value.parse().map_err(|_| bind_err!("max_concurrent_queries must be an integer, not '{value}'"))?;
            if limit == 0 || limit > 1 << 20 {
                return Err(bind_err!("max_concurrent_queries must be between 1 and {}", 1 << 20));
            }
            self.db.scheduler.set_max_concurrent_queries(Some(limit));
        } else if name == "scheduler_policy" {
            let policy = match value.to_ascii_lowercase().as_str() {
                "fair" => SchedulingPolicy::FairShare,
                "fifo" => SchedulingPolicy::Fifo,
                _ => return Err(bind_err!("scheduler_policy must be 'fair' or 'fifo', not '{value}'")),
            };
            self.db.scheduler.set_policy(policy);
        } else if name == "memory_limit" {
            let limit = crate::settings::parse_byte_size(&name, &value)?;
            let tables = self.db.pool.table_bytes() + self.db.pool.index_bytes();
            if limit < tables {
                return Err(ApiaryError::Resource(format!(
                    "memory_limit {} is less than the {} the in-memory tables and the indexes hold",
                    apiary_storage::pool::format_bytes(limit),
                    apiary_storage::pool::format_bytes(tables)
                )));
            }
            self.db.pool.set_limit(limit);
        } else {
            self.settings.set(&name, &value)?;
        }
        Ok(QueryResult::statement(None))
    }

    /// `SET TimeZone = value` / `SET TIME ZONE value`: a zone name, a number of hours
    /// east of UTC (`-8`), an INTERVAL (`INTERVAL '+05:30' HOUR TO MINUTE`), or `LOCAL`
    /// / `DEFAULT` (UTC).
    fn set_time_zone_statement(&mut self, value: &ast::Expr) -> Result<QueryResult> {
        let invalid = || bind_err!("invalid value for parameter \"TimeZone\": \"{value}\"");
        let text = match value {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => n.clone(),
                ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => s.clone(),
                _ => return Err(invalid()),
            },
            ast::Expr::UnaryOp { op: ast::UnaryOperator::Minus, expr } => match expr.as_ref() {
                ast::Expr::Value(ast::ValueWithSpan { value: ast::Value::Number(n, _), .. }) => format!("-{n}"),
                _ => return Err(invalid()),
            },
            ast::Expr::Identifier(ident)
                if ident.quote_style.is_none()
                    && (ident.value.eq_ignore_ascii_case("local") || ident.value.eq_ignore_ascii_case("default")) =>
            {
                return self.reset_setting("timezone");
            }
            ast::Expr::Identifier(ident) => ident.value.clone(),
            ast::Expr::Interval(interval) => {
                // An interval is an offset east of UTC; it may have no days or months.
                let text = match interval.value.as_ref() {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::SingleQuotedString(s) => s.clone(),
                        _ => return Err(invalid()),
                    },
                    _ => return Err(invalid()),
                };
                let unit = interval.leading_field.as_ref().map(|f| f.to_string());
                let parsed = apiary_types::Interval::parse(&text, unit.as_deref()).ok_or_else(invalid)?;
                let seconds = parsed.micros / 1_000_000;
                if parsed.months != 0 || parsed.days != 0 || seconds.abs() >= 16 * 3600 {
                    return Err(invalid());
                }
                let (zone, shown) = apiary_types::TimeZone::fixed_with_posix_name(seconds as i32);
                self.settings.execution.time_zone = zone;
                self.settings.time_zone_name = shown;
                return Ok(QueryResult::statement(None));
            }
            _ => return Err(invalid()),
        };
        self.settings.set("timezone", &text)?;
        Ok(QueryResult::statement(None))
    }

    /// `RESET name` / `RESET ALL`: back to the defaults a new connection gets.
    fn reset(&mut self, reset: &ast::ResetStatement) -> Result<QueryResult> {
        match &reset.reset {
            ast::Reset::ALL => {
                self.settings = Settings::default();
                self.db.scheduler.set_threads(crate::database::default_threads());
                self.db.scheduler.set_max_concurrent_queries(None);
                self.db.scheduler.set_policy(SchedulingPolicy::FairShare);
                self.db.pool.set_limit(apiary_storage::pool::default_memory_limit());
                Ok(QueryResult::statement(None))
            }
            ast::Reset::ConfigurationParameter(name) => {
                let name = object_name_to_table(name)?;
                self.reset_setting(&name)
            }
            ast::Reset::SessionAuthorization => Err(not_impl_err!("RESET SESSION AUTHORIZATION")),
        }
    }

    fn reset_setting(&mut self, name: &str) -> Result<QueryResult> {
        if name == "threads" {
            self.db.scheduler.set_threads(crate::database::default_threads());
        } else if name == "max_concurrent_queries" {
            self.db.scheduler.set_max_concurrent_queries(None);
        } else if name == "scheduler_policy" {
            self.db.scheduler.set_policy(SchedulingPolicy::FairShare);
        } else if name == "memory_limit" {
            self.db.pool.set_limit(apiary_storage::pool::default_memory_limit());
        } else {
            self.settings.reset(name)?;
        }
        Ok(QueryResult::statement(None))
    }

    fn show_variable(&mut self, variable: &[ast::Ident]) -> Result<QueryResult> {
        let name = variable.iter().map(normalize_ident).collect::<Vec<_>>().join(".");
        // `SHOW TIME ZONE` and `SHOW timezone`: PostgreSQL names the column TimeZone.
        if name == "timezone" || name == "time.zone" {
            return Ok(text_result("TimeZone", vec![self.settings.time_zone_name.clone()]));
        }
        let value = if name == "threads" {
            self.db.scheduler.threads().to_string()
        } else if name == "max_concurrent_queries" {
            self.db.scheduler.max_concurrent_queries().to_string()
        } else if name == "scheduler_policy" {
            self.db.scheduler.policy().name().to_string()
        } else if name == "memory_limit" {
            apiary_storage::pool::format_bytes(self.db.pool.limit())
        } else {
            self.settings.get(&name).ok_or_else(|| bind_err!("unknown setting \"{name}\""))?
        };
        Ok(text_result(&name, vec![value]))
    }

    /// `SHOW TABLES`: the tables and views, by name.
    fn show_tables(&mut self) -> Result<QueryResult> {
        let mut names = self.catalog().table_names();
        names.extend(self.catalog().views().iter().map(|v| v.name.clone()));
        names.sort();
        Ok(text_result("name", names))
    }

    /// `DESCRIBE t`: the columns of a table or view.
    fn describe(&mut self, name: &ast::ObjectName) -> Result<QueryResult> {
        let name = object_name_to_table(name)?;
        let fields = match self.catalog().get_view(&name) {
            Some(view) => view.columns.clone(),
            None => self.catalog().table(&name)?.schema.fields.clone(),
        };
        let mut names = StrColumnBuilder::new();
        let mut types = StrColumnBuilder::new();
        let mut nulls = StrColumnBuilder::new();
        for field in &fields {
            names.push(&field.name);
            types.push(&field.data_type.to_string());
            nulls.push(if field.nullable { "YES" } else { "NO" });
        }
        let len = fields.len();
        let text = DataType::Varchar(None);
        let columns = vec![
            Vector::new(text, VectorData::Str(names.finish()), None),
            Vector::new(text, VectorData::Str(types.finish()), None),
            Vector::new(text, VectorData::Str(nulls.finish()), None),
        ];
        Ok(QueryResult::rows_result(
            vec!["column_name".into(), "column_type".into(), "null".into()],
            vec![text; 3],
            vec![DataChunk::new(columns, len)],
        ))
    }
}

/// A one-column text result.
fn text_result(column: &str, lines: Vec<String>) -> QueryResult {
    let mut builder = StrColumnBuilder::with_capacity(lines.len());
    for line in &lines {
        builder.push(line);
    }
    let vector = Vector::new(DataType::Varchar(None), VectorData::Str(builder.finish()), None);
    QueryResult::rows_result(vec![column.to_string()], vec![DataType::Varchar(None)], vec![DataChunk::new(vec![vector], lines.len())])
}

/// Checks rows against a table's constraints and converts them to its exact types:
/// NOT NULL, CHAR/VARCHAR lengths (CHAR values lose trailing blanks).
pub(crate) fn conform_chunk(table: &Table, chunk: DataChunk) -> Result<DataChunk> {
    let chunk = chunk.compact();
    if chunk.column_count() != table.schema.len() {
        return Err(internal_err!("{} columns for table {} with {}", chunk.column_count(), table.name, table.schema.len()));
    }
    let len = chunk.physical_len();
    let mut columns = Vec::with_capacity(chunk.column_count());
    for (vector, field) in chunk.columns.into_iter().zip(&table.schema.fields) {
        if !field.nullable && vector.null_count() > 0 {
            return Err(ApiaryError::NotNullViolation(format!(
                "null value in column \"{}\" of table \"{}\" violates not-null constraint",
                field.name, table.name
            )));
        }
        let vector = match field.data_type {
            DataType::Char(n) | DataType::Varchar(Some(n)) => {
                let is_char = matches!(field.data_type, DataType::Char(_));
                let strings = vector.strings();
                let mut rewrite = false;
                for i in 0..vector.len() {
                    if vector.is_null(i) {
                        continue;
                    }
                    let mut value = strings.get(i);
                    if is_char {
                        let trimmed = value.trim_end_matches(' ');
                        rewrite |= trimmed.len() != value.len();
                        value = trimmed;
                    }
                    if value.chars().count() > n as usize {
                        // SQL: excess characters that are all blanks are cut off, not an error.
                        let kept = value.char_indices().nth(n as usize).map_or(value.len(), |(cut, _)| cut);
                        if value[kept..].chars().all(|c| c == ' ') {
                            rewrite = true;
                            continue;
                        }
                        return Err(ApiaryError::StringTooLong(format!(
                            "value too long for type {} in column \"{}\": '{value}'",
                            field.data_type, field.name
                        )));
                    }
                }
                if rewrite {
                    let mut builder = StrColumnBuilder::with_capacity(vector.len());
                    for i in 0..vector.len() {
                        let value = strings.get(i);
                        let value = if is_char { value.trim_end_matches(' ') } else { value };
                        // Cut to n characters (only blanks can be beyond n here).
                        match value.char_indices().nth(n as usize) {
                            Some((cut, _)) => builder.push(&value[..cut]),
                            None => builder.push(value),
                        }
                    }
                    Vector::new(field.data_type, VectorData::Str(builder.finish()), vector.validity.clone())
                } else {
                    Vector::new(field.data_type, vector.data.clone(), vector.validity.clone())
                }
            }
            t if t.physical() == vector.data_type.physical() => Vector::new(t, vector.data.clone(), vector.validity.clone()),
            // An untyped NULL column (`SELECT NULL`, VALUES of NULLs): NULLs of the column's type.
            t if vector.data_type == DataType::Null => Vector::from_scalar(&ScalarValue::Null, t, vector.len()),
            t => return Err(internal_err!("column {} of type {t} receives {}", field.name, vector.data_type)),
        };
        columns.push(vector);
    }
    Ok(DataChunk::new(columns, len))
}

/// Appends chunks to a table's next contents (not yet visible: commit them with
/// [`DatabaseInner::commit`](crate::database::DatabaseInner::commit)).
pub(crate) fn prepare_append(table: &Table, chunks: Vec<DataChunk>) -> Result<PreparedAppend<'_>> {
    let mut appender = table.appender()?;
    for chunk in chunks {
        let conformed = conform_chunk(table, chunk)?;
        appender.append(&conformed)?;
    }
    appender.prepare()
}

/// The scale factor of `CALL dbgen(sf = 0.1)` (DuckDB's spelling; `CALL dbgen(0.1)` too).
fn dbgen_scale_factor(function: &ast::Function) -> Result<f64> {
    let usage = || bind_err!("dbgen takes the scale factor: CALL dbgen(sf = 0.1)");
    let ast::FunctionArguments::List(list) = &function.args else { return Err(usage()) };
    let [arg] = list.args.as_slice() else { return Err(usage()) };
    let value = match arg {
        ast::FunctionArg::Named { name, arg: ast::FunctionArgExpr::Expr(value), .. }
        | ast::FunctionArg::ExprNamed { name: ast::Expr::Identifier(name), arg: ast::FunctionArgExpr::Expr(value), .. }
            if name.value.eq_ignore_ascii_case("sf") =>
        {
            value
        }
        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::BinaryOp { left, op: ast::BinaryOperator::Eq, right })) if matches!(left.as_ref(), ast::Expr::Identifier(name) if name.value.eq_ignore_ascii_case("sf")) => {
            right
        }
        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(value)) => value,
        _ => return Err(usage()),
    };
    let sf = match value {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(text, _) => text.parse::<f64>().ok(),
            _ => None,
        },
        _ => None,
    };
    match sf {
        Some(sf) if sf > 0.0 && sf <= 1000.0 => Ok(sf),
        _ => Err(bind_err!("dbgen: the scale factor is a number above 0 and at most 1000, not {value}")),
    }
}
