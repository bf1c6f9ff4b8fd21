//! End-to-end tests of the `apiary` program: output formats, scripts from files and
//! standard input, error reporting, and TPC-H loaded from `.tbl` files with COPY.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn apiary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_apiary"))
}

fn run(args: &[&str]) -> Output {
    apiary().args(args).output().expect("run apiary")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).to_string()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).to_string()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("apiary-cli-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn formats() {
    let sql = "CREATE TABLE t (a INTEGER, b VARCHAR, c DECIMAL(5,2)); INSERT INTO t VALUES (1, 'x,y', 1.50), (2, NULL, NULL); SELECT * FROM t ORDER BY a";
    let csv = run(&["--format", "csv", "-c", sql]);
    assert!(csv.status.success(), "{}", stderr(&csv));
    assert_eq!(stdout(&csv), "a,b,c\n1,\"x,y\",1.50\n2,,\n");

    let json = run(&["--format", "json", "-c", sql]);
    assert_eq!(
        stdout(&json),
        "{\"columns\":[\"a\",\"b\",\"c\"],\"types\":[\"INTEGER\",\"VARCHAR\",\"DECIMAL(5,2)\"],\"rows\":[[1,\"x,y\",1.50],[2,null,null]]}\n"
    );
    for line in stdout(&json).lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("each line is JSON");
    }

    let table = run(&["-c", sql]);
    let text = stdout(&table);
    assert!(text.contains("│ a ") && text.contains("x,y") && text.contains("NULL") && text.contains("(2 rows)"), "{text}");
}

#[test]
fn scripts_from_file_and_stdin() {
    let dir = temp_dir("scripts");
    let script = dir.join("script.sql");
    std::fs::write(&script, "-- a comment; with a semicolon\nSELECT 1 AS one;\nSELECT 'a;b' AS s;\n").expect("write script");
    let out = run(&["--format", "csv", "-f", script.to_str().expect("path")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "one\n1\ns\na;b\n");

    let mut child = apiary()
        .args(["--format", "csv", "--timer"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(b"SELECT 41 + 1 AS answer;").expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "answer\n42\n");
    assert!(stderr(&out).contains("Run Time:"), "timer goes to stderr: {}", stderr(&out));
}

#[test]
fn errors_are_reported_and_stop_the_script() {
    let syntax = run(&["-c", "SELECT 1;\nSELECT * FRM t;"]);
    assert!(!syntax.status.success());
    let message = stderr(&syntax);
    assert!(message.contains("line 2") && message.contains("column"), "{message}");

    let unknown = run(&["-c", "CREATE TABLE lineitem (l_quantity INTEGER); SELECT l_quantit FROM lineitem"]);
    assert!(stderr(&unknown).contains("did you mean \"l_quantity\""), "{}", stderr(&unknown));

    let missing = run(&["-c", "CREATE TABLE t (a INTEGER); COPY t FROM '/nonexistent/file.csv'"]);
    assert!(stderr(&missing).contains("does not exist"), "{}", stderr(&missing));

    let types = run(&["-c", "CREATE TABLE t (a INTEGER, b VARCHAR); SELECT a + b FROM t"]);
    assert!(stderr(&types).contains("operator + is not defined for INTEGER and VARCHAR"), "{}", stderr(&types));

    let cast = run(&["-c", "SELECT CAST('abc' AS INTEGER)"]);
    assert!(stderr(&cast).contains("invalid input for INTEGER: 'abc'"), "{}", stderr(&cast));
}

#[test]
fn failed_copy_leaves_the_table_unchanged() {
    let dir = temp_dir("copy");
    let good = dir.join("good.csv");
    let bad = dir.join("bad.csv");
    std::fs::write(&good, "1|one|\n2|two|\n").expect("write");
    let mut bad_rows: String = (0..5000).map(|i| format!("{i}|row{i}|\n")).collect();
    bad_rows.push_str("oops|broken|\n");
    std::fs::write(&bad, bad_rows).expect("write");
    let sql = format!(
        "CREATE TABLE t (a INTEGER, b VARCHAR(10));\nCOPY t FROM '{}' (DELIMITER '|');\nCOPY t FROM '{}' (DELIMITER '|');",
        good.display(),
        bad.display()
    );
    let out = run(&["-c", &sql]);
    let message = stderr(&out);
    assert!(message.contains("bad.csv:5001") && message.contains("column 1 (\"a\")"), "{message}");
    // Through the library: the failed COPY added nothing.
    let out = apiary()
        .args(["--format", "csv"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            let script = format!(
                "CREATE TABLE t (a INTEGER, b VARCHAR(10));\nCOPY t FROM '{}' (DELIMITER '|');\nSELECT count(*) AS n FROM t;",
                good.display()
            );
            child.stdin.take().expect("stdin").write_all(script.as_bytes())?;
            child.wait_with_output()
        })
        .expect("run");
    assert_eq!(stdout(&out), "n\n2\n");
    let lib_db = apiary::Database::open_in_memory().expect("db");
    let mut conn = lib_db.connect();
    conn.execute("CREATE TABLE t (a INTEGER, b VARCHAR(10))").expect("create");
    conn.execute(&format!("COPY t FROM '{}' (DELIMITER '|')", good.display())).expect("copy");
    assert!(conn.execute(&format!("COPY t FROM '{}' (DELIMITER '|')", bad.display())).is_err());
    let count = conn.query("SELECT count(*) FROM t").expect("count");
    assert_eq!(count.value(0, 0), Some(apiary::ScalarValue::Int64(2)));
}

/// Parses the `|`-separated reference answer and compares it with JSON rows.
fn compare_json(line: &str, expected: &str) -> Result<(), String> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let rows = value["rows"].as_array().ok_or("no rows")?;
    let mut lines = expected.strip_suffix('\n').unwrap_or(expected).split('\n');
    lines.next();
    let expected_rows: Vec<Vec<&str>> = lines.map(|l| l.split('|').collect()).collect();
    if rows.len() != expected_rows.len() {
        return Err(format!("expected {} rows, got {}", expected_rows.len(), rows.len()));
    }
    for (r, (got, want)) in rows.iter().zip(&expected_rows).enumerate() {
        let got = got.as_array().ok_or("row is not an array")?;
        for (c, (g, w)) in got.iter().zip(want).enumerate() {
            let ok = match (g, w.parse::<f64>()) {
                (serde_json::Value::Number(n), Ok(w)) => {
                    let g = n.as_f64().unwrap_or(f64::NAN);
                    (g - w).abs() <= 0.01 || (g - w).abs() <= 1e-6 * g.abs().max(w.abs())
                }
                (serde_json::Value::String(s), _) => s.trim_end() == w.trim_end(),
                (serde_json::Value::Null, _) => w.is_empty(),
                (other, _) => other.as_str() == Some(*w) || other.to_string().as_str() == *w,
            };
            if !ok {
                return Err(format!("row {r} column {c}: expected {w}, got {g}"));
            }
        }
    }
    Ok(())
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// TPC-H SF0.1 from `.tbl` files: standard DDL, COPY, the 22 queries through
/// `apiary --format json -f`, compared with the reference answers.
#[test]
fn tpch_sf01_from_tbl_files() {
    let dir = temp_dir("tpch");
    let generated = run(&["tpch-gen", "--sf", "0.1", "--dir", dir.to_str().expect("path")]);
    assert!(generated.status.success(), "{}", stderr(&generated));
    let mut script = String::from(apiary::tpch::SCHEMA);
    for table in apiary::tpch::TABLES {
        script.push_str(&format!("COPY {table} FROM '{}' (DELIMITER '|');\n", dir.join(format!("{table}.tbl")).display()));
    }
    let root = repository();
    for q in 1..=22 {
        let sql = std::fs::read_to_string(root.join(format!("tpch/queries/q{q:02}.sql"))).expect("query file");
        script.push_str(&sql);
        script.push('\n');
    }
    let script_path = dir.join("tpch.sql");
    std::fs::write(&script_path, script).expect("write script");
    let out = run(&["--format", "json", "-f", script_path.to_str().expect("path")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 22, "one JSON line per query");
    let mut failures = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let expected = std::fs::read_to_string(root.join(format!("tpch/answers/sf0.1/q{:02}.csv", i + 1))).expect("answer");
        if let Err(why) = compare_json(line, &expected) {
            failures.push(format!("Q{}: {why}", i + 1));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `apiary bench tpch` prints one JSON line per query and variant, checks the answers,
/// and writes them in the reference format with --results.
#[test]
fn bench_variants_and_results() {
    let dir = temp_dir("bench");
    let results = dir.join("answers");
    let out = run(&[
        "bench",
        "tpch",
        "--sf",
        "0.01",
        "--runs",
        "1",
        "--queries",
        "1,13",
        "--variant",
        "serial=SET threads = 1; SET staging = off",
        "--results",
        results.to_str().expect("path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].contains("\"q\":1,\"variant\":\"default\"") && lines[0].contains("\"correct\":true"), "{}", lines[0]);
    assert!(lines[1].contains("\"threads\":1,\"q\":1,\"variant\":\"serial\"") && lines[1].contains("\"correct\":true"), "{}", lines[1]);
    assert!(lines[3].contains("\"q\":13,\"variant\":\"serial\"") && lines[3].contains("\"correct\":true"), "{}", lines[3]);
    let written = std::fs::read_to_string(results.join("q13.csv")).expect("q13 answer written");
    let reference = std::fs::read_to_string(repository().join("tpch/answers/sf0.01/q13.csv")).expect("reference");
    assert_eq!(written.lines().count(), reference.lines().count());
    assert_eq!(written.lines().next(), reference.lines().next(), "same header");

    let bad = run(&["bench", "tpch", "--variant", "nothing"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("expected NAME=SQL"), "{}", stderr(&bad));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_fuzz_summary_and_workload_replay() {
    // A short campaign prints one JSON summary line (whatever it finds).
    let fuzz = run(&["bench", "fuzz", "--seed", "3", "--queries", "12", "--configs", "default", "--reduce", "0"]);
    let summary: serde_json::Value =
        serde_json::from_str(stdout(&fuzz).trim()).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&fuzz), stderr(&fuzz)));
    assert_eq!(summary["seed"], 3);
    assert!(summary["checks"].as_u64().unwrap_or(0) >= 12, "{summary}");

    // The emitted workload replays as one JSON line per query.
    let dir = temp_dir("fuzz");
    let workload = dir.join("workload.jsonl");
    let emit = run(&["bench", "fuzz", "--seed", "3", "--queries", "25", "--emit", workload.to_str().unwrap()]);
    assert!(emit.status.success(), "{}", stderr(&emit));
    let text = std::fs::read_to_string(&workload).expect("workload");
    let queries = text.lines().filter(|l| l.contains("\"kind\":\"query\"")).count();
    assert_eq!(queries, 25);
    assert!(text.lines().any(|l| l.contains("CREATE TABLE")));
    let replay = run(&["bench", "replay", workload.to_str().unwrap(), "--from", "5"]);
    assert!(replay.status.success(), "{}", stderr(&replay));
    let lines: Vec<serde_json::Value> = stdout(&replay).lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    assert_eq!(lines.len(), 20);
    assert_eq!(lines[0]["id"], 5);
    assert!(lines.iter().all(|l| l.get("rows").is_some() || l.get("error").is_some()));
    let _ = std::fs::remove_dir_all(dir);
}

/// Ctrl-C (SIGINT) cancels the running statement; the script goes on with the next
/// statement only in the interactive shell, so here the program reports the cancel and
/// stops with a failure, promptly.
#[test]
fn ctrl_c_cancels_the_running_statement() {
    // A query over 10^10 row pairs that starts at once: generating data first (TPC-H) took
    // over the wait on a loaded machine, so SIGINT came before the handler was set.
    let child = apiary()
        .args(["-c", "SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range + b.range < 0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Long enough to start the query (which runs for minutes).
    std::thread::sleep(std::time::Duration::from_secs(3));
    let signalled = std::time::Instant::now();
    // SAFETY: sends a signal to our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let output = child.wait_with_output().unwrap();
    let waited = signalled.elapsed();
    assert!(stderr(&output).contains("query interrupted"), "stderr: {}", stderr(&output));
    assert!(!output.status.success());
    assert!(waited < std::time::Duration::from_secs(30), "the cancel took {waited:?}");
}
