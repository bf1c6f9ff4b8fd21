//! Errors.
//!
//! User errors and bugs are different things. Everything a user can cause (a typo in SQL,
//! an unknown table, a malformed CSV line, an overflow) is a typed variant with a message
//! that says what went wrong and where. [`ApiaryError::Internal`] is reserved for broken
//! invariants inside the engine; its message asks the user to report it.

use std::fmt;

/// The engine-wide result type.
pub type Result<T, E = ApiaryError> = std::result::Result<T, E>;

/// A position in the SQL text (1-based line and column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SqlPosition {
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for SqlPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiaryError {
    /// The SQL text could not be parsed.
    #[error("syntax error: {0}")]
    Parse(String),

    /// A name could not be resolved (table, column, function) or a statement is malformed.
    #[error("{0}")]
    Bind(String),

    /// Operands have types an operator or function does not accept.
    #[error("type error: {0}")]
    Type(String),

    /// An error while evaluating a query: overflow, division by zero, failed cast, ...
    #[error("{0}")]
    Execution(String),

    /// A constraint was violated (other than those below).
    #[error("constraint violation: {0}")]
    Constraint(String),

    /// A key (PRIMARY KEY, UNIQUE) would occur twice.
    #[error("constraint violation: {0}")]
    UniqueViolation(String),

    /// A row for which a CHECK constraint is false.
    #[error("constraint violation: {0}")]
    CheckViolation(String),

    /// A NULL in a NOT NULL column (or a primary key).
    #[error("constraint violation: {0}")]
    NotNullViolation(String),

    /// A statement would produce or change one row more than once: a scalar subquery
    /// returning several rows, a MERGE or INSERT ... ON CONFLICT DO UPDATE touching a row
    /// twice.
    #[error("{0}")]
    CardinalityViolation(String),

    /// A string longer than its column's VARCHAR(n) / CHAR(n) (past trailing blanks).
    #[error("{0}")]
    StringTooLong(String),

    /// A table or object already exists / does not exist.
    #[error("{0}")]
    Catalog(String),

    /// An object of that name exists already (`CREATE TABLE`, `CREATE VIEW`).
    #[error("{0}")]
    Duplicate(String),

    /// The object exists but is of another kind than the statement needs (`DROP TABLE` of
    /// a view, `INSERT` into a view).
    #[error("{0}")]
    WrongObjectType(String),

    /// Other objects depend on the one a statement would drop or change (a view reads
    /// the table).
    #[error("{0}")]
    Dependency(String),

    /// A reference to a select-list column or a FROM item that the clause cannot make:
    /// `ORDER BY 3` past the select list, `DISTINCT ON` keys that do not start the ORDER
    /// BY, a LATERAL reference across a RIGHT or FULL join (PostgreSQL's 42P10).
    #[error("{0}")]
    InvalidColumnReference(String),

    /// A recursive CTE of a form PostgreSQL refuses: a self-reference in the
    /// non-recursive term, twice, in a subquery or an outer join's NULL-supplying side,
    /// aggregates in the recursive term (PostgreSQL's invalid_recursion, 42P19).
    #[error("{0}")]
    InvalidRecursion(String),

    /// Reading an input file failed: names the file, the line and the column.
    #[error("{file}:{line}: {message}")]
    Load { file: String, line: u64, message: String },

    /// An operating-system I/O error.
    #[error("I/O error: {0}")]
    Io(String),

    /// The statement would exceed a resource limit (memory budget, ...).
    #[error("out of memory: {0}")]
    Resource(String),

    /// The query could not be admitted in time (too many running queries, or memory
    /// other queries held): names the limit.
    #[error("{0}")]
    Admission(String),

    /// Stored data is damaged (checksum mismatch, truncated file, ...).
    #[error("corrupt database: {0}")]
    Corruption(String),

    /// The feature exists in SQL but Apiary does not implement it (yet).
    #[error("not implemented: {0}")]
    NotImplemented(String),

    /// The statement is nested too deeply (expressions, subqueries, set operations).
    #[error("statement too complex: {0}")]
    TooComplex(String),

    /// The query was cancelled by the user.
    #[error("query interrupted")]
    Interrupted,

    /// A sequence reached its maximum (or minimum) value and does not cycle.
    #[error("{0}")]
    SequenceLimit(String),

    /// A value out of the range allowed (a `setval` past a sequence's bounds).
    #[error("{0}")]
    OutOfRange(String),

    /// A row naming a parent row that does not exist, or a parent row removed while rows
    /// name it (FOREIGN KEY).
    #[error("{0}")]
    ForeignKeyViolation(String),

    /// A FOREIGN KEY that names no primary key or UNIQUE constraint of its parent.
    #[error("{0}")]
    InvalidForeignKey(String),

    /// An option or argument with a value it may not take (a sequence's MINVALUE above
    /// its MAXVALUE).
    #[error("{0}")]
    InvalidParameter(String),

    /// An explicit value for a `GENERATED ALWAYS AS IDENTITY` column.
    #[error("{0}")]
    GeneratedAlways(String),

    /// An object not in the state the statement needs (`currval` of a sequence this
    /// session has not used).
    #[error("{0}")]
    NotInPrerequisiteState(String),

    /// A transaction's commit found that another transaction changed the same rows (or
    /// moved them) after its snapshot: retry the transaction.
    #[error("could not serialize access: {0}")]
    Serialization(String),

    /// A statement after an error in a transaction block, before it ends.
    #[error("current transaction is aborted, commands ignored until end of transaction block")]
    InFailedTransaction,

    /// A bug in Apiary: an invariant did not hold.
    #[error("internal error: {0}. This is a bug in Apiary; please report it")]
    Internal(String),
}

impl ApiaryError {
    /// The SQLSTATE code for this error class (PostgreSQL's codes, used by the wire protocol).
    pub fn sqlstate(&self) -> &'static str {
        match self {
            ApiaryError::Parse(_) => "42601",
            ApiaryError::Bind(_) => "42703",
            ApiaryError::Type(_) => "42804",
            ApiaryError::Execution(_) => "22000",
            ApiaryError::Constraint(_) => "23000",
            ApiaryError::UniqueViolation(_) => "23505",
            ApiaryError::NotNullViolation(_) => "23502",
            ApiaryError::CheckViolation(_) => "23514",
            ApiaryError::StringTooLong(_) => "22001",
            ApiaryError::CardinalityViolation(_) => "21000",
            ApiaryError::Catalog(_) => "42P01",
            ApiaryError::Duplicate(_) => "42P07",
            ApiaryError::WrongObjectType(_) => "42809",
            ApiaryError::Dependency(_) => "2BP01",
            ApiaryError::InvalidColumnReference(_) => "42P10",
            ApiaryError::InvalidRecursion(_) => "42P19",
            ApiaryError::Load { .. } => "22P04",
            ApiaryError::Io(_) => "58030",
            ApiaryError::Resource(_) => "53200",
            ApiaryError::Admission(_) => "53000",
            ApiaryError::Corruption(_) => "XX001",
            ApiaryError::NotImplemented(_) => "0A000",
            ApiaryError::TooComplex(_) => "54001",
            ApiaryError::Interrupted => "57014",
            ApiaryError::SequenceLimit(_) => "2200H",
            ApiaryError::OutOfRange(_) => "22003",
            ApiaryError::InvalidParameter(_) => "22023",
            ApiaryError::ForeignKeyViolation(_) => "23503",
            ApiaryError::InvalidForeignKey(_) => "42830",
            ApiaryError::GeneratedAlways(_) => "428C9",
            ApiaryError::NotInPrerequisiteState(_) => "55000",
            ApiaryError::Serialization(_) => "40001",
            ApiaryError::InFailedTransaction => "25P02",
            ApiaryError::Internal(_) => "XX000",
        }
    }
}

impl From<std::io::Error> for ApiaryError {
    fn from(err: std::io::Error) -> Self {
        ApiaryError::Io(err.to_string())
    }
}

/// `bind_err!("unknown column {}", name)` builds an [`ApiaryError::Bind`].
#[macro_export]
macro_rules! bind_err {
    ($($arg:tt)*) => { $crate::error::ApiaryError::Bind(format!($($arg)*)) };
}

/// `type_err!(...)` builds an [`ApiaryError::Type`].
#[macro_export]
macro_rules! type_err {
    ($($arg:tt)*) => { $crate::error::ApiaryError::Type(format!($($arg)*)) };
}

/// `exec_err!(...)` builds an [`ApiaryError::Execution`].
#[macro_export]
macro_rules! exec_err {
    ($($arg:tt)*) => { $crate::error::ApiaryError::Execution(format!($($arg)*)) };
}

/// `internal_err!(...)` builds an [`ApiaryError::Internal`].
#[macro_export]
macro_rules! internal_err {
    ($($arg:tt)*) => { $crate::error::ApiaryError::Internal(format!($($arg)*)) };
}

/// `not_impl_err!(...)` builds an [`ApiaryError::NotImplemented`].
#[macro_export]
macro_rules! not_impl_err {
    ($($arg:tt)*) => { $crate::error::ApiaryError::NotImplemented(format!($($arg)*)) };
}

/// The closest candidate to `name` by edit distance, if it is close enough to be a
/// plausible typo (used for "did you mean ...?" hints).
pub fn closest_name<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let distance = edit_distance(&name, &candidate.to_ascii_lowercase());
        let limit = (name.len().max(candidate.len()) / 3).max(2);
        if distance <= limit && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let substitution = previous[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            current[j] = substitution.min(previous[j] + 1).min(current[j - 1] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// The message of a caught panic (`std::panic::catch_unwind`'s payload), for turning a
/// bug into an internal error instead of taking the caller down.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names() {
        assert_eq!(closest_name("lineitme", ["orders", "lineitem"]), Some("lineitem"));
        assert_eq!(closest_name("l_quantit", ["l_quantity", "l_tax"]), Some("l_quantity"));
        assert_eq!(closest_name("zzz", ["orders", "lineitem"]), None);
    }
}
