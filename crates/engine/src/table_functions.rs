//! Table functions: `read_csv('file', ...)`, `read_parquet('file')`,
//! `generate_series(...)` and `range(...)` (`series.rs`), and the engine's own
//! `apiary_storage_info()` and `apiary_queries()`; and the engine function
//! `apiary_cancel(id)`.
//!
//! A file (or the engine's state) is read into a temporary table (not in the catalog)
//! that the query scans.

use std::sync::Arc;

use apiary_common::{bind_err, Result};
use apiary_sql::{TableArg, TableFunctionProvider};
use std::collections::BTreeMap;

use apiary_execution::Scheduler;
use apiary_storage::{Block, BufferPool, Catalog, Table};
use apiary_types::{DataChunk, DataType, Field, ScalarValue, Schema, Vector, VectorBuilder};

use crate::read_files::FileReader;

pub struct EngineTableFunctions<'a> {
    pub threads: usize,
    /// The memory budget table functions load into.
    pub pool: &'a Arc<BufferPool>,
    pub block_rows: usize,
    pub catalog: &'a Catalog,
    /// Running queries (`apiary_queries()`, `apiary_cancel`).
    pub scheduler: &'a Scheduler,
    /// Whether engine functions with an effect run (false while a statement is only
    /// described: `apiary_cancel` then reports NULL and cancels nothing).
    pub effects: bool,
    /// Who is connected, for the `pg_catalog` tables and session functions.
    pub session: &'a crate::pg_catalog::SessionInfo,
    /// The session's `reject_errors` and `reject_scans` (`read_csv(..., store_rejects = true)`).
    pub rejects: &'a std::sync::Mutex<crate::read_files::RejectLog>,
    /// The session's time zone (TIMESTAMPTZ text in CSV files, `generate_series` steps).
    pub time_zone: apiary_types::TimeZone,
    /// Tables the embedding program provides, looked up last.
    pub external: Option<&'a dyn crate::ExternalTables>,
}

impl EngineTableFunctions<'_> {
    fn file_reader(&self) -> FileReader<'_> {
        FileReader {
            threads: self.threads,
            pool: self.pool,
            block_rows: self.block_rows,
            rejects: self.rejects,
            effects: self.effects,
            time_zone: self.time_zone,
        }
    }
}

/// Builds a temporary table from parsed pieces.
pub(crate) fn temporary_table(name: &str, fields: Vec<Field>, pieces: Vec<Vec<Vector>>, block_rows: usize) -> Result<Arc<Table>> {
    filled_table(Table::new(name, Schema::new(fields), block_rows), pieces)
}

/// [`temporary_table`] for a table made after the query was optimized (a deferred table's
/// columns): nothing only the optimizer reads, zone maps left until a scan asks (see
/// [`Table::scan_only`]).
pub(crate) fn scan_only_table(name: &str, fields: Vec<Field>, pieces: Vec<Vec<Vector>>, block_rows: usize) -> Result<Arc<Table>> {
    filled_table(Table::new(name, Schema::new(fields), block_rows).scan_only(), pieces)
}

/// As [`scan_only_table`], with each piece (at most a block) becoming a block as it is.
pub(crate) fn scan_only_table_of_blocks(name: &str, fields: Vec<Field>, pieces: Vec<Vec<Vector>>, block_rows: usize) -> Result<Arc<Table>> {
    let table = Arc::new(Table::new(name, Schema::new(fields), block_rows).scan_only());
    {
        let mut appender = table.appender()?;
        for columns in pieces {
            appender.append_block(Block::without_zone_maps(columns))?;
        }
        appender.commit()?;
    }
    Ok(table)
}

fn filled_table(table: Table, pieces: Vec<Vec<Vector>>) -> Result<Arc<Table>> {
    let table = Arc::new(table);
    {
        let mut appender = table.appender()?;
        for columns in pieces {
            let len = columns.first().map_or(0, |c| c.len());
            appender.append(&DataChunk::new(columns, len))?;
        }
        appender.commit()?;
    }
    Ok(table)
}

impl TableFunctionProvider for EngineTableFunctions<'_> {
    fn has_engine_function(&self, name: &str) -> bool {
        name == "apiary_cancel"
    }

    fn call_engine_function(&self, name: &str, args: &[ScalarValue]) -> Result<ScalarValue> {
        match (name, args) {
            ("apiary_cancel", [ScalarValue::Null]) => Ok(ScalarValue::Null),
            ("apiary_cancel", [_]) if !self.effects => Ok(ScalarValue::Boolean(false)),
            ("apiary_cancel", [id]) => match *id {
                ScalarValue::Int16(v) if v > 0 => Ok(ScalarValue::Boolean(self.scheduler.cancel(v as u64))),
                ScalarValue::Int32(v) if v > 0 => Ok(ScalarValue::Boolean(self.scheduler.cancel(v as u64))),
                ScalarValue::Int64(v) if v > 0 => Ok(ScalarValue::Boolean(self.scheduler.cancel(v as u64))),
                _ => Err(bind_err!("apiary_cancel needs a query id (the id column of apiary_queries()), not {id}")),
            },
            ("apiary_cancel", _) => Err(bind_err!("apiary_cancel takes one argument, the query id")),
            _ => Err(bind_err!("function {name} does not exist")),
        }
    }

    fn call(&self, name: &str, args: &[TableArg], named: &[(String, TableArg)]) -> Result<Option<Arc<Table>>> {
        match name {
            "read_csv" | "read_csv_auto" => self.file_reader().read_csv(name, args, named).map(Some),
            "read_parquet" | "parquet_scan" => self.file_reader().read_parquet(name, args, named).map(Some),
            "apiary_storage_info" => {
                if !args.is_empty() || !named.is_empty() {
                    return Err(bind_err!("{name} takes no arguments"));
                }
                Ok(Some(storage_info(self.catalog, self.block_rows)?))
            }
            "apiary_queries" => {
                if !args.is_empty() || !named.is_empty() {
                    return Err(bind_err!("{name} takes no arguments"));
                }
                Ok(Some(running_queries(self.scheduler, self.block_rows)?))
            }
            "generate_series" | "range" => {
                let args = args
                    .iter()
                    .map(|a| a.value().cloned().ok_or_else(|| bind_err!("{name} takes constants, not {a}")))
                    .collect::<Result<Vec<_>>>()?;
                crate::series::series(name, &args, self.pool, self.block_rows, &self.time_zone)
            }
            _ => Ok(None),
        }
    }

    fn system_table(&self, schema: Option<&str>, name: &str) -> Result<Option<Arc<Table>>> {
        if schema.is_none() {
            if let Some(table) = crate::read_files::reject_table(self.rejects, name, self.block_rows)? {
                return Ok(Some(table));
            }
            if crate::read_files::looks_like_file(name) {
                return crate::read_files::read_file_shorthand(&self.file_reader(), name).map(Some);
            }
        }
        let system = crate::pg_catalog::system_table(self.catalog, self.session, schema, name, self.block_rows)?;
        match (system, schema, self.external) {
            (None, None, Some(external)) => match external.lookup(name)? {
                Some(table) => crate::external::scan_external(name, table, self.block_rows).map(Some),
                None => Ok(None),
            },
            (system, ..) => Ok(system),
        }
    }

    fn session_value(&self, name: &str) -> Option<ScalarValue> {
        crate::pg_catalog::session_value(self.session, name)
    }
}

/// `apiary_storage_info()`: one row per table column with its rows (live and deleted),
/// its size in the database file and in memory and the encodings its blocks use.
fn storage_info(catalog: &Catalog, block_rows: usize) -> Result<Arc<Table>> {
    let text = DataType::Varchar(None);
    let fields = vec![
        Field::new("table_name", text, false),
        Field::new("column_name", text, false),
        Field::new("column_type", text, false),
        Field::new("row_count", DataType::BigInt, false),
        // Deleted rows still stored (until CHECKPOINT compacts the table).
        Field::new("deleted_rows", DataType::BigInt, false),
        Field::new("block_count", DataType::BigInt, false),
        Field::new("encodings", text, false),
        Field::new("stored_bytes", DataType::BigInt, false),
        Field::new("memory_bytes", DataType::BigInt, false),
        Field::new("loads", DataType::BigInt, false),
    ];
    let mut builders: Vec<VectorBuilder> = fields.iter().map(|f| VectorBuilder::new(f.data_type)).collect();
    for table in catalog.tables() {
        let data = table.snapshot();
        for (column, field) in table.schema.fields.iter().enumerate() {
            let mut encodings: BTreeMap<String, usize> = BTreeMap::new();
            let (mut stored_bytes, mut memory_bytes, mut loads) = (0i64, 0i64, 0i64);
            for block in &data.blocks {
                let stripe = block.column(column);
                memory_bytes += stripe.memory_bytes() as i64;
                loads += stripe.loads() as i64;
                let kind = match stripe.stored_location() {
                    Some(stored) => {
                        stored_bytes += stored.extent.len as i64;
                        stored.encoding.kind()
                    }
                    None => format!("in memory: {}", stripe.memory_form().unwrap_or("values")),
                };
                *encodings.entry(kind).or_default() += 1;
            }
            let summary: Vec<String> = encodings.iter().map(|(kind, blocks)| format!("{kind} x{blocks}")).collect();
            let values = [
                ScalarValue::Utf8(table.name.clone()),
                ScalarValue::Utf8(field.name.clone()),
                ScalarValue::Utf8(field.data_type.to_string()),
                ScalarValue::Int64(data.row_count() as i64),
                ScalarValue::Int64(data.deleted_rows() as i64),
                ScalarValue::Int64(data.blocks.len() as i64),
                ScalarValue::Utf8(summary.join(", ")),
                ScalarValue::Int64(stored_bytes),
                ScalarValue::Int64(memory_bytes),
                ScalarValue::Int64(loads),
            ];
            for (builder, value) in builders.iter_mut().zip(&values) {
                builder.push_scalar(value);
            }
        }
    }
    let columns: Vec<Vector> = builders.into_iter().map(|b| b.finish()).collect();
    temporary_table("apiary_storage_info", fields, vec![columns], block_rows)
}

/// `apiary_queries()`: one row per running or queued query (of every session), with its
/// progress (Quickstep §4.4): work orders done and in total (per pipeline and overall;
/// pipelines that have not started count what is known ahead), rows produced, memory
/// held, and the time left extrapolated from the work done.
fn running_queries(scheduler: &Scheduler, block_rows: usize) -> Result<Arc<Table>> {
    let text = DataType::Varchar(None);
    let fields = vec![
        Field::new("id", DataType::BigInt, false),
        Field::new("connection", DataType::BigInt, false),
        Field::new("user_name", text, false),
        Field::new("state", text, false),
        Field::new("query", text, false),
        Field::new("priority", DataType::Integer, false),
        Field::new("elapsed_s", DataType::Double, false),
        Field::new("work_orders_done", DataType::BigInt, false),
        Field::new("work_orders_total", DataType::BigInt, false),
        Field::new("progress", DataType::Double, false),
        Field::new("pipelines", text, false),
        Field::new("rows_produced", DataType::BigInt, false),
        Field::new("memory_bytes", DataType::BigInt, false),
        Field::new("estimated_left_s", DataType::Double, true),
        Field::new("shared_work_orders", DataType::BigInt, false),
        Field::new("shared_with", text, false),
    ];
    let mut builders: Vec<VectorBuilder> = fields.iter().map(|f| VectorBuilder::new(f.data_type)).collect();
    for query in scheduler.queries() {
        let pipelines: Vec<String> = query.pipelines.iter().map(|(done, total)| format!("{done}/{total}")).collect();
        let values = [
            ScalarValue::Int64(query.id as i64),
            ScalarValue::Int64(query.connection as i64),
            ScalarValue::Utf8(query.user.clone()),
            ScalarValue::Utf8(query.state.to_string()),
            ScalarValue::Utf8(query.sql.clone()),
            ScalarValue::Int32(query.priority as i32),
            ScalarValue::Float64(query.elapsed.as_secs_f64()),
            ScalarValue::Int64(query.work_orders_done as i64),
            ScalarValue::Int64(query.work_orders_total as i64),
            ScalarValue::Float64(query.fraction()),
            ScalarValue::Utf8(pipelines.join(" ")),
            ScalarValue::Int64(query.rows as i64),
            ScalarValue::Int64(query.memory_bytes as i64),
            query.estimated_left.map_or(ScalarValue::Null, |d| ScalarValue::Float64(d.as_secs_f64())),
            ScalarValue::Int64(query.shared_work_orders as i64),
            ScalarValue::Utf8(query.shared_with.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
        ];
        for (builder, value) in builders.iter_mut().zip(&values) {
            builder.push_scalar(value);
        }
    }
    let columns: Vec<Vector> = builders.into_iter().map(|b| b.finish()).collect();
    temporary_table("apiary_queries", fields, vec![columns], block_rows)
}
