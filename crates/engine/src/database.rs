//! The database: catalog, buffer pool, the worker pool shared by all connections, and
//! (for a database file) the durable store every change commits through.

use std::path::Path;
use std::sync::Arc;

use apiary_common::{internal_err, ApiaryError, Result};
use apiary_execution::Scheduler;
use apiary_storage::pool::default_memory_limit;
use apiary_storage::{BufferPool, Catalog, CommitGuard, DurableStore, LogEntry, PreparedAppend, Sequence, Table, TableData, View};

use crate::connection::Connection;

/// The log is folded into the database file once it holds this many bytes.
const WAL_CHECKPOINT_BYTES: u64 = 16 << 20;

pub(crate) struct DatabaseInner {
    pub catalog: Catalog,
    pub scheduler: Scheduler,
    pub pool: Arc<BufferPool>,
    /// `None` for an in-memory database.
    pub store: Option<Arc<DurableStore>>,
    pub next_connection_id: std::sync::atomic::AtomicU64,
    /// Groups of concurrent queries sharing operators, while they gather members.
    pub shared_groups: crate::shared_operators::SharedGroups,
    /// Held while a statement changes which tables and views exist (in memory too), so
    /// the checks of one (names, dependencies) hold until it is published.
    pub catalog_changes: std::sync::Mutex<()>,
    /// Written while a transaction publishes its tables, read while a transaction or a
    /// statement takes its snapshot: a snapshot sees a transaction's changes of several
    /// tables all or none. The scheduler's (which takes statements' snapshots).
    pub publish_lock: Arc<std::sync::RwLock<()>>,
    /// Held from a write's FOREIGN KEY checks until it is published (a statement outside
    /// a block, a transaction's COMMIT), so that the checks of two writes cannot both
    /// pass against a state neither will leave: a child added while its parent goes.
    /// Taken after any table writer and released before anything waits for one.
    pub foreign_key_lock: std::sync::Mutex<()>,
}

/// A database. Cheap to clone (shared); open connections with [`Database::connect`].
#[derive(Clone)]
pub struct Database {
    pub(crate) inner: Arc<DatabaseInner>,
}

/// The default worker count: one per available core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

impl Database {
    /// A new, empty database that lives in memory.
    pub fn open_in_memory() -> Result<Database> {
        let pool = BufferPool::new(default_memory_limit());
        let scheduler = Scheduler::new(default_threads(), Arc::clone(&pool));
        let inner = DatabaseInner {
            catalog: Catalog::new().with_memory(Arc::clone(&pool)),
            publish_lock: Arc::clone(scheduler.publish_lock()),
            scheduler,
            pool,
            store: None,
            next_connection_id: 1.into(),
            shared_groups: Default::default(),
            catalog_changes: Default::default(),
            foreign_key_lock: Default::default(),
        };
        Ok(Database { inner: Arc::new(inner) })
    }

    /// Opens the database file at `path`, creating it if it does not exist
    /// (`:memory:` for an in-memory database). Only one process may have a file open.
    pub fn open(path: impl AsRef<Path>) -> Result<Database> {
        let path = path.as_ref();
        if path.as_os_str() == ":memory:" {
            return Self::open_in_memory();
        }
        let pool = BufferPool::new(default_memory_limit());
        let (store, recovered) = DurableStore::open(path, Arc::clone(&pool))?;
        let catalog = Catalog::new().with_memory(Arc::clone(&pool));
        for table in recovered.tables {
            catalog.create_table(table)?;
        }
        for view in recovered.views {
            catalog.put_view(view)?;
        }
        for sequence in recovered.sequences {
            catalog.create_sequence(sequence)?;
        }
        let scheduler = Scheduler::new(default_threads(), Arc::clone(&pool));
        let inner = DatabaseInner {
            catalog,
            publish_lock: Arc::clone(scheduler.publish_lock()),
            scheduler,
            pool,
            store: Some(store),
            next_connection_id: 1.into(),
            shared_groups: Default::default(),
            catalog_changes: Default::default(),
            foreign_key_lock: Default::default(),
        };
        Ok(Database { inner: Arc::new(inner) })
    }

    pub fn connect(&self) -> Connection {
        Connection::new(Arc::clone(&self.inner))
    }

    /// Running and queued queries of all sessions (what `apiary_queries()` lists).
    pub fn queries(&self) -> Vec<apiary_execution::QueryProgress> {
        self.inner.scheduler.queries()
    }

    /// Cancels a running or queued query by id (`apiary_cancel`); false if none has it.
    pub fn cancel_query(&self, id: u64) -> bool {
        self.inner.scheduler.cancel(id)
    }

    /// Number of worker threads (`SET threads`).
    /// Bytes of the memory budget held by running queries right now.
    pub fn query_memory_bytes(&self) -> usize {
        self.inner.pool.query_bytes()
    }

    pub fn threads(&self) -> usize {
        self.inner.scheduler.threads()
    }
}

/// How a committed change alters the catalog.
pub(crate) enum Change<'a> {
    /// A new table, with its first rows (CREATE TABLE AS).
    Create(Arc<Table>, Option<PreparedAppend<'a>>),
    /// Rows written to a table: appended, deleted (DELETE, UPDATE) or all removed first
    /// (TRUNCATE).
    Append(&'a Arc<Table>, PreparedAppend<'a>),
    /// A transaction's changes of several tables: logged in one record, published
    /// together.
    Writes(Vec<(&'a Arc<Table>, PreparedAppend<'a>)>),
    /// DROP TABLE / DROP VIEW / DROP SEQUENCE. The views that read them are dropped too
    /// with `cascade`, else they make the statement fail.
    Drop { tables: Vec<String>, views: Vec<String>, sequences: Vec<String>, cascade: bool },
    /// CREATE SEQUENCE.
    CreateSequence(Arc<Sequence>),
    /// CREATE VIEW; with `replace`, a view of that name is replaced if the new one keeps
    /// its columns (CREATE OR REPLACE VIEW).
    CreateView { view: Arc<View>, replace: bool },
    /// ALTER TABLE: `new` (with its rows) takes the place of `old`.
    Replace { old: Arc<Table>, new: Arc<Table> },
}

/// A change of which tables and views exist, kept by a transaction to replay at COMMIT
/// (a [`Change`] holds no table's writer).
pub(crate) enum CatalogChange {
    Create(Arc<Table>),
    Drop { tables: Vec<String>, views: Vec<String>, sequences: Vec<String>, cascade: bool },
    CreateSequence(Arc<Sequence>),
    CreateView { view: Arc<View>, replace: bool },
    Replace { old: Arc<Table>, new: Arc<Table> },
}

impl CatalogChange {
    /// The catalog part of `change` (a new table's first rows are not part of it).
    pub(crate) fn of(change: &Change<'_>) -> Result<CatalogChange> {
        Ok(match change {
            Change::Create(table, _) => CatalogChange::Create(Arc::clone(table)),
            Change::Drop { tables, views, sequences, cascade } => {
                CatalogChange::Drop { tables: tables.clone(), views: views.clone(), sequences: sequences.clone(), cascade: *cascade }
            }
            Change::CreateSequence(sequence) => CatalogChange::CreateSequence(Arc::clone(sequence)),
            Change::CreateView { view, replace } => CatalogChange::CreateView { view: Arc::clone(view), replace: *replace },
            Change::Replace { old, new } => CatalogChange::Replace { old: Arc::clone(old), new: Arc::clone(new) },
            Change::Append(..) | Change::Writes(_) => return Err(internal_err!("a write is not a catalog change")),
        })
    }

    pub(crate) fn change(&self) -> Change<'static> {
        match self {
            CatalogChange::Create(table) => Change::Create(Arc::clone(table), None),
            CatalogChange::Drop { tables, views, sequences, cascade } => {
                Change::Drop { tables: tables.clone(), views: views.clone(), sequences: sequences.clone(), cascade: *cascade }
            }
            CatalogChange::CreateSequence(sequence) => Change::CreateSequence(Arc::clone(sequence)),
            CatalogChange::CreateView { view, replace } => Change::CreateView { view: Arc::clone(view), replace: *replace },
            CatalogChange::Replace { old, new } => Change::Replace { old: Arc::clone(old), new: Arc::clone(new) },
        }
    }
}

impl DatabaseInner {
    /// Makes `change` durable (for a database file) and then visible; returns the rows it
    /// added. A change that fails leaves nothing behind.
    pub(crate) fn commit(&self, change: Change<'_>) -> Result<u64> {
        let _catalog_change = match change {
            Change::Append(..) | Change::Writes(_) => None,
            _ => Some(self.catalog_changes.lock().unwrap_or_else(|e| e.into_inner())),
        };
        let mut guard = self.store.as_ref().map(|s| s.lock());
        let change = check_catalog_change(&self.catalog, change)?;
        if let Some(guard) = guard.as_mut() {
            self.make_durable(guard, &change)?;
        }
        let rows = match change {
            Change::Append(_, prepared) => prepared.publish(),
            Change::Writes(writes) => {
                let _publishing = self.publish_lock.write().unwrap_or_else(|e| e.into_inner());
                writes.into_iter().map(|(_, prepared)| prepared.publish()).sum()
            }
            Change::Create(table, rows) => {
                let appended = rows.map_or(0, |r| r.publish());
                apply_catalog_change(&self.catalog, Change::Create(table, None))?;
                appended
            }
            other => {
                for dropped in apply_catalog_change(&self.catalog, other)? {
                    dropped.clear();
                }
                0
            }
        };
        self.after_commit(guard.as_mut());
        Ok(rows as u64)
    }

    /// Commits a transaction block that changed which tables and views exist: its
    /// catalog changes (`operations`, as it made them) are checked again and applied, in
    /// order, to the catalog as committed now; then its writes (`writes`, of the tables
    /// in the resulting catalog) are made durable with them in one checkpoint and
    /// published together with the new catalog.
    pub(crate) fn commit_transaction(&self, operations: Vec<CatalogChange>, writes: Vec<(&Arc<Table>, PreparedAppend<'_>)>) -> Result<()> {
        let _catalog_change = self.catalog_changes.lock().unwrap_or_else(|e| e.into_inner());
        let mut guard = self.store.as_ref().map(|s| s.lock());
        let catalog = self.catalog.copy();
        let mut dropped = Vec::new();
        for operation in operations {
            let operation = check_catalog_change(&catalog, operation.change())?;
            dropped.extend(apply_catalog_change(&catalog, operation)?);
        }
        if let Some((table, _)) = writes.iter().find(|(table, _)| !catalog.holds(table)) {
            return Err(ApiaryError::Serialization(format!("table \"{}\" was dropped or altered by another transaction", table.name)));
        }
        if let Some(guard) = guard.as_mut() {
            let state: Vec<(Arc<Table>, Arc<TableData>)> = catalog
                .tables()
                .into_iter()
                .map(|table| {
                    let written = writes.iter().find(|(t, _)| Arc::ptr_eq(t, &table)).map(|(_, prepared)| Arc::clone(prepared.data()));
                    let data = written.unwrap_or_else(|| table.snapshot());
                    (table, data)
                })
                .collect();
            guard.checkpoint(&state, &catalog.views(), &catalog.sequences(), self.scheduler.threads())?;
        }
        {
            let _publishing = self.publish_lock.write().unwrap_or_else(|e| e.into_inner());
            for (_, prepared) in writes {
                prepared.publish();
            }
            self.catalog.assign(&catalog);
        }
        for table in dropped {
            table.clear();
        }
        self.after_commit(guard.as_mut());
        Ok(())
    }

    /// What follows every commit: an in-memory database's memory accounting, a file's
    /// log folded in once it has grown.
    fn after_commit(&self, guard: Option<&mut CommitGuard<'_>>) {
        if self.store.is_none() {
            // An in-memory database's tables cannot be evicted: they count against the
            // memory budget.
            let bytes = self.catalog.tables().iter().map(|t| t.snapshot().memory_bytes()).sum();
            self.pool.set_table_bytes(bytes);
        }
        if let Some(guard) = guard {
            if guard.wal_bytes() > WAL_CHECKPOINT_BYTES {
                // The change is committed (in the log); a failed fold is retried by the
                // next checkpoint, so its error is not the statement's.
                let _ = self.checkpoint_locked(guard);
            }
        }
    }

    /// Small changes go to the log; appends (or deletes) of a block or more are written as
    /// a checkpoint, so their data is written once.
    fn make_durable(&self, guard: &mut CommitGuard<'_>, change: &Change<'_>) -> Result<()> {
        let large = |table: &Table, prepared: &PreparedAppend<'_>| {
            prepared.appended_rows() >= table.block_rows || prepared.deleted_row_ids().len() >= table.block_rows
        };
        match change {
            Change::Create(table, Some(prepared)) if large(table, prepared) => {
                let mut state = self.committed_state(&[]);
                state.push((Arc::clone(table), Arc::clone(prepared.data())));
                guard.checkpoint(&state, &self.catalog.views(), &self.catalog.sequences(), self.scheduler.threads())
            }
            Change::Append(table, prepared) if large(table, prepared) => {
                let mut state = self.committed_state(&[table.name.as_str()]);
                state.push((Arc::clone(table), Arc::clone(prepared.data())));
                guard.checkpoint(&state, &self.catalog.views(), &self.catalog.sequences(), self.scheduler.threads())
            }
            Change::Writes(writes) if writes.iter().any(|(table, prepared)| large(table, prepared)) => {
                let names: Vec<&str> = writes.iter().map(|(table, _)| table.name.as_str()).collect();
                let mut state = self.committed_state(&names);
                state.extend(writes.iter().map(|(table, prepared)| (Arc::clone(table), Arc::clone(prepared.data()))));
                guard.checkpoint(&state, &self.catalog.views(), &self.catalog.sequences(), self.scheduler.threads())
            }
            Change::Writes(writes) => {
                let mut entries = Vec::new();
                for (table, prepared) in writes {
                    entries.extend(write_entries(table, prepared)?);
                }
                self.log(guard, entries)
            }
            Change::Create(table, rows) => {
                let mut entries = vec![LogEntry::CreateTable(Arc::clone(table))];
                if let Some(prepared) = rows.as_ref().filter(|r| r.appended_rows() > 0) {
                    entries.push(LogEntry::Append { table: table.name.clone(), columns: prepared.appended_columns()? });
                }
                self.log(guard, entries)
            }
            Change::Append(table, prepared) => {
                let entries = write_entries(table, prepared)?;
                self.log(guard, entries)
            }
            Change::Drop { tables, views, sequences, .. } => {
                let views = views.iter().map(|n| LogEntry::DropView(n.clone()));
                let sequences = sequences.iter().map(|n| LogEntry::DropSequence(n.clone()));
                self.log(guard, views.chain(sequences).chain(tables.iter().map(|n| LogEntry::DropTable(n.clone()))).collect())
            }
            Change::CreateSequence(sequence) => self.log(guard, vec![LogEntry::CreateSequence(Arc::clone(sequence))]),
            Change::CreateView { view, .. } => self.log(guard, vec![LogEntry::CreateView(Arc::clone(view))]),
            // A new definition and rewritten rows: a checkpoint (shared stripes already in
            // the file are not written again).
            Change::Replace { old, new } => {
                let mut state = self.committed_state(&[old.name.as_str()]);
                state.push((Arc::clone(new), new.snapshot()));
                guard.checkpoint(&state, &self.catalog.views(), &self.catalog.sequences(), self.scheduler.threads())
            }
        }
    }

    /// Logs `entries` as one record, after the state of every sequence that changed since
    /// the last record: a row's sequence value is durable no later than the row.
    fn log(&self, guard: &mut CommitGuard<'_>, mut entries: Vec<LogEntry>) -> Result<()> {
        let changed: Vec<_> =
            self.catalog.all_sequences().iter().filter_map(|s| s.take_changed().map(|state| (s.name.clone(), state))).collect();
        if !changed.is_empty() {
            entries.insert(0, LogEntry::SequenceValues(changed));
        }
        if entries.is_empty() {
            return Ok(());
        }
        guard.log(&entries)
    }

    /// Makes the sequences a statement advanced durable (a `SELECT nextval(...)` writes
    /// nothing else; a write logs them with its rows).
    pub(crate) fn log_sequences(&self) -> Result<()> {
        match &self.store {
            Some(store) if self.catalog.all_sequences().iter().any(|s| s.is_changed()) => self.log(&mut store.lock(), Vec::new()),
            _ => Ok(()),
        }
    }

    /// Every table with its published contents, except `except`.
    fn committed_state(&self, except: &[&str]) -> Vec<(Arc<Table>, Arc<TableData>)> {
        self.catalog.tables().into_iter().filter(|t| !except.contains(&t.name.as_str())).map(|t| (Arc::clone(&t), t.snapshot())).collect()
    }

    /// `CHECKPOINT`: compacts the tables with deleted rows (see [`Table::compact`]) and
    /// folds the log into the database file (an in-memory database only compacts).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        match &self.store {
            Some(store) => self.checkpoint_locked(&mut store.lock()),
            None => {
                let tables = self.catalog.tables();
                for table in &tables {
                    if let Some(compaction) = table.compact()? {
                        compaction.publish();
                    }
                }
                self.pool.set_table_bytes(tables.iter().map(|t| t.snapshot().memory_bytes()).sum());
                Ok(())
            }
        }
    }

    /// Writes the committed state, compacted, as a checkpoint. A table a statement is
    /// writing now is written as it is (compacting it would move the rows the statement
    /// names); the compacted contents are published once the checkpoint holds them, so
    /// the log that follows names rows as the file has them.
    fn checkpoint_locked(&self, guard: &mut CommitGuard<'_>) -> Result<()> {
        let tables = self.catalog.tables();
        let compactions: Vec<_> = tables.iter().map(|t| t.compact()).collect::<Result<_>>()?;
        let state: Vec<(Arc<Table>, Arc<TableData>)> = tables
            .iter()
            .zip(&compactions)
            .map(|(table, compaction)| {
                let data = compaction.as_ref().map_or_else(|| table.snapshot(), |c| Arc::clone(c.data()));
                (Arc::clone(table), data)
            })
            .collect();
        guard.checkpoint(&state, &self.catalog.views(), &self.catalog.sequences(), self.scheduler.threads())?;
        compactions.into_iter().flatten().for_each(|c| c.publish());
        Ok(())
    }
}

impl Drop for DatabaseInner {
    /// Closing folds the log into the file, so the next open reads no log. Everything is
    /// already durable; a failure here only means the next open replays the log.
    fn drop(&mut self) {
        if let Some(store) = &self.store {
            let mut guard = store.lock();
            if guard.wal_bytes() > apiary_storage::store::WAL_HEADER_BYTES {
                let _ = guard.checkpoint(
                    &self.committed_state(&[]),
                    &self.catalog.views(),
                    &self.catalog.sequences(),
                    self.scheduler.threads(),
                );
            }
        }
    }
}

/// Checks a change of which tables and views exist against the catalog (under
/// [`DatabaseInner::catalog_changes`]): names free, a replaced view's columns kept, a view's
/// dependencies present, nothing dropped that a remaining view reads. Returns the
/// change with the views a CASCADE drops added.
pub(crate) fn check_catalog_change<'a>(catalog: &Catalog, change: Change<'a>) -> Result<Change<'a>> {
    match change {
        Change::Create(table, rows) => {
            if catalog.get_table(&table.name).is_some() {
                return Err(ApiaryError::Duplicate(format!("table \"{}\" already exists", table.name)));
            }
            if catalog.get_view(&table.name).is_some() {
                return Err(ApiaryError::Duplicate(format!("relation \"{}\" already exists (a view)", table.name)));
            }
            for name in std::iter::once(&table.name).chain(table.sequences.iter().map(|o| &o.sequence.name)) {
                if catalog.get_sequence(name).is_some() {
                    return Err(ApiaryError::Duplicate(format!("relation \"{name}\" already exists (a sequence)")));
                }
            }
            Ok(Change::Create(table, rows))
        }
        Change::CreateSequence(sequence) => {
            if catalog.relation_exists(&sequence.name) {
                return Err(ApiaryError::Duplicate(format!("relation \"{}\" already exists", sequence.name)));
            }
            Ok(Change::CreateSequence(sequence))
        }
        Change::CreateView { view, replace } => {
            if catalog.get_sequence(&view.name).is_some() {
                return Err(ApiaryError::Duplicate(format!("relation \"{}\" already exists (a sequence)", view.name)));
            }
            if catalog.get_table(&view.name).is_some() {
                return Err(match replace {
                    true => ApiaryError::WrongObjectType(format!("\"{}\" is a table, not a view", view.name)),
                    false => ApiaryError::Duplicate(format!("relation \"{}\" already exists (a table)", view.name)),
                });
            }
            if let Some(old) = catalog.get_view(&view.name) {
                if !replace {
                    return Err(ApiaryError::Duplicate(format!("view \"{}\" already exists", view.name)));
                }
                check_view_replacement(&old, &view)?;
            }
            for dependency in &view.dependencies {
                if catalog.get_table(dependency).is_none() && catalog.get_view(dependency).is_none() {
                    return Err(ApiaryError::Catalog(format!(
                        "relation \"{dependency}\" does not exist (dropped while the view was created)"
                    )));
                }
            }
            Ok(Change::CreateView { view, replace })
        }
        Change::Replace { old, new } => {
            if !catalog.holds(&old) {
                return Err(ApiaryError::Serialization(format!("table \"{}\" was altered or dropped meanwhile", old.name)));
            }
            if new.name != old.name && catalog.relation_exists(&new.name) {
                return Err(ApiaryError::Duplicate(format!("relation \"{}\" already exists", new.name)));
            }
            Ok(Change::Replace { old, new })
        }
        Change::Drop { tables, mut views, sequences, cascade } => {
            for name in &tables {
                let outside = crate::foreign_keys::referencing(catalog, name).into_iter().find(|(child, _)| !tables.contains(&child.name));
                if let Some((child, key)) = outside {
                    return Err(ApiaryError::Dependency(format!(
                        "cannot drop table {name} because constraint {} on table {} depends on it (drop table {} first{})",
                        key.name,
                        child.name,
                        child.name,
                        if cascade { "; CASCADE does not drop foreign keys yet" } else { "" }
                    )));
                }
            }
            let mut dropped: Vec<String> = tables.iter().chain(&views).cloned().collect();
            let dependents = catalog.dependent_views(&dropped);
            let mut blocking = Vec::new();
            for dependent in dependents {
                if dropped.contains(&dependent.name) {
                    continue;
                }
                if cascade {
                    dropped.push(dependent.name.clone());
                    views.push(dependent.name.clone());
                } else {
                    blocking.push(dependent);
                }
            }
            if let Some(first) = blocking.first() {
                let object = |name: &String| match catalog.get_view(name) {
                    Some(_) => format!("view {name}"),
                    None => format!("table {name}"),
                };
                let target = first.dependencies.iter().find(|d| dropped.contains(*d)).map(object).unwrap_or_default();
                let details: Vec<String> = blocking
                    .iter()
                    .map(|view| {
                        let on = view.dependencies.iter().find(|d| dropped.contains(*d) || blocking.iter().any(|b| b.name == **d));
                        format!("view {} depends on {}", view.name, on.map(object).unwrap_or_default())
                    })
                    .collect();
                return Err(ApiaryError::Dependency(format!(
                    "cannot drop {target} because other objects depend on it ({}); use DROP ... CASCADE to drop the dependent objects too",
                    details.join(", ")
                )));
            }
            Ok(Change::Drop { tables, views, sequences, cascade })
        }
        other => Ok(other),
    }
}

/// Applies a checked catalog change to `catalog` (a table's first rows are published by
/// the caller); returns the tables it dropped.
pub(crate) fn apply_catalog_change(catalog: &Catalog, change: Change<'_>) -> Result<Vec<Arc<Table>>> {
    match change {
        Change::Create(table, _) => catalog.create_table(table)?,
        Change::Drop { tables, views, sequences, .. } => {
            for name in views {
                catalog.drop_view(&name);
            }
            for name in sequences {
                catalog.drop_sequence(&name);
            }
            return Ok(tables.iter().filter_map(|name| catalog.drop_table(name)).collect());
        }
        Change::CreateSequence(sequence) => catalog.create_sequence(sequence)?,
        Change::CreateView { view, .. } => catalog.put_view(view)?,
        Change::Replace { old, new } => catalog.replace_table(&old.name, new)?,
        Change::Append(..) | Change::Writes(_) => return Err(internal_err!("a write is not a catalog change")),
    }
    Ok(Vec::new())
}

/// The log entries of a table's change, in the order the writer made them: a TRUNCATE,
/// deletes, then appends.
fn write_entries(table: &Table, prepared: &PreparedAppend<'_>) -> Result<Vec<LogEntry>> {
    let mut entries = Vec::new();
    if prepared.truncated() {
        entries.push(LogEntry::Truncate(table.name.clone()));
    }
    if !prepared.deleted_row_ids().is_empty() {
        entries.push(LogEntry::Delete { table: table.name.clone(), row_ids: prepared.deleted_row_ids().to_vec() });
    }
    if prepared.appended_rows() > 0 {
        entries.push(LogEntry::Append { table: table.name.clone(), columns: prepared.appended_columns()? });
    }
    Ok(entries)
}

/// CREATE OR REPLACE VIEW keeps the old view's columns (same names and types, in the same
/// order) and may add columns after them, as in PostgreSQL: queries and views reading
/// the view were checked against its columns.
fn check_view_replacement(old: &View, new: &View) -> Result<()> {
    if new.columns.len() < old.columns.len() {
        return Err(ApiaryError::Bind(format!(
            "cannot drop columns from view \"{}\" (CREATE OR REPLACE VIEW keeps the {} columns it has and may add more after them)",
            old.name,
            old.columns.len()
        )));
    }
    for (old_column, new_column) in old.columns.iter().zip(&new.columns) {
        if old_column.name != new_column.name {
            return Err(ApiaryError::Bind(format!(
                "cannot change name of view column \"{}\" to \"{}\" (CREATE OR REPLACE VIEW keeps the columns it has)",
                old_column.name, new_column.name
            )));
        }
        if old_column.data_type != new_column.data_type {
            return Err(ApiaryError::Bind(format!(
                "cannot change data type of view column \"{}\" from {} to {} (CREATE OR REPLACE VIEW keeps the columns it has)",
                old_column.name, old_column.data_type, new_column.data_type
            )));
        }
    }
    Ok(())
}

/// Reports the progress of one session's running query from another thread.
#[derive(Clone)]
pub struct ProgressHandle {
    pub(crate) db: Arc<DatabaseInner>,
    pub(crate) connection: u64,
}

impl ProgressHandle {
    /// The session's query now running or queued, if any.
    pub fn current(&self) -> Option<apiary_execution::QueryProgress> {
        self.db.scheduler.queries().into_iter().find(|q| q.connection == self.connection)
    }
}
