//! Files as tables: `read_csv`, `read_parquet` and the `FROM 'file.csv'` shorthand.
//!
//! A file argument is a path, a glob (`'data/*.parquet'`, matches in name order) or a list
//! of them (`['a.csv', 'b.csv']`); the files are read one after another into one
//! temporary table. CSV options follow DuckDB's named parameters; the CSV sniffer
//! (`csv::sniff`) detects what they leave open from the first file. With
//! `ignore_errors = true` records that cannot be read are skipped; with
//! `store_rejects = true` they are also kept, for the session, in the `reject_errors` and
//! `reject_scans` tables (replaced by the next scan that stores rejects).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use apiary_common::{bind_err, ApiaryError, Result};
use apiary_sql::TableArg;
use apiary_storage::{BufferPool, DeferredColumnStats, DeferredRows, Table};
use apiary_types::{DataType, Field, ScalarValue, Schema, StrColumnBuilder, Vector, VectorBuilder, VectorData};

use crate::csv::sniff::{sniff, SniffHints, DEFAULT_SAMPLE_RECORDS};
use crate::csv::{for_each_piece, Compression, CsvOptions, Reject, TemporalFormat};
use crate::parquet_io::{read_parquet, ParquetFooter};
use crate::table_functions::{scan_only_table, scan_only_table_of_blocks, temporary_table};

/// What a `read_csv`/`read_parquet` call needs from the engine.
pub struct FileReader<'a> {
    pub threads: usize,
    pub pool: &'a Arc<BufferPool>,
    pub block_rows: usize,
    /// Where `store_rejects` keeps rejected records.
    pub rejects: &'a Mutex<RejectLog>,
    /// Whether the call has effects (false while a statement is only described).
    pub effects: bool,
    /// The session's time zone: TIMESTAMPTZ text without a zone is read in it.
    pub time_zone: apiary_types::TimeZone,
}

/// The records the last `store_rejects` scan skipped, and what it read.
#[derive(Debug, Default)]
pub struct RejectLog {
    scan_id: i64,
    /// (scan id, file id, path, the options the scan used).
    scans: Vec<(i64, i64, String, CsvOptions, Vec<Field>)>,
    /// (scan id, file id, the record).
    errors: Vec<(i64, i64, Reject)>,
}

/// Whether a name in `FROM` is a file to read: a path ending in a data file's extension.
pub fn looks_like_file(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let lower = lower.strip_suffix(".gz").or_else(|| lower.strip_suffix(".zst")).unwrap_or(&lower);
    [".csv", ".tsv", ".tbl", ".parquet"].iter().any(|ext| lower.ends_with(ext))
}

/// `FROM 'file.csv'`: the file read with the default options.
pub fn read_file_shorthand(reader: &FileReader, name: &str) -> Result<Arc<Table>> {
    let arg = TableArg::Value(ScalarValue::Utf8(name.to_string()));
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".parquet") {
        reader.read_parquet("read_parquet", &[arg], &[])
    } else {
        reader.read_csv("read_csv", &[arg], &[])
    }
}

/// The files a path, glob or list names (globs expand in name order; none matching is an
/// error).
fn expand_paths(function: &str, args: &[TableArg]) -> Result<Vec<PathBuf>> {
    let patterns: Vec<&ScalarValue> = match args {
        [TableArg::Value(value)] => vec![value],
        [TableArg::List(values)] if !values.is_empty() => values.iter().collect(),
        _ => return Err(bind_err!("{function} needs a file name, a glob or a list of them as its first argument")),
    };
    let mut paths = Vec::new();
    for pattern in patterns {
        let ScalarValue::Utf8(pattern) = pattern else {
            return Err(bind_err!("{function}: file names are text, not {pattern}"));
        };
        if !pattern.contains(['*', '?', '[']) {
            paths.push(PathBuf::from(pattern));
            continue;
        }
        let matches = glob::glob(pattern).map_err(|e| bind_err!("{function}: invalid glob '{pattern}': {e}"))?;
        let mut found: Vec<PathBuf> = matches.filter_map(|m| m.ok()).filter(|p| p.is_file()).collect();
        if found.is_empty() {
            return Err(ApiaryError::Io(format!("no files match \"{pattern}\"")));
        }
        found.sort();
        paths.extend(found);
    }
    Ok(paths)
}

fn single_char(name: &str, value: &ScalarValue) -> Result<u8> {
    match value.as_str() {
        Some(s) if s.len() == 1 => Ok(s.as_bytes()[0]),
        Some("\\t") => Ok(b'\t'),
        _ => Err(bind_err!("{name} must be a single character")),
    }
}

fn bool_option(name: &str, value: &ScalarValue) -> Result<bool> {
    match value {
        ScalarValue::Boolean(b) => Ok(*b),
        ScalarValue::Utf8(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        ScalarValue::Utf8(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(bind_err!("{name} must be true or false")),
    }
}

fn text_option<'v>(name: &str, value: &'v ScalarValue) -> Result<&'v str> {
    value.as_str().ok_or_else(|| bind_err!("{name} must be text, not {value}"))
}

fn type_option(option: &str, column: &str, value: &ScalarValue) -> Result<DataType> {
    let text = text_option(option, value)?;
    apiary_sql::binder::parse_type_name(text).map_err(|_| bind_err!("{option}: \"{text}\" for column \"{column}\" is not a type name"))
}

/// The `filename` column's values for a piece of `rows` rows.
fn filename_column(path: &Path, rows: usize) -> Vector {
    let name = path.display().to_string();
    let mut builder = StrColumnBuilder::with_capacity(rows);
    for _ in 0..rows {
        builder.push(&name);
    }
    Vector::new(DataType::Varchar(None), VectorData::Str(builder.finish()), None)
}

const CSV_OPTIONS: &str = "delim/sep, quote, escape, header, nullstr, columns, types/dtypes, names, all_varchar, auto_detect, dateformat, \
                           timestampformat, sample_size, skip, compression, filename, ignore_errors, store_rejects, max_line_size";

impl FileReader<'_> {
    pub fn read_csv(&self, function: &str, args: &[TableArg], named: &[(String, TableArg)]) -> Result<Arc<Table>> {
        let paths = expand_paths(function, args)?;
        let mut options = CsvOptions { time_zone: self.time_zone, ..CsvOptions::default() };
        let mut hints = SniffHints { sample_records: DEFAULT_SAMPLE_RECORDS, ..Default::default() };
        let (mut with_filename, mut store_rejects, mut auto_detect) = (false, false, true);
        for (option, value) in named {
            let scalar = || value.value().ok_or_else(|| bind_err!("{option} takes a single value, not {value}"));
            match (option.as_str(), value) {
                ("delim" | "sep" | "delimiter", _) => hints.delimiter = Some(single_char(option, scalar()?)?),
                ("quote", _) => {
                    options.quote = match text_option(option, scalar()?)? {
                        "" => None,
                        _ => Some(single_char(option, scalar()?)?),
                    }
                }
                ("escape", _) => {
                    options.escape = match text_option(option, scalar()?)? {
                        "" => None,
                        _ => Some(single_char(option, scalar()?)?),
                    }
                }
                ("header", _) => hints.header = Some(bool_option(option, scalar()?)?),
                ("nullstr" | "null", TableArg::List(values)) => {
                    options.null = values.iter().map(|v| text_option(option, v).map(str::to_string)).collect::<Result<_>>()?
                }
                ("nullstr" | "null", _) => options.null = vec![text_option(option, scalar()?)?.to_string()],
                ("columns", TableArg::Struct(columns)) => {
                    hints.columns =
                        Some(columns.iter().map(|(name, t)| Ok((name.clone(), type_option(option, name, t)?))).collect::<Result<_>>()?)
                }
                ("types" | "dtypes" | "column_types", TableArg::Struct(columns)) => {
                    hints.types_by_name =
                        columns.iter().map(|(name, t)| Ok((name.clone(), type_option(option, name, t)?))).collect::<Result<_>>()?
                }
                ("types" | "dtypes" | "column_types", TableArg::List(types)) => {
                    hints.types_by_position =
                        types.iter().enumerate().map(|(i, t)| type_option(option, &format!("column{}", i + 1), t)).collect::<Result<_>>()?
                }
                ("names" | "column_names", TableArg::List(names)) => {
                    hints.names = Some(names.iter().map(|n| text_option(option, n).map(str::to_string)).collect::<Result<_>>()?)
                }
                ("all_varchar", _) => hints.all_varchar = bool_option(option, scalar()?)?,
                ("auto_detect", _) => auto_detect = bool_option(option, scalar()?)?,
                ("dateformat" | "date_format", _) => hints.date_format = Some(TemporalFormat::new(text_option(option, scalar()?)?)?),
                ("timestampformat" | "timestamp_format", _) => {
                    hints.timestamp_format = Some(TemporalFormat::new(text_option(option, scalar()?)?)?)
                }
                ("sample_size", _) => {
                    hints.sample_records = match scalar()?.as_i128() {
                        Some(-1) => usize::MAX,
                        Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
                        _ => {
                            return Err(bind_err!(
                                "sample_size must be a positive number of records, or -1 for as many as the sample holds"
                            ))
                        }
                    }
                }
                ("skip", _) => {
                    options.skip_lines = scalar()?
                        .as_i128()
                        .and_then(|v| usize::try_from(v).ok())
                        .ok_or_else(|| bind_err!("skip must be a number of lines, not {value}"))?
                }
                ("compression", _) => {
                    let text = text_option(option, scalar()?)?;
                    options.compression =
                        Compression::parse(text).ok_or_else(|| bind_err!("unknown compression '{text}' (auto, none, gzip, zstd)"))?
                }
                ("filename", _) => with_filename = bool_option(option, scalar()?)?,
                ("ignore_errors", _) => options.ignore_errors = bool_option(option, scalar()?)?,
                ("store_rejects", _) => store_rejects = bool_option(option, scalar()?)?,
                ("max_line_size" | "maximum_line_size", _) => {
                    options.max_line_size = scalar()?
                        .as_i128()
                        .filter(|&v| v > 0)
                        .and_then(|v| usize::try_from(v).ok())
                        .ok_or_else(|| bind_err!("max_line_size must be a positive number of bytes, not {value}"))?
                }
                ("columns" | "names" | "column_names", other) => {
                    return Err(bind_err!(
                        "{option} takes {}, not {other}",
                        if option == "columns" { "a struct such as {'id': 'INTEGER'}" } else { "a list" }
                    ))
                }
                (other, _) => return Err(bind_err!("unknown option {other} for {function} ({CSV_OPTIONS})")),
            }
        }
        if !auto_detect && hints.columns.is_none() {
            return Err(bind_err!("{function} with auto_detect = false needs the columns: columns = {{'name': 'TYPE', ...}}"));
        }
        if store_rejects {
            options.ignore_errors = true;
        }
        let first = paths.first().ok_or_else(|| bind_err!("{function} needs at least one file"))?;
        let mut fields = sniff(first, &mut options, &hints)?;
        let data_columns = fields.len();
        if with_filename {
            fields.push(Field::new("filename", DataType::Varchar(None), false));
        }
        // The files become a temporary table: their rows count against memory_limit as
        // they are parsed.
        let mut pieces = Vec::new();
        let mut held = 0usize;
        let mut rejects = Vec::new();
        for (file_id, path) in paths.iter().enumerate() {
            let file_rejects = for_each_piece(path, &options, &fields[..data_columns], self.threads, |mut piece| {
                let bytes: usize = piece.iter().map(Vector::data_bytes).sum();
                held += bytes;
                self.pool.check_headroom(held, &format!("{function}('{}')", path.display()))?;
                if with_filename {
                    let rows = piece.first().map_or(0, Vector::len);
                    piece.push(filename_column(path, rows));
                }
                pieces.push(piece);
                Ok(())
            })?;
            rejects.extend(file_rejects.into_iter().map(|r| (file_id as i64, r)));
        }
        if store_rejects && self.effects {
            let mut log = self.rejects.lock().unwrap_or_else(|e| e.into_inner());
            log.scan_id += 1;
            let scan_id = log.scan_id;
            log.scans = paths
                .iter()
                .enumerate()
                .map(|(i, p)| (scan_id, i as i64, p.display().to_string(), options.clone(), fields[..data_columns].to_vec()))
                .collect();
            log.errors = rejects.into_iter().map(|(file_id, r)| (scan_id, file_id, r)).collect();
        }
        temporary_table(function, fields, pieces, self.block_rows)
    }

    pub fn read_parquet(&self, function: &str, args: &[TableArg], named: &[(String, TableArg)]) -> Result<Arc<Table>> {
        let paths = expand_paths(function, args)?;
        let mut with_filename = false;
        for (option, value) in named {
            match (option.as_str(), value.value()) {
                ("filename", Some(value)) => with_filename = bool_option(option, value)?,
                ("binary_as_string", Some(_)) => {}
                _ => return Err(bind_err!("unknown option {option} for {function} (filename)")),
            }
        }
        let first = paths.first().ok_or_else(|| bind_err!("{function} needs at least one file"))?;
        // Each file's footer is parsed once, here; the scan's reads use it again.
        let footers = paths.iter().map(|path| ParquetFooter::read(path)).collect::<Result<Vec<_>>>()?;
        let mut fields = footers.first().map_or_else(|| Ok(Vec::new()), ParquetFooter::fields)?;
        let data_columns = fields.len();
        let mut rows = 0usize;
        let mut statistics = Vec::new();
        for (path, footer) in paths.iter().zip(&footers) {
            let file_fields = footer.fields()?;
            let same = file_fields.len() == data_columns && file_fields.iter().zip(&fields).all(|(a, b)| a.data_type == b.data_type);
            if !same {
                let describe =
                    |fields: &[Field]| fields.iter().map(|f| format!("{} {}", f.name, f.data_type)).collect::<Vec<_>>().join(", ");
                return Err(ApiaryError::Load {
                    file: path.display().to_string(),
                    line: 0,
                    message: format!(
                        "its columns ({}) differ from those of {} ({})",
                        describe(&file_fields),
                        first.display(),
                        describe(&fields[..data_columns])
                    ),
                });
            }
            let file_rows = footer.row_count();
            rows += file_rows;
            statistics = merge_statistics(statistics, footer.statistics(), file_rows);
        }
        let mut statistics: Vec<Option<DeferredColumnStats>> = statistics.into_iter().map(|s| s.map(|(s, _)| s)).collect();
        if with_filename {
            fields.push(Field::new("filename", DataType::Varchar(None), false));
            let files = paths.len() as f64;
            statistics.push(Some(DeferredColumnStats {
                distinct: Some(files),
                min: ScalarValue::Null,
                max: ScalarValue::Null,
                null_count: 0,
            }));
        }
        // Nothing is read yet: the scan reads the columns it needs when it is planned.
        let source = ParquetRows {
            function: function.to_string(),
            paths,
            footers,
            fields: fields.clone(),
            data_columns,
            rows,
            statistics,
            pool: Arc::clone(self.pool),
            threads: self.threads,
            block_rows: self.block_rows,
        };
        Ok(Arc::new(Table::deferred(function, Schema::new(fields), self.block_rows, Arc::new(source))))
    }
}

/// The statistics of several files' columns: `merged` (with, per column, whether each
/// file so far repeats its values at least 8 times) and those of a file of `rows` rows.
/// Distinct counts add up, unless every file repeats its values: then files likely share
/// them, and the largest count is the estimate.
fn merge_statistics(
    merged: Vec<Option<(DeferredColumnStats, bool)>>,
    file: Vec<Option<DeferredColumnStats>>,
    rows: usize,
) -> Vec<Option<(DeferredColumnStats, bool)>> {
    let first = merged.is_empty();
    let merged = if first { vec![None; file.len()] } else { merged };
    merged
        .into_iter()
        .zip(file)
        .map(|(so_far, file)| {
            let file = file?;
            let repeats = file.distinct.is_some_and(|d| d * 8.0 <= rows as f64);
            let Some((so_far, repeated)) = so_far else {
                return first.then_some((file, repeats));
            };
            let bound = |a: ScalarValue, b: ScalarValue, pick_b: bool| match (a.is_null(), b.is_null()) {
                (false, false) if pick_b => b,
                (false, false) => a,
                _ => ScalarValue::Null,
            };
            let lower = !so_far.min.is_null() && !file.min.is_null() && file.min.total_cmp(&so_far.min).is_lt();
            let higher = !so_far.max.is_null() && !file.max.is_null() && file.max.total_cmp(&so_far.max).is_gt();
            let distinct = match (so_far.distinct, file.distinct) {
                (Some(a), Some(b)) if repeated && repeats => Some(a.max(b)),
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            let stats = DeferredColumnStats {
                distinct,
                min: bound(so_far.min, file.min, lower),
                max: bound(so_far.max, file.max, higher),
                null_count: so_far.null_count + file.null_count,
            };
            Some((stats, repeated && repeats))
        })
        .collect()
}

/// The rows of `read_parquet`'s files, read when a scan is planned, only the columns it
/// reads.
struct ParquetRows {
    function: String,
    paths: Vec<PathBuf>,
    footers: Vec<ParquetFooter>,
    /// The files' columns, then `filename` when asked for.
    fields: Vec<Field>,
    data_columns: usize,
    rows: usize,
    /// The files' statistics of each column (see `ParquetFooter::statistics`), then `filename`'s.
    statistics: Vec<Option<DeferredColumnStats>>,
    pool: Arc<BufferPool>,
    threads: usize,
    block_rows: usize,
}

impl std::fmt::Debug for ParquetRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetRows").field("paths", &self.paths).field("rows", &self.rows).finish()
    }
}

impl DeferredRows for ParquetRows {
    fn row_count(&self) -> usize {
        self.rows
    }

    fn column_statistics(&self) -> Vec<Option<DeferredColumnStats>> {
        self.statistics.clone()
    }

    fn materialize(&self, columns: &[usize]) -> Result<Arc<Table>> {
        // The files' columns to read, ascending (as the reader returns them).
        let mut file_columns: Vec<usize> = columns.iter().copied().filter(|&c| c < self.data_columns).collect();
        file_columns.sort_unstable();
        file_columns.dedup();
        let fields: Vec<Field> = columns.iter().map(|&c| self.fields[c].clone()).collect();
        let mut pieces = Vec::new();
        let mut held = 0usize;
        for (path, footer) in self.paths.iter().zip(&self.footers) {
            // The columns become a temporary table in memory: they must fit the budget.
            held += footer.uncompressed_bytes(Some(&file_columns));
            self.pool.check_headroom(held, &format!("{}('{}')", self.function, path.display()))?;
            let read = if file_columns.is_empty() {
                // Only filename: the rows of the first column give the count.
                read_parquet(footer, self.block_rows, self.threads, Some(&[0]))?.into_iter().map(|p| (p[0].len(), Vec::new())).collect()
            } else {
                read_parquet(footer, self.block_rows, self.threads, Some(&file_columns))?
                    .into_iter()
                    .map(|p| (p.first().map_or(0, Vector::len), p))
                    .collect::<Vec<_>>()
            };
            for (rows, piece) in read {
                let piece = columns
                    .iter()
                    .map(|&c| match file_columns.iter().position(|&f| f == c) {
                        Some(i) => piece[i].clone(),
                        None => filename_column(path, rows),
                    })
                    .collect();
                pieces.push(piece);
            }
        }
        scan_only_table_of_blocks(&self.function, fields, pieces, self.block_rows)
    }

    /// The files' row counts come from their footers: blocks of NULLs, nothing decoded.
    fn materialize_row_count(&self) -> Result<Arc<Table>> {
        let field = self.fields[0].clone();
        let mut pieces = Vec::new();
        let mut left = self.rows;
        while left > 0 {
            let rows = left.min(self.block_rows.max(1));
            pieces.push(vec![Vector::nulls(field.data_type, rows)]);
            left -= rows;
        }
        let field = Field { nullable: true, ..field };
        scan_only_table(&self.function, vec![field], pieces, self.block_rows)
    }
}

/// `reject_errors` and `reject_scans`: what the last `store_rejects` scan skipped.
pub fn reject_table(log: &Mutex<RejectLog>, name: &str, block_rows: usize) -> Result<Option<Arc<Table>>> {
    let log = log.lock().unwrap_or_else(|e| e.into_inner());
    let text = DataType::Varchar(None);
    let (fields, rows): (Vec<Field>, Vec<Vec<ScalarValue>>) = match name {
        "reject_errors" => (
            vec![
                Field::new("scan_id", DataType::BigInt, false),
                Field::new("file_id", DataType::BigInt, false),
                Field::new("line", DataType::BigInt, false),
                Field::new("column_idx", DataType::BigInt, true),
                Field::new("column_name", text, true),
                Field::new("error_type", text, false),
                Field::new("csv_line", text, false),
                Field::new("error_message", text, false),
            ],
            log.errors
                .iter()
                .map(|(scan, file, r)| {
                    vec![
                        ScalarValue::Int64(*scan),
                        ScalarValue::Int64(*file),
                        ScalarValue::Int64(r.line as i64),
                        r.column.map_or(ScalarValue::Null, |c| ScalarValue::Int64(c as i64)),
                        r.column_name.clone().map_or(ScalarValue::Null, ScalarValue::Utf8),
                        ScalarValue::Utf8(r.error_type.to_string()),
                        ScalarValue::Utf8(r.csv_line.clone()),
                        ScalarValue::Utf8(r.message.clone()),
                    ]
                })
                .collect(),
        ),
        "reject_scans" => (
            vec![
                Field::new("scan_id", DataType::BigInt, false),
                Field::new("file_id", DataType::BigInt, false),
                Field::new("file_path", text, false),
                Field::new("delimiter", text, false),
                Field::new("quote", text, true),
                Field::new("escape", text, true),
                Field::new("skip_rows", DataType::BigInt, false),
                Field::new("has_header", DataType::Boolean, false),
                Field::new("columns", text, false),
            ],
            log.scans
                .iter()
                .map(|(scan, file, path, options, fields)| {
                    let byte = |b: Option<u8>| b.map_or(ScalarValue::Null, |b| ScalarValue::Utf8((b as char).to_string()));
                    let columns: Vec<String> = fields.iter().map(|f| format!("'{}': '{}'", f.name, f.data_type)).collect();
                    vec![
                        ScalarValue::Int64(*scan),
                        ScalarValue::Int64(*file),
                        ScalarValue::Utf8(path.clone()),
                        ScalarValue::Utf8((options.delimiter as char).to_string()),
                        byte(options.quote),
                        byte(options.escape),
                        ScalarValue::Int64(options.skip_lines as i64),
                        ScalarValue::Boolean(options.header),
                        ScalarValue::Utf8(format!("{{{}}}", columns.join(", "))),
                    ]
                })
                .collect(),
        ),
        _ => return Ok(None),
    };
    let mut builders: Vec<VectorBuilder> = fields.iter().map(|f| VectorBuilder::new(f.data_type)).collect();
    for row in &rows {
        for (builder, value) in builders.iter_mut().zip(row) {
            builder.push_scalar(value);
        }
    }
    let columns: Vec<Vector> = builders.into_iter().map(|b| b.finish()).collect();
    temporary_table(name, fields, vec![columns], block_rows).map(Some)
}
