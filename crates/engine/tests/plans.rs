//! Pinned plans: `EXPLAIN VERBOSE` of the 22 TPC-H queries at SF0.01, checked in under
//! `tpch/plans/qNN.txt`, so an optimizer or planner change shows up as a diff in review.
//!
//! Regenerate the files after an intended plan change with:
//!
//! ```text
//! UPDATE_PLANS=1 cargo test -p apiary --test plans
//! ```
//!
//! Each file holds which optimizer rules changed the plan, the bound and optimized logical
//! plans and the physical pipelines with their cardinality estimates. The text is the same
//! on every machine: the settings that shape a plan are fixed below; the data is generated
//! deterministically; estimates come from statistics that do not depend on load order
//! (row counts, min/max, HyperLogLog sketches with a fixed hash) and print rounded to whole
//! rows; EXPLAIN without ANALYZE prints no timings; planning iterates no hash maps.

use std::path::{Path, PathBuf};

use apiary::{tpch, Connection, Database, QueryResult};

/// The scale factor of the pinned plans (estimates come from this data's statistics).
const SCALE_FACTOR: f64 = 0.01;

/// Every setting that shapes a plan, set explicitly: the machine running the test (its
/// core count sets the default `threads`, which sets aggregation partitions) must not
/// change the text, and a changed default should not silently rewrite 22 files.
const SETTINGS: &[&str] = &[
    "SET threads = 4",
    "SET block_size = 65536",
    "SET vector_size = 2048",
    "SET prefetch_group = 16",
    "SET simd = on",
    "SET staging = on",
];

fn plans_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tpch/plans")
}

fn plan_file(query: usize) -> PathBuf {
    plans_dir().join(format!("q{query:02}.txt"))
}

fn explain(conn: &mut Connection, query: usize) -> String {
    let sql = tpch::query(query).expect("query text");
    plan_text(conn, &format!("EXPLAIN VERBOSE {sql}"))
}

/// The one-column result of an EXPLAIN statement, a line per row.
fn plan_text(conn: &mut Connection, sql: &str) -> String {
    let result = conn.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut text = String::new();
    for chunk in &result.chunks {
        for row in 0..chunk.row_count() {
            text.push_str(&QueryResult::format_cell(chunk, row, 0).unwrap_or_default());
            text.push('\n');
        }
    }
    text
}

#[test]
fn tpch_plans_match_the_pinned_files() {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    for setting in SETTINGS {
        conn.execute(setting).expect("setting");
    }
    tpch::load(&mut conn, SCALE_FACTOR).expect("TPC-H data");
    let update = std::env::var_os("UPDATE_PLANS").is_some_and(|v| !v.is_empty() && v != "0");
    if update {
        std::fs::create_dir_all(plans_dir()).expect("create tpch/plans");
    }
    let mut mismatches = Vec::new();
    for query in 1..=22 {
        let actual = explain(&mut conn, query);
        let path = plan_file(query);
        if update {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(actual.as_str()) {
                std::fs::write(&path, &actual).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
                eprintln!("updated tpch/plans/q{query:02}.txt");
            }
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e}\n(create the pinned plans with: UPDATE_PLANS=1 cargo test -p apiary --test plans)", path.display())
        });
        if expected != actual {
            mismatches.push(format!("Q{query} (tpch/plans/q{query:02}.txt):\n{}", diff(&expected, &actual)));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} TPC-H plan(s) differ from the pinned files (- pinned, + now):\n\n{}\n\
         If the change is intended, regenerate them with: UPDATE_PLANS=1 cargo test -p apiary --test plans",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// A Parquet file's statistics reach the optimizer before anything is read: DuckDB records
/// distinct counts of its dictionary-encoded columns (25 tags, so the key is keyed by id)
/// and date ranges (400 days).
#[test]
fn parquet_statistics_shape_the_plan() {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/files/duckdb_statistics.parquet");
    let file = file.display();
    let plan = plan_text(&mut conn, &format!("EXPLAIN SELECT tag, count(*) FROM '{file}' GROUP BY tag"));
    assert!(plan.contains("expected groups 25,") && plan.contains("strings keyed by id: tag"), "{plan}");
    let plan = plan_text(&mut conn, &format!("EXPLAIN SELECT day, count(*) FROM '{file}' GROUP BY day"));
    assert!(plan.contains("expected groups 400,"), "{plan}");
}

/// A GROUP BY on one column of a table read whole sizes its group table from the
/// column's distinct count in the statistics; after a filter, or by an expression, the
/// count is a guess and the table only grows toward it.
#[test]
fn group_tables_trust_statistics_of_whole_tables_only() {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    conn.execute("CREATE TABLE t AS SELECT i % 5000 AS k, i AS v FROM range(0, 20000) r(i)").expect("create");
    let plan = plan_text(&mut conn, "EXPLAIN SELECT k, sum(v) FROM t GROUP BY k");
    assert!(plan.contains(" from statistics,"), "{plan}");
    for sql in [
        "SELECT k, sum(v) FROM t WHERE v > 10 GROUP BY k",
        "SELECT k + 1, sum(v) FROM t GROUP BY k + 1",
        "SELECT k, v, count(*) FROM t GROUP BY k, v",
    ] {
        let plan = plan_text(&mut conn, &format!("EXPLAIN {sql}"));
        assert!(plan.contains("expected groups") && !plan.contains("from statistics"), "{sql}: {plan}");
    }
}

/// Lines around a change shown in a diff.
const DIFF_CONTEXT: usize = 2;

/// A line diff (longest common subsequence) with a little context around each change.
fn diff(expected: &str, actual: &str) -> String {
    let old: Vec<&str> = expected.lines().collect();
    let new: Vec<&str> = actual.lines().collect();
    // lcs[i][j]: length of the longest common subsequence of old[i..] and new[j..].
    let mut lcs = vec![vec![0usize; new.len() + 1]; old.len() + 1];
    for i in (0..old.len()).rev() {
        for j in (0..new.len()).rev() {
            lcs[i][j] = if old[i] == new[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    // The edit script: (' ' | '-' | '+', line).
    let mut script: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        if i < old.len() && j < new.len() && old[i] == new[j] {
            script.push((' ', old[i]));
            i += 1;
            j += 1;
        } else if j < new.len() && (i == old.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            script.push(('+', new[j]));
            j += 1;
        } else {
            script.push(('-', old[i]));
            i += 1;
        }
    }
    let near_change =
        |idx: usize| script[idx.saturating_sub(DIFF_CONTEXT)..(idx + DIFF_CONTEXT + 1).min(script.len())].iter().any(|(t, _)| *t != ' ');
    let mut out = String::new();
    let mut skipped = false;
    for (idx, (tag, line)) in script.iter().enumerate() {
        if near_change(idx) {
            if skipped {
                out.push_str("  ...\n");
                skipped = false;
            }
            out.push_str(&format!("{tag} {line}\n"));
        } else {
            skipped = true;
        }
    }
    if skipped {
        out.push_str("  ...\n");
    }
    out
}
