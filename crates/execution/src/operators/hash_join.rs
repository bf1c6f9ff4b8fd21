//! Hash join: build (a sink), probe (a streaming operator), unmatched build rows (a
//! source for right/full outer joins).
//!
//! ```text
//!  build pipeline:  ... ─▶ HashJoinBuild  (collect rows, then build the table in parallel)
//!  probe pipeline:  ... ─▶ HashJoinProbe ─▶ ...        (after the build finished)
//!  outer pipeline:  HashJoinUnmatched ─▶ ...           (after the probe finished; build
//!                                                       rows never matched, NULL-extended)
//! ```
//!
//! Phases, in order: `consume` (workers buffer build rows locally, packing, hashing and
//! partitioning their keys), `combine` (buffers move to the shared list),
//! `prepare_finalize` (concatenate the workers' pieces), `finalize_task` (one hash-table
//! region per task, in parallel, written in place), `finish` (publish the table). Probes then run on all workers against the read-only table.
//!
//! Join modes: the probe side is the streaming side. `ProbeOuter` keeps unmatched probe
//! rows (LEFT JOIN when the left input probes); `BuildOuter` emits unmatched build rows at
//! the end (RIGHT JOIN when the left input builds). Semi, anti, mark and single joins keep
//! the probe side's rows. A residual predicate (non-equality conditions) is evaluated on
//! candidate pairs after the key match.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use apiary_common::{internal_err, ApiaryError, Bitmap, Result};
use apiary_types::{ChunkBuilder, DataChunk, DataType, Vector, VectorData};

use super::scan::{KeyRange, KeyRangeSource};
use super::{local, Control, Emit, ExecContext, GlobalState, LocalState, Operator, Sink, Source, StateSlot, Stateful};
use crate::expr::simd::CmpKind;
use crate::expr::{selected_rows, ExprRef};
use crate::hash::join_table::{BuildPiece, JoinTable, JoinTableBuilder, FINE_PARTITION_BITS, NONE, PREFETCH_MIN_DIRECTORY_BYTES};
use crate::hash::keys::{KeyPacker, PackedKeys};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinMode {
    Inner,
    /// Unmatched probe rows are emitted with NULL build columns.
    ProbeOuter,
    /// Unmatched build rows are emitted (by [`HashJoinUnmatched`]) with NULL probe columns.
    BuildOuter,
    /// Both.
    FullOuter,
    Semi,
    Anti,
    /// NOT IN semantics (see `JoinKind::Anti { null_aware }`).
    NullAwareAnti,
    Mark {
        null_aware: bool,
    },
    /// Probe-outer join that fails when a probe row matches more than one build row.
    Single,
    /// Semi join that builds on the preserved side: probes mark build rows, and
    /// [`HashJoinUnmatched`] emits the marked ones (cheaper when that side is smaller).
    BuildSemi,
    /// Anti join that builds on the preserved side: emits the build rows never marked.
    BuildAnti,
}

impl JoinMode {
    fn tracks_build_matches(&self) -> bool {
        matches!(self, JoinMode::BuildOuter | JoinMode::FullOuter | JoinMode::BuildSemi | JoinMode::BuildAnti)
    }

    /// Whether the build rows are emitted by [`HashJoinUnmatched`] after the probe.
    pub fn emits_build_rows_after_probe(&self) -> bool {
        self.tracks_build_matches()
    }

    fn outputs_build_columns(&self) -> bool {
        matches!(self, JoinMode::Inner | JoinMode::ProbeOuter | JoinMode::BuildOuter | JoinMode::FullOuter | JoinMode::Single)
    }
}

/// Everything about one join that build, probe and outer scan share.
pub struct HashJoin {
    pub mode: JoinMode,
    /// Key expressions over the build input / probe input.
    build_keys: Vec<ExprRef>,
    probe_keys: Vec<ExprRef>,
    packer: KeyPacker,
    /// Build input columns stored in the table (after the key columns).
    build_payload: Vec<usize>,
    build_payload_types: Vec<DataType>,
    /// Probe input columns passed on.
    probe_output: Vec<usize>,
    probe_output_types: Vec<DataType>,
    /// Stored build columns passed on (positions in `build_payload`).
    build_output: Vec<usize>,
    /// Residual predicate over `[probe_residual columns..., build_residual columns...]`.
    residual: Option<ExprRef>,
    probe_residual: Vec<usize>,
    build_residual: Vec<usize>,
    /// The residual when it compares an integer probe column with an integer build
    /// column: tested on the pairs in place, without gathering them into vectors.
    residual_comparison: Option<ResidualComparison>,
    parallelism: usize,
    prefetch_group: usize,
    pub description: String,
    slot: StateSlot,
}

/// A residual `probe column <op> build column` over integer columns (TPC-DS Q72's
/// `inv_quantity_on_hand < cs_quantity` over five million candidate pairs): compared as
/// 64-bit integers, which every integer type widens to exactly; NULL on either side fails.
#[derive(Clone, Copy, Debug)]
pub struct ResidualComparison {
    /// Position in the probe chunk.
    pub probe: usize,
    /// Position in the build payload.
    pub build: usize,
    /// The comparison, with the probe column on the left.
    pub op: CmpKind,
}

/// An integer column read as `i64`, with its validity.
struct IntColumn<'a> {
    values: IntValues<'a>,
    validity: Option<&'a Bitmap>,
}

enum IntValues<'a> {
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
}

impl<'a> IntColumn<'a> {
    fn of(vector: &'a Vector) -> Option<IntColumn<'a>> {
        let values = match &vector.data {
            VectorData::I16(v) => IntValues::I16(v),
            VectorData::I32(v) => IntValues::I32(v),
            VectorData::I64(v) => IntValues::I64(v),
            _ => return None,
        };
        Some(IntColumn { values, validity: vector.validity.as_ref() })
    }

    #[inline(always)]
    fn value(&self, row: usize) -> i64 {
        match self.values {
            IntValues::I16(v) => v[row] as i64,
            IntValues::I32(v) => v[row] as i64,
            IntValues::I64(v) => v[row],
        }
    }

    #[inline(always)]
    fn is_valid(&self, row: usize) -> bool {
        self.validity.is_none_or(|b| b.get(row))
    }
}

impl ResidualComparison {
    /// Keeps the pairs (probe row, build row, probe index) whose values compare true.
    fn retain(&self, chunk: &DataChunk, built: &BuiltTable, probe: &mut Vec<u32>, build: &mut Vec<u32>, j: &mut Vec<u32>) -> Result<()> {
        let (Some(left), Some(right)) = (IntColumn::of(&chunk.columns[self.probe]), IntColumn::of(&built.columns[self.build])) else {
            return Err(internal_err!("a residual comparison over non-integer columns"));
        };
        fn run(
            left: &IntColumn,
            right: &IntColumn,
            probe: &mut Vec<u32>,
            build: &mut Vec<u32>,
            j: &mut Vec<u32>,
            compare: impl Fn(i64, i64) -> bool,
        ) {
            let mut kept = 0;
            for i in 0..probe.len() {
                let (p, b) = (probe[i] as usize, build[i] as usize);
                // An unmatched outer row (NONE) never reaches the residual.
                let pass = compare(left.value(p), right.value(b)) && left.is_valid(p) && right.is_valid(b);
                probe[kept] = probe[i];
                build[kept] = build[i];
                j[kept] = j[i];
                kept += pass as usize;
            }
            probe.truncate(kept);
            build.truncate(kept);
            j.truncate(kept);
        }
        match self.op {
            CmpKind::Eq => run(&left, &right, probe, build, j, |a, b| CmpKind::Eq.test(a, b)),
            CmpKind::NotEq => run(&left, &right, probe, build, j, |a, b| CmpKind::NotEq.test(a, b)),
            CmpKind::Lt => run(&left, &right, probe, build, j, |a, b| CmpKind::Lt.test(a, b)),
            CmpKind::LtEq => run(&left, &right, probe, build, j, |a, b| CmpKind::LtEq.test(a, b)),
            CmpKind::Gt => run(&left, &right, probe, build, j, |a, b| CmpKind::Gt.test(a, b)),
            CmpKind::GtEq => run(&left, &right, probe, build, j, |a, b| CmpKind::GtEq.test(a, b)),
        }
        Ok(())
    }
}

/// One execution's build side.
#[derive(Default)]
struct JoinGlobal {
    /// Each worker's build rows (payload columns) and their keys.
    collected: Mutex<Vec<(DataChunk, BuildPiece)>>,
    /// Per build key: the smallest and largest integer value of all workers' rows (see
    /// [`BuildLocal::key_ranges`]).
    key_ranges: Mutex<Vec<Option<(i64, i64)>>>,
    builder: RwLock<Option<(JoinTableBuilder, Vec<Vector>)>>,
    built: OnceLock<BuiltTable>,
}

/// The finished build side.
struct BuiltTable {
    table: JoinTable,
    /// Stored build columns (payload), concatenated.
    columns: Vec<Vector>,
    /// For outer joins on the build side: which build rows found a partner.
    matched: Vec<AtomicBool>,
    /// Per build key: the range of its values, for integer keys (runtime filters).
    key_ranges: Vec<Option<KeyRange>>,
}

pub struct HashJoinSpec {
    pub mode: JoinMode,
    pub build_keys: Vec<ExprRef>,
    pub probe_keys: Vec<ExprRef>,
    /// NULL keys match each other (IS NOT DISTINCT FROM).
    pub null_safe: bool,
    pub build_payload: Vec<usize>,
    pub build_payload_types: Vec<DataType>,
    pub probe_output: Vec<usize>,
    pub probe_output_types: Vec<DataType>,
    pub build_output: Vec<usize>,
    pub residual: Option<ExprRef>,
    pub probe_residual: Vec<usize>,
    pub build_residual: Vec<usize>,
    /// The residual as a comparison of two integer columns, when it is one.
    pub residual_comparison: Option<ResidualComparison>,
    pub parallelism: usize,
    /// Build rows inserted per prefetch group (`SET prefetch_group`; 0 = no prefetching).
    pub prefetch_group: usize,
    pub description: String,
}

impl HashJoin {
    pub fn new(spec: HashJoinSpec, slot: StateSlot) -> Arc<HashJoin> {
        let key_types: Vec<DataType> = spec.build_keys.iter().map(|k| k.data_type()).collect();
        let nullable = vec![true; key_types.len()];
        let packer = KeyPacker::new(&key_types, &nullable, spec.null_safe);
        Arc::new(HashJoin {
            mode: spec.mode,
            build_keys: spec.build_keys,
            probe_keys: spec.probe_keys,
            packer,
            build_payload: spec.build_payload,
            build_payload_types: spec.build_payload_types,
            probe_output: spec.probe_output,
            probe_output_types: spec.probe_output_types,
            build_output: spec.build_output,
            residual: spec.residual,
            probe_residual: spec.probe_residual,
            build_residual: spec.build_residual,
            residual_comparison: spec.residual_comparison,
            parallelism: spec.parallelism.max(1),
            prefetch_group: spec.prefetch_group,
            description: spec.description,
            slot,
        })
    }

    fn global<'a>(&self, ctx: &'a ExecContext) -> Result<&'a JoinGlobal> {
        ctx.global::<JoinGlobal>(self.slot)
    }

    /// Size of the finished table's directory in bytes (0 before the build finished).
    pub fn table_bytes(&self, ctx: &ExecContext) -> usize {
        self.global(ctx).ok().and_then(|g| g.built.get()).map_or(0, |b| b.table.directory_bytes())
    }

    fn built<'a>(&self, ctx: &'a ExecContext) -> Result<&'a BuiltTable> {
        self.global(ctx)?.built.get().ok_or_else(|| internal_err!("hash join probed before its build finished"))
    }

    /// Rows of build column `position` (in payload order) at `rows`; [`NONE`] gives NULL.
    fn gather_build(&self, built: &BuiltTable, position: usize, rows: &[u32]) -> Vector {
        let column = &built.columns[position];
        gather_or_null(column, rows)
    }
}

/// Gathers rows; an index of [`NONE`] yields NULL.
fn gather_or_null(column: &Vector, rows: &[u32]) -> Vector {
    if !rows.contains(&NONE) {
        return column.gather(rows);
    }
    if column.is_empty() {
        return Vector::nulls(column.data_type, rows.len());
    }
    let indices: Vec<u32> = rows.iter().map(|&r| if r == NONE { 0 } else { r }).collect();
    let gathered = column.gather(&indices);
    let mut validity = gathered.validity.clone().unwrap_or_else(|| Bitmap::new(rows.len(), true));
    for (i, &r) in rows.iter().enumerate() {
        if r == NONE {
            validity.set(i, false);
        }
    }
    gathered.with_validity(Some(validity))
}

impl Stateful for HashJoin {
    fn new_state(&self) -> Result<GlobalState> {
        Ok(Box::new(JoinGlobal::default()))
    }
}

// ---------------------------------------------------------------------------------- Build

/// The build side of a hash join (a pipeline breaker).
pub struct HashJoinBuild(pub Arc<HashJoin>);

/// A worker's build rows, appended column by column as they arrive, with their keys
/// packed, hashed and sorted into partitions: that work happens in parallel, and the
/// finalize step joins one piece per worker.
struct BuildLocal {
    rows: ChunkBuilder,
    keys: BuildPiece,
    /// Per build key of an integer type: the smallest and largest non-NULL value so far.
    key_ranges: Vec<Option<(i64, i64)>>,
}

impl Sink for HashJoinBuild {
    fn name(&self) -> String {
        format!("HashJoinBuild {}", self.0.description)
    }

    fn local_state(&self) -> LocalState {
        // One worker builds the table in one task; several need partitions to share it.
        let fine_bits = if self.0.parallelism > 1 { FINE_PARTITION_BITS } else { 0 };
        Box::new(BuildLocal {
            rows: ChunkBuilder::default(),
            keys: BuildPiece::new(fine_bits),
            key_ranges: vec![None; self.0.build_keys.len()],
        })
    }

    fn consume(&self, chunk: DataChunk, _order: u64, state: &mut LocalState, _ctx: &ExecContext) -> Result<Control> {
        let join = &self.0;
        let key_columns = join.build_keys.iter().map(|k| k.evaluate(&chunk)).collect::<Result<Vec<_>>>()?;
        let payload: Vec<Vector> = join.build_payload.iter().map(|&c| chunk.columns[c].clone()).collect();
        let local = local::<BuildLocal>(state);
        let rows = selected_rows(&chunk);
        for (range, column) in local.key_ranges.iter_mut().zip(&key_columns) {
            *range = widen_range(*range, column, &rows);
        }
        local.keys.append(join.packer.pack(&key_columns, &rows));
        local.rows.append(&payload, chunk.selection(), chunk.physical_len());
        Ok(Control::Continue)
    }

    fn local_memory(&self, state: &LocalState) -> usize {
        // Payload values, plus the key entry and the directory slot each row will take.
        let row_bytes: usize = self.0.build_payload_types.iter().map(|t| t.physical().width()).sum::<usize>() + 32;
        state.downcast_ref::<BuildLocal>().map_or(0, |s| s.rows.rows() * row_bytes)
    }

    fn combine(&self, state: LocalState, ctx: &ExecContext) -> Result<()> {
        let state = state.downcast::<BuildLocal>().expect("build local state");
        let global = self.0.global(ctx)?;
        {
            let mut ranges = global.key_ranges.lock().unwrap_or_else(|e| e.into_inner());
            ranges.resize(state.key_ranges.len(), None);
            for (merged, local) in ranges.iter_mut().zip(state.key_ranges) {
                *merged = match (*merged, local) {
                    (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
                    (a, b) => a.or(b),
                };
            }
        }
        if state.rows.rows() > 0 {
            global.collected.lock().unwrap_or_else(|e| e.into_inner()).push((state.rows.finish(), state.keys));
        }
        Ok(())
    }

    fn prepare_finalize(&self, ctx: &ExecContext) -> Result<usize> {
        let join = &self.0;
        let global = join.global(ctx)?;
        let pieces = std::mem::take(&mut *global.collected.lock().unwrap_or_else(|e| e.into_inner()));
        let rows: usize = pieces.iter().map(|(chunk, _)| chunk.row_count()).sum();
        let mut all = ChunkBuilder::with_types(&join.build_payload_types, rows);
        let mut keys = Vec::with_capacity(pieces.len());
        for (chunk, piece) in pieces {
            all.append_chunk(&chunk);
            keys.push(piece);
        }
        let columns = all.finish().columns;
        let builder = JoinTableBuilder::from_pieces(keys, build_partition_bits(rows, join.parallelism), join.prefetch_group);
        let partitions = builder.partitions();
        *global.builder.write().unwrap_or_else(|e| e.into_inner()) = Some((builder, columns));
        Ok(partitions)
    }

    fn finalize_task(&self, task: usize, ctx: &ExecContext) -> Result<()> {
        // Tasks share the builder read-only; each fills its own region.
        let guard = self.0.global(ctx)?.builder.read().unwrap_or_else(|e| e.into_inner());
        let (builder, _) = guard.as_ref().ok_or_else(|| internal_err!("hash join builder missing"))?;
        builder.build_partition(task);
        Ok(())
    }

    fn finish(&self, ctx: &ExecContext) -> Result<()> {
        let join = &self.0;
        let global = join.global(ctx)?;
        let (builder, columns) =
            global.builder.write().unwrap_or_else(|e| e.into_inner()).take().ok_or_else(|| internal_err!("hash join builder missing"))?;
        let table = builder.finish();
        let matched = if join.mode.tracks_build_matches() { (0..table.rows).map(|_| AtomicBool::new(false)).collect() } else { Vec::new() };
        let merged = global.key_ranges.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let key_ranges = join
            .build_keys
            .iter()
            .enumerate()
            .map(|(k, key)| {
                integer_key(key.data_type()).then(|| match merged.get(k).copied().flatten() {
                    Some((lo, hi)) => KeyRange::Within(lo, hi),
                    None => KeyRange::Empty,
                })
            })
            .collect();
        global.built.set(BuiltTable { table, columns, matched, key_ranges }).map_err(|_| internal_err!("hash join built twice"))?;
        Ok(())
    }
}

/// Whether a key of this type has integer values a runtime range can hold (integers,
/// dates, timestamps and short decimals, by their stored integers).
pub fn integer_key(data_type: DataType) -> bool {
    use apiary_types::datatype::PhysicalType as P;
    matches!(data_type.physical(), P::I16 | P::I32 | P::I64)
}

/// `range` widened by the non-NULL values of `column` at `rows` (integer columns only).
fn widen_range(range: Option<(i64, i64)>, column: &Vector, rows: &[u32]) -> Option<(i64, i64)> {
    fn fold<T: Copy>(
        range: Option<(i64, i64)>,
        values: &[T],
        rows: &[u32],
        valid: impl Fn(u32) -> bool,
        to_i64: impl Fn(T) -> i64,
    ) -> Option<(i64, i64)> {
        let (mut lo, mut hi, mut any) = range.map_or((i64::MAX, i64::MIN, false), |(lo, hi)| (lo, hi, true));
        for &r in rows {
            if valid(r) {
                let v = to_i64(values[r as usize]);
                lo = lo.min(v);
                hi = hi.max(v);
                any = true;
            }
        }
        any.then_some((lo, hi))
    }
    let valid = |r: u32| column.validity.as_ref().is_none_or(|v| v.get(r as usize));
    match &column.data {
        VectorData::I16(v) => fold(range, v, rows, valid, i64::from),
        VectorData::I32(v) => fold(range, v, rows, valid, i64::from),
        VectorData::I64(v) => fold(range, v, rows, valid, |x| x),
        _ => range,
    }
}

impl KeyRangeSource for HashJoin {
    fn key_range(&self, key: usize, ctx: &ExecContext) -> Option<KeyRange> {
        self.global(ctx).ok()?.built.get()?.key_ranges.get(key).copied().flatten()
    }

    fn tests_membership(&self) -> bool {
        !self.build_keys.is_empty()
    }

    fn select_members(&self, columns: &[Vector], rows: Vec<u32>, ctx: &ExecContext) -> Vec<u32> {
        let Some(built) = self.global(ctx).ok().and_then(|g| g.built.get()) else { return rows };
        if self.build_keys.len() != columns.len() || rows.is_empty() {
            return rows;
        }
        // Packed as the probe packs it: the same words, hashes and validity.
        let keys = self.packer.pack(columns, &rows);
        let mut passing = Vec::with_capacity(rows.len());
        if !built.table.direct_members(&keys, &mut passing) {
            let Some(bloom) = &built.table.bloom else { return rows };
            bloom.filter_into(&keys.hashes(), keys.validity(), &mut passing);
        }
        // Positions among `rows` become the rows themselves (in place: `rows[j]`, j >= i).
        for position in passing.iter_mut() {
            *position = rows[*position as usize];
        }
        passing
    }
}

// ---------------------------------------------------------------------------------- Probe

/// Builds with fewer rows are inserted by one task: partitioning would cost more than the
/// second worker saves.
const PARALLEL_BUILD_MIN_ROWS: usize = 1 << 14;

/// How many partitions (as bits) a build of `rows` rows is inserted in on `parallelism`
/// workers: enough for every worker to have several tasks, and enough for each
/// partition's directory region to stay in cache while it is filled (one region of a big
/// directory is written at a time instead of the whole directory at random). One worker
/// inserts everything in one task: there, sorting the rows into partitions costs about
/// what the cache-resident regions save.
fn build_partition_bits(rows: usize, parallelism: usize) -> u32 {
    if rows < PARALLEL_BUILD_MIN_ROWS || parallelism == 1 {
        return 0;
    }
    let parallel = (parallelism * 4).next_power_of_two().trailing_zeros();
    // Slots of 16 bytes at a load factor of at most 0.5.
    let directory_bytes = rows.saturating_mul(32);
    let cached = directory_bytes.div_ceil(PREFETCH_MIN_DIRECTORY_BYTES).next_power_of_two().trailing_zeros();
    parallel.max(cached)
}

/// The probe side of a hash join (streaming).
pub struct HashJoinProbe(pub Arc<HashJoin>);

impl Operator for HashJoinProbe {
    fn name(&self) -> String {
        format!("HashJoinProbe {}", self.0.description)
    }

    fn local_state(&self) -> LocalState {
        Box::new(ProbeLocal { bloom_tested: 0, bloom_passed: 0, bloom_enabled: true })
    }

    fn execute(&self, chunk: DataChunk, local_state: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<Control> {
        let join = &self.0;
        let built = join.built(ctx)?;
        let rows = selected_rows(&chunk);
        if rows.is_empty() {
            return Ok(Control::Continue);
        }
        let key_columns = join.probe_keys.iter().map(|k| k.evaluate(&chunk)).collect::<Result<Vec<_>>>()?;
        let keys = join.packer.pack(&key_columns, &rows);
        // A direct table looks keys up by value: no hashes.
        let hashes = if built.table.is_direct() { Vec::new() } else { keys.hashes() };
        // Keys to look up: valid ones that pass the Bloom filter (when it pays off).
        let local = local::<ProbeLocal>(local_state);
        let candidates: Vec<u32> = match (&built.table.bloom, local.bloom_enabled) {
            (Some(bloom), true) => {
                let mut candidates = Vec::with_capacity(rows.len());
                bloom.filter_into(&hashes, keys.validity(), &mut candidates);
                local.bloom_tested += rows.len() as u64;
                local.bloom_passed += candidates.len() as u64;
                // A filter that passes nearly everything only costs: stop using it.
                if local.bloom_tested >= BLOOM_SAMPLE_ROWS && local.bloom_passed * 10 > local.bloom_tested * 9 {
                    local.bloom_enabled = false;
                }
                candidates
            }
            _ => valid_keys(&keys),
        };
        // Group prefetching (ROF §4.3) happens inside, for directories larger than cache.
        let mut heads = vec![NONE; rows.len()];
        built.table.find_batch(&keys, &hashes, &candidates, &mut heads, ctx.config.prefetch_group);
        match join.mode {
            JoinMode::Semi | JoinMode::Anti | JoinMode::NullAwareAnti | JoinMode::Mark { .. } if join.residual.is_none() => {
                self.emit_filtered(&chunk, &rows, &keys, &heads, built, emit)
            }
            JoinMode::BuildSemi | JoinMode::BuildAnti if join.residual.is_none() => {
                // Mark every build row of each matching chain; nothing is emitted now.
                for &head in &heads {
                    let mut row = head;
                    while row != NONE {
                        if built.matched[row as usize].swap(true, Ordering::Relaxed) {
                            // Rows of a chain share the key: once one is marked, all are.
                            break;
                        }
                        row = built.table.next(row);
                    }
                }
                Ok(Control::Continue)
            }
            _ => self.emit_pairs(&chunk, &rows, &keys, &candidates, &heads, built, ctx, emit),
        }
    }
}

/// Indices of the keys without a NULL, compacted without a branch per key.
fn valid_keys(keys: &PackedKeys) -> Vec<u32> {
    let valid = keys.validity();
    if valid.is_empty() {
        // Key-less (cross join): every row.
        return (0..keys.len() as u32).collect();
    }
    let mut indices = vec![0u32; valid.len()];
    let mut count = 0;
    for (j, &v) in valid.iter().enumerate() {
        indices[count] = j as u32;
        count += v as usize;
    }
    indices.truncate(count);
    indices
}

/// Per-worker probe state: how well the Bloom filter rejects keys.
struct ProbeLocal {
    bloom_tested: u64,
    bloom_passed: u64,
    bloom_enabled: bool,
}

/// Keys tested before deciding whether the Bloom filter is worth it.
const BLOOM_SAMPLE_ROWS: u64 = 1 << 16;

impl HashJoinProbe {
    /// Semi/anti/mark joins without residual: keep or mark probe rows, no copying.
    fn emit_filtered(
        &self,
        chunk: &DataChunk,
        rows: &[u32],
        keys: &PackedKeys,
        heads: &[u32],
        built: &BuiltTable,
        emit: &mut Emit,
    ) -> Result<Control> {
        let join = &self.0;
        let matched = |j: usize| heads[j] != NONE;
        match join.mode {
            JoinMode::Semi => {
                let keep: Vec<u32> = (0..rows.len()).filter(|&j| matched(j)).map(|j| rows[j]).collect();
                self.emit_probe_rows(chunk, keep, None, emit)
            }
            JoinMode::Anti => {
                let keep: Vec<u32> = (0..rows.len()).filter(|&j| !matched(j)).map(|j| rows[j]).collect();
                self.emit_probe_rows(chunk, keep, None, emit)
            }
            JoinMode::NullAwareAnti => {
                let keep: Vec<u32> = if built.table.rows == 0 {
                    rows.to_vec()
                } else if built.table.has_null_key {
                    Vec::new()
                } else {
                    (0..rows.len()).filter(|&j| keys.is_valid(j) && !matched(j)).map(|j| rows[j]).collect()
                };
                self.emit_probe_rows(chunk, keep, None, emit)
            }
            JoinMode::Mark { null_aware } => {
                let found: Vec<bool> = (0..rows.len()).map(matched).collect();
                let unknown: Vec<bool> = (0..rows.len())
                    .map(|j| null_aware && !found[j] && built.table.rows > 0 && (!keys.is_valid(j) || built.table.has_null_key))
                    .collect();
                let mark = mark_vector(chunk.physical_len(), rows, &found, &unknown);
                self.emit_probe_rows(chunk, rows.to_vec(), Some(mark), emit)
            }
            _ => Err(internal_err!("emit_filtered for {:?}", join.mode)),
        }
    }

    /// Emits probe rows `keep` (positions in `chunk`) with the probe output columns and,
    /// for mark joins, the mark column (a full-length vector).
    fn emit_probe_rows(&self, chunk: &DataChunk, keep: Vec<u32>, mark: Option<Vector>, emit: &mut Emit) -> Result<Control> {
        if keep.is_empty() {
            return Ok(Control::Continue);
        }
        let mut columns: Vec<Vector> = self.0.probe_output.iter().map(|&c| chunk.columns[c].clone()).collect();
        columns.extend(mark);
        let len = chunk.physical_len();
        let out = if columns.is_empty() { DataChunk::empty_columns(len) } else { DataChunk::new(columns, len) };
        let selection = if keep.len() == len { None } else { Some(keep) };
        emit(out.with_selection(selection))
    }

    /// Joins producing pairs: generates candidate (probe row, build row) pairs in batches,
    /// filters them with the residual predicate, and emits or records them by mode.
    /// `candidates` (ascending) are the probe positions looked up; others have no match.
    #[allow(clippy::too_many_arguments)]
    fn emit_pairs(
        &self,
        chunk: &DataChunk,
        rows: &[u32],
        keys: &PackedKeys,
        candidates: &[u32],
        heads: &[u32],
        built: &BuiltTable,
        ctx: &ExecContext,
        emit: &mut Emit,
    ) -> Result<Control> {
        let join = &self.0;
        let batch = ctx.config.vector_size.max(64);
        // Per probe row (index j): whether some pair passed.
        let mut probe_matched = vec![false; rows.len()];
        let mut pair_probe: Vec<u32> = Vec::with_capacity(batch);
        let mut pair_j: Vec<u32> = Vec::with_capacity(batch);
        let mut pair_build: Vec<u32> = Vec::with_capacity(batch);
        // Probe rows that found their key, in order: the pair loop never visits misses.
        let mut hits: Vec<u32> = vec![0; candidates.len()];
        let mut hit_count = 0;
        for &j in candidates {
            // Branch-free compaction: write always, advance only on a hit.
            hits[hit_count] = j;
            hit_count += (heads[j as usize] != NONE) as usize;
        }
        hits.truncate(hit_count);
        let mut next_hit = 0;
        let (mut j, mut cursor) = (0usize, NONE);
        let single = join.mode == JoinMode::Single;
        let tracks_probe_matches = !matches!(join.mode, JoinMode::Inner | JoinMode::BuildOuter | JoinMode::BuildSemi | JoinMode::BuildAnti);
        loop {
            // Fill a batch of candidate pairs.
            if built.table.unique_keys {
                // One pair per hit: no chains to follow.
                let take = &hits[next_hit..(next_hit + batch).min(hits.len())];
                next_hit += take.len();
                pair_probe.extend(take.iter().map(|&hit| rows[hit as usize]));
                pair_j.extend_from_slice(take);
                pair_build.extend(take.iter().map(|&hit| heads[hit as usize]));
            }
            while pair_probe.len() < batch {
                if cursor == NONE {
                    let Some(&hit) = hits.get(next_hit) else { break };
                    next_hit += 1;
                    j = hit as usize;
                    cursor = heads[j];
                }
                pair_probe.push(rows[j]);
                pair_j.push(j as u32);
                pair_build.push(cursor);
                cursor = built.table.next(cursor);
            }
            if pair_probe.is_empty() {
                break;
            }
            let passing = match &join.residual_comparison {
                Some(comparison) => {
                    comparison.retain(chunk, built, &mut pair_probe, &mut pair_build, &mut pair_j)?;
                    None
                }
                None => self.apply_residual(chunk, &pair_probe, &pair_build, built)?,
            };
            let (probe_rows, build_rows): (Vec<u32>, Vec<u32>) = match &passing {
                None => (std::mem::take(&mut pair_probe), std::mem::take(&mut pair_build)),
                Some(pass) => {
                    let p = pass.iter().map(|&i| pair_probe[i as usize]).collect();
                    let b = pass.iter().map(|&i| pair_build[i as usize]).collect();
                    (p, b)
                }
            };
            let passing_j: Vec<u32> = match &passing {
                None => std::mem::take(&mut pair_j),
                Some(pass) => pass.iter().map(|&i| pair_j[i as usize]).collect(),
            };
            if tracks_probe_matches {
                for &pj in &passing_j {
                    if single && probe_matched[pj as usize] {
                        return Err(ApiaryError::CardinalityViolation(
                            "more than one row returned by a subquery used as an expression".into(),
                        ));
                    }
                    probe_matched[pj as usize] = true;
                }
            }
            if join.mode.tracks_build_matches() {
                for &b in &build_rows {
                    built.matched[b as usize].store(true, Ordering::Relaxed);
                }
            }
            if join.mode.outputs_build_columns()
                && !probe_rows.is_empty()
                && self.emit_joined(chunk, &probe_rows, &build_rows, built, emit)? == Control::Finished
            {
                return Ok(Control::Finished);
            }
            pair_probe.clear();
            pair_j.clear();
            pair_build.clear();
            if ctx.stopped() {
                return Err(ApiaryError::Interrupted);
            }
        }
        match join.mode {
            JoinMode::Inner | JoinMode::BuildOuter | JoinMode::BuildSemi | JoinMode::BuildAnti => Ok(Control::Continue),
            JoinMode::ProbeOuter | JoinMode::FullOuter | JoinMode::Single => {
                let unmatched: Vec<u32> = (0..rows.len()).filter(|&j| !probe_matched[j]).map(|j| rows[j]).collect();
                if unmatched.is_empty() {
                    return Ok(Control::Continue);
                }
                let nones = vec![NONE; unmatched.len()];
                self.emit_joined(chunk, &unmatched, &nones, built, emit)
            }
            JoinMode::Semi => {
                let keep = (0..rows.len()).filter(|&j| probe_matched[j]).map(|j| rows[j]).collect();
                self.emit_probe_rows(chunk, keep, None, emit)
            }
            JoinMode::Anti => {
                let keep = (0..rows.len()).filter(|&j| !probe_matched[j]).map(|j| rows[j]).collect();
                self.emit_probe_rows(chunk, keep, None, emit)
            }
            JoinMode::NullAwareAnti => {
                let keep = if built.table.rows == 0 {
                    rows.to_vec()
                } else if built.table.has_null_key {
                    Vec::new()
                } else {
                    (0..rows.len()).filter(|&j| keys.is_valid(j) && !probe_matched[j]).map(|j| rows[j]).collect()
                };
                self.emit_probe_rows(chunk, keep, None, emit)
            }
            JoinMode::Mark { null_aware } => {
                let unknown: Vec<bool> = (0..rows.len())
                    .map(|j| null_aware && !probe_matched[j] && built.table.rows > 0 && (!keys.is_valid(j) || built.table.has_null_key))
                    .collect();
                let mark = mark_vector(chunk.physical_len(), rows, &probe_matched, &unknown);
                self.emit_probe_rows(chunk, rows.to_vec(), Some(mark), emit)
            }
        }
    }

    /// Positions (in the pair lists) of pairs passing the residual; `None` = all pass.
    fn apply_residual(&self, chunk: &DataChunk, probe_rows: &[u32], build_rows: &[u32], built: &BuiltTable) -> Result<Option<Vec<u32>>> {
        let join = &self.0;
        let Some(residual) = &join.residual else { return Ok(None) };
        let mut columns: Vec<Vector> = join.probe_residual.iter().map(|&c| chunk.columns[c].gather(probe_rows)).collect();
        columns.extend(join.build_residual.iter().map(|&c| join.gather_build(built, c, build_rows)));
        let pairs = DataChunk::new(columns, probe_rows.len());
        let all: Vec<u32> = (0..probe_rows.len() as u32).collect();
        Ok(Some(residual.select(&pairs, &all)?))
    }

    fn emit_joined(
        &self,
        chunk: &DataChunk,
        probe_rows: &[u32],
        build_rows: &[u32],
        built: &BuiltTable,
        emit: &mut Emit,
    ) -> Result<Control> {
        let join = &self.0;
        let mut columns: Vec<Vector> = join.probe_output.iter().map(|&c| chunk.columns[c].gather(probe_rows)).collect();
        columns.extend(join.build_output.iter().map(|&c| join.gather_build(built, c, build_rows)));
        let len = probe_rows.len();
        let out = if columns.is_empty() { DataChunk::empty_columns(len) } else { DataChunk::new(columns, len) };
        emit(out)
    }
}

/// A BOOLEAN vector of the chunk's length: TRUE/FALSE from `found`, NULL where `unknown`.
fn mark_vector(len: usize, rows: &[u32], found: &[bool], unknown: &[bool]) -> Vector {
    let mut values = vec![false; len];
    let mut validity: Option<Bitmap> = None;
    for (j, &r) in rows.iter().enumerate() {
        values[r as usize] = found[j];
        if unknown[j] {
            validity.get_or_insert_with(|| Bitmap::new(len, true)).set(r as usize, false);
        }
    }
    Vector::new(DataType::Boolean, VectorData::Bool(values.into()), validity)
}

// ------------------------------------------------------------------------ Unmatched build

/// Emits the build rows no probe row matched (RIGHT / FULL OUTER joins).
pub struct HashJoinUnmatched(pub Arc<HashJoin>);

/// Build rows per work order of the unmatched scan.
const UNMATCHED_MORSEL_ROWS: usize = 1 << 16;

impl Source for HashJoinUnmatched {
    fn name(&self) -> String {
        format!("HashJoinUnmatched {}", self.0.description)
    }

    fn morsels(&self, ctx: &ExecContext) -> Result<usize> {
        Ok(self.0.built(ctx)?.table.rows.div_ceil(UNMATCHED_MORSEL_ROWS))
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        let join = &self.0;
        let built = join.built(ctx)?;
        let start = morsel * UNMATCHED_MORSEL_ROWS;
        let end = (start + UNMATCHED_MORSEL_ROWS).min(built.table.rows);
        // Outer and anti joins emit the build rows never matched; a build-side semi join
        // emits the matched ones.
        let want = join.mode == JoinMode::BuildSemi;
        let unmatched: Vec<u32> = (start..end).filter(|&r| built.matched[r].load(Ordering::Relaxed) == want).map(|r| r as u32).collect();
        for rows in unmatched.chunks(ctx.config.vector_size.max(1)) {
            let mut columns: Vec<Vector> = join.probe_output_types.iter().map(|t| Vector::nulls(*t, rows.len())).collect();
            columns.extend(join.build_output.iter().map(|&c| join.gather_build(built, c, rows)));
            if emit(DataChunk::new(columns, rows.len()))? == Control::Finished {
                break;
            }
        }
        Ok(())
    }
}
