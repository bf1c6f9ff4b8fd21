//! FOREIGN KEY constraints (PostgreSQL's MATCH SIMPLE): a row whose key columns are all
//! non-NULL names a row of its parent by the parent's primary key or a UNIQUE constraint.
//!
//! Every write ends in `write_changes` (or COPY's commit), which checks, before anything
//! is published, both sides of the statement's change as queries over the rows it
//! writes: the rows it adds to a child must find their parents, and the keys it removes
//! from a parent (deleted rows whose key no added row has) must not be named by a
//! child's rows. Each table reads as the statement sees it; a table that references
//! itself reads as it will be after the statement, so a statement may add a parent and
//! its children together or remove a whole subtree.
//!
//! Concurrent writers: PostgreSQL locks the parent row a new child names; Apiary instead
//! makes the checks and the publication of a write one step among the writes that need
//! checks (`DatabaseInner::foreign_key_lock`): a statement outside a block checks against
//! what is committed and publishes under that lock, and a transaction, whose statements
//! checked against its snapshot, checks its whole change again at COMMIT under it
//! against what is committed then (`recheck_foreign_keys`; a failure is a serialization
//! failure, 40001). Not yet for a transaction that also ran DDL: its COMMIT does not
//! check again.
//!
//! A removed key whose FOREIGN KEY has an action (`ON DELETE` for a deleted row, `ON
//! UPDATE` for one an UPDATE, MERGE or upsert gave a new key: CASCADE, SET NULL, SET
//! DEFAULT) is not checked but queued as a [`PendingAction`]. After the statement, its
//! actions run one after another as statements of their own on the children (a DELETE
//! or an UPDATE joined to the removed keys), whose writes are checked and may queue
//! further actions, until none is left: a queue, not recursion, so a long chain of
//! rows (a self-referencing list) cannot exhaust the stack. The statement and its
//! actions commit together: a statement whose target has children with actions runs in
//! a transaction of its own when no block is open (`Connection::write_statement`), so a
//! failing action leaves nothing behind.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use apiary_common::{bind_err, not_impl_err, ApiaryError, Result};
use apiary_sql::binder::{normalize_ident, object_name_to_table};
use apiary_sql::parser::parse_sql;
use apiary_storage::table::ROW_ID_COLUMN;
use apiary_storage::unique::encode_key;
use apiary_storage::{Catalog, ForeignKey, PreparedAppend, ReferentialAction, Table, TableData};
use apiary_types::{DataChunk, Field, ScalarValue, Schema, Vector, VectorBuilder};
use sqlparser::ast;

use crate::connection::Connection;

/// A FOREIGN KEY as CREATE TABLE declares it, before its columns are resolved.
pub(crate) struct DeclaredForeignKey {
    name: Option<String>,
    columns: Vec<String>,
    parent: String,
    parent_columns: Vec<String>,
    on_delete: ReferentialAction,
    on_update: ReferentialAction,
}

fn referential_action(action: Option<&ast::ReferentialAction>) -> ReferentialAction {
    match action {
        None | Some(ast::ReferentialAction::NoAction) => ReferentialAction::NoAction,
        Some(ast::ReferentialAction::Restrict) => ReferentialAction::Restrict,
        Some(ast::ReferentialAction::Cascade) => ReferentialAction::Cascade,
        Some(ast::ReferentialAction::SetNull) => ReferentialAction::SetNull,
        Some(ast::ReferentialAction::SetDefault) => ReferentialAction::SetDefault,
    }
}

/// A column's `REFERENCES parent [(c)]` (`column`: the column) or a table's `FOREIGN KEY
/// (a, b) REFERENCES parent [(x, y)]`.
pub(crate) fn declared(key: &ast::ForeignKeyConstraint, column: Option<&str>, name: Option<&ast::Ident>) -> Result<DeclaredForeignKey> {
    if matches!(key.match_kind, Some(ast::ConstraintReferenceMatchKind::Full | ast::ConstraintReferenceMatchKind::Partial)) {
        return Err(not_impl_err!("FOREIGN KEY ... MATCH FULL / PARTIAL (only MATCH SIMPLE)"));
    }
    if key.characteristics.as_ref().is_some_and(|c| c.deferrable == Some(true)) {
        return Err(not_impl_err!("DEFERRABLE foreign keys"));
    }
    let columns = match column {
        Some(column) if key.columns.is_empty() => vec![column.to_string()],
        _ => key.columns.iter().map(normalize_ident).collect(),
    };
    Ok(DeclaredForeignKey {
        name: name.or(key.name.as_ref()).map(normalize_ident),
        columns,
        parent: object_name_to_table(&key.foreign_table)?,
        parent_columns: key.referred_columns.iter().map(normalize_ident).collect(),
        on_delete: referential_action(key.on_delete.as_ref()),
        on_update: referential_action(key.on_update.as_ref()),
    })
}

/// Resolves the declared keys of the new table `child` (its fields and key
/// constraints): the parent must exist (or be the table itself), the parent's columns
/// (its primary key when not named) must be its primary key or a UNIQUE constraint, and
/// the types must compare.
pub(crate) fn resolve(catalog: &Catalog, child: &Table, declared: Vec<DeclaredForeignKey>) -> Result<Vec<ForeignKey>> {
    let mut keys = Vec::with_capacity(declared.len());
    for key in declared {
        let parent = if key.parent == child.name { None } else { Some(catalog.table(&key.parent)?) };
        let parent_table = parent.as_deref().unwrap_or(child);
        let position = |table: &Table, name: &str| {
            table.schema.index_of(name).ok_or_else(|| bind_err!("column \"{name}\" referenced in foreign key constraint does not exist"))
        };
        let columns = key.columns.iter().map(|c| position(child, c)).collect::<Result<Vec<_>>>()?;
        let parent_columns = match key.parent_columns.is_empty() {
            true if parent_table.primary_key.is_empty() => {
                return Err(ApiaryError::InvalidForeignKey(format!("there is no primary key for referenced table \"{}\"", key.parent)))
            }
            true => parent_table.primary_key.clone(),
            false => key.parent_columns.iter().map(|c| position(parent_table, c)).collect::<Result<Vec<_>>>()?,
        };
        if columns.len() != parent_columns.len() {
            return Err(ApiaryError::InvalidForeignKey("number of referencing and referenced columns for foreign key disagree".into()));
        }
        let sorted = |columns: &[usize]| {
            let mut columns = columns.to_vec();
            columns.sort_unstable();
            columns
        };
        if !parent_table.key_constraints().iter().any(|(unique, _)| sorted(unique) == sorted(&parent_columns)) {
            return Err(ApiaryError::InvalidForeignKey(format!(
                "there is no unique constraint matching given keys for referenced table \"{}\"",
                key.parent
            )));
        }
        let name = key.name.unwrap_or_else(|| format!("{}_{}_fkey", child.name, key.columns.join("_")));
        for (&c, &p) in columns.iter().zip(&parent_columns) {
            let (ct, pt) = (child.schema.fields[c].data_type, parent_table.schema.fields[p].data_type);
            if apiary_sql::coercion::common_type(&ct, &pt).is_none() {
                return Err(ApiaryError::Type(format!(
                    "foreign key constraint \"{name}\" cannot be implemented: key columns \"{}\" and \"{}\" are of incompatible types {ct} and {pt}",
                    child.schema.fields[c].name, parent_table.schema.fields[p].name
                )));
            }
        }
        keys.push(ForeignKey { name, columns, parent: key.parent, parent_columns, on_delete: key.on_delete, on_update: key.on_update });
    }
    Ok(keys)
}

/// The tables of `catalog` with a FOREIGN KEY naming `parent`, with each such key.
pub(crate) fn referencing(catalog: &Catalog, parent: &str) -> Vec<(Arc<Table>, ForeignKey)> {
    let mut found = Vec::new();
    for table in catalog.tables() {
        for key in table.foreign_keys.iter().filter(|k| k.parent == parent) {
            found.push((Arc::clone(&table), key.clone()));
        }
    }
    found
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `a.x = b.y AND ...` over the key's column names.
fn key_match(left: &str, left_columns: &[impl AsRef<str>], right: &str, right_columns: &[impl AsRef<str>]) -> String {
    let pairs =
        left_columns.iter().zip(right_columns).map(|(l, r)| format!("{left}.{} = {right}.{}", quoted(l.as_ref()), quoted(r.as_ref())));
    pairs.collect::<Vec<_>>().join(" AND ")
}

/// `k0, k1, ...`: the columns of a table of removed keys.
fn key_names(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i}")).collect()
}

/// The `columns` of the rows of `chunks`, one after another.
fn flatten(table: &Table, chunks: &[DataChunk], columns: &[usize]) -> Vec<Vector> {
    columns
        .iter()
        .map(|&c| {
            let mut builder = VectorBuilder::with_capacity(table.schema.fields[c].data_type, chunks.iter().map(DataChunk::row_count).sum());
            chunks.iter().for_each(|chunk| builder.append(&chunk.columns[c], chunk.selection()));
            builder.finish()
        })
        .collect()
}

/// The names of `columns` of `table`.
fn names<'t>(table: &'t Table, columns: &[usize]) -> Vec<&'t str> {
    columns.iter().map(|&c| table.schema.fields[c].name.as_str()).collect()
}

/// The name under which the check queries read the rows a statement adds.
const NEW_ROWS: &str = "apiary_new_rows";
/// ... the keys it removes (columns `k0`, `k1`, ...; for ON UPDATE CASCADE also each
/// key's new value, `n0`, `n1`, ...).
const REMOVED_KEYS: &str = "apiary_removed_keys";
/// ... a table that references itself, as it will be after the statement.
const AFTER: &str = "apiary_table_after";

/// At most this many actions run for one statement: a cycle of ON UPDATE CASCADE keys
/// could otherwise pass keys around forever.
const MAX_ACTIONS: usize = 1_000_000;

/// An ON DELETE / ON UPDATE action a statement's removal of parent keys calls for (see
/// the module docs).
pub(crate) struct PendingAction {
    child: String,
    key: ForeignKey,
    action: ReferentialAction,
    /// ON DELETE CASCADE: the rows go (else they get new key columns).
    deletes: bool,
    /// The removed keys as a table (see [`REMOVED_KEYS`]): `n0, n1, ...` follow when the
    /// action is an ON UPDATE CASCADE.
    keys: Arc<Table>,
}

/// Which of the rows a statement deleted it updated: the ordinal of each one's new
/// version among the appended rows.
type NewVersions = HashMap<i64, usize>;

impl Connection {
    /// Checks the FOREIGN KEYs a statement's change of `table` touches and queues the
    /// actions its removed keys call for (see the module docs): `before` is the contents
    /// the writer started from, `prepared` the change, `appended` the rows it adds, and
    /// `replaces` (UPDATE, MERGE, upsert) the row id each appended row is the new version
    /// of (-1: a new row).
    pub(crate) fn check_foreign_keys(
        &mut self,
        table: &Arc<Table>,
        before: &TableData,
        prepared: &PreparedAppend<'_>,
        appended: &[DataChunk],
        replaces: Option<&[i64]>,
    ) -> Result<()> {
        let deleted = prepared.deleted_row_ids();
        let children = if deleted.is_empty() && !prepared.truncated() { Vec::new() } else { referencing(self.catalog(), &table.name) };
        let added = appended.iter().map(DataChunk::row_count).sum::<usize>();
        if children.is_empty() && (table.foreign_keys.is_empty() || added == 0) {
            return Ok(());
        }
        // At COMMIT (`recheck_foreign_keys`) a failure is a conflict with a transaction
        // that committed since the snapshot: retrying may succeed.
        let conflict = |error: ApiaryError| match (self.commit_overlay.is_some(), error) {
            (true, ApiaryError::ForeignKeyViolation(message)) => ApiaryError::Serialization(format!(
                "another transaction committed a change this one's FOREIGN KEYs conflict with: {message}"
            )),
            (_, error) => error,
        };
        let after = Arc::new(table.at(Arc::clone(prepared.data())));
        if added > 0 && !table.foreign_keys.is_empty() {
            let new_rows = self.scan_table(NEW_ROWS, table.schema.clone(), appended)?;
            for key in &table.foreign_keys {
                self.check_parents_exist(table, key, Arc::clone(&new_rows), &after).map_err(conflict)?;
            }
        }
        // TRUNCATE is refused while another table references this one (unless it names
        // that table too); a table referencing itself is empty after it.
        if children.is_empty() || prepared.truncated() {
            return Ok(());
        }
        let new_versions: NewVersions = replaces
            .map(|ids| ids.iter().enumerate().filter(|(_, &id)| id >= 0).map(|(ordinal, &id)| (id, ordinal)).collect())
            .unwrap_or_default();
        let (updated, removed): (Vec<i64>, Vec<i64>) = deleted.iter().partition(|id| new_versions.contains_key(id));
        for (child, key) in children {
            // The rows deleted, then those updated, each with its action.
            let mut checked = Vec::new();
            for (rows, action, update) in [(&removed, key.on_delete, false), (&updated, key.on_update, true)] {
                if rows.is_empty() {
                    continue;
                }
                // At COMMIT the actions have run (in the transaction's version): a row
                // still naming a removed key was committed by another transaction since.
                if !action.changes_rows() || self.commit_overlay.is_some() {
                    checked.extend_from_slice(rows);
                    continue;
                }
                let deletes = action == ReferentialAction::Cascade && !update;
                let new_keys = (action == ReferentialAction::Cascade && update).then_some((appended, &new_versions));
                if let Some(keys) = self.removed_keys(table, before, rows, &key.parent_columns, appended, new_keys)? {
                    if self.transaction.is_none() {
                        return Err(apiary_common::internal_err!("a FOREIGN KEY action outside a transaction"));
                    }
                    self.referential_actions.push_back(PendingAction {
                        child: child.name.clone(),
                        key: key.clone(),
                        action,
                        deletes,
                        keys,
                    });
                }
            }
            if checked.is_empty() {
                continue;
            }
            checked.sort_unstable();
            let Some(removed) = self.removed_keys(table, before, &checked, &key.parent_columns, appended, None)? else { continue };
            let self_referencing = child.name == table.name;
            let child_name = if self_referencing { AFTER.to_string() } else { quoted(&child.name) };
            let sql = format!(
                "SELECT count(*) FROM {child_name} AS c WHERE EXISTS (SELECT 1 FROM {REMOVED_KEYS} AS r WHERE {})",
                key_match("r", &key_names("k", key.columns.len()), "c", &names(&child, &key.columns))
            );
            let source = self_referencing.then(|| (AFTER, Arc::clone(&after)));
            if self.count_rows(&sql, (REMOVED_KEYS, removed), source)? > 0 {
                return Err(conflict(ApiaryError::ForeignKeyViolation(format!(
                    "update or delete on table \"{}\" violates foreign key constraint \"{}\" on table \"{}\": a key ({}) is still referenced",
                    table.name,
                    key.name,
                    child.name,
                    names(table, &key.parent_columns).join(", ")
                ))));
            }
        }
        Ok(())
    }

    /// Whether a change of `table` (`prepared`, adding `appended_rows`) needs FOREIGN KEY
    /// checks: it adds rows to a child, or removes rows of a parent.
    pub(crate) fn needs_foreign_key_checks(&self, table: &Table, prepared: &PreparedAppend<'_>, appended_rows: usize) -> bool {
        (appended_rows > 0 && !table.foreign_keys.is_empty())
            || ((!prepared.deleted_row_ids().is_empty() || prepared.truncated()) && !referencing(self.catalog(), &table.name).is_empty())
    }

    /// Checks the FOREIGN KEYs of a transaction's writes again at COMMIT, against the
    /// tables as they are committed now with the transaction's changes (`prepared`,
    /// each table's replayed change, with its contents before), under the
    /// foreign-key lock the caller holds: the checks its statements made read its
    /// snapshot, and another transaction may have committed a parent's removal or a
    /// child's addition since (40001).
    pub(crate) fn recheck_foreign_keys(&mut self, prepared: &[(&Arc<Table>, Arc<TableData>, PreparedAppend<'_>)]) -> Result<()> {
        let overlay =
            prepared.iter().map(|(table, _, change)| (table.name.clone(), Arc::new(table.at(Arc::clone(change.data()))))).collect();
        self.commit_overlay = Some(overlay);
        let result = (|| {
            for (table, before, change) in prepared {
                let appended = match change.appended_rows() {
                    0 => Vec::new(),
                    rows => vec![DataChunk::new(change.appended_columns()?, rows)],
                };
                self.check_foreign_keys(table, before, change, &appended, None)?;
            }
            Ok(())
        })();
        self.commit_overlay = None;
        result
    }

    /// Fails unless every row of `rows` (rows of `table`) whose `key` columns are all
    /// non-NULL names a row of the key's parent; `after` is `table` as it will be after
    /// the statement (the parent, when the key references its own table).
    fn check_parents_exist(&self, table: &Table, key: &ForeignKey, rows: Arc<Table>, after: &Arc<Table>) -> Result<()> {
        let columns = names(table, &key.columns);
        let self_referencing = key.parent == table.name;
        let parent_table = if self_referencing { Arc::clone(after) } else { self.catalog().table(&key.parent)? };
        let parent = if self_referencing { AFTER.to_string() } else { quoted(&key.parent) };
        let parent_columns = names(&parent_table, &key.parent_columns);
        let not_null: Vec<String> = columns.iter().map(|c| format!("n.{} IS NOT NULL", quoted(c))).collect();
        let sql = format!(
            "SELECT count(*) FROM {NEW_ROWS} AS n WHERE {} AND NOT EXISTS (SELECT 1 FROM {parent} AS p WHERE {})",
            not_null.join(" AND "),
            key_match("p", &parent_columns, "n", &columns)
        );
        let source = self_referencing.then(|| (AFTER, Arc::clone(after)));
        if self.count_rows(&sql, (NEW_ROWS, rows), source)? > 0 {
            return Err(ApiaryError::ForeignKeyViolation(format!(
                "insert or update on table \"{}\" violates foreign key constraint \"{}\": a key ({}) is not present in table \"{}\"",
                table.name,
                key.name,
                columns.join(", "),
                key.parent
            )));
        }
        Ok(())
    }

    /// Fails unless the rows `table` holds (a table being altered) satisfy its FOREIGN
    /// KEY `key` (ALTER TABLE ... ADD FOREIGN KEY).
    pub(crate) fn check_stored_foreign_key(&self, table: &Arc<Table>, key: &ForeignKey) -> Result<()> {
        self.check_parents_exist(table, key, Arc::clone(table), table)
    }

    /// The keys (`columns`) of the rows `deleted` (sorted ids) from `before` that no row
    /// of `appended` has and none of whose columns is NULL, as a table (see
    /// [`REMOVED_KEYS`]); `None` when there are none. With `new_keys` (ON UPDATE CASCADE:
    /// the appended rows and which deleted row each replaces), each key's new value
    /// follows.
    fn removed_keys(
        &self,
        table: &Table,
        before: &TableData,
        deleted: &[i64],
        columns: &[usize],
        appended: &[DataChunk],
        new_keys: Option<(&[DataChunk], &NewVersions)>,
    ) -> Result<Option<Arc<Table>>> {
        let mut kept = HashSet::new();
        let mut key = Vec::new();
        for chunk in appended {
            let vectors: Vec<_> = columns.iter().map(|&c| &chunk.columns[c]).collect();
            let rows: Vec<usize> = match chunk.selection() {
                Some(rows) => rows.iter().map(|&r| r as usize).collect(),
                None => (0..chunk.physical_len()).collect(),
            };
            for row in rows {
                encode_key(&vectors, row, &mut key);
                kept.insert(key.clone());
            }
        }
        let old = table.gather(before, deleted, columns)?;
        let vectors: Vec<_> = old.iter().collect();
        let rows: Vec<u32> = (0..deleted.len())
            .filter(|&row| {
                encode_key(&vectors, row, &mut key);
                vectors.iter().all(|v| v.is_valid(row)) && !kept.contains(&key)
            })
            .map(|row| row as u32)
            .collect();
        if rows.is_empty() {
            return Ok(None);
        }
        let key_field = |prefix: &str, (i, &c): (usize, &usize)| {
            let field = &table.schema.fields[c];
            Field::new(format!("{prefix}{i}"), field.data_type, true)
        };
        let mut fields: Vec<Field> = columns.iter().enumerate().map(|c| key_field("k", c)).collect();
        let mut key_columns: Vec<Vector> = old.iter().map(|v| v.gather(&rows)).collect();
        if let Some((appended, new_versions)) = new_keys {
            fields.extend(columns.iter().enumerate().map(|c| key_field("n", c)));
            let all_new = flatten(table, appended, columns);
            let ordinals = rows
                .iter()
                .map(|&row| {
                    let id = deleted[row as usize];
                    new_versions
                        .get(&id)
                        .map(|&o| o as u32)
                        .ok_or_else(|| apiary_common::internal_err!("updated row {id} has no new version"))
                })
                .collect::<Result<Vec<u32>>>()?;
            key_columns.extend(all_new.iter().map(|v| v.gather(&ordinals)));
        }
        let chunk = DataChunk::new(key_columns, rows.len());
        Ok(Some(self.scan_table(REMOVED_KEYS, Schema::new(fields), &[chunk])?))
    }

    /// Runs the queued FOREIGN KEY actions, and those they queue, until none is left.
    pub(crate) fn run_referential_actions(&mut self) -> Result<()> {
        let mut count = 0;
        while let Some(pending) = self.referential_actions.pop_front() {
            count += 1;
            if count > MAX_ACTIONS {
                self.referential_actions.clear();
                return Err(ApiaryError::TooComplex(format!(
                    "more than {MAX_ACTIONS} FOREIGN KEY actions for one statement (do ON UPDATE CASCADE keys form a cycle?)"
                )));
            }
            if let Err(error) = self.run_referential_action(pending) {
                self.referential_actions.clear();
                return Err(error);
            }
        }
        Ok(())
    }

    /// One action: the child's rows naming a removed key are deleted (ON DELETE CASCADE)
    /// or get new key columns (NULL, their defaults, or the key's new value), as a DELETE
    /// or UPDATE of the child joined to the keys.
    fn run_referential_action(&mut self, pending: PendingAction) -> Result<()> {
        let PendingAction { child, key, action, deletes, keys } = pending;
        let child = self.catalog().table(&child)?;
        let writer = self.table_writer(&child)?;
        let rows = Arc::new(child.with_row_ids(writer.base()));
        let child_columns = names(&child, &key.columns);
        let join = key_match("r", &key_names("k", key.columns.len()), "c", &child_columns);
        let mut projection = vec![format!("c.{}", quoted(ROW_ID_COLUMN))];
        if !deletes {
            for (position, field) in child.schema.fields.iter().enumerate() {
                let value = match key.columns.iter().position(|&c| c == position) {
                    None => format!("c.{}", quoted(&field.name)),
                    Some(i) => match action {
                        ReferentialAction::Cascade => format!("r.n{i}"),
                        ReferentialAction::SetDefault => {
                            child.default_of(position).map_or_else(|| "NULL".to_string(), |sql| format!("({sql})"))
                        }
                        _ => "NULL".to_string(),
                    },
                };
                projection.push(value);
            }
        }
        let sql = format!("SELECT {} FROM {} AS c, {REMOVED_KEYS} AS r WHERE {join}", projection.join(", "), quoted(&child.name));
        let Some(ast::Statement::Query(query)) = parse_sql(&sql)?.pop() else {
            return Err(apiary_common::internal_err!("a FOREIGN KEY action does not parse as a query: {sql}"));
        };
        let chunks = {
            let functions = self.table_functions();
            let mut binder = self.binder(&functions);
            binder.with_dml_source(REMOVED_KEYS, keys, false);
            let bound = binder.bind_dml_query(&query, &child.name, rows, (!deletes).then_some(child.as_ref()))?;
            let plan = self.optimize_plan(bound.plan, bound.next_column_id)?;
            self.run_plan(&plan)?
        };
        let mut seen = HashSet::new();
        let mut row_ids = Vec::new();
        let mut new_rows = Vec::new();
        for chunk in chunks {
            let chunk = chunk.compact();
            let keep = crate::dml::first_matches(&chunk, &mut seen, &mut row_ids)?;
            if !deletes {
                let columns: Vec<Vector> = chunk.columns[1..].iter().map(|c| c.gather(&keep)).collect();
                new_rows.push(crate::connection::conform_chunk(&child, DataChunk::new(columns, keep.len()))?);
            }
        }
        // (Written even when no row names a key: the writer holds the transaction's keys
        // until its change is finished.)
        if deletes {
            self.write_changes(&child, writer, row_ids, &[], None)?;
        } else {
            self.check_constraints(&child, &new_rows)?;
            let replaces = row_ids.clone();
            self.write_changes(&child, writer, row_ids, &new_rows, Some(&replaces))?;
        }
        Ok(())
    }

    /// Rows as a table a query can read (see `Binder::bind_dml_query`).
    fn scan_table(&self, name: &str, schema: Schema, chunks: &[DataChunk]) -> Result<Arc<Table>> {
        let table = Table::new(name, schema, self.settings.block_rows).scan_only();
        let mut appender = table.appender()?;
        for chunk in chunks {
            appender.append(chunk)?;
        }
        appender.commit()?;
        Ok(Arc::new(table))
    }

    /// Runs a `SELECT count(*)` that reads `target` (and `source`) in place of the tables
    /// of those names.
    fn count_rows(&self, sql: &str, target: (&str, Arc<Table>), source: Option<(&str, Arc<Table>)>) -> Result<i64> {
        let Some(ast::Statement::Query(query)) = parse_sql(sql)?.pop() else {
            return Err(apiary_common::internal_err!("a foreign key check does not parse as a query: {sql}"));
        };
        let functions = self.table_functions();
        let mut binder = self.binder(&functions);
        if let Some((name, rows)) = source {
            binder.with_dml_source(name, rows, false);
        }
        let bound = binder.bind_dml_query(&query, target.0, target.1, None)?;
        let plan = self.optimize_plan(bound.plan, bound.next_column_id)?;
        for chunk in self.run_plan(&plan)? {
            let chunk = chunk.compact();
            if chunk.physical_len() > 0 {
                if let ScalarValue::Int64(count) = chunk.columns[0].get_scalar(0) {
                    return Ok(count);
                }
            }
        }
        Ok(0)
    }
}
