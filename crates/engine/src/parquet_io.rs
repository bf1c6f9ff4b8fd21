//! Reading and writing Parquet files through the `parquet` crate's Arrow interface.

use std::fs::File;
use std::path::Path;

use apiary_common::{ApiaryError, Result};
use apiary_types::{DataChunk, Field, Vector};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;

use crate::arrow_convert::{array_to_vector, arrow_schema, chunk_to_batch, from_arrow_type};

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
/// What the file's data takes uncompressed (from its metadata), the memory a read needs.
pub fn parquet_uncompressed_bytes(path: &Path) -> Result<usize> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(|e| parquet_error(path, e))?;
    let total: i64 = builder.metadata().row_groups().iter().map(|g| g.total_byte_size().max(0)).sum();
    Ok(usize::try_from(total).unwrap_or(usize::MAX))
}

pub fn parquet_fields(path: &Path) -> Result<Vec<Field>> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(|e| parquet_error(path, e))?;
    builder
        .schema()
        .fields()
        .iter()
        .map(|f| Ok(Field::new(f.name().to_lowercase(), from_arrow_type(f.data_type())?, f.is_nullable())))
        .collect()
}

/// Reads a Parquet file into chunks of vectors (types as in the file), decoding its row
/// groups on up to `threads` threads; the chunks are in file order.
pub fn read_parquet(path: &Path, batch_rows: usize, threads: usize) -> Result<Vec<Vec<Vector>>> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(|e| parquet_error(path, e))?;
    let row_groups = builder.metadata().num_row_groups();
    if row_groups <= 1 || threads <= 1 {
        return read_row_groups(path, batch_rows, None);
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
                let pieces = read_row_groups(path, batch_rows, Some(group));
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

/// Reads one row group (all when `None`).
fn read_row_groups(path: &Path, batch_rows: usize, group: Option<usize>) -> Result<Vec<Vec<Vector>>> {
    let mut builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(|e| parquet_error(path, e))?;
    if let Some(group) = group {
        builder = builder.with_row_groups(vec![group]);
    }
    let fields = builder.schema().fields().clone();
    let reader = builder.with_batch_size(batch_rows.max(1024)).build().map_err(|e| parquet_error(path, e))?;
    let mut pieces = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| parquet_error(path, e))?;
        let columns = batch
            .columns()
            .iter()
            .zip(fields.iter())
            .map(|(array, field)| array_to_vector(array, from_arrow_type(field.data_type())?))
            .collect::<Result<Vec<_>>>()?;
        pieces.push(columns);
    }
    Ok(pieces)
}

/// Rows per row group of written Parquet files: a storage block's worth, so readers
/// (Apiary's included) can decode row groups in parallel.
const PARQUET_ROW_GROUP_ROWS: usize = 65_536;

/// Writes chunks to a Parquet file (snappy-compressed).
pub fn write_parquet(path: &Path, names: &[String], types: &[apiary_types::DataType], chunks: &[DataChunk]) -> Result<u64> {
    let schema = arrow_schema(names, types);
    let file = File::create(path).map_err(|e| ApiaryError::Io(format!("cannot create \"{}\": {e}", path.display())))?;
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_max_row_group_row_count(Some(PARQUET_ROW_GROUP_ROWS))
        .build();
    let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(properties)).map_err(|e| ApiaryError::Io(e.to_string()))?;
    let mut rows = 0u64;
    for chunk in chunks {
        rows += chunk.row_count() as u64;
        let batch = chunk_to_batch(chunk, schema.clone())?;
        writer.write(&batch).map_err(|e| ApiaryError::Io(format!("writing \"{}\": {e}", path.display())))?;
    }
    writer.close().map_err(|e| ApiaryError::Io(format!("writing \"{}\": {e}", path.display())))?;
    Ok(rows)
}
