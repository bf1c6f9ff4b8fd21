//! Conversion between Apiary vectors and Arrow arrays (interchange: results, Parquet).

use std::ptr::NonNull;
use std::sync::Arc;

use apiary_common::{not_impl_err, Bitmap, Result};
use apiary_types::string::{Heap, INLINE_LEN};
use apiary_types::{Buffer, DataChunk, DataType, Interval, StrColumn, StrColumnBuilder, StrView, Vector, VectorBuilder, VectorData};
use arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array,
    IntervalMonthDayNanoArray, LargeStringArray, StringArray, StringViewArray, Time64MicrosecondArray, TimestampMicrosecondArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::ArrowNativeType;
use arrow::datatypes::{DataType as ArrowType, Field as ArrowField, IntervalMonthDayNano, Schema as ArrowSchema, TimeUnit};
use arrow::record_batch::RecordBatch;

use crate::result::QueryResult;

/// The zone TIMESTAMPTZ columns are written with.
const UTC: &str = "UTC";

/// The Arrow type that represents `data_type`.
pub fn to_arrow_type(data_type: DataType) -> ArrowType {
    match data_type {
        DataType::Null | DataType::Boolean => ArrowType::Boolean,
        DataType::SmallInt => ArrowType::Int16,
        DataType::Integer => ArrowType::Int32,
        DataType::BigInt => ArrowType::Int64,
        DataType::Real => ArrowType::Float32,
        DataType::Double => ArrowType::Float64,
        DataType::Decimal { precision, scale } => ArrowType::Decimal128(precision, scale as i8),
        DataType::Char(_) | DataType::Varchar(_) => ArrowType::Utf8,
        DataType::Date => ArrowType::Date32,
        DataType::Timestamp => ArrowType::Timestamp(TimeUnit::Microsecond, None),
        // Instants are written as UTC timestamps (Parquet: adjusted to UTC).
        DataType::TimestampTz => ArrowType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        DataType::Time => ArrowType::Time64(TimeUnit::Microsecond),
        DataType::Interval => ArrowType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano),
    }
}

/// The Apiary type for an Arrow type (for reading Parquet files).
pub fn from_arrow_type(arrow_type: &ArrowType) -> Result<DataType> {
    Ok(match arrow_type {
        ArrowType::Boolean => DataType::Boolean,
        ArrowType::Int8 | ArrowType::Int16 | ArrowType::UInt8 => DataType::SmallInt,
        ArrowType::Int32 | ArrowType::UInt16 => DataType::Integer,
        ArrowType::Int64 | ArrowType::UInt32 => DataType::BigInt,
        ArrowType::UInt64 => DataType::decimal(20, 0),
        ArrowType::Float16 | ArrowType::Float32 => DataType::Real,
        ArrowType::Float64 => DataType::Double,
        ArrowType::Decimal32(p, s) | ArrowType::Decimal64(p, s) | ArrowType::Decimal128(p, s) if *s >= 0 && *p <= 38 => {
            DataType::decimal(*p, *s as u8)
        }
        ArrowType::Utf8 | ArrowType::LargeUtf8 | ArrowType::Utf8View => DataType::Varchar(None),
        ArrowType::Date32 | ArrowType::Date64 => DataType::Date,
        // With a time zone the values are UTC instants: TIMESTAMPTZ.
        ArrowType::Timestamp(_, Some(_)) => DataType::TimestampTz,
        ArrowType::Timestamp(_, None) => DataType::Timestamp,
        ArrowType::Time32(_) | ArrowType::Time64(_) => DataType::Time,
        ArrowType::Interval(_) => DataType::Interval,
        ArrowType::List(_)
        | ArrowType::LargeList(_)
        | ArrowType::ListView(_)
        | ArrowType::LargeListView(_)
        | ArrowType::FixedSizeList(..)
        | ArrowType::Struct(_)
        | ArrowType::Map(..)
        | ArrowType::Union(..) => {
            return Err(not_impl_err!("nested type {other} (lists, structs and maps are not supported yet)", other = arrow_type))
        }
        other => return Err(not_impl_err!("Arrow/Parquet type {other}")),
    })
}

fn nulls(vector: &Vector) -> Option<NullBuffer> {
    vector.validity.as_ref().map(|v| NullBuffer::from((0..v.len()).map(|i| v.get(i)).collect::<Vec<bool>>()))
}

/// The validity of vectors one after another (`None` when none has NULLs).
fn joint_nulls(vectors: &[&Vector]) -> Option<NullBuffer> {
    vectors
        .iter()
        .any(|v| v.validity.is_some())
        .then(|| NullBuffer::from(vectors.iter().flat_map(|v| (0..v.len()).map(move |i| v.is_valid(i))).collect::<Vec<bool>>()))
}

/// Converts one vector to an Arrow array.
pub fn vector_to_array(vector: &Vector) -> Result<ArrayRef> {
    let n = nulls(vector);
    Ok(match (&vector.data, vector.data_type) {
        (VectorData::Bool(b), _) => Arc::new(BooleanArray::new(b.iter().copied().collect(), n)),
        (VectorData::I16(b), _) => Arc::new(Int16Array::new(shared_scalars(b), n)),
        (VectorData::I32(b), DataType::Date) => Arc::new(Date32Array::new(shared_scalars(b), n)),
        (VectorData::I32(b), _) => Arc::new(Int32Array::new(shared_scalars(b), n)),
        (VectorData::I64(b), DataType::Timestamp) => Arc::new(TimestampMicrosecondArray::new(shared_scalars(b), n)),
        (VectorData::I64(b), DataType::TimestampTz) => Arc::new(TimestampMicrosecondArray::new(shared_scalars(b), n).with_timezone(UTC)),
        (VectorData::I64(b), DataType::Time) => Arc::new(Time64MicrosecondArray::new(shared_scalars(b), n)),
        (VectorData::I64(b), DataType::Decimal { precision, scale }) => Arc::new(
            Decimal128Array::new(b.iter().map(|&x| x as i128).collect::<Vec<_>>().into(), n)
                .with_precision_and_scale(precision, scale as i8)
                .map_err(arrow_error)?,
        ),
        (VectorData::I64(b), _) => Arc::new(Int64Array::new(shared_scalars(b), n)),
        (VectorData::I128(b), DataType::Decimal { precision, scale }) => {
            Arc::new(Decimal128Array::new(shared_scalars(b), n).with_precision_and_scale(precision, scale as i8).map_err(arrow_error)?)
        }
        (VectorData::I128(b), _) => {
            Arc::new(Decimal128Array::new(shared_scalars(b), n).with_precision_and_scale(38, 0).map_err(arrow_error)?)
        }
        (VectorData::F32(b), _) => Arc::new(Float32Array::new(shared_scalars(b), n)),
        (VectorData::F64(b), _) => Arc::new(Float64Array::new(shared_scalars(b), n)),
        (VectorData::Str(s), _) => Arc::new(string_array(&[s], n)?),
        (VectorData::Interval(b), _) => Arc::new(IntervalMonthDayNanoArray::new(
            b.iter().map(|i| IntervalMonthDayNano::new(i.months, i.days, i.micros * 1000)).collect::<Vec<_>>().into(),
            n,
        )),
    })
}

/// String columns (one result chunk's, or several chunks' one after another) as one
/// Arrow string array (offsets and bytes), in one pass: a short string is copied from its
/// view with one fixed-size move, a long one from its heap. A NULL row is an empty string
/// under its validity bit.
fn string_array(columns: &[&StrColumn], nulls: Option<NullBuffer>) -> Result<StringArray> {
    let total: usize = columns
        .iter()
        .map(|c| match coded_values(c) {
            Some((codes, values)) => codes.iter().map(|&code| values.get(code as usize).map_or(0, StrView::len)).sum(),
            None => c.views().iter().map(StrView::len).sum::<usize>(),
        })
        .sum();
    if total > i32::MAX as usize {
        return Err(not_impl_err!("more than 2 GB of text in one Arrow batch"));
    }
    let rows: usize = columns.iter().map(|c| c.len()).sum();
    let mut offsets = Vec::with_capacity(rows + 1);
    offsets.push(0i32);
    // Room for a full inline copy past the last string.
    let mut bytes: Vec<u8> = Vec::with_capacity(total + INLINE_LEN);
    let mut end = 0usize;
    for column in columns {
        let heaps = column.heaps();
        // SAFETY (both calls): `bytes` holds `total + INLINE_LEN` bytes, `total` being the
        // length of these strings and the others'.
        match coded_values(column) {
            Some((codes, values)) => unsafe {
                let views = codes.iter().map(|&code| values.get(code as usize).copied().unwrap_or_default());
                append_strings(views, heaps, &mut bytes, &mut end, &mut offsets)
            },
            None => unsafe { append_strings(column.views().iter().copied(), heaps, &mut bytes, &mut end, &mut offsets) },
        }
    }
    // SAFETY: the first `end` bytes were written above.
    unsafe { bytes.set_len(end) };
    // SAFETY: the offsets start at 0 and grow by each string's length, and the bytes are
    // the concatenation of the strings, each valid UTF-8.
    Ok(unsafe { StringArray::new_unchecked(OffsetBuffer::new_unchecked(offsets.into()), bytes.into(), nulls) })
}

/// A column still held as dictionary codes (decoded by a scan from a packed block, its
/// views not built yet): its codes and the dictionary's values, so that an export reads
/// each code's value instead of building views for one pass.
fn coded_values(column: &StrColumn) -> Option<(&[u8], &[StrView])> {
    match &column.codes {
        Some(codes) if !column.views_decoded() => Some((codes.codes.as_slice(), codes.values.as_slice())),
        _ => None,
    }
}

/// Appends the strings of `views` (into `heaps`) to `bytes` from position `end` (moved
/// on), and each string's end offset: a short string is copied from its view with one
/// fixed-size move, a long one from its heap.
///
/// # Safety
/// `bytes` has capacity for the strings from `end` plus [`INLINE_LEN`] bytes.
#[inline(always)]
unsafe fn append_strings(
    views: impl Iterator<Item = StrView>,
    heaps: &[Heap],
    bytes: &mut Vec<u8>,
    end: &mut usize,
    offsets: &mut Vec<i32>,
) {
    let out = bytes.as_mut_ptr();
    for view in views {
        let len = view.len();
        // SAFETY: the caller's capacity covers `end + len` and a full inline copy past
        // the last string; the sources are the view's own bytes or its heap slice.
        unsafe {
            if len <= INLINE_LEN {
                std::ptr::copy_nonoverlapping(view.data().as_ptr(), out.add(*end), INLINE_LEN);
            } else {
                std::ptr::copy_nonoverlapping(view.bytes(heaps).as_ptr(), out.add(*end), len);
            }
        }
        *end += len;
        offsets.push(*end as i32);
    }
}

/// The same column of several chunks as one Arrow array.
fn concatenated_array(vectors: &[&Vector]) -> Result<ArrayRef> {
    if let [vector] = vectors {
        return vector_to_array(vector);
    }
    let strings: Option<Vec<&StrColumn>> = vectors
        .iter()
        .map(|v| match &v.data {
            VectorData::Str(s) => Some(s),
            _ => None,
        })
        .collect();
    if let Some(columns) = strings {
        let nulls = joint_nulls(vectors);
        return Ok(Arc::new(string_array(&columns, nulls)?));
    }
    if let DataType::Decimal { precision, scale } = vectors[0].data_type {
        if vectors.iter().all(|v| matches!(v.data, VectorData::I64(_))) {
            // Widened to Arrow's 128 bits in the one copy.
            let values: Vec<i128> = vectors.iter().flat_map(|v| v.values::<i64>().iter().map(|&x| x as i128)).collect();
            let nulls = joint_nulls(vectors);
            let array = Decimal128Array::new(values.into(), nulls).with_precision_and_scale(precision, scale as i8).map_err(arrow_error)?;
            return Ok(Arc::new(array));
        }
    }
    // Fixed-width values: the chunks' values and validity appended into one vector (one
    // copy), then converted like a single vector.
    let total: usize = vectors.iter().map(|v| v.len()).sum();
    let mut builder = VectorBuilder::with_capacity(vectors[0].data_type, total);
    for vector in vectors {
        builder.append(vector, None);
    }
    vector_to_array(&builder.finish())
}

fn arrow_error(e: arrow::error::ArrowError) -> apiary_common::ApiaryError {
    apiary_common::ApiaryError::Execution(format!("Arrow conversion: {e}"))
}

/// The Arrow schema of a result.
pub fn arrow_schema(names: &[String], types: &[DataType]) -> Arc<ArrowSchema> {
    Arc::new(ArrowSchema::new(names.iter().zip(types).map(|(n, t)| ArrowField::new(n, to_arrow_type(*t), true)).collect::<Vec<_>>()))
}

/// Converts a chunk to a record batch with `schema`.
pub fn chunk_to_batch(chunk: &DataChunk, schema: Arc<ArrowSchema>) -> Result<RecordBatch> {
    let chunk = chunk.clone().compact();
    let arrays = chunk.columns.iter().map(vector_to_array).collect::<Result<Vec<_>>>()?;
    let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(chunk.row_count()));
    RecordBatch::try_new_with_options(schema, arrays, &options).map_err(arrow_error)
}

/// Rows per record batch of a result (DuckDB's default too): a batch of one chunk shares
/// its fixed-width columns with Apiary's vectors, while many small chunks (a vector's
/// worth of rows each) become one batch, since consumers (pandas, Polars) pay per batch.
const RESULT_BATCH_ROWS: usize = 1 << 20;

pub fn result_to_batches(result: &QueryResult) -> Result<Vec<RecordBatch>> {
    result_to_batches_as(result, &vec![false; result.columns.len()], 1)
}

/// The result's Arrow schema with text as string views (`Utf8View`) in the columns
/// marked in `string_views`.
pub fn arrow_schema_as(names: &[String], types: &[DataType], string_views: &[bool]) -> Arc<ArrowSchema> {
    let fields = names.iter().zip(types).zip(string_views.iter().chain(std::iter::repeat(&false))).map(|((name, t), &view)| {
        let arrow_type = match to_arrow_type(*t) {
            ArrowType::Utf8 if view => ArrowType::Utf8View,
            other => other,
        };
        ArrowField::new(name, arrow_type, true)
    });
    Arc::new(ArrowSchema::new(fields.collect::<Vec<_>>()))
}

/// [`result_to_batches`] with text as string views in the columns marked in
/// `string_views`, converting up to `threads` batches at a time. The views and heaps are
/// handed over as Apiary holds them (Arrow's view layout is [`StrView`]'s), so those
/// columns cost no copy of their bytes; consumers that keep text as views (Polars) ask
/// for them.
pub fn result_to_batches_as(result: &QueryResult, string_views: &[bool], threads: usize) -> Result<Vec<RecordBatch>> {
    let schema = arrow_schema_as(&result.columns, &result.types, string_views);
    // The chunks of each batch: consecutive chunks up to RESULT_BATCH_ROWS rows.
    let mut groups: Vec<(Vec<DataChunk>, usize)> = Vec::new();
    let mut group: Vec<DataChunk> = Vec::new();
    let mut rows = 0;
    for chunk in &result.chunks {
        let chunk = chunk.clone().compact();
        if rows > 0 && rows + chunk.row_count() > RESULT_BATCH_ROWS {
            groups.push((std::mem::take(&mut group), rows));
            rows = 0;
        }
        rows += chunk.row_count();
        group.push(chunk);
    }
    if !group.is_empty() {
        groups.push((group, rows));
    }
    // Batches are independent.
    let convert = |(chunks, rows): &(Vec<DataChunk>, usize)| chunks_to_batch(chunks, *rows, Arc::clone(&schema));
    apiary_common::parallel::map_in_parallel(&groups, threads, convert).into_iter().collect()
}

/// Compacted chunks (`rows` rows in all) as one record batch with `schema`.
fn chunks_to_batch(chunks: &[DataChunk], rows: usize, schema: Arc<ArrowSchema>) -> Result<RecordBatch> {
    let arrays = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(column, field)| {
            let vectors: Vec<&Vector> = chunks.iter().map(|chunk| &chunk.columns[column]).collect();
            match field.data_type() {
                ArrowType::Utf8View => string_view_array(&vectors).map(|array| Arc::new(array) as ArrayRef),
                _ => concatenated_array(&vectors),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(schema, arrays, &options).map_err(arrow_error)
}

/// String vectors (one after another) as one Arrow string-view array. The heaps become
/// the array's data buffers without copying (each heap once, however many vectors share
/// it); one vector's views are shared as they are, several vectors' are copied with
/// their heap numbers renumbered into the joint list.
fn string_view_array(vectors: &[&Vector]) -> Result<StringViewArray> {
    let mut buffers: Vec<arrow::buffer::Buffer> = Vec::new();
    let mut buffer_of_heap: std::collections::HashMap<*const Vec<u8>, u32> = std::collections::HashMap::new();
    let mut columns = Vec::with_capacity(vectors.len());
    for vector in vectors {
        let VectorData::Str(column) = &vector.data else {
            return Err(apiary_common::internal_err!("string view export of a {} vector", vector.data_type));
        };
        // Per heap of this column, its number among the array's buffers.
        let numbers: Vec<u32> = column
            .heaps()
            .iter()
            .map(|heap| {
                *buffer_of_heap.entry(Arc::as_ptr(heap)).or_insert_with(|| {
                    buffers.push(shared_heap(heap));
                    buffers.len() as u32 - 1
                })
            })
            .collect();
        columns.push((column, numbers));
    }
    let nulls = joint_nulls(vectors);
    // One column whose heaps keep their numbers: its views as they are (when their
    // allocation has the alignment of u128, which Arrow requires).
    let shared = match columns.as_slice() {
        [(column, numbers)] if numbers.iter().enumerate().all(|(i, &n)| n as usize == i) => shared_views(column.views()),
        _ => None,
    };
    let views: ScalarBuffer<u128> = match shared {
        Some(views) => views,
        None => {
            let rows: usize = columns.iter().map(|(column, _)| column.len()).sum();
            let mut views: Vec<u128> = Vec::with_capacity(rows);
            for (column, numbers) in &columns {
                let renumbered = numbers.iter().enumerate().any(|(i, &n)| n as usize != i);
                views.extend(column.views().iter().map(|view| match view.is_inline() || !renumbered {
                    true => view.to_bits(),
                    false => view.with_heap_index(numbers[view.heap_index() as usize]).to_bits(),
                }));
            }
            views.into()
        }
    };
    // SAFETY: every view is an Apiary view of valid UTF-8: inline bytes zero padded, or
    // a prefix, the number of a buffer (its heap's, renumbered above) and an offset at
    // which the string lies within that heap — Arrow's string-view layout.
    Ok(unsafe { StringViewArray::new_unchecked(views, buffers.into(), nulls) })
}

/// A heap as an Arrow buffer without copying (the buffer keeps the heap alive).
fn shared_heap(heap: &Heap) -> arrow::buffer::Buffer {
    let start = NonNull::new(heap.as_ptr().cast_mut()).unwrap_or(NonNull::dangling());
    let owner = Arc::new(std::panic::AssertUnwindSafe(Arc::clone(heap)));
    // SAFETY: `start..start + len` are the heap's bytes, which `owner` keeps alive and
    // nothing modifies (heaps are immutable once shared).
    unsafe { arrow::buffer::Buffer::from_custom_allocation(start, heap.len(), owner) }
}

/// Views as Arrow's u128 views without copying, when the allocation is aligned for
/// u128 (`StrView` itself needs only 8 bytes).
fn shared_views(views: &Buffer<StrView>) -> Option<ScalarBuffer<u128>> {
    let slice = views.as_slice();
    if !(slice.as_ptr() as usize).is_multiple_of(align_of::<u128>()) {
        return None;
    }
    // A view is 16 bytes of plain integers, readable as a u128 (see `StrView::to_bits`),
    // and the start is aligned for u128 (checked above).
    let buffer = arrow_buffer_of(views);
    Some(ScalarBuffer::new(buffer, 0, slice.len()))
}

fn validity_of(array: &dyn Array) -> Option<Bitmap> {
    array.nulls().map(|n| Bitmap::from_words(n.inner().bit_chunks().iter_padded().collect(), array.len()))
}

/// An Arrow string-view array as a string column. Arrow's views have the layout of
/// [`StrView`] (length; inline bytes, or prefix, buffer number and offset), so the views
/// are copied as they are and the data buffers become the heaps; only inline views are
/// masked past their length and NULL rows cleared, since Apiary compares views bitwise
/// and Arrow leaves those bytes unspecified.
fn string_views(array: &StringViewArray) -> StrColumn {
    let nulls = array.nulls();
    let views: Vec<StrView> = array
        .views()
        .iter()
        .enumerate()
        .map(|(row, &bits)| {
            let len = bits as u32;
            // Inline bytes past the length (a 12-byte string fills the view).
            let bits = match len as usize {
                len if len < INLINE_LEN => bits & ((1u128 << (32 + 8 * len)) - 1),
                _ => bits,
            };
            let bits = match nulls {
                Some(nulls) if nulls.is_null(row) => 0,
                _ => bits,
            };
            StrView::from_bits(bits)
        })
        .collect();
    let heaps: Vec<Heap> = array.data_buffers().iter().map(|b| Arc::new(b.as_slice().to_vec())).collect();
    StrColumn::new(Buffer::from_vec(views), Arc::new(heaps))
}

/// Converts an Arrow array to a vector of type `target` (as read from the array's type).
pub fn array_to_vector(array: &ArrayRef, target: DataType) -> Result<Vector> {
    let validity = validity_of(array.as_ref());
    let bad = || not_impl_err!("reading Arrow type {} as {target}", array.data_type());
    macro_rules! prim {
        ($t:ty) => {
            array.as_any().downcast_ref::<$t>().ok_or_else(bad)?.values()
        };
    }
    let data = match (array.data_type(), target) {
        (ArrowType::Boolean, _) => {
            let a = array.as_any().downcast_ref::<BooleanArray>().ok_or_else(bad)?;
            VectorData::Bool((0..a.len()).map(|i| a.value(i)).collect::<Vec<_>>().into())
        }
        (ArrowType::Int8, _) => VectorData::I16(
            array
                .as_any()
                .downcast_ref::<arrow::array::Int8Array>()
                .ok_or_else(bad)?
                .values()
                .iter()
                .map(|&x| x as i16)
                .collect::<Vec<_>>()
                .into(),
        ),
        (ArrowType::UInt8, _) => VectorData::I16(
            array
                .as_any()
                .downcast_ref::<arrow::array::UInt8Array>()
                .ok_or_else(bad)?
                .values()
                .iter()
                .map(|&x| x as i16)
                .collect::<Vec<_>>()
                .into(),
        ),
        (ArrowType::Int16, _) => VectorData::I16(borrowed(prim!(Int16Array))),
        (ArrowType::UInt16, _) => VectorData::I32(
            array
                .as_any()
                .downcast_ref::<arrow::array::UInt16Array>()
                .ok_or_else(bad)?
                .values()
                .iter()
                .map(|&x| x as i32)
                .collect::<Vec<_>>()
                .into(),
        ),
        (ArrowType::Int32, _) => VectorData::I32(borrowed(prim!(Int32Array))),
        (ArrowType::UInt32, _) => VectorData::I64(
            array
                .as_any()
                .downcast_ref::<arrow::array::UInt32Array>()
                .ok_or_else(bad)?
                .values()
                .iter()
                .map(|&x| x as i64)
                .collect::<Vec<_>>()
                .into(),
        ),
        (ArrowType::Int64, _) => VectorData::I64(borrowed(prim!(Int64Array))),
        (ArrowType::UInt64, _) => VectorData::I128(
            array
                .as_any()
                .downcast_ref::<arrow::array::UInt64Array>()
                .ok_or_else(bad)?
                .values()
                .iter()
                .map(|&x| x as i128)
                .collect::<Vec<_>>()
                .into(),
        ),
        (ArrowType::Float16, _) => VectorData::F32(
            array
                .as_any()
                .downcast_ref::<arrow::array::Float16Array>()
                .ok_or_else(bad)?
                .values()
                .iter()
                .map(|x| x.to_f32())
                .collect::<Vec<_>>()
                .into(),
        ),
        (ArrowType::Float32, _) => VectorData::F32(borrowed(prim!(Float32Array))),
        (ArrowType::Float64, _) => VectorData::F64(borrowed(prim!(Float64Array))),
        (ArrowType::Date32, _) => VectorData::I32(borrowed(prim!(Date32Array))),
        (ArrowType::Date64, _) => VectorData::I32(
            array
                .as_any()
                .downcast_ref::<arrow::array::Date64Array>()
                .ok_or_else(bad)?
                .values()
                .iter()
                .map(|&ms| (ms / 86_400_000) as i32)
                .collect::<Vec<_>>()
                .into(),
        ),
        (ArrowType::Timestamp(unit, _), _) => {
            // Whole microseconds: nanoseconds round down (toward the past, also before 1970).
            let values: Vec<i64> = match unit {
                TimeUnit::Microsecond => {
                    return finish(array, target, VectorData::I64(borrowed(prim!(TimestampMicrosecondArray))), validity)
                }
                TimeUnit::Millisecond => prim!(arrow::array::TimestampMillisecondArray).iter().map(|&x| x.saturating_mul(1000)).collect(),
                TimeUnit::Nanosecond => prim!(arrow::array::TimestampNanosecondArray).iter().map(|&x| x.div_euclid(1000)).collect(),
                TimeUnit::Second => prim!(arrow::array::TimestampSecondArray).iter().map(|&x| x.saturating_mul(1_000_000)).collect(),
            };
            VectorData::I64(values.into())
        }
        (ArrowType::Time32(unit), _) => {
            let values: Vec<i64> = match unit {
                TimeUnit::Second => prim!(arrow::array::Time32SecondArray).iter().map(|&x| x as i64 * 1_000_000).collect(),
                _ => prim!(arrow::array::Time32MillisecondArray).iter().map(|&x| x as i64 * 1000).collect(),
            };
            VectorData::I64(values.into())
        }
        (ArrowType::Time64(unit), _) => {
            let values: Vec<i64> = match unit {
                TimeUnit::Nanosecond => prim!(arrow::array::Time64NanosecondArray).iter().map(|&x| x.div_euclid(1000)).collect(),
                _ => return finish(array, target, VectorData::I64(borrowed(prim!(Time64MicrosecondArray))), validity),
            };
            VectorData::I64(values.into())
        }
        (ArrowType::Interval(arrow::datatypes::IntervalUnit::DayTime), _) => VectorData::Interval(
            prim!(arrow::array::IntervalDayTimeArray)
                .iter()
                .map(|v| Interval::new(0, v.days, v.milliseconds as i64 * 1000))
                .collect::<Vec<_>>()
                .into(),
        ),
        (ArrowType::Interval(arrow::datatypes::IntervalUnit::YearMonth), _) => VectorData::Interval(
            prim!(arrow::array::IntervalYearMonthArray).iter().map(|&months| Interval::new(months, 0, 0)).collect::<Vec<_>>().into(),
        ),
        (ArrowType::Decimal128(..), DataType::Decimal { precision, .. }) => {
            let values = prim!(Decimal128Array);
            if precision <= 18 {
                VectorData::I64(values.iter().map(|&x| x as i64).collect::<Vec<_>>().into())
            } else {
                VectorData::I128(borrowed(values))
            }
        }
        (ArrowType::Decimal64(..), DataType::Decimal { precision, .. }) => {
            let values = prim!(arrow::array::Decimal64Array);
            if precision <= 18 {
                VectorData::I64(borrowed(values))
            } else {
                VectorData::I128(values.iter().map(|&x| x as i128).collect::<Vec<_>>().into())
            }
        }
        (ArrowType::Decimal32(..), DataType::Decimal { precision, .. }) => {
            let values = prim!(arrow::array::Decimal32Array);
            if precision <= 18 {
                VectorData::I64(values.iter().map(|&x| x as i64).collect::<Vec<_>>().into())
            } else {
                VectorData::I128(values.iter().map(|&x| x as i128).collect::<Vec<_>>().into())
            }
        }
        (ArrowType::Utf8View, _) if array.as_any().is::<StringViewArray>() => {
            let a = array.as_any().downcast_ref::<StringViewArray>().ok_or_else(bad)?;
            VectorData::Str(string_views(a))
        }
        (ArrowType::Utf8 | ArrowType::LargeUtf8 | ArrowType::Utf8View, _) => {
            let mut builder = StrColumnBuilder::with_capacity(array.len());
            let mut push = |value: Option<&str>| match value {
                Some(v) => builder.push(v),
                None => builder.push_empty(),
            };
            if let Some(a) = array.as_any().downcast_ref::<StringArray>() {
                a.iter().for_each(&mut push);
            } else if let Some(a) = array.as_any().downcast_ref::<LargeStringArray>() {
                a.iter().for_each(&mut push);
            } else if let Some(a) = array.as_any().downcast_ref::<StringViewArray>() {
                a.iter().for_each(&mut push);
            } else {
                return Err(bad());
            }
            VectorData::Str(builder.finish())
        }
        (ArrowType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano), _) => VectorData::Interval(
            prim!(IntervalMonthDayNanoArray)
                .iter()
                .map(|v| Interval::new(v.months, v.days, v.nanoseconds / 1000))
                .collect::<Vec<_>>()
                .into(),
        ),
        _ => return Err(bad()),
    };
    finish(array, target, data, validity)
}

fn finish(array: &ArrayRef, target: DataType, data: VectorData, validity: Option<Bitmap>) -> Result<Vector> {
    let data_type = from_arrow_type(array.data_type()).unwrap_or(target);
    Ok(Vector::new(data_type, data, validity.filter(|v| !v.all_set())))
}

/// An Arrow array's values as an Apiary buffer, without copying: the buffer keeps the
/// Arrow buffer alive (both are immutable once made).
fn borrowed<T: ArrowNativeType>(values: &ScalarBuffer<T>) -> Buffer<T> {
    let slice: &[T] = values;
    let keep_alive: Box<dyn std::any::Any + Send + Sync> = Box::new(values.clone());
    // SAFETY: `slice` is aligned (a `ScalarBuffer` checks it) and lives in the Arrow
    // allocation `keep_alive` holds; Arrow buffers are never modified while shared.
    unsafe { Buffer::from_foreign(keep_alive, slice.as_ptr(), slice.len()) }
}

/// An Apiary buffer as Arrow values, without copying: the Arrow buffer keeps the Apiary
/// buffer alive.
fn shared_scalars<T: ArrowNativeType + Send + Sync>(values: &Buffer<T>) -> ScalarBuffer<T> {
    ScalarBuffer::new(arrow_buffer_of(values), 0, values.len())
}

/// An Apiary buffer's memory as an Arrow buffer, without copying (it keeps the Apiary
/// buffer alive).
fn arrow_buffer_of<T: Send + Sync + 'static>(values: &Buffer<T>) -> arrow::buffer::Buffer {
    let bytes = size_of_val(values.as_slice());
    let start = NonNull::new(values.as_slice().as_ptr().cast_mut().cast::<u8>()).expect("slices are not null");
    let owner = Arc::new(std::panic::AssertUnwindSafe(values.clone()));
    // SAFETY: `start..start + bytes` are the buffer's values, which `owner` keeps alive
    // and nothing modifies (Apiary buffers are immutable).
    unsafe { arrow::buffer::Buffer::from_custom_allocation(start, bytes, owner) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::buffer::Buffer as ArrowBuffer;

    #[test]
    fn string_views_become_string_columns_with_clean_views() {
        // Arrow leaves the bytes of a NULL row's view and an inline view's padding
        // unspecified: both are cleared, since Apiary compares views as integers.
        let long = "a string longer than twelve bytes";
        let heap = ArrowBuffer::from(long.as_bytes().to_vec());
        let long_view = u128::from(long.len() as u32) | (u128::from(u32::from_le_bytes(long.as_bytes()[..4].try_into().unwrap())) << 32);
        let dirty_inline = 2u128 | (u128::from_le_bytes(*b"\0\0\0\0abXXXXXXXXXX") & !0xffff_ffff);
        let dirty_null = u128::MAX;
        let views = ScalarBuffer::from(vec![
            dirty_inline,
            long_view,
            dirty_null,
            12u128 | (u128::from_le_bytes(*b"\0\0\0\0twelve bytes") & !0xffff_ffff),
        ]);
        let nulls = NullBuffer::from(vec![true, true, false, true]);
        // SAFETY: the views are in bounds and UTF-8; only their unspecified bytes (which
        // `try_new` would reject) are dirty, as a writer may leave them.
        let array: ArrayRef = Arc::new(unsafe { StringViewArray::new_unchecked(views, vec![heap].into(), Some(nulls)) });
        let vector = array_to_vector(&array, DataType::Varchar(None)).unwrap();
        let VectorData::Str(strings) = &vector.data else { panic!("not strings") };
        assert_eq!((strings.get(0), strings.get(1), strings.get(3)), ("ab", long, "twelve bytes"));
        assert!(!vector.is_valid(2));
        assert_eq!(strings.views()[0], StrView::inline(b"ab"));
        assert_eq!(strings.views()[2], StrView::default());
    }

    #[test]
    fn string_vectors_become_one_view_array_sharing_their_heaps() {
        // Two vectors with their own heaps, then one sharing the first's heap list: the
        // joint array lists each heap once and renumbers the second vector's views.
        let column = |values: &[Option<&str>]| {
            let mut builder = StrColumnBuilder::new();
            values.iter().for_each(|v| builder.push(v.unwrap_or("")));
            let validity = values.iter().any(Option::is_none).then(|| {
                let mut bits = Bitmap::new(values.len(), true);
                values.iter().enumerate().filter(|(_, v)| v.is_none()).for_each(|(i, _)| bits.set(i, false));
                bits
            });
            Vector::new(DataType::Varchar(None), VectorData::Str(builder.finish()), validity)
        };
        let first = column(&[Some("short"), Some("the first long string of all"), None]);
        let second = column(&[Some("another string longer than twelve"), Some("x")]);
        let third = first.clone();
        let array = string_view_array(&[&first, &second, &third]).unwrap();
        array.to_data().validate_full().unwrap();
        let values: Vec<Option<&str>> = array.iter().collect();
        assert_eq!(
            values,
            [
                Some("short"),
                Some("the first long string of all"),
                None,
                Some("another string longer than twelve"),
                Some("x"),
                Some("short"),
                Some("the first long string of all"),
                None
            ]
        );
        assert_eq!(array.data_buffers().len(), 2);
        // One vector: the same strings, its views shared or copied.
        let single = string_view_array(&[&second]).unwrap();
        assert_eq!(single.iter().collect::<Vec<_>>(), [Some("another string longer than twelve"), Some("x")]);
    }
}
