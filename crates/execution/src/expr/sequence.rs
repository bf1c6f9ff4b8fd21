//! `nextval` and `setval`: expressions with an effect, on a sequence (see
//! `apiary_storage::sequence`); `currval` and `lastval`, which read what they gave in
//! the session. The plan names the sequence by its handle and the session by its id;
//! compiling finds the sequence, so a plan whose sequence was dropped fails cleanly.

use std::sync::Arc;

use apiary_common::{ApiaryError, Result};
use apiary_storage::{Sequence, SessionValues};
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

/// The session a session-id literal names.
fn session_of(session: Option<&ScalarValue>) -> Result<u64> {
    match session {
        Some(ScalarValue::Int64(session)) => Ok(*session as u64),
        _ => Err(apiary_common::internal_err!("a sequence function without its session")),
    }
}

/// `nextval`: one new value per selected row, in row order; `currval`: the value the
/// sequence last gave in the session, for every row.
#[derive(Debug)]
pub struct NextValue {
    sequence: Arc<Sequence>,
    session: u64,
    /// `currval` (nothing is taken).
    current: bool,
}

/// `lastval()`.
#[derive(Debug)]
pub struct LastValue {
    session: u64,
}

/// `setval(s, value, is_called)`: sets the sequence once per selected row (the last
/// row's setting stays); returns `value`.
#[derive(Debug)]
pub struct SetValue {
    sequence: Arc<Sequence>,
    value: ExprRef,
    called: ExprRef,
    session: u64,
}

/// `nextval` (`next`) or `currval`.
pub fn compile_value(next: bool, handle: Option<&ScalarValue>, session: Option<&ScalarValue>) -> Result<ExprRef> {
    Ok(Arc::new(NextValue { sequence: sequence_of(handle)?, session: session_of(session)?, current: !next }))
}

pub fn compile_last_value(session: Option<&ScalarValue>) -> Result<ExprRef> {
    Ok(Arc::new(LastValue { session: session_of(session)? }))
}

pub fn compile_set_value(handle: Option<&ScalarValue>, value: ExprRef, called: ExprRef, session: Option<&ScalarValue>) -> Result<ExprRef> {
    Ok(Arc::new(SetValue { sequence: sequence_of(handle)?, value, called, session: session_of(session)? }))
}

impl PhysicalExpr for NextValue {
    fn data_type(&self) -> DataType {
        DataType::BigInt
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        if self.current {
            let value = SessionValues::current(self.session, &self.sequence)?;
            return Ok(Vector::from_native(DataType::BigInt, vec![value; chunk.physical_len()]));
        }
        let rows = selected_rows(chunk);
        let values = self.sequence.next_values(rows.len())?;
        if let Some(&last) = values.last() {
            SessionValues::record(self.session, &self.sequence, last, true);
        }
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
            let (value, called) = (values.values::<i64>()[row], called.values::<bool>()[row]);
            self.sequence.set(value, called)?;
            // As PostgreSQL: a value marked as given is the session's current value.
            if called {
                SessionValues::record(self.session, &self.sequence, value, false);
            }
        }
        Ok(values)
    }
}

impl PhysicalExpr for LastValue {
    fn data_type(&self) -> DataType {
        DataType::BigInt
    }

    fn evaluate(&self, chunk: &DataChunk) -> Result<Vector> {
        let value = SessionValues::last(self.session)?;
        Ok(Vector::from_native(DataType::BigInt, vec![value; chunk.physical_len()]))
    }
}
