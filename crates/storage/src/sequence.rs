//! Sequences: `CREATE SEQUENCE`, and the ones `SERIAL` and `GENERATED ... AS IDENTITY`
//! columns own (kept with their table, see [`crate::Table::sequences`]).
//!
//! As PostgreSQL's, a sequence is not transactional: a value handed out is never handed
//! out again, whether the statement or transaction that took it commits or not (so a
//! column it fills has gaps). Its state is made durable before or with the rows that
//! use its values: each commit logs the state of every sequence advanced since the last
//! record (see `LogEntry::SequenceValues`), a checkpoint stores it with the definition.
//!
//! Plans name a sequence by a process-wide handle ([`Sequence::handle`], found again
//! with [`Sequence::by_handle`]): an expression holds literals, not objects. They name
//! the session (connection) that runs them the same way, for `currval` and `lastval`,
//! which read what `nextval` last returned in that session ([`SessionValues`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use apiary_common::{ApiaryError, Result};
use apiary_types::DataType;

/// What `nextval` (or `setval` with is_called) last gave in each session, per sequence
/// handle, and which sequence that was: PostgreSQL's `currval` and `lastval` state.
pub struct SessionValues;

#[derive(Default)]
struct Session {
    by_sequence: HashMap<u64, i64>,
    last: Option<u64>,
}

static SESSIONS: LazyLock<Mutex<HashMap<u64, Session>>> = LazyLock::new(Default::default);
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

impl SessionValues {
    /// A new session's id (process-wide, never reused).
    pub fn new_session() -> u64 {
        NEXT_SESSION.fetch_add(1, Ordering::Relaxed)
    }

    /// Forgets a session's values (its connection closed).
    pub fn end_session(session: u64) {
        SESSIONS.lock().unwrap_or_else(|e| e.into_inner()).remove(&session);
    }

    /// `sequence` gave `value` in `session` (`by_nextval`: it is the sequence `lastval`
    /// reads; `setval` sets only `currval`).
    pub fn record(session: u64, sequence: &Sequence, value: i64, by_nextval: bool) {
        let mut sessions = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        let entry = sessions.entry(session).or_default();
        entry.by_sequence.insert(sequence.handle, value);
        if by_nextval {
            entry.last = Some(sequence.handle);
        }
    }

    /// `currval`: what `sequence` last gave in `session`.
    pub fn current(session: u64, sequence: &Sequence) -> Result<i64> {
        let sessions = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        sessions.get(&session).and_then(|s| s.by_sequence.get(&sequence.handle)).copied().ok_or_else(|| {
            ApiaryError::NotInPrerequisiteState(format!("currval of sequence \"{}\" is not yet defined in this session", sequence.name))
        })
    }

    /// `lastval`: what the sequence `nextval` last used in `session` last gave.
    pub fn last(session: u64) -> Result<i64> {
        let sessions = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        let session = sessions.get(&session);
        let handle = session
            .and_then(|s| s.last)
            .ok_or_else(|| ApiaryError::NotInPrerequisiteState("lastval is not yet defined in this session".to_string()))?;
        if Sequence::by_handle(handle).is_none() {
            return Err(ApiaryError::NotInPrerequisiteState(
                "lastval is not yet defined in this session (its sequence was dropped)".into(),
            ));
        }
        Ok(session.and_then(|s| s.by_sequence.get(&handle)).copied().expect("the last sequence has a value"))
    }
}

/// What `CREATE SEQUENCE` (or an identity column's options) declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceOptions {
    pub start: i64,
    pub increment: i64,
    pub min: i64,
    pub max: i64,
    /// Past a bound, start again at the other (else an error).
    pub cycle: bool,
    /// The type it was declared with (`AS smallint`; BIGINT by default), which bounds
    /// its values.
    pub data_type: DataType,
}

impl SequenceOptions {
    /// PostgreSQL's defaults for an ascending (`increment > 0`) or descending sequence
    /// of `data_type` (SMALLINT, INTEGER or BIGINT; `None` for another type).
    pub fn defaults(increment: i64, data_type: DataType) -> Option<SequenceOptions> {
        let type_max = match data_type {
            DataType::SmallInt => i16::MAX as i64,
            DataType::Integer => i32::MAX as i64,
            DataType::BigInt => i64::MAX,
            _ => return None,
        };
        let (min, max) = if increment > 0 { (1, type_max) } else { (-type_max - 1, -1) };
        let start = if increment > 0 { min } else { max };
        Some(SequenceOptions { start, increment, min, max, cycle: false, data_type })
    }

    /// Checks the options make a sequence (as PostgreSQL's CREATE SEQUENCE does).
    pub fn validate(&self, name: &str) -> Result<()> {
        if self.increment == 0 {
            return Err(ApiaryError::InvalidParameter(format!("INCREMENT must not be zero (sequence \"{name}\")")));
        }
        if self.min >= self.max {
            return Err(ApiaryError::InvalidParameter(format!(
                "MINVALUE ({}) must be less than MAXVALUE ({}) (sequence \"{name}\")",
                self.min, self.max
            )));
        }
        if self.start < self.min || self.start > self.max {
            return Err(ApiaryError::InvalidParameter(format!(
                "START value ({}) cannot be outside MINVALUE ({}) .. MAXVALUE ({}) (sequence \"{name}\")",
                self.start, self.min, self.max
            )));
        }
        Ok(())
    }
}

/// Where a sequence stands: the last value handed out (`called`), or the next one to be
/// (not `called`: a new sequence, or after `setval(s, v, false)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceState {
    pub last: i64,
    pub called: bool,
}

#[derive(Debug)]
struct Mutable {
    state: SequenceState,
    /// Changed since its state was last logged.
    dirty: bool,
}

#[derive(Debug)]
pub struct Sequence {
    pub name: String,
    pub options: SequenceOptions,
    handle: u64,
    mutable: Mutex<Mutable>,
}

static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);
static REGISTRY: LazyLock<Mutex<HashMap<u64, Weak<Sequence>>>> = LazyLock::new(Default::default);

impl Sequence {
    /// A new sequence (its first value is `options.start`).
    pub fn new(name: impl Into<String>, options: SequenceOptions) -> Arc<Sequence> {
        let state = SequenceState { last: options.start, called: false };
        Sequence::with_state(name, options, state)
    }

    /// A sequence as stored (a database file's).
    pub fn with_state(name: impl Into<String>, options: SequenceOptions, state: SequenceState) -> Arc<Sequence> {
        let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
        let sequence = Arc::new(Sequence { name: name.into(), options, handle, mutable: Mutex::new(Mutable { state, dirty: false }) });
        REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).insert(handle, Arc::downgrade(&sequence));
        sequence
    }

    /// This sequence's handle in plans.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// The sequence a plan names by `handle`, if it still exists.
    pub fn by_handle(handle: u64) -> Option<Arc<Sequence>> {
        REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).get(&handle).and_then(Weak::upgrade)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Mutable> {
        self.mutable.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn state(&self) -> SequenceState {
        self.lock().state
    }

    /// The next `count` values (`nextval` for `count` rows).
    pub fn next_values(&self, count: usize) -> Result<Vec<i64>> {
        let SequenceOptions { increment, min, max, cycle, .. } = self.options;
        let mut mutable = self.lock();
        let mut state = mutable.state;
        let mut values = Vec::with_capacity(count);
        for _ in 0..count {
            if !state.called {
                state = SequenceState { last: state.last, called: true };
            } else {
                let next = state.last.checked_add(increment).filter(|v| (min..=max).contains(v));
                state.last = match next {
                    Some(value) => value,
                    None if cycle => {
                        if increment > 0 {
                            min
                        } else {
                            max
                        }
                    }
                    None => {
                        let (which, bound) = if increment > 0 { ("maximum", max) } else { ("minimum", min) };
                        // The values handed out so far in this call stay taken.
                        mutable.state = state;
                        mutable.dirty = true;
                        return Err(ApiaryError::SequenceLimit(format!(
                            "nextval: reached {which} value of sequence \"{}\" ({bound})",
                            self.name
                        )));
                    }
                };
            }
            values.push(state.last);
        }
        mutable.dirty |= count > 0;
        mutable.state = state;
        Ok(values)
    }

    /// `setval(s, value, called)`.
    pub fn set(&self, value: i64, called: bool) -> Result<()> {
        if value < self.options.min || value > self.options.max {
            return Err(ApiaryError::OutOfRange(format!(
                "setval: value {value} is out of bounds for sequence \"{}\" ({}..{})",
                self.name, self.options.min, self.options.max
            )));
        }
        let mut mutable = self.lock();
        mutable.state = SequenceState { last: value, called };
        mutable.dirty = true;
        Ok(())
    }

    /// Sets the state read back from the log.
    pub fn restore(&self, state: SequenceState) {
        self.lock().state = state;
    }

    /// Whether the state changed since it was last taken by [`Sequence::take_changed`].
    pub fn is_changed(&self) -> bool {
        self.lock().dirty
    }

    /// The state, if it changed since the last call (for the log).
    pub fn take_changed(&self) -> Option<SequenceState> {
        let mut mutable = self.lock();
        std::mem::take(&mut mutable.dirty).then_some(mutable.state)
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        let mut registry = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        if registry.get(&self.handle).is_some_and(|weak| weak.strong_count() == 0) {
            registry.remove(&self.handle);
        }
    }
}

/// A sequence a table's column owns: it fills the column (its DEFAULT is the
/// sequence's `nextval`) and goes with the column or the table.
#[derive(Clone, Debug)]
pub struct OwnedSequence {
    pub column: usize,
    pub sequence: Arc<Sequence>,
    /// `GENERATED ALWAYS AS IDENTITY`: an INSERT may not give the column a value.
    pub always: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_step_cycle_and_stop_at_the_bounds() {
        let s = Sequence::new("s", SequenceOptions { start: 3, increment: 2, min: 1, max: 8, cycle: false, data_type: DataType::BigInt });
        assert_eq!(s.next_values(3).unwrap(), [3, 5, 7]);
        assert!(matches!(s.next_values(1), Err(ApiaryError::SequenceLimit(_))));
        s.set(1, false).unwrap();
        assert_eq!(s.next_values(2).unwrap(), [1, 3]);
        assert!(matches!(s.set(9, true), Err(ApiaryError::OutOfRange(_))));
        let c =
            Sequence::new("c", SequenceOptions { start: -1, increment: -1, min: -2, max: -1, cycle: true, data_type: DataType::SmallInt });
        assert_eq!(c.next_values(4).unwrap(), [-1, -2, -1, -2]);
        assert_eq!(Sequence::by_handle(c.handle()).map(|f| f.name.clone()), Some("c".to_string()));
        let handle = c.handle();
        drop(c);
        assert!(Sequence::by_handle(handle).is_none());
        assert!(s.take_changed().is_some());
        assert!(s.take_changed().is_none());
    }
}
