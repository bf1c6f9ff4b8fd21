//! COPY: bulk loading from CSV / `.tbl` / Parquet files and exporting query results.
//!
//! `COPY t FROM 'file' (DELIMITER '|', HEADER)` parses the file in parallel and appends
//! all rows in one atomic commit: if any line is malformed, the statement fails with the
//! file, line and column and the table is unchanged.

use std::path::Path;

use apiary_common::{bind_err, not_impl_err, ApiaryError, Result};
use apiary_execution::expr::{cast_vector, cast_vector_value_to_string};
use apiary_sql::binder::{normalize_ident, object_name_to_table};
use apiary_types::{DataChunk, Field, Vector};
use sqlparser::ast;

use crate::connection::{conform_chunk, Connection};
use crate::csv::{for_each_piece, write_field, CsvOptions};
use crate::parquet_io::{read_parquet, write_parquet, ParquetFooter};
use crate::result::QueryResult;

/// A COPY into a database file writes its sealed blocks once this much (or an eighth of
/// memory_limit) was loaded since the last write.
const WRITE_AHEAD_BYTES: usize = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Csv,
    Parquet,
}

struct FileOptions {
    format: Format,
    csv: CsvOptions,
    /// Whether HEADER was given explicitly.
    header_given: bool,
}

fn file_options(path: &str, options: &[ast::CopyOption]) -> Result<FileOptions> {
    let mut format = if path.to_lowercase().ends_with(".parquet") { Format::Parquet } else { Format::Csv };
    let mut csv = CsvOptions::default();
    let mut header_given = false;
    for option in options {
        match option {
            ast::CopyOption::Format(name) => {
                format = match name.value.to_lowercase().as_str() {
                    "csv" | "text" | "tbl" => Format::Csv,
                    "parquet" => Format::Parquet,
                    other => return Err(bind_err!("unknown COPY format '{other}' (csv or parquet)")),
                }
            }
            ast::CopyOption::Delimiter(c) => {
                if !c.is_ascii() {
                    return Err(bind_err!("COPY delimiter must be a single ASCII character"));
                }
                csv.delimiter = *c as u8;
            }
            ast::CopyOption::Header(h) => {
                csv.header = *h;
                header_given = true;
            }
            ast::CopyOption::Quote(c) if c.is_ascii() => csv.quote = Some(*c as u8),
            ast::CopyOption::Escape(c) if c.is_ascii() => csv.escape = Some(*c as u8),
            ast::CopyOption::Null(text) => csv.null = vec![text.clone()],
            ast::CopyOption::Encoding(e) if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            other => return Err(not_impl_err!("COPY option {other}")),
        }
    }
    Ok(FileOptions { format, csv, header_given })
}

pub fn copy(
    conn: &mut Connection,
    source: &ast::CopySource,
    to: bool,
    target: &ast::CopyTarget,
    options: &[ast::CopyOption],
) -> Result<QueryResult> {
    let ast::CopyTarget::File { filename } = target else {
        return Err(not_impl_err!("COPY from/to STDIN, STDOUT or a program (use a file name)"));
    };
    let mut file = file_options(filename, options)?;
    file.csv.time_zone = conn.settings.execution.time_zone;
    if to {
        return copy_to(conn, source, Path::new(filename), file);
    }
    let ast::CopySource::Table { table_name, columns } = source else {
        return Err(bind_err!("COPY ... FROM needs a table, not a query"));
    };
    let table = conn.catalog().table(&object_name_to_table(table_name)?)?;
    // The file holds the listed columns (all, by default); the others get their DEFAULT.
    let positions: Vec<usize> = if columns.is_empty() {
        (0..table.schema.len()).collect()
    } else {
        columns
            .iter()
            .map(|c| {
                let name = normalize_ident(c);
                table.schema.index_of(&name).ok_or_else(|| bind_err!("column \"{name}\" of table \"{}\" does not exist", table.name))
            })
            .collect::<Result<_>>()?
    };
    let file_fields: Vec<Field> = positions.iter().map(|&p| table.schema.fields[p].clone()).collect();
    // The columns the file leaves out that have a DEFAULT (the others get NULL).
    let defaulted: Vec<usize> = (0..table.schema.len()).filter(|c| !positions.contains(c) && table.default_of(*c).is_some()).collect();
    let mut appender = conn.table_writer(&table)?;
    let checker: &Connection = conn;
    let path = Path::new(filename);
    let threads = conn.db.scheduler.threads();
    let pool = std::sync::Arc::clone(&conn.db.pool);
    // Inside a transaction block the rows stay the transaction's (in memory) until COMMIT.
    let store = if conn.in_transaction() { None } else { conn.db.store.clone() };
    // Bytes loaded and not yet written to the database file (all of them for an in-memory
    // database, whose rows stay in memory).
    let mut loaded_bytes = 0usize;
    let mut append = |columns: Vec<Vector>| -> Result<()> {
        loaded_bytes += columns.iter().map(|c| c.data_bytes()).sum::<usize>();
        if let Some(store) = &store {
            if loaded_bytes >= WRITE_AHEAD_BYTES.min(pool.limit() / 8) {
                // Write the full blocks now: then the buffer pool may evict them, and a
                // load larger than memory_limit fits.
                store.write_blocks(&table, &appender.take_sealed(), threads)?;
                loaded_bytes = 0;
            }
        }
        pool.check_headroom(loaded_bytes, "COPY")?;
        let len = columns.first().map_or(0, |c| c.len());
        let mut full: Vec<Vector> = table.schema.fields.iter().map(|f| Vector::nulls(f.data_type, len)).collect();
        for (column, &position) in columns.into_iter().zip(&positions) {
            full[position] = column;
        }
        if !defaulted.is_empty() && len > 0 {
            for (column, &position) in checker.default_vectors(&table, &defaulted, len)?.into_iter().zip(&defaulted) {
                full[position] = column;
            }
        }
        let chunk = conform_chunk(&table, DataChunk::new(full, len))?;
        checker.check_constraints(&table, std::slice::from_ref(&chunk))?;
        appender.append(&chunk)
    };
    match file.format {
        // Streamed: each parsed piece is appended before the next segment is read.
        Format::Csv => {
            for_each_piece(path, &file.csv, &file_fields, threads, append)?;
        }
        Format::Parquet => {
            let raw = read_parquet(&ParquetFooter::read(path)?, conn.settings.block_rows, threads, None)?;
            for columns in raw {
                if columns.len() != file_fields.len() {
                    return Err(ApiaryError::Load {
                        file: filename.clone(),
                        line: 0,
                        message: format!("the file has {} columns, the table {}", columns.len(), file_fields.len()),
                    });
                }
                let cast = columns.iter().zip(&file_fields).map(|(v, f)| cast_vector(v, f.data_type, None)).collect::<Result<Vec<_>>>()?;
                append(cast)?;
            }
        }
    }
    let before = std::sync::Arc::clone(appender.base());
    let prepared = appender.prepare()?;
    let db = std::sync::Arc::clone(&conn.db);
    let mut _checked = None;
    if !table.foreign_keys.is_empty() && prepared.appended_rows() > 0 {
        // (See `DatabaseInner::foreign_key_lock`.)
        if !conn.in_transaction() {
            _checked = Some(db.foreign_key_lock.lock().unwrap_or_else(|e| e.into_inner()));
        }
        let added = DataChunk::new(prepared.appended_columns()?, prepared.appended_rows());
        conn.check_foreign_keys(&table, &before, &prepared, &[added], None)?;
    }
    let rows = conn.finish_write(&table, prepared)?;
    Ok(QueryResult::statement(Some(rows)))
}

fn copy_to(conn: &mut Connection, source: &ast::CopySource, path: &Path, file: FileOptions) -> Result<QueryResult> {
    let query: ast::Query = match source {
        ast::CopySource::Query(query) => (**query).clone(),
        ast::CopySource::Table { table_name, columns } => {
            let list =
                if columns.is_empty() { "*".to_string() } else { columns.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ") };
            let sql = format!("SELECT {list} FROM {table_name}");
            match apiary_sql::parser::parse_sql(&sql)?.pop() {
                Some(ast::Statement::Query(q)) => *q,
                _ => return Err(bind_err!("invalid COPY source {table_name}")),
            }
        }
    };
    let (bound, plan) = conn.plan_query(&query)?;
    let types: Vec<_> = plan.output().iter().map(|c| c.data_type).collect();
    let chunks = conn.run_plan(&plan)?;
    let rows = match file.format {
        Format::Parquet => write_parquet(path, &bound.names, &types, &chunks)?,
        Format::Csv => {
            let header = if file.header_given { file.csv.header } else { true };
            write_csv(path, &bound.names, &chunks, file.csv.delimiter as char, header)?
        }
    };
    Ok(QueryResult::statement(Some(rows)))
}

fn write_csv(path: &Path, names: &[String], chunks: &[DataChunk], delimiter: char, header: bool) -> Result<u64> {
    use std::io::Write;
    let file = std::fs::File::create(path).map_err(|e| ApiaryError::Io(format!("cannot create \"{}\": {e}", path.display())))?;
    let mut out = std::io::BufWriter::new(file);
    let mut line = String::new();
    let io_error = |e: std::io::Error| ApiaryError::Io(format!("writing \"{}\": {e}", path.display()));
    if header {
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                line.push(delimiter);
            }
            write_field(&mut line, name, delimiter);
        }
        line.push('\n');
        out.write_all(line.as_bytes()).map_err(io_error)?;
    }
    let mut rows = 0u64;
    let mut value = String::new();
    for chunk in chunks {
        let chunk = chunk.clone().compact();
        for row in 0..chunk.row_count() {
            line.clear();
            for (i, column) in chunk.columns.iter().enumerate() {
                if i > 0 {
                    line.push(delimiter);
                }
                if column.is_null(row) {
                    continue;
                }
                value.clear();
                cast_vector_value_to_string(column, row, &mut value);
                if column.data_type.is_string() {
                    write_field(&mut line, &value, delimiter);
                } else {
                    line.push_str(&value);
                }
            }
            line.push('\n');
            out.write_all(line.as_bytes()).map_err(io_error)?;
            rows += 1;
        }
    }
    out.flush().map_err(io_error)?;
    Ok(rows)
}
