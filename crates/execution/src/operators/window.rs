//! Window functions: a sink that collects the input's rows, and a source that emits them
//! with one more column per window call.
//!
//! For each distinct (PARTITION BY, ORDER BY) of the calls, the rows are ordered once by
//! their encoded partition and order keys (`memcmp`-comparable bytes, as ORDER BY uses),
//! which gives partitions and peer groups as runs. Each call is then computed over the
//! ordered rows in O(n log n) at worst, never rescanning a frame per row:
//! * ranking functions and `lag`/`lead` from positions in the partition;
//! * `count` and integer or decimal `sum`/`avg` over a frame from prefix sums (exact);
//! * double sums, `min`/`max`/`bool_and`/`bool_or`/`any_value` and the variance family
//!   (`stddev*`, `var*`: nodes hold count, mean and squared deviations) from segment
//!   trees (a frame is O(log n) nodes), min and max comparing the argument's encoded sort
//!   keys so that one tree serves every type;
//! * `first_value`/`last_value`/`nth_value` (also IGNORE NULLS) from the frame's edges and
//!   prefix counts of non-NULL values;
//! * every other aggregate (DISTINCT, ORDER BY inside, string_agg, median, corr, ...)
//!   with the grouping states of GROUP BY: one group per partition when every frame is
//!   the whole partition (O(n)), else one group per row fed its frame's rows (O(frame)
//!   per row, bounded by [`MAX_FRAME_VISITS`]).
//!
//! `count`/`sum`/`avg(DISTINCT x)` over frames that start at the partition's start (ORDER
//! BY's running frames) stay on the prefix sums, counting each value at its first
//! position in the partition.
//!
//! `EXCLUDE CURRENT ROW | GROUP | TIES` cuts a frame into at most three runs of
//! positions ([`Pieces`]); prefix sums and segment trees answer each run.
//!
//! Results are written back in the input's row order and gathered from the argument
//! columns where they are values of the input (lag, min, first_value, ...), so no row goes
//! through a dynamically typed value.
//!
//! Parallelism: when every call partitions by some common columns, the rows are split by
//! the hash of those columns into buckets that finalize tasks compute independently (a
//! partition never spans two buckets), so all workers order and compute.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use apiary_common::{exec_err, Bitmap, Result};
use apiary_sql::window::{FrameExclude, FrameUnits, WindowFunction};
use apiary_sql::AggregateFunction;
use apiary_types::datatype::PhysicalType;
use apiary_types::decimal::{decimal_average, POW10};
use apiary_types::{ChunkBuilder, DataChunk, DataType, ScalarValue, Vector, VectorData};

use super::aggregate_functions::AggregateSpec;
use super::sort::{emit_result_chunk, encode_sort_keys, CollectedRows, SortOrder};
use super::{local, Control, Emit, ExecContext, GlobalState, LocalState, Sink, Source, StateSlot, Stateful};
use crate::expr::{BuildBytesHasher, ExprRef};
use crate::hash::keys::KeyPacker;

/// Inputs of at least this many rows are split into [`WINDOW_BUCKETS`] buckets when the
/// calls share partition columns.
const PARALLEL_WINDOW_MIN_ROWS: usize = 1 << 13;
/// Buckets of a split input: enough for every worker to take several.
const WINDOW_BUCKETS: usize = 32;
/// The most frame rows the per-row fallback for aggregates without a sliding
/// implementation visits in one bucket, beyond which the query fails instead of running
/// for hours (a running `median` over a million-row partition would visit 5 * 10^11).
const MAX_FRAME_VISITS: u64 = 1 << 30;
/// Rows handed to an aggregate state per update call in the fallback.
const UPDATE_BATCH: usize = 1 << 16;

/// A frame edge with its offset evaluated.
#[derive(Debug, Clone)]
pub enum Bound {
    UnboundedPreceding,
    Preceding(ScalarValue),
    CurrentRow,
    Following(ScalarValue),
    UnboundedFollowing,
}

/// One call, its expressions as positions among the stored columns (the input's, then
/// the evaluated expressions).
#[derive(Debug, Clone)]
pub struct WindowCallPlan {
    pub func: WindowFunction,
    pub args: Vec<usize>,
    pub filter: Option<usize>,
    pub ignore_nulls: bool,
    pub partition: Vec<usize>,
    pub order: Vec<(usize, SortOrder)>,
    pub units: FrameUnits,
    pub start: Bound,
    pub end: Bound,
    pub exclude: FrameExclude,
    /// An aggregate's spec, for the aggregates computed with their grouping states
    /// (DISTINCT, ORDER BY inside, and those without a sliding implementation here).
    pub aggregate: Option<AggregateSpec>,
    pub data_type: DataType,
}

pub struct Window {
    /// Expressions evaluated on each input chunk, stored after its columns.
    exprs: Vec<ExprRef>,
    /// The input's column types (passed on).
    types: Vec<DataType>,
    calls: Vec<WindowCallPlan>,
    vector_size: usize,
    pub description: String,
    slot: StateSlot,
}

#[derive(Default)]
struct WindowGlobal {
    /// The workers' rows, when the calls share no partition column.
    collected: Mutex<Vec<DataChunk>>,
    /// When they do: per bucket, the pieces (columns) each worker split off its rows by
    /// the hash of those columns, in its `combine`, so that the split runs in parallel.
    pieces: Mutex<Vec<Vec<Vec<Vector>>>>,
    /// Between `prepare_finalize` and the tasks: each bucket's rows, in pieces.
    buckets: Mutex<Vec<Option<Vec<Vec<Vector>>>>>,
    /// Each bucket's output chunks, then (after `finish`) all of them.
    bucket_results: Mutex<Vec<Vec<DataChunk>>>,
    result: Mutex<Vec<DataChunk>>,
}

impl Window {
    pub fn new(
        exprs: Vec<ExprRef>,
        types: Vec<DataType>,
        calls: Vec<WindowCallPlan>,
        vector_size: usize,
        description: String,
        slot: StateSlot,
    ) -> Arc<Window> {
        Arc::new(Window { exprs, types, calls, vector_size, description, slot })
    }

    fn global<'a>(&self, ctx: &'a ExecContext) -> Result<&'a WindowGlobal> {
        ctx.global::<WindowGlobal>(self.slot)
    }
}

impl Stateful for Window {
    fn new_state(&self) -> Result<GlobalState> {
        Ok(Box::new(WindowGlobal::default()))
    }
}

pub struct WindowSink(pub Arc<Window>);

impl Sink for WindowSink {
    fn name(&self) -> String {
        format!("Window {}", self.0.description)
    }

    fn local_state(&self) -> LocalState {
        Box::new(CollectedRows::default())
    }

    fn consume(&self, chunk: DataChunk, _order: u64, state: &mut LocalState, _ctx: &ExecContext) -> Result<Control> {
        local::<CollectedRows>(state).push(&chunk, &self.0.exprs)?;
        Ok(Control::Continue)
    }

    fn local_memory(&self, state: &LocalState) -> usize {
        state.downcast_ref::<CollectedRows>().map_or(0, CollectedRows::memory)
    }

    fn combine(&self, state: LocalState, ctx: &ExecContext) -> Result<()> {
        let state = state.downcast::<CollectedRows>().expect("window local state");
        let global = self.0.global(ctx)?;
        match self.0.common_partition() {
            Some(keys) => {
                let pieces = split_by_hash(&state.chunks, &keys);
                let mut all = global.pieces.lock().unwrap_or_else(|e| e.into_inner());
                all.resize_with(WINDOW_BUCKETS, Vec::new);
                for (bucket, piece) in pieces.into_iter().enumerate() {
                    all[bucket].extend(piece);
                }
            }
            None => global.collected.lock().unwrap_or_else(|e| e.into_inner()).extend(state.chunks),
        }
        Ok(())
    }

    fn prepare_finalize(&self, ctx: &ExecContext) -> Result<usize> {
        let window = &self.0;
        let global = window.global(ctx)?;
        let chunks = std::mem::take(&mut *global.collected.lock().unwrap_or_else(|e| e.into_inner()));
        let pieces = std::mem::take(&mut *global.pieces.lock().unwrap_or_else(|e| e.into_inner()));
        let rows = chunks.iter().map(|c| c.row_count()).sum::<usize>() + pieces.iter().flatten().map(|p| piece_rows(p)).sum::<usize>();
        if rows == 0 {
            return Ok(0);
        }
        let mut buckets: Vec<Vec<Vec<Vector>>> =
            pieces.into_iter().map(|b| b.into_iter().filter(|p| piece_rows(p) > 0).collect()).collect();
        buckets.retain(|b: &Vec<Vec<Vector>>| !b.is_empty());
        // Few rows: one bucket (32 tasks of a few rows would cost more than they share).
        if !chunks.is_empty() || rows < PARALLEL_WINDOW_MIN_ROWS {
            let mut one: Vec<Vec<Vector>> = chunks.into_iter().map(|c| c.columns).collect();
            one.extend(buckets.into_iter().flatten());
            buckets = vec![one];
        }
        let count = buckets.len();
        *global.buckets.lock().unwrap_or_else(|e| e.into_inner()) = buckets.into_iter().map(Some).collect();
        *global.bucket_results.lock().unwrap_or_else(|e| e.into_inner()) = vec![Vec::new(); count];
        Ok(count)
    }

    fn finalize_task(&self, task: usize, ctx: &ExecContext) -> Result<()> {
        let window = &self.0;
        let global = window.global(ctx)?;
        let pieces = global.buckets.lock().unwrap_or_else(|e| e.into_inner()).get_mut(task).and_then(Option::take);
        let Some(mut pieces) = pieces else { return Ok(()) };
        let columns = match pieces.len() {
            1 => pieces.pop().unwrap_or_default(),
            _ => {
                let mut all = ChunkBuilder::with_capacity(pieces.iter().map(|p| piece_rows(p)).sum());
                for piece in &pieces {
                    all.append(piece, None, piece_rows(piece));
                }
                all.finish().columns
            }
        };
        let chunks = window.compute_bucket(&columns)?;
        global.bucket_results.lock().unwrap_or_else(|e| e.into_inner())[task] = chunks;
        Ok(())
    }

    fn finish(&self, ctx: &ExecContext) -> Result<()> {
        let global = self.0.global(ctx)?;
        let results = std::mem::take(&mut *global.bucket_results.lock().unwrap_or_else(|e| e.into_inner()));
        *global.result.lock().unwrap_or_else(|e| e.into_inner()) = results.into_iter().flatten().collect();
        Ok(())
    }
}

impl Window {
    /// The stored columns every call partitions by (`None` when some call has no
    /// PARTITION BY, or the calls share no partition column).
    fn common_partition(&self) -> Option<Vec<usize>> {
        let mut common: Vec<usize> = self.calls.first()?.partition.clone();
        for call in &self.calls[1..] {
            common.retain(|c| call.partition.contains(c));
        }
        (!common.is_empty()).then_some(common)
    }

    /// Computes every call over one bucket's rows (whole partitions); returns the output
    /// chunks: the input columns, then one per call.
    fn compute_bucket(&self, columns: &[Vector]) -> Result<Vec<DataChunk>> {
        let rows = columns.first().map_or(0, Vector::len);
        if rows == 0 {
            return Ok(Vec::new());
        }
        let mut output: Vec<Vector> = columns.iter().take(self.types.len()).cloned().collect();
        let mut orders: HashMap<(Vec<usize>, Vec<(usize, bool, bool)>), Arc<Ordered>> = HashMap::new();
        for call in &self.calls {
            let key = (call.partition.clone(), call.order.iter().map(|(c, o)| (*c, o.ascending, o.nulls_first)).collect());
            let ordered = match orders.get(&key) {
                Some(ordered) => Arc::clone(ordered),
                None => {
                    let ordered = Arc::new(Ordered::new(columns, &call.partition, &call.order, rows));
                    orders.insert(key, Arc::clone(&ordered));
                    ordered
                }
            };
            output.push(compute(call, columns, &ordered)?);
        }
        let mut result = Vec::new();
        let mut start = 0;
        while start < rows {
            let len = self.vector_size.max(1).min(rows - start);
            result.push(DataChunk::new(output.iter().map(|c| c.slice(start, len)).collect(), len));
            start += len;
        }
        Ok(result)
    }
}

/// Splits a worker's rows (`chunks`, compacted) into [`WINDOW_BUCKETS`] buckets by the
/// hash of the `keys` columns (NULL a value like any other): rows of one partition land in
/// one bucket, whichever worker holds them. Each bucket's rows become one piece.
fn split_by_hash(chunks: &[DataChunk], keys: &[usize]) -> Vec<Option<Vec<Vector>>> {
    let mut builders: Vec<Option<ChunkBuilder>> = (0..WINDOW_BUCKETS).map(|_| None).collect();
    let bits = WINDOW_BUCKETS.trailing_zeros();
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); WINDOW_BUCKETS];
    // The packing depends on the key types only: every chunk's rows hash alike.
    let Some(first) = chunks.first() else { return vec![None; WINDOW_BUCKETS] };
    let types: Vec<DataType> = keys.iter().map(|&k| first.columns[k].data_type).collect();
    let packer = KeyPacker::new(&types, &vec![true; types.len()], true);
    for chunk in chunks {
        let rows = chunk.row_count();
        if rows == 0 {
            continue;
        }
        let key_columns: Vec<Vector> = keys.iter().map(|&k| chunk.columns[k].clone()).collect();
        let all: Vec<u32> = (0..rows as u32).collect();
        let hashes = packer.pack(&key_columns, &all).hashes();
        members.iter_mut().for_each(Vec::clear);
        for (row, hash) in hashes.iter().enumerate() {
            members[(hash >> (64 - bits)) as usize].push(row as u32);
        }
        for (bucket, rows) in members.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
            builders[bucket].get_or_insert_with(|| ChunkBuilder::with_capacity(0)).append(&chunk.columns, Some(rows), rows.len());
        }
    }
    builders.into_iter().map(|b| b.map(|b| b.finish().columns)).collect()
}

/// Rows in a piece of a bucket (its columns).
fn piece_rows(piece: &[Vector]) -> usize {
    piece.first().map_or(0, Vector::len)
}

/// The source half: one morsel per output chunk.
pub struct WindowSource(pub Arc<Window>);

impl Source for WindowSource {
    fn name(&self) -> String {
        format!("WindowScan {}", self.0.description)
    }

    fn morsels(&self, ctx: &ExecContext) -> Result<usize> {
        Ok(self.0.global(ctx)?.result.lock().unwrap_or_else(|e| e.into_inner()).len())
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        emit_result_chunk(&self.0.global(ctx)?.result, morsel, emit)
    }
}

/// The rows in (partition, order) order, with the runs of partitions and peers.
struct Ordered {
    /// Row (of the input) at each position.
    rows: Vec<u32>,
    /// Per position: the partition's first position and one past its last.
    partition_start: Vec<u32>,
    partition_end: Vec<u32>,
    /// Per position: its peer group's first position and one past its last.
    peer_start: Vec<u32>,
    peer_end: Vec<u32>,
    /// Per position: its peer group's number (counted over all partitions).
    group: Vec<u32>,
    /// Per peer group: its first position.
    group_starts: Vec<u32>,
}

impl Ordered {
    fn new(columns: &[Vector], partition: &[usize], order: &[(usize, SortOrder)], rows: usize) -> Ordered {
        let encode = |keys: Vec<(&Vector, SortOrder)>| {
            let (cols, orders): (Vec<Vector>, Vec<SortOrder>) = keys.into_iter().map(|(c, o)| (c.clone(), o)).unzip();
            encode_sort_keys(&cols, &orders, rows)
        };
        let partition_order = SortOrder { ascending: true, nulls_first: false };
        let (pkeys, poff) = encode(partition.iter().map(|&c| (&columns[c], partition_order)).collect());
        let (okeys, ooff) = encode(order.iter().map(|(c, o)| (&columns[*c], *o)).collect());
        let pkey = |i: u32| &pkeys[poff[i as usize] as usize..poff[i as usize + 1] as usize];
        let okey = |i: u32| &okeys[ooff[i as usize] as usize..ooff[i as usize + 1] as usize];
        // Sort (key prefix, row) pairs: the first 16 bytes of the partition and order
        // keys as one big-endian integer decide most comparisons without touching the
        // key buffers (whole keys when they fit, as for integer and date keys); only rows
        // whose prefixes tie compare the rest of their keys.
        let prefix = |i: u32| {
            let mut bytes = [0u8; 16];
            let (p, o) = (pkey(i), okey(i));
            let from_p = p.len().min(16);
            bytes[..from_p].copy_from_slice(&p[..from_p]);
            let from_o = o.len().min(16 - from_p);
            bytes[from_p..from_p + from_o].copy_from_slice(&o[..from_o]);
            u128::from_be_bytes(bytes)
        };
        let fits = (0..rows as u32).all(|i| pkey(i).len() + okey(i).len() <= 16);
        // Whether every partition key has the same length (fixed-width keys): then the
        // prefix's first bytes are the partition key.
        let partition_width = pkey(0).len();
        let fixed_partition = fits && (0..rows as u32).all(|i| pkey(i).len() == partition_width);
        let keyed: Vec<(u128, u32)>;
        let same_partition: Box<dyn Fn(&[(u128, u32)], usize, usize) -> bool>;
        let same_peers: Box<dyn Fn(&[(u128, u32)], usize, usize) -> bool>;
        if fits {
            let mut sorted: Vec<(u128, u32)> = (0..rows as u32).map(|i| (prefix(i), i)).collect();
            sorted.sort_unstable();
            keyed = sorted;
            // Boundaries between neighbours from the prefixes alone: they hold the keys.
            let partition_shift = 8 * (16 - partition_width.min(16)) as u32;
            same_partition = if fixed_partition {
                Box::new(move |k, a, b| {
                    k[a].0.checked_shr(partition_shift).unwrap_or(0) == k[b].0.checked_shr(partition_shift).unwrap_or(0)
                })
            } else {
                Box::new(|k, a, b| pkey(k[a].1) == pkey(k[b].1))
            };
            same_peers = Box::new(|k, a, b| k[a].0 == k[b].0);
        } else {
            // Long partition keys (strings): each partition gets a number, and rows sort by
            // (number, first 12 bytes of the order key), not by comparing partition keys
            // byte by byte (TPC-DS Q57's category, brand and call center tie on their
            // first 16 bytes for whole categories). Partitions come out in the order they
            // first appear, not in key order: a window's output has no order of its own.
            let mut numbers: HashMap<&[u8], u32, BuildBytesHasher> = HashMap::default();
            let partition: Vec<u32> = (0..rows as u32)
                .map(|i| {
                    let next = numbers.len() as u32;
                    *numbers.entry(pkey(i)).or_insert(next)
                })
                .collect();
            let order_fits = (0..rows as u32).all(|i| okey(i).len() <= 12);
            let numbered = |i: u32| {
                let mut bytes = [0u8; 16];
                bytes[..4].copy_from_slice(&partition[i as usize].to_be_bytes());
                let o = okey(i);
                let from_o = o.len().min(12);
                bytes[4..4 + from_o].copy_from_slice(&o[..from_o]);
                u128::from_be_bytes(bytes)
            };
            let mut sorted: Vec<(u128, u32)> = (0..rows as u32).map(|i| (numbered(i), i)).collect();
            if order_fits {
                sorted.sort_unstable();
            } else {
                sorted.sort_unstable_by(|&(pa, a), &(pb, b)| pa.cmp(&pb).then_with(|| okey(a).cmp(okey(b))).then(a.cmp(&b)));
            }
            keyed = sorted;
            same_partition = Box::new(|k, a, b| k[a].0 >> 96 == k[b].0 >> 96);
            same_peers = if order_fits { Box::new(|k, a, b| k[a].0 == k[b].0) } else { Box::new(|k, a, b| okey(k[a].1) == okey(k[b].1)) };
        }
        let same_partition = |a: usize, b: usize| same_partition(&keyed, a, b);
        let same_peers = |a: usize, b: usize| same_peers(&keyed, a, b);
        let n = rows;
        let (mut partition_start, mut partition_end) = (vec![0u32; n], vec![0u32; n]);
        let (mut peer_start, mut peer_end, mut group) = (vec![0u32; n], vec![0u32; n], vec![0u32; n]);
        let mut group_starts = Vec::new();
        let mut p = 0;
        while p < n {
            let mut pe = p + 1;
            while pe < n && same_partition(pe, p) {
                pe += 1;
            }
            let mut g = p;
            while g < pe {
                let mut ge = g + 1;
                while ge < pe && same_peers(ge, g) {
                    ge += 1;
                }
                for pos in g..ge {
                    peer_start[pos] = g as u32;
                    peer_end[pos] = ge as u32;
                    group[pos] = group_starts.len() as u32;
                }
                group_starts.push(g as u32);
                g = ge;
            }
            for pos in p..pe {
                partition_start[pos] = p as u32;
                partition_end[pos] = pe as u32;
            }
            p = pe;
        }
        let sorted: Vec<u32> = keyed.into_iter().map(|(_, i)| i).collect();
        Ordered { rows: sorted, partition_start, partition_end, peer_start, peer_end, group, group_starts }
    }

    fn len(&self) -> usize {
        self.rows.len()
    }
}

/// Per position: which of the call's rows count (its argument not NULL, its FILTER
/// true), or all of them.
fn counted(call: &WindowCallPlan, columns: &[Vector], ordered: &Ordered, skip_nulls: bool) -> Vec<bool> {
    ordered
        .rows
        .iter()
        .map(|&row| {
            let row = row as usize;
            let filter_ok = call.filter.is_none_or(|f| {
                let f = &columns[f];
                f.is_valid(row) && f.values::<bool>()[row]
            });
            filter_ok && (!skip_nulls || call.args.first().is_none_or(|&a| columns[a].is_valid(row)))
        })
        .collect()
}

/// Per position: whether it is counted (argument not NULL, FILTER true) and its value
/// occurs at no earlier counted position of its partition (values compared by their
/// encoded sort keys).
fn first_occurrences(call: &WindowCallPlan, columns: &[Vector], ordered: &Ordered) -> Vec<bool> {
    let n = ordered.len();
    let mut first = counted(call, columns, ordered, true);
    let sorted_arg = columns[call.args[0]].gather(&ordered.rows);
    let (keys, offsets) = encode_sort_keys(&[sorted_arg], &[SortOrder { ascending: true, nulls_first: false }], n);
    let mut seen: std::collections::HashSet<&[u8]> = std::collections::HashSet::new();
    for pos in 0..n {
        if pos == ordered.partition_start[pos] as usize {
            seen.clear();
        }
        if first[pos] {
            first[pos] = seen.insert(&keys[offsets[pos] as usize..offsets[pos + 1] as usize]);
        }
    }
    first
}

/// `prefix[i]` = how many of the first `i` positions are counted.
fn prefix_counts(counted: &[bool]) -> Vec<u32> {
    let mut prefix = Vec::with_capacity(counted.len() + 1);
    let mut total = 0u32;
    prefix.push(0);
    for &c in counted {
        total += c as u32;
        prefix.push(total);
    }
    prefix
}

fn compute(call: &WindowCallPlan, columns: &[Vector], ordered: &Ordered) -> Result<Vector> {
    use WindowFunction as W;
    let n = ordered.len();
    let integer_arg = |arg: usize, pos: usize| -> Option<i64> {
        let column = &columns[call.args[arg]];
        let row = ordered.rows[pos] as usize;
        column.is_valid(row).then(|| column.values::<i64>()[row])
    };
    let mut out_i64 = vec![0i64; n];
    let mut valid = vec![true; n];
    match call.func {
        W::RowNumber | W::Rank | W::DenseRank => {
            for pos in 0..n {
                let row = ordered.rows[pos] as usize;
                let start = ordered.partition_start[pos] as usize;
                out_i64[row] = match call.func {
                    W::RowNumber => (pos - start + 1) as i64,
                    W::Rank => (ordered.peer_start[pos] as usize - start + 1) as i64,
                    _ => (ordered.group[pos] - ordered.group[start]) as i64 + 1,
                };
            }
            Ok(Vector::from_native(DataType::BigInt, out_i64))
        }
        W::PercentRank | W::CumeDist => {
            let mut out = vec![0f64; n];
            for pos in 0..n {
                let row = ordered.rows[pos] as usize;
                let (start, end) = (ordered.partition_start[pos] as usize, ordered.partition_end[pos] as usize);
                let size = (end - start) as f64;
                out[row] = if call.func == W::PercentRank {
                    if end - start <= 1 {
                        0.0
                    } else {
                        (ordered.peer_start[pos] as usize - start) as f64 / (size - 1.0)
                    }
                } else {
                    (ordered.peer_end[pos] as usize - start) as f64 / size
                };
            }
            Ok(Vector::from_native(DataType::Double, out))
        }
        W::Ntile => {
            for pos in 0..n {
                let row = ordered.rows[pos] as usize;
                let start = ordered.partition_start[pos] as usize;
                let size = ordered.partition_end[pos] as usize - start;
                // The bucket count is the partition's first row's.
                match integer_arg(0, start) {
                    None => valid[row] = false,
                    Some(buckets) if buckets <= 0 => return Err(exec_err!("argument of ntile must be greater than zero")),
                    Some(buckets) => {
                        let buckets = buckets as usize;
                        let (per, extra) = (size / buckets, size % buckets);
                        let i = pos - start;
                        let big = extra * (per + 1);
                        out_i64[row] = if i < big { i / (per + 1) + 1 } else { extra + (i - big) / per.max(1) + 1 } as i64;
                    }
                }
            }
            Ok(Vector::new(DataType::BigInt, VectorData::I64(out_i64.into()), Some(Bitmap::from_bools(valid))))
        }
        W::Lag | W::Lead => lag_lead(call, columns, ordered),
        W::FirstValue | W::LastValue | W::NthValue => frame_value(call, columns, ordered),
        W::Aggregate(func) => aggregate(call, func, columns, ordered),
    }
}

/// `lag`/`lead`: the value `offset` rows (or non-NULL values, IGNORE NULLS) before or
/// after, else the default.
fn lag_lead(call: &WindowCallPlan, columns: &[Vector], ordered: &Ordered) -> Result<Vector> {
    let n = ordered.len();
    let value = &columns[call.args[0]];
    let counted = counted(call, columns, ordered, call.ignore_nulls);
    let prefix = prefix_counts(&counted);
    let counted_positions: Vec<u32> = (0..n as u32).filter(|&p| counted[p as usize]).collect();
    // Index into `value` (0..n) or into the default column (n..2n); None: NULL.
    let mut take: Vec<Option<u32>> = vec![None; n];
    for pos in 0..n {
        let row = ordered.rows[pos] as usize;
        let offset = match call.args.get(1) {
            Some(&c) => match columns[c].is_valid(row) {
                true => columns[c].values::<i64>()[row],
                false => continue,
            },
            None => 1,
        };
        let offset = if call.func == WindowFunction::Lag { -offset } else { offset };
        let (start, end) = (ordered.partition_start[pos] as i64, ordered.partition_end[pos] as i64);
        let target = if call.ignore_nulls && offset != 0 {
            // The |offset|-th counted position before or after this one.
            let k = if offset < 0 { prefix[pos] as i64 + offset } else { prefix[pos + 1] as i64 + offset - 1 };
            (k >= prefix[start as usize] as i64 && k < prefix[end as usize] as i64).then(|| counted_positions[k as usize] as i64)
        } else {
            let t = pos as i64 + offset;
            (t >= start && t < end).then_some(t)
        };
        take[row] = match target {
            Some(t) => Some(ordered.rows[t as usize]),
            None if call.args.len() == 3 => Some((n + row) as u32),
            None => None,
        };
    }
    let source = match call.args.get(2) {
        Some(&default) => {
            let mut both = ChunkBuilder::with_capacity(2 * n);
            both.append_chunk(&DataChunk::new(vec![value.clone()], n));
            both.append_chunk(&DataChunk::new(vec![columns[default].clone()], n));
            both.finish().columns.remove(0)
        }
        None => value.clone(),
    };
    Ok(gather_optional(&source, &take, call.data_type))
}

/// The rows at `take` (NULL where `None`).
fn gather_optional(source: &Vector, take: &[Option<u32>], data_type: DataType) -> Vector {
    if source.is_empty() {
        return Vector::nulls(data_type, take.len());
    }
    let indices: Vec<u32> = take.iter().map(|t| t.unwrap_or(0)).collect();
    let gathered = source.gather(&indices);
    if take.iter().all(Option::is_some) {
        return gathered;
    }
    let mut validity = gathered.validity.clone().unwrap_or_else(|| Bitmap::new(take.len(), true));
    for (i, t) in take.iter().enumerate() {
        if t.is_none() {
            validity.set(i, false);
        }
    }
    Vector { data_type, ..gathered }.with_validity(Some(validity))
}

/// Each position's frame, as a range of positions `[start, end)` (empty when start >= end).
fn frames(call: &WindowCallPlan, columns: &[Vector], ordered: &Ordered) -> Result<Vec<(u32, u32)>> {
    let n = ordered.len();
    let rows_offset = |v: &ScalarValue| -> Result<i64> {
        match v {
            ScalarValue::Int64(x) if *x >= 0 => Ok(*x),
            ScalarValue::Int16(x) if *x >= 0 => Ok(*x as i64),
            ScalarValue::Int32(x) if *x >= 0 => Ok(*x as i64),
            ScalarValue::Null => Err(exec_err!("frame starting or ending offset must not be null")),
            _ => Err(exec_err!("frame starting or ending offset must not be negative")),
        }
    };
    let range_keys = match call.units {
        FrameUnits::Range if needs_range_offsets(call) => Some(RangeKeys::new(call, columns, ordered)?),
        _ => None,
    };
    let mut out = Vec::with_capacity(n);
    for pos in 0..n {
        let (ps, pe) = (ordered.partition_start[pos] as i64, ordered.partition_end[pos] as i64);
        let p = pos as i64;
        let edge = |bound: &Bound, is_start: bool| -> Result<i64> {
            Ok(match (call.units, bound) {
                (_, Bound::UnboundedPreceding) => ps,
                (_, Bound::UnboundedFollowing) => pe,
                (FrameUnits::Rows, Bound::CurrentRow) => p + (!is_start) as i64,
                (FrameUnits::Rows, Bound::Preceding(v)) => p - rows_offset(v)? + (!is_start) as i64,
                (FrameUnits::Rows, Bound::Following(v)) => p + rows_offset(v)? + (!is_start) as i64,
                (FrameUnits::Range | FrameUnits::Groups, Bound::CurrentRow) => {
                    if is_start {
                        ordered.peer_start[pos] as i64
                    } else {
                        ordered.peer_end[pos] as i64
                    }
                }
                (FrameUnits::Groups, Bound::Preceding(v) | Bound::Following(v)) => {
                    let k = rows_offset(v)?;
                    let k = if matches!(bound, Bound::Preceding(_)) { -k } else { k };
                    // Peer groups are numbered across partitions: this partition's are
                    // those of its first and last positions and the ones between.
                    let (first, last) = (ordered.group[ps as usize] as i64, ordered.group[pe as usize - 1] as i64);
                    let g = ordered.group[pos] as i64 + k;
                    let start_of = |g: i64| if g > last { pe } else { ordered.group_starts[g as usize] as i64 };
                    match (is_start, g) {
                        (_, g) if g < first => ps,
                        (true, g) => start_of(g),
                        (false, g) => start_of(g + 1),
                    }
                }
                (FrameUnits::Range, Bound::Preceding(_) | Bound::Following(_)) => {
                    let keys = range_keys.as_ref().expect("range keys");
                    keys.edge(pos, ps as usize, pe as usize, bound, is_start, ordered)? as i64
                }
            })
        };
        let start = edge(&call.start, true)?.clamp(ps, pe);
        let end = edge(&call.end, false)?.clamp(ps, pe);
        out.push((start as u32, end.max(start) as u32));
    }
    Ok(out)
}

fn needs_range_offsets(call: &WindowCallPlan) -> bool {
    [&call.start, &call.end].iter().any(|b| matches!(b, Bound::Preceding(_) | Bound::Following(_)))
}

/// The ORDER BY key of a RANGE frame with offsets, as numbers: integers and decimals (at
/// the key's scale) and dates (days) exactly, doubles as doubles.
struct RangeKeys {
    values: Vec<f64>,
    exact: Vec<i128>,
    is_exact: bool,
    /// Per position: whether the key is NULL.
    null: Vec<bool>,
    ascending: bool,
    scale: u8,
    data_type: DataType,
}

impl RangeKeys {
    fn new(call: &WindowCallPlan, columns: &[Vector], ordered: &Ordered) -> Result<RangeKeys> {
        let (column, order) =
            call.order.first().map(|(c, o)| (&columns[*c], *o)).ok_or_else(|| exec_err!("RANGE with offsets needs one ORDER BY key"))?;
        let (is_exact, scale) = match column.data_type {
            DataType::SmallInt | DataType::Integer | DataType::BigInt | DataType::Date => (true, 0),
            DataType::Decimal { scale, .. } => (true, scale),
            DataType::Real | DataType::Double => (false, 0),
            other => return Err(exec_err!("RANGE with offset PRECEDING/FOLLOWING is not supported for ORDER BY type {other}")),
        };
        let mut exact = Vec::new();
        let mut values = Vec::new();
        let mut null = Vec::with_capacity(ordered.len());
        for &row in &ordered.rows {
            let row = row as usize;
            null.push(column.is_null(row));
            if is_exact {
                exact.push(integer_at(&column.data, row));
            } else {
                values.push(float_at(&column.data, row));
            }
        }
        Ok(RangeKeys { values, exact, is_exact, null, ascending: order.ascending, scale, data_type: column.data_type })
    }

    /// The offset in the key's units.
    fn offset(&self, v: &ScalarValue) -> Result<(i128, f64)> {
        let negative = || exec_err!("invalid preceding or following size in window function");
        let exact = match (v, self.data_type) {
            (ScalarValue::Null, _) => return Err(exec_err!("frame starting or ending offset must not be null")),
            (ScalarValue::Interval(i), DataType::Date) if i.months == 0 && i.micros == 0 => i.days as i128,
            (ScalarValue::Interval(_), _) => {
                return Err(exec_err!("RANGE offsets for {} must be whole days or numbers", self.data_type));
            }
            (ScalarValue::Decimal(d, _, s), _) => {
                if *s > self.scale {
                    d / POW10[(*s - self.scale) as usize]
                } else {
                    d * POW10[(self.scale - *s) as usize]
                }
            }
            (v, _) => match v.as_f64() {
                Some(f) if !self.is_exact => return if f < 0.0 { Err(negative()) } else { Ok((0, f)) },
                Some(f) => (f as i128) * POW10[self.scale as usize],
                None => return Err(exec_err!("invalid RANGE offset {v}")),
            },
        };
        if exact < 0 {
            return Err(negative());
        }
        Ok((exact, exact as f64))
    }

    /// A frame edge: the first position (start) or one past the last (end) whose key is
    /// within the offset of this row's key, in the partition `[ps, pe)`.
    fn edge(&self, pos: usize, ps: usize, pe: usize, bound: &Bound, is_start: bool, ordered: &Ordered) -> Result<usize> {
        if self.null[pos] {
            // A NULL key's frame is its peers (the other NULLs).
            return Ok(if is_start { ordered.peer_start[pos] as usize } else { ordered.peer_end[pos] as usize });
        }
        let (offset, value) = match bound {
            Bound::Preceding(v) | Bound::Following(v) => self.offset(v)?,
            _ => (0, 0.0),
        };
        // Along the ordering, "preceding" is toward the partition's start.
        let toward_start = matches!(bound, Bound::Preceding(_));
        let sign: i8 = if toward_start == self.ascending { -1 } else { 1 };
        // The keys not NULL in the partition form one run.
        let (mut lo, mut hi) = (ps, pe);
        while lo < hi && self.null[lo] {
            lo += 1;
        }
        while hi > lo && self.null[hi - 1] {
            hi -= 1;
        }
        // Position order is key order (ascending) or its reverse: `before(i)` says whether
        // position i comes before the edge.
        let before = |i: usize| -> bool {
            let ord = if self.is_exact {
                let target = self.exact[pos] + sign as i128 * offset;
                self.exact[i].cmp(&target)
            } else {
                let target = self.values[pos] + sign as f64 * value;
                self.values[i].partial_cmp(&target).unwrap_or(std::cmp::Ordering::Equal)
            };
            let ord = if self.ascending { ord } else { ord.reverse() };
            if is_start {
                ord == std::cmp::Ordering::Less
            } else {
                ord != std::cmp::Ordering::Greater
            }
        };
        let (mut a, mut b) = (lo, hi);
        while a < b {
            let mid = (a + b) / 2;
            if before(mid) {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        Ok(a)
    }
}

/// A frame with its EXCLUDE clause applied: up to three runs of positions `[start, end)`,
/// in position order (what precedes the current row's peers, the current row itself for
/// EXCLUDE TIES, what follows its peers).
#[derive(Clone, Copy, Debug)]
struct Pieces {
    runs: [(u32, u32); 3],
    len: u8,
}

impl Pieces {
    fn new((start, end): (u32, u32), pos: usize, exclude: FrameExclude, ordered: &Ordered) -> Pieces {
        let mut pieces = Pieces { runs: [(0, 0); 3], len: 0 };
        let p = pos as u32;
        match exclude {
            FrameExclude::NoOthers => pieces.push(start, end),
            FrameExclude::CurrentRow => {
                pieces.push(start, end.min(p));
                pieces.push(start.max(p + 1), end);
            }
            FrameExclude::Group | FrameExclude::Ties => {
                let (peers_start, peers_end) = (ordered.peer_start[pos], ordered.peer_end[pos]);
                pieces.push(start, end.min(peers_start));
                if exclude == FrameExclude::Ties && start <= p && p < end {
                    pieces.push(p, p + 1);
                }
                pieces.push(start.max(peers_end), end);
            }
        }
        pieces
    }

    fn push(&mut self, start: u32, end: u32) {
        if start < end {
            self.runs[self.len as usize] = (start, end);
            self.len += 1;
        }
    }

    fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.runs[..self.len as usize].iter().copied()
    }
}

/// An aggregate computed with the grouping state of GROUP BY: one group per partition
/// when every frame is its whole partition, else one group per row, fed the rows of its
/// frame in frame order (so order-sensitive aggregates such as string_agg see them in
/// the window's order).
fn state_aggregate(
    call: &WindowCallPlan,
    spec: &AggregateSpec,
    columns: &[Vector],
    ordered: &Ordered,
    frames: &[(u32, u32)],
) -> Result<Vector> {
    let n = ordered.len();
    let inputs: Vec<Vector> = call.args.iter().map(|&a| columns[a].clone()).collect();
    let counted = counted(call, columns, ordered, false);
    let mut state = spec.new_state()?;
    let whole_partitions = call.exclude == FrameExclude::NoOthers
        && (0..n).all(|pos| frames[pos] == (ordered.partition_start[pos], ordered.partition_end[pos]));
    let (mut rows, mut groups) = (Vec::with_capacity(UPDATE_BATCH), Vec::with_capacity(UPDATE_BATCH));
    let flush = |rows: &mut Vec<u32>, groups: &mut Vec<u32>, state: &mut Box<dyn super::aggregate_functions::AggregateState>| {
        let result = if rows.is_empty() { Ok(()) } else { state.update(&inputs, rows, groups) };
        rows.clear();
        groups.clear();
        result
    };
    if whole_partitions {
        // Group g is the g-th partition; each row takes its partition's value.
        let mut partition_of = vec![0u32; n];
        let mut partitions = 0u32;
        for pos in 0..n {
            if pos > 0 && ordered.partition_start[pos] != ordered.partition_start[pos - 1] {
                partitions += 1;
            }
            partition_of[pos] = partitions;
        }
        state.resize(partitions as usize + 1);
        for pos in 0..n {
            if counted[pos] {
                rows.push(ordered.rows[pos]);
                groups.push(partition_of[pos]);
                if rows.len() == UPDATE_BATCH {
                    flush(&mut rows, &mut groups, &mut state)?;
                }
            }
        }
        flush(&mut rows, &mut groups, &mut state)?;
        let values = state.finalize()?;
        let mut by_row = vec![0u32; n];
        for pos in 0..n {
            by_row[ordered.rows[pos] as usize] = partition_of[pos];
        }
        return Ok(values.gather(&by_row));
    }
    let pieces: Vec<Pieces> = (0..n).map(|pos| Pieces::new(frames[pos], pos, call.exclude, ordered)).collect();
    let visits: u64 = pieces.iter().flat_map(|p| p.iter()).map(|(s, e)| (e - s) as u64).sum();
    if visits > MAX_FRAME_VISITS {
        return Err(apiary_common::ApiaryError::TooComplex(format!(
            "window aggregate {} over moving frames would read {visits} frame rows (at most {MAX_FRAME_VISITS}): it is computed frame by \
             frame; use a narrower frame, or a frame of the whole partition",
            spec.func.name()
        )));
    }
    // Group = the row (of the input) whose frame it is.
    state.resize(n);
    for pos in 0..n {
        let group = ordered.rows[pos];
        for (s, e) in pieces[pos].iter() {
            for q in s..e {
                if counted[q as usize] {
                    rows.push(ordered.rows[q as usize]);
                    groups.push(group);
                }
            }
        }
        if rows.len() >= UPDATE_BATCH {
            flush(&mut rows, &mut groups, &mut state)?;
        }
    }
    flush(&mut rows, &mut groups, &mut state)?;
    state.finalize()
}

/// `first_value`, `last_value`, `nth_value` over the frame.
fn frame_value(call: &WindowCallPlan, columns: &[Vector], ordered: &Ordered) -> Result<Vector> {
    let n = ordered.len();
    let frames = frames(call, columns, ordered)?;
    let counted = counted(call, columns, ordered, call.ignore_nulls);
    let prefix = prefix_counts(&counted);
    let counted_positions: Vec<u32> = (0..n as u32).filter(|&p| counted[p as usize]).collect();
    let mut take = vec![None; n];
    for pos in 0..n {
        let row = ordered.rows[pos] as usize;
        let pieces = Pieces::new(frames[pos], pos, call.exclude, ordered);
        let available: usize = pieces.iter().map(|(s, e)| (prefix[e as usize] - prefix[s as usize]) as usize).sum();
        let k = match call.func {
            WindowFunction::FirstValue => 1,
            WindowFunction::LastValue => available.max(1),
            _ => match columns[call.args[1]].is_valid(row) {
                true => match columns[call.args[1]].values::<i64>()[row] {
                    k if k <= 0 => return Err(exec_err!("argument of nth_value must be greater than zero")),
                    k => k as usize,
                },
                false => continue,
            },
        };
        if k <= available {
            // The k-th counted position, in the run that holds it.
            let mut k = k;
            for (s, e) in pieces.iter() {
                let here = (prefix[e as usize] - prefix[s as usize]) as usize;
                if k <= here {
                    take[row] = Some(ordered.rows[counted_positions[prefix[s as usize] as usize + k - 1] as usize]);
                    break;
                }
                k -= here;
            }
        }
    }
    Ok(gather_optional(&columns[call.args[0]], &take, call.data_type))
}

/// An integer-like value (integer, decimal, date) widened to 128 bits; 0 for other
/// physical types (callers dispatch on the type first).
fn integer_at(data: &VectorData, row: usize) -> i128 {
    match data {
        VectorData::I16(v) => v[row] as i128,
        VectorData::I32(v) => v[row] as i128,
        VectorData::I64(v) => v[row] as i128,
        VectorData::I128(v) => v[row],
        _ => 0,
    }
}

/// A floating-point value as a double; 0 for other physical types.
fn float_at(data: &VectorData, row: usize) -> f64 {
    match data {
        VectorData::F32(v) => v[row] as f64,
        VectorData::F64(v) => v[row],
        _ => 0.0,
    }
}

/// A segment tree over positions: `query(l, r)` combines the leaves in `[l, r)`.
struct SegmentTree<T: Copy> {
    size: usize,
    nodes: Vec<T>,
    identity: T,
}

impl<T: Copy> SegmentTree<T> {
    fn new(leaves: Vec<T>, identity: T, combine: impl Fn(T, T) -> T) -> Self {
        let size = leaves.len().next_power_of_two().max(1);
        let mut nodes = vec![identity; 2 * size];
        nodes[size..size + leaves.len()].copy_from_slice(&leaves);
        for i in (1..size).rev() {
            nodes[i] = combine(nodes[2 * i], nodes[2 * i + 1]);
        }
        SegmentTree { size, nodes, identity }
    }

    /// Combines left to right (so that non-commutative "first valid" works).
    fn query(&self, l: usize, r: usize, combine: impl Fn(T, T) -> T) -> T {
        let (mut left, mut right) = (self.identity, self.identity);
        let (mut l, mut r) = (l + self.size, r + self.size);
        while l < r {
            if l & 1 == 1 {
                left = combine(left, self.nodes[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                right = combine(self.nodes[r], right);
            }
            l /= 2;
            r /= 2;
        }
        combine(left, right)
    }
}

/// An aggregate over each row's frame.
fn aggregate(call: &WindowCallPlan, func: AggregateFunction, columns: &[Vector], ordered: &Ordered) -> Result<Vector> {
    use AggregateFunction as F;
    let n = ordered.len();
    let frames = frames(call, columns, ordered)?;
    // count/sum/avg(DISTINCT x) over frames that start at their partition's start (the
    // running frames of ORDER BY, whole partitions) count each value at its first
    // position in the partition only: a frame [start, end) holds the first occurrence of
    // every value it holds.
    let running_distinct = call.aggregate.as_ref().is_some_and(|spec| {
        spec.distinct
            && spec.order_by.is_empty()
            && matches!(func, F::Count | F::Sum | F::Avg)
            && call
                .args
                .first()
                .is_some_and(|&a| !columns[a].data_type.is_float() && (func == F::Count || columns[a].data_type.is_numeric()))
            && call.exclude == FrameExclude::NoOthers
            && (0..n).all(|pos| frames[pos].0 == ordered.partition_start[pos] || frames[pos].0 >= frames[pos].1)
    });
    if let Some(spec) = call.aggregate.as_ref().filter(|_| !running_distinct) {
        return state_aggregate(call, spec, columns, ordered, &frames);
    }
    let pieces: Vec<Pieces> = (0..n).map(|pos| Pieces::new(frames[pos], pos, call.exclude, ordered)).collect();
    let counted =
        if running_distinct { first_occurrences(call, columns, ordered) } else { counted(call, columns, ordered, func != F::CountStar) };
    let prefix = prefix_counts(&counted);
    let count_in = |pos: usize| pieces[pos].iter().map(|(s, e)| (prefix[e as usize] - prefix[s as usize]) as i64).sum::<i64>();
    match func {
        F::CountStar | F::Count => {
            let mut out = vec![0i64; n];
            for pos in 0..n {
                out[ordered.rows[pos] as usize] = count_in(pos);
            }
            Ok(Vector::from_native(DataType::BigInt, out))
        }
        F::Sum | F::Avg => {
            let arg = &columns[call.args[0]];
            let mut valid = vec![false; n];
            match (arg.data_type.physical(), call.data_type) {
                (PhysicalType::F32 | PhysicalType::F64, _) => {
                    let leaves: Vec<f64> = ordered
                        .rows
                        .iter()
                        .zip(&counted)
                        .map(|(&row, &c)| {
                            if !c {
                                return 0.0;
                            }
                            float_at(&arg.data, row as usize)
                        })
                        .collect();
                    let tree = SegmentTree::new(leaves, 0.0, |a, b| a + b);
                    let mut out = vec![0f64; n];
                    for pos in 0..n {
                        let row = ordered.rows[pos] as usize;
                        let count = count_in(pos);
                        if count == 0 {
                            continue;
                        }
                        valid[row] = true;
                        let sum: f64 = pieces[pos].iter().map(|(s, e)| tree.query(s as usize, e as usize, |a, b| a + b)).sum();
                        out[row] = if func == F::Avg { sum / count as f64 } else { sum };
                    }
                    Ok(Vector::new(DataType::Double, VectorData::F64(out.into()), Some(Bitmap::from_bools(valid))).with_validity_checked())
                }
                (PhysicalType::I16 | PhysicalType::I32 | PhysicalType::I64 | PhysicalType::I128, out_type) => {
                    let in_scale = match arg.data_type {
                        DataType::Decimal { scale, .. } => scale,
                        _ => 0,
                    };
                    let mut sums = Vec::with_capacity(n + 1);
                    let mut total = 0i128;
                    sums.push(0i128);
                    for (&row, &c) in ordered.rows.iter().zip(&counted) {
                        if c {
                            let v = integer_at(&arg.data, row as usize);
                            total = total.checked_add(v).ok_or_else(|| exec_err!("numeric value out of range in window sum"))?;
                        }
                        sums.push(total);
                    }
                    let mut out = vec![0i128; n];
                    let mut out_f = vec![0f64; n];
                    for pos in 0..n {
                        let row = ordered.rows[pos] as usize;
                        let count = count_in(pos);
                        if count == 0 {
                            continue;
                        }
                        valid[row] = true;
                        let sum: i128 = pieces[pos].iter().map(|(s, e)| sums[e as usize] - sums[s as usize]).sum();
                        match (func, out_type) {
                            (F::Sum, _) => out[row] = sum,
                            (F::Avg, DataType::Decimal { scale, .. }) => {
                                let factor = POW10[(scale - in_scale.min(scale)) as usize];
                                out[row] =
                                    decimal_average(sum, count, factor).ok_or_else(|| exec_err!("average out of range for {out_type}"))?;
                            }
                            (F::Avg, _) => out_f[row] = sum as f64 / POW10[in_scale as usize] as f64 / count as f64,
                            _ => {}
                        }
                    }
                    let validity = Some(Bitmap::from_bools(valid));
                    match out_type.physical() {
                        PhysicalType::I64 => {
                            let narrowed = out
                                .iter()
                                .map(|&v| i64::try_from(v).map_err(|_| exec_err!("{out_type} out of range in window {}", func.name())))
                                .collect::<Result<Vec<i64>>>()?;
                            Ok(Vector::new(out_type, VectorData::I64(narrowed.into()), validity).with_validity_checked())
                        }
                        PhysicalType::I128 => Ok(Vector::new(out_type, VectorData::I128(out.into()), validity).with_validity_checked()),
                        PhysicalType::F64 => Ok(Vector::new(out_type, VectorData::F64(out_f.into()), validity).with_validity_checked()),
                        other => Err(exec_err!("window {} into {other:?}", func.name())),
                    }
                }
                (_, _) => Err(exec_err!("{} over {} as a window function is not supported", func.name(), arg.data_type)),
            }
        }
        F::Min | F::Max | F::BoolAnd | F::BoolOr | F::AnyValue => {
            let arg = &columns[call.args[0]];
            const NONE: u32 = u32::MAX;
            let leaves: Vec<u32> = (0..n as u32).map(|p| if counted[p as usize] { p } else { NONE }).collect();
            let take: Vec<u32> = if func == F::AnyValue {
                let first = |a: u32, b: u32| if a != NONE { a } else { b };
                let tree = SegmentTree::new(leaves, NONE, first);
                (0..n).map(|pos| pieces[pos].iter().map(|(s, e)| tree.query(s as usize, e as usize, first)).fold(NONE, first)).collect()
            } else {
                let sorted_arg = arg.gather(&ordered.rows);
                let (keys, offsets) = encode_sort_keys(&[sorted_arg], &[SortOrder { ascending: true, nulls_first: false }], n);
                let key = |p: u32| &keys[offsets[p as usize] as usize..offsets[p as usize + 1] as usize];
                let want_max = matches!(func, F::Max | F::BoolOr);
                let pick = |a: u32, b: u32| match (a, b) {
                    (NONE, b) => b,
                    (a, NONE) => a,
                    (a, b) => {
                        let a_wins = if want_max { key(a) >= key(b) } else { key(a) <= key(b) };
                        if a_wins {
                            a
                        } else {
                            b
                        }
                    }
                };
                let tree = SegmentTree::new(leaves, NONE, pick);
                (0..n).map(|pos| pieces[pos].iter().map(|(s, e)| tree.query(s as usize, e as usize, pick)).fold(NONE, pick)).collect()
            };
            // Positions to rows of the input, by row.
            let mut by_row = vec![None; n];
            for pos in 0..n {
                by_row[ordered.rows[pos] as usize] = Some(take[pos]).filter(|&p| p != NONE).map(|p| ordered.rows[p as usize]);
            }
            Ok(gather_optional(arg, &by_row, call.data_type))
        }
        F::StddevSamp | F::StddevPop | F::VarSamp | F::VarPop => {
            // A segment tree of (count, mean, sum of squared deviations) per node,
            // combined with Chan et al.'s formula as the grouping state merges.
            let arg = &columns[call.args[0]];
            let values = arg.values::<f64>();
            let leaves: Vec<Moments> = ordered
                .rows
                .iter()
                .zip(&counted)
                .map(|(&row, &c)| if c { Moments { count: 1.0, mean: values[row as usize], m2: 0.0 } } else { Moments::EMPTY })
                .collect();
            let tree = SegmentTree::new(leaves, Moments::EMPTY, Moments::combine);
            let sample = matches!(func, F::StddevSamp | F::VarSamp);
            let root = matches!(func, F::StddevSamp | F::StddevPop);
            let (mut out, mut valid) = (vec![0f64; n], vec![false; n]);
            for pos in 0..n {
                let moments = pieces[pos]
                    .iter()
                    .map(|(s, e)| tree.query(s as usize, e as usize, Moments::combine))
                    .fold(Moments::EMPTY, Moments::combine);
                let denominator = if sample { moments.count - 1.0 } else { moments.count };
                if denominator > 0.0 {
                    let row = ordered.rows[pos] as usize;
                    let variance = moments.m2 / denominator;
                    out[row] = if root { variance.sqrt() } else { variance };
                    valid[row] = true;
                }
            }
            Ok(Vector::new(DataType::Double, VectorData::F64(out.into()), Some(Bitmap::from_bools(valid))).with_validity_checked())
        }
        other => Err(exec_err!("{} as a window function is not supported", other.name())),
    }
}

/// The moments of a set of values, for the variance family.
#[derive(Clone, Copy)]
struct Moments {
    count: f64,
    mean: f64,
    m2: f64,
}

impl Moments {
    const EMPTY: Moments = Moments { count: 0.0, mean: 0.0, m2: 0.0 };

    fn combine(a: Moments, b: Moments) -> Moments {
        if a.count == 0.0 {
            return b;
        }
        if b.count == 0.0 {
            return a;
        }
        let count = a.count + b.count;
        let delta = b.mean - a.mean;
        Moments { count, mean: a.mean + delta * b.count / count, m2: a.m2 + b.m2 + delta * delta * a.count * b.count / count }
    }
}

trait CheckedValidity {
    fn with_validity_checked(self) -> Vector;
}

impl CheckedValidity for Vector {
    /// Drops an all-valid bitmap.
    fn with_validity_checked(self) -> Vector {
        let validity = self.validity.clone();
        self.with_validity(validity)
    }
}
