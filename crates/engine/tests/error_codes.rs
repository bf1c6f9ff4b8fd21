//! Errors of the SELECT-list syntax carry PostgreSQL's SQLSTATEs (what the server sends to
//! clients): DISTINCT ON keys that do not start the ORDER BY and positions past the select
//! list are 42P10 (invalid column reference), unknown columns in EXCLUDE/REPLACE are 42703.

use apiary::Database;

#[test]
fn select_list_errors_carry_postgres_sqlstates() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    conn.execute("CREATE TABLE c (id INTEGER, name VARCHAR)").unwrap();
    conn.execute("CREATE TABLE o (cid INTEGER, amount INTEGER)").unwrap();
    let cases = [
        ("SELECT DISTINCT ON (name) name, id FROM c ORDER BY id", "42P10"),
        ("SELECT DISTINCT ON (3) name, id FROM c", "42P10"),
        ("SELECT name FROM c ORDER BY 2", "42P10"),
        ("SELECT name FROM c GROUP BY 2", "42P10"),
        ("SELECT DISTINCT name FROM c ORDER BY id", "42P10"),
        ("SELECT * EXCLUDE (nope) FROM c", "42703"),
        ("SELECT * REPLACE (1 AS nope) FROM c", "42703"),
        ("FROM c WHERE", "42601"),
    ];
    for (sql, expected) in cases {
        let error = conn.query(sql).err().unwrap_or_else(|| panic!("{sql}: expected an error"));
        assert_eq!(error.sqlstate(), expected, "{sql}: {error}");
    }
}
