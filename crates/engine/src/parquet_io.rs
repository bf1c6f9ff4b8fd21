//! Reading and writing Parquet files through the `parquet` crate's Arrow interface.

use std::fs::File;
use std::path::Path;

use apiary_common::{ApiaryError, Result};
use apiary_types::{DataChunk, Field, Vector};
use std::sync::Arc;

use apiary_types::{Interval, VectorData};
use arrow::array::{ArrayRef, FixedSizeBinaryArray};
use arrow::datatypes::{DataType as ArrowType, Field as ArrowField, IntervalUnit, Schema as ArrowSchema};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::arrow::{ArrowSchemaConverter, ArrowWriter, ProjectionMask};
use parquet::basic::{ConvertedType, Repetition, Type as PhysicalType};
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

/// The columns of a Parquet file as fields.
/// What the file's data (of `columns`, top-level positions; all when `None`) takes
/// uncompressed (from its metadata), the memory a read needs.
pub fn parquet_uncompressed_bytes(path: &Path, columns: Option<&[usize]>) -> Result<usize> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(|e| parquet_error(path, e))?;
    let total: i64 = builder
        .metadata()
        .row_groups()
        .iter()
        .map(|g| match columns {
            None => g.total_byte_size().max(0),
            Some(columns) => columns.iter().filter_map(|&c| g.columns().get(c)).map(|c| c.uncompressed_size().max(0)).sum(),
        })
        .sum();
    Ok(usize::try_from(total).unwrap_or(usize::MAX))
}

/// The number of rows in a Parquet file (from its metadata).
pub fn parquet_row_count(path: &Path) -> Result<usize> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(|e| parquet_error(path, e))?;
    Ok(usize::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0))
}

pub fn parquet_fields(path: &Path) -> Result<Vec<Field>> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(|e| parquet_error(path, e))?;
    builder
        .schema()
        .fields()
        .iter()
        .map(|f| {
            let data_type = from_arrow_type(f.data_type()).map_err(|e| match e {
                ApiaryError::NotImplemented(what) => {
                    ApiaryError::NotImplemented(format!("column \"{}\" of \"{}\": {what}", f.name(), path.display()))
                }
                other => other,
            })?;
            Ok(Field::new(f.name().to_lowercase(), data_type, f.is_nullable()))
        })
        .collect()
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
    group: Option<usize>,
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
    if let Some(group) = group {
        builder = builder.with_row_groups(vec![group]);
    }
    let mask = ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied());
    builder.with_projection(mask).with_batch_size(batch_rows.max(1024)).build().map_err(|e| parquet_error(path, e))
}

/// Reads a Parquet file into chunks of vectors (types as in the file), decoding its row
/// groups on up to `threads` threads; the chunks are in file order. With `columns`
/// (top-level positions, ascending), only those are read, in that order.
pub fn read_parquet(path: &Path, batch_rows: usize, threads: usize, columns: Option<&[usize]>) -> Result<Vec<Vec<Vector>>> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(|e| parquet_error(path, e))?;
    let row_groups = builder.metadata().num_row_groups();
    if row_groups <= 1 || threads <= 1 {
        return read_row_groups(path, batch_rows, None, columns);
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<Vec<Vec<Vector>>>>>> = (0..row_groups).map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.min(row_groups) {
            scope.spawn(|| loop {
                let group = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if group >= row_groups {
                    break;
                }
                let pieces = read_row_groups(path, batch_rows, Some(group), columns);
                *results[group].lock().unwrap_or_else(|e| e.into_inner()) = Some(pieces);
            });
        }
    });
    let mut pieces = Vec::new();
    for result in results {
        match result.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(group) => pieces.extend(group?),
            None => return Err(apiary_common::internal_err!("a Parquet row group was not read")),
        }
    }
    Ok(pieces)
}

/// Reads one row group (all when `None`), the `columns` given (all when `None`).
fn read_row_groups(path: &Path, batch_rows: usize, group: Option<usize>, columns: Option<&[usize]>) -> Result<Vec<Vec<Vector>>> {
    let mut builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(|e| parquet_error(path, e))?;
    if let Some(group) = group {
        builder = builder.with_row_groups(vec![group]);
    }
    let all: Vec<usize> = (0..builder.schema().fields().len()).collect();
    let columns = columns.unwrap_or(&all);
    let fields: Vec<_> = columns.iter().map(|&c| builder.schema().fields()[c].clone()).collect();
    // INTERVAL columns among those read: their positions in the file and in the batch.
    let intervals: Vec<usize> = interval_columns(builder.parquet_schema()).into_iter().filter(|c| columns.contains(c)).collect();
    let interval_positions: Vec<usize> = intervals.iter().filter_map(|c| columns.iter().position(|x| x == c)).collect();
    let mut months = match intervals.is_empty() {
        true => None,
        false => Some(interval_months_reader(path, builder.schema(), &intervals, batch_rows, group)?),
    };
    if columns.len() < all.len() {
        let mask = ProjectionMask::roots(builder.parquet_schema(), columns.iter().copied());
        builder = builder.with_projection(mask);
    }
    let reader = builder.with_batch_size(batch_rows.max(1024)).build().map_err(|e| parquet_error(path, e))?;
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
