//! INSERT, DELETE, UPDATE and TRUNCATE.
//!
//! A statement that changes rows first takes the table's writer (one at a time per table;
//! readers are not blocked) and with it the snapshot it changes. It finds its rows with an
//! ordinary query over that snapshot in which the target reads as the table plus a hidden
//! column of row ids (`Table::with_row_ids`): `DELETE FROM t USING u WHERE c` runs
//! `SELECT t.__apiary_row_id FROM t, u WHERE c`, `UPDATE t SET a = e FROM u WHERE c` runs
//! `SELECT t.__apiary_row_id, e, t.b, ... FROM t, u WHERE c` with every column converted
//! to its type, so joins, subqueries and the optimizer serve DML as they serve queries.
//! The writer then marks the rows deleted (a new block version with a deletion bitmap;
//! see `apiary_storage::Block`) and, for UPDATE, appends the new versions of the rows.
//! The change commits like an INSERT: logged (deleted row ids, new rows) or checkpointed
//! when large, then published atomically; a failure leaves the table as it was.
//!
//! A row that the join matches more than once is changed once (PostgreSQL: "only one of
//! the join rows will be used to update the target row"). `RETURNING` is evaluated over
//! the deleted rows, or the new versions of updated rows, as a query over them.
//!
//! `INSERT ... ON CONFLICT` runs its source first, then finds which proposed rows
//! conflict the same way: the proposed rows become a table read as `excluded` (with row
//! ids of its own), and `SELECT t.row_id, excluded.row_id FROM t, excluded WHERE t.k =
//! excluded.k` pairs each with the row holding its key. `DO UPDATE SET ... WHERE ...` is
//! then an UPDATE ... FROM excluded over those pairs; rows without a conflict are
//! appended. Proposed rows that repeat a key among themselves are found by hashing their
//! keys in order: DO NOTHING keeps the first, DO UPDATE fails (PostgreSQL: "cannot
//! affect row a second time", SQLSTATE 21000).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use apiary_common::{bind_err, internal_err, not_impl_err, ApiaryError, Result};
use apiary_sql::binder::{is_default_keyword, normalize_ident, object_name_to_table};
use apiary_storage::table::{split_row_id, ROW_ID_COLUMN};
use apiary_storage::unique::encode_key;
use apiary_storage::{Table, TableAppender, TableData, TableStats};
use apiary_types::{DataChunk, DataType, Vector, VectorData};
use sqlparser::ast;

use crate::connection::{conform_chunk, Connection};
use crate::result::QueryResult;

/// The target table of a DELETE or UPDATE and the name its columns are qualified by.
struct Target {
    table: Arc<Table>,
    name: String,
    /// `AS alias`, if any (then columns are qualified by it).
    alias: Option<ast::TableAlias>,
}

impl Target {
    fn qualifier(&self) -> String {
        self.alias.as_ref().map_or_else(|| self.name.clone(), |a| normalize_ident(&a.name))
    }

    /// `qualifier.column` as an expression.
    fn column(&self, column: &str) -> ast::Expr {
        ast::Expr::CompoundIdentifier(vec![ast::Ident::with_quote('"', self.qualifier()), ast::Ident::with_quote('"', column)])
    }

    /// The target as a FROM item.
    fn factor(&self) -> Result<ast::TableWithJoins> {
        let mut factor = table_factor(&self.name)?;
        if let ast::TableFactor::Table { alias, .. } = &mut factor.relation {
            alias.clone_from(&self.alias);
        }
        Ok(factor)
    }
}

/// What an `ON CONFLICT` clause does with a proposed row whose key a row holds.
enum ConflictAction<'s> {
    Nothing,
    Update { assignments: &'s [ast::Assignment], selection: Option<&'s ast::Expr> },
}

/// The FROM item the proposed rows of an INSERT ... ON CONFLICT are read through.
const EXCLUDED: &str = "excluded";

impl Connection {
    /// Runs an INSERT, UPDATE, DELETE or MERGE (`run`) and the FOREIGN KEY actions its
    /// writes call for (see `foreign_keys.rs`). When its target has children with ON
    /// DELETE / ON UPDATE actions and no block is open, the statement and its actions run
    /// in a transaction of their own, so that they commit together or not at all.
    pub(crate) fn write_statement(
        &mut self,
        statement: &ast::Statement,
        run: impl FnOnce(&mut Self) -> Result<QueryResult>,
    ) -> Result<QueryResult> {
        let target = match statement {
            // A plain INSERT removes no key.
            ast::Statement::Insert(insert) if matches!(&insert.on, Some(ast::OnInsert::OnConflict(c)) if matches!(c.action, ast::OnConflictAction::DoUpdate(_))) => {
                match &insert.table {
                    ast::TableObject::TableName(name) => object_name_to_table(name).ok(),
                    _ => None,
                }
            }
            ast::Statement::Update(update) => self.dml_target(&update.table, "UPDATE").ok().map(|t| t.name),
            ast::Statement::Delete(delete) => self.delete_target(delete).ok().map(|t| t.name),
            ast::Statement::Merge(merge) => {
                self.dml_target(&ast::TableWithJoins { relation: merge.table.clone(), joins: Vec::new() }, "MERGE").ok().map(|t| t.name)
            }
            _ => None,
        };
        let has_actions = target.is_some_and(|name| {
            crate::foreign_keys::referencing(self.catalog(), &name)
                .iter()
                .any(|(_, key)| key.on_delete.changes_rows() || key.on_update.changes_rows())
        });
        if !has_actions {
            return run(self);
        }
        self.atomically(|connection| {
            let result = run(connection).and_then(|result| connection.run_referential_actions().map(|()| result));
            connection.referential_actions.clear();
            result
        })
    }

    /// `INSERT INTO t [AS a] [(columns)] source [ON CONFLICT ...] [RETURNING ...]`.
    pub(crate) fn insert(&mut self, insert: &ast::Insert) -> Result<QueryResult> {
        if insert.or.is_some()
            || insert.overwrite
            || insert.ignore
            || insert.replace_into
            || insert.output.is_some()
            || insert.partitioned.is_some()
            || !insert.assignments.is_empty()
            || !insert.after_columns.is_empty()
            || insert.insert_alias.is_some()
        {
            return Err(not_impl_err!("this form of INSERT (OR, IGNORE, REPLACE, OVERWRITE, OUTPUT, PARTITION or SET)"));
        }
        let ast::TableObject::TableName(name) = &insert.table else {
            return Err(not_impl_err!("INSERT INTO a table function"));
        };
        let name = object_name_to_table(name)?;
        if self.catalog().get_view(&name).is_some() {
            return Err(ApiaryError::WrongObjectType(format!("cannot insert into view \"{name}\"")));
        }
        let table = self.catalog().table(&name)?;
        let target = Target { table, name, alias: insert_alias(insert) };
        let columns: Vec<ast::Ident> = insert
            .columns
            .iter()
            .map(|c| c.0.last().and_then(|p| p.as_ident()).cloned().ok_or_else(|| bind_err!("invalid column name {c}")))
            .collect::<Result<_>>()?;
        check_generated_always(&target.table, &columns, insert.source.as_deref())?;
        let functions = self.table_functions();
        let mut binder = self.binder(&functions);
        let bound = match &insert.source {
            Some(source) => binder.bind_insert_source(&target.table, &columns, source)?,
            // `DEFAULT VALUES`: one row of defaults.
            None if columns.is_empty() => {
                let all: Vec<usize> = (0..target.table.schema.len()).collect();
                binder.bind_default_values(&target.table, &all, 1)?
            }
            None => return Err(not_impl_err!("INSERT without VALUES or SELECT")),
        };
        let plan = self.optimize_plan(bound.plan, bound.next_column_id)?;
        let chunks = self.run_plan(&plan)?.into_iter().map(|chunk| conform_chunk(&target.table, chunk)).collect::<Result<Vec<_>>>()?;
        let mut writer = self.table_writer(&target.table)?;
        let (rows, count, replaces) = match &insert.on {
            None => {
                self.check_constraints(&target.table, &chunks)?;
                if insert.returning.is_none() {
                    let rows = self.write_changes(&target.table, writer, Vec::new(), &chunks, None)?;
                    return Ok(QueryResult::statement(Some(rows)));
                }
                let count = chunks.iter().map(DataChunk::physical_len).sum();
                (concat_chunks(&target.table, &chunks), count, None)
            }
            Some(ast::OnInsert::OnConflict(on_conflict)) => {
                let (rows, count, replaces) = self.upsert(&target, &mut writer, &chunks, on_conflict)?;
                self.check_constraints(&target.table, &[DataChunk::new(rows.clone(), count)])?;
                (rows, count, Some(replaces))
            }
            Some(_) => return Err(not_impl_err!("INSERT ... ON DUPLICATE KEY UPDATE (use ON CONFLICT ... DO UPDATE)")),
        };
        let returned = match &insert.returning {
            Some(items) => Some(self.returning(&target, rows.clone(), count, items)?),
            None => None,
        };
        self.write_changes(&target.table, writer, Vec::new(), &[DataChunk::new(rows, count)], replaces.as_deref())?;
        Ok(returned.unwrap_or_else(|| QueryResult::statement(Some(count as u64))))
    }

    /// The rows an `INSERT ... ON CONFLICT` writes, in the order of the proposed rows
    /// (`chunks`): those it inserts and the new versions of those it updates, whose old
    /// versions it deletes through `writer`; with, for each, the row id it replaces (-1:
    /// inserted).
    fn upsert(
        &self,
        target: &Target,
        writer: &mut TableAppender<'_>,
        chunks: &[DataChunk],
        on_conflict: &ast::OnConflict,
    ) -> Result<(Vec<Vector>, usize, Vec<i64>)> {
        let table = &target.table;
        let action = match &on_conflict.action {
            ast::OnConflictAction::DoNothing => ConflictAction::Nothing,
            ast::OnConflictAction::DoUpdate(update) => {
                ConflictAction::Update { assignments: &update.assignments, selection: update.selection.as_ref() }
            }
        };
        let constraints = table.key_constraints();
        // The constraints whose conflicts the clause handles (PostgreSQL's "arbiters").
        let arbiters: Vec<usize> = match &on_conflict.conflict_target {
            None if matches!(action, ConflictAction::Update { .. }) => {
                return Err(ApiaryError::Parse("ON CONFLICT DO UPDATE requires inference specification or constraint name".to_string()))
            }
            None => (0..constraints.len()).collect(),
            Some(ast::ConflictTarget::Columns(names)) => {
                let mut positions = Vec::with_capacity(names.len());
                for name in names {
                    let column = normalize_ident(name);
                    let position = table
                        .schema
                        .index_of(&column)
                        .ok_or_else(|| bind_err!("column \"{column}\" of relation \"{}\" does not exist", target.name))?;
                    positions.push(position);
                }
                positions.sort_unstable();
                positions.dedup();
                let matching = constraints.iter().position(|(columns, _)| {
                    let mut columns = columns.to_vec();
                    columns.sort_unstable();
                    columns == positions
                });
                match matching {
                    Some(n) => vec![n],
                    None => {
                        return Err(ApiaryError::InvalidColumnReference(
                            "there is no unique or exclusion constraint matching the ON CONFLICT specification".to_string(),
                        ))
                    }
                }
            }
            Some(ast::ConflictTarget::OnConstraint(name)) => {
                let wanted = object_name_to_table(name)?;
                match constraints.iter().position(|(columns, primary)| table.key_constraint_name(columns, *primary) == wanted) {
                    Some(n) => vec![n],
                    None => {
                        return Err(ApiaryError::Catalog(format!("constraint \"{wanted}\" for table \"{}\" does not exist", target.name)))
                    }
                }
            }
        };
        let proposed = concat_chunks(table, chunks);
        let count = chunks.iter().map(DataChunk::physical_len).sum::<usize>();
        // The proposed rows as a table of their own, read as `excluded` with row ids.
        let excluded = Table::new(EXCLUDED.to_string(), table.schema.clone(), self.settings.block_rows).scan_only();
        let mut appender = excluded.appender()?;
        appender.append(&DataChunk::new(proposed.clone(), count))?;
        appender.commit()?;
        let excluded_data = excluded.snapshot();
        let mut block_starts = Vec::with_capacity(excluded_data.blocks.len());
        let mut start = 0;
        for block in &excluded_data.blocks {
            block_starts.push(start);
            start += block.row_count;
        }
        let ordinal = |id: i64| -> Result<usize> {
            let (block, row) = split_row_id(id);
            block_starts.get(block).map(|start| start + row).ok_or_else(|| internal_err!("proposed row id {id} out of range"))
        };
        let excluded_rows = Arc::new(excluded.with_row_ids(&excluded_data));
        let has_rows = writer.base().row_count() > 0;
        // DO UPDATE: the new versions of the rows holding a proposed row's key (those that
        // pass its WHERE), as an UPDATE ... FROM excluded: per chunk of the query, the old
        // row ids, the proposed rows, and the new values.
        type Updates = Vec<(Vec<i64>, Vec<usize>, DataChunk)>;
        let updates = |writer: &TableAppender<'_>| -> Result<Updates> {
            let ConflictAction::Update { assignments, selection } = &action else { return Ok(Vec::new()) };
            let mut projection = vec![target.column(ROW_ID_COLUMN), excluded_column(ROW_ID_COLUMN)];
            projection.extend(new_values(target, assignments)?);
            let query = conflict_query(target, constraints[arbiters[0]].0, projection, selection.cloned())?;
            let rows = Arc::new(target.table.with_row_ids(writer.base()));
            let mut updates = Vec::new();
            for chunk in self.run_upsert_query(&query, target, rows, Arc::clone(&excluded_rows), true)? {
                let chunk = chunk.compact();
                let len = chunk.physical_len();
                let ids = (0..len).map(|row| row_id_at(&chunk.columns[0], row)).collect::<Result<Vec<_>>>()?;
                let proposed = (0..len).map(|row| ordinal(row_id_at(&chunk.columns[1], row)?)).collect::<Result<Vec<_>>>()?;
                updates.push((ids, proposed, DataChunk::new(chunk.columns[2..].to_vec(), len)));
            }
            Ok(updates)
        };
        // Proposed rows whose key (of an arbiter) a row of the table holds, and that row.
        // Without a WHERE, the DO UPDATE query pairs exactly those: it serves for both.
        let mut holder: HashMap<usize, i64> = HashMap::new();
        let mut computed_updates = None;
        if has_rows {
            if matches!(action, ConflictAction::Update { selection: None, .. }) {
                let found = updates(writer)?;
                for (ids, rows, _) in &found {
                    holder.extend(rows.iter().copied().zip(ids.iter().copied()));
                }
                computed_updates = Some(found);
            } else {
                for &n in &arbiters {
                    let query =
                        conflict_query(target, constraints[n].0, vec![target.column(ROW_ID_COLUMN), excluded_column(ROW_ID_COLUMN)], None)?;
                    let rows = Arc::new(target.table.with_row_ids(writer.base()));
                    for chunk in self.run_upsert_query(&query, target, rows, Arc::clone(&excluded_rows), false)? {
                        let chunk = chunk.compact();
                        for row in 0..chunk.physical_len() {
                            holder.entry(ordinal(row_id_at(&chunk.columns[1], row)?)?).or_insert(row_id_at(&chunk.columns[0], row)?);
                        }
                    }
                }
            }
        }
        // In order: a row repeating the key of an earlier one is skipped (DO NOTHING) or
        // an error (DO UPDATE, which would change the row twice).
        let mut seen: Vec<HashSet<Vec<u8>>> = vec![HashSet::new(); arbiters.len()];
        let mut key = Vec::new();
        let mut inserted = vec![false; count];
        for row in 0..count {
            let conflicting = holder.contains_key(&row);
            if conflicting && matches!(action, ConflictAction::Nothing) {
                continue;
            }
            let mut repeated = false;
            let mut keys = Vec::with_capacity(arbiters.len());
            for (a, &n) in arbiters.iter().enumerate() {
                let columns: Vec<&Vector> = constraints[n].0.iter().map(|&c| &proposed[c]).collect();
                if columns.iter().any(|c| c.is_null(row)) {
                    continue;
                }
                encode_key(&columns, row, &mut key);
                repeated |= seen[a].contains(&key);
                keys.push((a, key.clone()));
            }
            if repeated {
                match action {
                    ConflictAction::Nothing => continue,
                    ConflictAction::Update { .. } => {
                        return Err(ApiaryError::CardinalityViolation(
                            "ON CONFLICT DO UPDATE command cannot affect row a second time (rows proposed for insertion \
                             must not repeat a key the constraint checks)"
                                .to_string(),
                        ))
                    }
                }
            }
            for (a, key) in keys {
                seen[a].insert(key);
            }
            inserted[row] = !conflicting;
        }
        let mut updated_rows: Vec<Vector> = Vec::new();
        let mut updated_at: HashMap<usize, u32> = HashMap::new();
        let mut updated_ids: Vec<i64> = Vec::new();
        if matches!(action, ConflictAction::Update { .. }) && !holder.is_empty() {
            let found = match computed_updates {
                Some(found) => found,
                None => updates(writer)?,
            };
            let mut old_ids = Vec::new();
            let mut new_chunks = Vec::with_capacity(found.len());
            for (ids, rows, values) in found {
                old_ids.extend(ids);
                for row in rows {
                    updated_at.insert(row, updated_at.len() as u32);
                }
                new_chunks.push(conform_chunk(table, values)?);
            }
            updated_rows = concat_chunks(table, &new_chunks);
            updated_ids.clone_from(&old_ids);
            old_ids.sort_unstable();
            writer.delete(&old_ids)?;
        }
        // Inserted and updated rows in proposal order: an index into the proposed rows
        // followed by the updated ones.
        let mut order = Vec::new();
        let mut replaces = Vec::new();
        for (row, &insert) in inserted.iter().enumerate() {
            if insert {
                order.push(row as u32);
                replaces.push(-1);
            } else if let Some(&j) = updated_at.get(&row) {
                order.push((count as u32) + j);
                replaces.push(updated_ids[j as usize]);
            }
        }
        let columns = if updated_rows.is_empty() {
            proposed.iter().map(|c| c.gather(&order)).collect()
        } else {
            let both = concat_vectors(table, &[proposed, updated_rows]);
            both.iter().map(|c| c.gather(&order)).collect()
        };
        Ok((columns, order.len(), replaces))
    }

    /// `MERGE INTO t [AS a] USING source ON condition WHEN ... THEN ... [RETURNING ...]`.
    ///
    /// The source is run once into a table with row ids of its own. Each source row is
    /// joined to the target (`source LEFT JOIN t ON condition`) and takes the first WHEN
    /// clause that applies (MATCHED for a pair, NOT MATCHED when no target row matches),
    /// computed as one CASE expression; NOT MATCHED BY SOURCE clauses take the target
    /// rows no source row matches (`t LEFT JOIN source`). Each UPDATE and INSERT clause
    /// then computes its rows with a query over the same join filtered to that clause.
    /// A target row that two source rows would change is an error (SQLSTATE 21000).
    pub(crate) fn merge(&mut self, merge: &ast::Merge) -> Result<QueryResult> {
        let returning = match &merge.output {
            None => None,
            Some(ast::OutputClause::Returning { select_items, .. }) => Some(select_items),
            Some(ast::OutputClause::Output { .. }) => return Err(not_impl_err!("MERGE ... OUTPUT (use RETURNING)")),
        };
        if !merge.into {
            return Err(ApiaryError::Parse("MERGE needs INTO before the target table".to_string()));
        }
        let target = self.dml_target(&ast::TableWithJoins { relation: merge.table.clone(), joins: Vec::new() }, "MERGE")?;
        let schema = &target.table.schema;
        // The source, once: its rows as a table read under its name.
        let source_name = match &merge.source {
            ast::TableFactor::Table { alias: Some(alias), .. } | ast::TableFactor::Derived { alias: Some(alias), .. } => {
                normalize_ident(&alias.name)
            }
            ast::TableFactor::Table { name, alias: None, .. } => object_name_to_table(name)?,
            _ => return Err(not_impl_err!("this kind of MERGE source (name a table or a subquery with an alias)")),
        };
        // (Both are read by name in the statement's queries: they must differ.)
        if source_name == target.qualifier() || source_name == target.name {
            return Err(bind_err!("table name \"{source_name}\" specified more than once (give the MERGE source an alias)"));
        }
        let source = {
            let query = select_query(
                vec![ast::SelectItem::Wildcard(Default::default())],
                vec![ast::TableWithJoins { relation: merge.source.clone(), joins: Vec::new() }],
                None,
            )?;
            let (bound, plan) = self.plan_query(&query)?;
            let output = plan.output();
            let mut fields: Vec<apiary_types::Field> = Vec::with_capacity(output.len());
            for (name, column) in bound.names.iter().zip(&output) {
                if fields.iter().any(|f| &f.name == name) {
                    return Err(bind_err!("column \"{name}\" of MERGE source \"{source_name}\" occurs more than once"));
                }
                let data_type = if column.data_type == DataType::Null { DataType::Varchar(None) } else { column.data_type };
                fields.push(apiary_types::Field::new(name.clone(), data_type, true));
            }
            let table = Table::new(source_name.clone(), apiary_types::Schema::new(fields), self.settings.block_rows).scan_only();
            let mut appender = table.appender()?;
            for chunk in self.run_plan(&plan)? {
                appender.append(&chunk.compact())?;
            }
            appender.commit()?;
            Arc::new(table.with_row_ids(&table.snapshot()))
        };
        // Which clause each row takes: 1 + its position, 0 for none.
        let mut matched = Vec::new();
        let mut not_matched = Vec::new();
        let mut by_source = Vec::new();
        for (n, clause) in merge.clauses.iter().enumerate() {
            let number = n as i64 + 1;
            let predicate = clause.predicate.clone().unwrap_or(ast::Expr::Value(ast::Value::Boolean(true).into()));
            // (The parser allows INSERT only in NOT MATCHED clauses, and only INSERT there.)
            match clause.clause_kind {
                ast::MergeClauseKind::Matched => matched.push((predicate, number)),
                ast::MergeClauseKind::NotMatched | ast::MergeClauseKind::NotMatchedByTarget => not_matched.push((predicate, number)),
                ast::MergeClauseKind::NotMatchedBySource => by_source.push((predicate, number)),
            }
            if let ast::MergeAction::Update(update) = &clause.action {
                if update.update_predicate.is_some() || update.delete_predicate.is_some() {
                    return Err(not_impl_err!("MERGE ... UPDATE with WHERE or DELETE WHERE (put the condition in WHEN ... AND)"));
                }
            }
        }
        let source_id = ast::Expr::CompoundIdentifier(vec![
            ast::Ident::with_quote('"', source_name.clone()),
            ast::Ident::with_quote('"', ROW_ID_COLUMN),
        ]);
        let target_id = target.column(ROW_ID_COLUMN);
        let is_null = |e: &ast::Expr| ast::Expr::IsNull(Box::new(e.clone()));
        let chosen = |clauses: &[(ast::Expr, i64)]| ast::Expr::Case {
            case_token: ast::helpers::attached_token::AttachedToken::empty(),
            end_token: ast::helpers::attached_token::AttachedToken::empty(),
            operand: None,
            conditions: clauses
                .iter()
                .map(|(predicate, number)| ast::CaseWhen {
                    condition: ast::Expr::Nested(Box::new(predicate.clone())),
                    result: ast::Expr::value(ast::Value::Number(number.to_string(), false)),
                })
                .collect(),
            else_result: Some(Box::new(ast::Expr::value(ast::Value::Number("0".to_string(), false)))),
        };
        let and = |a: ast::Expr, b: ast::Expr| ast::Expr::BinaryOp { left: Box::new(a), op: ast::BinaryOperator::And, right: Box::new(b) };
        let equals = |a: ast::Expr, number: i64| ast::Expr::BinaryOp {
            left: Box::new(ast::Expr::Nested(Box::new(a))),
            op: ast::BinaryOperator::Eq,
            right: Box::new(ast::Expr::value(ast::Value::Number(number.to_string(), false))),
        };
        let source_factor = || table_factor(&source_name);
        // `left LEFT JOIN right ON condition`, as the one FROM item of a query.
        let left_join = |left: ast::TableWithJoins, right: ast::TableWithJoins| ast::TableWithJoins {
            relation: left.relation,
            joins: vec![ast::Join {
                relation: right.relation,
                global: false,
                join_operator: ast::JoinOperator::LeftOuter(ast::JoinConstraint::On((*merge.on).clone())),
            }],
        };
        let source_side = || -> Result<Vec<ast::TableWithJoins>> { Ok(vec![left_join(source_factor()?, target.factor()?)]) };
        let target_side = || -> Result<Vec<ast::TableWithJoins>> { Ok(vec![left_join(target.factor()?, source_factor()?)]) };
        let writer = self.table_writer(&target.table)?;
        let base = Arc::clone(writer.base());
        let run = |query: ast::Query, cast: bool| -> Result<Vec<DataChunk>> {
            let rows = Arc::new(target.table.with_row_ids(&base));
            let functions = self.table_functions();
            let mut binder = self.binder(&functions);
            binder.with_dml_source(&source_name, Arc::clone(&source), false);
            let bound = binder.bind_dml_query(&query, &target.name, rows, cast.then_some(target.table.as_ref()))?;
            let plan = self.optimize_plan(bound.plan, bound.next_column_id)?;
            self.run_plan(&plan)
        };
        let action_of = |number: i64| &merge.clauses[(number - 1) as usize].action;
        let changes = |action: &ast::MergeAction| matches!(action, ast::MergeAction::Update(_) | ast::MergeAction::Delete { .. });
        // The clause of each matched pair: target rows changed twice are an error.
        let mut clause_of: HashMap<i64, i64> = HashMap::new();
        let mut modified = Vec::new();
        // One MATCHED clause, an UPDATE: its own query finds the pairs (and a target row it
        // would change twice), no separate choice of clauses is needed.
        let single_update = matches!(matched.as_slice(), [(_, number)] if matches!(action_of(*number), ast::MergeAction::Update(_)));
        let cardinality_error = || {
            ApiaryError::CardinalityViolation(
                "MERGE command cannot affect row a second time (more than one source row matches a target row it changes)".to_string(),
            )
        };
        if !matched.is_empty() && !single_update {
            let projection = vec![target_id.clone(), chosen(&matched)];
            let query = select_query(
                projection.into_iter().map(ast::SelectItem::UnnamedExpr).collect(),
                source_side()?,
                Some(ast::Expr::IsNotNull(Box::new(target_id.clone()))),
            )?;
            for chunk in run(query, false)? {
                let chunk = chunk.compact();
                for row in 0..chunk.physical_len() {
                    let id = row_id_at(&chunk.columns[0], row)?;
                    let number = int_at(&chunk.columns[1], row)?;
                    if number == 0 || !changes(action_of(number)) {
                        continue;
                    }
                    if clause_of.insert(id, number).is_some() {
                        return Err(cardinality_error());
                    }
                    modified.push(id);
                }
            }
        }
        if !by_source.is_empty() {
            let projection = vec![target_id.clone(), chosen(&by_source)];
            let query = select_query(
                projection.into_iter().map(ast::SelectItem::UnnamedExpr).collect(),
                target_side()?,
                Some(is_null(&source_id)),
            )?;
            for chunk in run(query, false)? {
                let chunk = chunk.compact();
                for row in 0..chunk.physical_len() {
                    let number = int_at(&chunk.columns[1], row)?;
                    if number != 0 && changes(action_of(number)) {
                        let id = row_id_at(&chunk.columns[0], row)?;
                        clause_of.insert(id, number);
                        modified.push(id);
                    }
                }
            }
        }
        // The new rows: updated versions, then inserted rows, clause by clause, with the
        // row each replaces (-1: inserted).
        let mut new_chunks = Vec::new();
        let mut replaces: Vec<i64> = Vec::new();
        let mut deleted_rows = Vec::new();
        for (n, clause) in merge.clauses.iter().enumerate() {
            let number = n as i64 + 1;
            match &clause.action {
                ast::MergeAction::Update(update) => {
                    let ast::MergeUpdateKind::Set(assignments) = &update.kind else {
                        return Err(not_impl_err!("MERGE ... UPDATE SET *"));
                    };
                    let mut projection = vec![target_id.clone()];
                    projection.extend(new_values(&target, assignments)?);
                    let (from, selection) = match clause.clause_kind {
                        ast::MergeClauseKind::NotMatchedBySource => {
                            (target_side()?, and(is_null(&source_id), equals(chosen(&by_source), number)))
                        }
                        _ => (source_side()?, and(ast::Expr::IsNotNull(Box::new(target_id.clone())), equals(chosen(&matched), number))),
                    };
                    let query = select_query(projection.into_iter().map(ast::SelectItem::UnnamedExpr).collect(), from, Some(selection))?;
                    let record = single_update && clause.clause_kind == ast::MergeClauseKind::Matched;
                    for chunk in run(query, true)? {
                        let chunk = chunk.compact();
                        let len = chunk.physical_len();
                        for row in 0..len {
                            let id = row_id_at(&chunk.columns[0], row)?;
                            if record {
                                if clause_of.insert(id, number).is_some() {
                                    return Err(cardinality_error());
                                }
                                modified.push(id);
                            }
                            replaces.push(id);
                        }
                        new_chunks.push(conform_chunk(&target.table, DataChunk::new(chunk.columns[1..].to_vec(), len))?);
                    }
                }
                ast::MergeAction::Insert(insert) => {
                    let ast::MergeInsertKind::Values(values) = &insert.kind else {
                        return Err(not_impl_err!("MERGE ... INSERT ROW / INSERT * (list the values)"));
                    };
                    let [ast::Parens { content: row, .. }] = values.rows.as_slice() else {
                        return Err(bind_err!("MERGE ... INSERT VALUES takes one row"));
                    };
                    let names: Vec<String> = if insert.columns.is_empty() {
                        schema.fields.iter().map(|f| f.name.clone()).collect()
                    } else {
                        insert
                            .columns
                            .iter()
                            .map(|c| {
                                c.0.last()
                                    .and_then(|p| p.as_ident())
                                    .map(normalize_ident)
                                    .ok_or_else(|| bind_err!("invalid column name {c}"))
                            })
                            .collect::<Result<_>>()?
                    };
                    if names.len() != row.len() {
                        return Err(bind_err!("INSERT has {} target columns but {} expressions", names.len(), row.len()));
                    }
                    let mut assigned: Vec<Option<ast::Expr>> = vec![None; schema.len()];
                    for (name, value) in names.iter().zip(row) {
                        let position = schema
                            .index_of(name)
                            .ok_or_else(|| bind_err!("column \"{name}\" of relation \"{}\" does not exist", target.name))?;
                        if assigned[position].is_some() {
                            return Err(bind_err!("column \"{name}\" specified more than once"));
                        }
                        assigned[position] = Some(value.clone());
                    }
                    // The target's (NULL) row id leads, as the query's first column.
                    let mut projection = vec![target_id.clone()];
                    projection.extend(assigned.into_iter().map(|value| value.unwrap_or(ast::Expr::value(ast::Value::Null))));
                    let selection = and(is_null(&target_id), equals(chosen(&not_matched), number));
                    let query =
                        select_query(projection.into_iter().map(ast::SelectItem::UnnamedExpr).collect(), source_side()?, Some(selection))?;
                    for chunk in run(query, true)? {
                        let chunk = chunk.compact();
                        let len = chunk.physical_len();
                        replaces.extend(std::iter::repeat_n(-1, len));
                        new_chunks.push(conform_chunk(&target.table, DataChunk::new(chunk.columns[1..].to_vec(), len))?);
                    }
                }
                ast::MergeAction::Delete { .. } => {
                    deleted_rows.extend(modified.iter().copied().filter(|id| clause_of.get(id) == Some(&number)));
                }
                ast::MergeAction::DoNothing { .. } => {}
            }
        }
        self.check_constraints(&target.table, &new_chunks)?;
        // Rows changed: each modified target row (updated or deleted) and each inserted one.
        let updated = modified.len() - deleted_rows.len();
        let count = new_chunks.iter().map(DataChunk::physical_len).sum::<usize>() - updated + modified.len();
        let returned = match returning {
            Some(items) => {
                // The new versions of updated and inserted rows, then the deleted rows.
                let mut parts = vec![concat_chunks(&target.table, &new_chunks)];
                let mut deleted_sorted = deleted_rows.clone();
                deleted_sorted.sort_unstable();
                let all: Vec<usize> = (0..schema.len()).collect();
                parts.push(target.table.gather(&base, &deleted_sorted, &all)?);
                let rows = concat_vectors(&target.table, &parts);
                let total = new_chunks.iter().map(DataChunk::physical_len).sum::<usize>() + deleted_sorted.len();
                Some(self.returning(&target, rows, total, items)?)
            }
            None => None,
        };
        self.write_changes(&target.table, writer, modified, &new_chunks, Some(&replaces))?;
        Ok(returned.unwrap_or_else(|| QueryResult::statement(Some(count as u64))))
    }

    /// A statement's change through `writer`: the rows `deleted` (ids, in any order) go,
    /// `appended` comes (`replaces`: the row each is the new version of, -1 for a new
    /// one; `None` when none is); then it commits (see `finish_write`). Returns the rows
    /// appended.
    pub(crate) fn write_changes(
        &mut self,
        table: &Arc<Table>,
        mut writer: TableAppender<'_>,
        mut deleted: Vec<i64>,
        appended: &[DataChunk],
        replaces: Option<&[i64]>,
    ) -> Result<u64> {
        deleted.sort_unstable();
        let before = Arc::clone(writer.base());
        writer.delete(&deleted)?;
        for chunk in appended {
            writer.append(chunk)?;
        }
        let prepared = writer.prepare()?;
        let appended_rows = appended.iter().map(DataChunk::row_count).sum();
        // Outside a block the checks and the publication are one step for the other
        // writers that check keys (see `DatabaseInner::foreign_key_lock`).
        let db = Arc::clone(&self.db);
        let _checked = (self.transaction.is_none() && self.needs_foreign_key_checks(table, &prepared, appended_rows))
            .then(|| db.foreign_key_lock.lock().unwrap_or_else(|e| e.into_inner()));
        self.check_foreign_keys(table, &before, &prepared, appended, replaces)?;
        self.finish_write(table, prepared)
    }

    /// Binds, optimizes and runs a query of an INSERT ... ON CONFLICT over the target
    /// (`rows`, with row ids) and the proposed rows (`excluded`).
    fn run_upsert_query(
        &self,
        query: &ast::Query,
        target: &Target,
        rows: Arc<Table>,
        excluded: Arc<Table>,
        cast: bool,
    ) -> Result<Vec<DataChunk>> {
        let functions = self.table_functions();
        let mut binder = self.binder(&functions);
        binder.with_dml_source(EXCLUDED, excluded, true);
        let bound = binder.bind_dml_query(query, &target.name, rows, cast.then_some(target.table.as_ref()))?;
        let plan = self.optimize_plan(bound.plan, bound.next_column_id)?;
        self.run_plan(&plan)
    }

    /// The columns of a DELETE's or UPDATE's RETURNING (empty without), binding the
    /// statement's queries with `binder` (which infers the types of its `$n`).
    pub(crate) fn describe_dml(&self, binder: &mut apiary_sql::Binder<'_>, statement: &ast::Statement) -> Result<Vec<(String, DataType)>> {
        let (target, query, returning) = match statement {
            ast::Statement::Delete(delete) => {
                let target = self.delete_target(delete)?;
                let query = delete_query(&target, delete)?;
                (target, query, delete.returning.as_ref())
            }
            ast::Statement::Update(update) => {
                let target = self.dml_target(&update.table, "UPDATE")?;
                let query = update_query(&target, update)?;
                (target, query, update.returning.as_ref())
            }
            ast::Statement::Merge(merge) => {
                // The source's columns are not bound here: RETURNING reads the target's.
                let Some(ast::OutputClause::Returning { select_items, .. }) = &merge.output else { return Ok(Vec::new()) };
                let target = self.dml_target(&ast::TableWithJoins { relation: merge.table.clone(), joins: Vec::new() }, "MERGE")?;
                let query = returning_query(&target, select_items)?;
                let bound = binder.bind_dml_query(&query, &target.name, Arc::clone(&target.table), None)?;
                return Ok(bound.names.into_iter().zip(bound.plan.output().iter().map(|c| c.data_type)).collect());
            }
            _ => return Ok(Vec::new()),
        };
        let empty = || {
            let nothing = TableData { blocks: Vec::new(), stats: TableStats::empty(target.table.schema.len()), layout: 0 };
            Arc::new(target.table.with_row_ids(&nothing))
        };
        binder.bind_dml_query(
            &query,
            &target.name,
            empty(),
            matches!(statement, ast::Statement::Update(_)).then_some(target.table.as_ref()),
        )?;
        let Some(items) = returning else { return Ok(Vec::new()) };
        if let Some(items) = returning_with_sources(&target, statement)? {
            // The items as the statement's query computes them, after the row id.
            let mut query = query;
            if let ast::SetExpr::Select(select) = query.body.as_mut() {
                select.projection.splice(1..1, items.iter().cloned());
            }
            let cast = matches!(statement, ast::Statement::Update(_)).then_some(target.table.as_ref());
            let bound = binder.bind_dml_query(&query, &target.name, empty(), cast)?;
            let output = bound.plan.output();
            let width = match statement {
                ast::Statement::Update(_) => output.len() - 1 - target.table.schema.len(),
                _ => output.len() - 1,
            };
            return Ok(bound.names.into_iter().zip(output.iter().map(|c| c.data_type)).skip(1).take(width).collect());
        }
        let bound = binder.bind_dml_query(&returning_query(&target, items)?, &target.name, Arc::clone(&target.table), None)?;
        Ok(bound.names.into_iter().zip(bound.plan.output().iter().map(|c| c.data_type)).collect())
    }

    /// The columns of an INSERT's RETURNING (empty without).
    pub(crate) fn describe_insert(
        &self,
        binder: &mut apiary_sql::Binder<'_>,
        insert: &ast::Insert,
        table: Arc<Table>,
        name: String,
    ) -> Result<Vec<(String, DataType)>> {
        let Some(items) = &insert.returning else { return Ok(Vec::new()) };
        let target = Target { table, name, alias: insert_alias(insert) };
        let bound = binder.bind_dml_query(&returning_query(&target, items)?, &target.name, Arc::clone(&target.table), None)?;
        Ok(bound.names.into_iter().zip(bound.plan.output().iter().map(|c| c.data_type)).collect())
    }

    fn dml_target(&self, table: &ast::TableWithJoins, what: &str) -> Result<Target> {
        if !table.joins.is_empty() {
            return Err(not_impl_err!("{what} of a join (name the other tables in {})", if what == "DELETE" { "USING" } else { "FROM" }));
        }
        let ast::TableFactor::Table { name, alias, args: None, .. } = &table.relation else {
            return Err(not_impl_err!("{what} of this kind of FROM item"));
        };
        if alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
            return Err(bind_err!("{what} target alias cannot rename columns"));
        }
        let name = object_name_to_table(name)?;
        if self.catalog().get_view(&name).is_some() {
            let verb = match what {
                "DELETE" => "delete from",
                "MERGE" => "merge into",
                _ => "update",
            };
            return Err(ApiaryError::WrongObjectType(format!("cannot {verb} view \"{name}\"")));
        }
        let table = self.catalog().table(&name)?;
        if table.deferred_rows().is_some() {
            return Err(ApiaryError::WrongObjectType(format!("cannot change table \"{name}\": it reads a file")));
        }
        Ok(Target { table, name, alias: alias.clone() })
    }

    fn delete_target(&self, delete: &ast::Delete) -> Result<Target> {
        if !delete.tables.is_empty() || delete.output.is_some() || !delete.order_by.is_empty() || delete.limit.is_some() {
            return Err(not_impl_err!("this form of DELETE (multiple tables, OUTPUT, ORDER BY or LIMIT)"));
        }
        let (ast::FromTable::WithFromKeyword(from) | ast::FromTable::WithoutKeyword(from)) = &delete.from;
        let [target] = from.as_slice() else {
            return Err(not_impl_err!("DELETE from several tables"));
        };
        self.dml_target(target, "DELETE")
    }

    /// `DELETE FROM t [AS a] [USING ...] [WHERE ...] [RETURNING ...]`.
    pub(crate) fn delete(&mut self, delete: &ast::Delete) -> Result<QueryResult> {
        let target = self.delete_target(delete)?;
        let writer = self.table_writer(&target.table)?;
        let mut query = delete_query(&target, delete)?;
        // RETURNING over USING items: computed by the query, beside the row ids.
        let with_sources = delete_returning_with_sources(&target, delete)?;
        if let (Some(items), ast::SetExpr::Select(select)) = (&with_sources, query.body.as_mut()) {
            select.projection.extend(items.iter().cloned());
        }
        let rows = Arc::new(target.table.with_row_ids(writer.base()));
        let (names, types, chunks) = self.run_named_dml_query(&query, &target, rows, false)?;
        let mut row_ids = Vec::new();
        let mut returned_parts = Vec::new();
        let mut seen = HashSet::new();
        for chunk in chunks {
            let chunk = chunk.compact();
            let keep = first_matches(&chunk, &mut seen, &mut row_ids)?;
            if with_sources.is_some() {
                returned_parts.push(chunk.columns[1..].iter().map(|c| c.gather(&keep)).collect::<Vec<_>>());
            }
        }
        if with_sources.is_none() {
            row_ids.sort_unstable();
        }
        let returned = match (&delete.returning, with_sources) {
            (Some(_), Some(_)) => Some(Self::returning_rows(&names[1..], &returned_parts, &types[1..])),
            (Some(items), None) => {
                let all: Vec<usize> = (0..target.table.schema.len()).collect();
                let old = target.table.gather(writer.base(), &row_ids, &all)?;
                Some(self.returning(&target, old, row_ids.len(), items)?)
            }
            (None, _) => None,
        };
        let deleted = row_ids.len() as u64;
        self.write_changes(&target.table, writer, row_ids, &[], None)?;
        Ok(returned.unwrap_or_else(|| QueryResult::statement(Some(deleted))))
    }

    /// `UPDATE t [AS a] SET c = e, ... [FROM ...] [WHERE ...] [RETURNING ...]`: the rows
    /// found are deleted and their new versions appended.
    pub(crate) fn update(&mut self, update: &ast::Update) -> Result<QueryResult> {
        let target = self.dml_target(&update.table, "UPDATE")?;
        let mut query = update_query(&target, update)?;
        // RETURNING over FROM items: computed by the query, after the row id (where the
        // binder does not convert them to the target's column types, as it does the
        // new values after them).
        let with_sources = update_returning_with_sources(&target, update)?;
        if let (Some(items), ast::SetExpr::Select(select)) = (&with_sources, query.body.as_mut()) {
            select.projection.splice(1..1, items.iter().cloned());
        }
        let writer = self.table_writer(&target.table)?;
        let rows = Arc::new(target.table.with_row_ids(writer.base()));
        let (names, types, chunks) = self.run_named_dml_query(&query, &target, rows, true)?;
        // (A `u.*` item is several columns.)
        let returned_width = names.len() - 1 - target.table.schema.len();
        // Each target row once (the first of its join matches), in row id order.
        let mut seen = HashSet::new();
        let mut row_ids = Vec::new();
        let mut new_rows = Vec::new();
        let mut returned_parts = Vec::new();
        for chunk in chunks {
            let chunk = chunk.compact();
            let keep = first_matches(&chunk, &mut seen, &mut row_ids)?;
            let len = keep.len();
            let returned_columns = 1..1 + returned_width;
            returned_parts.push(chunk.columns[returned_columns].iter().map(|c| c.gather(&keep)).collect::<Vec<_>>());
            let columns: Vec<Vector> = chunk.columns[1 + returned_width..].iter().map(|c| c.gather(&keep)).collect();
            new_rows.push(conform_chunk(&target.table, DataChunk::new(columns, len))?);
        }
        self.check_constraints(&target.table, &new_rows)?;
        let returned = match (&update.returning, &with_sources) {
            (Some(_), Some(_)) => {
                let returned = 1..1 + returned_width;
                Some(Self::returning_rows(&names[returned.clone()], &returned_parts, &types[returned]))
            }
            (Some(items), None) => {
                let count = row_ids.len();
                let columns = concat_chunks(&target.table, &new_rows);
                Some(self.returning(&target, columns, count, items)?)
            }
            (None, _) => None,
        };
        let updated = row_ids.len() as u64;
        let replaces = row_ids.clone();
        self.write_changes(&target.table, writer, row_ids, &new_rows, Some(&replaces))?;
        Ok(returned.unwrap_or_else(|| QueryResult::statement(Some(updated))))
    }

    /// `TRUNCATE [TABLE] t, ...`: each table emptied in turn.
    pub(crate) fn truncate(&mut self, truncate: &ast::Truncate) -> Result<QueryResult> {
        if truncate.partitions.is_some() || truncate.on_cluster.is_some() {
            return Err(not_impl_err!("TRUNCATE with partitions or ON CLUSTER"));
        }
        let mut tables = Vec::new();
        for target in &truncate.table_names {
            let name = object_name_to_table(&target.name)?;
            if self.catalog().get_view(&name).is_some() {
                return Err(ApiaryError::WrongObjectType(format!("\"{name}\" is not a table")));
            }
            match self.catalog().get_table(&name) {
                Some(table) => tables.push(table),
                None if truncate.if_exists => {}
                None => return Err(ApiaryError::Catalog(format!("relation \"{name}\" does not exist"))),
            }
        }
        // CASCADE: the tables that reference those named, and those referencing them, too.
        if matches!(truncate.cascade, Some(ast::CascadeOption::Cascade)) {
            let mut next = 0;
            while next < tables.len() {
                for (child, _) in crate::foreign_keys::referencing(self.catalog(), &tables[next].name) {
                    if !tables.iter().any(|t| t.name == child.name) {
                        tables.push(child);
                    }
                }
                next += 1;
            }
        }
        for table in &tables {
            let outside = crate::foreign_keys::referencing(self.catalog(), &table.name)
                .into_iter()
                .find(|(child, _)| !tables.iter().any(|t| t.name == child.name));
            if let Some((child, key)) = outside {
                return Err(not_impl_err!(
                    "cannot truncate a table referenced in a foreign key constraint: table \"{}\" references \"{}\" ({}); truncate it in the same statement, or use TRUNCATE ... CASCADE",
                    child.name,
                    table.name,
                    key.name
                ));
            }
        }
        let empty = |connection: &mut Self| {
            tables.iter().try_for_each(|table| {
                let mut writer = connection.table_writer(table)?;
                writer.truncate()?;
                let prepared = writer.prepare()?;
                connection.finish_write(table, prepared).map(|_| ())
            })
        };
        // Several tables are emptied together or not at all.
        match tables.len() {
            0 | 1 => empty(self)?,
            _ => self.atomically(empty)?,
        }
        Ok(QueryResult::statement(None))
    }

    /// Binds, optimizes and runs the query of a DELETE or UPDATE; with the names and types
    /// of its columns.
    fn run_named_dml_query(
        &self,
        query: &ast::Query,
        target: &Target,
        rows: Arc<Table>,
        cast: bool,
    ) -> Result<(Vec<String>, Vec<DataType>, Vec<DataChunk>)> {
        let functions = self.table_functions();
        let mut binder = self.binder(&functions);
        let bound = binder.bind_dml_query(query, &target.name, rows, cast.then_some(target.table.as_ref()))?;
        let plan = self.optimize_plan(bound.plan, bound.next_column_id)?;
        let types = plan.output().iter().map(|c| c.data_type).collect();
        Ok((bound.names, types, self.run_plan(&plan)?))
    }

    /// The RETURNING rows a DELETE's or UPDATE's query computed beside the row ids
    /// (`parts`: per chunk of the query, one vector per item, holding the rows each
    /// target row was changed with), as a result of `names` and `types`.
    fn returning_rows(names: &[String], parts: &[Vec<Vector>], types: &[DataType]) -> QueryResult {
        let count: usize = parts.iter().map(|p| p.first().map_or(0, Vector::len)).sum();
        let columns: Vec<Vector> = types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut builder = apiary_types::VectorBuilder::with_capacity(*t, count);
                parts.iter().for_each(|part| builder.append(&part[i], None));
                builder.finish()
            })
            .collect();
        QueryResult::rows_result(names.to_vec(), types.to_vec(), vec![DataChunk::new(columns, count)])
    }

    /// The rows of `RETURNING items` over `columns` (the target's columns of the rows
    /// changed: the old rows of a DELETE, the new ones of an UPDATE).
    fn returning(&self, target: &Target, columns: Vec<Vector>, count: usize, items: &[ast::SelectItem]) -> Result<QueryResult> {
        let changed = Table::new(target.name.clone(), target.table.schema.clone(), self.settings.block_rows).scan_only();
        let mut appender = changed.appender()?;
        appender.append(&DataChunk::new(columns, count))?;
        appender.commit()?;
        let rows = Arc::new(changed);
        let query = returning_query(target, items)?;
        let functions = self.table_functions();
        let mut binder = self.binder(&functions);
        let bound = binder.bind_dml_query(&query, &target.name, rows, None)?;
        let plan = self.optimize_plan(bound.plan, bound.next_column_id)?;
        let types = plan.output().iter().map(|c| c.data_type).collect();
        let chunks = self.run_plan(&plan)?;
        Ok(QueryResult::rows_result(bound.names, types, chunks))
    }
}

/// `SELECT t.row_id FROM t, using... WHERE ...`: the rows a DELETE removes.
fn delete_query(target: &Target, delete: &ast::Delete) -> Result<ast::Query> {
    let mut from = vec![target.factor()?];
    from.extend(delete.using.iter().flatten().cloned());
    let projection = vec![ast::SelectItem::UnnamedExpr(target.column(ROW_ID_COLUMN))];
    select_query(projection, from, delete.selection.clone())
}

/// `SELECT t.row_id, <each column's new value> FROM t, from... WHERE ...`: the rows an
/// UPDATE changes and their new values.
fn update_query(target: &Target, update: &ast::Update) -> Result<ast::Query> {
    if update.output.is_some() || update.or.is_some() || !update.order_by.is_empty() || update.limit.is_some() {
        return Err(not_impl_err!("this form of UPDATE (OUTPUT, OR, ORDER BY or LIMIT)"));
    }
    let mut from = vec![target.factor()?];
    match &update.from {
        Some(ast::UpdateTableFromKind::AfterSet(tables) | ast::UpdateTableFromKind::BeforeSet(tables)) => {
            from.extend(tables.iter().cloned())
        }
        None => {}
    }
    let mut projection = vec![ast::SelectItem::UnnamedExpr(target.column(ROW_ID_COLUMN))];
    projection.extend(new_values(target, &update.assignments)?.into_iter().map(ast::SelectItem::UnnamedExpr));
    select_query(projection, from, update.selection.clone())
}

/// Each column's new value under `SET assignments`: the assigned expression, else the
/// column itself.
fn new_values(target: &Target, assignments: &[ast::Assignment]) -> Result<Vec<ast::Expr>> {
    let schema = &target.table.schema;
    let mut assigned: Vec<Option<ast::Expr>> = vec![None; schema.len()];
    for assignment in assignments {
        let ast::AssignmentTarget::ColumnName(name) = &assignment.target else {
            return Err(not_impl_err!("UPDATE ... SET (columns) = (values)"));
        };
        let parts: Vec<String> = name.0.iter().filter_map(|p| p.as_ident()).map(normalize_ident).collect();
        let column = match parts.as_slice() {
            [column] => column,
            // PostgreSQL allows no qualifier here; a qualifier naming the target is a
            // common spelling (SQLite, MySQL) that is accepted.
            [qualifier, column] if *qualifier == target.qualifier() || *qualifier == target.name => column,
            _ => return Err(bind_err!("column \"{name}\" of relation \"{}\" does not exist", target.name)),
        };
        let position =
            schema.index_of(column).ok_or_else(|| bind_err!("column \"{column}\" of relation \"{}\" does not exist", target.name))?;
        if assigned[position].is_some() {
            return Err(ApiaryError::Parse(format!("multiple assignments to same column \"{column}\"")));
        }
        let is_default = is_default_keyword(&assignment.value);
        if !is_default && target.table.sequences.iter().any(|owned| owned.always && owned.column == position) {
            return Err(ApiaryError::GeneratedAlways(format!(
                "column \"{column}\" can only be updated to DEFAULT: it is an identity column defined as GENERATED ALWAYS"
            )));
        }
        // `SET c = DEFAULT`: the column's default (NULL without one).
        assigned[position] = Some(match (is_default, target.table.default_of(position)) {
            (true, Some(sql)) => apiary_sql::parser::parse_expression(sql)?,
            (true, None) => ast::Expr::Value(ast::Value::Null.into()),
            (false, _) => assignment.value.clone(),
        });
    }
    Ok(schema.fields.iter().zip(assigned).map(|(field, value)| value.unwrap_or_else(|| target.column(&field.name))).collect())
}

/// `INSERT INTO t AS alias`: the alias the statement's expressions name the table by.
fn insert_alias(insert: &ast::Insert) -> Option<ast::TableAlias> {
    insert.table_alias.as_ref().map(|a| ast::TableAlias { explicit: a.explicit, name: a.alias.clone(), columns: Vec::new(), at: None })
}

/// `excluded.column` as an expression.
fn excluded_column(column: &str) -> ast::Expr {
    ast::Expr::CompoundIdentifier(vec![ast::Ident::with_quote('"', EXCLUDED), ast::Ident::with_quote('"', column)])
}

/// `SELECT projection FROM t, excluded WHERE t.k = excluded.k AND ... [AND selection]`:
/// the proposed rows of an INSERT ... ON CONFLICT paired with the rows holding their key.
fn conflict_query(target: &Target, key: &[usize], projection: Vec<ast::Expr>, selection: Option<ast::Expr>) -> Result<ast::Query> {
    let mut condition: Option<ast::Expr> = None;
    for &column in key {
        let name = &target.table.schema.fields[column].name;
        let equal = ast::Expr::BinaryOp {
            left: Box::new(target.column(name)),
            op: ast::BinaryOperator::Eq,
            right: Box::new(excluded_column(name)),
        };
        condition = Some(match condition {
            Some(c) => ast::Expr::BinaryOp { left: Box::new(c), op: ast::BinaryOperator::And, right: Box::new(equal) },
            None => equal,
        });
    }
    if let Some(selection) = selection {
        let nested = ast::Expr::Nested(Box::new(selection));
        condition = Some(match condition {
            Some(c) => ast::Expr::BinaryOp { left: Box::new(c), op: ast::BinaryOperator::And, right: Box::new(nested) },
            None => nested,
        });
    }
    let from = vec![target.factor()?, table_factor(EXCLUDED)?];
    select_query(projection.into_iter().map(ast::SelectItem::UnnamedExpr).collect(), from, condition)
}

/// `SELECT <items> FROM t`, over the rows changed (`RETURNING *`: the target's columns).
fn returning_query(target: &Target, items: &[ast::SelectItem]) -> Result<ast::Query> {
    let projection = items
        .iter()
        .map(|item| match item {
            ast::SelectItem::Wildcard(options) => ast::SelectItem::QualifiedWildcard(
                ast::SelectItemQualifiedWildcardKind::ObjectName(ast::ObjectName::from(vec![ast::Ident::with_quote(
                    '"',
                    target.qualifier(),
                )])),
                options.clone(),
            ),
            other => other.clone(),
        })
        .collect();
    select_query(projection, vec![target.factor()?], None)
}

/// The RETURNING items of a DELETE with USING or an UPDATE with FROM, which may read the
/// other FROM items as PostgreSQL's do (`*` is every FROM item's columns), computed by
/// the statement's own query, beside the row ids; `None` for a statement without other
/// FROM items or without RETURNING (RETURNING then reads the changed rows alone). An
/// UPDATE's target columns are their new values: each reference to one in the items
/// becomes the expression it is set to, converted to the column's type.
fn returning_with_sources(target: &Target, statement: &ast::Statement) -> Result<Option<Vec<ast::SelectItem>>> {
    match statement {
        ast::Statement::Delete(delete) => delete_returning_with_sources(target, delete),
        ast::Statement::Update(update) => update_returning_with_sources(target, update),
        _ => Ok(None),
    }
}

/// [`returning_with_sources`] of a DELETE.
fn delete_returning_with_sources(target: &Target, delete: &ast::Delete) -> Result<Option<Vec<ast::SelectItem>>> {
    match (&delete.using, &delete.returning) {
        (Some(using), Some(items)) if !using.is_empty() => returning_over_sources(target, using, items, None),
        _ => Ok(None),
    }
}

/// [`returning_with_sources`] of an UPDATE.
fn update_returning_with_sources(target: &Target, update: &ast::Update) -> Result<Option<Vec<ast::SelectItem>>> {
    match (&update.from, &update.returning) {
        (Some(ast::UpdateTableFromKind::AfterSet(from) | ast::UpdateTableFromKind::BeforeSet(from)), Some(items)) if !from.is_empty() => {
            returning_over_sources(target, from, items, Some(&update.assignments))
        }
        _ => Ok(None),
    }
}

/// The RETURNING `items` of a statement whose other FROM items are `others`, with an
/// UPDATE's `assignments` (see [`returning_with_sources`]).
fn returning_over_sources(
    target: &Target,
    others: &[ast::TableWithJoins],
    items: &[ast::SelectItem],
    assignments: Option<&[ast::Assignment]>,
) -> Result<Option<Vec<ast::SelectItem>>> {
    let Some(assignments) = assignments else { return Ok(Some(items.to_vec())) };
    let fields = &target.table.schema.fields;
    let values = new_values(target, assignments)?
        .into_iter()
        .zip(fields)
        .map(|(value, field)| apiary_sql::parser::parse_expression(&format!("CAST(({value}) AS {})", field.data_type)))
        .collect::<Result<Vec<_>>>()?;
    let new_value = |column: &str| fields.iter().position(|f| f.name == column).map(|p| values[p].clone());
    // The target's columns, as their new values, named as the columns.
    let target_columns = || {
        fields.iter().zip(&values).map(|(field, value)| ast::SelectItem::ExprWithAlias {
            expr: value.clone(),
            alias: ast::Ident::with_quote('"', field.name.clone()),
        })
    };
    let mut projection = Vec::with_capacity(items.len());
    let is_target = |name: &ast::ObjectName| {
        let parts: Vec<String> = name.0.iter().filter_map(|p| p.as_ident()).map(normalize_ident).collect();
        matches!(parts.as_slice(), [q] if *q == target.qualifier() || *q == target.name)
    };
    let substitute = |expr: &mut ast::Expr| {
        let _ = ast::visit_expressions_mut(expr, |e| {
            let replacement = match e {
                ast::Expr::Identifier(ident) => new_value(&normalize_ident(ident)),
                ast::Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                    [qualifier, column] if normalize_ident(qualifier) == target.qualifier() => new_value(&normalize_ident(column)),
                    _ => None,
                },
                _ => None,
            };
            if let Some(replacement) = replacement {
                *e = replacement;
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
    };
    for item in items {
        match item {
            ast::SelectItem::Wildcard(_) => {
                projection.extend(target_columns());
                for table in others {
                    for factor in std::iter::once(&table.relation).chain(table.joins.iter().map(|j| &j.relation)) {
                        let name = match factor {
                            ast::TableFactor::Table { alias: Some(alias), .. } | ast::TableFactor::Derived { alias: Some(alias), .. } => {
                                alias.name.clone()
                            }
                            ast::TableFactor::Table { name, alias: None, .. } => {
                                name.0.last().and_then(|p| p.as_ident()).cloned().ok_or_else(|| bind_err!("invalid table name {name}"))?
                            }
                            other => return Err(not_impl_err!("UPDATE ... FROM {other} ... RETURNING * (name the columns)")),
                        };
                        projection.push(ast::SelectItem::QualifiedWildcard(
                            ast::SelectItemQualifiedWildcardKind::ObjectName(ast::ObjectName::from(vec![name])),
                            Default::default(),
                        ));
                    }
                }
            }
            ast::SelectItem::QualifiedWildcard(ast::SelectItemQualifiedWildcardKind::ObjectName(name), _) if is_target(name) => {
                projection.extend(target_columns())
            }
            ast::SelectItem::UnnamedExpr(expr) => {
                // Named as the expression was (`RETURNING v` is column v), not as what it
                // became.
                let alias = match expr {
                    ast::Expr::Identifier(ident) => Some(ident.clone()),
                    ast::Expr::CompoundIdentifier(parts) => parts.last().cloned(),
                    _ => None,
                };
                let mut expr = expr.clone();
                substitute(&mut expr);
                projection.push(match alias {
                    Some(alias) => ast::SelectItem::ExprWithAlias { expr, alias },
                    None => ast::SelectItem::UnnamedExpr(expr),
                });
            }
            ast::SelectItem::ExprWithAlias { expr, alias } => {
                let mut expr = expr.clone();
                substitute(&mut expr);
                projection.push(ast::SelectItem::ExprWithAlias { expr, alias: alias.clone() });
            }
            other => projection.push(other.clone()),
        }
    }
    Ok(Some(projection))
}

/// The row id at `row` of a column of row ids.
fn row_id_at(column: &Vector, row: usize) -> Result<i64> {
    match &column.data {
        VectorData::I64(ids) if column.is_valid(row) => Ok(ids[row]),
        _ => Err(internal_err!("a DELETE or UPDATE query produced no row id")),
    }
}

/// The rows of `chunk` (a DELETE's or UPDATE's query result, row ids first) whose target
/// row id is new to `seen`: a target row that several rows of the other FROM items match
/// is changed once, with the first. Their ids are appended to `row_ids`.
pub(crate) fn first_matches(chunk: &DataChunk, seen: &mut HashSet<i64>, row_ids: &mut Vec<i64>) -> Result<Vec<u32>> {
    let mut keep = Vec::with_capacity(chunk.physical_len());
    for row in 0..chunk.physical_len() {
        let id = row_id_at(&chunk.columns[0], row)?;
        if seen.insert(id) {
            row_ids.push(id);
            keep.push(row as u32);
        }
    }
    Ok(keep)
}

/// The integer at `row` of a column (a MERGE's clause number).
fn int_at(column: &Vector, row: usize) -> Result<i64> {
    match column.get_scalar(row) {
        apiary_types::ScalarValue::Int32(v) => Ok(v as i64),
        apiary_types::ScalarValue::Int64(v) => Ok(v),
        other => Err(internal_err!("a MERGE clause number is {other}")),
    }
}

/// The rows of `chunks` as one vector per column of `table`.
fn concat_chunks(table: &Table, chunks: &[DataChunk]) -> Vec<Vector> {
    let parts: Vec<Vec<Vector>> = chunks.iter().map(|chunk| chunk.columns.clone()).collect();
    concat_vectors(table, &parts)
}

/// The rows of `parts` (each one vector per column of `table`) one after another.
fn concat_vectors(table: &Table, parts: &[Vec<Vector>]) -> Vec<Vector> {
    let total = parts.iter().map(|part| part.first().map_or(0, Vector::len)).sum();
    table
        .schema
        .fields
        .iter()
        .enumerate()
        .map(|(column, field)| {
            let mut builder = apiary_types::VectorBuilder::with_capacity(field.data_type, total);
            parts.iter().for_each(|part| builder.append(&part[column], None));
            builder.finish()
        })
        .collect()
}

/// `SELECT projection FROM from WHERE selection`.
pub(crate) fn select_query(
    projection: Vec<ast::SelectItem>,
    from: Vec<ast::TableWithJoins>,
    selection: Option<ast::Expr>,
) -> Result<ast::Query> {
    // A parsed template with its parts replaced: the syntax tree's structs have many
    // fields for other dialects.
    let mut query = parsed_query("SELECT 1")?;
    let ast::SetExpr::Select(select) = query.body.as_mut() else {
        return Err(internal_err!("the template of a DELETE or UPDATE query is not a SELECT"));
    };
    select.projection = projection;
    select.from = from;
    select.selection = selection;
    Ok(query)
}

/// The table (or rows read in its place) called `name`, as a FROM item.
pub(crate) fn table_factor(name: &str) -> Result<ast::TableWithJoins> {
    let query = parsed_query(&format!("SELECT 1 FROM {}", ast::Ident::with_quote('"', name)))?;
    let ast::SetExpr::Select(select) = *query.body else {
        return Err(internal_err!("the template of a FROM item is not a SELECT"));
    };
    select.from.into_iter().next().ok_or_else(|| internal_err!("the template has no FROM item"))
}

fn parsed_query(sql: &str) -> Result<ast::Query> {
    match apiary_sql::parser::parse_sql(sql)?.pop() {
        Some(ast::Statement::Query(query)) => Ok(*query),
        _ => Err(internal_err!("{sql} does not parse as a query")),
    }
}

/// Fails (428C9) when an INSERT gives a `GENERATED ALWAYS AS IDENTITY` column a value
/// other than DEFAULT (PostgreSQL's OVERRIDING SYSTEM VALUE is not parsed).
fn check_generated_always(table: &Table, columns: &[ast::Ident], source: Option<&ast::Query>) -> Result<()> {
    for owned in table.sequences.iter().filter(|o| o.always) {
        let column = &table.schema.fields[owned.column].name;
        let position = match columns.is_empty() {
            true => Some(owned.column),
            false => columns.iter().position(|c| normalize_ident(c) == *column),
        };
        let Some(position) = position else { continue };
        let all_default = match source.map(|s| s.body.as_ref()) {
            Some(ast::SetExpr::Values(values)) => values.rows.iter().all(|row| row.content.get(position).is_none_or(is_default_keyword)),
            // A query's rows give every column they reach.
            Some(ast::SetExpr::Select(_) | ast::SetExpr::Query(_) | ast::SetExpr::SetOperation { .. }) => false,
            _ => true,
        };
        if !all_default {
            return Err(ApiaryError::GeneratedAlways(format!(
                "cannot insert a non-DEFAULT value into column \"{column}\": it is an identity column defined as GENERATED ALWAYS"
            )));
        }
    }
    Ok(())
}
