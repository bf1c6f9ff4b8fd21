//! Runs the SQL test corpus (`tests/sql/**/*.slt`, sqllogictest format) against Apiary,
//! once per configuration of the matrix below, so rarely taken paths (one thread, tiny
//! vectors, many small blocks) run under every test.
//!
//! Regenerate expected results after an intended change with
//! `UPDATE_SLT=1 cargo test -p apiary --test sqllogictest` (review the diff!).
//! Run one file with `SLT_FILTER=join cargo test -p apiary --test sqllogictest`.

use std::path::{Path, PathBuf};

use apiary::{ApiaryError, Connection, DataType, Database};
use sqllogictest::{DBOutput, DefaultColumnType};

struct ApiaryDb {
    conn: Connection,
}

impl sqllogictest::DB for ApiaryDb {
    type Error = ApiaryError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, ApiaryError> {
        let result = self.conn.query(sql)?;
        if !result.has_rows() {
            let rows = match result.kind {
                apiary::ResultKind::Statement { rows_affected } => rows_affected.unwrap_or(0),
                apiary::ResultKind::Rows => 0,
            };
            return Ok(DBOutput::StatementComplete(rows));
        }
        let types = result
            .types
            .iter()
            .map(|t| match t {
                t if t.is_integer() => DefaultColumnType::Integer,
                t if t.is_float() || t.is_decimal() => DefaultColumnType::FloatingPoint,
                DataType::Boolean => DefaultColumnType::Text,
                _ => DefaultColumnType::Text,
            })
            .collect();
        let mut rows = Vec::new();
        for chunk in &result.chunks {
            for r in 0..chunk.row_count() {
                rows.push(
                    (0..chunk.column_count())
                        .map(|c| match result.cell_text(chunk, r, c) {
                            None => "NULL".to_string(),
                            Some(text) if text.is_empty() => "(empty)".to_string(),
                            Some(text) => text,
                        })
                        .collect(),
                );
            }
        }
        Ok(DBOutput::Rows { types, rows })
    }

    fn engine_name(&self) -> &str {
        "apiary"
    }
}

/// Settings applied before each file, one run per entry.
const CONFIGURATIONS: &[(&str, &[&str])] = &[
    ("default", &[]),
    ("small", &["SET threads = 1", "SET vector_size = 64", "SET block_size = 100", "SET jit = always"]),
    ("parallel-small-blocks", &["SET threads = 2", "SET vector_size = 128", "SET block_size = 64"]),
];

fn slt_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            slt_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "slt") {
            out.push(path);
        }
    }
}

fn connect(settings: &'static [&'static str]) -> impl Fn() -> std::future::Ready<Result<ApiaryDb, ApiaryError>> {
    move || {
        let db = Database::open_in_memory().expect("in-memory database");
        let mut conn = db.connect();
        for statement in settings {
            conn.execute(statement).expect("configuration statement");
        }
        std::future::ready(Ok(ApiaryDb { conn }))
    }
}

#[test]
fn sql_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/sql");
    let mut files = Vec::new();
    slt_files(&root, &mut files);
    assert!(!files.is_empty(), "no .slt files under {}", root.display());
    if let Ok(filter) = std::env::var("SLT_FILTER") {
        files.retain(|f| f.to_string_lossy().contains(&filter));
    }
    if std::env::var("UPDATE_SLT").is_ok() {
        for file in &files {
            let mut runner = sqllogictest::Runner::new(connect(&[]));
            futures::executor::block_on(runner.update_test_file(
                file,
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::default_column_validator,
            ))
            .unwrap_or_else(|e| panic!("updating {}: {e}", file.display()));
        }
        return;
    }
    let mut failures = Vec::new();
    for (name, settings) in CONFIGURATIONS {
        for file in &files {
            let mut runner = sqllogictest::Runner::new(connect(settings));
            runner.add_label(name);
            if let Err(e) = runner.run_file(file) {
                failures.push(format!("[{name}] {}: {e}", file.strip_prefix(&root).unwrap_or(file).display()));
            }
        }
    }
    if !failures.is_empty() {
        panic!("{} failure(s):\n{}", failures.len(), failures.join("\n\n"));
    }
}
