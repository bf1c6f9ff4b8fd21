//! Values that aggregate states keep per group: native values or strings, read from a
//! vector's row, compared in SQL order, and turned back into a vector at the end.
//!
//! The states are generic over a [`Held`] marker (`NativeHeld<i64>`, `StrHeld`, ...) so
//! their update loops compare typed values, never `ScalarValue`s.

use std::cmp::Ordering;
use std::marker::PhantomData;

use apiary_common::Bitmap;
use apiary_types::datetime::Interval;
use apiary_types::vector::NativeType;
use apiary_types::{DataType, StrColumnBuilder, Vector, VectorData};

/// How a kind of value is read, ordered and output.
pub trait Held: Send + 'static {
    type Value: Clone + Send + Default + 'static;
    fn read(v: &Vector, row: usize) -> Self::Value;
    /// SQL order of two held values (NaN last, as PostgreSQL).
    fn compare(a: &Self::Value, b: &Self::Value) -> Ordering;
    /// `v[row]` against a held value, without copying the row's value.
    fn compare_row(v: &Vector, row: usize, held: &Self::Value) -> Ordering;
    fn finish(values: Vec<Self::Value>, data_type: DataType, validity: Option<Bitmap>) -> Vector;
    /// Bytes a held value takes.
    fn size(value: &Self::Value) -> usize {
        let _ = value;
        size_of::<Self::Value>()
    }
}

pub struct NativeHeld<T>(PhantomData<T>);
pub struct StrHeld;

fn native_order<T: NativeType>(a: T, b: T) -> Ordering {
    if a.sql_lt(b) {
        Ordering::Less
    } else if b.sql_lt(a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

impl<T: NativeType> Held for NativeHeld<T> {
    type Value = T;

    #[inline(always)]
    fn read(v: &Vector, row: usize) -> T {
        v.values::<T>()[row]
    }

    #[inline(always)]
    fn compare(a: &T, b: &T) -> Ordering {
        native_order(*a, *b)
    }

    #[inline(always)]
    fn compare_row(v: &Vector, row: usize, held: &T) -> Ordering {
        native_order(v.values::<T>()[row], *held)
    }

    fn finish(values: Vec<T>, data_type: DataType, validity: Option<Bitmap>) -> Vector {
        Vector::new(data_type, T::wrap(values.into()), validity)
    }
}

impl Held for StrHeld {
    type Value = String;

    fn read(v: &Vector, row: usize) -> String {
        v.strings().get(row).to_string()
    }

    fn compare(a: &String, b: &String) -> Ordering {
        a.as_bytes().cmp(b.as_bytes())
    }

    fn compare_row(v: &Vector, row: usize, held: &String) -> Ordering {
        v.strings().get_bytes(row).cmp(held.as_bytes())
    }

    fn size(value: &String) -> usize {
        size_of::<String>() + value.len()
    }

    fn finish(values: Vec<String>, data_type: DataType, validity: Option<Bitmap>) -> Vector {
        let mut builder = StrColumnBuilder::with_capacity(values.len());
        for v in &values {
            builder.push(v);
        }
        Vector::new(data_type, VectorData::Str(builder.finish()), validity)
    }
}

/// Calls `$make!(HeldType)` with the [`Held`] marker of a physical type (its result is
/// the expression's value).
macro_rules! with_held {
    ($physical:expr, $make:ident) => {{
        use apiary_types::datatype::PhysicalType as P;
        use $crate::operators::aggregate_functions::held::{NativeHeld, StrHeld};
        match $physical {
            P::Bool => $make!(NativeHeld<bool>),
            P::I16 => $make!(NativeHeld<i16>),
            P::I32 => $make!(NativeHeld<i32>),
            P::I64 => $make!(NativeHeld<i64>),
            P::I128 => $make!(NativeHeld<i128>),
            P::F32 => $make!(NativeHeld<f32>),
            P::F64 => $make!(NativeHeld<f64>),
            P::Interval => $make!(NativeHeld<apiary_types::datetime::Interval>),
            P::Str => $make!(StrHeld),
        }
    }};
}
pub(crate) use with_held;

/// One value per group of any type, set from a vector's row: the `arg` of `arg_min`.
pub enum Slots {
    Bool(Vec<bool>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    I128(Vec<i128>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Interval(Vec<Interval>),
    Str(Vec<String>),
}

macro_rules! each_slot {
    ($slots:expr, $values:ident => $body:expr) => {
        match $slots {
            Slots::Bool($values) => $body,
            Slots::I16($values) => $body,
            Slots::I32($values) => $body,
            Slots::I64($values) => $body,
            Slots::I128($values) => $body,
            Slots::F32($values) => $body,
            Slots::F64($values) => $body,
            Slots::Interval($values) => $body,
            Slots::Str($values) => $body,
        }
    };
}

impl Slots {
    pub fn new(data_type: DataType) -> Slots {
        use apiary_types::datatype::PhysicalType as P;
        match data_type.physical() {
            P::Bool => Slots::Bool(Vec::new()),
            P::I16 => Slots::I16(Vec::new()),
            P::I32 => Slots::I32(Vec::new()),
            P::I64 => Slots::I64(Vec::new()),
            P::I128 => Slots::I128(Vec::new()),
            P::F32 => Slots::F32(Vec::new()),
            P::F64 => Slots::F64(Vec::new()),
            P::Interval => Slots::Interval(Vec::new()),
            P::Str => Slots::Str(Vec::new()),
        }
    }

    pub fn resize(&mut self, groups: usize) {
        each_slot!(self, values => values.resize(groups, Default::default()))
    }

    /// Slot `g` takes `v[row]`.
    pub fn set(&mut self, g: usize, v: &Vector, row: usize) {
        match self {
            Slots::Str(values) => {
                let slot = &mut values[g];
                slot.clear();
                slot.push_str(v.strings().get(row));
            }
            Slots::Bool(values) => values[g] = v.values()[row],
            Slots::I16(values) => values[g] = v.values()[row],
            Slots::I32(values) => values[g] = v.values()[row],
            Slots::I64(values) => values[g] = v.values()[row],
            Slots::I128(values) => values[g] = v.values()[row],
            Slots::F32(values) => values[g] = v.values()[row],
            Slots::F64(values) => values[g] = v.values()[row],
            Slots::Interval(values) => values[g] = v.values()[row],
        }
    }

    /// Slot `g` takes slot `from` of `other` (same type).
    pub fn take_from(&mut self, g: usize, other: &mut Slots, from: usize) {
        match (self, other) {
            (Slots::Str(a), Slots::Str(b)) => a[g] = std::mem::take(&mut b[from]),
            (Slots::Bool(a), Slots::Bool(b)) => a[g] = b[from],
            (Slots::I16(a), Slots::I16(b)) => a[g] = b[from],
            (Slots::I32(a), Slots::I32(b)) => a[g] = b[from],
            (Slots::I64(a), Slots::I64(b)) => a[g] = b[from],
            (Slots::I128(a), Slots::I128(b)) => a[g] = b[from],
            (Slots::F32(a), Slots::F32(b)) => a[g] = b[from],
            (Slots::F64(a), Slots::F64(b)) => a[g] = b[from],
            (Slots::Interval(a), Slots::Interval(b)) => a[g] = b[from],
            _ => debug_assert!(false, "slots of different types"),
        }
    }

    pub fn finish(&mut self, data_type: DataType, validity: Option<Bitmap>) -> Vector {
        match self {
            Slots::Str(values) => StrHeld::finish(std::mem::take(values), data_type, validity),
            Slots::Bool(values) => Vector::new(data_type, bool::wrap(std::mem::take(values).into()), validity),
            Slots::I16(values) => Vector::new(data_type, i16::wrap(std::mem::take(values).into()), validity),
            Slots::I32(values) => Vector::new(data_type, i32::wrap(std::mem::take(values).into()), validity),
            Slots::I64(values) => Vector::new(data_type, i64::wrap(std::mem::take(values).into()), validity),
            Slots::I128(values) => Vector::new(data_type, i128::wrap(std::mem::take(values).into()), validity),
            Slots::F32(values) => Vector::new(data_type, f32::wrap(std::mem::take(values).into()), validity),
            Slots::F64(values) => Vector::new(data_type, f64::wrap(std::mem::take(values).into()), validity),
            Slots::Interval(values) => Vector::new(data_type, Interval::wrap(std::mem::take(values).into()), validity),
        }
    }
}
