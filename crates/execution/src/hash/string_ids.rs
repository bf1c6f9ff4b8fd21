//! Small integer ids for the strings of a group key.
//!
//! A GROUP BY on a few-valued string (a category, a brand, a warehouse name joined in
//! from a dimension) would otherwise pack every row's key into a byte string, hash it and
//! compare it byte by byte in the group table. Instead, each distinct string gets an id
//! (0 is NULL) that every worker of the execution shares, and the key packs the id as an
//! INTEGER: the table then compares fixed-width keys.
//!
//! Looking an id up by the string's bytes would cost what the byte key cost, so each
//! worker first asks a direct-mapped cache keyed by where the string lies: an inline view
//! is its own key, a long one is (heap, offset, length). Strings gathered from a join's
//! build side, or decoded from a dictionary, point into one heap and hit the cache.
//! The cache keeps the heaps it has keys of alive, so that no freed heap's address can
//! come back holding other bytes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use apiary_types::string::Heap;
use apiary_types::{DataType, Vector, VectorData};

use crate::expr::BuildBytesHasher;

/// The ids of one execution, shared by its workers.
#[derive(Default)]
pub struct StringIds {
    ids: Mutex<HashMap<Box<[u8]>, u32, BuildBytesHasher>>,
}

impl StringIds {
    fn id(&self, bytes: &[u8]) -> u32 {
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = ids.get(bytes) {
            return id;
        }
        let id = u32::try_from(ids.len() + 1).expect("fewer than 2^32 distinct strings");
        ids.insert(bytes.into(), id);
        id
    }
}

/// Entries of a worker's cache (a power of two).
const CACHE_SLOTS: usize = 4096;
/// Heaps a cache keeps alive; one more empties it.
const RETAINED_HEAPS: usize = 8;
/// A key no string has (a view's low 32 bits are its length).
const EMPTY: u128 = u128::MAX;

/// The cache slot of a key: one multiply (Fibonacci hashing of the key's two halves
/// folded together), the top bits; a cache needs spread, not a full hash.
#[inline(always)]
fn cache_slot(key: u128) -> usize {
    let folded = (key as u64) ^ ((key >> 64) as u64).rotate_left(32);
    (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - CACHE_SLOTS.trailing_zeros())) as usize
}

/// A worker's view of [`StringIds`].
#[derive(Default)]
pub struct StringIdCache {
    /// Allocated on first use: most aggregations key no strings by id.
    slots: Vec<(u128, u32)>,
    /// The ids this worker has seen, by bytes (a cache miss on a known string takes no lock).
    known: HashMap<Box<[u8]>, u32, BuildBytesHasher>,
    retained: Vec<Heap>,
}

impl StringIdCache {
    /// Bytes held (the cache and the strings this worker has seen).
    pub fn memory_bytes(&self) -> usize {
        self.slots.capacity() * 24 + self.known.keys().map(|k| k.len() + 32).sum::<usize>()
    }

    /// The ids of `rows` of the string vector `column` as an INTEGER vector of the same
    /// physical length (NULL is id 0; rows not listed hold 0).
    pub fn ids(&mut self, shared: &StringIds, column: &Vector, rows: &[u32]) -> Vector {
        if self.slots.is_empty() {
            self.slots = vec![(EMPTY, 0); CACHE_SLOTS];
        }
        let mut ids = vec![0i32; column.len()];
        let VectorData::Str(strings) = &column.data else {
            unreachable!("string ids of a {:?} vector", column.data_type);
        };
        let views = strings.views().as_slice();
        let heaps = strings.heaps.as_slice();
        let validity = column.validity.as_ref();
        for &r in rows {
            let r = r as usize;
            if let Some(validity) = validity {
                if !validity.get(r) {
                    continue;
                }
            }
            let view = views[r];
            let key = if view.is_inline() {
                view.to_bits()
            } else {
                let heap = &heaps[view.heap_index() as usize];
                let address = Arc::as_ptr(heap) as usize as u128;
                (address << 64) | (u128::from(view.heap_offset()) << 32) | view.len() as u128
            };
            let slot = cache_slot(key);
            let id = if self.slots[slot].0 == key {
                self.slots[slot].1
            } else {
                let bytes = view.bytes(heaps);
                let id = match self.known.get(bytes) {
                    Some(&id) => id,
                    None => {
                        let id = shared.id(bytes);
                        self.known.insert(bytes.into(), id);
                        id
                    }
                };
                if !view.is_inline() {
                    let heap = &heaps[view.heap_index() as usize];
                    if !self.retained.iter().any(|h| Arc::ptr_eq(h, heap)) {
                        if self.retained.len() == RETAINED_HEAPS {
                            // Forget every key into the heaps let go.
                            self.retained.clear();
                            self.slots.iter_mut().for_each(|s| *s = (EMPTY, 0));
                        }
                        self.retained.push(Arc::clone(heap));
                    }
                }
                self.slots[slot] = (key, id);
                id
            };
            ids[r] = id as i32;
        }
        Vector::from_native(DataType::Integer, ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_common::bitmap::Bitmap;
    use apiary_types::string::StrColumn;

    fn strings(values: &[Option<&str>]) -> Vector {
        let column = StrColumn::from_strs(values.iter().map(|v| v.unwrap_or("")));
        let validity = values.iter().any(Option::is_none).then(|| Bitmap::from_bools(values.iter().map(Option::is_some)));
        Vector::new(DataType::Varchar(None), VectorData::Str(column), validity)
    }

    fn ids(cache: &mut StringIdCache, shared: &StringIds, v: &Vector) -> Vec<i32> {
        let rows: Vec<u32> = (0..v.len() as u32).collect();
        cache.ids(shared, v, &rows).values::<i32>().to_vec()
    }

    #[test]
    fn equal_strings_get_equal_ids_across_workers_and_columns() {
        let shared = StringIds::default();
        let (mut a, mut b) = (StringIdCache::default(), StringIdCache::default());
        let long = "a string longer than twelve bytes";
        let first = ids(&mut a, &shared, &strings(&[Some("x"), Some(long), None, Some("x"), Some(long)]));
        assert_eq!(first[0], first[3]);
        assert_eq!(first[1], first[4]);
        assert_ne!(first[0], first[1]);
        assert_eq!(first[2], 0, "NULL is id 0");
        // Another worker, another column (other heaps): the same ids.
        let second = ids(&mut b, &shared, &strings(&[Some(long), Some("y"), Some("x")]));
        assert_eq!(second[0], first[1]);
        assert_eq!(second[2], first[0]);
        assert!(second[1] != first[0] && second[1] != first[1] && second[1] != 0);
    }

    #[test]
    fn many_heaps_and_strings_keep_ids_exact() {
        // More heaps than the cache retains and more strings than it has slots: every
        // string keeps its one id.
        let shared = StringIds::default();
        let mut cache = StringIdCache::default();
        let mut seen: HashMap<String, i32> = HashMap::new();
        for round in 0..20 {
            let values: Vec<String> = (0..1000).map(|i| format!("value number {:05}", (i * 7 + round * 300) % 9000)).collect();
            let v = strings(&values.iter().map(|s| Some(s.as_str())).collect::<Vec<_>>());
            for (value, id) in values.iter().zip(ids(&mut cache, &shared, &v)) {
                assert_eq!(*seen.entry(value.clone()).or_insert(id), id, "{value}");
            }
        }
        let distinct: std::collections::HashSet<i32> = seen.values().copied().collect();
        assert_eq!(distinct.len(), seen.len());
    }
}
