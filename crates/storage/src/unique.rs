//! Uniqueness of primary keys and UNIQUE constraints: the set of keys a table holds per
//! constraint, checked on every append.
//!
//! Keys are encoded as byte strings (fixed-width values little-endian, strings
//! length-prefixed), so one hash set serves any combination of key types. The set is
//! built lazily from the table's blocks on the first append and kept up to date by
//! commits; an append that is not committed leaves it untouched.

use std::collections::HashSet;
use std::sync::Arc;

use apiary_types::{Vector, VectorData};

use crate::pool::BufferPool;

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

/// What a key set spends per key besides the key's bytes: the `Vec`'s header and its
/// allocation's rounding, and the hash table's slot and control byte (an estimate, for
/// the memory budget).
pub const KEY_SET_ENTRY_BYTES: usize = 56;

/// The bytes a key set spends on `key` (see [`KEY_SET_ENTRY_BYTES`]).
pub fn key_set_bytes(key: &[u8]) -> usize {
    key.len() + KEY_SET_ENTRY_BYTES
}

/// The keys present in a table, one set per constraint (in the order of
/// `Table::key_constraints`).
#[derive(Default)]
pub struct UniqueIndex {
    pub keys: Vec<HashSet<Vec<u8>>>,
    /// The budget the sets are charged to and the bytes charged (released on drop).
    pub charged: Option<(Arc<BufferPool>, usize)>,
}

impl std::fmt::Debug for UniqueIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let charged = self.charged.as_ref().map_or(0, |(_, bytes)| *bytes);
        f.debug_struct("UniqueIndex")
            .field("keys", &self.keys.iter().map(HashSet::len).collect::<Vec<_>>())
            .field("charged", &charged)
            .finish()
    }
}

impl UniqueIndex {
    /// The sets gained `added` bytes of keys and lost `freed` (a commit's change).
    pub fn recharge(&mut self, added: usize, freed: usize) {
        if let Some((pool, bytes)) = self.charged.as_mut() {
            pool.charge_index(added);
            pool.release_index(freed);
            *bytes = (*bytes + added).saturating_sub(freed);
        }
    }
}

impl Drop for UniqueIndex {
    fn drop(&mut self) {
        if let Some((pool, bytes)) = &self.charged {
            pool.release_index(*bytes);
        }
    }
}
