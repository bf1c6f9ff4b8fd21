//! The database: catalog plus the worker pool shared by all connections.

use std::path::Path;
use std::sync::Arc;

use apiary_common::{ApiaryError, Result};
use apiary_execution::Scheduler;
use apiary_storage::Catalog;

use crate::connection::Connection;

pub(crate) struct DatabaseInner {
    pub catalog: Catalog,
    pub scheduler: Scheduler,
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
        Ok(Database { inner: Arc::new(DatabaseInner { catalog: Catalog::new(), scheduler: Scheduler::new(default_threads()) }) })
    }

    /// Opens the database at `path` (`:memory:` for an in-memory database).
    pub fn open(path: impl AsRef<Path>) -> Result<Database> {
        let path = path.as_ref();
        if path.as_os_str() == ":memory:" {
            return Self::open_in_memory();
        }
        Err(ApiaryError::NotImplemented(format!(
            "persistent database files ({}): this version keeps databases in memory only; omit the path or use :memory:",
            path.display()
        )))
    }

    pub fn connect(&self) -> Connection {
        Connection::new(Arc::clone(&self.inner))
    }

    /// Number of worker threads (`SET threads`).
    pub fn threads(&self) -> usize {
        self.inner.scheduler.threads()
    }
}
