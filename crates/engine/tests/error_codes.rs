//! Errors of the SELECT-list and FROM syntax carry PostgreSQL's SQLSTATEs (what the server
//! sends to clients): DISTINCT ON keys that do not start the ORDER BY, positions past the
//! select list and LATERAL references across RIGHT/FULL joins are 42P10 (invalid column
//! reference), a subquery in FROM naming an item to its left without LATERAL is 42P01,
//! unknown columns in EXCLUDE/REPLACE are 42703, what is not implemented is 0A000; a
//! recursive CTE of a form PostgreSQL refuses is 42P19 (invalid recursion), one whose
//! recursive term would widen a column's type 42804.

use apiary::Database;

#[test]
fn select_and_from_errors_carry_postgres_sqlstates() {
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
        ("SELECT * FROM c RIGHT JOIN LATERAL (SELECT amount FROM o WHERE o.cid = c.id) s ON true", "42P10"),
        ("SELECT * FROM c FULL JOIN LATERAL (SELECT c.id AS x) s ON true", "42P10"),
        ("SELECT * FROM c, (SELECT amount FROM o WHERE o.cid = c.id) s", "42P01"),
        ("SELECT * EXCLUDE (nope) FROM c", "42703"),
        ("SELECT * REPLACE (1 AS nope) FROM c", "42703"),
        ("SELECT * FROM c, LATERAL generate_series(1, c.id) g", "0A000"),
        ("FROM c WHERE", "42601"),
        ("WITH RECURSIVE r(n) AS (SELECT n FROM r UNION ALL SELECT 1) SELECT * FROM r", "42P19"),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n FROM r, r s) SELECT * FROM r", "42P19"),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT 1 WHERE EXISTS (SELECT 1 FROM r)) SELECT * FROM r", "42P19"),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT c.id FROM c LEFT JOIN r ON true) SELECT * FROM r", "42P19"),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT max(n) FROM r) SELECT * FROM r", "42P19"),
        ("WITH RECURSIVE r(n) AS (SELECT 1 EXCEPT SELECT n FROM r) SELECT * FROM r", "42P19"),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n::bigint FROM r) SELECT * FROM r", "42804"),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n FROM r LIMIT 1) SELECT * FROM r", "0A000"),
    ];
    for (sql, expected) in cases {
        let error = conn.query(sql).err().unwrap_or_else(|| panic!("{sql}: expected an error"));
        assert_eq!(error.sqlstate(), expected, "{sql}: {error}");
    }
}

/// Errors of changing data carry PostgreSQL's SQLSTATEs: a duplicate key 23505, a NULL
/// in a NOT NULL column or primary key 23502, a CHECK constraint false for a row 23514,
/// a string longer than its column 22001, a column assigned twice 42601, an unknown table
/// 42P01, a statement in a failed transaction block 25P02, a row changed twice by ON
/// CONFLICT DO UPDATE or MERGE (or a scalar subquery with several rows) 21000, a conflict
/// target no constraint matches 42P10, a subquery in a DEFAULT 0A000, a sequence at its
/// limit 2200H, a `setval` out of its bounds 22003, a value for a GENERATED ALWAYS
/// identity column 428C9, a sequence a column owns dropped alone 2BP01, a FOREIGN KEY
/// violated 23503 (either side), one naming no key of its parent 42830, a parent table
/// dropped under its children 2BP01, `lastval` / `currval` before `nextval` in the
/// session 55000.
#[test]
fn changing_data_errors_carry_postgres_sqlstates() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    assert_eq!(conn.execute("SELECT lastval()").unwrap_err().sqlstate(), "55000");
    conn.execute("CREATE TABLE k (id INTEGER PRIMARY KEY, name VARCHAR(3) NOT NULL, u INTEGER UNIQUE)").unwrap();
    conn.execute("INSERT INTO k VALUES (1, 'a', 1), (2, 'b', 2)").unwrap();
    let cases = [
        ("INSERT INTO k VALUES (1, 'x', 3)", "23505"),
        ("UPDATE k SET u = 1 WHERE id = 2", "23505"),
        ("INSERT INTO k VALUES (NULL, 'x', 3)", "23502"),
        ("UPDATE k SET name = NULL", "23502"),
        ("INSERT INTO k VALUES (3, 'long', 3)", "22001"),
        ("UPDATE k SET name = 'long'", "22001"),
        ("UPDATE k SET u = 1, u = 2", "42601"),
        ("DELETE FROM nope", "42P01"),
        ("INSERT INTO k VALUES (5, 'x', 5), (5, 'y', 6) ON CONFLICT (id) DO UPDATE SET u = 0", "21000"),
        ("INSERT INTO k VALUES (5, 'x', 5) ON CONFLICT (name) DO NOTHING", "42P10"),
        ("INSERT INTO k VALUES (5, 'x', 5) ON CONFLICT DO UPDATE SET u = 0", "42601"),
        ("SELECT (SELECT id FROM k)", "21000"),
        ("CREATE TABLE c (a INTEGER CHECK (a > 0)); INSERT INTO c VALUES (0)", "23514"),
        ("CREATE TABLE d (a INTEGER DEFAULT (SELECT 1))", "0A000"),
        ("MERGE INTO k USING (VALUES (1), (1)) AS s(id) ON k.id = s.id WHEN MATCHED THEN DELETE", "21000"),
        ("CREATE SEQUENCE one MAXVALUE 2; SELECT nextval('one'), nextval('one'), nextval('one')", "2200H"),
        ("CREATE SEQUENCE bad MINVALUE 5 MAXVALUE 5", "22023"),
        ("CREATE SEQUENCE two MAXVALUE 2; SELECT setval('two', 3)", "22003"),
        ("CREATE TABLE ga (id INTEGER GENERATED ALWAYS AS IDENTITY); INSERT INTO ga VALUES (1)", "428C9"),
        ("CREATE TABLE ser (id SERIAL); DROP SEQUENCE ser_id_seq", "2BP01"),
        ("CREATE TABLE fk (a INTEGER REFERENCES k); INSERT INTO fk VALUES (99)", "23503"),
        ("CREATE TABLE fk2 (a INTEGER REFERENCES k); INSERT INTO fk2 SELECT min(id) FROM k; DELETE FROM k", "23503"),
        ("CREATE TABLE fk3 (a VARCHAR REFERENCES k (name))", "42830"),
        ("CREATE TABLE fk4 (a INTEGER REFERENCES k); DROP TABLE k", "2BP01"),
        ("CREATE SEQUENCE fresh; SELECT currval('fresh')", "55000"),
    ];
    for (sql, expected) in cases {
        let error = conn.execute(sql).err().unwrap_or_else(|| panic!("{sql}: expected an error"));
        assert_eq!(error.sqlstate(), expected, "{sql}: {error}");
    }
    conn.execute("BEGIN").unwrap();
    assert!(conn.execute("SELECT 1 / 0").is_err());
    assert_eq!(conn.execute("SELECT 1").unwrap_err().sqlstate(), "25P02");
    conn.execute("ROLLBACK").unwrap();
}
