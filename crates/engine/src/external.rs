//! Tables the embedding program provides: Arrow data a host language hands over (the
//! Python package's `conn.register("name", df)`, or a DataFrame named by its variable in
//! `FROM`).
//!
//! A connection may carry an [`ExternalTables`] resolver. The binder asks it for a name
//! in `FROM` that is no CTE, catalog table, view or system table, so the catalog always
//! wins. The data is read when the query is bound, at every execution (such a query is
//! never kept in the plan cache: see `prepared.rs`), and scanned in place: fixed-width
//! Arrow columns become vectors over the Arrow buffers (see `arrow_convert::borrowed`),
//! cut into blocks without copying.

use std::sync::Arc;

use apiary_common::Result;
use apiary_storage::Table;
use apiary_types::{Field, Vector};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::arrow_convert::{array_to_vector, from_arrow_type};
use crate::table_functions::scan_only_table_of_blocks;

/// Arrow record batches to scan as a table.
pub struct ExternalTable {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

impl ExternalTable {
    /// A table of `batches` (each of them with `schema`).
    pub fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        ExternalTable { schema, batches }
    }
}

/// Finds tables the embedding program provides by the name a query gives them
/// (lowercased unless it was quoted).
pub trait ExternalTables: Send + Sync {
    fn lookup(&self, name: &str) -> Result<Option<ExternalTable>>;
}

/// The external table as a scan-only table of blocks of at most `block_rows` rows.
pub(crate) fn scan_external(name: &str, table: ExternalTable, block_rows: usize) -> Result<Arc<Table>> {
    let fields = table
        .schema
        .fields()
        .iter()
        .map(|f| Ok(Field::new(f.name(), from_arrow_type(f.data_type())?, f.is_nullable())))
        .collect::<Result<Vec<_>>>()?;
    let mut pieces = Vec::new();
    for batch in &table.batches {
        let columns = batch.columns().iter().zip(&fields).map(|(a, f)| array_to_vector(a, f.data_type)).collect::<Result<Vec<Vector>>>()?;
        let rows = batch.num_rows();
        let mut offset = 0;
        while offset < rows {
            let len = block_rows.min(rows - offset);
            pieces.push(columns.iter().map(|c| c.slice(offset, len)).collect());
            offset += len;
        }
    }
    scan_only_table_of_blocks(name, fields, pieces, block_rows)
}
