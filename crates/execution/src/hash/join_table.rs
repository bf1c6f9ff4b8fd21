//! The join hash table.
//!
//! ```text
//!  directory (power-of-two regions, one per hash partition; linear probing)
//!  ┌──────────────────────────┐        build rows (columnar, see the join operator)
//!  │ key: u64 │ head: u32     │──┐      next: [u32; rows]   chain of rows with equal keys
//!  ├──────────────────────────┤  └──▶ row 17 ──next──▶ row 4 ──next──▶ NONE
//!  │ key      │ head          │
//!  └──────────────────────────┘
//! ```
//!
//! A slot holds the packed key and the first build row with that key, so a probe touches
//! one cache line for the key comparison (ROF §4.3). Byte-string keys keep the hash in the
//! slot and compare the key bytes of the head row. The directory is split into
//! `2^partition_bits` regions by the top bits of the hash; each region is filled by its own
//! finalize task, so the build runs on all workers without locks. The directory is sized
//! for a load factor of at most 0.5.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use super::bloom::BloomFilter;
use super::keys::{KeyWidth, PackedKeys};

/// Marks an empty slot / the end of a chain.
pub const NONE: u32 = u32::MAX;

/// Build sides at least this large get a Bloom filter.
pub const BLOOM_MIN_ROWS: usize = 4096;

#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Slot<K> {
    key: K,
    head: u32,
}

#[derive(Debug)]
enum Slots {
    Empty,
    U64(Vec<Slot<u64>>),
    U128(Vec<Slot<u128>>),
    /// For byte keys, `key` is the full hash.
    Bytes(Vec<Slot<u64>>),
}

/// Builds a [`JoinTable`] partition by partition (tasks may run concurrently).
pub struct JoinTableBuilder {
    keys: PackedKeys,
    hashes: Vec<u64>,
    partition_bits: u32,
    region_size: usize,
    partition_rows: Vec<Vec<u32>>,
    regions: Vec<Mutex<Option<Slots>>>,
    next: Vec<AtomicU32>,
    has_null_key: bool,
}

impl JoinTableBuilder {
    /// Prepares the build of `keys` (one per build row) in `2^partition_bits` partitions.
    pub fn new(keys: PackedKeys, partition_bits: u32) -> JoinTableBuilder {
        let rows = keys.len();
        let hashes = keys.hashes();
        let partitions = 1usize << partition_bits;
        let mut partition_rows: Vec<Vec<u32>> = vec![Vec::new(); partitions];
        let mut has_null_key = false;
        for (row, &hash) in hashes.iter().enumerate() {
            if !keys.is_valid(row) {
                has_null_key = true;
                continue;
            }
            partition_rows[partition_of(hash, partition_bits)].push(row as u32);
        }
        let largest = partition_rows.iter().map(|p| p.len()).max().unwrap_or(0);
        let region_size = (largest * 2).max(16).next_power_of_two();
        let next = (0..rows).map(|_| AtomicU32::new(NONE)).collect();
        let regions = (0..partitions).map(|_| Mutex::new(None)).collect();
        JoinTableBuilder { keys, hashes, partition_bits, region_size, partition_rows, regions, next, has_null_key }
    }

    pub fn partitions(&self) -> usize {
        self.partition_rows.len()
    }

    /// Inserts the rows of partition `p` into its region.
    pub fn build_partition(&self, p: usize) {
        let mask = self.region_size - 1;
        let rows = &self.partition_rows[p];
        let link = |row: u32, head: u32| self.next[row as usize].store(head, Ordering::Relaxed);
        let slots = match &self.keys {
            PackedKeys::Empty { .. } => Slots::Empty,
            PackedKeys::U64 { keys, .. } => Slots::U64(insert_fixed(keys, &self.hashes, rows, self.region_size, mask, link)),
            PackedKeys::U128 { keys, .. } => Slots::U128(insert_fixed(keys, &self.hashes, rows, self.region_size, mask, link)),
            PackedKeys::Bytes { .. } => {
                let mut slots = vec![Slot { key: 0u64, head: NONE }; self.region_size];
                for &row in rows {
                    let hash = self.hashes[row as usize];
                    let mut idx = hash as usize & mask;
                    loop {
                        let slot = &mut slots[idx];
                        if slot.head == NONE {
                            *slot = Slot { key: hash, head: row };
                            break;
                        }
                        if slot.key == hash && self.keys.bytes(slot.head as usize) == self.keys.bytes(row as usize) {
                            link(row, slot.head);
                            slot.head = row;
                            break;
                        }
                        idx = (idx + 1) & mask;
                    }
                }
                Slots::Bytes(slots)
            }
        };
        *self.regions[p].lock().unwrap_or_else(|e| e.into_inner()) = Some(slots);
    }

    /// Assembles the table once every partition is built.
    pub fn finish(self) -> JoinTable {
        let width = match &self.keys {
            PackedKeys::Empty { .. } => KeyWidth::Empty,
            PackedKeys::U64 { .. } => KeyWidth::U64,
            PackedKeys::U128 { .. } => KeyWidth::U128,
            PackedKeys::Bytes { .. } => KeyWidth::Bytes,
        };
        let rows = self.keys.len();
        let mut next: Vec<u32> = self.next.into_iter().map(|a| a.into_inner()).collect();
        let regions: Vec<Slots> =
            self.regions.into_iter().map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()).unwrap_or(Slots::Empty)).collect();
        let slots = match width {
            KeyWidth::Empty => {
                // Every build row matches every probe row: one chain through all rows.
                for (row, n) in next.iter_mut().enumerate() {
                    *n = if row + 1 < rows { row as u32 + 1 } else { NONE };
                }
                Slots::Empty
            }
            KeyWidth::U64 => Slots::U64(regions.into_iter().flat_map(|r| if let Slots::U64(s) = r { s } else { Vec::new() }).collect()),
            KeyWidth::U128 => Slots::U128(regions.into_iter().flat_map(|r| if let Slots::U128(s) = r { s } else { Vec::new() }).collect()),
            KeyWidth::Bytes => {
                Slots::Bytes(regions.into_iter().flat_map(|r| if let Slots::Bytes(s) = r { s } else { Vec::new() }).collect())
            }
        };
        // A Bloom filter lets probes reject absent keys without touching a large directory.
        let bloom = (rows >= BLOOM_MIN_ROWS).then(|| {
            let mut filter = BloomFilter::with_capacity(rows);
            for (row, &hash) in self.hashes.iter().enumerate() {
                if self.keys.is_valid(row) {
                    filter.insert(hash);
                }
            }
            filter
        });
        JoinTable {
            slots,
            next,
            bloom,
            keys: self.keys,
            partition_bits: self.partition_bits,
            region_mask: self.region_size - 1,
            region_size: self.region_size,
            has_null_key: self.has_null_key,
            rows,
        }
    }
}

fn insert_fixed<K: Copy + Eq + Default>(
    keys: &[K],
    hashes: &[u64],
    rows: &[u32],
    region_size: usize,
    mask: usize,
    link: impl Fn(u32, u32),
) -> Vec<Slot<K>> {
    let mut slots = vec![Slot { key: K::default(), head: NONE }; region_size];
    for &row in rows {
        let key = keys[row as usize];
        let mut idx = hashes[row as usize] as usize & mask;
        loop {
            let slot = &mut slots[idx];
            if slot.head == NONE {
                *slot = Slot { key, head: row };
                break;
            }
            if slot.key == key {
                link(row, slot.head);
                slot.head = row;
                break;
            }
            idx = (idx + 1) & mask;
        }
    }
    slots
}

#[inline(always)]
fn partition_of(hash: u64, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        (hash >> (64 - bits)) as usize
    }
}

/// A finished join hash table (read-only; probed concurrently).
#[derive(Debug)]
pub struct JoinTable {
    slots: Slots,
    next: Vec<u32>,
    /// Over the build keys' hashes (tables of at least [`BLOOM_MIN_ROWS`] rows).
    pub bloom: Option<BloomFilter>,
    keys: PackedKeys,
    partition_bits: u32,
    region_mask: usize,
    region_size: usize,
    /// Some build row has a NULL key (matters for NOT IN and IN marks).
    pub has_null_key: bool,
    /// Number of build rows.
    pub rows: usize,
}

impl JoinTable {
    /// The first build row whose key equals probe key `j` (or [`NONE`]).
    #[inline]
    pub fn find(&self, probe: &PackedKeys, j: usize, hash: u64) -> u32 {
        let base = partition_of(hash, self.partition_bits) * self.region_size;
        let mut idx = hash as usize & self.region_mask;
        match (&self.slots, probe) {
            (Slots::Empty, _) => {
                if self.rows > 0 {
                    0
                } else {
                    NONE
                }
            }
            (Slots::U64(slots), PackedKeys::U64 { keys, .. }) => {
                let key = keys[j];
                loop {
                    let slot = &slots[base + idx];
                    if slot.head == NONE || slot.key == key {
                        return slot.head;
                    }
                    idx = (idx + 1) & self.region_mask;
                }
            }
            (Slots::U128(slots), PackedKeys::U128 { keys, .. }) => {
                let key = keys[j];
                loop {
                    let slot = &slots[base + idx];
                    if slot.head == NONE || slot.key == key {
                        return slot.head;
                    }
                    idx = (idx + 1) & self.region_mask;
                }
            }
            (Slots::Bytes(slots), PackedKeys::Bytes { .. }) => {
                let key = probe.bytes(j);
                loop {
                    let slot = &slots[base + idx];
                    if slot.head == NONE || (slot.key == hash && self.keys.bytes(slot.head as usize) == key) {
                        return slot.head;
                    }
                    idx = (idx + 1) & self.region_mask;
                }
            }
            _ => NONE,
        }
    }

    /// Prefetches the slot probe key `j` will look at first.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        let base = partition_of(hash, self.partition_bits) * self.region_size;
        let idx = base + (hash as usize & self.region_mask);
        let address = match &self.slots {
            Slots::U64(s) | Slots::Bytes(s) => s.get(idx).map(|s| s as *const _ as *const u8),
            Slots::U128(s) => s.get(idx).map(|s| s as *const _ as *const u8),
            Slots::Empty => None,
        };
        if let Some(address) = address {
            prefetch_read(address);
        }
    }

    /// The next build row with the same key as `row` (or [`NONE`]).
    #[inline(always)]
    pub fn next(&self, row: u32) -> u32 {
        self.next[row as usize]
    }

    /// Size of the directory in bytes.
    pub fn directory_bytes(&self) -> usize {
        match &self.slots {
            Slots::Empty => 0,
            Slots::U64(s) | Slots::Bytes(s) => s.len() * size_of::<Slot<u64>>(),
            Slots::U128(s) => s.len() * size_of::<Slot<u128>>(),
        }
    }
}

/// A software prefetch hint (no-op where unsupported).
#[inline(always)]
pub fn prefetch_read(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(address as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::KeyPacker;
    use apiary_types::{DataType, Vector};

    fn table(values: Vec<i64>, bits: u32) -> (JoinTable, KeyPacker) {
        let packer = KeyPacker::new(&[DataType::BigInt], &[false], false);
        let rows: Vec<u32> = (0..values.len() as u32).collect();
        let keys = packer.pack(&[Vector::from_native(DataType::BigInt, values)], &rows);
        let builder = JoinTableBuilder::new(keys, bits);
        for p in 0..builder.partitions() {
            builder.build_partition(p);
        }
        (builder.finish(), packer)
    }

    fn matches(table: &JoinTable, packer: &KeyPacker, key: i64) -> Vec<u32> {
        let probe = packer.pack(&[Vector::from_native(DataType::BigInt, vec![key])], &[0]);
        let hash = probe.hashes()[0];
        let mut rows = Vec::new();
        let mut row = table.find(&probe, 0, hash);
        while row != NONE {
            rows.push(row);
            row = table.next(row);
        }
        rows.sort();
        rows
    }

    #[test]
    fn finds_all_duplicates_in_every_partitioning() {
        for bits in [0, 3] {
            let values: Vec<i64> = (0..1000).map(|i| i % 100).collect();
            let (table, packer) = table(values, bits);
            let expected: Vec<u32> = (0..10).map(|k| 7 + 100 * k).collect();
            assert_eq!(matches(&table, &packer, 7), expected);
            assert!(matches(&table, &packer, 100).is_empty());
        }
    }
}
