//! Multi-statement transactions: `BEGIN ... COMMIT / ROLLBACK`, savepoints, snapshot
//! isolation.
//!
//! ```text
//! BEGIN ──▶ snapshot: every table's published contents (taken under the publish lock, so
//!           │          a transaction committing several tables is seen whole or not at all)
//!           ▼
//! statements read the snapshot, or the transaction's own version of a table it changed
//! (the binder reads `Table::at(data)` in the table's place); INSERT / DELETE / UPDATE /
//! TRUNCATE write a private version (`Table::private_writer`: no lock, nothing published)
//!           ▼
//! COMMIT ──▶ per changed table, in name order: take the table's writer, replay the
//!           transaction's difference from its snapshot (deleted row ids, appended rows)
//!           onto the contents committed since — a row another transaction deleted or
//!           updated meanwhile, or rows moved by a compaction, is a serialization failure
//!           (SQLSTATE 40001, first committer wins: no lost update) — then log all
//!           tables' changes in one record and publish them together.
//! ```
//!
//! Key constraints are checked when a statement runs, against the keys committed then
//! with this transaction's own deletions and insertions applied (see
//! `Table::private_writer`; a key only a row committed after the snapshot holds is a
//! serialization failure, 40001), and again against the committed table at COMMIT (a
//! duplicate committed meanwhile fails the COMMIT, which then rolls back).
//!
//! DDL inside a block (CREATE / DROP / ALTER TABLE, CREATE TABLE AS, CREATE / DROP VIEW,
//! SEQUENCE and INDEX, CALL dbgen) changes the transaction's own catalog: a copy of the committed one made at
//! its first DDL, which its statements read from then on (`Connection::catalog`). A new
//! or altered table is a table object no one else sees; its rows are written like any
//! other table's. COMMIT replays the catalog changes, in order and checked again, on the
//! catalog as committed then, and makes them and the writes durable in one checkpoint
//! (`DatabaseInner::commit_transaction`). An ALTER of a committed table fails the COMMIT
//! (40001) if another transaction changed the table's rows since this one's snapshot
//! (the altered table was built from them); a DROP removes the rows committed meanwhile
//! too, as PostgreSQL's (which waits for the table's lock) does. CHECKPOINT, which moves
//! rows, is refused inside a block.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use apiary_common::{not_impl_err, ApiaryError, Result};
use apiary_sql::binder::normalize_ident;
use apiary_storage::table::row_id;
use apiary_storage::{Catalog, PreparedAppend, PrivateKeys, Table, TableAppender, TableData};
use apiary_types::DataChunk;
use sqlparser::ast;

use crate::connection::Connection;
use crate::database::{apply_catalog_change, check_catalog_change, CatalogChange, Change};
use crate::result::QueryResult;

/// A transaction block's state.
#[derive(Default)]
pub(crate) struct Transaction {
    /// Each table's published contents when the transaction began.
    snapshot: HashMap<String, (Arc<Table>, Arc<TableData>)>,
    /// The transaction's version of each table it changed.
    written: BTreeMap<String, Arc<TableData>>,
    /// Tables it truncated (their versions start empty).
    truncated: BTreeSet<String>,
    /// Its changes of each written table's keys, against which its statements' keys are
    /// checked (see `Table::private_writer`).
    keys: HashMap<String, PrivateKeys>,
    /// Savepoints, oldest first: name and the changes made before it.
    savepoints: Vec<Savepoint>,
    /// A statement failed: only ROLLBACK (or ROLLBACK TO a savepoint) is accepted.
    failed: bool,
    /// After the transaction's first DDL, its own catalog (see the module docs); `None`:
    /// it reads the committed catalog.
    catalog: Option<Arc<Catalog>>,
    /// Its DDL, in order, replayed on the committed catalog at COMMIT.
    operations: Vec<CatalogChange>,
    /// Committed tables an ALTER replaced, with the contents its snapshot had of them:
    /// COMMIT fails if another transaction has changed them since.
    altered: Vec<(Arc<Table>, Arc<TableData>)>,
}

struct Savepoint {
    name: String,
    written: BTreeMap<String, Arc<TableData>>,
    truncated: BTreeSet<String>,
    keys: HashMap<String, PrivateKeys>,
    snapshot: HashMap<String, (Arc<Table>, Arc<TableData>)>,
    catalog: Option<Arc<Catalog>>,
    operations: usize,
    altered: usize,
}

impl Transaction {
    /// The contents the transaction sees of `table`: its own version, else its snapshot's
    /// (a table created after the snapshot: its published contents).
    pub(crate) fn contents(&self, table: &Table) -> Arc<TableData> {
        if let Some(data) = self.written.get(&table.name) {
            return Arc::clone(data);
        }
        match self.snapshot.get(&table.name) {
            Some((_, data)) => Arc::clone(data),
            None => table.snapshot(),
        }
    }

    /// The tables statements read in place of the catalog's: each as the transaction
    /// sees it.
    pub(crate) fn tables(&self) -> HashMap<String, Arc<Table>> {
        self.snapshot.iter().map(|(name, (table, _))| (name.clone(), Arc::new(table.at(self.contents(table))))).collect()
    }

    /// Applies a DDL statement's change to the transaction's catalog (see the module
    /// docs); `committed` is the database's. Returns the rows it added (CREATE TABLE AS).
    fn apply(&mut self, committed: &Catalog, change: Change<'_>) -> Result<u64> {
        let catalog = self.catalog.as_deref().unwrap_or(committed).copy();
        let checked = check_catalog_change(&catalog, change)?;
        let change = CatalogChange::of(&checked)?;
        // A new table is the transaction's alone until COMMIT: its first rows (CREATE
        // TABLE AS) are its contents now.
        let rows = match checked {
            Change::Create(_, Some(rows)) => rows.publish(),
            _ => 0,
        };
        match &change {
            CatalogChange::Create(table) => {
                self.snapshot.insert(table.name.clone(), (Arc::clone(table), table.snapshot()));
            }
            CatalogChange::Drop { tables, .. } => tables.iter().for_each(|name| self.forget(name)),
            CatalogChange::Replace { old, new } => {
                if let Some((_, base)) = self.snapshot.get(&old.name).filter(|_| committed.holds(old)) {
                    self.altered.push((Arc::clone(old), Arc::clone(base)));
                }
                self.forget(&old.name);
                self.snapshot.insert(new.name.clone(), (Arc::clone(new), new.snapshot()));
            }
            _ => {}
        }
        apply_catalog_change(&catalog, change.change())?;
        self.operations.push(change);
        self.catalog = Some(Arc::new(catalog));
        Ok(rows as u64)
    }

    /// A table the transaction dropped or replaced: its changes of it go.
    fn forget(&mut self, name: &str) {
        self.snapshot.remove(name);
        self.written.remove(name);
        self.truncated.remove(name);
        self.keys.remove(name);
    }
}

/// Whether a statement may run inside a transaction block.
fn allowed_in_transaction(statement: &ast::Statement) -> Result<()> {
    use ast::Statement as S;
    let what = match statement {
        S::Query(_) | S::Insert(_) | S::Update(_) | S::Delete(_) | S::Merge(_) | S::Truncate(_) | S::Explain { .. } => return Ok(()),
        S::Set(_) | S::Reset(_) | S::ShowVariable { .. } | S::ShowTables { .. } | S::ExplainTable { .. } => return Ok(()),
        S::Copy { to: true, .. } => return Ok(()),
        S::CreateTable(_)
        | S::CreateView(_)
        | S::CreateSequence { .. }
        | S::CreateIndex(_)
        | S::Drop { .. }
        | S::AlterTable(_)
        | S::Copy { .. } => return Ok(()),
        // CHECKPOINT moves rows (compaction), which would fail this transaction's COMMIT.
        S::Call(function) if apiary_sql::parser::is_checkpoint(function) => "CHECKPOINT",
        S::Call(_) => return Ok(()),
        _ => "this statement",
    };
    Err(not_impl_err!("{what} inside a transaction block (run it outside BEGIN ... COMMIT)"))
}

impl Connection {
    /// The catalog statements read: the transaction's own after its first DDL, else the
    /// database's.
    pub(crate) fn catalog(&self) -> &Catalog {
        self.transaction.as_ref().and_then(|t| t.catalog.as_deref()).unwrap_or(&self.db.catalog)
    }

    /// Commits a change of which tables and views exist: into the transaction's catalog
    /// inside a block, else durably and visibly. Returns the rows it added.
    pub(crate) fn commit_change(&mut self, change: Change<'_>) -> Result<u64> {
        match self.transaction.as_mut() {
            Some(transaction) => transaction.apply(&self.db.catalog, change),
            None => self.db.commit(change),
        }
    }

    /// Whether a transaction block is open.
    pub fn in_transaction(&self) -> bool {
        self.transaction.is_some()
    }

    /// Whether the open transaction block had an error (only ROLLBACK ends it).
    pub fn transaction_failed(&self) -> bool {
        self.transaction.as_ref().is_some_and(|t| t.failed)
    }

    /// Transaction control statements; `None` for the others (which run as usual, inside
    /// the transaction if one is open).
    pub(crate) fn transaction_control(&mut self, statement: &ast::Statement) -> Option<Result<QueryResult>> {
        use ast::Statement as S;
        let result = match statement {
            S::StartTransaction { modes, statements, .. } if statements.is_empty() => self.begin(modes),
            S::Commit { chain: false, .. } => self.commit(),
            S::Rollback { chain: false, savepoint: None } => {
                self.transaction = None;
                Ok(QueryResult::statement(None))
            }
            S::Rollback { chain: false, savepoint: Some(name) } => self.rollback_to(&normalize_ident(name)),
            S::Savepoint { name } => self.savepoint(normalize_ident(name)),
            S::ReleaseSavepoint { name } => self.release(&normalize_ident(name)),
            S::StartTransaction { .. } | S::Commit { .. } | S::Rollback { .. } => {
                Err(not_impl_err!("this form of transaction control (blocks, AND CHAIN)"))
            }
            _ => {
                let transaction = self.transaction.as_ref()?;
                if transaction.failed {
                    return Some(Err(ApiaryError::InFailedTransaction));
                }
                return allowed_in_transaction(statement).err().map(Err);
            }
        };
        Some(result)
    }

    /// A statement inside the transaction block failed: the block is aborted.
    pub(crate) fn statement_failed(&mut self) {
        if let Some(transaction) = self.transaction.as_mut() {
            transaction.failed = true;
        }
    }

    /// Runs `f` as one transaction: inside the open block, or else in a block of its own
    /// that commits when `f` succeeds and rolls back when it fails (a statement changing
    /// several tables: all of them or none).
    pub(crate) fn atomically<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if self.in_transaction() {
            return f(self);
        }
        self.begin(&[])?;
        match f(self) {
            Ok(value) => {
                self.commit()?;
                Ok(value)
            }
            Err(error) => {
                self.transaction = None;
                Err(error)
            }
        }
    }

    fn begin(&mut self, modes: &[ast::TransactionMode]) -> Result<QueryResult> {
        for mode in modes {
            match mode {
                // Every level runs as snapshot isolation (PostgreSQL's REPEATABLE READ),
                // which gives at least what the weaker ones promise.
                ast::TransactionMode::IsolationLevel(_) | ast::TransactionMode::AccessMode(ast::TransactionAccessMode::ReadWrite) => {}
                ast::TransactionMode::AccessMode(ast::TransactionAccessMode::ReadOnly) => {
                    return Err(not_impl_err!("READ ONLY transactions"));
                }
            }
        }
        // PostgreSQL warns and goes on when a block is already open.
        if self.transaction.is_none() {
            let _published = self.db.publish_lock.read().unwrap_or_else(|e| e.into_inner());
            let snapshot = self.db.catalog.tables().into_iter().map(|t| (t.name.clone(), (Arc::clone(&t), t.snapshot()))).collect();
            self.transaction = Some(Transaction { snapshot, ..Default::default() });
        }
        Ok(QueryResult::statement(None))
    }

    fn savepoint(&mut self, name: String) -> Result<QueryResult> {
        let transaction = self.transaction.as_mut().ok_or_else(no_transaction("SAVEPOINT"))?;
        if transaction.failed {
            return Err(ApiaryError::InFailedTransaction);
        }
        transaction.savepoints.push(Savepoint {
            name,
            written: transaction.written.clone(),
            truncated: transaction.truncated.clone(),
            keys: transaction.keys.clone(),
            snapshot: transaction.snapshot.clone(),
            catalog: transaction.catalog.clone(),
            operations: transaction.operations.len(),
            altered: transaction.altered.len(),
        });
        Ok(QueryResult::statement(None))
    }

    /// `ROLLBACK TO SAVEPOINT name`: the changes after it go, it stays (and a failed block
    /// goes on).
    fn rollback_to(&mut self, name: &str) -> Result<QueryResult> {
        let transaction = self.transaction.as_mut().ok_or_else(no_transaction("ROLLBACK TO SAVEPOINT"))?;
        let position = transaction.savepoints.iter().rposition(|s| s.name == name).ok_or_else(|| no_savepoint(name))?;
        transaction.savepoints.truncate(position + 1);
        let savepoint = &transaction.savepoints[position];
        transaction.written = savepoint.written.clone();
        transaction.truncated = savepoint.truncated.clone();
        transaction.keys = savepoint.keys.clone();
        transaction.snapshot = savepoint.snapshot.clone();
        transaction.catalog = savepoint.catalog.clone();
        transaction.operations.truncate(savepoint.operations);
        transaction.altered.truncate(savepoint.altered);
        transaction.failed = false;
        Ok(QueryResult::statement(None))
    }

    /// `RELEASE SAVEPOINT name`: it and the later ones go; the changes stay.
    fn release(&mut self, name: &str) -> Result<QueryResult> {
        let transaction = self.transaction.as_mut().ok_or_else(no_transaction("RELEASE SAVEPOINT"))?;
        if transaction.failed {
            return Err(ApiaryError::InFailedTransaction);
        }
        let position = transaction.savepoints.iter().rposition(|s| s.name == name).ok_or_else(|| no_savepoint(name))?;
        transaction.savepoints.truncate(position);
        Ok(QueryResult::statement(None))
    }

    /// A writer of `table`: the transaction's private one inside a block, else the table's.
    pub(crate) fn table_writer<'t>(&mut self, table: &'t Arc<Table>) -> Result<TableAppender<'t>> {
        match self.transaction.as_mut() {
            Some(transaction) => {
                // A table created after the snapshot: its contents now are the base the
                // commit replays the changes against.
                let (known, _) = transaction.snapshot.entry(table.name.clone()).or_insert_with(|| (Arc::clone(table), table.snapshot()));
                if !Arc::ptr_eq(known, table) {
                    return Err(ApiaryError::Serialization(format!(
                        "table \"{}\" was altered or replaced by another transaction since this one began",
                        table.name
                    )));
                }
                // The statement's writer holds the keys until `finish_write` gives them
                // back (a failed statement fails the block).
                let keys = transaction.keys.remove(&table.name).unwrap_or_default();
                table.private_writer(transaction.contents(table), keys)
            }
            None => {
                let writer = table.appender()?;
                // An ALTER or DROP may have replaced the table while this statement waited
                // for its writer: its rows would go to a table no one reads.
                if !self.db.catalog.holds(table) {
                    return Err(ApiaryError::Serialization(format!(
                        "table \"{}\" was altered or dropped while this statement waited for it; run it again",
                        table.name
                    )));
                }
                Ok(writer)
            }
        }
    }

    /// Commits a statement's change: into the transaction's version inside a block, else
    /// durably and visibly. Returns the rows appended.
    pub(crate) fn finish_write(&mut self, table: &Arc<Table>, mut prepared: PreparedAppend<'_>) -> Result<u64> {
        match self.transaction.as_mut() {
            Some(transaction) => {
                let rows = prepared.appended_rows() as u64;
                if let Some(keys) = prepared.take_private_keys() {
                    transaction.keys.insert(table.name.clone(), keys);
                }
                if prepared.truncated() {
                    transaction.truncated.insert(table.name.clone());
                }
                transaction.written.insert(table.name.clone(), prepared.into_data());
                Ok(rows)
            }
            None => self.db.commit(Change::Append(table, prepared)),
        }
    }

    /// `COMMIT`: the transaction's changes become every table's, all at once, or none of
    /// them (a failed block, a conflict, a constraint) and the transaction rolls back.
    fn commit(&mut self) -> Result<QueryResult> {
        let Some(transaction) = self.transaction.take() else {
            return Ok(QueryResult::statement(None));
        };
        if transaction.failed {
            // PostgreSQL answers COMMIT of a failed block with ROLLBACK.
            return Ok(QueryResult::statement(None));
        }
        if !transaction.operations.is_empty() {
            self.commit_with_ddl(transaction)?;
            return Ok(QueryResult::statement(None));
        }
        if transaction.written.is_empty() {
            return Ok(QueryResult::statement(None));
        }
        // Writers in name order (`written` is sorted): two commits never wait for each other
        // in a cycle; a statement outside a block holds one writer at a time. The table must
        // still be the catalog's once its writer is held (an ALTER or DROP replaces it
        // holding the writer).
        let mut prepared = Vec::with_capacity(transaction.written.len());
        for (name, private) in &transaction.written {
            let (table, base) = &transaction.snapshot[name];
            let mut writer = table.appender()?;
            if !self.db.catalog.holds(table) {
                return Err(ApiaryError::Serialization(format!("table \"{name}\" was dropped or altered by another transaction")));
            }
            replay(&mut writer, base, private, transaction.truncated.contains(name))?;
            let before = Arc::clone(writer.base());
            prepared.push((table, before, writer.prepare()?));
        }
        // FOREIGN KEYs are checked again against what is committed now (see
        // `DatabaseInner::foreign_key_lock`).
        let db = Arc::clone(&self.db);
        let _checked = match prepared.iter().any(|(table, _, change)| self.needs_foreign_key_checks(table, change, change.appended_rows()))
        {
            true => {
                let lock = db.foreign_key_lock.lock().unwrap_or_else(|e| e.into_inner());
                self.recheck_foreign_keys(&prepared)?;
                Some(lock)
            }
            false => None,
        };
        self.db.commit(Change::Writes(prepared.into_iter().map(|(table, _, change)| (table, change)).collect()))?;
        Ok(QueryResult::statement(None))
    }

    /// COMMIT of a transaction that ran DDL. The writers of the tables it wrote and of the
    /// committed tables it altered are taken in name order (a table it created or altered
    /// is its own: no one else waits for that writer), then the whole is committed by
    /// [`DatabaseInner::commit_transaction`](crate::database::DatabaseInner::commit_transaction).
    fn commit_with_ddl(&self, transaction: Transaction) -> Result<()> {
        let mut locks: Vec<(&str, &Arc<Table>, Option<&Arc<TableData>>)> =
            transaction.altered.iter().map(|(table, base)| (table.name.as_str(), table, Some(base))).collect();
        locks.extend(transaction.written.keys().map(|name| (name.as_str(), &transaction.snapshot[name].0, None)));
        locks.sort_by_key(|(name, ..)| *name);
        let mut altered_writers = Vec::new();
        let mut prepared = Vec::with_capacity(transaction.written.len());
        for (name, table, altered_from) in locks {
            let mut writer = table.appender()?;
            if let Some(base) = altered_from {
                // The altered table was built from the snapshot's rows: rows committed
                // since would be lost.
                if self.db.catalog.holds(table) && !Arc::ptr_eq(writer.base(), base) {
                    return Err(ApiaryError::Serialization(format!(
                        "table \"{name}\" was changed by another transaction after this one altered it"
                    )));
                }
                altered_writers.push(writer);
                continue;
            }
            let (_, base) = &transaction.snapshot[name];
            replay(&mut writer, base, &transaction.written[name], transaction.truncated.contains(name))?;
            prepared.push((table, writer.prepare()?));
        }
        self.db.commit_transaction(transaction.operations, prepared)
    }
}

fn no_transaction(what: &'static str) -> impl Fn() -> ApiaryError {
    move || ApiaryError::NotImplemented(format!("{what} can only be used in transaction blocks"))
}

fn no_savepoint(name: &str) -> ApiaryError {
    ApiaryError::Catalog(format!("savepoint \"{name}\" does not exist"))
}

/// Applies a transaction's change of one table — `private` against `base`, its snapshot —
/// to `writer`, which holds the table's current contents.
fn replay(writer: &mut TableAppender<'_>, base: &TableData, private: &TableData, truncated: bool) -> Result<()> {
    let current = Arc::clone(writer.base());
    let mut first_new_block = 0;
    if truncated {
        // TRUNCATE removes what the table holds at commit, as PostgreSQL's (which locks
        // the table) removes rows committed after the snapshot too.
        writer.truncate()?;
    } else {
        if current.layout != base.layout {
            return Err(ApiaryError::Serialization(
                "the table's rows were moved (compacted or truncated) by another transaction since this one began".to_string(),
            ));
        }
        let mut deleted = Vec::new();
        for (number, (before, after)) in base.blocks.iter().zip(&private.blocks).enumerate() {
            if Arc::ptr_eq(before, after) {
                continue;
            }
            let Some(deleted_rows) = &after.deleted else { continue };
            for row in deleted_rows.iter_ones().filter(|&r| r < before.row_count && !before.is_deleted(r)) {
                if current.blocks.get(number).is_none_or(|b| b.is_deleted(row)) {
                    return Err(ApiaryError::Serialization(
                        "a row this transaction deleted or updated was deleted or updated by another transaction since it began"
                            .to_string(),
                    ));
                }
                deleted.push(row_id(number, row));
            }
        }
        writer.delete(&deleted)?;
        first_new_block = base.blocks.len().saturating_sub(1);
    }
    // The rows the transaction appended and kept: past the snapshot's rows of its last
    // block, and every row of the blocks after it.
    for (number, block) in private.blocks.iter().enumerate().skip(first_new_block) {
        let start = if truncated { 0 } else { base.blocks.get(number).map_or(0, |b| b.row_count) };
        let rows: Vec<u32> = (start..block.row_count).filter(|&r| !block.is_deleted(r)).map(|r| r as u32).collect();
        if rows.is_empty() {
            continue;
        }
        let columns = block.gather(&rows)?;
        writer.append(&DataChunk::new(columns, rows.len()))?;
    }
    Ok(())
}
