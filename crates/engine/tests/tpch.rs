//! TPC-H: the 22 queries at SF0.01 and SF0.1 against the reference answers in
//! `tpch/answers`, under several execution configurations, plus concurrent runs.

use apiary::{tpch, Connection, Database};

fn load(sf: f64, settings: &[&str]) -> (Database, Connection) {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    for s in settings {
        conn.execute(s).expect("setting");
    }
    tpch::load(&mut conn, sf).expect("TPC-H data");
    (db, conn)
}

/// Runs all 22 queries; returns the failures.
fn run_all(conn: &mut Connection, sf: f64, label: &str) -> Vec<String> {
    let mut failures = Vec::new();
    for q in 1..=22 {
        let sql = tpch::query(q).expect("query text");
        let expected = tpch::answer(sf, q).expect("reference answer");
        match conn.query(sql) {
            Ok(result) => {
                if let Err(why) = tpch::check_answer(&result, expected) {
                    failures.push(format!("[{label}] Q{q}: {why}"));
                }
            }
            Err(e) => failures.push(format!("[{label}] Q{q}: error {e}")),
        }
    }
    failures
}

#[test]
fn tpch_sf001_configurations() {
    let mut failures = Vec::new();
    // Default blocks: one block per table at this scale.
    let (_db, mut conn) = load(0.01, &[]);
    failures.extend(run_all(&mut conn, 0.01, "default"));
    for (label, settings) in [
        ("1 thread", &["SET threads = 1"][..]),
        ("vector 64", &["SET vector_size = 64"][..]),
        ("vector 16384", &["SET vector_size = 16384"][..]),
        ("staging off", &["SET staging = off"][..]),
        ("staging on", &["SET staging = on"][..]),
        ("simd off", &["SET simd = off"][..]),
        ("prefetch off", &["SET prefetch_group = 0"][..]),
        ("prefetch 256", &["SET prefetch_group = 256"][..]),
        ("jit always", &["SET jit = always"][..]),
        ("jit off", &["SET jit = off"][..]),
        ("all techniques off, 1 thread", &["SET staging = off", "SET simd = off", "SET prefetch_group = 0", "SET threads = 1"][..]),
    ] {
        for s in settings {
            conn.execute(s).expect("setting");
        }
        failures.extend(run_all(&mut conn, 0.01, label));
        conn.execute("SET threads = 2").expect("reset");
        conn.execute("RESET vector_size").expect("reset");
        conn.execute("RESET staging").expect("reset");
        conn.execute("RESET simd").expect("reset");
        conn.execute("RESET prefetch_group").expect("reset");
        conn.execute("RESET jit").expect("reset");
    }
    // Many small blocks: many work orders per scan, partitioned builds and aggregates.
    for threads in [1, 2] {
        let (_db, mut conn) = load(0.01, &["SET block_size = 1000", &format!("SET threads = {threads}")]);
        failures.extend(run_all(&mut conn, 0.01, &format!("small blocks, {threads} threads")));
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn tpch_sf01() {
    let (_db, mut conn) = load(0.1, &[]);
    let failures = run_all(&mut conn, 0.1, "sf0.1");
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// Many connections run queries at the same time on one worker pool; every answer must
/// equal the reference (which single-threaded runs also match).
#[test]
fn concurrent_queries_share_the_scheduler() {
    let (db, _conn) = load(0.01, &["SET block_size = 2000"]);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for client in 0..4 {
            let db = db.clone();
            let failures = &failures;
            scope.spawn(move || {
                let mut conn = db.connect();
                for round in 0..2 {
                    for q in (1..=22).filter(|q| (q + client + round) % 2 == 0) {
                        let result = conn.query(tpch::query(q).expect("query"));
                        let outcome = match result {
                            Ok(r) => tpch::check_answer(&r, tpch::answer(0.01, q).expect("answer")),
                            Err(e) => Err(e.to_string()),
                        };
                        if let Err(why) = outcome {
                            failures.lock().unwrap().push(format!("client {client} Q{q}: {why}"));
                        }
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// EXPLAIN ANALYZE reports each pipeline's work and each sink's finalize phase: a partitioned
/// hash-join build shows its tasks, and the answer the plan computes is unchanged.
#[test]
fn explain_analyze_reports_pipelines_and_finalize_phases() {
    let (_db, mut conn) = load(0.01, &["SET threads = 2", "SET block_size = 1000"]);
    let sql = "SELECT count(*) FROM orders JOIN lineitem ON o_orderkey = l_orderkey WHERE l_quantity < 10";
    let result = conn.query(&format!("EXPLAIN ANALYZE {sql}")).expect("explain analyze");
    let text: Vec<String> =
        (0..result.chunks[0].row_count()).map(|r| apiary::QueryResult::format_cell(&result.chunks[0], r, 0).unwrap_or_default()).collect();
    let text = text.join("\n");
    assert!(text.contains("threads: 2"), "{text}");
    assert!(text.contains("HashJoinBuild"), "{text}");
    assert!(text.contains("HashJoinProbe"), "{text}");
    // The build of orders finalizes in tasks (one per partition).
    let finalize = text.lines().find(|l| l.contains("Finalize: prepare") && !l.contains(" 0 tasks")).unwrap_or_else(|| panic!("{text}"));
    assert!(finalize.contains("tasks") && finalize.contains("finish"), "{finalize}");
    // Each operator's time per row, for the scan (rows it produced) and the probe (rows
    // it was given).
    for operator in ["Scan lineitem", "HashJoinProbe"] {
        let line = text.lines().find(|l| l.contains(operator) && l.contains(" rows")).unwrap_or_else(|| panic!("{text}"));
        let per_row = line.rsplit(", ").next().and_then(|last| last.strip_suffix(" ns/row")).unwrap_or_else(|| panic!("{line}"));
        assert!(per_row.parse::<f64>().is_ok_and(|ns| ns >= 0.0), "{line}");
    }
}

/// Every query with drawn substitution parameters (`apiary::tpch_parameters`, used by
/// `apiary bench concurrent --random-params`) is valid SQL that runs, with constants
/// other than the validation ones; the single-row aggregates return their row.
#[test]
fn queries_with_drawn_substitution_parameters_run() {
    use apiary::tpch_parameters::{random_query, ParameterRng};
    let (_db, mut conn) = load(0.01, &[]);
    let mut rng = ParameterRng::new(2026);
    let mut failures = Vec::new();
    for q in 1..=22 {
        let mut texts = std::collections::HashSet::new();
        for _ in 0..4 {
            let sql = random_query(q, &mut rng).expect("substitution");
            match conn.query(&sql) {
                Ok(result) if [6, 14, 17, 19].contains(&q) && result.row_count() != 1 => {
                    failures.push(format!("Q{q}: {} rows from {sql}", result.row_count()))
                }
                Ok(_) => {}
                Err(e) => failures.push(format!("Q{q}: {e} in {sql}")),
            }
            texts.insert(sql);
        }
        if texts.len() < 2 {
            failures.push(format!("Q{q}: four draws gave {} text(s)", texts.len()));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
