//! Durability: the catalog in the database file, the write-ahead log, checkpoints and
//! recovery.
//!
//! * A **checkpoint** writes every stripe not yet in the file (encoded in parallel), then
//!   the catalog metadata (tables, schemas, statistics, and for each block the extent,
//!   checksum, encoding and zone map of each stripe; then the views: name, SQL text,
//!   columns, dependencies), syncs, and flips the root (see [`crate::file`]). Large appends (COPY, INSERT ... SELECT, CREATE TABLE AS with at
//!   least a block of rows) commit this way, so their data is written once.
//! * Small changes (CREATE TABLE/VIEW, DROP TABLE/VIEW, INSERT of a few rows) append one record per
//!   statement to the **write-ahead log** `<file>.wal` and sync it. A record holds all of
//!   a statement's changes with a checksum; a torn last record is ignored on recovery, so
//!   a statement is either entirely durable or absent.
//! * The log names the root generation it continues. After a checkpoint the log is reset
//!   to the new generation; a crash between the root flip and that reset leaves a log
//!   for an older generation, which recovery recognises as already folded in and skips.
//!
//! All commits hold one lock ([`DurableStore::lock`]) from logging or checkpointing until
//! the change is published in memory, so a checkpoint always sees exactly the committed
//! state.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use apiary_common::{ApiaryError, Result};
use apiary_types::{DataType, Vector};

use crate::block::{Block, ColumnStripe};
use crate::codec::{checksum, Reader, Writer};
use crate::encoding::{decode, encode, encode_with_dictionary, Encoding, MAX_STRIPE_ROWS};
use crate::file::{DatabaseFile, Extent, Root, StoredStripe};
use crate::pool::BufferPool;
use crate::sequence::{OwnedSequence, Sequence, SequenceOptions, SequenceState};
use crate::table::ReferentialAction;
use crate::table::{Table, TableData};
use crate::view::View;

const WAL_MAGIC: &[u8; 8] = b"APIARYWL";
/// Bytes of the log's header (a log this long holds no records).
pub const WAL_HEADER_BYTES: u64 = 28;

/// One change in a log record.
pub enum LogEntry {
    CreateTable(Arc<Table>),
    DropTable(String),
    Append {
        table: String,
        columns: Vec<Vector>,
    },
    /// A new view, or a new definition of one (CREATE OR REPLACE VIEW).
    CreateView(Arc<View>),
    DropView(String),
    /// Rows deleted by id (`apiary_storage::table::row_id`), ascending; an UPDATE logs
    /// this, then the new rows as an [`LogEntry::Append`] to the same table.
    Delete {
        table: String,
        row_ids: Vec<i64>,
    },
    /// TRUNCATE: every row removed.
    Truncate(String),
    /// CREATE SEQUENCE (with its state).
    CreateSequence(Arc<Sequence>),
    DropSequence(String),
    /// Where sequences (of CREATE SEQUENCE or owned by a table) stand now: logged with,
    /// or before, the rows that use their values.
    SequenceValues(Vec<(String, SequenceState)>),
}

/// What a database file holds: its tables (with their contents), views and sequences.
pub struct Recovered {
    pub tables: Vec<Arc<Table>>,
    pub views: Vec<Arc<View>>,
    pub sequences: Vec<Arc<Sequence>>,
}

struct WalState {
    wal: File,
    wal_len: u64,
    root: Option<Root>,
}

pub struct DurableStore {
    file: Arc<DatabaseFile>,
    wal_path: PathBuf,
    state: Mutex<WalState>,
}

/// Held while a statement makes its change durable and publishes it.
pub struct CommitGuard<'a> {
    store: &'a DurableStore,
    state: MutexGuard<'a, WalState>,
}

fn io_error(path: &Path, action: &str, e: std::io::Error) -> ApiaryError {
    ApiaryError::Io(format!("{action} \"{}\": {e}", path.display()))
}

/// Set in the primary-key count when UNIQUE constraints follow the key (format 2; a
/// format-1 table definition never has it).
const HAS_UNIQUE_CONSTRAINTS: u32 = 1 << 31;

/// Set in the primary-key count when DEFAULT expressions and CHECK constraints follow
/// (format 6).
const HAS_DEFAULTS_OR_CHECKS: u32 = 1 << 30;

/// Set in the primary-key count when the sequences the table's columns own follow
/// (format 7).
const HAS_SEQUENCES: u32 = 1 << 29;

/// Set in the primary-key count when FOREIGN KEY constraints follow (format 7).
const HAS_FOREIGN_KEYS: u32 = 1 << 28;

/// Set in the primary-key count when index definitions follow (format 7).
const HAS_INDEXES: u32 = 1 << 27;

/// Where a FOREIGN KEY's ON DELETE and ON UPDATE action codes sit in its width (format 8).
const ON_DELETE_SHIFT: u32 = 16;
const ON_UPDATE_SHIFT: u32 = 20;

/// Whether a table's definition needs format 8 (a FOREIGN KEY with an ON DELETE / ON
/// UPDATE action).
fn has_referential_actions(table: &Table) -> bool {
    table.foreign_keys.iter().any(|k| k.on_delete != ReferentialAction::NoAction || k.on_update != ReferentialAction::NoAction)
}

/// Whether a table's definition needs format 6 (DEFAULT expressions, CHECK constraints).
fn has_defaults_or_checks(table: &Table) -> bool {
    !table.defaults.is_empty() || !table.checks.is_empty()
}

fn table_definition(writer: &mut Writer, table: &Table) {
    writer.str(&table.name);
    writer.schema(&table.schema);
    let mut flags = if table.unique.is_empty() { 0 } else { HAS_UNIQUE_CONSTRAINTS };
    if has_defaults_or_checks(table) {
        flags |= HAS_DEFAULTS_OR_CHECKS;
    }
    if !table.sequences.is_empty() {
        flags |= HAS_SEQUENCES;
    }
    if !table.foreign_keys.is_empty() {
        flags |= HAS_FOREIGN_KEYS;
    }
    if !table.indexes.is_empty() {
        flags |= HAS_INDEXES;
    }
    writer.u32(table.primary_key.len() as u32 | flags);
    table.primary_key.iter().for_each(|&c| writer.u32(c as u32));
    if !table.unique.is_empty() {
        writer.u32(table.unique.len() as u32);
        for constraint in &table.unique {
            writer.u32(constraint.len() as u32);
            constraint.iter().for_each(|&c| writer.u32(c as u32));
        }
    }
    if has_defaults_or_checks(table) {
        for column in 0..table.schema.len() {
            match table.default_of(column) {
                Some(sql) => {
                    writer.u8(1);
                    writer.str(sql);
                }
                None => writer.u8(0),
            }
        }
        writer.u32(table.checks.len() as u32);
        for check in &table.checks {
            writer.str(&check.name);
            writer.str(&check.sql);
        }
    }
    if !table.sequences.is_empty() {
        writer.u32(table.sequences.len() as u32);
        for owned in &table.sequences {
            writer.u32(owned.column as u32);
            writer.u8(owned.always as u8);
            sequence_definition(writer, &owned.sequence);
        }
    }
    if !table.foreign_keys.is_empty() {
        writer.u32(table.foreign_keys.len() as u32);
        for key in &table.foreign_keys {
            writer.str(&key.name);
            writer.str(&key.parent);
            let actions = key.on_delete.code() << ON_DELETE_SHIFT | key.on_update.code() << ON_UPDATE_SHIFT;
            writer.u32(key.columns.len() as u32 | actions);
            key.columns.iter().chain(&key.parent_columns).for_each(|&c| writer.u32(c as u32));
        }
    }
    if !table.indexes.is_empty() {
        writer.u32(table.indexes.len() as u32);
        for index in &table.indexes {
            let definition = &index.definition;
            writer.str(&definition.name);
            writer.u8(definition.unique as u8);
            writer.u32(definition.columns.len() as u32);
            definition.columns.iter().for_each(|&c| writer.u32(c as u32));
        }
    }
    writer.u64(table.block_rows as u64);
}

fn sequence_definition(writer: &mut Writer, sequence: &Sequence) {
    writer.str(&sequence.name);
    let options = &sequence.options;
    for value in [options.start, options.increment, options.min, options.max] {
        writer.u64(value as u64);
    }
    writer.u8(options.cycle as u8);
    writer.u8(match options.data_type {
        DataType::SmallInt => 2,
        DataType::Integer => 4,
        _ => 8,
    });
    sequence_state(writer, sequence.state());
}

fn sequence_state(writer: &mut Writer, state: SequenceState) {
    writer.u64(state.last as u64);
    writer.u8(state.called as u8);
}

fn read_sequence_state(reader: &mut Reader<'_>) -> Result<SequenceState> {
    let last = reader.u64()? as i64;
    let called = reader.u8()? != 0;
    Ok(SequenceState { last, called })
}

fn read_sequence_definition(reader: &mut Reader<'_>) -> Result<Arc<Sequence>> {
    let name = reader.str()?;
    let [start, increment, min, max] = [reader.u64()?, reader.u64()?, reader.u64()?, reader.u64()?].map(|v| v as i64);
    let cycle = reader.u8()? != 0;
    let data_type = match reader.u8()? {
        2 => DataType::SmallInt,
        4 => DataType::Integer,
        8 => DataType::BigInt,
        other => return Err(reader.corrupt(&format!("a sequence of unknown type {other}"))),
    };
    let options = SequenceOptions { start, increment, min, max, cycle, data_type };
    options.validate(&name).map_err(|e| reader.corrupt(&format!("an invalid sequence: {e}")))?;
    let state = read_sequence_state(reader)?;
    Ok(Sequence::with_state(name, options, state))
}

fn view_definition(writer: &mut Writer, view: &View) {
    writer.str(&view.name);
    writer.str(&view.sql);
    writer.schema(&apiary_types::Schema::new(view.columns.clone()));
    writer.u32(view.dependencies.len() as u32);
    view.dependencies.iter().for_each(|d| writer.str(d));
}

fn read_view_definition(reader: &mut Reader<'_>) -> Result<View> {
    let name = reader.str()?;
    let sql = reader.str()?;
    let columns = reader.schema()?.fields;
    let count = reader.u32()? as usize;
    // Each name takes at least its 8-byte length.
    if count.saturating_mul(8) > reader.len_left() {
        return Err(reader.corrupt("more view dependencies than bytes"));
    }
    let dependencies = (0..count).map(|_| reader.str()).collect::<Result<Vec<_>>>()?;
    Ok(View::new(name, sql, columns, dependencies))
}

fn read_key_columns(reader: &mut Reader<'_>, count: usize, columns: usize) -> Result<Vec<usize>> {
    if count > columns {
        return Err(reader.corrupt("key with more columns than the table"));
    }
    let mut key = Vec::with_capacity(count);
    for _ in 0..count {
        let column = reader.u32()? as usize;
        if column >= columns {
            return Err(reader.corrupt("key column out of range"));
        }
        key.push(column);
    }
    Ok(key)
}

fn read_table_definition(reader: &mut Reader<'_>) -> Result<Table> {
    let name = reader.str()?;
    let schema = reader.schema()?;
    let key_field = reader.u32()?;
    let flags = HAS_UNIQUE_CONSTRAINTS | HAS_DEFAULTS_OR_CHECKS | HAS_SEQUENCES | HAS_FOREIGN_KEYS | HAS_INDEXES;
    let key = read_key_columns(reader, (key_field & !flags) as usize, schema.len())?;
    let mut unique = Vec::new();
    if key_field & HAS_UNIQUE_CONSTRAINTS != 0 {
        let count = reader.u32()? as usize;
        if count > schema.len().max(1) * 64 {
            return Err(reader.corrupt("too many unique constraints"));
        }
        for _ in 0..count {
            let columns = reader.u32()? as usize;
            unique.push(read_key_columns(reader, columns, schema.len())?);
        }
    }
    let mut defaults = Vec::new();
    let mut checks = Vec::new();
    if key_field & HAS_DEFAULTS_OR_CHECKS != 0 {
        for _ in 0..schema.len() {
            defaults.push(match reader.u8()? {
                0 => None,
                1 => Some(reader.str()?),
                other => return Err(reader.corrupt(&format!("invalid DEFAULT marker {other}"))),
            });
        }
        let count = reader.u32()? as usize;
        // Each check takes at least its two 8-byte lengths.
        if count.saturating_mul(16) > reader.len_left() {
            return Err(reader.corrupt("more CHECK constraints than bytes"));
        }
        for _ in 0..count {
            let name = reader.str()?;
            let sql = reader.str()?;
            checks.push(crate::table::CheckConstraint { name, sql });
        }
    }
    let mut sequences = Vec::new();
    if key_field & HAS_SEQUENCES != 0 {
        let count = reader.u32()? as usize;
        if count > schema.len() {
            return Err(reader.corrupt("more owned sequences than columns"));
        }
        for _ in 0..count {
            let column = reader.u32()? as usize;
            if column >= schema.len() {
                return Err(reader.corrupt("a sequence owned by a column out of range"));
            }
            let always = reader.u8()? != 0;
            sequences.push(OwnedSequence { column, always, sequence: read_sequence_definition(reader)? });
        }
    }
    let mut foreign_keys = Vec::new();
    if key_field & HAS_FOREIGN_KEYS != 0 {
        let count = reader.u32()? as usize;
        if count.saturating_mul(20) > reader.len_left() {
            return Err(reader.corrupt("more foreign keys than bytes"));
        }
        for _ in 0..count {
            let name = reader.str()?;
            let parent = reader.str()?;
            let width_and_actions = reader.u32()?;
            let action = |shift: u32| {
                ReferentialAction::from_code(width_and_actions >> shift & 0xF)
                    .ok_or_else(|| reader.corrupt("a foreign key with an unknown ON DELETE / ON UPDATE action"))
            };
            let (on_delete, on_update) = (action(ON_DELETE_SHIFT)?, action(ON_UPDATE_SHIFT)?);
            let width = (width_and_actions & 0xFFFF) as usize;
            let columns = read_key_columns(reader, width, schema.len())?;
            // The parent's columns are checked against the parent once it is read.
            let parent_columns = (0..width).map(|_| reader.u32().map(|c| c as usize)).collect::<Result<Vec<_>>>()?;
            foreign_keys.push(crate::table::ForeignKey { name, columns, parent, parent_columns, on_delete, on_update });
        }
    }
    let mut indexes = Vec::new();
    if key_field & HAS_INDEXES != 0 {
        let count = reader.u32()? as usize;
        if count.saturating_mul(13) > reader.len_left() {
            return Err(reader.corrupt("more indexes than bytes"));
        }
        for _ in 0..count {
            let name = reader.str()?;
            let unique = reader.u8()? != 0;
            let width = reader.u32()? as usize;
            let columns = read_key_columns(reader, width, schema.len())?;
            indexes.push(Arc::new(crate::index::TableIndex::new(crate::index::IndexDefinition { name, columns, unique })));
        }
    }
    let block_rows = reader.u64()?;
    if block_rows == 0 || block_rows > MAX_STRIPE_ROWS as u64 {
        return Err(reader.corrupt(&format!("invalid block size {block_rows}")));
    }
    Ok(Table::new(name, schema, block_rows as usize)
        .with_primary_key(key)
        .with_unique(unique)
        .with_defaults(defaults)
        .with_checks(checks)
        .with_sequences(sequences)
        .with_foreign_keys(foreign_keys)
        .with_indexes(indexes))
}

fn encoding_code(writer: &mut Writer, encoding: Encoding) {
    let (tag, width, values) = match encoding {
        Encoding::Plain => (0, 0, 0),
        Encoding::FrameOfReference { width } => (1, width, 0),
        Encoding::Dictionary { width, values } => (2, width, values),
        Encoding::Strings { compressed } => (3, compressed as u8, 0),
    };
    writer.u8(tag);
    writer.u8(width);
    writer.u32(values);
}

fn read_encoding(reader: &mut Reader<'_>) -> Result<Encoding> {
    let (tag, width, values) = (reader.u8()?, reader.u8()?, reader.u32()?);
    Ok(match tag {
        0 => Encoding::Plain,
        1 => Encoding::FrameOfReference { width },
        2 => Encoding::Dictionary { width, values },
        3 => Encoding::Strings { compressed: width != 0 },
        other => return Err(reader.corrupt(&format!("unknown encoding {other}"))),
    })
}

fn stripe_label(table: &str, block: usize, column: &str) -> Arc<str> {
    Arc::from(format!("table \"{table}\", block {block}, column \"{column}\""))
}

impl DurableStore {
    /// Opens or creates the database at `path`: reads the catalog of the last checkpoint
    /// and replays the write-ahead log. Returns the store, the tables and the views.
    pub fn open(path: &Path, pool: Arc<BufferPool>) -> Result<(Arc<DurableStore>, Recovered)> {
        let (file, root) = DatabaseFile::open(path, pool)?;
        let mut catalog = Entries::default();
        let mut used = Vec::new();
        if let Some(root) = root {
            let metadata = file.read_extent(root.metadata, root.metadata_checksum, "the catalog metadata")?;
            used.push(root.metadata);
            let (tables, views, sequences) = read_metadata(&file, &metadata, &mut used)?;
            for table in tables {
                catalog.tables.insert(table.name.clone(), Arc::new(table));
            }
            for view in views {
                catalog.views.insert(view.name.clone(), Arc::new(view));
            }
            for sequence in sequences {
                catalog.sequences.insert(sequence.name.clone(), sequence);
            }
        }
        file.init_space(&used);
        let mut wal_path = path.as_os_str().to_owned();
        wal_path.push(".wal");
        let wal_path = PathBuf::from(wal_path);
        let generation = root.map_or(0, |r| r.generation);
        let wal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&wal_path)
            .map_err(|e| io_error(&wal_path, "cannot open the write-ahead log", e))?;
        // The log's header is synced when a database is created, before anything else is
        // written: a file with data but no root (its first checkpoint did not finish) always
        // has one. Without it, blank root slots are damage, not a new database.
        let wal_missing = wal.metadata().map_err(|e| io_error(&wal_path, "cannot read", e))?.len() < WAL_HEADER_BYTES;
        if root.is_none() && wal_missing && file.has_data()? {
            return Err(ApiaryError::Corruption(format!(
                "\"{}\" holds data but no valid root, and its write-ahead log \"{}\" is missing or empty: the database is damaged",
                path.display(),
                wal_path.display()
            )));
        }
        let wal_len = replay(&wal, &wal_path, generation, &mut catalog)?;
        let store = Arc::new(DurableStore { file, wal_path, state: Mutex::new(WalState { wal, wal_len, root }) });
        if wal_len == 0 {
            store.lock().reset_wal(generation)?;
            crate::file::sync_parent_directory(&store.wal_path)?;
        }
        let recovered = Recovered {
            tables: catalog.tables.into_values().collect(),
            views: catalog.views.into_values().collect(),
            sequences: catalog.sequences.into_values().collect(),
        };
        Ok((store, recovered))
    }

    /// Takes the commit lock.
    pub fn lock(&self) -> CommitGuard<'_> {
        CommitGuard { store: self, state: self.state.lock().unwrap_or_else(|e| e.into_inner()) }
    }
}

impl DurableStore {
    /// Writes the stripes of blocks an unfinished append sealed (numbered as in `table`),
    /// so a load larger than memory does not wait for its commit to write them: once
    /// written they are cached, and the buffer pool may evict them. Until a checkpoint
    /// refers to them they are not durable, and if the append fails their space is
    /// freed with them.
    pub fn write_blocks(&self, table: &Table, blocks: &[(usize, Arc<Block>)], threads: usize) -> Result<()> {
        let mut pending = Vec::new();
        unwritten_stripes(table, blocks.iter().map(|(number, block)| (*number, block)), &mut pending);
        write_stripes(&self.file, &pending, threads)
    }
}

impl CommitGuard<'_> {
    /// Bytes in the write-ahead log.
    pub fn wal_bytes(&self) -> u64 {
        self.state.wal_len
    }

    /// Appends one statement's changes to the log and syncs it.
    pub fn log(&mut self, entries: &[LogEntry]) -> Result<()> {
        if entries.iter().any(|e| matches!(e, LogEntry::CreateView(_) | LogEntry::DropView(_))) {
            self.store.file.require_format(crate::file::VIEWS_FORMAT_VERSION)?;
        }
        if entries.iter().any(|e| matches!(e, LogEntry::CreateTable(table) if has_time_zone_types(table))) {
            self.store.file.require_format(crate::file::TIME_ZONE_TYPES_FORMAT_VERSION)?;
        }
        if entries.iter().any(|e| matches!(e, LogEntry::CreateTable(table) if has_defaults_or_checks(table))) {
            self.store.file.require_format(crate::file::DEFAULTS_AND_CHECKS_FORMAT_VERSION)?;
        }
        let sequences = |e: &LogEntry| match e {
            LogEntry::CreateTable(table) => !table.sequences.is_empty() || !table.foreign_keys.is_empty() || !table.indexes.is_empty(),
            LogEntry::CreateSequence(_) | LogEntry::DropSequence(_) | LogEntry::SequenceValues(_) => true,
            _ => false,
        };
        if entries.iter().any(sequences) {
            self.store.file.require_format(crate::file::SEQUENCES_FORMAT_VERSION)?;
        }
        if entries.iter().any(|e| matches!(e, LogEntry::CreateTable(table) if has_referential_actions(table))) {
            self.store.file.require_format(crate::file::REFERENTIAL_ACTIONS_FORMAT_VERSION)?;
        }
        let mut writer = Writer::new();
        writer.u32(entries.len() as u32);
        for entry in entries {
            match entry {
                LogEntry::CreateTable(table) => {
                    writer.u8(1);
                    table_definition(&mut writer, table);
                }
                LogEntry::DropTable(name) => {
                    writer.u8(2);
                    writer.str(name);
                }
                LogEntry::Append { table, columns } => {
                    writer.u8(3);
                    writer.str(table);
                    writer.u64(columns.first().map_or(0, |c| c.len()) as u64);
                    writer.u32(columns.len() as u32);
                    for column in columns {
                        writer.blob(&encode(column).1);
                    }
                }
                LogEntry::CreateView(view) => {
                    writer.u8(4);
                    view_definition(&mut writer, view);
                }
                LogEntry::DropView(name) => {
                    writer.u8(5);
                    writer.str(name);
                }
                LogEntry::Delete { table, row_ids } => {
                    writer.u8(6);
                    writer.str(table);
                    writer.u64(row_ids.len() as u64);
                    row_ids.iter().for_each(|&id| writer.u64(id as u64));
                }
                LogEntry::Truncate(table) => {
                    writer.u8(7);
                    writer.str(table);
                }
                LogEntry::CreateSequence(sequence) => {
                    writer.u8(8);
                    sequence_definition(&mut writer, sequence);
                }
                LogEntry::DropSequence(name) => {
                    writer.u8(9);
                    writer.str(name);
                }
                LogEntry::SequenceValues(values) => {
                    writer.u8(10);
                    writer.u64(values.len() as u64);
                    for (name, state) in values {
                        writer.str(name);
                        sequence_state(&mut writer, *state);
                    }
                }
            }
        }
        let mut record = Writer::new();
        record.u64(writer.bytes.len() as u64);
        record.u64(checksum(&writer.bytes));
        record.bytes.extend_from_slice(&writer.bytes);
        let path = &self.store.wal_path;
        let offset = self.state.wal_len;
        let written = self.state.wal.write_all_at(&record.bytes, offset).and_then(|_| self.state.wal.sync_data());
        if let Err(e) = written {
            // Cut off whatever part of the record reached the file.
            let _ = self.state.wal.set_len(offset);
            return Err(io_error(path, "cannot write the write-ahead log", e));
        }
        self.state.wal_len += record.bytes.len() as u64;
        Ok(())
    }

    /// Writes `tables` (with their contents), `views` and `sequences` (of CREATE
    /// SEQUENCE): the complete committed state, as the new checkpoint, and resets the log.
    pub fn checkpoint(
        &mut self,
        tables: &[(Arc<Table>, Arc<TableData>)],
        views: &[Arc<View>],
        sequences: &[Arc<Sequence>],
        threads: usize,
    ) -> Result<()> {
        let file = &self.store.file;
        if !views.is_empty() {
            file.require_format(crate::file::VIEWS_FORMAT_VERSION)?;
        }
        if !sequences.is_empty()
            || tables.iter().any(|(table, _)| !table.sequences.is_empty() || !table.foreign_keys.is_empty() || !table.indexes.is_empty())
        {
            file.require_format(crate::file::SEQUENCES_FORMAT_VERSION)?;
        }
        if tables.iter().any(|(table, _)| has_time_zone_types(table)) {
            file.require_format(crate::file::TIME_ZONE_TYPES_FORMAT_VERSION)?;
        }
        if tables.iter().any(|(table, _)| has_referential_actions(table)) {
            file.require_format(crate::file::REFERENTIAL_ACTIONS_FORMAT_VERSION)?;
        }
        if tables.iter().any(|(_, data)| data.blocks.iter().any(|b| b.deleted.is_some())) {
            file.require_format(crate::file::DELETIONS_FORMAT_VERSION)?;
        }
        if tables.iter().any(|(table, _)| has_defaults_or_checks(table)) {
            file.require_format(crate::file::DEFAULTS_AND_CHECKS_FORMAT_VERSION)?;
        }
        // 1. Stripes not yet in the file, encoded and written in parallel.
        let mut pending = Vec::new();
        for (table, data) in tables {
            unwritten_stripes(table, data.blocks.iter().enumerate(), &mut pending);
        }
        write_stripes(file, &pending, threads)?;
        // 2. The metadata, then the root.
        let mut used = Vec::new();
        let metadata = write_metadata(tables, views, sequences, &mut used);
        let metadata_extent = file.write_extent(&metadata)?;
        let generation = self.state.root.map_or(0, |r| r.generation) + 1;
        let root = Root { generation, metadata: metadata_extent, metadata_checksum: checksum(&metadata) };
        if let Err(e) = file.sync().and_then(|_| file.write_root(root)) {
            file.release_unused(metadata_extent);
            return Err(e);
        }
        used.push(metadata_extent);
        let old_metadata = self.state.root.map(|r| r.metadata);
        self.state.root = Some(root);
        file.root_replaced(&used, old_metadata);
        // 3. The log is folded in.
        self.reset_wal(generation)?;
        file.trim()
    }

    fn reset_wal(&mut self, generation: u64) -> Result<()> {
        let mut header = Writer::new();
        header.bytes.extend_from_slice(WAL_MAGIC);
        header.u32(crate::file::FORMAT_VERSION);
        header.u64(generation);
        let sum = checksum(&header.bytes);
        header.u64(sum);
        debug_assert_eq!(header.bytes.len() as u64, WAL_HEADER_BYTES);
        let path = &self.store.wal_path;
        let wal = &mut self.state.wal;
        wal.set_len(0).map_err(|e| io_error(path, "cannot reset the write-ahead log", e))?;
        wal.write_all_at(&header.bytes, 0).map_err(|e| io_error(path, "cannot write the write-ahead log", e))?;
        wal.sync_all().map_err(|e| io_error(path, "cannot sync the write-ahead log", e))?;
        self.state.wal_len = WAL_HEADER_BYTES;
        Ok(())
    }
}

/// Adds the stripes of `blocks` (numbered as in `table`) not yet in the file to `pending`,
/// each with the label its errors will name.
fn unwritten_stripes<'a>(
    table: &Table,
    blocks: impl Iterator<Item = (usize, &'a Arc<Block>)>,
    pending: &mut Vec<(Arc<ColumnStripe>, Arc<str>)>,
) {
    for (number, block) in blocks {
        for (stripe, field) in block.columns.iter().zip(&table.schema.fields) {
            if stripe.stored_location().is_none() {
                pending.push((Arc::clone(stripe), stripe_label(&table.name, number, &field.name)));
            }
        }
    }
}

/// Encodes and writes stripes on up to `threads` threads.
fn write_stripes(file: &Arc<DatabaseFile>, pending: &[(Arc<ColumnStripe>, Arc<str>)], threads: usize) -> Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let write_one = |(stripe, label): &(Arc<ColumnStripe>, Arc<str>)| -> Result<()> {
        let values = stripe.vector()?;
        let (encoding, bytes, dictionary) = encode_with_dictionary(&values);
        let extent = file.write_extent(&bytes)?;
        let stored = StoredStripe { file: Arc::clone(file), extent, checksum: checksum(&bytes), encoding, label: Arc::clone(label) };
        let cached = stripe.set_stored(stored.clone(), dictionary);
        file.pool.loaded(stripe, &stored, cached);
        Ok(())
    };
    let worker = || -> Result<()> {
        loop {
            let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match pending.get(index) {
                Some(item) => write_one(item)?,
                None => return Ok(()),
            }
        }
    };
    let threads = threads.clamp(1, pending.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads).map(|_| scope.spawn(worker)).collect();
        let mut result = worker();
        for handle in handles {
            let joined = handle.join().unwrap_or_else(|_| Err(apiary_common::internal_err!("stripe writer panicked")));
            result = result.and(joined);
        }
        result
    })
}

/// The catalog metadata: the tables (definition, statistics, blocks), then, since format
/// 3 and only when there are any views or sequences, the views, then, since format 7 and
/// only when there are any, the sequences of CREATE SEQUENCE.
fn write_metadata(
    tables: &[(Arc<Table>, Arc<TableData>)],
    views: &[Arc<View>],
    sequences: &[Arc<Sequence>],
    used: &mut Vec<Extent>,
) -> Vec<u8> {
    let mut writer = Writer::new();
    writer.u32(tables.len() as u32);
    for (table, data) in tables {
        table_definition(&mut writer, table);
        writer.table_stats(&data.stats);
        writer.u64(data.blocks.len() as u64);
        for block in &data.blocks {
            match &block.deleted {
                None => writer.u64(block.row_count as u64),
                Some(deleted) => {
                    writer.u64(block.row_count as u64 | HAS_DELETED_ROWS);
                    write_deleted_rows(&mut writer, deleted, block.row_count);
                }
            }
            for stripe in &block.columns {
                let stored = stripe.stored_location().expect("checkpoint writes every stripe first");
                writer.u64(stored.extent.offset);
                writer.u64(stored.extent.len);
                writer.u64(stored.checksum);
                encoding_code(&mut writer, stored.encoding);
                writer.zone_map(stripe.zone_map());
                used.push(stored.extent);
            }
        }
    }
    if !views.is_empty() || !sequences.is_empty() {
        writer.u32(views.len() as u32);
        views.iter().for_each(|view| view_definition(&mut writer, view));
    }
    if !sequences.is_empty() {
        writer.u64(sequences.len() as u64);
        sequences.iter().for_each(|sequence| sequence_definition(&mut writer, sequence));
    }
    writer.bytes
}

type Metadata = (Vec<Table>, Vec<View>, Vec<Arc<Sequence>>);

fn read_metadata(file: &Arc<DatabaseFile>, bytes: &[u8], used: &mut Vec<Extent>) -> Result<Metadata> {
    let mut reader = Reader::new(bytes, "the catalog metadata");
    let count = reader.u32()? as usize;
    let mut tables = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let table = read_table_definition(&mut reader)?;
        let stats = reader.table_stats()?;
        if stats.columns.len() != table.schema.len() {
            return Err(reader.corrupt("statistics do not match the columns"));
        }
        let block_count = reader.len(8)?;
        let mut blocks = Vec::with_capacity(block_count);
        // The statistics must count exactly the blocks' rows and NULLs (appends subtract
        // a replaced block's counts from them).
        let mut total_rows = 0u64;
        let mut null_counts = vec![0u64; table.schema.len()];
        for block_index in 0..block_count {
            let stored_count = reader.u64()?;
            let row_count = stored_count & !HAS_DELETED_ROWS;
            if row_count > MAX_STRIPE_ROWS as u64 {
                return Err(reader.corrupt(&format!("{row_count} rows in one block")));
            }
            let row_count = row_count as usize;
            let deleted = match stored_count & HAS_DELETED_ROWS != 0 {
                true => Some(Arc::new(read_deleted_rows(&mut reader, row_count)?)),
                false => None,
            };
            total_rows += row_count as u64;
            let mut columns = Vec::with_capacity(table.schema.len());
            for (column, field) in table.schema.fields.iter().enumerate() {
                let extent = Extent { offset: reader.u64()?, len: reader.u64()? };
                let checksum = reader.u64()?;
                let encoding = read_encoding(&mut reader)?;
                let zone_map = reader.zone_map()?;
                if zone_map.null_count > row_count {
                    return Err(reader.corrupt("more NULLs than rows in a block"));
                }
                null_counts[column] += zone_map.null_count as u64;
                if extent.offset < crate::file::DATA_START || extent.offset.checked_add(extent.len).is_none() {
                    return Err(reader.corrupt("extent out of range"));
                }
                used.push(extent);
                let label = stripe_label(&table.name, block_index, &field.name);
                let stored = StoredStripe { file: Arc::clone(file), extent, checksum, encoding, label };
                columns.push(Arc::new(ColumnStripe::stored(row_count, field.data_type, zone_map, stored)));
            }
            blocks.push(Arc::new(Block::from_stripes(row_count, columns, deleted)));
        }
        let counted = stats.row_count as u64 == total_rows
            && stats.columns.iter().zip(&null_counts).all(|(column, &nulls)| column.null_count as u64 == nulls);
        if !counted {
            return Err(reader.corrupt("statistics do not match the blocks"));
        }
        tables.push(table.with_data(TableData { blocks, stats, layout: 0 }));
    }
    let mut views = Vec::new();
    if !reader.is_at_end() {
        let count = reader.u32()? as usize;
        for _ in 0..count {
            views.push(read_view_definition(&mut reader)?);
        }
    }
    let mut sequences = Vec::new();
    if !reader.is_at_end() {
        let count = reader.len(8)?;
        for _ in 0..count {
            sequences.push(read_sequence_definition(&mut reader)?);
        }
    }
    if !reader.is_at_end() {
        return Err(reader.corrupt("trailing bytes"));
    }
    Ok((tables, views, sequences))
}

/// Set in a block's stored row count when a list of its deleted rows follows (format 5).
const HAS_DELETED_ROWS: u64 = 1 << 63;

/// A block's deleted rows: their positions (tag 0), or for many, the bitmap's words (tag 1).
fn write_deleted_rows(writer: &mut Writer, deleted: &apiary_common::Bitmap, row_count: usize) {
    let count = deleted.count_ones();
    if count * 32 < row_count {
        writer.u8(0);
        writer.u64(count as u64);
        deleted.iter_ones().for_each(|row| writer.u32(row as u32));
    } else {
        writer.u8(1);
        let words = row_count.div_ceil(64);
        (0..words).for_each(|i| writer.u64(deleted.words().get(i).copied().unwrap_or(0)));
    }
}

fn read_deleted_rows(reader: &mut Reader<'_>, row_count: usize) -> Result<apiary_common::Bitmap> {
    match reader.u8()? {
        0 => {
            let count = reader.len(4)?;
            let mut deleted = apiary_common::Bitmap::new(row_count, false);
            for _ in 0..count {
                let row = reader.u32()? as usize;
                if row >= row_count {
                    return Err(reader.corrupt("a deleted row past the end of its block"));
                }
                deleted.set(row, true);
            }
            Ok(deleted)
        }
        1 => {
            let words = (0..row_count.div_ceil(64)).map(|_| reader.u64()).collect::<Result<Vec<u64>>>()?;
            Ok(apiary_common::Bitmap::from_words(words, row_count))
        }
        other => Err(reader.corrupt(&format!("unknown list of deleted rows {other}"))),
    }
}

/// The tables and views while a database is recovered.
#[derive(Default)]
struct Entries {
    tables: BTreeMap<String, Arc<Table>>,
    views: BTreeMap<String, Arc<View>>,
    sequences: BTreeMap<String, Arc<Sequence>>,
}

/// Applies the log's records for `generation` to `tables`; returns the length of the
/// valid log (0 when the log must be reset: new, empty, or from an older checkpoint).
fn replay(wal: &File, path: &Path, generation: u64, catalog: &mut Entries) -> Result<u64> {
    let length = wal.metadata().map_err(|e| io_error(path, "cannot read", e))?.len();
    if length < WAL_HEADER_BYTES {
        return Ok(0);
    }
    let mut bytes = vec![0u8; length as usize];
    wal.read_exact_at(&mut bytes, 0).map_err(|e| io_error(path, "cannot read the write-ahead log", e))?;
    let mut header = Reader::new(&bytes[..WAL_HEADER_BYTES as usize], "the write-ahead log header");
    let magic_ok = header.take(8)? == WAL_MAGIC;
    let version = header.u32()?;
    let base = header.u64()?;
    let stored_sum = header.u64()?;
    if !magic_ok || checksum(&bytes[..20]) != stored_sum {
        return Err(ApiaryError::Corruption(format!("\"{}\" is damaged: its header is invalid", path.display())));
    }
    if version > crate::file::FORMAT_VERSION {
        return Err(ApiaryError::Corruption(format!("\"{}\" was written by a newer version of Apiary (format {version})", path.display())));
    }
    if base < generation {
        return Ok(0); // folded into the checkpoint already
    }
    if base > generation {
        return Err(ApiaryError::Corruption(format!(
            "\"{}\" continues checkpoint {base}, but the database file holds checkpoint {generation}",
            path.display()
        )));
    }
    let mut position = WAL_HEADER_BYTES as usize;
    while let Some((record, end)) = log_record(&bytes, position) {
        if !record.intact {
            // A torn last record: the statement never committed. A damaged record with an
            // intact one after it is not torn: dropping it would lose committed statements.
            if log_record(&bytes, end).is_some_and(|(next, _)| next.intact) {
                return Err(ApiaryError::Corruption(format!(
                    "\"{}\" is damaged: the record at byte {position} fails its checksum, but later records are intact",
                    path.display()
                )));
            }
            break;
        }
        apply_record(record.bytes, catalog)?;
        position = end;
    }
    if position < bytes.len() {
        wal.set_len(position as u64).map_err(|e| io_error(path, "cannot truncate the write-ahead log", e))?;
    }
    Ok(position as u64)
}

/// A log record as found in the file.
struct LogRecord<'a> {
    bytes: &'a [u8],
    /// Whether its checksum matches.
    intact: bool,
}

/// The record at `position` of the log (length, checksum, bytes) and the position after
/// it, or `None` when the log ends there or the record runs past its end.
fn log_record(log: &[u8], position: usize) -> Option<(LogRecord<'_>, usize)> {
    let header = log.get(position..position.checked_add(16)?)?;
    let len = usize::try_from(u64::from_le_bytes(header[..8].try_into().ok()?)).ok()?;
    let sum = u64::from_le_bytes(header[8..].try_into().ok()?);
    let start = position + 16;
    let end = start.checked_add(len)?;
    let bytes = log.get(start..end)?;
    Some((LogRecord { bytes, intact: checksum(bytes) == sum }, end))
}

fn apply_record(record: &[u8], catalog: &mut Entries) -> Result<()> {
    let tables = &mut catalog.tables;
    let mut reader = Reader::new(record, "a write-ahead log record");
    let count = reader.u32()?;
    for _ in 0..count {
        match reader.u8()? {
            1 => {
                let table = read_table_definition(&mut reader)?;
                tables.insert(table.name.clone(), Arc::new(table));
            }
            2 => {
                let name = reader.str()?;
                tables.remove(&name);
            }
            3 => {
                let name = reader.str()?;
                let rows = reader.u64()? as usize;
                let column_count = reader.u32()? as usize;
                let table = tables.get(&name).ok_or_else(|| reader.corrupt(&format!("append to unknown table \"{name}\"")))?;
                if column_count != table.schema.len() {
                    return Err(reader.corrupt("append with the wrong number of columns"));
                }
                let types: Vec<DataType> = table.schema.fields.iter().map(|f| f.data_type).collect();
                let mut columns = Vec::with_capacity(column_count);
                for data_type in types {
                    columns.push(decode(reader.blob()?, data_type, rows, "a write-ahead log record")?);
                }
                let mut appender = table.appender()?;
                appender.append_columns(columns)?;
                appender.commit()?;
            }
            4 => {
                let view = read_view_definition(&mut reader)?;
                catalog.views.insert(view.name.clone(), Arc::new(view));
            }
            5 => {
                let name = reader.str()?;
                catalog.views.remove(&name);
            }
            6 => {
                let name = reader.str()?;
                let count = reader.len(8)?;
                let row_ids = (0..count).map(|_| reader.u64().map(|id| id as i64)).collect::<Result<Vec<i64>>>()?;
                let table = tables.get(&name).ok_or_else(|| reader.corrupt(&format!("delete from unknown table \"{name}\"")))?;
                // An UPDATE's new rows follow as an append. Deleting first and appending
                // after lays the blocks out as one writer doing both did: deleted rows
                // keep their places, and an append copies them with the last block.
                let mut appender = table.appender()?;
                appender.delete(&row_ids).map_err(|e| reader.corrupt(&format!("a delete that does not apply: {e}")))?;
                appender.commit()?;
            }
            7 => {
                let name = reader.str()?;
                let table = tables.get(&name).ok_or_else(|| reader.corrupt(&format!("truncate of unknown table \"{name}\"")))?;
                let mut appender = table.appender()?;
                appender.truncate()?;
                appender.commit()?;
            }
            8 => {
                let sequence = read_sequence_definition(&mut reader)?;
                catalog.sequences.insert(sequence.name.clone(), sequence);
            }
            9 => {
                let name = reader.str()?;
                catalog.sequences.remove(&name);
            }
            10 => {
                let count = reader.len(9)?;
                for _ in 0..count {
                    let name = reader.str()?;
                    let state = read_sequence_state(&mut reader)?;
                    let owned = tables.values().flat_map(|t| &t.sequences).map(|o| &o.sequence);
                    // A sequence dropped later in the log may be gone already.
                    if let Some(sequence) = catalog.sequences.values().chain(owned).find(|s| s.name == name) {
                        sequence.restore(state);
                    }
                }
            }
            other => return Err(reader.corrupt(&format!("unknown log entry {other}"))),
        }
    }
    Ok(())
}

/// Whether `table` has a column of a type that file formats before 4 cannot name.
fn has_time_zone_types(table: &Table) -> bool {
    table.schema.fields.iter().any(|f| matches!(f.data_type, DataType::TimestampTz | DataType::Time))
}
