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

use super::bloom::{BloomFilter, SharedBloomBuilder};
use super::keys::{KeyWidth, PackedKeys};

/// Marks an empty slot / the end of a chain.
pub const NONE: u32 = u32::MAX;

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
    /// Filled by the partition tasks, each with its own rows.
    bloom: Option<SharedBloomBuilder>,
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
        let keyed = !matches!(keys, PackedKeys::Empty { .. });
        let bloom = (keyed && rows > 0).then(|| SharedBloomBuilder::with_capacity(rows));
        JoinTableBuilder { keys, hashes, partition_bits, region_size, partition_rows, regions, next, bloom, has_null_key }
    }

    pub fn partitions(&self) -> usize {
        self.partition_rows.len()
    }

    /// Inserts the rows of partition `p` into its region.
    pub fn build_partition(&self, p: usize) {
        let mask = self.region_size - 1;
        let rows = &self.partition_rows[p];
        // The partition's rows hold only valid keys.
        if let Some(bloom) = &self.bloom {
            for &row in rows {
                bloom.insert(self.hashes[row as usize]);
            }
        }
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
            // Regions are concatenated with block copies, in partition order.
            KeyWidth::U64 => Slots::U64(concat_regions(regions, |r| if let Slots::U64(s) = r { Some(s) } else { None })),
            KeyWidth::U128 => Slots::U128(concat_regions(regions, |r| if let Slots::U128(s) = r { Some(s) } else { None })),
            KeyWidth::Bytes => Slots::Bytes(concat_regions(regions, |r| if let Slots::Bytes(s) = r { Some(s) } else { None })),
        };
        // A Bloom filter lets probes reject absent keys in a few branch-free instructions,
        // without touching the directory; probes stop using it when it rejects too little.
        // The partition tasks filled it in parallel.
        let bloom = self.bloom.map(SharedBloomBuilder::finish);
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
    /// Over the build keys' hashes (absent for key-less tables).
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
    /// Looks up the probe keys at `candidates` (indices into `probe` and `hashes`) and
    /// writes each one's first matching build row, or [`NONE`], to `heads[j]`.
    ///
    /// With `prefetch_group > 0`, keys are processed in groups (ROF §4.3): every key's
    /// first slot is prefetched, then the group is looked up, so the cache misses of a
    /// group overlap. The loop is specialised per key width: no dispatch per key.
    pub fn find_batch(&self, probe: &PackedKeys, hashes: &[u64], candidates: &[u32], heads: &mut [u32], prefetch_group: usize) {
        let layout = Layout { partition_bits: self.partition_bits, region_size: self.region_size, region_mask: self.region_mask };
        match (&self.slots, probe) {
            (Slots::Empty, _) => {
                let head = if self.rows > 0 { 0 } else { NONE };
                for &j in candidates {
                    heads[j as usize] = head;
                }
            }
            (Slots::U64(slots), PackedKeys::U64 { keys, .. }) => {
                find_fixed(slots, layout, candidates, heads, prefetch_group, |j| (keys[j], hashes[j]), |slot, key| slot.key == key)
            }
            (Slots::U128(slots), PackedKeys::U128 { keys, .. }) => {
                find_fixed(slots, layout, candidates, heads, prefetch_group, |j| (keys[j], hashes[j]), |slot, key| slot.key == key)
            }
            (Slots::Bytes(slots), PackedKeys::Bytes { .. }) => find_fixed(
                slots,
                layout,
                candidates,
                heads,
                prefetch_group,
                |j| (j, hashes[j]),
                |slot, j| slot.key == hashes[j] && self.keys.bytes(slot.head as usize) == probe.bytes(j),
            ),
            _ => {
                for &j in candidates {
                    heads[j as usize] = NONE;
                }
            }
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

/// The regions' slots, one after the other.
fn concat_regions<K: Copy>(regions: Vec<Slots>, take: impl Fn(Slots) -> Option<Vec<Slot<K>>>) -> Vec<Slot<K>> {
    let regions: Vec<Vec<Slot<K>>> = regions.into_iter().map(|r| take(r).unwrap_or_default()).collect();
    if regions.len() == 1 {
        return regions.into_iter().next().unwrap_or_default();
    }
    let mut all = Vec::with_capacity(regions.iter().map(Vec::len).sum());
    for region in &regions {
        all.extend_from_slice(region);
    }
    all
}

/// Where a hash lands in the directory.
#[derive(Clone, Copy)]
struct Layout {
    partition_bits: u32,
    region_size: usize,
    region_mask: usize,
}

impl Layout {
    #[inline(always)]
    fn first_slot(self, hash: u64) -> (usize, usize) {
        (partition_of(hash, self.partition_bits) * self.region_size, hash as usize & self.region_mask)
    }
}

/// The probe loop of [`JoinTable::find_batch`] for one slot type; `probe_key(j)` gives
/// key `j` (or what `matches` needs to compare it) and its hash.
#[inline(always)]
fn find_fixed<K, P: Copy>(
    slots: &[Slot<K>],
    layout: Layout,
    candidates: &[u32],
    heads: &mut [u32],
    prefetch_group: usize,
    probe_key: impl Fn(usize) -> (P, u64),
    matches: impl Fn(&Slot<K>, P) -> bool,
) {
    let lookup = |j: usize| {
        let (key, hash) = probe_key(j);
        let (base, mut idx) = layout.first_slot(hash);
        loop {
            let slot = &slots[base + idx];
            if slot.head == NONE || matches(slot, key) {
                return slot.head;
            }
            idx = (idx + 1) & layout.region_mask;
        }
    };
    let directory_bytes = size_of_val(slots);
    if prefetch_group == 0 || directory_bytes <= PREFETCH_MIN_DIRECTORY_BYTES {
        for &j in candidates {
            heads[j as usize] = lookup(j as usize);
        }
        return;
    }
    for group in candidates.chunks(prefetch_group) {
        for &j in group {
            let (_, hash) = probe_key(j as usize);
            let (base, idx) = layout.first_slot(hash);
            prefetch_read(&slots[base + idx] as *const Slot<K> as *const u8);
        }
        for &j in group {
            heads[j as usize] = lookup(j as usize);
        }
    }
}

/// Directories up to this size stay in cache: prefetching them only costs instructions.
pub const PREFETCH_MIN_DIRECTORY_BYTES: usize = 1 << 20;

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
        let mut heads = [NONE];
        table.find_batch(&probe, &probe.hashes(), &[0], &mut heads, 0);
        let mut rows = Vec::new();
        let mut row = heads[0];
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

    #[test]
    fn prefetching_batches_find_the_same_rows() {
        // Large enough that the directory exceeds the prefetch threshold.
        let values: Vec<i64> = (0..200_000).map(|i| i * 3).collect();
        let (table, packer) = table(values, 2);
        assert!(table.directory_bytes() > PREFETCH_MIN_DIRECTORY_BYTES);
        let probe_values: Vec<i64> = (0..5000).map(|i| i * 7).collect();
        let rows: Vec<u32> = (0..probe_values.len() as u32).collect();
        let probe = packer.pack(&[Vector::from_native(DataType::BigInt, probe_values.clone())], &rows);
        let candidates: Vec<u32> = rows.iter().copied().filter(|j| j % 5 != 1).collect();
        for group in [0, 1, 16, 256] {
            let mut heads = vec![NONE; rows.len()];
            table.find_batch(&probe, &probe.hashes(), &candidates, &mut heads, group);
            for (j, &head) in heads.iter().enumerate() {
                let expected = if j % 5 != 1 && probe_values[j] % 3 == 0 { (probe_values[j] / 3) as u32 } else { NONE };
                assert_eq!(head, expected, "group {group}, key {j}");
            }
        }
    }
}
