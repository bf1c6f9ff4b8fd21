//! Indexes of CREATE INDEX: a hash of each key to the rows (block and position) that
//! hold it, so a scan whose filter fixes the key (`WHERE id = 42`) reads only the
//! vectors around those rows instead of the table (the filter still runs on them: the
//! index only chooses what to read, like an exact zone map).
//!
//! The map is built when a scan first asks and caught up with the rows appended since at
//! each later ask. It only ever grows between compactions: blocks never change once
//! published except that appends extend the last one (rows keep their positions) and
//! deletes mark rows. A key therefore maps to a superset of the rows that hold it in
//! any published contents of the same layout; a compaction or TRUNCATE (a new
//! `TableData::layout`) starts it again. Only published contents are indexed: a
//! transaction's private version could put different rows at a block position others
//! then fill (see `Table::at`, which shares indexes only for the published contents).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use apiary_common::Result;
use apiary_types::Vector;

use crate::pool::BufferPool;
use crate::table::{row_id, split_row_id, TableData};
use crate::unique::encode_key;

/// What CREATE INDEX declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexDefinition {
    pub name: String,
    pub columns: Vec<usize>,
    /// CREATE UNIQUE INDEX: the table holds a UNIQUE constraint on the columns, which
    /// DROP INDEX removes with it.
    pub unique: bool,
}

#[derive(Debug, Default)]
struct IndexState {
    layout: u64,
    /// Rows indexed: every row of the blocks before `block`, and rows `..row` of it.
    block: usize,
    row: usize,
    /// The hash of each key to the rows holding a key of that hash (`row_id`s,
    /// ascending). Keys are not kept: rows of another key with the same hash are only
    /// more candidates, which the scan's filter drops.
    rows: HashMap<u64, Rows, BuildHasherDefault<KeyHashHasher>>,
    /// Bytes charged to the table's memory budget for `rows`.
    charged: usize,
}

/// What the map spends per row indexed (a slot of hash, `Rows` and control byte, with
/// the table's spare capacity), for the memory budget.
const INDEX_ROW_BYTES: usize = 40;

/// The rows of one key hash: most keys of an index worth having are held by one row.
#[derive(Debug)]
enum Rows {
    One(i64),
    Many(Vec<i64>),
}

impl Rows {
    fn push(&mut self, id: i64) {
        match self {
            Rows::One(first) => *self = Rows::Many(vec![*first, id]),
            Rows::Many(ids) => ids.push(id),
        }
    }

    fn as_slice(&self) -> &[i64] {
        match self {
            Rows::One(id) => std::slice::from_ref(id),
            Rows::Many(ids) => ids,
        }
    }
}

/// The map's keys are hashes already.
#[derive(Default)]
struct KeyHashHasher(u64);

impl Hasher for KeyHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

fn key_hash(key: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(key)
}

#[derive(Debug)]
pub struct TableIndex {
    pub definition: IndexDefinition,
    state: Mutex<IndexState>,
    /// The budget the map is charged to (the table's, given at the first lookup).
    memory: OnceLock<Arc<BufferPool>>,
}

impl Drop for TableIndex {
    fn drop(&mut self) {
        let charged = self.state.get_mut().map_or(0, |state| state.charged);
        if let Some(pool) = self.memory.get() {
            pool.release_index(charged);
        }
    }
}

impl TableIndex {
    pub fn new(definition: IndexDefinition) -> TableIndex {
        TableIndex { definition, state: Mutex::default(), memory: OnceLock::new() }
    }

    /// The rows of `data` (published contents of the table), as (block, position), that
    /// may have key columns equal to `key` (one value per column, of the columns'
    /// types), ascending. `None` when the map would have to grow past `memory`'s limit
    /// (the table's budget): the caller reads the table instead.
    pub fn candidate_rows(&self, data: &TableData, key: &[Vector], memory: Option<&Arc<BufferPool>>) -> Result<Option<Vec<(u32, u32)>>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let pool = memory.map(|pool| self.memory.get_or_init(|| Arc::clone(pool)));
        if state.layout != data.layout {
            if let Some(pool) = pool {
                pool.release_index(state.charged);
            }
            *state = IndexState { layout: data.layout, ..IndexState::default() };
        }
        // What catching up costs, charged first.
        let unindexed = data.blocks.get(state.block).map_or(0, |block| block.row_count.saturating_sub(state.row))
            + data.blocks.iter().skip(state.block + 1).map(|block| block.row_count).sum::<usize>();
        if let Some(pool) = pool.filter(|_| unindexed > 0) {
            let bytes = unindexed * INDEX_ROW_BYTES;
            if pool.reserve_index(bytes, &format!("index \"{}\"", self.definition.name)).is_err() {
                return Ok(None);
            }
            state.charged += bytes;
        }
        // Catch up with the rows appended since (an older snapshot has none).
        let mut encoded = Vec::new();
        while state.block < data.blocks.len() {
            let number = state.block;
            let block = &data.blocks[number];
            if state.row < block.row_count {
                let columns: Vec<Vector> = self.definition.columns.iter().map(|&c| block.column(c).vector()).collect::<Result<_>>()?;
                let columns: Vec<&Vector> = columns.iter().collect();
                let new_rows = block.row_count - state.row;
                state.rows.reserve(new_rows);
                for row in state.row..block.row_count {
                    encode_key(&columns, row, &mut encoded);
                    let id = row_id(number, row);
                    state.rows.entry(key_hash(&encoded)).and_modify(|rows| rows.push(id)).or_insert(Rows::One(id));
                }
            }
            if number + 1 == data.blocks.len() {
                // The last block may grow: remember where it ends (an older snapshot's
                // may end sooner).
                state.row = state.row.max(block.row_count);
                break;
            }
            state.block += 1;
            state.row = 0;
        }
        let key: Vec<&Vector> = key.iter().collect();
        encode_key(&key, 0, &mut encoded);
        let in_snapshot = |&id: &i64| {
            let (block, row) = split_row_id(id);
            data.blocks.get(block).is_some_and(|b| row < b.row_count).then_some((block as u32, row as u32))
        };
        Ok(Some(
            state.rows.get(&key_hash(&encoded)).map(|rows| rows.as_slice().iter().filter_map(in_snapshot).collect()).unwrap_or_default(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Table;
    use apiary_types::{DataChunk, DataType, Field, Schema};

    fn append(table: &Table, keys: &[i32]) {
        let mut appender = table.appender().unwrap();
        let chunk = DataChunk::new(vec![Vector::from_native(DataType::Integer, keys.to_vec())], keys.len());
        appender.append(&chunk).unwrap();
        appender.commit().unwrap();
    }

    #[test]
    fn keys_map_to_rows_across_growing_blocks_and_older_snapshots() {
        let table = Table::new("t", Schema::new(vec![Field::new("k", DataType::Integer, false)]), 4);
        let index = TableIndex::new(IndexDefinition { name: "t_k_idx".into(), columns: vec![0], unique: false });
        let key = |k: i32| vec![Vector::from_native(DataType::Integer, vec![k])];
        append(&table, &[1, 2, 3, 4, 5, 7]);
        let old = table.snapshot();
        assert_eq!(index.candidate_rows(&old, &key(7), None).unwrap().unwrap(), [(1, 1)]);
        // The last block grows (copied with its rows in place), and a block is added.
        append(&table, &[7, 9, 7]);
        let new = table.snapshot();
        assert_eq!(index.candidate_rows(&new, &key(7), None).unwrap().unwrap(), [(1, 1), (1, 2), (2, 0)]);
        // An older snapshot sees only its rows.
        assert_eq!(index.candidate_rows(&old, &key(7), None).unwrap().unwrap(), [(1, 1)]);
        assert_eq!(index.candidate_rows(&new, &key(8), None).unwrap().unwrap(), []);
        // A new layout starts the map again.
        let mut appender = table.appender().unwrap();
        appender.truncate().unwrap();
        appender.commit().unwrap();
        append(&table, &[7]);
        assert_eq!(index.candidate_rows(&table.snapshot(), &key(7), None).unwrap().unwrap(), [(0, 0)]);
    }
}
