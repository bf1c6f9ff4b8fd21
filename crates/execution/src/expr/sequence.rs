//! `nextval` and `setval`: expressions with an effect, on a sequence (see
//! `apiary_storage::sequence`). The plan names the sequence by its handle; compiling
//! finds the object, so a plan whose sequence was dropped fails cleanly.

use std::sync::Arc;

use apiary_common::{ApiaryError, Result};
use apiary_storage::Sequence;
use apiary_types::{DataChunk, DataType, ScalarValue, Vector};

use super::{selected_rows, ExprRef, PhysicalExpr};

/// The sequence a handle literal names.
fn sequence_of(handle: Option<&ScalarValue>) -> Result<Arc<Sequence>> {
    let Some(ScalarValue::Int64(handle)) = handle else {
        return Err(apiary_common::internal_err!("a sequence function without its sequence's handle"));
    };
    Sequence::by_handle(*handle as u64)
        .ok_or_else(|| ApiaryError::Catalog("the sequence this statement uses was dropped; run it again".to_string()))
}

/// `nextval`: one new value per selected row, in row order.
#[derive(Debug)]
pub struct NextValue {
    sequence: Arc<Sequence>,
}

/// `setval(s, value, is_called)`: sets the sequence once per selected row (the last
/// row's setting stays); returns `value`.
#[derive(Debug)]
pub struct SetValue {
    sequence: Arc<Sequence>,
    value: ExprRef,
    called: ExprRef,
}

pub fn compile_next_value(handle: Option<&ScalarValue>) -> Result<ExprRef> {
    Ok(Arc::new(NextValue { sequence: sequence_of(handle)? }))
}

pub fn compile_set_value(handle: Option<&ScalarValue>, value: ExprRef, called: ExprRef) -> Result<ExprRef> {
    Ok(Arc::new(SetValue { sequence: sequence_of(handle)?, value, called }))
}

impl PhysicalExpr for NextValue {
    fn data_type(&self) -> DataType {
        DataType::BigInt
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let rows = selected_rows(chunk);
        let values = self.sequence.next_values(rows.len())?;
        let mut out = vec![0i64; chunk.physical_len()];
        for (&row, value) in rows.iter().zip(values) {
            out[row as usize] = value;
        }
        Ok(Vector::from_native(DataType::BigInt, out))
    }
}

impl PhysicalExpr for SetValue {
    fn data_type(&self) -> DataType {
        DataType::BigInt
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let values = self.value.evaluate(chunk)?;
        let called = self.called.evaluate(chunk)?;
        for row in selected_rows(chunk) {
            let row = row as usize;
            // PostgreSQL's setval is strict: a NULL argument gives NULL and sets nothing.
            if values.is_null(row) || called.is_null(row) {
                continue;
            }
            self.sequence.set(values.values::<i64>()[row], called.values::<bool>()[row])?;
        }
        Ok(values)
    }
}
