//! The database: catalog, buffer pool, the worker pool shared by all connections, and
//! (for a database file) the durable store every change commits through.

use std::path::Path;
use std::sync::Arc;

use apiary_common::{ApiaryError, Result};
use apiary_execution::Scheduler;
use apiary_storage::pool::default_memory_limit;
use apiary_storage::{BufferPool, Catalog, CommitGuard, DurableStore, LogEntry, PreparedAppend, Table, TableData};

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
        let inner = DatabaseInner {
            catalog: Catalog::new(),
            scheduler: Scheduler::new(default_threads(), Arc::clone(&pool)),
            pool,
            store: None,
            next_connection_id: 1.into(),
            shared_groups: Default::default(),
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
        let (store, tables) = DurableStore::open(path, Arc::clone(&pool))?;
        let catalog = Catalog::new();
        for table in tables {
            catalog.create_table(table)?;
        }
        let inner = DatabaseInner {
            catalog,
            scheduler: Scheduler::new(default_threads(), Arc::clone(&pool)),
            pool,
            store: Some(store),
            next_connection_id: 1.into(),
            shared_groups: Default::default(),
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
    Append(&'a Arc<Table>, PreparedAppend<'a>),
    Drop(Vec<String>),
}

impl DatabaseInner {
    /// Makes `change` durable (for a database file) and then visible; returns the rows it
    /// added. A change that fails leaves nothing behind.
    pub(crate) fn commit(&self, change: Change<'_>) -> Result<u64> {
        let mut guard = self.store.as_ref().map(|s| s.lock());
        if let Change::Create(table, _) = &change {
            if self.catalog.get_table(&table.name).is_some() {
                return Err(ApiaryError::Catalog(format!("table \"{}\" already exists", table.name)));
            }
        }
        if let Some(guard) = guard.as_mut() {
            self.make_durable(guard, &change)?;
        }
        let rows = match change {
            Change::Create(table, rows) => {
                let appended = rows.map_or(0, |r| r.publish());
                self.catalog.create_table(table)?;
                appended
            }
            Change::Append(_, prepared) => prepared.publish(),
            Change::Drop(names) => {
                for name in names {
                    if let Some(dropped) = self.catalog.drop_table(&name) {
                        dropped.clear();
                    }
                }
                0
            }
        };
        if self.store.is_none() {
            // An in-memory database's tables cannot be evicted: they count against the
            // memory budget.
            let bytes = self.catalog.tables().iter().map(|t| t.snapshot().memory_bytes()).sum();
            self.pool.set_table_bytes(bytes);
        }
        if let Some(guard) = guard.as_mut() {
            if guard.wal_bytes() > WAL_CHECKPOINT_BYTES {
                // The statement is committed (in the log); a failed fold is retried by the
                // next checkpoint, so its error is not the statement's.
                let _ = self.checkpoint_locked(guard);
            }
        }
        Ok(rows as u64)
    }

    /// Small changes go to the log; appends of a block or more are written as a
    /// checkpoint, so their data is written once.
    fn make_durable(&self, guard: &mut CommitGuard<'_>, change: &Change<'_>) -> Result<()> {
        let large = |table: &Table, prepared: &PreparedAppend<'_>| prepared.appended_rows() >= table.block_rows;
        match change {
            Change::Create(table, Some(prepared)) if large(table, prepared) => {
                let mut state = self.committed_state(&[]);
                state.push((Arc::clone(table), Arc::clone(prepared.data())));
                guard.checkpoint(&state, self.scheduler.threads())
            }
            Change::Append(table, prepared) if large(table, prepared) => {
                let mut state = self.committed_state(&[table.name.as_str()]);
                state.push((Arc::clone(table), Arc::clone(prepared.data())));
                guard.checkpoint(&state, self.scheduler.threads())
            }
            Change::Create(table, rows) => {
                let mut entries = vec![LogEntry::CreateTable(Arc::clone(table))];
                if let Some(prepared) = rows.as_ref().filter(|r| r.appended_rows() > 0) {
                    entries.push(LogEntry::Append { table: table.name.clone(), columns: prepared.appended_columns()? });
                }
                guard.log(&entries)
            }
            Change::Append(table, prepared) => {
                if prepared.appended_rows() == 0 {
                    return Ok(());
                }
                guard.log(&[LogEntry::Append { table: table.name.clone(), columns: prepared.appended_columns()? }])
            }
            Change::Drop(names) => guard.log(&names.iter().map(|n| LogEntry::DropTable(n.clone())).collect::<Vec<_>>()),
        }
    }

    /// Every table with its published contents, except `except`.
    fn committed_state(&self, except: &[&str]) -> Vec<(Arc<Table>, Arc<TableData>)> {
        self.catalog.tables().into_iter().filter(|t| !except.contains(&t.name.as_str())).map(|t| (Arc::clone(&t), t.snapshot())).collect()
    }

    /// `CHECKPOINT`: folds the log into the database file (nothing for in-memory
    /// databases).
    pub(crate) fn checkpoint(&self) -> Result<()> {
        match &self.store {
            Some(store) => self.checkpoint_locked(&mut store.lock()),
            None => Ok(()),
        }
    }

    fn checkpoint_locked(&self, guard: &mut CommitGuard<'_>) -> Result<()> {
        guard.checkpoint(&self.committed_state(&[]), self.scheduler.threads())
    }
}

impl Drop for DatabaseInner {
    /// Closing folds the log into the file, so the next open reads no log. Everything is
    /// already durable; a failure here only means the next open replays the log.
    fn drop(&mut self) {
        if let Some(store) = &self.store {
            let mut guard = store.lock();
            if guard.wal_bytes() > apiary_storage::store::WAL_HEADER_BYTES {
                let _ = guard.checkpoint(&self.committed_state(&[]), self.scheduler.threads());
            }
        }
    }
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
