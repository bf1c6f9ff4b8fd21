//! Tables: a schema and an atomically replaced snapshot of immutable blocks.

use std::collections::{BTreeMap, HashSet};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use apiary_common::{internal_err, ApiaryError, Result};
use apiary_types::{DataChunk, DataType, ScalarValue, Schema, Vector, VectorBuilder};

use crate::block::Block;
use crate::stats::TableStats;
use crate::unique::{encode_key, key_set_bytes, UniqueIndex};

/// The published contents of a table: what a query reads.
#[derive(Debug, Default)]
pub struct TableData {
    pub blocks: Vec<Arc<Block>>,
    pub stats: TableStats,
    /// Changes when rows move (a compaction, TRUNCATE): a row id taken from contents of
    /// another layout names another row. Appends and deletes keep it.
    pub layout: u64,
}

/// A trailing partial block of at most this many rows (or an eighth of a block, if more)
/// is continued by the next append.
const CONTINUED_BLOCK_ROWS: usize = 1024;

/// The name of the column of row ids a DELETE or UPDATE reads its target through (see
/// [`Table::with_row_ids`]); hidden from `*`.
pub const ROW_ID_COLUMN: &str = "__apiary_row_id";

/// A row's id: its block number in the high 32 bits, its position in the block in the low.
pub fn row_id(block: usize, row: usize) -> i64 {
    ((block as i64) << 32) | row as i64
}

/// The block number and position of a row id.
pub fn split_row_id(id: i64) -> (usize, usize) {
    ((id >> 32) as usize, (id & 0xffff_ffff) as usize)
}

impl TableData {
    /// Calls `visit` with the key in `key_columns` (encoded as [`encode_key`] does) of
    /// each live row whose key has no NULL, in row order, until it breaks; returns whether
    /// it did.
    pub fn visit_keys(&self, key_columns: &[usize], mut visit: impl FnMut(&[u8]) -> ControlFlow<()>) -> Result<ControlFlow<()>> {
        let mut key = Vec::new();
        for block in &self.blocks {
            let vectors: Vec<Vector> = key_columns.iter().map(|&c| block.column(c).vector()).collect::<Result<_>>()?;
            let columns: Vec<&Vector> = vectors.iter().collect();
            for row in 0..block.row_count {
                if block.is_deleted(row) || columns.iter().any(|c| c.is_null(row)) {
                    continue;
                }
                encode_key(&columns, row, &mut key);
                if visit(&key).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Rows not deleted.
    pub fn row_count(&self) -> usize {
        self.stats.row_count - self.deleted_rows()
    }

    /// Rows stored, deleted ones included (what the statistics count).
    pub fn stored_rows(&self) -> usize {
        self.stats.row_count
    }

    /// Rows deleted but still stored.
    pub fn deleted_rows(&self) -> usize {
        self.blocks.iter().map(|b| b.deleted_count()).sum()
    }

    pub fn memory_bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.memory_bytes()).sum()
    }
}

#[derive(Debug)]
pub struct Table {
    pub name: String,
    pub schema: Schema,
    /// Maximum rows per block for this table.
    pub block_rows: usize,
    /// Columns of the primary key (empty: none); their combination is unique.
    pub primary_key: Vec<usize>,
    /// UNIQUE constraints other than the primary key (column positions each); rows with a
    /// NULL in the key are exempt, as in PostgreSQL.
    pub unique: Vec<Vec<usize>>,
    /// Each column's DEFAULT expression as SQL text (`None`: NULL); empty when no column
    /// has one. The engine binds it where an INSERT leaves the column out.
    pub defaults: Vec<Option<String>>,
    /// CHECK constraints: every row stored makes each one true or NULL.
    pub checks: Vec<CheckConstraint>,
    /// The sequences its SERIAL and identity columns own.
    pub sequences: Vec<crate::sequence::OwnedSequence>,
    /// FOREIGN KEY constraints: each row's key (unless a column of it is NULL) is a key
    /// of the parent table.
    pub foreign_keys: Vec<ForeignKey>,
    /// Its indexes (CREATE INDEX), which scans use to choose rows.
    pub indexes: Vec<Arc<crate::index::TableIndex>>,
    /// An index per key constraint (primary key, UNIQUE), as PostgreSQL makes one: not
    /// stored, built by the first scan that fixes the key.
    pub key_indexes: Vec<Arc<crate::index::TableIndex>>,
    data: RwLock<Arc<TableData>>,
    /// Held by the one appender allowed at a time; holds the primary-key index (built on
    /// first use).
    writer: Mutex<Option<UniqueIndex>>,
    /// The budget its indexes are charged to, once the catalog holds it (see
    /// [`Table::attach_memory`]).
    memory: OnceLock<Arc<crate::pool::BufferPool>>,
    /// Where the table's scans are, so that a scan starting while others run joins them.
    pub scan_position: ScanPosition,
    /// For a table function's table: rows read only when a scan is planned, and only the
    /// columns it reads.
    deferred: Option<Arc<dyn DeferredRows>>,
    /// A table built after planning for one scan (a deferred table's columns): appends
    /// skip what only the optimizer reads (min/max and the distinct-value sketches, 14%
    /// of a Parquet query) and leave each stripe's zone map until a scan asks for it.
    pub scan_only: bool,
    /// Whether sealed blocks hold their stripes packed in codes where narrower
    /// ([`crate::packed`]; `SET packed_blocks`). Stripes loaded from a database file
    /// are packed either way.
    pub packed: bool,
}

/// A CHECK constraint: its name (PostgreSQL's: `t_c_check` for one on column `c`,
/// `t_check` for a table constraint, unless named) and its condition as SQL text over the
/// table's columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckConstraint {
    pub name: String,
    pub sql: String,
}

/// A FOREIGN KEY constraint (PostgreSQL's MATCH SIMPLE): `columns` of the table name a
/// row of `parent` by its `parent_columns`, which are its primary key or a UNIQUE
/// constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignKey {
    /// PostgreSQL's: `t_c_fkey` for one on column `c`, unless named.
    pub name: String,
    pub columns: Vec<usize>,
    pub parent: String,
    pub parent_columns: Vec<usize>,
    /// What removing a parent's key does to the rows naming it: `ON DELETE`, `ON UPDATE`.
    pub on_delete: ReferentialAction,
    pub on_update: ReferentialAction,
}

/// A FOREIGN KEY's `ON DELETE` / `ON UPDATE` action.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReferentialAction {
    /// The statement fails if a row still names the removed key (the default).
    #[default]
    NoAction,
    /// As NO ACTION (PostgreSQL checks it before deferred constraints, which Apiary does
    /// not have).
    Restrict,
    /// The rows naming the key are deleted (ON DELETE) or take the new key (ON UPDATE).
    Cascade,
    /// The rows' key columns become NULL.
    SetNull,
    /// The rows' key columns take their defaults.
    SetDefault,
}

impl ReferentialAction {
    /// Whether removing a key changes the rows naming it (rather than failing).
    pub fn changes_rows(self) -> bool {
        matches!(self, ReferentialAction::Cascade | ReferentialAction::SetNull | ReferentialAction::SetDefault)
    }

    /// The code the file stores.
    pub fn code(self) -> u32 {
        match self {
            ReferentialAction::NoAction => 0,
            ReferentialAction::Restrict => 1,
            ReferentialAction::Cascade => 2,
            ReferentialAction::SetNull => 3,
            ReferentialAction::SetDefault => 4,
        }
    }

    pub fn from_code(code: u32) -> Option<ReferentialAction> {
        Some(match code {
            0 => ReferentialAction::NoAction,
            1 => ReferentialAction::Restrict,
            2 => ReferentialAction::Cascade,
            3 => ReferentialAction::SetNull,
            4 => ReferentialAction::SetDefault,
            _ => return None,
        })
    }
}

/// The rows of a table that are read when a query scans it, and only the columns the scan
/// reads: `read_parquet`'s file (projection push-down, as a column store's scan).
pub trait DeferredRows: Send + Sync + std::fmt::Debug {
    /// The number of rows (for estimates before anything is read).
    fn row_count(&self) -> usize;
    /// A table of `columns` (positions in the deferred table's schema), in that order.
    fn materialize(&self, columns: &[usize]) -> Result<Arc<Table>>;
    /// A table with as many rows, whose values nobody reads (a scan of no column:
    /// `count(*)`). Sources that know their row count without reading override this.
    fn materialize_row_count(&self) -> Result<Arc<Table>> {
        self.materialize(&[0])
    }
    /// What the source knows of each column without reading it (a file's own statistics),
    /// by position; empty or `None` where it knows nothing.
    fn column_statistics(&self) -> Vec<Option<DeferredColumnStats>> {
        Vec::new()
    }
}

/// Statistics of a deferred table's column from its source, for the optimizer's estimates.
#[derive(Clone, Debug)]
pub struct DeferredColumnStats {
    /// Distinct non-NULL values, when the source records them.
    pub distinct: Option<f64>,
    /// `Null` when unknown.
    pub min: ScalarValue,
    pub max: ScalarValue,
    pub null_count: usize,
}

/// The position of a table's running scans (shared circular scans, DataPath): a scan that
/// starts while others are under way starts at the block they read next and wraps around,
/// so that its work orders line up with theirs and one read of each block serves all of
/// them (the scheduler runs the work orders of one block together). As PostgreSQL's
/// `synchronize_seqscans`, this changes only the order in which rows come out.
#[derive(Debug, Default)]
pub struct ScanPosition {
    /// Scans started and not finished.
    active: AtomicUsize,
    /// The block after the last one handed out to a scan.
    next_block: AtomicUsize,
}

impl ScanPosition {
    /// A scan starts over `blocks` blocks: the block to start at (0 when no other scan of
    /// the table is under way). Pair with [`ScanPosition::finish`].
    pub fn start(&self, blocks: usize) -> usize {
        let others = self.active.fetch_add(1, Ordering::Relaxed);
        if others == 0 || blocks == 0 {
            0
        } else {
            self.next_block.load(Ordering::Relaxed) % blocks
        }
    }

    pub fn finish(&self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
    }

    /// A scan's work orders up to block `block` were handed out.
    pub fn handed_out(&self, block: usize) {
        self.next_block.store(block + 1, Ordering::Relaxed);
    }
}

impl Table {
    pub fn new(name: impl Into<String>, schema: Schema, block_rows: usize) -> Table {
        let stats = TableStats::empty(schema.len());
        Table {
            name: name.into(),
            schema,
            block_rows: block_rows.max(1),
            primary_key: Vec::new(),
            unique: Vec::new(),
            defaults: Vec::new(),
            checks: Vec::new(),
            sequences: Vec::new(),
            foreign_keys: Vec::new(),
            indexes: Vec::new(),
            key_indexes: Vec::new(),
            data: RwLock::new(Arc::new(TableData { blocks: Vec::new(), stats, layout: 0 })),
            writer: Mutex::new(None),
            memory: OnceLock::new(),
            scan_position: ScanPosition::default(),
            deferred: None,
            scan_only: false,
            packed: true,
        }
    }

    /// Charges this table's indexes (key sets, CREATE INDEX maps) to `pool` from now on;
    /// the catalog calls it for each table it holds. A table no catalog holds (a
    /// statement's temporary rows) has no indexes worth charging.
    pub fn attach_memory(&self, pool: &Arc<crate::pool::BufferPool>) {
        let _ = self.memory.set(Arc::clone(pool));
    }

    /// The budget this table's indexes are charged to, if attached.
    pub fn memory(&self) -> Option<&Arc<crate::pool::BufferPool>> {
        self.memory.get()
    }

    /// A table whose rows `rows` reads when a scan is planned (see [`DeferredRows`]).
    pub fn deferred(name: impl Into<String>, schema: Schema, block_rows: usize, rows: Arc<dyn DeferredRows>) -> Table {
        Table { deferred: Some(rows), ..Table::new(name, schema, block_rows) }
    }

    /// The rows read on demand, for a deferred table.
    pub fn deferred_rows(&self) -> Option<&Arc<dyn DeferredRows>> {
        self.deferred.as_ref()
    }

    /// The number of rows, or for a deferred table the number it will have.
    pub fn row_estimate(&self) -> usize {
        match &self.deferred {
            Some(rows) => rows.row_count(),
            None => self.snapshot().row_count(),
        }
    }

    /// A table with existing contents (opened from a database file).
    pub fn with_data(mut self, data: TableData) -> Table {
        self.data = RwLock::new(Arc::new(data));
        self
    }

    /// Sets whether sealed blocks are packed (see [`Table::packed`]).
    pub fn packed(mut self, packed: bool) -> Table {
        self.packed = packed;
        self
    }

    /// The table as one scan's input (see [`Table::scan_only`]).
    pub fn scan_only(mut self) -> Table {
        self.scan_only = true;
        self
    }

    /// Declares the primary key (column positions).
    pub fn with_primary_key(mut self, columns: Vec<usize>) -> Table {
        self.primary_key = columns;
        self.make_key_indexes();
        self
    }

    /// Declares UNIQUE constraints (column positions of each).
    pub fn with_unique(mut self, constraints: Vec<Vec<usize>>) -> Table {
        self.unique = constraints;
        self.make_key_indexes();
        self
    }

    /// Declares the columns' DEFAULT expressions (SQL text, one per column or none).
    pub fn with_defaults(mut self, defaults: Vec<Option<String>>) -> Table {
        self.defaults = if defaults.iter().all(Option::is_none) { Vec::new() } else { defaults };
        self
    }

    /// Declares CHECK constraints.
    pub fn with_checks(mut self, checks: Vec<CheckConstraint>) -> Table {
        self.checks = checks;
        self
    }

    /// Declares the sequences its columns own (SERIAL, identity columns).
    pub fn with_sequences(mut self, sequences: Vec<crate::sequence::OwnedSequence>) -> Table {
        self.sequences = sequences;
        self
    }

    /// Declares indexes (see [`crate::index`]).
    pub fn with_indexes(mut self, indexes: Vec<Arc<crate::index::TableIndex>>) -> Table {
        self.indexes = indexes;
        self
    }

    /// The indexes a copy of this table reading `data` may use: all of them when `data`
    /// is the published contents, none for a transaction's private version (see
    /// [`crate::index`]).
    fn published(&self, data: &Arc<TableData>, indexes: &[Arc<crate::index::TableIndex>]) -> Vec<Arc<crate::index::TableIndex>> {
        match Arc::ptr_eq(data, &self.snapshot()) {
            true => indexes.to_vec(),
            false => Vec::new(),
        }
    }

    /// Every index scans may use: those of CREATE INDEX, then the key constraints'.
    pub fn all_indexes(&self) -> impl Iterator<Item = &Arc<crate::index::TableIndex>> {
        self.indexes.iter().chain(&self.key_indexes)
    }

    /// PostgreSQL's name of a key constraint: `t_pkey`, `t_a_b_key`.
    pub fn key_constraint_name(&self, columns: &[usize], primary: bool) -> String {
        if primary {
            return format!("{}_pkey", self.name);
        }
        let names: Vec<&str> = columns.iter().map(|&c| self.schema.fields[c].name.as_str()).collect();
        format!("{}_{}_key", self.name, names.join("_"))
    }

    /// An index per key constraint, named as the constraint.
    fn make_key_indexes(&mut self) {
        let definitions: Vec<crate::index::IndexDefinition> = self
            .key_constraints()
            .into_iter()
            .map(|(columns, primary)| crate::index::IndexDefinition {
                name: self.key_constraint_name(columns, primary),
                columns: columns.to_vec(),
                unique: false,
            })
            .collect();
        self.key_indexes = definitions.into_iter().map(|d| Arc::new(crate::index::TableIndex::new(d))).collect();
    }

    /// Declares FOREIGN KEY constraints.
    pub fn with_foreign_keys(mut self, foreign_keys: Vec<ForeignKey>) -> Table {
        self.foreign_keys = foreign_keys;
        self
    }

    /// The DEFAULT expression of column `column` (SQL text), if it has one.
    pub fn default_of(&self, column: usize) -> Option<&str> {
        self.defaults.get(column).and_then(|d| d.as_deref())
    }

    /// Every key constraint: (columns, whether it is the primary key), the primary key first.
    pub fn key_constraints(&self) -> Vec<(&[usize], bool)> {
        let primary = (!self.primary_key.is_empty()).then_some((self.primary_key.as_slice(), true));
        primary.into_iter().chain(self.unique.iter().map(|u| (u.as_slice(), false))).collect()
    }

    /// The current contents; later appends do not affect the returned snapshot.
    pub fn snapshot(&self) -> Arc<TableData> {
        Arc::clone(&self.data.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn row_count(&self) -> usize {
        self.snapshot().row_count()
    }

    /// The values of `columns` at `row_ids` of `data` (one of this table's snapshots), in
    /// the order of `row_ids`.
    pub fn gather(&self, data: &TableData, row_ids: &[i64], columns: &[usize]) -> Result<Vec<Vector>> {
        let mut runs: Vec<(usize, Vec<u32>)> = Vec::new();
        for &id in row_ids {
            let (block, row) = split_row_id(id);
            if block >= data.blocks.len() || row >= data.blocks[block].row_count {
                return Err(internal_err!("row id {id} out of range in table {}", self.name));
            }
            match runs.last_mut() {
                Some((b, rows)) if *b == block => rows.push(row as u32),
                _ => runs.push((block, vec![row as u32])),
            }
        }
        let mut gathered = Vec::with_capacity(columns.len());
        for &column in columns {
            let mut builder = VectorBuilder::with_capacity(self.schema.fields[column].data_type, row_ids.len());
            for (block, rows) in &runs {
                builder.append(&data.blocks[*block].column(column).values()?.gather(rows), None);
            }
            gathered.push(builder.finish());
        }
        Ok(gathered)
    }

    /// Starts an append. Only one appender per table exists at a time (others wait).
    /// Nothing is visible until [`TableAppender::commit`]; dropping the appender discards
    /// everything it buffered.
    pub fn appender(&self) -> Result<TableAppender<'_>> {
        let guard = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let base = self.snapshot();
        self.writer_over(Some(guard), base)
    }

    /// A writer of a transaction's private version of this table, starting from `base`
    /// (a snapshot, or the transaction's earlier changes). It takes no lock and never
    /// publishes: [`PreparedAppend::into_data`] gives the new private version. Keys are
    /// checked against the committed table's (taking the writer lock for a moment: a key
    /// another transaction committed after this one's snapshot counts too, as in
    /// PostgreSQL) and against `keys`, the transaction's own changes of them so far,
    /// which [`PreparedAppend::take_private_keys`] gives back with this writer's added.
    /// The transaction's commit checks them against the table again.
    pub fn private_writer(&self, base: Arc<TableData>, keys: PrivateKeys) -> Result<TableAppender<'_>> {
        let mut appender = self.writer_over(None, base)?;
        let constraints = self.key_constraints().len();
        let mut keys = keys;
        keys.added.resize_with(constraints, HashSet::new);
        keys.removed.resize_with(constraints, HashSet::new);
        appender.private_keys = Some(keys);
        Ok(appender)
    }

    /// Builds the set of keys `data` holds per key constraint into `slot` unless built.
    fn ensure_key_sets(&self, slot: &mut Option<UniqueIndex>, data: &TableData) -> Result<()> {
        let constraints = self.key_constraints();
        if constraints.is_empty() || slot.is_some() {
            return Ok(());
        }
        let mut index = UniqueIndex::default();
        for (key_columns, _) in &constraints {
            let mut keys = HashSet::new();
            // (The visit never breaks.)
            let _ = data.visit_keys(key_columns, |key| {
                keys.insert(key.to_vec());
                ControlFlow::Continue(())
            })?;
            index.keys.push(keys);
        }
        if let Some(pool) = self.memory() {
            let bytes = index.keys.iter().flatten().map(|key| key_set_bytes(key)).sum();
            pool.reserve_index(bytes, &format!("the key constraints' index of table \"{}\"", self.name))?;
            index.charged = Some((Arc::clone(pool), bytes));
        }
        *slot = Some(index);
        Ok(())
    }

    fn writer_over<'t>(
        &'t self,
        mut guard: Option<MutexGuard<'t, Option<UniqueIndex>>>,
        base: Arc<TableData>,
    ) -> Result<TableAppender<'t>> {
        let constraints = self.key_constraints();
        if let Some(guard) = guard.as_mut() {
            // First append to a keyed table: index the keys it already has.
            self.ensure_key_sets(guard, &base)?;
        }
        let mut builders: Vec<VectorBuilder> = self.schema.fields.iter().map(|f| VectorBuilder::with_capacity(f.data_type, 0)).collect();
        // Continue a small trailing partial block so blocks fill up; a larger one stays
        // as it is (the append starts a new block): continuing means copying and sealing
        // the block again, which for a block of 60,000 rows cost five times DuckDB's whole
        // insert of 1,500 rows (TPC-H's refresh function RF1).
        let mut replaces_last = false;
        if let Some(last) = base.blocks.last() {
            if last.row_count < self.block_rows && last.row_count <= (self.block_rows / 8).max(CONTINUED_BLOCK_ROWS) {
                for (builder, stripe) in builders.iter_mut().zip(&last.columns) {
                    builder.append(&stripe.vector()?, None);
                }
                replaces_last = true;
            }
        }
        let mut stats = base.stats.clone();
        if replaces_last {
            if let Some(last) = base.blocks.last() {
                stats.remove_block(last);
            }
        }
        let copied_rows = if replaces_last { base.blocks.last().map_or(0, |b| b.row_count) } else { 0 };
        Ok(TableAppender {
            table: self,
            guard,
            base,
            builders,
            sealed: Vec::new(),
            stats,
            handed_out: 0,
            replaces_last,
            appended_rows: 0,
            new_keys: vec![HashSet::new(); constraints.len()],
            removed_keys: vec![HashSet::new(); constraints.len()],
            copied_rows,
            deletions: BTreeMap::new(),
            deleted_rows: 0,
            truncated: false,
            private_keys: None,
            new_key_bytes: 0,
        })
    }

    /// This table as of `data` (one of its snapshots, or a transaction's private
    /// version): what a transaction's statements read in its place.
    pub fn at(&self, data: Arc<TableData>) -> Table {
        Table {
            name: self.name.clone(),
            schema: self.schema.clone(),
            block_rows: self.block_rows,
            primary_key: self.primary_key.clone(),
            unique: self.unique.clone(),
            defaults: self.defaults.clone(),
            checks: self.checks.clone(),
            sequences: self.sequences.clone(),
            foreign_keys: self.foreign_keys.clone(),
            indexes: self.published(&data, &self.indexes),
            key_indexes: self.published(&data, &self.key_indexes),
            data: RwLock::new(data),
            writer: Mutex::new(None),
            memory: self.memory.clone(),
            scan_position: ScanPosition::default(),
            deferred: None,
            scan_only: self.scan_only,
            packed: self.packed,
        }
    }

    /// The rows of `data` (one of this table's snapshots) as a table with one more
    /// column, [`ROW_ID_COLUMN`], holding each row's id: what a DELETE or UPDATE reads
    /// its target through. The stripes are shared; the ids are computed when read.
    pub fn with_row_ids(&self, data: &TableData) -> Table {
        let mut fields = self.schema.fields.clone();
        fields.push(apiary_types::Field::new(ROW_ID_COLUMN, DataType::BigInt, false));
        let blocks = data
            .blocks
            .iter()
            .enumerate()
            .map(|(number, block)| {
                let mut columns = block.columns.clone();
                columns.push(Arc::new(crate::block::ColumnStripe::sequence(row_id(number, 0), block.row_count)));
                Arc::new(Block::from_stripes(block.row_count, columns, block.deleted.clone()))
            })
            .collect();
        let mut stats = data.stats.clone();
        stats.columns.push(Default::default());
        // The blocks keep their positions: the indexes apply.
        let published = std::ptr::eq(data, Arc::as_ptr(&self.snapshot()));
        let mut table =
            Table::new(self.name.clone(), Schema::new(fields), self.block_rows).with_data(TableData { blocks, stats, layout: data.layout });
        if published {
            table.indexes = self.indexes.clone();
            table.key_indexes = self.key_indexes.clone();
        }
        table.memory = self.memory.clone();
        table
    }

    /// The table's contents without its deleted rows, if it has any and no writer is at
    /// work on it (a writer names rows by position, which compaction changes): each block
    /// with deleted rows is rewritten with its live rows (dropped when none is left).
    /// Publish the result with [`Compaction::publish`]; until then nothing changes.
    pub fn compact(&self) -> Result<Option<Compaction<'_>>> {
        let guard = match self.writer.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
        };
        let base = self.snapshot();
        if self.deferred.is_some() || base.blocks.iter().all(|b| b.deleted.is_none()) {
            return Ok(None);
        }
        let data = Arc::new(self.without_deleted_rows(&base)?);
        Ok(Some(Compaction { table: self, _guard: guard, data }))
    }

    /// `data` (one of this table's versions) with each block that has deleted rows
    /// rewritten with its live rows (dropped when none is left), in a new layout.
    pub fn without_deleted_rows(&self, data: &TableData) -> Result<TableData> {
        let mut stats = data.stats.clone();
        let mut blocks = Vec::with_capacity(data.blocks.len());
        for block in &data.blocks {
            if block.deleted.is_none() {
                blocks.push(Arc::clone(block));
                continue;
            }
            stats.remove_block(block);
            let live: Vec<u32> = (0..block.row_count as u32).filter(|&r| !block.is_deleted(r as usize)).collect();
            if live.is_empty() {
                continue;
            }
            let columns = block.gather(&live)?;
            let compacted = Arc::new(match self.scan_only {
                true => Block::without_zone_maps(columns.clone()),
                false => Block::sealed(columns.clone(), self.packed),
            });
            stats.add_block(&compacted, &columns, !self.scan_only);
            blocks.push(compacted);
        }
        Ok(TableData { blocks, stats, layout: data.layout + 1 })
    }

    /// Replaces the table's contents with nothing (used by DROP to release memory early).
    pub fn clear(&self) {
        let mut guard = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        *guard = None;
        let empty = TableData { blocks: Vec::new(), stats: TableStats::empty(self.schema.len()), layout: self.snapshot().layout + 1 };
        *self.data.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(empty);
    }
}

/// A table's contents without deleted rows, not yet published; holds the table's writer.
pub struct Compaction<'a> {
    table: &'a Table,
    _guard: MutexGuard<'a, Option<UniqueIndex>>,
    data: Arc<TableData>,
}

impl Compaction<'_> {
    pub fn table(&self) -> &Table {
        self.table
    }

    /// The compacted contents.
    pub fn data(&self) -> &Arc<TableData> {
        &self.data
    }

    /// Makes the compacted contents the table's (the same rows, fewer stored).
    pub fn publish(self) {
        *self.table.data.write().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&self.data);
    }
}

/// Buffers appended rows into new blocks and publishes them on commit.
pub struct TableAppender<'a> {
    table: &'a Table,
    /// The writer lock (and the table's primary-key index); `None` for a transaction's
    /// private writer.
    guard: Option<MutexGuard<'a, Option<UniqueIndex>>>,
    /// Primary keys appended by this appender, not yet committed.
    new_keys: Vec<HashSet<Vec<u8>>>,
    base: Arc<TableData>,
    /// Rows of the open (not yet full) block.
    builders: Vec<VectorBuilder>,
    sealed: Vec<Arc<Block>>,
    /// The table's statistics with the sealed blocks counted (kept as blocks are sealed,
    /// while their values are in hand).
    stats: TableStats,
    /// Sealed blocks already returned by [`TableAppender::take_sealed`].
    handed_out: usize,
    /// Whether the base snapshot's last block was copied into `builders`.
    replaces_last: bool,
    appended_rows: usize,
    /// Keys of the rows this writer deletes, per constraint: free for its appends.
    removed_keys: Vec<HashSet<Vec<u8>>>,
    /// Rows at the start of the next block sealed that the statistics' sketches already
    /// hold (the copied trailing partial block of the base).
    copied_rows: usize,
    /// Rows of the base snapshot this writer deletes, by block.
    deletions: BTreeMap<usize, Vec<u32>>,
    deleted_rows: usize,
    /// Whether every row of the base snapshot is removed (TRUNCATE).
    truncated: bool,
    /// A transaction's private writer: the transaction's changes of the keys so far.
    private_keys: Option<PrivateKeys>,
    /// What the keys in `new_keys` will take in the table's key sets.
    new_key_bytes: usize,
}

/// A transaction's changes of one table's keys, per key constraint (see
/// [`Table::private_writer`]).
#[derive(Clone, Debug, Default)]
pub struct PrivateKeys {
    /// Keys of the rows it appended and still holds.
    added: Vec<HashSet<Vec<u8>>>,
    /// Keys of committed rows it deleted.
    removed: Vec<HashSet<Vec<u8>>>,
    /// It truncated the table: no committed row counts.
    truncated: bool,
}

impl<'a> TableAppender<'a> {
    /// The contents this writer started from (and changes): no other writer can publish
    /// while it exists, so a query over this snapshot sees what the writer will change.
    pub fn base(&self) -> &Arc<TableData> {
        &self.base
    }

    /// Deletes rows of the base snapshot by id ([`row_id`]); each must be live and named
    /// once. Their keys become free for rows appended after.
    pub fn delete(&mut self, row_ids: &[i64]) -> Result<()> {
        if self.truncated {
            return Err(internal_err!("deleting rows of a truncated table"));
        }
        let constraints = self.table.key_constraints();
        let mut key = Vec::new();
        for (n, (key_columns, _)) in constraints.iter().enumerate() {
            let values = self.table.gather(&self.base, row_ids, key_columns)?;
            let columns: Vec<&Vector> = values.iter().collect();
            for row in 0..row_ids.len() {
                if !columns.iter().any(|c| c.is_null(row)) {
                    encode_key(&columns, row, &mut key);
                    self.removed_keys[n].insert(key.clone());
                }
            }
        }
        for &id in row_ids {
            let (block, row) = split_row_id(id);
            let Some(stored) = self.base.blocks.get(block).filter(|b| row < b.row_count) else {
                return Err(internal_err!("row id {id} out of range in table {}", self.table.name));
            };
            if stored.is_deleted(row) {
                return Err(internal_err!("row id {id} of table {} is already deleted", self.table.name));
            }
            self.deletions.entry(block).or_default().push(row as u32);
        }
        self.deleted_rows += row_ids.len();
        Ok(())
    }

    /// Removes every row of the base snapshot (TRUNCATE); must come before any append.
    pub fn truncate(&mut self) -> Result<()> {
        if self.appended_rows > 0 || !self.deletions.is_empty() {
            return Err(internal_err!("truncating table {} after changing it", self.table.name));
        }
        self.truncated = true;
        self.replaces_last = false;
        self.copied_rows = 0;
        self.builders = self.table.schema.fields.iter().map(|f| VectorBuilder::with_capacity(f.data_type, 0)).collect();
        self.stats = TableStats::empty(self.table.schema.len());
        Ok(())
    }

    /// Number of rows deleted so far by this writer (a truncate's not counted).
    pub fn deleted_rows(&self) -> usize {
        self.deleted_rows
    }

    /// The blocks sealed since the last call, with their numbers in the table (a load
    /// into a database file writes them before the statement commits).
    pub fn take_sealed(&mut self) -> Vec<(usize, Arc<Block>)> {
        let first = if self.truncated { 0 } else { self.base.blocks.len() - self.replaces_last as usize };
        let taken = self.sealed[self.handed_out..].iter().enumerate().map(|(i, b)| (first + self.handed_out + i, Arc::clone(b))).collect();
        self.handed_out = self.sealed.len();
        taken
    }

    /// Appends the live rows of `chunk`, whose columns must have the table's types.
    pub fn append(&mut self, chunk: &DataChunk) -> Result<()> {
        if chunk.column_count() != self.builders.len() {
            return Err(internal_err!(
                "appending {} columns to table {} with {}",
                chunk.column_count(),
                self.table.name,
                self.builders.len()
            ));
        }
        for (column, field) in chunk.columns.iter().zip(&self.table.schema.fields) {
            if column.data_type.physical() != field.data_type.physical() {
                return Err(internal_err!("column {} of type {} receives {}", field.name, field.data_type, column.data_type));
            }
        }
        self.check_keys(chunk)?;
        let selection: Option<Vec<u32>> = chunk.selection().map(|s| s.to_vec());
        let all: Vec<u32>;
        let rows: &[u32] = match &selection {
            Some(s) => s,
            None => {
                all = (0..chunk.physical_len() as u32).collect();
                &all
            }
        };
        // A whole block's worth of contiguous rows while no block is half built (a Parquet
        // file's row groups read in block-sized pieces): its vectors become the block as
        // they are, not copied value by value.
        let same_types = chunk
            .columns
            .iter()
            .zip(&self.table.schema.fields)
            .all(|(c, f)| c.data_type == f.data_type && !matches!(f.data_type, DataType::Char(_)));
        if selection.is_none() && same_types && rows.len() == self.table.block_rows && self.builders.first().is_some_and(|b| b.is_empty()) {
            self.seal_columns(chunk.columns.clone());
            self.appended_rows += rows.len();
            return Ok(());
        }
        let mut start = 0;
        while start < rows.len() {
            let room = self.table.block_rows - self.builders[0].len();
            let end = (start + room).min(rows.len());
            let piece = &rows[start..end];
            let contiguous = selection.is_none();
            for (builder, column) in self.builders.iter_mut().zip(&chunk.columns) {
                if contiguous && piece.len() == column.len() {
                    builder.append(column, None);
                } else {
                    builder.append(column, Some(piece));
                }
            }
            start = end;
            if self.builders[0].len() == self.table.block_rows {
                self.seal();
            }
        }
        self.appended_rows += rows.len();
        Ok(())
    }

    /// Rejects rows whose primary key is NULL, or whose key (of any constraint) is
    /// already in the table (and not deleted by this writer) or repeated.
    fn check_keys(&mut self, chunk: &DataChunk) -> Result<()> {
        let constraints = self.table.key_constraints();
        if constraints.is_empty() {
            return Ok(());
        }
        let rows: Vec<usize> = match chunk.selection() {
            Some(s) => s.iter().map(|&r| r as usize).collect(),
            None => (0..chunk.physical_len()).collect(),
        };
        // A private writer reads the committed keys under the writer lock, for a moment.
        let committed = match self.private_keys {
            Some(_) => {
                let mut guard = self.table.writer.lock().unwrap_or_else(|e| e.into_inner());
                self.table.ensure_key_sets(&mut guard, &self.table.snapshot())?;
                Some(guard)
            }
            None => None,
        };
        let mut key = Vec::new();
        for (n, (key_columns, primary)) in constraints.iter().enumerate() {
            let columns: Vec<&Vector> = key_columns.iter().map(|&c| &chunk.columns[c]).collect();
            for &row in &rows {
                if columns.iter().any(|c| c.is_null(row)) {
                    if *primary {
                        return Err(ApiaryError::NotNullViolation(format!(
                            "null value in the primary key of table \"{}\"",
                            self.table.name
                        )));
                    }
                    continue;
                }
                encode_key(&columns, row, &mut key);
                let freed = self.removed_keys[n].contains(&key);
                let existing = match (&self.private_keys, &committed) {
                    (Some(private), Some(committed)) => {
                        !freed
                            && (private.added[n].contains(&key)
                                || !self.truncated
                                    && !private.truncated
                                    && !private.removed[n].contains(&key)
                                    && committed.as_ref().is_some_and(|index| index.keys[n].contains(&key)))
                    }
                    _ => {
                        !self.truncated
                            && !freed
                            && self.guard.as_ref().and_then(|g| g.as_ref()).is_some_and(|index| index.keys[n].contains(&key))
                    }
                };
                let added = !existing && self.new_keys[n].insert(key.clone());
                if added {
                    self.new_key_bytes += key_set_bytes(&key);
                }
                if !added {
                    let names: Vec<&str> = key_columns.iter().map(|&c| self.table.schema.fields[c].name.as_str()).collect();
                    let values: Vec<String> = columns.iter().map(|c| c.get_scalar(row).to_string()).collect();
                    let constraint =
                        if *primary { format!("{}_pkey", self.table.name) } else { format!("{}_{}_key", self.table.name, names.join("_")) };
                    // A transaction's key held only by a row committed after its snapshot:
                    // a conflict with that transaction (retrying may succeed), as when
                    // both change one row.
                    let private_holder = self.private_keys.as_ref().is_some_and(|private| private.added[n].contains(&key));
                    if existing && self.private_keys.is_some() && !private_holder && !self.base_holds(key_columns, &key)? {
                        return Err(ApiaryError::Serialization(format!(
                            "another transaction committed a row with key ({})=({}) of \"{constraint}\" after this one began",
                            names.join(", "),
                            values.join(", ")
                        )));
                    }
                    return Err(ApiaryError::UniqueViolation(format!(
                        "duplicate key value violates unique constraint \"{constraint}\": key ({})=({}) already exists",
                        names.join(", "),
                        values.join(", ")
                    )));
                }
            }
        }
        // The keys the statement adds join the table's key sets when it commits: they
        // must fit.
        if let Some(pool) = self.table.memory() {
            pool.check_headroom(self.new_key_bytes, &format!("the keys of the rows added to table \"{}\"", self.table.name))?;
        }
        Ok(())
    }

    /// Whether a live row of the base holds `key` (encoded) in `key_columns`: a full
    /// scan, for the error path of [`TableAppender::check_keys`] only.
    fn base_holds(&self, key_columns: &[usize], key: &[u8]) -> Result<bool> {
        let found =
            self.base.visit_keys(key_columns, |held| if held == key { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })?;
        Ok(found.is_break())
    }

    /// Appends whole columns (all rows).
    pub fn append_columns(&mut self, columns: Vec<Vector>) -> Result<()> {
        let len = columns.first().map_or(0, |c| c.len());
        self.append(&DataChunk::new(columns, len))
    }

    /// Appends a block built by the caller (see [`Block::without_zone_maps`]). It becomes one of the table's blocks as it is, even if
    /// shorter than a full block, when no block is half built and its types are the
    /// table's; otherwise its rows are appended as a chunk.
    pub fn append_block(&mut self, block: Block) -> Result<()> {
        let columns = block.columns.iter().map(|stripe| stripe.vector()).collect::<Result<Vec<_>>>()?;
        let chunk = DataChunk::new(columns, block.row_count);
        let same_types = block
            .columns
            .iter()
            .zip(&self.table.schema.fields)
            .all(|(c, f)| c.data_type() == f.data_type && !matches!(f.data_type, DataType::Char(_)));
        let fits = block.columns.len() == self.table.schema.len()
            && block.row_count <= self.table.block_rows
            && same_types
            && self.builders.first().is_some_and(|b| b.is_empty());
        if !fits || block.row_count == 0 {
            return self.append(&chunk);
        }
        self.check_keys(&chunk)?;
        let block = Arc::new(block);
        self.stats.add_block(&block, &chunk.columns, !self.table.scan_only);
        self.sealed.push(block);
        self.appended_rows += chunk.row_count();
        Ok(())
    }

    /// Number of rows appended so far by this appender.
    pub fn appended_rows(&self) -> usize {
        self.appended_rows
    }

    fn seal(&mut self) {
        let fields = &self.table.schema.fields;
        let builders = std::mem::replace(
            &mut self.builders,
            // Empty until rows come (they grow by doubling): the last seal of an append
            // must not reserve a whole block per column (2000 columns of one row took a
            // gigabyte).
            fields.iter().map(|f| VectorBuilder::with_capacity(f.data_type, 0)).collect(),
        );
        self.seal_columns(builders.into_iter().map(|b| b.finish()).collect());
    }

    fn seal_columns(&mut self, columns: Vec<Vector>) {
        let block = Arc::new(match self.table.scan_only {
            true => Block::without_zone_maps(columns.clone()),
            false => Block::sealed(columns.clone(), self.table.packed),
        });
        let counted = std::mem::take(&mut self.copied_rows);
        self.stats.add_block_after(&block, &columns, !self.table.scan_only, counted);
        self.sealed.push(block);
    }

    /// Publishes the appended rows atomically; returns the number of rows appended.
    pub fn commit(self) -> Result<usize> {
        Ok(self.prepare()?.publish())
    }

    /// Seals the appended rows into blocks and computes the table's new contents without
    /// publishing them (so they can be made durable first).
    pub fn prepare(mut self) -> Result<PreparedAppend<'a>> {
        if self.appended_rows > 0 && !self.builders[0].is_empty() {
            self.seal();
        }
        let changed = self.appended_rows > 0 || self.deleted_rows > 0 || self.truncated;
        let data = if !changed {
            Arc::clone(&self.base)
        } else {
            let mut blocks = if self.truncated { Vec::new() } else { self.base.blocks.clone() };
            let replaced_last = self.replaces_last && self.appended_rows > 0;
            if replaced_last {
                blocks.pop();
            }
            let first_sealed = blocks.len();
            let stats = if self.appended_rows > 0 { std::mem::take(&mut self.stats) } else { self.base.stats.clone() };
            let stats = if self.truncated && self.appended_rows == 0 { TableStats::empty(self.table.schema.len()) } else { stats };
            blocks.append(&mut self.sealed);
            if replaced_last {
                // The base's last block was copied into the first block sealed (same
                // positions): its deleted rows stay deleted.
                if let Some(old) = self.base.blocks.last().and_then(|b| b.deleted.as_ref()) {
                    let block = &blocks[first_sealed];
                    blocks[first_sealed] = Arc::new(block.with_deleted(old.iter_ones().map(|r| r as u32)));
                }
            }
            for (&number, rows) in &self.deletions {
                let block = &blocks[number];
                blocks[number] = Arc::new(block.with_deleted(rows.iter().copied()));
            }
            Arc::new(TableData { blocks, stats, layout: self.base.layout + u64::from(self.truncated) })
        };
        let first_new_row = if self.truncated { 0 } else { self.base.stored_rows() };
        let mut deleted: Vec<i64> =
            self.deletions.iter().flat_map(|(&block, rows)| rows.iter().map(move |&row| row_id(block, row as usize))).collect();
        deleted.sort_unstable();
        Ok(PreparedAppend {
            table: self.table,
            guard: self.guard,
            new_keys: self.new_keys,
            removed_keys: self.removed_keys,
            data,
            appended_rows: self.appended_rows,
            first_new_row,
            deleted,
            truncated: self.truncated,
            changed,
            private_keys: self.private_keys,
        })
    }
}

/// Appended rows sealed into blocks, not yet visible.
pub struct PreparedAppend<'a> {
    table: &'a Table,
    guard: Option<MutexGuard<'a, Option<UniqueIndex>>>,
    new_keys: Vec<HashSet<Vec<u8>>>,
    removed_keys: Vec<HashSet<Vec<u8>>>,
    data: Arc<TableData>,
    appended_rows: usize,
    /// Stored row number (in the new contents) of the first appended row.
    first_new_row: usize,
    /// Ids of the rows deleted, ascending.
    deleted: Vec<i64>,
    truncated: bool,
    /// Whether anything changes.
    changed: bool,
    private_keys: Option<PrivateKeys>,
}

impl PreparedAppend<'_> {
    /// The table's contents once published.
    pub fn data(&self) -> &Arc<TableData> {
        &self.data
    }

    pub fn appended_rows(&self) -> usize {
        self.appended_rows
    }

    /// Ids of the rows deleted (in the base snapshot), ascending.
    pub fn deleted_row_ids(&self) -> &[i64] {
        &self.deleted
    }

    /// Whether every row of the base snapshot was removed first.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The appended rows as whole columns (for the write-ahead log).
    pub fn appended_columns(&self) -> Result<Vec<Vector>> {
        let mut builders: Vec<VectorBuilder> =
            self.table.schema.fields.iter().map(|f| VectorBuilder::with_capacity(f.data_type, self.appended_rows)).collect();
        let mut block_start = 0;
        for block in &self.data.blocks {
            let block_end = block_start + block.row_count;
            if block_end > self.first_new_row {
                let from = self.first_new_row.saturating_sub(block_start);
                for (builder, stripe) in builders.iter_mut().zip(&block.columns) {
                    builder.append(&stripe.read(from, block.row_count - from)?, None);
                }
            }
            block_start = block_end;
        }
        Ok(builders.into_iter().map(|b| b.finish()).collect())
    }

    /// A private writer's transaction's changes of the keys, with this writer's (see
    /// [`Table::private_writer`]).
    pub fn take_private_keys(&mut self) -> Option<PrivateKeys> {
        let mut keys = self.private_keys.take()?;
        if self.truncated {
            keys.truncated = true;
            keys.added.iter_mut().for_each(HashSet::clear);
        }
        for ((added, removed), (statement_removed, statement_added)) in
            keys.added.iter_mut().zip(&mut keys.removed).zip(self.removed_keys.iter().zip(&mut self.new_keys))
        {
            for key in statement_removed {
                if !added.remove(key) {
                    removed.insert(key.clone());
                }
            }
            added.extend(statement_added.drain());
        }
        Some(keys)
    }

    /// The new contents, for a transaction's private writer (which publishes nothing).
    pub fn into_data(self) -> Arc<TableData> {
        self.data
    }

    /// Makes the changes visible; returns how many rows were appended. A transaction's
    /// private writer publishes nothing (see [`Table::private_writer`]).
    pub fn publish(mut self) -> usize {
        let Some(guard) = self.guard.as_mut() else {
            debug_assert!(false, "a private writer's changes are published by its transaction's commit");
            return 0;
        };
        if self.changed {
            *self.table.data.write().unwrap_or_else(|e| e.into_inner()) = self.data;
            if let Some(index) = guard.as_mut() {
                let mut added = 0usize;
                let mut freed = 0usize;
                for ((keys, new), removed) in index.keys.iter_mut().zip(&mut self.new_keys).zip(&self.removed_keys) {
                    if self.truncated {
                        freed += keys.iter().map(|key| key_set_bytes(key)).sum::<usize>();
                        keys.clear();
                    }
                    for key in removed {
                        if keys.remove(key) {
                            freed += key_set_bytes(key);
                        }
                    }
                    added += new.iter().map(|key| key_set_bytes(key)).sum::<usize>();
                    keys.extend(new.drain());
                }
                index.recharge(added, freed);
            }
        }
        self.appended_rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_types::{DataType, Field, ScalarValue};

    fn table(block_rows: usize) -> Table {
        Table::new("t", Schema::new(vec![Field::new("a", DataType::Integer, true)]), block_rows)
    }

    fn ints(range: std::ops::Range<i32>) -> DataChunk {
        let len = range.len();
        DataChunk::new(vec![Vector::from_native(DataType::Integer, range.collect())], len)
    }

    #[test]
    fn appends_fill_blocks_and_commit_atomically() {
        let table = table(4);
        let mut appender = table.appender().unwrap();
        appender.append(&ints(0..6)).unwrap();
        assert_eq!(table.row_count(), 0, "nothing visible before commit");
        appender.commit().unwrap();
        let data = table.snapshot();
        assert_eq!(data.blocks.iter().map(|b| b.row_count).collect::<Vec<_>>(), vec![4, 2]);

        let mut appender = table.appender().unwrap();
        appender.append(&ints(6..9)).unwrap();
        appender.commit().unwrap();
        let data = table.snapshot();
        assert_eq!(data.blocks.iter().map(|b| b.row_count).collect::<Vec<_>>(), vec![4, 4, 1]);
        assert_eq!(data.stats.row_count, 9);
        assert_eq!(data.stats.columns[0].max, ScalarValue::Int32(8));
        let second = data.blocks[1].column(0).vector().unwrap();
        assert_eq!(second.values::<i32>(), &[4, 5, 6, 7]);
    }

    #[test]
    fn whole_blocks_of_rows_are_taken_as_they_are_and_partial_ones_copied() {
        let table = table(4);
        let mut appender = table.appender().unwrap();
        // A whole block while none is half built, a partial one, then a whole block's
        // worth that must fill the half-built block first.
        for chunk in [ints(0..4), ints(4..6), ints(6..10)] {
            appender.append(&chunk).unwrap();
        }
        appender.commit().unwrap();
        let data = table.snapshot();
        assert_eq!(data.blocks.iter().map(|b| b.row_count).collect::<Vec<_>>(), vec![4, 4, 2]);
        let values: Vec<Vec<i32>> = data.blocks.iter().map(|b| b.column(0).vector().unwrap().values::<i32>().to_vec()).collect();
        assert_eq!(values, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
        assert_eq!(
            (data.stats.row_count, &data.stats.columns[0].min, &data.stats.columns[0].max),
            (10, &ScalarValue::Int32(0), &ScalarValue::Int32(9))
        );
        assert_eq!(data.blocks[0].column(0).zone_map().max, ScalarValue::Int32(3));
    }

    #[test]
    fn a_scan_only_table_keeps_counts_and_computes_zone_maps_on_demand() {
        for scan_only in [false, true] {
            let table = if scan_only { table(4).scan_only() } else { table(4) };
            let mut appender = table.appender().unwrap();
            appender.append(&ints(0..9)).unwrap();
            appender.commit().unwrap();
            let data = table.snapshot();
            let max = if scan_only { ScalarValue::Null } else { ScalarValue::Int32(8) };
            assert_eq!((data.stats.row_count, &data.stats.columns[0].max), (9, &max));
            let estimate = data.stats.columns[0].sketch.estimate();
            assert_eq!(estimate > 0.0, !scan_only, "sketch estimate {estimate}");
            // The stripes' zone maps are right either way (computed when first asked).
            let zones: Vec<_> = data.blocks.iter().map(|b| b.column(0).zone_map().clone()).collect();
            assert_eq!(
                zones.iter().map(|z| &z.max).collect::<Vec<_>>(),
                [&ScalarValue::Int32(3), &ScalarValue::Int32(7), &ScalarValue::Int32(8)]
            );
        }
    }

    #[test]
    fn dropped_appender_changes_nothing() {
        let table = table(4);
        {
            let mut appender = table.appender().unwrap();
            appender.append(&ints(0..3)).unwrap();
        }
        assert_eq!(table.row_count(), 0);
    }

    #[test]
    fn deleted_rows_keep_their_places_through_appends_and_compaction() {
        let table = table(4);
        let mut appender = table.appender().unwrap();
        appender.append(&ints(0..6)).unwrap();
        appender.commit().unwrap();
        // Delete a row of the full block and one of the partial last block, and append in
        // the same writer: the last block is copied with its deleted row in place.
        let mut writer = table.appender().unwrap();
        writer.delete(&[row_id(0, 1), row_id(1, 0)]).unwrap();
        assert!(writer.delete(&[row_id(5, 0)]).is_err(), "no such block");
        writer.append(&ints(6..9)).unwrap();
        writer.commit().unwrap();
        let data = table.snapshot();
        assert_eq!(data.blocks.iter().map(|b| b.row_count).collect::<Vec<_>>(), vec![4, 4, 1]);
        assert_eq!((data.row_count(), data.stored_rows(), data.deleted_rows()), (7, 9, 2));
        assert!(data.blocks[0].is_deleted(1) && data.blocks[1].is_deleted(0) && !data.blocks[1].is_deleted(1));
        assert_eq!(data.blocks[1].live_rows(0, 4), Some(vec![1, 2, 3]));
        assert_eq!(data.blocks[2].live_rows(0, 1), None);
        let mut again = table.appender().unwrap();
        assert!(again.delete(&[row_id(0, 1)]).is_err(), "already deleted");
        drop(again);
        let compaction = table.compact().unwrap().expect("deleted rows to compact");
        compaction.publish();
        let data = table.snapshot();
        let values: Vec<Vec<i32>> = data.blocks.iter().map(|b| b.column(0).vector().unwrap().values::<i32>().to_vec()).collect();
        assert_eq!(values, vec![vec![0, 2, 3], vec![5, 6, 7], vec![8]]);
        assert_eq!((data.row_count(), data.deleted_rows()), (7, 0));
        assert!(table.compact().unwrap().is_none(), "nothing left to compact");
    }

    #[test]
    fn selection_is_respected() {
        let table = table(100);
        let mut appender = table.appender().unwrap();
        appender.append(&ints(0..10).with_selection(Some(vec![1, 3, 5]))).unwrap();
        assert_eq!(appender.commit().unwrap(), 3);
        let data = table.snapshot();
        assert_eq!(data.blocks[0].column(0).vector().unwrap().values::<i32>(), &[1, 3, 5]);
    }
}
