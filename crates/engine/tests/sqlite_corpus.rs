//! Runs SQLite's public sqllogictest corpus (`select1`–`select5.test`, `random/**`, and of
//! changing data `index/delete/**` and `evidence/slt_lang_update.test`) against Apiary,
//! with the conventions of an engine named `postgresql`.
//!
//! ```text
//! tests/sqlite/fetch_corpus.sh ─▶ <corpus>/test/{select1..5.test, random/**, index/delete/**, evidence/..}
//!        │ (Maven Central artifact, checksum pinned)
//!        ▼
//! each file: parse (sqllogictest crate) ─▶ one record at a time through Runner::run
//!        │   skipif/onlyif: the engine is `postgresql`; CREATE INDEX is a no-op
//!        ▼
//! outcome per record (passed / failed with a class / skipped)
//!        ▼
//! compare with tests/sqlite/expected_failures.txt (file:line of each known failure)
//! ```
//!
//! How the corpus is read, as SQLite's own harness does for an ODBC engine:
//! * Values are formatted by the column type the record declares: `I` as an integer
//!   (fractions truncated, booleans 1/0), `R` with three decimals, `T` as text with control
//!   characters shown as `@`; NULL is `NULL`, an empty string `(empty)`. A result with a
//!   different number of columns than declared is an error.
//! * Expected values are one per line; results longer than `hash-threshold` values compare
//!   by MD5 (the crate's `N values hashing to H`); `rowsort`/`valuesort` sort the formatted
//!   values as strings.
//! * Records under `skipif postgresql` are skipped, `onlyif postgresql` run, and `onlyif`
//!   any other engine (mysql, mssql, oracle, sqlite) skipped. The trailing `# reason` on
//!   those lines is dropped before parsing (the crate's parser takes a bare label); line
//!   numbers are kept.
//! * `CREATE [UNIQUE] INDEX` statements are skipped (counted as skipped): Apiary has no
//!   indexes, and an index changes no query result. Nothing else in the files is rewritten.
//!
//! Which files run (`APIARY_SQLITE_CORPUS`):
//! * unset or `ci`: `select1`–`select5`, the fixed sample [`CI_RANDOM_SAMPLE`] of
//!   `random/` (22 of its 391 files) and the 15 files of changing data (about 1.5 minutes
//!   in the dev profile);
//! * `full`: all 411 files (5.5 million records; about 10 minutes).
//!
//! `APIARY_SQLITE_FILTER=expr/` runs only the files whose path contains the text;
//! `APIARY_SQLITE_SETTINGS="SET threads = 1"` runs statements on each new database first.
//!
//! The corpus lives in `$APIARY_SQLITE_CORPUS_DIR`, else `<repo>/target/sqlite-corpus`. When
//! it is missing the test runs `tests/sqlite/fetch_corpus.sh` (needs Maven); if that
//! fails the test fails: it never passes without running the corpus.
//!
//! Known failures are listed in `tests/sqlite/expected_failures.txt` (`file:line class`,
//! for every file of the corpus). The test fails on a failure not in the list and on a
//! listed record of a file it ran that now passes (the list must shrink with the fixes).
//! After an intended change, regenerate the entries of the files that ran with
//! `APIARY_SQLITE_UPDATE=1` and review the diff (entries still failing keep their text, so
//! notes added by hand stay).
//! `tests/sqlite/STATUS.md` summarises the outcome per file and the failure classes; every
//! run writes the per-file table and each failure's details to
//! `<corpus>/report-<mode>.md` and `<corpus>/failures-<mode>.tsv`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiary::{ApiaryError, Connection, Database, ScalarValue};
use sqllogictest::{DBOutput, DefaultColumnType, QueryExpect, Record, RecordOutput, Runner, StatementExpect, TestError, TestErrorKind};

/// The sample of `random/` run in CI: in each directory, the files `slt_good_N.test` whose
/// N is a multiple of the stride (groupby has only 14 files, so its stride is smaller).
/// Fixed, so a run is reproducible and the expected-failure list stays exact.
const CI_RANDOM_SAMPLE: &[(&str, u32)] = &[("aggregates", 20), ("expr", 20), ("groupby", 10), ("select", 20)];

/// The directories of `random/`, in the order files are run and listed.
const RANDOM_GROUPS: &[&str] = &["aggregates", "expr", "groupby", "select"];

const SELECT_FILES: &[&str] = &["select1.test", "select2.test", "select3.test", "select4.test", "select5.test"];

/// Files of changing data: DELETE over tables of 1 to 10,000 rows (`index/delete/<rows>/`),
/// and the evidence file of UPDATE's semantics. All of them run in CI.
const DML_DIR: &str = "index/delete";
const DML_FILES: &[&str] = &["evidence/slt_lang_update.test"];

/// The engine name the corpus's `skipif`/`onlyif` conditions are matched against.
const ENGINE_NAME: &str = "postgresql";

/// SQLite's harness compares results of more values than this by hash unless a file sets
/// `hash-threshold` (select1, select4 and select5 rely on the default).
const DEFAULT_HASH_THRESHOLD: usize = 8;

const EXPECTED_FAILURES: &str = "tests/sqlite/expected_failures.txt";

/// How many unexpected failures the panic message shows in full.
const SHOWN_FAILURES: usize = 20;

fn repo_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.ancestors().nth(2).unwrap_or(manifest_dir).to_path_buf()
}

// ---------------------------------------------------------------------------------------
// The database under test
// ---------------------------------------------------------------------------------------

/// Apiary behind the sqllogictest `DB` trait. The runner passes only SQL text, so the
/// column types the running record declares come through `declared_types`, set just
/// before each query record runs.
struct CorpusDb {
    conn: Connection,
    declared_types: Arc<Mutex<Vec<DefaultColumnType>>>,
}

/// Why a statement failed: Apiary's error, or the harness's (a result that does not have
/// the declared number of columns).
#[derive(Debug)]
enum CorpusError {
    Apiary(ApiaryError),
    Harness(String),
}

impl std::fmt::Display for CorpusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorpusError::Apiary(e) => write!(f, "{e}"),
            CorpusError::Harness(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for CorpusError {}

impl sqllogictest::DB for CorpusDb {
    type Error = CorpusError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, CorpusError> {
        let result = self.conn.query(sql).map_err(CorpusError::Apiary)?;
        if !result.has_rows() {
            let rows = match result.kind {
                apiary::ResultKind::Statement { rows_affected } => rows_affected.unwrap_or(0),
                apiary::ResultKind::Rows => 0,
            };
            return Ok(DBOutput::StatementComplete(rows));
        }
        let declared = self.declared_types.lock().expect("declared types lock").clone();
        if declared.len() != result.column_count() {
            return Err(CorpusError::Harness(format!(
                "wrong number of result columns: expected {} but got {}",
                declared.len(),
                result.column_count()
            )));
        }
        let rows = result.rows().map(|row| row.iter().zip(&declared).map(|(v, t)| format_value(v, t)).collect()).collect();
        Ok(DBOutput::Rows { types: declared, rows })
    }

    fn engine_name(&self) -> &str {
        ENGINE_NAME
    }
}

/// Formats one value as SQLite's harness does for the declared column type.
fn format_value(value: &ScalarValue, declared: &DefaultColumnType) -> String {
    if value.is_null() {
        return "NULL".to_string();
    }
    match declared {
        DefaultColumnType::Integer => integer_value(value).to_string(),
        DefaultColumnType::FloatingPoint => format!("{:.3}", float_value(value)),
        DefaultColumnType::Text | DefaultColumnType::Any => {
            let text = match value {
                ScalarValue::Utf8(s) => s.clone(),
                ScalarValue::Boolean(b) => if *b { "1" } else { "0" }.to_string(),
                other => other.to_string(),
            };
            if text.is_empty() {
                "(empty)".to_string()
            } else {
                text.chars().map(|c| if (' '..='~').contains(&c) { c } else { '@' }).collect()
            }
        }
    }
}

/// A value read as an integer, like ODBC's `SQL_C_SLONG`: fractions truncate toward zero,
/// text reads its leading integer (`atol`).
fn integer_value(value: &ScalarValue) -> i64 {
    match value {
        ScalarValue::Boolean(b) => i64::from(*b),
        ScalarValue::Int16(v) => i64::from(*v),
        ScalarValue::Int32(v) => i64::from(*v),
        ScalarValue::Int64(v) => *v,
        ScalarValue::Float32(v) => *v as i64,
        ScalarValue::Float64(v) => *v as i64,
        ScalarValue::Decimal(v, _, scale) => (*v / 10i128.pow(u32::from(*scale))) as i64,
        ScalarValue::Utf8(s) => leading_integer(s),
        other => leading_integer(&other.to_string()),
    }
}

fn leading_integer(text: &str) -> i64 {
    let text = text.trim_start();
    let (sign, digits) = match text.as_bytes().first() {
        Some(b'-') => (-1, &text[1..]),
        Some(b'+') => (1, &text[1..]),
        _ => (1, text),
    };
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    sign * digits[..end].parse::<i64>().unwrap_or(0)
}

/// A value read as a double (`SQL_C_DOUBLE`; text reads its leading number, like `atof`).
fn float_value(value: &ScalarValue) -> f64 {
    match value {
        ScalarValue::Boolean(b) => f64::from(u8::from(*b)),
        ScalarValue::Int16(v) => f64::from(*v),
        ScalarValue::Int32(v) => f64::from(*v),
        ScalarValue::Int64(v) => *v as f64,
        ScalarValue::Float32(v) => f64::from(*v),
        ScalarValue::Float64(v) => *v,
        ScalarValue::Decimal(v, _, scale) => *v as f64 / 10f64.powi(i32::from(*scale)),
        other => {
            let text = match other {
                ScalarValue::Utf8(s) => s.clone(),
                other => other.to_string(),
            };
            let text = text.trim();
            (1..=text.len()).rev().find_map(|end| text.get(..end)?.parse::<f64>().ok()).unwrap_or(0.0)
        }
    }
}

/// Compares results as SQLite's harness does: one expected line per value.
fn sqlite_validator(_normalizer: sqllogictest::Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    actual.iter().flatten().eq(expected.iter())
}

// ---------------------------------------------------------------------------------------
// Running a file
// ---------------------------------------------------------------------------------------

/// A failed record: where, its failure class (for grouping) and the full message.
#[derive(Debug, Clone)]
struct Failure {
    line: u32,
    class: String,
    detail: String,
    /// Apiary's output for a wrong result (rows of space-separated values, or the hash).
    actual: Option<String>,
}

#[derive(Debug, Default)]
struct FileOutcome {
    passed: usize,
    skipped_condition: usize,
    skipped_index: usize,
    failures: Vec<Failure>,
    elapsed: Duration,
}

/// Drops the `# reason` that the corpus puts after `skipif`/`onlyif` labels, which the
/// crate's parser does not accept. The line count stays the same.
fn strip_condition_comments(script: &str) -> String {
    let mut out = String::with_capacity(script.len());
    for line in script.lines() {
        let stripped = if line.starts_with("skipif ") || line.starts_with("onlyif ") {
            line.split('#').next().unwrap_or(line).trim_end()
        } else {
            line
        };
        out.push_str(stripped);
        out.push('\n');
    }
    out
}

fn is_create_index(sql: &str) -> bool {
    let words: Vec<String> = sql.split_whitespace().take(3).map(|w| w.to_ascii_uppercase()).collect();
    matches!(words.as_slice(), [c, i, ..] if c == "CREATE" && i == "INDEX")
        || matches!(words.as_slice(), [c, u, i] if c == "CREATE" && u == "UNIQUE" && i == "INDEX")
}

fn run_file(path: &Path, name: &str) -> FileOutcome {
    let started = Instant::now();
    let mut outcome = FileOutcome::default();
    let script = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let records = sqllogictest::parse_with_name::<DefaultColumnType>(&strip_condition_comments(&script), name)
        .unwrap_or_else(|e| panic!("parsing {name}: {e}"));

    let declared_types = Arc::new(Mutex::new(Vec::new()));
    let shared_types = Arc::clone(&declared_types);
    let settings = std::env::var("APIARY_SQLITE_SETTINGS").unwrap_or_default();
    let mut runner = Runner::new(move || {
        let connect = || -> Result<CorpusDb, ApiaryError> {
            let mut conn = Database::open_in_memory()?.connect();
            if !settings.trim().is_empty() {
                conn.execute(&settings)?;
            }
            Ok(CorpusDb { conn, declared_types: Arc::clone(&shared_types) })
        };
        std::future::ready(connect().map_err(CorpusError::Apiary))
    });
    runner.with_validator(sqlite_validator);
    runner.with_hash_threshold(DEFAULT_HASH_THRESHOLD);

    for record in records {
        let line = match &record {
            Record::Statement { sql, expected: StatementExpect::Ok, .. } if is_create_index(sql) => {
                outcome.skipped_index += 1;
                continue;
            }
            Record::Statement { loc, .. } => Some(loc.line()),
            Record::Query { loc, expected, .. } => {
                let types = match expected {
                    QueryExpect::Results { types, .. } => types.clone(),
                    QueryExpect::Error(_) => Vec::new(),
                };
                *declared_types.lock().expect("declared types lock") = types;
                Some(loc.line())
            }
            Record::Halt { .. } => break,
            _ => None,
        };
        let result = runner.run(record);
        let Some(line) = line else {
            if let Err(e) = result {
                panic!("{name}: control record failed: {e}");
            }
            continue;
        };
        match result {
            Ok(RecordOutput::Nothing) => outcome.skipped_condition += 1,
            Ok(_) => outcome.passed += 1,
            Err(error) => {
                let class = classify(&error);
                let actual = match error.kind() {
                    TestErrorKind::QueryResultMismatch { actual, .. } => Some(actual),
                    _ => None,
                };
                outcome.failures.push(Failure { line, class, detail: error.to_string(), actual });
            }
        }
    }
    outcome.elapsed = started.elapsed();
    outcome
}

/// A short class for a failure, to group them: the kind of error and its message with
/// numbers and quoted names masked.
fn classify(error: &TestError) -> String {
    match error.kind() {
        TestErrorKind::QueryResultMismatch { .. } => "wrong result".to_string(),
        TestErrorKind::StatementResultMismatch { .. } => "wrong affected-row count".to_string(),
        TestErrorKind::Ok { .. } => "no error where one was expected".to_string(),
        TestErrorKind::Fail { err, .. } | TestErrorKind::ErrorMismatch { err, .. } => {
            let message = match err.downcast_ref::<CorpusError>() {
                Some(CorpusError::Apiary(e)) => apiary_error_class(e),
                Some(CorpusError::Harness(message)) => message.clone(),
                None => err.to_string(),
            };
            mask(&message)
        }
        other => format!("harness: {}", mask(&other.to_string())),
    }
}

fn apiary_error_class(error: &ApiaryError) -> String {
    match error {
        ApiaryError::Parse(m) => format!("syntax error: {m}"),
        ApiaryError::Bind(m) => format!("bind error: {m}"),
        ApiaryError::Execution(m) => format!("execution error: {m}"),
        ApiaryError::Catalog(m) => format!("catalog error: {m}"),
        other => other.to_string(),
    }
}

/// Masks what varies between instances of one failure class: numbers, quoted text, and
/// the column and table names of the corpus (`col0`, `tab1`, `cor0`, `t1`, `a1`, ...).
fn mask(message: &str) -> String {
    let first_line = message.lines().next().unwrap_or("");
    let mut out = String::new();
    let mut chars = first_line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' || c == '`' {
            out.push(c);
            out.push('…');
            for d in chars.by_ref() {
                if d == c {
                    break;
                }
            }
            out.push(c);
        } else if c.is_ascii_digit() {
            out.push('N');
            while chars.peek().is_some_and(|d| d.is_ascii_digit() || *d == '.') {
                chars.next();
            }
        } else {
            out.push(c);
        }
    }
    let mut masked: String = out.chars().take(120).collect();
    if out.chars().count() > 120 {
        masked.push('…');
    }
    masked
}

// ---------------------------------------------------------------------------------------
// The corpus, the list of known failures, reports
// ---------------------------------------------------------------------------------------

fn corpus_dir() -> PathBuf {
    match std::env::var_os("APIARY_SQLITE_CORPUS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => repo_root().join("target/sqlite-corpus"),
    }
}

/// The corpus's `test/` directory, fetched when missing; panics when it cannot be had.
fn ensure_corpus() -> PathBuf {
    let dir = corpus_dir();
    let test_dir = dir.join("test");
    if !dir.join(".complete").exists() {
        let script = repo_root().join("tests/sqlite/fetch_corpus.sh");
        let status = std::process::Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .status()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            status.success(),
            "the SQLite sqllogictest corpus is missing from {} and {} failed ({status}); \
             it needs Maven and access to Maven Central, or set APIARY_SQLITE_CORPUS_DIR to a copy",
            dir.display(),
            script.display()
        );
    }
    assert!(test_dir.join("select1.test").exists(), "no SQLite corpus in {}", test_dir.display());
    test_dir
}

fn all_files(test_dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = SELECT_FILES.iter().map(|f| f.to_string()).collect();
    for group in RANDOM_GROUPS {
        let dir = test_dir.join("random").join(group);
        let mut names: Vec<(u32, String)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let number = name.strip_prefix("slt_good_")?.strip_suffix(".test")?.parse().ok()?;
                Some((number, name))
            })
            .collect();
        names.sort();
        files.extend(names.into_iter().map(|(_, name)| format!("random/{group}/{name}")));
    }
    let dml = test_dir.join(DML_DIR);
    let mut sizes: Vec<(u32, String)> = std::fs::read_dir(&dml)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dml.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Some((name.parse().ok()?, name))
        })
        .collect();
    sizes.sort();
    for (_, size) in sizes {
        let dir = dml.join(&size);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".test"))
            .collect();
        names.sort();
        files.extend(names.into_iter().map(|name| format!("{DML_DIR}/{size}/{name}")));
    }
    files.extend(DML_FILES.iter().map(|f| f.to_string()));
    files
}

/// Whether a corpus file runs in CI: every select file, and the sample of `random/`.
fn in_ci_sample(file: &str) -> bool {
    if SELECT_FILES.contains(&file) || file.starts_with(DML_DIR) || DML_FILES.contains(&file) {
        return true;
    }
    CI_RANDOM_SAMPLE.iter().any(|(group, stride)| {
        file.strip_prefix("random/")
            .and_then(|f| f.strip_prefix(group))
            .and_then(|f| f.strip_prefix("/slt_good_"))
            .and_then(|f| f.strip_suffix(".test"))
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n % stride == 0)
    })
}

/// `file:line` → class, from the committed list.
fn read_expected_failures() -> BTreeMap<(String, u32), String> {
    let path = repo_root().join(EXPECTED_FAILURES);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut expected = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (location, class) = line.split_once(' ').unwrap_or((line, ""));
        let parsed = location.rsplit_once(':').and_then(|(file, l)| Some((file.to_string(), l.parse::<u32>().ok()?)));
        let Some(key) = parsed else {
            panic!("{EXPECTED_FAILURES}:{}: expected `file:line class`, got {line:?}", number + 1);
        };
        expected.insert(key, class.to_string());
    }
    expected
}

fn write_expected_failures(previous: &BTreeMap<(String, u32), String>, outcomes: &BTreeMap<String, FileOutcome>, order: &[String]) {
    let mut entries: BTreeMap<(usize, u32), (String, String)> = BTreeMap::new();
    let rank = |file: &str| order.iter().position(|f| f == file).unwrap_or(usize::MAX);
    for ((file, line), class) in previous {
        if !outcomes.contains_key(file) {
            entries.insert((rank(file), *line), (file.clone(), class.clone()));
        }
    }
    for (file, outcome) in outcomes {
        for failure in &outcome.failures {
            // A listed record keeps its text: it may carry a note (e.g. `[pg-agrees]`).
            let class = previous.get(&(file.clone(), failure.line)).cloned().unwrap_or_else(|| failure.class.clone());
            entries.insert((rank(file), failure.line), (file.clone(), class));
        }
    }
    let mut text = String::from(
        "# Records of SQLite's sqllogictest corpus that Apiary fails today, as `file:line class`\n\
         # (the line of the record's `statement`/`query`), for every file of the corpus.\n\
         # crates/engine/tests/sqlite_corpus.rs fails on a failure not listed here and on a listed\n\
         # record of a file it ran that passes. Regenerate with APIARY_SQLITE_UPDATE=1 (see the\n\
         # test's header; entries still failing keep their text). `[pg-agrees]`: PostgreSQL gives\n\
         # Apiary's answer or error as well (tests/sqlite/compare_postgres.py), the corpus expects\n\
         # SQLite's. tests/sqlite/STATUS.md explains the classes.\n",
    );
    for ((_, line), (file, class)) in entries {
        writeln!(text, "{file}:{line} {class}").expect("write to string");
    }
    let path = repo_root().join(EXPECTED_FAILURES);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// The per-file table and the failure classes, as Markdown.
fn report(outcomes: &BTreeMap<String, FileOutcome>, order: &[String]) -> String {
    let mut text = String::new();
    writeln!(text, "| file | passed | failed | skipped (conditions) | skipped (CREATE INDEX) | seconds |").unwrap();
    writeln!(text, "|---|---:|---:|---:|---:|---:|").unwrap();
    let mut totals = FileOutcome::default();
    for file in order {
        let Some(o) = outcomes.get(file) else { continue };
        writeln!(
            text,
            "| {file} | {} | {} | {} | {} | {:.1} |",
            o.passed,
            o.failures.len(),
            o.skipped_condition,
            o.skipped_index,
            o.elapsed.as_secs_f64()
        )
        .unwrap();
        totals.passed += o.passed;
        totals.skipped_condition += o.skipped_condition;
        totals.skipped_index += o.skipped_index;
        totals.elapsed += o.elapsed;
        totals.failures.extend(o.failures.iter().cloned());
    }
    writeln!(
        text,
        "| **total** | {} | {} | {} | {} | {:.1} |",
        totals.passed,
        totals.failures.len(),
        totals.skipped_condition,
        totals.skipped_index,
        totals.elapsed.as_secs_f64()
    )
    .unwrap();
    let mut classes: BTreeMap<&str, (usize, BTreeSet<&str>)> = BTreeMap::new();
    for (file, o) in outcomes {
        for f in &o.failures {
            let entry = classes.entry(&f.class).or_default();
            entry.0 += 1;
            entry.1.insert(file);
        }
    }
    let mut classes: Vec<_> = classes.into_iter().collect();
    classes.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
    writeln!(text, "\n| failures | class | files |\n|---:|---|---|").unwrap();
    for (class, (count, files)) in classes {
        let files: Vec<&str> = files.into_iter().collect();
        writeln!(text, "| {count} | {} | {} |", class.replace('|', "\\|"), files.join(", ")).unwrap();
    }
    text
}

fn write_failure_details(path: &Path, outcomes: &BTreeMap<String, FileOutcome>) {
    let escape = |s: &str| s.replace('\t', " ").replace('\n', "\\n");
    let mut text = String::from("location\tclass\tdetail\tactual\n");
    for (file, o) in outcomes {
        for f in &o.failures {
            let actual = f.actual.as_deref().map(escape).unwrap_or_default();
            writeln!(text, "{file}:{}\t{}\t{}\t{actual}", f.line, f.class, escape(&f.detail)).unwrap();
        }
    }
    if let Err(e) = std::fs::write(path, text) {
        eprintln!("could not write {}: {e}", path.display());
    }
}

#[test]
fn sqlite_corpus() {
    let mode = std::env::var("APIARY_SQLITE_CORPUS").unwrap_or_else(|_| "ci".to_string());
    let test_dir = ensure_corpus();
    let order = all_files(&test_dir);
    let mut files: Vec<String> = match mode.as_str() {
        "ci" => order.iter().filter(|f| in_ci_sample(f)).cloned().collect(),
        "full" => order.clone(),
        other => panic!("APIARY_SQLITE_CORPUS={other}: expected `ci` or `full`"),
    };
    if let Ok(filter) = std::env::var("APIARY_SQLITE_FILTER") {
        files.retain(|f| f.contains(&filter));
    }
    assert!(!files.is_empty(), "no corpus file matches APIARY_SQLITE_FILTER");

    let mut outcomes = BTreeMap::new();
    for file in &files {
        let outcome = run_file(&test_dir.join(file), file);
        eprintln!(
            "{file}: {} passed, {} failed, {} skipped in {:.1}s",
            outcome.passed,
            outcome.failures.len(),
            outcome.skipped_condition + outcome.skipped_index,
            outcome.elapsed.as_secs_f64()
        );
        assert!(outcome.passed + outcome.failures.len() > 0, "{file}: no record ran");
        outcomes.insert(file.clone(), outcome);
    }

    let summary = report(&outcomes, &order);
    let corpus_root = test_dir.parent().unwrap_or(&test_dir).to_path_buf();
    if let Err(e) = std::fs::write(corpus_root.join(format!("report-{mode}.md")), &summary) {
        eprintln!("could not write the report: {e}");
    }
    write_failure_details(&corpus_root.join(format!("failures-{mode}.tsv")), &outcomes);
    eprintln!("{summary}");

    let expected = read_expected_failures();
    if std::env::var_os("APIARY_SQLITE_UPDATE").is_some() {
        write_expected_failures(&expected, &outcomes, &order);
        return;
    }

    let mut unexpected = Vec::new();
    let mut now_passing = Vec::new();
    for (file, outcome) in &outcomes {
        let failed: BTreeSet<u32> = outcome.failures.iter().map(|f| f.line).collect();
        for f in &outcome.failures {
            if !expected.contains_key(&(file.clone(), f.line)) {
                unexpected.push(format!("{file}:{} [{}]\n{}", f.line, f.class, f.detail));
            }
        }
        for ((listed_file, line), class) in expected.range((file.clone(), 0)..=(file.clone(), u32::MAX)) {
            debug_assert_eq!(listed_file, file);
            if !failed.contains(line) {
                now_passing.push(format!("{file}:{line} [{class}]"));
            }
        }
    }
    let passed: usize = outcomes.values().map(|o| o.passed).sum();
    let failed: usize = outcomes.values().map(|o| o.failures.len()).sum();
    let skipped: usize = outcomes.values().map(|o| o.skipped_condition + o.skipped_index).sum();
    eprintln!("sqlite corpus ({mode}): {passed} records passed, {failed} failed (listed as known), {skipped} skipped");
    if !unexpected.is_empty() || !now_passing.is_empty() {
        let mut message = String::new();
        if !unexpected.is_empty() {
            writeln!(message, "{} record(s) fail that are not in {EXPECTED_FAILURES}:", unexpected.len()).unwrap();
            for u in unexpected.iter().take(SHOWN_FAILURES) {
                writeln!(message, "{u}\n").unwrap();
            }
            if unexpected.len() > SHOWN_FAILURES {
                writeln!(message, "... and {} more", unexpected.len() - SHOWN_FAILURES).unwrap();
            }
        }
        if !now_passing.is_empty() {
            writeln!(
                message,
                "{} record(s) listed in {EXPECTED_FAILURES} now pass; remove them \
                 (APIARY_SQLITE_UPDATE=1 regenerates the list):",
                now_passing.len()
            )
            .unwrap();
            for p in now_passing.iter().take(SHOWN_FAILURES * 5) {
                writeln!(message, "  {p}").unwrap();
            }
        }
        panic!("{message}");
    }
}
