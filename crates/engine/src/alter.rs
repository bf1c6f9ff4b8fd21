//! ALTER TABLE: RENAME TO, RENAME COLUMN, ADD COLUMN, DROP COLUMN, and ALTER COLUMN
//! SET/DROP DEFAULT, SET/DROP NOT NULL, TYPE.
//!
//! The statement takes the table's writer (so no row changes meanwhile), builds the new
//! table from the old one's blocks — stripes of untouched columns are shared, an added
//! column gets a stripe per block of its defaults, a retyped column one of its converted
//! values, deleted rows are dropped first — and replaces the table in the catalog in one
//! step (`Change::Replace`: made durable by a checkpoint). All operations of one statement
//! apply together or not at all. Statements waiting for the old table's writer fail with
//! 40001 once they get it (the table they would change is gone); a transaction that
//! changed the table fails at COMMIT the same way.
//!
//! Views store their query as text and their columns as created, so an ALTER that changes
//! the table's name or columns is refused while a view reads the table.

use std::sync::Arc;

use apiary_common::{bind_err, not_impl_err, ApiaryError, Result};
use apiary_execution::expr::cast_vector;
use apiary_sql::binder::{convert_data_type, normalize_ident, object_name_to_table};
use apiary_sql::parser::{expression_text, parse_expression};
use apiary_storage::{
    Block, CheckConstraint, ColumnStripe, ForeignKey, IndexDefinition, OwnedSequence, Table, TableData, TableIndex, TableStats,
};
use apiary_types::{DataChunk, Field, Schema, Vector};
use sqlparser::ast;

use crate::connection::Connection;
use crate::database::Change;
use crate::result::QueryResult;

/// The table being built by an ALTER TABLE.
struct Draft {
    name: String,
    fields: Vec<Field>,
    primary_key: Vec<usize>,
    unique: Vec<Vec<usize>>,
    defaults: Vec<Option<String>>,
    checks: Vec<CheckConstraint>,
    /// The sequences its columns own (a dropped column's goes with it).
    sequences: Vec<OwnedSequence>,
    /// Its FOREIGN KEYs (one on a dropped column goes with it).
    foreign_keys: Vec<ForeignKey>,
    /// Its indexes (one on a dropped column goes with it).
    indexes: Vec<Arc<TableIndex>>,
    /// Each block's row count and stripes (no deleted rows).
    blocks: Vec<(usize, Vec<Arc<ColumnStripe>>)>,
    stats: TableStats,
    block_rows: usize,
    packed: bool,
    layout: u64,
    /// The stored rows must be checked against the constraints again (a column added or
    /// converted, NOT NULL set).
    recheck: bool,
    /// FOREIGN KEYs added: the stored rows must satisfy them.
    new_foreign_keys: Vec<ForeignKey>,
    /// Each column's position in the table before the ALTER (`None`: added), so that
    /// the FOREIGN KEYs of other tables can follow their columns.
    origins: Vec<Option<usize>>,
}

impl Draft {
    fn of(table: &Table, data: &TableData) -> Result<Draft> {
        let data = table.without_deleted_rows(data)?;
        let blocks = data.blocks.iter().map(|block| (block.row_count, block.columns.clone())).collect();
        Ok(Draft {
            name: table.name.clone(),
            fields: table.schema.fields.clone(),
            primary_key: table.primary_key.clone(),
            unique: table.unique.clone(),
            defaults: (0..table.schema.len()).map(|c| table.default_of(c).map(str::to_string)).collect(),
            checks: table.checks.clone(),
            sequences: table.sequences.clone(),
            foreign_keys: table.foreign_keys.clone(),
            indexes: table.indexes.clone(),
            blocks,
            stats: data.stats,
            block_rows: table.block_rows,
            packed: table.packed,
            // A new layout (`without_deleted_rows` makes one): row ids of the old table (a
            // transaction's deletions) do not apply.
            layout: data.layout,
            recheck: false,
            new_foreign_keys: Vec::new(),
            origins: (0..table.schema.len()).map(Some).collect(),
        })
    }

    /// The table as drafted so far (its definition, and its rows unless `with_rows` is false).
    fn table(&self, with_rows: bool) -> Table {
        let table = Table::new(self.name.clone(), Schema::new(self.fields.clone()), self.block_rows)
            .packed(self.packed)
            .with_primary_key(self.primary_key.clone())
            .with_unique(self.unique.clone())
            .with_defaults(self.defaults.clone())
            .with_checks(self.checks.clone())
            .with_sequences(self.sequences.clone())
            .with_foreign_keys(self.foreign_keys.clone())
            .with_indexes(self.indexes.clone());
        if !with_rows {
            return table;
        }
        let blocks = self.blocks.iter().map(|(rows, stripes)| Arc::new(Block::from_stripes(*rows, stripes.clone(), None))).collect();
        table.with_data(TableData { blocks, stats: self.stats.clone(), layout: self.layout })
    }

    fn position(&self, column: &ast::Ident) -> Result<usize> {
        let name = normalize_ident(column);
        self.fields
            .iter()
            .position(|f| f.name == name)
            .ok_or_else(|| bind_err!("column \"{name}\" of relation \"{}\" does not exist", self.name))
    }

    /// A stripe holding `values` (one block's rows of a column).
    fn stripe(&self, values: Vector) -> Arc<ColumnStripe> {
        Arc::new(if self.packed { ColumnStripe::packed(values) } else { ColumnStripe::new(values) })
    }

    /// The statistics of column `column` recomputed from its stripes.
    fn column_stats(&self, column: usize) -> Result<apiary_storage::ColumnStats> {
        let mut stats = TableStats::empty(1);
        for (rows, stripes) in &self.blocks {
            let values = stripes[column].vector()?;
            let block = Block::from_stripes(*rows, vec![Arc::clone(&stripes[column])], None);
            stats.add_block(&block, &[values], true);
        }
        Ok(stats.columns.remove(0))
    }
}

/// The CHECK constraints' SQL with column `old` renamed to `new`.
fn rename_in_checks(checks: &mut [CheckConstraint], old: &str, new: &str) -> Result<()> {
    for check in checks {
        let mut expr = parse_expression(&check.sql)?;
        let _ = ast::visit_expressions_mut(&mut expr, |e| {
            match e {
                ast::Expr::Identifier(ident) if normalize_ident(ident) == old => *ident = ast::Ident::with_quote('"', new),
                ast::Expr::CompoundIdentifier(parts) => {
                    if let Some(last) = parts.last_mut().filter(|last| normalize_ident(last) == old) {
                        *last = ast::Ident::with_quote('"', new);
                    }
                }
                _ => {}
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        check.sql = expression_text(&expr)?;
    }
    Ok(())
}

/// Whether a CHECK constraint's SQL names column `column`.
fn check_reads(check: &CheckConstraint, column: &str) -> Result<bool> {
    let expr = parse_expression(&check.sql)?;
    let mut reads = false;
    let _ = ast::visit_expressions(&expr, |e| {
        reads |= match e {
            ast::Expr::Identifier(ident) => normalize_ident(ident) == column,
            ast::Expr::CompoundIdentifier(parts) => parts.last().is_some_and(|last| normalize_ident(last) == column),
            _ => false,
        };
        std::ops::ControlFlow::<()>::Continue(())
    });
    Ok(reads)
}

impl Connection {
    pub(crate) fn alter_table(&mut self, alter: &ast::AlterTable) -> Result<QueryResult> {
        if alter.only || alter.location.is_some() || alter.on_cluster.is_some() || alter.table_type.is_some() {
            return Err(not_impl_err!("this form of ALTER TABLE (ONLY, LOCATION, ON CLUSTER or a table type)"));
        }
        let name = object_name_to_table(&alter.name)?;
        let Some(table) = self.catalog().get_table(&name) else {
            if self.catalog().get_view(&name).is_some() {
                return Err(ApiaryError::WrongObjectType(format!("\"{name}\" is a view: ALTER TABLE changes tables")));
            }
            if alter.if_exists {
                return Ok(QueryResult::statement(None));
            }
            return Err(ApiaryError::Catalog(format!("relation \"{name}\" does not exist")));
        };
        if table.deferred_rows().is_some() {
            return Err(ApiaryError::WrongObjectType(format!("cannot alter table \"{name}\": it reads a file")));
        }
        let reshapes = alter.operations.iter().any(|op| {
            !matches!(
                op,
                ast::AlterTableOperation::AlterColumn {
                    op: ast::AlterColumnOperation::SetDefault { .. }
                        | ast::AlterColumnOperation::DropDefault
                        | ast::AlterColumnOperation::SetNotNull
                        | ast::AlterColumnOperation::DropNotNull,
                    ..
                } | ast::AlterTableOperation::AddConstraint { .. }
                    | ast::AlterTableOperation::DropConstraint { .. }
            )
        });
        if reshapes {
            if let Some(view) = self.catalog().dependent_views(std::slice::from_ref(&name)).first() {
                return Err(ApiaryError::Dependency(format!(
                    "cannot alter table \"{name}\" because view \"{}\" depends on it (drop the view first)",
                    view.name
                )));
            }
        }
        // Foreign keys name their parent and its columns by name and position: those of
        // other tables follow a rename or a dropped column, in the same transaction.
        let referenced = crate::foreign_keys::referencing(self.catalog(), &name).into_iter().any(|(child, _)| child.name != name);
        let moves_columns = alter
            .operations
            .iter()
            .any(|op| matches!(op, ast::AlterTableOperation::RenameTable { .. } | ast::AlterTableOperation::DropColumn { .. }));
        if !(referenced && moves_columns) {
            self.rebuild(&table, |connection, draft| alter.operations.iter().try_for_each(|operation| connection.apply(draft, operation)))?;
            return Ok(QueryResult::statement(None));
        }
        self.atomically(|connection| connection.alter_referenced_table(&table, alter))?;
        Ok(QueryResult::statement(None))
    }

    /// ALTER TABLE of a table other tables' FOREIGN KEYs reference, which renames it or
    /// drops columns: the children are rebuilt with their keys following it (a key on a
    /// dropped column fails the statement, 2BP01, or goes with `DROP COLUMN ... CASCADE`).
    /// Runs inside a transaction, so that all the tables change together.
    fn alter_referenced_table(&mut self, table: &Arc<Table>, alter: &ast::AlterTable) -> Result<()> {
        let old_name = table.name.clone();
        let cascade = alter
            .operations
            .iter()
            .any(|op| matches!(op, ast::AlterTableOperation::DropColumn { drop_behavior: Some(ast::DropBehavior::Cascade), .. }));
        let origins =
            self.rebuild(table, |connection, draft| alter.operations.iter().try_for_each(|operation| connection.apply(draft, operation)))?;
        let new_name = match alter.operations.iter().rev().find_map(|op| match op {
            ast::AlterTableOperation::RenameTable { table_name: ast::RenameTableNameKind::To(new) | ast::RenameTableNameKind::As(new) } => {
                Some(new)
            }
            _ => None,
        }) {
            Some(new) => object_name_to_table(new)?,
            None => old_name.clone(),
        };
        let children: Vec<Arc<Table>> = {
            let mut seen = Vec::new();
            for (child, _) in crate::foreign_keys::referencing(self.catalog(), &old_name) {
                if child.name != old_name && child.name != new_name && !seen.iter().any(|c: &Arc<Table>| c.name == child.name) {
                    seen.push(child);
                }
            }
            seen
        };
        for child in children {
            self.rebuild(&child, |_, draft| {
                let mut kept = Vec::with_capacity(draft.foreign_keys.len());
                for mut key in std::mem::take(&mut draft.foreign_keys) {
                    if key.parent != old_name {
                        kept.push(key);
                        continue;
                    }
                    let moved: Option<Vec<usize>> =
                        key.parent_columns.iter().map(|&c| origins.iter().position(|origin| *origin == Some(c))).collect();
                    match moved {
                        Some(columns) => {
                            key.parent_columns = columns;
                            key.parent.clone_from(&new_name);
                            kept.push(key);
                        }
                        None if cascade => {}
                        None => {
                            return Err(ApiaryError::Dependency(format!(
                                "cannot drop a column of table {old_name} because constraint {} on table {} depends on it (use DROP COLUMN ... CASCADE)",
                                key.name, draft.name
                            )))
                        }
                    }
                }
                draft.foreign_keys = kept;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Replaces `table` by a copy `edit` changes (ALTER TABLE, CREATE / DROP INDEX),
    /// holding its writer (inside a transaction block, its private one: COMMIT checks
    /// that no one changed the rows meanwhile).
    /// Returns each new column's position before (see `Draft::origins`).
    fn rebuild(&mut self, table: &Arc<Table>, edit: impl FnOnce(&Self, &mut Draft) -> Result<()>) -> Result<Vec<Option<usize>>> {
        let writer = self.table_writer(table)?;
        let mut draft = Draft::of(table, writer.base())?;
        edit(self, &mut draft)?;
        if draft.name != table.name && self.catalog().relation_exists(&draft.name) {
            return Err(ApiaryError::Duplicate(format!("relation \"{}\" already exists", draft.name)));
        }
        let altered = Arc::new(draft.table(true));
        self.validate_defaults_and_checks(&Arc::new(draft.table(false)))?;
        if draft.recheck {
            self.check_stored_rows(&altered)?;
        }
        for key in &draft.new_foreign_keys {
            self.check_stored_foreign_key(&altered, key)?;
        }
        // Published while the old table's writer is held: a statement waiting for it then
        // finds the table replaced.
        self.commit_change(Change::Replace { old: Arc::clone(table), new: altered })?;
        drop(writer);
        Ok(draft.origins)
    }

    /// `CREATE [UNIQUE] INDEX [IF NOT EXISTS] [name] ON t [USING method] (c, ...)`.
    pub(crate) fn create_index(&mut self, create: &ast::CreateIndex) -> Result<QueryResult> {
        if !create.include.is_empty() || create.predicate.is_some() || !create.with.is_empty() || create.nulls_distinct == Some(false) {
            return Err(not_impl_err!("CREATE INDEX with INCLUDE, WITH, NULLS NOT DISTINCT or a WHERE predicate"));
        }
        if let Some(using) = &create.using {
            let method = using.to_string().to_ascii_lowercase();
            if !["btree", "hash", "art"].contains(&method.as_str()) {
                return Err(not_impl_err!("CREATE INDEX ... USING {method} (btree, hash and art are one kind of index here)"));
            }
        }
        let table_name = object_name_to_table(&create.table_name)?;
        let table = self.catalog().table(&table_name)?;
        if table.deferred_rows().is_some() {
            return Err(ApiaryError::WrongObjectType(format!("cannot index table \"{table_name}\": it reads a file")));
        }
        let mut columns = Vec::with_capacity(create.columns.len());
        let mut column_names = Vec::with_capacity(create.columns.len());
        for column in &create.columns {
            let ast::Expr::Identifier(ident) = &column.column.expr else {
                return Err(not_impl_err!("an index on an expression ({})", column.column.expr));
            };
            let column_name = normalize_ident(ident);
            let position = table
                .schema
                .index_of(&column_name)
                .ok_or_else(|| bind_err!("column \"{column_name}\" does not exist in table \"{table_name}\""))?;
            columns.push(position);
            column_names.push(column_name);
        }
        let name = match &create.name {
            Some(name) => object_name_to_table(name)?,
            None => {
                let base = format!("{table_name}_{}_idx", column_names.join("_"));
                let catalog = self.catalog();
                std::iter::once(base.clone())
                    .chain((1..).map(|n| format!("{base}{n}")))
                    .find(|n| !catalog.relation_exists(n))
                    .expect("a name")
            }
        };
        if self.catalog().relation_exists(&name) {
            if create.if_not_exists {
                return Ok(QueryResult::statement(None));
            }
            return Err(ApiaryError::Duplicate(format!("relation \"{name}\" already exists")));
        }
        self.rebuild(&table, |_, draft| {
            let mut sorted = columns.clone();
            sorted.sort_unstable();
            let enforced = std::iter::once(&draft.primary_key).chain(&draft.unique).any(|key| {
                let mut key = key.clone();
                key.sort_unstable();
                key == sorted
            });
            // A UNIQUE index on columns no key constraint covers adds one.
            let unique = create.unique && !enforced;
            if unique {
                draft.unique.push(columns.clone());
                draft.recheck = true;
            }
            draft.indexes.push(Arc::new(TableIndex::new(IndexDefinition { name, columns, unique })));
            Ok(())
        })?;
        Ok(QueryResult::statement(None))
    }

    /// `DROP INDEX [IF EXISTS] name, ...`.
    pub(crate) fn drop_index(&mut self, names: &[ast::ObjectName], if_exists: bool) -> Result<QueryResult> {
        for name in names {
            let name = object_name_to_table(name)?;
            let Some(table) = self.catalog().index_owner(&name) else {
                if if_exists {
                    continue;
                }
                return Err(ApiaryError::Catalog(format!("index \"{name}\" does not exist")));
            };
            self.rebuild(&table, |connection, draft| {
                let position = draft.indexes.iter().position(|i| i.definition.name == name).expect("the owner has the index");
                let definition = draft.indexes.remove(position).definition.clone();
                if definition.unique {
                    let mut sorted = definition.columns.clone();
                    sorted.sort_unstable();
                    let referenced = crate::foreign_keys::referencing(connection.catalog(), &draft.name).into_iter().find(|(_, key)| {
                        let mut parent = key.parent_columns.clone();
                        parent.sort_unstable();
                        parent == sorted
                    });
                    if let Some((child, key)) = referenced {
                        return Err(ApiaryError::Dependency(format!(
                            "cannot drop index {name} because constraint {} on table {} requires it",
                            key.name, child.name
                        )));
                    }
                    draft.unique.retain(|key| *key != definition.columns);
                }
                Ok(())
            })?;
        }
        Ok(QueryResult::statement(None))
    }

    fn apply(&self, draft: &mut Draft, operation: &ast::AlterTableOperation) -> Result<()> {
        use ast::AlterTableOperation as Op;
        match operation {
            Op::RenameTable { table_name: ast::RenameTableNameKind::To(new) | ast::RenameTableNameKind::As(new) } => {
                let new = object_name_to_table(new)?;
                // A key on the table itself follows it.
                for key in draft.foreign_keys.iter_mut().filter(|key| key.parent == draft.name) {
                    key.parent = new.clone();
                }
                draft.name = new;
            }
            Op::RenameColumn { old_column_name, new_column_name } => {
                let position = draft.position(old_column_name)?;
                let new = normalize_ident(new_column_name);
                if draft.fields.iter().any(|f| f.name == new) {
                    return Err(ApiaryError::Duplicate(format!("column \"{new}\" of relation \"{}\" already exists", draft.name)));
                }
                let old = std::mem::replace(&mut draft.fields[position].name, new.clone());
                rename_in_checks(&mut draft.checks, &old, &new)?;
            }
            Op::AddColumn { if_not_exists, column_def, column_position: None, .. } => self.add_column(draft, column_def, *if_not_exists)?,
            Op::AddConstraint { constraint, not_valid } => self.add_constraint(draft, constraint, *not_valid)?,
            Op::DropConstraint { if_exists, name, drop_behavior } => {
                if matches!(drop_behavior, Some(ast::DropBehavior::Cascade)) {
                    return Err(not_impl_err!(
                        "ALTER TABLE ... DROP CONSTRAINT ... CASCADE (drop the FOREIGN KEYs that depend on it first)"
                    ));
                }
                self.drop_constraint(draft, &normalize_ident(name), *if_exists)?
            }
            Op::DropColumn { column_names, if_exists, drop_behavior, .. } => {
                for column in column_names {
                    let position = match draft.position(column) {
                        Ok(position) => position,
                        Err(_) if *if_exists => continue,
                        Err(e) => return Err(e),
                    };
                    if draft.fields.len() == 1 {
                        return Err(not_impl_err!("dropping the last column of a table (drop the table)"));
                    }
                    let name = draft.fields[position].name.clone();
                    let reading: Vec<String> =
                        draft.checks.iter().filter(|c| check_reads(c, &name).unwrap_or(true)).map(|c| c.name.clone()).collect();
                    if matches!(drop_behavior, Some(ast::DropBehavior::Restrict)) && !reading.is_empty() {
                        return Err(ApiaryError::Dependency(format!(
                            "cannot drop column \"{name}\": constraint \"{}\" depends on it",
                            reading[0]
                        )));
                    }
                    // As PostgreSQL: the constraints on the column go with it.
                    draft.checks.retain(|c| !reading.contains(&c.name));
                    if draft.primary_key.contains(&position) {
                        draft.primary_key.clear();
                    }
                    draft.unique.retain(|u| !u.contains(&position));
                    let shift = |c: &mut usize| {
                        if *c > position {
                            *c -= 1;
                        }
                    };
                    draft.sequences.retain(|owned| owned.column != position);
                    if draft.foreign_keys.iter().any(|key| key.parent == draft.name && key.parent_columns.contains(&position)) {
                        return Err(ApiaryError::Dependency(format!(
                            "cannot drop column \"{name}\": a foreign key of the table references it"
                        )));
                    }
                    draft.foreign_keys.retain(|key| !key.columns.contains(&position));
                    // As PostgreSQL: an index on the column goes with it.
                    draft.indexes.retain(|index| !index.definition.columns.contains(&position));
                    draft.primary_key.iter_mut().for_each(shift);
                    draft.unique.iter_mut().flatten().for_each(shift);
                    draft.sequences.iter_mut().for_each(|owned| shift(&mut owned.column));
                    for index in &mut draft.indexes {
                        let mut definition = index.definition.clone();
                        definition.columns.iter_mut().for_each(shift);
                        *index = Arc::new(TableIndex::new(definition));
                    }
                    for key in &mut draft.foreign_keys {
                        key.columns.iter_mut().for_each(shift);
                        if key.parent == draft.name {
                            key.parent_columns.iter_mut().for_each(shift);
                        }
                    }
                    draft.fields.remove(position);
                    draft.origins.remove(position);
                    draft.defaults.remove(position);
                    draft.stats.columns.remove(position);
                    for (_, stripes) in &mut draft.blocks {
                        stripes.remove(position);
                    }
                }
            }
            Op::AlterColumn { column_name, op } => {
                let position = draft.position(column_name)?;
                let column = draft.fields[position].name.clone();
                match op {
                    ast::AlterColumnOperation::SetDefault { value } => {
                        draft.defaults[position] = Some(crate::constraints::default_text(value)?)
                    }
                    ast::AlterColumnOperation::DropDefault => draft.defaults[position] = None,
                    ast::AlterColumnOperation::DropNotNull => {
                        if draft.primary_key.contains(&position) {
                            return Err(ApiaryError::Constraint(format!("column \"{column}\" is in a primary key")));
                        }
                        draft.fields[position].nullable = true;
                    }
                    ast::AlterColumnOperation::SetNotNull => {
                        draft.fields[position].nullable = false;
                        draft.recheck = true;
                    }
                    ast::AlterColumnOperation::SetDataType { data_type, using, .. } => {
                        if using.is_some() {
                            return Err(not_impl_err!("ALTER COLUMN ... TYPE ... USING"));
                        }
                        let to = convert_data_type(data_type)?;
                        for block in 0..draft.blocks.len() {
                            let values = draft.blocks[block].1[position].vector()?;
                            let converted = cast_vector(&values, to, None)?;
                            draft.blocks[block].1[position] = draft.stripe(converted);
                        }
                        draft.fields[position].data_type = to;
                        draft.stats.columns[position] = draft.column_stats(position)?;
                        draft.recheck = true;
                    }
                    other => return Err(not_impl_err!("ALTER COLUMN ... {other}")),
                }
            }
            other => return Err(not_impl_err!("ALTER TABLE ... {other}")),
        }
        Ok(())
    }

    /// `ADD [CONSTRAINT name] CHECK (...) / PRIMARY KEY (...) / UNIQUE (...) / FOREIGN KEY
    /// (...) REFERENCES ... [NOT VALID]`: the stored rows are checked against it unless
    /// NOT VALID (CHECK, FOREIGN KEY; a key constraint is always checked). PRIMARY KEY and
    /// UNIQUE constraints keep PostgreSQL's default names (`t_pkey`, `t_c_key`).
    fn add_constraint(&self, draft: &mut Draft, constraint: &ast::TableConstraint, not_valid: bool) -> Result<()> {
        let key_columns = |columns: &[ast::IndexColumn], draft: &Draft| -> Result<Vec<usize>> {
            columns
                .iter()
                .map(|column| match &column.column.expr {
                    ast::Expr::Identifier(ident) => draft.position(ident),
                    other => Err(not_impl_err!("a key on expression {other}")),
                })
                .collect()
        };
        let taken = |draft: &Draft, name: &str| -> Result<()> {
            if draft.checks.iter().any(|c| c.name == name) || draft.foreign_keys.iter().any(|k| k.name == name) {
                return Err(ApiaryError::Duplicate(format!("constraint \"{name}\" for relation \"{}\" already exists", draft.name)));
            }
            Ok(())
        };
        match constraint {
            ast::TableConstraint::Check(check) => {
                if check.enforced == Some(false) {
                    return Ok(());
                }
                let declared = [crate::constraints::DeclaredCheck { name: check.name.as_ref(), column: None, expr: &check.expr }];
                let mut added = crate::constraints::name_checks(&draft.name, &declared)?;
                for check in &mut added {
                    if declared[0].name.is_some() {
                        taken(draft, &check.name)?;
                    }
                    let base = check.name.clone();
                    let mut n = 0;
                    while draft.checks.iter().any(|c| c.name == check.name) {
                        n += 1;
                        check.name = format!("{base}{n}");
                    }
                }
                draft.checks.extend(added);
                draft.recheck |= !not_valid;
            }
            ast::TableConstraint::PrimaryKey(key) => {
                if !draft.primary_key.is_empty() {
                    return Err(bind_err!("multiple primary keys for table \"{}\" are not allowed", draft.name));
                }
                let columns = key_columns(&key.columns, draft)?;
                for &column in &columns {
                    draft.fields[column].nullable = false;
                }
                draft.primary_key = columns;
                draft.recheck = true;
            }
            ast::TableConstraint::Unique(key) => {
                let columns = key_columns(&key.columns, draft)?;
                if !draft.unique.contains(&columns) {
                    draft.unique.push(columns);
                }
                draft.recheck = true;
            }
            ast::TableConstraint::ForeignKey(key) => {
                let declared = crate::foreign_keys::declared(key, None, None)?;
                let key = crate::foreign_keys::resolve(self.catalog(), &draft.table(false), vec![declared])?.remove(0);
                taken(draft, &key.name)?;
                draft.foreign_keys.push(key.clone());
                if !not_valid {
                    draft.new_foreign_keys.push(key);
                }
            }
            other => return Err(not_impl_err!("ALTER TABLE ... ADD {other}")),
        }
        Ok(())
    }

    /// `DROP CONSTRAINT [IF EXISTS] name`: a CHECK, FOREIGN KEY, PRIMARY KEY or UNIQUE
    /// constraint (not one a FOREIGN KEY depends on).
    fn drop_constraint(&self, draft: &mut Draft, name: &str, if_exists: bool) -> Result<()> {
        if let Some(position) = draft.checks.iter().position(|c| c.name == name) {
            draft.checks.remove(position);
            return Ok(());
        }
        if let Some(position) = draft.foreign_keys.iter().position(|k| k.name == name) {
            draft.foreign_keys.remove(position);
            return Ok(());
        }
        let table = draft.table(false);
        let found = table
            .key_constraints()
            .into_iter()
            .find(|(columns, primary)| table.key_constraint_name(columns, *primary) == name)
            .map(|(columns, primary)| (columns.to_vec(), primary));
        let Some((columns, primary)) = found else {
            if if_exists {
                return Ok(());
            }
            return Err(ApiaryError::Catalog(format!("constraint \"{name}\" of relation \"{}\" does not exist", draft.name)));
        };
        let mut sorted = columns.clone();
        sorted.sort_unstable();
        let mut keys = crate::foreign_keys::referencing(self.catalog(), &draft.name)
            .into_iter()
            .filter(|(child, _)| child.name != draft.name)
            .map(|(child, key)| (child.name.clone(), key))
            .collect::<Vec<_>>();
        keys.extend(draft.foreign_keys.iter().filter(|k| k.parent == draft.name).map(|k| (draft.name.clone(), k.clone())));
        for (child, key) in keys {
            let mut parent = key.parent_columns.clone();
            parent.sort_unstable();
            if parent == sorted {
                return Err(ApiaryError::Dependency(format!(
                    "cannot drop constraint {name} on table {} because constraint {} on table {child} depends on it",
                    draft.name, key.name
                )));
            }
        }
        if primary {
            draft.primary_key.clear();
        } else {
            draft.unique.retain(|key| *key != columns);
        }
        Ok(())
    }

    /// `ADD [COLUMN] [IF NOT EXISTS] c type [NOT NULL] [DEFAULT e] [CHECK (...)]`: the stored
    /// rows get the default (computed per row), or NULL.
    fn add_column(&self, draft: &mut Draft, column: &ast::ColumnDef, if_not_exists: bool) -> Result<()> {
        let name = normalize_ident(&column.name);
        if draft.fields.iter().any(|f| f.name == name) {
            if if_not_exists {
                return Ok(());
            }
            return Err(ApiaryError::Duplicate(format!("column \"{name}\" of relation \"{}\" already exists", draft.name)));
        }
        let data_type = convert_data_type(&column.data_type)?;
        let (mut nullable, mut default, mut declared) = (true, None, Vec::new());
        for option in &column.options {
            match &option.option {
                ast::ColumnOption::NotNull => nullable = false,
                ast::ColumnOption::Null => {}
                ast::ColumnOption::Default(expr) => default = Some(crate::constraints::default_text(expr)?),
                ast::ColumnOption::Check(check) => declared.push(crate::constraints::DeclaredCheck {
                    name: option.name.as_ref().or(check.name.as_ref()),
                    column: Some(name.clone()),
                    expr: &check.expr,
                }),
                other => return Err(not_impl_err!("column option {other} in ALTER TABLE ... ADD COLUMN")),
            }
        }
        let mut checks = crate::constraints::name_checks(&draft.name, &declared)?;
        for check in &mut checks {
            let mut n = 0;
            let base = check.name.clone();
            while draft.checks.iter().any(|c| c.name == check.name) {
                n += 1;
                check.name = format!("{base}{n}");
            }
        }
        draft.fields.push(Field::new(name, data_type, nullable));
        draft.origins.push(None);
        draft.defaults.push(default);
        draft.checks.extend(checks);
        let position = draft.fields.len() - 1;
        let definition = draft.table(false);
        for block in 0..draft.blocks.len() {
            let rows = draft.blocks[block].0;
            let values = match definition.default_of(position) {
                Some(_) => self.default_vectors(&definition, &[position], rows)?.remove(0),
                None => Vector::nulls(data_type, rows),
            };
            let stripe = draft.stripe(values);
            draft.blocks[block].1.push(stripe);
        }
        draft.stats.columns.push(Default::default());
        draft.stats.columns[position] = draft.column_stats(position)?;
        draft.recheck = true;
        Ok(())
    }

    /// Checks every row of `table` (an altered table) against its NOT NULL columns and
    /// CHECK constraints.
    /// A block at a time: only the NOT NULL columns are read unless there are checks.
    fn check_stored_rows(&self, table: &Table) -> Result<()> {
        let data = table.snapshot();
        // Keys: a UNIQUE index over rows that repeat a key cannot be made.
        for (key_columns, _) in table.key_constraints() {
            let mut seen = std::collections::HashSet::new();
            let repeated = data.visit_keys(key_columns, |key| match seen.insert(key.to_vec()) {
                true => std::ops::ControlFlow::Continue(()),
                false => std::ops::ControlFlow::Break(()),
            })?;
            if repeated.is_break() {
                let names: Vec<&str> = key_columns.iter().map(|&c| table.schema.fields[c].name.as_str()).collect();
                return Err(ApiaryError::UniqueViolation(format!(
                    "could not create unique index on table \"{}\": key ({}) is duplicated",
                    table.name,
                    names.join(", ")
                )));
            }
        }
        for block in &data.blocks {
            for (field, stripe) in table.schema.fields.iter().zip(&block.columns) {
                if !field.nullable && stripe.vector()?.null_count() > 0 {
                    return Err(ApiaryError::NotNullViolation(format!(
                        "column \"{}\" of relation \"{}\" contains null values",
                        field.name, table.name
                    )));
                }
            }
            if !table.checks.is_empty() {
                let columns = block.columns.iter().map(|stripe| stripe.vector()).collect::<Result<Vec<_>>>()?;
                self.check_constraints(table, &[DataChunk::new(columns, block.row_count)])?;
            }
        }
        Ok(())
    }
}
