//! Database files: contents survive reopening, the log and checkpoints, damaged files give
//! clear errors, one process at a time.

use std::path::{Path, PathBuf};

use apiary::{ApiaryError, Database, ScalarValue};

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("apiary-persistence-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn query(db: &Database, sql: &str) -> Vec<Vec<ScalarValue>> {
    let mut conn = db.connect();
    conn.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}")).rows().collect()
}

fn run(db: &Database, sql: &str) {
    let mut conn = db.connect();
    conn.execute(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn scalar(db: &Database, sql: &str) -> ScalarValue {
    query(db, sql).remove(0).remove(0)
}

/// Bytes of all tables' columns in the file (`stored_bytes`) or in memory (`memory_bytes`).
fn storage_bytes(db: &Database, column: &str) -> i64 {
    match scalar(db, &format!("SELECT sum({column})::BIGINT FROM apiary_storage_info()")) {
        ScalarValue::Int64(bytes) => bytes,
        other => panic!("{column}: {other:?}"),
    }
}

/// EXPLAIN ANALYZE's report, one string.
fn explain_analyze(db: &Database, sql: &str) -> String {
    query(db, &format!("EXPLAIN ANALYZE {sql}")).iter().map(|r| r[0].to_string()).collect::<Vec<_>>().join("\n")
}

/// The message of the error opening `path` gives (empty if it opens).
/// A copy of the database file at `path` and its log, named `name` beside them, opened:
/// what a process killed at this moment would leave behind.
fn crash_copy(path: &Path, name: &str) -> Database {
    let dir = path.parent().expect("a directory");
    let crashed = dir.join(format!("{name}.apiary"));
    std::fs::copy(path, &crashed).unwrap();
    let mut wal = path.as_os_str().to_owned();
    wal.push(".wal");
    std::fs::copy(wal, dir.join(format!("{name}.apiary.wal"))).unwrap();
    Database::open(&crashed).unwrap()
}

fn open_error(path: &Path) -> String {
    Database::open(path).err().map(|e| e.to_string()).unwrap_or_default()
}

const CHECK: &str = "SELECT count(*), sum(k), count(s), min(s), max(s), sum(d), max(day), count(DISTINCT flag), sum(f) FROM t";

fn fill(db: &Database) {
    run(db, "SET block_size = 1000");
    run(
        db,
        "CREATE TABLE t (k BIGINT, s VARCHAR, d DECIMAL(12,2), day DATE, flag CHAR(1), f DOUBLE, small SMALLINT, big DECIMAL(30,3), PRIMARY KEY (k))",
    );
    // Small inserts go to the log, the large one is written as a checkpoint.
    run(db, "INSERT INTO t VALUES (1, 'one', 1.50, DATE '2020-01-01', 'A', 0.5, 1, 1.001), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL)");
    run(
        db,
        "INSERT INTO t SELECT k + 2, 'row number ' || k, k * 0.25, DATE '2021-01-01' + (k % 400), CASE WHEN k % 3 = 0 THEN 'R' ELSE 'N' END, k / 7.0, k % 100, k * 1000.5 \
         FROM (SELECT l_orderkey * 8 + l_linenumber AS k FROM lineitem) AS keys",
    );
    run(db, "INSERT INTO t VALUES (-5, 'a string that is longer than twelve bytes', -0.01, DATE '1999-12-31', 'Z', -1e300, -32768, -1)");
}

fn tpch_lineitem(db: &Database) {
    let mut conn = db.connect();
    conn.execute("SET block_size = 1000").unwrap();
    apiary::tpch::load(&mut conn, 0.01).unwrap();
}

#[test]
fn contents_survive_reopening_through_log_and_checkpoint() {
    let dir = scratch("reopen");
    let path = dir.join("db.apiary");
    let expected;
    {
        let db = Database::open(&path).unwrap();
        tpch_lineitem(&db);
        fill(&db);
        run(&db, "CREATE TABLE gone AS SELECT * FROM nation; DROP TABLE gone; CREATE TABLE small AS SELECT n_name FROM nation");
        expected = query(&db, CHECK);
        assert_eq!(expected[0][0], ScalarValue::Int64(60178), "{expected:?}");
    }
    assert!(std::fs::metadata(dir.join("db.apiary.wal")).unwrap().len() <= 64, "closing folds the log in");
    let db = Database::open(&path).unwrap();
    assert_eq!(query(&db, CHECK), expected);
    assert_eq!(scalar(&db, "SELECT count(*) FROM small"), ScalarValue::Int64(25));
    let mut conn = db.connect();
    assert!(conn.query("SELECT * FROM gone").is_err(), "the dropped table stays dropped");
    // The primary key still holds after reopening.
    let duplicate = conn.execute("INSERT INTO t VALUES (1, 'again', 0, NULL, NULL, NULL, NULL, NULL)");
    assert!(matches!(duplicate, Err(ApiaryError::UniqueViolation(_))), "{duplicate:?}");
    // Every TPC-H answer is the same from the file.
    for number in 1..=22 {
        let result = conn.query(apiary::tpch::query(number).unwrap()).unwrap();
        apiary::tpch::check_answer(&result, apiary::tpch::answer(0.01, number).unwrap()).unwrap_or_else(|e| panic!("Q{number}: {e}"));
    }
    // Predicates on dictionary-coded columns run on the codes; a value no block holds
    // skips every block.
    let explain = |sql: &str| explain_analyze(&db, sql);
    let shipped = explain("SELECT count(*) FROM lineitem WHERE l_shipmode IN ('MAIL', 'SHIP') AND l_quantity < 30");
    assert!(shipped.contains("61 blocks: 0 skipped, 61 filtered on codes"), "{shipped}");
    let nowhere = explain("SELECT count(*) FROM lineitem WHERE l_shipmode = 'CARRIER PIGEON'");
    assert!(nowhere.contains("61 blocks: 61 skipped"), "{nowhere}");
    assert_eq!(
        scalar(&db, "SELECT count(*) FROM lineitem WHERE l_shipmode IN ('MAIL', 'SHIP') AND l_quantity < 30"),
        scalar(&db, "SELECT count(*) FROM lineitem WHERE l_shipmode || '' IN ('MAIL', 'SHIP') AND l_quantity < 30"),
        "the same rows as comparing values"
    );
    let info = query(&db, "SELECT column_name, encodings, stored_bytes FROM apiary_storage_info() WHERE table_name = 'lineitem'");
    let encoding_of = |column: &str| info.iter().find(|r| r[0] == ScalarValue::Utf8(column.into())).unwrap()[1].to_string();
    assert!(encoding_of("l_returnflag").starts_with("dictionary(1 byte)"), "{info:?}");
    assert!(encoding_of("l_quantity").starts_with("frame_of_reference(1 byte)"), "{info:?}");
    assert!(encoding_of("l_comment").contains("zstd"), "{info:?}");
}

/// TIMESTAMPTZ and TIME columns: stored (log and checkpoint), reopened, their zone maps
/// skip blocks, and the session's zone only changes how they are shown.
#[test]
fn times_and_instants_survive_reopening() {
    let dir = scratch("times");
    let path = dir.join("db.apiary");
    let check = "SELECT count(*), min(at), max(at), min(opens), max(opens), count(DISTINCT at) FROM z";
    let expected;
    {
        let db = Database::open(&path).unwrap();
        run(&db, "SET block_size = 1000; CREATE TABLE z (id INTEGER, at TIMESTAMP WITH TIME ZONE, opens TIME)");
        // A small insert goes to the log, the large one is written as a checkpoint.
        run(&db, "INSERT INTO z VALUES (0, '2024-01-31 10:00:00+01', '24:00:00'), (-1, NULL, NULL)");
        run(
            &db,
            "INSERT INTO z SELECT k, TIMESTAMPTZ '2020-01-01 00:00:00+00' + k * INTERVAL '1 hour', TIME '00:00' + k * INTERVAL '1 minute' \
             FROM range(1, 5000) r(k)",
        );
        expected = query(&db, check);
    }
    let db = Database::open(&path).unwrap();
    assert_eq!(query(&db, check), expected);
    assert_eq!(expected[0][0], ScalarValue::Int64(5001), "{expected:?}");
    assert_eq!(expected[0][2], ScalarValue::TimestampTz(apiary_types::datetime::parse_timestamp("2024-01-31 09:00:00").unwrap()));
    assert_eq!(expected[0][4], ScalarValue::Time(apiary_types::datetime::MAX_TIME));
    // Zone maps of the new types skip blocks.
    let recent = explain_analyze(&db, "SELECT count(*) FROM z WHERE at > TIMESTAMPTZ '2020-07-01 00:00:00+00'");
    assert!(recent.contains("skipped") && !recent.contains(": 0 skipped"), "{recent}");
    let mut conn = db.connect();
    conn.execute("SET TimeZone = 'Asia/Tokyo'").unwrap();
    let result = conn.query("SELECT at, opens FROM z WHERE id = 0").unwrap();
    assert_eq!(result.cell_text(&result.chunks[0], 0, 0).as_deref(), Some("2024-01-31 18:00:00+09"));
    assert_eq!(result.cell_text(&result.chunks[0], 0, 1).as_deref(), Some("24:00:00"));
}

#[test]
fn the_log_is_replayed_and_checkpoint_folds_it() {
    let dir = scratch("log");
    let path = dir.join("db.apiary");
    let wal = dir.join("db.apiary.wal");
    let db = Database::open(&path).unwrap();
    run(&db, "CREATE TABLE t (a INTEGER, b VARCHAR)");
    run(&db, "INSERT INTO t VALUES (1, 'x'), (2, 'y')");
    let logged = std::fs::metadata(&wal).unwrap().len();
    assert!(logged > 100, "small changes are logged ({logged} bytes)");
    run(&db, "CHECKPOINT");
    assert!(std::fs::metadata(&wal).unwrap().len() < logged, "CHECKPOINT empties the log");
    run(&db, "INSERT INTO t VALUES (3, NULL); CREATE TABLE u AS SELECT a * 10 AS a FROM t; DROP TABLE t");
    // Every commit is synced: copying the files now gives what a crash would leave.
    let crashed = dir.join("crashed.apiary");
    let recovered = crash_copy(&path, "crashed");
    assert_eq!(query(&recovered, "SELECT a FROM u ORDER BY a"), query(&db, "SELECT a FROM u ORDER BY a"));
    assert_eq!(scalar(&recovered, "SELECT sum(a) FROM u"), ScalarValue::Int64(60));
    assert!(recovered.connect().query("SELECT * FROM t").is_err());
    // A torn last record (a statement cut off mid-write) is ignored.
    drop(recovered);
    let wal_length = std::fs::metadata(&wal).unwrap().len();
    std::fs::copy(&path, &crashed).unwrap();
    std::fs::copy(&wal, dir.join("crashed.apiary.wal")).unwrap();
    std::fs::OpenOptions::new().write(true).open(dir.join("crashed.apiary.wal")).unwrap().set_len(wal_length - 3).unwrap();
    let recovered = Database::open(&crashed).unwrap();
    assert_eq!(scalar(&recovered, "SELECT count(*) FROM t"), ScalarValue::Int64(3), "the DROP was torn off");
    assert!(recovered.connect().query("SELECT * FROM u").is_ok(), "the CREATE TABLE AS before it survived");
}

#[test]
fn a_second_opener_gets_a_lock_error() {
    let dir = scratch("lock");
    let path = dir.join("db.apiary");
    let db = Database::open(&path).unwrap();
    run(&db, "CREATE TABLE t (a INTEGER)");
    let second = Database::open(&path);
    let message = second.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("already open"), "{message}");
    drop(db);
    let reopened = Database::open(&path).unwrap();
    assert_eq!(scalar(&reopened, "SELECT count(*) FROM t"), ScalarValue::Int64(0));
}

/// Writes a database with one table spread over many blocks, closes it.
fn damaged_fixture(name: &str) -> (PathBuf, u64) {
    let dir = scratch(name);
    let path = dir.join("db.apiary");
    let db = Database::open(&path).unwrap();
    tpch_lineitem(&db);
    drop(db);
    let length = std::fs::metadata(&path).unwrap().len();
    (path, length)
}

fn flip_byte(path: &Path, offset: u64) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset).unwrap();
    byte[0] ^= 0x10;
    file.write_all_at(&byte, offset).unwrap();
}

#[test]
fn a_damaged_block_is_named_never_misread() {
    let (path, _) = damaged_fixture("bitflip");
    // The first stripe written starts right after the header and root slots.
    flip_byte(&path, 3 * 4096 + 5);
    let db = Database::open(&path).unwrap();
    let mut conn = db.connect();
    let mut errors = Vec::new();
    for table in apiary::tpch::TABLES {
        if let Err(e) = conn.query(&format!("SELECT * FROM {table}")) {
            errors.push(e);
        }
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    let message = errors[0].to_string();
    assert!(matches!(errors[0], ApiaryError::Corruption(_)), "{message}");
    assert!(message.contains("block 0, column") && message.contains("checksum mismatch"), "{message}");
}

#[test]
fn damaged_metadata_truncation_and_newer_versions_are_refused() {
    // Metadata is written last, at the end of the file.
    let (path, length) = damaged_fixture("metadata");
    flip_byte(&path, length - 20);
    let message = open_error(&path);
    assert!(message.contains("catalog metadata") && message.contains("checksum mismatch"), "{message}");

    let (path, length) = damaged_fixture("truncated");
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(length / 2).unwrap();
    let message = open_error(&path);
    assert!(message.contains("truncated"), "{message}");

    let (path, _) = damaged_fixture("version");
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let mut header = [0u8; 20];
        file.read_exact_at(&mut header, 0).unwrap();
        header[8..12].copy_from_slice(&99u32.to_le_bytes());
        let sum = twox_hash::XxHash3_64::oneshot(&header[..12]);
        header[12..20].copy_from_slice(&sum.to_le_bytes());
        file.write_all_at(&header, 0).unwrap();
    }
    let message = open_error(&path);
    assert!(message.contains("newer version") && message.contains("format 99"), "{message}");

    let dir = scratch("not-a-database");
    let path = dir.join("notes.txt");
    std::fs::write(&path, "hello ".repeat(5000)).unwrap();
    let message = open_error(&path);
    assert!(message.contains("not an Apiary database"), "{message}");
}

#[test]
fn a_failed_statement_leaves_no_trace_in_the_file() {
    let dir = scratch("failed");
    let path = dir.join("db.apiary");
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE t (a INTEGER PRIMARY KEY)");
        run(&db, "INSERT INTO t VALUES (1), (2)");
        let mut conn = db.connect();
        assert!(conn.execute("INSERT INTO t VALUES (3), (1)").is_err());
        assert!(conn.execute("CREATE TABLE t (b INTEGER)").is_err());
    }
    let db = Database::open(&path).unwrap();
    assert_eq!(query(&db, "SELECT a FROM t ORDER BY a"), vec![vec![ScalarValue::Int32(1)], vec![ScalarValue::Int32(2)]]);
}

#[test]
fn the_memory_limit_evicts_cached_blocks() {
    let dir = scratch("memory");
    let path = dir.join("db.apiary");
    let (expected, stored) = {
        let db = Database::open(&path).unwrap();
        tpch_lineitem(&db);
        let stored = scalar(&db, "SELECT sum(stored_bytes) FROM apiary_storage_info()");
        (query(&db, "SELECT sum(l_extendedprice), max(l_comment) FROM lineitem"), stored)
    };
    let db = Database::open(&path).unwrap();
    assert_eq!(storage_bytes(&db, "memory_bytes"), 0, "blocks load on demand");
    run(&db, "SET memory_limit = '2MB'");
    assert_eq!(query(&db, "SHOW memory_limit"), vec![vec![ScalarValue::Utf8("2.0 MB".into())]]);
    for _ in 0..2 {
        assert_eq!(query(&db, "SELECT sum(l_extendedprice), max(l_comment) FROM lineitem"), expected);
    }
    let resident = storage_bytes(&db, "memory_bytes");
    assert!(resident > 0 && resident <= 2_000_000, "{resident} bytes cached under a 2MB limit (stored: {stored:?})");
    let mut conn = db.connect();
    let error = conn.execute("SET memory_limit = 'lots'").unwrap_err().to_string();
    assert!(error.contains("memory_limit must be a size"), "{error}");
}

/// `apiary_storage_info().loads` counts reads of a column's blocks from the file: once
/// per block while they stay cached, again for each scan once they are evicted.
#[test]
fn storage_info_counts_the_loads_of_each_columns_blocks() {
    let dir = scratch("loads");
    let path = dir.join("db.apiary");
    {
        let db = Database::open(&path).unwrap();
        tpch_lineitem(&db);
    }
    let db = Database::open(&path).unwrap();
    let loads = |db: &Database, column: &str| {
        query(
            db,
            &format!("SELECT loads, block_count FROM apiary_storage_info() WHERE table_name = 'lineitem' AND column_name = '{column}'"),
        )
        .remove(0)
    };
    assert_eq!(loads(&db, "l_quantity")[0], ScalarValue::Int64(0), "nothing loaded yet");
    let scan = "SELECT sum(l_quantity) FROM lineitem";
    let expected = query(&db, scan);
    let [ref loaded, ref blocks] = loads(&db, "l_quantity")[..] else { panic!() };
    assert_eq!(loaded, blocks, "one load per block");
    assert_eq!(loads(&db, "l_comment")[0], ScalarValue::Int64(0), "columns not read are not loaded");
    assert_eq!(query(&db, scan), expected);
    assert_eq!(&loads(&db, "l_quantity")[0], blocks, "cached blocks are not loaded again");
    // Less than l_comment takes in memory (about 2 MB): its blocks evict each other.
    let mut conn = db.connect();
    conn.execute("SET memory_limit = '1MB'").unwrap();
    let comments = "SELECT max(l_comment) FROM lineitem";
    let first = conn.query(comments).unwrap().rows().collect::<Vec<_>>();
    assert_eq!(conn.query(comments).unwrap().rows().collect::<Vec<_>>(), first);
    let ScalarValue::Int64(after) = loads(&db, "l_comment")[0] else { panic!() };
    let ScalarValue::Int64(blocks) = *blocks else { panic!() };
    assert!(after > blocks, "evicted blocks are loaded again: {after} loads of {blocks} blocks");
}

#[test]
fn a_query_that_does_not_fit_the_memory_limit_fails_cleanly() {
    let db = Database::open_in_memory().unwrap();
    tpch_lineitem(&db);
    let tables = storage_bytes(&db, "memory_bytes");
    let mut conn = db.connect();
    let below = conn.execute(&format!("SET memory_limit = '{}'", tables - 1_000_000)).unwrap_err().to_string();
    assert!(below.contains("less than") && below.contains("in-memory tables"), "{below}");
    let grouping = "SELECT count(*) FROM (SELECT l_orderkey, l_partkey, l_suppkey, count(*) FROM lineitem GROUP BY 1, 2, 3) AS g";
    let expected = scalar(&db, grouping);
    conn.execute(&format!("SET memory_limit = '{}'", tables + 1_500_000)).unwrap();
    let error = conn.query(grouping).unwrap_err();
    assert!(matches!(error, ApiaryError::Resource(_)), "{error}");
    assert!(error.to_string().contains("memory_limit"), "{error}");
    // A small query still runs, and nothing stays reserved after the failure.
    assert_eq!(conn.query("SELECT count(*) FROM nation").unwrap().rows().next().unwrap()[0], ScalarValue::Int64(25));
    conn.execute("RESET memory_limit").unwrap();
    assert_eq!(conn.query(grouping).unwrap().rows().next().unwrap()[0], expected);
}

/// The key sets that check PRIMARY KEY and UNIQUE constraints and the maps of CREATE
/// INDEX are charged to `memory_limit` as they grow: an insert whose keys do not fit
/// fails cleanly and changes nothing, a lookup whose index would not fit reads the
/// table instead, and the limit cannot be set below what tables and indexes hold.
#[test]
fn indexes_are_charged_to_the_memory_limit() {
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    conn.execute("CREATE TABLE k (id BIGINT PRIMARY KEY, v BIGINT); INSERT INTO k VALUES (-1, -1)").unwrap();
    let tables = storage_bytes(&db, "memory_bytes");
    conn.execute(&format!("SET memory_limit = '{}'", tables + 20_000_000)).unwrap();
    // 500,000 keys take about 32 MB in the key set.
    let error = conn.execute("INSERT INTO k SELECT i, i % 100000 FROM range(0, 500000) t(i)").unwrap_err();
    assert!(matches!(&error, ApiaryError::Resource(m) if m.contains("keys")), "{error}");
    assert_eq!(scalar(&db, "SELECT count(*) FROM k"), ScalarValue::Int64(1), "the failed insert changed nothing");
    conn.execute("RESET memory_limit").unwrap();
    conn.execute("INSERT INTO k SELECT i, i % 100000 FROM range(0, 500000) t(i)").unwrap();
    let held = storage_bytes(&db, "memory_bytes");
    let below = conn.execute(&format!("SET memory_limit = '{}'", held + 1_000_000)).unwrap_err().to_string();
    assert!(below.contains("less than") && below.contains("indexes"), "{below}");
    // An index that would not fit is not built: the scan reads the table, and answers.
    // (The map of the index on v would take about 20 MB; CREATE INDEX made a new table
    // object, whose key set is built again by its next write.)
    conn.execute("CREATE INDEX k_v ON k (v)").unwrap();
    conn.execute(&format!("SET memory_limit = '{}'", held + 10_000_000)).unwrap_or_else(|e| panic!("{e}"));
    let lookup = "SELECT count(*) FROM k WHERE v = 3";
    let plan = explain_analyze(&db, lookup);
    assert!(!plan.contains("index k_v"), "{plan}");
    assert_eq!(scalar(&db, lookup), ScalarValue::Int64(5));
    conn.execute("RESET memory_limit").unwrap();
    let plan = explain_analyze(&db, lookup);
    assert!(plan.contains("index k_v"), "{plan}");
    assert_eq!(scalar(&db, lookup), ScalarValue::Int64(5));
}

#[test]
fn in_memory_tables_build_dictionaries_on_demand() {
    let db = Database::open_in_memory().unwrap();
    tpch_lineitem(&db);
    let sql = "SELECT count(*) FROM lineitem WHERE l_shipmode IN ('MAIL', 'SHIP') AND l_quantity < 30";
    let explain = explain_analyze(&db, sql);
    assert!(explain.contains("61 blocks: 0 skipped, 61 filtered on codes"), "{explain}");
    assert_eq!(
        scalar(&db, sql),
        scalar(&db, "SELECT count(*) FROM lineitem WHERE l_shipmode || '' IN ('MAIL', 'SHIP') AND l_quantity < 30")
    );
    // Too many distinct values: no dictionary, the values are compared.
    let comments = explain_analyze(&db, "SELECT count(*) FROM lineitem WHERE l_comment LIKE '%fluffily%'");
    assert!(!comments.contains("filtered on codes"), "{comments}");
}

#[test]
fn a_load_larger_than_the_memory_limit_fits_a_database_file() {
    let dir = scratch("large-load");
    apiary::tpch::write_tbl(&dir, 0.05).unwrap();
    let lineitem = dir.join("lineitem.tbl");
    let schema = apiary::tpch::SCHEMA.lines().skip_while(|l| !l.contains("CREATE TABLE lineitem")).collect::<Vec<_>>().join("\n");
    let copy = format!("COPY lineitem FROM '{}' (DELIMITER '|')", lineitem.display());

    let in_memory = Database::open_in_memory().unwrap();
    let mut conn = in_memory.connect();
    conn.execute("SET memory_limit = '20MB'").unwrap();
    conn.execute(&schema).unwrap();
    let error = conn.execute(&copy).unwrap_err();
    assert!(matches!(error, ApiaryError::Resource(_)) && error.to_string().contains("COPY"), "{error}");
    assert_eq!(scalar(&in_memory, "SELECT count(*) FROM lineitem"), ScalarValue::Int64(0), "the failed COPY left nothing");

    let path = dir.join("db.apiary");
    {
        let db = Database::open(&path).unwrap();
        let mut conn = db.connect();
        conn.execute("SET memory_limit = '20MB'").unwrap();
        conn.execute(&schema).unwrap();
        conn.execute(&copy).unwrap();
        let ScalarValue::Int64(stored) = scalar(&db, "SELECT sum(stored_bytes)::BIGINT FROM apiary_storage_info()") else { panic!() };
        let resident = storage_bytes(&db, "memory_bytes");
        assert!(resident <= 20_000_000, "{resident} bytes resident under a 20MB limit ({stored} stored)");
        assert_eq!(scalar(&db, "SELECT count(*) FROM lineitem"), ScalarValue::Int64(299_814));
    }
    let db = Database::open(&path).unwrap();
    let result = db.connect().query(apiary::tpch::query(1).unwrap()).unwrap();
    assert_eq!(result.row_count(), 4);
    assert_eq!(scalar(&db, "SELECT count(*) FROM lineitem"), ScalarValue::Int64(299_814));
}

#[test]
fn concurrent_writers_queries_and_checkpoints() {
    let dir = scratch("concurrent");
    let path = dir.join("db.apiary");
    let db = Database::open(&path).unwrap();
    run(&db, "CREATE TABLE t (writer INTEGER, n INTEGER, s VARCHAR)");
    std::thread::scope(|scope| {
        for writer in 0..3 {
            let db = db.clone();
            scope.spawn(move || {
                let mut conn = db.connect();
                for n in 0..40 {
                    conn.execute(&format!("INSERT INTO t VALUES ({writer}, {n}, 'row {n} of writer {writer}')")).unwrap();
                }
            });
        }
        let db = db.clone();
        scope.spawn(move || {
            let mut conn = db.connect();
            for _ in 0..10 {
                conn.execute("CHECKPOINT").unwrap();
                let count = conn.query("SELECT count(*), count(DISTINCT s) FROM t").unwrap().rows().next().unwrap();
                assert_eq!(count[0], count[1], "{count:?}");
            }
        });
    });
    let expected = vec![vec![ScalarValue::Int64(120), ScalarValue::Int64(120), ScalarValue::Int64(2340)]];
    assert_eq!(query(&db, "SELECT count(*), count(DISTINCT s), sum(n) FROM t"), expected);
    drop(db);
    let db = Database::open(&path).unwrap();
    assert_eq!(query(&db, "SELECT count(*), count(DISTINCT s), sum(n) FROM t"), expected);
}

#[test]
fn unique_constraints_survive_the_log_and_checkpoints() {
    let dir = scratch("unique");
    let path = dir.join("db.apiary");
    let duplicate = |db: &Database, sql: &str| {
        let result = db.connect().execute(sql);
        assert!(matches!(result, Err(ApiaryError::UniqueViolation(_) | ApiaryError::NotNullViolation(_))), "{sql}: {result:?}");
    };
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE u (id INTEGER PRIMARY KEY, code VARCHAR UNIQUE, a INTEGER, b INTEGER, UNIQUE (a, b))");
        run(&db, "INSERT INTO u VALUES (1, 'x', 1, 1), (2, NULL, 1, NULL), (3, NULL, 1, NULL)");
    }
    // Reopened: the definition came back from the checkpoint closing wrote.
    let db = Database::open(&path).unwrap();
    duplicate(&db, "INSERT INTO u VALUES (4, 'x', 9, 9)");
    duplicate(&db, "INSERT INTO u VALUES (4, 'y', 1, 1)");
    run(&db, "INSERT INTO u VALUES (4, 'y', 1, NULL)");
    // A table created after the checkpoint lives in the log until the next one.
    run(&db, "CREATE TABLE w (k INTEGER UNIQUE); INSERT INTO w VALUES (1), (NULL), (NULL)");
    drop(db);
    let db = Database::open(&path).unwrap();
    duplicate(&db, "INSERT INTO w VALUES (1)");
    assert_eq!(scalar(&db, "SELECT count(*) FROM u"), ScalarValue::Int64(4));
    assert_eq!(scalar(&db, "SELECT count(*) FROM w"), ScalarValue::Int64(3));
}

/// One work order can produce without bound (a cross join feeding a result, a group-by
/// or a DISTINCT): memory is charged after every chunk a sink consumes, so the query
/// fails at the limit, long before it finishes its first morsel (issue 10: it grew past
/// 6 GB under a 1 GB limit).
#[test]
fn a_single_work_order_cannot_outgrow_the_memory_limit() {
    let db = Database::open_in_memory().unwrap();
    tpch_lineitem(&db);
    let tables = storage_bytes(&db, "memory_bytes");
    let mut conn = db.connect();
    conn.execute("SET threads = 1").unwrap();
    conn.execute(&format!("SET memory_limit = '{}'", tables + 16_000_000)).unwrap();
    for sql in [
        "SELECT a.l_comment, b.l_comment FROM lineitem a CROSS JOIN lineitem b",
        "SELECT a.l_comment, b.l_comment, count(*) FROM lineitem a CROSS JOIN lineitem b GROUP BY 1, 2",
        "SELECT DISTINCT a.l_comment, b.l_comment FROM lineitem a CROSS JOIN lineitem b",
        "SELECT a.l_comment FROM lineitem a CROSS JOIN lineitem b ORDER BY 1",
    ] {
        let error = conn.query(sql).unwrap_err();
        assert!(matches!(error, ApiaryError::Resource(_)) && error.to_string().contains("memory_limit"), "{sql}: {error}");
        assert_eq!(db.query_memory_bytes(), 0, "{sql}: released after the failure");
    }
    assert_eq!(conn.query("SELECT count(*) FROM nation").unwrap().rows().next().unwrap()[0], ScalarValue::Int64(25));
}

/// A join condition that can never hold is folded away instead of comparing every pair.
#[test]
fn a_never_true_join_condition_compares_nothing() {
    let db = Database::open_in_memory().unwrap();
    tpch_lineitem(&db);
    let plan = explain_analyze(
        &db,
        "SELECT count(*), count(l.l_orderkey) FROM orders o LEFT JOIN lineitem l ON o.o_orderkey = l.l_orderkey AND 1 = 0",
    );
    assert!(!plan.contains("HashJoin"), "{plan}");
    assert_eq!(
        query(&db, "SELECT count(*), count(l.l_orderkey) FROM orders o LEFT JOIN lineitem l ON o.o_orderkey = l.l_orderkey AND 1 = 0"),
        query(&db, "SELECT count(*), CAST(0 AS BIGINT) FROM orders")
    );
}

/// read_csv loads into a temporary table: its rows count against memory_limit as they
/// are parsed.
#[test]
fn read_csv_counts_against_the_memory_limit() {
    let dir = scratch("read-csv-memory");
    let path = dir.join("big.csv");
    let mut text = String::from("a,b\n");
    for i in 0..200_000 {
        text.push_str(&format!("{i},row number {i} of a file larger than the limit\n"));
    }
    std::fs::write(&path, text).unwrap();
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    let sql = format!("SELECT count(*) FROM read_csv('{}')", path.display());
    conn.execute("SET memory_limit = '2MB'").unwrap();
    let error = conn.query(&sql).unwrap_err();
    assert!(matches!(error, ApiaryError::Resource(_)) && error.to_string().contains("memory_limit"), "{error}");
    conn.execute("RESET memory_limit").unwrap();
    assert_eq!(conn.query(&sql).unwrap().rows().next().unwrap()[0], ScalarValue::Int64(200_000));
}

#[test]
fn read_parquet_must_fit_the_memory_limit() {
    let dir = scratch("read-parquet-memory");
    let path = dir.join("big.parquet");
    let db = Database::open_in_memory().unwrap();
    let mut conn = db.connect();
    let mut values = Vec::new();
    for i in 0..2000 {
        values.push(format!("({i}, 'a string value that takes some room, number {i}')"));
    }
    conn.execute(&format!("CREATE TABLE src AS SELECT * FROM (VALUES {}) v(i, s)", values.join(", "))).unwrap();
    for step in 0..6 {
        // Distinct strings, so Parquet cannot store them as a small dictionary.
        conn.execute(&format!("INSERT INTO src SELECT i + {}, s || ' copy {step} of ' || i FROM src", 2000 << step)).unwrap();
    }
    conn.execute(&format!("COPY src TO '{}' (FORMAT parquet)", path.display())).unwrap();
    conn.execute("DROP TABLE src").unwrap();
    // The string column must be read (count(*) alone reads only the integers now).
    let sql = format!("SELECT count(s) FROM read_parquet('{}')", path.display());
    conn.execute("SET memory_limit = '1MB'").unwrap();
    let error = conn.query(&sql).unwrap_err();
    assert!(matches!(error, ApiaryError::Resource(_)) && error.to_string().contains("memory_limit"), "{error}");
    conn.execute("RESET memory_limit").unwrap();
    assert_eq!(conn.query(&sql).unwrap().rows().next().unwrap()[0], ScalarValue::Int64(128_000));
}

/// The format version in a database file's header, and a way to set it (with its
/// checksum), to make a file of an older format.
fn header_version(path: &Path) -> u32 {
    let bytes = std::fs::read(path).unwrap();
    u32::from_le_bytes(bytes[8..12].try_into().unwrap())
}

fn set_header_version(path: &Path, version: u32) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut header = [0u8; 20];
    file.read_exact_at(&mut header, 0).unwrap();
    header[8..12].copy_from_slice(&version.to_le_bytes());
    let sum = twox_hash::XxHash3_64::oneshot(&header[..12]);
    header[12..20].copy_from_slice(&sum.to_le_bytes());
    file.write_all_at(&header, 0).unwrap();
}

#[test]
fn views_survive_the_log_checkpoints_and_reopening() {
    let dir = scratch("views");
    let path = dir.join("db.apiary");
    let wal = dir.join("db.apiary.wal");
    let views = |db: &Database| {
        (
            query(db, "SELECT * FROM big ORDER BY a"),
            query(db, "SELECT total FROM big_total"),
            query(db, "SELECT table_name, table_type FROM information_schema.tables ORDER BY 1"),
        )
    };
    let expected;
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE t (a INTEGER, b VARCHAR); INSERT INTO t VALUES (1, 'x'), (2, 'y'), (3, NULL)");
        run(&db, "CREATE VIEW big AS SELECT a, b FROM t WHERE a > 1");
        run(&db, "CREATE VIEW big_total (total) AS SELECT sum(a) FROM big");
        expected = views(&db);
        assert_eq!(expected.1, vec![vec![ScalarValue::Int64(5)]]);
        // Committed means in the log: a copy of the files now is what a crash leaves.
        let recovered = crash_copy(&path, "crashed");
        assert_eq!(views(&recovered), expected, "views come back from the log");
    }
    // Closing folded the log into the file: the views come from the checkpoint.
    let db = Database::open(&path).unwrap();
    assert!(std::fs::metadata(&wal).unwrap().len() < 100, "closing folded the log into the file");
    assert_eq!(views(&db), expected, "views come back from the checkpoint");
    // Their dependencies came back too.
    let refused = db.connect().execute("DROP TABLE t");
    assert!(matches!(&refused, Err(ApiaryError::Dependency(m)) if m.contains("view big depends on table t")), "{refused:?}");
    run(&db, "CREATE OR REPLACE VIEW big AS SELECT a, b, a * 10 AS c FROM t WHERE a > 2; DROP VIEW big_total");
    drop(db);
    let db = Database::open(&path).unwrap();
    assert_eq!(query(&db, "SELECT c FROM big"), vec![vec![ScalarValue::Int32(30)]]);
    assert!(db.connect().query("SELECT * FROM big_total").is_err());
    run(&db, "DROP TABLE t CASCADE");
    drop(db);
    let db = Database::open(&path).unwrap();
    assert!(query(&db, "SHOW TABLES").is_empty());
}

/// A file of format 2 (before views) is opened and written as before; the first view
/// written into it raises its header's version, so that older versions refuse it rather
/// than misread the views.
#[test]
fn a_view_raises_an_older_files_format() {
    let dir = scratch("format");
    let path = dir.join("db.apiary");
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1)");
    }
    set_header_version(&path, 2);
    {
        let db = Database::open(&path).unwrap();
        run(&db, "INSERT INTO t VALUES (2); CHECKPOINT");
    }
    assert_eq!(header_version(&path), 2, "nothing format 3 needs was written");
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE VIEW v AS SELECT sum(a) AS s FROM t");
        assert_eq!(header_version(&path), 3, "raised before the view went into the log");
    }
    let db = Database::open(&path).unwrap();
    assert_eq!(scalar(&db, "SELECT s FROM v"), ScalarValue::Int64(3));
}

/// A file of format 3 (before TIMESTAMPTZ and TIME) is written as before until a table
/// with such a column is created in it; then its header says format 4.
#[test]
fn a_time_zone_column_raises_an_older_files_format() {
    let dir = scratch("format-types");
    let path = dir.join("db.apiary");
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1)");
    }
    set_header_version(&path, 3);
    {
        let db = Database::open(&path).unwrap();
        run(&db, "INSERT INTO t VALUES (2); CHECKPOINT");
    }
    assert_eq!(header_version(&path), 3, "nothing format 4 needs was written");
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE stamps (at TIMESTAMPTZ, opens TIME); INSERT INTO stamps VALUES ('2024-07-31 10:00:00+00', '08:30')");
        assert_eq!(header_version(&path), 4, "raised before the table went into the log");
    }
    let db = Database::open(&path).unwrap();
    assert_eq!(scalar(&db, "SELECT count(*) FROM stamps WHERE opens = TIME '08:30'"), ScalarValue::Int64(1));
}

/// DELETE, UPDATE and TRUNCATE survive a crash (the log: deleted row ids and new rows),
/// checkpoints (blocks with their deleted rows) and reopening, small and large alike; a
/// key freed by a DELETE is free after recovery too.
#[test]
fn deletes_updates_and_truncates_survive_the_log_checkpoints_and_reopening() {
    let dir = scratch("dml");
    let path = dir.join("db.apiary");
    let wal = dir.join("db.apiary.wal");
    const STATE: &str = "SELECT count(*), sum(k), sum(v), count(s), min(s), max(s) FROM t";
    let expected;
    {
        let db = Database::open(&path).unwrap();
        run(&db, "SET block_size = 1000; CREATE TABLE t (k INTEGER PRIMARY KEY, v BIGINT, s VARCHAR)");
        // A large insert (a checkpoint), then small changes (the log) on top of it.
        run(&db, "INSERT INTO t SELECT i, i * 10, 'row ' || (i % 50) FROM range(0, 5000) r(i)");
        run(&db, "DELETE FROM t WHERE k % 100 = 7");
        run(&db, "UPDATE t SET v = -v, s = NULL WHERE k BETWEEN 990 AND 1010");
        run(&db, "INSERT INTO t VALUES (7, 1, 'seven again')");
        let before = query(&db, STATE);
        let recovered = crash_copy(&path, "small");
        assert_eq!(query(&recovered, STATE), before, "small changes come back from the log");
        drop(recovered);
        // A large delete and a large update are checkpointed.
        run(&db, "DELETE FROM t WHERE k >= 3000");
        run(&db, "UPDATE t SET v = v + 1 WHERE k < 2000");
        let wal_bytes = std::fs::metadata(&wal).unwrap().len();
        assert!(wal_bytes < 100, "large changes are checkpointed, not logged ({wal_bytes} bytes of log)");
        let before = query(&db, STATE);
        let recovered = crash_copy(&path, "large");
        assert_eq!(query(&recovered, STATE), before, "large changes come back from the checkpoint");
        drop(recovered);
        // Small changes after it: the log names rows of the checkpointed blocks.
        run(&db, "DELETE FROM t WHERE k IN (1, 2, 3); UPDATE t SET s = 'x' WHERE k = 4");
        expected = query(&db, STATE);
        let recovered = crash_copy(&path, "mixed");
        assert_eq!(query(&recovered, STATE), expected);
        // The freed keys are free after recovery.
        run(&recovered, "INSERT INTO t VALUES (1, 0, 'one')");
        assert!(recovered.connect().execute("INSERT INTO t VALUES (4, 0, 'dup')").is_err());
        drop(recovered);
        // CHECKPOINT compacts: the deleted rows leave the blocks, the rows stay, and the
        // log after it names rows as the compacted file has them.
        let deleted = "SELECT max(deleted_rows) FROM apiary_storage_info() WHERE table_name = 't'";
        assert!(matches!(scalar(&db, deleted), ScalarValue::Int64(n) if n > 2000), "{:?}", scalar(&db, deleted));
        run(&db, "CHECKPOINT");
        assert_eq!(scalar(&db, deleted), ScalarValue::Int64(0));
        assert_eq!(query(&db, STATE), expected, "compaction keeps the rows");
        // 19 rows: 107 was deleted before.
        run(&db, "DELETE FROM t WHERE k BETWEEN 100 AND 119; UPDATE t SET s = 'after compaction' WHERE k = 120");
        let after = query(&db, STATE);
        let recovered = crash_copy(&path, "compacted");
        assert_eq!(query(&recovered, STATE), after, "the log after a compaction");
        drop(recovered);
        run(&db, "INSERT INTO t VALUES (100, 1000, 'back')");
    }
    let db = Database::open(&path).unwrap();
    let row = &query(&db, STATE)[0];
    assert_eq!(row[0], ScalarValue::Int64(2968 - 19 + 1), "closing folded the log into the file: {row:?}");
    run(&db, "TRUNCATE t");
    let recovered = crash_copy(&path, "truncated");
    assert_eq!(scalar(&recovered, "SELECT count(*) FROM t"), ScalarValue::Int64(0));
    run(&recovered, "INSERT INTO t VALUES (1, 1, 'after truncate')");
    drop(recovered);
    drop(db);
    let db = Database::open(&path).unwrap();
    assert_eq!(scalar(&db, "SELECT count(*) FROM t"), ScalarValue::Int64(0));
    assert!(header_version(&path) >= 5, "a block with deleted rows needs format 5");
}

/// DEFAULT expressions and CHECK constraints survive the log and checkpoints (a file of
/// format 5 is raised to 6 before the first such table is logged), and COPY fills the
/// columns a file leaves out with their defaults and checks the rows it loads.
#[test]
fn defaults_and_checks_survive_reopening_and_serve_copy() {
    let dir = scratch("defaults");
    let path = dir.join("db.apiary");
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE plain (a INTEGER); INSERT INTO plain VALUES (1)");
    }
    set_header_version(&path, 5);
    {
        let db = Database::open(&path).unwrap();
        run(&db, "INSERT INTO plain VALUES (2); CHECKPOINT");
    }
    assert_eq!(header_version(&path), 5, "nothing format 6 needs was written");
    let create = "CREATE TABLE t (id INTEGER, label VARCHAR DEFAULT 'dflt', qty INTEGER DEFAULT 7 CHECK (qty > 0), \
                  CONSTRAINT small CHECK (qty < 1000))";
    let csv = dir.join("rows.csv");
    std::fs::write(&csv, "1\n2\n3\n").unwrap();
    let bad_csv = dir.join("bad.csv");
    std::fs::write(&bad_csv, "4,-1\n").unwrap();
    let check = |db: &Database| {
        run(db, "INSERT INTO t (id) VALUES (100)");
        assert!(matches!(db.connect().execute("INSERT INTO t (id, qty) VALUES (101, 0)"), Err(ApiaryError::CheckViolation(_))));
        assert!(
            matches!(db.connect().execute("UPDATE t SET qty = 5000"), Err(e) if e.to_string().contains("\"small\"")),
            "the table constraint keeps its name"
        );
        run(db, "DELETE FROM t WHERE id = 100");
    };
    {
        let db = Database::open(&path).unwrap();
        run(&db, create);
        assert_eq!(header_version(&path), 6, "raised before the table went into the log");
        run(&db, &format!("COPY t (id) FROM '{}' (HEADER false)", csv.display()));
        let error = db.connect().execute(&format!("COPY t (id, qty) FROM '{}' (HEADER false)", bad_csv.display())).unwrap_err();
        assert_eq!(error.sqlstate(), "23514", "{error}");
        check(&db);
        // A crash now: the copy replays the table's definition from the log.
        let recovered = crash_copy(&path, "crashed");
        assert_eq!(query(&recovered, "SELECT count(*) FROM t").len(), 1);
        check(&recovered);
    }
    let expected = vec![vec![ScalarValue::Int64(3), ScalarValue::Int64(21), ScalarValue::Utf8("dflt".into())]];
    let state = "SELECT count(*), sum(qty), min(label) FROM t";
    // Closing folded the log into the file.
    let db = Database::open(&path).unwrap();
    assert_eq!(query(&db, state), expected);
    check(&db);
    let _ = std::fs::remove_dir_all(&dir);
}

/// ALTER TABLE is made durable by a checkpoint: after a crash (a copy of the file and log
/// taken while the database is open) and after reopening, the table has its new name,
/// columns, defaults and rows, and rows written after the ALTER (to the log) replay onto it.
#[test]
fn altered_tables_survive_crashes_and_reopening() {
    let dir = scratch("alter");
    let path = dir.join("db.apiary");
    const STATE: &str = "SELECT count(*), sum(k), sum(extra), min(label), count(DISTINCT label) FROM renamed";
    let expected;
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE t (k BIGINT, v INTEGER, s VARCHAR); INSERT INTO t SELECT g, g % 10, 's' || (g % 3) FROM generate_series(1, 100000) AS x(g)");
        run(&db, "DELETE FROM t WHERE k % 1000 = 0");
        run(
            &db,
            "ALTER TABLE t ADD COLUMN extra INTEGER DEFAULT 2, DROP COLUMN v, RENAME COLUMN s TO label; ALTER TABLE t RENAME TO renamed",
        );
        run(&db, "INSERT INTO renamed (k, label) VALUES (-1, 'after')");
        expected = query(&db, STATE);
        assert_eq!(expected[0][0], ScalarValue::Int64(99_901), "{expected:?}");
        let recovered = crash_copy(&path, "crashed");
        assert_eq!(query(&recovered, STATE), expected, "after a crash");
        assert!(recovered.connect().execute("SELECT v FROM renamed").is_err());
        run(&recovered, "INSERT INTO renamed (k) VALUES (-2)");
        assert_eq!(scalar(&recovered, "SELECT extra FROM renamed WHERE k = -2"), ScalarValue::Int32(2), "the default survives");
    }
    let db = Database::open(&path).unwrap();
    assert_eq!(query(&db, STATE), expected, "after reopening");
    let _ = std::fs::remove_dir_all(&dir);
}

/// DDL inside a transaction block: a committed block's tables, views, alterations and
/// rows survive a crash and reopening; an open block leaves nothing.
#[test]
fn ddl_in_transactions_survives_crashes_and_an_open_block_leaves_nothing() {
    let dir = scratch("transaction_ddl");
    let path = dir.join("db.apiary");
    const STATE: &str = "SELECT (SELECT count(*) FROM made), (SELECT sum(k) FROM made), (SELECT count(*) FROM old_t), \
                         (SELECT sum(n) FROM tally), (SELECT count(*) FROM information_schema.tables)";
    let expected;
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE old_t (k INTEGER); INSERT INTO old_t SELECT * FROM generate_series(1, 10); CREATE TABLE doomed (x INTEGER)");
        let mut conn = db.connect();
        for sql in [
            "BEGIN",
            "CREATE TABLE made (k BIGINT PRIMARY KEY, note VARCHAR DEFAULT 'd')",
            "INSERT INTO made (k) SELECT g FROM generate_series(1, 50000) AS x(g)",
            "ALTER TABLE old_t ADD COLUMN n INTEGER DEFAULT 3",
            "DELETE FROM old_t WHERE k > 8",
            "DROP TABLE doomed",
            "CREATE VIEW tally AS SELECT n FROM old_t",
            "COMMIT",
        ] {
            conn.execute(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        // An open block at the crash: none of it may survive.
        let mut open = db.connect();
        for sql in ["BEGIN", "CREATE TABLE uncommitted (a INTEGER)", "INSERT INTO uncommitted VALUES (1)", "DROP TABLE made"] {
            open.execute(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        expected = query(&db, STATE);
        assert_eq!(expected[0][0], ScalarValue::Int64(50_000), "{expected:?}");
        let recovered = crash_copy(&path, "crashed");
        assert_eq!(query(&recovered, STATE), expected, "after a crash");
        assert!(recovered.connect().execute("SELECT * FROM doomed").is_err());
        assert!(recovered.connect().execute("SELECT * FROM uncommitted").is_err());
        assert_eq!(scalar(&recovered, "SELECT min(note) FROM made"), ScalarValue::Utf8("d".into()));
    }
    let db = Database::open(&path).unwrap();
    assert_eq!(query(&db, STATE), expected, "after reopening");
    let _ = std::fs::remove_dir_all(&dir);
}

/// FOREIGN KEY actions (file format 8) survive a crash through the log and reopening
/// through a checkpoint; a statement's cascaded changes are logged with it.
#[test]
fn foreign_key_actions_survive_crashes() {
    let dir = scratch("fk_actions");
    let path = dir.join("db.apiary");
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE a (id INTEGER PRIMARY KEY)");
        run(&db, "CREATE TABLE b (id INTEGER PRIMARY KEY, a INTEGER REFERENCES a ON DELETE CASCADE ON UPDATE SET NULL)");
        run(&db, "INSERT INTO a SELECT * FROM range(0, 10); INSERT INTO b SELECT i, i % 10 FROM range(0, 100) t(i)");
        run(&db, "DELETE FROM a WHERE id = 1");
        let recovered = crash_copy(&path, "crashed");
        assert_eq!(scalar(&recovered, "SELECT count(*) FROM b"), ScalarValue::Int64(90), "the cascade was logged with the DELETE");
        run(&recovered, "DELETE FROM a WHERE id = 2");
        assert_eq!(scalar(&recovered, "SELECT count(*) FROM b"), ScalarValue::Int64(80), "the action was read back from the log");
        // Renaming the parent renames it in the child's key too, in one commit.
        run(&db, "ALTER TABLE a RENAME TO parent");
        let recovered = crash_copy(&path, "crashed_after_rename");
        run(&recovered, "DELETE FROM parent WHERE id = 2");
        assert_eq!(scalar(&recovered, "SELECT count(*) FROM b"), ScalarValue::Int64(80));
        run(&db, "CHECKPOINT");
    }
    let db = Database::open(&path).unwrap();
    run(&db, "UPDATE parent SET id = 30 WHERE id = 3");
    assert_eq!(scalar(&db, "SELECT count(*) FROM b WHERE a IS NULL"), ScalarValue::Int64(10));
    run(&db, "DELETE FROM parent WHERE id = 4");
    assert_eq!(scalar(&db, "SELECT count(*) FROM b"), ScalarValue::Int64(80));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sequences (CREATE SEQUENCE, SERIAL, identity) survive a crash through the log and
/// reopening through a checkpoint, and never hand out a value twice: not one a committed
/// row holds, nor one a `SELECT nextval` returned.
#[test]
fn sequences_survive_crashes_and_never_repeat_a_value() {
    let dir = scratch("sequences");
    let path = dir.join("db.apiary");
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE SEQUENCE s INCREMENT BY 10 START WITH 5; CREATE TABLE t (id SERIAL PRIMARY KEY, v INTEGER)");
        run(&db, "CREATE TABLE g (id BIGINT GENERATED ALWAYS AS IDENTITY, v INTEGER)");
        run(&db, "CREATE TABLE child (t_id INTEGER REFERENCES t, CONSTRAINT self FOREIGN KEY (t_id) REFERENCES t (id))");
        run(&db, "INSERT INTO t (v) VALUES (1), (2), (3); INSERT INTO g (v) SELECT * FROM generate_series(1, 1000)");
        assert_eq!(scalar(&db, "SELECT nextval('s')"), ScalarValue::Int64(5));
        assert_eq!(scalar(&db, "SELECT nextval('s')"), ScalarValue::Int64(15), "returned, so never again");
        let recovered = crash_copy(&path, "crashed");
        assert_eq!(scalar(&recovered, "SELECT nextval('s')"), ScalarValue::Int64(25));
        run(&recovered, "INSERT INTO t (v) VALUES (4)");
        assert_eq!(scalar(&recovered, "SELECT max(id) FROM t"), ScalarValue::Int32(4));
        run(&recovered, "INSERT INTO g (v) VALUES (0)");
        assert_eq!(scalar(&recovered, "SELECT max(id) FROM g"), ScalarValue::Int64(1001));
        // A rolled-back insert's values stay used.
        run(&db, "BEGIN; INSERT INTO t (v) VALUES (9); ROLLBACK");
        run(&db, "SELECT setval('s', 980)");
        // A prepared statement's cached plan takes values too.
        let mut conn = db.connect();
        let mut next = conn.prepare("SELECT nextval('s')").unwrap();
        for expected in [990, 1000] {
            let result = conn.execute_prepared(&mut next).unwrap();
            assert_eq!(result.rows().next().unwrap()[0], ScalarValue::Int64(expected));
        }
        let recovered = crash_copy(&path, "crashed_again");
        assert_eq!(scalar(&recovered, "SELECT nextval('s')"), ScalarValue::Int64(1010));
        run(&recovered, "INSERT INTO t (v) VALUES (5)");
        assert_eq!(scalar(&recovered, "SELECT max(id) FROM t"), ScalarValue::Int32(5));
        run(&db, "CHECKPOINT");
        run(&db, "INSERT INTO t (v) VALUES (6)");
    }
    let db = Database::open(&path).unwrap();
    assert_eq!(scalar(&db, "SELECT nextval('s')"), ScalarValue::Int64(1010));
    run(&db, "INSERT INTO t (v) VALUES (7)");
    assert_eq!(query(&db, "SELECT id, v FROM t ORDER BY id").len(), 5);
    assert_eq!(scalar(&db, "SELECT id FROM t WHERE v = 7"), ScalarValue::Int32(6));
    assert!(db.connect().execute("INSERT INTO g VALUES (1, 1)").is_err(), "still GENERATED ALWAYS");
    let declared = "SELECT string_agg(sequence_name || ' ' || data_type, ', ' ORDER BY sequence_name) FROM information_schema.sequences";
    assert_eq!(scalar(&db, declared), ScalarValue::Utf8("g_id_seq bigint, s bigint, t_id_seq integer".into()));
    run(&db, "INSERT INTO child VALUES (1), (NULL)");
    let error = db.connect().execute("INSERT INTO child VALUES (999)").unwrap_err();
    assert_eq!(error.sqlstate(), "23503", "the foreign keys survive: {error}");
    assert!(error.to_string().contains("child_t_id_fkey") || error.to_string().contains("\"self\""), "{error}");
    assert_eq!(db.connect().execute("DELETE FROM t WHERE id = 1").unwrap_err().sqlstate(), "23503");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An index survives reopening (its definition; the map is built again on first use),
/// and a scan whose filter fixes its key reads only the rows it names.
#[test]
fn indexes_survive_reopening_and_choose_blocks() {
    let dir = scratch("indexes");
    let path = dir.join("db.apiary");
    {
        let db = Database::open(&path).unwrap();
        run(&db, "CREATE TABLE t AS SELECT g AS id, g % 10 AS v FROM generate_series(1, 200000) AS s(g); CREATE INDEX t_id ON t (id)");
        let plan = explain_analyze(&db, "SELECT v FROM t WHERE id = 150000");
        assert!(plan.contains("index t_id: 1 candidate rows"), "{plan}");
        run(&db, "INSERT INTO t VALUES (150000, 42)");
    }
    let db = Database::open(&path).unwrap();
    assert_eq!(query(&db, "SELECT v FROM t WHERE id = 150000 ORDER BY v").len(), 2);
    let plan = explain_analyze(&db, "SELECT v FROM t WHERE id = 150000");
    assert!(plan.contains("index t_id: 2 candidate rows"), "{plan}");
    // Primary keys and UNIQUE constraints get an index of their own.
    run(&db, "CREATE TABLE k (id INTEGER PRIMARY KEY, code VARCHAR UNIQUE); INSERT INTO k SELECT id, 'c' || id FROM t WHERE id <= 100000");
    let plan = explain_analyze(&db, "SELECT code FROM k WHERE id = 777");
    assert!(plan.contains("index k_pkey: 1 candidate rows"), "{plan}");
    let plan = explain_analyze(&db, "SELECT id FROM k WHERE code = 'c777'");
    assert!(plan.contains("index k_code_key: 1 candidate rows"), "{plan}");
    assert_eq!(scalar(&db, "SELECT id FROM k WHERE code = 'c777'"), ScalarValue::Int32(777));
    let _ = std::fs::remove_dir_all(&dir);
}
