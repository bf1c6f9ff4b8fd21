//! Query results.

use apiary_common::Result;
use apiary_types::{DataChunk, DataType, ScalarValue};

/// What a statement produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultKind {
    /// A query: rows with columns.
    Rows,
    /// A statement without a result set (DDL, INSERT, COPY, SET): an optional count of
    /// affected rows.
    Statement { rows_affected: Option<u64> },
}

/// The result of one statement: column names and types plus the rows, held as chunks.
#[derive(Debug, Clone)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub types: Vec<DataType>,
    pub chunks: Vec<DataChunk>,
    pub kind: ResultKind,
}

impl QueryResult {
    pub fn rows_result(columns: Vec<String>, types: Vec<DataType>, chunks: Vec<DataChunk>) -> QueryResult {
        let chunks = chunks.into_iter().map(|c| c.compact()).filter(|c| c.row_count() > 0).collect();
        QueryResult { columns, types, chunks, kind: ResultKind::Rows }
    }

    pub fn statement(rows_affected: Option<u64>) -> QueryResult {
        QueryResult { columns: Vec::new(), types: Vec::new(), chunks: Vec::new(), kind: ResultKind::Statement { rows_affected } }
    }

    /// Whether this statement returns rows (a query, EXPLAIN, SHOW ...).
    pub fn has_rows(&self) -> bool {
        self.kind == ResultKind::Rows
    }

    pub fn row_count(&self) -> usize {
        self.chunks.iter().map(|c| c.row_count()).sum()
    }

    pub fn column_count(&self) -> usize {
        self.columns.len()
    }

    /// Value at (`row`, `column`) (slow path; prefer iterating chunks for volume).
    pub fn value(&self, row: usize, column: usize) -> Option<ScalarValue> {
        let mut row = row;
        for chunk in &self.chunks {
            if row < chunk.row_count() {
                return Some(chunk.columns.get(column)?.get_scalar(row));
            }
            row -= chunk.row_count();
        }
        None
    }

    /// All rows as values.
    pub fn rows(&self) -> impl Iterator<Item = Vec<ScalarValue>> + '_ {
        self.chunks.iter().flat_map(|chunk| (0..chunk.row_count()).map(move |r| chunk.columns.iter().map(|c| c.get_scalar(r)).collect()))
    }

    /// Cell `(row, column)` of a chunk as display text; `None` for NULL.
    pub fn format_cell(chunk: &DataChunk, row: usize, column: usize) -> Option<String> {
        let vector = &chunk.columns[column];
        if vector.is_null(row) {
            return None;
        }
        let mut text = String::new();
        apiary_execution::expr::cast_vector_value_to_string(vector, row, &mut text);
        Some(text)
    }

    /// The rows as Arrow record batches (one per chunk).
    pub fn to_arrow(&self) -> Result<Vec<arrow::record_batch::RecordBatch>> {
        crate::arrow_convert::result_to_batches(self)
    }
}
