//! Which WITH queries are computed once (referenced more than once and aggregating, or AS
//! MATERIALIZED): EXPLAIN shows one `Materialize CTE` pipeline per materialized definition
//! and one `CteScan` per reference. (Answers are checked in
//! tests/sql/cte/materialized.slt.)

use apiary::{Connection, Database, QueryResult};

fn explain(conn: &mut Connection, sql: &str) -> String {
    let result = conn.query(&format!("EXPLAIN {sql}")).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let chunk = &result.chunks[0];
    (0..chunk.row_count()).map(|r| QueryResult::format_cell(chunk, r, 0).unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

fn setup() -> (Database, Connection) {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    conn.execute("CREATE TABLE t (a INTEGER, b INTEGER)").unwrap();
    conn.execute("INSERT INTO t VALUES (1, 2), (2, 3)").unwrap();
    (db, conn)
}

#[test]
fn a_cte_referenced_twice_is_computed_once() {
    let (_db, mut conn) = setup();
    let plan = explain(&mut conn, "WITH s AS (SELECT a, sum(b) AS total FROM t GROUP BY a) SELECT * FROM s x JOIN s y ON x.a = y.a");
    assert_eq!(plan.matches("Materialize CTE s").count(), 1, "{plan}");
    assert_eq!(plan.matches("CteScan").count(), 2, "{plan}");
    assert_eq!(plan.matches("Scan t ").count(), 1, "the definition is planned once:\n{plan}");
}

#[test]
fn a_cte_referenced_once_or_not_aggregating_is_inlined() {
    let (_db, mut conn) = setup();
    for sql in [
        "WITH s AS (SELECT a, sum(b) AS total FROM t GROUP BY a) SELECT * FROM s",
        // Each reference of a scan or join gets its own predicates pushed into it.
        "WITH s AS (SELECT a, b FROM t WHERE b > 1) SELECT * FROM s x JOIN s y ON x.a = y.b WHERE x.a = 1",
        "WITH s AS (SELECT t1.a, t2.b FROM t t1 JOIN t t2 ON t1.a = t2.b) SELECT * FROM s x JOIN s y ON x.a = y.b",
        "WITH s AS NOT MATERIALIZED (SELECT a, sum(b) AS total FROM t GROUP BY a) SELECT * FROM s x JOIN s y ON x.a = y.a",
    ] {
        let plan = explain(&mut conn, sql);
        assert!(!plan.contains("Materialize CTE"), "{sql}\n{plan}");
    }
    let forced = explain(&mut conn, "WITH s AS MATERIALIZED (SELECT a FROM t) SELECT * FROM s");
    assert!(forced.contains("Materialize CTE s"), "{forced}");
}

#[test]
fn a_materialized_cte_runs_again_for_every_execution_of_a_prepared_statement() {
    let (_db, mut conn) = setup();
    let mut prepared = conn.prepare("WITH s AS (SELECT count(*) AS n FROM t) SELECT x.n + y.n FROM s x, s y").expect("prepare");
    let first = conn.execute_prepared(&mut prepared).expect("first");
    conn.execute("INSERT INTO t VALUES (3, 4)").unwrap();
    let second = conn.execute_prepared(&mut prepared).expect("second");
    let value = |r: &QueryResult| QueryResult::format_cell(&r.chunks[0], 0, 0).unwrap_or_default();
    assert_eq!(value(&first), "4");
    assert_eq!(value(&second), "6", "the CTE's rows are not kept from the first execution");
}

#[test]
fn the_references_filters_together_filter_the_definition() {
    let (_db, mut conn) = setup();
    let verbose = |conn: &mut Connection, sql: &str| {
        let result = conn.query(&format!("EXPLAIN VERBOSE {sql}")).unwrap();
        let chunk = &result.chunks[0];
        let text: Vec<String> = (0..chunk.row_count()).map(|r| QueryResult::format_cell(chunk, r, 0).unwrap_or_default()).collect();
        let text = text.join("\n");
        text[text.find("Optimized logical plan").expect("optimized plan")..].to_string()
    };
    let both =
        verbose(&mut conn, "WITH s AS (SELECT a, sum(b) AS total FROM t GROUP BY a) SELECT * FROM s x, s y WHERE x.a = 1 AND y.a = 2");
    assert!(both.contains("Scan t [a, b] filters=[(a = 1) OR (a = 2)]"), "{both}");
    // A reference without a filter needs every row.
    let one = verbose(&mut conn, "WITH s AS (SELECT a, sum(b) AS total FROM t GROUP BY a) SELECT * FROM s x, s y WHERE x.a = 1");
    assert!(one.contains("Scan t [a, b]\n"), "{one}");
}
