//! Deeply nested and very long statements give an answer or a clean "statement too
//! complex" error, never a stack overflow (which aborts the whole process, so a
//! regression here kills this test binary). Each statement runs on a thread with a small
//! stack, as a caller's thread may have (2 MB is Rust's default; Python's and other
//! hosts' threads can be smaller).

use apiary::{ApiaryError, Database, ScalarValue};

const CALLER_STACK: usize = 1 << 20;

/// Runs `sql` on a fresh connection on a small-stack thread.
fn run(db: &Database, sql: String) -> Result<Vec<Vec<ScalarValue>>, ApiaryError> {
    let db = db.clone();
    std::thread::Builder::new()
        .stack_size(CALLER_STACK)
        .spawn(move || {
            let mut conn = db.connect();
            conn.query(&sql).map(|r| r.rows().collect())
        })
        .expect("spawn")
        .join()
        .expect("the statement's thread survives")
}

fn database() -> Database {
    let db = Database::open_in_memory().unwrap();
    db.connect().execute("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1), (2), (NULL)").unwrap();
    db
}

fn too_complex(result: Result<Vec<Vec<ScalarValue>>, ApiaryError>, what: &str) {
    match result {
        Err(ApiaryError::TooComplex(message)) => assert!(message.contains("nested"), "{what}: {message}"),
        other => panic!("{what}: expected a 'statement too complex' error, got {other:?}"),
    }
}

#[test]
fn long_and_or_chains_work() {
    let db = database();
    let and = format!("SELECT count(*) FROM t WHERE {}", vec!["a = 1"; 5000].join(" AND "));
    assert_eq!(run(&db, and).unwrap(), vec![vec![ScalarValue::Int64(1)]]);
    let or = format!("SELECT count(*) FROM t WHERE {}", (0..5000).map(|i| format!("a = {i}")).collect::<Vec<_>>().join(" OR "));
    assert_eq!(run(&db, or).unwrap(), vec![vec![ScalarValue::Int64(2)]]);
    let mixed = format!(
        "SELECT count(*) FROM t WHERE {}",
        (0..3000).map(|i| format!("(a + {i} = {} AND a * 2 = 2)", i + 1)).collect::<Vec<_>>().join(" OR ")
    );
    assert_eq!(run(&db, mixed).unwrap(), vec![vec![ScalarValue::Int64(1)]]);
}

#[test]
fn long_set_operation_chains_work() {
    let db = database();
    let union_all = (0..2000).map(|i| format!("SELECT {i}")).collect::<Vec<_>>().join(" UNION ALL ");
    assert_eq!(run(&db, format!("SELECT count(*), sum(x) FROM ({union_all}) u(x)")).unwrap()[0][0], ScalarValue::Int64(2000));
    let union = (0..3000).map(|i| format!("SELECT {}", i % 7)).collect::<Vec<_>>().join(" UNION ");
    assert_eq!(run(&db, format!("SELECT count(*) FROM ({union} UNION ALL SELECT 6) u(x)")).unwrap(), vec![vec![ScalarValue::Int64(8)]]);
    let intersect = vec!["SELECT a FROM t"; 1500].join(" INTERSECT ");
    assert_eq!(run(&db, format!("SELECT count(*) FROM ({intersect}) i")).unwrap(), vec![vec![ScalarValue::Int64(3)]]);
}

#[test]
fn deep_expressions_are_refused_cleanly() {
    let db = database();
    // Up to the limit, long operator chains work; far beyond, a clean error.
    assert_eq!(run(&db, format!("SELECT {}", vec!["1"; 990].join("+"))).unwrap(), vec![vec![ScalarValue::Int32(990)]]);
    too_complex(run(&db, format!("SELECT {}", vec!["1"; 100_000].join("+"))), "100,000-term sum");
    too_complex(run(&db, format!("SELECT {}", vec!["'a'"; 20_000].join("||"))), "20,000-term concatenation");
    too_complex(run(&db, format!("SELECT {}1{}", "(".repeat(1000), ")".repeat(1000))), "1,000 parentheses");
    too_complex(run(&db, format!("SELECT {}1{}", "(SELECT ".repeat(200), ")".repeat(200))), "200 nested subqueries");
    too_complex(run(&db, format!("SELECT {}1", "- ".repeat(5000))), "5,000 negations");
}
