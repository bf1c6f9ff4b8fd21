//! Shared circular scans (DataPath, `SET shared_scans`): queries scanning a table at the
//! same time read each block once for all of them, a query arriving mid-scan starts at the
//! block the others read next and wraps around, and every query still sees every row
//! exactly once. Verdicts never depend on timing: answers are compared with each query's
//! answer alone, whatever the overlap was.

use std::thread;
use std::time::Duration;

use apiary::tpch_parameters::{random_query, ParameterRng};
use apiary::{Connection, Database, ScalarValue};

/// TPC-H SF0.01 in blocks of 2,048 rows (lineitem: 30 blocks), so that scans have many
/// blocks to share and to wrap around.
fn tpch_database() -> Database {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    conn.execute("SET block_size = 2048").unwrap();
    apiary::tpch::load(&mut conn, 0.01).unwrap();
    db
}

/// A connection with `shared_scans` on.
fn sharing(db: &Database) -> Connection {
    let mut conn = db.connect();
    conn.execute("SET shared_scans = on").unwrap();
    conn
}

/// The rows of `sql`'s answer, sorted: rows without an ORDER BY may come in another order
/// when a scan starts mid-table.
fn sorted_answer(conn: &mut Connection, sql: &str) -> Vec<String> {
    let result = conn.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut rows: Vec<String> = result.rows().map(|row| format!("{row:?}")).collect();
    rows.sort();
    rows
}

/// Runs `rounds` random groups of two to four TPC-H queries (drawn parameters), each query
/// alone and then all of them at once with random start delays, on `threads` workers;
/// every concurrent answer must equal the query's answer alone.
fn concurrent_answers_equal_solo_answers(db: &Database, threads: usize, shared_scans: bool, rounds: usize, seed: u64) {
    let setup = [format!("SET threads = {threads}"), format!("SET shared_scans = {}", if shared_scans { "on" } else { "off" })];
    let mut conn = db.connect();
    for statement in &setup {
        conn.execute(statement).unwrap();
    }
    let mut rng = ParameterRng::new(seed);
    for round in 0..rounds {
        let group = 2 + rng.below(3);
        let queries: Vec<(usize, String)> = (0..group)
            .map(|_| {
                let number = 1 + rng.below(22);
                (number, random_query(number, &mut rng).unwrap())
            })
            .collect();
        let delays: Vec<u64> = (0..group).map(|_| rng.below(3000) as u64).collect();
        let alone: Vec<Vec<String>> = queries.iter().map(|(_, sql)| sorted_answer(&mut conn, sql)).collect();
        let handles: Vec<_> = queries
            .iter()
            .zip(&delays)
            .map(|((number, sql), &delay)| {
                let (db, sql, setup, number) = (db.clone(), sql.clone(), setup.clone(), *number);
                thread::spawn(move || {
                    let mut conn = db.connect();
                    for statement in &setup {
                        conn.execute(statement).unwrap();
                    }
                    thread::sleep(Duration::from_micros(delay));
                    (number, sorted_answer(&mut conn, &sql))
                })
            })
            .collect();
        for (handle, expected) in handles.into_iter().zip(alone) {
            let (number, answer) = handle.join().unwrap();
            assert!(
                answer == expected,
                "round {round} (threads {threads}, shared_scans {shared_scans}): Q{number} answered {answer:?} beside {:?}, {expected:?} alone",
                queries.iter().map(|(n, _)| *n).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn every_tpch_query_beside_others_answers_as_alone_with_shared_scans() {
    let db = tpch_database();
    concurrent_answers_equal_solo_answers(&db, 2, true, 90, 12);
    concurrent_answers_equal_solo_answers(&db, 1, true, 60, 13);
}

#[test]
fn every_tpch_query_beside_others_answers_as_alone_without_shared_scans() {
    let db = tpch_database();
    concurrent_answers_equal_solo_answers(&db, 2, false, 30, 14);
    concurrent_answers_equal_solo_answers(&db, 1, false, 20, 15);
}

/// The work orders of `sql`'s scan read together with other queries' scans (from
/// EXPLAIN ANALYZE's pipeline lines).
fn shared_reads(conn: &mut Connection, sql: &str) -> u64 {
    let plan = conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap();
    let lines: Vec<String> = plan.rows().map(|row| format!("{}", row[0])).collect();
    let shared = lines
        .iter()
        .filter_map(|line| {
            let (_, rest) = line.split_once(" work orders, ")?;
            rest.split_once(" read together")?.0.parse::<u64>().ok()
        })
        .sum();
    // The queries it shared with are named (their apiary_queries ids).
    let names_them = lines.iter().any(|line| line.starts_with("Scans read blocks together with queries "));
    assert_eq!(shared > 0, names_them, "{lines:#?}");
    shared
}

/// Clients scanning lineitem at once share block reads (seen in EXPLAIN ANALYZE), and the
/// switch turns it off. Four clients loop until one of them saw a shared read: only if
/// they never overlapped in 200 rounds would this fail.
#[test]
fn concurrent_scans_of_a_table_read_blocks_together_unless_switched_off() {
    let db = tpch_database();
    let sql = "SELECT l_returnflag, count(*), sum(l_quantity) FROM lineitem WHERE l_discount > 0.02 GROUP BY l_returnflag";
    let mut conn = db.connect();
    let expected = sorted_answer(&mut conn, sql);
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (db, expected) = (db.clone(), expected.clone());
            thread::spawn(move || {
                let mut conn = sharing(&db);
                let mut shared = 0;
                for _ in 0..200 {
                    shared += shared_reads(&mut conn, sql);
                    assert_eq!(sorted_answer(&mut conn, sql), expected);
                    if shared > 0 {
                        break;
                    }
                }
                shared
            })
        })
        .collect();
    let shared: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    assert!(shared > 0, "four clients scanning lineitem at once never read a block together");

    let clients: Vec<_> = (0..4)
        .map(|_| {
            let db = db.clone();
            thread::spawn(move || {
                let mut conn = db.connect();
                conn.execute("SET shared_scans = off").unwrap();
                (0..20).map(|_| shared_reads(&mut conn, sql)).sum::<u64>()
            })
        })
        .collect();
    let shared: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(shared, 0, "with shared_scans off no block is read together");
}

#[test]
fn shared_scans_is_a_setting() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    let show = |conn: &mut Connection| conn.query("SHOW shared_scans").unwrap().value(0, 0).unwrap();
    assert_eq!(show(&mut conn), ScalarValue::Utf8("off".into()), "off by default until it pays");
    conn.execute("SET shared_scans = on").unwrap();
    assert_eq!(show(&mut conn), ScalarValue::Utf8("on".into()));
    conn.execute("RESET shared_scans").unwrap();
    assert_eq!(show(&mut conn), ScalarValue::Utf8("off".into()));
    let error = conn.execute("SET shared_scans = sometimes").unwrap_err();
    assert!(error.to_string().contains("shared_scans"), "{error}");
}

/// A query that runs for a minute or more (cancelled by the test): 3.6 billion pairs of
/// lineitem rows through a filter no pair passes.
const LONG_QUERY: &str = "SELECT count(*) FROM lineitem a, lineitem b WHERE a.l_orderkey + b.l_orderkey < 0";

/// Cancelling or failing one query whose scans share block reads with others does not
/// disturb them: while a long query scanning lineitem is cancelled and a query that fails
/// on a division by zero in its scan runs again and again, other clients' scans of
/// lineitem keep answering as alone.
#[test]
fn a_cancelled_or_failing_query_does_not_disturb_the_queries_sharing_its_scans() {
    let db = tpch_database();
    let sql = "SELECT l_linestatus, count(*), sum(l_extendedprice) FROM lineitem WHERE l_quantity < 30 GROUP BY l_linestatus";
    let failing = "SELECT sum(1 / (l_quantity - 25)) FROM lineitem";
    let mut conn = sharing(&db);
    let expected = sorted_answer(&mut conn, sql);
    let long = {
        let db = db.clone();
        thread::spawn(move || {
            let mut conn = sharing(&db);
            conn.query(LONG_QUERY)
        })
    };
    let failer = {
        let db = db.clone();
        thread::spawn(move || {
            let mut conn = sharing(&db);
            (0..30).all(|_| conn.query(failing).is_err())
        })
    };
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let (db, expected) = (db.clone(), expected.clone());
            thread::spawn(move || {
                let mut conn = sharing(&db);
                for _ in 0..30 {
                    assert_eq!(sorted_answer(&mut conn, sql), expected);
                }
            })
        })
        .collect();
    // Cancel the long query once it is seen running.
    let id = loop {
        let result = conn.query("SELECT id, query FROM apiary_queries()").unwrap();
        let found = result.rows().find(|row| format!("{}", row[1]).contains("a.l_orderkey + b.l_orderkey")).map(|row| row[0].clone());
        if let Some(ScalarValue::Int64(id)) = found {
            break id;
        }
        thread::sleep(Duration::from_millis(2));
    };
    conn.query(&format!("SELECT apiary_cancel({id})")).unwrap();
    for client in clients {
        client.join().unwrap();
    }
    assert!(failer.join().unwrap(), "the division by zero fails every time");
    assert!(matches!(long.join().unwrap(), Err(apiary::ApiaryError::Interrupted)), "the long query was cancelled");
    assert_eq!(sorted_answer(&mut conn, sql), expected, "and the database answers as before");
}
