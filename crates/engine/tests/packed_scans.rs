//! Packed blocks (frame-of-reference and dictionary codes in memory) and range
//! predicates tested on their codes: every answer must equal the one over the same rows
//! stored unpacked (`SET packed_blocks = off`) and the one with the predicates tested on
//! decoded values (`SET code_predicates = off`), for random conjunctions of ranges on
//! columns of every packed width, steps (decimals in whole units), negative values,
//! bounds between steps and outside the blocks' ranges, with NULLs and strings beside.

use apiary::{Connection, Database, QueryResult};

fn rows_text(result: &QueryResult) -> Vec<String> {
    let mut rows = Vec::new();
    for chunk in &result.chunks {
        for r in 0..chunk.row_count() {
            let cells: Vec<String> =
                (0..chunk.column_count()).map(|c| QueryResult::format_cell(chunk, r, c).unwrap_or_else(|| "NULL".into())).collect();
            rows.push(cells.join("|"));
        }
    }
    rows
}

const ROWS: i64 = 20_000;

/// Two tables of the same rows in blocks of 1,000: `packed` (the default) and `plain`.
fn database() -> (Database, Connection) {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    conn.execute("SET block_size = 1000").unwrap();
    for (table, packed) in [("packed", "on"), ("plain", "off")] {
        conn.execute(&format!("SET packed_blocks = {packed}")).unwrap();
        conn.execute(&format!(
            "CREATE TABLE {table} (k INTEGER, q DECIMAL(15,2), d DATE, p BIGINT, n INTEGER, s SMALLINT, x BIGINT, t VARCHAR)"
        ))
        .unwrap();
        for start in (0..ROWS).step_by(5_000) {
            let values: Vec<String> = (start..start + 5_000)
                .map(|i| {
                    let q = (i * 7) % 50 + 1;
                    let x = if i % 13 == 0 { "NULL".to_string() } else { ((i * 31) % 1000).to_string() };
                    format!(
                        "({i}, {q}.00, DATE '1994-01-01' + {}, {}, {}, {}, {x}, 'tag{}')",
                        (i * 7919) % 2557,
                        90_000 + (i * 104_729) % 10_000_000,
                        (i / 1000) * 5 - (i % 300),
                        i % 100,
                        i % 5
                    )
                })
                .collect();
            conn.execute(&format!("INSERT INTO {table} VALUES {}", values.join(", "))).unwrap();
        }
    }
    conn.execute("RESET packed_blocks").unwrap();
    (db, conn)
}

/// A small deterministic generator (the same conjunctions on every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.next(items.len() as u64) as usize]
    }
}

/// One conjunct: a range on a packed column mostly, sometimes something else.
fn conjunct(rng: &mut Lcg) -> String {
    let op = rng.pick(&["<", "<=", ">", ">=", "=", "BETWEEN", "NOT BETWEEN"]);
    let (column, low, high): (&str, String, String) = match rng.next(9) {
        0 => {
            // Decimals in whole units: bounds on and between the steps, and outside.
            let a = rng.next(60) as i64 - 5;
            let cents = rng.pick(&["00", "50", "99", "01"]);
            ("q", format!("{a}.{cents}"), format!("{}.{cents}", a + rng.next(20) as i64))
        }
        1 => {
            let a = rng.next(2700) as i64 - 50;
            ("d", format!("DATE '1994-01-01' + {a}"), format!("DATE '1994-01-01' + {}", a + rng.next(800) as i64))
        }
        2 => {
            let a = rng.next(10_200_000) as i64;
            ("p", a.to_string(), (a + rng.next(3_000_000) as i64).to_string())
        }
        3 => {
            let a = rng.next(420) as i64 - 310;
            ("n", a.to_string(), (a + rng.next(100) as i64).to_string())
        }
        4 => {
            let a = rng.next(110) as i64 - 5;
            ("s", a.to_string(), (a + rng.next(30) as i64).to_string())
        }
        5 => {
            // Sorted keys: whole blocks pass or fail.
            let a = rng.next(ROWS as u64 + 2000) as i64 - 1000;
            ("k", a.to_string(), (a + rng.next(6000) as i64).to_string())
        }
        6 => {
            // A column with NULLs (not packed).
            let a = rng.next(1000) as i64;
            ("x", a.to_string(), (a + rng.next(400) as i64).to_string())
        }
        7 => return format!("t {} 'tag{}'", rng.pick(&["=", "<", ">="]), rng.next(6)),
        _ => return format!("k % {} = {}", rng.next(5) + 2, rng.next(2)),
    };
    match op {
        "BETWEEN" | "NOT BETWEEN" => format!("{column} {op} {low} AND {high}"),
        _ if rng.next(2) == 0 => format!("{low} {} {column}", flip(op)),
        _ => format!("{column} {op} {low}"),
    }
}

fn flip(op: &str) -> &str {
    match op {
        "<" => ">",
        "<=" => ">=",
        ">" => "<",
        ">=" => "<=",
        other => other,
    }
}

#[test]
fn packed_answers_equal_unpacked_ones() {
    let (_db, mut conn) = database();
    let mut rng = Lcg(0x5eed_2026);
    let configurations = [
        "SET threads = 1; SET vector_size = 2048",
        "SET threads = 2; SET vector_size = 64",
        "SET threads = 1; SET vector_size = 1024; SET simd = off",
        "SET threads = 2; SET vector_size = 2048; SET staging = off",
    ];
    let mut on_codes = 0;
    for case in 0..240 {
        let conjuncts: Vec<String> = (0..1 + rng.next(3)).map(|_| conjunct(&mut rng)).collect();
        let filter = conjuncts.join(" AND ");
        let aggregate = format!("SELECT count(*), sum(p), min(d), max(q), sum(n), count(x), min(t) FROM {{}} WHERE {filter}");
        let rows = format!("SELECT k, q, d, p, n, s, x, t FROM {{}} WHERE {filter} ORDER BY k LIMIT 40");
        for template in [aggregate, rows] {
            let configuration = configurations[case % configurations.len()];
            for statement in configuration.split("; ") {
                conn.execute(statement).unwrap();
            }
            let run = |conn: &mut Connection, table: &str| {
                let sql = template.replace("{}", table);
                rows_text(&conn.query(&sql).unwrap_or_else(|e| panic!("{sql}: {e}")))
            };
            let expected = run(&mut conn, "plain");
            let packed = run(&mut conn, "packed");
            assert_eq!(packed, expected, "{} under {configuration}", template.replace("{}", "packed"));
            conn.execute("SET code_predicates = off").unwrap();
            let decoded = run(&mut conn, "packed");
            conn.execute("RESET code_predicates").unwrap();
            assert_eq!(decoded, expected, "{} under {configuration}, code_predicates off", template.replace("{}", "packed"));
        }
        let plan = rows_text(&conn.query(&format!("EXPLAIN ANALYZE SELECT count(*) FROM packed WHERE {filter}")).unwrap()).join("\n");
        on_codes += (plan.contains("filtered on codes") && !plan.contains(" 0 filtered on codes")) as usize;
    }
    // The generator's ranges do reach the code kernels.
    assert!(on_codes > 40, "only {on_codes} of 240 filters were tested on codes");
}

#[test]
fn packed_stripes_take_less_memory_and_decode_exactly() {
    let (_db, mut conn) = database();
    for column in ["k", "q", "d", "p", "n", "s", "x", "t"] {
        let sql = format!("SELECT {column} FROM {{}} ORDER BY k");
        let plain = rows_text(&conn.query(&sql.replace("{}", "plain")).unwrap());
        let packed = rows_text(&conn.query(&sql.replace("{}", "packed")).unwrap());
        assert_eq!(packed, plain, "{column}");
    }
    let bytes = |conn: &mut Connection, table: &str| -> i64 {
        let result = conn.query(&format!("SELECT sum(memory_bytes) FROM apiary_storage_info() WHERE table_name = '{table}'")).unwrap();
        rows_text(&result)[0].parse().unwrap()
    };
    let (packed, plain) = (bytes(&mut conn, "packed"), bytes(&mut conn, "plain"));
    assert!(packed * 2 < plain, "packed {packed} bytes, plain {plain}");
    // The in-memory forms are shown per column.
    let forms = rows_text(&conn.query("SELECT column_name, encodings FROM apiary_storage_info() WHERE table_name = 'packed'").unwrap());
    assert!(forms.contains(&"q|in memory: 1-byte codes x20".to_string()), "{forms:?}");
    assert!(forms.contains(&"x|in memory: values x20".to_string()), "{forms:?}");
    assert!(forms.contains(&"t|in memory: dictionary (1-byte codes) x20".to_string()), "{forms:?}");
}

#[test]
fn runtime_filters_on_packed_keys_drop_the_same_rows() {
    let (_db, mut conn) = database();
    // The key in each integer width, so that each join compares like types (a runtime
    // filter needs the scan's column itself as the key).
    conn.execute("CREATE TABLE dim (ki INTEGER, kb BIGINT, ks SMALLINT, tag VARCHAR)").unwrap();
    // Keys inside some blocks' ranges, spanning others, outside all; negative ones for n.
    let keys: Vec<String> = (4_990i64..6_010)
        .step_by(3)
        .chain([-250, -3, 0, 7, 90_000, 17_000_000])
        .chain((0..40).map(|i| 90_000 + i * 104_729 % 10_000_000))
        .map(|k: i64| {
            let small = if k.abs() < 30_000 { k.to_string() } else { "NULL".to_string() };
            format!("({k}, {k}, {small}, 't{}')", k.rem_euclid(4))
        })
        .collect();
    conn.execute(&format!("INSERT INTO dim VALUES {}", keys.join(", "))).unwrap();
    for threads in [1, 2] {
        conn.execute(&format!("SET threads = {threads}")).unwrap();
        for (column, key) in [("k", "ki"), ("n", "ki"), ("p", "kb"), ("s", "ks")] {
            for join in ["JOIN", "WHERE EXISTS"] {
                let sql = match join {
                    "JOIN" => format!(
                        "SELECT count(*), sum({{t}}.p), min({{t}}.q), max(dim.tag) FROM {{t}} JOIN dim ON {{t}}.{column} = dim.{key}"
                    ),
                    _ => format!(
                        "SELECT count(*), sum(p), max(d) FROM {{t}} WHERE EXISTS (SELECT 1 FROM dim WHERE dim.{key} = {{t}}.{column})"
                    ),
                };
                let run = |conn: &mut Connection, table: &str| rows_text(&conn.query(&sql.replace("{t}", table)).unwrap());
                let plain = run(&mut conn, "plain");
                assert_eq!(run(&mut conn, "packed"), plain, "{sql} on {threads} threads");
                conn.execute("SET code_predicates = off").unwrap();
                assert_eq!(run(&mut conn, "packed"), plain, "{sql} on {threads} threads, code_predicates off");
                conn.execute("RESET code_predicates").unwrap();
            }
        }
    }
    let plan = rows_text(&conn.query("EXPLAIN ANALYZE SELECT count(*) FROM packed JOIN dim ON packed.k = dim.ki").unwrap()).join("\n");
    assert!(plan.contains("runtime filter") && plan.contains("blocks skipped"), "{plan}");
}

/// Group keys that arrive as dictionary codes (strings of packed blocks with at most 256
/// distinct values) are grouped through the workers' maps from codes to groups: every
/// answer must equal grouping the same rows stored unpacked. The dictionaries differ
/// from block to block; some blocks of `w` have too many values for 1-byte codes and
/// some of `n` have NULLs (no codes), so one execution mixes both ways of grouping.
#[test]
fn grouping_by_dictionary_codes_equals_grouping_by_values() {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    conn.execute("SET block_size = 1000").unwrap();
    for (table, packed) in [("gpacked", "on"), ("gplain", "off")] {
        conn.execute(&format!("SET packed_blocks = {packed}")).unwrap();
        conn.execute(&format!(
            "CREATE TABLE {table} (i INTEGER, a VARCHAR, b CHAR(1), c VARCHAR, c2 VARCHAR, c3 VARCHAR, w VARCHAR, n VARCHAR, v DECIMAL(15,2), x BIGINT)"
        ))
        .unwrap();
        let values: Vec<String> = (0..12_000i64)
            .map(|i| {
                let block = i / 1000;
                let w = if block % 2 == 0 { format!("w{}", i % 400) } else { format!("w{}", i % 5) };
                let n = if block % 3 == 1 && i % 11 == 0 { "NULL".to_string() } else { format!("'n{}'", i % 4) };
                let x = if i % 13 == 0 { "NULL".to_string() } else { ((i * 31) % 1000 - 200).to_string() };
                format!(
                    "({i}, 'a{}', '{}', 'c{}', 'd{}', 'e{}', '{w}', {n}, {}.{:02}, {x})",
                    (block + i % 7) % 12,
                    ["A", "B", "C"][(i % 3) as usize],
                    i % 20,
                    (i * 7) % 20,
                    (i * 13) % 17,
                    (i * 37) % 5000 - 1000,
                    i % 100
                )
            })
            .collect();
        conn.execute(&format!("INSERT INTO {table} VALUES {}", values.join(", "))).unwrap();
    }
    conn.execute("RESET packed_blocks").unwrap();
    let queries = [
        "SELECT a, b, count(*), sum(v), avg(v), sum(x), avg(x), min(c), max(i) FROM {t} GROUP BY a, b ORDER BY a, b",
        "SELECT b, count(*), sum(v), count(x) FROM {t} WHERE i % 3 <> 1 AND v > 0 GROUP BY b ORDER BY b",
        "SELECT a, b, c, count(*), sum(v) FROM {t} GROUP BY a, b, c ORDER BY a, b, c",
        "SELECT c, w, count(*), sum(x) FROM {t} GROUP BY c, w ORDER BY c, w",
        "SELECT n, b, count(*), sum(v) FROM {t} GROUP BY n, b ORDER BY n, b",
        "SELECT a, count(*) FILTER (WHERE x > 10), sum(v) FILTER (WHERE b = 'A') FROM {t} GROUP BY a ORDER BY a",
        "SELECT a, b, count(*), sum(v) FROM {t} GROUP BY ROLLUP (a, b) ORDER BY a, b",
        "SELECT a || 'x', count(*) FROM {t} GROUP BY 1 ORDER BY 1",
        "SELECT c, c2, c3, count(*), sum(v) FROM {t} GROUP BY c, c2, c3 ORDER BY c, c2, c3",
        "SELECT DISTINCT a, b FROM {t} ORDER BY a, b",
        "SELECT b, i % 4 AS m, count(*) FROM {t} GROUP BY b, m ORDER BY b, m",
        // Integer keys of 0..=255 beside dictionary codes serve as their own codes (15
        // groups: the few-groups sums); past 255 or below 0 a chunk takes the general path.
        "SELECT b, i % 5 AS m, count(*), sum(x), avg(v), sum(v) FROM {t} GROUP BY b, m ORDER BY b, m",
        "SELECT a, CASE WHEN i < 6000 THEN i % 7 ELSE i % 300 END AS m, count(*), sum(v) FROM {t} GROUP BY a, m ORDER BY a, m",
        "SELECT b, i % 7 - 3 AS m, count(*), sum(x) FROM {t} GROUP BY b, m ORDER BY b, m",
        "SELECT b, CAST(i % 3 AS SMALLINT) AS m, a, count(*) FROM {t} GROUP BY b, m, a ORDER BY b, m, a",
        "SELECT count(*), sum(s) FROM (SELECT a, sum(v) AS s FROM {t} GROUP BY a HAVING count(*) > 990) q",
    ];
    for configuration in
        ["SET threads = 1; SET vector_size = 2048", "SET threads = 2; SET vector_size = 128", "SET threads = 2; SET vector_size = 1024"]
    {
        for statement in configuration.split("; ") {
            conn.execute(statement).unwrap();
        }
        for query in queries {
            let run = |conn: &mut Connection, table: &str| {
                let sql = query.replace("{t}", table);
                rows_text(&conn.query(&sql).unwrap_or_else(|e| panic!("{sql}: {e}")))
            };
            let expected = run(&mut conn, "gplain");
            assert!(!expected.is_empty(), "{query}");
            assert_eq!(run(&mut conn, "gpacked"), expected, "{query} under {configuration}");
        }
    }
    // The codes are used, alone or beside the general path.
    let analyze = |conn: &mut Connection, sql: &str| rows_text(&conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap()).join("\n");
    let plan = analyze(&mut conn, "SELECT a, b, count(*) FROM gpacked GROUP BY a, b");
    assert!(plan.contains("12000 of 12000 input rows grouped by dictionary codes"), "{plan}");
    let plan = analyze(&mut conn, "SELECT c, w, count(*) FROM gpacked GROUP BY c, w");
    assert!(plan.contains("6000 of 12000 input rows grouped by dictionary codes"), "{plan}");
    let plan = analyze(&mut conn, "SELECT b, i % 5 AS m, count(*) FROM gpacked GROUP BY b, m");
    assert!(plan.contains("12000 of 12000 input rows grouped by dictionary codes"), "{plan}");
    let plan = analyze(&mut conn, "SELECT b, i % 7 - 3 AS m, count(*) FROM gpacked GROUP BY b, m");
    assert!(!plan.contains("grouped by dictionary codes"), "{plan}");
    let plan = analyze(&mut conn, "SELECT a, b, count(*) FROM gplain GROUP BY a, b");
    assert!(!plan.contains("grouped by dictionary codes"), "{plan}");
    // A single integer key of a small range groups by its values; one of a wide range
    // (keys up to 2^31) by hashing from the chunk that no longer fits.
    let plan = analyze(&mut conn, "SELECT i % 100, count(*) FROM gplain GROUP BY 1");
    assert!(plan.contains("12000 of 12000 input rows grouped by a map of key values"), "{plan}");
    let plan = analyze(&mut conn, "SELECT CASE WHEN i < 3000 THEN i ELSE i * 100000 END, count(*) FROM gplain GROUP BY 1");
    assert!(plan.contains("input rows grouped by a map of key values") && !plan.contains("12000 of 12000"), "{plan}");
    // A computed key has no statistics: the planner expects a group per row and
    // partitions; the map still groups, each entry naming its key's partition, and the
    // answer is the hashing path's. (Four finalize tasks: four partitions.)
    conn.execute("SET threads = 2").unwrap();
    conn.execute("CREATE TABLE many AS SELECT i FROM generate_series(1, 50000) AS g(i)").unwrap();
    let sql = "SELECT i % 997 AS k, count(*), sum(i) FROM many GROUP BY 1";
    let plan = analyze(&mut conn, sql);
    assert!(plan.contains(" 4 tasks ") && plan.contains("50000 of 50000 input rows grouped by a map of key values"), "{plan}");
    let ordered = |conn: &mut Connection, sql: &str| {
        let mut rows = rows_text(&conn.query(sql).unwrap());
        rows.sort();
        rows
    };
    let by_map = ordered(&mut conn, sql);
    // The same groups through hashing: a key too wide for the map (the same grouping).
    let by_hash = ordered(&mut conn, "SELECT (i % 997) * 1000000 AS k, count(*), sum(i) FROM many GROUP BY 1");
    assert_eq!(by_map.len(), 997);
    let strip = |rows: &[String]| {
        rows.iter().map(|r| r.split_once(|c: char| !c.is_ascii_digit()).map_or(r.clone(), |(_, rest)| rest.to_string())).collect::<Vec<_>>()
    };
    let (mut a, mut b) = (strip(&by_map), strip(&by_hash));
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

/// A conjunct that runs after code filters kept few rows of a vector reads its columns
/// for those rows only (gathered, decoded per row); it must keep the rows the same
/// conjunct keeps over whole decoded vectors, NULLs included, at every density.
#[test]
fn conjuncts_after_a_selective_code_filter_keep_the_same_rows() {
    let (_db, mut conn) = database();
    let filters = [
        // About 2% of each vector survives `q = 17`, 6% `q BETWEEN 3 AND 5`, 80% `q <= 40`.
        "q = 17.00 AND n < s",
        "q = 17.00 AND x > s",
        "q BETWEEN 3.00 AND 5.00 AND x + n > s",
        "q BETWEEN 3.00 AND 5.00 AND d < DATE '1994-01-01' + s AND t <> 'tag2'",
        "q <= 40.00 AND x > s",
        "q = 9.00 AND k > 5000 AND x * 2 > n + s",
    ];
    for configuration in ["SET threads = 1; SET vector_size = 1024", "SET threads = 2; SET vector_size = 64"] {
        for statement in configuration.split("; ") {
            conn.execute(statement).unwrap();
        }
        for filter in filters {
            for template in [
                format!("SELECT count(*), sum(x), min(k), max(t) FROM {{}} WHERE {filter}"),
                format!("SELECT k, x, n, s, t FROM {{}} WHERE {filter} ORDER BY k LIMIT 60"),
            ] {
                let run = |conn: &mut Connection, table: &str| {
                    let sql = template.replace("{}", table);
                    rows_text(&conn.query(&sql).unwrap_or_else(|e| panic!("{sql}: {e}")))
                };
                let expected = run(&mut conn, "plain");
                assert!(!expected.is_empty());
                assert_eq!(run(&mut conn, "packed"), expected, "{} under {configuration}", template.replace("{}", "packed"));
            }
        }
    }
}
