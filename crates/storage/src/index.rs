//! Indexes of CREATE INDEX: a hash of each key to the blocks that hold it, so a scan
//! whose filter fixes the key (`WHERE id = 42`) reads only those blocks instead of the
//! table (the filter still runs on them: the index only chooses blocks, like an exact
//! zone map).
//!
//! The map is built when a scan first asks and caught up with the rows appended since at
//! each later ask. It only ever grows between compactions: blocks never change once
//! published except that appends extend the last one (rows keep their positions) and
//! deletes mark rows. A key therefore maps to a superset of the blocks that hold it in
//! any published contents of the same layout; a compaction or TRUNCATE (a new
//! `TableData::layout`) starts it again. Only published contents are indexed: a
//! transaction's private version could put different rows at a block position others
//! then fill (see `Table::at`, which shares indexes only for the published contents).

use std::collections::HashMap;
use std::sync::Mutex;

use apiary_common::Result;
use apiary_types::Vector;

use crate::table::TableData;
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
    /// Key to the blocks holding it, ascending.
    blocks: HashMap<Vec<u8>, Vec<u32>>,
}

#[derive(Debug)]
pub struct TableIndex {
    pub definition: IndexDefinition,
    state: Mutex<IndexState>,
}

impl TableIndex {
    pub fn new(definition: IndexDefinition) -> TableIndex {
        TableIndex { definition, state: Mutex::default() }
    }

    /// The blocks of `data` (published contents of the table) that may hold rows whose
    /// key columns equal `key` (one value per column, of the columns' types), ascending.
    pub fn candidate_blocks(&self, data: &TableData, key: &[Vector]) -> Result<Vec<u32>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.layout != data.layout {
            *state = IndexState { layout: data.layout, ..IndexState::default() };
        }
        // Catch up with the rows appended since (an older snapshot has none).
        let mut encoded = Vec::new();
        while state.block < data.blocks.len() {
            let number = state.block;
            let block = &data.blocks[number];
            if state.row < block.row_count {
                let columns: Vec<Vector> = self.definition.columns.iter().map(|&c| block.column(c).vector()).collect::<Result<_>>()?;
                let columns: Vec<&Vector> = columns.iter().collect();
                for row in state.row..block.row_count {
                    encode_key(&columns, row, &mut encoded);
                    let blocks = state.blocks.entry(encoded.clone()).or_default();
                    if blocks.last() != Some(&(number as u32)) {
                        blocks.push(number as u32);
                    }
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
        let found = state.blocks.get(&encoded).map(|b| b.iter().copied().filter(|&n| (n as usize) < data.blocks.len()).collect());
        Ok(found.unwrap_or_default())
    }
}
