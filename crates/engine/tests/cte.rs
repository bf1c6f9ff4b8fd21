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
fn a_cte_joining_an_aggregating_derived_table_is_computed_once() {
    // TPC-DS Q14's `cross_items`: rows of a table joined with an INTERSECT, read by three
    // IN subqueries.
    let (_db, mut conn) = setup();
    let sql = "WITH s AS (SELECT t.a FROM t, (SELECT a FROM t INTERSECT SELECT b FROM t) d WHERE t.a = d.a) \
               SELECT * FROM t WHERE a IN (SELECT a FROM s) OR b IN (SELECT a FROM s)";
    let plan = explain(&mut conn, sql);
    assert_eq!(plan.matches("Materialize CTE s").count(), 1, "{plan}");
    assert_eq!(plan.matches("CteScan").count(), 2, "{plan}");
    let nested = "WITH s AS (SELECT t.a FROM t JOIN (t AS u JOIN (SELECT DISTINCT a FROM t) d ON u.a = d.a) ON t.a = u.a) \
                  SELECT * FROM s x JOIN s y ON x.a = y.a";
    let plan = explain(&mut conn, nested);
    assert_eq!(plan.matches("Materialize CTE s").count(), 1, "{plan}");
}

#[test]
fn a_cte_referenced_once_or_not_aggregating_is_inlined() {
    let (_db, mut conn) = setup();
    for sql in [
        "WITH s AS (SELECT a, sum(b) AS total FROM t GROUP BY a) SELECT * FROM s",
        // Each reference of a scan or join gets its own predicates pushed into it.
        "WITH s AS (SELECT a, b FROM t WHERE b > 1) SELECT * FROM s x JOIN s y ON x.a = y.b WHERE x.a = 1",
        "WITH s AS (SELECT t1.a, t2.b FROM t t1 JOIN t t2 ON t1.a = t2.b) SELECT * FROM s x JOIN s y ON x.a = y.b",
    ] {
        let plan = explain(&mut conn, sql);
        assert!(!plan.contains("Materialize CTE"), "{sql}\n{plan}");
    }
    // NOT MATERIALIZED inlines the references, each open to its own predicates; where
    // they stay equal, `share_subplans` still computes the aggregation once.
    let sql = "WITH s AS NOT MATERIALIZED (SELECT a, sum(b) AS total FROM t GROUP BY a) SELECT * FROM s x JOIN s y ON x.a = y.a";
    let plan = explain(&mut conn, sql);
    assert!(!plan.contains("Materialize CTE s "), "{plan}");
    assert_eq!(plan.matches("Materialize CTE subplan1").count(), 1, "{plan}");
    let filtered = explain(
        &mut conn,
        "WITH s AS NOT MATERIALIZED (SELECT a, sum(b) AS total FROM t GROUP BY a) SELECT * FROM s x LEFT JOIN s y ON x.a = y.a AND y.a > 1",
    );
    assert!(!filtered.contains("Materialize CTE"), "{filtered}");
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

/// `WITH RECURSIVE`: the recursive term is a loop of pipelines the scheduler reruns.
/// (Answers are checked in tests/sql/setops/recursive_cte.slt.)
mod recursive {
    use super::*;

    const COUNT_TO_100: &str = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 100) SELECT sum(n) FROM r";

    fn value(result: &QueryResult) -> String {
        QueryResult::format_cell(&result.chunks[0], 0, 0).unwrap_or_default()
    }

    #[test]
    fn explain_shows_the_recursion_and_its_loop() {
        let (_db, mut conn) = setup();
        let plan = explain(&mut conn, COUNT_TO_100);
        assert!(plan.contains("-> RecursiveCte r UNION ALL [sink #0]"), "{plan}");
        assert!(plan.contains("WorkTableScan r [n]"), "{plan}");
        let verbose = explain(&mut conn, &format!("VERBOSE {COUNT_TO_100}"));
        assert!(verbose.contains("RecursiveCte r (#0) UNION ALL [n]: non-recursive term, then recursive term"), "{verbose}");
        assert!(plan.contains("run once per iteration of r"), "{plan}");
        assert!(plan.contains("RecursiveCteScan r [n]"), "{plan}");
        // The filter on the result stays above the recursion.
        let filtered =
            explain(&mut conn, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT n FROM r WHERE n > 3");
        let result = filtered.find("RecursiveCteScan r").expect("the recursive CTE's rows read");
        let filter = filtered.find("Filter n > 3").expect("the outer filter");
        assert!(filter > result, "the filter is applied to the result:\n{filtered}");
        let iterations = &filtered[..filtered.find("Loop:").expect("the loop")];
        assert!(!iterations.contains("n > 3"), "the outer filter stays out of the recursion:\n{filtered}");
    }

    #[test]
    fn a_prepared_recursive_query_starts_afresh_every_execution() {
        let (_db, mut conn) = setup();
        let mut prepared = conn
            .prepare("WITH RECURSIVE r(n) AS (SELECT a FROM t UNION SELECT n + 1 FROM r WHERE n < 5) SELECT count(*) FROM r")
            .expect("prepare");
        assert_eq!(value(&conn.execute_prepared(&mut prepared).expect("first")), "5");
        conn.execute("INSERT INTO t VALUES (0, 0)").unwrap();
        assert_eq!(value(&conn.execute_prepared(&mut prepared).expect("second")), "6");
        assert_eq!(value(&conn.execute_prepared(&mut prepared).expect("third")), "6");
    }

    #[test]
    fn explain_analyze_counts_every_iteration_and_views_may_recurse() {
        let (_db, mut conn) = setup();
        let analyzed = conn.query(&format!("EXPLAIN ANALYZE {COUNT_TO_100}")).expect("EXPLAIN ANALYZE");
        let chunk = &analyzed.chunks[0];
        let text: Vec<String> = (0..chunk.row_count()).map(|r| QueryResult::format_cell(chunk, r, 0).unwrap_or_default()).collect();
        let text = text.join("\n");
        // The recursive term's pipeline ran once per iteration: 100 work tables of one
        // row, the last one's row filtered out.
        assert!(text.contains("Pipeline 1: 100 work orders"), "{text}");
        assert!(text.contains("WorkTableScan r -- 100 rows"), "{text}");
        assert!(text.contains("-> Filter n < 100 -- 99 rows"), "{text}");
        conn.execute("CREATE VIEW numbers AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10) SELECT n FROM r")
            .unwrap();
        assert_eq!(value(&conn.query("SELECT sum(n) FROM numbers").unwrap()), "55");
    }

    #[test]
    fn a_recursion_that_does_not_end_can_be_cancelled() {
        let (_db, mut conn) = setup();
        let flag = conn.interrupt_flag();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        // One row per iteration: memory grows too slowly to stop it.
        let outcome = conn.query("WITH RECURSIVE r(n) AS (SELECT 1::bigint UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r");
        canceller.join().unwrap();
        let error = outcome.expect_err("cancelled");
        assert_eq!(error.sqlstate(), "57014", "{error}");
    }

    #[test]
    fn a_recursion_that_keeps_growing_stops_at_the_memory_limit() {
        for threads in [1, 2] {
            let (_db, mut conn) = setup();
            conn.execute(&format!("SET threads = {threads}")).unwrap();
            conn.execute("SET memory_limit = '32MB'").unwrap();
            let error = conn
                .query("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r, (VALUES (1), (2)) v(x)) SELECT count(*) FROM r")
                .expect_err("out of memory");
            assert_eq!(error.sqlstate(), "53200", "{error}");
            // The session works on.
            conn.execute("RESET memory_limit").unwrap();
            assert_eq!(value(&conn.query(COUNT_TO_100).unwrap()), "5050");
        }
    }
}
