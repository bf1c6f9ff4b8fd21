//! ORDER BY (and ORDER BY ... LIMIT as a top-k): a sink that collects rows, a source that
//! emits them sorted.
//!
//! Sort keys are normalised into byte strings whose `memcmp` order is the requested
//! order (NULL placement, ASC/DESC and all types folded in), so the sort itself compares
//! byte slices with no per-row type dispatch. For a LIMIT, each worker keeps only its
//! best `offset + limit` rows once its buffer grows, so memory stays proportional to the
//! limit.

use std::sync::{Arc, Mutex};

use apiary_common::Result;
use apiary_types::{ChunkBuilder, DataChunk, DataType, Vector, VectorData};

use super::{local, Control, Emit, ExecContext, GlobalState, LocalState, Sink, Source, StateSlot, Stateful};
use crate::expr::ExprRef;

#[derive(Debug, Clone, Copy)]
pub struct SortOrder {
    pub ascending: bool,
    pub nulls_first: bool,
}

pub struct Sort {
    keys: Vec<ExprRef>,
    orders: Vec<SortOrder>,
    /// Input columns passed on.
    types: Vec<DataType>,
    limit: Option<usize>,
    offset: usize,
    vector_size: usize,
    pub description: String,
    slot: StateSlot,
}

/// One execution's rows.
#[derive(Default)]
struct SortGlobal {
    collected: Mutex<Vec<DataChunk>>,
    result: Mutex<Vec<DataChunk>>,
}

impl Sort {
    pub fn new(
        keys: Vec<ExprRef>,
        orders: Vec<SortOrder>,
        types: Vec<DataType>,
        limit: Option<usize>,
        offset: usize,
        vector_size: usize,
        description: String,
        slot: StateSlot,
    ) -> Arc<Sort> {
        Arc::new(Sort { keys, orders, types, limit, offset, vector_size, description, slot })
    }

    fn global<'a>(&self, ctx: &'a ExecContext) -> Result<&'a SortGlobal> {
        ctx.global::<SortGlobal>(self.slot)
    }

    /// Rows a top-k must keep.
    fn keep(&self) -> Option<usize> {
        self.limit.map(|l| l.saturating_add(self.offset))
    }

    /// Sorts the rows of `chunks` (input columns followed by key columns); returns the
    /// concatenated columns and the sorted row order (truncated to `keep`).
    fn sort_rows(&self, chunks: Vec<DataChunk>, keep: Option<usize>) -> (Vec<Vector>, Vec<u32>) {
        let width = self.types.len() + self.keys.len();
        let rows: usize = chunks.iter().map(|c| c.row_count()).sum();
        let mut all = ChunkBuilder::with_capacity(rows);
        for chunk in &chunks {
            all.append_chunk(chunk);
        }
        let columns: Vec<Vector> = all.finish().columns;
        if columns.len() < width {
            return (columns, Vec::new());
        }
        let (keys, offsets) = encode_sort_keys(&columns[self.types.len()..], &self.orders, rows);
        let key = |i: u32| &keys[offsets[i as usize] as usize..offsets[i as usize + 1] as usize];
        let mut order: Vec<u32> = (0..rows as u32).collect();
        let compare = |a: &u32, b: &u32| key(*a).cmp(key(*b)).then(a.cmp(b));
        match keep {
            Some(k) if k < rows => {
                if k > 0 {
                    order.select_nth_unstable_by(k - 1, compare);
                }
                order.truncate(k);
                order.sort_unstable_by(compare);
            }
            _ => order.sort_unstable_by(compare),
        }
        (columns, order)
    }
}

impl Stateful for Sort {
    fn new_state(&self) -> Result<GlobalState> {
        Ok(Box::new(SortGlobal::default()))
    }
}

/// Encodes each row's sort key as bytes whose lexicographic order is the sort order.
/// Returns the keys back to back and `rows + 1` offsets.
///
/// Keys are written column by column into one buffer (each row's cursor advancing), so
/// the type dispatch happens once per column and no row allocates.
pub fn encode_sort_keys(columns: &[Vector], orders: &[SortOrder], rows: usize) -> (Vec<u8>, Vec<u32>) {
    // Row lengths first: fixed-width columns add the same to every row.
    let mut fixed = 0usize;
    let mut lengths: Option<Vec<u32>> = None;
    for column in columns {
        match value_width(column) {
            Some(width) => fixed += 1 + width,
            None => {
                let lengths = lengths.get_or_insert_with(|| vec![0; rows]);
                for (row, length) in lengths.iter_mut().enumerate() {
                    *length += 1 + if column.is_null(row) { 0 } else { encoded_str_len(column, row) } as u32;
                }
            }
        }
    }
    let mut offsets = Vec::with_capacity(rows + 1);
    offsets.push(0u32);
    match &lengths {
        None => offsets.extend((1..=rows).map(|row| (row * fixed) as u32)),
        Some(lengths) => {
            let mut end = 0u32;
            offsets.extend(lengths.iter().map(|&l| {
                end += l + fixed as u32;
                end
            }));
        }
    }
    let mut flat = vec![0u8; offsets[rows] as usize];
    let mut cursor: Vec<u32> = offsets[..rows].to_vec();
    for (column, order) in columns.iter().zip(orders) {
        encode_column(column, *order, &mut flat, &mut cursor);
    }
    (flat, offsets)
}

/// Bytes of a fixed-width value's encoding; `None` for strings.
fn value_width(column: &Vector) -> Option<usize> {
    Some(match &column.data {
        VectorData::Bool(_) => 1,
        VectorData::I16(_) => 2,
        VectorData::I32(_) => 4,
        VectorData::I64(_) | VectorData::F32(_) | VectorData::F64(_) => 8,
        VectorData::I128(_) | VectorData::Interval(_) => 16,
        VectorData::Str(_) => return None,
    })
}

/// A string's encoding: zero bytes escaped as `0 0xFF`, terminated by `0 0`.
fn encoded_str_len(column: &Vector, row: usize) -> usize {
    let VectorData::Str(s) = &column.data else { return 0 };
    let bytes = s.get_bytes(row);
    bytes.len() + bytes.iter().filter(|&&b| b == 0).count() + 2
}

/// Appends one column's part of every row's key at the row's cursor.
fn encode_column(column: &Vector, order: SortOrder, flat: &mut [u8], cursor: &mut [u32]) {
    fn fixed<const N: usize>(out: &mut [u8], bytes: [u8; N]) -> usize {
        out[..N].copy_from_slice(&bytes);
        N
    }
    let rows = (column, order);
    match &column.data {
        VectorData::Bool(v) => encode_rows(rows, flat, cursor, |r, o| fixed(o, [v[r] as u8])),
        VectorData::I16(v) => encode_rows(rows, flat, cursor, |r, o| fixed(o, ((v[r] as u16) ^ 0x8000).to_be_bytes())),
        VectorData::I32(v) => encode_rows(rows, flat, cursor, |r, o| fixed(o, ((v[r] as u32) ^ 0x8000_0000).to_be_bytes())),
        VectorData::I64(v) => encode_rows(rows, flat, cursor, |r, o| fixed(o, ((v[r] as u64) ^ (1 << 63)).to_be_bytes())),
        VectorData::I128(v) => encode_rows(rows, flat, cursor, |r, o| fixed(o, ((v[r] as u128) ^ (1 << 127)).to_be_bytes())),
        VectorData::F32(v) => encode_rows(rows, flat, cursor, |r, o| fixed(o, float_bits(v[r] as f64).to_be_bytes())),
        VectorData::F64(v) => encode_rows(rows, flat, cursor, |r, o| fixed(o, float_bits(v[r]).to_be_bytes())),
        // PostgreSQL orders intervals by their normalised length.
        VectorData::Interval(v) => {
            encode_rows(rows, flat, cursor, |r, o| fixed(o, ((v[r].normalized() as u128) ^ (1 << 127)).to_be_bytes()))
        }
        VectorData::Str(s) => encode_rows(rows, flat, cursor, |r, o| {
            let mut n = 0;
            for &b in s.get_bytes(r) {
                if b == 0 {
                    o[n..n + 2].copy_from_slice(&[0, 0xFF]);
                    n += 2;
                } else {
                    o[n] = b;
                    n += 1;
                }
            }
            o[n..n + 2].copy_from_slice(&[0, 0]);
            n + 2
        }),
    }
}

/// Writes every row's null marker and, for non-null rows, `encode(row, out)` (which
/// returns the bytes it wrote), inverted for descending order.
fn encode_rows(
    (column, order): (&Vector, SortOrder),
    flat: &mut [u8],
    cursor: &mut [u32],
    mut encode: impl FnMut(usize, &mut [u8]) -> usize,
) {
    let null_marker = if order.nulls_first { 0 } else { 2 };
    for (row, at) in cursor.iter_mut().enumerate() {
        let start = *at as usize;
        if column.is_null(row) {
            flat[start] = null_marker;
            *at += 1;
            continue;
        }
        flat[start] = 1;
        let value = &mut flat[start + 1..];
        let written = encode(row, value);
        if !order.ascending {
            value[..written].iter_mut().for_each(|b| *b = !*b);
        }
        *at += 1 + written as u32;
    }
}

/// Float bits ordered like the floats (NaN last, -0.0 == 0.0).
fn float_bits(x: f64) -> u64 {
    let x = if x == 0.0 {
        0.0
    } else if x.is_nan() {
        f64::NAN
    } else {
        x
    };
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// The sink half.
pub struct SortSink(pub Arc<Sort>);

/// A worker's collected input rows (sort and window sinks): each chunk's live rows with
/// the values of the sink's expressions appended as extra columns.
#[derive(Default)]
pub(super) struct CollectedRows {
    pub chunks: Vec<DataChunk>,
    pub rows: usize,
}

impl CollectedRows {
    /// Stores `chunk`'s live rows and, after its columns, each of `exprs` evaluated on it.
    pub fn push(&mut self, chunk: &DataChunk, exprs: &[ExprRef]) -> Result<()> {
        let mut columns = chunk.columns.clone();
        for expr in exprs {
            columns.push(expr.evaluate(chunk)?);
        }
        let selection = chunk.selection().map(|s| s.to_vec());
        let stored = DataChunk::new(columns, chunk.physical_len()).with_selection(selection).compact();
        self.rows += stored.row_count();
        self.chunks.push(stored);
        Ok(())
    }

    /// Approximate bytes held (for the memory budget).
    pub fn memory(&self) -> usize {
        self.chunks.first().map_or(0, |c| self.rows * super::estimated_bytes(c) / c.row_count().max(1))
    }
}

/// A result source's morsel: emits result chunk `morsel` (one morsel per chunk).
pub(super) fn emit_result_chunk(result: &Mutex<Vec<DataChunk>>, morsel: usize, emit: &mut Emit) -> Result<()> {
    let chunk = result.lock().unwrap_or_else(|e| e.into_inner()).get(morsel).cloned();
    if let Some(chunk) = chunk {
        emit(chunk)?;
    }
    Ok(())
}

/// A worker prunes its buffer to its top `keep` rows once it holds twice that many, and
/// at least this many: the pruning runs in parallel on the workers, leaving the final
/// serial sort only `keep` rows per worker.
const TOP_K_PRUNE_ROWS: usize = 4096;

impl Sink for SortSink {
    fn name(&self) -> String {
        match self.0.limit {
            Some(limit) => format!("TopK {} limit {limit}", self.0.description),
            None => format!("Sort {}", self.0.description),
        }
    }

    fn local_state(&self) -> LocalState {
        Box::new(CollectedRows::default())
    }

    fn consume(&self, chunk: DataChunk, _order: u64, state: &mut LocalState, _ctx: &ExecContext) -> Result<Control> {
        let sort = &self.0;
        let state = local::<CollectedRows>(state);
        state.push(&chunk, &sort.keys)?;
        if let Some(keep) = sort.keep() {
            if state.rows > keep.saturating_mul(2).max(TOP_K_PRUNE_ROWS) {
                let (columns, order) = sort.sort_rows(std::mem::take(&mut state.chunks), Some(keep));
                let kept: Vec<Vector> = columns.iter().map(|c| c.gather(&order)).collect();
                state.rows = order.len();
                state.chunks.push(DataChunk::new(kept, order.len()));
            }
        }
        Ok(Control::Continue)
    }

    fn local_memory(&self, state: &LocalState) -> usize {
        state.downcast_ref::<CollectedRows>().map_or(0, CollectedRows::memory)
    }

    fn combine(&self, state: LocalState, ctx: &ExecContext) -> Result<()> {
        let state = state.downcast::<CollectedRows>().expect("sort local state");
        self.0.global(ctx)?.collected.lock().unwrap_or_else(|e| e.into_inner()).extend(state.chunks);
        Ok(())
    }

    fn finish(&self, ctx: &ExecContext) -> Result<()> {
        let sort = &self.0;
        let global = sort.global(ctx)?;
        let chunks = std::mem::take(&mut *global.collected.lock().unwrap_or_else(|e| e.into_inner()));
        let (columns, order) = sort.sort_rows(chunks, sort.keep());
        let order: Vec<u32> = order.into_iter().skip(sort.offset).collect();
        let mut result = Vec::new();
        for rows in order.chunks(sort.vector_size.max(1)) {
            let out: Vec<Vector> = columns[..sort.types.len()].iter().map(|c| c.gather(rows)).collect();
            result.push(if out.is_empty() { DataChunk::empty_columns(rows.len()) } else { DataChunk::new(out, rows.len()) });
        }
        *global.result.lock().unwrap_or_else(|e| e.into_inner()) = result;
        Ok(())
    }
}

/// The source half: one morsel per output chunk, in order.
pub struct SortSource(pub Arc<Sort>);

impl Source for SortSource {
    fn name(&self) -> String {
        format!("SortScan {}", self.0.description)
    }

    fn morsels(&self, ctx: &ExecContext) -> Result<usize> {
        Ok(self.0.global(ctx)?.result.lock().unwrap_or_else(|e| e.into_inner()).len())
    }

    fn produce(&self, morsel: usize, _local: &mut LocalState, ctx: &ExecContext, emit: &mut Emit) -> Result<()> {
        emit_result_chunk(&self.0.global(ctx)?.result, morsel, emit)
    }
}
