//! Hash aggregation (GROUP BY, DISTINCT, global aggregates): a sink that builds the
//! groups, then a source that emits them.
//!
//! ```text
//!  worker-local:  chunk ─▶ keys packed ─▶ partition by hash ─▶ GroupTable[p] ─▶ states[p]
//!  combine:       local partition tables move to the shared list of partition p
//!  finalize:      task p merges all workers' tables of partition p (in parallel over p)
//!  source:        morsel p emits partition p's groups
//! ```
//!
//! With few expected groups there is one partition (thread-local pre-aggregation, then a
//! single merge); with many, 2^k partitions let the merge run on all workers.
//!
//! Grouping sets (`ROLLUP`, `CUBE`, `GROUPING SETS`) take one pass over the input: keys,
//! arguments and filters are evaluated once per chunk, then the chunk's rows are grouped
//! once per set into the same tables, by the set's keys (NULL for the others) and the
//! set's index as one more key.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use apiary_common::{internal_err, Bitmap, Result};
use apiary_types::{DataChunk, DataType, ScalarValue, Vector, VectorBuilder, VectorData};

use super::aggregate_functions::{AggregateSpec, AggregateState, DenseGroups, FEW_GROUPS, SKIP};
use super::{local, Control, Emit, ExecContext, ExecutionState, GlobalState, LocalState, Sink, Source, StateSlot, Stateful};
use crate::expr::{selected_rows, ExprRef};
use crate::hash::group_table::{GroupEstimate, GroupTable};
use crate::hash::keys::{KeyPacker, KeyWidth};
use crate::hash::string_ids::{StringIdCache, StringIds};

/// One aggregate: what it computes, its arguments (then its ORDER BY keys; none for
/// COUNT(*)) and optional FILTER.
pub struct AggregateInput {
    pub spec: AggregateSpec,
    pub arguments: Vec<ExprRef>,
    pub filter: Option<ExprRef>,
}

pub struct HashAggregate {
    group_exprs: Vec<ExprRef>,
    /// The types of the keys: the group expressions', then INTEGER for the set index
    /// with grouping sets.
    group_types: Vec<DataType>,
    /// Grouping sets: per set, which group expressions it groups by.
    grouping_sets: Option<Vec<Vec<bool>>>,
    aggregates: Vec<AggregateInput>,
    /// Per group expression: whether its strings are keyed by id ([`StringIds`]).
    string_ids: Vec<bool>,
    packer: KeyPacker,
    partition_bits: u32,
    /// Groups each worker's partition table is sized for (from the planner's estimate).
    expected_partition_groups: GroupEstimate,
    pub description: String,
    vector_size: usize,
    slot: StateSlot,
}

/// One execution's groups.
struct AggregateGlobal {
    /// Per partition: the tables combined from all workers.
    combined: Mutex<Vec<Vec<PartitionTable>>>,
    /// Per partition: the finished output.
    results: Mutex<Vec<Option<DataChunk>>>,
    string_ids: StringIds,
    /// Input rows, and those grouped by their keys' dictionary codes (EXPLAIN ANALYZE).
    rows_in: AtomicU64,
    rows_on_codes: AtomicU64,
    /// Input rows grouped through a map from an integer key's values (EXPLAIN ANALYZE).
    rows_on_values: AtomicU64,
}

struct PartitionTable {
    groups: GroupTable,
    keys: Vec<VectorBuilder>,
    states: Vec<Box<dyn AggregateState>>,
}

impl HashAggregate {
    pub fn new(
        group_exprs: Vec<ExprRef>,
        group_nullable: Vec<bool>,
        string_ids: Vec<bool>,
        grouping_sets: Option<Vec<Vec<bool>>>,
        aggregates: Vec<AggregateInput>,
        partition_bits: u32,
        expected_groups: GroupEstimate,
        vector_size: usize,
        description: String,
        slot: StateSlot,
    ) -> Arc<HashAggregate> {
        let mut group_types: Vec<DataType> = group_exprs.iter().map(|e| e.data_type()).collect();
        let mut group_nullable = group_nullable;
        if let Some(sets) = &grouping_sets {
            for (i, nullable) in group_nullable.iter_mut().enumerate() {
                *nullable |= sets.iter().any(|set| !set[i]);
            }
            group_types.push(DataType::Integer);
            group_nullable.push(false);
        }
        // A string keyed by id packs as a non-NULL INTEGER (NULL is id 0).
        let packed_types: Vec<DataType> =
            group_types.iter().enumerate().map(|(i, t)| if string_ids.get(i) == Some(&true) { DataType::Integer } else { *t }).collect();
        let packed_nullable: Vec<bool> = group_nullable.iter().enumerate().map(|(i, n)| *n && string_ids.get(i) != Some(&true)).collect();
        let packer = KeyPacker::new(&packed_types, &packed_nullable, true);
        let partition_bits = if packer.width == KeyWidth::Empty { 0 } else { partition_bits };
        let partitions = 1 << partition_bits;
        Arc::new(HashAggregate {
            group_exprs,
            group_types,
            grouping_sets,
            aggregates,
            string_ids,
            packer,
            partition_bits,
            expected_partition_groups: expected_groups.per_partition(partitions),
            description,
            vector_size,
            slot,
        })
    }

    fn global<'a>(&self, ctx: &'a ExecContext) -> Result<&'a AggregateGlobal> {
        ctx.global::<AggregateGlobal>(self.slot)
    }

    fn partitions(&self) -> usize {
        1 << self.partition_bits
    }

    fn new_table(&self) -> Result<PartitionTable> {
        Ok(PartitionTable {
            groups: GroupTable::with_expected_groups(self.packer.width, self.expected_partition_groups),
            keys: self.group_types.iter().map(|t| VectorBuilder::new(*t)).collect(),
            states: self.aggregates.iter().map(|a| a.spec.new_state()).collect::<Result<_>>()?,
        })
    }
}

impl Stateful for HashAggregate {
    fn new_state(&self) -> Result<GlobalState> {
        let partitions = self.partitions();
        Ok(Box::new(AggregateGlobal {
            combined: Mutex::new((0..partitions).map(|_| Vec::new()).collect()),
            results: Mutex::new(vec![None; partitions]),
            string_ids: StringIds::default(),
            rows_in: AtomicU64::new(0),
            rows_on_codes: AtomicU64::new(0),
            rows_on_values: AtomicU64::new(0),
        }))
    }
}

/// The sink half.
pub struct AggregateSink(pub Arc<HashAggregate>);

struct AggregateLocal {
    tables: Vec<PartitionTable>,
    groups: Vec<u32>,
    new_groups: Vec<u32>,
    /// Key indices ordered by partition (reused across chunks).
    order: Vec<u32>,
    string_ids: StringIdCache,
    /// Group + 1 of each string id, for a single key keyed by id (see `group_by_id`).
    id_groups: Vec<u32>,
    /// The dictionaries `code_groups` holds for, one per key (see `group_by_codes`).
    code_dictionaries: Vec<u64>,
    /// Group + 1 of each combination of the keys' dictionary codes.
    code_groups: Vec<u32>,
    /// Group + 1 of each value of a single integer key (see `group_by_value`).
    value_groups: ValueGroups,
}

/// The FILTER (WHERE ...) clauses of a chunk: the rows passing each distinct filter
/// (aggregates with equal filters share one compiled expression, see the planner, and one
/// evaluation), and which one each aggregate has.
struct ChunkFilters {
    of: Vec<Option<usize>>,
    passing: Vec<Vec<u32>>,
}

impl ChunkFilters {
    fn evaluate(aggregates: &[AggregateInput], chunk: &DataChunk, rows: &[u32]) -> Result<ChunkFilters> {
        let mut filters = ChunkFilters { of: Vec::with_capacity(aggregates.len()), passing: Vec::new() };
        let mut evaluated: Vec<&ExprRef> = Vec::new();
        for a in aggregates {
            let Some(f) = &a.filter else {
                filters.of.push(None);
                continue;
            };
            match evaluated.iter().position(|g| Arc::ptr_eq(f, g)) {
                Some(index) => filters.of.push(Some(index)),
                None => {
                    filters.passing.push(f.select(chunk, rows)?);
                    evaluated.push(f);
                    filters.of.push(Some(evaluated.len() - 1));
                }
            }
        }
        Ok(filters)
    }

    /// Per distinct filter, a mask over the chunk's rows up to the last passing one.
    fn masks(&self) -> Vec<Vec<bool>> {
        self.passing
            .iter()
            .map(|passing| {
                let mut mask = vec![false; passing.iter().max().map_or(0, |&r| r as usize + 1)];
                passing.iter().for_each(|&r| mask[r as usize] = true);
                mask
            })
            .collect()
    }
}

impl AggregateSink {
    /// Groups the chunk's `rows` by `keys` into the worker's tables and updates their
    /// aggregate states with `arguments` (`filters`: the rows passing each FILTER).
    /// `packed_columns` are the keys as packed: `keys`, with strings keyed by id replaced
    /// by their ids.
    #[allow(clippy::too_many_arguments)]
    fn group_rows(
        &self,
        keys: &[Vector],
        packed_columns: &[Vector],
        rows: &[u32],
        arguments: &[Vec<Vector>],
        filters: &ChunkFilters,
        state: &mut AggregateLocal,
        ctx: &ExecContext,
    ) -> Result<()> {
        let agg = &self.0;
        if agg.packer.width == KeyWidth::Empty {
            // Global aggregate: one group.
            let table = &mut state.tables[0];
            if table.groups.group_count() == 0 {
                table.groups.lookup(&agg.packer.pack(&[], &[0]), &[0], &[0], &mut Vec::new(), &mut Vec::new());
                table.states.iter_mut().for_each(|s| s.resize(1));
            }
            for (i, s) in table.states.iter_mut().enumerate() {
                match filters.of[i] {
                    None => s.update_single(&arguments[i], rows)?,
                    Some(f) => s.update_single(&arguments[i], &filters.passing[f])?,
                }
            }
            return Ok(());
        }
        let masks = filters.masks();
        let partitions = agg.partitions();
        let direct = agg.grouping_sets.is_none() && self.group_directly(keys, packed_columns, rows, state, ctx)?;
        let mut order = std::mem::take(&mut state.order);
        // With partitions, the direct path's groups carry their partition (see
        // `PARTITION_SHIFT`): the rows are ordered by it like hashed rows.
        let slot_ids = if direct && partitions > 1 { std::mem::take(&mut state.groups) } else { Vec::new() };
        let (packed, hashes, bounds) = match direct {
            true if partitions == 1 => (None, Vec::new(), vec![0, rows.len()]),
            true => {
                let shift = 64 - agg.partition_bits;
                let partition_keys: Vec<u64> = slot_ids.iter().map(|&id| ((id >> PARTITION_SHIFT) as u64) << shift).collect();
                (None, Vec::new(), partition_order(&partition_keys, agg.partition_bits, &mut order))
            }
            false => {
                let packed = agg.packer.pack(packed_columns, rows);
                let hashes = packed.hashes();
                let bounds = if partitions == 1 {
                    order.clear();
                    order.extend(0..rows.len() as u32);
                    vec![0, rows.len()]
                } else {
                    partition_order(&hashes, agg.partition_bits, &mut order)
                };
                (Some(packed), hashes, bounds)
            }
        };
        for p in 0..partitions {
            let table = &mut state.tables[p];
            let physical: Cow<[u32]> = match &packed {
                None if partitions == 1 => Cow::Borrowed(rows),
                None => {
                    let indices = &order[bounds[p]..bounds[p + 1]];
                    if indices.is_empty() {
                        continue;
                    }
                    state.groups.clear();
                    state.groups.extend(indices.iter().map(|&j| slot_ids[j as usize] & GROUP_MASK));
                    Cow::Owned(indices.iter().map(|&j| rows[j as usize]).collect())
                }
                Some(packed) => {
                    let indices = &order[bounds[p]..bounds[p + 1]];
                    if indices.is_empty() {
                        continue;
                    }
                    state.groups.clear();
                    state.new_groups.clear();
                    table.groups.lookup_prefetched(
                        packed,
                        &hashes,
                        indices,
                        &mut state.groups,
                        &mut state.new_groups,
                        ctx.config.prefetch_group,
                    );
                    if !state.new_groups.is_empty() {
                        let new_rows: Vec<u32> = state.new_groups.iter().map(|&j| rows[j as usize]).collect();
                        append_groups(table, keys, &new_rows);
                    }
                    Cow::Owned(indices.iter().map(|&j| rows[j as usize]).collect())
                }
            };
            // Few groups and most rows selected: each row's group at its position in the
            // chunk, for the states that sum whole vectors (`update_dense`).
            let dense = match keys.first() {
                Some(key) if table.groups.group_count() <= FEW_GROUPS && physical.len() * 4 >= key.len() * 3 => {
                    dense_groups(&physical, &state.groups, key.len()).map(|dense| DenseGroups::new(dense, table.groups.group_count()))
                }
                _ => None,
            };
            for (i, s) in table.states.iter_mut().enumerate() {
                match filters.of[i] {
                    None if dense.as_ref().map_or(Ok(false), |dense| s.update_dense(&arguments[i], dense))? => {}
                    None => s.update(&arguments[i], &physical, &state.groups)?,
                    Some(f) => {
                        let mask = &masks[f];
                        let (mut kept_rows, mut kept_groups) = (Vec::new(), Vec::new());
                        for (&r, &g) in physical.iter().zip(&state.groups) {
                            if mask.get(r as usize) == Some(&true) {
                                kept_rows.push(r);
                                kept_groups.push(g);
                            }
                        }
                        s.update(&arguments[i], &kept_rows, &kept_groups)?;
                    }
                }
            }
        }
        state.order = order;
        Ok(())
    }
}

impl AggregateSink {
    /// Groups `rows` (into `state.groups`) through one of the worker's direct maps when
    /// the keys allow one, instead of packing, hashing and probing: keys that are all
    /// dictionary codes (a map from combinations of codes), else a single string keyed
    /// by id (from ids), else a single key stored as integers of a small range (from
    /// values; the only one that also works with partitions). `false` when none applies.
    fn group_directly(
        &self,
        keys: &[Vector],
        packed_columns: &[Vector],
        rows: &[u32],
        state: &mut AggregateLocal,
        ctx: &ExecContext,
    ) -> Result<bool> {
        let agg = &self.0;
        if agg.partitions() == 1 {
            if group_by_codes(agg, keys, packed_columns, rows, state, ctx)? {
                return Ok(true);
            }
            if agg.string_ids == [true] {
                return group_by_id(agg, &mut state.tables, keys, packed_columns, rows, &mut state.id_groups, &mut state.groups, ctx);
            }
        }
        Ok(agg.string_ids != [true]
            && keys.len() == 1
            && group_by_value(agg, &mut state.tables, keys, packed_columns, rows, &mut state.value_groups, &mut state.groups, ctx))
    }
}

/// Per row of a chunk of `len` rows, the group of `rows[k]` is `groups[k]`, [`SKIP`] for
/// the rows not in `rows`; `None` unless `rows` ascend strictly (each row once).
fn dense_groups(rows: &[u32], groups: &[u32], len: usize) -> Option<Vec<u32>> {
    let ascending = rows.windows(2).fold(true, |ascending, pair| ascending & (pair[0] < pair[1]));
    if !ascending || rows.last().is_some_and(|&r| r as usize >= len) {
        return None;
    }
    if rows.len() == len {
        return Some(groups.to_vec());
    }
    let mut dense = vec![SKIP; len];
    for (&r, &g) in rows.iter().zip(groups) {
        // SAFETY: the rows ascend and the last is below `len` (checked above).
        unsafe { *dense.get_unchecked_mut(r as usize) = g };
    }
    Some(dense)
}

/// Adds the groups of `new_rows` (their keys) to a worker's table.
fn append_groups(table: &mut PartitionTable, keys: &[Vector], new_rows: &[u32]) {
    for (builder, key) in table.keys.iter_mut().zip(keys) {
        builder.append(key, Some(new_rows));
    }
    let count = table.groups.group_count();
    table.states.iter_mut().for_each(|s| s.resize(count));
}

/// Ids up to which a worker maps ids to groups directly (4 MB a worker); an execution
/// with more distinct strings (an estimate that was far off) packs its keys.
const ID_MAP_LIMIT: usize = 1 << 20;

/// The groups of `rows` (into `groups`) for a single string key keyed by id: the ids are
/// small and dense (one per distinct string of the execution, 0 for NULL), so a worker's
/// map from id to group replaces packing, hashing and probing (see [`groups_by_slot`]).
/// `false`, with nothing changed, for an id beyond [`ID_MAP_LIMIT`].
#[allow(clippy::too_many_arguments)]
fn group_by_id(
    agg: &HashAggregate,
    tables: &mut [PartitionTable],
    keys: &[Vector],
    packed_columns: &[Vector],
    rows: &[u32],
    id_groups: &mut Vec<u32>,
    groups: &mut Vec<u32>,
    ctx: &ExecContext,
) -> Result<bool> {
    let ids = packed_columns[0].values::<i32>();
    let slots: Vec<u32> = rows.iter().map(|&row| ids[row as usize] as u32).collect();
    if slots.iter().any(|&id| id as usize >= ID_MAP_LIMIT) {
        return Ok(false);
    }
    groups_by_slot(agg, tables, keys, packed_columns, rows, &slots, id_groups, groups, ctx);
    Ok(true)
}

/// Values of an integer key a worker maps to groups directly (256 KB a worker): a key
/// whose values span more (in the chunks of the worker) packs its keys.
const VALUE_MAP_LIMIT: i64 = 1 << 16;

/// How far below the smallest value of a worker's first chunk its map starts, so that
/// smaller values later (unsorted input) still fit.
const VALUE_MAP_MARGIN: i64 = 1024;

/// A worker's map from the values of a single integer key to groups: slot 0 for NULL,
/// slot `value - base + 1` for a value.
#[derive(Default)]
struct ValueGroups {
    base: Option<i64>,
    /// A chunk's values did not fit: the worker packs its keys from then on.
    off: bool,
    slot_groups: Vec<u32>,
}

/// The groups of `rows` (into `groups`) for a single key stored as integers (integers,
/// dates, times, timestamps, decimals of one scale): while the worker's values span
/// less than [`VALUE_MAP_LIMIT`], a value indexes the worker's map to groups directly,
/// which replaces packing, hashing and probing (see [`groups_by_slot`]) — a perfect
/// hash found at run time, so that it needs no statistics (an external table has
/// none). `false`, with nothing changed, for other keys or once a chunk's values have
/// not fit (the map's groups are in the group table, which the general path goes on
/// with).
#[allow(clippy::too_many_arguments)]
fn group_by_value(
    agg: &HashAggregate,
    tables: &mut [PartitionTable],
    keys: &[Vector],
    packed_columns: &[Vector],
    rows: &[u32],
    map: &mut ValueGroups,
    groups: &mut Vec<u32>,
    ctx: &ExecContext,
) -> bool {
    if map.off {
        return false;
    }
    let key = &packed_columns[0];
    let validity = key.validity.as_ref();
    let slots = match &key.data {
        VectorData::I16(values) => value_slots(values.as_slice(), validity, rows, map),
        VectorData::I32(values) => value_slots(values.as_slice(), validity, rows, map),
        VectorData::I64(values) => value_slots(values.as_slice(), validity, rows, map),
        _ => None,
    };
    let Some(slots) = slots else {
        map.off = true;
        return false;
    };
    groups_by_slot(agg, tables, keys, packed_columns, rows, &slots, &mut map.slot_groups, groups, ctx);
    if let Ok(global) = agg.global(ctx) {
        global.rows_on_values.fetch_add(rows.len() as u64, Ordering::Relaxed);
    }
    true
}

/// Per row of `rows`, its slot in `map` (see [`ValueGroups`]), fixing the map's base at
/// the first chunk; `None` when some value is outside the map's range.
fn value_slots<T: Copy + Into<i64>>(values: &[T], validity: Option<&Bitmap>, rows: &[u32], map: &mut ValueGroups) -> Option<Vec<u32>> {
    let valid = |row: u32| validity.is_none_or(|bits| bits.get(row as usize));
    let (mut smallest, mut largest) = (i64::MAX, i64::MIN);
    match (super::run_of(rows), validity) {
        (Some(run), None) => {
            // A loop that vectorises.
            for &v in &values[run] {
                let v: i64 = v.into();
                smallest = smallest.min(v);
                largest = largest.max(v);
            }
        }
        _ => {
            for &row in rows.iter().filter(|&&row| valid(row)) {
                let v: i64 = values[row as usize].into();
                smallest = smallest.min(v);
                largest = largest.max(v);
            }
        }
    }
    if smallest > largest {
        // All NULL.
        return Some(vec![0; rows.len()]);
    }
    let base = *map.base.get_or_insert(smallest.saturating_sub(VALUE_MAP_MARGIN));
    if smallest < base || (largest as i128 - base as i128) >= VALUE_MAP_LIMIT as i128 {
        return None;
    }
    // Every value is in [base, base + VALUE_MAP_LIMIT): its slot fits a u32.
    let slot = |v: T| (v.into() - base + 1) as u32;
    Some(match validity {
        None => match super::run_of(rows) {
            Some(run) => values[run].iter().map(|&v| slot(v)).collect(),
            None => rows.iter().map(|&row| slot(values[row as usize])).collect(),
        },
        Some(_) => rows.iter().map(|&row| if valid(row) { slot(values[row as usize]) } else { 0 }).collect(),
    })
}

/// Most combinations of dictionary codes a worker maps to groups directly (16 KB).
const CODE_MAP_LIMIT: usize = 4096;

/// The groups of `rows` (into `state.groups`) when every key is a string vector carrying
/// dictionary codes (decoded by the scan from a dictionary of at most 256 values, see
/// `StrColumn::codes`): a row's combination of codes, in mixed radix, indexes the
/// worker's map to groups, which replaces packing, hashing and probing. The map holds
/// for the current dictionaries and starts over when a chunk comes from others (the
/// next block); each combination seen goes through the group table once per
/// dictionary. Beside such keys, an integer key without NULLs whose values are all in
/// `0..=255` serves as its own codes (the query mask of up to eight queries sharing an
/// aggregation, `shared_operators.rs`, keyed by TPC-H Q1's two flags and the mask).
/// `false`, with nothing changed, when some key has no codes or the combinations are too
/// many.
fn group_by_codes(
    agg: &HashAggregate,
    keys: &[Vector],
    packed_columns: &[Vector],
    rows: &[u32],
    state: &mut AggregateLocal,
    ctx: &ExecContext,
) -> Result<bool> {
    if keys.is_empty() {
        return Ok(false);
    }
    // Per key: which dictionary maps its codes to values, and how many codes it has.
    let mut dictionaries = Vec::with_capacity(keys.len());
    let mut combinations = 1usize;
    for key in keys {
        // (A NULL's view is some value's: its code would group it with that value.)
        if key.validity.is_some() {
            return Ok(false);
        }
        let (dictionary, size) = match &key.data {
            VectorData::Str(strings) => match &strings.codes {
                Some(key_codes) => (key_codes.dictionary, key_codes.size()),
                None => return Ok(false),
            },
            data if small_integers(data, rows) => (VALUES_AS_CODES, 256),
            _ => return Ok(false),
        };
        dictionaries.push(dictionary);
        combinations = combinations.saturating_mul(size);
    }
    // Integer keys alone group by value (`group_by_value`) or by packed keys.
    if dictionaries.iter().all(|&d| d == VALUES_AS_CODES) || combinations > CODE_MAP_LIMIT {
        return Ok(false);
    }
    if state.code_dictionaries != dictionaries {
        state.code_dictionaries = dictionaries;
        state.code_groups.clear();
        state.code_groups.resize(combinations, 0);
    }
    // The integer keys' codes, owned.
    let integer_codes: Vec<Option<Vec<u8>>> =
        keys.iter().map(|key| (!matches!(key.data, VectorData::Str(_))).then(|| integer_codes(&key.data))).collect();
    let columns: Vec<(&[u8], u32)> = keys
        .iter()
        .zip(&integer_codes)
        .map(|(key, owned)| match (&key.data, owned) {
            (VectorData::Str(strings), _) => strings.codes.as_ref().map_or((&[][..], 0), |c| (c.codes.as_slice(), c.size() as u32)),
            (_, owned) => (owned.as_deref().unwrap_or_default(), 256),
        })
        .collect();
    let Some(slots) = code_slots(&columns, rows) else { return Ok(false) };
    groups_by_slot(agg, &mut state.tables, keys, packed_columns, rows, &slots, &mut state.code_groups, &mut state.groups, ctx);
    agg.global(ctx)?.rows_on_codes.fetch_add(rows.len() as u64, Ordering::Relaxed);
    Ok(true)
}

/// The dictionary id of an integer key whose values are its codes (real dictionaries
/// count up from 1).
const VALUES_AS_CODES: u64 = u64::MAX;

/// Whether `data` holds integers and every value at `rows` is in `0..=255`.
fn small_integers(data: &VectorData, rows: &[u32]) -> bool {
    fn small<T: Copy + Into<i64>>(values: &[T], rows: &[u32]) -> bool {
        rows.iter().all(|&row| values.get(row as usize).is_some_and(|&v| (0..=255).contains(&v.into())))
    }
    match data {
        VectorData::I16(values) => small(values, rows),
        VectorData::I32(values) => small(values, rows),
        VectorData::I64(values) => small(values, rows),
        _ => false,
    }
}

/// An integer vector's values as 1-byte codes, truncated (the rows [`small_integers`]
/// checked are exact; the others are never read).
fn integer_codes(data: &VectorData) -> Vec<u8> {
    fn codes<T: Copy + Into<i64>>(values: &[T]) -> Vec<u8> {
        values.iter().map(|&v| v.into() as u8).collect()
    }
    match data {
        VectorData::I16(values) => codes(values),
        VectorData::I32(values) => codes(values),
        VectorData::I64(values) => codes(values),
        _ => Vec::new(),
    }
}

/// Per row of `rows`, its combination of the keys' dictionary codes, `(c0 * size1 + c1) *
/// size2 + c2 ...` (`columns`: each key's codes and dictionary size); `None` when some
/// row is beyond some key's codes.
fn code_slots(columns: &[(&[u8], u32)], rows: &[u32]) -> Option<Vec<u32>> {
    // Every row indexes every key's codes (checked once here, so that the loops below
    // carry no bounds checks).
    let largest = rows.iter().fold(0u32, |largest, &row| largest.max(row)) as usize;
    if columns.iter().any(|(codes, _)| codes.len() <= largest) {
        return None;
    }
    let run = super::run_of(rows);
    #[cfg(target_arch = "x86_64")]
    {
        if apiary_common::cpu::avx512() {
            // SAFETY: the CPU has the features the function is compiled for; every row is
            // at most `largest`, below every key's number of codes.
            return Some(unsafe { code_slots_avx512(columns, rows, largest, run) });
        }
        if apiary_common::cpu::avx2() {
            // SAFETY: as above.
            return Some(unsafe { code_slots_avx2(columns, rows, run) });
        }
    }
    // SAFETY: every row is below every key's number of codes (checked above).
    Some(unsafe { code_slots_portable(columns, rows, run) })
}

/// With AVX-512 the codes of a selection are gathered 16 rows at a time (the compiler
/// does not vectorise byte gathers).
///
/// # Safety
/// The CPU has AVX-512F/BW/DQ/VL; every row is at most `largest`, below every key's
/// number of codes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn code_slots_avx512(columns: &[(&[u8], u32)], rows: &[u32], largest: usize, run: Option<Range<usize>>) -> Vec<u32> {
    use std::arch::x86_64::*;
    if run.is_some() || columns.is_empty() || largest >= i32::MAX as usize {
        // SAFETY: the caller's guarantee.
        return unsafe { code_slots_portable(columns, rows, run) };
    }
    // A dword gather reads 4 bytes from each row's code: the rows whose 4 bytes lie
    // within every key's codes (a prefix: rows ascend), and rows that fit an i32 index.
    let safe_end = columns.iter().map(|(codes, _)| codes.len().saturating_sub(3)).min().unwrap_or(0);
    let gathered = rows.partition_point(|&row| (row as usize) < safe_end) / 16 * 16;
    let mut slots = vec![0u32; rows.len()];
    let low_byte = _mm512_set1_epi32(0xFF);
    for (i, (codes, radix)) in columns.iter().enumerate() {
        let radix = _mm512_set1_epi32(*radix as i32);
        for k in (0..gathered).step_by(16) {
            // SAFETY: k + 16 <= gathered <= rows.len() = slots.len(); every gathered row
            // is below `safe_end`, so its 4 bytes are within the codes.
            unsafe {
                let index = _mm512_loadu_si512(rows.as_ptr().add(k) as *const __m512i);
                let code = _mm512_and_si512(_mm512_i32gather_epi32::<1>(index, codes.as_ptr() as *const i32), low_byte);
                let slot = if i == 0 {
                    code
                } else {
                    let previous = _mm512_loadu_si512(slots.as_ptr().add(k) as *const __m512i);
                    _mm512_add_epi32(_mm512_mullo_epi32(previous, radix), code)
                };
                _mm512_storeu_si512(slots.as_mut_ptr().add(k) as *mut __m512i, slot);
            }
        }
    }
    // The rest one by one.
    for (k, &row) in rows.iter().enumerate().skip(gathered) {
        slots[k] = columns.iter().fold(0u32, |slot, (codes, radix)| slot * radix + codes[row as usize] as u32);
    }
    slots
}

/// # Safety
/// The CPU has AVX2; as [`code_slots_portable`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn code_slots_avx2(columns: &[(&[u8], u32)], rows: &[u32], run: Option<Range<usize>>) -> Vec<u32> {
    // SAFETY: the caller's guarantee.
    unsafe { code_slots_portable(columns, rows, run) }
}

/// # Safety
/// Every row is below every key's number of codes; `run` is `run_of(rows)`.
#[inline(always)]
unsafe fn code_slots_portable(columns: &[(&[u8], u32)], rows: &[u32], run: Option<Range<usize>>) -> Vec<u32> {
    let Some(((first_codes, _), rest)) = columns.split_first() else { return vec![0; rows.len()] };
    if let Some(range) = run {
        // A run reads the codes in place: loops that vectorise.
        let mut slots: Vec<u32> = first_codes[range.clone()].iter().map(|&c| c as u32).collect();
        for (codes, radix) in rest {
            let radix = *radix;
            for (slot, &code) in slots.iter_mut().zip(&codes[range.clone()]) {
                *slot = *slot * radix + code as u32;
            }
        }
        return slots;
    }
    // SAFETY (all unchecked reads below): the caller's guarantee.
    let mut slots: Vec<u32> = rows.iter().map(|&row| unsafe { *first_codes.get_unchecked(row as usize) } as u32).collect();
    for (codes, radix) in rest {
        let radix = *radix;
        for (slot, &row) in slots.iter_mut().zip(rows) {
            *slot = *slot * radix + unsafe { *codes.get_unchecked(row as usize) } as u32;
        }
    }
    slots
}

/// `groups[k] = slot_groups[slots[k]] - 1` when every slot is below the map's length and
/// has a group (then true; else false, with `groups` unspecified).
fn seen_slot_groups(slots: &[u32], slot_groups: &[u32], groups: &mut Vec<u32>) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if apiary_common::cpu::avx512() {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { seen_slot_groups_avx512(slots, slot_groups, groups) };
        }
    }
    seen_slot_groups_portable(slots, slot_groups, groups)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn seen_slot_groups_avx512(slots: &[u32], slot_groups: &[u32], groups: &mut Vec<u32>) -> bool {
    seen_slot_groups_portable(slots, slot_groups, groups)
}

#[inline(always)]
fn seen_slot_groups_portable(slots: &[u32], slot_groups: &[u32], groups: &mut Vec<u32>) -> bool {
    groups.clear();
    let largest = slots.iter().fold(0u32, |largest, &slot| largest.max(slot));
    if largest as usize >= slot_groups.len() {
        return false;
    }
    let mut all_seen = true;
    groups.extend(slots.iter().map(|&slot| {
        // SAFETY: every slot is at most `largest`, below the map's length (checked above).
        let group = unsafe { *slot_groups.get_unchecked(slot as usize) };
        all_seen &= group.wrapping_sub(1) < u32::MAX - 1;
        group.wrapping_sub(1)
    }));
    all_seen
}

/// With partitions, a slot's group is `partition << PARTITION_SHIFT | group in the
/// partition's table` (see [`groups_by_slot`]); partition bits are at most 6, and a
/// partitioned map (of key values, at most [`VALUE_MAP_LIMIT`] + 1 slots) has fewer
/// groups than `GROUP_MASK`.
const PARTITION_SHIFT: u32 = 26;
const GROUP_MASK: u32 = (1 << PARTITION_SHIFT) - 1;

/// The groups of `rows` (into `groups`) given a small number per row, `slots`, that
/// determines its group: `slot_groups[slot]` holds the slot's group + 1 (0: not seen;
/// grown to fit the slots). Only the first row of a slot the map has not seen goes
/// through the group tables, so they hold what the general path would have built: with
/// partitions (`tables` has one per partition) the key's hash picks the table as it
/// does there, and the slot's group says which (see [`PARTITION_SHIFT`]).
#[allow(clippy::too_many_arguments)]
fn groups_by_slot(
    agg: &HashAggregate,
    tables: &mut [PartitionTable],
    keys: &[Vector],
    packed_columns: &[Vector],
    rows: &[u32],
    slots: &[u32],
    slot_groups: &mut Vec<u32>,
    groups: &mut Vec<u32>,
    ctx: &ExecContext,
) {
    // Usually every slot has its group already: one pass without branches.
    if seen_slot_groups(slots, slot_groups, groups) {
        return;
    }
    groups.clear();
    let mut unseen: Vec<u32> = Vec::new();
    for (position, &slot) in slots.iter().enumerate() {
        let slot = slot as usize;
        if slot >= slot_groups.len() {
            slot_groups.resize((slot + 1).next_power_of_two(), 0);
        }
        match slot_groups[slot] {
            0 => {
                // Resolved below; later rows of the same slot find it pending.
                slot_groups[slot] = u32::MAX;
                unseen.push(position as u32);
                groups.push(u32::MAX);
            }
            u32::MAX => groups.push(u32::MAX),
            group => groups.push(group - 1),
        }
    }
    if unseen.is_empty() {
        return;
    }
    let unseen_rows: Vec<u32> = unseen.iter().map(|&position| rows[position as usize]).collect();
    let packed = agg.packer.pack(packed_columns, &unseen_rows);
    let hashes = packed.hashes();
    let mut order = Vec::new();
    let bounds = match tables.len() {
        1 => {
            order.extend(0..unseen_rows.len() as u32);
            vec![0, unseen_rows.len()]
        }
        _ => partition_order(&hashes, agg.partition_bits, &mut order),
    };
    let partitioned = tables.len() > 1;
    let (mut found, mut new_groups) = (Vec::new(), Vec::new());
    for (p, table) in tables.iter_mut().enumerate() {
        let indices = &order[bounds[p]..bounds[p + 1]];
        if indices.is_empty() {
            continue;
        }
        found.clear();
        new_groups.clear();
        table.groups.lookup_prefetched(&packed, &hashes, indices, &mut found, &mut new_groups, ctx.config.prefetch_group);
        if !new_groups.is_empty() {
            let new_rows: Vec<u32> = new_groups.iter().map(|&k| unseen_rows[k as usize]).collect();
            append_groups(table, keys, &new_rows);
        }
        let partition = if partitioned { (p as u32) << PARTITION_SHIFT } else { 0 };
        for (&k, &group) in indices.iter().zip(&found) {
            debug_assert!(partition == 0 || group <= GROUP_MASK);
            slot_groups[slots[unseen[k as usize] as usize] as usize] = (partition | group) + 1;
        }
    }
    for (group, &slot) in groups.iter_mut().zip(slots) {
        if *group == u32::MAX {
            *group = slot_groups[slot as usize] - 1;
        }
    }
}

impl Sink for AggregateSink {
    fn name(&self) -> String {
        format!("HashAggregate {}", self.0.description)
    }

    fn local_state(&self) -> LocalState {
        let tables = (0..self.0.partitions()).map(|_| self.0.new_table()).collect::<Result<Vec<_>>>();
        Box::new(AggregateLocal {
            tables: tables.unwrap_or_default(),
            groups: Vec::new(),
            new_groups: Vec::new(),
            order: Vec::new(),
            string_ids: StringIdCache::default(),
            id_groups: Vec::new(),
            code_dictionaries: Vec::new(),
            code_groups: Vec::new(),
            value_groups: ValueGroups::default(),
        })
    }

    fn consume(&self, chunk: DataChunk, _order: u64, state: &mut LocalState, ctx: &ExecContext) -> Result<Control> {
        let agg = &self.0;
        let state = local::<AggregateLocal>(state);
        if state.tables.is_empty() {
            return Err(internal_err!("aggregate local state could not be created"));
        }
        let rows = selected_rows(&chunk);
        if rows.is_empty() {
            return Ok(Control::Continue);
        }
        agg.global(ctx)?.rows_in.fetch_add(rows.len() as u64, Ordering::Relaxed);
        let keys: Vec<Vector> = agg.group_exprs.iter().map(|e| e.evaluate(&chunk)).collect::<Result<_>>()?;
        let arguments: Vec<Vec<Vector>> = agg
            .aggregates
            .iter()
            .map(|a| {
                let narrow = a.spec.accepts_narrow_input();
                a.arguments.iter().map(|e| if narrow { e.evaluate_narrow(&chunk) } else { e.evaluate(&chunk) }).collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        let filters = ChunkFilters::evaluate(&agg.aggregates, &chunk, &rows)?;
        // Ids once per chunk, whatever the number of grouping sets.
        let packed_keys: Cow<[Vector]> = if agg.string_ids.contains(&true) {
            let shared = &agg.global(ctx)?.string_ids;
            keys.iter()
                .zip(&agg.string_ids)
                .map(|(key, &by_id)| if by_id { state.string_ids.ids(shared, key, &rows) } else { key.clone() })
                .collect()
        } else {
            Cow::Borrowed(&keys)
        };
        match &agg.grouping_sets {
            None => self.group_rows(&keys, &packed_keys, &rows, &arguments, &filters, state, ctx)?,
            Some(sets) => {
                let len = chunk.physical_len();
                for (index, set) in sets.iter().enumerate() {
                    let set_index = Vector::from_scalar(&ScalarValue::Int32(index as i32), DataType::Integer, len);
                    let mut set_keys = Vec::with_capacity(keys.len() + 1);
                    let mut packed_set_keys = Vec::with_capacity(keys.len() + 1);
                    for (i, grouped) in set.iter().enumerate() {
                        if *grouped {
                            set_keys.push(keys[i].clone());
                            packed_set_keys.push(packed_keys[i].clone());
                        } else {
                            set_keys.push(Vector::nulls(agg.group_types[i], len));
                            // NULL's id is 0.
                            packed_set_keys.push(if agg.string_ids[i] {
                                Vector::from_native(DataType::Integer, vec![0i32; len])
                            } else {
                                Vector::nulls(agg.group_types[i], len)
                            });
                        }
                    }
                    set_keys.push(set_index.clone());
                    packed_set_keys.push(set_index);
                    self.group_rows(&set_keys, &packed_set_keys, &rows, &arguments, &filters, state, ctx)?;
                }
            }
        }
        Ok(Control::Continue)
    }

    fn local_memory(&self, state: &LocalState) -> usize {
        // Group tables, plus keys and aggregate states of about 16 bytes per group each.
        let per_group = 16 * (self.0.group_exprs.len() + self.0.aggregates.len());
        state.downcast_ref::<AggregateLocal>().map_or(0, |s| {
            s.tables
                .iter()
                .map(|t| {
                    // Plus what states hold beyond that (string_agg's and quantiles'
                    // lists, sketches).
                    let held: usize = t.states.iter().map(|state| state.memory_bytes()).sum();
                    t.groups.memory_bytes() + t.keys.first().map_or(0, |k| k.len()) * per_group + held
                })
                .sum::<usize>()
                + s.string_ids.memory_bytes()
        })
    }

    fn combine(&self, state: LocalState, ctx: &ExecContext) -> Result<()> {
        let state = state.downcast::<AggregateLocal>().expect("aggregate local state");
        let mut combined = self.0.global(ctx)?.combined.lock().unwrap_or_else(|e| e.into_inner());
        for (p, table) in state.tables.into_iter().enumerate() {
            if table.groups.group_count() > 0 {
                combined[p].push(table);
            }
        }
        Ok(())
    }

    fn prepare_finalize(&self, _ctx: &ExecContext) -> Result<usize> {
        Ok(self.0.partitions())
    }

    fn finalize_task(&self, p: usize, ctx: &ExecContext) -> Result<()> {
        let agg = &self.0;
        let global = agg.global(ctx)?;
        let tables = std::mem::take(&mut global.combined.lock().unwrap_or_else(|e| e.into_inner())[p]);
        let mut tables = tables.into_iter();
        let mut target = match tables.next() {
            Some(t) => t,
            None => {
                if agg.packer.width != KeyWidth::Empty {
                    return Ok(());
                }
                // A global aggregate over no rows still produces one row.
                let mut t = agg.new_table()?;
                t.groups.lookup(&agg.packer.pack(&[], &[0]), &[0], &[0], &mut Vec::new(), &mut Vec::new());
                t.states.iter_mut().for_each(|s| s.resize(1));
                t
            }
        };
        for mut other in tables {
            let (mapping, new_groups) = target.groups.merge(&other.groups);
            if !new_groups.is_empty() {
                for (builder, other_keys) in target.keys.iter_mut().zip(std::mem::take(&mut other.keys)) {
                    builder.append(&other_keys.finish(), Some(&new_groups));
                }
            }
            let count = target.groups.group_count();
            for (state, other_state) in target.states.iter_mut().zip(other.states.iter_mut()) {
                state.resize(count);
                state.merge(other_state.as_mut(), &mapping)?;
            }
        }
        let count = target.groups.group_count();
        let mut columns: Vec<Vector> = target.keys.into_iter().map(|b| b.finish()).collect();
        for state in target.states.iter_mut() {
            columns.push(state.finalize()?);
        }
        let chunk = if columns.is_empty() { DataChunk::empty_columns(count) } else { DataChunk::new(columns, count) };
        global.results.lock().unwrap_or_else(|e| e.into_inner())[p] = Some(chunk);
        Ok(())
    }

    fn finish(&self, ctx: &ExecContext) -> Result<()> {
        // Over no rows, each empty grouping set (a grand total) still has its row, as a
        // global aggregate does.
        let agg = &self.0;
        let Some(sets) = &agg.grouping_sets else { return Ok(()) };
        let empty_sets: Vec<i32> = sets.iter().enumerate().filter(|(_, set)| !set.contains(&true)).map(|(i, _)| i as i32).collect();
        let mut results = agg.global(ctx)?.results.lock().unwrap_or_else(|e| e.into_inner());
        if empty_sets.is_empty() || results.iter().flatten().any(|chunk| chunk.physical_len() > 0) {
            return Ok(());
        }
        let count = empty_sets.len();
        let mut columns: Vec<Vector> = agg.group_types[..agg.group_exprs.len()].iter().map(|t| Vector::nulls(*t, count)).collect();
        columns.push(Vector::from_native(DataType::Integer, empty_sets));
        for aggregate in &agg.aggregates {
            let mut state = aggregate.spec.new_state()?;
            state.resize(count);
            columns.push(state.finalize()?);
        }
        results[0] = Some(DataChunk::new(columns, count));
        Ok(())
    }
}

/// Orders key indices by partition (the top `bits` bits of their hash), keeping their
/// order within each partition (equal keys stay adjacent, as run detection needs);
/// returns where each partition starts in `order` (plus the end).
///
/// A counting sort. Clustered input puts long runs into one partition, and a single
/// counter per partition would then be incremented by a chain of dependent
/// read-modify-writes; instead the input is cut into [`LANES`] consecutive quarters with
/// counters of their own, processed interleaved, so four independent chains overlap.
/// Quarter `q`'s slice of a partition precedes quarter `q + 1`'s, preserving order.
fn partition_order(hashes: &[u64], bits: u32, order: &mut Vec<u32>) -> Vec<usize> {
    const LANES: usize = 4;
    let partitions = 1usize << bits;
    let shift = 64 - bits;
    let n = hashes.len();
    let lane_len = n.div_ceil(LANES);
    // counts[p * LANES + q]: keys of lane q in partition p.
    let mut counts = vec![0usize; partitions * LANES];
    for i in 0..lane_len {
        for q in 0..LANES {
            if let Some(&h) = hashes.get(q * lane_len + i) {
                counts[(h >> shift) as usize * LANES + q] += 1;
            }
        }
    }
    // Exclusive prefix sums in (partition, lane) order: the write cursors.
    let mut bounds = Vec::with_capacity(partitions + 1);
    let mut total = 0;
    for (slot, count) in counts.iter_mut().enumerate() {
        if slot % LANES == 0 {
            bounds.push(total);
        }
        let c = *count;
        *count = total;
        total += c;
    }
    bounds.push(total);
    order.clear();
    order.resize(n, 0);
    for i in 0..lane_len {
        for q in 0..LANES {
            // Lane q holds indices q * lane_len .. (q + 1) * lane_len; only the last lane
            // can run past the end.
            let j = q * lane_len + i;
            if let Some(&h) = hashes.get(j) {
                let cursor = &mut counts[(h >> shift) as usize * LANES + q];
                order[*cursor] = j as u32;
                *cursor += 1;
            }
        }
    }
    bounds
}

/// The source half: morsel `p` emits partition `p`.
pub struct AggregateSource(pub Arc<HashAggregate>);

impl Source for AggregateSource {
    fn name(&self) -> String {
        format!("HashAggregateScan {}", self.0.description)
    }

    fn morsels(&self, _ctx: &ExecContext) -> Result<usize> {
        Ok(self.0.partitions())
    }

    fn morsels_ahead(&self, _ctx: &ExecContext) -> Option<usize> {
        Some(self.0.partitions())
    }

    fn analyze_details(&self, state: &ExecutionState) -> Option<String> {
        let global = state.get::<AggregateGlobal>(self.0.slot).ok()?;
        let rows_in = global.rows_in.load(Ordering::Relaxed);
        let on_codes = global.rows_on_codes.load(Ordering::Relaxed);
        let on_values = global.rows_on_values.load(Ordering::Relaxed);
        let mut details = Vec::new();
        if on_codes > 0 {
            details.push(format!("{on_codes} of {rows_in} input rows grouped by dictionary codes"));
        }
        if on_values > 0 {
            details.push(format!("{on_values} of {rows_in} input rows grouped by a map of key values"));
        }
        (!details.is_empty()).then(|| details.join(", "))
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        let chunk = self.0.global(ctx)?.results.lock().unwrap_or_else(|e| e.into_inner())[morsel].take();
        let Some(chunk) = chunk else { return Ok(()) };
        emit_in_slices(chunk, self.0.vector_size, emit)
    }
}

/// Emits a large chunk as vector-sized slices.
pub(crate) fn emit_in_slices(chunk: DataChunk, vector_size: usize, emit: &mut Emit) -> Result<()> {
    let rows = chunk.physical_len();
    let step = vector_size.max(1);
    let mut offset = 0;
    while offset < rows {
        let len = step.min(rows - offset);
        let slice = if offset == 0 && len == rows {
            chunk.clone()
        } else if chunk.columns.is_empty() {
            DataChunk::empty_columns(len)
        } else {
            DataChunk::new(chunk.columns.iter().map(|c| c.slice(offset, len)).collect(), len)
        };
        if emit(slice)? == Control::Finished {
            break;
        }
        offset += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::partition_order;

    #[test]
    fn partition_order_is_a_stable_sort_by_partition() {
        for n in [0usize, 1, 3, 4, 5, 17, 2048, 2051] {
            // Runs of equal hashes, like clustered keys.
            let hashes: Vec<u64> = (0..n as u64).map(|i| (i / 7).wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
            let mut order = Vec::new();
            let bounds = partition_order(&hashes, 3, &mut order);
            let mut expected: Vec<u32> = (0..n as u32).collect();
            expected.sort_by_key(|&j| hashes[j as usize] >> 61);
            assert_eq!(order, expected, "n = {n}");
            assert_eq!(bounds.len(), 9);
            for p in 0..8 {
                assert!(order[bounds[p]..bounds[p + 1]].iter().all(|&j| (hashes[j as usize] >> 61) as usize == p));
            }
        }
    }
}

#[cfg(test)]
mod code_slot_tests {
    use super::*;
    use crate::operators::run_of;

    #[test]
    fn code_slots_combine_every_key_at_every_row() {
        let len = 1000;
        let a: Vec<u8> = (0..len).map(|i| (i * 7 % 3) as u8).collect();
        let b: Vec<u8> = (0..len).map(|i| (i * 13 % 5) as u8).collect();
        let c: Vec<u8> = (0..len).map(|i| (i % 2) as u8).collect();
        let columns: Vec<(&[u8], u32)> = vec![(&a, 3), (&b, 5), (&c, 2)];
        let expected = |row: u32| {
            let r = row as usize;
            (a[r] as u32 * 5 + b[r] as u32) * 2 + c[r] as u32
        };
        let selections: Vec<Vec<u32>> = vec![
            (0..len as u32).collect(),
            (100..400).collect(),
            (0..len as u32).filter(|r| r % 3 != 1).collect(),
            // The last rows, whose 4-byte reads would pass the end.
            (len as u32 - 40..len as u32).step_by(2).collect(),
            vec![len as u32 - 1],
            vec![],
        ];
        for rows in selections {
            let slots = code_slots(&columns, &rows).unwrap();
            assert_eq!(slots, rows.iter().map(|&r| expected(r)).collect::<Vec<_>>(), "rows {rows:?}");
            // SAFETY: every row of these selections is below the codes' length.
            assert_eq!(unsafe { code_slots_portable(&columns, &rows, run_of(&rows)) }, slots);
        }
        assert!(code_slots(&columns, &[len as u32]).is_none(), "a row beyond the codes");
    }
}
