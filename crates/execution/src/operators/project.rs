//! Projection: computes the output columns; the selection vector is kept, so only the
//! selected rows are computed and column references are passed through without copying.

use apiary_common::Result;
use apiary_types::DataChunk;

use super::{Control, Emit, ExecContext, LocalState, Operator};
use crate::expr::ExprRef;

pub struct ProjectOperator {
    pub exprs: Vec<ExprRef>,
    pub description: String,
}

impl Operator for ProjectOperator {
    fn name(&self) -> String {
        format!("Project {}", self.description)
    }

    fn execute(&self, chunk: DataChunk, _local: &mut LocalState, _ctx: &ExecContext, emit: &mut Emit) -> Result<Control> {
        let columns = self.exprs.iter().map(|e| e.evaluate(&chunk)).collect::<Result<Vec<_>>>()?;
        let len = chunk.physical_len();
        let selection = chunk.selection().map(|s| s.to_vec());
        let out = if columns.is_empty() { DataChunk::empty_columns(len) } else { DataChunk::new(columns, len) };
        emit(out.with_selection(selection))
    }
}
