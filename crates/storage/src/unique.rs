//! Uniqueness of primary keys and UNIQUE constraints: the set of keys a table holds per
//! constraint, checked on every append.
//!
//! Keys are encoded as byte strings (fixed-width values little-endian, strings
//! length-prefixed), so one hash set serves any combination of key types. The set is
//! built lazily from the table's blocks on the first append and kept up to date by
//! commits; an append that is not committed leaves it untouched.

use std::collections::HashSet;

use apiary_types::{Vector, VectorData};

/// Appends the key of `row` (the values of `columns` at that row) to `out`.
pub fn encode_key(columns: &[&Vector], row: usize, out: &mut Vec<u8>) {
    out.clear();
    for column in columns {
        match &column.data {
            VectorData::Bool(v) => out.push(v[row] as u8),
            VectorData::I16(v) => out.extend_from_slice(&v[row].to_le_bytes()),
            VectorData::I32(v) => out.extend_from_slice(&v[row].to_le_bytes()),
            VectorData::I64(v) => out.extend_from_slice(&v[row].to_le_bytes()),
            VectorData::I128(v) => out.extend_from_slice(&v[row].to_le_bytes()),
            VectorData::F32(v) => out.extend_from_slice(&v[row].to_bits().to_le_bytes()),
            VectorData::F64(v) => out.extend_from_slice(&v[row].to_bits().to_le_bytes()),
            VectorData::Interval(v) => out.extend_from_slice(&v[row].normalized().to_le_bytes()),
            VectorData::Str(s) => {
                let bytes = s.get_bytes(row);
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }
}

/// The keys present in a table, one set per constraint (in the order of
/// `Table::key_constraints`).
#[derive(Debug, Default)]
pub struct UniqueIndex {
    pub keys: Vec<HashSet<Vec<u8>>>,
}
