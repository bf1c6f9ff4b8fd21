//! Many sessions at once: queries of several connections sharing the worker pool,
//! `apiary_queries()`, `apiary_cancel(id)`, admission control (`max_concurrent_queries`,
//! `queue_timeout`), `SET priority`, `SET threads` while queries run, and plans that run
//! many times. No test here depends on timing for its verdict: where a query must still
//! be running when another session looks at it, the test waits until it is seen.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use apiary::{ApiaryError, Connection, Database, QueryResult, ScalarValue};

/// A database with TPC-H SF0.01 (orders: 15,000 rows).
fn tpch_database() -> Database {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    apiary::tpch::load(&mut conn, 0.01).unwrap();
    db
}

/// A query that runs for a minute or more: 3.6 billion pairs through a filter no pair
/// passes (the tests cancel it).
const LONG_QUERY: &str = "SELECT count(*) FROM lineitem a, lineitem b WHERE a.l_orderkey + b.l_orderkey < 0";
const LONG_QUERY_TEXT: &str = "a.l_orderkey + b.l_orderkey";

fn scalar(conn: &mut Connection, sql: &str) -> ScalarValue {
    let result = conn.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    result.value(0, 0).unwrap()
}

fn int(value: ScalarValue) -> i64 {
    match value {
        ScalarValue::Int64(v) => v,
        ScalarValue::Int32(v) => v as i64,
        other => panic!("not an integer: {other:?}"),
    }
}

/// Waits (up to a minute) until `apiary_queries()` shows a query whose text contains
/// `needle` in `state`; returns its id.
fn wait_for_query(conn: &mut Connection, needle: &str, state: &str) -> i64 {
    let started = Instant::now();
    loop {
        let result = conn.query("SELECT id, query, state, memory_bytes FROM apiary_queries()").unwrap();
        for row in result.rows() {
            let text = format!("{}", row[1]);
            let row_state = format!("{}", row[2]);
            if text.contains(needle) && row_state == state {
                return int(row[0].clone());
            }
        }
        let listed: Vec<String> = result.rows().map(|row| format!("{row:?}")).collect();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no {state} query like {needle:?} appeared in apiary_queries(); it lists {listed:?}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

fn run_in_thread(db: &Database, setup: &[&str], sql: &'static str) -> thread::JoinHandle<apiary::Result<QueryResult>> {
    let mut conn = db.connect();
    for statement in setup {
        conn.execute(statement).unwrap();
    }
    thread::spawn(move || conn.query(sql))
}

#[test]
fn sessions_run_queries_at_once_with_correct_answers() {
    let db = tpch_database();
    let mut conn = db.connect();
    let queries = [
        "SELECT count(*), sum(o_totalprice) FROM orders",
        "SELECT o_orderstatus, count(*) FROM orders GROUP BY o_orderstatus ORDER BY 1",
        "SELECT count(*) FROM orders JOIN customer ON o_custkey = c_custkey WHERE c_mktsegment = 'BUILDING'",
        "SELECT c_nationkey, max(c_acctbal) FROM customer GROUP BY c_nationkey ORDER BY 1 LIMIT 5",
    ];
    let expected: Vec<Vec<Vec<ScalarValue>>> = queries.iter().map(|q| conn.query(q).unwrap().rows().collect()).collect();
    let db = Arc::new(db);
    let handles: Vec<_> = (0..8)
        .map(|client| {
            let db = Arc::clone(&db);
            let expected = expected.clone();
            thread::spawn(move || {
                let mut conn = db.connect();
                for round in 0..10 {
                    let i = (client + round) % queries.len();
                    let rows: Vec<Vec<ScalarValue>> = conn.query(queries[i]).unwrap().rows().collect();
                    assert_eq!(rows, expected[i], "client {client} round {round}: {}", queries[i]);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(db.query_memory_bytes(), 0, "every query released its memory");
}

#[test]
fn apiary_queries_lists_a_running_query_and_apiary_cancel_stops_it() {
    let db = tpch_database();
    let long = run_in_thread(&db, &["SET priority = 3"], LONG_QUERY);
    let mut observer = db.connect();
    let id = wait_for_query(&mut observer, LONG_QUERY_TEXT, "running");
    let row: Vec<ScalarValue> = observer
        .query(&format!(
            "SELECT connection, priority, work_orders_total, progress, pipelines, elapsed_s FROM apiary_queries() WHERE id = {id}"
        ))
        .unwrap()
        .rows()
        .next()
        .expect("the running query is listed");
    assert_ne!(int(row[0].clone()), observer.id() as i64, "the query belongs to the other session");
    assert_eq!(int(row[1].clone()), 3, "its session's priority");
    assert!(int(row[2].clone()) > 0, "work orders are counted: {row:?}");
    assert_eq!(scalar(&mut observer, &format!("SELECT apiary_cancel({id})")), ScalarValue::Boolean(true));
    let outcome = long.join().unwrap();
    assert!(matches!(outcome, Err(ApiaryError::Interrupted)), "cancelled: {outcome:?}");
    assert_eq!(db.query_memory_bytes(), 0, "the cancelled query's memory was released");
    // Gone from the list; cancelling it again finds nothing.
    assert_eq!(int(scalar(&mut observer, &format!("SELECT count(*) FROM apiary_queries() WHERE id = {id}"))), 0);
    assert_eq!(scalar(&mut observer, &format!("SELECT apiary_cancel({id})")), ScalarValue::Boolean(false));
    // The session that ran it is usable again.
    let mut again = db.connect();
    assert_eq!(int(scalar(&mut again, "SELECT count(*) FROM orders")), 15_000);
}

#[test]
fn apiary_cancel_rejects_what_is_not_a_query_id() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    for (sql, message) in [
        ("SELECT apiary_cancel('x')", "query id"),
        ("SELECT apiary_cancel(0)", "query id"),
        ("SELECT apiary_cancel(1, 2)", "one argument"),
        ("CREATE TABLE t(a INTEGER); SELECT apiary_cancel(a) FROM t", "constants"),
    ] {
        let error = conn.execute(sql).unwrap_err();
        assert!(error.to_string().contains(message), "{sql}: {error}");
    }
    assert_eq!(scalar(&mut conn, "SELECT apiary_cancel(NULL)"), ScalarValue::Null);
    assert_eq!(scalar(&mut conn, "SELECT apiary_cancel(12345)"), ScalarValue::Boolean(false));
}

#[test]
fn queries_beyond_max_concurrent_queries_wait_in_the_queue() {
    let db = tpch_database();
    let mut admin = db.connect();
    admin.execute("SET max_concurrent_queries = 1").unwrap();
    assert_eq!(format!("{}", scalar(&mut admin, "SHOW max_concurrent_queries")), "1");
    let long = run_in_thread(&db, &[], LONG_QUERY);
    wait_for_query(&mut admin, LONG_QUERY_TEXT, "running");

    // With a short time-out the second query gives up, naming the limit.
    let mut impatient = db.connect();
    impatient.execute("SET queue_timeout = '50ms'").unwrap();
    let error = impatient.query("SELECT count(*) FROM customer WHERE c_custkey > 3").unwrap_err();
    assert_eq!(error.sqlstate(), "53000", "{error}");
    assert!(error.to_string().contains("max_concurrent_queries = 1"), "{error}");

    // A patient one waits, listed as queued, and can be cancelled while it waits.
    let queued = run_in_thread(&db, &["SET queue_timeout = '10min'"], "SELECT count(*) FROM customer WHERE c_custkey > 7");
    let id = wait_for_query(&mut admin, "c_custkey > 7", "queued");
    assert_eq!(scalar(&mut admin, &format!("SELECT apiary_cancel({id})")), ScalarValue::Boolean(true));
    assert!(matches!(queued.join().unwrap(), Err(ApiaryError::Interrupted)));

    // Another waits until the running query ends, then runs.
    let waiting = run_in_thread(&db, &[], "SELECT count(*) FROM customer WHERE c_custkey > 1000");
    wait_for_query(&mut admin, "c_custkey > 1000", "queued");
    let long_id = wait_for_query(&mut admin, LONG_QUERY_TEXT, "running");
    admin.query(&format!("SELECT apiary_cancel({long_id})")).unwrap();
    assert!(matches!(long.join().unwrap(), Err(ApiaryError::Interrupted)));
    let result = waiting.join().unwrap().unwrap();
    assert_eq!(result.value(0, 0), Some(ScalarValue::Int64(500)));

    admin.execute("RESET max_concurrent_queries").unwrap();
    assert_eq!(format!("{}", scalar(&mut admin, "SHOW max_concurrent_queries")), (db.threads() * 2).to_string());
}

#[test]
fn scheduling_settings_are_checked() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    for (sql, message) in [
        ("SET priority = 0", "priority must be between 1 and 10"),
        ("SET priority = 11", "priority must be between 1 and 10"),
        ("SET queue_timeout = 'soon'", "queue_timeout must be a duration"),
        ("SET max_concurrent_queries = 0", "max_concurrent_queries must be between"),
        ("SET scheduler_policy = 'lottery'", "'fair' or 'fifo'"),
    ] {
        let error = conn.execute(sql).unwrap_err();
        assert!(error.to_string().contains(message), "{sql}: {error}");
    }
    for (set, show, value) in [
        ("SET priority = 10", "SHOW priority", "10"),
        ("SET queue_timeout = '1.5s'", "SHOW queue_timeout", "1500ms"),
        ("SET queue_timeout = '2min'", "SHOW queue_timeout", "120s"),
        ("SET queue_timeout = 30", "SHOW queue_timeout", "30s"),
        ("SET scheduler_policy = 'fifo'", "SHOW scheduler_policy", "fifo"),
        ("RESET scheduler_policy", "SHOW scheduler_policy", "fair"),
        ("RESET priority", "SHOW priority", "5"),
    ] {
        conn.execute(set).unwrap();
        assert_eq!(format!("{}", scalar(&mut conn, show)), value, "{set}");
    }
}

#[test]
fn set_threads_changes_the_pool_while_queries_run() {
    let db = tpch_database();
    let mut admin = db.connect();
    admin.execute("SET threads = 1").unwrap();
    let expected = int(scalar(&mut admin, "SELECT count(*) FROM orders a, customer b WHERE a.o_custkey + b.c_custkey > 1000"));
    for threads in [3, 1, 2] {
        let query = run_in_thread(&db, &[], "SELECT count(*) FROM orders a, customer b WHERE a.o_custkey + b.c_custkey > 1000");
        wait_for_query(&mut admin, "a.o_custkey + b.c_custkey", "running");
        admin.execute(&format!("SET threads = {threads}")).unwrap();
        let result = query.join().unwrap().unwrap();
        assert_eq!(result.value(0, 0), Some(ScalarValue::Int64(expected)), "after SET threads = {threads}");
    }
    assert_eq!(db.threads(), 2);
}

#[test]
fn a_query_crowded_out_of_memory_waits_and_runs_alone() {
    // The first query holds a group-by's table while it runs long; the second needs more
    // memory than is left but fits alone: it must wait, then run and answer, not fail.
    let db = tpch_database();
    let mut admin = db.connect();
    let group_by = "SELECT count(*) FROM (SELECT l_orderkey, l_comment, count(*) FROM lineitem GROUP BY 1, 2) x WHERE l_orderkey > 0";
    let expected = int(scalar(&mut admin, group_by));
    // Each group-by needs about 6 MB more than the tables take (with whole-block work
    // orders on two threads, fixed here so the sizes do not depend on the load): the
    // limit leaves room for one.
    let tables_mb = int(scalar(&mut admin, "SELECT sum(memory_bytes)::BIGINT FROM apiary_storage_info()")) >> 20;
    admin.execute(&format!("SET memory_limit = '{}MB'; SET threads = 2", tables_mb + 10)).unwrap();
    let fixed = ["SET morsel_size = 65536"];
    let holder = run_in_thread(
        &db,
        &fixed,
        "SELECT count(*) FROM (SELECT l_orderkey, l_comment, count(*) FROM lineitem GROUP BY 1, 2) g, orders b \
         WHERE g.l_orderkey + b.o_orderkey < 0",
    );
    let holder_id = wait_for_query(&mut admin, "g.l_orderkey + b.o_orderkey", "running");
    // Its aggregate is done (and its memory held) once the cross join runs.
    let started = Instant::now();
    while db.query_memory_bytes() < 4 << 20 {
        assert!(started.elapsed() < Duration::from_secs(60), "the first query never held memory");
        thread::sleep(Duration::from_millis(5));
    }
    let second = run_in_thread(&db, &fixed, group_by);
    wait_for_query(&mut admin, "l_orderkey > 0", "waiting for memory");
    admin.query(&format!("SELECT apiary_cancel({holder_id})")).unwrap();
    assert!(matches!(holder.join().unwrap(), Err(ApiaryError::Interrupted)));
    match second.join().unwrap() {
        Ok(result) => assert_eq!(result.value(0, 0), Some(ScalarValue::Int64(expected))),
        Err(error) => panic!("the second query failed instead of waiting: {error}"),
    }
    assert_eq!(db.query_memory_bytes(), 0);
}

#[test]
fn a_prepared_query_plans_once_and_runs_on_the_data_of_each_execution() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    conn.execute("CREATE TABLE t(k INTEGER, v INTEGER); INSERT INTO t VALUES (1, 10), (2, 20)").unwrap();
    let mut prepared = conn.prepare("SELECT k, sum(v) FROM t GROUP BY k ORDER BY k").unwrap();
    assert!(prepared.is_planned());
    let rows = |result: QueryResult| result.rows().collect::<Vec<_>>();
    let first = rows(conn.execute_prepared(&mut prepared).unwrap());
    assert_eq!(first, vec![vec![ScalarValue::Int32(1), ScalarValue::Int64(10)], vec![ScalarValue::Int32(2), ScalarValue::Int64(20)]]);
    // Each execution scans the table as it is when the execution starts.
    conn.execute("INSERT INTO t VALUES (1, 5), (3, 30)").unwrap();
    let second = rows(conn.execute_prepared(&mut prepared).unwrap());
    assert_eq!(second.len(), 3);
    assert_eq!(second[0], vec![ScalarValue::Int32(1), ScalarValue::Int64(15)]);
    // The same plan, many times, from the state of each run alone.
    for _ in 0..20 {
        assert_eq!(rows(conn.execute_prepared(&mut prepared).unwrap()), second);
    }
    // A setting that shapes plans, then a DROP and CREATE: planned again.
    conn.execute("SET vector_size = 128").unwrap();
    assert_eq!(rows(conn.execute_prepared(&mut prepared).unwrap()), second);
    conn.execute("DROP TABLE t; CREATE TABLE t(k INTEGER, v INTEGER); INSERT INTO t VALUES (7, 1)").unwrap();
    assert_eq!(rows(conn.execute_prepared(&mut prepared).unwrap()), vec![vec![ScalarValue::Int32(7), ScalarValue::Int64(1)]]);
    conn.execute("DROP TABLE t").unwrap();
    let error = conn.execute_prepared(&mut prepared).unwrap_err();
    assert!(error.to_string().contains("does not exist"), "{error}");
    // Statements other than queries, and queries over table functions, are not kept planned.
    let mut create = conn.prepare("CREATE TABLE u(a INTEGER)").unwrap();
    assert!(!create.is_planned());
    conn.execute_prepared(&mut create).unwrap();
    let mut monitor = conn.prepare("SELECT count(*) FROM apiary_queries()").unwrap();
    assert!(!monitor.is_planned());
    assert_eq!(conn.execute_prepared(&mut monitor).unwrap().value(0, 0), Some(ScalarValue::Int64(0)));
    assert!(conn.prepare("SELECT 1; SELECT 2").is_err());
}

#[test]
fn a_prepared_query_reading_the_clock_gets_the_time_of_each_execution() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    let mut prepared = conn.prepare("SELECT now(), now() = current_timestamp").unwrap();
    assert!(!prepared.is_planned(), "bound at every execution");
    let first = conn.execute_prepared(&mut prepared).unwrap();
    assert_eq!(first.value(0, 1), Some(ScalarValue::Boolean(true)), "one value per statement");
    thread::sleep(Duration::from_millis(5));
    let second = conn.execute_prepared(&mut prepared).unwrap();
    assert_ne!(first.value(0, 0), second.value(0, 0));
    let statement = apiary::parse("SELECT now()").unwrap().remove(0);
    let cached = conn.execute_with_parameters(&statement, &[]).unwrap().value(0, 0);
    thread::sleep(Duration::from_millis(5));
    assert_ne!(conn.execute_with_parameters(&statement, &[]).unwrap().value(0, 0), cached, "not a cached literal");
}

#[test]
fn queries_without_parameters_reuse_the_sessions_plan() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    conn.execute("CREATE TABLE t(a INTEGER); INSERT INTO t VALUES (1), (2)").unwrap();
    let statement = apiary::parse("SELECT sum(a) FROM t").unwrap().remove(0);
    let sum = |conn: &mut Connection| conn.execute_with_parameters(&statement, &[]).unwrap().value(0, 0);
    assert_eq!(sum(&mut conn), Some(ScalarValue::Int64(3)));
    conn.execute("INSERT INTO t VALUES (4)").unwrap();
    assert_eq!(sum(&mut conn), Some(ScalarValue::Int64(7)), "the cached plan reads the current data");
    conn.execute("DROP TABLE t; CREATE TABLE t(a SMALLINT); INSERT INTO t VALUES (10)").unwrap();
    assert_eq!(sum(&mut conn), Some(ScalarValue::Int64(10)), "planned again for the new table");
    // A statement with an effect is bound (and so run) every time.
    let cancel = apiary::parse("SELECT apiary_cancel(999)").unwrap().remove(0);
    for _ in 0..2 {
        assert_eq!(conn.execute_with_parameters(&cancel, &[]).unwrap().value(0, 0), Some(ScalarValue::Boolean(false)));
    }
}

/// Regression: the work orders of a scan were counted with one range size and produced
/// with another (whole blocks alone, `morsel_size` under load), reading rows twice.
#[test]
fn scans_read_each_row_once_alone_and_under_load() {
    let db = tpch_database();
    let mut conn = db.connect();
    conn.execute("SET morsel_size = 1000").unwrap();
    let sql = "SELECT count(*), sum(l_quantity) FROM lineitem";
    let alone: Vec<Vec<ScalarValue>> = conn.query(sql).unwrap().rows().collect();
    assert_eq!(alone[0][0], ScalarValue::Int64(60_175));
    while_long_query_runs(&db, &[], || {
        let loaded: Vec<Vec<ScalarValue>> = conn.query(sql).unwrap().rows().collect();
        assert_eq!(loaded, alone, "cut into short work orders while another query runs");
    });
}

/// Runs `body` while [`LONG_QUERY`] (after `setup`) runs in another session, then cancels
/// the long query.
fn while_long_query_runs(db: &Database, setup: &[&str], body: impl FnOnce()) {
    let long = run_in_thread(db, setup, LONG_QUERY);
    let mut admin = db.connect();
    let id = wait_for_query(&mut admin, LONG_QUERY_TEXT, "running");
    body();
    admin.query(&format!("SELECT apiary_cancel({id})")).unwrap();
    assert!(matches!(long.join().unwrap(), Err(ApiaryError::Interrupted)));
}

/// Work orders of the scan pipeline in `EXPLAIN ANALYZE` of `sql`.
fn scan_work_orders(conn: &mut Connection, sql: &str) -> usize {
    let plan = conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap();
    let text: String = plan.rows().map(|row| format!("{}\n", row[0])).collect();
    let line = text.lines().find(|l| l.contains("Pipeline 0:")).unwrap_or_else(|| panic!("no pipeline 0 in {text}"));
    let count = line.split("Pipeline 0:").nth(1).and_then(|rest| rest.split_whitespace().next()).and_then(|n| n.parse().ok());
    count.unwrap_or_else(|| panic!("no work order count in {line:?}"))
}

/// Short scan work orders exist so that a query of the same or a higher priority waits
/// little for a worker. A query that outranks every other running query has no one to
/// make room for, and scans whole blocks as it does alone.
#[test]
fn only_queries_that_may_keep_others_waiting_cut_their_scans_short() {
    let db = tpch_database();
    let mut conn = db.connect();
    conn.execute("SET morsel_size = 1000").unwrap();
    let sql = "SELECT count(*), sum(l_quantity) FROM lineitem";
    let alone = scan_work_orders(&mut conn, sql);
    assert!(alone < 10, "lineitem (60,175 rows) alone scans in whole blocks, not {alone} work orders");
    while_long_query_runs(&db, &["SET priority = 5"], || {
        for priority in [1, 5] {
            conn.execute(&format!("SET priority = {priority}")).unwrap();
            let orders = scan_work_orders(&mut conn, sql);
            assert!(orders >= 60, "at priority {priority} beside a query at 5, the scan is cut into 1,000-row work orders, not {orders}");
        }
        conn.execute("SET priority = 6").unwrap();
        assert_eq!(scan_work_orders(&mut conn, sql), alone, "a query outranking every running query scans whole blocks");
    });
}

/// Beside another query, scans are cut into `morsel_size` rows and cheap cut work orders
/// are batched again (consecutive ranges of a block scanned as one): the answers, and the
/// order of rows a LIMIT without ORDER BY keeps, are those of whole blocks.
#[test]
fn cut_and_batched_scans_answer_as_whole_blocks_do() {
    let db = tpch_database();
    let mut conn = db.connect();
    // Without shared scans, whose start mid-table would change which rows a LIMIT keeps.
    conn.execute("SET morsel_size = 1000; SET shared_scans = off").unwrap();
    let queries = [
        "SELECT l_orderkey, l_linenumber FROM lineitem LIMIT 2500",
        "SELECT l_orderkey, l_linenumber FROM lineitem WHERE l_quantity < 3 LIMIT 700",
        "SELECT count(*), sum(l_extendedprice) FROM lineitem WHERE l_quantity < 5",
        "SELECT l_returnflag, count(*) FROM lineitem WHERE l_shipdate > DATE '1998-09-01' GROUP BY l_returnflag ORDER BY 1",
    ];
    let answer = |conn: &mut Connection, sql: &str| conn.query(sql).unwrap().rows().collect::<Vec<_>>();
    let alone: Vec<_> = queries.iter().map(|sql| answer(&mut conn, sql)).collect();
    while_long_query_runs(&db, &["SET priority = 5"], || {
        let orders = scan_work_orders(&mut conn, queries[2]);
        assert!(orders >= 60, "the scan is cut into 1,000-row morsels beside the long query, not {orders}");
        for (sql, expected) in queries.iter().zip(&alone) {
            for _ in 0..3 {
                assert_eq!(&answer(&mut conn, sql), expected, "{sql}");
            }
        }
    });
}

#[test]
fn a_prepared_query_with_parameters_is_optimized_once_and_runs_with_each_executions_values() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    conn.execute(
        "CREATE TABLE digits(d INTEGER); INSERT INTO digits VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9);
         CREATE TABLE t(k INTEGER, v BIGINT, s VARCHAR, d DATE);
         INSERT INTO t SELECT i % 7, i, 'name' || i, DATE '2020-01-01' + i
             FROM (SELECT a.d * 100 + b.d * 10 + c.d + 1 AS i FROM digits a, digits b, digits c) numbers;
         INSERT INTO t VALUES (NULL, NULL, NULL, NULL)",
    )
    .unwrap();
    let rows = |result: QueryResult| result.rows().collect::<Vec<_>>();
    // Each query with its values written out gives the answer the prepared one must.
    let cases: &[(&str, Vec<Vec<ScalarValue>>)] = &[
        (
            "SELECT k, count(*), sum(v) FROM t WHERE k = $1 AND v > $2 GROUP BY k",
            vec![vec![ScalarValue::Int32(3), ScalarValue::Int64(100)], vec![ScalarValue::Int32(0), ScalarValue::Int64(1990)]],
        ),
        (
            "SELECT count(*) FROM t WHERE d BETWEEN $1 AND $2 OR s LIKE $3",
            vec![
                vec![ScalarValue::Date(18300), ScalarValue::Date(18400), ScalarValue::Utf8("name19%".into())],
                vec![ScalarValue::Null, ScalarValue::Date(18400), ScalarValue::Utf8("%5".into())],
            ],
        ),
        (
            "SELECT $1 + v, CASE WHEN v % 2 = 0 THEN $2 ELSE 'odd' END FROM t WHERE v IN ($3, $4, 5) ORDER BY v",
            vec![
                vec![ScalarValue::Int64(10), ScalarValue::Utf8("even".into()), ScalarValue::Int64(2), ScalarValue::Int64(3)],
                vec![ScalarValue::Int64(-1), ScalarValue::Null, ScalarValue::Int64(8), ScalarValue::Null],
            ],
        ),
        (
            "SELECT a.k, count(*) FROM t a JOIN t b ON a.v = b.v + $1 WHERE b.k <> $2 GROUP BY a.k HAVING count(*) > $3 ORDER BY 1",
            vec![
                vec![ScalarValue::Int64(1), ScalarValue::Int32(2), ScalarValue::Int64(250)],
                vec![ScalarValue::Int64(-3), ScalarValue::Int32(5), ScalarValue::Int64(0)],
            ],
        ),
    ];
    for (sql, executions) in cases {
        let mut prepared = conn.prepare(sql).unwrap();
        assert!(prepared.is_planned(), "{sql} keeps a generic plan");
        for values in executions {
            let mut written = sql.to_string();
            for (index, value) in values.iter().enumerate().rev() {
                let literal = match value {
                    ScalarValue::Null => "NULL".to_string(),
                    ScalarValue::Utf8(text) => format!("'{text}'"),
                    ScalarValue::Date(_) => format!("DATE '{value}'"),
                    other => other.to_string(),
                };
                let typed = format!("CAST({literal} AS {})", prepared.parameter_types()[index]);
                written = written.replace(&format!("${}", index + 1), &typed);
            }
            let expected = rows(conn.execute(&written).unwrap().pop().unwrap());
            assert_eq!(rows(conn.execute_prepared_with(&mut prepared, values).unwrap()), expected, "{sql} with {values:?}");
        }
    }
    // Values convert to the parameter's type, with a clear error when they cannot.
    let mut by_key = conn.prepare("SELECT count(*) FROM t WHERE k = $1").unwrap();
    assert_eq!(by_key.parameter_types(), &[apiary::DataType::Integer]);
    let count = |conn: &mut Connection, p: &mut apiary::PreparedStatement, v: ScalarValue| {
        conn.execute_prepared_with(p, &[v]).map(|r| r.value(0, 0))
    };
    assert_eq!(count(&mut conn, &mut by_key, ScalarValue::Int64(3)).unwrap(), Some(ScalarValue::Int64(143)));
    assert_eq!(count(&mut conn, &mut by_key, ScalarValue::Utf8("3".into())).unwrap(), Some(ScalarValue::Int64(143)));
    assert_eq!(count(&mut conn, &mut by_key, ScalarValue::Null).unwrap(), Some(ScalarValue::Int64(0)));
    let error = count(&mut conn, &mut by_key, ScalarValue::Utf8("three".into())).unwrap_err();
    assert!(error.to_string().contains("parameter $1"), "{error}");
    let error = conn.execute_prepared(&mut by_key).unwrap_err();
    assert!(error.to_string().contains("1 parameters but was given 0"), "{error}");
    // A statement that needs its values to be bound is bound with them at each execution.
    let mut limited = conn.prepare("SELECT v FROM t WHERE v IS NOT NULL ORDER BY v LIMIT $1").unwrap();
    assert!(!limited.is_planned());
    assert_eq!(rows(conn.execute_prepared_with(&mut limited, &[ScalarValue::Int64(2)]).unwrap()).len(), 2);
    assert_eq!(rows(conn.execute_prepared_with(&mut limited, &[ScalarValue::Int64(5)]).unwrap()).len(), 5);
}
