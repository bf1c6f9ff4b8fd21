//! The aggregation hash table: maps packed group keys to dense group ids.
//!
//! Open addressing with linear probing. A slot of a 64-bit key holds the key and the group
//! id, so most lookups touch one cache line; wider keys' slots hold half their hash and
//! the group id (8 bytes), and byte keys' slots the hash and the group id. Group ids are dense
//! (0, 1, 2, ...) and index the columnar aggregate states. The table doubles when it is
//! half full.

use apiary_common::hash::{hash_bytes, hash_u128, hash_u64};

use super::keys::{Key256, KeyWidth, PackedKeys};

const EMPTY: u32 = u32::MAX;
/// Tables smaller than this stay in cache: prefetching would only cost instructions.
const PREFETCH_THRESHOLD_BYTES: usize = 1 << 20;
const INITIAL_CAPACITY: usize = 1024;
/// Most groups a table grows to in one step from the estimate: an overestimate costs at
/// most this many slots of allocation; beyond it the table grows by doubling.
const MAX_PRESIZED_GROUPS: usize = 1 << 18;
/// The cap for a count from the statistics of an unfiltered table (see
/// [`GroupEstimate::Statistics`]): 16M groups, 32M slots.
const MAX_PRESIZED_STATISTICS_GROUPS: usize = 1 << 24;
/// A table grows by doubling up to this many slots before its growth jumps to the
/// estimate.
const JUMP_TO_ESTIMATE_MIN_SLOTS: usize = 8 * INITIAL_CAPACITY;
/// Most a table grows by in one step toward the estimate: a table sized for the estimate
/// of a GROUP BY after a join (TPC-DS Q11: 2.9M groups expected, 190K found) is mostly
/// empty, and every lookup misses the cache; growing 4x at a time still halves the
/// rehashing of doubling when the estimate is right.
const GROWTH_TOWARD_ESTIMATE: usize = 4;
/// Tables from this size on look for runs of equal keys before looking keys up.
const RUN_DETECTION_MIN_BYTES: usize = 256 << 10;
/// Keys whose slots are prefetched together while merging tables.
const MERGE_GROUP: usize = 16;

/// A directory slot of a table with fixed-width keys: how it finds a key's group.
trait SlotLayout<K>: Copy {
    fn empty() -> Self;
    fn new(key: K, hash: u64, group: u32) -> Self;
    fn is_empty(self) -> bool;
    fn group(self) -> u32;
    /// Whether this (non-empty) slot holds `key`, whose hash is `hash`; `keys` are the
    /// table's keys by group id.
    fn holds(self, key: &K, hash: u64, keys: &[K]) -> bool;
}

/// The key itself and its group (16 bytes for a 64-bit key): a lookup is decided in the
/// slot, one cache line.
#[derive(Clone, Copy)]
struct Slot<K> {
    key: K,
    group: u32,
}

impl<K: Copy + Eq + Default> SlotLayout<K> for Slot<K> {
    #[inline(always)]
    fn empty() -> Self {
        Slot { key: K::default(), group: EMPTY }
    }

    #[inline(always)]
    fn new(key: K, _hash: u64, group: u32) -> Self {
        Slot { key, group }
    }

    #[inline(always)]
    fn is_empty(self) -> bool {
        self.group == EMPTY
    }

    #[inline(always)]
    fn group(self) -> u32 {
        self.group
    }

    #[inline(always)]
    fn holds(self, key: &K, _hash: u64, _keys: &[K]) -> bool {
        self.key == *key
    }
}

/// The upper half of the key's hash and the group (8 bytes whatever the key's width),
/// for 128- and 256-bit keys: their inline slots would take 32 and 48 bytes, so a table
/// of half a million groups would be 32-48 MB of directory, initialised and rehashed on
/// every growth, and every probe a cache miss (TPC-DS Q97's DISTINCT over two nullable
/// BIGINTs). The key is compared in `keys` only when the tags match: almost only on a hit.
#[derive(Clone, Copy)]
struct TaggedSlot(u64);

impl TaggedSlot {
    #[inline(always)]
    fn tag(hash: u64) -> u64 {
        hash & !(u32::MAX as u64)
    }
}

impl<K: Copy + Eq> SlotLayout<K> for TaggedSlot {
    #[inline(always)]
    fn empty() -> Self {
        TaggedSlot(u64::MAX)
    }

    #[inline(always)]
    fn new(_key: K, hash: u64, group: u32) -> Self {
        TaggedSlot(TaggedSlot::tag(hash) | group as u64)
    }

    #[inline(always)]
    fn is_empty(self) -> bool {
        self.0 as u32 == EMPTY
    }

    #[inline(always)]
    fn group(self) -> u32 {
        self.0 as u32
    }

    #[inline(always)]
    fn holds(self, key: &K, hash: u64, keys: &[K]) -> bool {
        TaggedSlot::tag(self.0) == TaggedSlot::tag(hash) && keys[self.0 as u32 as usize] == *key
    }
}

struct FixedTable<K, S = Slot<K>> {
    slots: Vec<S>,
    /// The key of each group, by group id.
    keys: Vec<K>,
    /// Slots for the expected number of groups: growth jumps there once the table is
    /// past [`JUMP_TO_ESTIMATE_MIN_SLOTS`].
    expected_slots: usize,
    /// Whether growth may jump to `expected_slots` in one step (a count from statistics)
    /// or only [`GROWTH_TOWARD_ESTIMATE`] times at a time (a guess).
    trust_expected: bool,
}

impl<K: Copy + Eq + Default + FixedKeyHash, S: SlotLayout<K>> FixedTable<K, S> {
    fn new(expected: GroupEstimate) -> Self {
        FixedTable {
            slots: vec![S::empty(); INITIAL_CAPACITY],
            keys: Vec::new(),
            expected_slots: slots_for(expected.groups()),
            trust_expected: matches!(expected, GroupEstimate::Statistics(_)),
        }
    }

    #[inline(always)]
    fn find_or_insert(&mut self, key: K, hash: u64) -> (u32, bool) {
        if self.keys.len() * 2 >= self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut idx = hash as usize & mask;
        loop {
            let slot = self.slots[idx];
            if slot.is_empty() {
                let group = self.keys.len() as u32;
                self.slots[idx] = S::new(key, hash, group);
                self.keys.push(key);
                return (group, true);
            }
            if slot.holds(&key, hash, &self.keys) {
                return (slot.group(), false);
            }
            idx = (idx + 1) & mask;
        }
    }

    /// The slot a key with `hash` probes first (for prefetching).
    #[inline(always)]
    fn first_slot(&self, hash: u64) -> *const u8 {
        &self.slots[hash as usize & (self.slots.len() - 1)] as *const S as *const u8
    }

    fn memory_bytes(&self) -> usize {
        self.slots.len() * size_of::<S>() + self.keys.len() * size_of::<K>()
    }

    /// See [`GroupTable::lookup`].
    fn lookup(&mut self, keys: &[K], hashes: &[u64], indices: &[u32], groups: &mut Vec<u32>, new_groups: &mut Vec<u32>) {
        for &j in indices {
            let (g, new) = self.find_or_insert(keys[j as usize], hashes[j as usize]);
            groups.push(g);
            if new {
                new_groups.push(j);
            }
        }
    }

    /// Adds `other`'s groups (see [`GroupTable::merge`]), prefetching slots a group of
    /// keys ahead when the table is larger than the cache.
    fn merge(&mut self, other: &FixedTable<K, S>, mapping: &mut Vec<u32>, new_groups: &mut Vec<u32>) {
        // Room for every key of `other` up front: no doubling in the middle of the merge.
        self.reserve(self.keys.len() + other.keys.len());
        let prefetch = self.slots.len() * size_of::<S>() >= PREFETCH_THRESHOLD_BYTES;
        let hashes: Vec<u64> = other.keys.iter().map(|k| k.hash_key()).collect();
        for (start, keys) in (0..).step_by(MERGE_GROUP).zip(other.keys.chunks(MERGE_GROUP)) {
            let hashes = &hashes[start..start + keys.len()];
            if prefetch {
                for &h in hashes {
                    super::join_table::prefetch_read(self.first_slot(h));
                }
            }
            for (offset, (&key, &hash)) in keys.iter().zip(hashes).enumerate() {
                let (id, new) = self.find_or_insert(key, hash);
                mapping.push(id);
                if new {
                    new_groups.push((start + offset) as u32);
                }
            }
        }
    }

    /// Grows the directory so that `groups` groups fit without another doubling.
    fn reserve(&mut self, groups: usize) {
        if groups * 2 >= self.slots.len() {
            self.rehash(slots_for(groups));
        }
    }

    fn grow(&mut self) {
        // Jump to the estimate only once the table has shown it is not small: estimates
        // of groups after joins can be far too high, and a jump sizes (and initialises)
        // the table for all of them.
        let doubled = self.slots.len() * 2;
        let step = if self.trust_expected { usize::MAX } else { self.slots.len() * GROWTH_TOWARD_ESTIMATE };
        let capacity = if self.slots.len() >= JUMP_TO_ESTIMATE_MIN_SLOTS { doubled.max(self.expected_slots.min(step)) } else { doubled };
        self.rehash(capacity);
    }

    fn rehash(&mut self, capacity: usize) {
        let mask = capacity - 1;
        let mut slots = vec![S::empty(); capacity];
        // Larger than the cache, every first probe would be a miss: hash a group of keys
        // and prefetch their slots before placing them.
        let prefetch = capacity * size_of::<S>() >= PREFETCH_THRESHOLD_BYTES;
        let mut hashes = [0u64; MERGE_GROUP];
        for (start, keys) in (0..).step_by(MERGE_GROUP).zip(self.keys.chunks(MERGE_GROUP)) {
            for (hash, key) in hashes.iter_mut().zip(keys) {
                *hash = key.hash_key();
                if prefetch {
                    super::join_table::prefetch_write(&slots[*hash as usize & mask] as *const S as *const u8);
                }
            }
            for (offset, (key, &hash)) in keys.iter().zip(&hashes).enumerate() {
                let mut idx = hash as usize & mask;
                while !slots[idx].is_empty() {
                    idx = (idx + 1) & mask;
                }
                slots[idx] = S::new(*key, hash, (start + offset) as u32);
            }
        }
        self.slots = slots;
    }
}

trait FixedKeyHash {
    fn hash_key(&self) -> u64;
}

impl FixedKeyHash for u64 {
    fn hash_key(&self) -> u64 {
        hash_u64(*self)
    }
}

impl FixedKeyHash for u128 {
    fn hash_key(&self) -> u64 {
        hash_u128(*self)
    }
}

impl FixedKeyHash for Key256 {
    fn hash_key(&self) -> u64 {
        self.hash()
    }
}

struct BytesTable {
    /// `key` holds the hash.
    slots: Vec<Slot<u64>>,
    arena: Vec<u8>,
    /// Group `g`'s key is `arena[offsets[g]..offsets[g + 1]]`.
    offsets: Vec<u32>,
    hashes: Vec<u64>,
}

impl BytesTable {
    fn new() -> Self {
        BytesTable { slots: vec![Slot { key: 0, group: EMPTY }; INITIAL_CAPACITY], arena: Vec::new(), offsets: vec![0], hashes: Vec::new() }
    }

    fn key(&self, group: u32) -> &[u8] {
        &self.arena[self.offsets[group as usize] as usize..self.offsets[group as usize + 1] as usize]
    }

    fn find_or_insert(&mut self, key: &[u8], hash: u64) -> (u32, bool) {
        if self.hashes.len() * 2 >= self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut idx = hash as usize & mask;
        loop {
            let slot = self.slots[idx];
            if slot.group == EMPTY {
                let group = self.hashes.len() as u32;
                self.slots[idx] = Slot { key: hash, group };
                self.arena.extend_from_slice(key);
                self.offsets.push(self.arena.len() as u32);
                self.hashes.push(hash);
                return (group, true);
            }
            if slot.key == hash && self.key(slot.group) == key {
                return (slot.group, false);
            }
            idx = (idx + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let capacity = self.slots.len() * 2;
        let mask = capacity - 1;
        let mut slots = vec![Slot { key: 0u64, group: EMPTY }; capacity];
        for (group, &hash) in self.hashes.iter().enumerate() {
            let mut idx = hash as usize & mask;
            while slots[idx].group != EMPTY {
                idx = (idx + 1) & mask;
            }
            slots[idx] = Slot { key: hash, group: group as u32 };
        }
        self.slots = slots;
    }
}

enum Table {
    /// No group keys: everything is group 0.
    Single {
        exists: bool,
    },
    U64(FixedTable<u64>),
    U128(FixedTable<u128, TaggedSlot>),
    U256(FixedTable<Key256, TaggedSlot>),
    Bytes(BytesTable),
}

/// Directory slots for `groups` groups at the table's maximum load (one half).
fn slots_for(groups: usize) -> usize {
    (groups * 2 + 1).next_power_of_two().max(INITIAL_CAPACITY)
}

/// When at least a quarter of `indices` repeat the key before them, the indices that
/// start a run of equal keys (the first index always does); `None` otherwise.
fn run_starts(keys: &PackedKeys, indices: &[u32]) -> Option<Vec<u32>> {
    fn starts<K: PartialEq>(keys: &[K], indices: &[u32]) -> Option<Vec<u32>> {
        let repeats: usize = indices.windows(2).map(|w| (keys[w[0] as usize] == keys[w[1] as usize]) as usize).sum();
        if repeats * 4 < indices.len() || indices.is_empty() {
            return None;
        }
        let mut starts = Vec::with_capacity(indices.len() - repeats);
        starts.push(indices[0]);
        for w in indices.windows(2) {
            if keys[w[0] as usize] != keys[w[1] as usize] {
                starts.push(w[1]);
            }
        }
        Some(starts)
    }
    match keys {
        PackedKeys::U64 { keys, .. } => starts(keys, indices),
        PackedKeys::U128 { keys, .. } => starts(keys, indices),
        PackedKeys::U256 { keys, .. } => starts(keys, indices),
        PackedKeys::Empty { .. } | PackedKeys::Bytes { .. } => None,
    }
}

/// The number of groups a table expects.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GroupEstimate {
    /// The optimizer's estimate, which after joins and filters can be far off: the table
    /// grows toward it a few times at a time, and only up to [`MAX_PRESIZED_GROUPS`].
    Guess(usize),
    /// The distinct count of the key in the statistics of a table read whole (a sketch,
    /// off by a few percent): the table grows straight to it once past its first few
    /// thousand groups, instead of rehashing its way up by doubling, up to
    /// [`MAX_PRESIZED_STATISTICS_GROUPS`].
    Statistics(usize),
}

impl GroupEstimate {
    /// The share of one of `partitions` tables (hashes spread groups evenly).
    pub fn per_partition(self, partitions: usize) -> GroupEstimate {
        match self {
            GroupEstimate::Guess(groups) => GroupEstimate::Guess(groups / partitions),
            GroupEstimate::Statistics(groups) => GroupEstimate::Statistics(groups / partitions),
        }
    }

    fn groups(self) -> usize {
        match self {
            GroupEstimate::Guess(groups) => groups.min(MAX_PRESIZED_GROUPS),
            GroupEstimate::Statistics(groups) => groups.min(MAX_PRESIZED_STATISTICS_GROUPS),
        }
    }
}

/// Maps group keys to dense ids.
pub struct GroupTable {
    table: Table,
}

impl GroupTable {
    pub fn new(width: KeyWidth) -> GroupTable {
        GroupTable::with_expected_groups(width, GroupEstimate::Guess(0))
    }

    /// A table expecting `expected` groups: it starts small, but once it must grow past
    /// a few thousand groups (so the estimate is plausible) it grows toward that size
    /// in large steps instead of rehashing its way up by doubling.
    pub fn with_expected_groups(width: KeyWidth, expected: GroupEstimate) -> GroupTable {
        let table = match width {
            KeyWidth::Empty => Table::Single { exists: false },
            KeyWidth::U64 => Table::U64(FixedTable::new(expected)),
            KeyWidth::U128 => Table::U128(FixedTable::new(expected)),
            KeyWidth::U256 => Table::U256(FixedTable::new(expected)),
            KeyWidth::Bytes => Table::Bytes(BytesTable::new()),
        };
        GroupTable { table }
    }

    pub fn group_count(&self) -> usize {
        match &self.table {
            Table::Single { exists } => *exists as usize,
            Table::U64(t) => t.keys.len(),
            Table::U128(t) => t.keys.len(),
            Table::U256(t) => t.keys.len(),
            Table::Bytes(t) => t.hashes.len(),
        }
    }

    /// Prefetches the slot a key with `hash` probes first.
    #[inline(always)]
    fn prefetch(&self, hash: u64) {
        let address = match &self.table {
            Table::Single { .. } => return,
            Table::U64(t) => t.first_slot(hash),
            Table::U128(t) => t.first_slot(hash),
            Table::U256(t) => t.first_slot(hash),
            Table::Bytes(t) => &t.slots[hash as usize & (t.slots.len() - 1)] as *const _ as *const u8,
        };
        super::join_table::prefetch_read(address);
    }

    /// [`GroupTable::lookup`] with group prefetching (ROF §4.3) when the table is larger
    /// than the cache: the slots of `group` keys are prefetched before they are probed.
    ///
    /// Input clustered on the group key (a table sorted by it, like lineitem by
    /// l_orderkey) repeats each key in runs: then only the first key of each run is looked
    /// up and the rest reuse its group.
    pub fn lookup_prefetched(
        &mut self,
        keys: &PackedKeys,
        hashes: &[u64],
        indices: &[u32],
        groups: &mut Vec<u32>,
        new_groups: &mut Vec<u32>,
        group: usize,
    ) {
        // Small tables are looked up from cache: finding the runs would cost more.
        let large = self.memory_bytes() >= RUN_DETECTION_MIN_BYTES;
        if let Some(run_starts) = large.then(|| run_starts(keys, indices)).flatten() {
            let mut run_groups = Vec::with_capacity(run_starts.len());
            self.lookup_prefetched_distinct(keys, hashes, &run_starts, &mut run_groups, new_groups, group);
            groups.reserve(indices.len());
            let mut run = 0;
            // `indices` are distinct, so a run begins exactly where its start index shows up.
            for &j in indices {
                if run + 1 < run_starts.len() && run_starts[run + 1] == j {
                    run += 1;
                }
                groups.push(run_groups[run]);
            }
            return;
        }
        self.lookup_prefetched_distinct(keys, hashes, indices, groups, new_groups, group)
    }

    fn lookup_prefetched_distinct(
        &mut self,
        keys: &PackedKeys,
        hashes: &[u64],
        indices: &[u32],
        groups: &mut Vec<u32>,
        new_groups: &mut Vec<u32>,
        group: usize,
    ) {
        if group == 0 || self.memory_bytes() < PREFETCH_THRESHOLD_BYTES {
            return self.lookup(keys, hashes, indices, groups, new_groups);
        }
        for part in indices.chunks(group) {
            for &j in part {
                self.prefetch(hashes[j as usize]);
            }
            self.lookup(keys, hashes, part, groups, new_groups);
        }
    }

    /// Looks up keys `indices` of `keys` (with their hashes), appending each one's group
    /// id to `groups` and the key index of each newly created group to `new_groups`.
    pub fn lookup(&mut self, keys: &PackedKeys, hashes: &[u64], indices: &[u32], groups: &mut Vec<u32>, new_groups: &mut Vec<u32>) {
        groups.reserve(indices.len());
        match (&mut self.table, keys) {
            (Table::Single { exists }, _) => {
                if !*exists && !indices.is_empty() {
                    *exists = true;
                    new_groups.push(indices[0]);
                }
                groups.extend(std::iter::repeat_n(0, indices.len()));
            }
            (Table::U64(t), PackedKeys::U64 { keys, .. }) => t.lookup(keys, hashes, indices, groups, new_groups),
            (Table::U128(t), PackedKeys::U128 { keys, .. }) => t.lookup(keys, hashes, indices, groups, new_groups),
            (Table::U256(t), PackedKeys::U256 { keys, .. }) => t.lookup(keys, hashes, indices, groups, new_groups),
            (Table::Bytes(t), PackedKeys::Bytes { .. }) => {
                for &j in indices {
                    let (g, new) = t.find_or_insert(keys.bytes(j as usize), hashes[j as usize]);
                    groups.push(g);
                    if new {
                        new_groups.push(j);
                    }
                }
            }
            _ => unreachable!("group table and keys have the same width"),
        }
    }

    /// Adds every group of `other`: returns, for each of `other`'s groups, its id here,
    /// and the list of `other`'s groups that are new here.
    pub fn merge(&mut self, other: &GroupTable) -> (Vec<u32>, Vec<u32>) {
        let mut mapping = Vec::with_capacity(other.group_count());
        let mut new_groups = Vec::new();
        match (&mut self.table, &other.table) {
            (Table::Single { exists }, Table::Single { exists: other_exists }) => {
                if *other_exists {
                    mapping.push(0);
                    if !*exists {
                        *exists = true;
                        new_groups.push(0);
                    }
                }
            }
            (Table::U64(t), Table::U64(o)) => t.merge(o, &mut mapping, &mut new_groups),
            (Table::U128(t), Table::U128(o)) => t.merge(o, &mut mapping, &mut new_groups),
            (Table::U256(t), Table::U256(o)) => t.merge(o, &mut mapping, &mut new_groups),
            (Table::Bytes(t), Table::Bytes(o)) => {
                for g in 0..o.hashes.len() {
                    let key = o.key(g as u32);
                    let (id, new) = t.find_or_insert(key, hash_bytes(key));
                    mapping.push(id);
                    if new {
                        new_groups.push(g as u32);
                    }
                }
            }
            _ => unreachable!("merged group tables have the same width"),
        }
        (mapping, new_groups)
    }

    /// Approximate memory held, in bytes.
    pub fn memory_bytes(&self) -> usize {
        match &self.table {
            Table::Single { .. } => 0,
            Table::U64(t) => t.memory_bytes(),
            Table::U128(t) => t.memory_bytes(),
            Table::U256(t) => t.memory_bytes(),
            Table::Bytes(t) => t.slots.len() * 16 + t.arena.len() + t.offsets.len() * 4 + t.hashes.len() * 8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::KeyPacker;
    use apiary_types::{DataType, Vector};

    /// A count from statistics sizes the table in one jump once it leaves its first few
    /// thousand groups; a guess of the same count grows toward it a few times at a time
    /// and no further than its cap. Both give the same groups.
    #[test]
    fn growth_toward_the_expected_groups() {
        let packer = KeyPacker::new(&[DataType::BigInt], &[false], true);
        let n = 5000;
        let values = Vector::from_native(DataType::BigInt, (0..n as i64).rev().collect());
        let rows: Vec<u32> = (0..n as u32).collect();
        let keys = packer.pack(&[values], &rows);
        let hashes = keys.hashes();
        let expected = 1 << 20;
        let mut sized = Vec::new();
        for estimate in [GroupEstimate::Statistics(expected), GroupEstimate::Guess(expected), GroupEstimate::Guess(0)] {
            let mut table = GroupTable::with_expected_groups(packer.width, estimate);
            let (mut groups, mut new) = (Vec::new(), Vec::new());
            table.lookup(&keys, &hashes, &rows, &mut groups, &mut new);
            assert_eq!(groups, rows, "{estimate:?}");
            assert_eq!(new, rows, "{estimate:?}");
            sized.push(table.memory_bytes() - n * size_of::<u64>());
        }
        let slot = size_of::<Slot<u64>>();
        assert_eq!(sized, vec![slots_for(expected) * slot, JUMP_TO_ESTIMATE_MIN_SLOTS * GROWTH_TOWARD_ESTIMATE * slot, 16384 * slot]);
        let capped = FixedTable::<u64>::new(GroupEstimate::Statistics(usize::MAX));
        assert_eq!(capped.expected_slots, slots_for(MAX_PRESIZED_STATISTICS_GROUPS));
    }

    #[test]
    fn dense_ids_and_merge() {
        let packer = KeyPacker::new(&[DataType::BigInt], &[false], true);
        let values = Vector::from_native(DataType::BigInt, (0..5000i64).map(|i| i % 1500).collect());
        let rows: Vec<u32> = (0..5000).collect();
        let keys = packer.pack(&[values], &rows);
        let hashes = keys.hashes();
        let mut a = GroupTable::new(packer.width);
        let (mut groups, mut new) = (Vec::new(), Vec::new());
        a.lookup(&keys, &hashes, &rows, &mut groups, &mut new);
        assert_eq!(a.group_count(), 1500);
        assert_eq!(new.len(), 1500);
        assert_eq!(groups[1500], groups[0]);
        let mut b = GroupTable::new(packer.width);
        let other = packer.pack(&[Vector::from_native(DataType::BigInt, vec![1499i64, 7000])], &[0, 1]);
        b.lookup(&other, &other.hashes(), &[0, 1], &mut Vec::new(), &mut Vec::new());
        let (mapping, new_groups) = a.merge(&b);
        assert_eq!(mapping[0], groups[1499]);
        assert_eq!(mapping[1], 1500);
        assert_eq!(new_groups, vec![1]);
    }

    /// Wide (128- and 256-bit, tagged slots) and byte-string keys through many doublings
    /// and a merge: a key whose
    /// packed bits are all zero (two zeros, not NULL) is a group like any other, and every
    /// key keeps its id.
    #[test]
    fn growing_tables_of_wide_and_byte_keys_keep_every_group() {
        let rows = 60_000u32;
        let all: Vec<u32> = (0..rows).collect();
        let valid: Vec<bool> = (0..rows).map(|i| i % 97 != 3).collect();
        let a = Vector::from_native(DataType::BigInt, (0..rows as i64).map(|i| i % 5000).collect())
            .with_validity(Some(apiary_common::bitmap::Bitmap::from_bool_slice(&valid)));
        let b = Vector::from_native(DataType::BigInt, (0..rows as i64).map(|i| (i * 7) % 3000).collect());
        let strings: Vec<String> = (0..rows).map(|i| format!("k{}", i % 4000)).collect();
        let c = Vector::new(
            DataType::Varchar(None),
            apiary_types::VectorData::Str(apiary_types::string::StrColumn::from_strs(strings.iter().map(String::as_str))),
            None,
        );
        // Two nullable INTEGERs: 66 bits, a 128-bit key.
        let a32 = Vector::from_native(DataType::Integer, (0..rows as i32).map(|i| i % 5000).collect()).with_validity(a.validity.clone());
        let b32 = Vector::from_native(DataType::Integer, (0..rows as i32).map(|i| (i * 7) % 3000).collect());
        for (columns, nullable) in [
            (vec![a.clone(), b.clone()], vec![true, true]),
            (vec![a32, b32], vec![true, true]),
            (vec![c.clone(), b.clone()], vec![false, false]),
        ] {
            let types: Vec<DataType> = columns.iter().map(|v| v.data_type).collect();
            let packer = KeyPacker::new(&types, &nullable, true);
            let keys = packer.pack(&columns, &all);
            let hashes = keys.hashes();
            let mut table = GroupTable::new(packer.width);
            let (mut groups, mut new) = (Vec::new(), Vec::new());
            for chunk in all.chunks(1024) {
                table.lookup(&keys, &hashes, chunk, &mut groups, &mut new);
            }
            let mut expected: std::collections::HashMap<Vec<u8>, u32> = std::collections::HashMap::new();
            for (row, &g) in groups.iter().enumerate() {
                let key = format!("{:?}|{:?}", columns[0].get_scalar(row), columns[1].get_scalar(row)).into_bytes();
                let first = *expected.entry(key).or_insert(g);
                assert_eq!(first, g, "{:?} row {row}", packer.width);
            }
            assert_eq!(table.group_count(), expected.len(), "{:?}", packer.width);
            assert_eq!(new.len(), expected.len());
            // Merged into a table holding every other key: each key maps to its group there.
            let mut other = GroupTable::new(packer.width);
            let odd: Vec<u32> = all.iter().copied().filter(|r| r % 2 == 1).collect();
            let mut other_groups = Vec::new();
            other.lookup(&keys, &hashes, &odd, &mut other_groups, &mut Vec::new());
            let (mapping, _) = other.merge(&table);
            for (&r, &g) in odd.iter().zip(&other_groups) {
                assert_eq!(mapping[groups[r as usize] as usize], g, "{:?} row {r}", packer.width);
            }
            assert_eq!(other.group_count(), expected.len());
        }
    }

    /// Keys in runs (like lineitem grouped by l_orderkey) on a table past the run and
    /// prefetch thresholds give the same groups as one lookup per key.
    #[test]
    fn runs_of_equal_keys_and_large_merges_match_plain_lookups() {
        let packer = KeyPacker::new(&[DataType::BigInt], &[false], true);
        let rows = 200_000u32;
        let values = Vector::from_native(DataType::BigInt, (0..rows as i64).map(|i| i / 3 + (i % 7 == 0) as i64).collect());
        let all: Vec<u32> = (0..rows).collect();
        let keys = packer.pack(&[values], &all);
        let hashes = keys.hashes();
        // Skip some rows so that runs are broken by the selection too.
        let indices: Vec<u32> = all.iter().copied().filter(|i| i % 11 != 5).collect();
        let (mut plain, mut plain_groups, mut plain_new) = (GroupTable::new(packer.width), Vec::new(), Vec::new());
        let (mut runs, mut run_groups, mut run_new) = (GroupTable::new(packer.width), Vec::new(), Vec::new());
        for chunk in indices.chunks(2048) {
            plain.lookup(&keys, &hashes, chunk, &mut plain_groups, &mut plain_new);
            runs.lookup_prefetched(&keys, &hashes, chunk, &mut run_groups, &mut run_new, 16);
        }
        assert!(runs.memory_bytes() >= RUN_DETECTION_MIN_BYTES);
        assert_eq!(plain_groups, run_groups);
        assert_eq!(plain_new, run_new);

        // Merging a second large table: every key maps to the group of its equal key.
        let shifted = Vector::from_native(DataType::BigInt, (0..rows as i64).map(|i| i + 50_000).collect());
        let other_keys = packer.pack(&[shifted], &all);
        let mut other = GroupTable::new(packer.width);
        let mut other_groups = Vec::new();
        other.lookup(&other_keys, &other_keys.hashes(), &all, &mut other_groups, &mut Vec::new());
        let before = plain.group_count() as u32;
        let (mapping, new_groups) = plain.merge(&other);
        assert_eq!(mapping.len(), other.group_count());
        let PackedKeys::U64 { keys: packed, .. } = &keys else { unreachable!() };
        let PackedKeys::U64 { keys: other_packed, .. } = &other_keys else { unreachable!() };
        let mut first_row_of_group = std::collections::HashMap::new();
        for (&j, &g) in indices.iter().zip(&plain_groups) {
            first_row_of_group.entry(packed[j as usize]).or_insert(g);
        }
        for (row, &g) in other_groups.iter().enumerate() {
            let mapped = mapping[g as usize];
            match first_row_of_group.get(&other_packed[row]) {
                Some(&existing) => assert_eq!(mapped, existing),
                None => assert!(mapped >= before),
            }
        }
        assert_eq!(plain.group_count() as u32, before + new_groups.len() as u32);
    }
}
