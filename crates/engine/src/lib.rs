//! # apiary
//!
//! An analytical SQL database: columnar, in memory, push-based parallel execution.
//! This crate is the facade the command-line shell (and later the Python module and the
//! PostgreSQL wire server) use.
//!
//! ```no_run
//! use apiary::Database;
//!
//! let db = Database::open_in_memory().unwrap();
//! let mut conn = db.connect();
//! conn.execute("CREATE TABLE t (a INTEGER, b VARCHAR)").unwrap();
//! conn.execute("INSERT INTO t VALUES (1, 'x'), (2, NULL)").unwrap();
//! let result = conn.query("SELECT a, b FROM t ORDER BY a").unwrap();
//! assert_eq!(result.row_count(), 2);
//! for row in result.rows() {
//!     println!("{row:?}");
//! }
//! ```
//!
//! ```text
//! Connection::execute(sql)
//!   ├─ parse (apiary-sql::parser)            statements
//!   ├─ DDL / COPY / INSERT / SET             handled here (connection.rs, copy.rs)
//!   ├─ DELETE / UPDATE / TRUNCATE            a query finds the rows, a writer changes them (dml.rs)
//!   └─ queries: bind ─▶ optimize ─▶ plan ─▶ run on the scheduler ─▶ QueryResult
//! Connection::describe_statement(stmt, ..)  bind only: result columns, `$n` types
//! Connection::execute_with_parameters       a statement with `$n` values (wire protocol)
//! pg_catalog                                pg_class, pg_attribute, information_schema, ...
//! ```

mod alter;
mod arrow_convert;
mod connection;
mod constraints;
mod copy;
mod csv;
mod database;
mod describe;
mod dml;
mod external;
mod foreign_keys;
mod parquet_io;
pub mod pg_catalog;
mod prepared;
mod read_files;
mod result;
mod sequences;
mod series;
mod settings;
mod shared_operators;
mod table_functions;
pub mod tpch;
pub mod tpch_parameters;
mod transaction;

pub use apiary_common::{ApiaryError, Result};
pub use apiary_execution::{QueryProgress, SchedulingPolicy};
pub use apiary_types::{DataType, ScalarValue, TimeZone};
/// The Arrow crate the engine's Arrow interfaces use (`QueryResult::to_arrow`, [`ExternalTable`]).
pub use arrow;
pub use connection::Connection;
pub use database::{Database, ProgressHandle};
pub use describe::StatementDescription;
pub use external::{ExternalTable, ExternalTables};
pub use prepared::PreparedStatement;
pub use result::{QueryResult, ResultKind};
pub use settings::Settings;
pub use sqlparser::ast;

/// Parses `;`-separated SQL statements (for callers that run them one at a time, such
/// as the wire-protocol server).
pub fn parse(sql: &str) -> Result<Vec<ast::Statement>> {
    apiary_sql::parser::parse_sql(sql)
}
