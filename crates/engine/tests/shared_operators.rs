//! Shared operators (DataPath, `SET shared_operators`): concurrent queries that aggregate
//! one table the same way and differ in their filter constants run as one scan, one pass
//! of their predicates writing each row's query mask, and one aggregation keyed by group
//! and mask; each query merges its own rows. Every answer must equal the query's answer
//! alone, whatever the group was.

use std::sync::{Arc, Barrier};
use std::thread;

use apiary::tpch_parameters::{random_query, ParameterRng};
use apiary::{Connection, Database};

fn tpch_database() -> Database {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    conn.execute("SET block_size = 2048").unwrap();
    apiary::tpch::load(&mut conn, 0.01).unwrap();
    db
}

/// A connection with shared operators on, `threads` workers (when given) and a wait for
/// partners of `wait` on an idle engine.
fn sharing(db: &Database, threads: Option<usize>, wait: &str) -> Connection {
    let mut conn = db.connect();
    if let Some(threads) = threads {
        conn.execute(&format!("SET threads = {threads}")).unwrap();
    }
    conn.execute("SET shared_operators = on").unwrap();
    conn.execute(&format!("SET shared_operators_wait = '{wait}'")).unwrap();
    conn
}

fn answer(conn: &mut Connection, sql: &str) -> Result<Vec<String>, String> {
    conn.query(sql).map(|result| result.rows().map(|row| format!("{row:?}")).collect()).map_err(|e| e.to_string())
}

/// Runs `queries` at once, each on its own connection with shared operators on and a wait
/// long enough for all of them to meet; returns each answer and how many queries it
/// shared with.
fn run_together(db: &Database, threads: usize, queries: &[String]) -> Vec<(Result<Vec<String>, String>, usize)> {
    let barrier = Arc::new(Barrier::new(queries.len()));
    let handles: Vec<_> = queries
        .iter()
        .map(|sql| {
            let (db, sql, barrier) = (db.clone(), sql.clone(), Arc::clone(&barrier));
            thread::spawn(move || {
                let mut conn = sharing(&db, Some(threads), "300ms");
                barrier.wait();
                let result = answer(&mut conn, &sql);
                (result, conn.last_statement_shared_with())
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Each query's answer alone (shared operators off).
fn alone(db: &Database, queries: &[String]) -> Vec<Result<Vec<String>, String>> {
    let mut conn = db.connect();
    queries.iter().map(|sql| answer(&mut conn, sql)).collect()
}

/// Floating-point sums depend on the order rows are added in, so the queries here average
/// only integer-valued doubles (exact in any order).
fn check_group(db: &Database, threads: usize, queries: &[String], expect_shared: bool) {
    let shared_with = check_answers(db, threads, queries);
    if expect_shared {
        for (sql, shared_with) in queries.iter().zip(shared_with) {
            assert_eq!(shared_with, queries.len(), "{sql} did not share with the others");
        }
    }
}

/// Runs `queries` together and checks each answer against its answer alone; how many
/// queries each one shared with.
fn check_answers(db: &Database, threads: usize, queries: &[String]) -> Vec<usize> {
    let expected = alone(db, queries);
    let together = run_together(db, threads, queries);
    for ((sql, expected), (answer, _)) in queries.iter().zip(&expected).zip(&together) {
        assert_eq!(answer, expected, "{sql}\nanswered differently beside {} other queries", queries.len() - 1);
    }
    together.into_iter().map(|(_, shared_with)| shared_with).collect()
}

/// Queries over joins share when their plans are the same but for the filter constants;
/// the optimizer may order one's joins differently (a very selective date), so only some
/// of a group of join queries need to have shared.
fn check_join_group(db: &Database, threads: usize, queries: &[String]) {
    let shared_with = check_answers(db, threads, queries);
    let shared = shared_with.iter().filter(|&&n| n >= 2).count();
    assert!(shared >= 2, "none of these shared ({shared_with:?}):\n{}", queries.join("\n"));
}

#[test]
fn q1_and_q6_with_different_parameters_share_and_answer_as_alone() {
    let db = tpch_database();
    let mut rng = ParameterRng::new(20261123);
    for round in 0..6 {
        let number = if round % 2 == 0 { 1 } else { 6 };
        let queries: Vec<String> = (0..2 + rng.below(7)).map(|_| random_query(number, &mut rng).unwrap()).collect();
        check_group(&db, 1 + round % 2, &queries, true);
    }
}

/// Aggregations over inner joins share too: each scan computes its rows' query masks, a
/// joined row carries the intersection of its rows' masks, and the aggregation is keyed by
/// group and mask (Q3: three scans with filters that differ, Q5: the date range on orders
/// and the region's name, Q9: a LIKE pattern on part, Q10: two scans, Q12: IN lists and
/// dates on lineitem, Q14: one scan of two with a mask).
#[test]
fn tpch_joins_with_different_parameters_share_and_answer_as_alone() {
    let db = tpch_database();
    let mut rng = ParameterRng::new(20261124);
    for (round, number) in [3, 5, 9, 10, 12, 14, 3, 5].into_iter().enumerate() {
        let queries: Vec<String> = (0..3 + rng.below(4)).map(|_| random_query(number, &mut rng).unwrap()).collect();
        check_join_group(&db, 1 + round % 2, &queries);
    }
}

/// A join where only one member's filter differs on one side, and members whose joined
/// rows are all in another member's: the masks of both sides intersect per row.
#[test]
fn join_masks_intersect_per_row() {
    let db = tpch_database();
    let query = |segment: &str, date: &str, quantity: i32| {
        format!(
            "SELECT c_mktsegment, count(*), sum(l_quantity), avg(l_quantity), min(o_orderdate) \
             FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey \
             WHERE c_mktsegment <> '{segment}' AND o_orderdate < DATE '{date}' AND l_quantity > {quantity} \
             GROUP BY c_mktsegment ORDER BY c_mktsegment"
        )
    };
    let queries = vec![
        query("BUILDING", "1995-01-01", 10),
        query("MACHINERY", "1995-01-01", 10),
        query("BUILDING", "1993-06-01", 40),
        query("HOUSEHOLD", "1998-01-01", 0),
        query("BUILDING", "1992-01-01", 10),
    ];
    check_join_group(&db, 2, &queries);
}

#[test]
fn identical_queries_share() {
    let db = tpch_database();
    let q6 = apiary::tpch::query(6).unwrap().to_string();
    check_group(&db, 2, &vec![q6; 4], true);
}

#[test]
fn every_mergeable_aggregate_answers_as_alone() {
    let db = tpch_database();
    let query = |quantity: i32, flag: &str| {
        format!(
            "SELECT l_returnflag, count(*), count(l_comment), sum(l_quantity), sum(l_linenumber), avg(l_linenumber), \
             avg(l_discount), avg(l_partkey::double), min(l_shipmode), max(l_commitdate), bool_or(l_tax > 0.07), \
             bool_and(l_tax < 0.08), count(*) FILTER (WHERE l_linestatus = 'F'), sum(l_orderkey) \
             FROM lineitem WHERE l_quantity < {quantity} AND l_returnflag <> '{flag}' \
             GROUP BY l_returnflag HAVING count(*) > 10 ORDER BY l_returnflag"
        )
    };
    let queries = vec![query(5, "R"), query(20, "A"), query(50, "N"), query(1, "R")];
    check_group(&db, 2, &queries, true);
}

#[test]
fn members_with_no_rows_get_empty_aggregates() {
    let db = tpch_database();
    let query = |quantity: i32| {
        format!("SELECT count(*), sum(l_quantity), avg(l_discount), max(l_shipdate) FROM lineitem WHERE l_quantity > {quantity}")
    };
    // Quantities are at most 50: the second and third match no row.
    let queries = vec![query(40), query(60), query(70)];
    check_group(&db, 2, &queries, true);
    let mut conn = db.connect();
    assert_eq!(answer(&mut conn, &query(60)).unwrap(), vec!["[Int64(0), Null, Null, Null]".to_string()]);
}

#[test]
fn each_member_keeps_its_own_order_limit_and_having() {
    let db = tpch_database();
    let queries = vec![
        "SELECT l_shipmode, sum(l_quantity) AS q FROM lineitem WHERE l_shipdate < DATE '1995-01-01' GROUP BY l_shipmode ORDER BY q DESC LIMIT 3".to_string(),
        "SELECT l_shipmode, sum(l_quantity) AS q FROM lineitem WHERE l_shipdate < DATE '1996-06-01' GROUP BY l_shipmode ORDER BY l_shipmode".to_string(),
        "SELECT l_shipmode, sum(l_quantity) AS q FROM lineitem WHERE l_shipdate < DATE '1993-01-01' GROUP BY l_shipmode HAVING sum(l_quantity) > 1000 ORDER BY 1".to_string(),
    ];
    check_group(&db, 2, &queries, true);
}

#[test]
fn a_failing_member_fails_alone() {
    let db = tpch_database();
    let good = |q: i32| format!("SELECT count(*) FROM lineitem WHERE l_quantity / {q} > 1");
    // Division by zero in one member's filter fails the group's execution; every member
    // then runs alone, and only the failing one fails.
    let queries = vec![good(10), good(0), good(20)];
    let expected = alone(&db, &queries);
    assert!(expected[1].is_err());
    let together = run_together(&db, 2, &queries);
    for (expected, (answer, _)) in expected.iter().zip(&together) {
        assert_eq!(answer, expected);
    }
}

#[test]
fn a_query_that_cannot_share_runs_alone() {
    let db = tpch_database();
    // DISTINCT aggregates do not merge; a semi join's (EXISTS, Q4) output depends on the
    // rows of its inner side that its own query did not keep, so masks do not intersect.
    let q4 = |date: &str| apiary::tpch::query(4).unwrap().replace("1993-07-01", date);
    let pairs = [
        vec![
            "SELECT count(DISTINCT l_partkey) FROM lineitem WHERE l_quantity < 10".to_string(),
            "SELECT count(DISTINCT l_partkey) FROM lineitem WHERE l_quantity < 20".to_string(),
        ],
        vec![q4("1993-07-01"), q4("1995-01-01")],
    ];
    for queries in pairs {
        assert_ne!(queries[0], queries[1]);
        let expected = alone(&db, &queries);
        for ((answer, shared_with), expected) in run_together(&db, 2, &queries).into_iter().zip(expected) {
            assert_eq!(answer, expected);
            assert_eq!(shared_with, 0);
        }
    }
}

#[test]
fn settings_are_checked() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    assert_eq!(answer(&mut conn, "SHOW shared_operators").unwrap(), vec!["[Utf8(\"off\")]".to_string()]);
    conn.execute("SET shared_operators = on").unwrap();
    assert_eq!(answer(&mut conn, "SHOW shared_operators").unwrap(), vec!["[Utf8(\"on\")]".to_string()]);
    assert!(conn.execute("SET shared_operators_wait = '2s'").is_err());
    conn.execute("SET shared_operators_wait = '2ms'").unwrap();
    assert_eq!(answer(&mut conn, "SHOW shared_operators_wait").unwrap(), vec!["[Utf8(\"2ms\")]".to_string()]);
    // Alone on an idle engine with no wait, a query runs by itself.
    conn.execute("SET shared_operators_wait = 0").unwrap();
    conn.execute("CREATE TABLE t (x INT)").unwrap();
    conn.execute("INSERT INTO t VALUES (1), (2)").unwrap();
    assert_eq!(answer(&mut conn, "SELECT sum(x) FROM t WHERE x > 0").unwrap(), vec!["[Int64(3)]".to_string()]);
    assert_eq!(conn.last_statement_shared_with(), 0);
}

/// Random groups of TPC-H queries, mostly of one query number with drawn parameters (so
/// that they can share), started at random delays with random waits: every answer must
/// equal the query's answer alone (rows sorted: a query without ORDER BY may list its
/// groups in another order).
fn random_groups_answer_as_alone(threads: usize, rounds: usize, seed: u64) {
    let db = tpch_database();
    let mut rng = ParameterRng::new(seed);
    let mut conn = db.connect();
    let sorted = |answer: Result<Vec<String>, String>| {
        answer.map(|mut rows| {
            rows.sort();
            rows
        })
    };
    let mut shared = 0;
    for round in 0..rounds {
        // Half the rounds on the TPC-H queries that aggregate one table (they can share).
        let number = if rng.below(2) == 0 { [1, 6][rng.below(2)] } else { 1 + rng.below(22) };
        let queries: Vec<String> = (0..2 + rng.below(5))
            .map(|_| {
                let n = if rng.below(4) == 0 { 1 + rng.below(22) } else { number };
                random_query(n, &mut rng).unwrap()
            })
            .collect();
        let delays: Vec<u64> = queries.iter().map(|_| rng.below(2000) as u64).collect();
        let wait = ["0", "1ms", "20ms"][rng.below(3)];
        let expected: Vec<_> = queries.iter().map(|sql| sorted(answer(&mut conn, sql))).collect();
        let handles: Vec<_> = queries
            .iter()
            .zip(&delays)
            .map(|(sql, &delay)| {
                let (db, sql) = (db.clone(), sql.clone());
                thread::spawn(move || {
                    let mut conn = sharing(&db, Some(threads), wait);
                    thread::sleep(std::time::Duration::from_micros(delay));
                    let result = answer(&mut conn, &sql);
                    (result, conn.last_statement_shared_with())
                })
            })
            .collect();
        for ((sql, expected), handle) in queries.iter().zip(&expected).zip(handles) {
            let (got, shared_with) = handle.join().unwrap();
            shared += (shared_with > 0) as usize;
            assert_eq!(&sorted(got), expected, "round {round} (threads {threads}, wait {wait}): {sql}");
        }
    }
    // Not a timing verdict: with waits of 20 ms some queries always meet.
    assert!(shared > 0, "no query shared in {rounds} rounds");
}

#[test]
fn random_groups_at_random_arrivals_answer_as_alone_one_thread() {
    random_groups_answer_as_alone(1, 25, 11);
}

#[test]
fn random_groups_at_random_arrivals_answer_as_alone_two_threads() {
    random_groups_answer_as_alone(2, 25, 12);
}

/// A query that started alone on an idle engine is folded into the group that forms
/// while it runs (it has done little of its work): it answers as alone, and shares.
#[test]
fn a_query_started_alone_is_folded_into_the_group_that_forms() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    apiary::tpch::load(&mut conn, 0.1).unwrap();
    let mut rng = ParameterRng::new(99);
    let mut folded = false;
    for attempt in 0..5 {
        let queries: Vec<String> = (0..4).map(|_| random_query(1, &mut rng).unwrap()).collect();
        let expected = alone(&db, &queries);
        let handles: Vec<_> = queries
            .iter()
            .enumerate()
            .map(|(i, sql)| {
                let (db, sql) = (db.clone(), sql.clone());
                thread::spawn(move || {
                    let mut conn = sharing(&db, Some(1), "0");
                    // The first starts on an idle engine, alone; the others 3 ms later.
                    if i > 0 {
                        thread::sleep(std::time::Duration::from_millis(3));
                    }
                    let result = answer(&mut conn, &sql);
                    (result, conn.last_statement_shared_with())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for ((sql, expected), (got, _)) in queries.iter().zip(&expected).zip(&results) {
            assert_eq!(got, expected, "attempt {attempt}: {sql}");
        }
        if results[0].1 > 0 {
            folded = true;
            break;
        }
    }
    assert!(folded, "the first query was never folded into the group of the others");
}

/// Under load, queries of one template arrive apart: the first finds nobody to share with
/// and runs alone (after its group of one closes), and the next one's group folds it in
/// while it has done little (it runs slowly beside the load).
#[test]
fn under_load_a_query_whose_group_stayed_alone_is_folded_later() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    apiary::tpch::load(&mut conn, 0.1).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (db, stop) = (db.clone(), Arc::clone(&stop));
        thread::spawn(move || {
            let mut conn = db.connect();
            conn.execute("SET threads = 1").unwrap();
            let q9 = apiary::tpch::query(9).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                conn.query(q9).unwrap();
            }
        })
    };
    thread::sleep(std::time::Duration::from_millis(20));
    let mut rng = ParameterRng::new(7);
    let mut folded = false;
    for attempt in 0..20 {
        let queries: Vec<String> = (0..2).map(|_| random_query(1, &mut rng).unwrap()).collect();
        let expected = alone(&db, &queries);
        let handles: Vec<_> = queries
            .iter()
            .enumerate()
            .map(|(i, sql)| {
                let (db, sql) = (db.clone(), sql.clone());
                thread::spawn(move || {
                    let mut conn = sharing(&db, Some(1), "0");
                    // The second arrives after the first's quiet window has closed.
                    thread::sleep(std::time::Duration::from_millis(25 * i as u64));
                    let result = answer(&mut conn, &sql);
                    (result, conn.last_statement_shared_with())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for ((sql, expected), (got, _)) in queries.iter().zip(&expected).zip(&results) {
            assert_eq!(got, expected, "attempt {attempt}: {sql}");
        }
        if results[0].1 == 2 {
            folded = true;
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().unwrap();
    assert!(folded, "the first query was never folded into the second one's group");
}

/// Prepared statements (the server's extended protocol) share too: a statement with `$n`
/// parameters run by several sessions at once with different values, and one without.
#[test]
fn prepared_statements_share() {
    let db = tpch_database();
    let with_parameters = "SELECT l_returnflag, sum(l_quantity), avg(l_discount), count(*) FROM lineitem \
                           WHERE l_shipdate <= $1 AND l_quantity < $2 GROUP BY l_returnflag ORDER BY 1";
    let values: Vec<(i32, i32)> = vec![(9000, 10), (9500, 30), (10000, 50), (10400, 45)];
    let expected: Vec<_> = {
        let mut conn = db.connect();
        values
            .iter()
            .map(|(date, quantity)| {
                let sql = with_parameters.replace("$1", &format!("DATE '1970-01-01' + {date}")).replace("$2", &quantity.to_string());
                answer(&mut conn, &sql).unwrap()
            })
            .collect()
    };
    let barrier = Arc::new(Barrier::new(values.len()));
    let handles: Vec<_> = values
        .iter()
        .map(|&(date, quantity)| {
            let (db, barrier) = (db.clone(), Arc::clone(&barrier));
            thread::spawn(move || {
                let mut conn = sharing(&db, None, "300ms");
                let mut prepared = conn.prepare(with_parameters).unwrap();
                barrier.wait();
                let result = conn
                    .execute_prepared_with(&mut prepared, &[apiary::ScalarValue::Date(date), apiary::ScalarValue::Int32(quantity)])
                    .unwrap();
                (result.rows().map(|row| format!("{row:?}")).collect::<Vec<_>>(), conn.last_statement_shared_with())
            })
        })
        .collect();
    for (handle, expected) in handles.into_iter().zip(expected) {
        let (got, shared_with) = handle.join().unwrap();
        assert_eq!(got, expected);
        assert_eq!(shared_with, values.len());
    }
    // Without parameters: the prepared plan is kept physical and still shares.
    let q6 = apiary::tpch::query(6).unwrap().to_string();
    let barrier = Arc::new(Barrier::new(3));
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let (db, barrier, q6) = (db.clone(), Arc::clone(&barrier), q6.clone());
            thread::spawn(move || {
                let mut conn = sharing(&db, None, "300ms");
                let mut prepared = conn.prepare(&q6).unwrap();
                barrier.wait();
                let result = conn.execute_prepared(&mut prepared).unwrap();
                (result.rows().map(|row| format!("{row:?}")).collect::<Vec<_>>(), conn.last_statement_shared_with())
            })
        })
        .collect();
    let solo = answer(&mut db.connect(), &q6).unwrap();
    for handle in handles {
        let (got, shared_with) = handle.join().unwrap();
        assert_eq!(got, solo);
        assert_eq!(shared_with, 3);
    }
}
