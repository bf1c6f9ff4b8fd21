//! TPC-DS: the 99 queries at SF0.01 (`tests/tpcds`: DuckDB's dsdgen data as Parquet, the
//! query texts, DuckDB's answers) under several execution configurations, in memory and
//! from a database file. How answers compare is in `tests/tpcds/README.md`; which columns
//! order each answer is in `tests/tpcds/order_keys.txt`.

use std::path::{Path, PathBuf};

use apiary::{Connection, Database, QueryResult};

const TABLES: [&str; 24] = [
    "call_center",
    "catalog_page",
    "catalog_returns",
    "catalog_sales",
    "customer",
    "customer_address",
    "customer_demographics",
    "date_dim",
    "household_demographics",
    "income_band",
    "inventory",
    "item",
    "promotion",
    "reason",
    "ship_mode",
    "store",
    "store_returns",
    "store_sales",
    "time_dim",
    "warehouse",
    "web_page",
    "web_returns",
    "web_sales",
    "web_site",
];

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/tpcds").canonicalize().expect("tests/tpcds")
}

fn load(conn: &mut Connection) {
    let dir = fixture();
    let schema = std::fs::read_to_string(dir.join("schema.sql")).expect("schema.sql");
    conn.execute(&schema).expect("schema");
    for table in TABLES {
        let path = dir.join("data").join(format!("{table}.parquet"));
        conn.execute(&format!("COPY {table} FROM '{}'", path.display())).unwrap_or_else(|e| panic!("loading {table}: {e}"));
    }
}

/// How one answer's rows are compared.
enum Order {
    /// No ORDER BY: as multisets.
    Unordered,
    /// An ORDER BY key is no result column: in order, ties invisible.
    Hidden,
    /// In order of these result columns; rows with equal keys in any order; a LIMIT may cut
    /// the last group of ties.
    Keys(Vec<usize>, Option<usize>),
}

fn order_of(q: usize) -> Order {
    let text = std::fs::read_to_string(fixture().join("order_keys.txt")).expect("order_keys.txt");
    let line = text.lines().find(|l| l.starts_with(&format!("q{q:02} "))).unwrap_or_else(|| panic!("no order for q{q:02}"));
    let mut parts = line.split_whitespace().skip(1);
    match parts.next() {
        Some("unordered") => Order::Unordered,
        Some("hidden") => Order::Hidden,
        Some(keys) => {
            let keys = keys.trim_start_matches("keys=").split(',').map(|k| k.parse().expect("key column")).collect();
            let limit = parts.next().map(|l| l.trim_start_matches("limit=").parse().expect("limit"));
            Order::Keys(keys, limit)
        }
        None => panic!("empty order line for q{q:02}"),
    }
}

/// A value as compared: NULL, a number, or text without trailing blanks.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Null,
    Number(f64),
    Text(String),
}

impl Value {
    fn parse(field: Option<&str>) -> Value {
        match field {
            None | Some("NULL") => Value::Null,
            Some(text) => match text.trim().parse::<f64>() {
                Ok(number) => Value::Number(number),
                Err(_) => Value::Text(text.trim_end().to_string()),
            },
        }
    }

    fn matches(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Number(a), Value::Number(b)) => (a - b).abs() <= 0.01 || (a - b).abs() <= 1e-6 * a.abs().max(b.abs()),
            _ => self == other,
        }
    }

    /// A total order (numbers rounded to cents so float noise does not reorder).
    fn sort_key(&self) -> (u8, i64, String) {
        match self {
            Value::Null => (0, 0, String::new()),
            Value::Number(n) => (1, (n * 100.0).round() as i64, String::new()),
            Value::Text(t) => (2, 0, t.clone()),
        }
    }
}

type Row = Vec<Value>;

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by_key(|r| r.iter().map(Value::sort_key).collect::<Vec<_>>());
    rows
}

fn expected_rows(q: usize) -> Vec<Row> {
    let text = std::fs::read_to_string(fixture().join(format!("answers/q{q:02}.csv"))).expect("answer");
    text.lines().skip(1).map(|line| line.split('|').map(|f| Value::parse(Some(f))).collect()).collect()
}

fn actual_rows(result: &QueryResult) -> Vec<Row> {
    result
        .chunks
        .iter()
        .flat_map(|chunk| {
            (0..chunk.row_count())
                .map(move |r| (0..chunk.column_count()).map(|c| Value::parse(QueryResult::format_cell(chunk, r, c).as_deref())).collect())
        })
        .collect()
}

/// Compares rows pairwise; `loose` rows are compared on the `keys` columns only.
fn match_rows(expected: &[Row], actual: &[Row], loose: std::ops::Range<usize>, keys: &[usize]) -> Result<(), String> {
    for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
        for (j, (x, y)) in e.iter().zip(a).enumerate() {
            if loose.contains(&i) && !keys.contains(&j) {
                continue;
            }
            if !x.matches(y) {
                return Err(format!("row {}, column {}: got {y:?}, expected {x:?}", i + 1, j + 1));
            }
        }
    }
    Ok(())
}

/// Consecutive rows with equal key values, each group sorted.
fn tie_groups(rows: &[Row], keys: &[usize]) -> Vec<Vec<Row>> {
    let mut groups: Vec<Vec<Row>> = Vec::new();
    let key_of = |row: &Row| keys.iter().map(|&k| row[k].sort_key()).collect::<Vec<_>>();
    for row in rows {
        match groups.last_mut() {
            Some(group) if key_of(&group[0]) == key_of(row) => group.push(row.clone()),
            _ => groups.push(vec![row.clone()]),
        }
    }
    groups.into_iter().map(sorted).collect()
}

fn check(q: usize, result: &QueryResult) -> Result<(), String> {
    let expected = expected_rows(q);
    let actual = actual_rows(result);
    if expected.len() != actual.len() {
        return Err(format!("{} rows, expected {}", actual.len(), expected.len()));
    }
    if let (Some(e), Some(a)) = (expected.first(), actual.first()) {
        if e.len() != a.len() {
            return Err(format!("{} columns, expected {}", a.len(), e.len()));
        }
    }
    match order_of(q) {
        Order::Unordered => match_rows(&sorted(expected), &sorted(actual), 0..0, &[]),
        Order::Hidden => match_rows(&expected, &actual, 0..0, &[]),
        Order::Keys(keys, limit) => {
            let expected_groups = tie_groups(&expected, &keys);
            let cut = match (limit, expected_groups.last()) {
                (Some(limit), Some(last)) if expected.len() == limit && last.len() > 1 => expected.len() - last.len()..expected.len(),
                _ => 0..0,
            };
            let flatten = |groups: Vec<Vec<Row>>| groups.into_iter().flatten().collect::<Vec<_>>();
            match_rows(&flatten(expected_groups), &flatten(tie_groups(&actual, &keys)), cut, &keys)
        }
    }
}

fn run_all(conn: &mut Connection, label: &str) -> Vec<String> {
    let mut failures = Vec::new();
    for q in 1..=99 {
        let sql = std::fs::read_to_string(fixture().join(format!("q{q:02}.sql"))).expect("query");
        match conn.query(&sql) {
            Ok(result) => {
                if let Err(why) = check(q, &result) {
                    failures.push(format!("[{label}] q{q:02}: {why}"));
                }
            }
            Err(e) => failures.push(format!("[{label}] q{q:02}: error {e}")),
        }
    }
    failures
}

#[test]
fn tpcds_sf001_in_memory() {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    load(&mut conn);
    let mut failures = run_all(&mut conn, "default");
    for (label, settings) in [
        ("1 thread, vector 64", &["SET threads = 1", "SET vector_size = 64"][..]),
        ("staging and simd off", &["SET threads = 2", "RESET vector_size", "SET staging = off", "SET simd = off"][..]),
    ] {
        for s in settings {
            conn.execute(s).expect("setting");
        }
        failures.extend(run_all(&mut conn, label));
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// Small blocks (many work orders, partitioned builds and aggregates) in a database file.
#[test]
fn tpcds_sf001_database_file() {
    let dir = std::env::temp_dir().join(format!("apiary-tpcds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("tpcds.apiary");
    let mut failures = Vec::new();
    {
        let db = Database::open(&path).expect("database file");
        let mut conn = db.connect();
        conn.execute("SET block_size = 2000").expect("setting");
        load(&mut conn);
        conn.execute("CHECKPOINT").expect("checkpoint");
    }
    {
        // Reopened: every column is read back from the file.
        let db = Database::open(&path).expect("reopen");
        let mut conn = db.connect();
        failures.extend(run_all(&mut conn, "database file, 2 threads"));
        conn.execute("SET threads = 1").expect("setting");
        failures.extend(run_all(&mut conn, "database file, 1 thread"));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The comparison itself can fail: a wrong value, a missing row and a wrong order are caught.
#[test]
fn the_comparison_catches_wrong_answers() {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    // q02 is ordered by its first column with many rows; q09 is unordered, one row.
    let answer = |sql: &str, conn: &mut Connection| conn.query(sql).expect("query");
    let rows_of = |q: usize| -> Vec<String> {
        let text = std::fs::read_to_string(fixture().join(format!("answers/q{q:02}.csv"))).expect("answer");
        text.lines().skip(1).map(str::to_string).collect()
    };
    let values_sql = |rows: &[String]| -> String {
        let tuples: Vec<String> = rows
            .iter()
            .map(|r| {
                let cells: Vec<String> =
                    r.split('|').map(|c| if c == "NULL" { "NULL".to_string() } else { format!("'{}'", c.replace('\'', "''")) }).collect();
                format!("({})", cells.join(", "))
            })
            .collect();
        format!("VALUES {}", tuples.join(", "))
    };
    let q09 = rows_of(9);
    assert!(check(9, &answer(&values_sql(&q09), &mut conn)).is_ok());
    let mut wrong = q09.clone();
    wrong[0] = wrong[0].replacen(|c: char| c.is_ascii_digit(), "9", 1);
    assert!(check(9, &answer(&values_sql(&wrong), &mut conn)).is_err(), "a changed digit must fail");
    let q02 = rows_of(2);
    assert!(check(2, &answer(&values_sql(&q02), &mut conn)).is_ok());
    let mut reversed = q02.clone();
    reversed.reverse();
    assert!(check(2, &answer(&values_sql(&reversed), &mut conn)).is_err(), "a wrong order must fail");
    assert!(check(2, &answer(&values_sql(&q02[1..]), &mut conn)).is_err(), "a missing row must fail");
}
