//! Query results.

use apiary_common::Result;
use apiary_types::{DataChunk, DataType, ScalarValue, TimeZone};

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
    /// The session's time zone when the statement ran: TIMESTAMPTZ values are shown in
    /// it ([`QueryResult::cell_text`]).
    pub time_zone: TimeZone,
}

impl QueryResult {
    pub fn rows_result(columns: Vec<String>, types: Vec<DataType>, chunks: Vec<DataChunk>) -> QueryResult {
        let chunks = chunks.into_iter().map(|c| c.compact()).filter(|c| c.row_count() > 0).collect();
        QueryResult { columns, types, chunks, kind: ResultKind::Rows, time_zone: TimeZone::UTC }
    }

    /// This result with TIMESTAMPTZ values shown in `zone`.
    pub fn in_time_zone(mut self, zone: TimeZone) -> QueryResult {
        self.time_zone = zone;
        self
    }

    pub fn statement(rows_affected: Option<u64>) -> QueryResult {
        QueryResult {
            columns: Vec::new(),
            types: Vec::new(),
            chunks: Vec::new(),
            kind: ResultKind::Statement { rows_affected },
            time_zone: TimeZone::UTC,
        }
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

    /// Cell `(row, column)` of a chunk as display text; `None` for NULL. TIMESTAMPTZ
    /// values are shown in UTC: [`QueryResult::cell_text`] shows them in the session's
    /// zone.
    pub fn format_cell(chunk: &DataChunk, row: usize, column: usize) -> Option<String> {
        Self::format_cell_in(chunk, row, column, &TimeZone::UTC)
    }

    /// Cell `(row, column)` of one of this result's chunks as display text, TIMESTAMPTZ
    /// values in the session's time zone (`2024-01-31 10:00:00+01`); `None` for NULL.
    pub fn cell_text(&self, chunk: &DataChunk, row: usize, column: usize) -> Option<String> {
        Self::format_cell_in(chunk, row, column, &self.time_zone)
    }

    fn format_cell_in(chunk: &DataChunk, row: usize, column: usize, zone: &TimeZone) -> Option<String> {
        let vector = &chunk.columns[column];
        if vector.is_null(row) {
            return None;
        }
        let mut text = String::new();
        apiary_execution::expr::format_value_in(vector, row, &mut text, zone);
        Some(text)
    }

    /// The rows as Arrow record batches (one per chunk).
    pub fn to_arrow(&self) -> Result<Vec<arrow::record_batch::RecordBatch>> {
        crate::arrow_convert::result_to_batches(self)
    }

    /// The Arrow schema of [`QueryResult::to_arrow`]'s batches (also when there are none).
    pub fn arrow_schema(&self) -> arrow::datatypes::SchemaRef {
        crate::arrow_convert::arrow_schema(&self.columns, &self.types)
    }

    /// [`QueryResult::to_arrow`] with the text of the columns marked in `string_views` as
    /// Arrow string views (`Utf8View`), handed over without copying the strings, and up
    /// to `threads` batches converted at a time.
    pub fn to_arrow_with(&self, string_views: &[bool], threads: usize) -> Result<Vec<arrow::record_batch::RecordBatch>> {
        crate::arrow_convert::result_to_batches_as(self, string_views, threads)
    }

    /// The Arrow schema of [`QueryResult::to_arrow_with`]'s batches.
    pub fn arrow_schema_with_string_views(&self, string_views: &[bool]) -> arrow::datatypes::SchemaRef {
        crate::arrow_convert::arrow_schema_as(&self.columns, &self.types, string_views)
    }
}
