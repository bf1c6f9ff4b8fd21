//! Statements with `$n` parameters, as the wire protocol's extended query flow uses them:
//!
//! ```text
//! Parse/Describe ─▶ Connection::describe_statement(stmt, declared types)
//!                     bind only (not optimized, not run), parameters as typed NULLs:
//!                     the result columns and each parameter's type
//! Bind/Execute   ─▶ Connection::execute_with_parameters(stmt, values)
//!                     a query: optimized once with `$n` slots (prepared.rs), each
//!                     execution fills in the values; other statements: each `$n`
//!                     binds as the literal of its value, then it runs as usual
//! ```
//!
//! (`apiary_sql::binder::parameter` infers undeclared parameter types.) How a statement
//! is executed with values is internal: callers must not rely on it being planned again.

use apiary_common::{bind_err, Result};
use apiary_sql::binder::{normalize_ident, object_name_to_table};
use apiary_sql::Binder;
use apiary_types::{DataType, ScalarValue};
use sqlparser::ast;

use crate::connection::Connection;
use crate::pg_catalog::SessionInfo;
use crate::result::QueryResult;
use crate::table_functions::EngineTableFunctions;

/// What a statement returns and what its parameters are.
#[derive(Debug, Clone, PartialEq)]
pub struct StatementDescription {
    /// Result columns (name, type); empty for a statement that returns no rows.
    pub columns: Vec<(String, DataType)>,
    /// The type of each `$n` (declared by the caller, inferred from the statement, or
    /// TEXT), at least as many as the caller declared.
    pub parameter_types: Vec<DataType>,
}

impl Connection {
    /// Binds `statement` without running it. `declared[i]` is the type of `$i+1` if the
    /// caller knows it (`None`: infer it from the statement).
    pub fn describe_statement(&self, statement: &ast::Statement, declared: &[Option<DataType>]) -> Result<StatementDescription> {
        // Describing must not cancel anything: `apiary_cancel` runs at execution.
        let functions = EngineTableFunctions { effects: false, ..self.table_functions() };
        let mut binder = Binder::new(self.catalog(), &functions).with_parameters(declared.to_vec());
        binder.block_rows = self.settings.block_rows;
        let text = DataType::Varchar(None);
        let columns = match statement {
            ast::Statement::Query(query) => {
                let bound = binder.bind_query(query)?;
                bound.names.into_iter().zip(bound.plan.output().iter().map(|c| c.data_type)).collect()
            }
            ast::Statement::Insert(insert) => {
                let ast::TableObject::TableName(name) = &insert.table else {
                    return Err(bind_err!("INSERT INTO a table function"));
                };
                let name = object_name_to_table(name)?;
                let table = self.catalog().table(&name)?;
                if let Some(source) = &insert.source {
                    let columns: Vec<ast::Ident> =
                        insert.columns.iter().filter_map(|c| c.0.last().and_then(|p| p.as_ident()).cloned()).collect();
                    binder.bind_insert_source(&table, &columns, source)?;
                }
                self.describe_insert(&mut binder, insert, table, name)?
            }
            ast::Statement::Delete(_) | ast::Statement::Update(_) | ast::Statement::Merge(_) => {
                self.describe_dml(&mut binder, statement)?
            }
            ast::Statement::Explain { .. } => vec![("explain".to_string(), text)],
            ast::Statement::ShowVariable { variable } => {
                vec![(variable.iter().map(normalize_ident).collect::<Vec<_>>().join("."), text)]
            }
            ast::Statement::ShowTables { .. } => vec![("name".to_string(), text)],
            ast::Statement::ExplainTable { .. } => {
                vec![("column_name".to_string(), text), ("column_type".to_string(), text), ("null".to_string(), text)]
            }
            _ => Vec::new(),
        };
        let mut parameter_types = binder.parameter_types();
        for (idx, declared) in declared.iter().enumerate() {
            if parameter_types.len() <= idx {
                parameter_types.push(declared.unwrap_or(text));
            }
        }
        Ok(StatementDescription { columns, parameter_types })
    }

    /// Runs one statement whose `$n` placeholders take `values[n-1]`. A NULL takes the
    /// type the statement gives the parameter; a placeholder without a value is an error.
    /// A query runs the plan this session made for the same text (and parameter types)
    /// before, with the new values (see [`Connection::execute_cached`] and
    /// `prepared.rs`): the wire protocol's prepared statements and repeated simple
    /// queries are optimized once.
    pub fn execute_with_parameters(&mut self, statement: &ast::Statement, values: &[ScalarValue]) -> Result<QueryResult> {
        if matches!(statement, ast::Statement::Query(_)) {
            return self.execute_cached_with(statement, values);
        }
        self.execute_unplanned(statement, values)
    }

    /// Sets who is connected (the wire server does, from the startup message):
    /// `current_user`, `current_database()`, `pg_backend_pid()` and the owner columns of
    /// the `pg_catalog` tables report it.
    pub fn set_session_info(&mut self, session: SessionInfo) {
        self.session = session;
    }
}

impl Connection {
    /// `DESCRIBE SELECT ...` (DuckDB): one row per result column, as `DESCRIBE table` has
    /// them (column_name, column_type, null); the query is bound, not run.
    pub(crate) fn describe_query(&self, statement: &ast::Statement) -> Result<QueryResult> {
        let description = self.describe_statement(statement, &[])?;
        let text = DataType::Varchar(None);
        let mut names = apiary_types::StrColumnBuilder::new();
        let mut types = apiary_types::StrColumnBuilder::new();
        let mut nulls = apiary_types::StrColumnBuilder::new();
        for (name, data_type) in &description.columns {
            names.push(name);
            types.push(&data_type.to_string());
            nulls.push("YES");
        }
        let columns = vec![
            apiary_types::Vector::new(text, apiary_types::VectorData::Str(names.finish()), None),
            apiary_types::Vector::new(text, apiary_types::VectorData::Str(types.finish()), None),
            apiary_types::Vector::new(text, apiary_types::VectorData::Str(nulls.finish()), None),
        ];
        Ok(QueryResult::rows_result(
            vec!["column_name".into(), "column_type".into(), "null".into()],
            vec![text; 3],
            vec![apiary_types::DataChunk::new(columns, description.columns.len())],
        ))
    }
}

#[cfg(test)]
mod tests {
    use apiary_types::DataType;

    use crate::Database;

    /// A DELETE ... USING's or UPDATE ... FROM's RETURNING may name the other FROM items'
    /// columns: a prepared statement describes them (`*` is every FROM item's columns).
    #[test]
    fn returning_of_other_from_items_is_described() {
        let db = Database::open_in_memory().unwrap();
        let mut conn = db.connect();
        conn.execute("CREATE TABLE s (k INTEGER, q SMALLINT); CREATE TABLE m (k INTEGER, who VARCHAR)").unwrap();
        let describe = |sql: &str| {
            let statement = apiary_sql::parser::parse_sql(sql).unwrap().remove(0);
            conn.describe_statement(&statement, &[]).unwrap().columns
        };
        let columns = describe("UPDATE s SET q = q + 1 FROM m WHERE m.k = s.k RETURNING q, m.who");
        assert_eq!(columns, [("q".to_string(), DataType::SmallInt), ("who".to_string(), DataType::Varchar(None))]);
        let columns = describe("DELETE FROM s USING m WHERE m.k = s.k RETURNING *");
        let names: Vec<&str> = columns.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["k", "q", "k", "who"]);
    }
}
