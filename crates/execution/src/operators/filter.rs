//! Filter: narrows the chunk's selection vector; no data moves.

use apiary_common::Result;
use apiary_types::DataChunk;

use super::{Control, Emit, ExecContext, LocalState, Operator};
use crate::expr::{selected_rows, ExprRef};

pub struct FilterOperator {
    pub predicate: ExprRef,
    pub description: String,
}

impl Operator for FilterOperator {
    fn name(&self) -> String {
        format!("Filter {}", self.description)
    }

    fn execute(&self, mut chunk: DataChunk, _local: &mut LocalState, _ctx: &ExecContext, emit: &mut Emit) -> Result<Control> {
        let rows = selected_rows(&chunk);
        let selected = self.predicate.select(&chunk, &rows)?;
        if selected.is_empty() {
            return Ok(Control::Continue);
        }
        if selected.len() < chunk.physical_len() {
            chunk.set_selection(Some(selected));
        } else {
            chunk.set_selection(None);
        }
        emit(chunk)
    }
}
