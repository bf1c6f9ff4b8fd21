//! The catalog: tables by name.
//!
//! Names are case-insensitive (stored lower-case) unless the binder passes a quoted
//! identifier through unchanged; the binder normalises before calling in here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use apiary_common::error::closest_name;
use apiary_common::{ApiaryError, Result};

use crate::table::Table;

#[derive(Debug, Default)]
pub struct Catalog {
    tables: RwLock<BTreeMap<String, Arc<Table>>>,
    /// Bumped by every CREATE and DROP: a plan made at an older version may name tables
    /// that are gone or miss new ones (prepared statements plan again).
    version: AtomicU64,
}

impl Catalog {
    pub fn new() -> Self {
        Catalog::default()
    }

    pub fn get_table(&self, name: &str) -> Option<Arc<Table>> {
        self.tables.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// The table called `name`, or an error naming it and suggesting a close match.
    pub fn table(&self, name: &str) -> Result<Arc<Table>> {
        if let Some(table) = self.get_table(name) {
            return Ok(table);
        }
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        let hint =
            closest_name(name, tables.keys().map(|k| k.as_str())).map(|close| format!(" (did you mean \"{close}\"?)")).unwrap_or_default();
        Err(ApiaryError::Catalog(format!("table \"{name}\" does not exist{hint}")))
    }

    /// Registers a new table; fails if the name is taken.
    pub fn create_table(&self, table: Arc<Table>) -> Result<()> {
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        if tables.contains_key(&table.name) {
            return Err(ApiaryError::Catalog(format!("table \"{}\" already exists", table.name)));
        }
        tables.insert(table.name.clone(), table);
        self.version.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Removes a table; returns it, or `None` when it did not exist.
    pub fn drop_table(&self, name: &str) -> Option<Arc<Table>> {
        let dropped = self.tables.write().unwrap_or_else(|e| e.into_inner()).remove(name);
        self.version.fetch_add(1, Ordering::Relaxed);
        dropped
    }

    /// Changes with every CREATE and DROP.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    pub fn table_names(&self) -> Vec<String> {
        self.tables.read().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect()
    }

    pub fn tables(&self) -> Vec<Arc<Table>> {
        self.tables.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }
}
