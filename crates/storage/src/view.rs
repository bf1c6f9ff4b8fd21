//! Views: a name for a query, stored as its SQL text.
//!
//! `CREATE VIEW v AS query` binds the query once to check it and to fix the view's column
//! names and types; the catalog keeps the text, those columns and the relations the
//! query names directly. A query that reads `v` binds the text again where `v` is used
//! (like a CTE), so the view always reads the current contents of its tables. The
//! dependencies keep a table or view from being dropped while a view reads it
//! (PostgreSQL's `DROP ... RESTRICT`; `CASCADE` drops the views too).

use apiary_types::Field;

#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub name: String,
    /// The query, as SQL text that parses back to it.
    pub sql: String,
    /// The output columns fixed at CREATE VIEW (names after any column list; a NULL
    /// column is TEXT, as in PostgreSQL).
    pub columns: Vec<Field>,
    /// The tables and views the query names directly (not those a view it reads names).
    pub dependencies: Vec<String>,
}

impl View {
    pub fn new(name: impl Into<String>, sql: impl Into<String>, columns: Vec<Field>, mut dependencies: Vec<String>) -> View {
        dependencies.sort();
        dependencies.dedup();
        View { name: name.into(), sql: sql.into(), columns, dependencies }
    }
}
