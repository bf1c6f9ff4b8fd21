//! FOREIGN KEY constraints (PostgreSQL's MATCH SIMPLE with NO ACTION / RESTRICT): a row
//! whose key columns are all non-NULL names a row of its parent by the parent's primary
//! key or a UNIQUE constraint.
//!
//! Every write ends in `write_changes` (or COPY's commit), which checks, before anything
//! is published, both sides of the statement's change as queries over the rows it
//! writes: the rows it adds to a child must find their parents, and the keys it removes
//! from a parent (deleted rows whose key no added row has) must not be named by a
//! child's rows. Each table reads as the statement sees it; a table that references
//! itself reads as it will be after the statement, so a statement may add a parent and
//! its children together or remove a whole subtree. Checks read snapshots: two
//! concurrent transactions, one adding a child and the other removing its parent, can
//! both commit (PostgreSQL locks the parent row; Apiary does not yet).

use std::collections::HashSet;
use std::sync::Arc;

use apiary_common::{bind_err, not_impl_err, ApiaryError, Result};
use apiary_sql::binder::{normalize_ident, object_name_to_table};
use apiary_sql::parser::parse_sql;
use apiary_storage::unique::encode_key;
use apiary_storage::{Catalog, ForeignKey, PreparedAppend, Table, TableData};
use apiary_types::{DataChunk, Field, ScalarValue, Schema};
use sqlparser::ast;

use crate::connection::Connection;

/// A FOREIGN KEY as CREATE TABLE declares it, before its columns are resolved.
pub(crate) struct DeclaredForeignKey {
    name: Option<String>,
    columns: Vec<String>,
    parent: String,
    parent_columns: Vec<String>,
}

/// A column's `REFERENCES parent [(c)]` (`column`: the column) or a table's `FOREIGN KEY
/// (a, b) REFERENCES parent [(x, y)]`.
pub(crate) fn declared(key: &ast::ForeignKeyConstraint, column: Option<&str>, name: Option<&ast::Ident>) -> Result<DeclaredForeignKey> {
    for action in [&key.on_delete, &key.on_update].into_iter().flatten() {
        if !matches!(action, ast::ReferentialAction::NoAction | ast::ReferentialAction::Restrict) {
            return Err(not_impl_err!("FOREIGN KEY ... ON DELETE / ON UPDATE {action} (only NO ACTION and RESTRICT)"));
        }
    }
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
        keys.push(ForeignKey { name, columns, parent: key.parent, parent_columns });
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
fn key_match(left: &str, left_columns: &[&str], right: &str, right_columns: &[&str]) -> String {
    let pairs = left_columns.iter().zip(right_columns).map(|(l, r)| format!("{left}.{} = {right}.{}", quoted(l), quoted(r)));
    pairs.collect::<Vec<_>>().join(" AND ")
}

/// The names of `columns` of `table`.
fn names<'t>(table: &'t Table, columns: &[usize]) -> Vec<&'t str> {
    columns.iter().map(|&c| table.schema.fields[c].name.as_str()).collect()
}

/// The name under which the check queries read the rows a statement adds.
const NEW_ROWS: &str = "apiary_new_rows";
/// ... the keys it removes.
const REMOVED_KEYS: &str = "apiary_removed_keys";
/// ... a table that references itself, as it will be after the statement.
const AFTER: &str = "apiary_table_after";

impl Connection {
    /// Checks the FOREIGN KEYs a statement's change of `table` touches (see the module
    /// docs): `before` is the contents the writer started from, `prepared` the change,
    /// `appended` the rows it adds.
    pub(crate) fn check_foreign_keys(
        &self,
        table: &Arc<Table>,
        before: &TableData,
        prepared: &PreparedAppend<'_>,
        appended: &[DataChunk],
    ) -> Result<()> {
        let deleted = prepared.deleted_row_ids();
        let children = if deleted.is_empty() && !prepared.truncated() { Vec::new() } else { referencing(self.catalog(), &table.name) };
        let added = appended.iter().map(DataChunk::row_count).sum::<usize>();
        if children.is_empty() && (table.foreign_keys.is_empty() || added == 0) {
            return Ok(());
        }
        let after = Arc::new(table.at(Arc::clone(prepared.data())));
        if added > 0 && !table.foreign_keys.is_empty() {
            let new_rows = self.scan_table(NEW_ROWS, table.schema.clone(), appended)?;
            for key in &table.foreign_keys {
                let columns = names(table, &key.columns);
                let self_referencing = key.parent == table.name;
                let parent_table = if self_referencing { Arc::clone(table) } else { self.catalog().table(&key.parent)? };
                let parent = if self_referencing { AFTER.to_string() } else { quoted(&key.parent) };
                let parent_columns = names(&parent_table, &key.parent_columns);
                let not_null: Vec<String> = columns.iter().map(|c| format!("n.{} IS NOT NULL", quoted(c))).collect();
                let sql = format!(
                    "SELECT count(*) FROM {NEW_ROWS} AS n WHERE {} AND NOT EXISTS (SELECT 1 FROM {parent} AS p WHERE {})",
                    not_null.join(" AND "),
                    key_match("p", &parent_columns, "n", &columns)
                );
                let source = self_referencing.then(|| (AFTER, Arc::clone(&after)));
                if self.count_rows(&sql, (NEW_ROWS, Arc::clone(&new_rows)), source)? > 0 {
                    return Err(ApiaryError::ForeignKeyViolation(format!(
                        "insert or update on table \"{}\" violates foreign key constraint \"{}\": a key ({}) is not present in table \"{}\"",
                        table.name,
                        key.name,
                        columns.join(", "),
                        key.parent
                    )));
                }
            }
        }
        for (child, key) in children {
            let parent_columns = names(table, &key.parent_columns);
            let removed = match prepared.truncated() {
                // TRUNCATE is refused while another table references this one; a table
                // referencing itself is empty after it.
                true => continue,
                false => self.removed_keys(table, before, deleted, &key.parent_columns, appended)?,
            };
            let Some(removed) = removed else { continue };
            let self_referencing = child.name == table.name;
            let child_name = if self_referencing { AFTER.to_string() } else { quoted(&child.name) };
            let sql = format!(
                "SELECT count(*) FROM {child_name} AS c WHERE EXISTS (SELECT 1 FROM {REMOVED_KEYS} AS r WHERE {})",
                key_match("r", &parent_columns, "c", &names(&child, &key.columns))
            );
            let source = self_referencing.then(|| (AFTER, Arc::clone(&after)));
            if self.count_rows(&sql, (REMOVED_KEYS, removed), source)? > 0 {
                return Err(ApiaryError::ForeignKeyViolation(format!(
                    "update or delete on table \"{}\" violates foreign key constraint \"{}\" on table \"{}\": a key ({}) is still referenced",
                    table.name,
                    key.name,
                    child.name,
                    parent_columns.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The keys (`columns`) of the rows `deleted` from `before` that no row of `appended`
    /// has and none of whose columns is NULL, as a table; `None` when there are none.
    fn removed_keys(
        &self,
        table: &Table,
        before: &TableData,
        deleted: &[i64],
        columns: &[usize],
        appended: &[DataChunk],
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
        let fields: Vec<Field> = columns.iter().map(|&c| table.schema.fields[c].clone()).collect();
        let chunk = DataChunk::new(old.iter().map(|v| v.gather(&rows)).collect(), rows.len());
        Ok(Some(self.scan_table(REMOVED_KEYS, Schema::new(fields), &[chunk])?))
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
