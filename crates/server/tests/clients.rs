//! Real PostgreSQL clients against the server, each started here: `psql` (Debian package
//! postgresql-client), psycopg 3 and the PostgreSQL JDBC driver (both installed by
//! `tests/clients/setup.sh`, which `.ci/run` runs). A missing client fails the test
//! with what to install: these checks never pass by being skipped.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use apiary_server::ServerConfig;
use common::*;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A client program, or a failure that says how to get it.
fn require(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is missing ({}): run `bash tests/clients/setup.sh` (and install postgresql-client and a JDK)",
        path.display()
    );
    path
}

fn psql() -> PathBuf {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|p| p.join("psql")).find(|p| p.exists()))
        .unwrap_or_default();
    found.unwrap_or_else(|| panic!("psql is missing: install the Debian package postgresql-client (.ci/run does)"))
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn psql_command(port: u16) -> Command {
    let mut command = Command::new(psql());
    command.args(["-X", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", "apiary", "-d", "apiary", "-v", "ON_ERROR_STOP=1"]);
    command.env("PGCONNECT_TIMEOUT", "10");
    command
}

fn run_psql(port: u16, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = psql_command(port);
    command.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().expect("psql starts");
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    } else {
        drop(child.stdin.take());
    }
    child.wait_with_output().unwrap()
}

#[test]
fn psql_describes_queries_copies_and_cancels() {
    let db = tpch_database(0.01);
    let server = start(db.clone(), ServerConfig::default());
    let port = server.addr.port();
    let output = run_psql(port, &["-c", "\\dt"], None);
    let listing = text(&output);
    assert!(output.status.success() && listing.contains("lineitem") && listing.contains("(9 rows)"), "{listing}");
    let output = run_psql(port, &["-c", "\\d lineitem"], None);
    let described = text(&output);
    assert!(output.status.success(), "{described}");
    assert!(described.contains("Table \"public.lineitem\""), "{described}");
    assert!(
        described.contains("l_comment") && described.contains("character varying(44)") && described.contains("numeric(15,2)"),
        "{described}"
    );
    // A TPC-H query through psql matches the engine's own answer.
    let q3 = std::fs::read_to_string(repo_root().join("tpch/queries/q03.sql")).unwrap();
    let output = run_psql(port, &["-A", "-t", "-F", "|", "-c", &q3], None);
    assert!(output.status.success(), "{}", text(&output));
    let expected = db.connect().query(&q3).unwrap();
    let lines: Vec<String> = String::from_utf8_lossy(&output.stdout).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), expected.row_count());
    let first: Vec<String> =
        (0..expected.column_count()).map(|c| apiary::QueryResult::format_cell(&expected.chunks[0], 0, c).unwrap()).collect();
    assert_eq!(lines[0].split('|').next(), first.first().map(String::as_str), "{lines:?} vs {first:?}");
    // COPY FROM STDIN with psql's data on standard input.
    let output = run_psql(port, &["-c", "CREATE TABLE pc (id INTEGER, name VARCHAR)"], None);
    assert!(output.status.success(), "{}", text(&output));
    let output = run_psql(port, &["-c", "COPY pc FROM STDIN"], Some("1\tone\n2\t\\N\n3\tthree\n"));
    assert!(text(&output).contains("COPY 3"), "{}", text(&output));
    let output = run_psql(port, &["-A", "-t", "-c", "SELECT count(*), count(name) FROM pc"], None);
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "3|2");
    // Ctrl-C: psql sends a CancelRequest and the query stops at once.
    let child = psql_command(port).args(["-c", LONG_QUERY]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let interrupted = Instant::now();
    // SAFETY: sending SIGINT to the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    let said = text(&output);
    assert!(interrupted.elapsed() < Duration::from_secs(3), "psql took {:?} after Ctrl-C", interrupted.elapsed());
    assert!(said.contains("Cancel request sent") && said.contains("interrupted"), "{said}");
    assert_eq!(db.query_memory_bytes(), 0, "the cancelled query's memory is released");
}

/// psql's `\dv` lists views, `\d view` describes a view's columns and `\dt` lists the
/// tables only; `pg_get_viewdef` and `pg_views` give a view's query; the statements'
/// tags are PostgreSQL's and errors about views carry its SQLSTATEs.
#[test]
fn psql_lists_and_describes_views() {
    let db = apiary::Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    conn.execute("CREATE TABLE items (id INTEGER NOT NULL, name VARCHAR(20), price DECIMAL(8,2))").unwrap();
    conn.execute("INSERT INTO items VALUES (1, 'pen', 1.50), (2, 'ink', 7.25)").unwrap();
    conn.execute("CREATE VIEW dear (item, cost) AS SELECT name, price FROM items WHERE price > 5").unwrap();
    conn.execute("CREATE TABLE keyed (id SERIAL PRIMARY KEY, v INTEGER); CREATE INDEX keyed_v ON keyed (v)").unwrap();
    let server = start(db, ServerConfig::default());
    let port = server.addr.port();
    let output = run_psql(port, &["-c", "\\dv"], None);
    let listing = text(&output);
    assert!(output.status.success() && listing.contains("dear") && listing.contains("view") && !listing.contains("items"), "{listing}");
    let output = run_psql(port, &["-c", "\\dt"], None);
    let listing = text(&output);
    assert!(output.status.success() && listing.contains("items") && !listing.contains("dear") && !listing.contains("keyed_"), "{listing}");
    // Sequences and indexes are relations too.
    let output = run_psql(port, &["-c", "\\ds"], None);
    let listing = text(&output);
    assert!(output.status.success() && listing.contains("keyed_id_seq") && listing.contains("sequence"), "{listing}");
    let output = run_psql(port, &["-c", "\\di"], None);
    let listing = text(&output);
    assert!(output.status.success() && listing.contains("keyed_v") && listing.contains("keyed_pkey"), "{listing}");
    let output = run_psql(port, &["-c", "\\d keyed"], None);
    assert!(output.status.success(), "{}", text(&output));
    let output = run_psql(port, &["-c", "\\d dear"], None);
    let described = text(&output);
    assert!(output.status.success(), "{described}");
    assert!(described.contains("View \"public.dear\""), "{described}");
    assert!(described.contains("item") && described.contains("character varying(20)") && described.contains("numeric(8,2)"), "{described}");
    let output = run_psql(port, &["-A", "-t", "-c", "SELECT pg_get_viewdef(c.oid, true) FROM pg_class c WHERE c.relname = 'dear'"], None);
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "SELECT name, price FROM items WHERE price > 5", "{}", text(&output));
    // Through the server: a view answers queries, and the errors name their SQLSTATE.
    let output = run_psql(port, &["-A", "-t", "-c", "SELECT item, cost FROM dear"], None);
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "ink|7.25", "{}", text(&output));
    let output = run_psql(port, &["-v", "VERBOSITY=verbose", "-c", "DROP TABLE items"], None);
    assert!(!output.status.success() && text(&output).contains("2BP01"), "{}", text(&output));
    let output = run_psql(port, &["-v", "VERBOSITY=verbose", "-c", "DROP TABLE dear"], None);
    assert!(!output.status.success() && text(&output).contains("42809"), "{}", text(&output));
    let output = run_psql(port, &["-v", "VERBOSITY=verbose", "-c", "CREATE VIEW dear AS SELECT 1"], None);
    assert!(!output.status.success() && text(&output).contains("42P07"), "{}", text(&output));
    // Regression: a table that exists already was 42P01 (undefined_table), not 42P07.
    let output = run_psql(port, &["-v", "VERBOSITY=verbose", "-c", "CREATE TABLE items (x INTEGER)"], None);
    assert!(!output.status.success() && text(&output).contains("42P07"), "{}", text(&output));
    let output = run_psql(port, &["-c", "CREATE VIEW cheap AS SELECT * FROM items WHERE price < 5"], None);
    assert!(output.status.success() && text(&output).contains("CREATE VIEW"), "{}", text(&output));
    let output = run_psql(port, &["-c", "CREATE VIEW gone AS SELECT 1 AS one", "-c", "DROP VIEW gone"], None);
    assert!(output.status.success() && text(&output).contains("DROP VIEW"), "{}", text(&output));
    let output = run_psql(port, &["-A", "-t", "-c", "SELECT viewname FROM pg_views ORDER BY 1"], None);
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "cheap\ndear", "{}", text(&output));
}

#[test]
fn psycopg_parameters_executemany_cursors_and_copy() {
    let server = start(tpch_database(0.01), ServerConfig::default());
    let python = require(repo_root().join("tests/clients/.venv/bin/python"), "python with psycopg");
    let output = Command::new(python)
        .arg(repo_root().join("tests/clients/psycopg_check.py"))
        .args(["127.0.0.1", &server.addr.port().to_string()])
        .output()
        .unwrap();
    assert!(output.status.success() && text(&output).contains("psycopg: ok"), "{}", text(&output));
}

#[test]
fn jdbc_metadata_and_queries() {
    let server = start(tpch_database(0.01), ServerConfig::default());
    let jar = require(repo_root().join("tests/clients/lib/postgresql-42.7.14.jar"), "the PostgreSQL JDBC driver");
    let java = std::env::var_os("JAVA_HOME")
        .map(|home| PathBuf::from(home).join("bin/java"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| "java".into());
    let url = format!("jdbc:postgresql://127.0.0.1:{}/apiary?user=apiary", server.addr.port());
    let output = Command::new(&java)
        .arg("-cp")
        .arg(&jar)
        .arg(repo_root().join("tests/clients/JdbcSmoke.java"))
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("java cannot run ({e}): install a JDK 17+ (.ci/run does)"));
    assert!(output.status.success() && text(&output).contains("jdbc: ok"), "{}", text(&output));
}

#[test]
fn psql_over_tls_and_tls_required() {
    let dir = std::env::temp_dir().join(format!("apiary-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    let config = ServerConfig { tls: Some((cert, key)), require_tls: true, ..ServerConfig::default() };
    let server = start(apiary::Database::open_in_memory().unwrap(), config);
    let port = server.addr.port().to_string();
    let run = |sslmode: &str| {
        Command::new(psql())
            .args(["-X", "-A", "-t", "-c", "SELECT 41 + 1"])
            .arg(format!("host=127.0.0.1 port={port} user=apiary dbname=apiary sslmode={sslmode} connect_timeout=10"))
            .output()
            .unwrap()
    };
    let output = run("require");
    assert!(output.status.success() && String::from_utf8_lossy(&output.stdout).trim() == "42", "{}", text(&output));
    let output = run("disable");
    assert!(!output.status.success() && text(&output).contains("only TLS connections"), "{}", text(&output));
    let _ = std::fs::remove_dir_all(&dir);
}
