//! Table scan: the source of most pipelines. One work order = one storage block, or
//! while another query of at least the same priority runs, a range of at most
//! `SET morsel_size` rows of one: short work orders let the scheduler switch between
//! queries often (a short or high-priority query waits for at most one of them), and cost
//! a few percent alone.
//!
//! For each block the scan first consults the zone maps of the pushed-down predicates
//! and skips the block if no row can qualify; otherwise it slices the needed column
//! stripes into vectors (zero-copy), evaluates the pushed-down filter into a selection
//! vector and emits the chunk.
//!
//! Packed stripes (frame-of-reference codes, `apiary_storage::packed`) are decoded late
//! (Hyper's Data Blocks): a range conjunct on one is rewritten per block into a range of
//! codes and tested on the codes with SIMD (a block where every code or none passes drops
//! the conjunct or the block), the other conjuncts decode the columns they read, and only
//! the output columns of the surviving rows are decoded.
//!
//! Runtime filters (Quickstep's exact filters, DuckDB's dynamic filters): a scan on the
//! probe side of an inner or semi hash join learns the range of the join's build keys when
//! its pipeline starts (the build has finished by then). Blocks whose zone map lies outside
//! the range are skipped, and rows outside it are dropped before the probe, where a
//! block's zone map does not already show that all of them are inside. The scan also tests
//! the join's keys (one or several columns) against the build's Bloom filter or direct
//! table, before it decodes its other columns, so rows that will not match leave before
//! any other work, whether the probe comes right after the scan or behind other operators
//! (earlier probes of a star join: Quickstep's lookahead information passing); a
//! membership test that keeps almost every row is dropped after a sample.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use apiary_common::{Bitmap, Result};
use apiary_storage::block::{Block, StripeValues};
use apiary_storage::encoding::Dictionary;
use apiary_storage::packed::{retain_code_ranges, select_code_ranges, CodeRange, CodeTest};
use apiary_storage::{Table, TableData};
use apiary_types::{DataChunk, ScalarValue, Vector, VectorData};

use super::{Control, Emit, ExecContext, ExecutionState, GlobalState, LocalState, SharedRange, Source, StateSlot, Stateful};
use crate::expr::ExprRef;

/// A range condition on one column that zone maps can check.
#[derive(Debug, Clone)]
pub struct ZonePredicate {
    /// Table column index.
    pub column: usize,
    pub lower: Option<(ScalarValue, bool)>,
    pub upper: Option<(ScalarValue, bool)>,
}

/// The values a finished hash-join build holds for one of its key columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRange {
    /// No build row has a (non-NULL) key: no probe row can match.
    Empty,
    /// Every build key lies in `min..=max`.
    Within(i64, i64),
}

/// Where a scan's runtime filter learns about the build keys: a hash join's build side.
pub trait KeyRangeSource: Send + Sync {
    /// The range of build key `key` in this execution (`None` when not known: the key is
    /// not an integer column, or the build has not finished).
    fn key_range(&self, key: usize, ctx: &ExecContext) -> Option<KeyRange>;

    /// Whether [`Self::select_members`] can test the join's keys.
    fn tests_membership(&self) -> bool {
        false
    }

    /// Of `rows` (positions in `columns`, the probe keys' values in key order), those whose
    /// key may be among the build keys (no false negatives).
    fn select_members(&self, _columns: &[Vector], rows: Vec<u32>, _ctx: &ExecContext) -> Vec<u32> {
        rows
    }
}

/// A runtime filter on the range of one key column of the scan.
struct RuntimeFilter {
    /// Position in `read_columns`.
    column: usize,
    source: Arc<dyn KeyRangeSource>,
    key: usize,
    /// Whether rows outside the range are dropped one by one too, not only blocks whose
    /// zone map is outside: false when a membership test of the same join covers the
    /// column (a key in the build keys is in their range, so the row test adds nothing).
    test_rows: bool,
}

/// A runtime filter testing whether a join's keys are among its build keys.
struct MembershipFilter {
    /// Positions in `read_columns` of the probe keys, in key order.
    columns: Vec<usize>,
    source: Arc<dyn KeyRangeSource>,
}

/// The runtime filters the planner added to a scan.
#[derive(Default)]
struct RuntimeFilters {
    ranges: Vec<RuntimeFilter>,
    members: Vec<MembershipFilter>,
}

impl RuntimeFilters {
    fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.members.is_empty()
    }
}

/// Rows a membership test looks at before deciding whether it pays.
const MEMBERSHIP_SAMPLE_ROWS: u64 = 1 << 16;

/// One execution's counters of a membership test.
#[derive(Default)]
struct MembershipCounters {
    tested: AtomicU64,
    passed: AtomicU64,
    /// Set when the test kept almost every row of its sample.
    disabled: AtomicBool,
}

/// One conjunct of a scan's filter.
pub struct ScanConjunct {
    /// Over the read columns.
    pub expr: ExprRef,
    /// For a conjunct on one or two string columns: their positions in the read columns
    /// and the conjunct over a chunk of those columns alone.
    pub dictionary: Option<(Vec<usize>, ExprRef)>,
    /// For a conjunct `column <op> constant` on an integer, decimal or date column: the
    /// range of physical values it keeps (NULLs never pass), tested on packed codes.
    pub range: Option<ValueRange>,
    /// Positions (in the read columns) of the columns it reads: the packed ones are
    /// decoded for it.
    pub columns: Vec<usize>,
}

/// One vector's read columns: plain stripes sliced (zero-copy), packed ones decoded only
/// when a conjunct, a runtime filter or the output reads them.
struct VectorColumns<'a> {
    stripes: &'a [StripeValues],
    /// Per packed read column, a vector of NULLs standing in for it in chunks whose
    /// conjuncts do not read it (made once per block).
    stand_ins: &'a [OnceCell<Vector>],
    vector_size: usize,
    offset: usize,
    len: usize,
    decoded: Vec<Option<Vector>>,
}

impl<'a> VectorColumns<'a> {
    fn new(stripes: &'a [StripeValues], stand_ins: &'a [OnceCell<Vector>], vector_size: usize, offset: usize, len: usize) -> Self {
        VectorColumns { stripes, stand_ins, vector_size, offset, len, decoded: vec![None; stripes.len()] }
    }

    fn column(&mut self, position: usize) -> &Vector {
        let (stripes, offset, len) = (self.stripes, self.offset, self.len);
        self.decoded[position].get_or_insert_with(|| stripes[position].range(offset, len))
    }

    /// A chunk of all read columns in which those at `needed` hold their values.
    fn chunk(&mut self, needed: &[usize]) -> DataChunk {
        for &position in needed {
            self.column(position);
        }
        let columns = (0..self.stripes.len())
            .map(|position| match (&self.decoded[position], &self.stripes[position]) {
                (Some(vector), _) => vector.clone(),
                (None, plain @ StripeValues::Plain(_)) => plain.range(self.offset, self.len),
                (None, _) => self.stand_in(position, self.len),
            })
            .collect();
        DataChunk::new(columns, self.len)
    }

    /// `len` NULLs standing in for the read column at `position` in a chunk whose
    /// conjunct does not read it.
    fn stand_in(&self, position: usize, len: usize) -> Vector {
        let stripe = &self.stripes[position];
        // Wide enough for every vector of the block: no vector is longer than the stripe
        // or than the vector size (which `self.len` is, or the block's tail).
        let width = self.len.max(stripe.len().min(self.vector_size));
        self.stand_ins[position].get_or_init(|| Vector::nulls(stripe.data_type(), width)).slice(0, len)
    }

    /// A chunk of `rows.len()` rows in which the read columns at `needed` hold the values
    /// of `rows` (positions in this vector), decoded for those rows only: for a conjunct
    /// over a sparse selection, where decoding the whole vector would decode mostly rows
    /// that are already dropped.
    fn gathered(&self, needed: &[usize], rows: &[u32]) -> DataChunk {
        let in_block: Vec<u32> = rows.iter().map(|&r| r + self.offset as u32).collect();
        let columns = (0..self.stripes.len())
            .map(|position| match &self.decoded[position] {
                _ if !needed.contains(&position) => self.stand_in(position, rows.len()),
                Some(vector) => vector.gather(rows),
                None => self.stripes[position].gather(&in_block),
            })
            .collect();
        DataChunk::new(columns, rows.len())
    }

    /// A chunk of the columns at `output`.
    fn output(&mut self, output: &[usize]) -> DataChunk {
        if output.is_empty() {
            return DataChunk::empty_columns(self.len);
        }
        let columns = output.iter().map(|&position| self.column(position).clone()).collect();
        DataChunk::new(columns, self.len)
    }
}

/// The non-NULL values `v` of a read column with `lower <= v <= upper` (physical values;
/// bounds inclusive when flagged, `None` unbounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueRange {
    pub position: usize,
    pub lower: Option<(i128, bool)>,
    pub upper: Option<(i128, bool)>,
}

pub struct TableScan {
    pub label: String,
    /// The table; each execution reads the snapshot it took when it started.
    table: Arc<Table>,
    /// Table column index of each column read; chunks have them in this order.
    read_columns: Vec<usize>,
    /// The conjunction of `conjuncts` (blocks without dictionary codes use it).
    filter: Option<ExprRef>,
    /// Positions of the columns `filter` reads.
    filter_columns: Vec<usize>,
    conjuncts: Vec<ScanConjunct>,
    zone_predicates: Vec<ZonePredicate>,
    /// Positions (in `read_columns`) of the columns passed on.
    output: Vec<usize>,
    /// Added by the planner when it plans the joins this scan's rows probe.
    runtime_filters: RwLock<RuntimeFilters>,
    slot: StateSlot,
}

/// One execution's view of the table and its counters.
struct ScanGlobal {
    table: Arc<Table>,
    data: Arc<TableData>,
    /// Whether the scan shares its reads with other scans of the table (`shared_scans`);
    /// known when its work orders are fixed.
    shared: OnceLock<bool>,
    /// Whether the scan is counted in the table's running scans: from when its work
    /// orders are fixed until all of them ran (or the execution ends, after a LIMIT).
    running: AtomicBool,
    /// Work orders (morsels) that ran.
    morsels_done: AtomicUsize,
    /// The work orders, fixed once (when the pipeline starts, or when a progress report
    /// asks first): every work order of the execution must use the same ranges.
    morsels: OnceLock<ScanMorsels>,
    blocks_skipped: AtomicU64,
    /// The rows an index chose (its name, and their blocks and positions), when the
    /// filter fixes an index's key: only the vectors holding them are scanned.
    index_rows: Option<(String, Vec<(u32, u32)>)>,
    /// Blocks filtered through dictionary codes.
    blocks_on_codes: AtomicU64,
    /// The runtime filters' ranges, read once from the finished builds: (position in
    /// `read_columns`, range).
    runtime_ranges: OnceLock<Vec<RuntimeRange>>,
    /// Per membership filter: its counters.
    membership: OnceLock<Vec<MembershipCounters>>,
    /// Blocks skipped and rows dropped by runtime filters.
    runtime_blocks_skipped: AtomicU64,
    runtime_rows_dropped: AtomicU64,
}

/// A runtime filter's range in one execution.
#[derive(Clone, Copy)]
struct RuntimeRange {
    /// Position in `read_columns`.
    column: usize,
    range: KeyRange,
    /// See [`RuntimeFilter::test_rows`].
    test_rows: bool,
}

/// A scan's work orders: ranges of at most `rows` rows of one block.
struct ScanMorsels {
    rows: usize,
    /// Per work order: the block and the first row of its range.
    starts: Vec<(u32, u32)>,
}

impl ScanGlobal {
    /// The work orders, cut at `morsel_rows` rows the first time they are asked for. A
    /// shared scan starts at the block other running scans of the table read next.
    fn morsels(&self, ctx: &ExecContext) -> &ScanMorsels {
        self.morsels.get_or_init(|| {
            if let Some((_, chosen)) = &self.index_rows {
                // One work order per vector holding a chosen row.
                let rows = ctx.config.vector_size.max(1);
                let mut starts: Vec<(u32, u32)> = chosen.iter().map(|&(block, row)| (block, row - row % rows as u32)).collect();
                starts.dedup();
                return ScanMorsels { rows, starts };
            }
            let rows = ctx.morsel_rows.max(1);
            let blocks = self.data.blocks.len();
            let shared = *self.shared.get_or_init(|| ctx.config.shared_scans);
            let first_block = if shared {
                self.running.store(true, Ordering::Relaxed);
                self.table.scan_position.start(blocks)
            } else {
                0
            };
            let mut starts = Vec::new();
            for index in (first_block..blocks).chain(0..first_block) {
                let block = &self.data.blocks[index];
                let mut start = 0;
                while start < block.row_count.max(1) {
                    starts.push((index as u32, start as u32));
                    start = start.saturating_add(rows);
                }
            }
            ScanMorsels { rows, starts }
        })
    }

    /// The scan no longer counts among the table's running scans.
    fn stop_running(&self) {
        if self.running.swap(false, Ordering::Relaxed) {
            self.table.scan_position.finish();
        }
    }
}

impl Drop for ScanGlobal {
    fn drop(&mut self) {
        self.stop_running();
    }
}

impl Stateful for TableScan {
    fn new_state(&self) -> Result<GlobalState> {
        let data = self.table.snapshot();
        let index_rows = self.index_rows(&data)?;
        Ok(Box::new(ScanGlobal {
            table: Arc::clone(&self.table),
            // A scan of a few blocks an index chose does not join others.
            shared: if index_rows.is_some() { OnceLock::from(false) } else { OnceLock::new() },
            running: AtomicBool::new(false),
            morsels_done: AtomicUsize::new(0),
            data,
            morsels: OnceLock::new(),
            blocks_skipped: AtomicU64::new(0),
            index_rows,
            blocks_on_codes: AtomicU64::new(0),
            runtime_ranges: OnceLock::new(),
            membership: OnceLock::new(),
            runtime_blocks_skipped: AtomicU64::new(0),
            runtime_rows_dropped: AtomicU64::new(0),
        }))
    }
}

/// Most combinations of dictionary values a conjunct on two columns is evaluated on
/// (TPC-DS Q91's `(marital = 'M' AND education = 'Unknown') OR (...)`: 5 x 7).
const MAX_CODE_COMBINATIONS: usize = 4096;

/// A conjunct evaluated on a block's dictionaries: the combinations of codes whose values
/// pass, indexed by the codes in mixed radix (the first column's code most significant).
struct CodeFilter {
    dictionaries: Vec<Arc<Dictionary>>,
    keep: Vec<bool>,
}

impl CodeFilter {
    /// The rows among `rows` (of the vector at `offset` in the block) whose codes pass.
    fn select(&self, offset: usize, rows: &[u32]) -> Vec<u32> {
        if let [dictionary] = self.dictionaries.as_slice() {
            return dictionary.select(&self.keep, offset, rows);
        }
        let mut index = vec![0u32; rows.len()];
        for dictionary in &self.dictionaries {
            dictionary.accumulate_codes(offset, rows, &mut index);
        }
        let mut kept = vec![0u32; rows.len()];
        let mut count = 0;
        for (&row, &i) in rows.iter().zip(&index) {
            kept[count] = row;
            count += self.keep[i as usize] as usize;
        }
        kept.truncate(count);
        kept
    }
}

/// How a block's rows are filtered.
enum BlockFilter<'a> {
    None,
    /// The whole filter, evaluated on the values.
    Values(&'a ExprRef),
    /// Conjuncts on packed codes (`ranges`: read column position and codes `lo..=hi`),
    /// then on dictionary codes, then the others on the values.
    Codes {
        ranges: Vec<(usize, u32, u32)>,
        codes: Vec<CodeFilter>,
        rest: Vec<&'a ScanConjunct>,
    },
}

impl TableScan {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        label: String,
        table: Arc<Table>,
        read_columns: Vec<usize>,
        filter: Option<ExprRef>,
        conjuncts: Vec<ScanConjunct>,
        zone_predicates: Vec<ZonePredicate>,
        output: Vec<usize>,
        slot: StateSlot,
    ) -> Self {
        let mut filter_columns: Vec<usize> = conjuncts.iter().flat_map(|c| c.columns.iter().copied()).collect();
        filter_columns.sort_unstable();
        filter_columns.dedup();
        TableScan {
            label,
            table,
            read_columns,
            filter,
            filter_columns,
            conjuncts,
            zone_predicates,
            output,
            runtime_filters: RwLock::default(),
            slot,
        }
    }

    /// The rows of `data` an index of the table says may be the ones the filter wants,
    /// when the filter fixes every column of one (`c = literal`): the index with the
    /// fewest. `None`: every block is scanned.
    fn index_rows(&self, data: &TableData) -> Result<Option<(String, Vec<(u32, u32)>)>> {
        let mut best: Option<(String, Vec<(u32, u32)>)> = None;
        for index in self.table.all_indexes() {
            let mut key = Vec::with_capacity(index.definition.columns.len());
            for &column in &index.definition.columns {
                let fixed = self.zone_predicates.iter().find_map(|p| match (&p.lower, &p.upper) {
                    (Some((low, true)), Some((high, true))) if p.column == column && low == high => Some(low),
                    _ => None,
                });
                let Some(value) = fixed else { break };
                let data_type = self.table.schema.fields[column].data_type;
                let Ok(value) = value.cast_to(&data_type) else { break };
                key.push(Vector::from_scalar(&value, data_type, 1));
            }
            if key.len() < index.definition.columns.len() {
                continue;
            }
            // (An index that would not fit the memory budget is not used.)
            let Some(rows) = index.candidate_rows(data, &key, self.table.memory())? else { continue };
            if best.as_ref().is_none_or(|(_, fewest)| rows.len() < fewest.len()) {
                best = Some((index.definition.name.clone(), rows));
            }
        }
        // A key held by many rows is read faster by the whole scan.
        Ok(best.filter(|(_, rows)| rows.len().saturating_mul(64) <= data.stored_rows().max(64)))
    }

    /// Filters rows by the range of build key `key` of `source` (an integer column) on the
    /// column at `position` of the read columns: skips the blocks outside it and, with
    /// `test_rows`, drops the rows outside it.
    pub fn add_range_filter(&self, position: usize, source: Arc<dyn KeyRangeSource>, key: usize, test_rows: bool) {
        let filter = RuntimeFilter { column: position, source, key, test_rows };
        self.runtime_filters.write().unwrap_or_else(|e| e.into_inner()).ranges.push(filter);
    }

    /// Filters rows by whether their keys (the columns at `positions` of the read
    /// columns, in the join's key order) are among the build keys of `source`. Returns
    /// whether the source can test them.
    pub fn add_membership_filter(&self, positions: Vec<usize>, source: Arc<dyn KeyRangeSource>) -> bool {
        if !source.tests_membership() {
            return false;
        }
        self.runtime_filters.write().unwrap_or_else(|e| e.into_inner()).members.push(MembershipFilter { columns: positions, source });
        true
    }

    /// Drops the rows whose keys no build holds, by the membership tests that still pay.
    fn select_members(
        &self,
        global: &ScanGlobal,
        columns: &mut VectorColumns<'_>,
        selected: Option<Vec<u32>>,
        ctx: &ExecContext,
    ) -> Option<Vec<u32>> {
        let filters = self.runtime_filters.read().unwrap_or_else(|e| e.into_inner());
        let counters = global.membership.get_or_init(|| filters.members.iter().map(|_| MembershipCounters::default()).collect());
        let mut selected = selected;
        for (filter, counters) in filters.members.iter().zip(counters) {
            if counters.disabled.load(Ordering::Relaxed) {
                continue;
            }
            let rows = selected.take().unwrap_or_else(|| (0..columns.len as u32).collect());
            let before = rows.len() as u64;
            let keys: Vec<Vector> = filter.columns.iter().map(|&position| columns.column(position).clone()).collect();
            let kept = filter.source.select_members(&keys, rows, ctx);
            let tested = counters.tested.fetch_add(before, Ordering::Relaxed) + before;
            let passed = counters.passed.fetch_add(kept.len() as u64, Ordering::Relaxed) + kept.len() as u64;
            global.runtime_rows_dropped.fetch_add(before - kept.len() as u64, Ordering::Relaxed);
            if tested >= MEMBERSHIP_SAMPLE_ROWS && passed * 10 > tested * 9 {
                counters.disabled.store(true, Ordering::Relaxed);
            }
            selected = Some(kept);
        }
        selected
    }

    /// This execution's runtime ranges (read from the builds the first time).
    fn runtime_ranges<'a>(&self, global: &'a ScanGlobal, ctx: &ExecContext) -> &'a [RuntimeRange] {
        global.runtime_ranges.get_or_init(|| {
            let filters = self.runtime_filters.read().unwrap_or_else(|e| e.into_inner());
            filters
                .ranges
                .iter()
                .filter_map(|f| {
                    f.source.key_range(f.key, ctx).map(|range| RuntimeRange { column: f.column, range, test_rows: f.test_rows })
                })
                .collect()
        })
    }

    /// Chooses how to filter a block: range conjuncts on packed columns become ranges of
    /// codes (`code_predicates`), and conjuncts on a dictionary-coded column are evaluated
    /// once per distinct value (micro-specialisation to the block's values). `None` when
    /// no row of the block can pass.
    fn block_filter<'a>(
        &'a self,
        dictionaries: &[Option<Arc<Dictionary>>],
        stripes: &[StripeValues],
        code_predicates: bool,
    ) -> Result<Option<BlockFilter<'a>>> {
        let Some(filter) = &self.filter else { return Ok(Some(BlockFilter::None)) };
        let coded =
            |c: &ScanConjunct| c.dictionary.as_ref().is_some_and(|(positions, _)| positions.iter().all(|p| dictionaries[*p].is_some()));
        let packed = |c: &ScanConjunct| match (&c.range, code_predicates) {
            (Some(range), true) => match &stripes[range.position] {
                StripeValues::Ints(packed) => Some((range.position, packed.code_range(range.lower, range.upper))),
                _ => None,
            },
            _ => None,
        };
        if !self.conjuncts.iter().any(|c| coded(c) || packed(c).is_some()) {
            return Ok(Some(BlockFilter::Values(filter)));
        }
        let mut ranges: Vec<(usize, u32, u32)> = Vec::new();
        let mut codes = Vec::new();
        let mut rest = Vec::new();
        for conjunct in &self.conjuncts {
            if let Some((position, range)) = packed(conjunct) {
                let (lo, hi) = match range {
                    CodeRange::Empty => return Ok(None),
                    CodeRange::All => continue,
                    CodeRange::Within(lo, hi) => (lo, hi),
                };
                // Ranges on one column intersect (`x >= a AND x < b` tests its codes once).
                match ranges.iter_mut().find(|(p, _, _)| *p == position) {
                    Some(existing) => {
                        (existing.1, existing.2) = (existing.1.max(lo), existing.2.min(hi));
                        if existing.1 > existing.2 {
                            return Ok(None);
                        }
                    }
                    None => ranges.push((position, lo, hi)),
                }
                continue;
            }
            let Some((positions, alone)) = conjunct.dictionary.as_ref().filter(|_| coded(conjunct)) else {
                rest.push(conjunct);
                continue;
            };
            let own: Vec<Arc<Dictionary>> = positions.iter().map(|p| dictionaries[*p].clone().expect("checked by coded")).collect();
            let sizes: Vec<usize> = own.iter().map(|d| d.values.len()).collect();
            let combinations: usize = sizes.iter().product();
            if combinations > MAX_CODE_COMBINATIONS {
                rest.push(conjunct);
                continue;
            }
            // Every combination of the dictionaries' values, in the order of their index.
            let columns: Vec<Vector> = own
                .iter()
                .enumerate()
                .map(|(k, d)| {
                    let stride: usize = sizes[k + 1..].iter().product();
                    let codes: Vec<u32> = (0..combinations).map(|i| ((i / stride) % sizes[k]) as u32).collect();
                    d.values.gather(&codes)
                })
                .collect();
            let all: Vec<u32> = (0..combinations as u32).collect();
            // A value the block holds may fail the conjunct with an error (a failed cast)
            // where row by row an earlier conjunct would have removed its rows first: then
            // the conjunct runs on the rows, as without codes.
            let Ok(passing) = alone.select(&DataChunk::new(columns, combinations), &all) else {
                rest.push(conjunct);
                continue;
            };
            if passing.is_empty() {
                return Ok(None);
            }
            if passing.len() < combinations {
                let mut keep = vec![false; combinations];
                passing.iter().for_each(|&code| keep[code as usize] = true);
                codes.push(CodeFilter { dictionaries: own, keep });
            }
        }
        Ok(Some(BlockFilter::Codes { ranges, codes, rest }))
    }
}

/// A vector whose survivors are fewer than 1/this of its rows goes through the stage buffer.
const STAGE_DENSITY_DIVISOR: usize = 2;

/// A conjunct that runs after earlier ones kept fewer than one row in this many of a
/// vector reads its columns' values for the kept rows only (gathered and decoded per row)
/// instead of decoding the whole vector: TPC-H Q12's date comparisons run on the 4% of
/// lineitem the code filters keep.
const SPARSE_CONJUNCT_DIVISOR: usize = 8;

impl TableScan {
    /// Emits the staged row ids of the block (whose read columns are `stripes`) as one
    /// dense chunk of the output columns.
    fn flush_stage(&self, stripes: &[StripeValues], stage: &mut Vec<u32>, emit: &mut Emit) -> Result<Control> {
        if stage.is_empty() {
            return Ok(Control::Continue);
        }
        let columns: Vec<_> = self.output.iter().map(|&i| stripes[i].gather(stage)).collect();
        let len = stage.len();
        stage.clear();
        let chunk = if columns.is_empty() { DataChunk::empty_columns(len) } else { DataChunk::new(columns, len) };
        emit(chunk)
    }
}

impl Source for TableScan {
    fn name(&self) -> String {
        format!("Scan {}", self.label)
    }

    fn morsels(&self, ctx: &ExecContext) -> Result<usize> {
        Ok(ctx.global::<ScanGlobal>(self.slot)?.morsels(ctx).starts.len())
    }

    fn morsels_ahead(&self, ctx: &ExecContext) -> Option<usize> {
        self.morsels(ctx).ok()
    }

    fn shared_range(&self, morsel: usize, ctx: &ExecContext) -> Option<SharedRange> {
        let global = ctx.global::<ScanGlobal>(self.slot).ok()?;
        if global.shared.get() != Some(&true) {
            return None;
        }
        let morsels = global.morsels.get()?;
        let &(block, first_row) = morsels.starts.get(morsel)?;
        Some(SharedRange { snapshot: Arc::as_ptr(&global.data) as usize, block, first_row, rows: morsels.rows })
    }

    fn handed_out(&self, last: usize, ctx: &ExecContext) {
        let Some(range) = self.shared_range(last, ctx) else { return };
        self.table.scan_position.handed_out(range.block as usize);
    }

    fn ends_stage(&self, staging: bool) -> bool {
        staging && (self.filter.is_some() || !self.runtime_filters.read().unwrap_or_else(|e| e.into_inner()).is_empty())
    }

    fn analyze_details(&self, state: &ExecutionState) -> Option<String> {
        let global = state.get::<ScanGlobal>(self.slot).ok()?;
        let skipped = global.blocks_skipped.load(Ordering::Relaxed);
        let on_codes = global.blocks_on_codes.load(Ordering::Relaxed);
        let mut details = Vec::new();
        if let Some((name, rows)) = &global.index_rows {
            details.push(format!("index {name}: {} candidate rows", rows.len()));
        }
        if skipped + on_codes > 0 {
            details.push(format!("{} blocks: {skipped} skipped, {on_codes} filtered on codes", global.data.blocks.len()));
        }
        if let Some(ranges) = global.runtime_ranges.get().filter(|r| !r.is_empty()) {
            let shown: Vec<String> = ranges
                .iter()
                .map(|r| match r.range {
                    KeyRange::Empty => "no build keys".to_string(),
                    KeyRange::Within(lo, hi) => format!("{lo}..={hi}"),
                })
                .collect();
            details.push(format!(
                "runtime filter [{}]: {} blocks skipped, {} rows dropped",
                shown.join(", "),
                global.runtime_blocks_skipped.load(Ordering::Relaxed),
                global.runtime_rows_dropped.load(Ordering::Relaxed)
            ));
        }
        (!details.is_empty()).then(|| details.join("; "))
    }

    fn produce(&self, morsel: usize, local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        self.produce_run(morsel, 1, local, ctx, emit)
    }

    /// Consecutive work orders of one block are one range of it: scanned as one, as if
    /// the block had not been cut.
    fn produce_run(&self, first: usize, count: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        let global = ctx.global::<ScanGlobal>(self.slot)?;
        let morsels = global.morsels(ctx);
        let end = first.saturating_add(count).min(morsels.starts.len());
        let mut morsel = first;
        while morsel < end {
            let (block_index, first_row) = morsels.starts[morsel];
            let mut last = morsel;
            while last + 1 < end && morsels.starts[last + 1].0 == block_index {
                last += 1;
            }
            morsel = last + 1;
            let Some(block) = global.data.blocks.get(block_index as usize) else { continue };
            let end_row = (morsels.starts[last].1 as usize).saturating_add(morsels.rows).min(block.row_count);
            if self.scan_range(global, block, first_row as usize, end_row, ctx, emit)? == Control::Finished {
                break;
            }
        }
        if global.shared.get() == Some(&true) && global.morsels_done.fetch_add(count, Ordering::Relaxed) + count >= morsels.starts.len() {
            global.stop_running();
        }
        Ok(())
    }
}

impl TableScan {
    /// Scans rows `first_row..end_row` of `block`.
    fn scan_range(
        &self,
        global: &ScanGlobal,
        block: &Block,
        first_row: usize,
        end_row: usize,
        ctx: &ExecContext,
        emit: &mut Emit,
    ) -> Result<Control> {
        // Block counters count each block once (at its first range).
        let count_block = |counter: &AtomicU64| {
            if first_row == 0 {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        };
        for p in &self.zone_predicates {
            let zone = block.column(p.column).zone_map();
            let lower = p.lower.as_ref().map(|(v, inclusive)| (v, *inclusive));
            let upper = p.upper.as_ref().map(|(v, inclusive)| (v, *inclusive));
            if !zone.may_contain_range(lower, upper) {
                count_block(&global.blocks_skipped);
                return Ok(Control::Continue);
            }
        }
        // Runtime filters: skip the block when no value can match; check rows only where
        // the zone map does not show every value inside the range.
        let mut row_ranges: Vec<(usize, i64, i64)> = Vec::new();
        let has_membership = !self.runtime_filters.read().unwrap_or_else(|e| e.into_inner()).members.is_empty();
        for &RuntimeRange { column: position, range, test_rows } in self.runtime_ranges(global, ctx) {
            let zone = block.column(self.read_columns[position]).zone_map();
            let (lo, hi) = match range {
                KeyRange::Empty => {
                    count_block(&global.runtime_blocks_skipped);
                    return Ok(Control::Continue);
                }
                KeyRange::Within(lo, hi) => (lo, hi),
            };
            match (zone.min.as_i128(), zone.max.as_i128()) {
                (Some(min), Some(max)) if max < lo as i128 || min > hi as i128 => {
                    count_block(&global.runtime_blocks_skipped);
                    return Ok(Control::Continue);
                }
                (Some(min), Some(max)) if min >= lo as i128 && max <= hi as i128 && zone.null_count == 0 => {}
                // All NULL: no row can match.
                _ if zone.is_all_null() => {
                    count_block(&global.runtime_blocks_skipped);
                    return Ok(Control::Continue);
                }
                _ if test_rows => row_ranges.push((position, lo, hi)),
                _ => {}
            }
        }
        let vector_size = ctx.config.vector_size;
        // Whole stripes (loaded from the database file if not resident), sliced or decoded
        // per vector, and the dictionaries of the columns conjuncts could use.
        let stripes: Vec<StripeValues> = self.read_columns.iter().map(|&c| block.column(c).values()).collect::<Result<_>>()?;
        let mut dictionaries: Vec<Option<Arc<Dictionary>>> = vec![None; self.read_columns.len()];
        for position in self.conjuncts.iter().filter_map(|c| c.dictionary.as_ref()).flat_map(|(positions, _)| positions) {
            if dictionaries[*position].is_none() {
                dictionaries[*position] = block.column(self.read_columns[*position]).dictionary()?;
            }
        }
        let Some(block_filter) = self.block_filter(&dictionaries, &stripes, ctx.config.code_predicates)? else {
            count_block(&global.blocks_skipped);
            return Ok(Control::Continue);
        };
        let code_tests: Vec<CodeTest<'_>> = match &block_filter {
            BlockFilter::Codes { ranges, codes, .. } => {
                if !ranges.is_empty() || !codes.is_empty() {
                    count_block(&global.blocks_on_codes);
                }
                ranges
                    .iter()
                    .filter_map(|&(position, lo, hi)| match &stripes[position] {
                        StripeValues::Ints(packed) => Some(CodeTest { codes: packed.codes(), lo, hi }),
                        _ => None,
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        // Runtime ranges on packed columns are tested on their codes.
        let mut runtime_codes: Vec<CodeTest<'_>> = Vec::new();
        if ctx.config.code_predicates {
            let mut on_values = Vec::new();
            for (position, lo, hi) in row_ranges.drain(..) {
                let StripeValues::Ints(packed) = &stripes[position] else {
                    on_values.push((position, lo, hi));
                    continue;
                };
                match packed.code_range(Some((lo as i128, true)), Some((hi as i128, true))) {
                    CodeRange::Empty => {
                        count_block(&global.runtime_blocks_skipped);
                        return Ok(Control::Continue);
                    }
                    CodeRange::All => {}
                    CodeRange::Within(lo, hi) => runtime_codes.push(CodeTest { codes: packed.codes(), lo, hi }),
                }
            }
            row_ranges = on_values;
        }
        // Stage boundary (ROF): survivors of a selective filter (or runtime filter) are
        // collected as block row ids until a full vector is ready, then gathered densely;
        // downstream operators get full vectors instead of many sparse ones, and packed
        // columns are decoded for the survivors only.
        let staging =
            ctx.config.staging && (self.filter.is_some() || !self.runtime_filters.read().unwrap_or_else(|e| e.into_inner()).is_empty());
        let stand_ins: Vec<OnceCell<Vector>> = stripes.iter().map(|_| OnceCell::new()).collect();
        let all_rows = |len: usize| (0..len as u32).collect::<Vec<u32>>();
        let mut stage: Vec<u32> = Vec::new();
        let mut offset = first_row;
        while offset < end_row {
            let len = vector_size.min(end_row - offset);
            let mut columns = VectorColumns::new(&stripes, &stand_ins, vector_size, offset, len);
            // Deleted rows leave before any condition on values runs (a division by zero in
            // a deleted row is no error); tests on codes, which cannot fail, run first.
            let deleted = block.has_deleted(offset, len);
            let without_deleted = |rows: Option<Vec<u32>>| match rows {
                _ if !deleted => rows,
                None => block.live_rows(offset, len),
                Some(rows) => Some(block.retain_live(offset, rows)),
            };
            // `None`: every row.
            let mut selected: Option<Vec<u32>> = match &block_filter {
                BlockFilter::None => without_deleted(None),
                BlockFilter::Values(filter) => {
                    let rows = without_deleted(None).unwrap_or_else(|| all_rows(len));
                    Some(filter.select(&columns.chunk(&self.filter_columns), &rows)?)
                }
                BlockFilter::Codes { codes, rest, .. } => {
                    let mut selected = (!code_tests.is_empty()).then(|| select_code_ranges(&code_tests, offset, len, ctx.config.simd));
                    for code in codes {
                        let rows = selected.take().unwrap_or_else(|| all_rows(len));
                        selected = Some(code.select(offset, &rows));
                    }
                    selected = without_deleted(selected);
                    for conjunct in rest {
                        let rows = selected.take().unwrap_or_else(|| all_rows(len));
                        if rows.is_empty() {
                            selected = Some(rows);
                            break;
                        }
                        selected = Some(if rows.len() * SPARSE_CONJUNCT_DIVISOR < len {
                            let compact = columns.gathered(&conjunct.columns, &rows);
                            let kept = conjunct.expr.select(&compact, &all_rows(rows.len()))?;
                            kept.iter().map(|&k| rows[k as usize]).collect()
                        } else {
                            conjunct.expr.select(&columns.chunk(&conjunct.columns), &rows)?
                        });
                    }
                    selected
                }
            };
            if !runtime_codes.is_empty() {
                let before = selected.as_ref().map_or(len, Vec::len);
                let kept = match selected.take() {
                    None => select_code_ranges(&runtime_codes, offset, len, ctx.config.simd),
                    Some(rows) => retain_code_ranges(&runtime_codes, offset, rows),
                };
                global.runtime_rows_dropped.fetch_add((before - kept.len()) as u64, Ordering::Relaxed);
                selected = Some(kept);
            }
            for &(position, lo, hi) in &row_ranges {
                let before = selected.as_ref().map_or(len, Vec::len);
                let kept = select_in_range(columns.column(position), selected.take(), len, lo, hi);
                global.runtime_rows_dropped.fetch_add((before - kept.len()) as u64, Ordering::Relaxed);
                selected = Some(kept);
            }
            if has_membership {
                selected = self.select_members(global, &mut columns, selected, ctx);
            }
            if let Some(selected) = &selected {
                if staging && selected.len() * STAGE_DENSITY_DIVISOR < len {
                    stage.extend(selected.iter().map(|&r| r + offset as u32));
                    offset += len;
                    if stage.len() >= vector_size && self.flush_stage(&stripes, &mut stage, emit)? == Control::Finished {
                        return Ok(Control::Finished);
                    }
                    continue;
                }
                if selected.is_empty() {
                    offset += len;
                    continue;
                }
                // Dense survivors pass through with a selection vector (no copy), after
                // whatever the stage holds, so rows stay in order.
                if self.flush_stage(&stripes, &mut stage, emit)? == Control::Finished {
                    return Ok(Control::Finished);
                }
            }
            let mut output = columns.output(&self.output);
            if let Some(selected) = selected.filter(|s| s.len() < len) {
                output.set_selection(Some(selected));
            }
            offset += len;
            if emit(output)? == Control::Finished {
                return Ok(Control::Finished);
            }
        }
        self.flush_stage(&stripes, &mut stage, emit)
    }
}

/// The rows of `column` (among `selected`, or all `len` rows) whose value is not NULL and
/// lies in `lo..=hi`: branch-free over the integer values.
fn select_in_range(column: &Vector, selected: Option<Vec<u32>>, len: usize, lo: i64, hi: i64) -> Vec<u32> {
    /// Compacts in place: each row is written, and the write position advances only when
    /// the value is inside (and not NULL): no branch per row.
    fn keep<T: Copy>(values: &[T], validity: Option<&Bitmap>, mut rows: Vec<u32>, lo: i64, hi: i64, to_i64: impl Fn(T) -> i64) -> Vec<u32> {
        let mut kept = 0;
        match validity {
            None => {
                for i in 0..rows.len() {
                    let r = rows[i];
                    let v = to_i64(values[r as usize]);
                    rows[kept] = r;
                    kept += usize::from((v >= lo) & (v <= hi));
                }
            }
            Some(validity) => {
                for i in 0..rows.len() {
                    let r = rows[i];
                    let v = to_i64(values[r as usize]);
                    rows[kept] = r;
                    kept += usize::from((v >= lo) & (v <= hi) & validity.get(r as usize));
                }
            }
        }
        rows.truncate(kept);
        rows
    }
    let rows = selected.unwrap_or_else(|| (0..len as u32).collect());
    let validity = column.validity.as_ref();
    match &column.data {
        VectorData::I16(v) => keep(v, validity, rows, lo, hi, i64::from),
        VectorData::I32(v) => keep(v, validity, rows, lo, hi, i64::from),
        VectorData::I64(v) => keep(v, validity, rows, lo, hi, |x| x),
        _ => {
            let mut rows = rows;
            if let Some(validity) = validity {
                rows.retain(|&r| validity.get(r as usize));
            }
            rows
        }
    }
}
