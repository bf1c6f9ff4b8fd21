//! Window functions against equivalent correlated subqueries (a metamorphic oracle that
//! needs no other database): over random tables with NULLs and ties, each window call's
//! answer per row must equal a subquery computing the same thing from its definition.
//! The two run through entirely different operators (window sort and frames against
//! decorrelated joins and aggregation).

use apiary::tpch_parameters::ParameterRng;
use apiary::{Connection, Database};

fn rows(conn: &mut Connection, sql: &str) -> Vec<String> {
    match conn.query(sql) {
        Ok(result) => result.rows().map(|row| format!("{row:?}")).collect(),
        Err(e) => panic!("{sql}\n{e}"),
    }
}

/// A table `t(id, g, x, d)`: `id` is 1..n (unique, the order within frames), `g` a
/// partition key with NULLs, `x` an integer with NULLs and ties, `d` a decimal.
fn random_table(conn: &mut Connection, rng: &mut ParameterRng, n: usize) {
    conn.execute("DROP TABLE IF EXISTS t").unwrap();
    conn.execute("CREATE TABLE t (id INTEGER, g INTEGER, x INTEGER, d DECIMAL(10,2))").unwrap();
    let value = |rng: &mut ParameterRng, range: usize, nulls: usize| {
        if rng.below(100) < nulls {
            "NULL".to_string()
        } else {
            (rng.below(range) as i64 - 3).to_string()
        }
    };
    let values: Vec<String> = (1..=n)
        .map(|id| {
            let g = value(rng, 4, 10);
            let x = value(rng, 12, 15);
            let d = if rng.below(10) == 0 { "NULL".to_string() } else { format!("{}.{:02}", rng.below(50), rng.below(100)) };
            format!("({id}, {g}, {x}, {d})")
        })
        .collect();
    conn.execute(&format!("INSERT INTO t VALUES {}", values.join(", "))).unwrap();
}

#[test]
fn window_calls_equal_their_definitions_as_subqueries() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    let mut rng = ParameterRng::new(20261123);
    let same_g = "u.g IS NOT DISTINCT FROM t.g";
    for round in 0..12 {
        let n = 20 + rng.below(60);
        random_table(&mut conn, &mut rng, n);
        let (a, b) = (rng.below(4), rng.below(4));
        let k = 1 + rng.below(3);
        // (window call, its definition as a scalar subquery over `u`, for row `t`)
        let cases = [
            ("row_number() OVER (PARTITION BY g ORDER BY id)".to_string(), format!("(SELECT count(*) FROM t u WHERE {same_g} AND u.id <= t.id)")),
            ("count(*) OVER (PARTITION BY g)".to_string(), format!("(SELECT count(*) FROM t u WHERE {same_g})")),
            ("rank() OVER (PARTITION BY g ORDER BY x)".to_string(), format!(
                "(SELECT 1 + count(*) FROM t u WHERE {same_g} AND (CASE WHEN t.x IS NULL THEN u.x IS NOT NULL ELSE u.x < t.x END))"
            )),
            ("dense_rank() OVER (ORDER BY x)".to_string(), "(SELECT 1 + count(DISTINCT u.x) FROM t u WHERE CASE WHEN t.x IS NULL THEN u.x IS NOT NULL ELSE u.x < t.x END)".to_string()),
            (format!("sum(x) OVER (ORDER BY id ROWS BETWEEN {a} PRECEDING AND {b} FOLLOWING)"), format!("(SELECT sum(u.x) FROM t u WHERE u.id BETWEEN t.id - {a} AND t.id + {b})")),
            (format!("count(x) OVER (PARTITION BY g ORDER BY x RANGE BETWEEN {a} PRECEDING AND {b} FOLLOWING)"), format!(
                "(SELECT count(u.x) FROM t u WHERE {same_g} AND (CASE WHEN t.x IS NULL THEN u.x IS NULL ELSE u.x BETWEEN t.x - {a} AND t.x + {b} END))"
            )),
            ("sum(d) OVER (PARTITION BY g ORDER BY x)".to_string(), format!(
                "(SELECT sum(u.d) FROM t u WHERE {same_g} AND (CASE WHEN t.x IS NULL THEN true ELSE u.x <= t.x END))"
            )),
            ("avg(d) OVER (PARTITION BY g)".to_string(), format!("(SELECT avg(u.d) FROM t u WHERE {same_g})")),
            (format!("max(x) OVER (ORDER BY id ROWS BETWEEN {k} FOLLOWING AND UNBOUNDED FOLLOWING)"), format!("(SELECT max(u.x) FROM t u WHERE u.id >= t.id + {k})")),
            (format!("min(d) OVER (ORDER BY id ROWS {k} PRECEDING)"), format!("(SELECT min(u.d) FROM t u WHERE u.id BETWEEN t.id - {k} AND t.id)")),
            (format!("lag(x, {k}) OVER (ORDER BY id)"), format!("(SELECT u.x FROM t u WHERE u.id = t.id - {k})")),
            (format!("lead(d, {k}, -1) OVER (ORDER BY id)"), format!("CASE WHEN t.id + {k} <= (SELECT max(id) FROM t) THEN (SELECT u.d FROM t u WHERE u.id = t.id + {k}) ELSE -1 END")),
            ("count(*) FILTER (WHERE x > 2) OVER (PARTITION BY g)".to_string(), format!("(SELECT count(*) FROM t u WHERE {same_g} AND u.x > 2)")),
            // Every residue 0..4 occurs (at least 20 rows): peer group i is residue i.
            (format!("count(*) OVER (ORDER BY id % 5 GROUPS BETWEEN CURRENT ROW AND {k} FOLLOWING)"), format!(
                "(SELECT count(*) FROM t u WHERE u.id % 5 BETWEEN t.id % 5 AND t.id % 5 + {k})"
            )),
            (format!("sum(x) OVER (ORDER BY id % 5 DESC GROUPS BETWEEN {k} PRECEDING AND 1 PRECEDING)"), format!(
                "(SELECT sum(u.x) FROM t u WHERE u.id % 5 BETWEEN t.id % 5 + 1 AND t.id % 5 + {k})"
            )),
            // EXCLUDE: the frame's rows but the current one, its peers, or its other peers.
            (format!("sum(x) OVER (ORDER BY id ROWS BETWEEN {a} PRECEDING AND {b} FOLLOWING EXCLUDE CURRENT ROW)"), format!(
                "(SELECT sum(u.x) FROM t u WHERE u.id BETWEEN t.id - {a} AND t.id + {b} AND u.id <> t.id)"
            )),
            (format!("count(x) OVER (PARTITION BY g ORDER BY x RANGE BETWEEN {a} PRECEDING AND {b} FOLLOWING EXCLUDE GROUP)"), format!(
                "(SELECT count(u.x) FROM t u WHERE {same_g} AND t.x IS NOT NULL AND u.x BETWEEN t.x - {a} AND t.x + {b} AND u.x <> t.x)"
            )),
            ("max(d) OVER (PARTITION BY g ORDER BY x ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING EXCLUDE TIES)".to_string(), format!(
                "(SELECT max(u.d) FROM t u WHERE {same_g} AND (u.id = t.id OR u.x IS DISTINCT FROM t.x))"
            )),
            (format!("first_value(x) OVER (ORDER BY id ROWS BETWEEN {a} PRECEDING AND {b} FOLLOWING EXCLUDE CURRENT ROW)"), format!(
                "(SELECT u.x FROM t u WHERE u.id = (SELECT min(v.id) FROM t v WHERE v.id BETWEEN t.id - {a} AND t.id + {b} AND v.id <> t.id))"
            )),
            // Aggregates computed with grouping states: DISTINCT over the partition and
            // over a sliding frame, variance and string_agg over sliding frames.
            ("count(DISTINCT x) OVER (PARTITION BY g)".to_string(), format!("(SELECT count(DISTINCT u.x) FROM t u WHERE {same_g})")),
            (format!("sum(DISTINCT x) OVER (ORDER BY id ROWS BETWEEN {a} PRECEDING AND {b} FOLLOWING)"), format!(
                "(SELECT sum(DISTINCT u.x) FROM t u WHERE u.id BETWEEN t.id - {a} AND t.id + {b})"
            )),
            // (Rounded: the two feed the rows in different orders.)
            (format!("CAST(var_samp(x) OVER (ORDER BY id ROWS {k} PRECEDING EXCLUDE CURRENT ROW) AS DECIMAL(18,4))"), format!(
                "(SELECT CAST(var_samp(u.x) AS DECIMAL(18,4)) FROM t u WHERE u.id BETWEEN t.id - {k} AND t.id - 1)"
            )),
            (format!("string_agg(CAST(x AS VARCHAR), ',') OVER (ORDER BY id ROWS BETWEEN {a} PRECEDING AND {b} FOLLOWING)"), format!(
                "(SELECT string_agg(CAST(u.x AS VARCHAR), ',' ORDER BY u.id) FROM t u WHERE u.id BETWEEN t.id - {a} AND t.id + {b})"
            )),
            // DISTINCT over running frames: each value counted at its first position.
            ("count(DISTINCT x) OVER (PARTITION BY g ORDER BY id)".to_string(), format!(
                "(SELECT count(DISTINCT u.x) FROM t u WHERE {same_g} AND u.id <= t.id)"
            )),
            ("avg(DISTINCT d) FILTER (WHERE x > 0) OVER (ORDER BY x)".to_string(),
                "(SELECT avg(DISTINCT u.d) FILTER (WHERE u.x > 0) FROM t u WHERE CASE WHEN t.x IS NULL THEN true ELSE u.x <= t.x END)".to_string()
            ),
            ("median(x) OVER (PARTITION BY g ORDER BY id)".to_string(), format!("(SELECT median(u.x) FROM t u WHERE {same_g} AND u.id <= t.id)")),
        ];
        for (window, definition) in &cases {
            // Compared as text: the two sides may type a value differently (BIGINT and
            // INTEGER, DECIMAL precisions), not spell it differently.
            let by_window =
                rows(&mut conn, &format!("SELECT id, CAST(w AS VARCHAR) FROM (SELECT id, {window} AS w FROM t) AS q ORDER BY id"));
            let by_definition = rows(&mut conn, &format!("SELECT id, CAST({definition} AS VARCHAR) FROM t ORDER BY id"));
            assert_eq!(by_window, by_definition, "round {round}: {window}\n  against {definition}");
        }
    }
}

/// Inputs of 64K rows and more whose calls share partition columns are split into
/// buckets computed in parallel. Over 200,000 rows in 5,000 partitions (NULL keys among
/// them), every partition's window results must agree with its GROUP BY aggregates, and
/// the per-row results with the same query over a copy with one more (never NULL)
/// partition column, which splits the rows differently.
#[test]
fn bucketed_windows_compute_whole_partitions() {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    conn.execute("SET block_size = 10000").unwrap();
    conn.execute("CREATE TABLE big (id INTEGER, g INTEGER, x INTEGER)").unwrap();
    for start in (0..200_000).step_by(20_000) {
        let values: Vec<String> = (start..start + 20_000)
            .map(|id: i64| {
                let g = if id % 997 == 0 { "NULL".to_string() } else { ((id * 7919) % 5_000).to_string() };
                format!("({id}, {g}, {})", (id * 31) % 101)
            })
            .collect();
        conn.execute(&format!("INSERT INTO big VALUES {}", values.join(", "))).unwrap();
    }
    for threads in [1, 2] {
        conn.execute(&format!("SET threads = {threads}")).unwrap();
        // Per partition: row_number runs 1..n, count(*) OVER is n, the running sum ends
        // at the partition's sum, rank never exceeds n.
        let mismatches = rows(
            &mut conn,
            "SELECT count(*) FROM (
               SELECT g, max(rn) AS max_rn, sum(rn) AS sum_rn, min(c) AS min_c, max(c) AS max_c, max(running) AS last_running, max(r) AS max_r
               FROM (SELECT g, row_number() OVER (PARTITION BY g ORDER BY id) AS rn, count(*) OVER (PARTITION BY g) AS c,
                            sum(x) OVER (PARTITION BY g ORDER BY id) AS running, rank() OVER (PARTITION BY g ORDER BY x) AS r
                     FROM big) w
               GROUP BY g) a
             JOIN (SELECT g, count(*) AS n, sum(x) AS total FROM big GROUP BY g) b ON a.g IS NOT DISTINCT FROM b.g
             WHERE a.max_rn <> b.n OR a.sum_rn <> b.n * (b.n + 1) / 2 OR a.min_c <> b.n OR a.max_c <> b.n
                OR a.last_running <> b.total OR a.max_r > b.n",
        );
        assert_eq!(mismatches, ["[Int64(0)]"], "{threads} threads");
        let partitions = rows(&mut conn, "SELECT count(DISTINCT coalesce(g, -1)) FROM big");
        assert_eq!(partitions, ["[Int64(5001)]"]);
        // The same lag per row when the partition key also holds a constant column.
        let differing = rows(
            &mut conn,
            "SELECT count(*) FROM
               (SELECT id, lag(x) OVER (PARTITION BY g ORDER BY id) AS l FROM big) p
               JOIN (SELECT id, lag(x) OVER (PARTITION BY g, one ORDER BY id) AS l FROM (SELECT *, 1 AS one FROM big) b) q
               ON p.id = q.id
             WHERE p.l IS DISTINCT FROM q.l",
        );
        assert_eq!(differing, ["[Int64(0)]"], "{threads} threads");
    }
    // The window sink finalized in buckets (one task each), not in one piece.
    let explain = rows(&mut conn, "EXPLAIN ANALYZE SELECT count(r) FROM (SELECT rank() OVER (PARTITION BY g ORDER BY x) AS r FROM big) w");
    let finalize = explain.iter().skip_while(|l| !l.contains("-> Window")).find(|l| l.contains("Finalize")).expect("window finalize line");
    assert!(finalize.contains(" 32 tasks"), "{finalize}");
}
