//! Runtime filters: a scan on the probe side of an inner or semi hash join skips blocks
//! and drops rows outside the range of the join's build keys (known once the build
//! finished), and joins whose keys span a small range use a direct table. Answers must be
//! those of the plain join; EXPLAIN ANALYZE shows what the filter did.

use apiary::{Connection, Database, QueryResult};

fn text(result: &QueryResult) -> String {
    let chunk = &result.chunks[0];
    (0..chunk.row_count()).map(|r| QueryResult::format_cell(chunk, r, 0).unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

fn one_row(conn: &mut Connection, sql: &str) -> Vec<String> {
    let result = conn.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(result.row_count(), 1, "{sql}");
    (0..result.chunks[0].column_count()).map(|c| QueryResult::format_cell(&result.chunks[0], 0, c).unwrap_or("NULL".into())).collect()
}

/// `fact`: 100,000 rows in blocks of 1,000, `k` ascending (0..99,999), every 10th `k`
/// NULL, `d` a date rising with `k`; `dim`: keys 50,000..=50,999 twice each (duplicates).
fn database(threads: usize) -> (Database, Connection) {
    let db = Database::open_in_memory().expect("database");
    let mut conn = db.connect();
    conn.execute(&format!("SET threads = {threads}")).unwrap();
    conn.execute("SET block_size = 1000").unwrap();
    conn.execute("CREATE TABLE fact (k INTEGER, v BIGINT, d DATE)").unwrap();
    let mut values = Vec::new();
    for start in (0..100_000).step_by(10_000) {
        values.clear();
        for k in start..start + 10_000 {
            let key = if k % 10 == 9 { "NULL".to_string() } else { k.to_string() };
            values.push(format!("({key}, {}, DATE '2000-01-01' + {})", k % 7, k / 100));
        }
        conn.execute(&format!("INSERT INTO fact VALUES {}", values.join(", "))).unwrap();
    }
    conn.execute("CREATE TABLE dim (k INTEGER, tag VARCHAR, d DATE)").unwrap();
    let rows: Vec<String> = (50_000..51_000)
        .flat_map(|k| {
            let row = format!("({k}, 'a', DATE '2000-01-01' + {})", k / 100);
            [row.clone(), row]
        })
        .collect();
    conn.execute(&format!("INSERT INTO dim VALUES {}", rows.join(", "))).unwrap();
    (db, conn)
}

/// The count and sum of `v` over fact rows with `k` in 50,000..=50,999 (not NULL), each
/// matching two dim rows.
fn expected_inner() -> (u64, u64) {
    let keys = (50_000u64..51_000).filter(|k| k % 10 != 9);
    let (count, sum) = keys.fold((0, 0), |(c, s), k| (c + 1, s + k % 7));
    (2 * count, 2 * sum)
}

#[test]
fn inner_join_skips_blocks_outside_the_build_keys() {
    for threads in [1, 2] {
        let (_db, mut conn) = database(threads);
        let sql = "SELECT count(*), sum(v) FROM fact JOIN dim ON fact.k = dim.k";
        let (count, sum) = expected_inner();
        assert_eq!(one_row(&mut conn, sql), [count.to_string(), sum.to_string()], "{threads} threads");
        let explain = text(&conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap());
        assert!(explain.contains("runtime filter [50000..=50999]: 99 blocks skipped"), "{explain}");
        // Semi joins filter too; the answer counts each fact row once.
        let semi = one_row(&mut conn, "SELECT count(*) FROM fact WHERE k IN (SELECT k FROM dim)");
        assert_eq!(semi, [(count / 2).to_string()]);
    }
}

#[test]
fn rows_inside_a_partly_covered_block_are_dropped_before_the_probe() {
    let (_db, mut conn) = database(2);
    // Build keys 50,500..=51,499 cover half of a block at each end.
    conn.execute("CREATE TABLE narrow AS SELECT k + 500 AS k FROM dim").unwrap();
    let sql = "SELECT count(*) FROM fact JOIN narrow ON fact.k = narrow.k";
    let expected = 2 * (50_500u64..51_500).filter(|k| k % 10 != 9).count();
    assert_eq!(one_row(&mut conn, sql), [expected.to_string()]);
    let explain = text(&conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap());
    // Blocks 50 and 51 overlap the range: half of each is dropped row by row, and the
    // NULL keys (one in ten) of the other halves.
    assert!(explain.contains("runtime filter [50500..=51499]: 98 blocks skipped, 1100 rows dropped"), "{explain}");
}

#[test]
fn an_empty_build_skips_every_block() {
    let (_db, mut conn) = database(2);
    let sql = "SELECT count(*) FROM fact JOIN dim ON fact.k = dim.k WHERE dim.tag = 'none'";
    assert_eq!(one_row(&mut conn, sql), ["0"]);
    let explain = text(&conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap());
    assert!(explain.contains("runtime filter [no build keys]: 100 blocks skipped"), "{explain}");
}

#[test]
fn outer_and_null_safe_joins_keep_every_probe_row() {
    let (_db, mut conn) = database(2);
    // LEFT JOIN: the fact side is preserved, so no filter may drop its rows.
    let left = "SELECT count(*), count(dim.k) FROM fact LEFT JOIN dim ON fact.k = dim.k";
    let (count, _) = expected_inner();
    let unmatched = 100_000 - count / 2;
    assert_eq!(one_row(&mut conn, left), [(unmatched + count).to_string(), count.to_string()]);
    assert!(!text(&conn.query(&format!("EXPLAIN {left}")).unwrap()).contains("runtime filter"));
    // IS NOT DISTINCT FROM matches NULL keys: no range may drop them.
    conn.execute("INSERT INTO dim VALUES (NULL, 'n', NULL)").unwrap();
    let null_safe = "SELECT count(*) FROM fact JOIN dim ON fact.k IS NOT DISTINCT FROM dim.k";
    assert_eq!(one_row(&mut conn, null_safe), [(count + 10_000).to_string()]);
    assert!(!text(&conn.query(&format!("EXPLAIN {null_safe}")).unwrap()).contains("runtime filter"));
}

#[test]
fn date_keys_and_keys_of_several_columns() {
    let (_db, mut conn) = database(2);
    // Dates 2000-01-01 + 500..=509 (a build of 2,000 rows, 200 per date).
    let sql = "SELECT count(*) FROM fact JOIN dim ON fact.d = dim.d";
    assert_eq!(one_row(&mut conn, sql), [(1_000 * 200).to_string()]);
    let explain = text(&conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap());
    assert!(explain.contains("runtime filter [11457..=11466]"), "{explain}");
    // Two keys: both ranges filter.
    let both = "SELECT count(*) FROM fact JOIN dim ON fact.k = dim.k AND fact.d = dim.d";
    let (count, _) = expected_inner();
    assert_eq!(one_row(&mut conn, both), [count.to_string()]);
    let explain = text(&conn.query(&format!("EXPLAIN ANALYZE {both}")).unwrap());
    assert!(explain.contains("runtime filter [50000..=50999, 11457..=11466]"), "{explain}");
}

#[test]
fn direct_tables_match_hash_tables() {
    // Dense keys (a direct table) against the same keys spread out (a hash table): the
    // same matches, duplicates and misses, at both ends of the range and beyond.
    let (_db, mut conn) = database(2);
    conn.execute("CREATE TABLE sparse AS SELECT CAST(k AS BIGINT) * 1000003 AS k FROM dim").unwrap();
    conn.execute("CREATE TABLE fact_sparse AS SELECT CAST(k AS BIGINT) * 1000003 AS k, v FROM fact").unwrap();
    let dense = one_row(&mut conn, "SELECT count(*), sum(v), min(fact.k), max(fact.k) FROM fact JOIN dim ON fact.k = dim.k");
    let sparse =
        one_row(&mut conn, "SELECT count(*), sum(v), min(f.k) / 1000003, max(f.k) / 1000003 FROM fact_sparse f JOIN sparse s ON f.k = s.k");
    assert_eq!(dense, sparse);
    assert_eq!(dense[2..], ["50000", "50998"]);
}

/// Behind another probe, the scan tests keys against the later join's Bloom filter or
/// direct table (lookahead information passing): rows that will not match leave before
/// the first probe. Strings too (membership needs no range).
#[test]
fn a_star_join_tests_later_joins_keys_at_the_scan() {
    let (_db, mut conn) = database(2);
    conn.execute("CREATE TABLE tags (tag VARCHAR, label VARCHAR)").unwrap();
    conn.execute("INSERT INTO tags VALUES ('t3', 'three'), ('t5', 'five')").unwrap();
    conn.execute("CREATE TABLE fact2 AS SELECT k, v, 't' || CAST(v AS VARCHAR) AS tag FROM fact").unwrap();
    // Every 7th key (sparse: no range to speak of), and the tags of v = 3 or 5.
    conn.execute("CREATE TABLE sevens AS SELECT k FROM fact WHERE k % 7 = 0").unwrap();
    let sql = "SELECT count(*), sum(f.v) FROM fact2 f JOIN sevens s ON f.k = s.k JOIN tags t ON f.tag = t.tag";
    let keys = (0u64..100_000).filter(|k| k % 10 != 9 && k % 7 == 0 && (k % 7 == 3 || k % 7 == 5));
    assert_eq!(keys.count(), 0, "v = k % 7 is 0 for multiples of 7");
    assert_eq!(one_row(&mut conn, sql), ["0", "NULL"]);
    // Keys with v in {3, 5} among multiples of 11.
    conn.execute("CREATE TABLE elevens AS SELECT k FROM fact WHERE k % 11 = 0").unwrap();
    let sql = "SELECT count(*), sum(f.v) FROM fact2 f JOIN elevens e ON f.k = e.k JOIN tags t ON f.tag = t.tag";
    let matching: Vec<u64> = (0u64..100_000).filter(|k| k % 10 != 9 && k % 11 == 0 && matches!(k % 7, 3 | 5)).collect();
    let sum: u64 = matching.iter().map(|k| k % 7).sum();
    assert_eq!(one_row(&mut conn, sql), [matching.len().to_string(), sum.to_string()]);
    let plan = text(&conn.query(&format!("EXPLAIN {sql}")).unwrap());
    assert!(plan.contains("in build keys"), "{plan}");
    let analyzed = text(&conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap());
    let dropped: u64 = analyzed
        .split("rows dropped")
        .next()
        .and_then(|before| before.rsplit(' ').nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{analyzed}"));
    assert!(dropped > 50_000, "the scan dropped {dropped} rows:\n{analyzed}");
}

/// A semi join whose key comes from the build side of a join below it filters the scan of
/// the probe side's key, which equals it in every joined row (TPC-DS Q95: the order numbers
/// of 135 outer rows filter the web_sales scan under `IN (SELECT wr_order_number FROM
/// web_returns JOIN ...)`).
#[test]
fn a_semi_join_key_filters_the_scan_column_it_equals_through_a_join() {
    let (_db, mut conn) = database(2);
    conn.execute("CREATE TABLE picked (k INTEGER)").unwrap();
    conn.execute("INSERT INTO picked VALUES (50003), (50004), (50009), (70000)").unwrap();
    let sql = "SELECT count(*) FROM picked WHERE k IN (SELECT dim.k FROM fact JOIN dim ON fact.k = dim.k)";
    // 50009 is NULL in fact (every 10th key); 70000 is not in dim.
    assert_eq!(one_row(&mut conn, sql), ["2"]);
    let plan = text(&conn.query(&format!("EXPLAIN {sql}")).unwrap());
    let fact_scan = plan.lines().find(|l| l.contains("Scan fact")).unwrap_or_else(|| panic!("{plan}"));
    assert_eq!(fact_scan.matches("runtime filter").count(), 2, "the join's and the semi join's:\n{plan}");
    let analyzed = text(&conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap());
    assert!(analyzed.contains("99 blocks skipped"), "{analyzed}");
}

/// The rows the scan of `fact` passed on, from its EXPLAIN ANALYZE line
/// ("Scan fact AS f -- N rows, ...").
fn rows_the_fact_scan_passed(analyzed: &str) -> u64 {
    let scan = analyzed.lines().find(|l| l.contains("Scan fact")).unwrap_or_else(|| panic!("{analyzed}"));
    scan.split(" rows").next().and_then(|s| s.rsplit(' ').next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{scan}"))
}

/// A join right after the probe scan, on sparse build keys spanning the whole key range
/// (no block or row falls outside their range): the scan still tests the key against the
/// build's Bloom filter before it decodes the other columns, so the rows that cannot match
/// leave at the scan and the probe sees only the candidates (TPC-H Q8, Q17: a few hundred
/// parts against every lineitem).
#[test]
fn a_join_right_after_the_scan_drops_non_members_at_the_scan() {
    for threads in [1, 2] {
        let (_db, mut conn) = database(threads);
        conn.execute("CREATE TABLE picks AS SELECT k FROM fact WHERE k % 997 = 5").unwrap();
        let sql = "SELECT count(*), sum(f.v) FROM fact f JOIN picks p ON f.k = p.k";
        let matching: Vec<u64> = (0u64..100_000).filter(|k| k % 10 != 9 && k % 997 == 5).collect();
        let sum: u64 = matching.iter().map(|k| k % 7).sum();
        assert_eq!(one_row(&mut conn, sql), [matching.len().to_string(), sum.to_string()], "{threads} threads");
        let plan = text(&conn.query(&format!("EXPLAIN {sql}")).unwrap());
        assert!(plan.contains("k in build keys"), "{plan}");
        let analyzed = text(&conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap());
        let passed = rows_the_fact_scan_passed(&analyzed);
        assert!(passed < 5_000, "the scan passed {passed} rows to the probe:\n{analyzed}");
    }
}

/// A join on two keys: the scan tests both together against the build's Bloom filter, so
/// rows whose pair is absent leave at the scan even though each key alone spans the whole
/// range (TPC-H Q20: lineitem's (partkey, suppkey) against the chosen partsupp rows).
#[test]
fn a_join_on_two_keys_tests_the_pair_at_the_scan() {
    for threads in [1, 2] {
        let (_db, mut conn) = database(threads);
        // Pairs (k, v) for every 13th k; for every 91st k, v is shifted and does not match.
        conn.execute("CREATE TABLE pairs AS SELECT k, (v + CAST(k % 91 = 0 AS INTEGER)) % 7 AS v FROM fact WHERE k % 13 = 0").unwrap();
        let sql = "SELECT count(*), sum(f.k) FROM fact f JOIN pairs p ON f.k = p.k AND f.v = p.v";
        let matching: Vec<u64> = (0u64..100_000).filter(|k| k % 10 != 9 && k % 13 == 0 && k % 91 != 0).collect();
        let sum: u64 = matching.iter().sum();
        assert_eq!(one_row(&mut conn, sql), [matching.len().to_string(), sum.to_string()], "{threads} threads");
        let plan = text(&conn.query(&format!("EXPLAIN {sql}")).unwrap());
        assert!(plan.contains("(k, v) in build keys"), "{plan}");
        let analyzed = text(&conn.query(&format!("EXPLAIN ANALYZE {sql}")).unwrap());
        let passed = rows_the_fact_scan_passed(&analyzed);
        assert!(passed < 2 * matching.len() as u64 + 2_000, "the scan passed {passed} rows to the probe:\n{analyzed}");
    }
}
