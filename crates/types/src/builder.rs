//! `VectorBuilder`: appends values or whole vectors and produces a `Vector`.

use apiary_common::Bitmap;

use crate::chunk::DataChunk;
use crate::datatype::{DataType, PhysicalType};
use crate::datetime::Interval;
use crate::scalar::ScalarValue;
use crate::string::StrColumnBuilder;
use crate::vector::{Vector, VectorData};

enum Values {
    Bool(Vec<bool>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    I128(Vec<i128>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Str(StrColumnBuilder),
    Interval(Vec<Interval>),
}

pub struct VectorBuilder {
    data_type: DataType,
    values: Values,
    /// Created on the first NULL.
    validity: Option<Bitmap>,
    len: usize,
}

impl VectorBuilder {
    pub fn new(data_type: DataType) -> Self {
        VectorBuilder::with_capacity(data_type, 0)
    }

    pub fn with_capacity(data_type: DataType, capacity: usize) -> Self {
        let values = match data_type.physical() {
            PhysicalType::Bool => Values::Bool(Vec::with_capacity(capacity)),
            PhysicalType::I16 => Values::I16(Vec::with_capacity(capacity)),
            PhysicalType::I32 => Values::I32(Vec::with_capacity(capacity)),
            PhysicalType::I64 => Values::I64(Vec::with_capacity(capacity)),
            PhysicalType::I128 => Values::I128(Vec::with_capacity(capacity)),
            PhysicalType::F32 => Values::F32(Vec::with_capacity(capacity)),
            PhysicalType::F64 => Values::F64(Vec::with_capacity(capacity)),
            PhysicalType::Str => Values::Str(StrColumnBuilder::with_capacity(capacity)),
            PhysicalType::Interval => Values::Interval(Vec::with_capacity(capacity)),
        };
        VectorBuilder { data_type, values, validity: None, len: 0 }
    }

    pub fn data_type(&self) -> DataType {
        self.data_type
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push_null(&mut self) {
        let validity = self.validity.get_or_insert_with(|| Bitmap::new(self.len, true));
        validity.push(false);
        match &mut self.values {
            Values::Bool(v) => v.push(false),
            Values::I16(v) => v.push(0),
            Values::I32(v) => v.push(0),
            Values::I64(v) => v.push(0),
            Values::I128(v) => v.push(0),
            Values::F32(v) => v.push(0.0),
            Values::F64(v) => v.push(0.0),
            Values::Str(v) => v.push_empty(),
            Values::Interval(v) => v.push(Interval::default()),
        }
        self.len += 1;
    }

    #[inline]
    fn mark_valid(&mut self) {
        if let Some(validity) = &mut self.validity {
            validity.push(true);
        }
        self.len += 1;
    }

    /// Appends a value that already has this builder's type (callers cast first).
    /// A value of a mismatched physical kind is a planner bug; it is stored as NULL in
    /// release builds and caught by a debug assertion.
    pub fn push_scalar(&mut self, value: &ScalarValue) {
        use ScalarValue as S;
        let ok = match (&mut self.values, value) {
            (_, S::Null) => {
                self.push_null();
                return;
            }
            (Values::Bool(v), S::Boolean(b)) => {
                v.push(*b);
                true
            }
            (Values::I16(v), S::Int16(x)) => {
                v.push(*x);
                true
            }
            (Values::I32(v), S::Int32(x) | S::Date(x)) => {
                v.push(*x);
                true
            }
            (Values::I64(v), S::Int64(x) | S::Timestamp(x) | S::TimestampTz(x) | S::Time(x)) => {
                v.push(*x);
                true
            }
            (Values::I64(v), S::Decimal(x, _, _)) => {
                v.push(*x as i64);
                true
            }
            (Values::I128(v), S::Decimal(x, _, _)) => {
                v.push(*x);
                true
            }
            (Values::F32(v), S::Float32(x)) => {
                v.push(*x);
                true
            }
            (Values::F64(v), S::Float64(x)) => {
                v.push(*x);
                true
            }
            (Values::Str(v), S::Utf8(s)) => {
                v.push(s);
                true
            }
            (Values::Interval(v), S::Interval(i)) => {
                v.push(*i);
                true
            }
            _ => false,
        };
        if ok {
            self.mark_valid();
        } else {
            debug_assert!(false, "value {value:?} pushed into a {} builder", self.data_type);
            self.push_null();
        }
    }

    /// Appends rows of `vector` (all rows, or those at `indices`).
    pub fn append(&mut self, vector: &Vector, indices: Option<&[u32]>) {
        let count = indices.map_or(vector.len(), |i| i.len());
        match (&vector.validity, &mut self.validity) {
            (None, None) => {}
            (None, Some(validity)) => validity.push_n(true, count),
            (Some(source), validity) => {
                let validity = validity.get_or_insert_with(|| Bitmap::new(self.len, true));
                match indices {
                    Some(indices) => indices.iter().for_each(|&i| validity.push(source.get(i as usize))),
                    None => validity.extend_from(source, 0, count),
                }
            }
        }
        fn extend<T: Copy>(target: &mut Vec<T>, source: &[T], indices: Option<&[u32]>) {
            match indices {
                Some(indices) => target.extend(indices.iter().map(|&i| source[i as usize])),
                None => target.extend_from_slice(source),
            }
        }
        match (&mut self.values, &vector.data) {
            (Values::Bool(t), VectorData::Bool(s)) => extend(t, s, indices),
            (Values::I16(t), VectorData::I16(s)) => extend(t, s, indices),
            (Values::I32(t), VectorData::I32(s)) => extend(t, s, indices),
            (Values::I64(t), VectorData::I64(s)) => extend(t, s, indices),
            (Values::I128(t), VectorData::I128(s)) => extend(t, s, indices),
            (Values::F32(t), VectorData::F32(s)) => extend(t, s, indices),
            (Values::F64(t), VectorData::F64(s)) => extend(t, s, indices),
            (Values::Str(t), VectorData::Str(s)) => t.extend_from(s, indices),
            (Values::Interval(t), VectorData::Interval(s)) => extend(t, s, indices),
            _ => panic!("appending a {} vector to a {} builder", vector.data_type, self.data_type),
        }
        self.len += count;
    }

    pub fn finish(self) -> Vector {
        let data = match self.values {
            Values::Bool(v) => VectorData::Bool(v.into()),
            Values::I16(v) => VectorData::I16(v.into()),
            Values::I32(v) => VectorData::I32(v.into()),
            Values::I64(v) => VectorData::I64(v.into()),
            Values::I128(v) => VectorData::I128(v.into()),
            Values::F32(v) => VectorData::F32(v.into()),
            Values::F64(v) => VectorData::F64(v.into()),
            Values::Str(v) => VectorData::Str(v.finish()),
            Values::Interval(v) => VectorData::Interval(v.into()),
        };
        Vector::new(self.data_type, data, self.validity.filter(|v| !v.all_set()))
    }
}

/// The rows of many chunks gathered into one: a [`VectorBuilder`] per column, taking
/// only each chunk's live (selected) rows. Column types come from the first chunk
/// appended unless given up front.
#[derive(Default)]
pub struct ChunkBuilder {
    builders: Vec<VectorBuilder>,
    rows: usize,
    /// Rows to reserve per column when the builders are created from the first chunk.
    capacity: usize,
}

impl ChunkBuilder {
    /// A builder that reserves `capacity` rows per column once it sees the column types.
    pub fn with_capacity(capacity: usize) -> Self {
        ChunkBuilder { capacity, ..ChunkBuilder::default() }
    }

    /// A builder for columns of `types`, with room for `capacity` rows.
    pub fn with_types(types: &[DataType], capacity: usize) -> Self {
        ChunkBuilder { builders: types.iter().map(|t| VectorBuilder::with_capacity(*t, capacity)).collect(), rows: 0, capacity }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Appends the rows `selection` of `columns` (all `rows` rows when `None`).
    pub fn append(&mut self, columns: &[Vector], selection: Option<&[u32]>, rows: usize) {
        if self.builders.is_empty() {
            self.builders = columns.iter().map(|c| VectorBuilder::with_capacity(c.data_type, self.capacity)).collect();
        }
        for (builder, column) in self.builders.iter_mut().zip(columns) {
            builder.append(column, selection);
        }
        self.rows += selection.map_or(rows, |s| s.len());
    }

    /// Appends the live rows of `chunk`.
    pub fn append_chunk(&mut self, chunk: &DataChunk) {
        self.append(&chunk.columns, chunk.selection(), chunk.physical_len());
    }

    pub fn finish(self) -> DataChunk {
        let columns: Vec<Vector> = self.builders.into_iter().map(|b| b.finish()).collect();
        if columns.is_empty() {
            DataChunk::empty_columns(self.rows)
        } else {
            DataChunk::new(columns, self.rows)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_builder_takes_only_live_rows() {
        let values = Vector::from_native(DataType::Integer, vec![10i32, 11, 12, 13]);
        let mut all = ChunkBuilder::with_capacity(8);
        all.append_chunk(&DataChunk::new(vec![values.clone()], 4).with_selection(Some(vec![1, 3])));
        all.append_chunk(&DataChunk::new(vec![values], 4));
        assert_eq!(all.rows(), 6);
        let chunk = all.finish();
        assert_eq!(chunk.columns[0].values::<i32>(), &[11, 13, 10, 11, 12, 13]);
        assert_eq!(ChunkBuilder::default().finish().row_count(), 0);
    }

    #[test]
    fn builds_with_nulls() {
        let mut builder = VectorBuilder::new(DataType::Integer);
        builder.push_scalar(&ScalarValue::Int32(1));
        builder.push_null();
        builder.push_scalar(&ScalarValue::Int32(3));
        let vector = builder.finish();
        assert_eq!(vector.len(), 3);
        assert_eq!(vector.get_scalar(0), ScalarValue::Int32(1));
        assert!(vector.is_null(1));
        assert_eq!(vector.null_count(), 1);
        let gathered = vector.gather(&[2, 0]);
        assert_eq!(gathered.get_scalar(0), ScalarValue::Int32(3));
        assert!(gathered.validity.is_none());
    }

    #[test]
    fn appends_vectors() {
        let a = Vector::from_native(DataType::BigInt, vec![1i64, 2, 3]);
        let mut b = VectorBuilder::new(DataType::BigInt);
        b.push_null();
        b.append(&a, Some(&[2, 1]));
        b.append(&a, None);
        let v = b.finish();
        let values: Vec<ScalarValue> = (0..v.len()).map(|i| v.get_scalar(i)).collect();
        assert_eq!(values[0], ScalarValue::Null);
        assert_eq!(values[1..], [3, 2, 1, 2, 3].map(ScalarValue::Int64));
    }
}
