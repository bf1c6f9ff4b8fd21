//! `Vector`: one column of a batch of rows.
//!
//! A vector is a typed buffer (`VectorData`) plus an optional validity bitmap (bit set =
//! value present). Values under a NULL are unspecified but initialised (kernels may compute
//! on them and ignore the result). Kernels match on `VectorData` once per vector and then
//! run a monomorphised loop over the native slice; see [`NativeType`].

use std::fmt::Debug;

use apiary_common::Bitmap;

use crate::buffer::Buffer;
use crate::datatype::{DataType, PhysicalType};
use crate::datetime::Interval;
use crate::scalar::ScalarValue;
use crate::string::{StrColumn, StrColumnBuilder};

#[derive(Clone, Debug)]
pub enum VectorData {
    Bool(Buffer<bool>),
    I16(Buffer<i16>),
    I32(Buffer<i32>),
    I64(Buffer<i64>),
    I128(Buffer<i128>),
    F32(Buffer<f32>),
    F64(Buffer<f64>),
    Str(StrColumn),
    Interval(Buffer<Interval>),
}

/// A fixed-width native type that vectors store in a `Buffer<Self>`.
pub trait NativeType: Copy + Send + Sync + Debug + Default + PartialOrd + PartialEq + 'static {
    const PHYSICAL: PhysicalType;
    fn buffer(data: &VectorData) -> Option<&Buffer<Self>>;
    fn wrap(buffer: Buffer<Self>) -> VectorData;

    /// SQL equality: like `==`, except that NaN equals NaN (PostgreSQL).
    #[inline(always)]
    fn sql_eq(self, other: Self) -> bool {
        self == other
    }

    /// SQL order: a total order in which NaN sorts after every other value and equals
    /// itself (PostgreSQL); `<` for everything but floats.
    #[inline(always)]
    fn sql_lt(self, other: Self) -> bool {
        self < other
    }
}

macro_rules! native_type {
    ($native:ty, $variant:ident, $physical:ident) => {
        native_type!($native, $variant, $physical, {});
    };
    ($native:ty, $variant:ident, $physical:ident, float) => {
        native_type!($native, $variant, $physical, {
            #[inline(always)]
            fn sql_eq(self, other: Self) -> bool {
                self == other || (self.is_nan() && other.is_nan())
            }

            #[inline(always)]
            fn sql_lt(self, other: Self) -> bool {
                self < other || (!self.is_nan() && other.is_nan())
            }
        });
    };
    ($native:ty, $variant:ident, $physical:ident, { $($float:tt)* }) => {
        impl NativeType for $native {
            $($float)*
            const PHYSICAL: PhysicalType = PhysicalType::$physical;
            #[inline]
            fn buffer(data: &VectorData) -> Option<&Buffer<Self>> {
                match data {
                    VectorData::$variant(buffer) => Some(buffer),
                    _ => None,
                }
            }
            #[inline]
            fn wrap(buffer: Buffer<Self>) -> VectorData {
                VectorData::$variant(buffer)
            }
        }
    };
}

native_type!(bool, Bool, Bool);
native_type!(i16, I16, I16);
native_type!(i32, I32, I32);
native_type!(i64, I64, I64);
native_type!(i128, I128, I128);
native_type!(f32, F32, F32, float);
native_type!(f64, F64, F64, float);
native_type!(Interval, Interval, Interval);

impl VectorData {
    pub fn len(&self) -> usize {
        match self {
            VectorData::Bool(b) => b.len(),
            VectorData::I16(b) => b.len(),
            VectorData::I32(b) => b.len(),
            VectorData::I64(b) => b.len(),
            VectorData::I128(b) => b.len(),
            VectorData::F32(b) => b.len(),
            VectorData::F64(b) => b.len(),
            VectorData::Str(s) => s.len(),
            VectorData::Interval(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn slice(&self, offset: usize, len: usize) -> VectorData {
        match self {
            VectorData::Bool(b) => VectorData::Bool(b.slice(offset, len)),
            VectorData::I16(b) => VectorData::I16(b.slice(offset, len)),
            VectorData::I32(b) => VectorData::I32(b.slice(offset, len)),
            VectorData::I64(b) => VectorData::I64(b.slice(offset, len)),
            VectorData::I128(b) => VectorData::I128(b.slice(offset, len)),
            VectorData::F32(b) => VectorData::F32(b.slice(offset, len)),
            VectorData::F64(b) => VectorData::F64(b.slice(offset, len)),
            VectorData::Str(s) => VectorData::Str(s.slice(offset, len)),
            VectorData::Interval(b) => VectorData::Interval(b.slice(offset, len)),
        }
    }

    pub fn gather(&self, indices: &[u32]) -> VectorData {
        fn take<T: Copy>(values: &[T], indices: &[u32]) -> Vec<T> {
            indices.iter().map(|&i| values[i as usize]).collect()
        }
        match self {
            VectorData::Bool(b) => VectorData::Bool(take(b, indices).into()),
            VectorData::I16(b) => VectorData::I16(take(b, indices).into()),
            VectorData::I32(b) => VectorData::I32(take(b, indices).into()),
            VectorData::I64(b) => VectorData::I64(take(b, indices).into()),
            VectorData::I128(b) => VectorData::I128(take(b, indices).into()),
            VectorData::F32(b) => VectorData::F32(take(b, indices).into()),
            VectorData::F64(b) => VectorData::F64(take(b, indices).into()),
            VectorData::Str(s) => VectorData::Str(s.gather(indices)),
            VectorData::Interval(b) => VectorData::Interval(take(b, indices).into()),
        }
    }

    /// A buffer of `len` default values (zeros, empty strings) of the physical type.
    pub fn zeroed(physical: PhysicalType, len: usize) -> VectorData {
        match physical {
            PhysicalType::Bool => VectorData::Bool(vec![false; len].into()),
            PhysicalType::I16 => VectorData::I16(vec![0; len].into()),
            PhysicalType::I32 => VectorData::I32(vec![0; len].into()),
            PhysicalType::I64 => VectorData::I64(vec![0; len].into()),
            PhysicalType::I128 => VectorData::I128(vec![0; len].into()),
            PhysicalType::F32 => VectorData::F32(vec![0.0; len].into()),
            PhysicalType::F64 => VectorData::F64(vec![0.0; len].into()),
            PhysicalType::Str => {
                let mut builder = StrColumnBuilder::with_capacity(len);
                for _ in 0..len {
                    builder.push_empty();
                }
                VectorData::Str(builder.finish())
            }
            PhysicalType::Interval => VectorData::Interval(vec![Interval::default(); len].into()),
        }
    }

    pub fn allocated_bytes(&self) -> usize {
        match self {
            VectorData::Bool(b) => b.allocated_bytes(),
            VectorData::I16(b) => b.allocated_bytes(),
            VectorData::I32(b) => b.allocated_bytes(),
            VectorData::I64(b) => b.allocated_bytes(),
            VectorData::I128(b) => b.allocated_bytes(),
            VectorData::F32(b) => b.allocated_bytes(),
            VectorData::F64(b) => b.allocated_bytes(),
            VectorData::Str(s) => s.allocated_bytes(),
            VectorData::Interval(b) => b.allocated_bytes(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Vector {
    pub data_type: DataType,
    pub data: VectorData,
    /// `None` when no value is NULL.
    pub validity: Option<Bitmap>,
}

impl Vector {
    pub fn new(data_type: DataType, data: VectorData, validity: Option<Bitmap>) -> Self {
        debug_assert!(validity.as_ref().is_none_or(|v| v.len() == data.len()));
        debug_assert_eq!(data_type.physical(), physical_of(&data), "{data_type} stored as {data:?}");
        Vector { data_type, data, validity }
    }

    /// A vector from a typed buffer with no NULLs.
    pub fn from_native<T: NativeType>(data_type: DataType, values: Vec<T>) -> Self {
        Vector::new(data_type, T::wrap(values.into()), None)
    }

    /// A vector of `len` NULLs.
    pub fn nulls(data_type: DataType, len: usize) -> Self {
        Vector { data_type, data: VectorData::zeroed(data_type.physical(), len), validity: Some(Bitmap::new(len, false)) }
    }

    /// A vector repeating `value` `len` times.
    pub fn from_scalar(value: &ScalarValue, data_type: DataType, len: usize) -> Self {
        if value.is_null() {
            return Vector::nulls(data_type, len);
        }
        // One value, gathered `len` times: a typed copy loop instead of a push (and a
        // match on the value's kind) per row; strings share the one value's bytes.
        let mut builder = crate::builder::VectorBuilder::with_capacity(data_type, 1);
        builder.push_scalar(value);
        builder.finish().gather(&vec![0; len])
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn is_valid(&self, idx: usize) -> bool {
        self.validity.as_ref().is_none_or(|v| v.get(idx))
    }

    #[inline]
    pub fn is_null(&self, idx: usize) -> bool {
        !self.is_valid(idx)
    }

    pub fn null_count(&self) -> usize {
        self.validity.as_ref().map_or(0, |v| v.count_zeros())
    }

    /// Whether any value may be NULL (cheap; `Some` validity with no zeros counts too).
    #[inline]
    pub fn may_have_nulls(&self) -> bool {
        self.validity.is_some()
    }

    /// The typed values; panics if the physical type is not `T` (a planner bug).
    #[inline]
    pub fn values<T: NativeType>(&self) -> &[T] {
        match T::buffer(&self.data) {
            Some(buffer) => buffer.as_slice(),
            None => panic!("vector of type {} read as {:?}", self.data_type, T::PHYSICAL),
        }
    }

    pub fn strings(&self) -> &StrColumn {
        match &self.data {
            VectorData::Str(s) => s,
            _ => panic!("vector of type {} read as strings", self.data_type),
        }
    }

    pub fn slice(&self, offset: usize, len: usize) -> Vector {
        Vector {
            data_type: self.data_type,
            data: self.data.slice(offset, len),
            validity: self.validity.as_ref().map(|v| v.slice(offset, len)).filter(|v| !v.all_set()),
        }
    }

    /// Rows at `indices`, in that order.
    pub fn gather(&self, indices: &[u32]) -> Vector {
        let validity = self.validity.as_ref().and_then(|v| {
            let gathered = v.gather(indices);
            (!gathered.all_set()).then_some(gathered)
        });
        Vector { data_type: self.data_type, data: self.data.gather(indices), validity }
    }

    /// The value at `idx` (slow path: result output, tests, constant folding).
    pub fn get_scalar(&self, idx: usize) -> ScalarValue {
        if self.is_null(idx) {
            return ScalarValue::Null;
        }
        match (&self.data, self.data_type) {
            (VectorData::Bool(b), _) => ScalarValue::Boolean(b[idx]),
            (VectorData::I16(b), _) => ScalarValue::Int16(b[idx]),
            (VectorData::I32(b), DataType::Date) => ScalarValue::Date(b[idx]),
            (VectorData::I32(b), _) => ScalarValue::Int32(b[idx]),
            (VectorData::I64(b), DataType::Timestamp) => ScalarValue::Timestamp(b[idx]),
            (VectorData::I64(b), DataType::TimestampTz) => ScalarValue::TimestampTz(b[idx]),
            (VectorData::I64(b), DataType::Time) => ScalarValue::Time(b[idx]),
            (VectorData::I64(b), DataType::Decimal { precision, scale }) => ScalarValue::Decimal(b[idx] as i128, precision, scale),
            (VectorData::I64(b), _) => ScalarValue::Int64(b[idx]),
            (VectorData::I128(b), DataType::Decimal { precision, scale }) => ScalarValue::Decimal(b[idx], precision, scale),
            (VectorData::I128(b), _) => ScalarValue::Decimal(b[idx], 38, 0),
            (VectorData::F32(b), _) => ScalarValue::Float32(b[idx]),
            (VectorData::F64(b), _) => ScalarValue::Float64(b[idx]),
            (VectorData::Str(s), _) => ScalarValue::Utf8(s.get(idx).to_string()),
            (VectorData::Interval(b), _) => ScalarValue::Interval(b[idx]),
        }
    }

    /// Replaces the validity with `validity AND other` (used to propagate NULLs).
    pub fn with_validity(mut self, validity: Option<Bitmap>) -> Vector {
        self.validity = validity.filter(|v| !v.all_set());
        self
    }

    pub fn allocated_bytes(&self) -> usize {
        self.data.allocated_bytes() + self.validity.as_ref().map_or(0, |v| v.words().len() * 8)
    }

    /// Bytes the values themselves take (no spare capacity, shared heaps counted by the
    /// strings' lengths): what storing the rows costs.
    pub fn data_bytes(&self) -> usize {
        let values = match &self.data {
            VectorData::Str(s) => s.views().iter().map(|v| size_of::<crate::StrView>() + if v.is_inline() { 0 } else { v.len() }).sum(),
            other => other.len() * physical_of(other).width(),
        };
        values + self.validity.as_ref().map_or(0, |v| v.len() / 8)
    }
}

/// The physical type a `VectorData` variant holds.
pub fn physical_of(data: &VectorData) -> PhysicalType {
    match data {
        VectorData::Bool(_) => PhysicalType::Bool,
        VectorData::I16(_) => PhysicalType::I16,
        VectorData::I32(_) => PhysicalType::I32,
        VectorData::I64(_) => PhysicalType::I64,
        VectorData::I128(_) => PhysicalType::I128,
        VectorData::F32(_) => PhysicalType::F32,
        VectorData::F64(_) => PhysicalType::F64,
        VectorData::Str(_) => PhysicalType::Str,
        VectorData::Interval(_) => PhysicalType::Interval,
    }
}

/// AND of two optional validity bitmaps (`None` = all valid).
pub fn and_validity(a: Option<&Bitmap>, b: Option<&Bitmap>) -> Option<Bitmap> {
    match (a, b) {
        (None, None) => None,
        (Some(a), None) => Some(a.clone()),
        (None, Some(b)) => Some(b.clone()),
        (Some(a), Some(b)) => {
            let mut out = a.clone();
            out.and_inplace(b);
            Some(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_scalar_repeats_the_value() {
        let long = "a string longer than an inline view".repeat(3);
        let cases = [
            (ScalarValue::Int32(7), DataType::Integer),
            (ScalarValue::Decimal(123_456_789_012_345_678_901, 30, 2), DataType::decimal(30, 2)),
            (ScalarValue::Utf8(long.clone()), DataType::Varchar(None)),
            (ScalarValue::Utf8("ab".into()), DataType::Varchar(None)),
            (ScalarValue::Null, DataType::Varchar(None)),
        ];
        for (value, data_type) in cases {
            for len in [0, 1, 3000] {
                let vector = Vector::from_scalar(&value, data_type, len);
                assert_eq!(vector.len(), len);
                for i in [0, len / 2, len.saturating_sub(1)].into_iter().filter(|&i| i < len) {
                    assert_eq!(vector.get_scalar(i), value, "{value:?} at {i} of {len}");
                }
            }
        }
    }
}
