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
//!
//! Keys packed into 64 bits whose values span a small range (surrogate keys: `1..n`, dates)
//! need no hashing at all: a *direct* table holds the chain head of key `k` at index
//! `k - min` of an array, so a probe is one bounds check and one load, with no hash, Bloom
//! filter or key comparison.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::bloom::{BloomFilter, SharedBloomBuilder};
use super::keys::{Key256, PackedKeys};
use apiary_common::hash::hash_u64;

/// Marks an empty slot / the end of a chain.
pub const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Slot<K> {
    key: K,
    head: u32,
}

/// The most slots per build row a direct table may have: at this density its array is no
/// larger than a hash directory (16-byte slots at load factor 0.5 or less).
const DIRECT_SLOTS_PER_ROW: u64 = 8;
/// Direct tables of up to this many slots are allowed whatever the row count.
const DIRECT_MIN_SLOTS: u64 = 4096;
/// The largest direct table (1 GB of heads).
const DIRECT_MAX_SLOTS: u64 = 1 << 28;

#[derive(Debug)]
enum Slots {
    Empty,
    /// The chain head of key `min + i` at index `i`.
    Direct {
        min: u64,
        heads: Vec<u32>,
    },
    U64(Vec<Slot<u64>>),
    U128(Vec<Slot<u128>>),
    U256(Vec<Slot<Key256>>),
    /// For byte keys, `key` is the full hash.
    Bytes(Vec<Slot<u64>>),
}

/// Build rows are sorted into up to `2^FINE_PARTITION_BITS` partitions as they arrive; a
/// table built in `2^b` partitions (`b` at most the pieces' fine bits) takes partition
/// `p`'s rows from the fine partitions whose top `b` bits are `p`.
pub const FINE_PARTITION_BITS: u32 = 6;

/// A build row as its partition holds it: the row's id and, for 64-bit packed keys, the
/// key itself (its hash is recomputed, which is cheaper than storing it), else the key's
/// hash. Partition tasks read their entries sequentially instead of reading keys and
/// hashes at scattered row ids.
#[derive(Clone, Copy)]
struct Entry {
    word: u64,
    row: u32,
}

/// One worker's share of a join's build rows: their packed keys, and each fine
/// partition's entries (with local row ids). Workers fill their own piece while the build
/// input streams in, so hashing and partitioning run in parallel.
pub struct BuildPiece {
    keys: Option<PackedKeys>,
    rows: usize,
    /// `2^fine_bits` fine partitions.
    fine_bits: u32,
    partitions: Vec<Vec<Entry>>,
    has_null_key: bool,
    /// The smallest and largest valid 64-bit packed key (for a direct table).
    word_range: Option<(u64, u64)>,
}

impl BuildPiece {
    /// A piece sorting its rows into `2^fine_bits` fine partitions (at most
    /// `2^FINE_PARTITION_BITS`). With 0 bits, for a table built by one task, the piece
    /// keeps no entries: that task reads the keys in row order.
    pub fn new(fine_bits: u32) -> BuildPiece {
        let fine_bits = fine_bits.min(FINE_PARTITION_BITS);
        let partitions = if fine_bits == 0 { Vec::new() } else { vec![Vec::new(); 1 << fine_bits] };
        BuildPiece { keys: None, rows: 0, fine_bits, partitions, has_null_key: false, word_range: None }
    }

    /// Rows appended so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Appends the keys of a batch of build rows (ids continue from [`Self::rows`]).
    pub fn append(&mut self, keys: PackedKeys) {
        if let PackedKeys::U64 { keys: words, valid } = &keys {
            let range = words.iter().zip(valid).filter(|(_, v)| **v).fold(self.word_range, |range, (&w, _)| match range {
                None => Some((w, w)),
                Some((lo, hi)) => Some((lo.min(w), hi.max(w))),
            });
            self.word_range = range;
        }
        if self.fine_bits == 0 {
            self.has_null_key |= keys.validity().contains(&false);
        } else {
            let hashes = keys.hashes();
            match &keys {
                PackedKeys::U64 { keys: words, valid } => self.scatter(&hashes, valid, |j| words[j]),
                other => self.scatter(&hashes, other.validity(), |j| hashes[j]),
            }
        }
        self.rows += keys.len();
        match &mut self.keys {
            None => self.keys = Some(keys),
            Some(previous) => previous.extend(keys),
        }
    }

    /// Sorts a batch's rows with valid keys into the fine partitions (`valid` is empty
    /// when every key is valid).
    #[inline(always)]
    fn scatter(&mut self, hashes: &[u64], valid: &[bool], word: impl Fn(usize) -> u64) {
        let first = self.rows as u32;
        for (j, &hash) in hashes.iter().enumerate() {
            if valid.get(j).copied().unwrap_or(true) {
                self.partitions[partition_of(hash, self.fine_bits)].push(Entry { word: word(j), row: first + j as u32 });
            } else {
                self.has_null_key = true;
            }
        }
    }
}

/// Builds a [`JoinTable`] partition by partition (tasks may run concurrently).
pub struct JoinTableBuilder {
    keys: PackedKeys,
    partition_bits: u32,
    region_size: usize,
    /// Rows per prefetch group while inserting (0: no prefetching).
    prefetch_group: usize,
    /// Per piece: the id of its first row, its row count and its fine partitions (none
    /// for a piece read in row order).
    pieces: Vec<(u32, u32, Vec<Vec<Entry>>)>,
    directory: Directory,
    next: Vec<AtomicU32>,
    /// Filled by the partition tasks, each with its own rows.
    bloom: Option<SharedBloomBuilder>,
    has_null_key: bool,
}

impl JoinTableBuilder {
    /// Prepares the build of the rows of `pieces` (row ids numbered piece after piece) in
    /// `2^partition_bits` partitions (at most as many as each piece's fine partitions),
    /// inserting `prefetch_group` rows per group into regions larger than the cache.
    pub fn from_pieces(pieces: Vec<BuildPiece>, partition_bits: u32, prefetch_group: usize) -> JoinTableBuilder {
        let partition_bits = pieces.iter().map(|p| p.fine_bits).fold(partition_bits, u32::min);
        let partitions = 1usize << partition_bits;
        let mut partition_rows = vec![0usize; partitions];
        let mut first_row = 0u32;
        let mut keys = Vec::with_capacity(pieces.len());
        let mut starts = Vec::with_capacity(pieces.len());
        let mut has_null_key = false;
        let mut word_range: Option<(u64, u64)> = None;
        for piece in pieces {
            word_range = match (word_range, piece.word_range) {
                (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
                (a, b) => a.or(b),
            };
            let fine_per_partition = 1usize << (piece.fine_bits - partition_bits);
            for (fine, entries) in piece.partitions.iter().enumerate() {
                partition_rows[fine / fine_per_partition] += entries.len();
            }
            if piece.partitions.is_empty() {
                partition_rows[0] += piece.rows;
            }
            has_null_key |= piece.has_null_key;
            starts.push((first_row, piece.rows as u32, piece.partitions));
            first_row += piece.rows as u32;
            keys.extend(piece.keys);
        }
        let keys = PackedKeys::concat(keys);
        let rows = first_row as usize;
        let largest = partition_rows.iter().copied().max().unwrap_or(0);
        let region_size = (largest * 2).max(16).next_power_of_two();
        let next = (0..rows).map(|_| AtomicU32::new(NONE)).collect();
        let direct_range = word_range.filter(|(lo, hi)| {
            let span = hi - lo;
            span < DIRECT_MAX_SLOTS && span < (rows as u64).saturating_mul(DIRECT_SLOTS_PER_ROW).max(DIRECT_MIN_SLOTS)
        });
        let directory = match &keys {
            PackedKeys::Empty { .. } => Directory::Empty,
            PackedKeys::U64 { .. } if direct_range.is_some() => {
                let (min, max) = direct_range.expect("checked by the guard");
                Directory::Direct { min, heads: (min..=max).map(|_| AtomicU32::new(NONE)).collect() }
            }
            PackedKeys::U64 { .. } => Directory::U64(RegionDirectory::new(partitions, region_size)),
            PackedKeys::U128 { .. } => Directory::U128(RegionDirectory::new(partitions, region_size)),
            PackedKeys::U256 { .. } => Directory::U256(RegionDirectory::new(partitions, region_size)),
            PackedKeys::Bytes { .. } => Directory::Bytes(RegionDirectory::new(partitions, region_size)),
        };
        // A direct table rejects absent keys as cheaply as a Bloom filter would.
        let keyed = !matches!(keys, PackedKeys::Empty { .. }) && !matches!(directory, Directory::Direct { .. });
        let bloom = (keyed && rows > 0).then(|| SharedBloomBuilder::with_capacity(rows, partition_bits));
        // Group prefetching (ROF §4.3) pays only when a region does not stay in cache.
        let slot_bytes = match keys {
            PackedKeys::U128 { .. } => size_of::<Slot<u128>>(),
            PackedKeys::U256 { .. } => size_of::<Slot<Key256>>(),
            _ => size_of::<Slot<u64>>(),
        };
        let prefetch_group = if region_size * slot_bytes > PREFETCH_MIN_DIRECTORY_BYTES { prefetch_group } else { 0 };
        JoinTableBuilder { keys, partition_bits, region_size, prefetch_group, pieces: starts, directory, next, bloom, has_null_key }
    }

    pub fn partitions(&self) -> usize {
        1 << self.partition_bits
    }

    /// Calls `f(word, row)` for every row of partition `p` with a valid key: the entries
    /// of the pieces' fine partitions, or for a piece without them, its rows in order
    /// (`word` as in [`Entry`]). The loops are specialised per key width: no dispatch per
    /// row.
    #[inline(always)]
    fn for_each_entry(&self, p: usize, mut f: impl FnMut(u64, u32)) {
        for (first, rows, partitions) in &self.pieces {
            let (first, rows) = (*first, *rows);
            if partitions.is_empty() {
                match &self.keys {
                    PackedKeys::U64 { keys, valid } => {
                        for row in first..first + rows {
                            if valid[row as usize] {
                                f(keys[row as usize], row);
                            }
                        }
                    }
                    keys => {
                        for row in first..first + rows {
                            if keys.is_valid(row as usize) {
                                f(keys.hash_at(row as usize), row);
                            }
                        }
                    }
                }
                continue;
            }
            let fine_per_partition = partitions.len() >> self.partition_bits;
            for entries in &partitions[p * fine_per_partition..(p + 1) * fine_per_partition] {
                for entry in entries {
                    f(entry.word, first + entry.row);
                }
            }
        }
    }

    /// Inserts the rows of partition `p` into its region (and the Bloom filter).
    pub fn build_partition(&self, p: usize) {
        let mask = self.region_size - 1;
        let bloom = self.bloom.as_ref();
        match (&self.directory, &self.keys) {
            (Directory::Direct { min, heads }, PackedKeys::U64 { .. }) => {
                // Partitions hold disjoint keys, so tasks touch disjoint heads; the swap
                // keeps a chain consistent regardless.
                self.for_each_entry(p, |key, row| {
                    let previous = heads[(key - min) as usize].swap(row, Ordering::Relaxed);
                    self.next[row as usize].store(previous, Ordering::Relaxed);
                });
            }
            (Directory::U64(directory), PackedKeys::U64 { .. }) => {
                let Some(slots) = directory.claim(p) else { return };
                let mut inserter = Inserter::new(slots, mask, self.prefetch_group, bloom, &self.next);
                self.for_each_entry(p, |key, row| inserter.push(key, hash_u64(key), row));
                inserter.finish();
            }
            (Directory::U128(directory), PackedKeys::U128 { keys, .. }) => {
                let Some(slots) = directory.claim(p) else { return };
                let mut inserter = Inserter::new(slots, mask, self.prefetch_group, bloom, &self.next);
                self.for_each_entry(p, |hash, row| inserter.push(keys[row as usize], hash, row));
                inserter.finish();
            }
            (Directory::U256(directory), PackedKeys::U256 { keys, .. }) => {
                let Some(slots) = directory.claim(p) else { return };
                let mut inserter = Inserter::new(slots, mask, self.prefetch_group, bloom, &self.next);
                self.for_each_entry(p, |hash, row| inserter.push(keys[row as usize], hash, row));
                inserter.finish();
            }
            (Directory::Bytes(directory), PackedKeys::Bytes { .. }) => {
                let Some(slots) = directory.claim(p) else { return };
                self.for_each_entry(p, |hash, row| {
                    if let Some(bloom) = bloom {
                        bloom.insert(hash);
                    }
                    let mut idx = hash as usize & mask;
                    loop {
                        let slot = &mut slots[idx];
                        if slot.head == NONE {
                            *slot = Slot { key: hash, head: row };
                            break;
                        }
                        if slot.key == hash && self.keys.bytes(slot.head as usize) == self.keys.bytes(row as usize) {
                            self.next[row as usize].store(slot.head, Ordering::Relaxed);
                            slot.head = row;
                            break;
                        }
                        idx = (idx + 1) & mask;
                    }
                });
            }
            _ => {}
        }
    }

    /// Assembles the table once every partition is built.
    pub fn finish(self) -> JoinTable {
        let rows = self.keys.len();
        let mut next: Vec<u32> = self.next.into_iter().map(|a| a.into_inner()).collect();
        let slots = match self.directory {
            Directory::Empty => {
                // Every build row matches every probe row: one chain through all rows.
                for (row, n) in next.iter_mut().enumerate() {
                    *n = if row + 1 < rows { row as u32 + 1 } else { NONE };
                }
                Slots::Empty
            }
            Directory::Direct { min, heads } => Slots::Direct { min, heads: heads.into_iter().map(AtomicU32::into_inner).collect() },
            Directory::U64(d) => Slots::U64(d.finish()),
            Directory::U128(d) => Slots::U128(d.finish()),
            Directory::U256(d) => Slots::U256(d.finish()),
            Directory::Bytes(d) => Slots::Bytes(d.finish()),
        };
        // A Bloom filter lets probes reject absent keys in a few branch-free instructions,
        // without touching the directory; probes stop using it when it rejects too little.
        // The partition tasks filled it in parallel.
        let bloom = self.bloom.map(SharedBloomBuilder::finish);
        let unique_keys = next.iter().all(|&n| n == NONE);
        JoinTable {
            slots,
            unique_keys,
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

enum Directory {
    Empty,
    Direct {
        min: u64,
        heads: Vec<AtomicU32>,
    },
    U64(RegionDirectory<u64>),
    U128(RegionDirectory<u128>),
    U256(RegionDirectory<Key256>),
    /// For byte keys, `key` is the full hash.
    Bytes(RegionDirectory<u64>),
}

/// A directory allocated once, uninitialised, whose regions are initialised and filled by
/// concurrent partition tasks in place: no task waits for a serial fill of the whole
/// directory, and no step copies regions together afterwards.
struct RegionDirectory<K> {
    /// Capacity `regions * region_size`, length 0 until [`Self::finish`].
    storage: Vec<Slot<K>>,
    base: *mut Slot<K>,
    region_size: usize,
    /// Whether region `p` was handed out (and therefore initialised).
    claimed: Vec<AtomicBool>,
}

// SAFETY: tasks reach the storage only through `claim`, which hands out each region's
// disjoint slice at most once; `Slot<K>` is plain data.
unsafe impl<K: Send> Send for RegionDirectory<K> {}
unsafe impl<K: Send> Sync for RegionDirectory<K> {}

impl<K: Copy + Default> RegionDirectory<K> {
    fn new(regions: usize, region_size: usize) -> RegionDirectory<K> {
        let mut storage = Vec::with_capacity(regions * region_size);
        let base = storage.as_mut_ptr();
        RegionDirectory { storage, base, region_size, claimed: (0..regions).map(|_| AtomicBool::new(false)).collect() }
    }

    /// Region `p`, initialised to empty slots; `None` if it was claimed before.
    #[allow(clippy::mut_from_ref)]
    fn claim(&self, p: usize) -> Option<&mut [Slot<K>]> {
        if self.claimed.get(p)?.swap(true, Ordering::AcqRel) {
            return None;
        }
        // SAFETY: region `p` lies inside the allocation (`p < regions`), no other slice of
        // it exists (the flag above was false and is now true), and every slot is written
        // before the slice is formed.
        unsafe {
            let start = self.base.add(p * self.region_size);
            for i in 0..self.region_size {
                start.add(i).write(Slot { key: K::default(), head: NONE });
            }
            Some(std::slice::from_raw_parts_mut(start, self.region_size))
        }
    }

    /// The whole directory, regions in order (regions never claimed are left empty).
    fn finish(mut self) -> Vec<Slot<K>> {
        for p in 0..self.claimed.len() {
            let _ = self.claim(p);
        }
        let len = self.claimed.len() * self.region_size;
        // SAFETY: every region was claimed, so all `len` slots (within the capacity) are
        // initialised; `&mut self` means no region slice is alive any more.
        unsafe { self.storage.set_len(len) };
        std::mem::take(&mut self.storage)
    }
}

/// Inserts rows with fixed-width keys into one region (and the Bloom filter).
///
/// With `prefetch_group > 0` the rows go in groups (ROF §4.3): each row's first slot is
/// prefetched as it arrives, and the group is inserted once full, so the cache misses of
/// a group overlap instead of following one another.
struct Inserter<'a, K> {
    slots: &'a mut [Slot<K>],
    mask: usize,
    group: Vec<(K, u64, u32)>,
    group_size: usize,
    bloom: Option<&'a SharedBloomBuilder>,
    next: &'a [AtomicU32],
}

impl<'a, K: Copy + Eq> Inserter<'a, K> {
    fn new(slots: &'a mut [Slot<K>], mask: usize, group_size: usize, bloom: Option<&'a SharedBloomBuilder>, next: &'a [AtomicU32]) -> Self {
        Inserter { slots, mask, group: Vec::with_capacity(group_size), group_size, bloom, next }
    }

    #[inline(always)]
    fn push(&mut self, key: K, hash: u64, row: u32) {
        if self.group_size == 0 {
            self.insert(key, hash, row);
            return;
        }
        prefetch_write(&self.slots[hash as usize & self.mask] as *const Slot<K> as *const u8);
        self.group.push((key, hash, row));
        if self.group.len() == self.group_size {
            self.flush();
        }
    }

    fn flush(&mut self) {
        for i in 0..self.group.len() {
            let (key, hash, row) = self.group[i];
            self.insert(key, hash, row);
        }
        self.group.clear();
    }

    fn finish(mut self) {
        self.flush();
    }

    #[inline(always)]
    fn insert(&mut self, key: K, hash: u64, row: u32) {
        if let Some(bloom) = self.bloom {
            bloom.insert(hash);
        }
        let mut idx = hash as usize & self.mask;
        loop {
            let slot = &mut self.slots[idx];
            if slot.head == NONE {
                *slot = Slot { key, head: row };
                return;
            }
            if slot.key == key {
                self.next[row as usize].store(slot.head, Ordering::Relaxed);
                slot.head = row;
                return;
            }
            idx = (idx + 1) & self.mask;
        }
    }
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
    /// No two build rows share a key (no chains: a probe key matches at most one row),
    /// as for a join on a dimension's primary key.
    pub unique_keys: bool,
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
            (Slots::Direct { min, heads: direct }, PackedKeys::U64 { keys, .. }) => {
                for &j in candidates {
                    // Keys below `min` wrap around past the end.
                    let index = keys[j as usize].wrapping_sub(*min);
                    heads[j as usize] = usize::try_from(index).ok().and_then(|i| direct.get(i)).copied().unwrap_or(NONE);
                }
            }
            (Slots::U64(slots), PackedKeys::U64 { keys, .. }) => {
                find_fixed(slots, layout, candidates, heads, prefetch_group, |j| (keys[j], hashes[j]), |slot, key| slot.key == key)
            }
            (Slots::U128(slots), PackedKeys::U128 { keys, .. }) => {
                find_fixed(slots, layout, candidates, heads, prefetch_group, |j| (keys[j], hashes[j]), |slot, key| slot.key == key)
            }
            (Slots::U256(slots), PackedKeys::U256 { keys, .. }) => {
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

    /// For a direct table: appends to `out` the positions `j` of the valid keys of `probe`
    /// that the table holds, without a branch per key, and returns true. Other tables
    /// append nothing and return false.
    pub fn direct_members(&self, probe: &PackedKeys, out: &mut Vec<u32>) -> bool {
        let (Slots::Direct { min, heads }, PackedKeys::U64 { keys, valid }) = (&self.slots, probe) else { return false };
        let (min, slots) = (*min, heads.len());
        let start = out.len();
        out.resize(start + keys.len(), 0);
        let positions = &mut out[start..];
        let mut count = 0;
        for (j, (&key, &ok)) in keys.iter().zip(valid).enumerate() {
            // Keys below `min` wrap around past the end; those look at slot 0 and are
            // rejected by `inside`.
            let index = key.wrapping_sub(min);
            let inside = index < slots as u64;
            let head = heads[if inside { index as usize } else { 0 }];
            positions[count] = j as u32;
            count += (ok & inside & (head != NONE)) as usize;
        }
        out.truncate(start + count);
        true
    }

    /// Whether lookups need no hashes (a direct table): probes can skip hashing.
    pub fn is_direct(&self) -> bool {
        matches!(self.slots, Slots::Direct { .. })
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
            Slots::Direct { heads, .. } => heads.len() * size_of::<u32>(),
            Slots::U64(s) | Slots::Bytes(s) => s.len() * size_of::<Slot<u64>>(),
            Slots::U128(s) => s.len() * size_of::<Slot<u128>>(),
            Slots::U256(s) => s.len() * size_of::<Slot<Key256>>(),
        }
    }
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

/// A software prefetch hint for a line about to be written (no-op where unsupported).
#[inline(always)]
pub fn prefetch_write(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(address as *const i8, std::arch::x86_64::_MM_HINT_ET0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
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
        let mut piece = BuildPiece::new(bits);
        piece.append(keys);
        let builder = JoinTableBuilder::from_pieces(vec![piece], bits, 16);
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
        // Dense keys (a direct table) and sparse ones (a hash table).
        for (stride, direct) in [(1, true), (1_000_003, false)] {
            for bits in [0, 3] {
                let values: Vec<i64> = (0..1000).map(|i| (i % 100) * stride).collect();
                let (table, packer) = table(values, bits);
                assert_eq!(table.is_direct(), direct);
                let expected: Vec<u32> = (0..10).map(|k| 7 + 100 * k).collect();
                assert_eq!(matches(&table, &packer, 7 * stride), expected);
                assert!(matches(&table, &packer, 100 * stride).is_empty());
                assert!(matches(&table, &packer, -1).is_empty());
                assert!(matches(&table, &packer, 99 * stride + 1).is_empty());
            }
        }
    }

    #[test]
    fn a_direct_table_finds_keys_by_value_at_both_ends_of_its_range() {
        // Keys 1000..=3000 (with gaps), probed below, at and above the range.
        let values: Vec<i64> = (1000..=3000).filter(|k| k % 3 != 0).collect();
        let (table, packer) = table(values.clone(), 2);
        assert!(table.is_direct());
        assert!(table.bloom.is_none(), "a direct table needs no Bloom filter");
        for key in [0, 999, 1000, 1001, 1002, 2999, 3000, 3001, i64::MAX, i64::MIN] {
            let expected: Vec<u32> = values.iter().position(|&v| v == key).map(|p| p as u32).into_iter().collect();
            assert_eq!(matches(&table, &packer, key), expected, "key {key}");
        }
    }

    #[test]
    fn direct_members_are_the_keys_a_lookup_finds() {
        let values: Vec<i64> = (1000..=3000).filter(|k| k % 3 != 0).collect();
        let (direct, packer) = table(values.clone(), 0);
        assert!(direct.is_direct());
        let probes = vec![0, 999, 1000, 1001, 1002, 2999, 3000, 3001, i64::MAX, i64::MIN, 1500, 1501];
        let keys = packer.pack(&[Vector::from_native(DataType::BigInt, probes.clone())], &(0..probes.len() as u32).collect::<Vec<_>>());
        let mut out = vec![99];
        assert!(direct.direct_members(&keys, &mut out));
        let expected: Vec<u32> =
            std::iter::once(99).chain((0..probes.len() as u32).filter(|&j| values.contains(&probes[j as usize]))).collect();
        assert_eq!(out, expected);
        // A hash table has no direct members to offer.
        let (hashed, packer) = table((0..100).map(|i| i * 1_000_003).collect(), 0);
        assert!(!hashed.direct_members(&packer.pack(&[Vector::from_native(DataType::BigInt, vec![0i64])], &[0]), &mut out));
    }

    #[test]
    fn pieces_number_rows_one_after_the_other() {
        // Three workers' pieces (one empty, one with a NULL key), built in 1 and 8 partitions.
        let packer = KeyPacker::new(&[DataType::BigInt], &[true], false);
        let piece = |values: Vec<Option<i64>>| {
            let mut piece = BuildPiece::new(FINE_PARTITION_BITS);
            let rows: Vec<u32> = (0..values.len() as u32).collect();
            let validity = apiary_common::Bitmap::from_bools(values.iter().map(Option::is_some));
            let data: Vec<i64> = values.iter().map(|v| v.unwrap_or(0)).collect();
            let column = Vector::from_native(DataType::BigInt, data).with_validity(Some(validity));
            piece.append(packer.pack(&[column], &rows));
            piece
        };
        for bits in [0, 3] {
            let pieces = vec![piece(vec![Some(1), Some(2), Some(1)]), piece(vec![]), piece(vec![None, Some(2), Some(3)])];
            let table = JoinTableBuilder::from_pieces(pieces, bits, 16);
            for p in 0..table.partitions() {
                table.build_partition(p);
            }
            let table = table.finish();
            assert_eq!(table.rows, 6);
            assert!(table.has_null_key);
            assert_eq!(matches(&table, &packer, 1), vec![0, 2]);
            assert_eq!(matches(&table, &packer, 2), vec![1, 4]);
            assert_eq!(matches(&table, &packer, 3), vec![5]);
            assert!(matches(&table, &packer, 4).is_empty());
        }
    }

    #[test]
    fn prefetching_batches_find_the_same_rows() {
        // Large enough that the directory exceeds the prefetch threshold.
        // Keys too sparse for a direct table.
        let values: Vec<i64> = (0..200_000).map(|i| i * 3 * 1_000_003).collect();
        let (table, packer) = table(values, 2);
        assert!(!table.is_direct());
        assert!(table.directory_bytes() > PREFETCH_MIN_DIRECTORY_BYTES);
        let probe_values: Vec<i64> = (0..5000).map(|i| i * 7 * 1_000_003).collect();
        let rows: Vec<u32> = (0..probe_values.len() as u32).collect();
        let probe = packer.pack(&[Vector::from_native(DataType::BigInt, probe_values.clone())], &rows);
        let candidates: Vec<u32> = rows.iter().copied().filter(|j| j % 5 != 1).collect();
        for group in [0, 1, 16, 256] {
            let mut heads = vec![NONE; rows.len()];
            table.find_batch(&probe, &probe.hashes(), &candidates, &mut heads, group);
            for (j, &head) in heads.iter().enumerate() {
                let base = probe_values[j] / 1_000_003;
                let expected = if j % 5 != 1 && base % 3 == 0 { (base / 3) as u32 } else { NONE };
                assert_eq!(head, expected, "group {group}, key {j}");
            }
        }
    }
}
