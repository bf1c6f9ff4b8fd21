//! The catalog: tables and views by name (one namespace: a view cannot have a table's
//! name).
//!
//! Names are case-insensitive (stored lower-case) unless the binder passes a quoted
//! identifier through unchanged; the binder normalises before calling in here. Where
//! both maps are locked, the tables' lock is taken first.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use apiary_common::error::closest_name;
use apiary_common::{ApiaryError, Result};

use crate::pool::BufferPool;
use crate::sequence::Sequence;
use crate::table::Table;
use crate::view::View;

#[derive(Debug, Default)]
pub struct Catalog {
    tables: RwLock<BTreeMap<String, Arc<Table>>>,
    views: RwLock<BTreeMap<String, Arc<View>>>,
    /// Sequences of CREATE SEQUENCE (a table's own are kept with it).
    sequences: RwLock<BTreeMap<String, Arc<Sequence>>>,
    /// Bumped by every CREATE, DROP and ALTER: a plan made at an older version may name tables
    /// that are gone or miss new ones (prepared statements plan again).
    version: AtomicU64,
    /// The budget the indexes of the tables it holds are charged to (see
    /// [`Table::attach_memory`]); `None`: not charged.
    memory: Option<Arc<BufferPool>>,
}

impl Catalog {
    pub fn new() -> Self {
        Catalog::default()
    }

    /// A catalog whose tables' indexes are charged to `pool`.
    pub fn with_memory(mut self, pool: Arc<BufferPool>) -> Self {
        for table in self.tables.get_mut().unwrap_or_else(|e| e.into_inner()).values() {
            table.attach_memory(&pool);
        }
        self.memory = Some(pool);
        self
    }

    fn attach(&self, table: &Table) {
        if let Some(pool) = &self.memory {
            table.attach_memory(pool);
        }
    }

    pub fn get_table(&self, name: &str) -> Option<Arc<Table>> {
        self.tables.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// Whether `table` is the catalog's table of its name (not one since dropped or
    /// replaced by ALTER TABLE).
    pub fn holds(&self, table: &Arc<Table>) -> bool {
        self.get_table(&table.name).is_some_and(|current| Arc::ptr_eq(&current, table))
    }

    /// The table called `name`, or an error naming it and suggesting a close match.
    pub fn table(&self, name: &str) -> Result<Arc<Table>> {
        if let Some(table) = self.get_table(name) {
            return Ok(table);
        }
        if self.get_view(name).is_some() {
            return Err(ApiaryError::WrongObjectType(format!("\"{name}\" is a view, not a table")));
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
            return Err(ApiaryError::Duplicate(format!("table \"{}\" already exists", table.name)));
        }
        if self.views.read().unwrap_or_else(|e| e.into_inner()).contains_key(&table.name) {
            return Err(ApiaryError::Duplicate(format!("relation \"{}\" already exists (a view)", table.name)));
        }
        self.attach(&table);
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

    /// Puts `table` in the place of the table `old` (ALTER TABLE; `table` may have a new
    /// name, which must be free).
    pub fn replace_table(&self, old: &str, table: Arc<Table>) -> Result<()> {
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        if table.name != old
            && (tables.contains_key(&table.name) || self.views.read().unwrap_or_else(|e| e.into_inner()).contains_key(&table.name))
        {
            return Err(ApiaryError::Duplicate(format!("relation \"{}\" already exists", table.name)));
        }
        if tables.remove(old).is_none() {
            return Err(ApiaryError::Catalog(format!("table \"{old}\" does not exist")));
        }
        self.attach(&table);
        tables.insert(table.name.clone(), table);
        self.version.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A separate catalog holding the same tables and views (a transaction's own, which
    /// its DDL changes until COMMIT).
    pub fn copy(&self) -> Catalog {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner()).clone();
        let views = self.views.read().unwrap_or_else(|e| e.into_inner()).clone();
        let sequences = self.sequences.read().unwrap_or_else(|e| e.into_inner()).clone();
        Catalog {
            tables: RwLock::new(tables),
            views: RwLock::new(views),
            sequences: RwLock::new(sequences),
            version: AtomicU64::new(self.version()),
            memory: self.memory.clone(),
        }
    }

    /// Makes this catalog hold what `other` holds (a committing transaction's catalog).
    pub fn assign(&self, other: &Catalog) {
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        *tables = other.tables.read().unwrap_or_else(|e| e.into_inner()).clone();
        tables.values().for_each(|table| self.attach(table));
        *self.views.write().unwrap_or_else(|e| e.into_inner()) = other.views.read().unwrap_or_else(|e| e.into_inner()).clone();
        *self.sequences.write().unwrap_or_else(|e| e.into_inner()) = other.sequences.read().unwrap_or_else(|e| e.into_inner()).clone();
        self.version.fetch_add(1, Ordering::Relaxed);
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

    pub fn get_view(&self, name: &str) -> Option<Arc<View>> {
        self.views.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// The views, by name.
    pub fn views(&self) -> Vec<Arc<View>> {
        self.views.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// Adds a view or replaces the one of the same name; fails if a table has the name.
    /// (Whether replacing is allowed is the caller's to check.)
    pub fn put_view(&self, view: Arc<View>) -> Result<()> {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        if tables.contains_key(&view.name) {
            return Err(ApiaryError::Duplicate(format!("relation \"{}\" already exists (a table)", view.name)));
        }
        self.views.write().unwrap_or_else(|e| e.into_inner()).insert(view.name.clone(), view);
        self.version.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Removes a view; returns it, or `None` when it did not exist.
    pub fn drop_view(&self, name: &str) -> Option<Arc<View>> {
        let dropped = self.views.write().unwrap_or_else(|e| e.into_inner()).remove(name);
        self.version.fetch_add(1, Ordering::Relaxed);
        dropped
    }

    /// The sequence called `name`: one of CREATE SEQUENCE, or one a table's column owns.
    pub fn get_sequence(&self, name: &str) -> Option<Arc<Sequence>> {
        if let Some(sequence) = self.sequences.read().unwrap_or_else(|e| e.into_inner()).get(name) {
            return Some(Arc::clone(sequence));
        }
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        tables.values().flat_map(|t| &t.sequences).find(|owned| owned.sequence.name == name).map(|owned| Arc::clone(&owned.sequence))
    }

    /// The sequences of CREATE SEQUENCE, by name.
    pub fn sequences(&self) -> Vec<Arc<Sequence>> {
        self.sequences.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// Every sequence: those of CREATE SEQUENCE and those tables own.
    pub fn all_sequences(&self) -> Vec<Arc<Sequence>> {
        let mut all = self.sequences();
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        all.extend(tables.values().flat_map(|t| &t.sequences).map(|owned| Arc::clone(&owned.sequence)));
        all
    }

    /// Whether `name` is taken by a table, a view, a sequence or an index (one
    /// namespace, as PostgreSQL's relations).
    pub fn relation_exists(&self, name: &str) -> bool {
        self.get_table(name).is_some()
            || self.get_view(name).is_some()
            || self.get_sequence(name).is_some()
            || self.index_owner(name).is_some()
    }

    /// The table that has the index called `name`.
    pub fn index_owner(&self, name: &str) -> Option<Arc<Table>> {
        let tables = self.tables.read().unwrap_or_else(|e| e.into_inner());
        tables.values().find(|t| t.indexes.iter().any(|i| i.definition.name == name)).cloned()
    }

    /// Registers a sequence of CREATE SEQUENCE; fails if the name is taken.
    pub fn create_sequence(&self, sequence: Arc<Sequence>) -> Result<()> {
        if self.relation_exists(&sequence.name) {
            return Err(ApiaryError::Duplicate(format!("relation \"{}\" already exists", sequence.name)));
        }
        self.sequences.write().unwrap_or_else(|e| e.into_inner()).insert(sequence.name.clone(), sequence);
        self.version.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Removes a sequence of CREATE SEQUENCE; returns it, or `None` when there is none.
    pub fn drop_sequence(&self, name: &str) -> Option<Arc<Sequence>> {
        let dropped = self.sequences.write().unwrap_or_else(|e| e.into_inner()).remove(name);
        self.version.fetch_add(1, Ordering::Relaxed);
        dropped
    }

    /// The views that read any of `names` (tables or views), directly or through other
    /// views, excluding `names` themselves: the views dropping them would break.
    pub fn dependent_views(&self, names: &[String]) -> Vec<Arc<View>> {
        let views = self.views.read().unwrap_or_else(|e| e.into_inner());
        let mut reached: Vec<String> = names.to_vec();
        let mut found: Vec<Arc<View>> = Vec::new();
        loop {
            let before = found.len();
            for view in views.values() {
                let new = !reached.contains(&view.name);
                if new && view.dependencies.iter().any(|d| reached.contains(d)) {
                    reached.push(view.name.clone());
                    found.push(Arc::clone(view));
                }
            }
            if found.len() == before {
                return found;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_types::{DataType, Field, Schema};

    fn view(name: &str, dependencies: &[&str]) -> Arc<View> {
        let columns = vec![Field::new("x", DataType::Integer, true)];
        Arc::new(View::new(name, "SELECT 1", columns, dependencies.iter().map(|d| d.to_string()).collect()))
    }

    #[test]
    fn views_share_the_tables_namespace_and_know_their_dependents() {
        let catalog = Catalog::new();
        catalog.create_table(Arc::new(Table::new("t", Schema::new(vec![Field::new("x", DataType::Integer, true)]), 16))).unwrap();
        assert!(matches!(catalog.put_view(view("t", &[])), Err(ApiaryError::Duplicate(_))));
        let version = catalog.version();
        catalog.put_view(view("v1", &["t"])).unwrap();
        assert_ne!(catalog.version(), version, "a view changes the catalog's version");
        catalog.put_view(view("v2", &["v1"])).unwrap();
        catalog.put_view(view("v3", &["v2", "t"])).unwrap();
        catalog.put_view(view("other", &[])).unwrap();
        let names = |views: Vec<Arc<View>>| views.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(catalog.dependent_views(&["t".to_string()])), ["v1", "v2", "v3"]);
        assert_eq!(names(catalog.dependent_views(&["v2".to_string()])), ["v3"]);
        assert!(catalog.dependent_views(&["other".to_string()]).is_empty());
        let dummy = Arc::new(Table::new("v1", Schema::new(vec![Field::new("x", DataType::Integer, true)]), 16));
        assert!(matches!(catalog.create_table(dummy), Err(ApiaryError::Duplicate(_))));
        assert!(matches!(catalog.table("v1"), Err(ApiaryError::WrongObjectType(_))));
        assert!(catalog.drop_view("v1").is_some());
        assert!(catalog.get_view("v1").is_none());
    }
}
