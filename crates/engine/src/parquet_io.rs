//! Reading and writing Parquet files through the `parquet` crate's Arrow interface.

use std::fs::File;
use std::path::{Path, PathBuf};

use apiary_common::{ApiaryError, Result};
use apiary_types::{DataChunk, Field, Vector};
use std::sync::Arc;

use apiary_storage::DeferredColumnStats;
use apiary_types::{Interval, ScalarValue, VectorData};
use arrow::array::{ArrayRef, FixedSizeBinaryArray};
use arrow::datatypes::{DataType as ArrowType, Field as ArrowField, IntervalUnit, Schema as ArrowSchema};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::arrow::{ArrowSchemaConverter, ArrowWriter, ProjectionMask};
use parquet::basic::{ConvertedType, Repetition, Type as PhysicalType};
use parquet::file::statistics::Statistics;
use parquet::schema::types::{SchemaDescriptor, Type as ParquetType};

use crate::arrow_convert::{array_to_vector, arrow_schema, chunk_to_batch, from_arrow_type, vector_to_array};

fn open(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ApiaryError::Io(format!("file \"{}\" does not exist", path.display())),
        _ => ApiaryError::Io(format!("cannot open \"{}\": {e}", path.display())),
    })
}

fn parquet_error(path: &Path, e: impl std::fmt::Display) -> ApiaryError {
    ApiaryError::Load { file: path.display().to_string(), line: 0, message: format!("not a readable Parquet file: {e}") }
}

/// A Parquet file's footer, parsed once: what binding a query to the file needs (its
/// columns, rows and statistics) and what its readers share. String columns are read as
/// Arrow string views, which become Apiary string columns by copying views and heaps (see
/// `arrow_convert::string_views`) rather than string by string.
#[derive(Debug, Clone)]
pub struct ParquetFooter {
    path: PathBuf,
    metadata: ArrowReaderMetadata,
}

impl ParquetFooter {
    pub fn read(path: &Path) -> Result<ParquetFooter> {
        let file = open(path)?;
        let plain = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new()).map_err(|e| parquet_error(path, e))?;
        let fields: Vec<ArrowField> = plain
            .schema()
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                ArrowType::Utf8 | ArrowType::LargeUtf8 => f.as_ref().clone().with_data_type(ArrowType::Utf8View),
                _ => f.as_ref().clone(),
            })
            .collect();
        let options = ArrowReaderOptions::new().with_schema(Arc::new(ArrowSchema::new(fields)));
        // A file whose columns cannot be read as views is read as written.
        let metadata = ArrowReaderMetadata::try_new(Arc::clone(plain.metadata()), options).unwrap_or(plain);
        Ok(ParquetFooter { path: path.to_path_buf(), metadata })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's columns as fields.
    pub fn fields(&self) -> Result<Vec<Field>> {
        self.metadata
            .schema()
            .fields()
            .iter()
            .map(|f| {
                let data_type = from_arrow_type(f.data_type()).map_err(|e| match e {
                    ApiaryError::NotImplemented(what) => {
                        ApiaryError::NotImplemented(format!("column \"{}\" of \"{}\": {what}", f.name(), self.path.display()))
                    }
                    other => other,
                })?;
                Ok(Field::new(f.name().to_lowercase(), data_type, f.is_nullable()))
            })
            .collect()
    }

    /// The number of rows.
    pub fn row_count(&self) -> usize {
        usize::try_from(self.metadata.metadata().file_metadata().num_rows()).unwrap_or(0)
    }

    /// What the file's data (of `columns`, top-level positions; all when `None`) takes
    /// uncompressed, the memory a read needs.
    pub fn uncompressed_bytes(&self, columns: Option<&[usize]>) -> usize {
        let total: i64 = self
            .metadata
            .metadata()
            .row_groups()
            .iter()
            .map(|g| match columns {
                None => g.total_byte_size().max(0),
                Some(columns) => columns.iter().filter_map(|&c| g.columns().get(c)).map(|c| c.uncompressed_size().max(0)).sum(),
            })
            .sum();
        usize::try_from(total).unwrap_or(usize::MAX)
    }

    /// The statistics a Parquet file records of each column (per row group, in its footer),
    /// for the optimizer: NULL counts, minimum and maximum of numbers and dates, and distinct
    /// counts where the writer gives them (DuckDB does for dictionary-encoded columns).
    /// `None` for a column whose row groups do not all record statistics.
    pub fn statistics(&self) -> Vec<Option<DeferredColumnStats>> {
        let fields = self.metadata.schema().fields().clone();
        let metadata = self.metadata.metadata();
        // Nested columns have several leaves: their statistics are not a column's.
        if metadata.file_metadata().schema_descr().num_columns() != fields.len() {
            return vec![None; fields.len()];
        }
        fields
            .iter()
            .enumerate()
            .map(|(column, field)| {
                let mut null_count = 0usize;
                let (mut min, mut max): (Option<ScalarValue>, Option<ScalarValue>) = (None, None);
                let mut bounded = true;
                let mut distinct: Option<(f64, f64)> = Some((0.0, 0.0)); // (sum, max) over row groups
                let mut low_cardinality = true;
                for group in metadata.row_groups() {
                    let statistics = group.columns().get(column)?.statistics()?;
                    null_count += usize::try_from(statistics.null_count_opt()?).unwrap_or(0);
                    match (statistics.distinct_count_opt(), distinct) {
                        (Some(d), Some((sum, most))) => {
                            distinct = Some((sum + d as f64, most.max(d as f64)));
                            // Each value repeated: row groups likely share their values.
                            low_cardinality &= (d as f64) * 8.0 <= group.num_rows() as f64;
                        }
                        _ => distinct = None,
                    }
                    match statistic_bounds(statistics, field.data_type()) {
                        Some((lo, hi)) if bounded => {
                            if min.as_ref().is_none_or(|m| lo.total_cmp(m).is_lt()) {
                                min = Some(lo);
                            }
                            if max.as_ref().is_none_or(|m| hi.total_cmp(m).is_gt()) {
                                max = Some(hi);
                            }
                        }
                        _ => bounded = false,
                    }
                }
                let (min, max) = match bounded {
                    true => (min.unwrap_or(ScalarValue::Null), max.unwrap_or(ScalarValue::Null)),
                    false => (ScalarValue::Null, ScalarValue::Null),
                };
                let distinct = distinct.map(|(sum, most)| if low_cardinality { most } else { sum });
                Some(DeferredColumnStats { distinct, min, max, null_count })
            })
            .collect()
    }
}

/// A row group's minimum and maximum of a column, for the types whose statistics are
/// stored as their values (not unsigned integers, whose statistics are signed).
fn statistic_bounds(statistics: &Statistics, arrow_type: &ArrowType) -> Option<(ScalarValue, ScalarValue)> {
    let pair = |lo: ScalarValue, hi: ScalarValue| Some((lo, hi));
    match (statistics, arrow_type) {
        (Statistics::Int32(v), ArrowType::Int32) => pair(ScalarValue::Int32(*v.min_opt()?), ScalarValue::Int32(*v.max_opt()?)),
        (Statistics::Int32(v), ArrowType::Int16) => {
            pair(ScalarValue::Int16(*v.min_opt()? as i16), ScalarValue::Int16(*v.max_opt()? as i16))
        }
        (Statistics::Int32(v), ArrowType::Date32) => pair(ScalarValue::Date(*v.min_opt()?), ScalarValue::Date(*v.max_opt()?)),
        (Statistics::Int64(v), ArrowType::Int64) => pair(ScalarValue::Int64(*v.min_opt()?), ScalarValue::Int64(*v.max_opt()?)),
        (Statistics::Int32(v), ArrowType::Decimal128(p, s)) if *s >= 0 => {
            pair(ScalarValue::Decimal(*v.min_opt()? as i128, *p, *s as u8), ScalarValue::Decimal(*v.max_opt()? as i128, *p, *s as u8))
        }
        (Statistics::Int64(v), ArrowType::Decimal128(p, s)) if *s >= 0 => {
            pair(ScalarValue::Decimal(*v.min_opt()? as i128, *p, *s as u8), ScalarValue::Decimal(*v.max_opt()? as i128, *p, *s as u8))
        }
        (Statistics::Float(v), ArrowType::Float32) if !v.min_opt()?.is_nan() && !v.max_opt()?.is_nan() => {
            pair(ScalarValue::Float32(*v.min_opt()?), ScalarValue::Float32(*v.max_opt()?))
        }
        (Statistics::Double(v), ArrowType::Float64) if !v.min_opt()?.is_nan() && !v.max_opt()?.is_nan() => {
            pair(ScalarValue::Float64(*v.min_opt()?), ScalarValue::Float64(*v.max_opt()?))
        }
        _ => None,
    }
}

/// The columns stored as Parquet INTERVALs (12 bytes: months, days, milliseconds).
/// The `parquet` crate reads them as Arrow day-time intervals, without the months, so the
/// months are read separately (as year-month intervals) and added.
fn interval_columns(parquet: &SchemaDescriptor) -> Vec<usize> {
    (0..parquet.num_columns()).filter(|&i| parquet.column(i).converted_type() == ConvertedType::INTERVAL).collect()
}

/// A reader of the months of the INTERVAL columns `columns`.
fn interval_months_reader(
    path: &Path,
    schema: &ArrowSchema,
    columns: &[usize],
    batch_rows: usize,
    group: usize,
) -> Result<ParquetRecordBatchReader> {
    let fields: Vec<ArrowField> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| match columns.contains(&i) {
            true => ArrowField::new(f.name(), ArrowType::Interval(IntervalUnit::YearMonth), f.is_nullable()),
            false => f.as_ref().clone(),
        })
        .collect();
    let options = ArrowReaderOptions::new().with_schema(Arc::new(ArrowSchema::new(fields)));
    let mut builder = ParquetRecordBatchReaderBuilder::try_new_with_options(open(path)?, options).map_err(|e| parquet_error(path, e))?;
    builder = builder.with_row_groups(vec![group]);
    let mask = ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied());
    builder.with_projection(mask).with_batch_size(batch_rows.max(1024)).build().map_err(|e| parquet_error(path, e))
}

/// Reads a Parquet file into chunks of vectors (types as in the file); the chunks are in
/// file order. With `columns` (top-level positions, ascending), only those are read, in
/// that order. Up to `threads` threads decode, largest pieces first: whole row groups when
/// the file has many of them, otherwise each row group's columns split into sets of about
/// equal size (a small file is often a single row group). Not ranges of rows: writers such
/// as DuckDB put a column chunk in one page, which every range's reader would decompress
/// whole.
pub fn read_parquet(footer: &ParquetFooter, batch_rows: usize, threads: usize, columns: Option<&[usize]>) -> Result<Vec<Vec<Vector>>> {
    let (path, metadata) = (footer.path(), &footer.metadata);
    let row_groups = metadata.metadata().num_row_groups();
    let all: Vec<usize> = (0..metadata.schema().fields().len()).collect();
    let columns = columns.unwrap_or(&all);
    let threads = threads.max(1);
    // With few row groups per thread, whole row groups balance badly (five on two threads
    // is three against two): each is cut into column sets too.
    let column_sets = match row_groups >= 4 * threads {
        true => vec![columns.to_vec()],
        false => split_columns(metadata, columns, threads),
    };
    let mut units: Vec<(usize, usize)> = (0..row_groups).flat_map(|g| (0..column_sets.len()).map(move |s| (g, s))).collect();
    // Largest first, so that the last unit a thread takes is a small one.
    let unit_bytes = |&(group, set): &(usize, usize)| -> i64 {
        let parquet = metadata.metadata().file_metadata().schema_descr();
        let chunks = metadata.metadata().row_group(group).columns();
        let in_set = |leaf: usize| column_sets[set].contains(&parquet.get_column_root_idx(leaf));
        chunks.iter().enumerate().filter(|(leaf, _)| in_set(*leaf)).map(|(_, c)| c.uncompressed_size().max(0)).sum()
    };
    units.sort_by_cached_key(|unit| std::cmp::Reverse(unit_bytes(unit)));
    let read_unit = |&(group, set): &(usize, usize)| read_row_group(path, metadata, batch_rows, group, &column_sets[set]);
    let results: Vec<Result<Vec<Vec<Vector>>>> = apiary_common::parallel::map_in_parallel(&units, threads, read_unit);
    // Each requested column: its set, and its position there.
    let located: Vec<(usize, usize)> = columns
        .iter()
        .map(|c| column_sets.iter().enumerate().find_map(|(s, set)| set.iter().position(|x| x == c).map(|p| (s, p))).unwrap_or((0, 0)))
        .collect();
    // Back in (row group, set) order.
    let mut results: Vec<((usize, usize), Result<Vec<Vec<Vector>>>)> = units.into_iter().zip(results).collect();
    results.sort_by_key(|(unit, _)| *unit);
    let mut results = results.into_iter().map(|(_, result)| result);
    let mut pieces = Vec::new();
    for _ in 0..row_groups {
        // The sets of one row group were read in batches of the same size: they line up.
        let sets = (0..column_sets.len()).map(|_| results.next().unwrap_or_else(|| Ok(Vec::new()))).collect::<Result<Vec<_>>>()?;
        let batches = sets.first().map_or(0, Vec::len);
        if sets.iter().any(|s| s.len() != batches) {
            return Err(parquet_error(path, "the columns of a row group have different numbers of rows"));
        }
        for batch in 0..batches {
            pieces.push(located.iter().map(|&(s, p)| sets[s][batch][p].clone()).collect());
        }
    }
    Ok(pieces)
}

/// `columns` split into up to `parts` sets of about equal uncompressed size (largest
/// first into the lightest set), each ascending.
fn split_columns(metadata: &ArrowReaderMetadata, columns: &[usize], parts: usize) -> Vec<Vec<usize>> {
    let parts = parts.min(columns.len()).max(1);
    // Bytes of each top-level column, summed over row groups and leaf columns.
    let parquet = metadata.metadata().file_metadata().schema_descr();
    let mut bytes = vec![0i64; metadata.schema().fields().len()];
    for group in metadata.metadata().row_groups() {
        for (leaf, chunk) in group.columns().iter().enumerate() {
            if let Some(b) = bytes.get_mut(parquet.get_column_root_idx(leaf)) {
                *b += chunk.uncompressed_size().max(0);
            }
        }
    }
    let mut order = columns.to_vec();
    order.sort_by_key(|&c| std::cmp::Reverse(bytes.get(c).copied().unwrap_or(0)));
    let mut sets: Vec<(i64, Vec<usize>)> = vec![(0, Vec::new()); parts];
    for c in order {
        if let Some(lightest) = sets.iter_mut().min_by_key(|(size, _)| *size) {
            lightest.0 += bytes.get(c).copied().unwrap_or(0);
            lightest.1.push(c);
        }
    }
    sets.into_iter()
        .filter(|(_, set)| !set.is_empty())
        .map(|(_, mut set)| {
            set.sort_unstable();
            set
        })
        .collect()
}

/// Reads the `columns` (ascending) of one row group.
fn read_row_group(
    path: &Path,
    metadata: &ArrowReaderMetadata,
    batch_rows: usize,
    group: usize,
    columns: &[usize],
) -> Result<Vec<Vec<Vector>>> {
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(open(path)?, metadata.clone()).with_row_groups(vec![group]);
    let fields: Vec<_> = columns.iter().map(|&c| builder.schema().fields()[c].clone()).collect();
    // INTERVAL columns among those read: their positions in the file and in the batch.
    let intervals: Vec<usize> = interval_columns(builder.parquet_schema()).into_iter().filter(|c| columns.contains(c)).collect();
    let interval_positions: Vec<usize> = intervals.iter().filter_map(|c| columns.iter().position(|x| x == c)).collect();
    let mut months = match intervals.is_empty() {
        true => None,
        false => Some(interval_months_reader(path, builder.schema(), &intervals, batch_rows, group)?),
    };
    let mask = ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied());
    let reader = builder.with_projection(mask).with_batch_size(batch_rows.max(1024)).build().map_err(|e| parquet_error(path, e))?;
    let mut pieces = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| parquet_error(path, e))?;
        let mut columns = batch
            .columns()
            .iter()
            .zip(fields.iter())
            .map(|(array, field)| array_to_vector(array, from_arrow_type(field.data_type())?))
            .collect::<Result<Vec<_>>>()?;
        if let Some(months) = &mut months {
            // The same row groups in batches of the same size: the batches line up.
            let month_batch =
                months.next().ok_or_else(|| parquet_error(path, "an INTERVAL column ended early"))?.map_err(|e| parquet_error(path, e))?;
            for (&column, array) in interval_positions.iter().zip(month_batch.columns()) {
                let month_values = array_to_vector(array, apiary_types::DataType::Interval)?;
                columns[column] = add_months(&columns[column], &month_values);
            }
        }
        pieces.push(columns);
    }
    Ok(pieces)
}

/// `days` (an interval vector without months) with the months of `months`.
fn add_months(days: &Vector, months: &Vector) -> Vector {
    match (&days.data, &months.data) {
        (VectorData::Interval(d), VectorData::Interval(m)) => {
            let values: Vec<Interval> = d.iter().zip(m.iter()).map(|(d, m)| Interval::new(m.months, d.days, d.micros)).collect();
            Vector::new(days.data_type, VectorData::Interval(values.into()), days.validity.clone())
        }
        _ => days.clone(),
    }
}

/// Rows per row group of written Parquet files: a storage block's worth, so readers
/// (Apiary's included) can decode row groups in parallel.
const PARQUET_ROW_GROUP_ROWS: usize = 65_536;

/// Writes chunks to a Parquet file (snappy-compressed).
/// INTERVAL columns are written as Parquet INTERVALs (months, days, milliseconds, as
/// DuckDB and Spark write them; microseconds are cut to milliseconds).
pub fn write_parquet(path: &Path, names: &[String], types: &[apiary_types::DataType], chunks: &[DataChunk]) -> Result<u64> {
    let intervals: Vec<usize> = (0..types.len()).filter(|&i| types[i] == apiary_types::DataType::Interval).collect();
    let mut schema = arrow_schema(names, types);
    if !intervals.is_empty() {
        let fields: Vec<ArrowField> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| match intervals.contains(&i) {
                true => ArrowField::new(f.name(), ArrowType::FixedSizeBinary(12), true),
                false => f.as_ref().clone(),
            })
            .collect();
        schema = Arc::new(ArrowSchema::new(fields));
    }
    let file = File::create(path).map_err(|e| ApiaryError::Io(format!("cannot create \"{}\": {e}", path.display())))?;
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_max_row_group_row_count(Some(PARQUET_ROW_GROUP_ROWS))
        .build();
    let mut options = ArrowWriterOptions::new().with_properties(properties);
    if !intervals.is_empty() {
        options = options.with_parquet_schema(interval_parquet_schema(&schema, &intervals)?).with_skip_arrow_metadata(true);
    }
    let mut writer = ArrowWriter::try_new_with_options(file, schema.clone(), options).map_err(|e| ApiaryError::Io(e.to_string()))?;
    let mut rows = 0u64;
    for chunk in chunks {
        rows += chunk.row_count() as u64;
        let batch = match intervals.is_empty() {
            true => chunk_to_batch(chunk, schema.clone())?,
            false => {
                let chunk = chunk.clone().compact();
                let arrays = chunk
                    .columns
                    .iter()
                    .enumerate()
                    .map(|(i, v)| if intervals.contains(&i) { Ok(interval_array(v)) } else { vector_to_array(v) })
                    .collect::<Result<Vec<_>>>()?;
                let options = RecordBatchOptions::new().with_row_count(Some(chunk.row_count()));
                RecordBatch::try_new_with_options(schema.clone(), arrays, &options).map_err(|e| ApiaryError::Io(e.to_string()))?
            }
        };
        writer.write(&batch).map_err(|e| ApiaryError::Io(format!("writing \"{}\": {e}", path.display())))?;
    }
    writer.close().map_err(|e| ApiaryError::Io(format!("writing \"{}\": {e}", path.display())))?;
    Ok(rows)
}

/// The Parquet schema of `schema` with the 12-byte columns `intervals` marked INTERVAL.
fn interval_parquet_schema(schema: &ArrowSchema, intervals: &[usize]) -> Result<SchemaDescriptor> {
    let converted = ArrowSchemaConverter::new().convert(schema).map_err(|e| ApiaryError::Io(e.to_string()))?;
    let root = converted.root_schema();
    let mut fields: Vec<Arc<ParquetType>> = root.get_fields().to_vec();
    for &i in intervals {
        let field = ParquetType::primitive_type_builder(fields[i].name(), PhysicalType::FIXED_LEN_BYTE_ARRAY)
            .with_length(12)
            .with_converted_type(ConvertedType::INTERVAL)
            .with_repetition(Repetition::OPTIONAL)
            .build()
            .map_err(|e| ApiaryError::Io(e.to_string()))?;
        fields[i] = Arc::new(field);
    }
    let root = ParquetType::group_type_builder(root.name()).with_fields(fields).build().map_err(|e| ApiaryError::Io(e.to_string()))?;
    Ok(SchemaDescriptor::new(Arc::new(root)))
}

/// An interval vector as Parquet INTERVAL bytes: months, days, milliseconds (little
/// endian; negative fields in two's complement, as DuckDB writes them).
fn interval_array(vector: &Vector) -> ArrayRef {
    let values: Vec<Option<[u8; 12]>> = match &vector.data {
        VectorData::Interval(values) => values
            .iter()
            .enumerate()
            .map(|(row, i)| {
                vector.is_valid(row).then(|| {
                    let mut b = [0u8; 12];
                    b[0..4].copy_from_slice(&i.months.to_le_bytes());
                    b[4..8].copy_from_slice(&i.days.to_le_bytes());
                    b[8..12].copy_from_slice(&(i.micros.div_euclid(1000) as i32).to_le_bytes());
                    b
                })
            })
            .collect(),
        _ => Vec::new(),
    };
    Arc::new(
        FixedSizeBinaryArray::try_from_sparse_iter_with_size(values.into_iter(), 12)
            .unwrap_or_else(|_| FixedSizeBinaryArray::new_null(12, 0)),
    )
}
